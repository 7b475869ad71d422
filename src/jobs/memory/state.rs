//! The embedded store's bookkeeping, all under its one lock: the records with their
//! expiry, the tenant+kind locks, the tenants' listings, idempotency keys, the per-tenant
//! create windows, the ready queue, the per-minute counts of ended jobs and this process's
//! heartbeat — each kept as the Redis keys of the same name are.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use super::super::browse::{Position, EVERYONE_CAP, PICKER_CAP};
use super::super::bulk::KeptAnswer;
use super::super::stats::{minute_of, DAY_MINUTES};
use super::super::store::{params_fingerprint, Created, Event, NewJob};
use super::super::watch::Watchers;
use super::super::{JobId, Kind, Status, TenantId};
use super::record::Record;

/// How often expired entries are swept out (lookups also ignore them).
const SWEEP_EVERY_MS: u64 = 10_000;
/// The fixed window `creates_per_minute` counts in (as create.lua's).
pub(super) const RATE_WINDOW_MS: u64 = 60_000;

pub(super) struct Expiring<T> {
    pub(super) value: T,
    pub(super) expires_ms: u64,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) jobs: HashMap<JobId, Expiring<Record>>,
    pub(super) locks: HashMap<(TenantId, Kind), Expiring<JobId>>,
    pub(super) tenants: HashMap<TenantId, Expiring<VecDeque<JobId>>>,
    /// Idempotency keys: (tenant, kind, key) → the job and its params fingerprint.
    pub(super) idem: HashMap<(TenantId, Kind, String), Expiring<(JobId, String)>>,
    /// Creates per tenant in the current fixed window (window number, count).
    pub(super) rates: HashMap<TenantId, (u64, u32)>,
    /// Tombstones: a deleted tenant → the time of its last delete (as `Keys::gone`).
    pub(super) gone: HashMap<TenantId, Expiring<u64>>,
    pub(super) queue: VecDeque<JobId>,
    pub(super) last_sweep_ms: u64,
    /// The least time between two progress ticks kept in a timeline.
    pub(super) progress_sample_ms: u64,
    /// The open streams' watches of tenants, fed by every timeline write.
    pub(super) watchers: Arc<Watchers>,
    /// Jobs ended per minute (since the epoch), by kind and outcome: the last day's.
    pub(super) ended: BTreeMap<u64, HashMap<(Kind, Status), u64>>,
    /// This process's last heartbeat (`renew`), until it leaves.
    pub(super) heartbeat_at: Option<u64>,
    /// Each tenant's ordered jobs that have not ended, oldest first (`memory::order`).
    pub(super) lanes: HashMap<TenantId, VecDeque<JobId>>,
    /// Pipelines being ended in the current step: their steps' ends change nothing more.
    pub(super) closing: HashSet<JobId>,
    /// What the current step tells subscribers once the lock is let go (`MemoryStore::flush`).
    pub(super) outbox: Vec<Event>,
    /// The cross-tenant index: the newest jobs' (created ms, id), at most `EVERYONE_CAP`.
    pub(super) everyone: BTreeSet<Position>,
    /// The tenant picker: each tenant's last create (ms), at most `PICKER_CAP` tenants.
    pub(super) picker: HashMap<TenantId, u64>,
    /// Bulk answers kept for their `Idempotency-Key` (as `Keys::bulk`): slot → kept answer.
    pub(super) answers: HashMap<String, Expiring<KeptAnswer>>,
}

