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

mod common;

use std::time::Duration;

use catalog_jobs::jobs::redis::RedisStore;
use catalog_jobs::jobs::store::{Created, JobStore, Outcome, RunRef, StoreSettings};
use catalog_jobs::jobs::Kind;
use serde_json::json;

/// Jobs measured when no count is given.
const DEFAULT_JOBS: usize = 1000;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let jobs: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("a job count"))
        .unwrap_or(DEFAULT_JOBS);
    let (mut server, url) = common::start_redis();
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = loop {
        if let Ok(c) = client.get_connection() {
            break c;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let store = RedisStore::open(&url, StoreSettings::default()).unwrap();
    let kinds = [Kind::parse("pair").unwrap()];
    let before = common::commandstats(&mut conn);
    for n in 0..jobs {
        let job = common::new_job(&format!("cost-{n}"), "pair");
        let Created::Created(created, _) = store.create(job.clone()).await.unwrap() else {
            panic!("the job was not created");
        };
        let claim = store.claim("cost/1", &kinds).await.unwrap().unwrap();
        store.tick(&claim.run, 50, "halfway").await.unwrap();
        let done = Outcome::Done(json!({}));
        store
            .finish(RunRef::new(&job, &claim.run, created.created_at).ended(&done, 50))
            .await
            .unwrap();
    }
    let after = common::commandstats(&mut conn);
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
