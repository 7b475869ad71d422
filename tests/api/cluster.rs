//! Redis Cluster mode with real processes: the loopback cluster of `helpers::RedisCluster`
//! (three primaries, a replica each) and the built binary reaching it through
//! `REDIS_CLUSTER_NODES`.

use std::time::Duration;

use serde_json::Value;

use crate::helpers::{shared_cluster, Service, CLUSTER_PRIMARIES};

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
