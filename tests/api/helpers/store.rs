//! Job stores for tests: either backend in a key namespace of its own, jobs made and
//! claimed in one call, and `CountingStore`, a real store that counts the writes through it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use catalog_jobs::catalog::pair::PairParams;
use catalog_jobs::catalog::{Catalog, CatalogError, CatalogRun, RunContext};
use catalog_jobs::jobs::browse::{Browse, Position};
use catalog_jobs::jobs::bulk::{Audit, KeptAnswer};
use catalog_jobs::jobs::fence::{Fence, Hold, ScriptFence, StoreFence, Writer};
use catalog_jobs::jobs::memory::MemoryStore;
use catalog_jobs::jobs::redis::RedisStore;
use catalog_jobs::jobs::stats::Overview;
use catalog_jobs::jobs::store::{
    BoxFuture, Cancel, Claim, Created, Event, Finish, JobStore, Live, NewJob, NewPipeline, Origin,
    Outcome, Purge, Recovered, Release, Renewal, Restore, RunEnd, RunId, RunRef, StoreError,
    StoreSettings, Tick,
};
use catalog_jobs::jobs::timeline::{EventId, TimelineEvent};
use catalog_jobs::jobs::watch::TenantWatch;
use catalog_jobs::jobs::{JobId, Kind, Snapshot, TenantId};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{shared_redis_url, unique, Backend};

pub fn settings() -> StoreSettings {
    StoreSettings {
        prefix: unique("test"),
        ..StoreSettings::default()
    }
}

/// A store of the given backend, in its own key namespace.
pub fn store(backend: Backend, settings: StoreSettings) -> Arc<dyn JobStore> {
    match backend {
        Backend::Memory => Arc::new(MemoryStore::new(settings)),
        Backend::Redis => {
            Arc::new(RedisStore::open(&shared_redis_url(), settings).expect("the redis url parses"))
        }
    }
}

pub fn new_job(tenant: &TenantId, kind: &str) -> NewJob {
    NewJob {
        id: JobId::for_tenant(tenant),
        tenant: tenant.clone(),
        kind: Kind::parse(kind).expect("test kinds are valid"),
        params: json!({}),
        step: "queued".into(),
        origin: Origin {
            created_by: "test".into(),
            request_id: "req-test".into(),
            retry_of: None,
        },
        idempotency_key: None,
        in_order: false,
        pipeline: None,
    }
}

/// A job of `kind` that runs in its tenant's order.
pub fn ordered(t: &TenantId, kind: &str) -> NewJob {
    NewJob {
        in_order: true,
        ..new_job(t, kind)
    }
}

/// A pipeline of `kinds`, each step weighted equally.
pub fn pipeline_of(t: &TenantId, kinds: &[&str]) -> NewPipeline {
    let job = new_job(t, catalog_jobs::jobs::pipeline::PIPELINE_KIND);
    let shares = catalog_jobs::jobs::pipeline::shares(&vec![1; kinds.len()]);
    let steps = kinds
        .iter()
        .zip(shares)
        .map(|(kind, share)| {
            let step = NewJob {
                pipeline: Some(job.id),
                ..ordered(t, kind)
            };
            (step, share)
        })
        .collect();
    NewPipeline { job, steps }
}

/// A failed job's outcome: its error class, no partial report.
pub fn failure(class: &str) -> Outcome {
    Outcome::Failed(class.into(), None)
}

/// Creates a job and expects it to be created.
pub async fn create(store: &dyn JobStore, job: &NewJob) -> Snapshot {
    match store.create(job.clone()).await.expect("the store answers") {
        Created::Created(s, _) => *s,
        other => panic!("expected a new job, got {other:?}"),
    }
}

/// A job of `kind` for `t`, created (it must be).
pub async fn created(store: &dyn JobStore, t: &TenantId, kind: &str) -> NewJob {
    let job = new_job(t, kind);
    create(store, &job).await;
    job
}

/// The job a create that must make one made, as created.
pub fn made_by(created: Result<Created, StoreError>) -> Snapshot {
    match created.expect("the store answers") {
        Created::Created(made, _) => *made,
        other => panic!("the job is created: {other:?}"),
    }
}

/// A job of `kind` for `t`, created and claimed as `start` does: the job, its snapshot as
/// created, and its run.
pub async fn started(store: &dyn JobStore, t: &TenantId, kind: &str) -> (NewJob, Snapshot, RunId) {
    let job = new_job(t, kind);
    let (snapshot, run) = start(store, &job).await;
    (job, snapshot, run)
}

/// Creates `n` jobs at once, each made by `job`: each one's id and what the store answered it.
pub async fn create_at_once(
    store: &Arc<dyn JobStore>,
    n: usize,
    job: impl Fn() -> NewJob,
) -> Vec<(JobId, Created)> {
    let create = |job: NewJob| {
        let store = store.clone();
        tokio::spawn(async move { (job.id, store.create(job).await.expect("the store answers")) })
    };
    let tasks: Vec<_> = (0..n).map(|_| create(job())).collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("the create ran to its end"));
    }
    answers
}

