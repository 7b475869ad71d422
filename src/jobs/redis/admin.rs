//! What an operator asks of the store: whether Redis answers, how it is set up (eviction,
//! persistence) and where its data lives (the primary and its replicas, from `ROLE`; a
//! cluster's shards, from `CLUSTER SHARDS`).
//!
//! Read only; a Redis that hides its configuration (managed services) is not an error.

use super::super::store::{StoreError, Topology};
use super::RedisStore;
use crate::topology::{ClusterShape, Connection};

impl RedisStore {
    pub(super) async fn ping_primary(&self) -> Result<(), StoreError> {
        let mut conn = self.connection().await?;
        let _: String = self
            .bounded(redis::cmd("PING").query_async(&mut conn))
            .await?;
        Ok(())
    }

    /// Refuses with Redis's own `OOM` words while it is full (`full`, from `INFO memory`,
    /// on every primary of a cluster): one read, so a probe never writes to find out.
    /// A Redis that will not answer `INFO` is not called full.
    pub(super) async fn read_writable(&self) -> Result<(), StoreError> {
        let mut conn = self.connection().await?;
        let Ok(info) = self
            .bounded(
                redis::cmd("INFO")
                    .arg("memory")
                    .query_async::<redis::Value>(&mut conn),
            )
            .await
        else {
            return Ok(());
        };
        match info_texts(info).iter().find_map(|text| full(text)) {
            Some(why) => Err(StoreError::Unavailable(why)),
            None => Ok(()),
        }
    }

    pub(super) async fn config_warnings(&self) -> Result<Vec<String>, StoreError> {
        let mut conn = self.connection().await?;
        let policy: Vec<String> = self
            .bounded(
                redis::cmd("CONFIG")
                    .arg("GET")
                    .arg("maxmemory-policy")
                    .query_async(&mut conn),
            )
            .await
            // CONFIG may be disabled on managed Redis; that is not a reason to refuse work.
            .unwrap_or_default();
        Ok(match policy.get(1).map(String::as_str) {
            Some("noeviction") | None => Vec::new(),
            Some(other) => vec![format!(
                "Redis maxmemory-policy is `{other}`: under memory pressure it may evict live \
                 job locks and records (they all carry a TTL); set it to `noeviction`"
            )],
        })
    }

    pub(super) async fn read_topology(&self) -> Result<Option<Topology>, StoreError> {
        let mut conn = self.connection().await?;
        if let Connection::Cluster(_) = conn {
            let shape = self.bounded(ClusterShape::read(&mut conn)).await?;
            return Ok(Some(Topology {
                via: self.primary.target().describe(),
                primary: shape
                    .shards
                    .iter()
                    .map(|s| s.primary.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                replicas: shape.replicas(),
                max_replica_lag_bytes: shape
                    .shards
                    .iter()
                    .map(|s| s.max_replica_lag_bytes)
                    .max()
                    .unwrap_or(0),
                min_replicas_ack: self.settings.min_replicas_ack,
                cluster: Some(shape),
            }));
        }
        let role: redis::Value = self
            .bounded(redis::cmd("ROLE").query_async(&mut conn))
            .await?;
        let (offset, replicas) = primary_role(role)?;
        Ok(Some(Topology {
            via: self.primary.target().describe(),
            primary: self.primary.address().unwrap_or_default(),
            replicas: replicas.len(),
            max_replica_lag_bytes: replicas
                .iter()
                .map(|acked| offset.saturating_sub(*acked))
                .max()
                .unwrap_or(0),
            min_replicas_ack: self.settings.min_replicas_ack,
            cluster: None,
        }))
    }

    /// AOF on, or at least one RDB save point. A Redis that answers neither (CONFIG renamed
    /// or disabled, as on some managed services) cannot be judged: `None`.
    pub(super) async fn read_persists(&self) -> Result<Option<bool>, StoreError> {
        let Ok(mut conn) = self.connection().await else {
            return Ok(None);
        };
        let get = |name: &'static str| {
            let mut cmd = redis::cmd("CONFIG");
            cmd.arg("GET").arg(name);
            cmd
        };
        let Ok(appendonly) = self
            .bounded(get("appendonly").query_async::<Vec<String>>(&mut conn))
            .await
        else {
            return Ok(None);
        };
        let Ok(save) = self
            .bounded(get("save").query_async::<Vec<String>>(&mut conn))
            .await
        else {
            return Ok(None);
        };
        let aof = appendonly.get(1).map(|v| v == "yes");
        let rdb = save.get(1).map(|v| !v.trim().is_empty());
        Ok(match (aof, rdb) {
            (Some(aof), Some(rdb)) => Some(aof || rdb),
            _ => None,
        })
    }
}

