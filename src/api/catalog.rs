//! `POST /catalog/{kind}`: start a job, answer at once (202) or when it ends (`wait=true`).

use std::fmt::Write as _;

use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::access::RequestId;
use super::answers::{JobStartAnswers, JobStartParams};
use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::extract::{
    idempotency_key, job_not_found, on_conflict_field, tenant_field, wait_field, KindPath,
    OnConflict, StartFields,
};
use super::openapi;
use super::AppState;
use crate::jobs::params::Fields;
use crate::jobs::runner::{Refused, QUEUED_STEP};
use crate::jobs::store::{Created, NewJob, NewPipeline, Origin};
use crate::jobs::{JobId, Kind, Snapshot, Status, TenantId};
use crate::metrics;
use serde_json::Value;

/// Starts a job of `kind` for a tenant. Fields may come from the query string and a JSON,
/// form or multipart body, in any mix; a field the kind does not take is refused.
#[utoipa::path(post, path = "/catalog/{kind}", tag = "jobs", operation_id = "start_job",
    params(
        ("kind" = String, Path, description = "`sync`, `enrich` or `pair`."),
        JobStartParams,
    ),
    request_body(description = "The same fields as the query string.", content(
        (openapi::StartFields = "application/json"),
        (openapi::StartFields = "application/x-www-form-urlencoded"),
        (openapi::StartFields = "multipart/form-data"),
    )),
    responses(
        (status = 404, description = "`unknown_kind` (with `known_kinds`); `not_found` when an `Idempotency-Key` retry's job has expired.", body = ErrorBody),
        JobStartAnswers,
    ))]
pub async fn start(
    State(app): State<AppState>,
    KindPath(raw_kind): KindPath,
    mut request: StartRequest,
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
    let common = request.common()?;
    let params = (spec.prepare)(&request.fields)?;

    let job = NewJob {
        id: JobId::for_tenant(&common.tenant),
        tenant: common.tenant,
        in_order: registry.is_ordered(&kind),
        kind,
        params,
        step: QUEUED_STEP.to_owned(),
        origin: common.origin,
        idempotency_key: common.idempotency_key,
        pipeline: None,
    };
    launch(&app, job, common.on_conflict, common.wait).await
}

/// A start request as every start route reads it: who asks (refused unless it may change
/// things), the request's id and headers, and its fields from the query string and body.
pub struct StartRequest {
    caller: Caller,
    request_id: String,
    /// The `Idempotency-Key` header as read (its refusal is answered after the body's and
    /// the fields' own, as it always was), taken by `common`.
    idempotency_key: Result<Option<String>, ApiError>,
    /// The fields left for the started kind (or the pipeline's steps) once `common` took its own.
    pub fields: Fields,
}

/// What every start reads besides the started kind's own fields.
pub struct StartCommon {
    pub tenant: TenantId,
    pub wait: bool,
    pub on_conflict: OnConflict,
    pub idempotency_key: Option<String>,
    pub origin: Origin,
}

impl FromRequest<AppState> for StartRequest {
    type Rejection = ApiError;

    /// The caller, then the body (401, then 400/408/413/415), then whether it may change (403).
    async fn from_request(req: Request, app: &AppState) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = req.into_parts();
        let caller = Caller::from_request_parts(&mut parts, app).await?;
        let Ok(RequestId(request_id)) = RequestId::from_request_parts(&mut parts, app).await;
        let idempotency_key = idempotency_key(&parts.headers);
        let StartFields(fields) =
            StartFields::from_request(Request::from_parts(parts, body), app).await?;
        caller.may_change()?;
        Ok(Self {
            caller,
            request_id,
            idempotency_key,
            fields,
        })
    }
}

impl StartRequest {
    /// Takes the tenant (which the caller must be allowed to act for), `wait`, `on_conflict`
    /// and the `Idempotency-Key` header, and names where the start came from.
    pub fn common(&mut self) -> Result<StartCommon, ApiError> {
        let tenant = tenant_field(&mut self.fields)?;
        self.caller.may_act_for(&tenant)?;
        Ok(StartCommon {
            tenant,
            wait: wait_field(&mut self.fields)?,
            on_conflict: on_conflict_field(&mut self.fields)?,
            idempotency_key: std::mem::replace(&mut self.idempotency_key, Ok(None))?,
            origin: Origin {
                created_by: self.caller.name.clone(),
                request_id: self.request_id.clone(),
                retry_of: None,
            },
        })
    }
}

