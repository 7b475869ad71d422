//! `App::build`: binds the listener (port 0 works), opens the store the configuration names,
//! and wires store, runner and router. `main` and the integration tests both start here.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::api::server::ConnectionLimits;
use crate::api::{self, AppState, Guard, Shared};
use crate::catalog::products::{CatalogStore, MemoryCatalog, RedisCatalog};
use crate::catalog::{Catalog, CatalogSettings, RuntimeReads};
use crate::config::tokens::Tokens;
use crate::config::{Config, ConfigError};
use crate::jobs::memory::MemoryStore;
use crate::jobs::redis::RedisStore;
use crate::jobs::registry::Registry;
use crate::jobs::runner::{Runner, RunnerSettings};
use crate::jobs::store::{JobStore, StoreError, StoreSettings, Topology};
use crate::metrics::store::MeteredStore;
use crate::topology::Target;

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("invalid configuration: {0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("cannot read the API tokens: {0}")]
    Tokens(String),
    #[error("cannot open the job store: {0}")]
    Store(#[from] StoreError),
}

pub struct App {
    listener: TcpListener,
    addr: SocketAddr,
    state: AppState,
    config: Config,
}

impl App {
    /// Builds the service with the stores the configuration names (Redis, or embedded) and
    /// the catalogue job kinds.
    pub async fn build(config: Config) -> Result<Self, StartupError> {
        // Before anything is opened: the stores trust what validation checked (sentinel
        // addresses are host:port, one way to reach Redis).
        config.validate()?;
        crate::config::env::check_names(std::env::vars_os().map(|(name, _)| name))?;
        if !config.feeds_dir.is_dir() {
            // Not refused: a service that syncs only over HTTP needs no feeds directory.
            warn!(
                feeds_dir = %config.feeds_dir.display(),
                "FEEDS_DIR is not a directory: every sync of a path source will answer \
                 source_not_found until it is"
            );
        }
        let (catalog, reads) = open_catalog(&config, catalog_settings(&config)?)?;
        let store = open_store(&config).await?;
        let registry = crate::catalog::registry_reading(catalog.clone(), reads);
        Self::build_with(config, store, catalog, registry).await
    }

    /// Builds the service on stores the caller opened and with the job kinds it chose
    /// (tests register their own kinds and share one Redis across apps).
    pub async fn build_with(
        config: Config,
        store: Arc<dyn JobStore>,
        catalog: Arc<Catalog>,
        registry: Registry,
    ) -> Result<Self, StartupError> {
        config.validate()?;
        let listen = config.listen_addr();
        let bind_error = |source| StartupError::Bind {
            addr: listen.clone(),
            source,
        };
        let listener = TcpListener::bind(&listen).await.map_err(bind_error)?;
        let addr = listener.local_addr().map_err(bind_error)?;
        let guard = guard(&config)?;
        crate::metrics::handle();
        let store = MeteredStore::wrap(store);
        let runner = Runner::with_observer(
            store.clone(),
            Arc::new(registry),
            runner_settings(&config),
            Arc::new(crate::metrics::RunMetrics),
        );
        let state = AppState::new(Shared {
            runner,
            store,
            catalog,
            wait_max: config.wait_max_seconds,
            imports: crate::api::products::Imports::new(
                config.max_concurrent_imports,
                config.max_body_bytes,
            ),
            guard,
        });
        Ok(Self {
            listener,
            addr,
            state,
            config,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn runner(&self) -> Runner {
        self.state.runner.clone()
    }

    /// Serves until `shutdown` resolves, then shuts down gracefully: new jobs get 503 at
    /// once and no more jobs are claimed, reads go on being served, running jobs get
    /// `SHUTDOWN_GRACE_SECONDS` to finish and the rest go back to the shared queue (their
    /// attempt not counted) for another replica; then the server stops accepting and open
    /// connections get at most `api::server::DRAIN_MAX` to finish.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        info!(addr = %self.addr, "catalog-jobs listening");
        let upkeep = tokio::spawn(crate::metrics::upkeep());
        let stopped = CancellationToken::new();
        let runner = self.state.runner.clone();
        let grace = self.config.shutdown_grace_seconds;
        let stop = stopped.clone();
        tokio::spawn(async move {
            shutdown.await;
            info!(
                grace_s = grace.as_secs_f64(),
                "shutting down: no new jobs; running jobs get the grace period"
            );
            runner.shutdown(grace).await;
            stop.cancel();
        });
        let probes = api::probe_router(self.state.clone());
        let router = api::router(self.state, self.config.max_body_bytes);
        let limits = ConnectionLimits {
            header_read: self.config.request_timeout_seconds,
            idle: self.config.idle_timeout_seconds,
            max_connections: self.config.max_connections,
        };
        api::server::serve(self.listener, router, probes, limits, stopped).await;
        upkeep.abort();
        info!("catalog-jobs stopped");
        Ok(())
    }
}

/// What every request passes: the tokens, the body and time limits, the CORS origins.
fn guard(config: &Config) -> Result<Guard, StartupError> {
    Ok(Guard {
        tokens: Arc::new(load_tokens(config)?),
        max_start_body_bytes: config.max_start_body_bytes,
        request_timeout: config.request_timeout_seconds,
        cors: api::cors::Cors::new(&config.cors_origins()?),
        streams: api::streams::StreamBudget::new(
            config.event_streams(),
            config.max_event_streams_per_tenant,
        ),
    })
}

/// The tokens of `API_TOKENS_FILE` and `API_TOKENS`; a malformed entry stops start-up
/// naming its line. With none, the service runs open and says so.
pub fn load_tokens(config: &Config) -> Result<Tokens, StartupError> {
    let tokens = crate::config::tokens::load(
        config.api_tokens_file.as_deref(),
        config.api_tokens.as_deref(),
    )
    .map_err(StartupError::Tokens)?;
    if tokens.is_open() {
        warn!("{}", api::OPEN_WARNING);
    }
    Ok(tokens)
}

pub fn store_settings(config: &Config) -> StoreSettings {
    StoreSettings {
        prefix: config.key_prefix.clone(),
        ttl: config.job_ttl_seconds,
        stale_after: config.stale_after_seconds,
        finished_cache: config.finished_cache_seconds,
        max_queued: config.max_queued_jobs,
        max_attempts: config.max_attempts,
        creates_per_minute: config.tenant_creates_per_minute,
        min_replicas_ack: config.redis_min_replicas_ack,
        ..StoreSettings::default()
    }
}

pub fn runner_settings(config: &Config) -> RunnerSettings {
    RunnerSettings {
        heartbeat: config.heartbeat(),
        finish_retry: config.finish_retry_seconds,
        max_concurrent: config.max_concurrent_jobs,
        ..RunnerSettings::default()
    }
}

/// The catalogue's settings, from the configuration (the allow-list parsed here, once).
pub fn catalog_settings(config: &Config) -> Result<CatalogSettings, ConfigError> {
    Ok(CatalogSettings {
        feeds_dir: config.feeds_dir.clone(),
        allowed_hosts: config.allowed_hosts()?,
        max_feed_bytes: config.max_feed_bytes,
        slow_feed: config.sync_slow_feed_seconds,
        enrich_batch: config.enrich_batch_size,
        pair_top_k: config.pair_top_k,
        pair_min_score: config.pair_min_score,
        pair_max_memory_mb: config.pair_max_memory_mb,
        write_retry: config.finish_retry_seconds,
        currency: config.price_currency.clone(),
        ..CatalogSettings::default()
    })
}

/// How to reach Redis, from the configuration: a fixed URL, the sentinels, or neither
/// (the embedded stores). The one place that decides it.
pub fn redis_target(config: &Config) -> Option<Target> {
    let nodes = config.cluster_nodes();
    if !nodes.is_empty() {
        return Some(Target::Cluster {
            nodes,
            password: config.redis_password.clone(),
        });
    }
    let sentinels = config.sentinels();
    if !sentinels.is_empty() {
        return Some(Target::Sentinels {
            sentinels,
            master: config.redis_master_name.clone().unwrap_or_default(),
            sentinel_password: config.redis_sentinel_password.clone(),
            password: config.redis_password.clone(),
        });
    }
    config.redis_url.clone().map(Target::Url)
}

/// A catalogue and, when it has them, its reads on the runtime.
pub type OpenedCatalog = (Arc<Catalog>, Option<Arc<dyn RuntimeReads>>);

/// The catalogue in the same place as the jobs: Redis when it is configured, else embedded;
/// with the Redis catalogue, its reads on the runtime.
pub fn open_catalog(
    config: &Config,
    settings: CatalogSettings,
) -> Result<OpenedCatalog, StartupError> {
    let Some(target) = redis_target(config) else {
        let store = Arc::new(MemoryCatalog::new());
        return Ok((Arc::new(Catalog { store, settings }), None));
    };
    let redis = RedisCatalog::open_target(target, &config.catalog_prefix)
        .map_err(|e| StartupError::Store(StoreError::Unavailable(e.to_string())))?;
    let redis = Arc::new(redis);
    let store: Arc<dyn CatalogStore> = redis.clone();
    Ok((Arc::new(Catalog { store, settings }), Some(redis)))
}

/// Opens Redis when it is configured (starting even while it is down: it reconnects by
/// itself and answers 503 meanwhile; but not when it answers and refuses the settings: a
/// password, a database index, an address that is not Redis, cluster nodes that are a
/// standalone Redis), else the embedded store,
/// saying it is not durable.
/// Logs the topology: where the primary is and how it is found.
pub async fn open_store(config: &Config) -> Result<Arc<dyn JobStore>, StartupError> {
    let settings = store_settings(config);
    let Some(target) = redis_target(config) else {
        warn!("no REDIS_URL, REDIS_SENTINELS or REDIS_CLUSTER_NODES: using the embedded in-memory store; job state is NOT durable and is lost on restart");
        return Ok(Arc::new(MemoryStore::new(settings)));
    };
    let store = RedisStore::open_target(target, settings)?;
    match store.topology().await {
        Ok(Some(Topology {
            cluster: Some(c), ..
        })) => info!(
            via = %store.primary().target().describe(),
            shards = c.shards.len(),
            slots_covered = c.slots_covered,
            replicas = c.replicas(),
            min_replicas_ack = config.redis_min_replicas_ack,
            "connected to a Redis Cluster"
        ),
        Ok(Some(t)) => info!(
            via = %store.primary().target().describe(),
            primary = %t.primary,
            replicas = t.replicas,
            min_replicas_ack = config.redis_min_replicas_ack,
            "connected to Redis"
        ),
        Ok(None) => {}
        // Redis answers but refuses our settings: no wait mends that, so start-up says which.
        Err(e @ StoreError::Misconfigured { .. }) => return Err(e.into()),
        // The cluster's shape was asked of a Redis that has no cluster (Redis's fixed words):
        // it would answer 503 forever while jobs ran in that one Redis.
        Err(StoreError::Unavailable(detail)) if detail.contains("cluster support disabled") => {
            return Err(StoreError::Misconfigured {
                cause: "REDIS_CLUSTER_NODES names a Redis that is not a Redis Cluster (its \
                        cluster-enabled is no): give a standalone Redis as REDIS_URL, or the \
                        nodes of a cluster",
                detail,
            }
            .into())
        }
        Err(e) => warn!(
            via = %store.primary().target().describe(),
            error = %e,
            "Redis is not reachable yet; serving 503 until it is"
        ),
    }
    match store.warnings().await {
        Ok(warnings) => {
            for w in warnings {
                warn!("{w}");
            }
        }
        Err(e) => warn!(error = %e, "could not read Redis's eviction policy"),
    }
    match store.persists().await {
        Ok(Some(false)) => warn!("Redis persists nothing (appendonly no, no save points): job state is lost if Redis restarts"),
        Ok(None) => warn!("cannot tell whether Redis persists (CONFIG GET is not allowed)"),
        _ => {}
    }
    Ok(Arc::new(store))
}
