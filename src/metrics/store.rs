//! `MeteredStore`: a job store that times every operation and counts its failures (and every
//! progress write), then hands the answer back unchanged. Wrapping the store here keeps
//! metric calls out of the stores and the runner, and measures each backend the same way.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::broadcast;

use crate::jobs::browse::{Browse, Position};
use crate::jobs::bulk::{Audit, KeptAnswer};
use crate::jobs::cache::Finished;
use crate::jobs::fence::{Hold, ScriptFence, Writer};
use crate::jobs::stats::Overview;
use crate::jobs::store::{
    BoxFuture, Cancel, Claim, Created, Event, Finish, JobStore, Live, NewJob, NewPipeline, Purge,
    Recovered, Release, Renewal, Restore, RunEnd, RunId, RunRef, StoreError, StoreSettings, Tick,
    Topology,
};
use crate::jobs::timeline::{EventId, TimelineEvent};
use crate::jobs::watch::TenantWatch;
use crate::jobs::{JobId, Kind, Snapshot, TenantId};

pub struct MeteredStore {
    inner: Arc<dyn JobStore>,
}

impl MeteredStore {
    pub fn wrap(inner: Arc<dyn JobStore>) -> Arc<dyn JobStore> {
        Arc::new(Self { inner })
    }
}

/// Runs one store operation, recording its latency under `op` and counting it if it failed.
async fn timed<T>(
    op: &'static str,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let started = Instant::now();
    let answer = call.await;
    super::store_op(op, started.elapsed(), answer.is_err());
    answer
}

/// The timed operations of a store trait, a line each: the metric's `op`, then the method as
/// the trait declares it (every borrowed argument lives for `'a`) and what it answers; each
/// becomes a method that forwards to the inner store through [`timed`]. A line that ends
/// `then counted` also calls `counted()` once the operation succeeded.
macro_rules! timed_ops {
    ($($op:literal => fn $name:ident($($arg:ident: $ty:ty),*) -> $answer:ty $(, then $counted:path)?;)*) => {$(
        fn $name<'a>(&'a self, $($arg: $ty),*) -> BoxFuture<'a, Result<$answer, StoreError>> {
            Box::pin(async move {
                let answer = timed($op, self.inner.$name($($arg),*)).await;
                $(if answer.is_ok() {
                    $counted();
                })?
                answer
            })
        }
    )*};
}

impl JobStore for MeteredStore {
    timed_ops! {
        "create" => fn create(job: NewJob) -> Created;
        "create" => fn create_claimed(job: NewJob, worker: &'a str) -> Created;
        "create" => fn create_probing(job: NewJob, worker: &'a str, probe: &'a str) -> (Created, bool);
        "create" => fn create_pipeline(pipeline: NewPipeline) -> Created;
        "claim" => fn claim(worker: &'a str, kinds: &'a [Kind]) -> Option<Claim>;
        "claim" => fn claim_many(worker: &'a str, kinds: &'a [Kind], n: usize) -> Vec<Claim>;
        "finish" => fn finish_and_claim(end: RunEnd<'a>, worker: &'a str, kinds: &'a [Kind]) -> (Finish, Option<Claim>);
        "tick" => fn tick(run: &'a RunId, percent: u8, step: &'a str) -> Tick, then super::progress_written;
        "renew" => fn renew(runs: &'a [RunId]) -> Vec<Renewal>;
        "finish" => fn finish(end: RunEnd<'a>) -> Finish;
        "restore" => fn restore(run: RunRef<'a>, live: &'a Live) -> Restore;
        "release" => fn release(run: &'a RunId) -> Release;
        "recover" => fn recover() -> Vec<Recovered>;
        "cancel" => fn cancel(id: &'a JobId, by: &'a str) -> Cancel;
        "purge" => fn purge(tenant: &'a TenantId, kinds: &'a [Kind], hashes: &'a [String]) -> Purge;
        "get" => fn get(id: &'a JobId) -> Option<Snapshot>;
        "recent" => fn recent(tenant: &'a TenantId, limit: usize) -> Vec<Snapshot>;
        "active" => fn active() -> Vec<Snapshot>;
        "overview" => fn overview() -> Overview;
        "leave" => fn leave() -> ();
        "timeline" => fn timeline(id: &'a JobId, after: Option<EventId>) -> Vec<TimelineEvent>;
        "queued_by_kind" => fn queued_by_kind() -> Vec<(Kind, u64)>;
        "ping" => fn ping() -> ();
        "tombstone" => fn tombstone(tenant: &'a TenantId) -> u64;
    }

    /// Timed as the `get` it answers in place of (a miss is followed by that `get`), so a
    /// poll counts one `get` either way.
    fn finished_kept(&self, id: &JobId) -> Option<Arc<Finished>> {
        let started = Instant::now();
        let kept = self.inner.finished_kept(id);
        if kept.is_some() {
            super::store_op("get", started.elapsed(), false);
        }
        kept
    }

    // Not timed: bookkeeping of this process, and the start-up checks.

    fn expect_end<'a>(&'a self, id: &'a JobId) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.expect_end(id)
    }

    fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.inner.subscribe()
    }

    fn watch_tenant<'a>(&'a self, tenant: &'a TenantId) -> BoxFuture<'a, TenantWatch> {
        self.inner.watch_tenant(tenant)
    }

    fn writable(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        self.inner.writable()
    }

    fn warnings(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        self.inner.warnings()
    }

    fn is_durable(&self) -> bool {
        self.inner.is_durable()
    }

    fn persists(&self) -> BoxFuture<'_, Result<Option<bool>, StoreError>> {
        self.inner.persists()
    }

    fn topology(&self) -> BoxFuture<'_, Result<Option<Topology>, StoreError>> {
        self.inner.topology()
    }

    fn settings(&self) -> &StoreSettings {
        self.inner.settings()
    }

    fn while_held(&self, writer: &Writer, write: &mut dyn FnMut()) -> Hold {
        self.inner.while_held(writer, write)
    }

    fn fence_keys(&self, writer: &Writer) -> Option<ScriptFence> {
        self.inner.fence_keys(writer)
    }
}

impl Browse for MeteredStore {
    timed_ops! {
        "index_page" => fn index_page(after: Option<Position>, count: usize) -> Vec<Position>;
        "get_many" => fn get_many(ids: &'a [JobId]) -> Vec<Snapshot>;
        "recent_tenants" => fn recent_tenants() -> Vec<(TenantId, u64)>;
        "unlist" => fn unlist(gone: &'a [Position]) -> u64;
    }
}

impl Audit for MeteredStore {
    timed_ops! {
        "recall_answer" => fn recall_answer(slot: &'a str) -> Option<KeptAnswer>;
        "keep_answer" => fn keep_answer(slot: &'a str, fingerprint: &'a str, answer: &'a str) -> ();
    }
}
