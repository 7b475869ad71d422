//! `MemoryStore`: the embedded store used when no Redis is configured.
//!
//! Same contract as `RedisStore` — locks, takeover of stale holders, fencing, TTLs, `lost`
//! derived on read — kept under one mutex so every operation is atomic, like a Lua script.
//! Not durable: state dies with the process, and the service says so at start-up.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use super::store::{
    BoxFuture, Cancel, Created, JobStore, Live, NewJob, Outcome, StoreError, StoreSettings, Write,
};
use super::{is_stale, now_ms, JobId, Kind, Snapshot, Status, TenantId};

/// How often expired entries are swept out (lookups also ignore them).
const SWEEP_EVERY_MS: u64 = 10_000;

struct Expiring<T> {
    value: T,
    expires_ms: u64,
}

struct Record {
    snapshot: Snapshot,
    superseded_by: Option<JobId>,
}

#[derive(Default)]
struct State {
    jobs: HashMap<JobId, Expiring<Record>>,
    locks: HashMap<(TenantId, Kind), Expiring<JobId>>,
    tenants: HashMap<TenantId, Expiring<VecDeque<JobId>>>,
    last_sweep_ms: u64,
}

impl State {
    fn sweep(&mut self, now: u64) {
        if now.saturating_sub(self.last_sweep_ms) < SWEEP_EVERY_MS {
            return;
        }
        self.last_sweep_ms = now;
        self.jobs.retain(|_, e| e.expires_ms > now);
        self.locks.retain(|_, e| e.expires_ms > now);
        self.tenants.retain(|_, e| e.expires_ms > now);
    }

    fn job_mut(&mut self, id: &JobId, now: u64) -> Option<&mut Expiring<Record>> {
        self.jobs.get_mut(id).filter(|e| e.expires_ms > now)
    }

    fn lock(&self, tenant: &TenantId, kind: &Kind, now: u64) -> Option<JobId> {
        self.locks
            .get(&(tenant.clone(), kind.clone()))
            .filter(|e| e.expires_ms > now)
            .map(|e| e.value)
    }

    /// Inserts an active job's record, its lock and its listing entry, as one step.
    fn insert_live(&mut self, snapshot: Snapshot, expires_ms: u64, cap: usize) {
        let (id, tenant, kind) = (
            snapshot.job_id,
            snapshot.tenant_id.clone(),
            snapshot.kind.clone(),
        );
        self.jobs.insert(
            id,
            Expiring {
                value: Record {
                    snapshot,
                    superseded_by: None,
                },
                expires_ms,
            },
        );
        self.locks.insert(
            (tenant.clone(), kind),
            Expiring {
                value: id,
                expires_ms,
            },
        );
        self.push_listing(&tenant, id, expires_ms, cap);
    }

    fn push_listing(&mut self, tenant: &TenantId, id: JobId, expires_ms: u64, cap: usize) {
        let entry = self
            .tenants
            .entry(tenant.clone())
            .or_insert_with(|| Expiring {
                value: VecDeque::new(),
                expires_ms,
            });
        entry.value.push_front(id);
        entry.value.truncate(cap);
        entry.expires_ms = expires_ms;
    }
}

pub struct MemoryStore {
    state: Mutex<State>,
    settings: StoreSettings,
}

impl MemoryStore {
    pub fn new(settings: StoreSettings) -> Self {
        Self {
            state: Mutex::new(State::default()),
            settings,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-written record: every operation
        // validates before it mutates, so a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn expiry(&self, now: u64) -> u64 {
        now + self.settings.ttl_secs() * 1000
    }

    fn read(&self, rec: &Record, now: u64) -> Snapshot {
        let mut s = rec.snapshot.clone();
        s.status = s.status.derive(
            s.heartbeat_at,
            now,
            self.settings.stale_ms(),
            s.cancel_requested_at.is_some(),
        );
        s
    }

    /// The checks tick and heartbeat share: the job exists, is not fenced, is active.
    fn writable<'s>(
        state: &'s mut State,
        id: &JobId,
        now: u64,
    ) -> Result<&'s mut Expiring<Record>, Write> {
        let Some(entry) = state.job_mut(id, now) else {
            return Err(Write::Missing);
        };
        if entry.value.superseded_by.is_some() {
            return Err(Write::Fenced);
        }
        if !entry.value.snapshot.status.is_active() {
            return Err(Write::Ignored);
        }
        Ok(entry)
    }
}

