//! A Redis Cluster: its connection (built from seed nodes; redis-rs's cluster client finds
//! the rest, sends each command to its slot's primary and follows `MOVED`, `ASK` and
//! failovers), the seed nodes' own clients for subscriptions, and its shape as the nodes
//! report it (`CLUSTER SHARDS`): shards, slots covered, replicas.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionInfo, IntoConnectionInfo, RedisResult, Value};
use serde::Serialize;

use super::renewing::{Connect, Renewing};
use super::Connection;

/// The slots of a Redis Cluster's keyspace.
pub const CLUSTER_SLOTS: u32 = 16384;
/// How long dialling one node may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long one node may take to answer: the store bounds a whole call (with redirects and
/// retries) by its own timeout on top.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// How often redis-rs retries a call (each `MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN` counts
/// one): enough that the store's 2 s bound, not the count, ends a call's wait (48 waits of
/// at least 50 ms), and few enough that redis-rs's wait formula (`factor` ×
/// `exponent_base`^retry, in u64) cannot overflow — at 64 it did, a panic every few seconds
/// in a debug build while every seed node was down.
const RETRIES: u32 = 48;
/// redis-rs's wait formula, its defaults named: `factor` × `exponent_base`^retry ms, then
/// held within `RETRY_WAIT_MS`.
const RETRY_WAIT_FORMULA: (u64, u64) = (10, 2);
/// The wait before a retry after `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN` or `LOADING`, in ms:
/// at least the first, at most the second (redis-rs's default waits 1.28 s at least). A slot
/// group's calls wait on `TRYAGAIN` while its slot moves (docs/operations.md, "Resharding"):
/// a short wait retries them soon after the move ends, well inside the 2 s bound, where
/// 1.28 s made a second retry land at the bound, and a call whose answer comes after it has
/// still been run (a claim made so is only recovered once its lease expires).
const RETRY_WAIT_MS: (u64, u64) = (50, 250);

/// The address of `node` (`host:port`, as the configuration checked) with the password.
fn node_info(node: &str, password: &Option<String>) -> RedisResult<ConnectionInfo> {
    let info = super::tcp_addr(node).into_connection_info()?;
    Ok(match password {
        Some(p) => {
            let settings = info.redis_settings().clone().set_password(p);
            info.set_redis_settings(settings)
        }
        None => info,
    })
}

/// The cluster's connection, opened lazily: nothing is dialled until the first command, so
/// the service starts while the cluster is away and answers 503 until it is back. Replaced
/// by a new one (`connect_once`) whenever it goes silent.
pub(super) fn connect(nodes: &[String], password: &Option<String>) -> RedisResult<Connection> {
    let (nodes, password) = (nodes.to_vec(), password.clone());
    let connect: Connect = Arc::new(move || connect_once(&nodes, &password));
    Ok(Connection::Cluster(Renewing::new(connect)?))
}

/// One cluster connection, opened lazily.
fn connect_once(nodes: &[String], password: &Option<String>) -> RedisResult<ClusterConnection> {
    let seeds = nodes
        .iter()
        .map(|n| node_info(n, password))
        .collect::<RedisResult<Vec<_>>>()?;
    let mut builder = ClusterClientBuilder::new(seeds)
        .connection_timeout(CONNECT_TIMEOUT)
        .response_timeout(RESPONSE_TIMEOUT)
        .retries(RETRIES)
        .retry_wait_formula(RETRY_WAIT_FORMULA.0, RETRY_WAIT_FORMULA.1)
        .min_retry_wait(RETRY_WAIT_MS.0)
        .max_retry_wait(RETRY_WAIT_MS.1);
    if let Some(p) = password {
        builder = builder.password(p);
    }
    let client = builder.build()?;
    Ok(client.get_pending_async_connection_with_config(Default::default()))
}

/// A client per seed node, and which one subscriptions use now.
#[derive(Default)]
pub(super) struct Seeds {
    clients: Vec<redis::Client>,
    next: AtomicUsize,
}

