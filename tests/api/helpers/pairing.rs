//! Pairs for tests of the incremental pair and the change feed: a hard catalogue paired once
//! in full, edits written as a sync and an enrich would, an incremental pair of them, and the
//! check that a tenant's pair equals a full pair with its own word weights.

use std::collections::HashMap;
use std::sync::Arc;

use catalog_jobs::catalog::demo;
use catalog_jobs::catalog::pair::{self, Ask, PairParams};
use catalog_jobs::catalog::products::{CatalogStore, Neighbour, Product, ProductKey};
use catalog_jobs::catalog::{enrich, run_unfenced, Catalog, CatalogSettings};
use catalog_jobs::jobs::fence::Unfenced;
use catalog_jobs::jobs::TenantId;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::tenant;

/// A cancel token nobody trips.
pub fn never() -> CancellationToken {
    CancellationToken::new()
}

/// `paired` in `store`, with `n` products.
pub fn paired_in(
    store: Arc<dyn CatalogStore>,
    n: usize,
    seed: u64,
) -> (Catalog, TenantId, Vec<Product>) {
    let catalog = Catalog {
        store,
        settings: CatalogSettings {
            pair_full_after_share: 1.0,
            ..CatalogSettings::default()
        },
    };
    let t = tenant();
    let products = demo::generate_hard(n, seed);
    catalog.store.upsert(&t, &products, &Unfenced).unwrap();
    enrich(&catalog, &t);
    let report = run_unfenced(&catalog, &t, &PairParams::default(), &never(), None).unwrap();
    assert_eq!(report["mode"], "full", "{report}");
    (catalog, t, products)
}

fn enrich(catalog: &Catalog, t: &TenantId) {
    let params = enrich::EnrichParams { force: false };
    run_unfenced(catalog, t, &params, &never(), None).unwrap();
}

/// Writes the edits as a sync and an enrich would.
pub fn apply(catalog: &Catalog, t: &TenantId, edits: &demo::Edits) {
    catalog.store.upsert(t, &edits.upserts, &Unfenced).unwrap();
    catalog.store.remove(t, &edits.removals).unwrap();
    enrich(catalog, t);
}

/// Every row of the table, by product, read at once (`CatalogStore::neighbour_table`: one
/// HSCAN on Redis; a product at a time took 3-4 s of a 20,000-product test). A pair drops the
/// rows of removed products, so the table holds only products the catalogue has.
pub fn table(catalog: &Catalog, t: &TenantId) -> HashMap<ProductKey, Vec<Neighbour>> {
    catalog
        .store
        .neighbour_table(t)
        .unwrap()
        .into_iter()
        .collect()
}

fn ask(catalog: &Catalog) -> Ask {
    Ask {
        top_k: catalog.settings.pair_top_k,
        min_score: catalog.settings.pair_min_score as f32,
    }
}

/// Applies `edits`, pairs (incrementally) and answers the report.
pub fn edit_and_pair(catalog: &Catalog, t: &TenantId, edits: &demo::Edits) -> Value {
    apply(catalog, t, edits);
    let report = run_unfenced(catalog, t, &PairParams::default(), &never(), None).unwrap();
    assert_eq!(report["mode"], "incremental", "{report}");
    let changes = &report["changes"];
    let edited = changes["added"].as_u64().unwrap()
        + changes["changed"].as_u64().unwrap()
        + changes["removed"].as_u64().unwrap();
    assert!(
        edited > 0 && edited <= (edits.upserts.len() + edits.removals.len()) as u64,
        "{report}"
    );
    report
}

/// Checks the tenant's pair against a full pair with its own weights: every product's top
/// k, neighbour and exact score, in the state and in the table. Answers the table.
pub fn equals_a_full_pair_with_its_weights(
    catalog: &Catalog,
    t: &TenantId,
) -> HashMap<ProductKey, Vec<Neighbour>> {
    let state = catalog
        .store
        .pairing(t, &never())
        .unwrap()
        .expect("the pair kept its state");
    let full = pair::full_with_weights(catalog, t, &state.weights, &ask(catalog)).unwrap();
    assert_eq!(state.keys, full.keys);
    let differ = (0..full.keys.len())
        .filter(|&i| state.top(i) != full.top(i))
        .map(|i| (&full.keys[i], state.top(i), full.top(i)))
        .take(3)
        .collect::<Vec<_>>();
    assert!(differ.is_empty(), "incremental and full differ: {differ:?}");
    let rows = table(catalog, t);
    for (i, key) in full.keys.iter().enumerate() {
        assert_eq!(
            rows.get(key).cloned(),
            full.row(i),
            "the table's row of {key:?}"
        );
    }
    rows
}
