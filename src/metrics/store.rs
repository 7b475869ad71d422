//! `MeteredStore`: a job store that times every operation and counts its failures (and every
//! progress write), then hands the answer back unchanged. Wrapping the store here keeps
//! metric calls out of the stores and the runner, and measures each backend the same way.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::broadcast;

use crate::jobs::browse::{Browse, Position};
use crate::jobs::bulk::{Audit, KeptAnswer};
use crate::jobs::fence::{Hold, ScriptFence, Writer};
use crate::jobs::stats::Overview;
use crate::jobs::store::{
    BoxFuture, Cancel, Claim, Created, Event, Finish, JobStore, Live, NewJob, NewPipeline, Outcome,
    Purge, Recovered, Release, Renewal, Restore, RunId, StoreError, StoreSettings, Tick, Topology,
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

impl JobStore for MeteredStore {
    fn create(&self, job: NewJob) -> BoxFuture<'_, Result<Created, StoreError>> {
        Box::pin(timed("create", self.inner.create(job)))
    }

    fn create_claimed<'a>(
        &'a self,
        job: NewJob,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Created, StoreError>> {
        Box::pin(timed("create", self.inner.create_claimed(job, worker)))
    }

    fn create_pipeline(&self, pipeline: NewPipeline) -> BoxFuture<'_, Result<Created, StoreError>> {
        Box::pin(timed("create", self.inner.create_pipeline(pipeline)))
    }

    fn claim<'a>(
        &'a self,
        worker: &'a str,
        kinds: &'a [Kind],
    ) -> BoxFuture<'a, Result<Option<Claim>, StoreError>> {
        Box::pin(timed("claim", self.inner.claim(worker, kinds)))
    }

    fn claim_many<'a>(
        &'a self,
        worker: &'a str,
        kinds: &'a [Kind],
        n: usize,
    ) -> BoxFuture<'a, Result<Vec<Claim>, StoreError>> {
        Box::pin(timed("claim", self.inner.claim_many(worker, kinds, n)))
    }

    fn finish_and_claim<'a>(
        &'a self,
        job: &'a NewJob,
        run: &'a RunId,
        created_at: u64,
        outcome: &'a Outcome,
        percent: u8,
        worker: &'a str,
        kinds: &'a [Kind],
    ) -> BoxFuture<'a, Result<(Finish, Option<Claim>), StoreError>> {
        Box::pin(timed(
            "finish",
            self.inner
                .finish_and_claim(job, run, created_at, outcome, percent, worker, kinds),
        ))
    }

    fn expect_end<'a>(&'a self, id: &'a JobId) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.expect_end(id)
    }

    fn tick<'a>(
        &'a self,
        run: &'a RunId,
        percent: u8,
        step: &'a str,
    ) -> BoxFuture<'a, Result<Tick, StoreError>> {
        Box::pin(async move {
            let answer = timed("tick", self.inner.tick(run, percent, step)).await;
            if answer.is_ok() {
                super::progress_written();
            }
            answer
        })
    }

    fn renew<'a>(&'a self, runs: &'a [RunId]) -> BoxFuture<'a, Result<Vec<Renewal>, StoreError>> {
        Box::pin(timed("renew", self.inner.renew(runs)))
    }

    fn finish<'a>(
        &'a self,
        job: &'a NewJob,
        run: &'a RunId,
        created_at: u64,
        outcome: &'a Outcome,
        percent: u8,
    ) -> BoxFuture<'a, Result<Finish, StoreError>> {
        Box::pin(timed(
            "finish",
            self.inner.finish(job, run, created_at, outcome, percent),
        ))
    }

    fn restore<'a>(
        &'a self,
        job: &'a NewJob,
        run: &'a RunId,
        created_at: u64,
        live: &'a Live,
    ) -> BoxFuture<'a, Result<Restore, StoreError>> {
        Box::pin(timed(
            "restore",
            self.inner.restore(job, run, created_at, live),
        ))
    }

    fn release<'a>(&'a self, run: &'a RunId) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(timed("release", self.inner.release(run)))
    }

    fn recover(&self) -> BoxFuture<'_, Result<Vec<Recovered>, StoreError>> {
        Box::pin(timed("recover", self.inner.recover()))
    }

    fn cancel<'a>(
        &'a self,
        id: &'a JobId,
        by: &'a str,
    ) -> BoxFuture<'a, Result<Cancel, StoreError>> {
        Box::pin(timed("cancel", self.inner.cancel(id, by)))
    }

    fn purge<'a>(
        &'a self,
        tenant: &'a TenantId,
        kinds: &'a [Kind],
        hashes: &'a [String],
    ) -> BoxFuture<'a, Result<Purge, StoreError>> {
        Box::pin(timed("purge", self.inner.purge(tenant, kinds, hashes)))
    }

    fn get<'a>(&'a self, id: &'a JobId) -> BoxFuture<'a, Result<Option<Snapshot>, StoreError>> {
        Box::pin(timed("get", self.inner.get(id)))
    }

    fn recent<'a>(
        &'a self,
        tenant: &'a TenantId,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Snapshot>, StoreError>> {
        Box::pin(timed("recent", self.inner.recent(tenant, limit)))
    }

    fn active(&self) -> BoxFuture<'_, Result<Vec<Snapshot>, StoreError>> {
        Box::pin(timed("active", self.inner.active()))
    }

    fn overview(&self) -> BoxFuture<'_, Result<Overview, StoreError>> {
        Box::pin(timed("overview", self.inner.overview()))
    }

    fn leave(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(timed("leave", self.inner.leave()))
    }

    fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.inner.subscribe()
    }

    fn timeline<'a>(
        &'a self,
        id: &'a JobId,
        after: Option<EventId>,
    ) -> BoxFuture<'a, Result<Vec<TimelineEvent>, StoreError>> {
        Box::pin(timed("timeline", self.inner.timeline(id, after)))
    }

    fn watch_tenant<'a>(&'a self, tenant: &'a TenantId) -> BoxFuture<'a, TenantWatch> {
        self.inner.watch_tenant(tenant)
    }

    fn queued_by_kind(&self) -> BoxFuture<'_, Result<Vec<(Kind, u64)>, StoreError>> {
        Box::pin(timed("queued_by_kind", self.inner.queued_by_kind()))
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(timed("ping", self.inner.ping()))
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

    fn tombstone<'a>(&'a self, tenant: &'a TenantId) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(timed("tombstone", self.inner.tombstone(tenant)))
    }
}

