//! The coordination core: job identities, the lifecycle, the store seam and the runner.
//!
//! Invariants every store and the runner keep: percent is 0–100 and never goes backwards;
//! a finished job (`done`, `failed`, `cancelled`) is never changed again and never reads
//! `lost`; `lost` is derived on read from a stale heartbeat, never stored. This module knows
//! nothing of HTTP or of catalogues: job kinds come in through a [`registry::Registry`].

pub mod browse;
pub mod bulk;
pub mod cache;
mod dispatch;
pub mod fence;
mod heartbeat;
mod ids;
pub mod keys;
mod log_limit;
pub mod memory;
pub mod params;
pub mod pipeline;
pub mod progress;
pub mod recovery;
pub mod redis;
pub mod registry;
pub mod run;
pub mod runner;
pub mod stats;
pub mod store;
pub mod timeline;
pub mod watch;

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

pub use ids::{InvalidId, JobId, Kind, TenantId, DOT_SEGMENTS};

/// A job's status as a reader sees it. `Lost` and `Cancelling` are never stored: `lost` is
/// what a running job whose lease (heartbeat) is older than the stale threshold reads as
/// when it will not run again (no attempt left), and `cancelling` a running job that was
/// asked to stop. A stale job with attempts left reads `queued`: recovery re-queues it. A
/// queued job waits at no cost and is never `lost`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = JobStatus)]
pub enum Status {
    Queued,
    Running,
    Cancelling,
    Done,
    Failed,
    Cancelled,
    Lost,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Running => "running",
            Status::Done => "done",
            Status::Failed => "failed",
            Status::Cancelling => "cancelling",
            Status::Cancelled => "cancelled",
            Status::Lost => "lost",
        }
    }

    /// What a stored status reads as. A running job asked to stop reads `cancelling`, live or
    /// not: recovery ends a silent one `cancelled`. A running job whose heartbeat is stale
    /// otherwise will be re-queued by recovery when it has `attempts_left`: it reads `queued`
    /// (so nobody gives up on it); else it will not run again and reads `lost`, which is
    /// final. Both stores derive it here.
    pub fn derive(
        self,
        heartbeat_ms: u64,
        now_ms: u64,
        stale_after_ms: u64,
        cancel_requested: bool,
        attempts_left: bool,
    ) -> Self {
        if self != Status::Running {
            return self;
        }
        if cancel_requested {
            Status::Cancelling
        } else if !is_stale(heartbeat_ms, now_ms, stale_after_ms) {
            self
        } else if attempts_left {
            Status::Queued
        } else {
            Status::Lost
        }
    }

    /// The status as stored; `lost` is not a stored status.
    pub fn parse_stored(raw: &str) -> Option<Self> {
        match raw {
            "queued" => Some(Status::Queued),
            "running" => Some(Status::Running),
            "done" => Some(Status::Done),
            "failed" => Some(Status::Failed),
            "cancelled" => Some(Status::Cancelled),
            _ => None,
        }
    }

    pub fn is_active(self) -> bool {
        matches!(self, Status::Queued | Status::Running | Status::Cancelling)
    }

    pub fn is_finished(self) -> bool {
        matches!(self, Status::Done | Status::Failed | Status::Cancelled)
    }
}

