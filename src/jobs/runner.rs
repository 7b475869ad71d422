//! The runner: admits a job, runs its blocking function, reports its progress and records
//! how it ended — whatever the store is doing meanwhile.
//!
//! Beside every job run three things: a heartbeat task (from creation to the recorded end,
//! so a queued or slow job is never mistaken for a dead one; it also carries cancel requests
//! to the job and writes back a record the store lost), a progress writer that coalesces the
//! callback's ticks (at most one store write per `tick_interval`; the last tick rides on the
//! finish), and a finish that is retried with backoff for `finish_retry`. Store failures on
//! ticks and heartbeats are logged at a bounded rate and never reach the job.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, info_span, warn, Instrument, Span};

use super::registry::{JobFn, JobInput, Registry, CANCELLED};
use super::store::{JobStore, Live, NewJob, Outcome, StoreError, Write};
use super::{JobId, Status};

/// The step a job shows while it waits for a worker.
pub const WAITING_STEP: &str = "waiting for a free worker";
/// The step a job shows when it was admitted straight to a worker.
pub const QUEUED_STEP: &str = "queued";
/// The error class of a job the service stopped before it ended.
pub const INTERRUPTED: &str = "Interrupted";
/// The error class of a job whose function panicked.
pub const PANIC: &str = "Panic";

#[derive(Clone, Debug)]
pub struct RunnerSettings {
    /// How often a queued or running job's heartbeat is written.
    pub heartbeat: Duration,
    /// The shortest gap between two progress writes of one job.
    pub tick_interval: Duration,
    /// How long a job's final state is retried while the store is unreachable.
    pub finish_retry: Duration,
    /// Jobs running at once; the rest wait as `queued`.
    pub max_concurrent: usize,
    /// Jobs waiting for a worker at once; beyond it a new job is refused (`Overloaded`).
    pub max_queued: usize,
}

impl Default for RunnerSettings {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_secs(5),
            tick_interval: Duration::from_millis(100),
            finish_retry: Duration::from_secs(300),
            max_concurrent: 8,
            max_queued: 1000,
        }
    }
}

/// Why the runner will not take a job now. Nothing has been created when this is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the service is shutting down and takes no new jobs")]
    ShuttingDown,
    #[error("too many jobs are waiting for a worker")]
    Overloaded,
}

/// A place for a job, reserved before the job is created so a refusal creates nothing.
pub struct Admission {
    permit: Option<OwnedSemaphorePermit>,
    waiting: Option<WaitingSlot>,
}

impl Admission {
    /// The step the job is created with.
    pub fn initial_step(&self) -> &'static str {
        if self.permit.is_some() {
            QUEUED_STEP
        } else {
            WAITING_STEP
        }
    }
}

struct WaitingSlot(Arc<AtomicUsize>);

impl Drop for WaitingSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How a job ended, for a caller that waits on it (`wait=true`).
#[derive(Clone, Debug)]
pub struct JobEnd {
    pub outcome: Outcome,
}

pub struct JobHandle {
    rx: watch::Receiver<Option<JobEnd>>,
}

impl JobHandle {
    /// Resolves when the job has ended and its end was recorded (or given up on).
    pub async fn finished(mut self) -> Option<JobEnd> {
        self.rx
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|end| end.clone())
    }
}

#[derive(Clone)]
pub struct Runner {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn JobStore>,
    registry: Arc<Registry>,
    settings: RunnerSettings,
    workers: Arc<Semaphore>,
    waiting: Arc<AtomicUsize>,
    tracker: TaskTracker,
    /// Cancelled when shutdown starts: no new jobs.
    closing: CancellationToken,
    /// Cancelled at the grace deadline: jobs still going end as `Interrupted`.
    interrupt: CancellationToken,
    /// Jobs of this process not yet ended (running or waiting).
    active: AtomicUsize,
}

impl Runner {
    pub fn new(
        store: Arc<dyn JobStore>,
        registry: Arc<Registry>,
        settings: RunnerSettings,
    ) -> Self {
        let workers = Arc::new(Semaphore::new(settings.max_concurrent.max(1)));
        Self {
            inner: Arc::new(Inner {
                store,
                registry,
                settings,
                workers,
                waiting: Arc::new(AtomicUsize::new(0)),
                tracker: TaskTracker::new(),
                closing: CancellationToken::new(),
                interrupt: CancellationToken::new(),
                active: AtomicUsize::new(0),
            }),
        }
    }

    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    pub fn store(&self) -> &Arc<dyn JobStore> {
        &self.inner.store
    }