/// Every kind the store tests create jobs of.
pub fn test_kinds() -> Vec<Kind> {
    ["sync", "enrich", "pair", "k1", "k2", "k3"]
        .iter()
        .map(|k| Kind::parse(k).expect("valid"))
        .collect()
}

/// The next job `worker` claims of the test kinds, if the queue holds one.
pub async fn claim_next(store: &dyn JobStore, worker: &str) -> Option<Claim> {
    store
        .claim(worker, &test_kinds())
        .await
        .expect("the store answers")
}

/// The next job `worker` claims of the test kinds (the queue must hold one).
pub async fn claim_queued(store: &dyn JobStore, worker: &str) -> Claim {
    claim_next(store, worker)
        .await
        .expect("a job waits in the queue")
}

/// The fence of a claimed run, as the runner gives it to the job.
pub fn run_fence(jobs: &Arc<dyn JobStore>, claimed: &Claim) -> Arc<dyn Fence> {
    Arc::new(StoreFence::run(
        jobs.clone(),
        claimed.run,
        claimed.job.tenant.clone(),
        claimed.created_at,
    ))
}

/// Creates a job and claims it as worker `test/1` (the queue must hold nothing before it).
pub async fn start(store: &dyn JobStore, job: &NewJob) -> (Snapshot, RunId) {
    let created = create(store, job).await;
    let claim = store
        .claim("test/1", &test_kinds())
        .await
        .expect("the store answers")
        .expect("the job is in the queue");
    assert_eq!(claim.job.id, job.id, "the oldest job is claimed first");
    (created, claim.run)
}

/// What a run in its first attempt knew of its job when the store lost the record: the last
/// percent and step it reported.
pub fn first_run_at(percent: u8, step: &str) -> Live {
    Live {
        percent,
        step: step.to_owned(),
        attempt: 1,
    }
}

pub async fn finish(
    store: &dyn JobStore,
    job: &NewJob,
    run: &RunId,
    created: &Snapshot,
    outcome: Outcome,
) -> Finish {
    store
        .finish(RunRef::new(job, run, created.created_at).ended(&outcome, 0))
        .await
        .expect("the store answers")
}

/// Ends the claimed run with `outcome`, which the store must apply.
pub async fn end(store: &dyn JobStore, claim: &Claim, outcome: Outcome) {
    let answer = store.finish(claim.run_ref().ended(&outcome, 0)).await;
    assert_eq!(answer.expect("the store answers"), Finish::Applied);
}

/// A failed job of `kind` for `t`, made in the store (created, claimed, failed): no runner
/// runs `kind`, so it is the job claimed.
pub async fn failed_job(store: &dyn JobStore, t: &TenantId, kind: &str) -> JobId {
    let job = new_job(t, kind);
    let created = create(store, &job).await;
    let kinds = [Kind::parse(kind).expect("test kinds are valid")];
    let claim = store
        .claim("test/1", &kinds)
        .await
        .expect("the store answers")
        .expect("its claim");
    assert_eq!(claim.job.id, job.id);
    finish(
        store,
        &job,
        &claim.run,
        &created,
        failure("SourceUnreachable"),
    )
    .await;
    job.id
}

/// A real store that counts the writes made through it, to measure what the runner costs.
pub struct CountingStore {
    pub inner: Arc<dyn JobStore>,
    pub ticks: AtomicUsize,
    pub heartbeats: AtomicUsize,
    /// Creates the store has answered (whatever the answer).
    pub creates: Arc<AtomicUsize>,
    /// `wait=true` requests that told the store they wait (`expect_end`).
    pub awaits: Arc<AtomicUsize>,
}

impl CountingStore {
    pub fn new(inner: Arc<dyn JobStore>) -> Self {
        Self {
            inner,
            ticks: AtomicUsize::new(0),
            heartbeats: AtomicUsize::new(0),
            creates: Arc::new(AtomicUsize::new(0)),
            awaits: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The answer to a create, counted once the store has given it.
    async fn counted(
        &self,
        create: BoxFuture<'_, Result<Created, StoreError>>,
    ) -> Result<Created, StoreError> {
        let answer = create.await;
        self.creates.fetch_add(1, Ordering::SeqCst);
        answer
    }
}

/// What `CountingStore` hands to its inner store as it is, a line each: an `async` method
/// answers a store result (every borrowed argument lives for `'a`), and one that ends
/// `counting c` adds one to the counter `c` first; the others answer as the trait declares.
macro_rules! forwarded {
    (
        $(async fn $name:ident($($arg:ident: $ty:ty),*) -> $answer:ty $(, counting $c:ident)?;)*
        $(fn $plain:ident(&self $(, $parg:ident: $pty:ty)*) -> $ret:ty;)*
    ) => {
        $(fn $name<'a>(&'a self, $($arg: $ty),*) -> BoxFuture<'a, Result<$answer, StoreError>> {
            $(self.$c.fetch_add(1, Ordering::Relaxed);)?
            self.inner.$name($($arg),*)
        })*
        $(fn $plain(&self $(, $parg: $pty)*) -> $ret {
            self.inner.$plain($($parg),*)
        })*
    };
}

