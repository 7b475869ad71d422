//! Configuration: one struct, read from flags with environment fallbacks, checked at start-up.
//!
//! Durations are given in seconds and may be fractional (`0.2`), so tests can shrink them.

pub mod env;
pub mod origins;
mod redis;
pub mod tokens;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::catalog::currency::{is_currency, CURRENCY_RULE};
use crate::catalog::source::AllowedHost;
use crate::telemetry::LogFormat;
use origins::Origin;

/// A start request carries a few fields: 64 KiB is generous for them and small enough that
/// no client can make the service buffer much before it is refused.
pub const DEFAULT_START_BODY_BYTES: usize = 64 * 1024;

/// Where the service listens when neither `BIND_ADDR` nor `PORT` is given: this host only.
pub const DEFAULT_BIND_ADDR: &str = "127.0.0.1:8001";

/// The most a count of things held at once (jobs, imports, connections, streams) may be: far
/// above what one process can hold, far below what its semaphores can count (2^61).
pub const MAX_HELD_AT_ONCE: u64 = 1 << 20;

/// The shortest `HEARTBEAT_SECONDS` accepted: a lease renewed more often would load the
/// store for nothing (the default is a tenth of `STALE_AFTER_SECONDS`, held to this too).
const MIN_HEARTBEAT: Duration = Duration::from_millis(10);

/// The shortest `REQUEST_TIMEOUT_SECONDS` and `IDLE_TIMEOUT_SECONDS`: a request's head may
/// come in several packets over a real network, and a shorter timer closes the connection
/// between them with no answer.
const MIN_CONNECTION_TIMEOUT: Duration = Duration::from_millis(100);

#[derive(Clone, Debug, Parser)]
#[command(
    name = "catalog-jobs",
    version,
    about = "Runs a product catalogue's long jobs (sync, enrich, pair) per tenant, with honest progress."
)]
pub struct Config {
    /// Address to listen on (port 0 picks a free one). Unset: `0.0.0.0:$PORT` when `PORT`
    /// is set, else 127.0.0.1:8001.
    #[arg(long, env = "BIND_ADDR")]
    pub bind_addr: Option<String>,

    /// The port a container platform assigns; listened on, on every interface, when
    /// `BIND_ADDR` is not given (`BIND_ADDR` wins).
    #[arg(long, env = "PORT")]
    pub port: Option<u16>,

    /// Redis URL (redis://host:6379/0, or unix:///path/redis.sock for a Redis on this host).
    /// Unset: the embedded in-memory store, not durable.
    #[arg(long, env = "REDIS_URL")]
    pub redis_url: Option<String>,

    // --- Redis high availability (Sentinel): keep these together ---
    /// Comma-separated Sentinel addresses (`host:port,host:port`): discover the Redis primary
    /// through them and follow a failover. An alternative to `REDIS_URL` (not both).
    #[arg(long, env = "REDIS_SENTINELS", value_delimiter = ',')]
    pub redis_sentinels: Vec<String>,

    /// The name the sentinels monitor the primary under (`sentinel monitor <name> …`).
    #[arg(long, env = "REDIS_MASTER_NAME")]
    pub redis_master_name: Option<String>,

    /// Password of the sentinels themselves, if they require one.
    #[arg(long, env = "REDIS_SENTINEL_PASSWORD", hide_env_values = true)]
    pub redis_sentinel_password: Option<String>,

    /// Password of the Redis primary and replicas found through the sentinels, or of the
    /// nodes of a Redis Cluster (`REDIS_CLUSTER_NODES`).
    #[arg(long, env = "REDIS_PASSWORD", hide_env_values = true)]
    pub redis_password: Option<String>,

    /// Replicas that must acknowledge a create and a finish (`WAIT n 100`) before they count:
    /// with 1, a 202 means the job survives a failover. 0 (default) does not wait.
    #[arg(long, env = "REDIS_MIN_REPLICAS_ACK", default_value_t = 0)]
    pub redis_min_replicas_ack: u32,

    /// Comma-separated addresses (`host:port,host:port`) of nodes of a Redis Cluster: the
    /// rest of the cluster is found from them (list several, so one down node is not the
    /// only way in); `REDIS_PASSWORD` is the nodes' password. An alternative to `REDIS_URL`
    /// and `REDIS_SENTINELS` (only one of the three).
    #[arg(long, env = "REDIS_CLUSTER_NODES", value_delimiter = ',')]
    pub redis_cluster_nodes: Vec<String>,
    // --- end of Redis high availability ---
    /// Prefix of every job key in Redis.
    #[arg(long, env = "KEY_PREFIX", default_value = "job")]
    pub key_prefix: String,

