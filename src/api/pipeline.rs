//! `POST /catalog/pipeline`: a tenant's whole refresh in one request — a pipeline job and its
//! steps (sync, enrich, pair, or some of them) created in one store step, answered as a start
//! is (202, or every step's report with `wait=true`). The steps and their fields are read by
//! the job core (`jobs::pipeline::plan`); this module only speaks HTTP.

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use utoipa::ToSchema;

use super::answers::{PipelineStartAnswers, PipelineStartParams};
use super::catalog::{launch_pipeline, StartRequest};
use super::error::ApiError;
use super::AppState;
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
    /// pair: pair every product with word weights counted afresh, even when an incremental
    /// pair could.
    pub full: Option<String>,
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
        ("steps" = Option<Vec<String>>, Query, description = "Some of `sync`, `enrich`, `pair`, in that order, each once (default: all three); comma-separated or repeated."),
        PipelineStartParams,
    ),
    request_body(description = "The same fields as the query string.", content(
        (PipelineFields = "application/json"),
        (PipelineFields = "application/x-www-form-urlencoded"),
        (PipelineFields = "multipart/form-data"),
    )),
    responses(PipelineStartAnswers))]
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
