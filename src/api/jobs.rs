//! `GET /catalog/jobs/{job_id}` and `GET /catalog/jobs?tenant_id=T&limit=N`.

use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::Json;
use serde::Serialize;

use super::error::ApiError;
use super::extract::{query_fields, take_single};
use super::AppState;
use crate::jobs::registry::only_fields;
use crate::jobs::store::Cancel;
use crate::jobs::{JobId, Snapshot, TenantId};

const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 100;

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
