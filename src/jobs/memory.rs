//! `MemoryStore`: the embedded store used when no Redis is configured.
//!
//! Same contract as `RedisStore` — a ready queue with a cap, leased runs fenced by their
//! claim number, recovery of expired leases, locks, takeover of stale holders, TTLs, `lost`
//! derived on read, events to subscribers — kept under one mutex so every operation is
//! atomic, like a Lua script. Not durable: state dies with the process, and the service
//! says so at start-up.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use tokio::sync::broadcast;

use super::store::{
    params_fingerprint, BoxFuture, Cancel, Claim, Created, Event, Finish, JobStore, Live, NewJob,
    Origin, Outcome, Purge, Recovered, Release, Renewal, Restore, RunId, StoreError, StoreSettings,
    Tick, FIRST_CLAIM, QUEUE_SAMPLE, STARTING_STEP,
};
use super::timeline::{EventId, JobChange, TimelineEvent, TIMELINE_CAP};
use super::watch::{TenantWatch, Watchers};
use super::{is_stale, now_ms, worker_name, JobId, Kind, Snapshot, Status, TenantId};

/// How often expired entries are swept out (lookups also ignore them).
const SWEEP_EVERY_MS: u64 = 10_000;
/// Events buffered per subscriber; one that falls further behind gets `Resync`.
const EVENT_BUFFER: usize = 4096;
/// The fixed window `creates_per_minute` counts in (as create.lua's).
const RATE_WINDOW_MS: u64 = 60_000;

struct Expiring<T> {
    value: T,
    expires_ms: u64,
}

struct Record {
    snapshot: Snapshot,
    superseded_by: Option<JobId>,
    /// The fencing token of the current run (raised by every claim).
    claim: u64,
    /// The next claim does not count an attempt (the run was given back at shutdown).
    free_retry: bool,
    /// When the running job's lease expires.
    lease_ms: Option<u64>,
    /// Its timeline, oldest first, at most `TIMELINE_CAP` events (it expires with the record).
    timeline: VecDeque<TimelineEvent>,
}

impl Record {
    fn new(snapshot: Snapshot) -> Self {
        Self {
            snapshot,
            superseded_by: None,
            claim: 0,
            free_retry: false,
            lease_ms: None,
            timeline: VecDeque::new(),
        }
    }

    /// Whether run `claim` may write: `Ok`, or the answer `run_state` gives in the prelude.
    fn held_by(&self, claim: u64) -> Result<(), Tick> {
        let active = self.snapshot.status == Status::Running;
        if self.superseded_by.is_some() || !active || self.claim != claim {
            return Err(Tick::Fenced);
        }
        Ok(())
    }
}

