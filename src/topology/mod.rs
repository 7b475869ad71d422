//! How to reach Redis: a fixed `REDIS_URL`, the primary the sentinels name, or the nodes of
//! a Redis Cluster.
//!
//! `Primary` is the one place that holds the connection to it. Every user (job store,
//! catalogue, events listener) takes its connection from here and reports each failure back;
//! through sentinels, a connection error, a timeout or a `READONLY` answer makes it ask the
//! sentinels again (one question at a time, at most every `RESOLVE_INTERVAL`) and swap in a
//! connection to the new primary. A cluster's connection follows slots and failovers by
//! itself (`cluster`) and is replaced when it goes silent (`renewing`). Knows nothing of
//! jobs, catalogues or HTTP.

pub mod cluster;
mod connection;
mod renewing;

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionAddr, ErrorKind, RedisError, RedisResult};
use tokio::sync::{watch, Mutex};
use tracing::{info, warn};

pub use cluster::{ClusterShape, Shard};
pub use connection::Connection;

/// Shortest time between two questions to the sentinels: a burst of failing calls during a
/// failover asks once, not once per call.
const RESOLVE_INTERVAL: Duration = Duration::from_millis(200);
/// How long one round of questions to the sentinels (and the new primary's `ROLE` check)
/// may take; a sentinel that does not answer must not hold a request longer than a call.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Where the primary is, as configured.
#[derive(Clone, Debug)]
pub enum Target {
    /// One Redis at a fixed address (`REDIS_URL`); its own reconnects are enough.
    Url(String),
    /// The primary the sentinels monitor under `master`.
    Sentinels {
        sentinels: Vec<String>,
        master: String,
        sentinel_password: Option<String>,
        password: Option<String>,
    },
    /// The nodes of a Redis Cluster (seeds: the rest is found from them).
    Cluster {
        nodes: Vec<String>,
        password: Option<String>,
    },
}

impl Target {
    /// A line for the start-up log and `/readyz` (no passwords).
    pub fn describe(&self) -> String {
        match self {
            Target::Url(_) => "a fixed Redis (REDIS_URL)".to_owned(),
            Target::Sentinels {
                sentinels, master, ..
            } => format!(
                "primary `{master}` through sentinels {}",
                sentinels.join(",")
            ),
            Target::Cluster { nodes, .. } => {
                format!("a Redis Cluster through nodes {}", nodes.join(","))
            }
        }
    }
}

/// The connection in use now and where it goes.
#[derive(Clone)]
struct Current {
    addr: String,
    client: redis::Client,
    conn: Connection,
}

/// A handle on the primary: cheap to clone, shared by every clone.
#[derive(Clone)]
pub struct Primary {
    inner: Arc<Inner>,
}

struct Inner {
    target: Target,
    config: ConnectionManagerConfig,
    current: RwLock<Option<Current>>,
    /// The sentinel client, also the single-flight lock of a re-resolution.
    sentinel: Mutex<Option<SentinelClient>>,
    /// When the sentinels were last asked.
    last_resolve: std::sync::Mutex<Option<Instant>>,
    /// Bumped whenever the primary changes: long-lived subscriptions re-subscribe on it.
    generation: watch::Sender<u64>,
    /// On a cluster: a client per seed node, for subscriptions (any node hears every
    /// `PUBLISH`), tried in turn as they fail.
    seeds: cluster::Seeds,
}

impl Primary {
    /// Opens lazily: nothing is dialled here, so the service starts while Redis (or every
    /// sentinel) is away and answers 503 until one answers.
    pub fn open(target: Target, config: ConnectionManagerConfig) -> RedisResult<Self> {
        let mut seeds = cluster::Seeds::default();
        let (current, sentinel) = match &target {
            Target::Url(url) => {
                let client = redis::Client::open(url.as_str())?;
                let addr = client.get_connection_info().addr().to_string();
                let conn = ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?;
                let conn = Connection::Single(conn);
                (Some(Current { addr, client, conn }), None)
            }
            Target::Cluster { nodes, password } => {
                seeds = cluster::Seeds::new(nodes, password)?;
                let conn = cluster::connect(nodes, password)?;
                let (addr, client) = ("cluster".to_owned(), seeds.first());
                (Some(Current { addr, client, conn }), None)
            }
            Target::Sentinels {
                sentinels,
                master,
                sentinel_password,
                password,
            } => (
                None,
                Some(sentinel_client(
                    sentinels,
                    master,
                    sentinel_password,
                    password,
                )?),
            ),
        };
        Ok(Self {
            inner: Arc::new(Inner {
                target,
                config,
                current: RwLock::new(current),
                sentinel: Mutex::new(sentinel),
                last_resolve: std::sync::Mutex::new(None),
                generation: watch::channel(0).0,
                seeds,
            }),
        })
    }

