//! Catalogues for tests: a catalogue store of either backend in a namespace of its own,
//! filled with demo products or with a few made by hand, and the walk of a paged listing.

use std::sync::Arc;

use catalog_jobs::catalog::products::{CatalogStore, MemoryCatalog, Product, RedisCatalog};
use catalog_jobs::jobs::fence::Unfenced;
use catalog_jobs::jobs::TenantId;
use serde_json::json;

use super::{blocking, shared_redis_url, tenant, unique, Backend};

/// A catalogue store of the given backend, in its own key namespace.
pub fn catalog_store(backend: Backend) -> Arc<dyn CatalogStore> {
    match backend {
        Backend::Memory => Arc::new(MemoryCatalog::new()),
        Backend::Redis => Arc::new(
            RedisCatalog::open(&shared_redis_url(), &unique("cat")).expect("the redis url parses"),
        ),
    }
}

/// A catalogue store of the given backend holding `n` demo products (made from `seed`) of a
/// new tenant: the store, the tenant and the products.
pub async fn demo_catalog(
    backend: Backend,
    n: usize,
    seed: u64,
) -> (Arc<dyn CatalogStore>, TenantId, Vec<Product>) {
    let (store, t) = (catalog_store(backend), tenant());
    let products = catalog_jobs::catalog::demo::generate(n, seed);
    let (s, tt, p) = (store.clone(), t.clone(), products.clone());
    blocking(move || s.upsert(&tt, &p, &Unfenced).expect("the store takes them")).await;
    (store, t, products)
}

/// Every page of a paged store listing, from the first on: `page(cursor)` answers a page and
/// the cursor of the next one, if any.
pub fn store_pages<T, E: std::fmt::Debug>(
    mut page: impl FnMut(Option<&str>) -> Result<(Vec<T>, Option<String>), E>,
) -> Vec<Vec<T>> {
    let (mut pages, mut cursor) = (Vec::new(), None);
    loop {
        let (items, next) = page(cursor.as_deref()).expect("the store answers a page");
        pages.push(items);
        match next {
            Some(next) => cursor = Some(next),
            None => return pages,
        }
    }
}

/// Three products pair joins (p0, p1, p2: t-shirts of three colours).
pub fn t_shirts() -> Vec<Product> {
    [
        "red cotton t-shirt",
        "blue cotton t-shirt",
        "green cotton t-shirt",
    ]
    .iter()
    .enumerate()
    .map(|(i, name)| {
        Product::from_json(json!({"product_key": format!("p{i}"), "name": name})).unwrap()
    })
    .collect()
}
