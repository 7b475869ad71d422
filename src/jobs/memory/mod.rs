//! `MemoryStore`: the embedded store used when no Redis is configured.
//!
//! Same contract as `RedisStore` — a ready queue with a cap, leased runs fenced by their
//! claim number, recovery of expired leases, locks, takeover of stale holders, TTLs, `lost`
//! derived on read, events to subscribers — kept under one mutex so every operation is
//! atomic, like a Lua script. Not durable: state dies with the process, and the service
//! says so at start-up.

mod audit;
mod create;
mod order;
mod reads;
mod record;
mod requests;
mod runs;
mod state;
mod timeline;

use std::sync::Mutex;

use tokio::sync::broadcast;

use super::browse::{Browse, Position};
use super::fence::{Hold, ScriptFence, Writer};
use super::pipeline;
use super::stats::{Beat, Ended, Overview, Process};
use super::store::{
    BoxFuture, Cancel, Claim, Created, Event, Finish, JobStore, Live, NewJob, NewPipeline, Purge,
    Recovered, Release, Renewal, Restore, RunEnd, RunId, RunRef, StoreError, StoreSettings, Tick,
};
use super::timeline::{EventId, TimelineEvent};
use super::watch::TenantWatch;
use super::{is_stale, now_ms, JobId, Kind, Snapshot, TenantId};
use record::Record;
use state::State;

/// Events buffered per subscriber; one that falls further behind gets `Resync`.
const EVENT_BUFFER: usize = 4096;

pub struct MemoryStore {
    state: Mutex<State>,
    settings: StoreSettings,
    /// This process: the only one an embedded store's registry can hold.
    process: Process,
    events: broadcast::Sender<Event>,
}

impl MemoryStore {
    pub fn new(settings: StoreSettings) -> Self {
        Self {
            state: Mutex::new(State {
                progress_sample_ms: settings.progress_sample_ms(),
                ..State::default()
            }),
            settings,
            process: Process::this(),
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

    /// Lets go of the lock, then tells subscribers what the step did (its `outbox`).
    fn flush(&self, mut state: std::sync::MutexGuard<'_, State>) {
        let events = std::mem::take(&mut state.outbox);
        drop(state);
        for event in events {
            self.publish(event);
        }
    }

    /// The job as a reader sees it at `now`; a pipeline composed from its steps' records.
    fn read(&self, state: &State, rec: &Record, now: u64) -> Snapshot {
        let read = |rec: &Record| match rec.superseded_by {
            Some(_) => rec.snapshot.clone().superseded(rec.timeline.last_ms()),
            None => rec.snapshot.clone().read_at(now, self.settings.stale_ms()),
        };
        let own = read(rec);
        if rec.steps.is_empty() {
            return own;
        }
        let steps: Vec<Option<Snapshot>> = rec
            .steps
            .iter()
            .map(|s| {
                let entry = state.jobs.get(&s.job_id).filter(|e| e.expires_ms > now);
                entry.map(|e| read(&e.value))
            })
            .collect();
        pipeline::compose(own, &rec.steps, &steps, now)
    }

    fn cancelled(s: &mut Snapshot) {
        s.step = "cancelled on request".to_owned();
    }

    /// Like the Redis store's: the last day's ends, and this process while its heartbeat
    /// is fresh.
    fn read_overview(&self) -> Overview {
        let now = now_ms();
        let mut state = self.state();
        state.keep_a_day_of_ends(now);
        let ended = state
            .ended
            .iter()
            .flat_map(|(minute, counts)| {
                counts.iter().map(|((kind, outcome), count)| Ended {
                    minute: *minute,
                    kind: kind.clone(),
                    outcome: *outcome,
                    count: *count,
                })
            })
            .collect();
        let processes = state
            .heartbeat_at
            .filter(|at| !is_stale(*at, now, self.settings.stale_ms()))
            .map(|heartbeat_at| Beat {
                process: self.process.clone(),
                heartbeat_at,
            })
            .into_iter()
            .collect();
        Overview {
            now_ms: now,
            ended,
            processes,
        }
    }
}

impl JobStore for MemoryStore {
    fn create(&self, job: NewJob) -> BoxFuture<'_, Result<Created, StoreError>> {
        Box::pin(async move { self.create_for(job, None) })
    }

    fn create_pipeline(&self, pipeline: NewPipeline) -> BoxFuture<'_, Result<Created, StoreError>> {
        Box::pin(async move { self.create_pipeline_jobs(pipeline) })
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
        Box::pin(async move { self.claim_next(worker, kinds) })
    }

