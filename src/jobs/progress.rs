//! Progress reporting: the job's never-blocking [`Reporter`], the writer's [`Ticks`], and the
//! writer that sends the latest tick to the store at most once per interval.
//!
//! The callback a job function calls can never block, allocate once warm, go backwards or
//! fail the job (a panic inside it is dropped by [`guarded`]); bursts coalesce into one
//! write. Knows nothing of how a run starts or ends.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::log_limit::LogLimiter;
use super::store::{JobStore, RunId, Tick as TickAnswer};

/// The latest progress of a job, as the callback leaves it for the writer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tick {
    pub percent: u8,
    pub step: String,
}

/// A progress channel: the job's [`Reporter`] and the writer's [`Ticks`].
pub fn progress_channel() -> (Reporter, Ticks) {
    let (tx, rx) = watch::channel(Tick::default());
    let unread = Arc::new(AtomicBool::new(false));
    (
        Reporter {
            tx,
            last: AtomicU8::new(0),
            unread: unread.clone(),
        },
        Ticks { rx, unread },
    )
}

/// The job's side of the progress channel. `report` clamps percent to 0..=100 and to never
/// below the last value, and replaces the channel's value in place: it never waits on the
/// store, never allocates once the step buffer is large enough, and never fails. Only the
/// first tick since the writer last read wakes the writer; later ones just overwrite.
pub struct Reporter {
    tx: watch::Sender<Tick>,
    last: AtomicU8,
    unread: Arc<AtomicBool>,
}

impl Reporter {
    pub fn report(&self, percent: u8, step: &str) {
        let percent = percent.min(100);
        let percent = self.last.fetch_max(percent, Ordering::AcqRel).max(percent);
        self.tx.send_if_modified(|tick| {
            // Two threads may race here; the store never lowers percent, and neither do we.
            tick.percent = tick.percent.max(percent);
            tick.step.clear();
            tick.step.push_str(step);
            !self.unread.swap(true, Ordering::AcqRel)
        });
    }
}

/// The writer's side of the progress channel.
pub struct Ticks {
    rx: watch::Receiver<Tick>,
    unread: Arc<AtomicBool>,
}

impl Ticks {
    /// The latest tick once there is one not yet read; `None` when the job is over and
    /// everything it reported has been read.
    pub async fn next(&mut self) -> Option<Tick> {
        self.rx.changed().await.ok()?;
        let latest = self.rx.borrow_and_update();
        // Cleared under the channel's read lock: a report made after this clone sees the flag
        // down and wakes the writer again, one made before it is in the clone.
        self.unread.store(false, Ordering::Release);
        Some(latest.clone())
    }

    /// A view of the latest tick that does not consume it (for the finish and the heartbeat).
    pub fn latest(&self) -> watch::Receiver<Tick> {
        self.rx.clone()
    }
}

/// Wraps a progress callback so that a panic inside it is caught and dropped: reporting is
/// best-effort and must never kill the job it reports on.
pub fn guarded<F: Fn(u8, &str) + Sync>(f: F) -> impl Fn(u8, &str) + Sync {
    move |percent, step| {
        if catch_unwind(AssertUnwindSafe(|| f(percent, step))).is_err() {
            debug!("a progress callback panicked; the tick was dropped");
        }
    }
}

/// Writes the latest tick at most once per `interval`: the first at once (the run starts
/// the writer only once its job outlived its first interval, so a job shorter than that costs
/// no progress write and no writer at all), then each next one an interval after the last.
/// Bursts coalesce. The run ends this task when the job ends and hands the last tick to the
/// finish. A refused write (`Fenced`) trips the run's token: it stops at its next safe point.
pub(super) async fn progress_writer(
    store: Arc<dyn JobStore>,
    run: RunId,
    mut ticks: Ticks,
    interval: Duration,
    cancel: CancellationToken,
) {
    let mut limiter = LogLimiter::default();
    while let Some(tick) = ticks.next().await {
        match store.tick(&run, tick.percent, &tick.step).await {
            Ok(TickAnswer::Fenced) => {
                warn!(
                    "fenced off: this run no longer holds the job; it stops at its next safe point"
                );
                cancel.cancel();
                return;
            }
            Ok(_) => {}
            Err(e) => limiter.warn(&e, "a progress write failed and was dropped"),
        }
        tokio::time::sleep(interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reporter_clamps_to_100_and_never_goes_backwards() {
        let (reporter, ticks) = progress_channel();
        reporter.report(40, "a");
        reporter.report(20, "b");
        assert_eq!(ticks.rx.borrow().percent, 40);
        assert_eq!(ticks.rx.borrow().step, "b");
        reporter.report(250, "c");
        assert_eq!(ticks.rx.borrow().percent, 100);
    }

    #[tokio::test]
    async fn the_writer_reads_the_latest_tick_and_the_last_one_after_the_job_ends() {
        let (reporter, mut ticks) = progress_channel();
        reporter.report(10, "one");
        reporter.report(20, "two");
        assert_eq!(ticks.next().await.map(|t| t.percent), Some(20));
        reporter.report(30, "three");
        reporter.report(40, "four");
        drop(reporter);
        let last = ticks
            .next()
            .await
            .expect("the last tick is read after the job ended");
        assert_eq!((last.percent, last.step.as_str()), (40, "four"));
        assert_eq!(ticks.next().await, None);
    }

    #[tokio::test]
    async fn the_writer_writes_the_latest_tick_at_once_and_the_next_not_before_an_interval() {
        use crate::jobs::memory::MemoryStore;
        use crate::jobs::store::{NewJob, StoreSettings};
        use crate::jobs::{JobId, Kind, TenantId};

        let store: Arc<dyn JobStore> = Arc::new(MemoryStore::new(StoreSettings::default()));
        let kind = Kind::parse("sync").unwrap();
        let job = NewJob {
            id: JobId::new(),
            tenant: TenantId::parse("t").unwrap(),
            kind: kind.clone(),
            params: serde_json::Value::Null,
            step: "queued".to_owned(),
            origin: Default::default(),
            idempotency_key: None,
            in_order: false,
            pipeline: None,
        };
        store.create(job.clone()).await.unwrap();
        let claim = store.claim("w", &[kind]).await.unwrap().expect("claimed");
        let percent = || async { store.get(&job.id).await.unwrap().unwrap().percent };
        let (reporter, ticks) = progress_channel();
        reporter.report(30, "thirty");
        // An interval this test never waits out: the first write may not wait for it (the
        // run starts the writer only once its job outlived an interval), the second must.
        let interval = Duration::from_secs(3600);
        let writer = tokio::spawn(progress_writer(
            store.clone(),
            claim.run,
            ticks,
            interval,
            CancellationToken::new(),
        ));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while percent().await != 30 {
            assert!(
                std::time::Instant::now() < deadline,
                "the first tick was not written"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        reporter.report(60, "sixty");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(percent().await, 30, "a second write within the interval");
        writer.abort();
    }

    #[test]
    fn a_panicking_callback_is_contained_by_the_guard() {
        let cb = guarded(|_, _| panic!("reporting broke"));
        cb(10, "still alive");
    }
}
