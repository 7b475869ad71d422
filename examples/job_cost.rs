//! The job store's cost model: what each step of a job's life costs Redis, measured through
//! `RedisStore` on a `redis-server` it starts on a free loopback port (and kills at the end).
//! For each step it runs N calls (one job each, each job of its own tenant, as the side-by-side
//! harness does) and prints, per call: Redis commands (`INFO commandstats`, commands inside
//! scripts counted one by one), script calls, Redis CPU (`used_cpu_user + used_cpu_sys`, µs)
//! and the bytes the step left in Redis (`used_memory`). Then the bytes a finished job keeps.
//!
//!     cargo run --release --example job_cost            # 2000 jobs a step
//!     cargo run --release --example job_cost -- 10000
//!
//! Calls go one at a time, so each pays its own round trip and Redis's per-call overhead;
//! under load, calls pipelined on one connection share them (the harness's figures are lower).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use catalog_jobs::jobs::redis::RedisStore;
use catalog_jobs::jobs::store::{
    Claim, Created, JobStore, NewJob, Outcome, RunId, RunRef, StoreSettings,
};
use catalog_jobs::jobs::Kind;
use serde_json::json;

/// Jobs measured a step when no count is given.
const DEFAULT_JOBS: usize = 2000;

/// What Redis has done so far: calls per command, CPU seconds and memory in use.
#[derive(Default)]
struct Counters {
    calls: BTreeMap<String, u64>,
    cpu_s: f64,
    memory: i64,
}

fn counters(conn: &mut redis::Connection) -> Counters {
    let info: String = redis::cmd("INFO")
        .arg("all")
        .query(conn)
        .expect("INFO answers");
    let mut c = Counters::default();
    for line in info.lines() {
        if let Some((name, calls)) = common::command_calls(line) {
            c.calls.insert(name, calls);
        } else if let Some((key, value)) = line.split_once(':') {
            match key {
                "used_cpu_user" | "used_cpu_sys" => {
                    c.cpu_s += value.trim().parse::<f64>().unwrap_or(0.0)
                }
                "used_memory" => c.memory = value.trim().parse().unwrap_or(0),
                _ => {}
            }
        }
    }
    c
}

/// One line of the cost model: a step's cost per call.
struct Cost {
    step: &'static str,
    commands: f64,
    scripts: f64,
    cpu_us: f64,
    bytes: f64,
    top: String,
}

fn cost(step: &'static str, before: &Counters, after: &Counters, n: usize) -> Cost {
    let n = n as f64;
    let mut deltas: Vec<(String, u64)> = after
        .calls
        .iter()
        .filter(|(name, _)| name.as_str() != "info")
        .map(|(name, c)| {
            (
                name.clone(),
                c - before.calls.get(name).copied().unwrap_or(0),
            )
        })
        .filter(|(_, d)| *d > 0)
        .collect();
    deltas.sort_by_key(|d| std::cmp::Reverse(d.1));
    let total: u64 = deltas.iter().map(|(_, d)| d).sum();
    let scripts: u64 = deltas
        .iter()
        .filter(|(name, _)| name.starts_with("eval") || name.starts_with("fcall"))
        .map(|(_, d)| d)
        .sum();
    let top = deltas
        .iter()
        .map(|(name, d)| format!("{name} {:.1}", *d as f64 / n))
        .collect::<Vec<_>>()
        .join(", ");
    Cost {
        step,
        commands: total as f64 / n,
        scripts: scripts as f64 / n,
        cpu_us: (after.cpu_s - before.cpu_s) * 1e6 / n,
        bytes: (after.memory - before.memory) as f64 / n,
        top,
    }
}

/// The report the harness's enrich of an empty catalogue ends with.
fn report() -> Outcome {
    Outcome::Done(
        json!({"products": 0, "extracted": 0, "unextractable": 0, "skipped": 0, "batches": 0}),
    )
}

/// Reads Redis's counters around a step of `n` calls.
struct Meter {
    conn: redis::Connection,
    n: usize,
}

