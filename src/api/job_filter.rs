//! The filters and the page of `GET /catalog/jobs`: `status` (one or several, comma-separated
//! or repeated), `kind`, `id_prefix`, `limit` and the opaque `cursor` the previous page
//! answered with; and the page of every tenant's jobs, walked over the store's cross-tenant
//! index with the active jobs merged in.
//! Jobs are ordered newest first by (created time, id): jobs created in the same millisecond
//! come in id order. A cursor names the last job a page served in that order, so the next
//! page starts right after it even while new jobs arrive.

use std::collections::HashSet;

use serde_json::Value;

use super::error::ApiError;
use super::extract::{cursor_field, limit_field, take_single};
use crate::jobs::browse::{self, Position, EXAMINE_PER_PAGE};
use crate::jobs::params::Fields;
use crate::jobs::pipeline::PIPELINE_KIND;
use crate::jobs::registry::Registry;
use crate::jobs::store::{JobStore, StoreError};
use crate::jobs::{JobId, Kind, Snapshot, Status};

/// Every status a reader can see, `lost` included (the order of the error message).
const STATUSES: [Status; 7] = [
    Status::Queued,
    Status::Running,
    Status::Cancelling,
    Status::Done,
    Status::Failed,
    Status::Cancelled,
    Status::Lost,
];

/// The longest `id_prefix`: a whole hyphenated id.
const ID_PREFIX_MAX: usize = 36;

/// A cursor's two parts are joined by this: a number never contains it, a UUID has no `.`.
const CURSOR_SEPARATOR: char = '.';

/// A kind some job can have (one of `registry`'s, or `pipeline`), from the value of `field`:
/// a typo is refused, where it would silently match no job.
pub fn known_kind(registry: &Registry, raw: &str, field: &str) -> Result<Kind, ApiError> {
    let kind = Kind::parse(raw).map_err(|e| ApiError::invalid(field, e.to_string()))?;
    if kind.as_str() == PIPELINE_KIND || registry.get(&kind).is_some() {
        return Ok(kind);
    }
    let known: Vec<&str> = registry.names().chain([PIPELINE_KIND]).collect();
    Err(ApiError::invalid(
        field,
        format!("no job has the kind `{kind}`: one of {}", known.join(", ")),
    ))
}

/// What a listing request asks for.
pub struct JobFilter {
    statuses: Vec<Status>,
    kind: Option<Kind>,
    id_prefix: Option<String>,
    after: Option<Position>,
    limit: usize,
}

impl JobFilter {
    /// Takes `status`, `kind`, `id_prefix`, `cursor` and `limit` out of the query's fields.
    pub fn take(
        fields: &mut Fields,
        registry: &Registry,
        default_limit: usize,
        max_limit: usize,
    ) -> Result<Self, ApiError> {
        let statuses = match fields.remove("status") {
            None => Vec::new(),
            Some(values) => values
                .iter()
                .map(|v| v.as_str().unwrap_or_default())
                .flat_map(|raw| raw.split(','))
                .map(parse_status)
                .collect::<Result<_, _>>()?,
        };
        let kind = take_single(fields, "kind")?
            .map(|v| known_kind(registry, v.as_str().unwrap_or_default(), "kind"))
            .transpose()?;
        let id_prefix = take_single(fields, "id_prefix")?
            .map(|v| parse_id_prefix(&v))
            .transpose()?;
        let after = cursor_field(fields)?
            .map(|v| parse_cursor(&v))
            .transpose()?;
        let limit = limit_field(fields, default_limit, max_limit)?;
        Ok(Self {
            statuses,
            kind,
            id_prefix,
            after,
            limit,
        })
    }

    /// The page of `jobs` (any order) this request asks for, and the cursor of the next one
    /// (None at the end).
    pub fn page(&self, mut jobs: Vec<Snapshot>) -> (Vec<Snapshot>, Option<String>) {
        jobs.retain(|s| self.keeps(s));
        jobs.sort_unstable_by_key(|s| std::cmp::Reverse(order_key(s)));
        let more = jobs.len() > self.limit;
        jobs.truncate(self.limit);
        let next = more.then(|| jobs.last().map(cursor_of)).flatten();
        (jobs, next)
    }

