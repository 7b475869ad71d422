//! The soak's replicas and the faults struck at them: replica 0 is never touched (its memory
//! and open files are read after each round); replicas 1 and 2 are killed, paused and stopped
//! and come back as new processes; Redis is killed and restarted with its append-only file.
//! No replica is given an allocator setting: each runs with the mimalloc options the binary
//! sets itself at start, so the figures are the service's as shipped, in or out of a container.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::fds::{open_files, OpenFiles};
use super::load::{lock, REQUEST_TIMEOUT};
use super::MAX_ATTEMPTS;
use crate::helpers::{RedisServer, Service};

/// The lease the replicas run with (`Service::on`'s): a paused replica is held past it.
const STALE: Duration = Duration::from_millis(1500);
/// How many replicas run: 0 untouched, 1 and 2 struck.
const REPLICAS: usize = 3;
/// The replica never struck, whose memory and open files are read.
pub const UNTOUCHED: usize = 0;

/// How long the load's idle connections stay open: shorter than the idle pause before the
/// untouched replica's open files are counted, so the count is the service's own, not the
/// test's pool of kept-alive sockets.
const POOL_IDLE: Duration = Duration::from_secs(1);
/// How long Redis stays down in a restart.
const REDIS_DOWN: Duration = Duration::from_secs(1);

/// One fault a round strikes, in this order.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// `kill -9` of replica 1, a new process a second later.
    Kill,
    /// SIGSTOP of replica 2 for three leases (its jobs are recovered elsewhere), then SIGCONT.
    Pause,
    /// SIGTERM of replica 1 (its grace, then its runs given back), a new process after.
    Term,
    /// Redis killed, down for a second, restarted with its append-only file.
    RedisRestart,
}

impl Fault {
    pub const ALL: [Fault; 4] = [Fault::Kill, Fault::Pause, Fault::Term, Fault::RedisRestart];

    pub async fn strike(self, replicas: &Replicas, redis: &mut RedisServer) {
        match self {
            Fault::Kill => {
                let mut gone = replicas.take(1);
                tokio::task::block_in_place(|| gone.kill9());
                tokio::time::sleep(Duration::from_secs(1)).await;
                replicas.replace(1).await;
            }
            Fault::Pause => {
                let paused = replicas.take(2);
                paused.signal("STOP");
                tokio::time::sleep(STALE * 3).await;
                paused.signal("CONT");
                replicas.put(2, paused);
            }
            Fault::Term => {
                let mut gone = replicas.take(1);
                tokio::task::block_in_place(|| gone.stop());
                replicas.replace(1).await;
            }
            Fault::RedisRestart => {
                tokio::task::block_in_place(|| redis.stop());
                tokio::time::sleep(REDIS_DOWN).await;
                tokio::task::block_in_place(|| redis.restart(true));
            }
        }
    }
}

/// The replicas the load reaches: a slot each, empty while its process is being replaced.
#[derive(Clone)]
pub struct Replicas {
    slots: Arc<Mutex<Vec<Option<Service>>>>,
    redis_url: String,
    redis_port: u16,
    feeds: String,
    client: reqwest::Client,
    streams: reqwest::Client,
}

impl Replicas {
    /// The three replicas.
    pub async fn start(redis: &RedisServer, feeds: &str) -> Replicas {
        let replicas = Replicas {
            slots: Arc::new(Mutex::new((0..REPLICAS).map(|_| None).collect())),
            redis_url: redis.url(),
            redis_port: redis.port,
            feeds: feeds.to_owned(),
            client: reqwest::Client::builder()
                .timeout(REQUEST_TIMEOUT)
                .pool_idle_timeout(POOL_IDLE)
                .build()
                .expect("a client builds"),
            streams: reqwest::Client::builder()
                .connect_timeout(REQUEST_TIMEOUT)
                .build()
                .expect("a client builds"),
        };
        for slot in 0..REPLICAS {
            replicas.replace(slot).await;
        }
        replicas
    }

    /// Starts a new process in `slot`.
    async fn replace(&self, slot: usize) {
        let service = Service::on_redis(&self.redis_url)
            .env("SYNC_ALLOWED_HOSTS", self.feeds.as_str())
            .env("MAX_ATTEMPTS", MAX_ATTEMPTS.to_string())
            .env("TENANT_CREATES_PER_MINUTE", "100000")
            .env("SHUTDOWN_GRACE_SECONDS", "2")
            .env("RUST_LOG", "warn")
            .start()
            .await;
        self.put(slot, service);
    }

    fn take(&self, slot: usize) -> Service {
        lock(&self.slots)[slot]
            .take()
            .expect("the slot holds a replica")
    }

    fn put(&self, slot: usize, service: Service) {
        lock(&self.slots)[slot] = Some(service);
    }

    /// The base URL of a replica, chosen by `n`, among those in place.
    pub fn pick(&self, n: usize) -> Option<String> {
        let slots = lock(&self.slots);
        let live: Vec<String> = slots.iter().flatten().map(|s| s.base()).collect();
        (!live.is_empty()).then(|| live[n % live.len()].clone())
    }

    /// The client of short requests (a paused replica answers nothing).
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// The client of event streams: no overall timeout, they stay open.
    pub fn stream_client(&self) -> &reqwest::Client {
        &self.streams
    }

    /// Every log line of the replicas in place (the replaced ones' went with them).
    pub fn logs(&self) -> String {
        lock(&self.slots)
            .iter()
            .flatten()
            .map(|s| s.log())
            .collect()
    }

    /// An untouched replica's resident memory and open files; `settled`: no job was at work.
    pub fn memory(&self, slot: usize, settled: bool) -> Memory {
        let (pid, port) = lock(&self.slots)[slot]
            .as_ref()
            .map(|s| (s.pid(), s.port))
            .expect("an untouched replica stays");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0)
        };
        Memory {
            rss_kb: field("VmRSS:"),
            threads: field("Threads:"),
            files: open_files(pid, port, self.redis_port),
            settled,
        }
    }
}

/// A process's resident memory and open files at one moment.
#[derive(Clone, Copy, Debug)]
pub struct Memory {
    pub rss_kb: u64,
    /// Its threads (tokio's blocking pool grows with the jobs and shrinks when idle).
    pub threads: u64,
    pub files: OpenFiles,
    /// Whether every job had ended (an idle figure) when it was read.
    pub settled: bool,
}

impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RSS {:.1} MB, {} threads, {}{}",
            self.rss_kb as f64 / 1024.0,
            self.threads,
            self.files,
            if self.settled {
                ""
            } else {
                " (jobs still at work)"
            }
        )
    }
}
