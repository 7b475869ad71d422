//! `RedisStore`: the durable job store shared by every replica.
//!
//! Each operation that changes several keys is one Lua script (`scripts.rs`, `writes.rs`);
//! reads are one pipelined round trip, and staleness is judged on Redis's clock (`TIME`, read
//! at most once a second and carried forward: `clock.rs`, `reads.rs`). Every key of a tenant
//! and its jobs lives in its slot group (`jobs::keys`), so one script touches one hash slot
//! and the store runs on a Redis Cluster as on one Redis. Jobs wait in one ready queue per
//! group (a list); a claimed run holds a lease indexed by expiry (a sorted set per group);
//! state changes other processes must hear of go out on one pub/sub channel per prefix
//! (`listen.rs`; a wake-up names its group). The job hash's fields are named in `record.rs`.
//! Every call is bounded by a timeout, so an unreachable Redis is a prompt
//! `StoreError::Unavailable`; a Redis that refuses our settings (`Misconfigured`) or a call
//! of ours (`Refused`) is told apart from one out of reach.

mod admin;
mod audit;
mod claims;
mod clock;
mod commit;
mod creates;
mod declare;
mod listen;
mod reads;
pub mod record;
mod replicas;
pub mod scripts;
mod writes;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::FutureExt as _;
use redis::aio::ConnectionManagerConfig;
use redis::AsyncCommands;
use tokio::sync::{broadcast, mpsc};

use super::browse::{Browse, Position};
use super::cache::{Finished, FinishedCache};
use super::fence::{Hold, ScriptFence, Writer};
use super::keys::{Keys, GROUPS};
use super::stats::{Overview, Process};
use super::store::{
    BoxFuture, Cancel, Claim, Created, Event, Finish, JobStore, Live, NewJob, NewPipeline, Purge,
    Recovered, Release, Renewal, Restore, RunEnd, RunId, RunRef, StoreError, StoreSettings, Tick,
    Topology,
};
use super::timeline::{EventId, TimelineEvent};
use super::watch::{TenantWatch, Watchers};
use super::{JobId, Kind, Snapshot, TenantId};
use crate::topology::{is_permanent, misconfiguration, Connection, Primary, Target};
use clock::StoreClock;
use listen::{listen, Listener};
use replicas::ReplicaCount;

/// Events buffered per subscriber; one that falls further behind gets `Resync`.
const EVENT_BUFFER: usize = 4096;

/// How long a create or a finish waits for `min_replicas_ack` replicas (`WAIT n 100`): long
/// enough for a replica on the same network (it acks within a millisecond or two), short
/// enough that a missing replica costs a request a tenth of a second, not a timeout.
const REPLICA_ACK_WAIT_MS: u64 = 100;

/// How long one store call may take before it counts as the store being unavailable.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Clone)]
pub struct RedisStore {
    /// One multiplexed connection to the primary (followed across a failover): concurrent
    /// calls are pipelined on it, which under load measured faster here than spreading them
    /// over several (fewer syscalls per call).
    primary: Primary,
    /// With `min_replicas_ack`, creates and finishes go over a connection of their own:
    /// `WAIT` must follow the write on its connection, and it holds that connection while it
    /// waits, which would stall every poll pipelined on the shared one.
    acked: Option<Primary>,
    /// Replicas connected to the primaries, as last read (`replicas.rs`): a create is
    /// refused before it writes when fewer than `min_replicas_ack` are.
    replicas: Arc<ReplicaCount>,
    keys: Keys,
    settings: StoreSettings,
    /// This process, as the process registry names it (renewed with every heartbeat).
    process: Process,
    finished: Arc<FinishedCache>,
    /// Redis's time as last read, carried forward (reads judge staleness on it).
    clock: Arc<StoreClock>,
    events: broadcast::Sender<Event>,
    listening: Arc<OnceLock<()>>,
    /// Whether the listener's subscription is live now.
    live: Arc<AtomicBool>,
    /// The tenants whose changes open streams of this process follow; the listener
    /// subscribes to their channels on its own connection.
    watchers: Arc<Watchers>,
    /// Taken by the listener when it starts: told when the watched tenants changed.
    watched_changes: Arc<Mutex<Option<mpsc::UnboundedReceiver<()>>>>,
    /// The groups whose ready queue may have work, one bit each: set by a wake-up naming the
    /// group (all of them at start and whenever the listener subscribes again, since a
    /// wake-up may have been missed), cleared by a claim that drained the queue.
    pending: Arc<AtomicU64>,
    /// Where the next claim starts looking, so the groups are served in turn.
    next_group: Arc<AtomicUsize>,
    /// Each group's ready queue's head as the last claim there answered it: the jobs whose
    /// records the next claim (or a finish that claims) names (`declare.rs`).
    heads: Arc<Mutex<Vec<Vec<JobId>>>>,
    /// The creates and finishes waiting for this process's calls in flight (`commit.rs`).
    commits: Arc<commit::Commits>,
}

