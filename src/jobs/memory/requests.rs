//! What a client asks of the embedded store besides a create (`create.rs`): cancel and purge —
//! each under the store's lock, with the same answers as cancel.lua and purge.lua.

use super::super::store::{Cancel, Event, Purge, StoreError};
use super::super::{now_ms, JobId, Kind, Status, TenantId};
use super::MemoryStore;

impl MemoryStore {
    pub(super) fn cancel_job(&self, id: &JobId, by: &str) -> Result<Cancel, StoreError> {
        let now = now_ms();
        let mut state = self.state();
        let Some(entry) = state.job_mut(id, now) else {
            return Ok(Cancel::Missing);
        };
        let rec = &entry.value;
        if rec.superseded_by.is_some() || !rec.snapshot.status.is_active() {
            return Ok(Cancel::NotActive);
        }
        // A pipeline, or a step of an active one: the pipeline is asked to stop, its running
        // step with it, whichever step was named (as cancel.lua).
        let (parent, own) = (rec.snapshot.pipeline_id, !rec.steps.is_empty());
        let pipeline = match parent {
            Some(parent) if state.is_active(&parent, now) => Some(parent),
            _ => own.then_some(*id),
        };
        if let Some(pipeline) = pipeline {
            let answer = state.cancel_pipeline(pipeline, by, now);
            self.flush(state);
            return Ok(answer);
        }
        let Some(entry) = state.job_mut(id, now) else {
            return Ok(Cancel::Missing);
        };
        let rec = &mut entry.value;
        // It reads `lost` (no run holds it, none would hear the request: left lost under
        // MAX_ATTEMPTS=1, no sweep takes it again): it ends at once, as a queued one does.
        let (s, stale) = (&rec.snapshot, self.settings.stale_ms());
        let first = s.cancel_requested_at.is_none();
        let lost = first
            && s.status.derive(
                s.heartbeat_at,
                now,
                stale,
                false,
                s.attempt < s.max_attempts,
            ) == Status::Lost;
        rec.snapshot.cancel_requested_at.get_or_insert(now);
        rec.snapshot
            .cancelled_by
            .get_or_insert_with(|| by.to_owned());
        let by = [("by", by.into())];
        if rec.snapshot.status == Status::Queued || lost {
            state.note(*id, "cancel_requested", Some("cancelling"), &by, now);
            state.queue.retain(|queued| queued != id);
            state.end(*id, Status::Cancelled, now, Self::cancelled);
        } else if first {
            rec.snapshot.updated_at = now;
            state.note(*id, "cancel_requested", Some("cancelling"), &by, now);
            state.outbox.push(Event::Cancel(*id));
        }
        self.flush(state);
        Ok(Cancel::Requested)
    }

    pub(super) fn purge_tenant(
        &self,
        tenant: &TenantId,
        kinds: &[Kind],
    ) -> Result<Purge, StoreError> {
        let now = now_ms();
        let mut state = self.state();
        let mut ids: Vec<JobId> = state
            .tenants
            .get(tenant)
            .filter(|e| e.expires_ms > now)
            .map(|e| e.value.iter().copied().collect())
            .unwrap_or_default();
        ids.extend(kinds.iter().filter_map(|k| state.lock(tenant, k, now)));
        // A job that reads `lost` does not hold it back (as purge.lua): no run holds it and
        // none will; its lease goes with its record, and the tombstone fences its run.
        let stale = self.settings.stale_ms();
        for id in &ids {
            if let Some(entry) = state.job_mut(id, now) {
                let (rec, s) = (&entry.value, &entry.value.snapshot);
                let lost = rec.steps.is_empty()
                    && s.status.derive(
                        s.heartbeat_at,
                        now,
                        stale,
                        s.cancel_requested_at.is_some(),
                        s.attempt < s.max_attempts,
                    ) == Status::Lost;
                let active = matches!(s.status, Status::Queued | Status::Running);
                if active && !lost && rec.superseded_by.is_none() {
                    return Ok(Purge::StillActive(*id));
                }
            }
        }
        let mut removed = 0;
        for id in &ids {
            removed += u64::from(state.jobs.remove(id).is_some_and(|e| e.expires_ms > now));
        }
        for kind in kinds {
            state.locks.remove(&(tenant.clone(), kind.clone()));
        }
        state.tenants.remove(tenant);
        state.lanes.remove(tenant);
        state.picker.remove(tenant);
        state.bury(tenant, now, self.settings.ttl_secs() * 1000);
        Ok(Purge::Removed {
            jobs: removed,
            hashes: Vec::new(),
        })
    }
}
