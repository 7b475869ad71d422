//! A loopback Redis Cluster this test binary owns: three primaries and a replica of each
//! (`redis-server --cluster-enabled yes`, joined by `redis-cli --cluster create
//! --cluster-replicas 1`), started once per binary by the first test that asks and killed
//! with the process by the servers' watchdogs.

use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{free_port, run_to_success, RedisServer};

/// A node's cluster bus listens on its port + 10000, so a node's port must leave room.
const BUS_PORT_OFFSET: u16 = 10_000;
/// Primaries of the test cluster; each gets one replica.
pub const CLUSTER_PRIMARIES: usize = 3;
/// How long a node may go unanswered before its replica is promoted, in a cluster whose test
/// kills a primary: short, so its failover takes seconds.
const FAILOVER_NODE_TIMEOUT_MS: u64 = 1000;
/// The same for every other cluster: long enough that a node starved of CPU on a loaded
/// machine (a whole suite's Redis processes on two cores) is not failed over under a test
/// that expects none — a create then found no answer within the store's 2 s bound (clean-clone
/// CI, the 1,000-tenant test, at load ~10).
const NODE_TIMEOUT_MS: u64 = 10_000;
/// Longest the cluster may take to form (every node agrees, every replica in sync).
const FORMED_WITHIN: Duration = Duration::from_secs(30);

/// Six `redis-server` nodes joined into one cluster on loopback ports.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts six nodes, joins them (three primaries, a replica each) and waits until every
    /// node says the cluster is `ok` and knows all six.
    pub fn start() -> Self {
        Self::start_with(NODE_TIMEOUT_MS)
    }

    /// [`RedisCluster::start`], for a test that kills a primary: its replica takes over
    /// within seconds.
    pub fn start_failing_over_fast() -> Self {
        Self::start_with(FAILOVER_NODE_TIMEOUT_MS)
    }

    fn start_with(node_timeout_ms: u64) -> Self {
        let nodes: Vec<RedisServer> = (0..CLUSTER_PRIMARIES * 2)
            .map(|_| {
                RedisServer::start_on(
                    cluster_port(),
                    true,
                    &format!(
                        "--cluster-enabled yes --cluster-config-file nodes.conf \
                         --cluster-node-timeout {node_timeout_ms}"
                    ),
                )
            })
            .collect();
        let cluster = Self { nodes };
        let mut create = Command::new("redis-cli");
        create
            .args(["--cluster", "create"])
            .args(cluster.addresses());
        create.args(["--cluster-replicas", "1", "--cluster-yes"]);
        // redis-tools is installed by .ci/run.
        run_to_success(&mut create, "redis-cli --cluster create");
        cluster.wait_until("the cluster has formed", FORMED_WITHIN, |c| c.formed());
        cluster
    }

    /// `host:port` of every node.
    pub fn addresses(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect()
    }

    /// `REDIS_CLUSTER_NODES` for the service: every node.
    pub fn nodes_env(&self) -> String {
        self.addresses().join(",")
    }

    /// Whether every node reports `cluster_state:ok`, knows all six nodes and three
    /// primaries, and sees every node healthy (a replica reads `loading` until its first
    /// sync is done).
    fn formed(&self) -> bool {
        self.nodes.iter().all(|n| {
            let info = cluster_info(n.port).unwrap_or_default();
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(&format!("{name}:")))
                    .map(str::trim)
                    .unwrap_or("")
                    .to_owned()
            };
            field("cluster_state") == "ok"
                && field("cluster_known_nodes") == (CLUSTER_PRIMARIES * 2).to_string()
                && field("cluster_size") == CLUSTER_PRIMARIES.to_string()
                && shards_healthy(n.port)
        })
    }

    /// The primaries now, by port: each one's port and node id (`CLUSTER MYID`).
    pub fn primaries(&self) -> Vec<(u16, String)> {
        self.nodes
            .iter()
            .filter(|n| super::role(n.port).is_some_and(|r| r.contains("master")))
            .map(|n| (n.port, node_id(n.port)))
            .collect()
    }

    /// Moves `slots` slots from the primaries `from` (node ids, each giving its share) to the
    /// primary `to` with `redis-cli --cluster reshard`, key by key through `MIGRATE`, as an
    /// operator does, and waits until every node agrees again (`cluster_state:ok`).
    pub fn reshard(&self, from: &[String], to: &str, slots: usize) {
        let mut reshard = Command::new("redis-cli");
        reshard
            .args(["--cluster", "reshard", &self.addresses()[0]])
            .args(["--cluster-from", &from.join(",")])
            .args(["--cluster-to", to])
            .args(["--cluster-slots", &slots.to_string()])
            .arg("--cluster-yes");
        run_to_success(&mut reshard, "redis-cli --cluster reshard");
        self.wait_until("the cluster agrees after the reshard", FORMED_WITHIN, |c| {
            c.formed()
        });
    }

    /// How many slots the primary with node id `id` serves, as the first node sees it.
    pub fn slots_of(&self, id: &str) -> usize {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.nodes[0].port))
            .expect("a loopback URL");
        let mut conn = client
            .get_connection_with_timeout(Duration::from_secs(1))
            .expect("a cluster node answers");
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut conn)
            .expect("CLUSTER NODES");
        let line = nodes
            .lines()
            .find(|l| l.starts_with(id))
            .expect("the node is known");
        line.split(' ')
            .skip(8)
            .map(|range| match range.split_once('-') {
                Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
                None => 1,
            })
            .sum()
    }

    /// Polls `condition` every 50 ms until it holds, failing the test after `within`.
    pub fn wait_until(&self, what: &str, within: Duration, condition: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + within;
        while !condition(self) {
            assert!(Instant::now() < deadline, "{what}: not within {within:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The node id of the node on `port` (`CLUSTER MYID`).
fn node_id(port: u16) -> String {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("a loopback URL");
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(1))
        .expect("a cluster node answers");
    redis::cmd("CLUSTER")
        .arg("MYID")
        .query(&mut conn)
        .expect("CLUSTER MYID")
}

/// `CLUSTER INFO` of the node on `port`.
fn cluster_info(port: u16) -> Option<String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(1))
        .ok()?;
    redis::cmd("CLUSTER").arg("INFO").query(&mut conn).ok()
}

