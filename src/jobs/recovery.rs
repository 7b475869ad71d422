//! The recovery sweep: every process, once per heartbeat interval (jittered so replicas
//! do not sweep in step), asks the store for runs whose lease expired — their process
//! stopped renewing it (killed, paused, cut off). The store re-queues each with its next
//! attempt (its old run fenced off) or, after `MAX_ATTEMPTS`, ends it `failed`/`Lost` with
//! its lock released. It reads an index of leases by expiry, never scans jobs. The ends it
//! decides (a run lost for good, and the pipeline that ended with it) no runner sees: the
//! sweep that decided them tells the observer, once.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::run::RunObserver;
use super::store::{JobStore, Outcome, Recovered, LOST};

/// The share of the interval the sweep's start may move by, either way.
const JITTER_SHARE: f64 = 0.25;

pub(super) async fn sweep(
    store: Arc<dyn JobStore>,
    observer: Arc<dyn RunObserver>,
    interval: Duration,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(jittered(interval)) => {}
        }
        match store.recover().await {
            Ok(recovered) => {
                for r in recovered {
                    match r {
                        Recovered::Requeued(id) => {
                            info!(job_id = %id, "a lost run was re-queued for its next attempt")
                        }
                        Recovered::Lost(id) => {
                            warn!(job_id = %id, "a lost run had no attempt left: it ended failed (Lost)")
                        }
                        Recovered::LeftLost(id) => {
                            warn!(job_id = %id, "a lost run had no attempt left: it reads lost")
                        }
                    }
                    count_ends(&*store, &*observer, r).await;
                }
            }
            Err(e) => warn!(error = %e, "the recovery sweep could not reach the store"),
        }
    }
}

/// Tells the observer of the ends this sweep decided: a run out of attempts ended failed
/// (`Lost`), and its pipeline (with its skipped steps) when that ended with it. A read that fails skips the count.
async fn count_ends(store: &dyn JobStore, observer: &dyn RunObserver, recovered: Recovered) {
    let (id, ended) = match recovered {
        Recovered::Requeued(_) => return,
        Recovered::Lost(id) => (id, true),
        Recovered::LeftLost(id) => (id, false),
    };
    let Ok(Some(step)) = store.get(&id).await else {
        return;
    };
    if ended {
        let class = step.error.clone().unwrap_or_else(|| LOST.to_owned());
        observer.finished(&step.kind, &Outcome::Failed(class, None));
    }
    let Some(pipeline) = step.pipeline_id else {
        return;
    };
    if let Ok(Some(pipeline)) = store.get(&pipeline).await {
        for (kind, outcome) in super::pipeline::ends_counted_with(&pipeline, &step) {
            observer.finished(&kind, &outcome);
        }
    }
}

/// `interval` moved by up to ±`JITTER_SHARE` of itself, from a random job id's bits.
fn jittered(interval: Duration) -> Duration {
    let random = (super::JobId::new().low_bits() % 10_000) as f64 / 10_000.0;
    interval.mul_f64(1.0 + JITTER_SHARE * (2.0 * random - 1.0))
}
