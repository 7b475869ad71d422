//! The runner: one per process, the handle the service holds. It starts the process-wide
//! tasks — the dispatcher (`dispatch.rs`), which claims work for free workers; the heartbeat
//! (`heartbeat.rs`); the recovery sweep (`recovery.rs`); and an event listener that trips a
//! run's token the moment its cancel is requested anywhere, wakes the dispatcher when work
//! arrives and wakes `wait=true` requests when their job ended wherever it ran — and shuts
//! them down. Each claimed job runs as described in `run.rs`. A queued job costs nothing
//! while it waits.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{broadcast, Notify};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::dispatch::{Dispatcher, Seat, Seats, QUICK_SEATS};
use super::heartbeat::heartbeat;
use super::registry::Registry;
use super::run::{RunObserver, Runs, Unobserved};
use super::store::{accepted_at_create, Created, Event, JobStore, NewJob, RunId, StoreError};
use super::{worker_name, JobId, Snapshot, Status};

/// The step a job shows while it waits in the queue.
pub const QUEUED_STEP: &str = "queued";
/// How often a `wait=true` request re-reads its job even without an event (a missed
/// message after a reconnect costs at most this much).
const WAIT_RECHECK: Duration = Duration::from_secs(1);
/// The longest a read of a job this process is answering quickly waits for its end (see
/// `Runner::quick_end`): a store call or two, so only a store that stopped answering
/// meets it, and the read then answers what the store holds.
const QUICK_END_WAIT: Duration = Duration::from_secs(1);
/// How long shutdown waits, once runs were given back, for those that stop at their next
/// safe point to wind down (their writes are fenced either way).
const GIVEN_BACK_WAIT: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
pub struct RunnerSettings {
    /// How often this process renews its runs' leases and sweeps for lost ones.
    pub heartbeat: Duration,
    /// The shortest gap between two progress writes of one job.
    pub tick_interval: Duration,
    /// How long a job's final state is retried while the store is unreachable.
    pub finish_retry: Duration,
    /// Jobs whose function this process runs at once; it claims only with one of them free.
    pub max_concurrent: usize,
    /// Jobs of kinds with a quick answer it holds beyond those (see `dispatch.rs`).
    pub quick_seats: usize,
}

impl Default for RunnerSettings {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_secs(5),
            tick_interval: Duration::from_millis(100),
            finish_retry: Duration::from_secs(300),
            max_concurrent: 8,
            quick_seats: QUICK_SEATS,
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

#[derive(Clone)]
pub struct Runner {
    runs: Arc<Runs>,
    /// This process, as claims name it.
    worker: String,
    /// How often it renews its leases and its entry in the process registry.
    heartbeat: Duration,
    /// Cancelled when shutdown is over: the process-wide tasks end.
    stopped: CancellationToken,
}

impl Runner {
    /// Builds a runner nobody observes (see [`Runner::with_observer`]).
    pub fn new(
        store: Arc<dyn JobStore>,
        registry: Arc<Registry>,
        settings: RunnerSettings,
    ) -> Self {
        Self::with_observer(store, registry, settings, Arc::new(Unobserved))
    }

    /// Builds the runner, whose runs tell `observer` how they go, and starts its dispatcher,
    /// heartbeat, recovery sweep and event listener (call inside the runtime).
    pub fn with_observer(
        store: Arc<dyn JobStore>,
        registry: Arc<Registry>,
        settings: RunnerSettings,
        observer: Arc<dyn RunObserver>,
    ) -> Self {
        let kinds = registry.kinds().cloned().collect();
        let quick_kinds = registry.quick_kinds().cloned().collect();
        let seats = Arc::new(Seats::new(
            settings.max_concurrent,
            settings.quick_seats,
            quick_kinds,
        ));
        let runs = Arc::new(Runs::new(
            store.clone(),
            registry,
            seats.clone(),
            settings.tick_interval,
            settings.finish_retry,
            observer.clone(),
        ));
        let runner = Self {
            runs: runs.clone(),
            worker: worker_name(),
            heartbeat: settings.heartbeat,
            stopped: CancellationToken::new(),
        };
        let wake = Arc::new(Notify::new());
        let dispatcher = Dispatcher {
            store: store.clone(),
            worker: runner.worker.clone(),
            kinds,
            seats,
            wake: wake.clone(),
            closing: runs.closing.clone(),
            recheck: settings.heartbeat,
        };
        let events = store.subscribe();
        tokio::spawn(listen(runs.clone(), wake, runner.stopped.clone(), events));
        let claimed = runs.clone();
        tokio::spawn(dispatcher.run(move |claim, seat| claimed.spawn(claim, seat)));
        let stopped = runner.stopped.clone();
        tokio::spawn(heartbeat(runs, settings.heartbeat, stopped.clone()));
        tokio::spawn(super::recovery::sweep(
            store,
            observer,
            settings.heartbeat,
            stopped,
        ));
        runner
    }

