//! The app in this test's process, built by `App::build_with` on port 0 (as main builds
//! it) with the test job kinds or the real catalogue kinds, and reached over real HTTP.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use catalog_jobs::catalog::products::MemoryCatalog;
use catalog_jobs::catalog::Catalog;
use catalog_jobs::config::Config;
use catalog_jobs::jobs::store::JobStore;
use catalog_jobs::startup::{catalog_settings, App};

use super::{catalog_store, http_client, settings, store, test_registry, Api, Backend};

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
            http_client(None),
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
