//! `POST /catalog/{kind}`: start a job, answer at once (202) or when it ends (`wait=true`).

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{tenant_field, wait_field, KindPath, StartFields};
use super::openapi;
use super::AppState;
use crate::jobs::runner::{Refused, QUEUED_STEP};
use crate::jobs::store::{Created, NewJob};
use crate::jobs::{JobId, Kind, Snapshot, Status};
use crate::metrics;

/// Starts a job of `kind` for a tenant. Fields may come from the query string and a JSON,
/// form or multipart body, in any mix; a field the kind does not take is refused.
#[utoipa::path(post, path = "/catalog/{kind}", tag = "jobs",
    params(
        ("kind" = String, Path, description = "`sync`, `enrich` or `pair`."),
        ("tenant_id" = Option<String>, Query, description = "The tenant (here or in the body)."),
        ("wait" = Option<String>, Query, description = "Hold the request until the job ends: `true/false/1/0/yes/no/on/off`."),
        ("source" = Option<Vec<String>>, Query, description = "sync: a feed; repeatable."),
        ("force" = Option<String>, Query, description = "enrich: re-extract unchanged products."),
    ),
    request_body(description = "The same fields as the query string.", content(
        (openapi::StartFields = "application/json"),
        (openapi::StartFields = "application/x-www-form-urlencoded"),
        (openapi::StartFields = "multipart/form-data"),
    )),
    responses(
        (status = 200, description = "`wait=true` and the job is done: its report.", body = openapi::JobReport),
        (status = 202, description = "Started (or still running after `WAIT_MAX_SECONDS` with `wait=true`): the job; poll `Location`.",
            body = openapi::JobSnapshot,
            headers(("Location" = String, description = "Where to poll the job: `/catalog/jobs/{job_id}`."))),
        (status = 400, description = "`malformed_body`.", body = openapi::ErrorBody),
        (status = 404, description = "`unknown_kind` (with `known_kinds`).", body = openapi::ErrorBody),
        (status = 409, description = "`already_running`: a job of this kind is active for the tenant (with its `job_id`).", body = openapi::ErrorBody),
        (status = 413, description = "`payload_too_large` (beyond `MAX_START_BODY_BYTES`).", body = openapi::ErrorBody),
        (status = 415, description = "`unsupported_media_type`.", body = openapi::ErrorBody),
        (status = 422, description = "`missing_field`, `invalid_field`, `unknown_field`, `source_not_allowed` or `source_not_found` (with `field`).", body = openapi::ErrorBody),
        (status = 502, description = "`job_failed`: with `wait=true`, the job failed or was cancelled (it is in `job`).", body = openapi::ErrorBody),
        (status = 503, description = "`overloaded`, `shutting_down` or `store_unavailable`; nothing was created.", body = openapi::ErrorBody),
    ))]
pub async fn start(
    State(app): State<AppState>,
    caller: Caller,
    KindPath(raw_kind): KindPath,
    StartFields(mut fields): StartFields,
) -> Result<Response, ApiError> {
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
    caller.may_act_for(&tenant)?;
    let wait = wait_field(&mut fields)?;
    let params = (spec.prepare)(&fields)?;

    app.runner
        .admit()
        .inspect_err(|r| metrics::job_refused(refusal_reason(r)))?;
    let job = NewJob {
        id: JobId::new(),
        tenant,
        kind,
        params,
        step: QUEUED_STEP.to_owned(),
    };
    let snapshot = match app.store.create(job).await? {
        Created::AlreadyRunning(holder) => {
            metrics::job_refused("already_running");
            return Err(ApiError::AlreadyRunning(holder));
        }
        Created::QueueFull => {
            metrics::job_refused("overloaded");
            return Err(ApiError::Overloaded);
        }
        Created::Created(snapshot) => *snapshot,
    };
    metrics::job_created(snapshot.kind.as_str());
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

/// The `reason` label of a refusal, in the error code's words.
fn refusal_reason(refused: &Refused) -> &'static str {
    match refused {
        Refused::ShuttingDown => "shutting_down",
        Refused::Overloaded => "overloaded",
    }
}
