//! Redis Cluster mode with real processes: the loopback cluster of `helpers::RedisCluster`
//! (three primaries, a replica each) and the built binary reaching it through
//! `REDIS_CLUSTER_NODES`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use catalog_jobs::catalog::products::{CatalogStore, ProductKey, RedisCatalog, Write};
use catalog_jobs::jobs::keys::{Group, Keys, GROUPS};
use catalog_jobs::jobs::redis::RedisStore;
use catalog_jobs::jobs::store::{JobStore, Outcome};
use catalog_jobs::jobs::{JobId, Kind, TenantId};
use catalog_jobs::topology::{is_failover_sign, is_permanent, Primary, Target};
use serde_json::{json, Value};

use crate::helpers::{
    create, end, eventually, keys_matching, new_job, run_fence, settings, shared_cluster,
    started_id, status_and_json, t_shirts, tenant, tenant_beside, unique, HeldFeeds, RedisCluster,
    Service, CLUSTER_PRIMARIES, HELD_ROWS,
};

/// Every slot of a Redis Cluster's keyspace.
const ALL_SLOTS: u64 = 16384;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_readyz_and_the_start_up_log_show_its_shards_slots_and_replicas() {
    let cluster = shared_cluster().await;
    let svc = Service::embedded()
        .env("REDIS_CLUSTER_NODES", cluster.nodes_env())
        .start()
        .await;
    let ready = svc.readyz().await;
    assert_eq!(ready.status(), 200);
    let topology = ready.json::<Value>().await.unwrap()["topology"].clone();
    let shape = &topology["cluster"];
    let shards = shape["shards"].as_array().expect("a list of shards");
    assert_eq!(shards.len(), CLUSTER_PRIMARIES, "{topology}");
    assert_eq!(shape["slots_covered"], ALL_SLOTS, "{topology}");
    assert!(shards.iter().all(|s| s["replicas"] == 1), "{topology}");
    assert_eq!(topology["replicas"], CLUSTER_PRIMARIES as u64, "{topology}");
    let slots: u64 = shards.iter().map(|s| s["slots"].as_u64().unwrap()).sum();
    assert_eq!(slots, ALL_SLOTS);
    assert!(topology["via"]
        .as_str()
        .is_some_and(|v| v.contains("Redis Cluster")));
    let log = svc
        .wait_for_log("connected to a Redis Cluster", Duration::from_secs(5))
        .await;
    assert!(
        log.contains(&format!("shards={CLUSTER_PRIMARIES}"))
            && log.contains(&format!("slots_covered={ALL_SLOTS}"))
            && log.contains(&format!("replicas={CLUSTER_PRIMARIES}")),
        "{log}"
    );
}

