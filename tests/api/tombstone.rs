//! A delete is final, on both stores: the tenant's tombstone refuses every later write of a
//! run or an import begun before it — its catalogue batches, and the writing back of a job
//! record the store lost — while a job or an import begun after it writes as usual. A run
//! whose record the store lost (no tombstone) waits for its heartbeat to write it back.

use std::sync::Arc;
use std::time::Duration;

use catalog_jobs::catalog::products::{
    CatalogStore, CatalogStoreError, Cleared, Enrichment, Neighbour, Product, ProductKey, Swap,
    Write,
};
use catalog_jobs::jobs::fence::{Fence, StoreFence, Writer};
use catalog_jobs::jobs::store::{Claim, Finish, JobStore, Outcome, Purge, Restore, StoreSettings};
use catalog_jobs::jobs::{Kind, TenantId};
use serde_json::json;

use crate::both_stores;
use crate::helpers::{
    catalog_store, create, first_run_at, new_job, run_fence, settings, store, tenant, test_kinds,
    Backend,
};

both_stores!(
    a_run_s_writes_after_its_tenant_was_deleted_change_nothing,
    a_lost_record_of_a_job_created_before_a_delete_is_not_written_back,
    a_lost_record_is_not_written_back_over_a_newer_job_of_its_kind,
    an_import_begun_before_a_delete_is_refused_and_one_begun_after_writes,
    a_run_whose_record_was_lost_waits_for_its_write_back_then_writes,
    a_job_created_after_a_delete_writes_and_ends_as_usual,
);

/// A job store and a catalogue in the same place (the same Redis, or both embedded).
fn stores(b: Backend, settings: StoreSettings) -> (Arc<dyn JobStore>, Arc<dyn CatalogStore>) {
    (store(b, settings), catalog_store(b))
}

/// A job of `kind` for `t`, created and claimed: its first run.
async fn claimed(jobs: &dyn JobStore, t: &TenantId, kind: &str) -> Claim {
    create(jobs, &new_job(t, kind)).await;
    jobs.claim("host-a/1", &test_kinds())
        .await
        .unwrap()
        .expect("queued")
}

/// A sync of `t` whose run writes product `a` and ends `done`: its fence, for later.
async fn writes_a_product_and_ends(
    jobs: &Arc<dyn JobStore>,
    catalog: &Arc<dyn CatalogStore>,
    t: &TenantId,
) -> Arc<dyn Fence> {
    let run = claimed(&**jobs, t, "sync").await;
    let fence = run_fence(jobs, &run);
    assert_eq!(
        upsert(catalog, t, &["a"], &fence).await.unwrap(),
        Write::Done(1)
    );
    let done = Outcome::Done(json!({}));
    let ended = jobs.finish(run.run_ref().ended(&done, 100));
    assert_eq!(ended.await.unwrap(), Finish::Applied);
    fence
}

/// The fence of an import of `t` begun now.
async fn import_fence(jobs: &Arc<dyn JobStore>, t: &TenantId) -> Arc<dyn Fence> {
    let seen = jobs.tombstone(t).await.unwrap();
    Arc::new(StoreFence::new(
        jobs.clone(),
        Writer::Import {
            tenant: t.clone(),
            seen,
        },
    ))
}

/// Deletes `t` as `DELETE /catalog/tenants/{t}` does: its jobs and, in the same step when it
/// is in the same Redis, its catalogue.
async fn delete(jobs: &dyn JobStore, catalog: &Arc<dyn CatalogStore>, t: &TenantId) -> Cleared {
    let kinds: Vec<Kind> = test_kinds();
    let hashes = catalog.hashes(t);
    let Purge::Removed { hashes: sizes, .. } = jobs.purge(t, &kinds, &hashes).await.unwrap() else {
        panic!("no job of the tenant is active");
    };
    match Cleared::from_sizes(&sizes) {
        Some(cleared) => cleared,
        None => blocking(catalog, t, |c, t| c.clear(t).unwrap()).await,
    }
}

/// Runs a catalogue call on a blocking thread, as job functions do (the Redis one blocks).
async fn blocking<T: Send + 'static>(
    catalog: &Arc<dyn CatalogStore>,
    t: &TenantId,
    call: impl FnOnce(&dyn CatalogStore, &TenantId) -> T + Send + 'static,
) -> T {
    let (catalog, t) = (catalog.clone(), t.clone());
    tokio::task::spawn_blocking(move || call(&*catalog, &t))
        .await
        .unwrap()
}

