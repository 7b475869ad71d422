//! The store seam: what a job store must do, and the values it answers with.
//!
//! Expected outcomes are values, not errors: a held lock is `Created::AlreadyRunning`, an
//! unknown job is `Ok(None)`, a write from a run that lost its job is `Fenced`.
//! `StoreError` means only that the store could not be reached or answered nonsense.
//! Both stores run the same conformance suite (tests/api/conformance.rs).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::broadcast;

use super::browse::Browse;
use super::bulk::Audit;
use super::cache::Finished;
use super::fence::{Hold, ScriptFence, Writer};
use super::stats::Overview;
use super::timeline::{EventId, TimelineEvent};
use super::watch::TenantWatch;
use super::{JobId, Kind, Snapshot, TenantId};
use crate::topology::ClusterShape;

mod answers;
mod records;
pub use records::accepted_at_create;

pub use answers::{
    Cancel, Claim, Created, Event, Finish, Live, Outcome, Purge, Recovered, Release, Renewal,
    Restore, RunEnd, RunId, RunRef, Tick, LOST,
};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Settings every store honours in the same way.
#[derive(Clone, Debug)]
pub struct StoreSettings {
    /// Prefix of every key (`job` → `job:<id>`, `job:lock:…`, `job:tenant:…`).
    pub prefix: String,
    /// Time to live of every per-job key, set where the key is created (and again, for a
    /// job older than a tenth of it, by its renewals and its end).
    pub ttl: Duration,
    /// An active job whose heartbeat is this old reads as lost.
    pub stale_after: Duration,
    /// How many job ids a tenant's listing keeps (newest first).
    pub list_cap: usize,
    /// How long a replica may answer a poll of a finished job from memory (0: never).
    pub finished_cache: Duration,
    /// Jobs the shared ready queue holds at most; beyond it a create is refused.
    pub max_queued: usize,
    /// Replicas that must acknowledge a create and a finish (`WAIT`) before they count.
    pub min_replicas_ack: u32,
    /// Runs a job gets before a lost one ends `failed`/`Lost` (1: it reads `lost`).
    pub max_attempts: u32,
    /// Jobs one tenant may create per minute (a fixed window in the store; 0: no limit).
    pub creates_per_minute: u32,
    /// The least time between two progress ticks kept in a timeline (the sampling rule is at
    /// `timeline::PROGRESS_KEPT`); every tick still goes to live watchers.
    pub progress_sample: Duration,
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            prefix: "job".into(),
            ttl: Duration::from_secs(86_400),
            stale_after: Duration::from_secs(300),
            list_cap: 100,
            finished_cache: Duration::from_secs(1),
            max_queued: 1000,
            max_attempts: 3,
            creates_per_minute: 600,
            min_replicas_ack: 0,
            progress_sample: Duration::from_secs(5),
        }
    }
}

impl StoreSettings {
    pub fn ttl_secs(&self) -> u64 {
        self.ttl.as_secs().max(1)
    }

    pub fn stale_ms(&self) -> u64 {
        self.stale_after.as_millis() as u64
    }

    pub fn progress_sample_ms(&self) -> u64 {
        self.progress_sample.as_millis() as u64
    }
}

/// Everything needed to create a job, and to run it again or write it back whole.
#[derive(Clone, Debug, PartialEq)]
pub struct NewJob {
    pub id: JobId,
    pub tenant: TenantId,
    pub kind: Kind,
    pub params: Value,
    /// The readable step it starts with ("queued").
    pub step: String,
    /// Who asked for it, and in which request (recorded on the job for audit).
    pub origin: Origin,
    /// The client's `Idempotency-Key`, recorded with the job in the same step.
    pub idempotency_key: Option<String>,
    /// Whether the job runs in its tenant's order: after every ordered job of its tenant
    /// created before it has ended (`jobs::pipeline`; the registry says which kinds are).
    pub in_order: bool,
    /// The pipeline this job is a step of.
    pub pipeline: Option<JobId>,
}

/// Who started a job: the caller's token name (or `anonymous`) and the request's id.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Origin {
    pub created_by: String,
    pub request_id: String,
    /// The ended job this one retries (`POST /catalog/jobs/{id}/retry`).
    pub retry_of: Option<JobId>,
}

