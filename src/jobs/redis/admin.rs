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
