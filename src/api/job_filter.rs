//! The filters and the page of `GET /catalog/jobs`: `status` (one or several, comma-separated
//! or repeated), `kind`, `limit` and the opaque `cursor` the previous page answered with.
//! Jobs are ordered newest first by (created time, id): jobs created in the same millisecond
//! come in id order. A cursor names the last job a page served in that order, so the next
//! page starts right after it even while new jobs arrive.

use serde_json::Value;

use super::error::ApiError;
use super::extract::{limit_field, take_single};
use crate::jobs::params::Fields;
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

/// A cursor's two parts are joined by this: a number never contains it, a UUID has no `.`.
const CURSOR_SEPARATOR: char = '.';

/// What a listing request asks for.
pub struct JobFilter {
    statuses: Vec<Status>,
    kind: Option<Kind>,
    after: Option<(u64, JobId)>,
    limit: usize,
}

impl JobFilter {
    /// Takes `status`, `kind`, `cursor` and `limit` out of the query's fields.
    pub fn take(
        fields: &mut Fields,
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
        let kind = match take_single(fields, "kind")? {
            None => None,
            Some(v) => Some(
                Kind::parse(v.as_str().unwrap_or_default())
                    .map_err(|e| ApiError::invalid("kind", e.to_string()))?,
            ),
        };
        let after = take_single(fields, "cursor")?
            .map(|v| parse_cursor(&v))
            .transpose()?;
        let limit = limit_field(fields, default_limit, max_limit)?;
        Ok(Self {
            statuses,
            kind,
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

    fn keeps(&self, s: &Snapshot) -> bool {
        (self.statuses.is_empty() || self.statuses.contains(&s.status))
            && self.kind.as_ref().is_none_or(|k| *k == s.kind)
            && self.after.is_none_or(|after| order_key(s) < after)
    }
}

fn order_key(s: &Snapshot) -> (u64, JobId) {
    (s.created_at, s.job_id)
}

fn cursor_of(s: &Snapshot) -> String {
    format!("{}{CURSOR_SEPARATOR}{}", s.created_at, s.job_id)
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

fn parse_cursor(v: &Value) -> Result<(u64, JobId), ApiError> {
    let bad = || {
        ApiError::invalid(
            "cursor",
            "cursor must be the next_cursor a previous page answered with",
        )
    };
    let (ms, id) = v
        .as_str()
        .and_then(|raw| raw.split_once(CURSOR_SEPARATOR))
        .ok_or_else(bad)?;
    Ok((
        ms.parse().map_err(|_| bad())?,
        JobId::parse(id).map_err(|_| bad())?,
    ))
}
