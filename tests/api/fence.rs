//! A run fenced off before its final write cannot make it: pair's neighbour-table swap is
//! checked against the job record in the same atomic step, on both stores (the embedded
//! job store under its lock, Redis inside the catalogue's script on the same Redis).

use std::sync::Arc;

use catalog_jobs::catalog::products::{
    CatalogStore, MemoryCatalog, Neighbour, ProductKey, RedisCatalog, Swap,
};
use catalog_jobs::catalog::{Catalog, CatalogError, CatalogSettings};
use catalog_jobs::jobs::fence::{Fence, StoreFence, Unfenced};
use catalog_jobs::jobs::registry::{ErrorClass, JobError};
use catalog_jobs::jobs::store::{Claim, JobStore, Outcome, Release, StoreSettings};
use catalog_jobs::jobs::{Status, TenantId};
use serde_json::json;

use crate::both_stores;
use crate::helpers::{
    blocking, claim_queued, create, end, new_job, pair_as, run_fence, settings, shared_redis_url,
    start, store, t_shirts, tenant, unique, Backend,
};

both_stores!(
    a_run_fenced_off_before_its_swap_leaves_the_table_and_the_current_run_swaps,
    an_ended_job_s_run_cannot_swap_the_table,
    a_fenced_off_pair_run_keeps_the_old_table_and_ends_fenced_not_recorded,
    a_run_taken_over_mid_job_does_not_swap_and_its_end_is_not_recorded,
    a_run_whose_job_was_superseded_cannot_swap_the_table,
);

/// A job store and a catalogue in the same place (the same Redis, or both embedded).
fn stores(b: Backend) -> (Arc<dyn JobStore>, Arc<dyn CatalogStore>) {
    let catalog: Arc<dyn CatalogStore> = match b {
        Backend::Memory => Arc::new(MemoryCatalog::new()),
        Backend::Redis => {
            Arc::new(RedisCatalog::open(&shared_redis_url(), &unique("cat")).unwrap())
        }
    };
    (store(b, settings()), catalog)
}

/// A pair job of `t`, claimed: its first run.
async fn claimed(jobs: &dyn JobStore, t: &TenantId) -> Claim {
    let job = new_job(t, "pair");
    create(jobs, &job).await;
    claim_queued(jobs, "host-a/1").await
}

fn table(key: &str, to: &str) -> Vec<(ProductKey, Vec<Neighbour>)> {
    vec![(
        ProductKey::parse(key).unwrap(),
        vec![Neighbour {
            product_key: ProductKey::parse(to).unwrap(),
            score: 0.5,
        }],
    )]
}

/// Swaps on a blocking thread, as job functions do (the Redis catalogue blocks).
async fn swap(
    catalog: &Arc<dyn CatalogStore>,
    t: &TenantId,
    rows: Vec<(ProductKey, Vec<Neighbour>)>,
    fence: Arc<dyn Fence>,
) -> Swap {
    let (catalog, t) = (catalog.clone(), t.clone());
    tokio::task::spawn_blocking(move || catalog.replace_neighbours(&t, &rows, &*fence).unwrap())
        .await
        .unwrap()
}

async fn neighbour_of(catalog: &Arc<dyn CatalogStore>, t: &TenantId, key: &str) -> Option<String> {
    let (catalog, t, key) = (catalog.clone(), t.clone(), ProductKey::parse(key).unwrap());
    tokio::task::spawn_blocking(move || catalog.neighbours(&t, &key).unwrap())
        .await
        .unwrap()
        .map(|n| n[0].product_key.as_str().to_owned())
}

/// Swaps in a table whose one row points `a` to `to`, as the run holding `fence`.
async fn point_a(
    catalog: &Arc<dyn CatalogStore>,
    t: &TenantId,
    to: &str,
    fence: Arc<dyn Fence>,
) -> Swap {
    swap(catalog, t, table("a", to), fence).await
}

/// The product the neighbour table's row for `a` points to first, if it has one.
async fn a_points_to(catalog: &Arc<dyn CatalogStore>, t: &TenantId) -> Option<String> {
    neighbour_of(catalog, t, "a").await
}

