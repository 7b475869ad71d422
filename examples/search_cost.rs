//! Prints what a product search (`GET /catalog/products?q=…`) costs on a large catalogue:
//! the time of a search that matches nothing (it reads every product once) and of a first
//! page of a common word, on the embedded catalogue store and, with `REDIS_URL`, on Redis.
//!
//!     cargo run --release --example search_cost                  # 100k products, memory
//!     REDIS_URL=redis://127.0.0.1:6379/0 cargo run --release --example search_cost -- 100000
//!
//! The Redis run writes under a `search-cost-<pid>` prefix and clears its tenant after.

use std::sync::Arc;
use std::time::Instant;

use catalog_jobs::catalog::demo;
use catalog_jobs::catalog::products::{CatalogStore, MemoryCatalog, RedisCatalog};
use catalog_jobs::catalog::search::{search, ProductQuery};
use catalog_jobs::jobs::fence::Unfenced;
use catalog_jobs::jobs::TenantId;

/// The default catalogue size: the one the issue asks about.
const DEFAULT_PRODUCTS: usize = 100_000;
/// The seed of the generated catalogue.
const SEED: u64 = 7;
/// A page as the API's default.
const PAGE: usize = 50;
/// Products written per upsert call while loading.
const LOAD_BATCH: usize = 5_000;

fn measure(name: &str, store: Arc<dyn CatalogStore>, n: usize) {
    let tenant = TenantId::parse("search-cost").expect("a valid tenant");
    let products = demo::generate(n, SEED);
    for chunk in products.chunks(LOAD_BATCH) {
        store
            .upsert(&tenant, chunk, &Unfenced)
            .expect("the store takes the products");
    }
    let common = products[0]
        .name
        .split_whitespace()
        .next()
        .expect("a name has a word")
        .to_owned();
    for (label, q) in [
        ("no match (reads all)", "zzzqqq nothing"),
        ("common word, page 1", common.as_str()),
    ] {
        let query = ProductQuery::parse(q).expect("a valid query");
        let started = Instant::now();
        let (page, next) =
            search(&*store, &tenant, &query, PAGE, None).expect("the search answers");
        println!(
            "{name:6} {n:>8} products  {label:22} {:>8.1} ms  {} found, more: {}",
            started.elapsed().as_secs_f64() * 1000.0,
            page.len(),
            next.is_some()
        );
    }
    store.clear(&tenant).expect("the tenant is cleared");
}

fn main() {
    let n = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(DEFAULT_PRODUCTS);
    measure("memory", Arc::new(MemoryCatalog::new()), n);
    if let Ok(url) = std::env::var("REDIS_URL") {
        // The Redis catalogue is blocking over an async client: it runs off a runtime's
        // blocking thread, as the job functions and the API's handlers call it.
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        runtime.block_on(async move {
            tokio::task::spawn_blocking(move || {
                let prefix = format!("search-cost-{}", std::process::id());
                let store = RedisCatalog::open(&url, &prefix).expect("Redis opens");
                measure("redis", Arc::new(store), n);
            })
            .await
            .expect("the measurement ran");
        });
    }
}
