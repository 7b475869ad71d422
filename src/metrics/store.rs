//! `MeteredStore`: a job store that times every operation and counts its failures (and every
//! progress write), then hands the answer back unchanged. Wrapping the store here keeps
//! metric calls out of the stores and the runner, and measures each backend the same way.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use crate::jobs::store::{
    BoxFuture, Cancel, Created, JobStore, Live, NewJob, Outcome, StoreError, StoreSettings, Write,
};
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

    fn tick<'a>(
        &'a self,
        id: &'a JobId,
        percent: u8,
        step: &'a str,
    ) -> BoxFuture<'a, Result<Write, StoreError>> {
        Box::pin(async move {
            let answer = timed("tick", self.inner.tick(id, percent, step)).await;
            if answer.is_ok() {
                super::progress_written();
            }
            answer
        })
    }

    fn heartbeat<'a>(
        &'a self,
        id: &'a JobId,
        tenant: &'a TenantId,
        kind: &'a Kind,
    ) -> BoxFuture<'a, Result<Write, StoreError>> {
        Box::pin(timed("heartbeat", self.inner.heartbeat(id, tenant, kind)))
    }

    fn finish<'a>(
        &'a self,
        job: &'a NewJob,
        created_at: u64,
        outcome: &'a Outcome,
        percent: u8,
    ) -> BoxFuture<'a, Result<Write, StoreError>> {
        Box::pin(timed(
            "finish",
            self.inner.finish(job, created_at, outcome, percent),
        ))
    }

    fn restore<'a>(
        &'a self,
        job: &'a NewJob,
        created_at: u64,
        live: &'a Live,
    ) -> BoxFuture<'a, Result<Write, StoreError>> {
        Box::pin(timed("restore", self.inner.restore(job, created_at, live)))
    }

    fn cancel<'a>(&'a self, id: &'a JobId) -> BoxFuture<'a, Result<Cancel, StoreError>> {
        Box::pin(timed("cancel", self.inner.cancel(id)))
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

    fn clear_tenant<'a>(
        &'a self,
        tenant: &'a TenantId,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        Box::pin(timed("clear_tenant", self.inner.clear_tenant(tenant)))
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

    fn settings(&self) -> &StoreSettings {
        self.inner.settings()
    }
}
