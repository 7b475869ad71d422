//! The built `catalog-jobs` binary as a subprocess, its log kept in a file: started on the
//! embedded store, on a Redis, or through sentinels; signalled, killed and restarted by pid
//! by tests that must see what a real process does and prints.

use std::ops::Deref;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{
    dead_redis_url, free_port, http_client, Api, HaRedis, HeldFeeds, RedisServer, NOBODY_LISTENS,
};

/// Longest the binary may take to answer its first `/healthz`, or to exit once told to.
const PROCESS_PATIENCE: Duration = Duration::from_secs(15);

/// A running `catalog-jobs serve`, killed when dropped. Its API is reached through it
/// (`svc.get_json(…)`, `svc.poll(…)`).
pub struct Service {
    child: Option<Child>,
    pub port: u16,
    log: PathBuf,
    api: Api,
}

/// What a service is started with: its store, the feeds it may read, more settings. A clone
/// starts another replica with the same settings.
#[derive(Clone)]
#[must_use = "a launch does nothing until `.start().await`"]
pub struct Launch {
    env: Vec<(String, String)>,
    /// Its standard error is a pipe whose reader is gone (a log shipper that died), not the
    /// log file.
    log_reader_gone: bool,
}

impl Service {
    /// On the embedded store.
    pub fn embedded() -> Launch {
        Launch {
            env: Vec::new(),
            log_reader_gone: false,
        }
    }

    /// On this test's own `redis-server`, with a short lease (see `on_redis`).
    pub fn on(redis: &RedisServer) -> Launch {
        Self::on_redis(&redis.url())
    }

    /// On the Redis at `url`, with a short lease (stale after 1.5 s, a heartbeat every
    /// 0.2 s), so a job whose process died reads lost within seconds.
    pub fn on_redis(url: &str) -> Launch {
        Launch::losing_jobs_fast().env("REDIS_URL", url)
    }

    /// Through the sentinels of `ha`, with the short lease.
    pub fn through_sentinels(ha: &HaRedis) -> Launch {
        Self::through_sentinels_at(&ha.sentinels_env())
    }

    /// Through the sentinels listed in `sentinels` (`host:port,…`), with the short lease.
    pub fn through_sentinels_at(sentinels: &str) -> Launch {
        Launch::losing_jobs_fast()
            .env("REDIS_SENTINELS", sentinels)
            .env("REDIS_MASTER_NAME", super::MASTER_NAME)
    }

    /// On a Redis URL where nobody ever answers: the service starts, its store is down.
    pub fn on_unreachable_redis() -> Launch {
        Self::embedded().env("REDIS_URL", dead_redis_url())
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Sends the process a signal (`TERM`, `KILL`, `STOP`, `CONT`, …). A `STOP` returns once
    /// every thread of the process is stopped: `kill` returns when the signal is sent, and on a
    /// loaded machine a thread already running goes on until the group stop reaches it (a CI
    /// run saw the paused replica read a cancel sent after its `kill -STOP`).
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill -{sig}");
        if sig == "STOP" {
            self.wait_until_stopped();
        }
    }

