//! `POST /catalog/pipeline`: a tenant's whole refresh in one request — a pipeline job and its
//! steps (sync, enrich, pair, or some of them) created in one store step, answered as a start
//! is (202, or every step's report with `wait=true`). The steps and their fields are read by
//! the job core (`jobs::pipeline::plan`); this module only speaks HTTP.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;
use utoipa::ToSchema;

use super::access::RequestId;
use super::auth::Caller;
use super::catalog::launch_pipeline;
use super::error::{ApiError, ErrorBody};
use super::extract::{idempotency_key, on_conflict_field, tenant_field, wait_field, StartFields};
use super::AppState;
use crate::catalog::report::PipelineReport;
use crate::jobs::pipeline::{plan, Plan};
use crate::jobs::runner::QUEUED_STEP;
use crate::jobs::store::Origin;
use crate::jobs::Snapshot;

/// A pipeline's fields, from the query string and the body in any accepted content type.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct PipelineFields {
    /// 1–128 of `A-Z a-z 0-9 _ . -`.
    pub tenant_id: String,
    /// Some of `sync`, `enrich`, `pair`, in that order, each once (default: all three):
    /// comma-separated, repeated, or a JSON array.
    pub steps: Option<Vec<String>>,
    /// sync: a feed (a path inside `FEEDS_DIR`, or an http(s) URL on an allowed host);
    /// repeat the field, or send a JSON array. Required when `steps` has sync.
    pub source: Option<Vec<String>>,
    /// enrich: re-extract products unchanged since their last enrichment.
    pub force: Option<String>,
    /// Hold the request until the pipeline ends (at most `WAIT_MAX_SECONDS`).
    pub wait: Option<String>,
    /// `reject` (default) or `join`: see the `on_conflict` query parameter.
    pub on_conflict: Option<String>,
}

/// Starts a tenant's refresh: a pipeline job whose steps run one after another in the
/// tenant's order, each step a job of its own; a step that fails or is cancelled ends the
/// pipeline and skips the steps after it.
#[utoipa::path(post, path = "/catalog/pipeline", tag = "jobs", operation_id = "start_pipeline",
    params(
        ("tenant_id" = Option<String>, Query, description = "The tenant (here or in the body)."),
        ("steps" = Option<Vec<String>>, Query, description = "Some of `sync`, `enrich`, `pair`, in that order, each once (default: all three); comma-separated or repeated."),
        ("source" = Option<Vec<String>>, Query, description = "sync: a feed; repeatable. Required when `steps` has sync."),
        ("force" = Option<String>, Query, description = "enrich: re-extract unchanged products."),
        ("wait" = Option<String>, Query, description = "Hold the request until the pipeline ends: `true/false/1/0/yes/no/on/off`."),
        ("on_conflict" = Option<String>, Query, description = "`reject` (default: 409 while the tenant's pipeline, or a job of one of its steps' kinds, is active) or `join` (answer with the active pipeline when its parameters are these)."),
        ("Idempotency-Key" = Option<String>, Header, description = "1–255 characters: a retry with the same key answers with the first request's pipeline, marked `Idempotent-Replayed: true`, for `JOB_TTL_SECONDS`."),
    ),
    request_body(description = "The same fields as the query string.", content(
        (PipelineFields = "application/json"),
        (PipelineFields = "application/x-www-form-urlencoded"),
        (PipelineFields = "multipart/form-data"),
    )),
    responses(
        (status = 200, description = "`wait=true` and every step is done: each step's report, by kind.", body = PipelineReport,
            headers(("Location" = String, description = "The pipeline: `/catalog/jobs/{job_id}`."),
                ("Idempotent-Replayed" = String, description = "`true`, only on the answer to a retry of an `Idempotency-Key` (absent otherwise)."))),
        (status = 202, description = "Started, joined or replayed (or still running after `WAIT_MAX_SECONDS` with `wait=true`): the pipeline, its `steps` each with its own job's id, status and percent; poll `Location`.",
            body = Snapshot,
            headers(
                ("Location" = String, description = "Where to poll the pipeline: `/catalog/jobs/{job_id}`."),
                ("Idempotent-Replayed" = String, description = "`true`, only on the answer to a retry of an `Idempotency-Key` (absent otherwise)."),
            )),
        (status = 400, description = "`malformed_body`.", body = ErrorBody),
        (status = 403, description = "`forbidden`: the token is for another tenant than the one named, or may only read (`read:…`).", body = ErrorBody),
        (status = 408, description = "`request_timeout`: the body did not arrive within `REQUEST_TIMEOUT_SECONDS`; nothing was created.", body = ErrorBody),
        (status = 409, description = "`already_running`: the tenant's pipeline, or a job of one of its steps' kinds, is active (its `job_id`); with `on_conflict=join`, one whose parameters differ.", body = ErrorBody),
        (status = 413, description = "`payload_too_large` (beyond `MAX_START_BODY_BYTES`).", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`.", body = ErrorBody),
        (status = 422, description = "`invalid_field` (a bad `steps`), `unknown_field` (a field of no step, or of a step not in `steps`), `missing_field`, `source_not_allowed`, `source_not_found`, `idempotency_key_reused` or `duplicate_key` (with `field`).", body = ErrorBody),
        (status = 429, description = "`rate_limited`: the tenant started `TENANT_CREATES_PER_MINUTE` jobs this minute (a pipeline counts one); nothing was created.", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds until the tenant's minute ends."))),
        (status = 502, description = "`job_failed`: with `wait=true`, the pipeline failed or was cancelled (it is in `job`, its `result` the steps' partial reports).", body = ErrorBody),
        (status = 503, description = "`overloaded`, `shutting_down` or `store_unavailable`; nothing was created.", body = ErrorBody),
    ))]
pub async fn start(
    State(app): State<AppState>,
    caller: Caller,
    RequestId(request_id): RequestId,
    headers: HeaderMap,
    StartFields(mut fields): StartFields,
) -> Result<Response, ApiError> {
    caller.may_change()?;
    let tenant = tenant_field(&mut fields)?;
    caller.may_act_for(&tenant)?;
    let wait = wait_field(&mut fields)?;
    let on_conflict = on_conflict_field(&mut fields)?;
    let key = idempotency_key(&headers)?;
    let plan: Plan = plan(app.runner.registry(), &fields)?;
    let origin = Origin {
        created_by: caller.name.clone(),
        request_id,
        retry_of: None,
    };
    let pipeline = plan.into_new(tenant, origin, key, QUEUED_STEP);
    launch_pipeline(&app, pipeline, on_conflict, wait).await
}