    /// A running job whose lease (heartbeat) is this old reads as `lost`, and the recovery
    /// sweep re-queues it (see `MAX_ATTEMPTS`). A queued job is never lost.
    #[arg(long, env = "STALE_AFTER_SECONDS", default_value = "300", value_parser = seconds)]
    pub stale_after_seconds: Duration,

    /// Time to live of every job key (records, locks, listings), renewed while a job is alive.
    #[arg(long, env = "JOB_TTL_SECONDS", default_value = "86400", value_parser = seconds)]
    pub job_ttl_seconds: Duration,

    /// How often a process renews its running jobs' leases, in one call, and sweeps for lost
    /// runs (default: a tenth of the stale threshold, at most 5 s).
    #[arg(long, env = "HEARTBEAT_SECONDS", value_parser = seconds)]
    pub heartbeat_seconds: Option<Duration>,

    /// Longest a `wait=true` request is held before it answers 202 instead.
    #[arg(long, env = "WAIT_MAX_SECONDS", default_value = "300", value_parser = seconds)]
    pub wait_max_seconds: Duration,

    /// Jobs running at once in this process; the rest wait as `queued`.
    #[arg(long, env = "MAX_CONCURRENT_JOBS", default_value_t = 4)]
    pub max_concurrent_jobs: usize,

    /// Jobs the shared ready queue (all replicas) holds at once; beyond it a new job gets
    /// 503 `overloaded` and nothing is created.
    #[arg(long, env = "MAX_QUEUED_JOBS", default_value_t = 1000)]
    pub max_queued_jobs: usize,

    /// Runs a job gets: a run whose lease expired (its process died) is re-queued until
    /// then, and after the last one ends `failed` with error `Lost`. 1 keeps a lost run
    /// reading `lost` until the next create of its tenant and kind takes over.
    #[arg(long, env = "MAX_ATTEMPTS", default_value_t = 3)]
    pub max_attempts: u32,

    /// Jobs one tenant may create per minute, counted in the store (shared by replicas);
    /// beyond it a start answers 429 `rate_limited`. 0 lifts the limit.
    #[arg(long, env = "TENANT_CREATES_PER_MINUTE", default_value_t = 600)]
    pub tenant_creates_per_minute: u32,

    /// How long a job's final state is retried while the store is unreachable.
    #[arg(long, env = "FINISH_RETRY_SECONDS", default_value = "300", value_parser = seconds)]
    pub finish_retry_seconds: Duration,

    /// On SIGTERM, how long running jobs may go on before they go back to the shared queue.
    #[arg(long, env = "SHUTDOWN_GRACE_SECONDS", default_value = "30", value_parser = seconds)]
    pub shutdown_grace_seconds: Duration,

    /// Directory that `sync` sources given as paths must lie inside.
    #[arg(long, env = "FEEDS_DIR", default_value = "examples/feeds")]
    pub feeds_dir: PathBuf,

    /// Comma-separated `host` (the scheme's default port only) or `host:port` entries that
    /// `sync` may fetch http(s) feeds from (none by default).
    #[arg(long, env = "SYNC_ALLOWED_HOSTS", value_delimiter = ',')]
    pub sync_allowed_hosts: Vec<String>,

    /// Comma-separated origins (`https://admin.example.com`, `http://localhost:8080`) whose
    /// pages may call the API from a browser (none by default: no CORS headers at all).
    #[arg(long, env = "CORS_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub cors_allowed_origins: Vec<String>,

    /// How long a replica may answer polls of a finished job from memory (0 turns it off).
    /// A finished job never changes; only its deletion can go unseen for this long.
    #[arg(long, env = "FINISHED_CACHE_SECONDS", default_value = "1", value_parser = seconds)]
    pub finished_cache_seconds: Duration,

    /// Prefix of the catalogue's keys in Redis (`<prefix>:<tenant>:products`, …).
    #[arg(long, env = "CATALOG_PREFIX", default_value = "catalog")]
    pub catalog_prefix: String,

    /// Products per enrichment batch (each batch is persisted as it completes).
    #[arg(long, env = "ENRICH_BATCH_SIZE", default_value_t = 500)]
    pub enrich_batch_size: usize,

    /// Neighbours kept per product by `pair`.
    #[arg(long, env = "PAIR_TOP_K", default_value_t = 5)]
    pub pair_top_k: usize,

