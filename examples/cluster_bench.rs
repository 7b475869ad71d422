//! The same job load on one Redis and on a three-primary Redis Cluster, through `RedisStore`:
//! jobs of many tenants created, claimed and finished, in rounds of concurrent calls. Starts
//! its own `redis-server`s on free loopback ports (one alone; three joined by `redis-cli
//! --cluster create`, no replicas) and kills them at the end. Prints jobs a second (wall) and
//! each node's Redis CPU (`used_cpu_user + used_cpu_sys`) per job.
//!
//!     cargo run --release --example cluster_bench            # 20000 jobs, 1000 tenants
//!     cargo run --release --example cluster_bench -- 50000
//!
//! On a machine with fewer cores than Redis processes the cluster's jobs a second say little
//! (the primaries share the cores with each other and with this client); the CPU per job and
//! how it splits over the primaries is the figure to carry to real hardware.

mod common;

use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use catalog_jobs::jobs::keys::{Group, GROUPS};
use catalog_jobs::jobs::redis::RedisStore;
use catalog_jobs::jobs::store::{Created, JobStore, Outcome, StoreSettings};
use catalog_jobs::jobs::{JobId, Kind, TenantId};
use catalog_jobs::topology::Target;
use serde_json::json;

/// Jobs measured when no count is given.
const DEFAULT_JOBS: usize = 20_000;
/// Tenants the jobs are spread over.
const TENANTS: usize = 1000;
/// Jobs created (then claimed, then finished) together.
const ROUND: usize = 200;
/// Primaries of the cluster.
const PRIMARIES: usize = 3;

/// Redis CPU seconds of the node on `port` so far.
fn cpu_seconds(port: u16) -> f64 {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("a URL");
    let mut conn = client.get_connection().expect("the node answers");
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query(&mut conn)
        .expect("INFO");
    info.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| *k == "used_cpu_user" || *k == "used_cpu_sys")
        .map(|(_, v)| v.trim().parse::<f64>().unwrap_or(0.0))
        .sum()
}

/// Whether the node on `port` says the cluster is `ok`.
fn cluster_ok(port: u16) -> bool {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) else {
        return false;
    };
    let Ok(mut conn) = client.get_connection() else {
        return false;
    };
    let info: redis::RedisResult<String> = redis::cmd("CLUSTER").arg("INFO").query(&mut conn);
    info.is_ok_and(|i| i.contains("cluster_state:ok"))
}

/// Three cluster-enabled nodes joined into one cluster: their processes and ports.
fn start_cluster() -> (Vec<Child>, Vec<u16>) {
    let ports: Vec<u16> = (0..PRIMARIES).map(|_| cluster_port()).collect();
    let nodes = ports
        .iter()
        .map(|&p| {
            let conf = format!("nodes-bench-{p}.conf");
            let extra = ["--cluster-enabled", "yes", "--cluster-config-file", &conf];
            common::redis_server(p, &extra.map(String::from))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500)); // the nodes bind; no signal to wait on
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let created = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli is installed");
    assert!(created.status.success(), "{created:?}");
    while !ports.iter().all(|&p| cluster_ok(p)) {
        std::thread::sleep(Duration::from_millis(100));
    }
    (nodes, ports)
}

/// A free port whose cluster bus port (+10000) is free too.
fn cluster_port() -> u16 {
    loop {
        let port = common::free_port();
        if port < 55_000 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// Creates, claims and finishes one job for each of `tenants`, each step's calls together.
async fn lives(store: &Arc<dyn JobStore>, tenants: &[TenantId]) {
    let kinds = [Kind::parse("sync").expect("a kind")];
    let creates = tenants.iter().map(|t| {
        let mut job = common::new_job(t.as_str(), "sync");
        job.id = JobId::for_tenant(t);
        store.create(job)
    });
    for created in futures_util::future::join_all(creates).await {
        assert!(matches!(created, Ok(Created::Created(..))), "{created:?}");
    }
    let mut claims = Vec::new();
    while claims.len() < tenants.len() {
        let more = store.claim_many("bench/1", &kinds, tenants.len() - claims.len());
        claims.extend(more.await.expect("the store answers"));
    }
    let done = Outcome::Done(json!({}));
    let ends = claims
        .iter()
        .map(|c| store.finish(c.run_ref().ended(&done, 0)));
    for finished in futures_util::future::join_all(ends).await {
        finished.expect("the store answers");
    }
}

/// Runs `jobs` jobs on `target` (a tenant of each slot group first, so every node has the
/// scripts loaded before the count): wall seconds, and each node's CPU seconds.
async fn run(target: Target, ports: &[u16], jobs: usize) -> (f64, Vec<f64>) {
    let settings = StoreSettings {
        prefix: format!("bench{}", std::process::id()),
        ..StoreSettings::default()
    };
    let store: Arc<dyn JobStore> =
        Arc::new(RedisStore::open_target(target, settings).expect("the target parses"));
    let mut warm = Vec::new();
    let mut groups = std::collections::HashSet::new();
    for n in 0.. {
        let t = TenantId::parse(&format!("warm-{n}")).expect("a tenant");
        if groups.insert(Group::of(&t)) {
            warm.push(t);
        }
        if groups.len() == GROUPS {
            break;
        }
    }
    lives(&store, &warm).await;
    let tenants: Vec<TenantId> = (0..TENANTS)
        .map(|n| TenantId::parse(&format!("tenant-{n}")).expect("a tenant"))
        .collect();
    let before: Vec<f64> = ports.iter().map(|&p| cpu_seconds(p)).collect();
    let since = Instant::now();
    let mut done = 0;
    while done < jobs {
        let at = done % TENANTS;
        let n = ROUND.min(jobs - done).min(TENANTS - at);
        lives(&store, &tenants[at..at + n]).await;
        done += n;
    }
    let wall = since.elapsed().as_secs_f64();
    let cpu = ports
        .iter()
        .zip(&before)
        .map(|(&p, b)| cpu_seconds(p) - b)
        .collect();
    (wall, cpu)
}

fn report(name: &str, jobs: usize, (wall, cpu): (f64, Vec<f64>)) {
    let per_job: Vec<String> = cpu
        .iter()
        .map(|s| format!("{:.1}", s * 1e6 / jobs as f64))
        .collect();
    let total: f64 = cpu.iter().sum::<f64>() * 1e6 / jobs as f64;
    println!(
        "{name:<22} {:>8.0} jobs/s   Redis CPU µs/job per node [{}] = {total:.1} in all",
        jobs as f64 / wall,
        per_job.join(", ")
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let jobs = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("a job count"))
        .unwrap_or(DEFAULT_JOBS);
    println!("{jobs} jobs (create, claim, finish) over {TENANTS} tenants, {ROUND} at a time");
    let single_port = common::free_port();
    let mut single = common::redis_server(single_port, &[]);
    std::thread::sleep(Duration::from_millis(300)); // redis-server binds; no signal to wait on
    let url = format!("redis://127.0.0.1:{single_port}/");
    let one = run(Target::Url(url), &[single_port], jobs).await;
    report("one Redis", jobs, one);
    let _ = single.kill();
    let _ = single.wait();

    let (mut nodes, ports) = start_cluster();
    let target = Target::Cluster {
        nodes: ports.iter().map(|p| format!("127.0.0.1:{p}")).collect(),
        password: None,
    };
    let three = run(target, &ports, jobs).await;
    report("3-primary cluster", jobs, three);
    for node in &mut nodes {
        let _ = node.kill();
        let _ = node.wait();
    }
}
