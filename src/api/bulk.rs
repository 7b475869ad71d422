//! Bulk actions: `POST /catalog/bulk/retry` and `POST /catalog/bulk/cancel`, each on at most
//! [`BULK_MAX`] jobs a call, each answering what it did to every job it looked at (and why it
//! skipped one). Every job goes through the steps of the single routes (visibility, retry,
//! cancel), so a bulk action decides nothing a single one would not. A keyed call
//! (`Idempotency-Key`) is answered once and replayed; the retries it starts carry keys of
//! their own, so a call cut off part-way and sent again retries no job twice.

mod cancel;
mod pick;

use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::answers::{answers_from, bulk_answers, BulkAction, BulkKey};
use super::auth::Caller;
use super::call::{Call, WithBody};
use super::error::ApiError;
use super::extract::{idempotency_key, SmallBody};
use super::job_filter::cursor_of;
use super::jobs::Retry;
use super::AppState;
use crate::jobs::browse::{self, EVERYONE_CAP};
use crate::jobs::store::{params_fingerprint, Created};
use crate::jobs::{JobId, Kind, Snapshot, Status, TenantId};
use crate::metrics;
use cancel::{cancel_one, Stopped};
use pick::{CancelPick, RetryFilter, RetryPick};

pub use pick::{BulkCancelBody, BulkFilter, BulkRetryBody};

/// The most jobs one bulk call acts on (ids named, or jobs a filter or a tenant selects).
pub const BULK_MAX: usize = 100;

/// The header that tells a client its call was answered from the first one's answer.
const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// What a bulk call did to one job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BulkOutcome {
    /// A new job retries it (`new_job_id`).
    Retried,
    /// It was queued, or read `lost`, and ended at once.
    Cancelled,
    /// It runs and was asked to stop: it reads `cancelled` at its next safe point.
    Cancelling,
    /// Nothing was done to it: `reason` and `message` say why.
    Skipped,
}

/// One job of a bulk answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct BulkResult {
    pub job_id: JobId,
    pub outcome: BulkOutcome,
    /// The job that retries it (`retried`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_job_id: Option<JobId>,
    /// Why it was skipped: `not_found`, `still_active`, `not_active`, `already_running`,
    /// `rate_limited`, `overloaded`, `idempotency_key_reused`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// What the skip means and what to do, in one sentence; or, for a job the call ended
    /// through another (a pipeline through its step, a step through its pipeline), how.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The active job of that tenant and kind (`already_running`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_job_id: Option<JobId>,
}

impl BulkResult {
    fn done(job_id: JobId, outcome: BulkOutcome, new_job_id: Option<JobId>) -> Self {
        Self {
            job_id,
            outcome,
            new_job_id,
            reason: None,
            message: None,
            active_job_id: None,
        }
    }

    fn skipped(job_id: JobId, reason: &'static str, message: &str) -> Self {
        Self {
            job_id,
            outcome: BulkOutcome::Skipped,
            new_job_id: None,
            reason: Some(reason),
            message: Some(message.to_owned()),
            active_job_id: None,
        }
    }
}

/// A bulk call's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct BulkAnswer {
    /// One per job: in the order of `job_ids`, or newest first for a filter or a tenant.
    pub results: Vec<BulkResult>,
    /// Jobs acted on (retried, cancelled or cancelling).
    pub done: usize,
    /// Jobs skipped, each with its `reason`.
    pub skipped: usize,
    /// More jobs match than one call acts on ([`BULK_MAX`]): call again.
    pub more: bool,
    /// The jobs the call's selection matched when it began, this call's and any beyond it:
    /// the ids named, or the failed jobs a filter matches (across tenants, among the newest
    /// 10,000 jobs), or a tenant's active or `lost` jobs not yet asked to stop. Under `dry_run` it is
    /// all the answer says.
    pub matched: usize,
    /// A filter's newest matched job, as a place in the listing's order: sent back as
    /// `filter.until`, later calls act on no job created after the ones counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

impl BulkAnswer {
    fn of(results: Vec<BulkResult>, selected: &Selected) -> Self {
        let skipped = results
            .iter()
            .filter(|r| r.outcome == BulkOutcome::Skipped)
            .count();
        Self {
            done: results.len() - skipped,
            skipped,
            results,
            more: selected.more,
            matched: selected.matched,
            until: selected.until.clone(),
        }
    }
}

const NOT_FOUND: &str = "no such job, or not one this token may see; check the id";
const NOT_ACTIVE: &str = "the job has already ended: nothing to cancel";

