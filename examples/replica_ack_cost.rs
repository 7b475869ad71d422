//! What `REDIS_MIN_REPLICAS_ACK=1` costs per job: runs job lives (create, claim, finish) on
//! a primary with one replica (both `redis-server`s it starts on free loopback ports and kills
//! at the end), with the acknowledgement off and on, one at a time and 16 at once.
//!
//!     cargo run --release --example replica_ack_cost            # 2000 jobs a case
//!     cargo run --release --example replica_ack_cost -- 10000

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use catalog_jobs::jobs::redis::RedisStore;
use catalog_jobs::jobs::store::{Created, JobStore, Outcome, StoreSettings};
use catalog_jobs::jobs::Kind;
use serde_json::json;

/// Jobs running their lives at once in the concurrent case (like `wrk -c 16`).
const CONCURRENCY: usize = 16;

fn wait_until_in_sync(replica: u16) {
    let client = redis::Client::open(format!("redis://127.0.0.1:{replica}/")).unwrap();
    for _ in 0..500 {
        if let Ok(mut c) = client.get_connection() {
            let info: String = redis::cmd("INFO").arg("replication").query(&mut c).unwrap();
            if info.contains("master_link_status:up") {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the replica did not sync");
}

async fn one_life(store: &RedisStore, n: usize, worker: &str) {
    let job = common::new_job(&format!("ack-{worker}-{n}"), "pair");
    match store.create(job).await.expect("create") {
        Created::Created(..) => {}
        other => panic!("create answered {other:?}"),
    }
    let kinds = [Kind::parse("pair").unwrap()];
    let claim = store
        .claim(worker, &kinds)
        .await
        .expect("claim")
        .expect("a job");
    store
        .finish(claim.run_ref().ended(&Outcome::Done(json!({"ok": 1})), 100))
        .await
        .expect("finish");
}

async fn case(url: &str, ack: u32, jobs: usize, concurrency: usize) -> f64 {
    let settings = StoreSettings {
        prefix: format!("ackcost{ack}c{concurrency}"),
        min_replicas_ack: ack,
        max_queued: 100_000,
        ..StoreSettings::default()
    };
    let store = Arc::new(RedisStore::open(url, settings).unwrap());
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                for n in (w..jobs).step_by(concurrency) {
                    one_life(&store, n, &format!("w{w}")).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    started.elapsed().as_secs_f64() * 1e6 / jobs as f64
}

#[tokio::main]
async fn main() {
    let jobs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let (p, r) = (common::free_port(), common::free_port());
    let mut primary = common::redis_server(p, &[]);
    let mut replica = common::redis_server(
        r,
        &["--replicaof".into(), "127.0.0.1".into(), p.to_string()],
    );
    wait_until_in_sync(r);
    let url = format!("redis://127.0.0.1:{p}/");
    println!("{jobs} job lives (create, claim, finish) a case; µs of wall time per job");
    for concurrency in [1, CONCURRENCY] {
        let off = case(&url, 0, jobs, concurrency).await;
        let on = case(&url, 1, jobs, concurrency).await;
        println!(
            "{concurrency:>2} at once: ack 0 {off:>7.1} µs, ack 1 {on:>7.1} µs, cost {:>+7.1} µs a job",
            on - off
        );
    }
    let _ = replica.kill();
    let _ = primary.kill();
    let _ = replica.wait();
    let _ = primary.wait();
}
