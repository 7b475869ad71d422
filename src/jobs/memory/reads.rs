//! The embedded store's reads: a job, a tenant's listing, the active jobs, the cross-tenant
//! index and the tenant picker, a timeline and the queue's make-up, `lost` derived on read like Redis's, under the store's lock.

use super::super::browse::Position;
use super::super::store::{StoreError, QUEUE_SAMPLE};
use super::super::timeline::{EventId, TimelineEvent};
use super::super::{now_ms, JobId, Kind, Snapshot, Status, TenantId};
use super::MemoryStore;

impl MemoryStore {
    pub(super) fn read_job(&self, id: &JobId) -> Result<Option<Snapshot>, StoreError> {
        let now = now_ms();
        let state = self.state();
        let entry = state.jobs.get(id).filter(|e| e.expires_ms > now);
        Ok(entry.map(|e| self.read(&state, &e.value, now)))
    }

    pub(super) fn read_recent(
        &self,
        tenant: &TenantId,
        limit: usize,
    ) -> Result<Vec<Snapshot>, StoreError> {
        let now = now_ms();
        let state = self.state();
        let Some(list) = state.tenants.get(tenant).filter(|e| e.expires_ms > now) else {
            return Ok(Vec::new());
        };
        Ok(list
            .value
            .iter()
            .take(limit)
            .filter_map(|id| state.jobs.get(id).filter(|e| e.expires_ms > now))
            .map(|e| self.read(&state, &e.value, now))
            .collect())
    }

    /// The ready queue's jobs and the leased (running) ones. There is no lease index here:
    /// the records are walked in memory, under the lock, which costs microseconds per
    /// thousand jobs and no I/O.
    pub(super) fn read_active(&self) -> Result<Vec<Snapshot>, StoreError> {
        let now = now_ms();
        let state = self.state();
        Ok(state
            .jobs
            .values()
            .filter(|e| e.expires_ms > now)
            .map(|e| &e.value)
            .filter(|r| r.superseded_by.is_none())
            .filter(|r| r.snapshot.status == Status::Queued || r.lease_ms.is_some())
            .map(|r| self.read(&state, r, now))
            .filter(|s| s.status.is_active() || s.status == Status::Lost)
            .collect())
    }

    pub(super) fn read_index_page(&self, after: Option<Position>, count: usize) -> Vec<Position> {
        let state = self.state();
        let before = match after {
            Some(p) => state.everyone.range(..p),
            None => state.everyone.range(..),
        };
        before.rev().take(count).copied().collect()
    }

    /// Drops from the index each entry of `gone` whose job has no live record (`unlist.lua`).
    pub(super) fn unlist_gone(&self, gone: &[Position]) -> u64 {
        let now = now_ms();
        let mut state = self.state();
        let mut removed = 0;
        for entry in gone {
            let live = state.jobs.get(&entry.1).is_some_and(|e| e.expires_ms > now);
            if !live && state.everyone.remove(entry) {
                removed += 1;
            }
        }
        removed
    }

    pub(super) fn read_many(&self, ids: &[JobId]) -> Vec<Snapshot> {
        let now = now_ms();
        let state = self.state();
        ids.iter()
            .filter_map(|id| state.jobs.get(id).filter(|e| e.expires_ms > now))
            .map(|e| self.read(&state, &e.value, now))
            .collect()
    }

    pub(super) fn read_recent_tenants(&self) -> Vec<(TenantId, u64)> {
        let mut tenants: Vec<(TenantId, u64)> = self
            .state()
            .picker
            .iter()
            .map(|(t, ms)| (t.clone(), *ms))
            .collect();
        tenants.sort_unstable_by(|a, b| (b.1, &b.0).cmp(&(a.1, &a.0)));
        tenants
    }

    pub(super) fn read_timeline(
        &self,
        id: &JobId,
        after: Option<EventId>,
    ) -> Result<Vec<TimelineEvent>, StoreError> {
        let now = now_ms();
        let mut state = self.state();
        Ok(state
            .job_mut(id, now)
            .map(|entry| entry.value.timeline.after(after))
            .unwrap_or_default())
    }

    pub(super) fn read_queued_by_kind(&self) -> Result<Vec<(Kind, u64)>, StoreError> {
        let now = now_ms();
        let mut state = self.state();
        let ids: Vec<JobId> = state.queue.iter().take(QUEUE_SAMPLE).copied().collect();
        let mut counts: Vec<(Kind, u64)> = Vec::new();
        for id in ids {
            let Some(entry) = state.job_mut(&id, now) else {
                continue;
            };
            let kind = &entry.value.snapshot.kind;
            match counts.iter_mut().find(|(k, _)| k == kind) {
                Some((_, n)) => *n += 1,
                None => counts.push((kind.clone(), 1)),
            }
        }
        Ok(counts)
    }
}