    /// Lowest similarity (0–1) a neighbour may have.
    #[arg(long, env = "PAIR_MIN_SCORE", default_value_t = 0.2)]
    pub pair_min_score: f64,

    /// The currency of the prices of products that name none (`currency`): an active ISO
    /// 4217 code (`EUR`, `USD`), named beside prices in the product view; unset, such prices
    /// are shown without one.
    #[arg(long, env = "PRICE_CURRENCY")]
    pub price_currency: Option<String>,

    /// The most memory one `pair` may take, in MiB: a catalogue that would need more fails
    /// with `PairTooLarge` before it is read (about 0.7 KiB a product).
    #[arg(long, env = "PAIR_MAX_MEMORY_MB", default_value_t = crate::catalog::DEFAULT_PAIR_MAX_MEMORY_MB)]
    pub pair_max_memory_mb: u64,

    /// Largest feed `sync` reads, in bytes.
    #[arg(long, env = "MAX_FEED_BYTES", default_value_t = 1 << 30)]
    pub max_feed_bytes: u64,

    /// A sync's http(s) feed that sends less than 1 KiB in this many seconds of waiting for
    /// it fails `FeedTooSlow` (a trickle would hold a worker and its tenant's kind for ever).
    #[arg(long, env = "SYNC_SLOW_FEED_SECONDS", default_value = "60", value_parser = seconds)]
    pub sync_slow_feed_seconds: Duration,

    /// Largest request body accepted, in bytes (product imports).
    #[arg(long, env = "MAX_BODY_BYTES", default_value_t = 32 * 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Product imports (`POST /catalog/products`) running at once; beyond it, 503 `overloaded`.
    /// Each holds a blocking thread and about one batch of memory.
    #[arg(long, env = "MAX_CONCURRENT_IMPORTS", default_value_t = 2)]
    pub max_concurrent_imports: usize,

    /// File of API tokens, one `<tenant_id or *> <name> sha256:<hex>` per line. With none
    /// (and no API_TOKENS) the service runs open.
    #[arg(long, env = "API_TOKENS_FILE")]
    pub api_tokens_file: Option<PathBuf>,

    /// API tokens inline, entries separated by `;` (for compose and development).
    #[arg(long, env = "API_TOKENS", hide_env_values = true)]
    pub api_tokens: Option<String>,

    /// Largest body of a start request (`POST /catalog/{kind}`, `/catalog/pipeline`) or a bulk
    /// call (`/catalog/bulk/…`), in bytes; imports keep MAX_BODY_BYTES.
    #[arg(long, env = "MAX_START_BODY_BYTES", default_value_t = DEFAULT_START_BODY_BYTES)]
    pub max_start_body_bytes: usize,

    /// Longest a client may take to send a request's headers (beyond it, the connection is
    /// closed) or a start request's body (an import's body may pause this long between
    /// chunks; beyond it, 408 and the connection is closed).
    #[arg(long, env = "REQUEST_TIMEOUT_SECONDS", default_value = "30", value_parser = seconds)]
    pub request_timeout_seconds: Duration,

    /// An idle keep-alive connection is closed after this long.
    #[arg(long, env = "IDLE_TIMEOUT_SECONDS", default_value = "15", value_parser = seconds)]
    pub idle_timeout_seconds: Duration,

    /// Open connections at once. Beyond them a few more are kept for /healthz, /readyz and
    /// /metrics (any other request on those is 503 overloaded); the rest wait in the kernel's
    /// backlog until one closes.
    #[arg(long, env = "MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,

    /// Event streams (`GET /catalog/events`, a job's events as SSE) open at once on this
    /// instance; beyond it 503 overloaded. Below MAX_CONNECTIONS (default: half of it), so
    /// held streams always leave connections for requests.
    #[arg(long, env = "MAX_EVENT_STREAMS")]
    pub max_event_streams: Option<usize>,

    /// Event streams one tenant may hold open at once on this instance; beyond it 429
    /// too_many_streams. The admin page holds one for its tenant, and one per job it follows.
    #[arg(long, env = "MAX_EVENT_STREAMS_PER_TENANT", default_value_t = 64)]
    pub max_event_streams_per_tenant: usize,

    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "pretty")]
    pub log_format: LogFormat,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Invalid(String),
}

impl Config {
    /// Defaults, as if no flag and no environment variable were given (for tests).
    pub fn defaults() -> Self {
        Self::parse_from(["catalog-jobs"])
    }