async fn a_run_fenced_off_before_its_swap_leaves_the_table_and_the_current_run_swaps(b: Backend) {
    let (jobs, catalog) = stores(b);
    let t = tenant();
    let first = claimed(&*jobs, &t).await;
    let old: Arc<dyn Fence> = run_fence(&jobs, &first);
    assert_eq!(
        point_a(&catalog, &t, "old", old.clone()).await,
        Swap::Swapped
    );

    // Another claim takes the job (given back, claimed again): the first run is fenced off.
    assert_eq!(jobs.release(&first.run).await.unwrap(), Release::Requeued);
    let second = claim_queued(&*jobs, "host-b/2").await;
    assert_eq!(second.job.id, first.job.id);
    assert_eq!(
        point_a(&catalog, &t, "stale", old.clone()).await,
        Swap::Fenced,
        "a fenced-off run's swap is refused"
    );
    assert_eq!(swap(&catalog, &t, Vec::new(), old).await, Swap::Fenced);
    assert_eq!(a_points_to(&catalog, &t).await.as_deref(), Some("old"));

    let swapped = point_a(&catalog, &t, "new", run_fence(&jobs, &second)).await;
    assert_eq!(swapped, Swap::Swapped);
    assert_eq!(a_points_to(&catalog, &t).await.as_deref(), Some("new"));
}

async fn an_ended_job_s_run_cannot_swap_the_table(b: Backend) {
    let (jobs, catalog) = stores(b);
    let t = tenant();
    let run = claimed(&*jobs, &t).await;
    assert_eq!(
        point_a(&catalog, &t, "old", Arc::new(Unfenced)).await,
        Swap::Swapped
    );
    end(&*jobs, &run, Outcome::Done(json!({}))).await;
    let fence = run_fence(&jobs, &run);
    assert_eq!(point_a(&catalog, &t, "late", fence).await, Swap::Fenced);
    assert_eq!(a_points_to(&catalog, &t).await.as_deref(), Some("old"));
}

async fn a_fenced_off_pair_run_keeps_the_old_table_and_ends_fenced_not_recorded(b: Backend) {
    let (jobs, store) = stores(b);
    let t = tenant();
    let catalog = Arc::new(Catalog {
        store: store.clone(),
        settings: CatalogSettings::default(),
    });
    let products = t_shirts();
    let first = claimed(&*jobs, &t).await;
    let old: Arc<dyn Fence> = run_fence(&jobs, &first);
    let (c, tt) = (catalog.clone(), t.clone());
    blocking(move || c.store.upsert(&tt, &products, &Unfenced).unwrap()).await;
    pair_as(&catalog, &t, old.clone(), false)
        .await
        .expect("the run holding its job pairs");
    let before = neighbour_of(&store, &t, "p0").await.expect("paired");

    // Recovery-like takeover: the job is given back and claimed by another run.
    jobs.release(&first.run).await.unwrap();
    let second = claim_queued(&*jobs, "host-b/2").await;
    let clear = table("p0", "p9");
    assert_eq!(
        swap(&store, &t, clear, run_fence(&jobs, &second)).await,
        Swap::Swapped
    );
    let refused = pair_as(&catalog, &t, old, false)
        .await
        .expect_err("the fenced-off run is refused");
    assert!(matches!(refused, CatalogError::Fenced), "{refused:?}");
    assert_eq!(refused.class(), "Fenced");
    assert!(
        matches!(JobError::from(refused), JobError::Fenced),
        "the runner reads it as fenced: the run's end is not recorded"
    );
    assert_eq!(
        neighbour_of(&store, &t, "p0").await.as_deref(),
        Some("p9"),
        "the table the current run wrote is untouched (the old run's would name {before})"
    );
    let record = jobs.get(&first.job.id).await.unwrap().unwrap();
    assert_eq!(
        record.status,
        Status::Running,
        "the current run still holds the job"
    );
}

