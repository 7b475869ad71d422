//! `GET /catalog/jobs/{job_id}`, `GET /catalog/jobs?tenant_id=T&limit=N` (or `ids=A,B,…`,
//! many rows read in one call), and a job's cancel and retry.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::answers::{CreateRefusals, JobNotVisible, JobPath, NoBody, ReadOnly, StoreUnavailable};
use super::auth::Caller;
use super::call::Call;
use super::error::{ApiError, ErrorBody};
use super::extract::{job_not_found, named_tenant, refuse_unknown, InPath, OnConflict};
use super::job_filter::{take_ids, JobFilter};
use super::AppState;
use crate::config::tokens::Scope;
use crate::jobs::cache::Finished;
use crate::jobs::pipeline::{Plan, PIPELINE_KIND};
use crate::jobs::runner::QUEUED_STEP;
use crate::jobs::store::{Cancel, NewJob, NewPipeline, Origin, Outcome};
use crate::jobs::{JobId, Snapshot, Status, TenantId};
use serde_json::Value;

const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 100;
/// The longest `Retry-After` an active job's answer suggests: an estimate further out than
/// this is too unsure to wait on, and a client polling twice a minute misses little.
const RETRY_AFTER_CAP_SECS: u64 = 30;
/// The shortest `Retry-After`: HTTP counts it in whole seconds, and sooner is only load.
const RETRY_AFTER_MIN_SECS: u64 = 1;
/// `Retry-After` while there is no estimate (queued, or no progress yet): soon enough to
/// see the job start, far enough not to hammer the store.
const RETRY_AFTER_UNKNOWN_SECS: u64 = 2;

/// A job as it is now: status, a percent that never goes backwards, the step, and the
/// report once done.
#[utoipa::path(get, path = "/catalog/jobs/{job_id}", tag = "jobs", operation_id = "get_job",
    params(JobPath),
    responses(
        (status = 200, description = "The job. While it is active the answer carries `Retry-After`: when to poll again, from `eta_seconds` (1–30 s; 2 s while there is no estimate).", body = Snapshot,
            headers(("Retry-After" = u64, description = "Active jobs only: seconds until polling again is worth it."))),
        JobNotVisible, StoreUnavailable,
    ))]
pub async fn get_one(InPath(id): InPath<MaybeJobId>, call: Call) -> Result<Response, ApiError> {
    let named = checked_query(&call)?;
    let id = id?;
    // A finished job the store's cache keeps is answered with the JSON kept with it.
    if let Some(kept) = call.app.store.finished_kept(&id) {
        return match theirs(&call.caller, &kept.snapshot.tenant_id, named.as_ref()) {
            true => Ok(kept_json(kept)),
            false => Err(job_not_found(&id)),
        };
    }
    // A job answered quickly here is read once its end is recorded, not a moment before.
    call.app.runner.quick_end(&id).await;
    let snapshot = visible(&call.app, &call.caller, &id, named).await?;
    let retry_after = snapshot
        .status
        .is_active()
        .then(|| retry_after_secs(snapshot.eta_seconds));
    let mut response = Json(snapshot).into_response();
    if let Some(secs) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    Ok(response)
}

/// A kept finished job's answer: its JSON as `Json` renders it, with the same content type
/// (a finished job has no `Retry-After`), sent without a copy.
fn kept_json(kept: Arc<Finished>) -> Response {
    let json = HeaderValue::from_static("application/json");
    let body = Body::from(Bytes::from_owner(KeptJson(kept)));
    ([(header::CONTENT_TYPE, json)], body).into_response()
}

/// The JSON of a kept job, as a response body's bytes.
struct KeptJson(Arc<Finished>);

impl AsRef<[u8]> for KeptJson {
    fn as_ref(&self) -> &[u8] {
        self.0.json()
    }
}

/// When an active job is worth polling again: its estimate, held to
/// [`RETRY_AFTER_MIN_SECS`]–[`RETRY_AFTER_CAP_SECS`], or [`RETRY_AFTER_UNKNOWN_SECS`].
pub fn retry_after_secs(eta_seconds: Option<u64>) -> u64 {
    eta_seconds
        .unwrap_or(RETRY_AFTER_UNKNOWN_SECS)
        .clamp(RETRY_AFTER_MIN_SECS, RETRY_AFTER_CAP_SECS)
}