/// Creates `job` (a start's, or a retry's) and answers as a start does: 202, or the outcome
/// with `wait`; 409 when the kind is taken (joined with `on_conflict=join`), 429/503 when
/// refused. One place decides what a create's answer means over HTTP.
pub(crate) async fn launch(
    app: &AppState,
    job: NewJob,
    on_conflict: OnConflict,
    wait: bool,
) -> Result<Response, ApiError> {
    admit(app)?;
    let joining = joining(on_conflict, &job.params);
    let created = app.runner.create(job).await?;
    respond(app, created, joining.as_ref(), wait).await
}

/// Creates a pipeline and its steps (a start's, or a retry's) and answers as a start does:
/// the pipeline is a job of its own, its steps counted as jobs of their kinds.
pub(crate) async fn launch_pipeline(
    app: &AppState,
    pipeline: NewPipeline,
    on_conflict: OnConflict,
    wait: bool,
) -> Result<Response, ApiError> {
    admit(app)?;
    let joining = joining(on_conflict, &pipeline.job.params);
    let kinds: Vec<Kind> = pipeline.steps.iter().map(|(s, _)| s.kind.clone()).collect();
    let created = app.store.create_pipeline(pipeline).await?;
    if let Created::Created(snapshot, _) = &created {
        count_pipeline_created(&snapshot.kind, &kinds);
    }
    respond(app, created, joining.as_ref(), wait).await
}

/// Counts a created pipeline: itself, and its steps as jobs of their kinds. (A job is
/// counted by the runner's create, which made it.)
pub(crate) fn count_pipeline_created(pipeline: &Kind, steps: &[Kind]) {
    for kind in steps.iter().chain([pipeline]) {
        metrics::job_created(kind.as_str());
    }
}

/// The parameters a start joins an active job with (`on_conflict=join`), else None: a copy
/// is kept only for a start that may join.
fn joining(on_conflict: OnConflict, params: &Value) -> Option<Value> {
    match on_conflict {
        OnConflict::Join => Some(params.clone()),
        OnConflict::Reject => None,
    }
}

/// Refuses a new job while the service shuts down, counted as a refusal.
fn admit(app: &AppState) -> Result<(), ApiError> {
    app.runner
        .admit()
        .inspect_err(|r| metrics::job_refused(refusal_reason(r)))?;
    Ok(())
}

/// What a create's answer means over HTTP: 202 (or the outcome with `wait`) for a created,
/// replayed or joined job (`joining`: the parameters it joins with); 409, 422, 429 or 503
/// otherwise.
async fn respond(
    app: &AppState,
    created: Created,
    joining: Option<&Value>,
    wait: bool,
) -> Result<Response, ApiError> {
    let snapshot = match created {
        Created::Created(snapshot, took_over) => {
            // Counted where it was made: the runner's create (`RunObserver::created`), a
            // pipeline's in `launch_pipeline`.
            super::jobs::count_taken_over(app, &took_over).await;
            *snapshot
        }
        Created::Replayed(id) => {
            let answer = answer(app, existing(app, id).await?, wait).await;
            return Ok(replayed(answer.unwrap_or_else(IntoResponse::into_response)));
        }
        Created::KeyReused(id) => return Err(ApiError::IdempotencyKeyReused(id)),
        Created::AlreadyRunning(holder) => match joining {
            Some(params) => joinable(app, holder, params).await?,
            None => {
                metrics::job_refused("already_running");
                return Err(ApiError::AlreadyRunning {
                    job: holder,
                    params_differ: false,
                });
            }
        },
        Created::QueueFull => {
            metrics::job_refused("overloaded");
            return Err(ApiError::Overloaded);
        }
        Created::RateLimited(wait) => {
            metrics::job_refused("rate_limited");
            return Err(ApiError::RateLimited(wait));
        }
    };
    answer(app, snapshot, wait).await
}

/// The active job a `on_conflict=join` request joins: the lock holder, when its parameters
/// are the request's; else 409 `already_running` saying they differ.
async fn joinable(app: &AppState, holder: JobId, params: &Value) -> Result<Snapshot, ApiError> {
    match app.store.get(&holder).await? {
        Some(active) if active.params == *params => Ok(active),
        _ => {
            metrics::job_refused("already_running");
            Err(ApiError::AlreadyRunning {
                job: holder,
                params_differ: true,
            })
        }
    }
}