/// A runner whose one worker runs a pair-like job: its first run hands the test its run,
/// waits for the go-ahead, then swaps the table through the fence the runner gave it.
async fn a_run_taken_over_mid_job_does_not_swap_and_its_end_is_not_recorded(b: Backend) {
    use std::sync::mpsc;
    use std::sync::Mutex;

    use catalog_jobs::jobs::registry::Registry;
    use catalog_jobs::jobs::runner::{Runner, RunnerSettings};
    use catalog_jobs::jobs::store::RunId;

    let (jobs, catalog) = stores(b);
    let t = tenant();
    let (ran_tx, ran_rx) = mpsc::channel::<RunId>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let go_rx = Mutex::new(go_rx);
    let ran_tx = Mutex::new(ran_tx);
    let in_job = catalog.clone();
    let registry = Registry::new().with_plain("pair", move |input, _| {
        let _ = ran_tx.lock().unwrap().send(input.run);
        let _ = go_rx.lock().unwrap().recv();
        match in_job.replace_neighbours(&input.tenant, &table("a", "stale"), &*input.fence) {
            Ok(Swap::Swapped) => Ok(json!({"swapped": true})),
            Ok(Swap::Fenced) => Err(JobError::Fenced),
            Err(e) => Err(JobError::new("StoreUnavailable", e)),
        }
    });
    let settings = RunnerSettings {
        max_concurrent: 1,
        ..RunnerSettings::default()
    };
    let runner = Runner::new(jobs.clone(), Arc::new(registry), settings);
    assert_eq!(
        point_a(&catalog, &t, "old", Arc::new(Unfenced)).await,
        Swap::Swapped
    );

    let job = new_job(&t, "pair");
    runner.create(job.clone()).await.unwrap();
    let first = tokio::task::spawn_blocking(move || ran_rx.recv().unwrap())
        .await
        .unwrap();
    assert_eq!(first.id, job.id);
    // Taken over while it works: given back and claimed by another process.
    assert_eq!(jobs.release(&first).await.unwrap(), Release::Requeued);
    let second = claim_queued(&*jobs, "host-b/2").await;
    go_tx.send(()).unwrap();

    let ended = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while runner.active_jobs() > 0 {
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(ended.is_ok(), "the fenced-off run ends");
    assert_eq!(a_points_to(&catalog, &t).await.as_deref(), Some("old"));
    let record = jobs.get(&job.id).await.unwrap().unwrap();
    assert_eq!(
        (record.status, record.worker.as_deref()),
        (Status::Running, Some("host-b/2")),
        "the old run's end is not recorded: the job is still the second run's"
    );
    end(&*jobs, &second, Outcome::Done(json!({}))).await;
    runner.shutdown(std::time::Duration::from_secs(1)).await;
}

/// A job whose lease is stale at once and runs once: the next create of its tenant and kind
/// takes its lock over and marks it `superseded_by` (what happens after a lost run).
async fn a_run_whose_job_was_superseded_cannot_swap_the_table(b: Backend) {
    let jobs = store(
        b,
        StoreSettings {
            stale_after: std::time::Duration::ZERO,
            max_attempts: 1,
            ..settings()
        },
    );
    let (_, catalog) = stores(b);
    let t = tenant();
    let old = new_job(&t, "pair");
    let (created, old_run) = start(&*jobs, &old).await;
    let fence: Arc<dyn Fence> = Arc::new(StoreFence::run(
        jobs.clone(),
        old_run,
        t.clone(),
        created.created_at,
    ));
    assert_eq!(
        point_a(&catalog, &t, "old", fence.clone()).await,
        Swap::Swapped
    );
    create(&*jobs, &new_job(&t, "pair")).await;
    assert_eq!(
        jobs.get(&old.id).await.unwrap().unwrap().status,
        Status::Failed,
        "the old job was superseded: ended failed/Lost"
    );
    assert_eq!(point_a(&catalog, &t, "stale", fence).await, Swap::Fenced);
    assert_eq!(a_points_to(&catalog, &t).await.as_deref(), Some("old"));
}