/// A job as any client reads it: the stored record with `lost` and `cancelling` derived and
/// times as RFC 3339 strings (milliseconds on the store's clock).
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = JobSnapshot)]
pub struct Snapshot {
    pub job_id: JobId,
    pub tenant_id: TenantId,
    pub kind: Kind,
    pub status: Status,
    /// Never goes backwards.
    #[schema(minimum = 0, maximum = 100)]
    pub percent: u8,
    /// What the job is doing, for a person.
    pub step: String,
    /// The parameters the job runs with, as its kind read them from the start.
    #[schema(value_type = Object)]
    pub params: Value,
    /// The kind's report once `done` (null before). A failed or cancelled job keeps what it
    /// did (classes and counts only, never messages).
    #[schema(schema_with = kind_report)]
    pub result: Value,
    /// The error class when `failed` (`SourceUnreachable`, `Panic`, `Interrupted`, …).
    pub error: Option<String>,
    #[serde(serialize_with = "ser_time")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: u64,
    #[serde(serialize_with = "ser_opt_time")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub started_at: Option<u64>,
    #[serde(serialize_with = "ser_time")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: u64,
    #[serde(serialize_with = "ser_time")]
    #[schema(value_type = String, format = DateTime)]
    pub heartbeat_at: u64,
    #[serde(serialize_with = "ser_opt_time")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub finished_at: Option<u64>,
    /// When someone asked the job to stop (`POST /catalog/jobs/{job_id}/cancel`).
    #[serde(serialize_with = "ser_opt_time")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub cancel_requested_at: Option<u64>,
    /// Which run this is: 1 for the first claim, then 2, 3, … when a lost run was re-queued;
    /// 0 while it has never run.
    pub attempt: u32,
    /// Runs the job gets before a lost one ends `failed`/`Lost` (`MAX_ATTEMPTS`).
    pub max_attempts: u32,
    /// The process running (or that last ran) the job: `host/pid`.
    pub worker: Option<String>,
    /// When the recovery sweep last put the job back in the queue after its run was lost.
    #[serde(serialize_with = "ser_opt_time")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub recovered_at: Option<u64>,
    /// Who started the job: the token's name, or `anonymous` without tokens (null on older
    /// records).
    pub created_by: Option<String>,
    /// Who asked the job to stop (the first to ask), once someone did.
    pub cancelled_by: Option<String>,
    /// Who last retried this ended job (a single or a bulk retry), else null.
    pub retried_by: Option<String>,
    /// The job that last retried this one, else null.
    pub retried_as: Option<JobId>,
    /// The `x-request-id` of the request that started the job.
    pub request_id: Option<String>,
    /// The ended job this one retries (`POST /catalog/jobs/{job_id}/retry`), else null.
    pub retry_of: Option<JobId>,
    /// Seconds until the job should end at the rate it has progressed since `started_at`;
    /// null before any progress, while queued and once it ended. Derived on read.
    pub eta_seconds: Option<u64>,
    /// The job this queued job waits for: its tenant's ordered job created before it
    /// (`jobs::pipeline`); null once it may run.
    pub waiting_for: Option<JobId>,
    /// The pipeline this job is a step of, else null.
    pub pipeline_id: Option<JobId>,
    /// A pipeline's steps, each as its own job reads (null for other jobs).
    pub steps: Option<Vec<pipeline::StepView>>,
}

/// The name the document gives the union of every kind's report. The kinds are not this
/// module's to know, so a snapshot's `result` only refers to it; whoever assembles the
/// document with the kinds defines it (the document check fails on a reference to nothing).
pub const KIND_REPORT_SCHEMA: &str = "JobReport";

/// The schema of a snapshot's `result`: the kind's report, or null.
fn kind_report() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};
    use utoipa::openapi::Ref;
    OneOfBuilder::new()
        .item(Ref::from_schema_name(KIND_REPORT_SCHEMA))
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .description(Some(
            "The kind's report once `done` (null before). A failed or cancelled job keeps what \
             it did: a sync per source (status, error class, HTTP status, rows read and saved), \
             an enrich its counts and batches saved, a pair the phase it reached \
             (`PairStopped`) — classes and counts only, never messages.",
        ))
        .into()
}

/// The step a running job reads once its worker stopped answering, while it waits for
/// recovery to put it back in the queue (and after, until a worker claims it).
pub const REQUEUED_STEP: &str = "re-queued: its worker stopped answering";

impl Snapshot {
    /// The snapshot as a reader sees it at `now_ms` (the store's clock): its stored status
    /// derived (see [`Status::derive`]), a stale run that recovery will re-queue reading
    /// [`REQUEUED_STEP`], and its `eta_seconds` estimated.
    pub fn read_at(mut self, now_ms: u64, stale_after_ms: u64) -> Self {
        let stored = self.status;
        self.status = stored.derive(
            self.heartbeat_at,
            now_ms,
            stale_after_ms,
            self.cancel_requested_at.is_some(),
            self.attempt < self.max_attempts,
        );
        if stored == Status::Running && self.status == Status::Queued {
            REQUEUED_STEP.clone_into(&mut self.step);
        }
        self.with_eta(now_ms)
    }