/// `POST /catalog/jobs/{job_id}/retry`: a new job with the tenant, kind and parameters of a
/// job that ended (`done`, `failed`, `cancelled` or `lost`), recorded as its `retry_of`.
/// Answered as a start is (202 + `Location`; 409 `already_running` while the kind is taken).
#[utoipa::path(post, path = "/catalog/jobs/{job_id}/retry", tag = "jobs", operation_id = "retry_job",
    params(JobPath),
    responses(
        (status = 202, description = "The new job (its `retry_of` names the old one); poll `Location`.", body = Snapshot,
            headers(("Location" = String, description = "Where to poll the new job: `/catalog/jobs/{job_id}`."))),
        (status = 409, description = "`still_active`: the job has not ended (it is in `job`, its id in `job_id`); `already_running`: another job of this tenant and kind is active (its `job_id`).", body = ErrorBody),
        ReadOnly, JobNotVisible, NoBody, CreateRefusals,
    ))]
pub async fn retry(InPath(id): InPath<MaybeJobId>, call: Call) -> Result<Response, ApiError> {
    call.caller.may_change()?;
    let old = visible_job(&call, id).await?;
    if old.status.is_active() {
        return Err(ApiError::NotEnded(Box::new(old)));
    }
    // The store records the retry on the old job (`retried_by`, `retried_as`) in the step
    // that creates the new one: no retry starts without it.
    let Call {
        app,
        caller,
        request_id,
        ..
    } = call;
    match Retry::of(&app, old, &caller, request_id, None) {
        Retry::Pipeline(p) => {
            super::catalog::launch_pipeline(&app, p, OnConflict::Reject, false).await
        }
        Retry::Job(job) => super::catalog::launch(&app, job, OnConflict::Reject, false).await,
    }
}

/// What retries an ended job: a new job with its tenant, kind and parameters, or a new
/// pipeline planned as the old one was. One place decides it, for the single and the bulk
/// retry.
pub(super) enum Retry {
    Job(NewJob),
    Pipeline(NewPipeline),
}

impl Retry {
    /// The retry of `old`, started by `caller` in request `request_id`, under the
    /// idempotency key `key` (a bulk call's, made per job).
    pub(super) fn of(
        app: &AppState,
        old: Snapshot,
        caller: &Caller,
        request_id: String,
        key: Option<String>,
    ) -> Self {
        let origin = Origin {
            created_by: caller.name.clone(),
            request_id,
            retry_of: Some(old.job_id),
        };
        if old.kind.as_str() == PIPELINE_KIND {
            let plan = Plan::retry_of(app.runner.registry(), &old);
            return Retry::Pipeline(plan.into_new(old.tenant_id, origin, key, QUEUED_STEP));
        }
        Retry::Job(NewJob {
            id: JobId::for_tenant(&old.tenant_id),
            tenant: old.tenant_id,
            in_order: app.runner.registry().is_ordered(&old.kind),
            kind: old.kind,
            params: old.params,
            step: QUEUED_STEP.to_owned(),
            origin,
            idempotency_key: key,
            pipeline: None,
        })
    }
}

/// A page of jobs.
#[derive(Serialize, ToSchema)]
#[schema(as = JobListing)]
pub struct Listing {
    /// Newest first.
    jobs: Vec<Snapshot>,
    /// The `cursor` of the next page; null on the last one.
    next_cursor: Option<String>,
}

/// A 202 with the job as it is now.
type Accepted = (StatusCode, Json<Snapshot>);

/// `POST /catalog/jobs/{job_id}/cancel`: asks an active job to stop. 202 with the job (now
/// `cancelling`); 409 `not_active` when it has already ended; 404 when there is no such job
/// or it is not the caller's. Asking twice is harmless.
#[utoipa::path(post, path = "/catalog/jobs/{job_id}/cancel", tag = "jobs", operation_id = "cancel_job",
    params(JobPath),
    responses(
        (status = 202, description = "Asked: the job reads `cancelling`, then `cancelled` at its next safe point.", body = Snapshot),
        (status = 409, description = "`not_active`: the job has already ended (it is in `job`).", body = ErrorBody),
        ReadOnly, JobNotVisible, NoBody, StoreUnavailable,
    ))]
