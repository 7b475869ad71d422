//! What a bulk call's body selects, read field by field: exactly one form per call (ids, or
//! a filter or a tenant) and an optional `dry_run`, every field checked before anything is
//! done, each refusal naming its field.

use axum::http::HeaderMap;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::super::auth::Caller;
use super::super::error::ApiError;
use super::super::extract::{echoed, identity_encoding, media_type, refused_media, strict_json};
use super::super::job_filter::{known_kind, parse_id_prefix, read_cursor};
use super::BULK_MAX;
use crate::config::tokens::Scope;
use crate::jobs::browse::Position;
use crate::jobs::registry::Registry;
use crate::jobs::{JobId, Kind, Snapshot, TenantId};

/// `POST /catalog/bulk/retry`'s body: exactly one of the two.
#[derive(ToSchema)]
pub struct BulkRetryBody {
    /// 1–100 ended jobs to retry, each once, in this order.
    pub job_ids: Option<Vec<JobId>>,
    /// Every failed job it matches that was not retried yet, newest first (at most 100 a
    /// call; `more` says to call again).
    pub filter: Option<BulkFilter>,
    /// `true`: count the jobs the call would act on (`matched`, `more`) and do nothing.
    pub dry_run: Option<bool>,
}

/// The failed jobs a bulk retry selects; each field optional. A tenant token's filter is its
/// own tenant.
#[derive(ToSchema)]
pub struct BulkFilter {
    /// One tenant's failed jobs (its listing, the last 100 it created); left out, every
    /// tenant's among the newest 10,000 jobs.
    #[schema(value_type = Option<String>)]
    pub tenant_id: Option<TenantId>,
    #[schema(value_type = Option<String>)]
    pub kind: Option<Kind>,
    /// The start of a job id: 1–36 characters of `0-9 a-f -`, any case.
    pub id_prefix: Option<String>,
    /// The `until` an earlier answer (a `dry_run`) gave: no job created after the newest it
    /// counted is retried, so retries that fail again meanwhile are not retried in turn.
    pub until: Option<String>,
}

/// `POST /catalog/bulk/cancel`'s body: exactly one of the two.
#[derive(ToSchema)]
pub struct BulkCancelBody {
    /// 1–100 active jobs to stop, each once, in this order.
    pub job_ids: Option<Vec<JobId>>,
    /// Every queued and running job of this tenant, newest first (at most 100 a call).
    #[schema(value_type = Option<String>)]
    pub tenant_id: Option<TenantId>,
    /// `true`: count the jobs the call would act on (`matched`, `more`) and do nothing.
    pub dry_run: Option<bool>,
}

/// The field that asks a call to count its jobs and do nothing.
const DRY_RUN: &str = "dry_run";

/// What a retry call selects.
pub enum RetryPick {
    Ids(Vec<JobId>),
    Failed(RetryFilter),
}

/// What a cancel call selects.
pub enum CancelPick {
    Ids(Vec<JobId>),
    Tenant(TenantId),
}

/// The failed jobs a bulk retry's filter selects.
pub struct RetryFilter {
    pub tenant: Option<TenantId>,
    kind: Option<Kind>,
    id_prefix: Option<String>,
    until: Option<Position>,
}

impl RetryFilter {
    /// Whether an id may be one the filter selects (before its job is read).
    pub fn names(&self, id: &JobId) -> bool {
        self.id_prefix
            .as_ref()
            .is_none_or(|p| id.to_string().starts_with(p.as_str()))
    }

    /// Whether the filter selects the job (its status aside).
    pub fn keeps(&self, s: &Snapshot) -> bool {
        self.tenant.as_ref().is_none_or(|t| *t == s.tenant_id)
            && self.kind.as_ref().is_none_or(|k| *k == s.kind)
            && self.names(&s.job_id)
            && self.until.is_none_or(|u| (s.created_at, s.job_id) <= u)
    }
}

/// What a bulk call's body is, as its refusals say it.
const EXAMPLE: &str = "a JSON object, e.g. {\"job_ids\": [\"…\"]}";

/// What a bulk call's body may be.
const BULK_MEDIA_TYPES: &str = "application/json (a JSON object)";

/// Refuses a body that is not said to be JSON (415, as every route that reads JSON), or that
/// comes compressed, before a byte of it is read as JSON.
pub fn json_only(headers: &HeaderMap) -> Result<(), ApiError> {
    match media_type(headers).as_str() {
        "application/json" => {}
        ct if ct.ends_with("+json") => {}
        other => {
            let none = "(none given: a bulk call reads a JSON body)";
            return Err(refused_media(other, none, BULK_MEDIA_TYPES));
        }
    }
    identity_encoding(headers)
}

/// The body as a JSON object (400 `malformed_body` otherwise).
pub fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if body.trim_ascii().is_empty() {
        return Err(ApiError::MalformedBody(format!(
            "the body is empty: a bulk call reads {EXAMPLE}"
        )));
    }
    match strict_json(body)? {
        Value::Object(map) => Ok(map),
        _ => Err(ApiError::MalformedBody(format!(
            "the body must be {EXAMPLE}"
        ))),
    }
}

/// Whether the call only counts its jobs (`dry_run`, a boolean; absent is false).
pub fn dry_run(body: &Map<String, Value>) -> Result<bool, ApiError> {
    match body.get(DRY_RUN) {
        None => Ok(false),
        Some(Value::Bool(dry)) => Ok(*dry),
        Some(_) => Err(ApiError::invalid(DRY_RUN, "dry_run is true or false")),
    }
}