fn products(keys: &[&str]) -> Vec<Product> {
    keys.iter()
        .map(|k| Product::from_json(json!({"product_key": k, "name": format!("steel bottle {k}")})))
        .collect::<Result<_, _>>()
        .unwrap()
}

async fn upsert(
    catalog: &Arc<dyn CatalogStore>,
    t: &TenantId,
    keys: &'static [&'static str],
    fence: &Arc<dyn Fence>,
) -> Result<Write<u64>, CatalogStoreError> {
    let fence = fence.clone();
    blocking(catalog, t, move |c, t| {
        c.upsert(t, &products(keys), &*fence).map(|w| match w {
            Write::Done(n) => Write::Done(n.created + n.updated + n.unchanged),
            Write::Fenced => Write::Fenced,
        })
    })
    .await
}

async fn count(catalog: &Arc<dyn CatalogStore>, t: &TenantId) -> usize {
    blocking(catalog, t, |c, t| c.all(t).unwrap().len()).await
}

/// Waits out the store's 1-second TTL: a key's expiry sends no signal to wait on.
async fn past_the_ttl() {
    tokio::time::sleep(Duration::from_millis(2100)).await;
}

fn short_ttl() -> StoreSettings {
    StoreSettings {
        ttl: Duration::from_secs(1),
        ..settings()
    }
}

async fn a_run_s_writes_after_its_tenant_was_deleted_change_nothing(b: Backend) {
    let (jobs, catalog) = stores(b, settings());
    let t = tenant();
    let fence = writes_a_product_and_ends(&jobs, &catalog, &t).await;
    assert_eq!(delete(&*jobs, &catalog, &t).await.products, 1);

    // The same run, come back after the delete (a paused process): every write is refused.
    assert_eq!(
        upsert(&catalog, &t, &["a", "b"], &fence).await.unwrap(),
        Write::Fenced
    );
    let enrichment = Enrichment {
        content_hash: "h".into(),
        unextractable: true,
        attributes: Default::default(),
    };
    let key = ProductKey::parse("a").unwrap();
    let (f, k) = (fence.clone(), key.clone());
    let saved = blocking(&catalog, &t, move |c, t| {
        c.save_enrichments(t, &[(k, enrichment)], &*f).unwrap()
    })
    .await;
    assert_eq!(saved, Write::Fenced);
    let table = vec![(
        key.clone(),
        vec![Neighbour {
            product_key: key,
            score: 0.5,
        }],
    )];
    let f = fence.clone();
    let swapped = blocking(&catalog, &t, move |c, t| {
        c.replace_neighbours(t, &table, &*f).unwrap()
    })
    .await;
    assert_eq!(swapped, Swap::Fenced);
    assert_eq!(
        count(&catalog, &t).await,
        0,
        "nothing of the tenant came back"
    );
    let gone = blocking(&catalog, &t, |c, t| c.enrichments(t).unwrap().len()).await;
    assert_eq!(gone, 0);
}

async fn a_lost_record_of_a_job_created_before_a_delete_is_not_written_back(b: Backend) {
    let (jobs, catalog) = stores(b, settings());
    let t = tenant();
    for outcome in [Outcome::Done(json!({})), Outcome::Cancelled(json!({}))] {
        let run = claimed(&*jobs, &t, "sync").await;
        if matches!(outcome, Outcome::Cancelled(_)) {
            jobs.cancel(&run.job.id, "tester").await.unwrap();
        }
        let ended = jobs.finish(run.run_ref().ended(&outcome, 40));
        assert_eq!(ended.await.unwrap(), Finish::Applied);
        delete(&*jobs, &catalog, &t).await;

        // The run's end and its heartbeat's write-back come again after the delete.
        let again = jobs.finish(run.run_ref().ended(&outcome, 40));
        assert_eq!(again.await.unwrap(), Finish::Fenced, "{outcome:?}");
        let live = first_run_at(40, "syncing");
        let restored = jobs.restore(run.run_ref(), &live);
        assert_eq!(restored.await.unwrap(), Restore::Fenced);
        assert_eq!(jobs.get(&run.job.id).await.unwrap(), None, "{outcome:?}");
        assert!(jobs.recent(&t, 10).await.unwrap().is_empty());
    }
}