/// Retries the named ended jobs, or every failed job a filter matches that was not retried
/// yet (newest first).
#[utoipa::path(post, path = "/catalog/bulk/retry", tag = "jobs", operation_id = "bulk_retry",
    request_body(content = BulkRetryBody, description = "Exactly one of `job_ids` (1–100 ids) or `filter` (each of its fields optional); `dry_run: true` counts the jobs (`matched`) and does nothing.", content_type = "application/json"),
    params(BulkKey),
    responses(BulkRetryAnswers))]
pub async fn retry(
    call: Call<WithBody>,
    headers: HeaderMap,
    SmallBody(body): SmallBody,
) -> Result<Response, ApiError> {
    call.no_query()?;
    let Call {
        app,
        caller,
        request_id,
        ..
    } = call;
    walk(&app, &caller, Action::Retry { request_id }, &headers, &body).await
}

/// Asks the named active jobs to stop, or every queued and running job of a tenant (newest
/// first).
#[utoipa::path(post, path = "/catalog/bulk/cancel", tag = "jobs", operation_id = "bulk_cancel",
    request_body(content = BulkCancelBody, description = "Exactly one of `job_ids` (1–100 ids) or `tenant_id`; `dry_run: true` counts the jobs (`matched`) and does nothing.", content_type = "application/json"),
    params(BulkKey),
    responses(BulkCancelAnswers))]
pub async fn cancel(
    call: Call<WithBody>,
    headers: HeaderMap,
    SmallBody(body): SmallBody,
) -> Result<Response, ApiError> {
    call.no_query()?;
    walk(&call.app, &call.caller, Action::Cancel, &headers, &body).await
}

/// A bulk retry, in the words of its answers.
const RETRY_WORDS: BulkAction = BulkAction {
    more: "a filter matches more",
    forbidden: "a tenant token whose filter names another tenant",
    fields: "`job_ids`, `filter`, `filter.tenant_id`, `dry_run`, …), or `idempotency_key_reused` (the key came first with another body)",
    unavailable: "`shutting_down` or `store_unavailable`: send the call again (with the same `Idempotency-Key`, no job is retried twice).",
};

/// A bulk cancel, in the words of its answers.
const CANCEL_WORDS: BulkAction = BulkAction {
    more: "the tenant has more active jobs",
    forbidden: "a tenant token naming another tenant",
    fields: "`job_ids`, `tenant_id`, `dry_run`, …), or `idempotency_key_reused`",
    unavailable:
        "`store_unavailable`: send the call again (asking a job twice to stop is harmless).",
};

answers_from! {
    /// `POST /catalog/bulk/retry`'s answers.
    BulkRetryAnswers = bulk_answers::<BulkAnswer>(&RETRY_WORDS);
    /// `POST /catalog/bulk/cancel`'s answers.
    BulkCancelAnswers = bulk_answers::<BulkAnswer>(&CANCEL_WORDS);
}

/// What a bulk call does to each job it selects.
enum Action {
    /// Retries ended jobs; the new jobs carry the call's request id.
    Retry { request_id: String },
    /// Asks active jobs to stop.
    Cancel,
}

/// The jobs a call acts on (at most [`BULK_MAX`]), how many the selection matched in all,
/// and whether more remain after these.
struct Selected {
    jobs: Vec<Looked>,
    matched: usize,
    more: bool,
    /// A filter's newest matched job (`BulkAnswer::until`).
    until: Option<String>,
}

impl Action {
    /// The action's name, in its route and in the slot of a keyed answer.
    fn name(&self) -> &'static str {
        match self {
            Action::Retry { .. } => "retry",
            Action::Cancel => "cancel",
        }
    }

    /// The jobs the body selects, every field checked before anything is done.
    async fn select(
        &self,
        app: &AppState,
        caller: &Caller,
        body: &Map<String, Value>,
    ) -> Result<Selected, ApiError> {
        match self {
            Action::Retry { .. } => {
                let picked = pick::retry(body, caller, app.runner.registry())?;
                app.runner.admit()?;
                match picked {
                    RetryPick::Ids(ids) => named(app, caller, &ids).await,
                    RetryPick::Failed(filter) => failed_matching(app, caller, &filter).await,
                }
            }
            Action::Cancel => match pick::cancel(body, caller)? {
                CancelPick::Ids(ids) => named(app, caller, &ids).await,
                CancelPick::Tenant(tenant) => active_of(app, &tenant).await,
            },
        }
    }

    /// Does the action to one job, as its single route does; `key` is the call's
    /// `Idempotency-Key`, `stopped` what the call's cancels stopped so far.
    async fn act(
        &self,
        app: &AppState,
        caller: &Caller,
        key: Option<&str>,
        job: Looked,
        stopped: &mut Stopped,
    ) -> Result<BulkResult, ApiError> {
        match self {
            Action::Retry { request_id } => retry_one(app, caller, request_id, key, job).await,
            Action::Cancel => cancel_one(app, caller, job, stopped).await,
        }
    }
}