    fn tick<'a>(
        &'a self,
        run: &'a RunId,
        percent: u8,
        step: &'a str,
    ) -> BoxFuture<'a, Result<Tick, StoreError>> {
        Box::pin(async move { self.tick_run(run, percent, step) })
    }

    fn renew<'a>(&'a self, runs: &'a [RunId]) -> BoxFuture<'a, Result<Vec<Renewal>, StoreError>> {
        Box::pin(async move { self.renew_runs(runs) })
    }

    fn finish<'a>(&'a self, end: RunEnd<'a>) -> BoxFuture<'a, Result<Finish, StoreError>> {
        Box::pin(async move { self.finish_run(end) })
    }

    fn restore<'a>(
        &'a self,
        run: RunRef<'a>,
        live: &'a Live,
    ) -> BoxFuture<'a, Result<Restore, StoreError>> {
        Box::pin(async move { self.restore_run(run, live) })
    }

    fn release<'a>(&'a self, run: &'a RunId) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(async move { self.release_run(run) })
    }

    fn recover(&self) -> BoxFuture<'_, Result<Vec<Recovered>, StoreError>> {
        Box::pin(async move { self.recover_leases() })
    }

    fn cancel<'a>(
        &'a self,
        id: &'a JobId,
        by: &'a str,
    ) -> BoxFuture<'a, Result<Cancel, StoreError>> {
        Box::pin(async move { self.cancel_job(id, by) })
    }

    fn purge<'a>(
        &'a self,
        tenant: &'a TenantId,
        kinds: &'a [Kind],
        _hashes: &'a [String],
    ) -> BoxFuture<'a, Result<Purge, StoreError>> {
        Box::pin(async move { self.purge_tenant(tenant, kinds) })
    }

    fn get<'a>(&'a self, id: &'a JobId) -> BoxFuture<'a, Result<Option<Snapshot>, StoreError>> {
        Box::pin(async move { self.read_job(id) })
    }

    fn recent<'a>(
        &'a self,
        tenant: &'a TenantId,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Snapshot>, StoreError>> {
        Box::pin(async move { self.read_recent(tenant, limit) })
    }

    fn active(&self) -> BoxFuture<'_, Result<Vec<Snapshot>, StoreError>> {
        Box::pin(async move { self.read_active() })
    }

    fn overview(&self) -> BoxFuture<'_, Result<Overview, StoreError>> {
        Box::pin(async move { Ok(self.read_overview()) })
    }

    fn leave(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            self.state().heartbeat_at = None;
            Ok(())
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
        Box::pin(async move { self.read_timeline(id, after) })
    }

    fn watch_tenant<'a>(&'a self, tenant: &'a TenantId) -> BoxFuture<'a, TenantWatch> {
        Box::pin(async move {
            let watchers = self.state().watchers.clone();
            watchers.watch(tenant)
        })
    }

    fn queued_by_kind(&self) -> BoxFuture<'_, Result<Vec<(Kind, u64)>, StoreError>> {
        Box::pin(async move { self.read_queued_by_kind() })
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

    fn while_held(&self, writer: &Writer, write: &mut dyn FnMut()) -> Hold {
        // Under the store's lock: no claim, recovery, end or delete can come between check
        // and write.
        let now = now_ms();
        let mut state = self.state();
        let deleted = state.deleted_since(writer.tenant(), writer.since(), now);
        let hold = match writer {
            Writer::Run { run, .. } => match state.job_mut(&run.id, now) {
                Some(entry) if entry.value.held_by(run.claim).is_ok() => Hold::Held,
                Some(_) => Hold::Fenced,
                None if deleted => Hold::Fenced,
                None => Hold::Missing,
            },
            Writer::Import { .. } if deleted => Hold::Fenced,
            Writer::Import { .. } => Hold::Held,
        };
        if hold == Hold::Held {
            write();
        }
        hold
    }

    fn fence_keys(&self, _writer: &Writer) -> Option<ScriptFence> {
        None
    }

    fn tombstone<'a>(&'a self, tenant: &'a TenantId) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            let now = now_ms();
            let state = self.state();
            Ok(state
                .gone
                .get(tenant)
                .filter(|e| e.expires_ms > now)
                .map_or(0, |e| e.value))
        })
    }
}

impl Browse for MemoryStore {
    fn index_page(
        &self,
        after: Option<Position>,
        count: usize,
    ) -> BoxFuture<'_, Result<Vec<Position>, StoreError>> {
        Box::pin(async move { Ok(self.read_index_page(after, count)) })
    }

    fn get_many<'a>(
        &'a self,
        ids: &'a [JobId],
    ) -> BoxFuture<'a, Result<Vec<Snapshot>, StoreError>> {
        Box::pin(async move { Ok(self.read_many(ids)) })
    }

    fn recent_tenants(&self) -> BoxFuture<'_, Result<Vec<(TenantId, u64)>, StoreError>> {
        Box::pin(async move { Ok(self.read_recent_tenants()) })
    }

    fn unlist<'a>(&'a self, gone: &'a [Position]) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move { Ok(self.unlist_gone(gone)) })
    }
}