    pub fn is_closing(&self) -> bool {
        self.inner.closing.is_cancelled()
    }

    /// Jobs this process is running or waiting to run.
    pub fn active_jobs(&self) -> usize {
        self.inner.active.load(Ordering::Acquire)
    }

    /// Reserves a worker, or a place in the waiting line, for a job about to be created.
    pub fn admit(&self) -> Result<Admission, Refused> {
        if self.inner.closing.is_cancelled() {
            return Err(Refused::ShuttingDown);
        }
        if let Ok(permit) = self.inner.workers.clone().try_acquire_owned() {
            return Ok(Admission {
                permit: Some(permit),
                waiting: None,
            });
        }
        let before = self.inner.waiting.fetch_add(1, Ordering::AcqRel);
        let slot = WaitingSlot(self.inner.waiting.clone());
        if before >= self.inner.settings.max_queued {
            return Err(Refused::Overloaded);
        }
        Ok(Admission {
            permit: None,
            waiting: Some(slot),
        })
    }

    /// Runs a job the store has just created, in the background. The job goes on whether
    /// or not anyone awaits the handle.
    pub fn spawn(&self, job: NewJob, created_at: u64, admission: Admission) -> JobHandle {
        let (done_tx, done_rx) = watch::channel(None);
        let span = info_span!("job", job_id = %job.id, tenant_id = %job.tenant, kind = %job.kind);
        self.inner.active.fetch_add(1, Ordering::AcqRel);
        let inner = self.inner.clone();
        self.inner.tracker.spawn(
            async move {
                let end = inner.clone().run(job, created_at, admission).await;
                inner.active.fetch_sub(1, Ordering::AcqRel);
                done_tx.send_replace(Some(end));
            }
            .instrument(span),
        );
        JobHandle { rx: done_rx }
    }

    /// Graceful shutdown: refuse new jobs at once, let running ones finish for `grace`, then
    /// end the rest as `Interrupted` (releasing their locks) and wait for those writes.
    pub async fn shutdown(&self, grace: Duration) {
        self.inner.closing.cancel();
        self.inner.tracker.close();
        if tokio::time::timeout(grace, self.inner.tracker.wait())
            .await
            .is_err()
        {
            warn!(
                jobs = self.active_jobs(),
                "grace period over: interrupting the jobs still running"
            );
            self.inner.interrupt.cancel();
            // The interrupted jobs' final writes are bounded by their own short retry.
            let _ = tokio::time::timeout(Duration::from_secs(10), self.inner.tracker.wait()).await;
        }
    }
}

impl Inner {
    async fn run(self: Arc<Self>, job: NewJob, created_at: u64, admission: Admission) -> JobEnd {
        let stop_heartbeat = CancellationToken::new();
        let (reporter, ticks) = progress_channel();
        let started = Arc::new(AtomicBool::new(false));
        let cancel = CancellationToken::new();
        let heartbeat = tokio::spawn(
            heartbeat_loop(
                self.clone(),
                job.clone(),
                created_at,
                ticks.rx.clone(),
                started.clone(),
                cancel.clone(),
                stop_heartbeat.clone(),
            )
            .in_current_span(),
        );
        let (outcome, percent) = self
            .execute(&job, admission, reporter, ticks, &started, cancel)
            .await;
        self.record(&job, created_at, &outcome, percent).await;
        crate::metrics::job_finished(job.kind.as_str(), &outcome);
        stop_heartbeat.cancel();
        let _ = heartbeat.await;
        JobEnd { outcome }
    }

