//! The one test harness every integration test uses: real processes and real HTTP.
//! `redis_server` starts `redis-server` (shared once per binary, or one per test, or a
//! sentinel set); `redis_cluster` a loopback Redis Cluster, once per binary; `app` runs the
//! app in this process on port 0; `catalog` makes catalogue stores and products; `pairing` pairs them and checks an
//! incremental pair against a full one;
//! `service` runs the built binary; `feeds` serves feeds the test holds; `kinds` are the test job kinds with `Gate`;
//! `client` is the API both apps answer, `metrics` reads `/metrics`, `cli` the binary's client subcommands; `tokens` says who may call it;
//! `replicas` two replicas of the binary on one Redis, for the overview; `webdriver` a headless
//! Chromium for the admin page.
//! Tests isolate themselves by tenant and key prefix, never by FLUSHDB.

mod app;
mod catalog;
mod cli;
mod client;
mod feeds;
mod kinds;
mod metrics;
pub mod pairing;
mod redis_cluster;
mod redis_server;
mod replicas;
mod service;
pub mod source;
mod sse;
mod store;
mod tokens;
pub mod webdriver;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use catalog_jobs::jobs::{JobId, TenantId};

pub use app::*;
pub use catalog::*;
pub use cli::*;
pub use client::*;
pub use feeds::*;
pub use kinds::*;
pub use metrics::*;
pub use redis_cluster::*;
pub use redis_server::*;
pub use replicas::*;
pub use service::*;
pub use sse::*;
pub use store::*;
pub use tokens::*;

/// Which job store a test runs against: the embedded one or the shared `redis-server`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Memory,
    Redis,
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

/// The string `field` of every element of the JSON array `list` (a listing's ids, keys, …).
pub fn strings_of<'a>(list: &'a serde_json::Value, field: &str) -> Vec<&'a str> {
    let elements = list.as_array().expect("a JSON array");
    let string = |e: &'a serde_json::Value| e[field].as_str().expect("a string field");
    elements.iter().map(string).collect()
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

/// A tenant no other test uses.
pub fn tenant() -> TenantId {
    TenantId::parse(&unique("t")).expect("unique names are valid tenants")
}

/// A directory of the test's own, in this test binary's scratch directory.
pub fn temp_dir(prefix: &str) -> std::path::PathBuf {
    scratch_dir(&unique(prefix))
}

/// The directory `name` in this test binary's scratch directory, created if need be.
pub fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir = scratch_root().join(name);
    std::fs::create_dir_all(&dir).expect("the temp dir is writable");
    dir
}

/// The directory under the system's temp dir that holds every directory this test binary
/// makes, removed once the binary exits, however it exits: a watchdog shell waits on a pipe
/// that closes with the binary, then removes it. (The shared Redis and cluster live in
/// statics, which are never dropped, and many tests hand their feeds directory on by value.)
fn scratch_root() -> &'static std::path::Path {
    /// How long the watchdog waits after the binary exits, so that the servers' own watchdogs
    /// have killed them before their directories go.
    const SERVERS_GONE: &str = "1";
    static ROOT: std::sync::OnceLock<(std::path::PathBuf, std::process::Child)> =
        std::sync::OnceLock::new();
    let (root, _watchdog) = ROOT.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("catalog-jobs-tests-{}", std::process::id()));
        std::fs::create_dir_all(&root).expect("the temp dir is writable");
        let watchdog = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("read _; sleep {SERVERS_GONE}; rm -rf -- \"$0\""))
            .arg(&root)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("sh can be spawned");
        (root, watchdog)
    });
    root
}

/// Runs `command` to its end and answers its output, which must say it succeeded (else the
/// failure names `what` and shows what it printed).
pub fn run_to_success(command: &mut std::process::Command, what: &str) -> std::process::Output {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{what} runs: {e}"));
    let printed = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        printed(&out.stdout),
        printed(&out.stderr)
    );
    out
}

/// A loopback address nobody listens on, ever: a source there cannot be reached. Port 1
/// (tcpmux) is below the range `free_port` hands out from; a port picked with `free_port`
/// and let go may be bound again by another test's server while the suite runs (it binds
/// hundreds), and a source there would answer.
pub const NOBODY_LISTENS: &str = "127.0.0.1:1";

/// A loopback port nobody listens on now (a server started later may take it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Tries `attempt` again, 50 ms apart, until it succeeds, and answers what it found; fails
/// the test with the last refusal if `patience` runs out first. For what no signal announces.
pub async fn eventually<T>(
    patience: Duration,
    mut attempt: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let deadline = std::time::Instant::now() + patience;
    loop {
        match attempt().await {
            Ok(found) => return found,
            Err(not_yet) => assert!(
                std::time::Instant::now() < deadline,
                "not within {patience:?}: {not_yet}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
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
