//! Shared test harness: a real `redis-server` per test binary (or `REDIS_URL`), the real app
//! on an ephemeral port, test job kinds, and gates that let a test hold a job mid-run.
//! Tests isolate themselves by tenant and key prefix, never by FLUSHDB.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant};

use catalog_jobs::api::extract::{bool_field, only_fields};
use catalog_jobs::catalog::products::{CatalogStore, MemoryCatalog, RedisCatalog};
use catalog_jobs::catalog::Catalog;
use catalog_jobs::config::Config;
use catalog_jobs::jobs::memory::MemoryStore;
use catalog_jobs::jobs::redis::RedisStore;
use catalog_jobs::jobs::registry::{ErrorClass, JobError, Registry};
use catalog_jobs::jobs::store::{
    BoxFuture, Cancel, Claim, Created, Event, Finish, JobStore, Live, NewJob, Origin, Outcome,
    Purge, Recovered, Release, Renewal, Restore, RunId, StoreError, StoreSettings, Tick,
};
use catalog_jobs::jobs::timeline::{EventId, TimelineEvent};
use catalog_jobs::jobs::watch::TenantWatch;
use catalog_jobs::jobs::{JobId, Kind, Snapshot, TenantId};
use catalog_jobs::startup::{catalog_settings, App};
use serde_json::{json, Value};
use tokio::sync::{watch, Semaphore};

/// A `redis-server` this test process owns: temp dir, loopback port, no RDB snapshots.
/// A watchdog shell kills it when the test process exits, however it exits.
pub struct RedisServer {
    pub port: u16,
    dir: PathBuf,
    appendonly: bool,
    /// More arguments (`--replicaof 127.0.0.1 <port>` for a replica).
    extra: String,
    pid: Option<u32>,
    watchdog: Option<Child>,
}

impl RedisServer {
    /// Starts a server on a free port. `appendonly` keeps its data across `restart`.
    pub fn start(appendonly: bool) -> Self {
        Self::start_with(appendonly, "")
    }

    /// Starts a server with more arguments (e.g. `--replicaof 127.0.0.1 6379`).
    pub fn start_with(appendonly: bool, extra: &str) -> Self {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("catalog-jobs-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the temp dir is writable");
        let mut server = Self {
            port,
            dir,
            appendonly,
            extra: extra.to_owned(),
            pid: None,
            watchdog: None,
        };
        server.launch();
        server
    }

