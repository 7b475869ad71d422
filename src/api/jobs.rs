//! `GET /catalog/jobs/{job_id}` and `GET /catalog/jobs?tenant_id=T&limit=N`.

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::Json;
use serde::Serialize;

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{job_not_found, query_fields, take_single, JobIdPath};
use super::AppState;
use crate::jobs::store::Cancel;
use crate::jobs::{JobId, Snapshot, TenantId};

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
    if !fields.is_empty() {
        return Err(unknown_query_field(&fields, "tenant_id"));
    }
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
    let limit = match take_single(&mut fields, "limit")? {
        None => DEFAULT_LIMIT,
        Some(v) => v
            .as_str()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                ApiError::invalid(
                    "limit",
                    format!("limit must be a whole number from 1 to {MAX_LIMIT}"),
                )
            })?,
    };
    if !fields.is_empty() {
        return Err(unknown_query_field(&fields, "tenant_id and limit"));
    }
    let jobs = app.store.recent(&tenant, limit).await?;
    Ok(Json(Listing { jobs }))
}

fn unknown_query_field(fields: &crate::jobs::registry::Fields, allowed: &str) -> ApiError {
    let name = fields.keys().next().cloned().unwrap_or_default();
    ApiError::UnknownField {
        message: format!("`{name}` is not a parameter here; use {allowed}"),
        field: name,
    }
}

/// Takes the required `tenant_id` field and parses it.
pub fn tenant_field(fields: &mut crate::jobs::registry::Fields) -> Result<TenantId, ApiError> {
    let value = take_single(fields, "tenant_id")?.ok_or_else(|| {
        ApiError::missing("tenant_id", "tenant_id is required, e.g. tenant_id=acme")
    })?;
    let raw = value
        .as_str()
        .ok_or_else(|| ApiError::invalid("tenant_id", "tenant_id must be a string"))?;
    TenantId::parse(raw).map_err(|e| ApiError::bad_id("tenant_id", e))
}
