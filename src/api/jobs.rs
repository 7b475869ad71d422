//! `GET /catalog/jobs/{job_id}` and `GET /catalog/jobs?tenant_id=T&limit=N`.

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::Json;
use serde::Serialize;

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{
    job_not_found, limit_field, query_fields, refuse_unknown, tenant_field, JobIdPath,
};
use super::openapi;
use super::AppState;
use crate::jobs::store::{Cancel, Outcome};
use crate::jobs::{JobId, Snapshot, Status, TenantId};
use serde_json::Value;

const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 100;

/// A job as it is now: status, a percent that never goes backwards, the step, and the
/// report once done.
#[utoipa::path(get, path = "/catalog/jobs/{job_id}", tag = "jobs",
    params(
        ("job_id" = String, Path, description = "The id a start answered with."),
        ("tenant_id" = Option<String>, Query, description = "The tenant the job must belong to: a job of another tenant answers 404 exactly as an unknown id."),
    ),
    responses(
        (status = 200, description = "The job.", body = openapi::JobSnapshot),
        (status = 404, description = "`not_found`: no job has this id (or it expired after `JOB_TTL_SECONDS`), or it is another tenant's (the `tenant_id` named, or the token's).", body = openapi::ErrorBody),
        (status = 422, description = "`invalid_field` (a bad `tenant_id`) or `unknown_field` (any other query field), with `field`.", body = openapi::ErrorBody),
        (status = 503, description = "`store_unavailable`.", body = openapi::ErrorBody),
    ))]
pub async fn get_one(
    State(app): State<AppState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
    uri: Uri,
) -> Result<Json<Snapshot>, ApiError> {
    visible_job(&app, &caller, &id, &uri).await.map(Json)
}

#[derive(Serialize)]
pub struct Listing {
    jobs: Vec<Snapshot>,
}

/// `POST /catalog/jobs/{job_id}/cancel`: asks an active job to stop. 202 with the job (now
/// `cancelling`); 409 `not_active` when it has already ended; 404 when there is no such job
/// or it is not the caller's. Asking twice is harmless.
#[utoipa::path(post, path = "/catalog/jobs/{job_id}/cancel", tag = "jobs",
    params(
        ("job_id" = String, Path, description = "The job to stop."),
        ("tenant_id" = Option<String>, Query, description = "The tenant the job must belong to: a job of another tenant answers 404 exactly as an unknown id."),
    ),
    responses(
        (status = 202, description = "Asked: the job reads `cancelling`, then `cancelled` at its next safe point.", body = openapi::JobSnapshot),
        (status = 404, description = "`not_found`: no such job, or another tenant's (the `tenant_id` named, or the token's).", body = openapi::ErrorBody),
        (status = 409, description = "`not_active`: the job has already ended (it is in `job`).", body = openapi::ErrorBody),
        (status = 422, description = "`invalid_field` (a bad `tenant_id`) or `unknown_field` (any other query field), with `field`.", body = openapi::ErrorBody),
        (status = 503, description = "`store_unavailable`.", body = openapi::ErrorBody),
    ))]
pub async fn cancel(
    State(app): State<AppState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
    uri: Uri,
) -> Result<(StatusCode, Json<Snapshot>), ApiError> {
    let before = visible_job(&app, &caller, &id, &uri).await?;
    let answer = app.store.cancel(&id, &caller.name).await?;
    let snapshot = app
        .store
        .get(&id)
        .await?
        .ok_or_else(|| job_not_found(&id))?;
    match answer {
        Cancel::Requested => {
            count_if_ended_at_once(&before, &snapshot);
            Ok((StatusCode::ACCEPTED, Json(snapshot)))
        }
        Cancel::NotActive => Err(ApiError::NotActive(Box::new(snapshot))),
        Cancel::Missing => Err(job_not_found(&id)),
    }
}

/// A job cancelled while queued ends `cancelled` in the cancel itself and never reaches a
/// runner, so this answer is the one place that can count it as finished.
fn count_if_ended_at_once(before: &Snapshot, after: &Snapshot) {
    if before.status == Status::Queued && after.status == Status::Cancelled {
        crate::metrics::job_finished(after.kind.as_str(), &Outcome::Cancelled(Value::Null));
    }
}

/// The job, if it exists, the caller may see it, and it belongs to the `tenant_id` the query
/// names (when it names one). Every refusal is the same 404, so an id leaks nothing.
async fn visible_job(
    app: &AppState,
    caller: &Caller,
    id: &JobId,
    uri: &Uri,
) -> Result<Snapshot, ApiError> {
    let mut fields = query_fields(uri)?;
    let named = match fields.contains_key("tenant_id") {
        true => Some(tenant_field(&mut fields)?),
        false => None,
    };
    refuse_unknown(&fields, "tenant_id")?;
    visible(app, caller, id, named).await
}

/// The job, if it exists, the caller may see it, and it belongs to tenant `named` (when a
/// request names one). Every refusal is the same 404, so an id leaks nothing.
pub(super) async fn visible(
    app: &AppState,
    caller: &Caller,
    id: &JobId,
    named: Option<TenantId>,
) -> Result<Snapshot, ApiError> {
    let snapshot = app.store.get(id).await?.ok_or_else(|| job_not_found(id))?;
    let theirs =
        caller.sees(&snapshot.tenant_id) && named.is_none_or(|tenant| tenant == snapshot.tenant_id);
    if theirs {
        Ok(snapshot)
    } else {
        Err(job_not_found(id))
    }
}

/// A tenant's jobs, newest first.
#[utoipa::path(get, path = "/catalog/jobs", tag = "jobs",
    params(
        ("tenant_id" = String, Query, description = "The tenant."),
        ("limit" = Option<u32>, Query, description = "How many jobs, 1–100 (default 20).", minimum = 1, maximum = 100),
    ),
    responses(
        (status = 200, description = "The jobs.", body = openapi::JobListing),
        (status = 403, description = "`forbidden`: the token is for another tenant than the one named.", body = openapi::ErrorBody),
        (status = 422, description = "`missing_field`, `invalid_field` or `unknown_field` (with `field`).", body = openapi::ErrorBody),
        (status = 503, description = "`store_unavailable`.", body = openapi::ErrorBody),
    ))]
pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> Result<Json<Listing>, ApiError> {
    let mut fields = query_fields(&uri)?;
    let tenant = tenant_field(&mut fields)?;
    caller.may_act_for(&tenant)?;
    let limit = limit_field(&mut fields, DEFAULT_LIMIT, MAX_LIMIT)?;
    refuse_unknown(&fields, "tenant_id and limit")?;
    let jobs = app.store.recent(&tenant, limit).await?;
    Ok(Json(Listing { jobs }))
}
