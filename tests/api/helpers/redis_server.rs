//! Real `redis-server` processes this test binary owns: the one every test shares (or
//! `REDIS_URL`), one of a test's own to stop and restart, and a primary with a replica and
//! three sentinels. Each runs under a watchdog, so none outlives the test binary.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{free_port, scratch_dir};

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
        Self::start_on(free_port(), appendonly, extra)
    }

    /// Starts a server on `port` with more arguments.
    pub fn start_on(port: u16, appendonly: bool, extra: &str) -> Self {
        let dir = scratch_dir(&format!("redis-{port}"));
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

    /// A connection of the test's own, to read or change what the server holds.
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        redis_connection(&self.url()).await
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
pub(super) fn spawn_watched(command: &str) -> (u32, Child) {
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
        let dir = scratch_dir(&format!("sentinel-{port}"));
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

/// Longest a `redis-server` may take to answer PING: a restart first loads its append-only
/// file (answering LOADING meanwhile), which for a soak's minutes of writes on a loaded
/// machine takes more than a fresh start's moment.
const REDIS_PATIENCE: Duration = Duration::from_secs(60);

fn wait_for_redis(url: &str) {
    let client = redis::Client::open(url).expect("a valid redis url");
    let deadline = Instant::now() + REDIS_PATIENCE;
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

/// A connection of the test's own to the Redis at `url`.
/// The keys that match `pattern` on the Redis behind `conn`, sorted (`KEYS` walks every key:
/// for tests only).
pub async fn keys_matching(
    conn: &mut redis::aio::MultiplexedConnection,
    pattern: &str,
) -> Vec<String> {
    let keys = redis::cmd("KEYS").arg(pattern).query_async(conn).await;
    let mut keys: Vec<String> = keys.expect("Redis answers KEYS");
    keys.sort();
    keys
}

/// What Redis says `key` takes in memory (`MEMORY USAGE`), in bytes.
pub async fn memory_usage(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> u64 {
    let mut usage = redis::cmd("MEMORY");
    usage.arg("USAGE").arg(key);
    usage
        .query_async(conn)
        .await
        .expect("Redis answers MEMORY USAGE")
}

/// Sets one of Redis's settings (`CONFIG SET`).
pub async fn config_set(conn: &mut redis::aio::MultiplexedConnection, name: &str, value: &str) {
    let mut set = redis::cmd("CONFIG");
    set.arg("SET").arg(name).arg(value);
    let _: () = set
        .query_async(conn)
        .await
        .expect("Redis answers CONFIG SET");
}

/// Zeroes Redis's command counters (`CONFIG RESETSTAT`), so `INFO commandstats` counts what
/// follows alone.
pub async fn reset_stats(conn: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await
        .expect("Redis answers CONFIG RESETSTAT");
}

pub async fn redis_connection(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("a valid redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("the server answers")
}

/// A connection of the test's own to the Redis this test binary shares.
pub async fn shared_redis() -> redis::aio::MultiplexedConnection {
    redis_connection(&shared_redis_url()).await
}

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

/// Commands Redis has executed, by name, from `INFO commandstats`.
pub async fn command_counts(conn: &mut redis::aio::MultiplexedConnection) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}