    /// How often this process beats (the overview's measure of a process that stopped).
    pub fn heartbeat(&self) -> Duration {
        self.heartbeat
    }

    pub fn registry(&self) -> &Registry {
        &self.runs.registry
    }

    pub fn store(&self) -> &Arc<dyn JobStore> {
        &self.runs.store
    }

    pub fn is_closing(&self) -> bool {
        self.runs.closing.is_cancelled()
    }

    /// Resolves when shutdown starts: open streams end then, so the server's drain never
    /// waits on them.
    pub async fn closing(&self) {
        self.runs.closing.cancelled().await
    }

    /// Jobs this process is running.
    pub fn active_jobs(&self) -> usize {
        self.runs.lock_running().len()
    }

    /// Refuses a new job while the process shuts down. (The queue's cap is the store's.)
    pub fn admit(&self) -> Result<(), Refused> {
        if self.runs.closing.is_cancelled() {
            return Err(Refused::ShuttingDown);
        }
        Ok(())
    }

    /// Creates a job. With a worker free here (and a seat for it), the store may hand this process the job in
    /// the same step (when nothing waits ahead of it in the shared queue), and it starts at
    /// once — no trip through the queue and back; otherwise it waits in the queue for any
    /// replica's dispatcher.
    /// The claim and its start run in the request's task, and finish on a task of their own
    /// only if the request is dropped meanwhile (a client that hung up on its POST): never a
    /// claim the store made left unstarted, which would read `running` with no run anywhere
    /// until its lease ran out and recovery queued it again. (A task for every create cost
    /// the service a spawn, a wake-up and a join a create.)
    /// Either way the create goes on to the store's answer if the request is dropped, and
    /// a created job is counted there (`RunObserver::created`), never by its caller.
    pub async fn create(&self, job: NewJob) -> Result<Created, StoreError> {
        let runs = self.runs.clone();
        match runs.seats.take(&job.kind) {
            Some(seat) if !runs.closing.is_cancelled() => {
                let worker = self.worker.clone();
                Detached::new(create_claimed(runs, job, worker, seat)).await
            }
            _ => Detached::new(create_queued(runs, job)).await,
        }
    }

    /// Resolves with the job once it has ended, wherever it ran: woken by the job's end
    /// event (or this process's own finish), re-reading the store at least every second. A
    /// store out of reach meanwhile (a restart, a pause, a failover) is waited out, the
    /// calls tried again every `WAIT_RECHECK`: the caller bounds the wait.
    pub async fn wait_end(&self, id: JobId) -> Snapshot {
        let waiting = self.runs.waiters.wait_for(id);
        loop {
            match self.watch_end(&id, &waiting.wake).await {
                Ok(ended) => return ended,
                Err(e) => {
                    debug!(job = %id, error = %e, "a wait for a job's end could not read it; trying again");
                    tokio::time::sleep(WAIT_RECHECK).await;
                }
            }
        }
    }