/// Every group's bit in `RedisStore::pending`.
const ALL_GROUPS: u64 = (1 << GROUPS) - 1;

impl RedisStore {
    /// Connects lazily to a fixed Redis: the service starts even while Redis is down,
    /// answers 503 until it is reachable, and reconnects by itself.
    pub fn open(url: &str, settings: StoreSettings) -> Result<Self, StoreError> {
        Self::open_target(Target::Url(url.to_owned()), settings)
    }

    /// Connects lazily to the primary `target` names (through sentinels, following a failover).
    pub fn open_target(target: Target, settings: StoreSettings) -> Result<Self, StoreError> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(CALL_TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let open = |target| {
            Primary::open(target, config.clone())
                .map_err(|e| StoreError::Unavailable(e.to_string()))
        };
        let acked = match settings.min_replicas_ack {
            0 => None,
            _ => Some(open(target.clone())?),
        };
        let (tell, watched_changes) = mpsc::unbounded_channel();
        Ok(Self {
            watchers: Arc::new(Watchers::telling(tell)),
            watched_changes: Arc::new(Mutex::new(Some(watched_changes))),
            primary: open(target)?,
            acked,
            replicas: Arc::default(),
            keys: Keys::new(&settings.prefix),
            process: Process::this(),
            finished: Arc::new(FinishedCache::new(settings.finished_cache, 10_000)),
            clock: Arc::default(),
            settings,
            events: broadcast::channel(EVENT_BUFFER).0,
            listening: Arc::new(OnceLock::new()),
            live: Arc::new(AtomicBool::new(false)),
            pending: Arc::new(AtomicU64::new(ALL_GROUPS)),
            next_group: Arc::default(),
            heads: Arc::new(Mutex::new(vec![Vec::new(); GROUPS])),
            commits: Arc::default(),
        })
    }

    /// Where the store's primary is now, and how it is found.
    pub fn primary(&self) -> &Primary {
        &self.primary
    }