impl Browse for MeteredStore {
    fn index_page(
        &self,
        after: Option<Position>,
        count: usize,
    ) -> BoxFuture<'_, Result<Vec<Position>, StoreError>> {
        Box::pin(timed("index_page", self.inner.index_page(after, count)))
    }

    fn get_many<'a>(
        &'a self,
        ids: &'a [JobId],
    ) -> BoxFuture<'a, Result<Vec<Snapshot>, StoreError>> {
        Box::pin(timed("get_many", self.inner.get_many(ids)))
    }

    fn recent_tenants(&self) -> BoxFuture<'_, Result<Vec<(TenantId, u64)>, StoreError>> {
        Box::pin(timed("recent_tenants", self.inner.recent_tenants()))
    }
}

impl Audit for MeteredStore {
    fn mark_retried<'a>(
        &'a self,
        old: &'a JobId,
        by: &'a str,
        new: &'a JobId,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(timed("mark_retried", self.inner.mark_retried(old, by, new)))
    }

    fn recall_answer<'a>(
        &'a self,
        slot: &'a str,
    ) -> BoxFuture<'a, Result<Option<KeptAnswer>, StoreError>> {
        Box::pin(timed("recall_answer", self.inner.recall_answer(slot)))
    }

    fn keep_answer<'a>(
        &'a self,
        slot: &'a str,
        fingerprint: &'a str,
        answer: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let kept = self.inner.keep_answer(slot, fingerprint, answer);
        Box::pin(timed("keep_answer", kept))
    }
}