#[test]
fn redis_cluster_nodes_with_redis_url_or_sentinels_stop_the_binary_naming_the_clash() {
    for (other, value) in [
        ("REDIS_URL", "redis://127.0.0.1:1/"),
        ("REDIS_SENTINELS", "127.0.0.1:2"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_catalog-jobs"))
            .env_clear()
            .env("BIND_ADDR", "127.0.0.1:0")
            .env("REDIS_CLUSTER_NODES", "127.0.0.1:3,127.0.0.1:4")
            .env("REDIS_MASTER_NAME", "m")
            .env(other, value)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let said = String::from_utf8_lossy(&out.stderr) + String::from_utf8_lossy(&out.stdout);
        assert!(
            said.contains(&format!("{other} and REDIS_CLUSTER_NODES are both set")),
            "{said}"
        );
    }
}

/// What one node of a cluster counted: its role, the test's keys it holds, the commands it
/// ran (every command but the test's own probes; a script's own commands count too), and
/// its errors by kind (`INFO errorstats`).
struct NodeCounts {
    primary: bool,
    keys: u64,
    commands: u64,
    errors: String,
}

/// Reads `NodeCounts` of the node `conn` is connected to, counting the keys under `prefix:`
/// and `catalog_prefix:`.
async fn node_counts(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    catalog_prefix: &str,
) -> NodeCounts {
    let role: redis::Value = redis::cmd("ROLE").query_async(&mut *conn).await.unwrap();
    let primary = format!("{role:?}").contains("master");
    let mut keys = 0;
    for pattern in [format!("{prefix}:*"), format!("{catalog_prefix}:*")] {
        keys += keys_matching(conn, &pattern).await.len() as u64;
    }
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut *conn)
        .await
        .unwrap();
    const PROBES: [&str; 8] = [
        "info", "config", "cluster", "keys", "role", "ping", "command", "client",
    ];
    let commands = stats
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter(|l| {
            !PROBES
                .iter()
                .any(|p| l.starts_with(&format!("{p}|")) || l.starts_with(&format!("{p}:")))
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    let errors: String = redis::cmd("INFO")
        .arg("errorstats")
        .query_async(&mut *conn)
        .await
        .unwrap();
    NodeCounts {
        primary,
        keys,
        commands,
        errors,
    }
}

/// The tenants' jobs created (together), claimed, each one's catalogue written under its run's
/// fence, and finished (together).
async fn tenants_lives(jobs: &Arc<dyn JobStore>, catalog: &Arc<RedisCatalog>, tenants: &[String]) {
    let tenants: Vec<TenantId> = tenants
        .iter()
        .map(|t| TenantId::parse(t).unwrap())
        .collect();
    let created = tenants.iter().map(|t| async move {
        create(&**jobs, &new_job(t, "sync")).await;
    });
    at_most_in_flight(created).await;
    let kinds = [Kind::parse("sync").unwrap()];
    let mut claims = Vec::new();
    while claims.len() < tenants.len() {
        let more = jobs.claim_many("w/1", &kinds, tenants.len() - claims.len());
        claims.extend(more.await.unwrap());
    }
    let lives = claims.into_iter().map(|claim| async move {
        let fence = run_fence(jobs, &claim);
        let written = tokio::task::spawn_blocking({
            let (catalog, t) = (catalog.clone(), claim.job.tenant.clone());
            move || catalog.upsert(&t, &t_shirts(), &*fence)
        })
        .await
        .unwrap()
        .unwrap();
        assert!(matches!(written, Write::Done(_)), "{written:?}");
        end(&**jobs, &claim, Outcome::Done(json!({}))).await;
    });
    at_most_in_flight(lives).await;
}

/// Calls a service would have in flight at once (its requests and workers are bounded): a
/// thousand at once on a loaded machine queue past the store's answer deadline (2 s), which
/// is a test flooding its own client, not a cluster spreading badly.
const IN_FLIGHT: usize = 64;

/// Runs `calls`, at most [`IN_FLIGHT`] at a time.
async fn at_most_in_flight(calls: impl Iterator<Item = impl std::future::Future<Output = ()>>) {
    use futures_util::StreamExt;
    futures_util::stream::iter(calls)
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<()>>()
        .await;
}

/// Whether every figure is within a quarter of their mean.
fn within_a_quarter_of_the_mean(figures: &[u64]) -> bool {
    let mean = figures.iter().sum::<u64>() as f64 / figures.len() as f64;
    figures
        .iter()
        .all(|&n| (n as f64 - mean).abs() <= 0.25 * mean)
}

/// Every key of a tenant and its jobs is in its slot group's slot, and the 48 groups sit
/// evenly over the slots: 1,000 tenants' jobs (each created, claimed, its catalogue written
/// under its run's fence, finished) spread over the three primaries within ±25 % of the mean,
/// in keys and in commands, and no node answered a script or a command that crossed slots.
/// A cluster of its own: the commands counted are this test's only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_tenants_jobs_and_catalogues_spread_evenly_over_the_three_primaries() {
    const TENANTS: usize = 1000;
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let target = || Target::Cluster {
        nodes: cluster.addresses(),
        password: None,
    };
    let settings = settings();
    let prefix = settings.prefix.clone();
    let catalog_prefix = unique("cat");
    let jobs: Arc<dyn JobStore> = Arc::new(RedisStore::open_target(target(), settings).unwrap());
    let catalog = Arc::new(RedisCatalog::open_target(target(), &catalog_prefix).unwrap());
    // A tenant of every slot group first: the stores connect to every primary (redis-rs
    // sends each new connection's `CLIENT SETINFO`, which Redis 7.0 answers with an error),
    // and the job library and the catalogue's scripts are loaded on each (a node without them
    // answers an error first). The counts start after them, on probe connections opened
    // before.
    let mut warm: Vec<String> = Vec::new();
    let mut groups = std::collections::HashSet::new();
    for n in 0.. {
        let t = format!("warm-{n}");
        if groups.insert(Group::of(&TenantId::parse(&t).unwrap())) {
            warm.push(t);
        }
        if groups.len() == GROUPS {
            break;
        }
    }
    tenants_lives(&jobs, &catalog, &warm).await;
    let mut probes = Vec::new();
    for node in &cluster.nodes {
        probes.push((node.port, node.connection().await));
    }
    for (_, conn) in &mut probes {
        crate::helpers::reset_stats(conn).await;
    }
    let tenants: Vec<String> = (0..TENANTS).map(|n| format!("balance-{n}")).collect();
    for chunk in tenants.chunks(25) {
        tenants_lives(&jobs, &catalog, chunk).await;
    }
    let mut primaries = Vec::new();
    for (port, conn) in &mut probes {
        let counts = node_counts(conn, &prefix, &catalog_prefix).await;
        assert!(
            !counts.errors.contains("errorstat_"),
            "node {port} answered errors (a script or a command crossing slots is one): {}",
            counts.errors
        );
        if counts.primary {
            primaries.push(counts);
        }
    }
    assert_eq!(primaries.len(), CLUSTER_PRIMARIES);
    let keys: Vec<u64> = primaries.iter().map(|p| p.keys).collect();
    let commands: Vec<u64> = primaries.iter().map(|p| p.commands).collect();
    println!("keys per primary: {keys:?}; commands per primary: {commands:?}");
    assert!(keys.iter().sum::<u64>() >= 2 * TENANTS as u64, "{keys:?}");
    assert!(within_a_quarter_of_the_mean(&keys), "keys: {keys:?}");
    assert!(
        within_a_quarter_of_the_mean(&commands),
        "commands: {commands:?}"
    );
}

/// The catalogue's whole life on the cluster, through the binary and the catalogue store: a
/// sync writes the demo catalogue, an enrich its attributes, a pair its neighbour table
/// (staged, then swapped in by `swap_table.lua`); a removal notes its keys in the change feed
/// (`note.lua`) and the next pair swaps in the changed rows; the tenant's delete purges
/// every catalogue key. No node answers an error of a script or a transaction crossing slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_catalogue_is_synced_enriched_paired_and_purged_on_a_redis_cluster() {
    let cluster = shared_cluster().await;
    let catalog_prefix = unique("cat");
    let svc = Service::embedded()
        .env("REDIS_CLUSTER_NODES", cluster.nodes_env())
        .env("CATALOG_PREFIX", &catalog_prefix)
        .start()
        .await;
    let t = tenant();
    let ts = t.as_str();
    let run = async |kind: &str| run_waiting(&svc, kind, &[("tenant_id", ts)]).await;
    let synced = run_waiting(&svc, "sync", &[("tenant_id", ts), ("source", "demo.jsonl")]).await;
    assert_eq!(synced["totals"]["created"], 2400, "{synced}");
    let enriched = run("enrich").await;
    assert_eq!(enriched["products"], 2400, "{enriched}");
    let paired = run("pair").await;
    assert!(paired["paired"].as_u64().unwrap() > 2000, "{paired}");
    let p = svc.product(ts, "fam000001-v0").await;
    assert_eq!(p["enrichment"]["state"], "enriched", "{p}");
    assert!(neighbours(&p).iter().any(|k| k == "fam000001-v1"), "{p}");

    // A removal notes its key in the change feed in its own transaction.
    let noted = removed_and_noted(cluster, &catalog_prefix, &t, "fam000001-v1").await;
    assert_eq!(noted, [ProductKey::parse("fam000001-v1").unwrap()]);
    let repaired = run("pair").await;
    let p = svc.product(ts, "fam000001-v0").await;
    assert!(
        !neighbours(&p).iter().any(|k| k == "fam000001-v1"),
        "the removed product is no one's neighbour after the next pair: {repaired} {p}"
    );

    let deleted = svc.delete_tenant(ts).await;
    let (status, deleted) = status_and_json(deleted).await;
    assert_eq!(status, 200, "{deleted}");
    let page = svc
        .get_json(&format!("/catalog/products?tenant_id={ts}&limit=10"))
        .await;
    assert_eq!(page["products"], json!([]), "{page}");
    let left = catalogue_keys_on_primaries(cluster, &catalog_prefix).await;
    assert_eq!(left, 0, "the delete left catalogue keys");
    assert!(!svc.log().contains("CROSSSLOT"));
}

