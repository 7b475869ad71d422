//! `GET /catalog/jobs/{job_id}` and `GET /catalog/jobs?tenant_id=T&limit=N`.

use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::Json;
use serde::Serialize;

use super::error::ApiError;
use super::extract::{query_fields, take_single};
use super::openapi;
use super::AppState;
use crate::jobs::registry::only_fields;
use crate::jobs::store::Cancel;
use crate::jobs::{JobId, Snapshot, TenantId};

const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 100;

/// A job as it is now: status, a percent that never goes backwards, the step, and the
/// report once done.
#[utoipa::path(get, path = "/catalog/jobs/{job_id}", tag = "jobs",
    params(("job_id" = String, Path, description = "The id a start answered with.")),
    responses(
        (status = 200, description = "The job.", body = openapi::JobSnapshot),
        (status = 404, description = "`not_found`: no job has this id (or it expired after `JOB_TTL_SECONDS`).", body = openapi::ErrorBody),
        (status = 503, description = "`store_unavailable`.", body = openapi::ErrorBody),
    ))]
pub async fn get_one(
    State(app): State<AppState>,
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Json<Snapshot>, ApiError> {
    let raw = path.map(|Path(p)| p).unwrap_or_default();
    let not_found = || ApiError::NotFound(format!("no job has the id `{raw}`"));
    let id = JobId::parse(&raw).map_err(|_| not_found())?;
    app.store.get(&id).await?.map(Json).ok_or_else(not_found)
}

#[derive(Serialize)]
pub struct Listing {
    jobs: Vec<Snapshot>,
}

/// `POST /catalog/jobs/{job_id}/cancel`: asks an active job to stop. 202 with the job (now
/// `cancelling`); 409 `not_active` when it has already ended; 404 when there is no such job.
/// Asking twice is harmless.
#[utoipa::path(post, path = "/catalog/jobs/{job_id}/cancel", tag = "jobs",
    params(("job_id" = String, Path, description = "The job to stop.")),
    responses(
        (status = 202, description = "Asked: the job reads `cancelling`, then `cancelled` at its next safe point.", body = openapi::JobSnapshot),
        (status = 404, description = "`not_found`.", body = openapi::ErrorBody),
        (status = 409, description = "`not_active`: the job has already ended (it is in `job`).", body = openapi::ErrorBody),
        (status = 503, description = "`store_unavailable`.", body = openapi::ErrorBody),
    ))]
pub async fn cancel(
    State(app): State<AppState>,
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<(StatusCode, Json<Snapshot>), ApiError> {
    let raw = path.map(|Path(p)| p).unwrap_or_default();
    let not_found = || ApiError::NotFound(format!("no job has the id `{raw}`"));
    let id = JobId::parse(&raw).map_err(|_| not_found())?;
    let answer = app.store.cancel(&id).await?;
    let snapshot = app.store.get(&id).await?.ok_or_else(not_found)?;
    match answer {
        Cancel::Requested => Ok((StatusCode::ACCEPTED, Json(snapshot))),
        Cancel::NotActive => Err(ApiError::NotActive(Box::new(snapshot))),
        Cancel::Missing => Err(not_found()),
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
        (status = 422, description = "`missing_field`, `invalid_field` or `unknown_field` (with `field`).", body = openapi::ErrorBody),
        (status = 503, description = "`store_unavailable`.", body = openapi::ErrorBody),
    ))]
pub async fn list(State(app): State<AppState>, uri: Uri) -> Result<Json<Listing>, ApiError> {
    let mut fields = query_fields(&uri)?;
    let tenant = tenant_field(&mut fields)?;
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
    only_fields(&fields, &[]).map_err(|_| unknown_query_field(&fields))?;
    let jobs = app.store.recent(&tenant, limit).await?;
    Ok(Json(Listing { jobs }))
}

fn unknown_query_field(fields: &crate::jobs::registry::Fields) -> ApiError {
    let name = fields.keys().next().cloned().unwrap_or_default();
    ApiError::UnknownField {
        message: format!("`{name}` is not a parameter here; use tenant_id and limit"),
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
