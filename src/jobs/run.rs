//! The run: one claimed job on a worker, from its start to its recorded end, and the table
//! of this process's runs (`Runs`) that the heartbeat, the listener and shutdown act on.
//!
//! A run executes the kind's blocking function on `spawn_blocking` inside the job's span
//! (or, when the kind's quick answer says its work is small, answers it on its own task),
//! with a never-blocking progress reporter, and records how it ended — retrying while the
//! store is unreachable. A run the store refused (`Fenced`: recovered, taken over or given
//! back) stops at its next safe point and records nothing.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, info_span, warn, Instrument, Span};

use super::dispatch::{Seat, Seats};
use super::fence::StoreFence;
use super::log_limit::LogLimiter;
use super::progress::{guarded, progress_channel, progress_writer, Reporter, Tick, Ticks};
use super::registry::{JobError, JobFn, JobInput, QuickFn, Registry};
use super::store::{Claim, Finish, JobStore, NewJob, Outcome, Release, RunEnd, RunId, RunRef};
use super::watch::Waiters;
use super::{JobId, Kind};

/// The error class of a job whose function panicked.
pub const PANIC: &str = "Panic";
/// How long a run given back at shutdown, or ending during it, gets to be written.
pub(super) const RELEASE_WINDOW: Duration = Duration::from_secs(3);
/// How long a cancel event for a job this process does not (yet) run is remembered: it may
/// have been claimed here a moment before, and not be registered yet. Past this, the next
/// heartbeat's answer carries the request anyway.
const EARLY_CANCEL_MEMORY: Duration = Duration::from_secs(10);

/// What the runs tell whoever observes the runner (the metrics, wired at start-up). Each
/// call is cheap, never blocks and cannot fail the run; by default nothing is observed.
pub trait RunObserver: Send + Sync {
    /// A job was created, counted once the store answered, whether or not the request that
    /// asked for it still waits (a client that hung up on its POST still made a job).
    fn created(&self, _kind: &Kind) {}
    /// A claimed job starts on a worker, `waited` after its creation (the store's clock to
    /// this host's).
    fn started(&self, _kind: &Kind, _waited: Duration) {}
    /// The job's function is over, or was given up on at the shutdown deadline, after `ran`.
    fn stopped(&self, _kind: &Kind, _ran: Duration) {}
    /// A job's end was recorded as `outcome`: by its run (or given up on when the store
    /// stayed down), or by the recovery sweep for a job lost for good and its pipeline.
    fn finished(&self, _kind: &Kind, _outcome: &Outcome) {}
}

/// Observes nothing: the runner of a test that does not look at metrics.
pub struct Unobserved;

impl RunObserver for Unobserved {}

/// What the process knows of one of its runs.
pub(super) struct Running {
    /// Shared with the run, not copied: a job's strings and parameters are not cloned a run.
    pub job: Arc<NewJob>,
    pub run: RunId,
    pub created_at: u64,
    pub attempt: u32,
    /// Tripped on a cancel request, when fenced off, and at the shutdown deadline.
    pub cancel: CancellationToken,
    /// Set when the store refused this run: it records nothing more.
    pub fenced: Arc<AtomicBool>,
    /// Set once the job's function is over and its end is being written: a heartbeat that
    /// crosses that write finds the job ended, which is no fence (the write itself says when
    /// the run was really fenced off).
    pub ending: Arc<AtomicBool>,
    pub latest: watch::Receiver<Tick>,
    /// Cancelled once the run is no longer being answered quickly: its kind has no quick
    /// answer, the answer said its function must run, or its end is over (recorded or not).
    /// Until then its end is a store call or two away (`Runner::quick_end`).
    pub answering: CancellationToken,
}

impl Running {
    pub(super) fn fence(&self, why: &str) {
        if !self.fenced.swap(true, Ordering::AcqRel) {
            warn!(job_id = %self.job.id, "fenced off: {why}; the run stops at its next safe point");
        }
        self.cancel.cancel();
    }
}

