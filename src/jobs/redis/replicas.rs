//! Whether the primaries have the replicas `REDIS_MIN_REPLICAS_ACK` asks for, known before a
//! create writes anything: a create that `WAIT` could not confirm would have made a job the
//! client is told failed, and it would run all the same.
//!
//! The count comes from `ROLE` (`CLUSTER SHARDS` on a cluster: the shard with the fewest),
//! read at most once every [`REPLICAS_REFRESH`] by one caller while the others wait for its
//! answer; a failed read is kept as long, so an outage costs one slow call a second, not
//! one a request. A replica lost after the read still fails the `WAIT` (`NotReplicated`),
//! and that failure drops the count so the next create reads it again.

use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use super::super::store::{too_few, StoreError};
use super::RedisStore;

/// How long a read count of connected replicas answers creates before it is read again.
pub const REPLICAS_REFRESH: Duration = Duration::from_secs(1);

/// The last count read (or why it could not be), and when.
#[derive(Default)]
pub struct ReplicaCount(Mutex<Option<(Instant, Result<usize, StoreError>)>>);

impl ReplicaCount {
    /// Forgets the count: the next create reads it again.
    pub async fn forget(&self) {
        *self.0.lock().await = None;
    }
}

impl RedisStore {
    /// `TooFewReplicas` when some primary has fewer replicas connected than
    /// `min_replicas_ack` (as read at most [`REPLICAS_REFRESH`] ago); nothing to check
    /// without it.
    pub(super) async fn replicas_enough(&self) -> Result<(), StoreError> {
        let wanted = self.settings.min_replicas_ack;
        if wanted == 0 {
            return Ok(());
        }
        let mut seen = self.replicas.0.lock().await;
        let connected = match &*seen {
            Some((at, count)) if at.elapsed() < REPLICAS_REFRESH => count.clone(),
            _ => {
                let count = self
                    .read_topology()
                    .await
                    .map(|topology| topology.map_or(0, |t| t.fewest_replicas()));
                *seen = Some((Instant::now(), count.clone()));
                count
            }
        };
        drop(seen);
        too_few(connected?, wanted)
    }
}