    /// Whether the store is a Redis Cluster.
    fn on_cluster(&self) -> bool {
        matches!(self.primary.target(), Target::Cluster { .. })
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// A handle on the store's connection to the primary (cheap: it is multiplexed).
    async fn connection(&self) -> Result<Connection, StoreError> {
        self.bounded(self.primary.connection()).await
    }

    /// The value at `key` (`GET`), if it has one.
    async fn read_key<T: redis::FromRedisValue>(
        &self,
        key: String,
    ) -> Result<Option<T>, StoreError> {
        let mut conn = self.connection().await?;
        self.bounded(conn.get(key)).await
    }

    /// The primary handle creates and finishes go over (see `acked`).
    fn writer(&self) -> &Primary {
        self.acked.as_ref().unwrap_or(&self.primary)
    }

    /// The connection a create or a finish goes over (see `acked`).
    async fn write_connection(&self) -> Result<Connection, StoreError> {
        bounded_on(self.writer(), self.writer().connection()).await
    }

    /// After a write of `key` on `conn`: waits (bounded) until `min_replicas_ack` replicas
    /// have it (on a cluster, the replicas of the node holding `key`).
    async fn replicated(
        &self,
        conn: &mut Connection,
        key: &str,
        job: Option<JobId>,
    ) -> Result<(), StoreError> {
        let wanted = self.settings.min_replicas_ack;
        if wanted == 0 {
            return Ok(());
        }
        let acked: u32 = bounded_on(
            self.writer(),
            conn.wait_replicas(key, wanted, REPLICA_ACK_WAIT_MS),
        )
        .await?;
        if acked < wanted {
            // A replica went since the count was read: read it again for the next create.
            self.replicas.forget().await;
            return Err(StoreError::NotReplicated { job, acked, wanted });
        }
        Ok(())
    }

    /// Runs one Redis call on the shared connection; see [`bounded_on`].
    fn bounded<'a, T>(
        &'a self,
        fut: impl Future<Output = redis::RedisResult<T>> + 'a,
    ) -> impl Future<Output = Result<T, StoreError>> + 'a {
        bounded_on(&self.primary, fut)
    }

    /// Starts the listener (once): the store's channel and the watched tenants' channels.
    fn listen_once(&self) {
        self.listening.get_or_init(|| {
            let watched = self
                .watched_changes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .expect("the listener starts once");
            tokio::spawn(listen(
                Listener {
                    primary: self.primary.clone(),
                    channel: self.keys.events(),
                    keys: self.keys.clone(),
                    tx: self.events.clone(),
                    live: self.live.clone(),
                    watchers: self.watchers.clone(),
                    pending: self.pending.clone(),
                },
                watched,
            ));
        });
    }
}

/// Runs one Redis call under [`CALL_TIMEOUT`], mapping every failure to a `StoreError`
/// ([`store_error`]) and telling `primary` (the handle the call went over) of it: a sign of a
/// failover makes it ask the sentinels again.
///
/// A plain function whose future is the call's own beside its timer, not an `async fn`: one
/// keeps the future it is handed in its state beside the future it awaits, so each such layer
/// doubled what it wrapped. `connection()` read 10.4 kB (three copies of the 3.4 kB of
/// `Primary::connection`), and every store call future that awaited it as large again, moved
/// whole wherever one is boxed or spawned (~4 % of the service's instructions a job in a
/// create burst were that `memcpy`).
fn bounded_on<'a, T>(
    primary: &'a Primary,
    fut: impl Future<Output = redis::RedisResult<T>> + 'a,
) -> impl Future<Output = Result<T, StoreError>> + 'a {
    tokio::time::timeout(CALL_TIMEOUT, fut).map(move |answer| match answer {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            primary.failed(&e);
            Err(store_error(&e))
        }
        Err(_) => {
            primary.suspect();
            Err(StoreError::Unavailable("no answer within 2 s".into()))
        }
    })
}

/// What a failed call means: a setting Redis refuses, a call of ours it refuses (neither is
/// an outage, and no retry mends either), or Redis out of reach.
fn store_error(e: &redis::RedisError) -> StoreError {
    if let Some(cause) = misconfiguration(e) {
        return StoreError::Misconfigured {
            cause,
            detail: e.to_string(),
        };
    }
    if is_permanent(e) {
        return StoreError::Refused(e.to_string());
    }
    StoreError::Unavailable(e.to_string())
}