/// This process's runs and what they need: the store, the kinds, the shutdown tokens.
pub(super) struct Runs {
    pub store: Arc<dyn JobStore>,
    pub registry: Arc<Registry>,
    /// The workers and quick seats the runs sit on.
    pub seats: Arc<Seats>,
    /// The shortest gap between two progress writes of one job.
    pub tick_interval: Duration,
    /// How long a job's final state is retried while the store is unreachable.
    pub finish_retry: Duration,
    pub tracker: TaskTracker,
    /// Cancelled when shutdown starts: no new jobs, no more claims.
    pub closing: CancellationToken,
    /// Cancelled at the grace deadline: runs still going were given back.
    pub interrupt: CancellationToken,
    running: Mutex<HashMap<JobId, Running>>,
    /// Cancel events for jobs not running here when they came (see `EARLY_CANCEL_MEMORY`).
    early_cancels: Mutex<HashMap<JobId, Instant>>,
    /// `wait=true` requests, woken when their job ends.
    pub(super) waiters: Waiters,
    pub(super) observer: Arc<dyn RunObserver>,
    /// This process, as claims name it, and the kinds it claims: named once, not at each
    /// finish that claims the next job.
    worker: String,
    kinds: Vec<Kind>,
}

impl Runs {
    pub(super) fn new(
        store: Arc<dyn JobStore>,
        registry: Arc<Registry>,
        seats: Arc<Seats>,
        tick_interval: Duration,
        finish_retry: Duration,
        observer: Arc<dyn RunObserver>,
    ) -> Self {
        Self {
            store,
            seats,
            worker: super::worker_name(),
            kinds: registry.kinds().cloned().collect(),
            registry,
            tick_interval,
            finish_retry,
            tracker: TaskTracker::new(),
            closing: CancellationToken::new(),
            interrupt: CancellationToken::new(),
            running: Mutex::new(HashMap::new()),
            early_cancels: Mutex::new(HashMap::new()),
            waiters: Waiters::default(),
            observer,
        }
    }

    pub(super) fn lock_running(&self) -> MutexGuard<'_, HashMap<JobId, Running>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a cancel event for this job came before its run was registered here.
    fn take_early_cancel(&self, id: &JobId) -> bool {
        let mut early = self.early_cancels.lock().unwrap_or_else(|p| p.into_inner());
        early.retain(|_, at| at.elapsed() < EARLY_CANCEL_MEMORY);
        early.remove(id).is_some()
    }