    /// `wait_end` until the store fails a call.
    async fn watch_end(&self, id: &JobId, notify: &Notify) -> Result<Snapshot, StoreError> {
        // Registered first (by the caller): an end told from now on reaches this request.
        self.runs.store.expect_end(id).await?;
        loop {
            if let Some(s) = self.runs.store.get(id).await? {
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

    /// Resolves once job `id` is not being answered quickly here (see `Registry::with_quick`):
    /// at once for a job this process does not run that way, else when its end is recorded,
    /// or its function must run after all, at most `QUICK_END_WAIT` later. Such a job ends a
    /// store call or two after its claim, so a poll that waits this long and then reads the
    /// store reads it ended, where one that read at once would read it running and come back
    /// — often a few milliseconds after its client's first poll, which follows the 202 at
    /// once. It changes nothing of what the read answers: the store's state after the wait.
    pub async fn quick_end(&self, id: &JobId) {
        if let Some(answering) = self.runs.answering_quickly(id) {
            let _ = tokio::time::timeout(QUICK_END_WAIT, answering.cancelled_owned()).await;
        }
    }

    /// Ends once this process's shutdown is over (its grace period passed, its jobs given
    /// back), just before it closes its connections.
    pub async fn stopped(&self) {
        self.stopped.cancelled().await;
    }

    /// Graceful shutdown: stop claiming and refuse new jobs at once, let running ones finish
    /// for `grace`, then give the rest back to the queue (their attempt not counted) where
    /// another replica, or this one after its restart, resumes them.
    pub async fn shutdown(&self, grace: Duration) {
        let runs = &self.runs;
        runs.closing.cancel();
        runs.tracker.close();
        if tokio::time::timeout(grace, runs.tracker.wait())
            .await
            .is_err()
        {
            let held: Vec<RunId> = runs.lock_running().values().map(|r| r.run).collect();
            warn!(
                jobs = held.len(),
                "grace period over: giving the jobs still running back to the queue"
            );
            for run in &held {
                if let Some(r) = runs.lock_running().get(&run.id) {
                    r.fenced.store(true, Ordering::Release);
                }
                runs.give_back(run).await;
            }
            runs.interrupt.cancel();
            for r in runs.lock_running().values() {
                r.cancel.cancel();
            }
            // The runs' blocking threads cannot be stopped; their results are fenced anyway.
            let _ = tokio::time::timeout(GIVEN_BACK_WAIT, runs.tracker.wait()).await;
        }
        self.stopped.cancel();
        // Out of the process list at once; if the store is away, the entry goes stale instead.
        if let Err(e) = runs.store.leave().await {
            warn!(error = %e, "this process could not leave the process registry");
        }
    }
}

/// Reacts to the store's events: work to claim, a cancel to pass on, an end to announce.
async fn listen(
    runs: Arc<Runs>,
    wake: Arc<Notify>,
    stopped: CancellationToken,
    mut events: broadcast::Receiver<Event>,
) {
    loop {
        let event = tokio::select! {
            () = stopped.cancelled() => return,
            event = events.recv() => event,
        };
        match event {
            Ok(Event::Wake) => wake.notify_one(),
            Ok(Event::Cancel(id)) => runs.on_cancel_event(id),
            Ok(Event::Ended(id)) => runs.ended(&id),
            Ok(Event::Resync) | Err(broadcast::error::RecvError::Lagged(_)) => {
                wake.notify_one();
                runs.waiters.wake_all();
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// A future polled in its caller's task that, dropped before it is done, goes on to its end
/// on a task of its own (nobody reads its output then).
struct Detached<F: Future + Send + 'static>
where
    F::Output: Send,
{
    future: Option<Pin<Box<F>>>,
}

impl<F: Future + Send + 'static> Detached<F>
where
    F::Output: Send,
{
    fn new(future: F) -> Self {
        Self {
            future: Some(Box::pin(future)),
        }
    }
}

impl<F: Future + Send + 'static> Future for Detached<F>
where
    F::Output: Send,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let future = self
            .future
            .as_mut()
            .expect("a Detached polled after its end");
        let out = ready!(future.as_mut().poll(cx));
        self.future = None;
        Poll::Ready(out)
    }
}

impl<F: Future + Send + 'static> Drop for Detached<F>
where
    F::Output: Send,
{
    fn drop(&mut self) {
        // Unwinding from a panic in its poll: a future that panicked is not polled again.
        if std::thread::panicking() {
            return;
        }
        if let (Some(future), Ok(runtime)) = (self.future.take(), Handle::try_current()) {
            runtime.spawn(future);
        }
    }
}

/// `Runner::create` with a seat taken: the store creates the job and hands it to `worker` in
/// the same step when nothing waits ahead of it, and it starts on `seat` at once.
/// A create with no seat here: the store queues the job for any replica's dispatcher.
async fn create_queued(runs: Arc<Runs>, job: NewJob) -> Result<Created, StoreError> {
    let created = runs.store.create(job).await?;
    count_created(&runs, &created);
    Ok(created)
}

/// Tells the observer of a job the store created.
fn count_created(runs: &Runs, created: &Created) {
    if let Created::Created(snapshot, _) = created {
        runs.observer.created(&snapshot.kind);
    }
}

async fn create_claimed(
    runs: Arc<Runs>,
    job: NewJob,
    worker: String,
    seat: Seat,
) -> Result<Created, StoreError> {
    let (created, probed_absent) = match runs.registry.probe(&job.kind, &job.tenant) {
        Some(probe) => {
            let store = &runs.store;
            store.create_probing(job.clone(), &worker, &probe).await?
        }
        None => (
            runs.store.create_claimed(job.clone(), &worker).await?,
            false,
        ),
    };
    count_created(&runs, &created);
    match created {
        Created::Created(claimed, took_over) if claimed.status == Status::Running => {
            let created_at = claimed.created_at;
            // The answer shows the job as it was accepted, as the contract's 202 does:
            // queued, its function not started (the first poll may read it running).
            let accepted = accepted_at_create(*claimed, &job.step);
            runs.spawn_probed(job.first_claim(created_at), seat, probed_absent);
            Ok(Created::Created(Box::new(accepted), took_over))
        }
        other => Ok(other),
    }
}