    /// The snapshot of a job a new one took over (`superseded_by`: its lock was stale and it
    /// would not run again), as it ended: `failed`, error `Lost` (what its takeover recorded
    /// for its tenant's order and its pipeline), finished when it was taken over (`at_ms`).
    /// It read `lost` for ever: listed by `status=lost` yet counted by no stats.
    pub fn superseded(mut self, at_ms: u64) -> Self {
        if !self.status.is_active() {
            return self;
        }
        self.status = Status::Failed;
        self.error.get_or_insert_with(|| store::LOST.to_owned());
        "failed: Lost".clone_into(&mut self.step);
        self.finished_at = Some(at_ms);
        self.updated_at = self.updated_at.max(at_ms);
        self
    }

    /// The snapshot with its `eta_seconds` estimated at `now_ms` (the store's clock).
    pub fn with_eta(mut self, now_ms: u64) -> Self {
        self.eta_seconds = eta_seconds(&self, now_ms);
        self
    }
}

/// The time left for a running job from its observed rate of progress: `percent` was reached
/// in `updated_at - started_at`, so the rest takes that much per percent again, less the time
/// already passed since that progress was written. None while there is no rate to go by
/// (queued, or no progress yet) and once the job ended. Progress written in the millisecond
/// the job started counts as taking one.
pub fn eta_seconds(s: &Snapshot, now_ms: u64) -> Option<u64> {
    let running = matches!(s.status, Status::Running | Status::Cancelling);
    let percent = u64::from(s.percent);
    let started = s.started_at?;
    let spent = s.updated_at.saturating_sub(started).max(1);
    if !running || percent == 0 || percent >= 100 {
        return None;
    }
    let total_left_ms = spent.saturating_mul(100 - percent) / percent;
    let since_progress = now_ms.saturating_sub(s.updated_at);
    Some(total_left_ms.saturating_sub(since_progress).div_ceil(1000))
}

/// Whether an active job whose last heartbeat was at `heartbeat_ms` reads as lost at `now_ms`.
/// Both times come from the same clock (the store's), so replicas with skewed clocks agree.
pub fn is_stale(heartbeat_ms: u64, now_ms: u64, stale_after_ms: u64) -> bool {
    now_ms.saturating_sub(heartbeat_ms) >= stale_after_ms
}

/// This process as a job's `worker` reads: `host/pid`.
pub fn worker_name() -> String {
    static NAME: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".to_owned());
        format!("{host}/{}", std::process::id())
    });
    NAME.clone()
}

/// The current wall-clock time in milliseconds since the Unix epoch (the embedded store's clock).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Formats milliseconds since the epoch as `2026-11-30T10:00:00.000Z`.
pub fn format_time(ms: u64) -> String {
    match time_text(ms) {
        Some(text) => String::from_utf8_lossy(&text).into_owned(),
        None => format_time_wide(ms),
    }
}

/// The date of `ms` (year, month, day) and its seconds into that day.
fn civil(ms: u64) -> (i64, i64, i64, u64) {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days: days since 1970-01-01 to a proleptic Gregorian date.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, rem)
}