    /// Every tenant's jobs, newest first: the store's index of the newest jobs walked from
    /// the cursor (at most `EXAMINE_PER_PAGE` entries), and the active jobs in the stretch
    /// it covered (all of them once it reached the index's end), so an active job is listed
    /// whatever its age. A page not full when the walk stopped is answered short, with the
    /// cursor of the last entry examined.
    pub async fn every_tenant(
        &self,
        store: &dyn JobStore,
    ) -> Result<(Vec<Snapshot>, Option<String>), StoreError> {
        let named = |id: &JobId| self.names(id);
        let keep = |s: &Snapshot| self.keeps(s);
        let want = self.limit + 1;
        let walked = browse::walk(store, self.after, named, keep, want, EXAMINE_PER_PAGE).await?;
        let mut jobs = walked.jobs;
        let covered = |s: &Snapshot| walked.examined_to.is_none_or(|end| order_key(s) > end);
        let seen: HashSet<JobId> = jobs.iter().map(|s| s.job_id).collect();
        let active = store.active().await?;
        jobs.extend(
            active
                .into_iter()
                .filter(|s| !seen.contains(&s.job_id) && covered(s) && self.keeps(s)),
        );
        let (page, next) = self.page(jobs);
        let short = walked.examined_to.filter(|_| next.is_none());
        Ok((
            page,
            next.or_else(|| short.map(|(ms, id)| cursor_at(ms, &id))),
        ))
    }

    fn names(&self, id: &JobId) -> bool {
        self.id_prefix
            .as_ref()
            .is_none_or(|p| id.to_string().starts_with(p.as_str()))
    }

    fn keeps(&self, s: &Snapshot) -> bool {
        (self.statuses.is_empty() || self.statuses.contains(&s.status))
            && self.kind.as_ref().is_none_or(|k| *k == s.kind)
            && self.names(&s.job_id)
            && self.after.is_none_or(|after| order_key(s) < after)
    }
}

fn order_key(s: &Snapshot) -> Position {
    (s.created_at, s.job_id)
}

/// A job's place in the newest-first order, as a cursor names it.
pub(super) fn cursor_of(s: &Snapshot) -> String {
    cursor_at(s.created_at, &s.job_id)
}

fn cursor_at(ms: u64, id: &JobId) -> String {
    format!("{ms}{CURSOR_SEPARATOR}{id}")
}

/// Takes the optional `ids` out of the query's fields: 1 to `max` job ids, comma-separated or
/// repeated (duplicates read once), so a page that shows many rows reads them in one call.
pub fn take_ids(fields: &mut Fields, max: usize) -> Result<Option<Vec<JobId>>, ApiError> {
    let Some(values) = fields.remove("ids") else {
        return Ok(None);
    };
    let bad = |why: &str| {
        ApiError::invalid(
            "ids",
            format!("ids is 1 to {max} job ids, comma-separated or repeated: {why}"),
        )
    };
    let mut ids: Vec<JobId> = Vec::new();
    for raw in values
        .iter()
        .flat_map(|v| v.as_str().unwrap_or_default().split(','))
    {
        let id = JobId::parse(raw.trim()).map_err(|_| bad("one is not a job id"))?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    if ids.is_empty() || ids.len() > max {
        return Err(bad(&format!("{} were given", ids.len())));
    }
    Ok(Some(ids))
}

/// 1–36 characters of a hyphenated id (`0-9 a-f -`, any case), lowercased as ids are written.
pub(super) fn parse_id_prefix(v: &Value) -> Result<String, ApiError> {
    let raw = v.as_str().unwrap_or_default().trim().to_ascii_lowercase();
    let fits = (1..=ID_PREFIX_MAX).contains(&raw.len())
        && raw.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    if fits {
        Ok(raw)
    } else {
        Err(ApiError::invalid(
            "id_prefix",
            format!("id_prefix is the start of a job id: 1 to {ID_PREFIX_MAX} characters of 0-9, a-f and -"),
        ))
    }
}

fn parse_status(raw: &str) -> Result<Status, ApiError> {
    let raw = raw.trim();
    STATUSES
        .into_iter()
        .find(|s| s.as_str() == raw)
        .ok_or_else(|| {
            let known: Vec<&str> = STATUSES.iter().map(|s| s.as_str()).collect();
            ApiError::invalid(
                "status",
                format!(
                    "status is one or more of {} (comma-separated)",
                    known.join(", ")
                ),
            )
        })
}

fn parse_cursor(v: &Value) -> Result<Position, ApiError> {
    let bad = || {
        ApiError::invalid(
            "cursor",
            "cursor must be the next_cursor a previous page answered with",
        )
    };
    v.as_str().and_then(read_cursor).ok_or_else(bad)
}

/// The place a cursor names; `None` for text no cursor of ours reads as.
pub(super) fn read_cursor(raw: &str) -> Option<Position> {
    let (ms, id) = raw.split_once(CURSOR_SEPARATOR)?;
    Some((ms.parse().ok()?, JobId::parse(id).ok()?))
}