impl Seeds {
    pub(super) fn new(nodes: &[String], password: &Option<String>) -> RedisResult<Self> {
        let clients = nodes
            .iter()
            .map(|n| redis::Client::open(node_info(n, password)?))
            .collect::<RedisResult<Vec<_>>>()?;
        Ok(Self {
            clients,
            next: AtomicUsize::new(0),
        })
    }

    pub(super) fn first(&self) -> redis::Client {
        self.clients[0].clone()
    }

    /// The node a subscription goes to now (`None` when Redis is not a cluster).
    pub(super) fn current(&self) -> Option<redis::Client> {
        let n = self.clients.len();
        (n > 0).then(|| self.clients[self.next.load(Ordering::Relaxed) % n].clone())
    }

    /// The node in use failed: the next subscription goes to the next one.
    pub(super) fn skip(&self) {
        self.next.fetch_add(1, Ordering::Relaxed);
    }
}

/// A Redis Cluster as its nodes report it (`CLUSTER SHARDS`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ClusterShape {
    /// Slots (of 16384) a healthy primary serves: below 16384, part of the keyspace cannot be
    /// reached until a replica takes over or the slots are assigned.
    pub slots_covered: u32,
    /// One entry per shard with a healthy primary.
    pub shards: Vec<Shard>,
}

/// One shard: a primary, the slots it serves and its replicas.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Shard {
    /// The primary's `host:port`.
    pub primary: String,
    /// How many slots it serves.
    pub slots: u32,
    /// Its healthy replicas.
    pub replicas: usize,
    /// How far behind the furthest of them is, in bytes of the replication stream.
    pub max_replica_lag_bytes: u64,
}

impl ClusterShape {
    /// Replicas over every shard.
    pub fn replicas(&self) -> usize {
        self.shards.iter().map(|s| s.replicas).sum()
    }

    /// Reads `CLUSTER SHARDS` (Redis 7) from any node of the cluster.
    pub async fn read(conn: &mut Connection) -> RedisResult<Self> {
        let answer: Value = redis::cmd("CLUSTER")
            .arg("SHARDS")
            .query_async(conn)
            .await?;
        Self::parse(&answer).ok_or_else(|| {
            (
                redis::ErrorKind::Parse,
                "CLUSTER SHARDS answered in an unknown shape",
            )
                .into()
        })
    }

    /// The shape from a `CLUSTER SHARDS` answer (RESP2 flat pairs or RESP3 maps). Only nodes
    /// whose health is `online` count.
    fn parse(answer: &Value) -> Option<Self> {
        let mut shards = Vec::new();
        let Value::Array(entries) = answer else {
            return None;
        };
        for entry in entries {
            let shard = pairs(entry)?;
            let nodes = match shard.get("nodes")? {
                Value::Array(nodes) => nodes.iter().map(pairs).collect::<Option<Vec<_>>>()?,
                _ => return None,
            };
            let online = |n: &&HashMap<String, &Value>| text(n.get("health").copied()) == "online";
            let role = |n: &&HashMap<String, &Value>, r: &str| text(n.get("role").copied()) == r;
            let Some(primary) = nodes.iter().filter(online).find(|n| role(n, "master")) else {
                continue;
            };
            let offset = |n: &HashMap<String, &Value>| number(n.get("replication-offset").copied());
            let replicas: Vec<u64> = nodes
                .iter()
                .filter(online)
                .filter(|n| role(n, "replica"))
                .map(&offset)
                .collect();
            shards.push(Shard {
                primary: format!(
                    "{}:{}",
                    text(primary.get("ip").copied()),
                    number(primary.get("port").copied())
                ),
                slots: slot_count(shard.get("slots")?)?,
                replicas: replicas.len(),
                max_replica_lag_bytes: replicas
                    .iter()
                    .map(|r| offset(primary).saturating_sub(*r))
                    .max()
                    .unwrap_or(0),
            });
        }
        shards.sort_by(|a, b| a.primary.cmp(&b.primary));
        Some(Self {
            slots_covered: shards.iter().map(|s| s.slots).sum(),
            shards,
        })
    }
}