/// One bulk call of any action: the caller may change things, a keyed call is answered once,
/// the body selects the jobs, and each is acted on in turn (none under `dry_run`).
async fn walk(
    app: &AppState,
    caller: &Caller,
    action: Action,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    caller.may_change()?;
    let call = match BulkCall::open(app, caller, action.name(), headers, body).await? {
        Ok(call) => call,
        Err(replay) => return Ok(replay),
    };
    let mut selected = action.select(app, caller, &call.body).await?;
    let jobs = std::mem::take(&mut selected.jobs);
    let mut results = Vec::with_capacity(jobs.len());
    let mut stopped = Stopped::default();
    if !call.dry_run {
        for job in jobs {
            let key = call.key.as_deref();
            results.push(action.act(app, caller, key, job, &mut stopped).await?);
        }
    }
    let answer = BulkAnswer::of(results, &selected);
    call.answer(app, answer).await
}

/// A bulk call: its body (a JSON object), whether it only counts (`dry_run`), its
/// `Idempotency-Key`, and the slot its answer is kept in when keyed (per action, token name
/// and key; the name's length first, so no name and key can pass for another pair).
struct BulkCall {
    body: Map<String, Value>,
    dry_run: bool,
    key: Option<String>,
    slot: Option<String>,
}

impl BulkCall {
    /// The call, or (`Err`) the answer kept for its key, replayed; 422 when the key came
    /// first with another body.
    async fn open(
        app: &AppState,
        caller: &Caller,
        action: &str,
        headers: &HeaderMap,
        raw: &[u8],
    ) -> Result<Result<BulkCall, Response>, ApiError> {
        pick::json_only(headers)?;
        let body = pick::object(raw)?;
        let dry_run = pick::dry_run(&body)?;
        let key = idempotency_key(headers)?;
        let name = &caller.name;
        let slot = key
            .as_deref()
            .map(|k| format!("{action}:{}:{name}:{k}", name.len()));
        let call = BulkCall {
            body,
            dry_run,
            key,
            slot,
        };
        let Some(slot) = call.slot.as_deref() else {
            return Ok(Ok(call));
        };
        let Some((seen, kept)) = app.store.recall_answer(slot).await? else {
            return Ok(Ok(call));
        };
        if seen != call.fingerprint() {
            return Err(ApiError::BulkKeyReused);
        }
        let mut response = json_response(kept);
        response.headers_mut().insert(
            HeaderName::from_static(IDEMPOTENT_REPLAYED),
            HeaderValue::from_static("true"),
        );
        Ok(Err(response))
    }

    /// The call's answer (200), kept under its slot when it was keyed.
    async fn answer(self, app: &AppState, answer: BulkAnswer) -> Result<Response, ApiError> {
        let text = serde_json::to_string(&answer).map_err(|e| ApiError::Internal(e.to_string()))?;
        if let Some(slot) = &self.slot {
            app.store
                .keep_answer(slot, &self.fingerprint(), &text)
                .await?;
        }
        Ok(json_response(text))
    }

    fn fingerprint(&self) -> String {
        params_fingerprint(&Value::Object(self.body.clone()))
    }
}

fn json_response(text: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], text).into_response()
}

/// A job a call looked at: the job when this caller sees it, else its id alone.
type Looked = Result<Snapshot, JobId>;

/// The named jobs, in the order named.
async fn named(app: &AppState, caller: &Caller, ids: &[JobId]) -> Result<Selected, ApiError> {
    let found = app.store.get_many(ids).await?;
    let jobs = ids
        .iter()
        .map(|id| {
            found
                .iter()
                .find(|s| s.job_id == *id && caller.sees(&s.tenant_id))
                .cloned()
                .ok_or(*id)
        })
        .collect();
    Ok(Selected {
        jobs,
        matched: ids.len(),
        more: false,
        until: None,
    })
}

/// The failed jobs the filter matches that were not retried yet, newest first, at most
/// [`BULK_MAX`], of how many: a tenant's from its listing, otherwise from the cross-tenant
/// index (its newest `EVERYONE_CAP` jobs, all read to count them).
async fn failed_matching(
    app: &AppState,
    caller: &Caller,
    filter: &RetryFilter,
) -> Result<Selected, ApiError> {
    let keep = |s: &Snapshot| {
        s.status == Status::Failed
            && s.retried_as.is_none()
            && caller.sees(&s.tenant_id)
            && filter.keeps(s)
    };
    let mut jobs = match &filter.tenant {
        Some(tenant) => {
            let cap = app.store.settings().list_cap;
            let mut jobs = app.store.recent(tenant, cap).await?;
            jobs.retain(keep);
            jobs
        }
        None => {
            let named = |id: &JobId| filter.names(id);
            let walk = browse::walk(&*app.store, None, named, keep, EVERYONE_CAP, EVERYONE_CAP);
            walk.await?.jobs
        }
    };
    let mut selected = newest(&mut jobs);
    selected.until = selected
        .jobs
        .first()
        .and_then(|j| j.as_ref().ok())
        .map(cursor_of);
    Ok(selected)
}