    /// The heartbeat interval: as configured, else a tenth of the stale threshold (≤ 5 s).
    pub fn heartbeat(&self) -> Duration {
        self.heartbeat_seconds
            .unwrap_or_else(|| (self.stale_after_seconds / 10).min(Duration::from_secs(5)))
            .max(MIN_HEARTBEAT)
    }

    /// Event streams open at once: as configured, else half of `MAX_CONNECTIONS`.
    pub fn event_streams(&self) -> usize {
        self.max_event_streams.unwrap_or(self.max_connections / 2)
    }

    /// The settings that count something the service cannot work with none of (0 would refuse
    /// every start, import or feed, or run nothing), by name.
    fn counts(&self) -> [(&'static str, u64); 11] {
        [
            ("MAX_CONCURRENT_JOBS", self.max_concurrent_jobs as u64),
            ("MAX_QUEUED_JOBS", self.max_queued_jobs as u64),
            ("MAX_ATTEMPTS", u64::from(self.max_attempts)),
            ("MAX_CONCURRENT_IMPORTS", self.max_concurrent_imports as u64),
            ("MAX_CONNECTIONS", self.max_connections as u64),
            ("MAX_START_BODY_BYTES", self.max_start_body_bytes as u64),
            ("MAX_BODY_BYTES", self.max_body_bytes as u64),
            ("MAX_FEED_BYTES", self.max_feed_bytes),
            (
                "MAX_EVENT_STREAMS_PER_TENANT",
                self.max_event_streams_per_tenant as u64,
            ),
            ("ENRICH_BATCH_SIZE", self.enrich_batch_size as u64),
            ("PAIR_MAX_MEMORY_MB", self.pair_max_memory_mb),
        ]
    }

    /// The settings that count things held at once, each behind a semaphore, by name.
    fn held(&self) -> [(&'static str, u64); 5] {
        [
            ("MAX_CONCURRENT_JOBS", self.max_concurrent_jobs as u64),
            ("MAX_CONCURRENT_IMPORTS", self.max_concurrent_imports as u64),
            ("MAX_CONNECTIONS", self.max_connections as u64),
            ("MAX_EVENT_STREAMS", self.event_streams() as u64),
            (
                "MAX_EVENT_STREAMS_PER_TENANT",
                self.max_event_streams_per_tenant as u64,
            ),
        ]
    }

    /// Checks the relations between settings that clap cannot see one at a time.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_owned()));
        if self.heartbeat_seconds.is_none() && self.stale_after_seconds <= MIN_HEARTBEAT {
            return bad("STALE_AFTER_SECONDS must be above 0.01 (the shortest heartbeat), or live jobs would read as lost");
        }
        if self.heartbeat() >= self.stale_after_seconds {
            return bad("HEARTBEAT_SECONDS must be shorter than STALE_AFTER_SECONDS, or live jobs would read as lost");
        }
        if self.job_ttl_seconds < Duration::from_secs(1) {
            return bad("JOB_TTL_SECONDS must be at least 1");
        }
        if self.job_ttl_seconds <= self.heartbeat() {
            return bad("JOB_TTL_SECONDS must be longer than HEARTBEAT_SECONDS, or live jobs' keys would expire");
        }
        if let Some((name, _)) = self.counts().into_iter().find(|(_, n)| *n == 0) {
            return bad(&format!(
                "{name} must be at least 1 (with 0 the service could not work)"
            ));
        }
        if let Some((name, _)) = self.held().into_iter().find(|(_, n)| *n > MAX_HELD_AT_ONCE) {
            return bad(&format!("{name} must be at most {MAX_HELD_AT_ONCE}"));
        }
        if self.heartbeat_seconds.is_some_and(|s| s < MIN_HEARTBEAT) {
            return bad("HEARTBEAT_SECONDS must be at least 0.01 (leave it unset for the default)");
        }
        if self.event_streams() == 0 || self.event_streams() >= self.max_connections {
            return bad("MAX_EVENT_STREAMS must be at least 1 and below MAX_CONNECTIONS, so held streams leave connections for requests");
        }
        if self.request_timeout_seconds.min(self.idle_timeout_seconds) < MIN_CONNECTION_TIMEOUT {
            return bad("REQUEST_TIMEOUT_SECONDS and IDLE_TIMEOUT_SECONDS must be at least 0.1 (a request's head may come in several packets)");
        }
        if self.sync_slow_feed_seconds.is_zero() {
            return bad("SYNC_SLOW_FEED_SECONDS must be above 0");
        }
        for (name, prefix) in [
            ("KEY_PREFIX", &self.key_prefix),
            ("CATALOG_PREFIX", &self.catalog_prefix),
        ] {
            if prefix.is_empty()
                || prefix.contains(|c: char| c.is_whitespace() || c == '{' || c == '}')
            {
                return bad(&format!("{name} must be non-empty, without spaces or braces (the service puts each tenant's keys in a {{hash tag}} of its own)"));
            }
        }
        check_bind_addr(self.bind_addr.as_deref())?;
        if self.pair_top_k == 0 || self.pair_top_k > 100 {
            return bad("PAIR_TOP_K must be 1–100");
        }
        if !(0.0..=1.0).contains(&self.pair_min_score) {
            return bad("PAIR_MIN_SCORE must be between 0 and 1");
        }
        if self
            .price_currency
            .as_deref()
            .is_some_and(|c| !is_currency(c))
        {
            return bad(&format!("PRICE_CURRENCY must be {CURRENCY_RULE}"));
        }
        self.validate_redis_target()
    }

    /// Where to listen: `BIND_ADDR`, else every interface on `PORT`, else the default.
    pub fn listen_addr(&self) -> String {
        match (&self.bind_addr, self.port) {
            (Some(addr), _) => addr.clone(),
            (None, Some(port)) => format!("0.0.0.0:{port}"),
            (None, None) => DEFAULT_BIND_ADDR.to_owned(),
        }
    }

    /// The origins of `CORS_ALLOWED_ORIGINS` (empty entries ignored; none: no CORS at all),
    /// or a message naming the variable and the first entry that is not an origin.
    pub fn cors_origins(&self) -> Result<Vec<Origin>, ConfigError> {
        parse_list(&self.cors_allowed_origins, Origin::parse)
    }

    /// The entries of `SYNC_ALLOWED_HOSTS` (empty ones ignored), or a message naming the
    /// variable and the first entry that is not `host` or `host:port`.
    pub fn allowed_hosts(&self) -> Result<Vec<AllowedHost>, ConfigError> {
        parse_list(&self.sync_allowed_hosts, |entry| {
            // A URL (`http://feeds.example.com/x`) would read as a host `http` with a bad port.
            match entry.split_once("://") {
                Some((_, rest)) => Err(format!(
                    "SYNC_ALLOWED_HOSTS entry `{entry}` is a URL: give its host alone \
                     (`{}`), or `host:port`",
                    rest.split('/').next().unwrap_or(rest)
                )),
                None => AllowedHost::parse(entry),
            }
        })
    }
}

/// Refuses a `BIND_ADDR` that is not `host:port` (port 0 picks a free one) before it is
/// bound: `8001` or a blank value would otherwise stop start-up with the OS's words alone.
fn check_bind_addr(addr: Option<&str>) -> Result<(), ConfigError> {
    let Some(addr) = addr else { return Ok(()) };
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
        _ => Err(ConfigError::Invalid(format!(
            "BIND_ADDR `{addr}` is not host:port (e.g. 0.0.0.0:8001, or 127.0.0.1:0 for a free \
             port; PORT alone listens on every interface)"
        ))),
    }
}

