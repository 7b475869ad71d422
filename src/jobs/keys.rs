//! `Keys`: every Redis key and channel name of the job store, built under one prefix.
//!
//! The Rust side builds names here only; inside a step, `lua/prelude.lua` builds the same
//! names for keys a script learns of as it runs (a lock's holder, a claimed job). Nothing
//! here knows what a key holds beyond its one-line doc.

use super::{JobId, Kind, TenantId};

/// Builds every Redis key the job store uses, under one configurable prefix.
#[derive(Clone, Debug)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    /// The prefix every name starts with (the scripts build their names from it).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `<prefix>:<id>` — the job's hash: its record and its timeline.
    pub fn job(&self, id: &JobId) -> String {
        format!("{}:{id}", self.prefix)
    }

    /// `<prefix>:lock:<tenant>:<kind>` — holds the active job's id.
    pub fn lock(&self, tenant: &TenantId, kind: &Kind) -> String {
        format!("{}:lock:{tenant}:{kind}", self.prefix)
    }

    /// `<prefix>:tenant:<tenant>` — the tenant's listing (a sorted set): its job ids scored
    /// in listing order, newest highest, and its creates this minute, `~<minute>` scored by
    /// their count, below every job (`lua/prelude.lua`).
    pub fn tenant(&self, tenant: &TenantId) -> String {
        format!("{}:tenant:{tenant}", self.prefix)
    }

    /// `<prefix>:tenant:<tenant>:gone` — the tenant's tombstone: the store's time (ms) of its
    /// last delete, kept for the job TTL. Writes of runs and imports begun before it are
    /// refused (`jobs::fence`), and so is writing back a record of a job created before it.
    pub fn gone(&self, tenant: &TenantId) -> String {
        format!("{}:tenant:{tenant}:gone", self.prefix)
    }

    /// `<prefix>:tenant:<tenant>:idem` — the names of the tenant's idempotency keys (a set),
    /// so a delete finds the keys its clients named.
    pub fn tenant_idem(&self, tenant: &TenantId) -> String {
        format!("{}:tenant:{tenant}:idem", self.prefix)
    }

    /// `<prefix>:idem:<tenant>:<kind>:<key>` — an `Idempotency-Key`'s job id and params
    /// fingerprint (hash), with the job's TTL.
    pub fn idem(&self, tenant: &TenantId, kind: &Kind, key: &str) -> String {
        format!("{}:idem:{tenant}:{kind}:{key}", self.prefix)
    }

    /// `<prefix>:queue` — the ready queue: ids of queued jobs, oldest first.
    pub fn queue(&self) -> String {
        format!("{}:queue", self.prefix)
    }

    /// `<prefix>:waiting` — the ids of jobs waiting for their tenant's job ahead of them
    /// (a set; they are not in the ready queue until it ends).
    pub fn waiting(&self) -> String {
        format!("{}:waiting", self.prefix)
    }

    /// `<prefix>:lane:<tenant>` — the tenant's ordered jobs that have not ended, oldest first
    /// (the head may run; each other waits for the one before it).
    pub fn lane(&self, tenant: &TenantId) -> String {
        format!("{}:lane:{tenant}", self.prefix)
    }

    /// `<prefix>:leases` — running jobs' ids scored by lease expiry (ms).
    pub fn leases(&self) -> String {
        format!("{}:leases", self.prefix)
    }

    /// `<prefix>:tenant:<tenant>:events` — the pub/sub channel of a tenant's job changes
    /// (one JSON message per timeline event).
    pub fn tenant_events(&self, tenant: &TenantId) -> String {
        format!("{}:tenant:{tenant}:events", self.prefix)
    }

    /// `<prefix>:stats:<hour>` — jobs ended in each minute of that hour (since the epoch): a
    /// hash of `<minute>:<kind>:<outcome>` → count, expiring 26 hours after the hour began.
    pub fn stats(&self, hour: u64) -> String {
        format!("{}:stats:{hour}", self.prefix)
    }

    /// `<prefix>:everyone` — the newest jobs of every tenant (`browse`): a sorted set of
    /// `<ms>.<id>` at one score, ordered by name, trimmed to `EVERYONE_CAP` by create.lua
    /// every 64 creates (`TRIM_EVERY` in prelude.lua).
    pub fn everyone(&self) -> String {
        format!("{}:everyone", self.prefix)
    }

    /// `<prefix>:tenants` — the tenant picker: tenant ids scored by their last create (ms),
    /// trimmed to `PICKER_CAP` by create.lua every 64 creates; purge.lua removes a tenant.
    pub fn recent_tenants(&self) -> String {
        format!("{}:tenants", self.prefix)
    }

    /// `<prefix>:bulk:<slot>` — a bulk call's answer kept for its `Idempotency-Key` (slot:
    /// action, caller and key): `fingerprint` and `answer`, expiring after `JOB_TTL_SECONDS`.
    pub fn bulk(&self, slot: &str) -> String {
        format!("{}:bulk:{slot}", self.prefix)
    }

    /// `<prefix>:processes` — the process registry: `<started_ms>:<host/pid>` scored by its
    /// last heartbeat (ms, the store's clock); entries older than the stale threshold are
    /// dropped by every renewal.
    pub fn processes(&self) -> String {
        format!("{}:processes", self.prefix)
    }

    /// `<prefix>:events` — the pub/sub channel (`wake`, `cancel:<id>`, `end:<id>`).
    pub fn events(&self) -> String {
        format!("{}:events", self.prefix)
    }
}