    /// Someone asked `id` to stop: its run here is told, or the request is remembered for
    /// a run about to be registered.
    pub(super) fn on_cancel_event(&self, id: JobId) {
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

    /// Job `id` ended (here or anywhere): every request waiting for it wakes.
    pub(super) fn ended(&self, id: &JobId) {
        self.waiters.ended(id);
    }

    /// Hands a claimed job to a worker task.
    pub(super) fn spawn(self: &Arc<Self>, claim: Claim, seat: Seat) {
        self.spawn_probed(claim, seat, false);
    }

    /// `spawn`, for a job whose create's claim found its kind's probe absent when
    /// `probed_absent` (`JobInput::probed_absent`).
    pub(super) fn spawn_probed(self: &Arc<Self>, claim: Claim, seat: Seat, probed_absent: bool) {
        let job = &claim.job;
        // A root span: a job claimed at the end of another (the next in a pipeline or in its
        // tenant's order) or in the request that created it is not part of either, and its
        // lines must not nest one level deeper at every hand-off. The request it came from is
        // named as a field instead.
        let span = info_span!(parent: None, "job", job_id = %job.id, tenant_id = %job.tenant, kind = %job.kind, attempt = claim.attempt, request_id = %job.origin.request_id);
        let runs = self.clone();
        self.tracker
            .spawn(async move { runs.run(claim, seat, probed_absent).await }.instrument(span));
    }

    async fn run(self: Arc<Self>, claim: Claim, mut seat: Seat, probed_absent: bool) {
        let Claim {
            job,
            created_at,
            run,
            attempt,
        } = claim;
        let job = Arc::new(job);
        let (reporter, ticks) = progress_channel();
        let cancel = CancellationToken::new();
        let fenced = Arc::new(AtomicBool::new(false));
        let ending = Arc::new(AtomicBool::new(false));
        let answering = self.answering(&job.kind);
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
                    ending: ending.clone(),
                    latest: ticks.latest(),
                    answering: answering.clone(),
                },
            );
        }
        // Waited from its creation (the store's clock) to this claim (this host's clock).
        let waited = Duration::from_millis(super::now_ms().saturating_sub(created_at));
        self.observer.started(&job.kind, waited);
        let began = Instant::now();
        let result = self
            .execute(
                &job,
                (run, created_at, probed_absent),
                (reporter, ticks),
                (cancel, &answering),
                &mut seat,
            )
            .await;
        self.observer.stopped(&job.kind, began.elapsed());
        ending.store(true, Ordering::Release);
        let next = match result {
            Some((outcome, percent)) if !fenced.load(Ordering::Acquire) => {
                let end = RunRef::new(&job, &run, created_at).ended(&outcome, percent);
                // The next job is claimed with this one's end only while a worker is free.
                let claim_next = matches!(seat, Seat::Worker(_)) || self.seats.worker_free();
                let next = self.record(end, claim_next).await;
                self.observer.finished(&job.kind, &outcome);
                if let Some(pipeline) = job.pipeline {
                    self.observe_pipeline_end(&job.id, &pipeline).await;
                }
                next
            }
            _ => {
                info!("this run's end is not recorded: it no longer holds the job");
                None
            }
        };
        answering.cancel();
        self.lock_running().remove(&job.id);
        self.ended(&job.id);
        // The store claimed this seat's next job in the finish's step: it runs on the same
        // seat, with no wake-up and no claim call.
        match next {
            Some(next) => self.spawn(next, seat),
            None => drop(seat),
        }
    }

    /// The token of a run of `kind` that says whether it is being answered quickly: for a
    /// kind with no quick answer, cancelled from the start.
    fn answering(&self, kind: &Kind) -> CancellationToken {
        let answering = CancellationToken::new();
        if self.registry.get(kind).is_none_or(|k| k.quick.is_none()) {
            answering.cancel();
        }
        answering
    }

    /// The token of job `id`'s run here while it is being answered quickly (see
    /// `Running::answering`).
    pub(super) fn answering_quickly(&self, id: &JobId) -> Option<CancellationToken> {
        let running = self.lock_running();
        let answering = &running.get(id)?.answering;
        (!answering.is_cancelled()).then(|| answering.clone())
    }

    /// Tells the observer of the end of `pipeline` (and of its skipped steps) when the end of
    /// its `step` this run recorded ended it too (no other process counts it). A read that fails skips the count.
    async fn observe_pipeline_end(&self, step: &JobId, pipeline: &JobId) {
        let (Ok(Some(step)), Ok(Some(pipeline))) =
            (self.store.get(step).await, self.store.get(pipeline).await)
        else {
            return;
        };
        for (kind, outcome) in super::pipeline::ends_counted_with(&pipeline, &step) {
            self.observer.finished(&kind, &outcome);
        }
    }

    /// What the kind's function (or quick answer) is given, its writes fenced to `run`.
    fn input(
        &self,
        job: &NewJob,
        (run, created_at, probed_absent): (RunId, u64, bool),
        cancel: CancellationToken,
    ) -> JobInput {
        JobInput {
            job_id: job.id,
            tenant: job.tenant.clone(),
            kind: job.kind.clone(),
            params: job.params.clone(),
            cancel,
            run,
            fence: Arc::new(StoreFence::run(
                self.store.clone(),
                run,
                job.tenant.clone(),
                created_at,
            )),
            probed_absent,
        }
    }

    /// Runs the function and turns whatever happened into an outcome with the last percent
    /// the job reported; `None` when the run was given back at the shutdown deadline or a
    /// write of it was refused (fenced off): either way its end is not recorded. A job
    /// answered quickly frees its worker; one whose function runs takes one first.
    async fn execute(
        &self,
        job: &NewJob,
        (run, created_at, probed_absent): (RunId, u64, bool),
        (reporter, ticks): (Reporter, Ticks),
        (cancel, answering): (CancellationToken, &CancellationToken),
        seat: &mut Seat,
    ) -> Option<(Outcome, u8)> {
        let Some(kind) = self.registry.get(&job.kind) else {
            // A job created by a replica with other kinds reached this one.
            error!("no function is registered for this kind");
            return Some((Outcome::Failed("UnknownKind".into(), None), 0));
        };
        reporter.report(0, "starting");
        let latest = ticks.latest();
        let fenced_off = cancel.clone();
        let input = self.input(job, (run, created_at, probed_absent), cancel);
        if let Some(quick) = &kind.quick {
            self.seats.to_quick(seat);
            let answered = tokio::select! {
                answered = answer_quickly(quick, &input, &reporter) => answered,
                () = self.interrupt.cancelled() => return None,
            };
            if let Some(answered) = answered {
                self.seats.answered_quickly();
                let percent = latest.borrow().percent;
                return Some((outcome_of(answered)?, percent));
            }
        }
        answering.cancel();
        tokio::select! {
            () = self.seats.to_work(seat) => {}
            () = self.interrupt.cancelled() => return None,
        }
        let function = run_blocking(kind.run.clone(), input, reporter, Span::current());
        let mut blocking = tokio::task::spawn_blocking(function);
        // A job that ends within its first interval has no progress to write (its last tick
        // travels with the finish): its writer starts only once the job outlives that.
        let outlived = tokio::select! {
            joined = &mut blocking => Some(Some(joined)),
            () = self.interrupt.cancelled() => Some(None),
            () = tokio::time::sleep(self.tick_interval) => None,
        };
        let joined = match outlived {
            Some(joined) => joined,
            None => {
                let writer = progress_writer(
                    self.store.clone(),
                    run,
                    ticks,
                    self.tick_interval,
                    fenced_off,
                );
                let writer = tokio::spawn(writer.in_current_span());
                let joined = tokio::select! {
                    joined = blocking => Some(joined),
                    () = self.interrupt.cancelled() => None,
                };
                // The last tick travels with the finish.
                writer.abort();
                let _ = writer.await;
                joined
            }
        };
        let percent = latest.borrow().percent;
        let outcome = outcome_of(joined?.map_err(join_message))?;
        Some((outcome, percent))
    }

    /// Writes the outcome, retrying while the store is unreachable, for `finish_retry` (a few
    /// seconds once the service is shutting down). Never gives up silently. Unless the
    /// process is shutting down, the store claims this (now free) worker's next job in the
    /// same step (when `claim_next`): answers it.
    async fn record(&self, end: RunEnd<'_>, claim_next: bool) -> Option<Claim> {
        let outcome = end.outcome;
        let started = Instant::now();
        let mut delay = Duration::from_millis(50);
        let mut limiter = LogLimiter::default();
        loop {
            let answer = match self.closing.is_cancelled() || !claim_next {
                true => self.store.finish(end).await.map(|finish| (finish, None)),
                false => {
                    let (worker, kinds) = (&self.worker, &self.kinds);
                    self.store.finish_and_claim(end, worker, kinds).await
                }
            };
            let e = match answer {
                Ok((Finish::Applied, next)) => {
                    info!(status = outcome.status().as_str(), "job ended");
                    return next;
                }
                Ok((Finish::AlreadyEnded, _)) => {
                    info!("job's end was already recorded");
                    return None;
                }
                Ok((Finish::Fenced, _)) => {
                    warn!(outcome = ?outcome, "fenced off: another run or job holds this job; this run's end is not recorded");
                    return None;
                }
                Err(e) => e,
            };
            let window = match self.closing.is_cancelled() {
                true => RELEASE_WINDOW,
                false => self.finish_retry,
            };
            if started.elapsed() >= window {
                error!(
                    error = %e,
                    outcome = %serde_json::to_string(&outcome_json(outcome)).unwrap_or_default(),
                    "the job's end could not be recorded: the store stayed unreachable"
                );
                return None;
            }
            limiter.warn(&e, "the job's end is waiting for the store");
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(1));
        }
    }

    /// Puts a run back in the queue at shutdown, retrying briefly while the store is down
    /// (if it stays down, the lease expires and recovery re-queues the job).
    pub(super) async fn give_back(&self, run: &RunId) {
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
}

