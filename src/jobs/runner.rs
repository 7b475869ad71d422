//! The runner: one per process. Its dispatcher (`queue.rs`) claims jobs from the store's
//! shared ready queue whenever a worker is free; each claimed run executes its blocking
//! function, reports progress and records how it ended — whatever the store is doing.
//!
//! Beside the runs go three process-wide tasks: one heartbeat that renews every running
//! job's lease in one store call per interval (and learns of cancel requests and fencing
//! from its answer); the recovery sweep (`recovery.rs`); and an event listener that trips a
//! run's token the moment its cancel is requested anywhere, wakes the dispatcher when work
//! arrives and wakes `wait=true` requests when their job ended wherever it ran. A queued
//! job costs nothing while it waits. A run whose write is refused (`Fenced`: it was
//! recovered, taken over or given back) stops at its next safe point and records nothing.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, info_span, warn, Instrument, Span};

use super::fence::StoreFence;
use super::registry::{JobError, JobFn, JobInput, Registry};
use super::store::{
    Claim, Created, Event, Finish, JobStore, Live, NewJob, Outcome, Release, Renewal, Restore,
    RunId, StoreError, Tick as TickAnswer,
};
use super::{worker_name, JobId, Kind, Snapshot, Status};

/// The step a job shows while it waits in the queue.
pub const QUEUED_STEP: &str = "queued";
/// The error class of a job whose function panicked.
pub const PANIC: &str = "Panic";
/// How often a `wait=true` request re-reads its job even without an event (a missed
/// message after a reconnect costs at most this much).
const WAIT_RECHECK: Duration = Duration::from_secs(1);
/// How long a run given back at shutdown gets to be written back to the queue.
const RELEASE_WINDOW: Duration = Duration::from_secs(3);
/// How long shutdown waits, once runs were given back, for those that stop at their next
/// safe point to wind down (their writes are fenced either way).
const GIVEN_BACK_WAIT: Duration = Duration::from_secs(1);
/// How long a cancel event for a job this process does not (yet) run is remembered: it may
/// have been claimed here a moment before, and not be registered yet. Past this, the next
/// heartbeat's answer carries the request anyway.
const EARLY_CANCEL_MEMORY: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub struct RunnerSettings {
    /// How often this process renews its runs' leases and sweeps for lost ones.
    pub heartbeat: Duration,
    /// The shortest gap between two progress writes of one job.
    pub tick_interval: Duration,
    /// How long a job's final state is retried while the store is unreachable.
    pub finish_retry: Duration,
    /// Jobs this process runs at once; it claims another only when one ends.
    pub max_concurrent: usize,
}

