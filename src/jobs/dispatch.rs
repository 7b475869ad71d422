//! The dispatcher: one per process, it claims jobs from the store's shared ready queue
//! whenever this process has a free worker (`MAX_CONCURRENT_JOBS`), oldest first, and hands
//! each claim to whoever starts runs.
//!
//! It never polls a queue it cannot serve: it first waits for a free worker, then claims
//! (once the queue has work, for every worker free at that moment in one store call) until
//! the queue is empty, then sleeps until the store says work arrived (`Event::Wake`,
//! sent when a create, recovery or release puts a job in an empty queue) — or, should that
//! message be missed, until `IDLE_RECHECK` has passed. So a job waiting in the queue costs
//! no store call, whatever the queue's length.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::log_limit::LogLimiter;
use super::store::{Claim, JobStore};
use super::Kind;

/// How long an idle dispatcher waits for a wake-up before claiming anyway: a bound on
/// the delay a missed pub/sub message (a reconnect) can cause, at one call per interval.
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
    /// One permit per free worker.
    pub workers: Arc<Semaphore>,
    /// Signalled when the queue may have work (an event, a resync).
    pub wake: Arc<Notify>,
    /// Cancelled when shutdown starts: no more claims.
    pub closing: CancellationToken,
    /// The longest an idle dispatcher sleeps (at most `IDLE_RECHECK`).
    pub recheck: Duration,
}

impl Dispatcher {
    /// Claims whenever a worker is free and hands each claim, with its worker's permit, to
    /// `start`; returns when shutdown starts.
    pub(super) async fn run(self, start: impl Fn(Claim, OwnedSemaphorePermit)) {
        let mut limiter = LogLimiter::default();
        // Whether the last claim found work: only then are the other free workers filled in
        // the same call. An idle dispatcher holds one permit, never all of them, so a
        // replica's create can still claim the job it accepts for a free worker.
        let mut busy = false;
        loop {
            let mut permit = tokio::select! {
                permit = self.workers.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => return,
                },
                () = self.closing.cancelled() => return,
            };
            loop {
                if self.closing.is_cancelled() {
                    return;
                }
                let mut permits = vec![permit];
                if busy {
                    while let Ok(more) = self.workers.clone().try_acquire_owned() {
                        permits.push(more);
                    }
                }
                // Not raced against `closing`: a claim that reached the store must be run or
                // given back, never dropped on the floor.
                let claimed = self
                    .store
                    .claim_many(&self.worker, &self.kinds, permits.len())
                    .await;
                // One permit is kept for the next claim; the others go back to the pool.
                permit = permits.swap_remove(0);
                busy = matches!(&claimed, Ok(claims) if !claims.is_empty());
                match claimed {
                    Ok(claims) if !claims.is_empty() => {
                        let mut claims = claims.into_iter();
                        for claim in claims.by_ref().take(permits.len()) {
                            start(claim, permits.pop().expect("one permit per claim"));
                        }
                        if let Some(claim) = claims.next() {
                            start(claim, permit);
                        }
                        break;
                    }
                    Ok(_) => tokio::select! {
                        () = self.wake.notified() => {}
                        () = tokio::time::sleep(IDLE_RECHECK.min(self.recheck)) => {}
                        () = self.closing.cancelled() => return,
                    },
                    Err(e) => {
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
}