/// A job the store named (a replay's): gone since is answered as an unknown job.
async fn existing(app: &AppState, id: JobId) -> Result<Snapshot, ApiError> {
    app.store.get(&id).await?.ok_or_else(|| job_not_found(&id))
}

/// The answer for a job this request started (or replays, or joined): 202 at once, or with
/// `wait=true` its outcome once it ends.
async fn answer(app: &AppState, snapshot: Snapshot, wait: bool) -> Result<Response, ApiError> {
    if !wait {
        return Ok(accepted(snapshot));
    }
    // The job may run on any replica: its end is learnt from the store's events. A replica
    // shutting down answers its waiting clients once its grace period is over (its jobs given
    // back), before it closes their connections.
    let id = snapshot.job_id;
    let ended = tokio::select! {
        ended = tokio::time::timeout(app.wait_max, app.runner.wait_end(id)) => ended.ok(),
        () = app.runner.stopped() => {
            // The embedded store dies with this process: its job will not go on elsewhere.
            if !app.store.is_durable() {
                return Err(ApiError::LostWithProcess(id));
            }
            None
        }
    };
    // Outlasted WAIT_MAX_SECONDS or this replica stops: the job as it stands now (a store
    // out of reach meanwhile was waited out). A stopping replica hears no more ends, so one
    // that ended in its grace period is answered as ended; one still active, as if wait
    // were false (it goes on). Never the snapshot of its create: the job has moved on.
    let job = match ended {
        Some(job) => job,
        None => match app.store.get(&id).await {
            Ok(Some(job)) => job,
            Ok(None) | Err(_) => return Err(ApiError::WaitUnread(id)),
        },
    };
    match job.status {
        Status::Done => {
            let location = job_location(&job.job_id);
            Ok(with_location(
                (StatusCode::OK, Json(job.result)).into_response(),
                &location,
            ))
        }
        status if status.is_active() => Ok(accepted(job)),
        _ => Err(ApiError::JobFailed(Box::new(job))),
    }
}

/// The header that tells a client its request was answered from the first one's job.
const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// A replay's answer: the first request's, marked `Idempotent-Replayed: true`.
fn replayed(mut response: Response) -> Response {
    response.headers_mut().insert(
        HeaderName::from_static(IDEMPOTENT_REPLAYED),
        HeaderValue::from_static("true"),
    );
    response
}

/// 202 with the job's snapshot and where to poll it.
pub(crate) fn accepted(snapshot: Snapshot) -> Response {
    let location = job_location(&snapshot.job_id);
    with_location(snapshot_answer(&snapshot), &location)
}

/// What a new job's snapshot takes as JSON, with room to spare: ~650 bytes with a short
/// tenant id. axum's `Json` starts at 128 bytes and grows three times on the way.
const SNAPSHOT_BYTES: usize = 1024;

/// A 202 with `snapshot` as its JSON body, the same bytes and `Content-Type` as axum's `Json`
/// gives, written field by field (`snapshot_json`) into a buffer sized for it once.
fn snapshot_answer(snapshot: &Snapshot) -> Response {
    let mut body = Vec::with_capacity(SNAPSHOT_BYTES);
    super::snapshot_json::write_snapshot(&mut body, snapshot);
    let json = HeaderValue::from_static(JSON);
    (StatusCode::ACCEPTED, [(header::CONTENT_TYPE, json)], body).into_response()
}

/// The `Content-Type` of a JSON answer, as axum's `Json` names it.
const JSON: &str = "application/json";

/// The path every job's `Location` starts with.
const JOBS_PATH: &str = "/catalog/jobs/";

/// Where a job is read: `/catalog/jobs/{job_id}`.
fn job_location(id: &JobId) -> String {
    let mut location = String::with_capacity(JOBS_PATH.len() + 36);
    location.push_str(JOBS_PATH);
    // Writing to a `String` never fails.
    let _ = write!(location, "{id}");
    location
}

/// The response with a `Location` header naming the job (a 202 to poll, a waited 200 to
/// find the job again: the body of that one is the report, not the job).
fn with_location(mut response: Response, location: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(location) {
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
