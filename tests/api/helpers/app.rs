//! The app in this test's process, built by `App::build_with` on port 0 (as main builds
//! it) with the test job kinds or the real catalogue kinds, and reached over real HTTP.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use catalog_jobs::catalog::products::{CatalogStore, MemoryCatalog, Product, RedisCatalog};
use catalog_jobs::catalog::Catalog;
use catalog_jobs::config::Config;
use catalog_jobs::jobs::fence::Unfenced;
use catalog_jobs::jobs::store::JobStore;
use catalog_jobs::jobs::TenantId;
use catalog_jobs::startup::{catalog_settings, App};

use super::{settings, shared_redis_url, store, test_registry, unique, Api, Backend};

/// A running app: its address, its job store, and its API (`app.get_json(…)`, `app.wait_for(…)`).
pub struct TestApp {
    pub addr: std::net::SocketAddr,
    pub store: Arc<dyn JobStore>,
    api: Api,
}

impl TestApp {
    /// Runs a built app until the test binary ends.
    pub fn run(app: App, store: Arc<dyn JobStore>) -> TestApp {
        let addr = app.local_addr();
        tokio::spawn(app.run_until(std::future::pending()));
        // A job of these tests ends in well under a second: 10 s is a stuck one.
        let api = Api::new(
            format!("http://{addr}"),
            reqwest::Client::new(),
            Duration::from_secs(10),
        );
        TestApp { addr, store, api }
    }
}

impl Deref for TestApp {
    type Target = Api;

    fn deref(&self) -> &Api {
        &self.api
    }
}

/// A config for tests: ephemeral port, the usual thresholds.
pub fn test_config() -> Config {
    let mut config = Config::defaults();
    config.bind_addr = Some("127.0.0.1:0".into());
    config.redis_url = None;
    config
}

pub async fn spawn_app(backend: Backend) -> TestApp {
    spawn_app_with(test_config(), store(backend, settings())).await
}

pub async fn spawn_app_with(config: Config, store: Arc<dyn JobStore>) -> TestApp {
    let catalog = test_catalog(&config);
    let app = App::build_with(config, store.clone(), catalog, test_registry())
        .await
        .expect("the app builds");
    TestApp::run(app, store)
}

/// An empty catalogue in memory, with `config`'s settings.
pub fn test_catalog(config: &Config) -> Arc<Catalog> {
    Arc::new(Catalog {
        store: Arc::new(MemoryCatalog::new()),
        settings: catalog_settings(config).expect("the allow-list parses"),
    })
}

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
    let (store, t) = (catalog_store(backend), super::tenant());
    let products = catalog_jobs::catalog::demo::generate(n, seed);
    let (s, tt, p) = (store.clone(), t.clone(), products.clone());
    super::blocking(move || s.upsert(&tt, &p, &Unfenced).expect("the store takes them")).await;
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

/// The real service with the real catalogue job kinds (sync, enrich, pair), on one backend.
pub async fn spawn_catalog_app(backend: Backend, config: Config) -> TestApp {
    let catalog = Arc::new(Catalog {
        store: catalog_store(backend),
        settings: catalog_settings(&config).expect("the allow-list parses"),
    });
    let registry = catalog_jobs::catalog::registry(catalog.clone());
    let app = App::build_with(
        config,
        store(backend, settings()),
        catalog.clone(),
        registry,
    )
    .await
    .expect("the app builds");
    let store = app.runner().store().clone();
    TestApp::run(app, store)
}