    /// Waits until every thread of the process reads stopped (`T`) in `/proc`.
    fn wait_until_stopped(&self) {
        let deadline = Instant::now() + PROCESS_PATIENCE;
        let tasks = PathBuf::from(format!("/proc/{}/task", self.pid()));
        while !all_stopped(&tasks) {
            assert!(Instant::now() < deadline, "the service never stopped");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits for the process to exit, answering its exit code.
    pub fn wait_exit(&mut self) -> Option<i32> {
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + PROCESS_PATIENCE;
        loop {
            if let Some(status) = child.try_wait().expect("the child can be waited on") {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("the service did not exit");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the process at once, as a crash would.
    pub fn kill9(&mut self) {
        self.signal("KILL");
        let _ = self.wait_exit();
    }

    /// Stops the process with SIGTERM and waits for it (its log is then complete).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + PROCESS_PATIENCE;
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Everything the process has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).expect("the log file lives as long as the service")
    }

    /// Waits until the log says `needle` (`within` at most), answering the log.
    pub async fn wait_for_log(&self, needle: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let log = self.log();
            if log.contains(needle) {
                return log;
            }
            assert!(
                Instant::now() < deadline,
                "the log never said {needle:?}:\n{log}"
            );
            // No signal crosses from the process's log file to the test but the file itself.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Deref for Service {
    type Target = Api;

    fn deref(&self) -> &Api {
        &self.api
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

impl Launch {
    fn losing_jobs_fast() -> Self {
        Service::embedded()
            .env("STALE_AFTER_SECONDS", "1.5")
            .env("HEARTBEAT_SECONDS", "0.2")
            .env("FINISH_RETRY_SECONDS", "20")
    }

    /// One more setting; a later one of the same name wins.
    pub fn env(mut self, name: &str, value: impl Into<String>) -> Self {
        self.env.push((name.to_owned(), value.into()));
        self
    }

    /// More settings, in order.
    pub fn envs<V: AsRef<str>>(self, env: &[(&str, V)]) -> Self {
        env.iter().fold(self, |launch, (name, value)| {
            launch.env(name, value.as_ref())
        })
    }

    /// Logs into a pipe nobody reads any more, as when the log shipper reading it has died:
    /// every line it writes fails (`EPIPE`). Its log file stays empty.
    pub fn with_log_reader_gone(mut self) -> Self {
        self.log_reader_gone = true;
        self
    }

    /// Lets its syncs read `feeds` (and nothing else over HTTP).
    pub fn reading(self, feeds: &HeldFeeds) -> Self {
        self.env("SYNC_ALLOWED_HOSTS", feeds.allowed())
    }

    /// Starts the binary on a free port and waits until it answers `/healthz`.
    pub async fn start(self) -> Service {
        let port = free_port();
        let log = std::env::temp_dir().join(format!(
            "catalog-jobs-svc-{}-{port}.log",
            std::process::id()
        ));
        let out = std::fs::File::create(&log).expect("the temp dir is writable");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_catalog-jobs"));
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("BIND_ADDR", format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "info")
            .env("FEEDS_DIR", feeds_dir())
            .env("SYNC_ALLOWED_HOSTS", "127.0.0.1")
            .envs(self.env)
            .stdout(Stdio::null());
        if self.log_reader_gone {
            cmd.stderr(Stdio::piped());
        } else {
            cmd.stderr(out);
        }
        let mut child = cmd.spawn().expect("the catalog-jobs binary starts");
        // The pipe's only reader goes at once: the service's first log line meets EPIPE.
        drop(child.stderr.take());
        let client = http_client(Some(Duration::from_secs(20)));
        let api = Api::new(
            format!("http://127.0.0.1:{port}"),
            client,
            Duration::from_secs(20),
        );
        let svc = Service {
            child: Some(child),
            port,
            log,
            api,
        };
        let deadline = Instant::now() + PROCESS_PATIENCE;
        while svc.client.get(svc.url("/healthz")).send().await.is_err() {
            assert!(Instant::now() < deadline, "the service came up");
            // No signal exists for "the port is bound" in another process: poll it.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        svc
    }
}

/// Held feeds, and the built binary on the embedded store, allowed to read them.
pub async fn service_reading_held_feeds() -> (HeldFeeds, Service) {
    let feeds = HeldFeeds::start().await;
    let svc = Service::embedded().reading(&feeds).start().await;
    (feeds, svc)
}

/// The built binary on the embedded store, allowed to sync from a loopback port nobody
/// listens on, and a feed there: a sync of it fails `SourceUnreachable`.
pub async fn service_with_an_unreachable_feed() -> (Service, String) {
    let svc = Service::embedded()
        .env("SYNC_ALLOWED_HOSTS", NOBODY_LISTENS)
        .start()
        .await;
    (svc, format!("http://{NOBODY_LISTENS}/feed.jsonl"))
}

/// The demo feeds of the repository, whatever the test's working directory.
pub fn feeds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/feeds")
}

/// Whether every thread under `/proc/<pid>/task` is stopped: the state after the command name
/// in its `stat` is `T` (or `t`, stopped under a tracer).
fn all_stopped(tasks: &std::path::Path) -> bool {
    let Ok(threads) = std::fs::read_dir(tasks) else {
        return false;
    };
    threads.flatten().all(|thread| {
        let stat = std::fs::read_to_string(thread.path().join("stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        matches!(state, Some('T' | 't'))
    })
}