impl JobStore for RedisStore {
    fn create(&self, job: NewJob) -> BoxFuture<'_, Result<Created, StoreError>> {
        Box::pin(async move {
            self.replicas_enough().await?;
            Ok(self.create_for(job, "", None).await?.0)
        })
    }

    fn create_claimed<'a>(
        &'a self,
        job: NewJob,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Created, StoreError>> {
        Box::pin(async move {
            self.replicas_enough().await?;
            Ok(self.create_for(job, worker, None).await?.0)
        })
    }

    fn create_probing<'a>(
        &'a self,
        job: NewJob,
        worker: &'a str,
        probe: &'a str,
    ) -> BoxFuture<'a, Result<(Created, bool), StoreError>> {
        Box::pin(async move {
            self.replicas_enough().await?;
            self.create_for(job, worker, Some(probe)).await
        })
    }

    fn create_pipeline(&self, pipeline: NewPipeline) -> BoxFuture<'_, Result<Created, StoreError>> {
        Box::pin(async move {
            self.replicas_enough().await?;
            self.create_pipeline_jobs(pipeline).await
        })
    }

    fn claim<'a>(
        &'a self,
        worker: &'a str,
        kinds: &'a [Kind],
    ) -> BoxFuture<'a, Result<Option<Claim>, StoreError>> {
        Box::pin(self.claim_any(worker, kinds))
    }

    fn claim_many<'a>(
        &'a self,
        worker: &'a str,
        kinds: &'a [Kind],
        n: usize,
    ) -> BoxFuture<'a, Result<Vec<Claim>, StoreError>> {
        Box::pin(self.claim_many_for(worker, kinds, n))
    }

    fn tick<'a>(
        &'a self,
        run: &'a RunId,
        percent: u8,
        step: &'a str,
    ) -> BoxFuture<'a, Result<Tick, StoreError>> {
        Box::pin(self.tick_run(run, percent, step))
    }

    fn renew<'a>(&'a self, runs: &'a [RunId]) -> BoxFuture<'a, Result<Vec<Renewal>, StoreError>> {
        Box::pin(self.renew_runs(runs))
    }

    fn finish<'a>(&'a self, end: RunEnd<'a>) -> BoxFuture<'a, Result<Finish, StoreError>> {
        Box::pin(async move {
            let (finish, _) = self.finish_run(end, None).await?;
            Ok(finish)
        })
    }

    fn finish_and_claim<'a>(
        &'a self,
        end: RunEnd<'a>,
        worker: &'a str,
        kinds: &'a [Kind],
    ) -> BoxFuture<'a, Result<(Finish, Option<Claim>), StoreError>> {
        Box::pin(self.finish_run(end, Some((worker, kinds))))
    }

    fn expect_end<'a>(&'a self, id: &'a JobId) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.expect_end_of(id))
    }

    fn restore<'a>(
        &'a self,
        run: RunRef<'a>,
        live: &'a Live,
    ) -> BoxFuture<'a, Result<Restore, StoreError>> {
        Box::pin(self.restore_run(run, live))
    }

    fn release<'a>(&'a self, run: &'a RunId) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(self.release_run(run))
    }

    fn recover(&self) -> BoxFuture<'_, Result<Vec<Recovered>, StoreError>> {
        Box::pin(self.recover_leases())
    }

    fn cancel<'a>(
        &'a self,
        id: &'a JobId,
        by: &'a str,
    ) -> BoxFuture<'a, Result<Cancel, StoreError>> {
        Box::pin(self.cancel_job(id, by))
    }

    fn purge<'a>(
        &'a self,
        tenant: &'a TenantId,
        kinds: &'a [Kind],
        hashes: &'a [String],
    ) -> BoxFuture<'a, Result<Purge, StoreError>> {
        Box::pin(async move {
            let purged = self.purge_tenant(tenant, kinds, hashes).await?;
            // This replica answers no poll of the removed jobs from memory; another one may,
            // for the cache's second at most.
            if matches!(purged, Purge::Removed { .. }) {
                self.finished.forget_tenant(tenant);
            }
            Ok(purged)
        })
    }

    fn overview(&self) -> BoxFuture<'_, Result<Overview, StoreError>> {
        Box::pin(self.read_overview())
    }

    fn leave(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let mut conn = self.connection().await?;
            let member = self.process.member();
            let _: u64 = self
                .bounded(conn.zrem(self.keys.processes(), member))
                .await?;
            Ok(())
        })
    }

    fn subscribe(&self) -> broadcast::Receiver<Event> {
        let rx = self.events.subscribe();
        self.listen_once();
        if self.live.load(Ordering::Acquire) {
            let _ = self.events.send(Event::Resync);
        }
        rx
    }

    fn get<'a>(&'a self, id: &'a JobId) -> BoxFuture<'a, Result<Option<Snapshot>, StoreError>> {
        Box::pin(self.read_job(id))
    }

    fn finished_kept(&self, id: &JobId) -> Option<Arc<Finished>> {
        self.finished.kept(id)
    }

    fn recent<'a>(
        &'a self,
        tenant: &'a TenantId,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Snapshot>, StoreError>> {
        Box::pin(self.read_recent(tenant, limit))
    }

    fn active(&self) -> BoxFuture<'_, Result<Vec<Snapshot>, StoreError>> {
        Box::pin(self.read_active())
    }

    fn timeline<'a>(
        &'a self,
        id: &'a JobId,
        after: Option<EventId>,
    ) -> BoxFuture<'a, Result<Vec<TimelineEvent>, StoreError>> {
        Box::pin(self.read_timeline(id, after))
    }

    fn watch_tenant<'a>(&'a self, tenant: &'a TenantId) -> BoxFuture<'a, TenantWatch> {
        Box::pin(async move {
            self.listen_once();
            let watch = self.watchers.watch(tenant);
            self.watchers.until_live(tenant, CALL_TIMEOUT).await;
            watch
        })
    }

    fn queued_by_kind(&self) -> BoxFuture<'_, Result<Vec<(Kind, u64)>, StoreError>> {
        Box::pin(self.read_queued_by_kind())
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.ping_primary())
    }

    fn writable(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.read_writable())
    }

    fn warnings(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(self.config_warnings())
    }

    fn topology(&self) -> BoxFuture<'_, Result<Option<Topology>, StoreError>> {
        Box::pin(self.read_topology())
    }

    fn is_durable(&self) -> bool {
        true
    }

    fn persists(&self) -> BoxFuture<'_, Result<Option<bool>, StoreError>> {
        Box::pin(self.read_persists())
    }

    fn settings(&self) -> &StoreSettings {
        &self.settings
    }

    fn while_held(&self, _writer: &Writer, write: &mut dyn FnMut()) -> Hold {
        // Its keys cannot be held still across another store's write: a catalogue in this
        // Redis checks the keys `fence_keys` names inside its own script instead.
        write();
        Hold::Held
    }

    fn fence_keys(&self, writer: &Writer) -> Option<ScriptFence> {
        let run = match writer {
            Writer::Run { run, .. } => Some((self.keys.job(&run.id), run.claim)),
            Writer::Import { .. } => None,
        };
        Some(ScriptFence {
            gone: self.keys.gone(writer.tenant()),
            since: writer.since(),
            run,
        })
    }

    fn tombstone<'a>(&'a self, tenant: &'a TenantId) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            let gone: Option<u64> = self.read_key(self.keys.gone(tenant)).await?;
            Ok(gone.unwrap_or(0))
        })
    }
}

impl Browse for RedisStore {
    fn index_page(
        &self,
        after: Option<Position>,
        count: usize,
    ) -> BoxFuture<'_, Result<Vec<Position>, StoreError>> {
        Box::pin(self.read_index_page(after, count))
    }

    fn get_many<'a>(
        &'a self,
        ids: &'a [JobId],
    ) -> BoxFuture<'a, Result<Vec<Snapshot>, StoreError>> {
        Box::pin(self.read_many(ids))
    }

    fn recent_tenants(&self) -> BoxFuture<'_, Result<Vec<(TenantId, u64)>, StoreError>> {
        Box::pin(self.read_recent_tenants())
    }

    fn unlist<'a>(&'a self, gone: &'a [Position]) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(self.unlist_gone(gone))
    }
}
