//! The change feed, on both stores: an incremental pair reads what changed from it instead
//! of every product's version and still equals a full pair with its weights; past its bound
//! the feed overflows and the next pair lists every version, after which the feed counts
//! again; a change written while a pair runs stays for the next one; a cancelled pair
//! leaves the feed as it was; a deleted tenant leaves no feed.

use std::sync::Arc;

use catalog_jobs::catalog::demo;
use catalog_jobs::catalog::pair::PairParams;
use catalog_jobs::catalog::products::{
    CatalogStore, Changed, MemoryCatalog, Product, ProductKey, RedisCatalog,
};
use catalog_jobs::catalog::{run_unfenced, Catalog, CatalogError};
use catalog_jobs::jobs::fence::Unfenced;
use catalog_jobs::jobs::TenantId;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::both_stores;
use crate::helpers::pairing::{
    apply, edit_and_pair, equals_a_full_pair_with_its_weights, never, paired_in,
};
use crate::helpers::{blocking, catalog_store, settings, shared_redis_url, store, unique, Backend};

both_stores!(
    an_incremental_pair_reads_what_changed_from_the_feed_and_equals_a_full_pair_with_its_weights,
    past_its_bound_the_feed_overflows_the_next_pair_lists_every_version_and_then_the_feed_counts_again,
    a_change_written_while_a_pair_runs_stays_in_the_feed_for_the_next_pair,
    a_cancelled_pair_leaves_the_feed_as_it_was,
    a_deleted_tenant_leaves_no_change_feed,
);

/// Products of the hard generator: enough for every kind of edit at 1 %.
const PRODUCTS: usize = 3_000;

fn pair(catalog: &Catalog, t: &TenantId) -> Value {
    run_unfenced(catalog, t, &PairParams::default(), &never(), None).unwrap()
}

fn changed(catalog: &Catalog, t: &TenantId) -> Changed {
    catalog.store.changed(t).unwrap()
}

/// A store whose change feed overflows past `bound` keys.
fn bounded_store(b: Backend, bound: usize) -> Arc<dyn CatalogStore> {
    match b {
        Backend::Memory => Arc::new(MemoryCatalog::new().with_feed_bound(bound)),
        Backend::Redis => Arc::new(
            RedisCatalog::open(&shared_redis_url(), &unique("cat"))
                .unwrap()
                .with_feed_bound(bound),
        ),
    }
}