/// The fingerprint an idempotency key is recorded with: the SHA-256 of the parameters' JSON,
/// so a key sent again with other parameters is told apart from a retry.
pub fn params_fingerprint(params: &Value) -> String {
    use sha2::{Digest, Sha256};
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(params.to_string().as_bytes());
    // Every create computes it: one String, not one `format!` a byte.
    let mut hex = String::with_capacity(2 * digest.len());
    for b in digest {
        hex.push(char::from(HEX[usize::from(b >> 4)]));
        hex.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    hex
}

/// A pipeline to create: its own job (kind `pipeline`; its parameters are its steps') and
/// its steps, in order, each an ordered job (`in_order`, `pipeline` naming this one) with its
/// share of the pipeline's percent (the shares add up to 100).
#[derive(Clone, Debug, PartialEq)]
pub struct NewPipeline {
    pub job: NewJob,
    pub steps: Vec<(NewJob, u8)>,
}

impl NewPipeline {
    /// The steps as the pipeline's record lists them.
    pub fn refs(&self) -> Vec<super::pipeline::StepRef> {
        self.steps
            .iter()
            .map(|(step, share)| super::pipeline::StepRef {
                kind: step.kind.clone(),
                job_id: step.id,
                share: *share,
            })
            .collect()
    }
}

/// The claim token and attempt of a job's first run.
pub const FIRST_CLAIM: u64 = 1;

/// The step a claimed job reads until its function reports one.
pub const STARTING_STEP: &str = "starting";

#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the job store is unreachable: {0}")]
    Unavailable(String),
    #[error("the job store returned a malformed record: {0}")]
    Corrupt(String),
    /// Redis answers but refuses this service's settings (a password it does not take, a
    /// database it does not have), or what answers is not Redis: no retry mends it until an
    /// operator changes a setting. `cause` says which, in the settings' words.
    #[error("{cause} ({detail})")]
    Misconfigured { cause: &'static str, detail: String },
    /// Redis refused a call no retry can mend (`topology::is_permanent`: a call across slots,
    /// a script's key it was not given, a key of another type than the call's): a defect of
    /// this service or of what else writes its keys, not an outage.
    #[error("Redis refused a call no retry mends: {0}")]
    Refused(String),
    /// The write reached the primary, but fewer replicas than `min_replicas_ack` confirmed
    /// it in time: it may not survive a failover. `job` names a created job (it exists now).
    #[error("only {acked} of {wanted} replicas acknowledged the write in time")]
    NotReplicated {
        job: Option<JobId>,
        acked: u32,
        wanted: u32,
    },
    /// Fewer replicas are connected than `min_replicas_ack` asks for (on a cluster, to some
    /// shard's primary): a create is refused before it writes anything, since no write could
    /// be confirmed.
    #[error(
        "{connected} replicas are connected, fewer than the {wanted} REDIS_MIN_REPLICAS_ACK asks for"
    )]
    TooFewReplicas { connected: usize, wanted: u32 },
}

/// Where the store's data lives now (Redis only): for `/readyz` and the start-up log.
#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Topology {
    /// How the primary is found (a fixed URL, or through which sentinels).
    pub via: String,
    /// The primary's address now.
    pub primary: String,
    /// Replicas connected to it and acknowledging its stream (from `ROLE`).
    pub replicas: usize,
    /// How far behind the furthest of them is, in bytes of the replication stream.
    pub max_replica_lag_bytes: u64,
    /// Replicas a create and a finish wait for (`REDIS_MIN_REPLICAS_ACK`).
    pub min_replicas_ack: u32,
    /// On a Redis Cluster, its shards (then `primary` lists every shard's primary and
    /// `replicas` counts them all); null otherwise.
    pub cluster: Option<ClusterShape>,
}

impl Topology {
    /// Replicas of the primary with the fewest: a write may land on any shard's.
    pub fn fewest_replicas(&self) -> usize {
        match &self.cluster {
            Some(shape) => shape.shards.iter().map(|s| s.replicas).min().unwrap_or(0),
            None => self.replicas,
        }
    }

    /// `TooFewReplicas` when some primary has fewer replicas than `min_replicas_ack`.
    pub fn enough_replicas(&self) -> Result<(), StoreError> {
        too_few(self.fewest_replicas(), self.min_replicas_ack)
    }
}

/// `TooFewReplicas` when `connected` replicas are fewer than `wanted`.
pub fn too_few(connected: usize, wanted: u32) -> Result<(), StoreError> {
    if connected < wanted as usize {
        return Err(StoreError::TooFewReplicas { connected, wanted });
    }
    Ok(())
}

/// How many queued jobs `queued_by_kind` looks at: the whole queue under the default
/// `MAX_QUEUED_JOBS`, and a bounded read (about a millisecond of Redis) when the cap is lifted.
pub const QUEUE_SAMPLE: usize = 10_000;

