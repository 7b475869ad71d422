//! What a job's timeline costs Redis: runs N no-op job lives (create, claim, one progress
//! write, finish) through `RedisStore` on a `redis-server` it starts on a free loopback port
//! (and kills at the end), and prints the commands Redis ran per job from
//! `INFO commandstats` (commands inside scripts are counted one by one), by command.
//!
//!     cargo run --example timeline_cost            # 1000 jobs
//!     cargo run --example timeline_cost -- 5000
//!
//! The timeline's share is the `xadd` line, the `publish` calls beyond the `end:<id>` one,
//! and the `expire` calls beyond the job hash's and the lock's.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use catalog_jobs::jobs::redis::RedisStore;
use catalog_jobs::jobs::store::{Created, JobStore, NewJob, Origin, Outcome, StoreSettings};
use catalog_jobs::jobs::{JobId, Kind, TenantId};
use serde_json::json;

/// Jobs measured when no count is given.
const DEFAULT_JOBS: usize = 1000;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// `INFO commandstats` as command → calls.
fn command_calls(conn: &mut redis::Connection) -> BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let jobs: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("a job count"))
        .unwrap_or(DEFAULT_JOBS);
    let port = free_port();
    let mut server = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "no", "--loglevel", "warning"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server is installed");
    let url = format!("redis://127.0.0.1:{port}/");
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = loop {
        if let Ok(c) = client.get_connection() {
            break c;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let store = RedisStore::open(&url, StoreSettings::default()).unwrap();
    let kinds = [Kind::parse("pair").unwrap()];
    let before = command_calls(&mut conn);
    for n in 0..jobs {
        let job = NewJob {
            id: JobId::new(),
            tenant: TenantId::parse(&format!("cost-{n}")).unwrap(),
            kind: kinds[0].clone(),
            params: json!({}),
            step: "queued".into(),
            origin: Origin {
                created_by: "anonymous".into(),
                request_id: format!("cost-{n}"),
                retry_of: None,
            },
            idempotency_key: None,
            in_order: false,
            pipeline: None,
        };
        let Created::Created(created) = store.create(job.clone()).await.unwrap() else {
            panic!("the job was not created");
        };
        let claim = store.claim("cost/1", &kinds).await.unwrap().unwrap();
        store.tick(&claim.run, 50, "halfway").await.unwrap();
        let done = Outcome::Done(json!({}));
        store
            .finish(&job, &claim.run, created.created_at, &done, 50)
            .await
            .unwrap();
    }
    let after = command_calls(&mut conn);
    let _ = server.kill();
    let _ = server.wait();
    println!("{jobs} job lives (create, claim, one tick, finish): Redis commands per job");
    let mut total = 0.0;
    for (name, calls) in &after {
        if name == "info" {
            continue;
        }
        let per_job = (calls - before.get(name).copied().unwrap_or(0)) as f64 / jobs as f64;
        if per_job > 0.0 {
            println!("  {name:<12} {per_job:>6.2}");
            total += per_job;
        }
    }
    println!("  {:<12} {total:>6.2}", "total");
}
