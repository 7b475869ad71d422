//! The dispatcher: one per process, it claims jobs from the store's shared ready queue
//! whenever this process has a free worker (`MAX_CONCURRENT_JOBS`), oldest first, and hands
//! each claim to whoever starts runs.
//!
//! It never polls a queue it cannot serve: it first waits for a free worker, then claims
//! (once the queue has work, for every worker free at that moment in one store call) until
//! the queue is empty, then sleeps until the store says work arrived (`Event::Wake`,
//! sent when a create, recovery or release puts a job in an empty queue; `Event::Resync`,
//! sent when the store's subscription is back) or `IDLE_RECHECK` has passed, and asks
//! again. So a job waiting in the queue costs no store call, whatever the queue's length.
//! The recheck finds no missed wake-up on Redis: there a claim asks only the groups a
//! wake-up or this process's own step marked, and makes no call when none is; a wake-up
//! missed while the subscription was down is made good by the resubscribe, which marks
//! every group. The embedded store's claim reads its own queue.
//!
//! A claimed job sits on a seat (`Seats`): a worker, or — for a kind with a quick answer
//! (`Registry::with_quick`), while such jobs have lately been answered quickly — a quick
//! seat, of which there are `QUICK_SEATS` more. A quick answer holds no thread and does no
//! work of its own, so `MAX_CONCURRENT_JOBS` bounds the jobs whose function runs: a job found
//! to need its function takes a worker first (one on a quick seat waits for one), and a job
//! answered quickly gives its worker back at once. Either way a job is claimed, by the
//! dispatcher, a create or a finish, only while a worker is free: a busy process takes no
//! more of the shared queue than its workers would.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::log_limit::LogLimiter;
use super::store::{Claim, JobStore};
use super::Kind;

/// Jobs of kinds with a quick answer a process holds beyond its workers (see the module's
/// doc): enough of them in flight that Redis and the service work at once. Each such job is
/// a store call or two of each (a read, a finish claiming the seat's next job); with 32, a
/// queue of them drained in lockstep, every answer of one batch back before the next batch
/// was sent, at the sum of the two's CPU a job (~110 us: ~9,000 jobs/s with both cores
/// ~50 % idle), and a create burst left most of its jobs queued, where with 128 more of
/// them are claimed with their create and the rest drain while the burst lasts.
pub const QUICK_SEATS: usize = 128;