/// `format_time`'s text written digit by digit, with no allocation (every snapshot a poll
/// answers formats five of them: `format!` was 6 % of a poll's CPU); `None` past year 9999.
pub fn time_text(ms: u64) -> Option<[u8; 24]> {
    let (year, month, day, rem) = civil(ms);
    if year > 9999 {
        return None;
    }
    let mut text = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut n: u64| {
        for i in (at..at + width).rev() {
            text[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
    };
    put(0, 4, year as u64);
    put(5, 2, month as u64);
    put(8, 2, day as u64);
    put(11, 2, rem / 3600);
    put(14, 2, rem % 3600 / 60);
    put(17, 2, rem % 60);
    put(20, 3, ms % 1000);
    Some(text)
}

/// `format_time` past year 9999 (never a job's), and the reference its test reads.
fn format_time_wide(ms: u64) -> String {
    let (year, month, day, rem) = civil(ms);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

fn ser_time<S: serde::Serializer>(ms: &u64, s: S) -> Result<S::Ok, S::Error> {
    match time_text(*ms) {
        Some(text) => s.serialize_str(std::str::from_utf8(&text).unwrap_or_default()),
        None => s.serialize_str(&format_time_wide(*ms)),
    }
}

fn ser_opt_time<S: serde::Serializer>(ms: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match ms {
        Some(ms) => ser_time(ms, s),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_format_wrote_them_digit_for_digit() {
        // The epoch, leap days, year ends, 9999's last millisecond, and instants between.
        let mut instants = vec![
            0,
            951_782_400_000,
            1_709_164_799_999,
            1_735_689_599_999,
            253_402_300_799_999,
        ];
        instants.extend((0..5_000u64).map(|i| i * 50_722_031_951));
        for ms in instants {
            assert_eq!(format_time(ms), format_time_wide(ms), "{ms}");
        }
        assert_eq!(format_time(1_764_496_800_000), "2025-11-30T10:00:00.000Z");
        assert_eq!(
            format_time(253_402_300_800_000),
            "10000-01-01T00:00:00.000Z"
        );
    }

    #[test]
    fn times_format_as_rfc3339_with_milliseconds() {
        assert_eq!(format_time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_time(1_796_032_800_123), "2026-11-30T10:00:00.123Z");
        assert_eq!(format_time(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn tenant_ids_accept_only_the_documented_alphabet() {
        for ok in ["a", "Acme_1.eu-west", &"x".repeat(128)] {
            assert!(TenantId::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a b", "a:b", "a/b", "é", &"x".repeat(129), "a*"] {
            assert!(TenantId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn kinds_and_job_ids_parse_strictly() {
        assert!(Kind::parse("sync").is_ok());
        assert!(Kind::parse("Sync").is_err());
        assert!(Kind::parse("").is_err());
        assert!(JobId::parse("not-a-uuid").is_err());
        let id = JobId::new();
        assert_eq!(JobId::parse(&id.to_string()), Ok(id));
    }

    fn running(percent: u8, started_at: u64, updated_at: u64) -> Snapshot {
        let job = store::NewJob {
            id: JobId::new(),
            tenant: TenantId::parse("t").unwrap(),
            kind: Kind::parse("sync").unwrap(),
            params: Value::Null,
            step: String::new(),
            origin: Default::default(),
            idempotency_key: None,
            in_order: false,
            pipeline: None,
        };
        let mut s = job.record(Status::Running, percent, "", started_at, started_at, 1);
        s.updated_at = updated_at;
        s
    }

    #[test]
    fn the_eta_is_the_time_the_rest_takes_at_the_observed_rate() {
        // 25 % in 10 s: the other 75 % take 30 s more.
        assert_eq!(eta_seconds(&running(25, 0, 10_000), 10_000), Some(30));
        // Read 12 s after that progress was written: 18 s are left.
        assert_eq!(eta_seconds(&running(25, 0, 10_000), 22_000), Some(18));
        // Late past the estimate it reads 0, never negative; part seconds round up.
        assert_eq!(eta_seconds(&running(25, 0, 10_000), 99_000), Some(0));
        assert_eq!(eta_seconds(&running(50, 0, 1_500), 1_500), Some(2));
    }

    #[test]
    fn there_is_no_eta_without_progress_or_once_the_job_ended() {
        assert_eq!(eta_seconds(&running(0, 0, 10_000), 10_000), None);
        assert_eq!(eta_seconds(&running(100, 0, 10_000), 10_000), None);
        for status in [
            Status::Queued,
            Status::Done,
            Status::Failed,
            Status::Cancelled,
            Status::Lost,
        ] {
            let mut s = running(40, 0, 10_000);
            s.status = status;
            assert_eq!(eta_seconds(&s, 10_000), None, "{status:?}");
        }
        let mut never_started = running(40, 0, 10_000);
        never_started.started_at = None;
        assert_eq!(eta_seconds(&never_started, 10_000), None);
        // Progress in the very millisecond of the start is a rate too (one ms for it).
        assert_eq!(eta_seconds(&running(50, 5_000, 5_000), 5_000), Some(1));
    }

    #[test]
    fn staleness_is_judged_against_the_threshold() {
        assert!(is_stale(1_000, 1_000, 0));
        assert!(!is_stale(1_000, 1_299, 300));
        assert!(is_stale(1_000, 1_300, 300));
        assert!(
            !is_stale(2_000, 1_000, 300),
            "a heartbeat from the future is fresh"
        );
    }
}