/// Whether the node on `port` sees every node of every shard `online` (`CLUSTER SHARDS`).
fn shards_healthy(port: u16) -> bool {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) else {
        return false;
    };
    let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_secs(1)) else {
        return false;
    };
    let shards: redis::RedisResult<redis::Value> =
        redis::cmd("CLUSTER").arg("SHARDS").query(&mut conn);
    shards.is_ok_and(|s| {
        let words = format!("{s:?}");
        words.matches("online").count() == CLUSTER_PRIMARIES * 2
    })
}

/// A free loopback port whose bus port (+10000) is free too.
fn cluster_port() -> u16 {
    loop {
        let port = free_port();
        if port <= u16::MAX - BUS_PORT_OFFSET
            && std::net::TcpListener::bind(("127.0.0.1", port + BUS_PORT_OFFSET)).is_ok()
        {
            return port;
        }
    }
}

static SHARED_CLUSTER: OnceLock<RedisCluster> = OnceLock::new();

/// The cluster this test binary shares, started by the first test that asks (on a blocking
/// thread: forming it takes a few seconds).
pub async fn shared_cluster() -> &'static RedisCluster {
    if let Some(c) = SHARED_CLUSTER.get() {
        return c;
    }
    tokio::task::spawn_blocking(|| SHARED_CLUSTER.get_or_init(RedisCluster::start))
        .await
        .expect("the cluster starts")
}

/// A job store on the cluster this test binary shares, in a namespace of its own (`settings`'
/// prefix). Forms the cluster first if no test has (blocking this worker thread meanwhile: the
/// tests run on a multi-threaded runtime).
pub fn cluster_job_store(
    settings: catalog_jobs::jobs::store::StoreSettings,
) -> std::sync::Arc<dyn catalog_jobs::jobs::store::JobStore> {
    let cluster = tokio::task::block_in_place(|| SHARED_CLUSTER.get_or_init(RedisCluster::start));
    let target = catalog_jobs::topology::Target::Cluster {
        nodes: cluster.addresses(),
        password: None,
    };
    std::sync::Arc::new(
        catalog_jobs::jobs::redis::RedisStore::open_target(target, settings)
            .expect("the cluster's addresses parse"),
    )
}