/// Starts a job of `kind` with `form` and waits for its report (it must answer 200).
async fn run_waiting(svc: &Service, kind: &str, form: &[(&str, &str)]) -> Value {
    let mut form = form.to_vec();
    form.push(("wait", "true"));
    let (status, report) = status_and_json(svc.start(kind, &form).await).await;
    assert_eq!(status, 200, "{kind}: {report}");
    report
}

/// The product keys of a product's neighbours, as the API shows them.
fn neighbours(p: &Value) -> Vec<String> {
    p["neighbours"]
        .as_array()
        .expect("a list of neighbours")
        .iter()
        .map(|n| n["product_key"].as_str().unwrap().to_owned())
        .collect()
}

/// Removes product `key` of `t` through the catalogue store on `cluster` and answers what the
/// change feed then holds.
async fn removed_and_noted(
    cluster: &RedisCluster,
    prefix: &str,
    t: &TenantId,
    key: &str,
) -> Vec<ProductKey> {
    let target = Target::Cluster {
        nodes: cluster.addresses(),
        password: None,
    };
    let store = RedisCatalog::open_target(target, prefix).unwrap();
    let (t, key) = (t.clone(), ProductKey::parse(key).unwrap());
    let (removed, changed) = tokio::task::spawn_blocking(move || {
        let removed = store.remove(&t, &[key]).unwrap();
        (removed, store.changed(&t).unwrap())
    })
    .await
    .unwrap();
    assert_eq!(removed, 1);
    changed
        .keys
        .expect("the feed holds what changed since the pair")
}

