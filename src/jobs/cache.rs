//! A short-lived cache of finished jobs, for replicas answering many polls of the same job.
//!
//! A finished job's life never changes again (the stores refuse every write to it), so a
//! cached copy can differ from Redis only by the record being deleted (TTL expiry, or an
//! operator clearing the tenant on another replica) or by a retry's audit (`retried_by`,
//! `retried_as`) written on another replica. Entries therefore live for `ttl` only (one
//! second by default): either is seen everywhere within it. Active jobs are never cached.
//!
//! Each entry keeps the job's JSON too, rendered once, by the first poll it answers: the
//! poll route answers a finished job with those bytes (`JobStore::finished_kept`), neither
//! copying the snapshot nor rendering it again at every poll. Not when it is kept: the read
//! that keeps it answers with its own rendering, and a job polled once (its first poll
//! waited for its end) is never rendered twice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::{JobId, Snapshot, TenantId};

/// A finished job as the cache keeps it.
pub struct Finished {
    pub snapshot: Snapshot,
    /// The snapshot's JSON, once a poll asked for it.
    json: OnceLock<Vec<u8>>,
}

impl Finished {
    fn of(snapshot: &Snapshot) -> Self {
        Self {
            snapshot: snapshot.clone(),
            json: OnceLock::new(),
        }
    }

    /// The snapshot's JSON (`serde_json`), as `GET /catalog/jobs/{job_id}` answers it:
    /// rendered at the first call.
    pub fn json(&self) -> &[u8] {
        self.json.get_or_init(|| {
            serde_json::to_vec(&self.snapshot).expect("a snapshot always serialises")
        })
    }
}

pub struct FinishedCache {
    entries: Mutex<Entries>,
    ttl: Duration,
    capacity: usize,
}

/// The cached jobs with when each was kept, and when the expired ones were last dropped.
struct Entries {
    kept: HashMap<JobId, (Arc<Finished>, Instant)>,
    swept: Instant,
}

impl Entries {
    /// Drops the entries older than `ttl`, and gives back the table's room once it is mostly
    /// empty (a burst of polls must not hold its peak for the life of the process).
    fn sweep(&mut self, ttl: Duration) {
        self.kept.retain(|_, (_, at)| at.elapsed() < ttl);
        if self.kept.capacity() > 4 * self.kept.len().max(SHRINK_FLOOR) {
            self.kept.shrink_to_fit();
        }
        self.swept = Instant::now();
    }
}

/// Below this many entries a table is not worth shrinking.
const SHRINK_FLOOR: usize = 64;

impl FinishedCache {
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            entries: Mutex::new(Entries {
                kept: HashMap::new(),
                swept: Instant::now(),
            }),
            ttl,
            capacity,
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        // Entries are whole values inserted in one step: a poisoned map is still consistent.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, id: &JobId) -> Option<Snapshot> {
        self.kept(id).map(|f| f.snapshot.clone())
    }

    /// The job as kept, with its JSON, if it is (and younger than `ttl`).
    pub fn kept(&self, id: &JobId) -> Option<Arc<Finished>> {
        if self.ttl.is_zero() {
            return None;
        }
        let entries = self.entries();
        entries
            .kept
            .get(id)
            .filter(|(_, at)| at.elapsed() < self.ttl)
            .map(|(f, _)| f.clone())
    }

    /// Keeps a snapshot if it is of a finished job. Expired entries are dropped once a `ttl`,
    /// so the cache holds about the jobs answered in the last two, never more than `capacity`.
    pub fn offer(&self, snapshot: &Snapshot) {
        if self.ttl.is_zero() || !snapshot.status.is_finished() {
            return;
        }
        // Copied before the lock is taken: readers of other jobs do not wait on it.
        let kept = (Arc::new(Finished::of(snapshot)), Instant::now());
        let mut entries = self.entries();
        if entries.swept.elapsed() >= self.ttl || entries.kept.len() >= self.capacity {
            entries.sweep(self.ttl);
            if entries.kept.len() >= self.capacity {
                entries.kept.clear();
            }
        }
        entries.kept.insert(snapshot.job_id, kept);
    }

    /// Drops a job's entry: its record changed after it ended (a retry's audit).
    pub fn forget(&self, id: &JobId) {
        self.entries().kept.remove(id);
    }

    pub fn forget_tenant(&self, tenant: &TenantId) {
        self.entries()
            .kept
            .retain(|_, (f, _)| f.snapshot.tenant_id != *tenant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::store::NewJob;
    use crate::jobs::{Kind, Status};

    fn finished() -> Snapshot {
        let job = NewJob {
            id: JobId::new(),
            tenant: TenantId::parse("t").unwrap(),
            kind: Kind::parse("sync").unwrap(),
            params: serde_json::Value::Null,
            step: String::new(),
            origin: Default::default(),
            idempotency_key: None,
            in_order: false,
            pipeline: None,
        };
        job.record(Status::Done, 100, "done", 1_000, 1_000, 3)
    }

    #[test]
    fn a_kept_job_carries_its_snapshot_s_json_until_it_is_forgotten() {
        let cache = FinishedCache::new(Duration::from_secs(60), 10);
        let job = finished();
        cache.offer(&job);
        let kept = cache.kept(&job.job_id).expect("a finished job is kept");
        assert_eq!(kept.json(), serde_json::to_vec(&job).unwrap());
        assert_eq!(kept.snapshot.job_id, job.job_id);
        cache.forget(&job.job_id);
        assert!(cache.kept(&job.job_id).is_none());
        assert!(cache.get(&job.job_id).is_none());
    }

    #[test]
    fn a_long_life_of_polls_holds_only_the_jobs_answered_lately() {
        let ttl = Duration::from_millis(500);
        let cache = FinishedCache::new(ttl, 10_000);
        let started = Instant::now();
        for _ in 0..2_000 {
            cache.offer(&finished());
        }
        if started.elapsed() < ttl {
            assert_eq!(
                cache.entries().kept.len(),
                2_000,
                "entries younger than the ttl are all kept"
            );
        }
        std::thread::sleep(ttl * 2);
        let last = finished();
        cache.offer(&last);
        assert_eq!(
            cache.entries().kept.len(),
            1,
            "the expired ones went at the next keep"
        );
        assert_eq!(cache.get(&last.job_id).map(|s| s.job_id), Some(last.job_id));
        assert!(
            cache.entries().kept.capacity() < 2_000,
            "and their room with them"
        );
    }
}
