//! The store's reads: a job, a tenant's listing, the active jobs, a timeline and the queue's
//! make-up, each one pipelined round trip. A read that judges staleness takes Redis's `TIME`
//! in the same pipeline, so every replica judges on the same clock.

use std::collections::HashMap;

use redis::AsyncCommands;

use super::super::store::{StoreError, QUEUE_SAMPLE};
use super::super::timeline::{EventId, TimelineEvent};
use super::super::{JobId, Kind, Snapshot, Status, TenantId};
use super::record::Hash;
use super::scripts;
use super::RedisStore;
use crate::topology::Connection;

fn time_ms(t: &(u64, u64)) -> u64 {
    t.0 * 1000 + t.1 / 1000
}

impl RedisStore {
    /// The jobs named by `raw` ids, as read now on the store's clock (one pipeline). An
    /// entry that is not a job id was not written by this service, and a job whose hash
    /// expired before its index entry is gone: both are skipped.
    async fn snapshots(
        &self,
        conn: &mut Connection,
        raw: &[String],
    ) -> Result<Vec<Snapshot>, StoreError> {
        let ids: Vec<JobId> = raw.iter().filter_map(|r| JobId::parse(r).ok()).collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.hgetall(self.keys.job(id));
        }
        pipe.cmd("TIME");
        let mut values: Vec<redis::Value> = self.bounded(pipe.query_async(conn)).await?;
        let time: (u64, u64) = redis::from_redis_value(
            values
                .pop()
                .ok_or_else(|| StoreError::Corrupt("no TIME".into()))?,
        )
        .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let mut out = Vec::with_capacity(values.len());
        for (id, v) in ids.iter().zip(values) {
            let hash: HashMap<String, String> =
                redis::from_redis_value(v).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            if let Some(s) = Hash::new(hash).snapshot(id, time_ms(&time), &self.settings)? {
                out.push(s);
            }
        }
        Ok(out)
    }

    pub(super) async fn read_job(&self, id: &JobId) -> Result<Option<Snapshot>, StoreError> {
        if let Some(hit) = self.finished.get(id) {
            return Ok(Some(hit));
        }
        let mut conn = self.connection().await?;
        let (hash, time): (HashMap<String, String>, (u64, u64)) = self
            .bounded(
                redis::pipe()
                    .hgetall(self.keys.job(id))
                    .cmd("TIME")
                    .query_async(&mut conn),
            )
            .await?;
        let snapshot = Hash::new(hash).snapshot(id, time_ms(&time), &self.settings)?;
        if let Some(s) = &snapshot {
            self.finished.offer(s);
        }
        Ok(snapshot)
    }

    pub(super) async fn read_recent(
        &self,
        tenant: &TenantId,
        limit: usize,
    ) -> Result<Vec<Snapshot>, StoreError> {
        let mut conn = self.connection().await?;
        let stop = limit.max(1) as isize - 1;
        let raw: Vec<String> = self
            .bounded(conn.lrange(self.keys.tenant(tenant), 0, stop))
            .await?;
        self.snapshots(&mut conn, &raw).await
    }

    pub(super) async fn read_active(&self) -> Result<Vec<Snapshot>, StoreError> {
        let mut conn = self.connection().await?;
        let (mut raw, running): (Vec<String>, Vec<String>) = self
            .bounded(
                redis::pipe()
                    .lrange(self.keys.queue(), 0, -1)
                    .zrange(self.keys.leases(), 0, -1)
                    .query_async(&mut conn),
            )
            .await?;
        raw.extend(running);
        // A job put back at the head of the queue may still have its lease entry.
        raw.sort_unstable();
        raw.dedup();
        let mut jobs = self.snapshots(&mut conn, &raw).await?;
        jobs.retain(|s| s.status.is_active() || s.status == Status::Lost);
        Ok(jobs)
    }

    /// The timeline lives in the job's record: one HGETALL.
    pub(super) async fn read_timeline(
        &self,
        id: &JobId,
        after: Option<EventId>,
    ) -> Result<Vec<TimelineEvent>, StoreError> {
        let mut conn = self.connection().await?;
        let hash: HashMap<String, String> = self.bounded(conn.hgetall(self.keys.job(id))).await?;
        Hash::new(hash).timeline(id, after)
    }

    pub(super) async fn read_queued_by_kind(&self) -> Result<Vec<(Kind, u64)>, StoreError> {
        let mut inv = scripts::invocation(&scripts::QUEUED, &self.settings);
        inv.arg(QUEUE_SAMPLE);
        let mut conn = self.connection().await?;
        let flat: Vec<(String, u64)> = self.bounded(inv.invoke_async(&mut conn)).await?;
        // A kind this build does not parse (another version's) is not this process's to count.
        Ok(flat
            .into_iter()
            .filter_map(|(kind, n)| Kind::parse(&kind).ok().map(|k| (k, n)))
            .collect())
    }
}