impl Meter {
    fn connect(url: &str, n: usize) -> Meter {
        let client = redis::Client::open(url).expect("the URL parses");
        let conn = loop {
            if let Ok(c) = client.get_connection() {
                break c;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Meter { conn, n }
    }

    fn now(&mut self) -> Counters {
        counters(&mut self.conn)
    }

    /// The cost per call of the step since `before`.
    fn since(&mut self, step: &'static str, before: &Counters) -> Cost {
        let after = self.now();
        cost(step, before, &after, self.n)
    }
}

/// A job's life one step at a time, each step over every job: create (queued), claim, a
/// progress tick, a poll while running, the finish, a poll once finished.
async fn queued_life(store: &RedisStore, meter: &mut Meter, jobs: &[NewJob]) -> Vec<Cost> {
    let kinds = [Kind::parse("enrich").expect("a kind")];
    let mut created_at = Vec::with_capacity(jobs.len());
    let mut runs: Vec<Claim> = Vec::with_capacity(jobs.len());
    let mut lines = Vec::new();

    let before = meter.now();
    for job in jobs {
        let Ok(Created::Created(s, _)) = store.create(job.clone()).await else {
            panic!("created");
        };
        created_at.push(s.created_at);
    }
    lines.push(meter.since("create (queued)", &before));
    let before = meter.now();
    for _ in jobs {
        let claim = store.claim("cost/1", &kinds).await.expect("claimed");
        runs.push(claim.expect("one"));
    }
    lines.push(meter.since("claim", &before));
    let before = meter.now();
    for claim in &runs {
        let ticked = store.tick(&claim.run, 50, "enriching 1 of 2").await;
        ticked.expect("ticked");
    }
    lines.push(meter.since("progress (one tick)", &before));
    lines.push(polls(store, meter, jobs, "poll (running job)").await);
    let before = meter.now();
    for (claim, at) in runs.iter().zip(&created_at) {
        let run: RunId = claim.run;
        let report = report();
        let end = RunRef::new(&claim.job, &run, *at).ended(&report, 50);
        let finished = store.finish(end).await;
        finished.expect("finished");
    }
    lines.push(meter.since("finish", &before));
    lines.push(polls(store, meter, jobs, "poll (finished job)").await);
    lines
}

/// One read of each job.
async fn polls(store: &RedisStore, meter: &mut Meter, jobs: &[NewJob], step: &'static str) -> Cost {
    let before = meter.now();
    for job in jobs {
        store.get(&job.id).await.expect("read").expect("found");
    }
    meter.since(step, &before)
}

/// The harness's life: a create the accepting replica claims at once, then its finish.
async fn claimed_life(store: &RedisStore, meter: &mut Meter, jobs: &[NewJob]) -> Cost {
    let before = meter.now();
    for job in jobs {
        let Ok(Created::Created(s, _)) = store.create_claimed(job.clone(), "cost/1").await else {
            panic!("created");
        };
        let run = job.clone().first_claim(s.created_at).run;
        store
            .finish(RunRef::new(job, &run, s.created_at).ended(&report(), 0))
            .await
            .expect("finished");
    }
    meter.since("create claimed + finish", &before)
}

fn print_table(n: usize, lines: &[Cost]) {
    println!("Redis cost per call, {n} jobs a step, each of its own tenant (one call at a time):");
    println!();
    println!("| step | commands | scripts | Redis CPU µs | bytes left | commands by name |");
    println!("|---|---|---|---|---|---|");
    for c in lines {
        println!(
            "| {} | {:.1} | {:.1} | {:.0} | {:.0} | {} |",
            c.step, c.commands, c.scripts, c.cpu_us, c.bytes, c.top
        );
    }
    println!();
    let life = lines.last().expect("the claimed life is measured");
    println!(
        "A finished job (its record, timeline, listing entry and rate window) keeps {:.0} bytes \
         of Redis memory (the last line's bytes left).",
        life.bytes
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("a job count"))
        .unwrap_or(DEFAULT_JOBS);
    let (mut server, url) = common::start_redis();
    let mut meter = Meter::connect(&url, n);
    // Polls are read from Redis, never from the finished-job cache.
    let settings = StoreSettings {
        finished_cache: Duration::ZERO,
        max_queued: n * 2,
        ..StoreSettings::default()
    };
    let store = RedisStore::open(&url, settings).expect("the URL parses");
    store.ping().await.expect("Redis answers");
    // Each in its tenant's order, as the service makes a sync, an enrich or a pair.
    let new_job = |i| NewJob {
        in_order: true,
        ..common::new_job(&format!("cost-{}-{i}", std::process::id()), "enrich")
    };
    let jobs: Vec<NewJob> = (0..n).map(new_job).collect();
    let mut lines = queued_life(&store, &mut meter, &jobs).await;
    let more: Vec<NewJob> = (n..2 * n).map(new_job).collect();
    lines.push(claimed_life(&store, &mut meter, &more).await);
    let _ = server.kill();
    let _ = server.wait();
    print_table(n, &lines);
}