    pub fn target(&self) -> &Target {
        &self.inner.target
    }

    /// The primary's address as last resolved (`None` before the sentinels first answered).
    pub fn address(&self) -> Option<String> {
        self.current().map(|c| c.addr)
    }

    fn current(&self) -> Option<Current> {
        self.inner
            .current
            .read()
            .expect("no thread panics while holding the primary's lock")
            .clone()
    }

    /// The multiplexed connection to the primary (or the cluster), asking the sentinels first
    /// if none has been found yet.
    pub async fn connection(&self) -> RedisResult<Connection> {
        match self.current_conn() {
            Some(conn) => Ok(conn),
            None => self.first_connection().await,
        }
    }

    /// The connection in use now, if one was found: only it is copied (`current` copies the
    /// client and address too, each a few allocations, on every store call).
    fn current_conn(&self) -> Option<Connection> {
        self.inner
            .current
            .read()
            .expect("no thread panics while holding the primary's lock")
            .as_ref()
            .map(|c| c.conn.clone())
    }

    /// `connection` when none was found yet: asks the sentinels. Boxed, out of line: asking
    /// holds a lock's wait and the sentinels' request (~3 kB), which every store call's
    /// future (each awaits `connection`) would otherwise carry beside its own.
    fn first_connection(&self) -> BoxFuture<'_, RedisResult<Connection>> {
        Box::pin(async move {
            self.resolve().await?;
            self.current_conn()
                .ok_or_else(|| no_primary("the sentinels name no primary yet"))
        })
    }

    /// A client for the primary (for connections of their own, such as a subscription); on a
    /// cluster, for one of its nodes (the next one after a `suspect`).
    pub async fn client(&self) -> RedisResult<redis::Client> {
        if let Some(client) = self.inner.seeds.current() {
            return Ok(client);
        }
        if self.current().is_none() {
            self.resolve().await?;
        }
        self.current()
            .map(|c| c.client)
            .ok_or_else(|| no_primary("the sentinels name no primary yet"))
    }

    /// Tells of a failed call: through sentinels, a connection error or a `READONLY` answer
    /// (the node was demoted) makes it ask the sentinels again, in the background.
    pub fn failed(&self, error: &RedisError) {
        if is_failover_sign(error) {
            self.suspect();
        }
    }

    /// A call got no answer in time: the primary may be gone; ask the sentinels again (on a
    /// cluster: the next subscription goes to the next node; the connection replaces itself
    /// when it is silent, `renewing`).
    pub fn suspect(&self) {
        self.inner.seeds.skip();
        if matches!(self.inner.target, Target::Sentinels { .. }) {
            let me = self.clone();
            tokio::spawn(async move {
                if let Err(e) = me.resolve().await {
                    warn!(error = %e, "the sentinels named no reachable primary yet");
                }
            });
        }
    }

    /// Whether `interval` has passed since the sentinels were last asked; if so, notes now as
    /// that time.
    fn due(&self, interval: Duration) -> bool {
        let mut last = self
            .inner
            .last_resolve
            .lock()
            .expect("no thread panics while holding the resolve time");
        if last.is_some_and(|t| t.elapsed() < interval) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }

    /// Changes every time the primary does.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.generation.subscribe()
    }

    /// Asks the sentinels where the primary is and swaps the connection if it moved. One
    /// question at a time; a caller arriving while one is asked waits for its answer.
    async fn resolve(&self) -> RedisResult<()> {
        let mut guard = self.inner.sentinel.lock().await;
        let Some(sentinel) = guard.as_mut() else {
            return Ok(());
        };
        if !self.due(RESOLVE_INTERVAL) {
            return Ok(());
        }
        let client = match tokio::time::timeout(RESOLVE_TIMEOUT, sentinel.async_get_client()).await
        {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(no_primary("the sentinels did not answer in time")),
        };
        let addr = client.get_connection_info().addr().to_string();
        let previous = self.address();
        if previous.as_deref() == Some(addr.as_str()) {
            return Ok(());
        }
        let conn = Connection::Single(ConnectionManager::new_lazy_with_config(
            client.clone(),
            self.inner.config.clone(),
        )?);
        *self
            .inner
            .current
            .write()
            .expect("no thread panics while holding the primary's lock") = Some(Current {
            addr: addr.clone(),
            client,
            conn,
        });
        self.inner.generation.send_modify(|g| *g += 1);
        match previous {
            None => info!(primary = %addr, "the sentinels name the Redis primary"),
            Some(old) => {
                warn!(primary = %addr, previous = %old, "Redis failover: following the new primary")
            }
        }
        Ok(())
    }
}