/// The tenant's queued and running jobs not yet asked to stop (one asked reads `cancelling`),
/// newest first, at most [`BULK_MAX`], of how many: a call sent again goes on to the next.
async fn active_of(app: &AppState, tenant: &TenantId) -> Result<Selected, ApiError> {
    let mut jobs = app.store.active().await?;
    jobs.retain(|s| {
        s.tenant_id == *tenant
            && matches!(s.status, Status::Queued | Status::Running | Status::Lost)
            && s.cancel_requested_at.is_none()
    });
    Ok(newest(&mut jobs))
}

/// The newest [`BULK_MAX`] of `jobs`, of how many.
fn newest(jobs: &mut Vec<Snapshot>) -> Selected {
    jobs.sort_unstable_by_key(|s| std::cmp::Reverse((s.created_at, s.job_id)));
    let matched = jobs.len();
    jobs.truncate(BULK_MAX);
    Selected {
        jobs: jobs.drain(..).map(Ok).collect(),
        matched,
        more: matched > BULK_MAX,
        until: None,
    }
}

/// One retry, as the single route retries, with a key of its own under a keyed call.
async fn retry_one(
    app: &AppState,
    caller: &Caller,
    request_id: &str,
    key: Option<&str>,
    job: Looked,
) -> Result<BulkResult, ApiError> {
    let old = match job {
        Err(id) => return Ok(BulkResult::skipped(id, "not_found", NOT_FOUND)),
        Ok(old) if old.status.is_active() => {
            let why = "the job has not ended: cancel it or wait for it";
            return Ok(BulkResult::skipped(old.job_id, "still_active", why));
        }
        Ok(old) => old,
    };
    let id = old.job_id;
    let key = key.map(|k| format!("bulk:{k}:{id}"));
    let retry = Retry::of(app, old, caller, request_id.to_owned(), key);
    let new_id = match create(app, retry).await? {
        Created::Created(s, _) => s.job_id,
        Created::Replayed(new_id) => new_id,
        refused => return Ok(refusal(id, refused)),
    };
    Ok(BulkResult::done(id, BulkOutcome::Retried, Some(new_id)))
}

/// Creates a retry (a job, or a pipeline and its steps), counted as a start counts it: a
/// job by the runner's create, a pipeline (itself and its steps) here.
async fn create(app: &AppState, retry: Retry) -> Result<Created, ApiError> {
    let (created, pipeline_steps) = match retry {
        Retry::Job(job) => (app.runner.create(job).await?, None),
        Retry::Pipeline(p) => {
            let steps: Vec<Kind> = p.steps.iter().map(|(s, _)| s.kind.clone()).collect();
            (app.store.create_pipeline(p).await?, Some(steps))
        }
    };
    match &created {
        Created::Created(snapshot, took_over) => {
            if let Some(steps) = &pipeline_steps {
                super::catalog::count_pipeline_created(&snapshot.kind, steps);
            }
            super::jobs::count_taken_over(app, took_over).await;
        }
        Created::AlreadyRunning(_) => metrics::job_refused("already_running"),
        Created::RateLimited(_) => metrics::job_refused("rate_limited"),
        Created::QueueFull => metrics::job_refused("overloaded"),
        Created::Replayed(_) | Created::KeyReused(_) => {}
    }
    Ok(created)
}

/// A retry the store refused, as a skip that says what to do.
fn refusal(id: JobId, refused: Created) -> BulkResult {
    match refused {
        Created::AlreadyRunning(holder) => {
            let why = "a job of this tenant and kind is active: wait for it, or cancel it";
            BulkResult {
                active_job_id: Some(holder),
                ..BulkResult::skipped(id, "already_running", why)
            }
        }
        Created::RateLimited(_) => {
            let why =
                "the tenant started TENANT_CREATES_PER_MINUTE jobs this minute; retry in a minute";
            BulkResult::skipped(id, "rate_limited", why)
        }
        Created::KeyReused(_) => {
            let why = "this Idempotency-Key retried the job with other parameters; use a new key";
            BulkResult::skipped(id, "idempotency_key_reused", why)
        }
        _ => {
            let why = "too many jobs wait for a worker (MAX_QUEUED_JOBS); retry later";
            BulkResult::skipped(id, "overloaded", why)
        }
    }
}