    fn launch(&mut self) {
        let args = format!(
            "--port {} --bind 127.0.0.1 --unixsocket {} --unixsocketperm 700 --dir {} --save '' --appendonly {} --appendfsync always --daemonize no --loglevel warning {}",
            self.port,
            self.socket().display(),
            self.dir.display(),
            if self.appendonly { "yes" } else { "no" },
            self.extra,
        );
        let (pid, watchdog) = spawn_watched(&format!("redis-server {args}"));
        self.pid = Some(pid);
        self.watchdog = Some(watchdog);
        wait_for_redis(&self.url());
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The same server on its unix socket, for a Redis on the service's own host.
    pub fn socket_url(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("redis.sock")
    }

    /// Kills the server at once (SIGKILL), as a crash or network loss would look.
    pub fn stop(&mut self) {
        if let Some(pid) = self.pid.take() {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            // Wait until the port is really closed, so the outage has begun.
            let deadline = Instant::now() + Duration::from_secs(5);
            while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if let Some(mut w) = self.watchdog.take() {
            drop(w.stdin.take());
            let _ = w.wait();
        }
    }

    /// Starts it again on the same port with its old data, as a replica of `primary_port`
    /// (how a failed primary rejoins once the sentinels promoted another).
    pub fn restart_as_replica_of(&mut self, primary_port: u16) {
        self.extra = format!("--replicaof 127.0.0.1 {primary_port}");
        self.restart(true);
    }

    /// Starts it again on the same port; `keep_data` false wipes its files first.
    pub fn restart(&mut self, keep_data: bool) {
        self.stop();
        if !keep_data {
            let _ = std::fs::remove_dir_all(&self.dir);
            std::fs::create_dir_all(&self.dir).expect("the temp dir is writable");
        }
        self.launch();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts `command` under a watchdog shell: the shell prints its pid, then waits on its
/// stdin; when this process exits the pipe closes and the shell kills the command, so no
/// server outlives its test binary.
fn spawn_watched(command: &str) -> (u32, Child) {
    let script =
        format!("{command} >/dev/null 2>&1 & pid=$!; echo $pid; read _; kill -9 $pid 2>/dev/null");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sh can be spawned (is redis-server installed? see .ci/run)");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout is piped"))
        .read_line(&mut line)
        .expect("the watchdog prints the pid");
    let pid = line.trim().parse().expect("the watchdog prints a pid");
    (pid, child)
}

/// The name the test sentinels monitor the primary under.
pub const MASTER_NAME: &str = "m";

/// A `redis-server --sentinel` this test process owns, watching one primary.
pub struct Sentinel {
    pub port: u16,
    dir: PathBuf,
    pid: u32,
    watchdog: Option<Child>,
}

impl Sentinel {
    /// Quorum 2 of 3; the primary is down after 1 s without an answer; a failover that
    /// stalls is retried after 3 s. Short, so a test's failover takes seconds.
    fn start(primary_port: u16) -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "catalog-jobs-sentinel-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("the temp dir is writable");
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {primary_port} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                 sentinel failover-timeout {MASTER_NAME} 3000\n\
                 sentinel parallel-syncs {MASTER_NAME} 1\n",
                dir.display()
            ),
        )
        .expect("the sentinel config is writable");
        let (pid, watchdog) = spawn_watched(&format!("redis-server {} --sentinel", conf.display()));
        wait_for_redis(&format!("redis://127.0.0.1:{port}/"));
        Self {
            port,
            dir,
            pid,
            watchdog: Some(watchdog),
        }
    }

    fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Option<T> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).ok()?;
        let mut conn = client
            .get_connection_with_timeout(Duration::from_secs(1))
            .ok()?;
        cmd.query(&mut conn).ok()
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-9")
            .arg(self.pid.to_string())
            .status();
        if let Some(mut w) = self.watchdog.take() {
            drop(w.stdin.take());
            let _ = w.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One primary (append-only, so it can come back with its old data), one replica and three
/// sentinels, all on loopback ports of their own, all killed with the test.
pub struct HaRedis {
    pub primary: RedisServer,
    pub replica: RedisServer,
    pub sentinels: Vec<Sentinel>,
}

impl HaRedis {
    /// Starts them and waits until the replica is in sync and every sentinel knows the
    /// replica and the two other sentinels (before that a failover could not happen).
    pub fn start() -> Self {
        let primary = RedisServer::start(true);
        let replica =
            RedisServer::start_with(true, &format!("--replicaof 127.0.0.1 {}", primary.port));
        let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(primary.port)).collect();
        let ha = Self {
            primary,
            replica,
            sentinels,
        };
        ha.wait_until("the replica is in sync", Duration::from_secs(20), |ha| {
            role(ha.replica.port).is_some_and(|r| r.contains("connected"))
        });
        ha.wait_until(
            "every sentinel knows the replica and the other sentinels",
            Duration::from_secs(20),
            |ha| {
                ha.sentinels.iter().all(|s| {
                    let replicas: Option<Vec<redis::Value>> =
                        s.query(redis::cmd("SENTINEL").arg("REPLICAS").arg(MASTER_NAME));
                    let peers: Option<Vec<redis::Value>> =
                        s.query(redis::cmd("SENTINEL").arg("SENTINELS").arg(MASTER_NAME));
                    replicas.is_some_and(|r| r.len() == 1) && peers.is_some_and(|p| p.len() == 2)
                })
            },
        );
        ha
    }

    /// `REDIS_SENTINELS` for the service.
    pub fn sentinels_env(&self) -> String {
        self.sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Whether the failover to the node on `port` is over: every sentinel names it, sees it
    /// as a plain healthy primary (no failover in progress), and it says it is a primary.
    pub fn failed_over_to(&self, port: u16) -> bool {
        role(port).is_some_and(|r| r.contains("master"))
            && self.sentinels.iter().all(|s| {
                let master: Option<HashMap<String, String>> =
                    s.query(redis::cmd("SENTINEL").arg("MASTER").arg(MASTER_NAME));
                master.is_some_and(|m| {
                    m.get("port") == Some(&port.to_string())
                        && m.get("flags").map(String::as_str) == Some("master")
                })
            })
    }

    /// Polls `condition` every 50 ms until it holds, failing the test after `within`.
    pub fn wait_until(&self, what: &str, within: Duration, condition: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + within;
        while !condition(self) {
            assert!(Instant::now() < deadline, "{what}: not within {within:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `ROLE` of the Redis on `port`, flattened to words (`master …`, `slave … connected …`).
pub fn role(port: u16) -> Option<String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(1))
        .ok()?;
    let role: redis::Value = redis::cmd("ROLE").query(&mut conn).ok()?;
    Some(format!("{role:?}"))
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A Redis URL where no Redis will ever answer: a port held for the whole test process by a
/// listener that closes every connection at once. (A port that is merely free now may be
/// taken later by another test's `redis-server`, which would then answer.)
pub fn dead_redis_url() -> String {
    static DEAD: std::sync::OnceLock<u16> = std::sync::OnceLock::new();
    let port = *DEAD.get_or_init(|| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("bound").port();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                drop(conn);
            }
        });
        port
    });
    format!("redis://127.0.0.1:{port}/0")
}