    /// Waits for a worker, runs the function, and turns whatever happened into an outcome,
    /// with the last percent the job reported.
    async fn execute(
        &self,
        job: &NewJob,
        admission: Admission,
        reporter: Reporter,
        ticks: Ticks,
        started: &AtomicBool,
        cancel: CancellationToken,
    ) -> (Outcome, u8) {
        let queued = crate::metrics::Queued::enter(job.kind.as_str());
        let Some(kind) = self.registry.get(&job.kind) else {
            // The API checks the kind before creating a job; a job created by another replica
            // with other kinds cannot reach this runner.
            error!("no function is registered for this kind");
            return (Outcome::Failed("UnknownKind".into()), 0);
        };
        let _permit = match admission.permit {
            Some(permit) => permit,
            None => {
                let acquired = tokio::select! {
                    permit = self.workers.clone().acquire_owned() => permit.ok(),
                    () = self.interrupt.cancelled() => None,
                    () = cancel.cancelled() => {
                        info!("cancelled while waiting for a worker");
                        return (Outcome::Cancelled, 0);
                    }
                };
                drop(admission.waiting);
                match acquired {
                    Some(permit) => permit,
                    None => return (Outcome::Failed(INTERRUPTED.into()), 0),
                }
            }
        };
        // "running" reaches the store with the first progress write, one interval after the
        // function starts; a job shorter than that goes from queued straight to its end.
        started.store(true, Ordering::Release);
        let _running = queued.start();
        reporter.report(0, "starting");
        let latest = ticks.rx.clone();
        let writer = tokio::spawn(
            progress_writer(
                self.store.clone(),
                job.id,
                ticks,
                self.settings.tick_interval,
            )
            .in_current_span(),
        );
        let input = JobInput {
            job_id: job.id,
            tenant: job.tenant.clone(),
            kind: job.kind.clone(),
            params: job.params.clone(),
            cancel,
        };
        let blocking = tokio::task::spawn_blocking(run_blocking(
            kind.run.clone(),
            input,
            reporter,
            Span::current(),
        ));
        let joined = tokio::select! {
            joined = blocking => Some(joined),
            () = self.interrupt.cancelled() => None,
        };
        // The last tick travels with the finish. A progress write in flight is either already
        // on its way (and lands before the finish) or dropped.
        writer.abort();
        let _ = writer.await;
        let percent = latest.borrow().percent;
        let outcome = match joined {
            None => {
                // The blocking thread cannot be stopped; the process is about to exit.
                warn!("interrupted at the shutdown deadline");
                return (Outcome::Failed(INTERRUPTED.into()), percent);
            }
            Some(Ok(Ok(report))) => Outcome::Done(report),
            Some(Ok(Err(e))) if e.class() == CANCELLED => {
                info!("job stopped on request");
                Outcome::Cancelled
            }
            Some(Ok(Err(e))) => {
                // The message may carry customer data: it goes to the log, the class to the record.
                warn!(error_class = e.class(), error = %e, "job failed");
                Outcome::Failed(e.class().to_owned())
            }
            Some(Err(join)) => {
                let message = if join.is_panic() {
                    panic_message(join.into_panic())
                } else {
                    "the blocking task was cancelled".to_owned()
                };
                error!(panic = %message, "job function panicked");
                Outcome::Failed(PANIC.into())
            }
        };
        (outcome, percent)
    }

    /// Writes the outcome, retrying while the store is unreachable, for `finish_retry` (a few
    /// seconds once the service is being interrupted). Never gives up silently.
    async fn record(&self, job: &NewJob, created_at: u64, outcome: &Outcome, percent: u8) {
        let started = Instant::now();
        let mut delay = Duration::from_millis(50);
        let mut limiter = LogLimiter::default();
        loop {
            match self.store.finish(job, created_at, outcome, percent).await {
                Ok(Write::Applied) | Ok(Write::CancelRequested) => {
                    info!(status = outcome.status().as_str(), "job ended");
                    return;
                }
                Ok(Write::Ignored) => {
                    info!("job's end was already recorded");
                    return;
                }
                Ok(Write::Fenced) | Ok(Write::Missing) => {
                    warn!(
                        outcome = ?outcome,
                        "fenced off: a newer job of this tenant and kind took over; this job's end is not recorded"
                    );
                    return;
                }
                Err(e) => {
                    let window = if self.interrupt.is_cancelled() {
                        Duration::from_secs(3)
                    } else {
                        self.settings.finish_retry
                    };
                    if started.elapsed() >= window {
                        error!(
                            error = %e,
                            outcome = %serde_json::to_string(&outcome_json(outcome)).unwrap_or_default(),
                            "the job's end could not be recorded: the store stayed unreachable"
                        );
                        return;
                    }
                    if let Some(suppressed) = limiter.ready() {
                        warn!(error = %e, suppressed, "the job's end is waiting for the store");
                    }
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = self.interrupt.cancelled(), if !self.interrupt.is_cancelled() => {}
                    }
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
            }
        }
    }
}

fn outcome_json(outcome: &Outcome) -> serde_json::Value {
    match outcome {
        Outcome::Done(report) => serde_json::json!({"status": "done", "result": report}),
        Outcome::Failed(class) => serde_json::json!({"status": "failed", "error": class}),
        Outcome::Cancelled => serde_json::json!({"status": "cancelled"}),
    }
}