pub async fn cancel(InPath(id): InPath<MaybeJobId>, call: Call) -> Result<Accepted, ApiError> {
    call.caller.may_change()?;
    let before = visible_job(&call, id).await?;
    let id = before.job_id;
    let Call { app, caller, .. } = call;
    let answer = app.store.cancel(&id, &caller.name).await?;
    let snapshot = app
        .store
        .get(&id)
        .await?
        .ok_or_else(|| job_not_found(&id))?;
    match answer {
        Cancel::Requested => {
            count_if_ended_at_once(&before, &snapshot);
            count_pipeline_if_ended(&app, &snapshot).await;
            Ok((StatusCode::ACCEPTED, Json(snapshot)))
        }
        Cancel::NotActive => Err(ApiError::NotActive(Box::new(snapshot))),
        Cancel::Missing => Err(job_not_found(&id)),
    }
}

/// A job cancelled while queued, or while it read `lost` (no run holds it, and the sweep
/// that left it lost counted no end), ends `cancelled` in the cancel itself and no runner sees
/// it, so this answer is the one place that can count it as finished (a pipeline with the
/// steps it skipped).
pub(super) fn count_if_ended_at_once(before: &Snapshot, after: &Snapshot) {
    let at_once = matches!(before.status, Status::Queued | Status::Lost);
    if at_once && after.status == Status::Cancelled {
        crate::metrics::job_finished(after.kind.as_str(), &Outcome::Cancelled(Value::Null));
        for (kind, outcome) in crate::jobs::pipeline::skipped_ends(after) {
            crate::metrics::job_finished(kind.as_str(), &outcome);
        }
    }
}

/// A step cancelled while it waited ends its pipeline (and skips the steps after it) in the
/// same store step, which no runner sees either: counted here, once.
pub(super) async fn count_pipeline_if_ended(app: &AppState, step: &Snapshot) {
    if step.status.is_finished() {
        count_pipeline_ended_with(app, step).await;
    }
}

/// Counts `step`'s pipeline's end (with the steps it skipped) if it ended in the store step
/// that ended `step` or left it `lost` for good.
async fn count_pipeline_ended_with(app: &AppState, step: &Snapshot) {
    let Some(id) = step.pipeline_id else {
        return;
    };
    if let Ok(Some(pipeline)) = app.store.get(&id).await {
        for (kind, outcome) in crate::jobs::pipeline::ends_counted_with(&pipeline, step) {
            crate::metrics::job_finished(kind.as_str(), &outcome);
        }
    }
}

/// A create that took over stale holders' locks ended each (it reads `lost`) and its
/// pipeline in the same store step, which no runner and no recovery sweep sees: the pipeline's
/// end, with the steps it skipped, is counted here, once.
pub(super) async fn count_taken_over(app: &AppState, took_over: &[JobId]) {
    for id in took_over {
        if let Ok(Some(step)) = app.store.get(id).await {
            count_pipeline_ended_with(app, &step).await;
        }
    }
}

/// A `{job_id}` whose refusal (a 404, as an unknown id) waits until the query is checked.
pub(super) type MaybeJobId = Result<JobId, ApiError>;

/// The job, if it exists, the caller may see it, and it belongs to the `tenant_id` the query
/// names (when it names one). The query is checked first: a bad one is 422 whatever the id.
/// Every refusal of the id is the same 404, so an id leaks nothing.
async fn visible_job(call: &Call, id: MaybeJobId) -> Result<Snapshot, ApiError> {
    let named = checked_query(call)?;
    visible(&call.app, &call.caller, &id?, named).await
}

/// The tenant a job route's query names, if any: `tenant_id` is its only field.
fn checked_query(call: &Call) -> Result<Option<TenantId>, ApiError> {
    let mut fields = call.query()?;
    let named = named_tenant(&mut fields)?;
    refuse_unknown(&fields, "tenant_id")?;
    Ok(named)
}

/// Whether `caller` may see a job of `tenant` asked for under tenant `named` (if any).
fn theirs(caller: &Caller, tenant: &TenantId, named: Option<&TenantId>) -> bool {
    caller.sees(tenant) && named.is_none_or(|named| named == tenant)
}

/// The job, if it exists, the caller may see it, and it belongs to tenant `named` (when a
/// request names one). Every refusal is the same 404, so an id leaks nothing.
pub(super) async fn visible(
    app: &AppState,
    caller: &Caller,
    id: &JobId,
    named: Option<TenantId>,
) -> Result<Snapshot, ApiError> {
    let snapshot = app.store.get(id).await?.ok_or_else(|| job_not_found(id))?;
    if theirs(caller, &snapshot.tenant_id, named.as_ref()) {
        Ok(snapshot)
    } else {
        Err(job_not_found(id))
    }
}

