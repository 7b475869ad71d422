//! `POST /catalog/{kind}`: start a job, answer at once (202) or when it ends (`wait=true`).

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::extract::{take_single, StartFields};
use super::jobs::tenant_field;
use super::AppState;
use crate::jobs::registry::parse_bool;
use crate::jobs::runner::QUEUED_STEP;
use crate::jobs::store::{Created, NewJob};
use crate::jobs::{JobId, Kind, Snapshot, Status};

pub async fn start(
    State(app): State<AppState>,
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
    StartFields(mut fields): StartFields,
) -> Result<Response, ApiError> {
    let raw_kind = path.map(|Path(p)| p).unwrap_or_default();
    let registry = app.runner.registry();
    let Some((kind, spec)) = Kind::parse(&raw_kind)
        .ok()
        .and_then(|k| registry.get(&k).cloned().map(|spec| (k, spec)))
    else {
        return Err(ApiError::UnknownKind {
            kind: raw_kind,
            known: registry.names().map(str::to_owned).collect(),
        });
    };
    let tenant = tenant_field(&mut fields)?;
    let wait = match take_single(&mut fields, "wait")? {
        None => false,
        Some(v) => parse_bool(&v).ok_or_else(|| {
            ApiError::invalid(
                "wait",
                "wait must be one of true, false, 1, 0, yes, no, on, off",
            )
        })?,
    };
    let params = (spec.prepare)(&fields)?;

    app.runner.admit()?;
    let job = NewJob {
        id: JobId::new(),
        tenant,
        kind,
        params,
        step: QUEUED_STEP.to_owned(),
    };
    let snapshot = match app.store.create(job).await? {
        Created::AlreadyRunning(holder) => return Err(ApiError::AlreadyRunning(holder)),
        Created::QueueFull => return Err(ApiError::Overloaded),
        Created::Created(snapshot) => *snapshot,
    };
    if !wait {
        return Ok(accepted(snapshot));
    }
    // The job may run on any replica: its end is learnt from the store's events.
    match tokio::time::timeout(app.wait_max, app.runner.wait_end(snapshot.job_id)).await {
        Ok(Ok(job)) if job.status == Status::Done => {
            Ok((StatusCode::OK, Json(job.result)).into_response())
        }
        Ok(Ok(job)) => Err(ApiError::JobFailed(Box::new(job))),
        // Outlasted WAIT_MAX_SECONDS (or the store went away): answer as if wait were false.
        // The job goes on either way.
        Ok(Err(_)) | Err(_) => {
            let current = app
                .store
                .get(&snapshot.job_id)
                .await
                .ok()
                .flatten()
                .unwrap_or(snapshot);
            Ok(accepted(current))
        }
    }
}

/// 202 with the job's snapshot and where to poll it.
fn accepted(snapshot: Snapshot) -> Response {
    let location = format!("/catalog/jobs/{}", snapshot.job_id);
    let mut response = (StatusCode::ACCEPTED, Json(snapshot)).into_response();
    if let Ok(v) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, v);
    }
    response
}