fn wait_for_redis(url: &str) {
    let client = redis::Client::open(url).expect("a valid redis url");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut c) = client.get_connection() {
            if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "redis-server did not come up at {url}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

static SHARED: OnceLock<(String, Option<RedisServer>)> = OnceLock::new();

/// The Redis this test binary shares: `REDIS_URL` if set, else one it starts once.
pub fn shared_redis_url() -> String {
    SHARED
        .get_or_init(|| match std::env::var("REDIS_URL") {
            Ok(url) if !url.is_empty() => (url, None),
            _ => {
                let server = RedisServer::start(false);
                (server.url(), Some(server))
            }
        })
        .0
        .clone()
}

/// A name no other test uses: for tenants and key prefixes.
pub fn unique(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ) + &uuid_suffix()
}

fn uuid_suffix() -> String {
    format!("-{}", &JobId::new().to_string()[..8])
}

pub fn tenant() -> TenantId {
    TenantId::parse(&unique("t")).expect("unique names are valid tenants")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Memory,
    Redis,
}

pub fn settings() -> StoreSettings {
    StoreSettings {
        prefix: unique("test"),
        ..StoreSettings::default()
    }
}

/// A store of the given backend, in its own key namespace.
pub fn store(backend: Backend, settings: StoreSettings) -> Arc<dyn JobStore> {
    match backend {
        Backend::Memory => Arc::new(MemoryStore::new(settings)),
        Backend::Redis => {
            Arc::new(RedisStore::open(&shared_redis_url(), settings).expect("the redis url parses"))
        }
    }
}

pub fn new_job(tenant: &TenantId, kind: &str) -> NewJob {
    NewJob {
        id: JobId::new(),
        tenant: tenant.clone(),
        kind: Kind::parse(kind).expect("test kinds are valid"),
        params: json!({}),
        step: "queued".into(),
        origin: Origin {
            created_by: "test".into(),
            request_id: "req-test".into(),
            retry_of: None,
        },
        idempotency_key: None,
    }
}

/// Creates a job and expects it to be created.
pub async fn create(store: &dyn JobStore, job: &NewJob) -> Snapshot {
    match store.create(job.clone()).await.expect("the store answers") {
        Created::Created(s) => *s,
        other => panic!("expected a new job, got {other:?}"),
    }
}

/// Every kind the store tests create jobs of.
pub fn test_kinds() -> Vec<Kind> {
    ["sync", "enrich", "pair", "k1", "k2", "k3"]
        .iter()
        .map(|k| Kind::parse(k).expect("valid"))
        .collect()
}