/// The body of the blocking task: the job function with a never-blocking, guarded reporter.
fn run_blocking(
    run: JobFn,
    input: JobInput,
    reporter: Reporter,
    span: Span,
) -> impl FnOnce() -> Result<serde_json::Value, super::registry::JobError> {
    move || {
        let _entered = span.enter();
        let report = |percent: u8, step: &str| reporter.report(percent, step);
        let progress = guarded(report);
        run(&input, Some(&progress))
    }
}

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

/// Writes the latest tick at most once per `interval`, the first one interval after the job
/// started: bursts coalesce, and a job shorter than an interval costs no progress write at
/// all. The runner ends this task when the job ends and hands the last tick to the finish.
async fn progress_writer(
    store: Arc<dyn JobStore>,
    id: JobId,
    mut ticks: Ticks,
    interval: Duration,
) {
    let mut limiter = LogLimiter::default();
    loop {
        tokio::time::sleep(interval).await;
        let Some(tick) = ticks.next().await else {
            return;
        };
        match store.tick(&id, tick.percent, &tick.step).await {
            Ok(Write::Fenced) => {
                warn!("fenced off: a newer job of this tenant and kind took over; progress is no longer written");
                return;
            }
            Ok(_) => {}
            Err(e) => {
                log_store_failure(&mut limiter, &e, "a progress write failed and was dropped")
            }
        }
    }
}

/// Heartbeats a job from its creation to its recorded end. If the store lost the job's
/// record (it came back empty), the record is written back with the job's last progress.
async fn heartbeat_loop(
    inner: Arc<Inner>,
    job: NewJob,
    created_at: u64,
    latest: watch::Receiver<Tick>,
    started: Arc<AtomicBool>,
    cancel: CancellationToken,
    stop: CancellationToken,
) {
    let mut limiter = LogLimiter::default();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(inner.settings.heartbeat) => {}
        }
        match inner.store.heartbeat(&job.id, &job.tenant, &job.kind).await {
            Ok(Write::Applied) | Ok(Write::Ignored) => {}
            Ok(Write::CancelRequested) => {
                if !cancel.is_cancelled() {
                    info!("asked to stop: the job is told");
                    cancel.cancel();
                }
            }
            Ok(Write::Missing) => {
                let live = {
                    let tick = latest.borrow();
                    Live {
                        status: if started.load(Ordering::Acquire) {
                            Status::Running
                        } else {
                            Status::Queued
                        },
                        percent: tick.percent,
                        step: if tick.step.is_empty() {
                            job.step.clone()
                        } else {
                            tick.step.clone()
                        },
                    }
                };
                match inner.store.restore(&job, created_at, &live).await {
                    Ok(Write::Applied) => {
                        warn!("the store had lost this job's record; it was written back")
                    }
                    Ok(Write::Fenced) => {
                        warn!("fenced off: the store lost this job's record and a newer job holds the lock; heartbeats stop");
                        return;
                    }
                    Ok(_) => {}
                    Err(e) => log_store_failure(
                        &mut limiter,
                        &e,
                        "the job's lost record could not be written back yet",
                    ),
                }
            }
            Ok(Write::Fenced) => {
                warn!("fenced off: a newer job of this tenant and kind took over; heartbeats stop");
                return;
            }
            Err(e) => log_store_failure(&mut limiter, &e, "a heartbeat failed and was dropped"),
        }
    }
}

fn log_store_failure(limiter: &mut LogLimiter, e: &StoreError, what: &str) {
    if let Some(suppressed) = limiter.ready() {
        warn!(error = %e, suppressed, "{what}");
    }
}

/// Lets a repeated failure be logged at most once per window, counting what it held back.
#[derive(Default)]
struct LogLimiter {
    last: Option<Instant>,
    suppressed: u64,
}

impl LogLimiter {
    const WINDOW: Duration = Duration::from_secs(10);

    /// `Some(n)` when a line may be logged now, `n` being how many were held back since.
    fn ready(&mut self) -> Option<u64> {
        match self.last {
            Some(at) if at.elapsed() < Self::WINDOW => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(Instant::now());
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
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

    #[test]
    fn a_panicking_callback_is_contained_by_the_guard() {
        let cb = guarded(|_, _| panic!("reporting broke"));
        cb(10, "still alive");
    }

    #[test]
    fn the_log_limiter_holds_back_repeats_within_its_window() {
        let mut l = LogLimiter::default();
        assert_eq!(l.ready(), Some(0));
        assert_eq!(l.ready(), None);
        assert_eq!(l.ready(), None);
        assert_eq!(l.suppressed, 2);
    }
}