pub fn retry(
    body: &Map<String, Value>,
    caller: &Caller,
    registry: &Registry,
) -> Result<RetryPick, ApiError> {
    match one_form(body, &["job_ids", "filter"])? {
        ("job_ids", v) => Ok(RetryPick::Ids(job_ids(v)?)),
        (_, Value::Object(filter)) => {
            Ok(RetryPick::Failed(retry_filter(filter, caller, registry)?))
        }
        _ => Err(ApiError::invalid(
            "filter",
            "filter is an object: {\"tenant_id\": …, \"kind\": …, \"id_prefix\": …}, each optional",
        )),
    }
}

pub fn cancel(body: &Map<String, Value>, caller: &Caller) -> Result<CancelPick, ApiError> {
    match one_form(body, &["job_ids", "tenant_id"])? {
        ("job_ids", v) => Ok(CancelPick::Ids(job_ids(v)?)),
        (_, v) => {
            let tenant = tenant_of(v, "tenant_id")?;
            caller.may_act_for(&tenant)?;
            Ok(CancelPick::Tenant(tenant))
        }
    }
}

/// The one form among `forms` the body uses (and no other key but `dry_run`).
fn one_form<'b>(
    body: &'b Map<String, Value>,
    forms: &[&'static str],
) -> Result<(&'static str, &'b Value), ApiError> {
    let either = format!("send exactly one of {}", forms.join(" or "));
    if let Some(other) = body
        .keys()
        .find(|k| !forms.contains(&k.as_str()) && *k != DRY_RUN)
    {
        return Err(ApiError::UnknownField {
            field: other.clone(),
            message: format!("`{other}` is not a field here; {either}"),
        });
    }
    let given: Vec<&'static str> = forms
        .iter()
        .copied()
        .filter(|f| body.contains_key(*f))
        .collect();
    match given.as_slice() {
        [one] => Ok((one, &body[*one])),
        [] => Err(ApiError::missing(forms[0], either)),
        [_, second, ..] => Err(ApiError::invalid(second, either)),
    }
}

/// 1–[`BULK_MAX`] job ids, each once, in the order given; a refusal says which part is
/// wrong: not a list, an item that is no job id (by its place and value), none, or too many.
fn job_ids(v: &Value) -> Result<Vec<JobId>, ApiError> {
    let bad = |why: String| ApiError::invalid("job_ids", why);
    let raw = v
        .as_array()
        .ok_or_else(|| bad(format!("job_ids is a list of 1 to {BULK_MAX} job ids")))?;
    let mut ids: Vec<JobId> = Vec::with_capacity(raw.len());
    for (i, item) in raw.iter().enumerate() {
        let id = match item {
            Value::String(s) => JobId::parse(s).map_err(|_| {
                bad(format!(
                    "job_ids[{i}] `{}` is not a job id: each is the UUID a start answered",
                    echoed(s)
                ))
            })?,
            other => {
                return Err(bad(format!(
                "job_ids[{i}] is {}, not a job id: each is the UUID a start answered, as a string",
                json_kind(other)
            )))
            }
        };
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    match ids.len() {
        0 => Err(bad(format!(
            "job_ids names no job: give 1 to {BULK_MAX} job ids"
        ))),
        n if n > BULK_MAX => Err(bad(format!(
            "job_ids names {n} jobs: at most {BULK_MAX} a call (select fewer jobs)"
        ))),
        _ => Ok(ids),
    }
}

/// What a JSON value is, for a message that must not repeat it.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn tenant_of(v: &Value, field: &str) -> Result<TenantId, ApiError> {
    let raw = v
        .as_str()
        .ok_or_else(|| ApiError::invalid(field, "a tenant id is text"))?;
    TenantId::parse(raw).map_err(|e| ApiError::bad_id(field, e))
}

/// The filter's fields; a tenant token's filter is its own tenant (naming another is 403).
fn retry_filter(
    filter: &Map<String, Value>,
    caller: &Caller,
    registry: &Registry,
) -> Result<RetryFilter, ApiError> {
    const FIELDS: [&str; 4] = ["tenant_id", "kind", "id_prefix", "until"];
    if let Some(other) = filter.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(ApiError::UnknownField {
            field: format!("filter.{other}"),
            message: format!(
                "`{other}` is not a filter field; use tenant_id, kind, id_prefix, until"
            ),
        });
    }
    let tenant = match (filter.get("tenant_id"), &caller.scope) {
        (Some(v), _) => {
            let tenant = tenant_of(v, "filter.tenant_id")?;
            caller.may_act_for(&tenant)?;
            Some(tenant)
        }
        (None, Scope::Tenant(own)) => Some(own.clone()),
        (None, Scope::All) => None,
    };
    let kind = filter
        .get("kind")
        .map(|v| known_kind(registry, v.as_str().unwrap_or_default(), "filter.kind"))
        .transpose()?;
    let id_prefix = match filter.get("id_prefix") {
        Some(v) => Some(parse_id_prefix(v).map_err(|_| {
            ApiError::invalid(
                "filter.id_prefix",
                "id_prefix is the start of a job id: 1 to 36 characters of 0-9, a-f and -",
            )
        })?),
        None => None,
    };
    let until = match filter.get("until") {
        Some(v) => Some(v.as_str().and_then(read_cursor).ok_or_else(|| {
            ApiError::invalid(
                "filter.until",
                "until is the `until` an earlier answer to this filter gave",
            )
        })?),
        None => None,
    };
    Ok(RetryFilter {
        tenant,
        kind,
        id_prefix,
        until,
    })
}