/// The keys `edits` write or remove, sorted.
fn edited(edits: &demo::Edits) -> Vec<ProductKey> {
    let mut keys: Vec<ProductKey> = edits
        .upserts
        .iter()
        .map(|p| p.product_key.clone())
        .chain(edits.removals.iter().cloned())
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

async fn an_incremental_pair_reads_what_changed_from_the_feed_and_equals_a_full_pair_with_its_weights(
    b: Backend,
) {
    blocking(move || {
        let (catalog, t, products) = paired_in(catalog_store(b), PRODUCTS, 201);
        assert_eq!(
            changed(&catalog, &t).keys,
            Some(vec![]),
            "the full pair read it all"
        );
        let edits = demo::edit_hard(&products, 0.01, 202);
        apply(&catalog, &t, &edits);
        assert_eq!(changed(&catalog, &t).keys, Some(edited(&edits)));
        let report = pair(&catalog, &t);
        assert_eq!(report["mode"], "incremental", "{report}");
        assert_eq!(report["changes"]["found_by"], "feed", "{report}");
        equals_a_full_pair_with_its_weights(&catalog, &t);
        assert_eq!(
            changed(&catalog, &t).keys,
            Some(vec![]),
            "its save forgot them"
        );

        // The same products written again change nothing: nothing noted, nothing re-scored.
        let again: Vec<Product> = edits.upserts.clone();
        catalog.store.upsert(&t, &again, &Unfenced).unwrap();
        assert_eq!(changed(&catalog, &t).keys, Some(vec![]));
        let report = pair(&catalog, &t);
        assert_eq!(report["rescored"], 0, "{report}");
        assert_eq!(report["changes"]["found_by"], "feed", "{report}");
    })
    .await
}

async fn past_its_bound_the_feed_overflows_the_next_pair_lists_every_version_and_then_the_feed_counts_again(
    b: Backend,
) {
    blocking(move || {
        const BOUND: usize = 20;
        let (catalog, t, products) = paired_in(bounded_store(b, BOUND), PRODUCTS, 211);
        let edits = demo::edit_hard(&products, 0.02, 212);
        assert!(edited(&edits).len() > BOUND);
        apply(&catalog, &t, &edits);
        assert_eq!(changed(&catalog, &t).keys, None, "the feed overflowed");
        let report = pair(&catalog, &t);
        assert_eq!(report["mode"], "incremental", "{report}");
        assert_eq!(report["changes"]["found_by"], "listing", "{report}");
        equals_a_full_pair_with_its_weights(&catalog, &t);

        let products = catalog_products(&catalog, &t);
        let edits = demo::edit_hard(&products, 0.002, 213);
        assert!(!edited(&edits).is_empty() && edited(&edits).len() <= BOUND);
        let report = edit_and_pair(&catalog, &t, &edits);
        assert_eq!(report["changes"]["found_by"], "feed", "{report}");
        equals_a_full_pair_with_its_weights(&catalog, &t);
    })
    .await
}

/// The tenant's products as the store holds them now.
fn catalog_products(catalog: &Catalog, t: &TenantId) -> Vec<Product> {
    catalog
        .store
        .all(t)
        .unwrap()
        .into_iter()
        .map(|s| s.product)
        .collect()
}

/// A product renamed while the pair reads what changed (after it read the feed): the pair
/// does not see it, its save keeps it in the feed, and the next pair re-scores it.
async fn a_change_written_while_a_pair_runs_stays_in_the_feed_for_the_next_pair(b: Backend) {
    blocking(move || {
        let (catalog, t, products) = paired_in(catalog_store(b), PRODUCTS, 221);
        let edits = demo::edit_hard(&products, 0.01, 222);
        apply(&catalog, &t, &edits);
        // One the edits left alone: the pair does not read it.
        let untouched = edited(&edits);
        let mut renamed = products
            .iter()
            .find(|p| untouched.binary_search(&p.product_key).is_err())
            .expect("the edits leave most products alone")
            .clone();
        renamed.name = format!("{} Zephyr", renamed.name);
        let written = std::sync::Once::new();
        let progress = |_: u8, step: &str| {
            if step.starts_with("reading the products that changed") {
                written.call_once(|| {
                    let one = std::slice::from_ref(&renamed);
                    catalog.store.upsert(&t, one, &Unfenced).unwrap();
                });
            }
        };
        let params = PairParams::default();
        let report = run_unfenced(&catalog, &t, &params, &never(), Some(&progress)).unwrap();
        assert!(
            written.is_completed(),
            "the rename was written during the pair"
        );
        assert_eq!(report["mode"], "incremental", "{report}");
        assert_eq!(
            changed(&catalog, &t).keys,
            Some(vec![renamed.product_key.clone()]),
            "the rename stays in the feed"
        );
        let report = pair(&catalog, &t);
        assert_eq!(report["changes"]["changed"], 1, "{report}");
        equals_a_full_pair_with_its_weights(&catalog, &t);
    })
    .await
}

async fn a_cancelled_pair_leaves_the_feed_as_it_was(b: Backend) {
    blocking(move || {
        let (catalog, t, products) = paired_in(catalog_store(b), PRODUCTS, 231);
        apply(&catalog, &t, &demo::edit_hard(&products, 0.01, 232));
        let before = changed(&catalog, &t);
        let stop = CancellationToken::new();
        let progress = |_: u8, step: &str| {
            if step.starts_with("finding whose") {
                stop.cancel();
            }
        };
        let params = PairParams::default();
        let stopped = run_unfenced(&catalog, &t, &params, &stop, Some(&progress));
        assert!(
            matches!(stopped, Err(CatalogError::CancelledWith(_))),
            "{stopped:?}"
        );
        assert_eq!(changed(&catalog, &t), before);
        let report = pair(&catalog, &t);
        assert_eq!(report["changes"]["found_by"], "feed", "{report}");
        equals_a_full_pair_with_its_weights(&catalog, &t);
    })
    .await
}

/// A tenant deleted (as `DELETE /catalog/tenants/{t}` does) takes its feed with it: the same
/// products imported again are not called unchanged, and the feed counts again only from
/// the next pair's state.
async fn a_deleted_tenant_leaves_no_change_feed(b: Backend) {
    let catalog_store = catalog_store(b);
    let (catalog, t, products) = {
        let store = catalog_store.clone();
        blocking(move || {
            let (catalog, t, products) = paired_in(store, 300, 241);
            apply(&catalog, &t, &demo::edit_hard(&products, 0.05, 242));
            assert!(changed(&catalog, &t).keys.is_some_and(|k| !k.is_empty()));
            (catalog, t, products)
        })
        .await
    };
    let jobs = store(b, settings());
    crate::staging::delete(&*jobs, &catalog_store, &t).await;
    blocking(move || {
        assert_eq!(changed(&catalog, &t), Changed::default(), "no feed is left");
        catalog.store.upsert(&t, &products, &Unfenced).unwrap();
        assert_eq!(
            changed(&catalog, &t).keys,
            None,
            "not counting before a pair"
        );
        let report = pair(&catalog, &t);
        assert_eq!(report["full_because"], "first", "{report}");
        assert_eq!(changed(&catalog, &t).keys, Some(vec![]));
    })
    .await
}