impl State {
    pub(super) fn sweep(&mut self, now: u64) {
        if now.saturating_sub(self.last_sweep_ms) < SWEEP_EVERY_MS {
            return;
        }
        self.last_sweep_ms = now;
        self.jobs.retain(|_, e| e.expires_ms > now);
        let jobs = &self.jobs;
        self.lanes.retain(|_, lane| {
            lane.retain(|id| jobs.contains_key(id));
            !lane.is_empty()
        });
        self.locks.retain(|_, e| e.expires_ms > now);
        self.tenants.retain(|_, e| e.expires_ms > now);
        self.idem.retain(|_, e| e.expires_ms > now);
        self.gone.retain(|_, e| e.expires_ms > now);
        self.answers.retain(|_, e| e.expires_ms > now);
        self.rates
            .retain(|_, (window, _)| *window >= now / RATE_WINDOW_MS);
    }

    /// Like `index_job` in the prelude: the job enters the index and its tenant the picker,
    /// the oldest of each dropped beyond its cap.
    pub(super) fn index_job(&mut self, tenant: &TenantId, id: JobId, now: u64) {
        self.everyone.insert((now, id));
        while self.everyone.len() > EVERYONE_CAP {
            self.everyone.pop_first();
        }
        self.picker.insert(tenant.clone(), now);
        if self.picker.len() > PICKER_CAP {
            let oldest = self
                .picker
                .iter()
                .min_by_key(|(t, ms)| (**ms, (*t).clone()));
            if let Some(oldest) = oldest.map(|(t, _)| t.clone()) {
                self.picker.remove(&oldest);
            }
        }
    }

    /// Like `count_end` in the prelude: one more job of `kind` ended `status` in the minute
    /// of `now`.
    pub(super) fn count_end(&mut self, kind: &Kind, status: Status, now: u64) {
        *self
            .ended
            .entry(minute_of(now))
            .or_default()
            .entry((kind.clone(), status))
            .or_default() += 1;
        self.keep_a_day_of_ends(now);
    }

    /// Drops the counts of minutes older than a day before `now` (Redis expires them).
    pub(super) fn keep_a_day_of_ends(&mut self, now: u64) {
        let first = (minute_of(now) + 1).saturating_sub(DAY_MINUTES);
        self.ended = self.ended.split_off(&first);
    }

    /// Like create.lua: the job a live idempotency key names, if that job still exists.
    pub(super) fn recorded(&mut self, job: &NewJob, now: u64) -> Option<Created> {
        let key = job.idempotency_key.clone()?;
        let id_key = (job.tenant.clone(), job.kind.clone(), key);
        let (id, fingerprint) = self
            .idem
            .get(&id_key)
            .filter(|e| e.expires_ms > now)
            .map(|e| e.value.clone())?;
        self.job_mut(&id, now)?;
        Some(match fingerprint == params_fingerprint(&job.params) {
            true => Created::Replayed(id),
            false => Created::KeyReused(id),
        })
    }

    /// How long until the tenant may create again, when it used its share of this window.
    pub(super) fn rate_limited(&self, tenant: &TenantId, limit: u32, now: u64) -> Option<Duration> {
        let window = now / RATE_WINDOW_MS;
        let (w, count) = self.rates.get(tenant).copied()?;
        (limit > 0 && w == window && count >= limit)
            .then(|| Duration::from_millis((window + 1) * RATE_WINDOW_MS - now))
    }

    pub(super) fn count_create(&mut self, tenant: &TenantId, now: u64) {
        let window = now / RATE_WINDOW_MS;
        let entry = self.rates.entry(tenant.clone()).or_insert((window, 0));
        if entry.0 != window {
            *entry = (window, 0);
        }
        entry.1 += 1;
    }

    /// Whether `tenant` was deleted since `since` (its tombstone is at or after it; see
    /// `jobs::fence::Writer::since`).
    pub(super) fn deleted_since(&self, tenant: &TenantId, since: u64, now: u64) -> bool {
        self.gone
            .get(tenant)
            .is_some_and(|e| e.expires_ms > now && e.value >= since)
    }