impl JobStore for MemoryStore {
    fn create(&self, job: NewJob) -> BoxFuture<'_, Result<Created, StoreError>> {
        Box::pin(async move {
            let now = now_ms();
            let expires_ms = self.expiry(now);
            let mut state = self.state();
            state.sweep(now);
            if let Some(holder) = state.lock(&job.tenant, &job.kind, now) {
                if let Some(entry) = state.job_mut(&holder, now) {
                    let s = &entry.value.snapshot;
                    if s.status.is_active() {
                        if !is_stale(s.heartbeat_at, now, self.settings.stale_ms()) {
                            return Ok(Created::AlreadyRunning(holder));
                        }
                        entry.value.superseded_by = Some(job.id);
                    }
                }
            }
            let snapshot = job.record(Status::Queued, 0, &job.step, now, now);
            state.insert_live(snapshot.clone(), expires_ms, self.settings.list_cap);
            Ok(Created::Created(Box::new(snapshot)))
        })
    }

    fn tick<'a>(
        &'a self,
        id: &'a JobId,
        percent: u8,
        step: &'a str,
    ) -> BoxFuture<'a, Result<Write, StoreError>> {
        Box::pin(async move {
            let now = now_ms();
            let mut state = self.state();
            let entry = match Self::writable(&mut state, id, now) {
                Ok(entry) => entry,
                Err(answer) => return Ok(answer),
            };
            let s = &mut entry.value.snapshot;
            s.status = Status::Running;
            s.percent = s.percent.max(percent.min(100));
            step.clone_into(&mut s.step);
            s.updated_at = now;
            s.heartbeat_at = now;
            s.started_at.get_or_insert(now);
            Ok(Write::Applied)
        })
    }

    fn heartbeat<'a>(
        &'a self,
        id: &'a JobId,
        tenant: &'a TenantId,
        kind: &'a Kind,
    ) -> BoxFuture<'a, Result<Write, StoreError>> {
        Box::pin(async move {
            let now = now_ms();
            let expires_ms = self.expiry(now);
            let mut state = self.state();
            if let Err(answer) = Self::writable(&mut state, id, now) {
                return Ok(answer);
            }
            if state
                .lock(tenant, kind, now)
                .is_some_and(|holder| holder != *id)
            {
                return Ok(Write::Fenced);
            }
            let entry = Self::writable(&mut state, id, now)
                .expect("checked writable above, under the same lock");
            entry.value.snapshot.heartbeat_at = now;
            entry.expires_ms = expires_ms;
            let cancel = entry.value.snapshot.cancel_requested_at.is_some();
            state.locks.insert(
                (tenant.clone(), kind.clone()),
                Expiring {
                    value: *id,
                    expires_ms,
                },
            );
            Ok(if cancel {
                Write::CancelRequested
            } else {
                Write::Applied
            })
        })
    }

    fn finish<'a>(
        &'a self,
        job: &'a NewJob,
        created_at: u64,
        outcome: &'a Outcome,
        percent: u8,
    ) -> BoxFuture<'a, Result<Write, StoreError>> {
        Box::pin(async move {
            let now = now_ms();
            let expires_ms = self.expiry(now);
            let mut state = self.state();
            let lock = state.lock(&job.tenant, &job.kind, now);
            match state.job_mut(&job.id, now) {
                None => {
                    if lock.is_some_and(|holder| holder != job.id) {
                        return Ok(Write::Fenced);
                    }
                    // Written back whole; the outcome is applied below like any finish.
                    let snapshot = job.record(Status::Running, 0, "", created_at, now);
                    state.insert_live(snapshot, expires_ms, self.settings.list_cap);
                }
                Some(entry) => {
                    if entry.value.superseded_by.is_some() {
                        return Ok(Write::Fenced);
                    }
                    if !entry.value.snapshot.status.is_active() {
                        return Ok(Write::Ignored);
                    }
                }
            }
            let entry = state
                .job_mut(&job.id, now)
                .expect("the record exists: found or written back above");
            entry.expires_ms = expires_ms;
            let s = &mut entry.value.snapshot;
            s.status = outcome.status();
            s.step = outcome.step();
            match outcome {
                Outcome::Done(report) => {
                    s.percent = 100;
                    s.result = report.clone();
                }
                Outcome::Failed(class, report) => {
                    s.percent = s.percent.max(percent.min(100));
                    s.error = Some(class.clone());
                    if let Some(report) = report {
                        s.result = report.clone();
                    }
                }
                Outcome::Cancelled => s.percent = s.percent.max(percent.min(100)),
            }
            s.updated_at = now;
            s.finished_at = Some(now);
            s.started_at.get_or_insert(now);
            // Read again: a record written back above took the lock with it.
            if state.lock(&job.tenant, &job.kind, now) == Some(job.id) {
                state.locks.remove(&(job.tenant.clone(), job.kind.clone()));
            }
            Ok(Write::Applied)
        })
    }

    fn restore<'a>(
        &'a self,
        job: &'a NewJob,
        created_at: u64,
        live: &'a Live,
    ) -> BoxFuture<'a, Result<Write, StoreError>> {
        Box::pin(async move {
            let now = now_ms();
            let expires_ms = self.expiry(now);
            let mut state = self.state();
            if state.job_mut(&job.id, now).is_some() {
                return Ok(Write::Ignored);
            }
            if state
                .lock(&job.tenant, &job.kind, now)
                .is_some_and(|holder| holder != job.id)
            {
                return Ok(Write::Fenced);
            }
            let snapshot = job.record(
                live.status,
                live.percent.min(100),
                &live.step,
                created_at,
                now,
            );
            state.insert_live(snapshot, expires_ms, self.settings.list_cap);
            Ok(Write::Applied)
        })
    }

    fn cancel<'a>(&'a self, id: &'a JobId) -> BoxFuture<'a, Result<Cancel, StoreError>> {
        Box::pin(async move {
            let now = now_ms();
            let mut state = self.state();
            Ok(match Self::writable(&mut state, id, now) {
                Err(Write::Missing) => Cancel::Missing,
                Err(_) => Cancel::NotActive,
                Ok(entry) => {
                    let s = &mut entry.value.snapshot;
                    if s.cancel_requested_at.is_none() {
                        s.cancel_requested_at = Some(now);
                        s.updated_at = now;
                    }
                    Cancel::Requested
                }
            })
        })
    }

    fn get<'a>(&'a self, id: &'a JobId) -> BoxFuture<'a, Result<Option<Snapshot>, StoreError>> {
        Box::pin(async move {
            let now = now_ms();
            let mut state = self.state();
            Ok(state.job_mut(id, now).map(|e| self.read(&e.value, now)))
        })
    }

    fn recent<'a>(
        &'a self,
        tenant: &'a TenantId,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Snapshot>, StoreError>> {
        Box::pin(async move {
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
                .map(|e| self.read(&e.value, now))
                .collect())
        })
    }

    fn clear_tenant<'a>(
        &'a self,
        tenant: &'a TenantId,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        Box::pin(async move {
            let mut state = self.state();
            let Some(list) = state.tenants.remove(tenant) else {
                return Ok(0);
            };
            let mut n = 0;
            for id in list.value {
                if let Some(e) = state.jobs.remove(&id) {
                    n += 1;
                    let key = (tenant.clone(), e.value.snapshot.kind);
                    if state.locks.get(&key).is_some_and(|l| l.value == id) {
                        state.locks.remove(&key);
                    }
                }
            }
            Ok(n)
        })
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }

    fn is_durable(&self) -> bool {
        false
    }

    fn settings(&self) -> &StoreSettings {
        &self.settings
    }
}
