//! The store's reads: a job, a tenant's listing, the active jobs, a timeline, the queue's
//! make-up and the overview's buckets and processes. A read within one slot group is one
//! pipeline; a read across groups (the active jobs, the cross-tenant index and picker, the
//! overview, jobs named by id) is one pipeline a group, all in flight together, merged here
//! — never a scan of keys. A read that judges staleness does so on Redis's clock, so every
//! replica judges on the same clock: `TIME` alongside when this process has not read it in
//! the last second (`clock.rs`).

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use futures_util::future::try_join_all;
use redis::AsyncCommands;

use super::super::browse::{self, Position};
use super::super::keys::Group;
use super::super::pipeline::{self, StepRef};
use super::super::stats::{self, minute_of, Beat, Overview, Process, DAY_MINUTES};
use super::super::store::{StoreError, QUEUE_SAMPLE};
use super::super::timeline::{EventId, TimelineEvent};
use super::super::{now_ms, JobId, Kind, Snapshot, Status, TenantId};
use super::record::{Field, Hash};
use super::RedisStore;
use crate::topology::Connection;

fn time_ms(t: &(u64, u64)) -> u64 {
    t.0 * 1000 + t.1 / 1000
}

/// A reply that does not read as the type asked for.
fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

impl RedisStore {
    /// The jobs named by `raw` ids, as read now on the store's clock (one pipeline; a second
    /// one reads the steps of the pipelines among them, which they are composed from). An
    /// entry that is not a job id was not written by this service, and a job whose hash
    /// expired before its index entry is gone: both are skipped.
    async fn snapshots(
        &self,
        conn: &mut Connection,
        raw: &[String],
    ) -> Result<Vec<Snapshot>, StoreError> {
        let ids: Vec<JobId> = raw.iter().filter_map(|r| JobId::parse(r).ok()).collect();
        let (read, now) = self.hashes(conn, &ids).await?;
        let steps: Vec<JobId> = read
            .iter()
            .flat_map(|(_, refs)| refs.iter().flatten().map(|r| r.job_id))
            .collect();
        if steps.is_empty() {
            return Ok(read.into_iter().map(|(s, _)| s).collect());
        }
        let (step_jobs, _) = self.hashes(conn, &steps).await?;
        let by_id: HashMap<JobId, Snapshot> =
            step_jobs.into_iter().map(|(s, _)| (s.job_id, s)).collect();
        Ok(read
            .into_iter()
            .map(|(s, refs)| match refs {
                Some(refs) => {
                    let jobs: Vec<Option<Snapshot>> =
                        refs.iter().map(|r| by_id.get(&r.job_id).cloned()).collect();
                    pipeline::compose(s, &refs, &jobs, now)
                }
                None => s,
            })
            .collect())
    }