/// How many keys under `prefix:` the primaries of `cluster` hold (a replica may not have
/// applied the last delete yet); no node may have answered a command crossing slots.
async fn catalogue_keys_on_primaries(cluster: &RedisCluster, prefix: &str) -> u64 {
    let mut left = 0;
    for node in &cluster.nodes {
        let mut conn = node.connection().await;
        let counts = node_counts(&mut conn, prefix, prefix).await;
        assert!(
            !counts.errors.contains("CROSSSLOT"),
            "node {}: {}",
            node.port,
            counts.errors
        );
        if counts.primary {
            left += counts.keys;
        }
    }
    left
}

/// Longest a test waits for the cluster to promote a killed primary's replica and the service
/// to follow.
const FAILOVER_WITHIN: Duration = Duration::from_secs(25);

/// The node of `cluster` other than the one on `port` that answers for `key` itself (the
/// primary of its slot; any other node answers `MOVED`).
fn owner_of(cluster: &RedisCluster, key: &str, but: u16) -> Option<usize> {
    cluster
        .nodes
        .iter()
        .position(|n| n.port != but && answers_for(n.port, key))
}

/// A running job's slot loses its primary to `kill -9` with `REDIS_MIN_REPLICAS_ACK=1`: the
/// cluster promotes its replica, the service follows, the run that was going on ends the job
/// `done`, its tenant's lock is free, and every job answered 202 meanwhile (each of a tenant
/// in the same slot group, so on the killed primary) is still there. A cluster of its own:
/// the shared one keeps its primaries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_jobs_primary_killed_its_replica_takes_over_and_no_accepted_job_vanishes() {
    let mut cluster = tokio::task::spawn_blocking(RedisCluster::start_failing_over_fast)
        .await
        .unwrap();
    let feeds = HeldFeeds::start().await;
    let svc = Service::embedded()
        .env("REDIS_CLUSTER_NODES", cluster.nodes_env())
        .env("SYNC_ALLOWED_HOSTS", feeds.allowed())
        // Longer than the failover: the run that was going on is the one that ends the job.
        .env("STALE_AFTER_SECONDS", "20")
        .env("HEARTBEAT_SECONDS", "0.5")
        .env("FINISH_RETRY_SECONDS", "60")
        .env("REDIS_MIN_REPLICAS_ACK", "1")
        .start()
        .await;
    let t = tenant();
    let name = format!("failover-{t}");
    let id = svc.start_held_sync(&feeds, &t, &name).await;
    let keys = Keys::new("job");
    let record = keys.job(&JobId::parse(&id).unwrap());
    let killed = owner_of(&cluster, &record, 0).expect("a primary holds the job");
    cluster.nodes[killed].stop(); // SIGKILL
    let (promoted, answered) =
        post_through_the_failover(&svc, &mut cluster, &t, &record, killed).await;
    feeds.release(&name);
    let done = svc.poll(&id, "done", |j| j["status"] == "done").await;
    assert_eq!(
        done["attempt"], 1,
        "the run that was going on ended it: {done}"
    );
    let totals = &done["result"]["totals"];
    assert_eq!(totals["created"], HELD_ROWS as u64, "{done}");
    let mut conn = cluster.nodes[promoted].connection().await;
    let lock: Option<String> = redis::cmd("GET")
        .arg(keys.lock(&t, &Kind::parse("sync").unwrap()))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(lock, None, "the tenant's lock is free");
    for job in &answered {
        let r = svc.job(job).await;
        assert_eq!(
            r.status(),
            200,
            "job {job} was answered and must not vanish"
        );
    }
    // A new sync of the tenant runs: its lock was free. Until the rejoined replica has caught
    // up, a start may still answer 503 + Retry-After, which a client retries; a 503 start's
    // outcome is unknown (the job may be created, docs/api.md), so the retry may answer 409
    // naming the job an earlier try created (the lock was checked free above).
    let start_again = async || {
        let r = svc.sync(t.as_str(), &["sample.csv".into()]).await;
        match r.status().as_u16() {
            202 => Ok(started_id(r).await),
            409 => {
                let (_, body) = status_and_json(r).await;
                assert_eq!(body["error"], "already_running", "{body}");
                Ok(body["job_id"].as_str().expect("a job id").to_owned())
            }
            503 => Err("the new sync was refused 503 throughout".to_owned()),
            other => panic!("a new sync answered {other}"),
        }
    };
    let again = eventually(FAILOVER_WITHIN, start_again).await;
    svc.poll(&again, "done", |j| j["status"] == "done").await;
}