impl Default for RunnerSettings {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_secs(5),
            tick_interval: Duration::from_millis(100),
            finish_retry: Duration::from_secs(300),
            max_concurrent: 8,
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

/// What the process knows of one of its runs.
pub(super) struct Running {
    pub job: NewJob,
    pub run: RunId,
    pub created_at: u64,
    pub attempt: u32,
    /// Tripped on a cancel request, when fenced off, and at the shutdown deadline.
    pub cancel: CancellationToken,
    /// Set when the store refused this run: it records nothing more.
    pub fenced: Arc<AtomicBool>,
    pub latest: watch::Receiver<Tick>,
}

impl Running {
    fn fence(&self, why: &str) {
        if !self.fenced.swap(true, Ordering::AcqRel) {
            warn!(job_id = %self.job.id, "fenced off: {why}; the run stops at its next safe point");
        }
        self.cancel.cancel();
    }
}

#[derive(Clone)]
pub struct Runner {
    inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub store: Arc<dyn JobStore>,
    registry: Arc<Registry>,
    pub settings: RunnerSettings,
    pub workers: Arc<Semaphore>,
    tracker: TaskTracker,
    /// Cancelled when shutdown starts: no new jobs, no more claims.
    pub closing: CancellationToken,
    /// Cancelled at the grace deadline: runs still going were given back.
    interrupt: CancellationToken,
    /// Cancelled when shutdown is over: the process-wide tasks end.
    stopped: CancellationToken,
    running: Mutex<HashMap<JobId, Running>>,
    /// Cancel events for jobs not running here when they came (see `EARLY_CANCEL_MEMORY`).
    early_cancels: Mutex<HashMap<JobId, Instant>>,
    waiters: Mutex<HashMap<JobId, Arc<Notify>>>,
    /// Signalled when the queue may have work (an event, a resync).
    pub wake: Notify,
    pub worker: String,
    /// The kinds this process runs: it claims no other.
    pub kinds: Vec<Kind>,
}

impl Runner {
    /// Builds the runner and starts its dispatcher, heartbeat, recovery sweep and event
    /// listener (call inside the runtime).
    pub fn new(
        store: Arc<dyn JobStore>,
        registry: Arc<Registry>,
        settings: RunnerSettings,
    ) -> Self {
        let workers = Arc::new(Semaphore::new(settings.max_concurrent.max(1)));
        let inner = Arc::new(Inner {
            store,
            settings,
            workers,
            tracker: TaskTracker::new(),
            closing: CancellationToken::new(),
            interrupt: CancellationToken::new(),
            stopped: CancellationToken::new(),
            running: Mutex::new(HashMap::new()),
            early_cancels: Mutex::new(HashMap::new()),
            waiters: Mutex::new(HashMap::new()),
            wake: Notify::new(),
            worker: worker_name(),
            kinds: registry.kinds().cloned().collect(),
            registry,
        });
        let events = inner.store.subscribe();
        tokio::spawn(inner.clone().listen(events));
        tokio::spawn(super::queue::dispatch(inner.clone()));
        tokio::spawn(inner.clone().heartbeat_loop());
        tokio::spawn(super::recovery::sweep(
            inner.store.clone(),
            inner.settings.heartbeat,
            inner.stopped.clone(),
        ));
        Self { inner }
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

    /// Resolves when shutdown starts: open streams end then, so the server's drain never
    /// waits on them.
    pub async fn closing(&self) {
        self.inner.closing.cancelled().await
    }

    /// Jobs this process is running.
    pub fn active_jobs(&self) -> usize {
        self.inner.lock_running().len()
    }

    /// Refuses a new job while the process shuts down. (The queue's cap is the store's.)
    pub fn admit(&self) -> Result<(), Refused> {
        if self.inner.closing.is_cancelled() {
            return Err(Refused::ShuttingDown);
        }
        Ok(())
    }

    /// Creates a job. With a worker free here, the store may hand this process the job in
    /// the same step (when nothing waits ahead of it in the shared queue), and it starts at
    /// once — no trip through the queue and back; otherwise it waits in the queue for any
    /// replica's dispatcher.
    pub async fn create(&self, job: NewJob) -> Result<Created, StoreError> {
        let inner = &self.inner;
        let permit = match inner.workers.clone().try_acquire_owned() {
            Ok(permit) if !inner.closing.is_cancelled() => permit,
            _ => return inner.store.create(job).await,
        };
        match inner
            .store
            .create_claimed(job.clone(), &inner.worker)
            .await?
        {
            Created::Created(claimed) if claimed.status == Status::Running => {
                let created_at = claimed.created_at;
                // The answer shows the job as it was accepted, as the contract's 202 does:
                // queued, its function not started (the first poll may read it running).
                let accepted = job.record(
                    Status::Queued,
                    0,
                    &job.step,
                    created_at,
                    created_at,
                    claimed.max_attempts,
                );
                inner.spawn_run(job.first_claim(created_at), permit);
                Ok(Created::Created(Box::new(accepted)))
            }
            other => Ok(other),
        }
    }

    /// Resolves with the job once it has ended, wherever it ran: woken by the job's end
    /// event (or this process's own finish), re-reading the store at least every second.
    pub async fn wait_end(&self, id: JobId) -> Result<Snapshot, StoreError> {
        let notify = Arc::new(Notify::new());
        let _registered = Waiter::register(&self.inner, id, notify.clone());
        loop {
            if let Some(s) = self.inner.store.get(&id).await? {
                if s.status.is_finished() {
                    return Ok(s);
                }
            }
            tokio::select! {
                () = notify.notified() => {}
                () = tokio::time::sleep(WAIT_RECHECK) => {}
            }
        }
    }

    /// Graceful shutdown: stop claiming and refuse new jobs at once, let running ones finish
    /// for `grace`, then give the rest back to the queue (their attempt not counted) where
    /// another replica, or this one after its restart, resumes them.
    pub async fn shutdown(&self, grace: Duration) {
        let inner = &self.inner;
        inner.closing.cancel();
        inner.tracker.close();
        if tokio::time::timeout(grace, inner.tracker.wait())
            .await
            .is_err()
        {
            let runs: Vec<RunId> = inner.lock_running().values().map(|r| r.run).collect();
            warn!(
                jobs = runs.len(),
                "grace period over: giving the jobs still running back to the queue"
            );
            for run in &runs {
                if let Some(r) = inner.lock_running().get(&run.id) {
                    r.fenced.store(true, Ordering::Release);
                }
                inner.give_back(run).await;
            }
            inner.interrupt.cancel();
            for r in inner.lock_running().values() {
                r.cancel.cancel();
            }
            // The runs' blocking threads cannot be stopped; their results are fenced anyway.
            let _ = tokio::time::timeout(GIVEN_BACK_WAIT, inner.tracker.wait()).await;
        }
        inner.stopped.cancel();
    }
}

/// A `wait=true` request's place in the waiters map, removed when the request ends.
struct Waiter<'a> {
    inner: &'a Inner,
    id: JobId,
}

impl<'a> Waiter<'a> {
    fn register(inner: &'a Inner, id: JobId, notify: Arc<Notify>) -> Self {
        inner.lock_waiters().insert(id, notify);
        Self { inner, id }
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.inner.lock_waiters().remove(&self.id);
    }
}

impl Inner {
    fn lock_running(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, Running>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_waiters(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, Arc<Notify>>> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a cancel event for this job came before its run was registered here.
    fn take_early_cancel(&self, id: &JobId) -> bool {
        let mut early = self.early_cancels.lock().unwrap_or_else(|p| p.into_inner());
        early.retain(|_, at| at.elapsed() < EARLY_CANCEL_MEMORY);
        early.remove(id).is_some()
    }

    fn on_cancel_event(&self, id: JobId) {
        let running = self.lock_running();
        if let Some(r) = running.get(&id) {
            info!(job_id = %id, "asked to stop: the job is told");
            r.cancel.cancel();
            return;
        }
        let mut early = self.early_cancels.lock().unwrap_or_else(|p| p.into_inner());
        early.retain(|_, at| at.elapsed() < EARLY_CANCEL_MEMORY);
        early.insert(id, Instant::now());
    }

    fn ended(&self, id: &JobId) {
        if let Some(n) = self.lock_waiters().get(id) {
            n.notify_one();
        }
    }

    /// Hands a claimed job to a worker task.
    pub(super) fn spawn_run(self: &Arc<Self>, claim: Claim, permit: OwnedSemaphorePermit) {
        let job = &claim.job;
        let span = info_span!("job", job_id = %job.id, tenant_id = %job.tenant, kind = %job.kind, attempt = claim.attempt);
        let inner = self.clone();
        self.tracker
            .spawn(async move { inner.run(claim, permit).await }.instrument(span));
    }

    async fn run(self: Arc<Self>, claim: Claim, permit: OwnedSemaphorePermit) {
        let Claim {
            job,
            created_at,
            run,
            attempt,
        } = claim;
        let (reporter, ticks) = progress_channel();
        let cancel = CancellationToken::new();
        let fenced = Arc::new(AtomicBool::new(false));
        {
            // Under the running lock, like `on_cancel_event`: a cancel event is either seen
            // there or left for this check, never lost in between.
            let mut running = self.lock_running();
            if self.take_early_cancel(&job.id) {
                cancel.cancel();
            }
            running.insert(
                job.id,
                Running {
                    job: job.clone(),
                    run,
                    created_at,
                    attempt,
                    cancel: cancel.clone(),
                    fenced: fenced.clone(),
                    latest: ticks.rx.clone(),
                },
            );
        }
        // Waited from its creation (the store's clock) to this claim (this host's clock).
        let waited = Duration::from_millis(super::now_ms().saturating_sub(created_at));
        let running = crate::metrics::job_started(job.kind.as_str(), waited);
        let result = self.execute(&job, run, reporter, ticks, cancel).await;
        drop(running);
        match result {
            Some((outcome, percent)) if !fenced.load(Ordering::Acquire) => {
                self.record(&job, &run, created_at, &outcome, percent).await;
                crate::metrics::job_finished(job.kind.as_str(), &outcome);
            }
            _ => info!("this run's end is not recorded: it no longer holds the job"),
        }
        self.lock_running().remove(&job.id);
        drop(permit);
        self.ended(&job.id);
    }

    /// Runs the function and turns whatever happened into an outcome with the last percent
    /// the job reported; `None` when the run was given back at the shutdown deadline or its
    /// final write was refused (fenced off): either way its end is not recorded.
    async fn execute(
        &self,
        job: &NewJob,
        run: RunId,
        reporter: Reporter,
        ticks: Ticks,
        cancel: CancellationToken,
    ) -> Option<(Outcome, u8)> {
        let Some(kind) = self.registry.get(&job.kind) else {
            // A job created by a replica with other kinds reached this one.
            error!("no function is registered for this kind");
            return Some((Outcome::Failed("UnknownKind".into(), None), 0));
        };
        reporter.report(0, "starting");
        let latest = ticks.rx.clone();
        let writer = tokio::spawn(
            progress_writer(
                self.store.clone(),
                run,
                ticks,
                self.settings.tick_interval,
                cancel.clone(),
            )
            .in_current_span(),
        );
        let input = JobInput {
            job_id: job.id,
            tenant: job.tenant.clone(),
            kind: job.kind.clone(),
            params: job.params.clone(),
            cancel,
            run,
            fence: Arc::new(StoreFence::new(self.store.clone(), run)),
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
        // The last tick travels with the finish.
        writer.abort();
        let _ = writer.await;
        let percent = latest.borrow().percent;
        let outcome = match joined? {
            Ok(Ok(report)) => Outcome::Done(report),
            Ok(Err(JobError::Fenced)) => {
                warn!(
                    "fenced off: the store refused this run's final write; its end is not recorded"
                );
                return None;
            }
            Ok(Err(JobError::Cancelled { report })) => {
                info!("job stopped on request");
                Outcome::Cancelled(report.unwrap_or(serde_json::Value::Null))
            }
            Ok(Err(e)) => {
                // The message may carry customer data: it goes to the log, the class to the record.
                warn!(error_class = e.class(), error = %e, "job failed");
                Outcome::Failed(e.class().to_owned(), e.report().cloned())
            }
            Err(join) => {
                let message = if join.is_panic() {
                    panic_message(join.into_panic())
                } else {
                    "the blocking task was cancelled".to_owned()
                };
                error!(panic = %message, "job function panicked");
                Outcome::Failed(PANIC.into(), None)
            }
        };
        Some((outcome, percent))
    }

    /// Writes the outcome, retrying while the store is unreachable, for `finish_retry` (a few
    /// seconds once the service is shutting down). Never gives up silently.
    async fn record(
        &self,
        job: &NewJob,
        run: &RunId,
        created_at: u64,
        outcome: &Outcome,
        percent: u8,
    ) {
        let started = Instant::now();
        let mut delay = Duration::from_millis(50);
        let mut limiter = LogLimiter::default();
        loop {
            match self
                .store
                .finish(job, run, created_at, outcome, percent)
                .await
            {
                Ok(Finish::Applied) => {
                    info!(status = outcome.status().as_str(), "job ended");
                    return;
                }
                Ok(Finish::AlreadyEnded) => {
                    info!("job's end was already recorded");
                    return;
                }
                Ok(Finish::Fenced) => {
                    warn!(outcome = ?outcome, "fenced off: another run or job holds this job; this run's end is not recorded");
                    return;
                }
                Err(e) => {
                    let window = if self.closing.is_cancelled() {
                        RELEASE_WINDOW
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
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    /// Puts a run back in the queue at shutdown, retrying briefly while the store is down
    /// (if it stays down, the lease expires and recovery re-queues the job).
    async fn give_back(&self, run: &RunId) {
        let started = Instant::now();
        loop {
            match self.store.release(run).await {
                Ok(Release::Requeued) => {
                    info!(job_id = %run.id, "given back to the queue");
                    return;
                }
                Ok(Release::Fenced) => return,
                Err(e) if started.elapsed() >= RELEASE_WINDOW => {
                    error!(job_id = %run.id, error = %e, "could not give the job back; recovery will re-queue it");
                    return;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// The process's heartbeat: one store call per interval renews every run's lease.
    async fn heartbeat_loop(self: Arc<Self>) {
        let mut limiter = LogLimiter::default();
        loop {
            tokio::select! {
                () = self.stopped.cancelled() => return,
                () = tokio::time::sleep(self.settings.heartbeat) => {}
            }
            let runs: Vec<RunId> = self.lock_running().values().map(|r| r.run).collect();
            if runs.is_empty() {
                continue;
            }
            match self.store.renew(&runs).await {
                Ok(answers) => {
                    for (run, answer) in runs.iter().zip(answers) {
                        self.on_renewal(run, answer).await;
                    }
                }
                Err(e) => log_store_failure(&mut limiter, &e, "a heartbeat failed and was dropped"),
            }
        }
    }

    async fn on_renewal(&self, run: &RunId, answer: Renewal) {
        let restore = {
            let running = self.lock_running();
            let Some(r) = running.get(&run.id).filter(|r| r.run == *run) else {
                return;
            };
            match answer {
                Renewal::Held => None,
                Renewal::CancelRequested => {
                    if !r.cancel.is_cancelled() {
                        info!(job_id = %run.id, "asked to stop: the job is told");
                        r.cancel.cancel();
                    }
                    None
                }
                Renewal::Fenced => {
                    r.fence("another run or job holds this job");
                    None
                }
                Renewal::Missing => {
                    let tick = r.latest.borrow();
                    let live = Live {
                        percent: tick.percent,
                        step: tick.step.clone(),
                        attempt: r.attempt,
                    };
                    Some((r.job.clone(), r.created_at, live))
                }
            }
        };
        let Some((job, created_at, live)) = restore else {
            return;
        };
        match self.store.restore(&job, run, created_at, &live).await {
            Ok(Restore::Restored) => {
                warn!(job_id = %run.id, "the store had lost this job's record; it was written back")
            }
            Ok(Restore::Fenced) => {
                if let Some(r) = self.lock_running().get(&run.id) {
                    r.fence("the store lost this job's record and a newer job holds the lock");
                }
            }
            Ok(Restore::Present) => {}
            Err(e) => warn!(error = %e, "the job's lost record could not be written back yet"),
        }
    }

    /// Reacts to the store's events: work to claim, a cancel to pass on, an end to announce.
    async fn listen(self: Arc<Self>, mut events: broadcast::Receiver<Event>) {
        loop {
            let event = tokio::select! {
                () = self.stopped.cancelled() => return,
                event = events.recv() => event,
            };
            match event {
                Ok(Event::Wake) => self.wake.notify_one(),
                Ok(Event::Cancel(id)) => self.on_cancel_event(id),
                Ok(Event::Ended(id)) => self.ended(&id),
                Ok(Event::Resync) | Err(broadcast::error::RecvError::Lagged(_)) => {
                    self.wake.notify_one();
                    for n in self.lock_waiters().values() {
                        n.notify_one();
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }
}

fn outcome_json(outcome: &Outcome) -> serde_json::Value {
    match outcome {
        Outcome::Done(report) => serde_json::json!({"status": "done", "result": report}),
        Outcome::Failed(class, report) => {
            serde_json::json!({"status": "failed", "error": class, "result": report})
        }
        Outcome::Cancelled(report) => serde_json::json!({"status": "cancelled", "result": report}),
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
/// A refused write (`Fenced`) trips the run's token: it stops at its next safe point.
async fn progress_writer(
    store: Arc<dyn JobStore>,
    run: RunId,
    mut ticks: Ticks,
    interval: Duration,
    cancel: CancellationToken,
) {
    let mut limiter = LogLimiter::default();
    loop {
        tokio::time::sleep(interval).await;
        let Some(tick) = ticks.next().await else {
            return;
        };
        match store.tick(&run, tick.percent, &tick.step).await {
            Ok(TickAnswer::Fenced) => {
                warn!(
                    "fenced off: this run no longer holds the job; it stops at its next safe point"
                );
                cancel.cancel();
                return;
            }
            Ok(_) => {}
            Err(e) => {
                log_store_failure(&mut limiter, &e, "a progress write failed and was dropped")
            }
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
pub(super) struct LogLimiter {
    last: Option<Instant>,
    suppressed: u64,
}

impl LogLimiter {
    const WINDOW: Duration = Duration::from_secs(10);

    /// `Some(n)` when a line may be logged now, `n` being how many were held back since.
    pub(super) fn ready(&mut self) -> Option<u64> {
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
