//! The dispatcher: one per process, it claims jobs from the store's shared ready queue
//! whenever this process has a free worker (`MAX_CONCURRENT_JOBS`), oldest first.
//!
//! It never polls a queue it cannot serve: it first waits for a free worker, then claims
//! until the queue is empty, then sleeps until the store says work arrived (`Event::Wake`,
//! sent when a create, recovery or release puts a job in an empty queue) — or, should that
//! message be missed, until `IDLE_RECHECK` has passed. So a job waiting in the queue costs
//! no store call, whatever the queue's length.

use std::sync::Arc;
use std::time::Duration;

use tracing::warn;

use super::runner::{Inner, LogLimiter};

/// How long an idle dispatcher waits for a wake-up before claiming anyway: a bound on
/// the delay a missed pub/sub message (a reconnect) can cause, at one call per interval.
const IDLE_RECHECK: Duration = Duration::from_secs(5);
/// How long the dispatcher waits after the store failed a claim before trying again.
const STORE_RETRY: Duration = Duration::from_millis(500);

pub(super) async fn dispatch(inner: Arc<Inner>) {
    let mut limiter = LogLimiter::default();
    loop {
        let permit = tokio::select! {
            permit = inner.workers.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            () = inner.closing.cancelled() => return,
        };
        loop {
            if inner.closing.is_cancelled() {
                return;
            }
            // Not raced against `closing`: a claim that reached the store must be run or
            // given back, never dropped on the floor.
            match inner.store.claim(&inner.worker, &inner.kinds).await {
                Ok(Some(claim)) => {
                    inner.spawn_run(claim, permit);
                    break;
                }
                Ok(None) => tokio::select! {
                    () = inner.wake.notified() => {}
                    () = tokio::time::sleep(IDLE_RECHECK.min(inner.settings.heartbeat)) => {}
                    () = inner.closing.cancelled() => return,
                },
                Err(e) => {
                    if let Some(suppressed) = limiter.ready() {
                        warn!(error = %e, suppressed, "could not claim a job; trying again shortly");
                    }
                    tokio::select! {
                        () = tokio::time::sleep(STORE_RETRY) => {}
                        () = inner.closing.cancelled() => return,
                    }
                }
            }
        }
    }
}
