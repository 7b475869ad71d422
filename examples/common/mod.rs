//! What the Redis cost examples share: a throwaway `redis-server` on a free loopback port
//! (no persistence), and a no-op job to create. Each example uses a part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};

use catalog_jobs::jobs::store::{NewJob, Origin};
use catalog_jobs::jobs::{JobId, Kind, TenantId};
use serde_json::json;

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A `redis-server` on `port` with `extra` arguments, in a temp dir of its own (a replica's
/// full sync writes an RDB file there); kill it when done.
pub fn redis_server(port: u16, extra: &[String]) -> Child {
    let dir = std::env::temp_dir().join(format!("catalog-jobs-example-redis-{port}"));
    std::fs::create_dir_all(&dir).expect("the temp dir is writable");
    Command::new("redis-server")
        .arg("--dir")
        .arg(&dir)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
        .args(extra)
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server is installed")
}

/// A `redis-server` on a free port, and its URL.
pub fn start_redis() -> (Child, String) {
    let port = free_port();
    (
        redis_server(port, &[]),
        format!("redis://127.0.0.1:{port}/"),
    )
}

/// A job of `kind` for `tenant` with no parameters, as an anonymous caller creates it.
pub fn new_job(tenant: &str, kind: &str) -> NewJob {
    NewJob {
        id: JobId::new(),
        tenant: TenantId::parse(tenant).expect("a tenant"),
        kind: Kind::parse(kind).expect("a kind"),
        params: json!({}),
        step: "queued".into(),
        origin: Origin {
            created_by: "anonymous".into(),
            request_id: JobId::new().to_string(),
            retry_of: None,
        },
        idempotency_key: None,
        in_order: false,
        pipeline: None,
    }
}

/// The calls of one `INFO` line `cmdstat_<name>:calls=N,…`, as (name, N).
pub fn command_calls(line: &str) -> Option<(String, u64)> {
    let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
    let calls = rest
        .strip_prefix("calls=")?
        .split(',')
        .next()?
        .parse()
        .ok()?;
    Some((name.to_owned(), calls))
}

/// `INFO commandstats` as command → calls.
pub fn commandstats(conn: &mut redis::Connection) -> BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines().filter_map(command_calls).collect()
}