/// A tenant's jobs, newest first; or, for an operator, every tenant's jobs.
#[utoipa::path(get, path = "/catalog/jobs", tag = "jobs", operation_id = "list_jobs",
    params(
        ("tenant_id" = Option<String>, Query, description = "The tenant: its recent jobs (the last 100 it created). Left out, with an operator token (`*`, `read:*`) or on a service without tokens: every tenant's jobs, ended ones included — the newest 10,000 jobs of every tenant and every active job, at most 1,000 index entries examined a page (a page not full by then is short, with a `next_cursor`). A tenant token must name its tenant (403 otherwise)."),
        ("status" = Option<String>, Query, description = "Only jobs in these statuses: one or more of `queued`, `running`, `cancelling`, `done`, `failed`, `cancelled`, `lost`, comma-separated or repeated."),
        ("kind" = Option<String>, Query, description = "Only jobs of this kind: `sync`, `enrich`, `pair` or `pipeline` (another is 422 `invalid_field`)."),
        ("id_prefix" = Option<String>, Query, description = "Only jobs whose id starts with this: 1–36 characters of `0-9 a-f -`, any case."),
        ("cursor" = Option<String>, Query, description = "The `next_cursor` of the previous page (opaque); empty (`cursor=`), the first page, as on every listing."),
        ("limit" = Option<u32>, Query, description = "How many jobs per page, 1–100 (default 20; with `ids`, as many as it names).", minimum = 1, maximum = 100),
        ("ids" = Option<String>, Query, description = "Only these jobs: 1–100 job ids, comma-separated or repeated (a page reading many rows again in one call). Each is read by id, whatever its age: a job gone (past its time to live, its tenant removed) or another tenant's is not in the answer. The other filters, `tenant_id` and the token's scope apply as to any listing."),
    ),
    responses(
        (status = 200, description = "A page of jobs, newest first, and the `next_cursor` (null on the last page).", body = Listing),
        (status = 403, description = "`forbidden`: the token is for another tenant than the one named, or a tenant token named no tenant.", body = ErrorBody),
        (status = 422, description = "`invalid_field` (a bad `tenant_id`, `status`, `kind`, `id_prefix`, `cursor`, `limit` or `ids`) or `unknown_field` (with `field`).", body = ErrorBody),
        StoreUnavailable,
    ))]
pub async fn list(call: Call) -> Result<Json<Listing>, ApiError> {
    let mut fields = call.query()?;
    let tenant = named_tenant(&mut fields)?;
    let ids = take_ids(&mut fields, MAX_LIMIT)?;
    let registry = call.app.runner.registry();
    let default_limit = ids.as_ref().map_or(DEFAULT_LIMIT, Vec::len);
    let filter = JobFilter::take(&mut fields, registry, default_limit, MAX_LIMIT)?;
    refuse_unknown(
        &fields,
        "tenant_id, status, kind, id_prefix, ids, cursor and limit",
    )?;
    let Call { app, caller, .. } = call;
    match (&tenant, &caller.scope) {
        (Some(tenant), _) => caller.may_act_for(tenant)?,
        // Every tenant's jobs: an operator's view (or anyone's, running open).
        (None, Scope::All) => {}
        (None, Scope::Tenant(own)) => return Err(ApiError::TenantNotNamed(own.clone())),
    }
    let (jobs, next_cursor) = match (ids, tenant) {
        (Some(ids), named) => {
            let mut jobs = app.store.get_many(&ids).await?;
            jobs.retain(|s| theirs(&caller, &s.tenant_id, named.as_ref()));
            filter.page(jobs)
        }
        (None, Some(tenant)) => {
            let cap = app.store.settings().list_cap;
            filter.page(app.store.recent(&tenant, cap).await?)
        }
        (None, None) => filter.every_tenant(&*app.store).await?,
    };
    Ok(Json(Listing { jobs, next_cursor }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_follows_the_eta_within_its_bounds() {
        assert_eq!(retry_after_secs(Some(7)), 7);
        assert_eq!(retry_after_secs(Some(0)), RETRY_AFTER_MIN_SECS);
        assert_eq!(retry_after_secs(Some(3_600)), RETRY_AFTER_CAP_SECS);
        assert_eq!(retry_after_secs(None), RETRY_AFTER_UNKNOWN_SECS);
    }
}