/// `INFO`'s text: one node's, or each primary's on a cluster (a map of node to text).
fn info_texts(info: redis::Value) -> Vec<String> {
    match info {
        redis::Value::Map(nodes) => nodes
            .into_iter()
            .flat_map(|(_, text)| info_texts(text))
            .collect(),
        other => redis::from_redis_value::<String>(other)
            .into_iter()
            .collect(),
    }
}

/// Whether an `INFO memory` says Redis refuses writes now: `used_memory` less
/// `mem_not_counted_for_evict` (replication and AOF buffers) above `maxmemory`, under
/// `noeviction`, which is Redis's own test before it answers `OOM` (any other policy evicts
/// instead). Its reason carries the `OOM` reply's words, so it reads as that reply does.
fn full(info: &str) -> Option<String> {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
    };
    let number = |name: &str| field(name).and_then(|v| v.parse::<u64>().ok());
    let (used, max) = (number("used_memory")?, number("maxmemory")?);
    let counted = used.saturating_sub(number("mem_not_counted_for_evict").unwrap_or(0));
    (max > 0 && counted > max && field("maxmemory_policy") == Some("noeviction")).then(|| {
        format!(
            "OOM command not allowed when used memory > 'maxmemory' (used_memory {used}, \
             maxmemory {max}, noeviction)"
        )
    })
}

/// Decodes a primary's `ROLE`: `["master", offset, [[ip, port, acked offset], …]]` into its
/// offset and each replica's acknowledged offset. A node that is not a primary is an error.
fn primary_role(role: redis::Value) -> Result<(u64, Vec<u64>), StoreError> {
    type Role = (String, u64, Vec<(String, String, String)>);
    let (kind, offset, replicas): Role = redis::from_redis_value(role)
        .map_err(|_| StoreError::Unavailable("the node is not a primary".into()))?;
    if kind != "master" {
        return Err(StoreError::Unavailable(format!("the node is a {kind}")));
    }
    Ok((
        offset,
        replicas
            .iter()
            .map(|(_, _, acked)| acked.parse().unwrap_or(0))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::full;

    const INFO: &str = "# Memory\r\nused_memory:2000000\r\nused_memory_human:1.91M\r\n\
        maxmemory:1000000\r\nmaxmemory_human:976.56K\r\nmaxmemory_policy:noeviction\r\n\
        mem_not_counted_for_evict:0\r\n";

    #[test]
    fn a_redis_over_maxmemory_under_noeviction_is_full_and_says_oom() {
        let why = full(INFO).expect("full");
        assert!(
            why.starts_with("OOM command not allowed when used memory"),
            "{why}"
        );
        assert!(why.contains("used_memory 2000000"), "{why}");
    }

    #[test]
    fn no_limit_another_policy_or_room_left_is_not_full() {
        assert_eq!(
            full(&INFO.replace("maxmemory:1000000", "maxmemory:0")),
            None
        );
        assert_eq!(full(&INFO.replace("noeviction", "allkeys-lru")), None);
        assert_eq!(
            full(&INFO.replace("maxmemory:1000000", "maxmemory:3000000")),
            None
        );
        let buffers = INFO.replace("evict:0", "evict:1500000");
        assert_eq!(full(&buffers), None, "replication buffers are not counted");
        assert_eq!(full("# Memory\r\n"), None, "an INFO without the fields");
    }
}
