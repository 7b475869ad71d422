//! A bulk cancel's step for one job, as the single route asks it, and what the call stopped
//! so far: a pipeline's cancel ends its steps and a step's ends its pipeline, so a job the
//! call comes to later may have ended by the call's own doing, and is reported so.

use super::super::jobs::{count_if_ended_at_once, count_pipeline_if_ended};
use super::super::AppState;
use super::{ApiError, BulkOutcome, BulkResult, Caller, Looked, NOT_ACTIVE, NOT_FOUND};
use crate::jobs::store::Cancel;
use crate::jobs::{JobId, Snapshot, Status};

/// The pipelines a bulk cancel stopped so far, and the jobs it asked to stop: a pipeline's
/// cancel ends its steps, and a step's ends its pipeline and the steps after it, so a job
/// the call comes to later may have ended by the call's own doing.
#[derive(Default)]
pub(super) struct Stopped(Vec<JobId>);

impl Stopped {
    fn note(&mut self, job: &Snapshot) {
        self.0.push(job.job_id);
        self.0.extend(job.pipeline_id);
    }

    /// Whether `job` ended with one the call stopped: it is a pipeline whose step the call
    /// stopped, or a step of a pipeline the call stopped (itself or through another step).
    fn ended(&self, job: &Snapshot) -> bool {
        self.0.contains(&job.job_id) || job.pipeline_id.is_some_and(|p| self.0.contains(&p))
    }
}

/// What a job that ended with another the call stopped is reported with.
const ENDED_WITH_PIPELINE: &str =
    "ended with its pipeline, which this call stopped (itself or through one of its steps)";
const ENDED_WITH_STEP: &str = "ended with its step, which this call stopped";

/// One cancel, as the single route asks it.
pub(super) async fn cancel_one(
    app: &AppState,
    caller: &Caller,
    job: Looked,
    stopped: &mut Stopped,
) -> Result<BulkResult, ApiError> {
    let before = match job {
        Err(id) => return Ok(BulkResult::skipped(id, "not_found", NOT_FOUND)),
        // A job that reads `lost` ends `cancelled` at once, as the single route ends it.
        Ok(s) if !s.status.is_active() && s.status != Status::Lost => {
            return Ok(BulkResult::skipped(s.job_id, "not_active", NOT_ACTIVE));
        }
        Ok(s) => s,
    };
    let id = before.job_id;
    match app.store.cancel(&id, &caller.name).await? {
        Cancel::Requested => stopped.note(&before),
        Cancel::NotActive => return ended_meanwhile(app, &before, stopped).await,
        Cancel::Missing => return Ok(BulkResult::skipped(id, "not_found", NOT_FOUND)),
    }
    let outcome = match app.store.get(&id).await? {
        Some(after) if after.status == Status::Cancelled => {
            count_if_ended_at_once(&before, &after);
            count_pipeline_if_ended(app, &after).await;
            BulkOutcome::Cancelled
        }
        _ => BulkOutcome::Cancelling,
    };
    Ok(BulkResult::done(id, outcome, None))
}

/// A job that was active when the call selected it and had ended when its turn came: the
/// call's own doing when it ended `cancelled` (or reads `cancelling`) with a pipeline or step
/// the call stopped, reported so; else it ended by itself or by another's hand.
async fn ended_meanwhile(
    app: &AppState,
    before: &Snapshot,
    stopped: &Stopped,
) -> Result<BulkResult, ApiError> {
    let id = before.job_id;
    let skipped = BulkResult::skipped(id, "not_active", NOT_ACTIVE);
    if !stopped.ended(before) {
        return Ok(skipped);
    }
    let outcome = match app.store.get(&id).await?.map(|s| s.status) {
        Some(Status::Cancelled) => BulkOutcome::Cancelled,
        Some(Status::Cancelling) => BulkOutcome::Cancelling,
        _ => return Ok(skipped),
    };
    let how = match before.pipeline_id {
        Some(_) => ENDED_WITH_PIPELINE,
        None => ENDED_WITH_STEP,
    };
    Ok(BulkResult {
        message: Some(how.to_owned()),
        ..BulkResult::done(id, outcome, None)
    })
}
