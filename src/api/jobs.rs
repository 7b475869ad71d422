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
use super::AppState;
use crate::jobs::store::Cancel;
use crate::jobs::{JobId, Snapshot};

const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 100;

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
pub async fn cancel(
    State(app): State<AppState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
    uri: Uri,
) -> Result<(StatusCode, Json<Snapshot>), ApiError> {
    visible_job(&app, &caller, &id, &uri).await?;
    let answer = app.store.cancel(&id).await?;
    let snapshot = app
        .store
        .get(&id)
        .await?
        .ok_or_else(|| job_not_found(&id))?;
    match answer {
        Cancel::Requested => Ok((StatusCode::ACCEPTED, Json(snapshot))),
        Cancel::NotActive => Err(ApiError::NotActive(Box::new(snapshot))),
        Cancel::Missing => Err(job_not_found(&id)),
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
    let snapshot = app.store.get(id).await?.ok_or_else(|| job_not_found(id))?;
    let theirs =
        caller.sees(&snapshot.tenant_id) && named.is_none_or(|tenant| tenant == snapshot.tenant_id);
    if theirs {
        Ok(snapshot)
    } else {
        Err(job_not_found(id))
    }
}

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
