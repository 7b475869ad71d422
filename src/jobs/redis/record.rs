//! The job hash's schema on the Rust side: [`Field`] names every field once, [`Pairs`] builds
//! the named lists scripts take, and [`Hash`] decodes every answer that carries a job (a
//! read's `HGETALL`, a claim's named list) into what a reader or a worker sees.
//!
//! `lua/record.lua` names the same fields for the scripts (`FIELDS`; a test holds the two
//! lists equal). Nothing here knows a key name or a script.

use std::collections::HashMap;

use serde_json::Value;

use super::super::store::{Claim, NewJob, Origin, RunId, StoreError, StoreSettings};
use super::super::{InvalidId, JobId, Kind, Snapshot, Status, TenantId};

macro_rules! fields {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// A field of the job hash (`<prefix>:<id>`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Field {
            $($(#[$doc])* $variant,)*
        }

        impl Field {
            /// Every field, in the order `lua/record.lua` lists them.
            pub const ALL: &'static [Field] = &[$(Field::$variant,)*];

            /// The field's name in the hash.
            pub fn name(self) -> &'static str {
                match self {
                    $(Field::$variant => $name,)*
                }
            }
        }
    };
}

fields! {
    Tenant = "tenant",
    Kind = "kind",
    /// The job's parameters (JSON).
    Params = "params",
    /// `queued`, `running`, `done`, `failed` or `cancelled` (`lost` is never stored).
    Status = "status",
    Percent = "percent",
    Step = "step",
    /// The report (JSON); a failed job may carry its partial report.
    Result = "result",
    /// A failed job's error class.
    Error = "error",
    CreatedMs = "created_ms",
    StartedMs = "started_ms",
    UpdatedMs = "updated_ms",
    HeartbeatMs = "heartbeat_ms",
    FinishedMs = "finished_ms",
    CancelRequestedMs = "cancel_requested_ms",
    /// When recovery last put the job back in the queue.
    RecoveredMs = "recovered_ms",
    /// Counted runs.
    Attempt = "attempt",
    /// The current run's fencing token, raised by every claim.
    Claim = "claim",
    /// The process that runs (or last ran) the job: `host/pid`.
    Worker = "worker",
    CreatedBy = "created_by",
    RequestId = "request_id",
    RetryOf = "retry_of",
    CancelledBy = "cancelled_by",
    /// The job that took over this one's stale lock: it is fenced off for good.
    SupersededBy = "superseded_by",
    /// The next claim does not count an attempt (the run was given back at shutdown).
    FreeRetry = "free_retry",
    /// The record was written back by its live run after the store lost it.
    Restored = "restored",
}

/// A named list of job fields as scripts take it (`named_args` in the prelude): how many
/// pairs, then name, value, ….
#[derive(Clone, Debug, Default)]
pub struct Pairs(Vec<(Field, String)>);

impl Pairs {
    pub fn with(mut self, field: Field, value: impl ToString) -> Self {
        self.0.push((field, value.to_string()));
        self
    }

    /// With `field` only when there is a value (a script reads an absent field as unset).
    pub fn with_some(self, field: Field, value: Option<impl ToString>) -> Self {
        match value {
            Some(value) => self.with(field, value),
            None => self,
        }
    }

    /// The fields that say what the job is and where it came from: everything needed to
    /// run it again or write it back whole.
    pub fn origin(job: &NewJob) -> Self {
        Self::default()
            .with(Field::Tenant, job.tenant.as_str())
            .with(Field::Kind, job.kind.as_str())
            .with(Field::Params, &job.params)
            .with(Field::CreatedBy, &job.origin.created_by)
            .with(Field::RequestId, &job.origin.request_id)
            .with_some(Field::RetryOf, job.origin.retry_of)
    }

    /// Appends the list to a script call's arguments.
    pub fn append_to(&self, inv: &mut redis::ScriptInvocation<'_>) {
        inv.arg(self.0.len());
        for (field, value) in &self.0 {
            inv.arg(field.name()).arg(value);
        }
    }
}

/// A job's fields as Redis answered them (a hash read, or a script's named list).
pub struct Hash(HashMap<String, String>);

impl Hash {
    pub fn new(map: HashMap<String, String>) -> Self {
        Self(map)
    }