impl JobStore for CountingStore {
    fn create(&self, job: NewJob) -> BoxFuture<'_, Result<Created, StoreError>> {
        Box::pin(self.counted(self.inner.create(job)))
    }
    fn create_claimed<'a>(
        &'a self,
        job: NewJob,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Created, StoreError>> {
        Box::pin(self.counted(self.inner.create_claimed(job, worker)))
    }
    fn create_pipeline(&self, pipeline: NewPipeline) -> BoxFuture<'_, Result<Created, StoreError>> {
        Box::pin(self.counted(self.inner.create_pipeline(pipeline)))
    }
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Event> {
        self.inner.subscribe()
    }
    fn watch_tenant<'a>(&'a self, tenant: &'a TenantId) -> BoxFuture<'a, TenantWatch> {
        self.inner.watch_tenant(tenant)
    }
    forwarded! {
        async fn claim(worker: &'a str, kinds: &'a [Kind]) -> Option<Claim>;
        async fn tick(run: &'a RunId, percent: u8, step: &'a str) -> Tick, counting ticks;
        async fn renew(runs: &'a [RunId]) -> Vec<Renewal>, counting heartbeats;
        async fn finish(end: RunEnd<'a>) -> Finish;
        async fn restore(run: RunRef<'a>, live: &'a Live) -> Restore;
        async fn release(run: &'a RunId) -> Release;
        async fn recover() -> Vec<Recovered>;
        async fn cancel(id: &'a JobId, by: &'a str) -> Cancel;
        async fn purge(tenant: &'a TenantId, kinds: &'a [Kind], hashes: &'a [String]) -> Purge;
        async fn get(id: &'a JobId) -> Option<Snapshot>;
        async fn recent(tenant: &'a TenantId, limit: usize) -> Vec<Snapshot>;
        async fn active() -> Vec<Snapshot>;
        async fn overview() -> Overview;
        async fn leave() -> ();
        async fn timeline(id: &'a JobId, after: Option<EventId>) -> Vec<TimelineEvent>;
        async fn queued_by_kind() -> Vec<(Kind, u64)>;
        async fn ping() -> ();
        async fn tombstone(tenant: &'a TenantId) -> u64;
        async fn expect_end(id: &'a JobId) -> (), counting awaits;
        fn is_durable(&self) -> bool;
        fn settings(&self) -> &StoreSettings;
        fn while_held(&self, writer: &Writer, write: &mut dyn FnMut()) -> Hold;
        fn fence_keys(&self, writer: &Writer) -> Option<ScriptFence>;
    }
}

impl Browse for CountingStore {
    forwarded! {
        async fn index_page(after: Option<Position>, count: usize) -> Vec<Position>;
        async fn get_many(ids: &'a [JobId]) -> Vec<Snapshot>;
        async fn recent_tenants() -> Vec<(TenantId, u64)>;
        async fn unlist(gone: &'a [Position]) -> u64;
    }
}

impl Audit for CountingStore {
    forwarded! {
        async fn recall_answer(slot: &'a str) -> Option<KeptAnswer>;
        async fn keep_answer(slot: &'a str, fingerprint: &'a str, answer: &'a str) -> ();
    }
}

/// Runs a test body that calls the catalogue store (which blocks) off the async workers.
pub async fn blocking<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(body)
        .await
        .expect("the test body ran")
}

/// Pairs `t`'s catalogue as the run holding `fence` does (a full pair with `full`).
pub async fn pair_as(
    catalog: &Arc<Catalog>,
    t: &TenantId,
    fence: Arc<dyn Fence>,
    full: bool,
) -> Result<serde_json::Value, CatalogError> {
    let (catalog, t) = (catalog.clone(), t.clone());
    blocking(move || {
        let stop = CancellationToken::new();
        let cx = RunContext {
            catalog: &catalog,
            tenant: &t,
            fence: &*fence,
            stop: &stop,
        };
        PairParams { full }.run_in(&cx, None)
    })
    .await
}

/// A new tenant in the same slot group as `t` (`jobs::keys::Group`): on Redis their jobs share
/// one ready queue, in creation order.
pub fn tenant_beside(t: &TenantId) -> TenantId {
    let group = catalog_jobs::jobs::keys::Group::of(t);
    std::iter::repeat_with(super::tenant)
        .find(|other| catalog_jobs::jobs::keys::Group::of(other) == group)
        .expect("one tenant in 48 is in any group")
}
