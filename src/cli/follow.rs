//! Following a job to its end: snapshots come from a source (a poll twice a second; an
//! event stream would be another [`Updates`]) and go to a display — an `indicatif` bar for
//! a person at a terminal, plain lines for scripts and CI logs. Ctrl-C stops following,
//! never the job.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::client::{Client, ClientError, Job};

/// Time between polls. The server's `Retry-After` on a job read says when its estimate
/// expects a change, up to 30 s; a person watching wants to see every step and the end as
/// it happens, and a read costs the service one cheap call, so the poll keeps its pace.
const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// Longest a follow rides out an unreachable service or its 5xx (a restart, a Redis
/// failover) before giving up with exit 4.
const GIVE_UP_AFTER: Duration = Duration::from_secs(60);

/// Longest wait between two tries while the service fails, whatever its `Retry-After`.
const RETRY_AT_MOST: Duration = Duration::from_secs(5);

/// Redraws per second of the bar: smooth enough for the elapsed clock, cheap on a slow tty.
pub const BAR_REFRESH_HZ: u8 = 4;

pub enum Followed {
    Ended(Job),
    /// Ctrl-C: the last snapshot seen; the job goes on.
    Interrupted(Job),
}

/// A source of successive snapshots of one job.
pub trait Updates {
    /// The next snapshot worth showing (it may equal the last one).
    fn next(&mut self) -> impl std::future::Future<Output = Result<Job, ClientError>>;
}

/// Polls `GET /catalog/jobs/{id}` every [`POLL_INTERVAL`]. Once the job has been seen,
/// transient failures are retried for [`GIVE_UP_AFTER`] (after the server's `Retry-After`,
/// at most [`RETRY_AT_MOST`]); before that they end the follow at once (a wrong `--server`
/// should not take a minute to say so).
pub struct Polling<'a> {
    client: &'a Client,
    id: String,
    wait: Option<Duration>,
    seen: bool,
}