/// Each non-empty entry of a comma-separated setting, parsed.
fn parse_list<T>(
    entries: &[String],
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, ConfigError> {
    entries
        .iter()
        .map(|e| e.trim())
        .filter(|e| !e.is_empty())
        .map(|e| parse(e).map_err(ConfigError::Invalid))
        .collect()
}

fn seconds(raw: &str) -> Result<Duration, String> {
    let secs: f64 = raw
        .trim()
        .parse()
        .map_err(|_| format!("`{raw}` is not a number of seconds"))?;
    if !secs.is_finite() || !(0.0..=10.0 * 365.0 * 86_400.0).contains(&secs) {
        return Err(format!("`{raw}` is not a sensible number of seconds"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_spec() {
        let c = Config::defaults();
        assert_eq!(c.listen_addr(), "127.0.0.1:8001");
        assert_eq!(c.stale_after_seconds, Duration::from_secs(300));
        assert_eq!(c.job_ttl_seconds, Duration::from_secs(86_400));
        assert_eq!(c.heartbeat(), Duration::from_secs(5));
        assert!(c.allowed_hosts().unwrap().is_empty());
        assert!(c.cors_origins().unwrap().is_empty());
        c.validate().unwrap();
    }

    #[test]
    fn event_streams_take_half_the_connections_by_default_and_never_all_of_them() {
        let cases: &[(&[&str], Option<usize>)] = &[
            (&["x"], Some(512)),
            (&["x", "--max-connections", "64"], Some(32)),
            (&["x", "--max-event-streams", "1000"], Some(1000)),
            (&["x", "--max-event-streams", "1024"], None),
            (&["x", "--max-event-streams", "0"], None),
            (&["x", "--max-connections", "1"], None),
            (&["x", "--max-event-streams-per-tenant", "0"], None),
        ];
        for (args, streams) in cases {
            let c = Config::parse_from(*args);
            let valid = c.validate().is_ok().then(|| c.event_streams());
            assert_eq!(valid, *streams, "{args:?}");
        }
    }

    #[test]
    fn price_currency_is_an_iso_4217_code_or_unset() {
        for (currency, valid) in [
            (None, true),
            (Some("EUR"), true),
            (Some("eur"), false),
            (Some("EURO"), false),
            (Some(""), false),
            (Some("€"), false),
            (Some("ZZZ"), false),
            (Some("GBP"), true),
        ] {
            let c = Config {
                price_currency: currency.map(str::to_owned),
                ..Config::defaults()
            };
            assert_eq!(c.validate().is_ok(), valid, "{currency:?}");
        }
    }

    #[test]
    fn fractional_seconds_and_bad_relations_are_caught() {
        let c = Config::parse_from([
            "x",
            "--stale-after-seconds",
            "0.5",
            "--heartbeat-seconds",
            "0.1",
        ]);
        assert_eq!(c.heartbeat(), Duration::from_millis(100));
        c.validate().unwrap();
        let c = Config::parse_from([
            "x",
            "--stale-after-seconds",
            "1",
            "--heartbeat-seconds",
            "2",
        ]);
        assert!(c.validate().is_err());
        let refusal = |args: &[&str]| {
            let c = Config::parse_from(std::iter::once(&"x").chain(args));
            c.validate()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        for timeout in ["--request-timeout-seconds", "--idle-timeout-seconds"] {
            assert!(refusal(&[timeout, "0.0001"]).contains("at least 0.1"));
            assert_eq!(refusal(&[timeout, "0.1"]), "", "{timeout} 0.1 is enough");
        }
        let e = refusal(&["--stale-after-seconds", "0"]);
        assert!(e.starts_with("STALE_AFTER_SECONDS must be above"), "{e}");
        assert!(Config::try_parse_from(["x", "--wait-max-seconds", "soon"]).is_err());
        assert!(Config::try_parse_from(["x", "--wait-max-seconds", "-1"]).is_err());
    }

    #[test]
    fn bind_addr_wins_over_port_which_wins_over_the_default() {
        let cases: &[(&[&str], &str)] = &[
            (&[], "127.0.0.1:8001"),
            (&["--port", "8080"], "0.0.0.0:8080"),
            (
                &["--port", "8080", "--bind-addr", "127.0.0.1:9"],
                "127.0.0.1:9",
            ),
        ];
        for (args, expected) in cases {
            let c = Config::parse_from(std::iter::once(&"x").chain(args.iter()));
            assert_eq!(c.listen_addr(), *expected, "{args:?}");
        }
    }

    #[test]
    fn allow_list_entries_are_hosts_with_an_optional_port() {
        for good in [
            "feeds.example.com",
            "127.0.0.1:8080",
            "[::1]",
            "[::1]:443",
            " Feeds.Example.COM ",
        ] {
            let c = Config::parse_from(["x", "--sync-allowed-hosts", good]);
            assert_eq!(c.allowed_hosts().map(|h| h.len()), Ok(1), "{good}");
        }
        for bad in [
            "http://feeds.example.com",
            "feeds.example.com/x",
            "h:0",
            "h:99999",
            "h:",
            "[zz]",
            "a b",
        ] {
            let c = Config::parse_from(["x", "--sync-allowed-hosts", bad]);
            let e = c
                .allowed_hosts()
                .err()
                .unwrap_or_else(|| panic!("{bad} was accepted"));
            assert!(e.to_string().contains("SYNC_ALLOWED_HOSTS"), "{e}");
        }
        let c = Config::parse_from(["x", "--sync-allowed-hosts", "https://feeds.example.com/x"]);
        let e = c
            .allowed_hosts()
            .expect_err("a URL is not a host")
            .to_string();
        assert!(
            e.contains("is a URL: give its host alone (`feeds.example.com`)"),
            "{e}"
        );
    }
}