/// A RESP2 flat `[name, value, …]` array or a RESP3 map, by name.
fn pairs(v: &Value) -> Option<HashMap<String, &Value>> {
    match v {
        Value::Array(flat) => flat
            .chunks(2)
            .map(|kv| Some((text(kv.first()), kv.get(1)?)))
            .collect(),
        Value::Map(map) => Some(map.iter().map(|(k, v)| (text(Some(k)), v)).collect()),
        _ => None,
    }
}

fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::SimpleString(s)) => s.clone(),
        Some(Value::Int(n)) => n.to_string(),
        _ => String::new(),
    }
}

fn number(v: Option<&Value>) -> u64 {
    match v {
        Some(Value::Int(n)) => u64::try_from(*n).unwrap_or(0),
        other => text(other).parse().unwrap_or(0),
    }
}

/// The slots of a shard's `[start, end, start, end, …]` ranges (inclusive).
fn slot_count(ranges: &Value) -> Option<u32> {
    let Value::Array(bounds) = ranges else {
        return None;
    };
    bounds
        .chunks(2)
        .map(|r| {
            let start = number(r.first());
            let end = number(r.get(1));
            u32::try_from(end.checked_sub(start)? + 1).ok()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// redis-rs computes every retry's wait as `factor` × `exponent_base`^retry in u64, up to
    /// the last retry: past u64 that is a panic in a debug build (RETRIES was 64).
    #[test]
    fn the_last_retry_s_wait_fits_redis_rs_s_formula_and_the_waits_outlast_the_store_s_bound() {
        let (factor, base) = RETRY_WAIT_FORMULA;
        let last = (0..=RETRIES).try_fold(0u64, |_, retry| {
            base.checked_pow(retry).and_then(|p| p.checked_mul(factor))
        });
        assert!(
            last.is_some(),
            "{RETRIES} retries overflow the wait formula"
        );
        let least_waited = Duration::from_millis(RETRY_WAIT_MS.0) * RETRIES;
        assert!(least_waited > Duration::from_secs(2), "{least_waited:?}");
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn node(port: i64, role: &str, offset: i64, health: &str) -> Value {
        Value::Array(vec![
            bulk("ip"),
            bulk("127.0.0.1"),
            bulk("port"),
            Value::Int(port),
            bulk("role"),
            bulk(role),
            bulk("replication-offset"),
            Value::Int(offset),
            bulk("health"),
            bulk(health),
        ])
    }

    fn shard(slots: &[i64], nodes: Vec<Value>) -> Value {
        Value::Array(vec![
            bulk("slots"),
            Value::Array(slots.iter().map(|s| Value::Int(*s)).collect()),
            bulk("nodes"),
            Value::Array(nodes),
        ])
    }

    #[test]
    fn a_cluster_shape_counts_healthy_shards_their_slots_and_replicas() {
        let answer = Value::Array(vec![
            shard(
                &[0, 5460],
                vec![
                    node(7001, "master", 100, "online"),
                    node(7004, "replica", 90, "online"),
                ],
            ),
            shard(
                &[5461, 10922, 16000, 16383],
                vec![
                    node(7002, "master", 50, "online"),
                    node(7005, "replica", 0, "fail"),
                ],
            ),
            // A failed primary whose replica has not taken over: its slots are not covered.
            shard(
                &[10923, 15999],
                vec![
                    node(7003, "master", 7, "fail"),
                    node(7006, "replica", 7, "online"),
                ],
            ),
        ]);
        let shape = ClusterShape::parse(&answer).expect("a well-formed answer");
        assert_eq!(shape.slots_covered, 5461 + 5462 + 384);
        assert_eq!(shape.shards.len(), 2);
        assert_eq!(shape.replicas(), 1);
        assert_eq!(
            shape.shards[0],
            Shard {
                primary: "127.0.0.1:7001".into(),
                slots: 5461,
                replicas: 1,
                max_replica_lag_bytes: 10
            }
        );
        assert!(ClusterShape::parse(&bulk("nonsense")).is_none());
    }
}