/// How the function ended, as the record keeps it (`Err`: it panicked, with this message);
/// `None` for a refused write.
fn outcome_of(joined: Result<Result<serde_json::Value, JobError>, String>) -> Option<Outcome> {
    Some(match joined {
        Ok(Ok(report)) => Outcome::Done(report),
        Ok(Err(JobError::Fenced)) => {
            warn!("fenced off: the store refused this run's write; its end is not recorded");
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
        Err(message) => {
            error!(panic = %message, "job function panicked");
            Outcome::Failed(PANIC.into(), None)
        }
    })
}

/// What a blocking task that did not return says of itself.
fn join_message(join: tokio::task::JoinError) -> String {
    if join.is_panic() {
        panic_message(join.into_panic())
    } else {
        "the blocking task was cancelled".to_owned()
    }
}

/// The kind's quick answer, on the run's own task, with the same guarded reporter as its
/// function; `None` when the function must run. A panic in it ends the job as one in the
/// function does.
async fn answer_quickly(
    quick: &QuickFn,
    input: &JobInput,
    reporter: &Reporter,
) -> Option<Result<Result<serde_json::Value, JobError>, String>> {
    let report = |percent: u8, step: &str| reporter.report(percent, step);
    let progress = guarded(report);
    match AssertUnwindSafe(quick(input, Some(&progress)))
        .catch_unwind()
        .await
    {
        Ok(answer) => answer.map(Ok),
        Err(panic) => Some(Err(panic_message(panic))),
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
) -> impl FnOnce() -> Result<serde_json::Value, JobError> {
    move || {
        let _entered = span.enter();
        let report = |percent: u8, step: &str| reporter.report(percent, step);
        let progress = guarded(report);
        run(&input, Some(&progress))
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