async fn a_lost_record_is_not_written_back_over_a_newer_job_of_its_kind(b: Backend) {
    let (jobs, _) = stores(b, short_ttl());
    let t = tenant();
    let old = claimed(&*jobs, &t, "sync").await;
    // Its process stopped renewing it: the record and its lock expire.
    past_the_ttl().await;
    assert_eq!(jobs.get(&old.job.id).await.unwrap(), None);
    let newer = claimed(&*jobs, &t, "sync").await;
    let done = Outcome::Done(json!({}));
    let ended = jobs.finish(newer.run_ref().ended(&done, 100));
    assert_eq!(ended.await.unwrap(), Finish::Applied);

    let late = jobs.finish(old.run_ref().ended(&done, 100));
    assert_eq!(late.await.unwrap(), Finish::Fenced);
    assert_eq!(jobs.get(&old.job.id).await.unwrap(), None);
    let listed: Vec<_> = jobs.recent(&t, 10).await.unwrap();
    assert_eq!(listed.len(), 1, "only the newer job is listed: {listed:?}");
    assert_eq!(listed[0].job_id, newer.job.id);
}

async fn an_import_begun_before_a_delete_is_refused_and_one_begun_after_writes(b: Backend) {
    let (jobs, catalog) = stores(b, settings());
    let t = tenant();
    let before = import_fence(&jobs, &t).await;
    assert_eq!(
        upsert(&catalog, &t, &["a"], &before).await.unwrap(),
        Write::Done(1)
    );
    delete(&*jobs, &catalog, &t).await;
    assert_eq!(
        upsert(&catalog, &t, &["b"], &before).await.unwrap(),
        Write::Fenced
    );
    assert_eq!(count(&catalog, &t).await, 0);

    let after = import_fence(&jobs, &t).await;
    assert_eq!(
        upsert(&catalog, &t, &["c"], &after).await.unwrap(),
        Write::Done(1)
    );
    assert_eq!(count(&catalog, &t).await, 1);
    // A second delete fences the second import too, however soon it follows the first.
    delete(&*jobs, &catalog, &t).await;
    assert_eq!(
        upsert(&catalog, &t, &["d"], &after).await.unwrap(),
        Write::Fenced
    );
}

async fn a_run_whose_record_was_lost_waits_for_its_write_back_then_writes(b: Backend) {
    let (jobs, catalog) = stores(b, short_ttl());
    let t = tenant();
    let run = claimed(&*jobs, &t, "sync").await;
    let fence = run_fence(&jobs, &run);
    past_the_ttl().await;
    assert!(
        matches!(
            upsert(&catalog, &t, &["a"], &fence).await,
            Err(CatalogStoreError::RecordMissing)
        ),
        "no tombstone says why the record is gone: the write waits"
    );
    let live = first_run_at(10, "syncing");
    let restored = jobs.restore(run.run_ref(), &live);
    assert_eq!(restored.await.unwrap(), Restore::Restored);
    assert_eq!(
        upsert(&catalog, &t, &["a"], &fence).await.unwrap(),
        Write::Done(1)
    );
}

async fn a_job_created_after_a_delete_writes_and_ends_as_usual(b: Backend) {
    let (jobs, catalog) = stores(b, settings());
    let t = tenant();
    delete(&*jobs, &catalog, &t).await;
    writes_a_product_and_ends(&jobs, &catalog, &t).await;
    assert_eq!(count(&catalog, &t).await, 1);
}

mod redis_only {
    use super::*;
    use crate::helpers::{keys_matching, shared_redis};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_delete_takes_the_tenant_s_idempotency_and_rate_keys_and_leaves_a_tombstone() {
        let settings = settings();
        let prefix = settings.prefix.clone();
        let (jobs, catalog) = stores(Backend::Redis, settings);
        let t = tenant();
        for (kind, key) in [("sync", "first"), ("enrich", "second")] {
            let mut job = new_job(&t, kind);
            job.idempotency_key = Some(key.into());
            create(&*jobs, &job).await;
            jobs.cancel(&job.id, "tester").await.unwrap();
        }
        let mut conn = shared_redis().await;
        let keys = |conn: &mut redis::aio::MultiplexedConnection| {
            let pattern = format!("{prefix}:*{t}*");
            let mut conn = conn.clone();
            async move { keys_matching(&mut conn, &pattern).await }
        };
        let before = keys(&mut conn).await;
        // The tenant's create count of the minute lives in its listing (`:tenant:`).
        for part in [":idem:", ":tenant:"] {
            assert!(
                before.iter().any(|k| k.contains(part)),
                "{part} in {before:?}"
            );
        }
        delete(&*jobs, &catalog, &t).await;
        let after = keys(&mut conn).await;
        assert_eq!(
            after,
            vec![catalog_jobs::jobs::keys::Keys::new(&prefix).gone(&t)]
        );
        let ttl: i64 = redis::cmd("TTL")
            .arg(&after[0])
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(ttl > 86_000 && ttl <= 86_400, "kept for the job TTL: {ttl}");
    }
}