/// Creates a job and claims it as worker `test/1` (the queue must hold nothing before it).
pub async fn start(store: &dyn JobStore, job: &NewJob) -> (Snapshot, RunId) {
    let created = create(store, job).await;
    let claim = store
        .claim("test/1", &test_kinds())
        .await
        .expect("the store answers")
        .expect("the job is in the queue");
    assert_eq!(claim.job.id, job.id, "the oldest job is claimed first");
    (created, claim.run)
}

pub async fn finish(
    store: &dyn JobStore,
    job: &NewJob,
    run: &RunId,
    created: &Snapshot,
    outcome: Outcome,
) -> Finish {
    store
        .finish(job, run, created.created_at, &outcome, 0)
        .await
        .expect("the store answers")
}

// ---------------------------------------------------------------------------------------
// Test job kinds

#[derive(Debug, thiserror::Error)]
pub enum TestError {
    #[error("the feed at customer-secret.example could not be reached")]
    SourceUnreachable,
}

impl ErrorClass for TestError {
    fn class(&self) -> &'static str {
        "SourceUnreachable"
    }
}

/// A gate a test holds a job at: the job says it has started, then blocks until released.
pub struct Gate {
    pub started: watch::Sender<bool>,
    release: Semaphore,
}

static GATES: LazyLock<Mutex<HashMap<String, Arc<Gate>>>> = LazyLock::new(Default::default);

impl Gate {
    /// The gate for jobs of this tenant (made on first use by either side).
    pub fn of(tenant: &TenantId) -> Arc<Gate> {
        GATES
            .lock()
            .expect("the gate map is never poisoned")
            .entry(tenant.to_string())
            .or_insert_with(|| {
                Arc::new(Gate {
                    started: watch::channel(false).0,
                    release: Semaphore::new(0),
                })
            })
            .clone()
    }

    /// Waits (10 s at most) until a job has reached the gate.
    pub async fn reached(&self) {
        let mut rx = self.started.subscribe();
        tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|s| *s))
            .await
            .expect("the job reached its gate within 10 s")
            .expect("the gate lives");
    }

    pub fn release(&self) {
        self.release.add_permits(1);
    }

    /// The job's side: announce, then block this (blocking) thread until released, or until
    /// the job is asked to stop (answering false).
    fn pass(&self, cancel: &tokio_util::sync::CancellationToken) -> bool {
        self.started.send_replace(true);
        tokio::runtime::Handle::current().block_on(async {
            tokio::select! {
                permit = self.release.acquire() => {
                    permit.expect("the gate's semaphore is never closed").forget();
                    true
                }
                () = cancel.cancelled() => false,
                // A test that failed before releasing its gate must not leave this blocking
                // thread behind: the runtime would wait for it, and the test binary hang.
                () = tokio::time::sleep(Duration::from_secs(30)) => false,
            }
        })
    }
}