/// The address of a `host:port` entry (a sentinel, a cluster node).
fn tcp_addr(entry: &str) -> ConnectionAddr {
    let (host, port) = entry
        .rsplit_once(':')
        .expect("the configuration checked that each Redis address is host:port");
    let port = port
        .parse()
        .expect("the configuration checked that each Redis address's port is a number");
    ConnectionAddr::Tcp(host.to_owned(), port)
}

fn sentinel_client(
    sentinels: &[String],
    master: &str,
    sentinel_password: &Option<String>,
    password: &Option<String>,
) -> RedisResult<SentinelClient> {
    let addrs = sentinels.iter().map(|s| tcp_addr(s));
    let mut builder = SentinelClientBuilder::new(addrs, master, SentinelServerType::Master)?;
    if let Some(p) = sentinel_password {
        builder = builder.set_client_to_sentinel_password(p);
    }
    if let Some(p) = password {
        builder = builder.set_client_to_redis_password(p);
    }
    builder.build()
}

fn no_primary(why: &'static str) -> RedisError {
    RedisError::from((redis::ErrorKind::Io, "no Redis primary", why.to_owned()))
}

/// Whether an error can mean the primary moved: the connection broke or was refused, or the
/// node answered `READONLY` (it is a replica now).
pub fn is_failover_sign(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || error.code() == Some("READONLY")
}

/// Whether an error is a refusal no retry can mend: a call that crosses slots (`CROSSSLOT`, or
/// a script touching a key of another slot than the one it named), a command on a key of the
/// wrong type (`WRONGTYPE`), or one the ACL forbids (`NOPERM`). These are programming or
/// set-up errors, not outages; redis-rs does not retry them either. A script stopped for a key
/// "not local" during a slot migration is counted too: it stopped after the writes it had
/// made, so running it again is no safe retry either. A pipeline's error is its commands'
/// own (redis-rs gives it no code of its own): one of them permanent makes it permanent.
pub fn is_permanent(error: &RedisError) -> bool {
    let permanent = |code: &str| matches!(code, "CROSSSLOT" | "WRONGTYPE" | "NOPERM");
    error.code().is_some_and(permanent)
        || error
            .clone()
            .into_server_errors()
            .is_some_and(|failed| failed.iter().any(|(_, e)| permanent(e.code())))
        || error
            .detail()
            .is_some_and(|d| d.starts_with("Script attempted to access"))
}

/// What an error says of the set-up when Redis answers but no retry can mend it until an
/// operator changes a setting: it refused the password, its ACL forbids a call, it has no
/// database of the index the URL names, or what answers is not Redis. `None` for anything else (an outage reads as one).
pub fn misconfiguration(error: &RedisError) -> Option<&'static str> {
    if error.kind() == ErrorKind::AuthenticationFailed
        || matches!(error.code(), Some("NOAUTH" | "WRONGPASS"))
    {
        return Some(
            "Redis refused this service's password: check REDIS_PASSWORD (or the password in \
             REDIS_URL)",
        );
    }
    if error.code() == Some("NOPERM") {
        return Some(
            "Redis's ACL does not let this service's user run a command or touch a key it \
             needs (NOPERM): grant the user every command on KEY_PREFIX's and \
             CATALOG_PREFIX's keys",
        );
    }
    if error.to_string().contains("refused to switch database") {
        return Some(
            "Redis has no database of the index REDIS_URL names (its path; a Redis has 16, \
             /0 to /15, unless its `databases` setting says otherwise)",
        );
    }
    if error.kind() == ErrorKind::Parse {
        return Some(
            "the Redis address answered, but not as Redis does: check that REDIS_URL (or \
             REDIS_SENTINELS, REDIS_CLUSTER_NODES) names a Redis server's port",
        );
    }
    tls_misconfiguration(&error.to_string())
}

/// What a TLS handshake's failure (`rediss://`) says of the set-up: a certificate this
/// process does not trust, or one issued for another name.
fn tls_misconfiguration(error: &str) -> Option<&'static str> {
    error.contains("invalid peer certificate").then_some(
        "Redis's TLS certificate is not one this service trusts (its issuer is unknown, it \
         has expired, or it names another host than REDIS_URL's): give the CA that issued it \
         as a PEM file in SSL_CERT_FILE (or a directory of them in SSL_CERT_DIR)",
    )
}