    /// Reads a flat name, value, … list (a script's answer).
    pub fn from_flat(flat: &[String]) -> Self {
        Self(
            flat.chunks_exact(2)
                .map(|pair| (pair[0].clone(), pair[1].clone()))
                .collect(),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, field: Field) -> Option<&str> {
        self.0.get(field.name()).map(String::as_str)
    }

    fn required(&self, field: Field) -> Result<&str, StoreError> {
        self.get(field)
            .ok_or_else(|| StoreError::Corrupt(format!("job hash lacks `{}`", field.name())))
    }

    fn num(&self, field: Field) -> Result<u64, StoreError> {
        self.required(field)?
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("`{}` is not a number", field.name())))
    }

    fn opt_num(&self, field: Field) -> Option<u64> {
        self.get(field).and_then(|v| v.parse().ok())
    }

    fn owned(&self, field: Field) -> Option<String> {
        self.get(field).map(str::to_owned)
    }

    fn json(&self, field: Field) -> Value {
        self.get(field)
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or(Value::Null)
    }

    fn tenant(&self) -> Result<TenantId, StoreError> {
        TenantId::parse(self.required(Field::Tenant)?).map_err(corrupt)
    }

    fn kind(&self) -> Result<Kind, StoreError> {
        Kind::parse(self.required(Field::Kind)?).map_err(corrupt)
    }

    fn origin(&self) -> Origin {
        Origin {
            created_by: self.owned(Field::CreatedBy).unwrap_or_default(),
            request_id: self.owned(Field::RequestId).unwrap_or_default(),
            retry_of: self.get(Field::RetryOf).and_then(|v| JobId::parse(v).ok()),
        }
    }

    /// What a reader sees, `lost` derived at `now_ms`; `None` for an empty hash (no job).
    /// create.lua leaves out what equals a default: percent 0, attempt 0, updated_ms and
    /// heartbeat_ms equal to created_ms.
    pub fn snapshot(
        &self,
        id: &JobId,
        now_ms: u64,
        settings: &StoreSettings,
    ) -> Result<Option<Snapshot>, StoreError> {
        if self.is_empty() {
            return Ok(None);
        }
        let stored = Status::parse_stored(self.required(Field::Status)?)
            .ok_or_else(|| StoreError::Corrupt("unknown status".into()))?;
        let created_at = self.num(Field::CreatedMs)?;
        let heartbeat_at = self.opt_num(Field::HeartbeatMs).unwrap_or(created_at);
        let cancel_requested_at = self.opt_num(Field::CancelRequestedMs);
        let status = stored.derive(
            heartbeat_at,
            now_ms,
            settings.stale_ms(),
            cancel_requested_at.is_some(),
        );
        let origin = self.origin();
        let snapshot = Snapshot {
            job_id: *id,
            tenant_id: self.tenant()?,
            kind: self.kind()?,
            status,
            percent: self.opt_num(Field::Percent).unwrap_or(0).min(100) as u8,
            step: self.owned(Field::Step).unwrap_or_default(),
            params: self.json(Field::Params),
            result: self.json(Field::Result),
            error: self.owned(Field::Error),
            created_at,
            started_at: self.opt_num(Field::StartedMs),
            updated_at: self.opt_num(Field::UpdatedMs).unwrap_or(created_at),
            heartbeat_at,
            finished_at: self.opt_num(Field::FinishedMs),
            cancel_requested_at,
            attempt: self.opt_num(Field::Attempt).unwrap_or(0) as u32,
            max_attempts: settings.max_attempts,
            worker: self.owned(Field::Worker),
            recovered_at: self.opt_num(Field::RecoveredMs),
            created_by: self.owned(Field::CreatedBy),
            cancelled_by: self.owned(Field::CancelledBy),
            request_id: self.owned(Field::RequestId),
            retry_of: origin.retry_of,
            eta_seconds: None,
        };
        Ok(Some(snapshot.with_eta(now_ms)))
    }

    /// The run a claim handed to a worker (claim.lua's answer after the job's id).
    pub fn claim(&self, id: JobId) -> Result<Claim, StoreError> {
        let params = self.required(Field::Params)?;
        Ok(Claim {
            job: NewJob {
                id,
                tenant: self.tenant()?,
                kind: self.kind()?,
                params: serde_json::from_str(params)
                    .map_err(|_| StoreError::Corrupt("claim answered no params".into()))?,
                step: String::new(),
                origin: self.origin(),
                idempotency_key: None,
            },
            created_at: self.num(Field::CreatedMs)?,
            run: RunId {
                id,
                claim: self.num(Field::Claim)?,
            },
            attempt: self.num(Field::Attempt)? as u32,
        })
    }
}

fn corrupt(e: InvalidId) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names `lua/record.lua` lists in `FIELDS`, in order.
    fn lua_fields() -> Vec<String> {
        let lua = include_str!("../lua/record.lua");
        let start = lua
            .find("local FIELDS = {")
            .expect("record.lua lists FIELDS");
        let list = &lua[start..];
        let list = &list[list.find('{').expect("a table") + 1..list.find('}').expect("closed")];
        list.split(',')
            .map(|name| name.trim().trim_matches('\'').to_owned())
            .filter(|name| !name.is_empty())
            .collect()
    }

    #[test]
    fn the_lua_side_names_the_same_fields_in_the_same_order() {
        let rust: Vec<&str> = Field::ALL.iter().map(|f| f.name()).collect();
        assert_eq!(lua_fields(), rust);
    }

    #[test]
    fn a_claim_answer_decodes_by_name_whatever_the_order() {
        let id = JobId::new();
        let flat: Vec<String> = [
            ("params", "{\"a\":1}"),
            ("attempt", "2"),
            ("kind", "sync"),
            ("claim", "7"),
            ("tenant", "acme"),
            ("created_ms", "1000"),
            ("request_id", "r-1"),
        ]
        .iter()
        .flat_map(|(k, v)| [k.to_string(), v.to_string()])
        .collect();
        let claim = Hash::from_flat(&flat).claim(id).unwrap();
        assert_eq!(
            (claim.run.claim, claim.attempt, claim.created_at),
            (7, 2, 1000)
        );
        assert_eq!(claim.job.origin.request_id, "r-1");
        assert_eq!(claim.job.origin.retry_of, None);
        assert_eq!(claim.job.params, serde_json::json!({"a": 1}));
    }
}