/// A job store: Redis for production, memory for the embedded mode. Every operation that
/// changes more than one key is one atomic step.
pub trait JobStore: Browse + Audit + Send + Sync + 'static {
    /// Creates the job as `queued` at the tail of the shared ready queue and takes its
    /// tenant+kind lock; or names the active holder; or refuses when the queue holds
    /// `max_queued` jobs. A holder that is finished, missing or stale is taken over.
    /// In the same step: a job's idempotency key already recorded answers `Replayed` or
    /// `KeyReused` (and nothing else is checked); a tenant over `creates_per_minute` is
    /// `RateLimited`; only a created job records its key and counts against the limit.
    fn create(&self, job: NewJob) -> BoxFuture<'_, Result<Created, StoreError>>;

    /// `create`, and when no job waits in the ready queue (so creation order is kept) the
    /// job is claimed for `worker` in the same step: `Created::Created` then carries it
    /// `running`, attempt 1, claim 1, leased like any claim. The process that accepted the
    /// request runs it at once instead of sending it through the queue and back (a wake-up
    /// and a claim saved). When jobs wait, it is queued as `create` would queue it.
    fn create_claimed<'a>(
        &'a self,
        job: NewJob,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Created, StoreError>>;

    /// `create_claimed`, and whether `probe` — a key of the job's slot group (its hash tag),
    /// the one its kind's quick answer reads first (`Registry::with_probe`) — did not exist in
    /// the step that claimed the job: read there, at the job's start, it spares that read. A
    /// job not claimed, or one that took a stale holder over, answers `false` (unread), as
    /// does a store with no such keys (this default).
    fn create_probing<'a>(
        &'a self,
        job: NewJob,
        worker: &'a str,
        probe: &'a str,
    ) -> BoxFuture<'a, Result<(Created, bool), StoreError>> {
        let _ = probe;
        Box::pin(async move { Ok((self.create_claimed(job, worker).await?, false)) })
    }

    /// Creates a pipeline and its steps in one step, as `create` creates one job: every lock
    /// (the tenant's `pipeline` and each step's kind) taken, or the first active holder named;
    /// the key, the rate and the queue's cap as for one job (one count). The steps stand in
    /// their tenant's order, so the first runs when nothing of its tenant is ahead and each
    /// later one waits for the one before it. Answers the pipeline as it reads then.
    fn create_pipeline(&self, pipeline: NewPipeline) -> BoxFuture<'_, Result<Created, StoreError>>;

    /// Takes the job at the head of the ready queue for `worker`: it reads `running` with a
    /// lease, `attempt` and a new fencing token. Jobs of kinds not in `kinds` are passed over
    /// (moved to the tail for a worker that runs them); `None` when nothing is left to claim.
    fn claim<'a>(
        &'a self,
        worker: &'a str,
        kinds: &'a [Kind],
    ) -> BoxFuture<'a, Result<Option<Claim>, StoreError>>;

    /// Takes up to `n` jobs from the head of the ready queue for `worker`, each as `claim`
    /// takes one, in one step: a dispatcher with several free workers fills them with one
    /// call. Empty when nothing is left to claim.
    fn claim_many<'a>(
        &'a self,
        worker: &'a str,
        kinds: &'a [Kind],
        n: usize,
    ) -> BoxFuture<'a, Result<Vec<Claim>, StoreError>> {
        Box::pin(async move {
            let mut claims = Vec::new();
            while claims.len() < n {
                match self.claim(worker, kinds).await? {
                    Some(claim) => claims.push(claim),
                    None => break,
                }
            }
            Ok(claims)
        })
    }

    /// Records a run's progress: percent never goes down; other runs are refused.
    fn tick<'a>(
        &'a self,
        run: &'a RunId,
        percent: u8,
        step: &'a str,
    ) -> BoxFuture<'a, Result<Tick, StoreError>>;

    /// One process's heartbeat: renews the lease of every run it names, in one step, and
    /// answers per run (same order) whether it still holds its job or was asked to stop. In
    /// the same step it renews this process's entry in the process registry (the overview's
    /// live processes), so a process calls it every interval, with no runs too.
    fn renew<'a>(&'a self, runs: &'a [RunId]) -> BoxFuture<'a, Result<Vec<Renewal>, StoreError>>;

    /// Ends the run's job and releases its lock if the lock still holds it. A missing record
    /// (the store came back empty) is written back whole, unless something newer says
    /// otherwise: another job holds the lock, a job of the same kind created after it is in
    /// the tenant's listing, or the tenant was deleted after it was created (`Fenced`).
    /// The end's `percent` is the run's last reported progress.
    fn finish<'a>(&'a self, end: RunEnd<'a>) -> BoxFuture<'a, Result<Finish, StoreError>>;

    /// `finish`, and when it applied, the next job claimed for `worker` (which is free again)
    /// as `claim` would take it, in the same step: a busy worker's job costs one store call
    /// to end and start the next, and no wake-up.
    fn finish_and_claim<'a>(
        &'a self,
        end: RunEnd<'a>,
        worker: &'a str,
        kinds: &'a [Kind],
    ) -> BoxFuture<'a, Result<(Finish, Option<Claim>), StoreError>> {
        Box::pin(async move {
            let finish = self.finish(end).await?;
            let next = match finish {
                Finish::Applied => self.claim(worker, kinds).await?,
                _ => None,
            };
            Ok((finish, next))
        })
    }

    /// Says a request waits for the job's end (`wait=true`): from now on the end is told to
    /// every process (`Event::Ended`), not only to the one that ran it. A store that tells
    /// every end anyway needs nothing.
    fn expect_end<'a>(&'a self, _id: &'a JobId) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }

    /// Writes back the record of a running job whose record the store lost, with its last
    /// known progress, lease and lock — unless something newer says otherwise (as `finish`).
    fn restore<'a>(
        &'a self,
        run: RunRef<'a>,
        live: &'a Live,
    ) -> BoxFuture<'a, Result<Restore, StoreError>>;

    /// Puts a running job back at the head of the queue (shutdown): its attempt is not
    /// counted against `max_attempts`, and this run is fenced off.
    fn release<'a>(&'a self, run: &'a RunId) -> BoxFuture<'a, Result<Release, StoreError>>;

    /// Sweeps runs whose lease expired: re-queued with the next attempt, or ended
    /// `failed`/`Lost` after the last one (with `max_attempts` 1 they are left to read `lost`).
    fn recover(&self) -> BoxFuture<'_, Result<Vec<Recovered>, StoreError>>;

    /// Asks an active job to stop: a running one reads `cancelling` and its process is told
    /// at once; a queued one ends `cancelled` at once. Asking again changes nothing. `by`
    /// (the caller's name) is recorded as `cancelled_by` by the first request only. A
    /// pipeline asks its running step to stop and skips the steps not started; it ends
    /// `cancelled` with its running step (at once when none runs). Any job's end releases the
    /// job waiting behind it in its tenant's order, and a step's end may end its pipeline.
    fn cancel<'a>(
        &'a self,
        id: &'a JobId,
        by: &'a str,
    ) -> BoxFuture<'a, Result<Cancel, StoreError>>;

    /// Removes every job of `tenant` (its listing, records and locks) in one step, unless
    /// one of them is queued or running (a `lost` one does not count: no run holds it and none
    /// will; it goes, its lease with it, and the tombstone fences its run).
    /// Its idempotency keys and create windows go too, and it leaves the tenant's tombstone
    /// for the job TTL: later writes of runs and imports begun before it are refused
    /// (`jobs::fence`), and no record of a job created before it is written back.
    /// `kinds` are the kinds whose locks may name an active job. `hashes` name the tenant's
    /// data kept beside its jobs in the same Redis (its catalogue): they are deleted in the
    /// same step, a set with the keys it names, so a job or import begun after it loses
    /// nothing to it (the embedded store
    /// holds none and leaves them to their owner).
    fn purge<'a>(
        &'a self,
        tenant: &'a TenantId,
        kinds: &'a [Kind],
        hashes: &'a [String],
    ) -> BoxFuture<'a, Result<Purge, StoreError>>;

    /// The job as a reader sees it, `lost` derived on the store's clock.
    fn get<'a>(&'a self, id: &'a JobId) -> BoxFuture<'a, Result<Option<Snapshot>, StoreError>>;

    /// The finished job as the store's finished-jobs cache keeps it (`jobs::cache`), with its
    /// JSON, when it keeps it: what `get` would answer, for the poll route to send as it is.
    /// `None` (then ask `get`) when it is not kept, or the store keeps no such cache.
    fn finished_kept(&self, _id: &JobId) -> Option<Arc<Finished>> {
        None
    }

    /// A tenant's jobs, newest first.
    fn recent<'a>(
        &'a self,
        tenant: &'a TenantId,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Snapshot>, StoreError>>;

    /// The active jobs of every tenant (queued, running, cancelling, or lost until
    /// recovered), in no order: read from the ready queue and the lease index, never a scan
    /// of keys, so the answer is bounded by `MAX_QUEUED_JOBS` plus the running jobs.
    fn active(&self) -> BoxFuture<'_, Result<Vec<Snapshot>, StoreError>>;

    /// The overview's figures the store keeps: its clock, the jobs ended in each of the last
    /// `stats::DAY_MINUTES` minutes by kind and outcome (counted in the step that ended each),
    /// and the processes whose heartbeat is younger than the stale threshold. Reads fixed,
    /// bounded keys (a day of per-hour buckets, the registry), never a scan of keys.
    fn overview(&self) -> BoxFuture<'_, Result<Overview, StoreError>>;

    /// This process leaves the registry now (a clean shutdown) rather than once its last
    /// heartbeat is stale.
    fn leave(&self) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The events of this namespace, from every process. A subscriber gets `Resync` once
    /// its subscription is live (events published before that may be missed).
    fn subscribe(&self) -> broadcast::Receiver<Event>;

    /// The job's timeline after `after` (from its start with `None`), oldest first: at most
    /// `TIMELINE_CAP` events, the newest. Empty for an unknown job.
    fn timeline<'a>(
        &'a self,
        id: &'a JobId,
        after: Option<EventId>,
    ) -> BoxFuture<'a, Result<Vec<TimelineEvent>, StoreError>>;

    /// Every change of `tenant`'s jobs from now on, while the watch is held. Resolves once
    /// changes can no longer be missed (Redis: the tenant's channel is subscribed), or after
    /// a bounded wait when the store is away (the watcher reads again at its own pace).
    fn watch_tenant<'a>(&'a self, tenant: &'a TenantId) -> BoxFuture<'a, TenantWatch>;

    /// How many jobs of each kind wait in the shared ready queue (the first `QUEUE_SAMPLE`
    /// of them), for the queued gauge at a scrape: one read, never on a hot path.
    fn queued_by_kind(&self) -> BoxFuture<'_, Result<Vec<(Kind, u64)>, StoreError>>;

    /// Whether the store answers at all.
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>>;

    /// `Err` while the store is known to refuse writes (a Redis over `maxmemory` under
    /// `noeviction`: its `OOM` words), found by reading, never by writing; `Ok` for the
    /// embedded store. Readiness fails on it: a replica that cannot start or end a job.
    fn writable(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }

    /// A warning an operator should see (e.g. an eviction policy that evicts live locks).
    fn warnings(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Where the data lives now (the primary, its replicas); `None` for the embedded store.
    fn topology(&self) -> BoxFuture<'_, Result<Option<Topology>, StoreError>> {
        Box::pin(async { Ok(None) })
    }

    /// Whether state outlives this process (false for the embedded store).
    fn is_durable(&self) -> bool;

    /// Whether the store keeps its data across its own restart: `Some(false)` for a Redis
    /// with neither AOF nor RDB save points, `None` when it cannot tell (CONFIG disabled).
    fn persists(&self) -> BoxFuture<'_, Result<Option<bool>, StoreError>> {
        let durable = self.is_durable();
        Box::pin(async move { Ok(Some(durable)) })
    }

    fn settings(&self) -> &StoreSettings;

    /// Runs `write` only while `writer`'s fence holds (`jobs::fence::Writer`), with no
    /// claim, recovery, end or delete in between, and answers whether it ran: the embedded
    /// store runs it under its own lock. The Redis store cannot hold its keys still across
    /// another store's write: it runs `write` unchecked, and a catalogue in the same Redis
    /// checks the keys `fence_keys` names inside its own script instead.
    fn while_held(&self, writer: &Writer, write: &mut dyn FnMut()) -> Hold;

    /// The keys a script on the same Redis reads to check `writer`'s fence (its tenant's
    /// tombstone, a run's job record); `None` for the embedded store.
    fn fence_keys(&self, writer: &Writer) -> Option<ScriptFence>;

    /// The tenant's tombstone: the store's time (ms) of its last delete within the job TTL,
    /// 0 when none. An import begins from it (`Writer::Import`).
    fn tombstone<'a>(&'a self, tenant: &'a TenantId) -> BoxFuture<'a, Result<u64, StoreError>>;
}

#[cfg(test)]
mod tests {
    use super::params_fingerprint;

    #[test]
    fn a_fingerprint_is_the_lowercase_hex_sha256_of_the_parameters_json() {
        assert_eq!(
            params_fingerprint(&serde_json::json!({"force": true})),
            "9217020a362fef0c5455612e547c0a18381d8da487d67a46e072f6aabd48ed71"
        );
        assert_eq!(
            params_fingerprint(&serde_json::Value::Null),
            "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b"
        );
    }
}
