//! `Connection`: the one connection type every Redis user holds, whichever way Redis is
//! reached: one node's multiplexed connection, or a cluster's, which sends each command to
//! the node holding its key's slot and follows `MOVED`/`ASK` and failovers by itself (and is
//! replaced when it goes silent: `renewing`).

use futures_util::FutureExt;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::renewing::Renewing;

/// A cheap-to-clone, multiplexed connection to the store's Redis.
#[derive(Clone)]
pub enum Connection {
    /// One Redis node (a fixed URL, or the primary the sentinels name).
    Single(ConnectionManager),
    /// A Redis Cluster: commands go to the primary of their key's slot.
    Cluster(Renewing),
}

impl Connection {
    /// `WAIT replicas timeout_ms` on the node that holds `key`, after a write of `key` over
    /// this connection: answers how many replicas acknowledged it. On a cluster the write
    /// and the `WAIT` go over the same node's connection, so the `WAIT` covers the write (unless
    /// that connection was replaced between the two, as silent or broken: then it counts
    /// replicas that may not have the write yet); a `WAIT` is never sent again on a new one.
    pub async fn wait_replicas(
        &mut self,
        key: &str,
        replicas: u32,
        timeout_ms: u64,
    ) -> RedisResult<u32> {
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(timeout_ms);
        match self {
            Connection::Single(conn) => wait.query_async(conn).await,
            Connection::Cluster(conn) => {
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::with_key(key, SlotAddr::Master),
                ));
                let answer = conn
                    .call_here(|mut c| {
                        let (wait, route) = (wait.clone(), route.clone());
                        async move { c.route_command(wait, route).await }.boxed()
                    })
                    .await?;
                redis::from_redis_value(answer).map_err(Into::into)
            }
        }
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(conn) => conn.req_packed_command(cmd),
            Connection::Cluster(conn) => conn
                .call(move |mut c| async move { c.req_packed_command(cmd).await }.boxed())
                .boxed(),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(conn) => conn
                .call(move |mut c| {
                    async move { c.req_packed_commands(pipeline, offset, count).await }.boxed()
                })
                .boxed(),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(conn) => conn.get_db(),
            // A cluster has one database.
            Connection::Cluster(_) => 0,
        }
    }
}
