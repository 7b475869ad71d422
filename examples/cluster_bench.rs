//! The same job load on one Redis and on a three-primary Redis Cluster, through `RedisStore`:
//! jobs of many tenants created, claimed and finished, in rounds of concurrent calls. Starts
//! its own `redis-server`s on free loopback ports (one alone; three joined by `redis-cli
//! --cluster create`, no replicas) and kills them at the end. Prints jobs a second (wall) and
//! each node's Redis CPU (`used_cpu_user + used_cpu_sys`) per job. Then, on the same nodes,
//! a catalogue through `RedisCatalog`: 100 tenants × 2,000 demo products written (`upsert`,
//! 1,000 a call) and read back once (a page walk of each tenant): products a second, each
//! node's Redis CPU per product written and read, and Redis bytes per product (`used_memory`
//! after − before, summed over the nodes).
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

use catalog_jobs::catalog::demo;
use catalog_jobs::catalog::products::{CatalogStore, RedisCatalog};
use catalog_jobs::jobs::fence::Unfenced;
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
/// Tenants of the catalogue, and products each (the same demo products for each).
const SHOPS: usize = 100;
const PRODUCTS: usize = 2000;
/// Products a write call carries, and a page of the read walk.
const CHUNK: usize = 1000;
const PAGE: usize = 500;

/// The sum of the `fields` of `INFO <section>` on the node on `port`.
fn info_sum(port: u16, section: &str, fields: &[&str]) -> f64 {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("a URL");
    let mut conn = client.get_connection().expect("the node answers");
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query(&mut conn)
        .expect("INFO");
    info.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| fields.contains(k))
        .map(|(_, v)| v.trim().parse::<f64>().unwrap_or(0.0))
        .sum()
}

/// Redis CPU seconds of the node on `port` so far.
fn cpu_seconds(port: u16) -> f64 {
    info_sum(port, "cpu", &["used_cpu_user", "used_cpu_sys"])
}

/// Each node's CPU seconds and used memory bytes now.
fn snapshot(ports: &[u16]) -> (Vec<f64>, Vec<f64>) {
    let cpu = ports.iter().map(|&p| cpu_seconds(p)).collect();
    let bytes = ports
        .iter()
        .map(|&p| info_sum(p, "memory", &["used_memory"]))
        .collect();
    (cpu, bytes)
}

/// `after - before`, node by node.
fn deltas(after: &[f64], before: &[f64]) -> Vec<f64> {
    after.iter().zip(before).map(|(a, b)| a - b).collect()
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

/// What a catalogue cost: wall seconds of the write and of the read, each node's Redis CPU
/// seconds of each, and each node's bytes more after the write.
struct CatalogueCost {
    write_wall: f64,
    read_wall: f64,
    write_cpu: Vec<f64>,
    read_cpu: Vec<f64>,
    bytes: Vec<f64>,
}

/// Writes [`SHOPS`] × [`PRODUCTS`] products on `target`, then reads each tenant's back once.
async fn catalogue(target: Target, ports: &[u16]) -> CatalogueCost {
    let store = RedisCatalog::open_target(target, "benchcat").expect("the target parses");
    let ports = ports.to_vec();
    tokio::task::spawn_blocking(move || catalogue_blocking(&store, &ports))
        .await
        .expect("the catalogue run ends")
}

fn catalogue_blocking(store: &RedisCatalog, ports: &[u16]) -> CatalogueCost {
    let products = demo::generate(PRODUCTS, 7);
    let shops: Vec<TenantId> = (0..SHOPS)
        .map(|n| TenantId::parse(&format!("shop-{n}")).expect("a tenant"))
        .collect();
    let (cpu0, bytes0) = snapshot(ports);
    let since = Instant::now();
    for shop in &shops {
        for chunk in products.chunks(CHUNK) {
            store
                .upsert(shop, chunk, &Unfenced)
                .expect("the write lands");
        }
    }
    let write_wall = since.elapsed().as_secs_f64();
    let (cpu1, bytes1) = snapshot(ports);
    let since = Instant::now();
    let read: usize = shops.iter().map(|shop| walk(store, shop)).sum();
    let read_wall = since.elapsed().as_secs_f64();
    assert_eq!(read, SHOPS * PRODUCTS, "every product read back");
    let (cpu2, _) = snapshot(ports);
    CatalogueCost {
        write_wall,
        read_wall,
        write_cpu: deltas(&cpu1, &cpu0),
        read_cpu: deltas(&cpu2, &cpu1),
        bytes: deltas(&bytes1, &bytes0),
    }
}

/// Reads every product of `shop` a page at a time: how many.
fn walk(store: &RedisCatalog, shop: &TenantId) -> usize {
    let (mut read, mut cursor) = (0, None::<String>);
    loop {
        let (page, next) = store
            .page(shop, PAGE, cursor.as_deref())
            .expect("the page reads");
        read += page.len();
        match next {
            Some(c) => cursor = Some(c),
            None => return read,
        }
    }
}

fn report_catalogue(name: &str, cost: &CatalogueCost) {
    let n = (SHOPS * PRODUCTS) as f64;
    let per = |v: &[f64], scale: f64| -> (String, f64) {
        let each: Vec<String> = v.iter().map(|x| format!("{:.1}", x * scale / n)).collect();
        (each.join(", "), v.iter().sum::<f64>() * scale / n)
    };
    let (bytes, bytes_all) = per(&cost.bytes, 1.0);
    let (write, write_all) = per(&cost.write_cpu, 1e6);
    let (read, read_all) = per(&cost.read_cpu, 1e6);
    println!(
        "{name:<22} write {:>7.0} products/s, Redis CPU µs/product per node [{write}] = \
         {write_all:.2}; read {:>7.0} products/s, [{read}] = {read_all:.2}; \
         bytes/product per node [{bytes}] = {bytes_all:.0}",
        n / cost.write_wall,
        n / cost.read_wall,
    );
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
    println!("then {SHOPS} tenants × {PRODUCTS} demo products written {CHUNK} a call, read {PAGE} a page");
    let single_port = common::free_port();
    let mut single = common::redis_server(single_port, &[]);
    std::thread::sleep(Duration::from_millis(300)); // redis-server binds; no signal to wait on
    let url = format!("redis://127.0.0.1:{single_port}/");
    let one = run(Target::Url(url.clone()), &[single_port], jobs).await;
    report("one Redis", jobs, one);
    let cat = catalogue(Target::Url(url), &[single_port]).await;
    report_catalogue("one Redis", &cat);
    let _ = single.kill();
    let _ = single.wait();

    let (mut nodes, ports) = start_cluster();
    let target = Target::Cluster {
        nodes: ports.iter().map(|p| format!("127.0.0.1:{p}")).collect(),
        password: None,
    };
    let three = run(target.clone(), &ports, jobs).await;
    report("3-primary cluster", jobs, three);
    let cat = catalogue(target, &ports).await;
    report_catalogue("3-primary cluster", &cat);
    for node in &mut nodes {
        let _ = node.kill();
        let _ = node.wait();
    }
}