impl Updates for Polling<'_> {
    async fn next(&mut self) -> Result<Job, ClientError> {
        let mut failing_since: Option<Instant> = None;
        loop {
            if let Some(wait) = self.wait.take() {
                tokio::time::sleep(wait).await;
            }
            match self.client.job(&self.id).await {
                Ok(job) => {
                    self.seen = true;
                    self.wait = Some(POLL_INTERVAL);
                    return Ok(job);
                }
                Err(e) if self.seen && e.is_transient() => {
                    let since = *failing_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= GIVE_UP_AFTER {
                        return Err(e);
                    }
                    let wait = e.retry_after().unwrap_or(POLL_INTERVAL);
                    self.wait = Some(wait.min(RETRY_AT_MOST));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Where a follow shows each snapshot it gets, and clears up at the end.
pub trait Show {
    fn show(&mut self, job: &Job);
    fn finish(&mut self);
}

/// Follows job `id` until it ends or Ctrl-C, on one bar (or plain lines).
pub async fn follow(client: &Client, id: &str) -> Result<Followed, ClientError> {
    follow_on(client, id, &mut Display::for_stderr()).await
}

/// Follows job `id` until it ends or Ctrl-C, shown on `display`.
pub async fn follow_on(
    client: &Client,
    id: &str,
    display: &mut impl Show,
) -> Result<Followed, ClientError> {
    let mut updates = Polling {
        client,
        id: id.to_owned(),
        wait: None,
        seen: false,
    };
    let mut last: Option<Job> = None;
    loop {
        let next = tokio::select! {
            next = updates.next() => next?,
            _ = tokio::signal::ctrl_c() => {
                display.finish();
                let job = last.unwrap_or_else(|| Job(serde_json::json!({"job_id": id})));
                return Ok(Followed::Interrupted(job));
            }
        };
        display.show(&next);
        if next.has_ended() {
            display.finish();
            return Ok(Followed::Ended(next));
        }
        last = Some(next);
    }
}

/// Where progress goes: a bar when stderr is a terminal (drawn from the first snapshot, so
/// a job watched half-way starts at its percent and its own elapsed time, and the ETA is not
/// skewed by the jump from 0), else one plain line per change.
enum Display {
    Terminal(Option<ProgressBar>),
    Lines { last: Option<String> },
}

impl Display {
    fn for_stderr() -> Self {
        if std::io::stderr().is_terminal() {
            Display::Terminal(None)
        } else {
            Display::Lines { last: None }
        }
    }
}

impl Show for Display {
    fn show(&mut self, job: &Job) {
        match self {
            Display::Terminal(bar) => {
                let bar = bar.get_or_insert_with(|| new_bar(job));
                bar.set_position(job.percent());
                bar.set_message(format!("{} · {}", job.status(), job.step()));
                bar.set_prefix(eta(job));
            }
            Display::Lines { last } => {
                let line = format!(
                    "{} {} {}%  {}",
                    job.kind(),
                    job.status(),
                    job.percent(),
                    job.step()
                );
                if last.as_deref() != Some(line.as_str()) {
                    eprintln!("{} {line}", job.id());
                    *last = Some(line);
                }
            }
        }
    }

    fn finish(&mut self) {
        if let Display::Terminal(Some(bar)) = self {
            bar.finish_and_clear();
        }
    }
}

fn new_bar(job: &Job) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(
        Some(100),
        ProgressDrawTarget::stderr_with_hz(BAR_REFRESH_HZ),
    )
    .with_position(job.percent())
    .with_elapsed(running_for(job));
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {pos:>3}% [{bar:30}] {msg}  elapsed {elapsed} · {prefix}",
        )
        .expect("the bar template is valid")
        .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(1000 / u64::from(BAR_REFRESH_HZ)));
    bar
}

/// The service's estimate of the time left. Not indicatif's own: it knows only the
/// positions this process saw, so it would read "0s" at 0 % and climb with every pause
/// between polls. Before the service knows a rate (queued, no progress yet) there is none.
pub fn eta(job: &Job) -> String {
    match job.eta_seconds() {
        _ if job.has_ended() => String::new(),
        Some(s) => format!("ETA {}", short(s)),
        None => "ETA not known yet".to_owned(),
    }
}

/// `45s`, `3m05s`, `2h10m`: as indicatif writes its elapsed time beside it.
fn short(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
}

/// How long the job has been running (since `started_at`, else `created_at`), on this
/// host's clock against the store's: zero when the clocks disagree the wrong way.
fn running_for(job: &Job) -> Duration {
    let since = ["started_at", "created_at"]
        .iter()
        .find_map(|f| job.0[*f].as_str().and_then(unix_ms));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    since.map_or(Duration::ZERO, |ms| {
        Duration::from_millis(now.saturating_sub(ms).max(0) as u64)
    })
}

/// Unix milliseconds of the service's RFC 3339 UTC times (`2026-11-30T10:00:00.000Z`).
fn unix_ms(text: &str) -> Option<i64> {
    let num = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    if text.len() != 24 || !text.ends_with('Z') {
        return None;
    }
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s, ms) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
    // Days from the civil date (Howard Hinnant's algorithm), so no date crate is needed.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + mi) * 60_000 + s * 1000 + ms)
}

#[cfg(test)]
mod tests {
    use super::{short, unix_ms};

    #[test]
    fn an_eta_is_written_short() {
        for (secs, text) in [(0, "0s"), (59, "59s"), (185, "3m05s"), (7_800, "2h10m")] {
            assert_eq!(short(secs), text);
        }
    }

    #[test]
    fn the_services_times_read_as_unix_milliseconds() {
        assert_eq!(unix_ms("1970-01-01T00:00:00.000Z"), Some(0));
        assert_eq!(unix_ms("2026-11-30T15:38:39.072Z"), Some(1_796_053_119_072));
        assert_eq!(unix_ms("2000-02-29T23:59:59.999Z"), Some(951_868_799_999));
        assert_eq!(unix_ms("not a time"), None);
    }
}