/// Posts a sync of a tenant in `t`'s slot group every 100 ms from the kill of the primary
/// `killed`, which held `record`, until another node holds its slot and a POST is accepted again
/// (the killed node restarted meanwhile, to rejoin as a replica): 503 + Retry-After meanwhile. Answers the new primary and every job answered 202, or named by a
/// 503 as created.
async fn post_through_the_failover(
    svc: &Service,
    cluster: &mut RedisCluster,
    t: &TenantId,
    record: &str,
    killed: usize,
) -> (usize, Vec<String>) {
    let killed_port = cluster.nodes[killed].port;
    let mut rejoined = false;
    let since = Instant::now();
    let (mut accepted, mut named, mut refused) = (Vec::new(), Vec::new(), 0);
    let promoted = loop {
        let r = svc
            .sync(tenant_beside(t).as_str(), &["sample.csv".into()])
            .await;
        let r_accepted = r.status() == 202;
        match r.status().as_u16() {
            202 => accepted.push(started_id(r).await),
            503 => {
                assert!(r.headers().contains_key("retry-after"), "503 says when");
                let body: Value = r.json().await.unwrap();
                if let Some(job) = body["job_id"].as_str() {
                    named.push(job.to_owned());
                }
                refused += 1;
            }
            other => panic!("a POST during the failover answered {other}"),
        }
        // Done once the slot has a primary again and the last POST was accepted.
        let promoted = owner_of(cluster, record, killed_port);
        if promoted.is_some() && !rejoined {
            // Back with its old data, the killed node rejoins as the new primary's replica,
            // which acknowledges the writes again.
            tokio::task::block_in_place(|| cluster.nodes[killed].restart(true));
            rejoined = true;
        }
        if let (Some(p), true) = (promoted, r_accepted) {
            break p;
        }
        assert!(
            since.elapsed() < FAILOVER_WITHIN,
            "no replica took over with a POST accepted ({refused} refused)"
        );
        // Paces the requests; the condition waited for is the loop's own answer.
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "failover: {} accepted, {refused} refused, {:.1} s after the kill",
        accepted.len(),
        since.elapsed().as_secs_f64()
    );

    (promoted, accepted.into_iter().chain(named).collect())
}

