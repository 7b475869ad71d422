//! Start-up settings through the real binary: a near miss of a setting's name and a Redis
//! URL without a scheme stop start-up saying what was meant; `PORT` is listened on when
//! `BIND_ADDR` is not given, and `BIND_ADDR` wins when both are.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStderr, Command, Stdio};

use serde_json::Value;

use crate::helpers::free_port;

/// The binary with only `env` in its environment (logs as JSON lines on stderr).
fn binary(env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_catalog-jobs"));
    command
        .env_clear()
        .env("LOG_FORMAT", "json")
        .envs(env.iter().copied());
    command
}

/// An environment, and the words start-up's refusal of it must say.
type Mistake = (
    &'static [(&'static str, &'static str)],
    &'static [&'static str],
);

/// Each mistake start-up must refuse, and the words its refusal must say.
const MISTAKES: &[Mistake] = &[
    (
        &[("FEED_DIR", "/srv/feeds")],
        &["FEED_DIR", "did you mean FEEDS_DIR"],
    ),
    (
        &[("REDIS_URI", "redis://127.0.0.1:1/")],
        &["REDIS_URI", "did you mean REDIS_URL"],
    ),
    (
        &[("MAX_CONCURENT_JOBS", "8")],
        &["did you mean MAX_CONCURRENT_JOBS"],
    ),
    (
        &[("REDIS_URL", "localhost:6379")],
        &[
            "did you mean redis://localhost:6379?",
            "A Redis URL looks like redis://host:6379/0",
        ],
    ),
    // Blank is not "unset": it must not leave the service on the embedded store.
    (
        &[("REDIS_CLUSTER_NODES", "")],
        &["REDIS_CLUSTER_NODES is set but names no address"],
    ),
    // A count of 0 would refuse every start or run nothing.
    (
        &[("MAX_QUEUED_JOBS", "0")],
        &["MAX_QUEUED_JOBS must be at least 1"],
    ),
    (
        &[("MAX_FEED_BYTES", "0")],
        &["MAX_FEED_BYTES must be at least 1"],
    ),
    (
        &[("HEARTBEAT_SECONDS", "0")],
        &["HEARTBEAT_SECONDS must be at least 0.01"],
    ),
    // 0 would fail every feed that pauses at all (`FeedTooSlow`).
    (
        &[("SYNC_SLOW_FEED_SECONDS", "0")],
        &["SYNC_SLOW_FEED_SECONDS must be above 0"],
    ),
    // Counts a semaphore holds are bounded (a huge one panicked the runtime at start).
    (
        &[("MAX_CONCURRENT_JOBS", "2305843009213693952")],
        &["MAX_CONCURRENT_JOBS must be at most 1048576"],
    ),
    (
        &[("MAX_CONNECTIONS", "4000000")],
        &["MAX_CONNECTIONS must be at most 1048576"],
    ),
    // Below 10 ms it was silently held to 10 ms.
    (
        &[("HEARTBEAT_SECONDS", "0.005")],
        &["HEARTBEAT_SECONDS must be at least 0.01"],
    ),
    (
        &[("BIND_ADDR", "8001")],
        &["BIND_ADDR `8001` is not host:port"],
    ),
    (
        &[("BIND_ADDR", ":8001")],
        &["BIND_ADDR `:8001` is not host:port"],
    ),
    (
        &[("REDIS_URL", "redis://127.0.0.1:6379/abc")],
        &[
            "REDIS_URL `redis://127.0.0.1:6379/abc` does not parse",
            "Invalid database number",
        ],
    ),
    // A password is never repeated in the refusal.
    (
        &[("REDIS_URL", "redis://:s3cret@127.0.0.1:6379/abc")],
        &["REDIS_URL does not parse", "Invalid database number"],
    ),
    // Braces would change the Redis Cluster hash tag every key is placed by.
    (
        &[("KEY_PREFIX", "jobs{eu}")],
        &["KEY_PREFIX must be non-empty, without spaces or braces"],
    ),
    (
        &[("CATALOG_PREFIX", "}catalog")],
        &["CATALOG_PREFIX must be non-empty, without spaces or braces"],
    ),
    // The refusal is said even when RUST_LOG is blank or filters every line out.
    (
        &[("REDIS_URL", "localhost:6379"), ("RUST_LOG", "")],
        &["did you mean redis://localhost:6379?"],
    ),
    (
        &[("REDIS_URL", "localhost:6379"), ("RUST_LOG", "off")],
        &[
            "catalog-jobs could not start",
            "did you mean redis://localhost:6379?",
        ],
    ),
];

#[test]
fn a_mistaken_setting_stops_start_up_saying_what_was_meant() {
    for (env, words) in MISTAKES {
        let out = binary(&[&[("BIND_ADDR", "127.0.0.1:0")], *env].concat())
            .output()
            .expect("the binary runs");
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{env:?} was accepted:\n{log}");
        assert!(
            !log.contains("s3cret"),
            "{env:?}: the password was shown:\n{log}"
        );
        for w in *words {
            assert!(log.contains(w), "{env:?}: no {w:?} in:\n{log}");
        }
    }
}

/// A started service, killed when dropped; its log pipe stays open while it runs.
struct Running {
    child: Child,
    _log: BufReader<ChildStderr>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the binary and answers the address its "listening" line names, once it says it.
fn listening(env: &[(&str, &str)]) -> (Running, String) {
    let mut child = binary(env)
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut log = BufReader::new(child.stderr.take().expect("stderr is piped"));
    let mut line = String::new();
    while log.read_line(&mut line).expect("the log is text") > 0 {
        let event: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        if event["message"] == "catalog-jobs listening" {
            let addr = event["addr"].as_str().expect("the line names its address");
            return (Running { child, _log: log }, addr.to_owned());
        }
        line.clear();
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the service ended before it listened");
}

#[tokio::test]
async fn port_is_listened_on_everywhere_unless_bind_addr_is_given() {
    let (port, other) = (free_port(), free_port());
    let cases = [
        (vec![("PORT", port.to_string())], format!("0.0.0.0:{port}")),
        (
            vec![
                ("PORT", port.to_string()),
                ("BIND_ADDR", format!("127.0.0.1:{other}")),
            ],
            format!("127.0.0.1:{other}"),
        ),
    ];
    for (env, expected) in cases {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (_service, addr) = listening(&env);
        assert_eq!(addr, expected, "{env:?}");
        let local = addr.replace("0.0.0.0", "127.0.0.1");
        let health = reqwest::get(format!("http://{local}/healthz"))
            .await
            .expect("the service answers where it said it listens");
        assert_eq!(health.status(), 200, "{env:?}");
    }
}