#[derive(Default)]
struct State {
    jobs: HashMap<JobId, Expiring<Record>>,
    locks: HashMap<(TenantId, Kind), Expiring<JobId>>,
    tenants: HashMap<TenantId, Expiring<VecDeque<JobId>>>,
    /// Idempotency keys: (tenant, kind, key) → the job and its params fingerprint.
    idem: HashMap<(TenantId, Kind, String), Expiring<(JobId, String)>>,
    /// Creates per tenant in the current fixed window (window number, count).
    rates: HashMap<TenantId, (u64, u32)>,
    queue: VecDeque<JobId>,
    last_sweep_ms: u64,
    /// The last timeline event id handed out (ids only grow, as a stream's do).
    last_event: EventId,
    /// The open streams' watches of tenants, fed by every timeline write.
    watchers: Arc<Watchers>,
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
        self.idem.retain(|_, e| e.expires_ms > now);
        self.rates
            .retain(|_, (window, _)| *window >= now / RATE_WINDOW_MS);
    }

    /// Like create.lua: the job a live idempotency key names, if that job still exists.
    fn recorded(&mut self, job: &NewJob, now: u64) -> Option<Created> {
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
    fn rate_limited(&self, tenant: &TenantId, limit: u32, now: u64) -> Option<Duration> {
        let window = now / RATE_WINDOW_MS;
        let (w, count) = self.rates.get(tenant).copied()?;
        (limit > 0 && w == window && count >= limit)
            .then(|| Duration::from_millis((window + 1) * RATE_WINDOW_MS - now))
    }

    fn count_create(&mut self, tenant: &TenantId, now: u64) {
        let window = now / RATE_WINDOW_MS;
        let entry = self.rates.entry(tenant.clone()).or_insert((window, 0));
        if entry.0 != window {
            *entry = (window, 0);
        }
        entry.1 += 1;
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

    fn take_lock(&mut self, tenant: &TenantId, kind: &Kind, id: JobId, expires_ms: u64) {
        self.locks.insert(
            (tenant.clone(), kind.clone()),
            Expiring {
                value: id,
                expires_ms,
            },
        );
    }

    fn release_lock(&mut self, tenant: &TenantId, kind: &Kind, id: JobId, now: u64) {
        if self.lock(tenant, kind, now) == Some(id) {
            self.locks.remove(&(tenant.clone(), kind.clone()));
        }
    }

    /// Inserts a record with its lock and listing entry, as one step.
    fn insert(&mut self, record: Record, expires_ms: u64, cap: usize) {
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
    fn push_listing(&mut self, tenant: &TenantId, id: JobId, expires_ms: u64, cap: usize) {
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

    /// Like `note` in the prelude: appends an event to the job's timeline (the record as it
    /// reads now, `status` when given) and hands it to the tenant's watchers.
    fn note(
        &mut self,
        id: JobId,
        typ: &str,
        status: Option<&str>,
        extra: &[(&str, Value)],
        now: u64,
    ) {
        let event_id = self.last_event.next(now);
        self.last_event = event_id;
        let Some(entry) = self.jobs.get_mut(&id) else {
            return;
        };
        let rec = &mut entry.value;
        let s = &rec.snapshot;
        let status = status.unwrap_or(match s.cancel_requested_at {
            Some(_) if s.status == Status::Running => Status::Cancelling.as_str(),
            _ => s.status.as_str(),
        });
        let event = TimelineEvent {
            id: event_id.to_string(),
            kind: typ.to_owned(),
            at: now,
            status: status.to_owned(),
            percent: s.percent,
            step: s.step.clone(),
            extra: extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        };
        let change = JobChange {
            id: event.id.clone(),
            kind_of_event: event.kind.clone(),
            job_id: id.to_string(),
            tenant_id: s.tenant_id.to_string(),
            kind: s.kind.to_string(),
            status: event.status.clone(),
            percent: event.percent,
            step: event.step.clone(),
        };
        rec.timeline.push_back(event);
        if rec.timeline.len() > TIMELINE_CAP {
            rec.timeline.pop_front();
        }
        self.watchers.send(change);
    }

    /// Ends an active job: final fields set by `fill`, lock released, lease dropped, and its
    /// `finished` event.
    fn end(&mut self, id: JobId, status: Status, now: u64, fill: impl FnOnce(&mut Snapshot)) {
        let Some(entry) = self.jobs.get_mut(&id) else {
            return;
        };
        entry.value.lease_ms = None;
        let s = &mut entry.value.snapshot;
        s.status = status;
        s.updated_at = now;
        s.finished_at = Some(now);
        fill(s);
        let error: Vec<(&str, Value)> = s
            .error
            .iter()
            .map(|e| ("error", e.as_str().into()))
            .collect();
        let (tenant, kind) = (s.tenant_id.clone(), s.kind.clone());
        self.release_lock(&tenant, &kind, id, now);
        self.note(id, "finished", None, &error, now);
    }
}

pub struct MemoryStore {
    state: Mutex<State>,
    settings: StoreSettings,
    events: broadcast::Sender<Event>,
}

impl MemoryStore {
    pub fn new(settings: StoreSettings) -> Self {
        Self {
            state: Mutex::new(State::default()),
            settings,
            events: broadcast::channel(EVENT_BUFFER).0,
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

    fn publish(&self, event: Event) {
        // No subscriber (a store used without a runner) is not an error.
        let _ = self.events.send(event);
    }

    fn read(&self, rec: &Record, now: u64) -> Snapshot {
        let mut s = rec.snapshot.clone();
        s.status = s.status.derive(
            s.heartbeat_at,
            now,
            self.settings.stale_ms(),
            s.cancel_requested_at.is_some(),
        );
        s.with_eta(now)
    }

    fn cancelled(s: &mut Snapshot) {
        s.step = "cancelled on request".to_owned();
    }

    /// Like create.lua: `worker` set, the job is claimed for it when nothing waits.
    fn create_for(&self, job: NewJob, worker: Option<&str>) -> Result<Created, StoreError> {
        let now = now_ms();
        let expires_ms = self.expiry(now);
        let mut state = self.state();
        state.sweep(now);
        if let Some(answer) = state.recorded(&job, now) {
            return Ok(answer);
        }
        let mut fence_holder = None;
        if let Some(holder) = state.lock(&job.tenant, &job.kind, now) {
            if let Some(entry) = state.job_mut(&holder, now) {
                let s = &entry.value.snapshot;
                match s.status {
                    Status::Queued => return Ok(Created::AlreadyRunning(holder)),
                    Status::Running => {
                        if !is_stale(s.heartbeat_at, now, self.settings.stale_ms()) {
                            return Ok(Created::AlreadyRunning(holder));
                        }
                        fence_holder = Some(holder);
                    }
                    _ => {}
                }
            }
        }
        if state.queue.len() >= self.settings.max_queued {
            return Ok(Created::QueueFull);
        }
        let limit = self.settings.creates_per_minute;
        if let Some(wait) = state.rate_limited(&job.tenant, limit, now) {
            return Ok(Created::RateLimited(wait));
        }
        if limit > 0 {
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
}

impl JobStore for MemoryStore {
    fn create(&self, job: NewJob) -> BoxFuture<'_, Result<Created, StoreError>> {
        Box::pin(async move { self.create_for(job, None) })
    }

    fn create_claimed<'a>(
        &'a self,
        job: NewJob,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Created, StoreError>> {
        Box::pin(async move { self.create_for(job, Some(worker)) })
    }

    fn claim<'a>(
        &'a self,
        worker: &'a str,
        kinds: &'a [Kind],
    ) -> BoxFuture<'a, Result<Option<Claim>, StoreError>> {
        Box::pin(async move {
            let now = now_ms();
            let expires_ms = self.expiry(now);
            let lease_ms = now + self.settings.stale_ms();
            let mut state = self.state();
            // Like claim.lua: a job of a kind this worker does not run goes to the tail; met
            // again, the whole queue was seen.
            let mut first_passed = None;
            while let Some(id) = state.queue.pop_front() {
                if first_passed == Some(id) {
                    state.queue.push_front(id);
                    return Ok(None);
                }
                let Some(entry) = state.job_mut(&id, now) else {
                    continue;
                };
                let rec = &mut entry.value;
                if rec.snapshot.status != Status::Queued || rec.superseded_by.is_some() {
                    continue;
                }
                if !kinds.contains(&rec.snapshot.kind) {
                    state.queue.push_back(id);
                    first_passed.get_or_insert(id);
                    continue;
                }
                if !std::mem::take(&mut rec.free_retry) {
                    rec.snapshot.attempt += 1;
                }
                rec.claim += 1;
                rec.lease_ms = Some(lease_ms);
                entry.expires_ms = expires_ms;
                let s = &mut rec.snapshot;
                s.status = Status::Running;
                s.worker = Some(worker.to_owned());
                STARTING_STEP.clone_into(&mut s.step);
                s.updated_at = now;
                s.heartbeat_at = now;
                s.started_at.get_or_insert(now);
                let claim = Claim {
                    job: NewJob {
                        id,
                        tenant: s.tenant_id.clone(),
                        kind: s.kind.clone(),
                        params: s.params.clone(),
                        step: String::new(),
                        origin: Origin {
                            created_by: s.created_by.clone().unwrap_or_default(),
                            request_id: s.request_id.clone().unwrap_or_default(),
                            retry_of: s.retry_of,
                        },
                        idempotency_key: None,
                    },
                    created_at: s.created_at,
                    run: RunId {
                        id,
                        claim: rec.claim,
                    },
                    attempt: s.attempt,
                };
                let extra = [("attempt", claim.attempt.into()), ("worker", worker.into())];
                state.note(id, "started", None, &extra, now);
                return Ok(Some(claim));
            }
            Ok(None)
        })
    }

    fn tick<'a>(
        &'a self,
        run: &'a RunId,
        percent: u8,
        step: &'a str,
    ) -> BoxFuture<'a, Result<Tick, StoreError>> {
        Box::pin(async move {
            let now = now_ms();
            let mut state = self.state();
            let Some(entry) = state.job_mut(&run.id, now) else {
                return Ok(Tick::Missing);
            };
            if let Err(answer) = entry.value.held_by(run.claim) {
                return Ok(answer);
            }
            let s = &mut entry.value.snapshot;
            s.percent = s.percent.max(percent.min(100));
            step.clone_into(&mut s.step);
            s.updated_at = now;
            state.note(run.id, "progress", None, &[], now);
            Ok(Tick::Applied)
        })
    }

    fn renew<'a>(&'a self, runs: &'a [RunId]) -> BoxFuture<'a, Result<Vec<Renewal>, StoreError>> {
        Box::pin(async move {
            let now = now_ms();
            let expires_ms = self.expiry(now);
            let lease_ms = now + self.settings.stale_ms();
            let mut state = self.state();
            let mut out = Vec::with_capacity(runs.len());
            for run in runs {
                let Some(entry) = state.job_mut(&run.id, now) else {
                    out.push(Renewal::Missing);
                    continue;
                };
                if entry.value.held_by(run.claim).is_err() {
                    out.push(Renewal::Fenced);
                    continue;
                }
                let s = &entry.value.snapshot;
                let (tenant, kind) = (s.tenant_id.clone(), s.kind.clone());
                if state
                    .lock(&tenant, &kind, now)
                    .is_some_and(|holder| holder != run.id)
                {
                    out.push(Renewal::Fenced);
                    continue;
                }
                let entry = state.job_mut(&run.id, now).expect("found above");
                entry.expires_ms = expires_ms;
                entry.value.lease_ms = Some(lease_ms);
                let s = &mut entry.value.snapshot;
                s.heartbeat_at = now;
                out.push(if s.cancel_requested_at.is_some() {
                    Renewal::CancelRequested
                } else {
                    Renewal::Held
                });
                state.take_lock(&tenant, &kind, run.id, expires_ms);
            }
            Ok(out)
        })
    }

    fn finish<'a>(
        &'a self,
        job: &'a NewJob,
        run: &'a RunId,
        created_at: u64,
        outcome: &'a Outcome,
        percent: u8,
    ) -> BoxFuture<'a, Result<Finish, StoreError>> {
        Box::pin(async move {
            let now = now_ms();
            let expires_ms = self.expiry(now);
            let mut state = self.state();
            match state.job_mut(&job.id, now) {
                None => {
                    let lock = state.lock(&job.tenant, &job.kind, now);
                    if lock.is_some_and(|holder| holder != job.id) {
                        return Ok(Finish::Fenced);
                    }
                    // Written back whole; the outcome is applied below like any finish.
                    let snapshot = job.record(
                        Status::Running,
                        percent.min(100),
                        &outcome.step(),
                        created_at,
                        now,
                        self.settings.max_attempts,
                    );
                    let mut record = Record::new(snapshot);
                    record.claim = run.claim;
                    state.insert(record, expires_ms, self.settings.list_cap);
                    state.note(job.id, "restored", None, &[], now);
                }
                Some(entry) => {
                    if entry.value.snapshot.status.is_finished() {
                        return Ok(Finish::AlreadyEnded);
                    }
                    if entry.value.held_by(run.claim).is_err() {
                        return Ok(Finish::Fenced);
                    }
                    entry.expires_ms = expires_ms;
                }
            }
            state.end(job.id, outcome.status(), now, |s| {
                s.step = outcome.step();
                s.heartbeat_at = now;
                s.started_at.get_or_insert(now);
                s.percent = s.percent.max(percent.min(100));
                match outcome {
                    Outcome::Done(report) => {
                        s.percent = 100;
                        s.result = report.clone();
                    }
                    Outcome::Failed(class, report) => {
                        s.error = Some(class.clone());
                        if let Some(report) = report {
                            s.result = report.clone();
                        }
                    }
                    Outcome::Cancelled(report) => s.result = report.clone(),
                }
            });
            drop(state);
            self.publish(Event::Ended(job.id));
            Ok(Finish::Applied)
        })
    }

    fn restore<'a>(
        &'a self,
        job: &'a NewJob,
        run: &'a RunId,
        created_at: u64,
        live: &'a Live,
    ) -> BoxFuture<'a, Result<Restore, StoreError>> {
        Box::pin(async move {
            let now = now_ms();
            let expires_ms = self.expiry(now);
            let mut state = self.state();
            if state.job_mut(&job.id, now).is_some() {
                return Ok(Restore::Present);
            }
            if state
                .lock(&job.tenant, &job.kind, now)
                .is_some_and(|holder| holder != job.id)
            {
                return Ok(Restore::Fenced);
            }
            let mut snapshot = job.record(
                Status::Running,
                live.percent.min(100),
                &live.step,
                created_at,
                now,
                self.settings.max_attempts,
            );
            snapshot.attempt = live.attempt;
            snapshot.worker = Some(worker_name());
            let mut record = Record::new(snapshot);
            record.claim = run.claim;
            record.lease_ms = Some(now + self.settings.stale_ms());
            state.insert(record, expires_ms, self.settings.list_cap);
            let extra = [
                ("attempt", live.attempt.into()),
                ("worker", worker_name().into()),
            ];
            state.note(job.id, "restored", None, &extra, now);
            Ok(Restore::Restored)
        })
    }

    fn release<'a>(&'a self, run: &'a RunId) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(async move {
            let now = now_ms();
            let mut state = self.state();
            let Some(entry) = state.job_mut(&run.id, now) else {
                return Ok(Release::Fenced);
            };
            if entry.value.held_by(run.claim).is_err() {
                return Ok(Release::Fenced);
            }
            if entry.value.snapshot.cancel_requested_at.is_some() {
                state.end(run.id, Status::Cancelled, now, Self::cancelled);
                drop(state);
                self.publish(Event::Ended(run.id));
                return Ok(Release::Requeued);
            }
            let rec = &mut entry.value;
            rec.free_retry = true;
            rec.lease_ms = None;
            rec.snapshot.status = Status::Queued;
            rec.snapshot.updated_at = now;
            "requeued: its replica shut down; waiting for a worker"
                .clone_into(&mut rec.snapshot.step);
            state.queue.push_front(run.id);
            state.note(run.id, "released", None, &[], now);
            drop(state);
            self.publish(Event::Wake);
            Ok(Release::Requeued)
        })
    }

    fn recover(&self) -> BoxFuture<'_, Result<Vec<Recovered>, StoreError>> {
        Box::pin(async move {
            let now = now_ms();
            let max = self.settings.max_attempts.max(1);
            let mut state = self.state();
            let due: Vec<JobId> = state
                .jobs
                .iter()
                .filter(|(_, e)| e.value.lease_ms.is_some_and(|at| at <= now))
                .map(|(id, _)| *id)
                .collect();
            let mut out = Vec::new();
            let mut events = Vec::new();
            for id in due {
                let entry = state.jobs.get_mut(&id).expect("listed above");
                let rec = &mut entry.value;
                rec.lease_ms = None;
                if rec.snapshot.status != Status::Running || rec.superseded_by.is_some() {
                    continue;
                }
                if rec.snapshot.cancel_requested_at.is_some() {
                    state.end(id, Status::Cancelled, now, Self::cancelled);
                    events.push(Event::Ended(id));
                } else if rec.snapshot.attempt < max {
                    let s = &mut rec.snapshot;
                    s.status = Status::Queued;
                    s.recovered_at = Some(now);
                    s.updated_at = now;
                    "recovered: its run was lost; waiting for a worker".clone_into(&mut s.step);
                    let attempt = [("attempt", s.attempt.into())];
                    state.note(id, "requeued", None, &attempt, now);
                    state.queue.push_front(id);
                    out.push(Recovered::Requeued(id));
                    events.push(Event::Wake);
                } else if max > 1 {
                    state.end(id, Status::Failed, now, |s| {
                        s.error = Some("Lost".to_owned());
                        "failed: Lost".clone_into(&mut s.step);
                    });
                    out.push(Recovered::Lost(id));
                    events.push(Event::Ended(id));
                } else {
                    state.note(id, "lost", Some("lost"), &[], now);
                }
            }
            drop(state);
            for event in events {
                self.publish(event);
            }
            Ok(out)
        })
    }

    fn cancel<'a>(
        &'a self,
        id: &'a JobId,
        by: &'a str,
    ) -> BoxFuture<'a, Result<Cancel, StoreError>> {
        Box::pin(async move {
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
        })
    }

    fn purge<'a>(
        &'a self,
        tenant: &'a TenantId,
        kinds: &'a [Kind],
    ) -> BoxFuture<'a, Result<Purge, StoreError>> {
        Box::pin(async move {
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
            Ok(Purge::Removed(removed))
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

    /// The ready queue's jobs and the leased (running) ones. There is no lease index here:
    /// the records are walked in memory, under the lock, which costs microseconds per
    /// thousand jobs and no I/O.
    fn active(&self) -> BoxFuture<'_, Result<Vec<Snapshot>, StoreError>> {
        Box::pin(async move {
            let now = now_ms();
            let state = self.state();
            Ok(state
                .jobs
                .values()
                .filter(|e| e.expires_ms > now)
                .map(|e| &e.value)
                .filter(|r| r.superseded_by.is_none())
                .filter(|r| r.snapshot.status == Status::Queued || r.lease_ms.is_some())
                .map(|r| self.read(r, now))
                .filter(|s| s.status.is_active() || s.status == Status::Lost)
                .collect())
        })
    }

    fn subscribe(&self) -> broadcast::Receiver<Event> {
        let rx = self.events.subscribe();
        self.publish(Event::Resync);
        rx
    }

    fn timeline<'a>(
        &'a self,
        id: &'a JobId,
        after: Option<EventId>,
    ) -> BoxFuture<'a, Result<Vec<TimelineEvent>, StoreError>> {
        Box::pin(async move {
            let now = now_ms();
            let mut state = self.state();
            let Some(entry) = state.job_mut(id, now) else {
                return Ok(Vec::new());
            };
            Ok(entry
                .value
                .timeline
                .iter()
                .filter(|e| after.is_none_or(|after| e.event_id() > Some(after)))
                .cloned()
                .collect())
        })
    }

    fn watch_tenant<'a>(&'a self, tenant: &'a TenantId) -> BoxFuture<'a, TenantWatch> {
        Box::pin(async move {
            let watchers = self.state().watchers.clone();
            watchers.watch(tenant)
        })
    }

    fn queued_by_kind(&self) -> BoxFuture<'_, Result<Vec<(Kind, u64)>, StoreError>> {
        Box::pin(async move {
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

    fn while_held(&self, run: &RunId, write: &mut dyn FnMut()) -> bool {
        // Under the store's lock: no claim, recovery or end can come between check and write.
        let mut state = self.state();
        let held = state
            .job_mut(&run.id, now_ms())
            .is_some_and(|entry| entry.value.held_by(run.claim).is_ok());
        if held {
            write();
        }
        held
    }

    fn job_key(&self, _id: &JobId) -> Option<String> {
        None
    }
}