/// Whether the node on `port` answers for `key` itself (it holds the key's slot).
fn answers_for(port: u16, key: &str) -> bool {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) else {
        return false;
    };
    let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_secs(1)) else {
        return false;
    };
    redis::cmd("EXISTS")
        .arg(key)
        .query::<u64>(&mut conn)
        .is_ok()
}

/// `CROSSSLOT` errors counted by the nodes of `cluster` (`INFO errorstats`).
async fn crossslot_errors(cluster: &RedisCluster) -> u64 {
    let mut count = 0;
    for node in &cluster.nodes {
        let mut conn = node.connection().await;
        let stats: String = redis::cmd("INFO")
            .arg("errorstats")
            .query_async(&mut conn)
            .await
            .unwrap();
        count += stats
            .lines()
            .filter_map(|l| l.strip_prefix("errorstat_CROSSSLOT:count="))
            .map(|n| n.trim().parse::<u64>().unwrap())
            .sum::<u64>();
    }
    count
}

/// A call that crosses slots is a programming error, not an outage: through the topology
/// layer's cluster connection it is refused once (the nodes count one `CROSSSLOT`: no retry)
/// and reads as permanent, not as a sign of a failover; so does a script that touches an
/// undeclared key of another slot than the one it named. A cluster of its own: the shared
/// one's tests check that no node ever answered `CROSSSLOT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_crossing_slots_is_refused_once_and_reads_as_permanent_not_as_an_outage() {
    let cluster = &tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let target = Target::Cluster {
        nodes: cluster.addresses(),
        password: None,
    };
    let primary = Primary::open(target, Default::default()).unwrap();
    let mut conn = primary.connection().await.unwrap();
    let before = crossslot_errors(cluster).await;
    let crossing = redis::cmd("EVAL")
        .arg("return 1")
        .arg(2)
        .arg("{a}x")
        .arg("{b}y")
        .query_async::<redis::Value>(&mut conn)
        .await
        .expect_err("two slots in one script");
    assert!(is_permanent(&crossing), "{crossing}");
    assert!(!is_failover_sign(&crossing), "{crossing}");
    assert_eq!(crossslot_errors(cluster).await, before + 1, "asked once");

    let undeclared = redis::cmd("EVAL")
        .arg("return redis.call('GET', ARGV[1])")
        .arg(1)
        .arg("{a}x")
        .arg("{b}y")
        .query_async::<redis::Value>(&mut conn)
        .await
        .expect_err("an undeclared key of another slot");
    assert!(is_permanent(&undeclared), "{undeclared}");
    assert!(!is_failover_sign(&undeclared), "{undeclared}");
}
