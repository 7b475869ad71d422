//! `POST /catalog/pipeline`: a tenant's whole refresh in one request — a pipeline job and its
//! steps (sync, enrich, pair, or some of them) created in one store step, answered as a start
//! is (202, or every step's report with `wait=true`). The steps and their fields are read by
//! the job core (`jobs::pipeline::plan`); this module only speaks HTTP.

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use utoipa::ToSchema;

use super::answers::PipelineStartAnswers;
use super::catalog::{launch_pipeline, StartRequest};
use super::error::ApiError;
use super::AppState;
use crate::catalog::report::PipelineReport;
use crate::jobs::pipeline::{plan, Plan};
use crate::jobs::runner::QUEUED_STEP;

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
        PipelineStartAnswers,
    ))]
pub async fn start(
    State(app): State<AppState>,
    mut request: StartRequest,
) -> Result<Response, ApiError> {
    let common = request.common()?;
    let plan: Plan = plan(app.runner.registry(), &request.fields)?;
    let pipeline = plan.into_new(
        common.tenant,
        common.origin,
        common.idempotency_key,
        QUEUED_STEP,
    );
    launch_pipeline(&app, pipeline, common.on_conflict, common.wait).await
}
