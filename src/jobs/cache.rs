//! A short-lived cache of finished jobs, for replicas answering many polls of the same job.
//!
//! A finished job's life never changes again (the stores refuse every write to it), so a
//! cached copy can differ from Redis only by the record being deleted (TTL expiry, or an
//! operator clearing the tenant on another replica) or by a retry's audit (`retried_by`,
//! `retried_as`) written on another replica. Entries therefore live for `ttl` only (one
//! second by default): either is seen everywhere within it. Active jobs are never cached.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{JobId, Snapshot, TenantId};

pub struct FinishedCache {
    entries: Mutex<HashMap<JobId, (Snapshot, Instant)>>,
    ttl: Duration,
    capacity: usize,
}

impl FinishedCache {
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            ttl,
            capacity,
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, (Snapshot, Instant)>> {
        // Entries are whole values inserted in one step: a poisoned map is still consistent.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, id: &JobId) -> Option<Snapshot> {
        if self.ttl.is_zero() {
            return None;
        }
        let entries = self.entries();
        entries
            .get(id)
            .filter(|(_, at)| at.elapsed() < self.ttl)
            .map(|(s, _)| s.clone())
    }

    /// Keeps a snapshot if it is of a finished job.
    pub fn offer(&self, snapshot: &Snapshot) {
        if self.ttl.is_zero() || !snapshot.status.is_finished() {
            return;
        }
        let mut entries = self.entries();
        if entries.len() >= self.capacity {
            let ttl = self.ttl;
            entries.retain(|_, (_, at)| at.elapsed() < ttl);
            if entries.len() >= self.capacity {
                entries.clear();
            }
        }
        entries.insert(snapshot.job_id, (snapshot.clone(), Instant::now()));
    }

    /// Drops a job's entry: its record changed after it ended (a retry's audit).
    pub fn forget(&self, id: &JobId) {
        self.entries().remove(id);
    }

    pub fn forget_tenant(&self, tenant: &TenantId) {
        self.entries().retain(|_, (s, _)| s.tenant_id != *tenant);
    }
}
