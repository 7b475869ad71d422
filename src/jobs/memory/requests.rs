//! What a client asks of the embedded store: create (with single flight, idempotency keys,
//! the per-tenant rate and the queue's cap), cancel and purge — each under the store's lock,
//! with the same answers as create.lua, cancel.lua and purge.lua.

use super::super::store::{
    params_fingerprint, Cancel, Created, Event, NewJob, Purge, StoreError, FIRST_CLAIM,
};
use super::super::{is_stale, now_ms, JobId, Kind, Status, TenantId};
use super::record::Record;
use super::state::{Expiring, State};
use super::MemoryStore;

impl MemoryStore {
    /// Like create.lua: `worker` set, the job is claimed for it when nothing waits.
    pub(super) fn create_for(
        &self,
        job: NewJob,
        worker: Option<&str>,
    ) -> Result<Created, StoreError> {
        let now = now_ms();
        let expires_ms = self.expiry(now);
        let mut state = self.state();
        state.sweep(now);
        let fence_holder = match self.refusal(&mut state, &job, now) {
            Ok(holder) => holder,
            Err(answer) => return Ok(answer),
        };
        if self.settings.creates_per_minute > 0 {
            state.count_create(&job.tenant, now);
        }
        if let Some(key) = job.idempotency_key.clone() {
            let value = (job.id, params_fingerprint(&job.params));
            let id_key = (job.tenant.clone(), job.kind.clone(), key);
            state.idem.insert(id_key, Expiring { value, expires_ms });
        }
        if let Some(holder) = fence_holder {
            if let Some(entry) = state.job_mut(&holder, now) {
                entry.value.superseded_by = Some(job.id);
                entry.value.lease_ms = None;
                let by = [("superseded_by", job.id.to_string().into())];
                state.note(holder, "superseded", Some("lost"), &by, now);
            }
        }
        let max = self.settings.max_attempts;
        let request = [("request_id", job.origin.request_id.clone().into())];
        let snapshot = job.record(Status::Queued, 0, &job.step, now, now, max);
        state.insert(
            Record::new(snapshot.clone()),
            expires_ms,
            self.settings.list_cap,
        );
        state.note(job.id, "created", None, &request, now);
        if let Some(worker) = worker.filter(|_| state.queue.is_empty()) {
            // Claimed in the same step, as create.lua does: created, then started.
            let claimed = job.claimed_record(worker, now, max);
            if let Some(entry) = state.job_mut(&job.id, now) {
                entry.value.snapshot = claimed.clone();
                entry.value.claim = FIRST_CLAIM;
                entry.value.lease_ms = Some(now + self.settings.stale_ms());
            }
            let extra = [("attempt", FIRST_CLAIM.into()), ("worker", worker.into())];
            state.note(job.id, "started", None, &extra, now);
            return Ok(Created::Created(Box::new(claimed)));
        }
        state.queue.push_back(job.id);
        let was_empty = state.queue.len() == 1;
        drop(state);
        if was_empty {
            self.publish(Event::Wake);
        }
        Ok(Created::Created(Box::new(snapshot)))
    }

    /// The answer that refuses `job`, checked in create.lua's order (a recorded idempotency
    /// key, an active holder, the queue's cap, the tenant's rate); else the stale holder it
    /// takes over, if any. A refusal changes nothing.
    fn refusal(&self, state: &mut State, job: &NewJob, now: u64) -> Result<Option<JobId>, Created> {
        if let Some(answer) = state.recorded(job, now) {
            return Err(answer);
        }
        let mut fence_holder = None;
        if let Some(holder) = state.lock(&job.tenant, &job.kind, now) {
            if let Some(entry) = state.job_mut(&holder, now) {
                let s = &entry.value.snapshot;
                match s.status {
                    Status::Queued => return Err(Created::AlreadyRunning(holder)),
                    Status::Running => {
                        if !is_stale(s.heartbeat_at, now, self.settings.stale_ms()) {
                            return Err(Created::AlreadyRunning(holder));
                        }
                        fence_holder = Some(holder);
                    }
                    _ => {}
                }
            }
        }
        if state.queue.len() >= self.settings.max_queued {
            return Err(Created::QueueFull);
        }
        let limit = self.settings.creates_per_minute;
        if let Some(wait) = state.rate_limited(&job.tenant, limit, now) {
            return Err(Created::RateLimited(wait));
        }
        Ok(fence_holder)
    }

    pub(super) fn cancel_job(&self, id: &JobId, by: &str) -> Result<Cancel, StoreError> {
        let now = now_ms();
        let mut state = self.state();
        let Some(entry) = state.job_mut(id, now) else {
            return Ok(Cancel::Missing);
        };
        let rec = &mut entry.value;
        if rec.superseded_by.is_some() || !rec.snapshot.status.is_active() {
            return Ok(Cancel::NotActive);
        }
        let first = rec.snapshot.cancel_requested_at.is_none();
        rec.snapshot.cancel_requested_at.get_or_insert(now);
        rec.snapshot
            .cancelled_by
            .get_or_insert_with(|| by.to_owned());
        let by = [("by", by.into())];
        if rec.snapshot.status == Status::Queued {
            state.note(*id, "cancel_requested", Some("cancelling"), &by, now);
            state.queue.retain(|queued| queued != id);
            state.end(*id, Status::Cancelled, now, Self::cancelled);
            drop(state);
            self.publish(Event::Ended(*id));
        } else if first {
            rec.snapshot.updated_at = now;
            state.note(*id, "cancel_requested", Some("cancelling"), &by, now);
            drop(state);
            self.publish(Event::Cancel(*id));
        }
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
        for id in &ids {
            if let Some(entry) = state.job_mut(id, now) {
                let rec = &entry.value;
                let active = matches!(rec.snapshot.status, Status::Queued | Status::Running);
                if active && rec.superseded_by.is_none() {
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
        state.bury(tenant, now, self.settings.ttl_secs() * 1000);
        Ok(Purge::Removed {
            jobs: removed,
            hashes: Vec::new(),
        })
    }
}