    /// The jobs' hashes as each reads alone (a pipeline with its steps' references, not yet
    /// composed), and the store's time: one pipeline of `HGETALL`s for each group the ids
    /// name (one, for a tenant's jobs), with `TIME` only when the store's clock was not read
    /// in the last second (`clock.rs`).
    async fn hashes(
        &self,
        conn: &mut Connection,
        ids: &[JobId],
    ) -> Result<(Vec<(Snapshot, Option<Vec<StepRef>>)>, u64), StoreError> {
        let mut groups: BTreeMap<Group, Vec<&JobId>> = BTreeMap::new();
        for id in ids {
            groups
                .entry(Group::of_job_or_first(id))
                .or_default()
                .push(id);
        }
        let known = self.clock.now_ms();
        if let (Some(now), true) = (known, ids.is_empty()) {
            return Ok((Vec::new(), now));
        }
        let sent = Instant::now();
        let reads = groups.values().map(|ids| {
            let mut pipe = redis::pipe();
            for id in ids {
                pipe.hgetall(self.keys.job(id));
            }
            let mut conn = conn.clone();
            async move {
                let values: Vec<redis::Value> = self.bounded(pipe.query_async(&mut conn)).await?;
                Ok::<_, StoreError>(ids.iter().copied().zip(values).collect::<Vec<_>>())
            }
        });
        let time = async {
            if known.is_some() {
                return Ok(None);
            }
            let mut conn = conn.clone();
            let time: (u64, u64) = self
                .bounded(redis::cmd("TIME").query_async(&mut conn))
                .await?;
            Ok::<_, StoreError>(Some(time))
        };
        let (read, time) = futures_util::future::try_join(try_join_all(reads), time).await?;
        let now = match (known, time) {
            (Some(now), _) => now,
            (None, Some(time)) => {
                let now = time_ms(&time);
                self.clock.learn(sent, now);
                now
            }
            (None, None) => return Err(StoreError::Corrupt("no TIME".into())),
        };
        let mut values: HashMap<&JobId, redis::Value> = read.into_iter().flatten().collect();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(v) = values.remove(id) else {
                continue;
            };
            let hash: HashMap<String, String> =
                redis::from_redis_value(v).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let hash = Hash::new(hash);
            if let Some(s) = hash.snapshot(id, now, &self.settings)? {
                out.push((s, hash.steps()?));
            }
        }
        Ok((out, now))
    }

    pub(super) async fn read_job(&self, id: &JobId) -> Result<Option<Snapshot>, StoreError> {
        if let Some(hit) = self.finished.get(id) {
            return Ok(Some(hit));
        }
        let mut conn = self.connection().await?;
        let snapshot = self.snapshots(&mut conn, &[id.to_string()]).await?.pop();
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
        // The listing's create count (member `<minute>`) sorts below every job: it is among
        // the entries read only when there are fewer jobs than asked for, and is no job id.
        let raw: Vec<String> = self
            .bounded(conn.zrevrange(self.keys.tenant(tenant), 0, stop))
            .await?;
        self.snapshots(&mut conn, &raw).await
    }

    /// The groups' queues, leases and waiting sets: one pipeline a group.
    pub(super) async fn read_active(&self) -> Result<Vec<Snapshot>, StoreError> {
        let mut conn = self.connection().await?;
        let reads = Group::all().map(|group| {
            let mut conn = conn.clone();
            async move {
                let (mut raw, running, waiting): (Vec<String>, Vec<String>, Vec<String>) = self
                    .bounded(
                        redis::pipe()
                            .lrange(self.keys.queue(group), 0, -1)
                            .zrange(self.keys.leases(group), 0, -1)
                            .smembers(self.keys.waiting(group))
                            .query_async(&mut conn),
                    )
                    .await?;
                raw.extend(running);
                raw.extend(waiting);
                Ok::<_, StoreError>(raw)
            }
        });
        let mut raw: Vec<String> = try_join_all(reads).await?.concat();
        // A job put back at the head of the queue may still have its lease entry.
        raw.sort_unstable();
        raw.dedup();
        let mut jobs = self.snapshots(&mut conn, &raw).await?;
        jobs.retain(|s| s.status.is_active() || s.status == Status::Lost);
        // A pipeline is active exactly while one of its steps is: it is found through them.
        let mut parents: Vec<String> = jobs
            .iter()
            .filter_map(|s| s.pipeline_id)
            .map(|id| id.to_string())
            .collect();
        parents.sort_unstable();
        parents.dedup();
        let mut pipelines = self.snapshots(&mut conn, &parents).await?;
        pipelines.retain(|s| s.status.is_active());
        jobs.extend(pipelines);
        Ok(jobs)
    }

    /// Up to `count` entries of the cross-tenant index after `after`, newest first: one
    /// ZREVRANGEBYLEX of `count` a group (the names order the index; see `browse`), the
    /// newest `count` of them all kept.
    pub(super) async fn read_index_page(
        &self,
        after: Option<Position>,
        count: usize,
    ) -> Result<Vec<Position>, StoreError> {
        let max = match after {
            Some((ms, id)) => format!("({}", browse::index_member(ms, &id)),
            None => "+".to_owned(),
        };
        let conn = self.connection().await?;
        let reads = Group::all().map(|group| {
            let (mut conn, max) = (conn.clone(), max.clone());
            let key = self.keys.everyone(group);
            async move {
                self.bounded::<Vec<String>>(conn.zrevrangebylex_limit(
                    key,
                    max,
                    "-",
                    0,
                    count as isize,
                ))
                .await
            }
        });
        let mut raw: Vec<String> = try_join_all(reads).await?.concat();
        raw.sort_unstable_by(|a, b| b.cmp(a));
        raw.truncate(count);
        Ok(raw.iter().filter_map(|m| browse::parse_member(m)).collect())
    }

    pub(super) async fn read_many(&self, ids: &[JobId]) -> Result<Vec<Snapshot>, StoreError> {
        let raw: Vec<String> = ids.iter().map(JobId::to_string).collect();
        let mut conn = self.connection().await?;
        self.snapshots(&mut conn, &raw).await
    }

    /// The tenant picker: one ZREVRANGE a group of its set bounded by `PICKER_CAP`, the
    /// newest `PICKER_CAP` of them all kept.
    pub(super) async fn read_recent_tenants(&self) -> Result<Vec<(TenantId, u64)>, StoreError> {
        let conn = self.connection().await?;
        let stop = browse::PICKER_CAP as isize - 1;
        let reads = Group::all().map(|group| {
            let mut conn = conn.clone();
            let key = self.keys.recent_tenants(group);
            async move {
                self.bounded::<Vec<(String, f64)>>(conn.zrevrange_withscores(key, 0, stop))
                    .await
            }
        });
        let mut raw: Vec<(String, f64)> = try_join_all(reads).await?.concat();
        raw.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
        raw.truncate(browse::PICKER_CAP);
        Ok(raw
            .into_iter()
            .filter_map(|(t, ms)| TenantId::parse(&t).ok().map(|t| (t, ms as u64)))
            .collect())
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

    /// How many jobs of each kind wait in each group's queue (its first `QUEUE_SAMPLE`
    /// entries), summed: plain reads, every group in flight together — the queue's ids
    /// (`LRANGE`), then their kinds (one pipeline of `HGET`s). Two reads, not one step: a
    /// gauge needs no atomic view, and a script would have to name every job it reads.
    pub(super) async fn read_queued_by_kind(&self) -> Result<Vec<(Kind, u64)>, StoreError> {
        let conn = self.connection().await?;
        let reads = Group::all().map(|group| {
            let mut conn = conn.clone();
            async move {
                let ids: Vec<String> = self
                    .bounded(conn.lrange(self.keys.queue(group), 0, QUEUE_SAMPLE as isize - 1))
                    .await?;
                let ids: Vec<JobId> = ids.iter().filter_map(|id| JobId::parse(id).ok()).collect();
                if ids.is_empty() {
                    return Ok(Vec::new());
                }
                let mut pipe = redis::pipe();
                for id in &ids {
                    pipe.hget(self.keys.job(id), Field::Kind.name());
                }
                self.bounded::<Vec<Option<String>>>(pipe.query_async(&mut conn))
                    .await
            }
        });
        let mut counts: BTreeMap<Kind, u64> = BTreeMap::new();
        for kind in try_join_all(reads).await?.concat().into_iter().flatten() {
            // A kind this build does not parse (another version's) is not this process's to count.
            if let Ok(kind) = Kind::parse(&kind) {
                *counts.entry(kind).or_default() += 1;
            }
        }
        Ok(counts.into_iter().collect())
    }

    /// The overview's figures: the store's clock and the process registry in one pipeline,
    /// and the hour buckets that may hold the last day's minutes in one pipeline a group, all
    /// in flight together. Which hours those are is Redis's clock's to say, and it is read
    /// alongside: this process's clock picks them with an hour's margin either way, and
    /// minutes outside the day are dropped once `TIME` is known (a replica more than an hour
    /// off would miss an edge hour).
    pub(super) async fn read_overview(&self) -> Result<Overview, StoreError> {
        const HOUR_MINUTES: u64 = 60;
        let local_hour = minute_of(now_ms()) / HOUR_MINUTES;
        let first = local_hour.saturating_sub(DAY_MINUTES / HOUR_MINUTES + 1);
        let mut pipe = redis::pipe();
        pipe.cmd("TIME")
            .zrange_withscores(self.keys.processes(), 0, -1);
        let conn = self.connection().await?;
        let head = {
            let mut conn = conn.clone();
            async move {
                self.bounded::<Vec<redis::Value>>(pipe.query_async(&mut conn))
                    .await
            }
        };
        let buckets = Group::all().map(|group| {
            let mut pipe = redis::pipe();
            for hour in first..=local_hour + 1 {
                pipe.hgetall(self.keys.stats(group, hour));
            }
            let mut conn = conn.clone();
            async move {
                self.bounded::<Vec<redis::Value>>(pipe.query_async(&mut conn))
                    .await
            }
        });
        let (head, buckets) = futures_util::future::try_join(head, try_join_all(buckets)).await?;
        let mut values = head.into_iter();
        let mut next = || {
            values
                .next()
                .ok_or_else(|| StoreError::Corrupt("a short overview pipeline".into()))
        };
        let now = time_ms(&redis::from_redis_value(next()?).map_err(corrupt)?);
        let registry: Vec<(String, f64)> = redis::from_redis_value(next()?).map_err(corrupt)?;
        let stale_ms = self.settings.stale_ms();
        let processes = registry
            .into_iter()
            .filter(|(_, beat)| !super::super::is_stale(*beat as u64, now, stale_ms))
            .filter_map(|(member, beat)| {
                Process::from_member(&member).map(|process| Beat {
                    process,
                    heartbeat_at: beat as u64,
                })
            })
            .collect();
        let current = minute_of(now);
        let mut ended = Vec::new();
        for value in buckets.into_iter().flatten() {
            let bucket: HashMap<String, u64> = redis::from_redis_value(value).map_err(corrupt)?;
            ended.extend(
                bucket
                    .iter()
                    .filter_map(|(field, n)| stats::parse_bucket_field(field, *n))
                    .filter(|e| e.minute <= current && e.minute + DAY_MINUTES > current),
            );
        }
        Ok(Overview {
            now_ms: now,
            ended,
            processes,
        })
    }
}