    /// Like `may_write_back` in the prelude: a lost record of `job` (created at `created_at`)
    /// may be written back only when no other job holds its lock, no job of its kind created
    /// after it is in the listing, and its tenant was not deleted since it was created.
    pub(super) fn may_write_back(&mut self, job: &NewJob, created_at: u64, now: u64) -> bool {
        if self
            .lock(&job.tenant, &job.kind, now)
            .is_some_and(|holder| holder != job.id)
        {
            return false;
        }
        if self.deleted_since(&job.tenant, created_at, now) {
            return false;
        }
        let listed: Vec<JobId> = self
            .tenants
            .get(&job.tenant)
            .filter(|e| e.expires_ms > now)
            .map(|e| e.value.iter().copied().collect())
            .unwrap_or_default();
        !listed.iter().any(|other| {
            *other != job.id
                && self.job_mut(other, now).is_some_and(|e| {
                    e.value.snapshot.kind == job.kind && e.value.snapshot.created_at > created_at
                })
        })
    }

    /// What a delete leaves and takes beside the jobs (as purge.lua): the tenant's
    /// idempotency keys and create window go, and its tombstone stands for `ttl_ms`, above
    /// any earlier one.
    pub(super) fn bury(&mut self, tenant: &TenantId, now: u64, ttl_ms: u64) {
        self.idem.retain(|(t, _, _), _| t != tenant);
        self.rates.remove(tenant);
        let stamp = self
            .gone
            .get(tenant)
            .filter(|e| e.expires_ms > now)
            .map_or(now, |e| now.max(e.value + 1));
        let value = Expiring {
            value: stamp,
            expires_ms: now + ttl_ms,
        };
        self.gone.insert(tenant.clone(), value);
    }

    pub(super) fn job_mut(&mut self, id: &JobId, now: u64) -> Option<&mut Expiring<Record>> {
        self.jobs.get_mut(id).filter(|e| e.expires_ms > now)
    }

    pub(super) fn lock(&self, tenant: &TenantId, kind: &Kind, now: u64) -> Option<JobId> {
        self.locks
            .get(&(tenant.clone(), kind.clone()))
            .filter(|e| e.expires_ms > now)
            .map(|e| e.value)
    }

    pub(super) fn take_lock(&mut self, tenant: &TenantId, kind: &Kind, id: JobId, expires_ms: u64) {
        self.locks.insert(
            (tenant.clone(), kind.clone()),
            Expiring {
                value: id,
                expires_ms,
            },
        );
    }

    pub(super) fn release_lock(&mut self, tenant: &TenantId, kind: &Kind, id: JobId, now: u64) {
        if self.lock(tenant, kind, now) == Some(id) {
            self.locks.remove(&(tenant.clone(), kind.clone()));
        }
    }

    /// Inserts a record with its lock and listing entry, as one step.
    pub(super) fn insert(&mut self, record: Record, expires_ms: u64, cap: usize) {
        let s = &record.snapshot;
        let (id, tenant, kind) = (s.job_id, s.tenant_id.clone(), s.kind.clone());
        self.jobs.insert(
            id,
            Expiring {
                value: record,
                expires_ms,
            },
        );
        self.take_lock(&tenant, &kind, id, expires_ms);
        self.push_listing(&tenant, id, expires_ms, cap);
    }

    /// Like `list_push` in the prelude: trimmed jobs that have ended are deleted.
    pub(super) fn push_listing(
        &mut self,
        tenant: &TenantId,
        id: JobId,
        expires_ms: u64,
        cap: usize,
    ) {
        let entry = self
            .tenants
            .entry(tenant.clone())
            .or_insert_with(|| Expiring {
                value: VecDeque::new(),
                expires_ms,
            });
        entry.value.push_front(id);
        entry.expires_ms = expires_ms;
        let gone: Vec<JobId> = entry.value.drain(cap.min(entry.value.len())..).collect();
        for old in gone {
            if self
                .jobs
                .get(&old)
                .is_some_and(|e| e.value.snapshot.status.is_finished())
            {
                self.jobs.remove(&old);
            }
        }
    }
}