/// Where a claimed job runs: the seat's permit, held until the run ends.
pub(super) enum Seat {
    /// One of `MAX_CONCURRENT_JOBS`.
    Worker(#[allow(dead_code)] OwnedSemaphorePermit),
    /// One of `QUICK_SEATS`: the job may answer quickly; if not, it takes a worker first.
    Quick(#[allow(dead_code)] OwnedSemaphorePermit),
}

/// The process's workers and quick seats.
pub(super) struct Seats {
    /// One permit per free worker.
    pub workers: Arc<Semaphore>,
    quick: Arc<Semaphore>,
    /// The kinds with a quick answer.
    quick_kinds: Vec<Kind>,
    /// Whether the last job of such a kind this process ran was answered quickly: only then
    /// do such jobs get quick seats (a run of them needing their function, say enriches of
    /// tenants holding products, then waits in the queue for a worker, as any job does).
    quick_lately: AtomicBool,
}

impl Seats {
    pub(super) fn new(workers: usize, quick: usize, quick_kinds: Vec<Kind>) -> Self {
        Self {
            workers: Arc::new(Semaphore::new(workers.max(1))),
            quick: Arc::new(Semaphore::new(quick)),
            quick_kinds,
            quick_lately: AtomicBool::new(true),
        }
    }

    pub(super) fn may_be_quick(&self, kind: &Kind) -> bool {
        self.quick_kinds.contains(kind)
    }

    /// Whether quick seats are handed out now.
    fn quick_now(&self) -> bool {
        !self.quick_kinds.is_empty() && self.quick_lately.load(Ordering::Relaxed)
    }

    /// Whether a worker is free: the condition of any claim.
    pub(super) fn worker_free(&self) -> bool {
        self.workers.available_permits() > 0
    }

    /// A seat for a job of `kind` about to be claimed, only while a worker is free: a quick
    /// seat when the kind may be answered quickly and one is free, else a worker.
    pub(super) fn take(&self, kind: &Kind) -> Option<Seat> {
        if !self.worker_free() {
            return None;
        }
        if self.may_be_quick(kind) && self.quick_now() {
            if let Ok(seat) = self.quick.clone().try_acquire_owned() {
                return Some(Seat::Quick(seat));
            }
        }
        self.workers
            .clone()
            .try_acquire_owned()
            .ok()
            .map(Seat::Worker)
    }

    /// A job of a quick kind is about to be answered: while such jobs are answered quickly,
    /// its worker, if it has one, goes back to the pool when a quick seat takes its place.
    pub(super) fn to_quick(&self, seat: &mut Seat) {
        if let (Seat::Worker(_), true) = (&seat, self.quick_now()) {
            if let Ok(quick) = self.quick.clone().try_acquire_owned() {
                *seat = Seat::Quick(quick);
            }
        }
    }

    /// A job of a quick kind was answered quickly: the next get quick seats.
    pub(super) fn answered_quickly(&self) {
        self.quick_lately.store(true, Ordering::Relaxed);
    }

    /// The job on `seat` needs its function: on a quick seat, it waits for a worker (and its
    /// kind's next jobs get workers until one is answered quickly again).
    pub(super) async fn to_work(&self, seat: &mut Seat) {
        if let Seat::Quick(_) = seat {
            self.quick_lately.store(false, Ordering::Relaxed);
            // The workers' semaphore is never closed.
            if let Ok(worker) = self.workers.clone().acquire_owned().await {
                *seat = Seat::Worker(worker);
            }
        }
    }
}

/// How long an idle dispatcher waits for a wake-up before asking the store again. On Redis
/// that ask makes a call only for a group marked meanwhile (a wake-up or this process's own
/// step marks it; a resubscribe marks all), so it does not bound the delay of a missed
/// pub/sub message: the resubscribe after the reconnect that lost it does.
const IDLE_RECHECK: Duration = Duration::from_secs(5);
/// How long the dispatcher waits after the store failed a claim before trying again.
const STORE_RETRY: Duration = Duration::from_millis(500);

/// What the dispatcher claims with and for.
pub(super) struct Dispatcher {
    pub store: Arc<dyn JobStore>,
    /// This process, as claims name it.
    pub worker: String,
    /// The kinds this process runs: it claims no other.
    pub kinds: Vec<Kind>,
    /// Its workers and quick seats.
    pub seats: Arc<Seats>,
    /// Signalled when the queue may have work (an event, a resync).
    pub wake: Arc<Notify>,
    /// Cancelled when shutdown starts: no more claims.
    pub closing: CancellationToken,
    /// The longest an idle dispatcher sleeps (at most `IDLE_RECHECK`).
    pub recheck: Duration,
}

/// The seats a claim call was made for, handed to its claims.
#[derive(Default)]
struct Free {
    workers: Vec<OwnedSemaphorePermit>,
    quick: Vec<OwnedSemaphorePermit>,
}

impl Free {
    fn len(&self) -> usize {
        self.workers.len() + self.quick.len()
    }

    /// A seat for a claimed job: a quick one for a kind that may answer quickly, a worker
    /// for any other, whichever is left when the preferred kind of seat is not.
    fn seat(&mut self, may_be_quick: bool) -> Option<Seat> {
        let quick = |free: &mut Self| free.quick.pop().map(Seat::Quick);
        let worker = |free: &mut Self| free.workers.pop().map(Seat::Worker);
        match may_be_quick {
            true => quick(self).or_else(|| worker(self)),
            false => worker(self).or_else(|| quick(self)),
        }
    }
}

impl Dispatcher {
    /// Claims whenever a worker is free and hands each claim, with its seat, to `start`;
    /// returns when shutdown starts.
    pub(super) async fn run(self, start: impl Fn(Claim, Seat)) {
        let mut limiter = LogLimiter::default();
        // Whether the last claim found work: only then are the other free seats filled in
        // the same call. An idle dispatcher holds no seat: a create claims the job it
        // accepts for a free worker, and a run on a quick seat that needs its function
        // takes one.
        let mut busy = false;
        let seats = &self.seats;
        loop {
            let permit = tokio::select! {
                permit = seats.workers.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => return,
                },
                () = self.closing.cancelled() => return,
            };
            if self.closing.is_cancelled() {
                return;
            }
            let mut free = Free::default();
            if busy {
                while let Ok(more) = seats.workers.clone().try_acquire_owned() {
                    free.workers.push(more);
                }
                if seats.quick_now() {
                    while let Ok(more) = seats.quick.clone().try_acquire_owned() {
                        free.quick.push(more);
                    }
                }
            }
            free.workers.push(permit);
            // Not raced against `closing`: a claim that reached the store must be run or
            // given back, never dropped on the floor.
            let claimed = self
                .store
                .claim_many(&self.worker, &self.kinds, free.len())
                .await;
            busy = matches!(&claimed, Ok(claims) if !claims.is_empty());
            match claimed {
                Ok(claims) if !claims.is_empty() => {
                    // The seats left over go back to their pools.
                    for claim in claims {
                        let seat = free.seat(seats.may_be_quick(&claim.job.kind));
                        start(claim, seat.expect("one seat per claim"));
                    }
                }
                Ok(_) => {
                    drop(free);
                    tokio::select! {
                        () = self.wake.notified() => {}
                        () = tokio::time::sleep(IDLE_RECHECK.min(self.recheck)) => {}
                        () = self.closing.cancelled() => return,
                    }
                }
                Err(e) => {
                    drop(free);
                    limiter.warn(&e, "could not claim a job; trying again shortly");
                    tokio::select! {
                        () = tokio::time::sleep(STORE_RETRY) => {}
                        () = self.closing.cancelled() => return,
                    }
                }
            }
        }
    }
}