/// The kinds the tests run through the real service:
/// - `ticker` (`n`, default 10): reports n evenly spaced ticks, answers `{"ticks": n}`;
/// - `fail`: fails with `SourceUnreachable` (its message stands for customer data);
/// - `panic`: panics;
/// - `gated`: reports 50 %, then waits at its tenant's gate; answers `{"gated": true}`, or
///   stops with `Cancelled` when asked to while it waits.
pub fn test_registry() -> Registry {
    Registry::new()
        .with(
            "ticker",
            |fields| {
                only_fields(fields, &["n", "slow"])?;
                let n = match fields.get("n").and_then(|v| v.first()) {
                    None => 10,
                    Some(v) => v
                        .as_u64()
                        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                        .ok_or_else(|| {
                            catalog_jobs::api::extract::ParamError::invalid(
                                "n",
                                "n must be a whole number",
                            )
                        })?,
                };
                let slow = bool_field(fields, "slow")?.unwrap_or(false);
                Ok(json!({ "n": n, "slow": slow }))
            },
            |input, progress| {
                let n = input.params["n"].as_u64().unwrap_or(10);
                let slow = input.params["slow"].as_bool().unwrap_or(false);
                for i in 1..=n {
                    if slow {
                        // Stands for real work between ticks, so a poller can watch it move.
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    if let Some(p) = progress {
                        p((i * 100 / n.max(1)) as u8, &format!("tick {i} of {n}"));
                    }
                }
                Ok(json!({ "ticks": n }))
            },
        )
        .with_plain("fail", |_, _| {
            Err(JobError::from(TestError::SourceUnreachable))
        })
        .with_plain("panic", |_, _| panic!("the job function fell over"))
        .with_plain("gated", |input, progress| {
            if let Some(p) = progress {
                p(50, "waiting at the gate");
            }
            if !Gate::of(&input.tenant).pass(&input.cancel) {
                return Err(JobError::cancelled());
            }
            Ok(json!({ "gated": true }))
        })
}

// ---------------------------------------------------------------------------------------
// The app

pub struct TestApp {
    pub addr: std::net::SocketAddr,
    pub client: reqwest::Client,
    pub store: Arc<dyn JobStore>,
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// GET a path of the app.
    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("the app answers")
    }

    /// GET a path of the app and read its JSON body, whatever the status.
    pub async fn get_json(&self, path: &str) -> Value {
        self.get(path).await.json().await.expect("a JSON body")
    }

    pub async fn get_job(&self, id: &str) -> Value {
        let r = self.get(&format!("/catalog/jobs/{id}")).await;
        assert_eq!(r.status(), 200, "GET job {id}");
        r.json().await.expect("a JSON snapshot")
    }

    /// Polls a job until it shows `status` (10 s at most): progress reaches the store at most
    /// one write interval after it is reported.
    pub async fn wait_for_status(&self, id: &str, status: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let job = self.get_job(id).await;
            if job["status"] == status {
                return job;
            }
            assert!(
                Instant::now() < deadline,
                "job {id} never showed {status}: {job}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Polls a job until `done` says so (10 s at most).
    pub async fn wait_for(&self, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let job = self.get_job(id).await;
            if done(&job) {
                return job;
            }
            assert!(Instant::now() < deadline, "job {id} never got there: {job}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Polls a job until it has ended or reads lost (10 s at most). A 503 (the store
    /// is coming back) is polled through.
    pub async fn poll_until_ended(&self, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = self.get(&format!("/catalog/jobs/{id}")).await;
            if r.status() == 503 {
                assert!(Instant::now() < deadline, "the store stayed unavailable");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            assert_eq!(r.status(), 200, "GET job {id}");
            let job: Value = r.json().await.expect("a JSON snapshot");
            if !matches!(
                job["status"].as_str(),
                Some("queued" | "running" | "cancelling")
            ) {
                return job;
            }
            assert!(
                Instant::now() < deadline,
                "job {id} did not end within 10 s: {job}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Starts a job and answers its id (the start must be accepted).
    pub async fn start_id(&self, kind: &str, form: &[(&str, &str)]) -> String {
        let r = self.start(kind, form).await;
        assert_eq!(r.status(), 202, "the job was accepted");
        let body: Value = r.json().await.expect("a JSON snapshot");
        body["job_id"].as_str().expect("a job id").to_owned()
    }

    pub async fn start(&self, kind: &str, form: &[(&str, &str)]) -> reqwest::Response {
        self.client
            .post(self.url(&format!("/catalog/{kind}")))
            .form(form)
            .send()
            .await
            .expect("the app answers")
    }
}

/// A config for tests: ephemeral port, the usual thresholds.
pub fn test_config() -> Config {
    let mut config = Config::defaults();
    config.bind_addr = "127.0.0.1:0".into();
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
    let addr = app.local_addr();
    tokio::spawn(app.run_until(std::future::pending()));
    TestApp {
        addr,
        client: reqwest::Client::new(),
        store,
    }
}

/// An empty catalogue in memory, with `config`'s settings.
pub fn test_catalog(config: &Config) -> Arc<Catalog> {
    Arc::new(Catalog {
        store: Arc::new(MemoryCatalog::new()),
        settings: catalog_settings(config),
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

/// The real service with the real catalogue job kinds (sync, enrich, pair), on one backend.
pub async fn spawn_catalog_app(backend: Backend, config: Config) -> TestApp {
    let catalog = Arc::new(Catalog {
        store: catalog_store(backend),
        settings: catalog_settings(&config),
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
    let addr = app.local_addr();
    let store = app.runner().store().clone();
    tokio::spawn(app.run_until(std::future::pending()));
    TestApp {
        addr,
        client: reqwest::Client::new(),
        store,
    }
}

/// A real store that counts the writes made through it, to measure what the runner costs.
pub struct CountingStore {
    pub inner: Arc<dyn JobStore>,
    pub ticks: AtomicUsize,
    pub heartbeats: AtomicUsize,
    /// Creates the store has answered (whatever the answer).
    pub creates: Arc<AtomicUsize>,
}

impl CountingStore {
    pub fn new(inner: Arc<dyn JobStore>) -> Self {
        Self {
            inner,
            ticks: AtomicUsize::new(0),
            heartbeats: AtomicUsize::new(0),
            creates: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl JobStore for CountingStore {
    fn create(&self, job: NewJob) -> BoxFuture<'_, Result<Created, StoreError>> {
        Box::pin(async move {
            let answer = self.inner.create(job).await;
            self.creates.fetch_add(1, Ordering::SeqCst);
            answer
        })
    }
    fn create_claimed<'a>(
        &'a self,
        job: NewJob,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Created, StoreError>> {
        Box::pin(async move {
            let answer = self.inner.create_claimed(job, worker).await;
            self.creates.fetch_add(1, Ordering::SeqCst);
            answer
        })
    }
    fn claim<'a>(
        &'a self,
        worker: &'a str,
        kinds: &'a [Kind],
    ) -> BoxFuture<'a, Result<Option<Claim>, StoreError>> {
        self.inner.claim(worker, kinds)
    }
    fn tick<'a>(
        &'a self,
        run: &'a RunId,
        percent: u8,
        step: &'a str,
    ) -> BoxFuture<'a, Result<Tick, StoreError>> {
        self.ticks.fetch_add(1, Ordering::Relaxed);
        self.inner.tick(run, percent, step)
    }
    fn renew<'a>(&'a self, runs: &'a [RunId]) -> BoxFuture<'a, Result<Vec<Renewal>, StoreError>> {
        self.heartbeats.fetch_add(1, Ordering::Relaxed);
        self.inner.renew(runs)
    }
    fn finish<'a>(
        &'a self,
        job: &'a NewJob,
        run: &'a RunId,
        created_at: u64,
        outcome: &'a Outcome,
        percent: u8,
    ) -> BoxFuture<'a, Result<Finish, StoreError>> {
        self.inner.finish(job, run, created_at, outcome, percent)
    }
    fn restore<'a>(
        &'a self,
        job: &'a NewJob,
        run: &'a RunId,
        created_at: u64,
        live: &'a Live,
    ) -> BoxFuture<'a, Result<Restore, StoreError>> {
        self.inner.restore(job, run, created_at, live)
    }
    fn release<'a>(&'a self, run: &'a RunId) -> BoxFuture<'a, Result<Release, StoreError>> {
        self.inner.release(run)
    }
    fn recover(&self) -> BoxFuture<'_, Result<Vec<Recovered>, StoreError>> {
        self.inner.recover()
    }
    fn cancel<'a>(
        &'a self,
        id: &'a JobId,
        by: &'a str,
    ) -> BoxFuture<'a, Result<Cancel, StoreError>> {
        self.inner.cancel(id, by)
    }
    fn purge<'a>(
        &'a self,
        tenant: &'a TenantId,
        kinds: &'a [Kind],
    ) -> BoxFuture<'a, Result<Purge, StoreError>> {
        self.inner.purge(tenant, kinds)
    }
    fn get<'a>(&'a self, id: &'a JobId) -> BoxFuture<'a, Result<Option<Snapshot>, StoreError>> {
        self.inner.get(id)
    }
    fn recent<'a>(
        &'a self,
        tenant: &'a TenantId,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Snapshot>, StoreError>> {
        self.inner.recent(tenant, limit)
    }
    fn active(&self) -> BoxFuture<'_, Result<Vec<Snapshot>, StoreError>> {
        self.inner.active()
    }
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Event> {
        self.inner.subscribe()
    }
    fn timeline<'a>(
        &'a self,
        id: &'a JobId,
        after: Option<EventId>,
    ) -> BoxFuture<'a, Result<Vec<TimelineEvent>, StoreError>> {
        self.inner.timeline(id, after)
    }
    fn watch_tenant<'a>(&'a self, tenant: &'a TenantId) -> BoxFuture<'a, TenantWatch> {
        self.inner.watch_tenant(tenant)
    }
    fn queued_by_kind(&self) -> BoxFuture<'_, Result<Vec<(Kind, u64)>, StoreError>> {
        self.inner.queued_by_kind()
    }
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        self.inner.ping()
    }
    fn is_durable(&self) -> bool {
        self.inner.is_durable()
    }
    fn settings(&self) -> &StoreSettings {
        self.inner.settings()
    }

    fn while_held(&self, run: &RunId, write: &mut dyn FnMut()) -> bool {
        self.inner.while_held(run, write)
    }

    fn job_key(&self, id: &JobId) -> Option<String> {
        self.inner.job_key(id)
    }
}

