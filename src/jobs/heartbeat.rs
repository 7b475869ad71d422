//! The heartbeat: one per process, it renews every running job's lease in one store call per
//! interval — and, in the same call, the process's entry in the store's process registry, so
//! it beats while idle too — and acts on what the answer says of each run: a cancel
//! requested elsewhere, a run fenced off, or a record the store lost (written back from
//! what the run knows).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::log_limit::LogLimiter;
use super::run::Runs;
use super::store::{Live, Renewal, Restore, RunId, RunRef};

/// Renews the leases every `interval` until `stopped`, the first time at once (so the
/// process is in the registry from its start).
pub(super) async fn heartbeat(runs: Arc<Runs>, interval: Duration, stopped: CancellationToken) {
    let mut limiter = LogLimiter::default();
    let mut first = true;
    loop {
        let wait = if first { Duration::ZERO } else { interval };
        first = false;
        tokio::select! {
            () = stopped.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        let held: Vec<RunId> = runs.lock_running().values().map(|r| r.run).collect();
        match runs.store.renew(&held).await {
            Ok(answers) => {
                for (run, answer) in held.iter().zip(answers) {
                    on_renewal(&runs, run, answer).await;
                }
            }
            Err(e) => limiter.warn(&e, "a heartbeat failed and was dropped"),
        }
    }
}

async fn on_renewal(runs: &Runs, run: &RunId, answer: Renewal) {
    let restore = {
        let running = runs.lock_running();
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
            Renewal::Fenced if r.ending.load(Ordering::Acquire) => {
                debug!(job_id = %run.id, "the heartbeat crossed the run's end");
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
    let lost = RunRef::new(&job, run, created_at);
    match runs.store.restore(lost, &live).await {
        Ok(Restore::Restored) => {
            warn!(job_id = %run.id, "the store had lost this job's record; it was written back")
        }
        Ok(Restore::Fenced) => {
            if let Some(r) = runs.lock_running().get(&run.id) {
                r.fence("the store lost this job's record, and a newer job or its tenant's delete says not to write it back");
            }
        }
        Ok(Restore::Present) => {}
        Err(e) => warn!(error = %e, "the job's lost record could not be written back yet"),
    }
}
