//! A delete takes pair's staging too, on both stores: a pair run holds mid-swap (its new
//! table staged aside in Redis, or made in memory) while its job is taken from it and
//! cancelled and its tenant deleted — as when its process was killed or paused — and
//! afterwards no key of the tenant is left but its tombstone. The run, come back, is refused
//! and writes nothing back.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use catalog_jobs::catalog::products::{CatalogStore, Cleared, ProductKey};
use catalog_jobs::catalog::{Catalog, CatalogError, CatalogSettings};
use catalog_jobs::jobs::fence::{Fence, Hold, ScriptFence, Unfenced};
use catalog_jobs::jobs::registry::JobError;
use catalog_jobs::jobs::store::{Cancel, JobStore, Purge};
use catalog_jobs::jobs::{Status, TenantId};

use crate::both_stores;
use crate::helpers::{
    blocking, catalog_store, claim_queued, create, keys_matching, new_job, pair_as, run_fence,
    settings, shared_redis, store, t_shirts, tenant, test_kinds, Backend,
};

both_stores!(
    a_delete_while_a_pair_is_staging_leaves_nothing_of_the_tenant_and_the_pair_writes_nothing
);

/// How long a held run waits for the test at the most: a test that failed before releasing
/// it must not hang the suite.
const HOLD_AT_MOST: Duration = Duration::from_secs(30);

/// A run's fence that holds the run at its `at`-th fenced write (counting from 1) until the
/// test releases it: the run's writes before it are made, the rest wait.
#[derive(Debug)]
struct HeldFence {
    inner: Arc<dyn Fence>,
    at: usize,
    calls: AtomicUsize,
    reached: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    release: Mutex<mpsc::Receiver<()>>,
}

impl HeldFence {
    fn new(
        inner: Arc<dyn Fence>,
        at: usize,
    ) -> (
        Arc<Self>,
        tokio::sync::oneshot::Receiver<()>,
        mpsc::Sender<()>,
    ) {
        let (reached, on_reached) = tokio::sync::oneshot::channel();
        let (release, on_release) = mpsc::channel();
        let fence = Arc::new(Self {
            inner,
            at,
            calls: AtomicUsize::new(0),
            reached: Mutex::new(Some(reached)),
            release: Mutex::new(on_release),
        });
        (fence, on_reached, release)
    }

    fn pass(&self) {
        if self.calls.fetch_add(1, Ordering::SeqCst) + 1 != self.at {
            return;
        }
        if let Some(reached) = self.reached.lock().unwrap().take() {
            let _ = reached.send(());
        }
        let _ = self.release.lock().unwrap().recv_timeout(HOLD_AT_MOST);
    }
}

impl Fence for HeldFence {
    fn in_script(&self) -> Option<ScriptFence> {
        self.pass();
        self.inner.in_script()
    }

    fn while_held(&self, write: &mut dyn FnMut()) -> Hold {
        self.pass();
        self.inner.while_held(write)
    }
}

/// Deletes `t` as `DELETE /catalog/tenants/{t}` does.
pub(crate) async fn delete(
    jobs: &dyn JobStore,
    catalog: &Arc<dyn CatalogStore>,
    t: &TenantId,
) -> Cleared {
    let Purge::Removed { hashes, .. } = jobs
        .purge(t, &test_kinds(), &catalog.hashes(t))
        .await
        .unwrap()
    else {
        panic!("no job of the tenant is active");
    };
    match Cleared::from_sizes(&hashes) {
        Some(cleared) => cleared,
        None => {
            let (c, t) = (catalog.clone(), t.clone());
            blocking(move || c.clear(&t).unwrap()).await
        }
    }
}

/// Every Redis key of `t` (a segment of its name is the tenant), sorted; none in memory.
async fn redis_keys_of(b: Backend, t: &TenantId) -> Vec<String> {
    if b == Backend::Memory {
        return Vec::new();
    }
    let mut found = keys_matching(&mut shared_redis().await, &format!("*{t}*")).await;
    found.retain(|k| k.split(':').any(|part| part == t.as_str()));
    found
}

/// A catalogue of `t` with products to pair, and a pair job of `t` claimed: its run's fence.
async fn catalogue_and_pair_run(
    jobs: &Arc<dyn JobStore>,
    catalog: &Arc<Catalog>,
    t: &TenantId,
) -> (catalog_jobs::jobs::store::Claim, Arc<dyn Fence>) {
    let products = t_shirts();
    let (c, tt) = (catalog.clone(), t.clone());
    blocking(move || c.store.upsert(&tt, &products, &Unfenced).unwrap()).await;
    create(&**jobs, &new_job(t, "pair")).await;
    let run = claim_queued(&**jobs, "host-a/1").await;
    let fence = run_fence(jobs, &run);
    (run, fence)
}

async fn a_delete_while_a_pair_is_staging_leaves_nothing_of_the_tenant_and_the_pair_writes_nothing(
    b: Backend,
) {
    let settings = settings();
    let keys = catalog_jobs::jobs::keys::Keys::new(&settings.prefix);
    let (jobs, store) = (store(b, settings), catalog_store(b));
    let catalog = Arc::new(Catalog {
        store: store.clone(),
        settings: CatalogSettings::default(),
    });
    let t = tenant();
    let (run, fence) = catalogue_and_pair_run(&jobs, &catalog, &t).await;
    // Redis: held after the rows are staged, before the state; memory: before the swap.
    let at = if b == Backend::Redis { 2 } else { 1 };
    let (held, reached, release) = HeldFence::new(fence, at);
    let pairing = tokio::spawn({
        let (catalog, t) = (catalog.clone(), t.clone());
        async move { pair_as(&catalog, &t, held, true).await }
    });
    tokio::time::timeout(HOLD_AT_MOST, reached)
        .await
        .unwrap()
        .unwrap();
    if b == Backend::Redis {
        let staging = redis_keys_of(b, &t).await;
        assert!(
            staging.iter().any(|k| k.contains(":neighbours:staging:")),
            "the pair is staging: {staging:?}"
        );
    }

    // Its job is taken from it (its process stopped) and cancelled; then the tenant goes.
    jobs.release(&run.run).await.unwrap();
    assert_eq!(
        jobs.cancel(&run.job.id, "tester").await.unwrap(),
        Cancel::Requested
    );
    let ended = jobs.get(&run.job.id).await.unwrap().unwrap();
    assert_eq!(ended.status, Status::Cancelled);
    delete(&*jobs, &store, &t).await;
    let left = redis_keys_of(b, &t).await;
    assert!(
        left.len() <= 1 && left.iter().all(|k| *k == keys.gone(&t)),
        "nothing of the tenant but its tombstone, while the run is held: {left:?}"
    );

    // The run comes back: refused, and it writes nothing back.
    release.send(()).unwrap();
    let refused = pairing
        .await
        .unwrap()
        .expect_err("the run's job and tenant are gone");
    assert!(matches!(refused, CatalogError::Fenced), "{refused:?}");
    assert!(
        matches!(JobError::from(refused), JobError::Fenced),
        "its end is not recorded"
    );
    assert_eq!(redis_keys_of(b, &t).await, left, "nothing came back");
    let (c, tt) = (store.clone(), t.clone());
    let p0 = ProductKey::parse("p0").unwrap();
    let (products, row) =
        blocking(move || (c.all(&tt).unwrap().len(), c.neighbours(&tt, &p0).unwrap())).await;
    assert_eq!(
        (products, row),
        (0, None),
        "no product and no neighbour row of the tenant"
    );
    assert_eq!(jobs.get(&run.job.id).await.unwrap(), None);
}