/// Runs a test body once per backend: `both_stores!(name)` makes `name::memory` and
/// `name::redis` from `async fn name(backend: Backend)`.
#[macro_export]
macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                super::$name($crate::helpers::Backend::Memory).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                super::$name($crate::helpers::Backend::Redis).await
            }
        }
    )*};
}

// ---------------------------------------------------------------------------------------
// Server-Sent Events

/// One SSE frame: its `id:`, `event:` and `data:` lines (comment-only frames are skipped).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SseFrame {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

impl SseFrame {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).expect("an event's data is JSON")
    }
}

/// Reads SSE frames off a response body as they arrive.
pub struct SseReader {
    body: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = reqwest::Result<axum::body::Bytes>> + Send>,
    >,
    buffer: String,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> Self {
        assert_eq!(response.status(), 200, "a stream answers 200");
        let media = response.headers()["content-type"].to_str().unwrap();
        assert!(media.starts_with("text/event-stream"), "{media}");
        Self {
            body: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }

    /// The next frame, or `None` when the server closed the stream (20 s at most).
    pub async fn next(&mut self) -> Option<SseFrame> {
        use futures_util::StreamExt;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let raw: String = self.buffer.drain(..end + 2).collect();
                let mut frame = SseFrame::default();
                let mut data = Vec::new();
                for line in raw.lines() {
                    let (name, value) = line.split_once(':').unwrap_or((line, ""));
                    let value = value.strip_prefix(' ').unwrap_or(value);
                    match name {
                        "id" => frame.id = Some(value.to_owned()),
                        "event" => frame.event = Some(value.to_owned()),
                        "data" => data.push(value),
                        _ => {} // a comment (keep-alive), or a field this parser ignores
                    }
                }
                frame.data = data.join("\n");
                if frame.id.is_some() || frame.event.is_some() || !frame.data.is_empty() {
                    return Some(frame);
                }
            }
            let chunk = tokio::time::timeout(Duration::from_secs(20), self.body.next())
                .await
                .expect("the stream sent something within 20 s");
            match chunk {
                Some(Ok(bytes)) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                Some(Err(e)) => panic!("the stream broke: {e}"),
                None => return None,
            }
        }
    }
}

/// Waits until the wall clock is well clear of the next minute, so that the requests of a
/// short test fall in one window of the per-minute rate limit (fixed clock minutes).
pub async fn clear_of_a_minute_edge() {
    const MINUTE_MS: u128 = 60_000;
    /// Longer than any rate-limit test takes from its first create to its last check.
    const MARGIN_MS: u128 = 10_000;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_millis();
    let left = MINUTE_MS - now % MINUTE_MS;
    if left < MARGIN_MS {
        tokio::time::sleep(Duration::from_millis((left + 100) as u64)).await;
    }
}
