//! `RedisStore`: the durable job store shared by every replica.
//!
//! Each operation that changes several keys is one Lua script (in `lua/`, each loaded with
//! the shared `lua/prelude.lua` in front of it and called by its hash); reads are one
//! pipelined round trip that includes `TIME`, so staleness is judged on Redis's clock.
//! Jobs wait in one ready queue per prefix (a list); a claimed run holds a lease indexed by
//! expiry (a sorted set); state changes other processes must hear of go out on one pub/sub
//! channel per prefix. `Keys` names every key for Rust; the prelude builds the same names
//! inside scripts. Every call is bounded by a timeout, so an unreachable Redis is a prompt
//! `StoreError::Unavailable`.

use std::collections::HashMap;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Script, ScriptInvocation};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};
use tracing::warn;

use super::cache::FinishedCache;
use super::store::{
    params_fingerprint, BoxFuture, Cancel, Claim, Created, Event, Finish, JobStore, Live, NewJob,
    Origin, Outcome, Purge, Recovered, Release, Renewal, Restore, RunId, StoreError, StoreSettings,
    Tick, Topology, QUEUE_SAMPLE,
};
use super::timeline::{EventId, JobChange, TimelineEvent, TIMELINE_CAP};
use super::watch::{TenantWatch, Watchers};
use super::{worker_name, JobId, Kind, Snapshot, Status, TenantId};
use crate::topology::{Primary, Target};

const PRELUDE: &str = include_str!("lua/prelude.lua");

/// A job script with the shared prelude in front of it.
fn script(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}\n{body}"))
}

static CREATE: LazyLock<Script> = LazyLock::new(|| script(include_str!("lua/create.lua")));
static CLAIM: LazyLock<Script> = LazyLock::new(|| script(include_str!("lua/claim.lua")));
static TICK: LazyLock<Script> = LazyLock::new(|| script(include_str!("lua/tick.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| script(include_str!("lua/renew.lua")));
static FINISH: LazyLock<Script> = LazyLock::new(|| script(include_str!("lua/finish.lua")));
static RESTORE: LazyLock<Script> = LazyLock::new(|| script(include_str!("lua/restore.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| script(include_str!("lua/release.lua")));
static RECOVER: LazyLock<Script> = LazyLock::new(|| script(include_str!("lua/recover.lua")));
static CANCEL: LazyLock<Script> = LazyLock::new(|| script(include_str!("lua/cancel.lua")));
static PURGE: LazyLock<Script> = LazyLock::new(|| script(include_str!("lua/purge.lua")));
static QUEUED: LazyLock<Script> = LazyLock::new(|| script(include_str!("lua/queued.lua")));

/// How many expired leases one recovery step handles: bounds the script's run time; the
/// rest wait for the next sweep.
const RECOVER_BATCH: usize = 100;
/// How long the event listener waits before subscribing again after its connection broke;
/// it doubles while Redis stays away, up to `RESUBSCRIBE_MAX_DELAY` (the dispatcher's own
/// re-check and `wait=true`'s re-read cover the gap).
const RESUBSCRIBE_DELAY: Duration = Duration::from_millis(250);
const RESUBSCRIBE_MAX_DELAY: Duration = Duration::from_secs(4);
/// Events buffered per subscriber; one that falls further behind gets `Resync`.
const EVENT_BUFFER: usize = 4096;

/// How long a create or a finish waits for `min_replicas_ack` replicas (`WAIT n 100`): long
/// enough for a replica on the same network (it acks within a millisecond or two), short
/// enough that a missing replica costs a request a tenth of a second, not a timeout.
const REPLICA_ACK_WAIT_MS: u64 = 100;

/// How long one store call may take before it counts as the store being unavailable.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Builds every Redis key the job store uses, under one configurable prefix.
#[derive(Clone, Debug)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    /// `<prefix>:<id>` — the job's hash.
    pub fn job(&self, id: &JobId) -> String {
        format!("{}:{id}", self.prefix)
    }

    /// `<prefix>:lock:<tenant>:<kind>` — holds the active job's id.
    pub fn lock(&self, tenant: &TenantId, kind: &Kind) -> String {
        format!("{}:lock:{tenant}:{kind}", self.prefix)
    }

    /// `<prefix>:tenant:<tenant>` — the tenant's job ids, newest first.
    pub fn tenant(&self, tenant: &TenantId) -> String {
        format!("{}:tenant:{tenant}", self.prefix)
    }

    /// `<prefix>:idem:<tenant>:<kind>:<key>` — an `Idempotency-Key`'s job id and params
    /// fingerprint (hash), with the job's TTL.
    pub fn idem(&self, tenant: &TenantId, kind: &Kind, key: &str) -> String {
        format!("{}:idem:{tenant}:{kind}:{key}", self.prefix)
    }

    /// `<prefix>:rate:<tenant>:<minute>` — the tenant's creates in that fixed minute.
    pub fn rate(&self, tenant: &TenantId, minute: u64) -> String {
        format!("{}:rate:{tenant}:{minute}", self.prefix)
    }

    /// `<prefix>:queue` — the ready queue: ids of queued jobs, oldest first.
    pub fn queue(&self) -> String {
        format!("{}:queue", self.prefix)
    }

    /// `<prefix>:leases` — running jobs' ids scored by lease expiry (ms).
    pub fn leases(&self) -> String {
        format!("{}:leases", self.prefix)
    }

    /// `<prefix>:<id>:timeline` — the job's timeline (a stream, capped, with the job's TTL).
    pub fn timeline(&self, id: &JobId) -> String {
        format!("{}:{id}:timeline", self.prefix)
    }

    /// `<prefix>:tenant:<tenant>:events` — the pub/sub channel of a tenant's job changes
    /// (one JSON message per timeline event).
    pub fn tenant_events(&self, tenant: &TenantId) -> String {
        format!("{}:tenant:{tenant}:events", self.prefix)
    }

    /// `<prefix>:events` — the pub/sub channel (`wake`, `cancel:<id>`, `end:<id>`).
    pub fn events(&self) -> String {
        format!("{}:events", self.prefix)
    }
}

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
    keys: Keys,
    settings: StoreSettings,
    finished: Arc<FinishedCache>,
    events: broadcast::Sender<Event>,
    listening: Arc<OnceLock<()>>,
    /// Whether the listener's subscription is live now.
    live: Arc<AtomicBool>,
    /// The tenants whose changes open streams of this process follow; the listener
    /// subscribes to their channels on its own connection.
    watchers: Arc<Watchers>,
    /// Taken by the listener when it starts: told when the watched tenants changed.
    watched_changes: Arc<Mutex<Option<mpsc::UnboundedReceiver<()>>>>,
}

impl RedisStore {
    /// The jobs named by `raw` ids, as read now on the store's clock (one pipeline). An
    /// entry that is not a job id was not written by this service, and a job whose hash
    /// expired before its index entry is gone: both are skipped.
    async fn snapshots(
        &self,
        conn: &mut ConnectionManager,
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
            if let Some(s) = snapshot_from_hash(id, &hash, time_ms(&time), &self.settings)? {
                out.push(s);
            }
        }
        Ok(out)
    }
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
            keys: Keys::new(&settings.prefix),
            finished: Arc::new(FinishedCache::new(settings.finished_cache, 10_000)),
            settings,
            events: broadcast::channel(EVENT_BUFFER).0,
            listening: Arc::new(OnceLock::new()),
            live: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Where the store's primary is now, and how it is found.
    pub fn primary(&self) -> &Primary {
        &self.primary
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// A handle on the store's connection to the primary (cheap: it is multiplexed).
    async fn connection(&self) -> Result<ConnectionManager, StoreError> {
        self.bounded(self.primary.connection()).await
    }

    /// The primary handle creates and finishes go over (see `acked`).
    fn writer(&self) -> &Primary {
        self.acked.as_ref().unwrap_or(&self.primary)
    }

    /// The connection a create or a finish goes over (see `acked`).
    async fn write_connection(&self) -> Result<ConnectionManager, StoreError> {
        bounded_on(self.writer(), self.writer().connection()).await
    }

    /// After a write on `conn`: waits (bounded) until `min_replicas_ack` replicas have it.
    async fn replicated(
        &self,
        conn: &mut ConnectionManager,
        job: Option<JobId>,
    ) -> Result<(), StoreError> {
        let wanted = self.settings.min_replicas_ack;
        if wanted == 0 {
            return Ok(());
        }
        let acked: u32 = bounded_on(
            self.writer(),
            redis::cmd("WAIT")
                .arg(wanted)
                .arg(REPLICA_ACK_WAIT_MS)
                .query_async(conn),
        )
        .await?;
        if acked < wanted {
            return Err(StoreError::NotReplicated { job, acked, wanted });
        }
        Ok(())
    }

    /// Runs one Redis call on the shared connection; see [`bounded_on`].
    async fn bounded<T>(
        &self,
        fut: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        bounded_on(&self.primary, fut).await
    }

    /// A script call with the settings every script reads first (see `lua/prelude.lua`).
    fn invocation<'s>(&self, script: &'s Script) -> ScriptInvocation<'s> {
        let mut inv = script.prepare_invoke();
        inv.arg(&self.settings.prefix)
            .arg(self.settings.ttl_secs())
            .arg(self.settings.stale_ms())
            .arg(self.settings.list_cap)
            .arg(self.settings.max_queued)
            .arg(self.settings.max_attempts.max(1));
        inv
    }

    /// A script call about a run's job, with the job as `RUN_ARGS` in the prelude lays it
    /// out: the one place the job's fields are put in order for a script.
    fn run_args<'s>(
        &self,
        script: &'s Script,
        job: &NewJob,
        run: &RunId,
        created_at: u64,
        percent: u8,
    ) -> ScriptInvocation<'s> {
        let mut inv = self.invocation(script);
        inv.arg(job.id.to_string())
            .arg(run.claim)
            .arg(job.tenant.as_str())
            .arg(job.kind.as_str())
            .arg(job.params.to_string())
            .arg(created_at)
            .arg(percent.min(100))
            .arg(&job.origin.created_by)
            .arg(&job.origin.request_id)
            .arg(
                job.origin
                    .retry_of
                    .map(|id| id.to_string())
                    .unwrap_or_default(),
            );
        inv
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
                },
                watched,
            ));
        });
    }

    async fn code(&self, inv: ScriptInvocation<'_>) -> Result<i64, StoreError> {
        let mut conn = self.connection().await?;
        self.bounded(inv.invoke_async(&mut conn)).await
    }
}

/// Runs one Redis call under [`CALL_TIMEOUT`], mapping every failure to `Unavailable` and
/// telling `primary` (the handle the call went over) of it: a sign of a failover makes it
/// ask the sentinels again.
async fn bounded_on<T>(
    primary: &Primary,
    fut: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            primary.failed(&e);
            Err(StoreError::Unavailable(e.to_string()))
        }
        Err(_) => {
            primary.suspect();
            Err(StoreError::Unavailable("no answer within 2 s".into()))
        }
    }
}

fn unexpected(code: i64) -> StoreError {
    StoreError::Corrupt(format!("script answered {code}"))
}

/// What the listener needs: where to subscribe, and whom to tell.
struct Listener {
    primary: Primary,
    /// The store's channel (`wake`, `cancel:<id>`, `end:<id>`).
    channel: String,
    keys: Keys,
    tx: broadcast::Sender<Event>,
    live: Arc<AtomicBool>,
    watchers: Arc<Watchers>,
}

/// Reads the store's channel into `tx`, and the watched tenants' channels into `watchers`,
/// for as long as the process lives, on a pub/sub connection of its own: subscribing again
/// after a broken connection or when the primary moved (backing off while Redis is away,
/// logging once per outage), and telling subscribers to re-check (`Resync`) whenever the
/// subscription is live again. `watched` says when the set of watched tenants changed: the
/// tenant channels follow it (subscribed while a watch is held, dropped after the last).
async fn listen(l: Listener, mut watched: mpsc::UnboundedReceiver<()>) {
    let mut delay = RESUBSCRIBE_DELAY;
    let mut failing = false;
    let mut moved = l.primary.changes();
    loop {
        moved.mark_unchanged();
        let connected = tokio::time::timeout(CALL_TIMEOUT, async {
            let (mut sink, stream) = l.primary.client().await?.get_async_pubsub().await?.split();
            sink.subscribe(&l.channel).await?;
            redis::RedisResult::Ok((sink, stream))
        })
        .await;
        match connected {
            Ok(Ok((mut sink, mut messages))) => {
                let mut tenants = HashSet::new();
                let synced = follow_watched(&l, &mut sink, &mut tenants).await;
                if synced.is_ok() {
                    l.live.store(true, Ordering::Release);
                    let _ = l.tx.send(Event::Resync);
                    l.watchers.resync();
                    (delay, failing) = (RESUBSCRIBE_DELAY, false);
                    loop {
                        tokio::select! {
                            msg = messages.next() => match msg {
                                Some(msg) => l.dispatch(&msg),
                                None => break,
                            },
                            Some(()) = watched.recv() => {
                                if follow_watched(&l, &mut sink, &mut tenants).await.is_err() {
                                    break;
                                }
                            }
                            _ = moved.changed() => break,
                        }
                    }
                }
                l.live.store(false, Ordering::Release);
                l.watchers.set_live(HashSet::new());
                l.primary.suspect();
                warn!("the job events subscription broke or the primary moved; subscribing again");
            }
            failed => {
                if let Ok(Err(e)) = &failed {
                    l.primary.failed(e);
                } else {
                    l.primary.suspect();
                }
                if !failing {
                    let why = match failed {
                        Ok(Err(e)) => e.to_string(),
                        _ => "no answer".to_owned(),
                    };
                    warn!(error = %why, "cannot subscribe to job events yet; retrying with backoff");
                    failing = true;
                }
                delay = (delay * 2).min(RESUBSCRIBE_MAX_DELAY);
            }
        }
        tokio::time::sleep(delay).await;
    }
}

/// Subscribes `sink` to the channels of the tenants watched now and drops the others
/// (`tenants`: those it is subscribed to), then records them as live.
async fn follow_watched(
    l: &Listener,
    sink: &mut redis::aio::PubSubSink,
    tenants: &mut HashSet<TenantId>,
) -> redis::RedisResult<()> {
    let wanted: HashSet<TenantId> = l.watchers.wanted().into_iter().collect();
    let add: Vec<String> = wanted
        .difference(tenants)
        .map(|t| l.keys.tenant_events(t))
        .collect();
    let drop: Vec<String> = tenants
        .difference(&wanted)
        .map(|t| l.keys.tenant_events(t))
        .collect();
    if !add.is_empty() {
        pubsub_bounded(sink.subscribe(&add)).await?;
    }
    if !drop.is_empty() {
        pubsub_bounded(sink.unsubscribe(&drop)).await?;
    }
    *tenants = wanted.clone();
    l.watchers.set_live(wanted);
    Ok(())
}

/// A subscribe or unsubscribe, bounded by [`CALL_TIMEOUT`] (no answer breaks the connection).
async fn pubsub_bounded(
    fut: impl std::future::Future<Output = redis::RedisResult<()>>,
) -> redis::RedisResult<()> {
    tokio::time::timeout(CALL_TIMEOUT, fut)
        .await
        .unwrap_or_else(|_| Err((redis::ErrorKind::Io, "no answer").into()))
}

impl Listener {
    /// Hands one message to whoever follows its channel.
    fn dispatch(&self, msg: &redis::Msg) {
        let Ok(payload) = msg.get_payload::<String>() else {
            return;
        };
        if msg.get_channel_name() == self.channel {
            if let Some(event) = parse_event(&payload) {
                let _ = self.tx.send(event);
            }
        } else if let Ok(change) = serde_json::from_str::<JobChange>(&payload) {
            self.watchers.send(change);
        }
    }
}

/// An event as `lua/*.lua` publish it: `wake`, `cancel:<id>`, `end:<id>`.
fn parse_event(payload: &str) -> Option<Event> {
    if payload == "wake" {
        return Some(Event::Wake);
    }
    let (what, id) = payload.split_once(':')?;
    let id = JobId::parse(id).ok()?;
    match what {
        "cancel" => Some(Event::Cancel(id)),
        "end" => Some(Event::Ended(id)),
        _ => None,
    }
}

fn time_ms(t: &(u64, u64)) -> u64 {
    t.0 * 1000 + t.1 / 1000
}

/// Turns a job hash into what a reader sees, deriving `lost` at `now_ms`.
/// The one decoder of the job hash (the fields the scripts write; see `lua/prelude.lua`).
fn snapshot_from_hash(
    id: &JobId,
    h: &HashMap<String, String>,
    now_ms: u64,
    settings: &StoreSettings,
) -> Result<Option<Snapshot>, StoreError> {
    let stale_ms = settings.stale_ms();
    if h.is_empty() {
        return Ok(None);
    }
    let field = |name: &str| {
        h.get(name)
            .ok_or_else(|| StoreError::Corrupt(format!("job hash lacks `{name}`")))
    };
    let num = |name: &str| -> Result<u64, StoreError> {
        field(name)?
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("`{name}` is not a number")))
    };
    let opt_num = |name: &str| h.get(name).and_then(|v| v.parse::<u64>().ok());
    let json = |name: &str| -> Value {
        h.get(name)
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or(Value::Null)
    };
    let stored = Status::parse_stored(field("status")?)
        .ok_or_else(|| StoreError::Corrupt("unknown status".into()))?;
    // create.lua leaves out what equals a default (see there).
    let created_at = num("created_ms")?;
    let heartbeat_at = opt_num("heartbeat_ms").unwrap_or(created_at);
    let cancel_requested_at = opt_num("cancel_requested_ms");
    let status = stored.derive(
        heartbeat_at,
        now_ms,
        stale_ms,
        cancel_requested_at.is_some(),
    );
    let corrupt = |e: super::InvalidId| StoreError::Corrupt(e.to_string());
    Ok(Some(
        Snapshot {
            job_id: *id,
            tenant_id: TenantId::parse(field("tenant")?).map_err(corrupt)?,
            kind: Kind::parse(field("kind")?).map_err(corrupt)?,
            status,
            percent: opt_num("percent").unwrap_or(0).min(100) as u8,
            step: h.get("step").cloned().unwrap_or_default(),
            params: json("params"),
            result: json("result"),
            error: h.get("error").cloned(),
            created_at,
            started_at: opt_num("started_ms"),
            updated_at: opt_num("updated_ms").unwrap_or(created_at),
            heartbeat_at,
            finished_at: opt_num("finished_ms"),
            cancel_requested_at,
            attempt: opt_num("attempt").unwrap_or(0) as u32,
            max_attempts: settings.max_attempts,
            worker: h.get("worker").cloned(),
            recovered_at: opt_num("recovered_ms"),
            created_by: h.get("created_by").cloned(),
            cancelled_by: h.get("cancelled_by").cloned(),
            request_id: h.get("request_id").cloned(),
            retry_of: h.get("retry_of").and_then(|v| JobId::parse(v).ok()),
            eta_seconds: None,
        }
        .with_eta(now_ms),
    ))
}

impl RedisStore {
    /// create.lua for `worker` ("": queue the job; else claim it when nothing waits).
    async fn create_for(&self, job: NewJob, worker: &str) -> Result<Created, StoreError> {
        let mut conn = self.write_connection().await?;
        let mut inv = self.invocation(&CREATE);
        inv.arg(job.id.to_string())
            .arg(job.tenant.as_str())
            .arg(job.kind.as_str())
            .arg(job.params.to_string())
            .arg(&job.step)
            .arg(&job.origin.created_by)
            .arg(&job.origin.request_id)
            .arg(job.idempotency_key.as_deref().unwrap_or(""))
            .arg(params_fingerprint(&job.params))
            .arg(self.settings.creates_per_minute)
            .arg(
                job.origin
                    .retry_of
                    .map(|id| id.to_string())
                    .unwrap_or_default(),
            )
            .arg(worker);
        let (code, value): (i64, String) =
            bounded_on(self.writer(), inv.invoke_async(&mut conn)).await?;
        let job_id = |value: &str| {
            JobId::parse(value).map_err(|_| StoreError::Corrupt("create named no job id".into()))
        };
        match code {
            0 => Ok(Created::AlreadyRunning(job_id(&value)?)),
            2 => Ok(Created::QueueFull),
            3 => Ok(Created::Replayed(job_id(&value)?)),
            4 => Ok(Created::KeyReused(job_id(&value)?)),
            5 => {
                let ms: u64 = value
                    .parse()
                    .map_err(|_| StoreError::Corrupt("create answered no delay".into()))?;
                Ok(Created::RateLimited(Duration::from_millis(ms)))
            }
            _ => {
                let now: u64 = value
                    .parse()
                    .map_err(|_| StoreError::Corrupt("create answered no time".into()))?;
                self.replicated(&mut conn, Some(job.id)).await?;
                let max = self.settings.max_attempts;
                let record = match code {
                    CREATED_CLAIMED => job.claimed_record(worker, now, max),
                    _ => job.record(Status::Queued, 0, &job.step, now, now, max),
                };
                Ok(Created::Created(Box::new(record)))
            }
        }
    }
}

/// create.lua's answer for a job it created and claimed for the creating worker.
const CREATED_CLAIMED: i64 = 6;

impl JobStore for RedisStore {
    fn create(&self, job: NewJob) -> BoxFuture<'_, Result<Created, StoreError>> {
        Box::pin(self.create_for(job, ""))
    }

    fn create_claimed<'a>(
        &'a self,
        job: NewJob,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Created, StoreError>> {
        Box::pin(self.create_for(job, worker))
    }

    fn claim<'a>(
        &'a self,
        worker: &'a str,
        kinds: &'a [Kind],
    ) -> BoxFuture<'a, Result<Option<Claim>, StoreError>> {
        Box::pin(async move {
            let mut conn = self.connection().await?;
            let mut inv = self.invocation(&CLAIM);
            inv.arg(worker);
            for kind in kinds {
                inv.arg(kind.as_str());
            }
            let raw: Vec<String> = self.bounded(inv.invoke_async(&mut conn)).await?;
            if raw.is_empty() {
                return Ok(None);
            }
            claim_from(&raw).map(Some)
        })
    }

    fn tick<'a>(
        &'a self,
        run: &'a RunId,
        percent: u8,
        step: &'a str,
    ) -> BoxFuture<'a, Result<Tick, StoreError>> {
        Box::pin(async move {
            let mut inv = self.invocation(&TICK);
            inv.arg(run.id.to_string())
                .arg(run.claim)
                .arg(percent.min(100))
                .arg(step);
            Ok(match self.code(inv).await? {
                1 => Tick::Applied,
                0 => Tick::Missing,
                2 | -1 => Tick::Fenced,
                other => return Err(unexpected(other)),
            })
        })
    }

    fn renew<'a>(&'a self, runs: &'a [RunId]) -> BoxFuture<'a, Result<Vec<Renewal>, StoreError>> {
        Box::pin(async move {
            if runs.is_empty() {
                return Ok(Vec::new());
            }
            let mut inv = self.invocation(&RENEW);
            for run in runs {
                inv.arg(run.id.to_string()).arg(run.claim);
            }
            let mut conn = self.connection().await?;
            let codes: Vec<i64> = self.bounded(inv.invoke_async(&mut conn)).await?;
            codes
                .into_iter()
                .map(|code| match code {
                    1 => Ok(Renewal::Held),
                    3 => Ok(Renewal::CancelRequested),
                    0 => Ok(Renewal::Missing),
                    -1 => Ok(Renewal::Fenced),
                    other => Err(unexpected(other)),
                })
                .collect()
        })
    }

    fn finish<'a>(
        &'a self,
        job: &'a NewJob,
        run: &'a RunId,
        created_at: u64,
        outcome: &'a Outcome,
        percent: u8,
    ) -> BoxFuture<'a, Result<Finish, StoreError>> {
        Box::pin(async move {
            let (result, error) = match outcome {
                Outcome::Done(report) => (report.to_string(), ""),
                Outcome::Failed(class, report) => (
                    report.as_ref().map(Value::to_string).unwrap_or_default(),
                    class.as_str(),
                ),
                Outcome::Cancelled(Value::Null) => (String::new(), ""),
                Outcome::Cancelled(report) => (report.to_string(), ""),
            };
            let mut inv = self.run_args(&FINISH, job, run, created_at, percent);
            inv.arg(outcome.status().as_str())
                .arg(result)
                .arg(error)
                .arg(outcome.step());
            let mut conn = self.write_connection().await?;
            let finish = match bounded_on(self.writer(), inv.invoke_async(&mut conn)).await? {
                1 => Finish::Applied,
                2 => Finish::AlreadyEnded,
                -1 => Finish::Fenced,
                other => return Err(unexpected(other)),
            };
            // Not acknowledged: the runner retries, the script answers `AlreadyEnded` and
            // this waits again, until the outcome is on the replicas or the retries end.
            if finish != Finish::Fenced {
                self.replicated(&mut conn, None).await?;
            }
            Ok(finish)
        })
    }

    fn restore<'a>(
        &'a self,
        job: &'a NewJob,
        run: &'a RunId,
        created_at: u64,
        live: &'a Live,
    ) -> BoxFuture<'a, Result<Restore, StoreError>> {
        Box::pin(async move {
            let mut inv = self.run_args(&RESTORE, job, run, created_at, live.percent);
            inv.arg(&live.step).arg(live.attempt).arg(worker_name());
            Ok(match self.code(inv).await? {
                1 => Restore::Restored,
                2 => Restore::Present,
                -1 => Restore::Fenced,
                other => return Err(unexpected(other)),
            })
        })
    }

    fn release<'a>(&'a self, run: &'a RunId) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(async move {
            let mut inv = self.invocation(&RELEASE);
            inv.arg(run.id.to_string()).arg(run.claim);
            Ok(match self.code(inv).await? {
                1 => Release::Requeued,
                -1 => Release::Fenced,
                other => return Err(unexpected(other)),
            })
        })
    }

    fn recover(&self) -> BoxFuture<'_, Result<Vec<Recovered>, StoreError>> {
        Box::pin(async move {
            let mut inv = self.invocation(&RECOVER);
            inv.arg(RECOVER_BATCH);
            let mut conn = self.connection().await?;
            let flat: Vec<String> = self.bounded(inv.invoke_async(&mut conn)).await?;
            flat.chunks(2)
                .map(|pair| {
                    let id = pair
                        .get(1)
                        .and_then(|raw| JobId::parse(raw).ok())
                        .ok_or_else(|| StoreError::Corrupt("recover answered no id".into()))?;
                    Ok(match pair[0].as_str() {
                        "r" => Recovered::Requeued(id),
                        _ => Recovered::Lost(id),
                    })
                })
                .collect()
        })
    }

    fn cancel<'a>(
        &'a self,
        id: &'a JobId,
        by: &'a str,
    ) -> BoxFuture<'a, Result<Cancel, StoreError>> {
        Box::pin(async move {
            let mut inv = self.invocation(&CANCEL);
            inv.arg(id.to_string()).arg(by);
            Ok(match self.code(inv).await? {
                1 => Cancel::Requested,
                2 => Cancel::NotActive,
                _ => Cancel::Missing,
            })
        })
    }

    fn purge<'a>(
        &'a self,
        tenant: &'a TenantId,
        kinds: &'a [Kind],
    ) -> BoxFuture<'a, Result<Purge, StoreError>> {
        Box::pin(async move {
            let mut inv = self.invocation(&PURGE);
            inv.arg(tenant.as_str());
            for kind in kinds {
                inv.arg(kind.as_str());
            }
            let mut conn = self.connection().await?;
            let (code, value): (i64, String) = self.bounded(inv.invoke_async(&mut conn)).await?;
            match code {
                0 => JobId::parse(&value)
                    .map(Purge::StillActive)
                    .map_err(|_| StoreError::Corrupt("purge named no job id".into())),
                _ => value
                    .parse()
                    .map(Purge::Removed)
                    .map_err(|_| StoreError::Corrupt("purge answered no count".into())),
            }
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
        Box::pin(async move {
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
            let snapshot = snapshot_from_hash(id, &hash, time_ms(&time), &self.settings)?;
            if let Some(s) = &snapshot {
                self.finished.offer(s);
            }
            Ok(snapshot)
        })
    }

    fn recent<'a>(
        &'a self,
        tenant: &'a TenantId,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Snapshot>, StoreError>> {
        Box::pin(async move {
            let mut conn = self.connection().await?;
            let stop = limit.max(1) as isize - 1;
            let raw: Vec<String> = self
                .bounded(conn.lrange(self.keys.tenant(tenant), 0, stop))
                .await?;
            self.snapshots(&mut conn, &raw).await
        })
    }

    fn active(&self) -> BoxFuture<'_, Result<Vec<Snapshot>, StoreError>> {
        Box::pin(async move {
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
        })
    }

    fn timeline<'a>(
        &'a self,
        id: &'a JobId,
        after: Option<EventId>,
    ) -> BoxFuture<'a, Result<Vec<TimelineEvent>, StoreError>> {
        Box::pin(async move {
            let start = after.map_or_else(|| "-".to_owned(), |id| format!("({id}"));
            let mut conn = self.connection().await?;
            // Newest first, at most the cap: `MAXLEN ~` may keep a few more.
            let mut raw: Vec<(String, Vec<(String, String)>)> = self
                .bounded(
                    redis::cmd("XREVRANGE")
                        .arg(self.keys.timeline(id))
                        .arg("+")
                        .arg(start)
                        .arg("COUNT")
                        .arg(TIMELINE_CAP)
                        .query_async(&mut conn),
                )
                .await?;
            raw.reverse();
            raw.into_iter()
                .map(|(eid, pairs)| {
                    TimelineEvent::from_fields(eid, &pairs).ok_or_else(|| {
                        StoreError::Corrupt(format!("a timeline event of job {id} is malformed"))
                    })
                })
                .collect()
        })
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
        Box::pin(async move {
            let mut inv = self.invocation(&QUEUED);
            inv.arg(QUEUE_SAMPLE);
            let mut conn = self.connection().await?;
            let flat: Vec<(String, u64)> = self.bounded(inv.invoke_async(&mut conn)).await?;
            // A kind this build does not parse (another version's) is not this process's to count.
            Ok(flat
                .into_iter()
                .filter_map(|(kind, n)| Kind::parse(&kind).ok().map(|k| (k, n)))
                .collect())
        })
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let mut conn = self.connection().await?;
            let _: String = self
                .bounded(redis::cmd("PING").query_async(&mut conn))
                .await?;
            Ok(())
        })
    }

    fn warnings(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(async move {
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
        })
    }

    fn topology(&self) -> BoxFuture<'_, Result<Option<Topology>, StoreError>> {
        Box::pin(async move {
            let mut conn = self.connection().await?;
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
            }))
        })
    }

    fn is_durable(&self) -> bool {
        true
    }

    /// AOF on, or at least one RDB save point. A Redis that answers neither (CONFIG renamed
    /// or disabled, as on some managed services) cannot be judged: `None`.
    fn persists(&self) -> BoxFuture<'_, Result<Option<bool>, StoreError>> {
        Box::pin(async move {
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
        })
    }

    fn settings(&self) -> &StoreSettings {
        &self.settings
    }

    fn while_held(&self, _run: &RunId, write: &mut dyn FnMut()) -> bool {
        // The record cannot be held still across another store's write: a catalogue in this
        // Redis checks `job_key` inside its own script instead.
        write();
        true
    }

    fn job_key(&self, id: &JobId) -> Option<String> {
        Some(self.keys.job(id))
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

/// Decodes `claim.lua`'s answer: {id, claim, attempt, tenant, kind, params, created_ms}.
fn claim_from(raw: &[String]) -> Result<Claim, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("claim answered {what}"));
    let [id, claim, attempt, tenant, kind, params, created, created_by, request_id, retry_of] = raw
    else {
        return Err(corrupt("a malformed job"));
    };
    let id = JobId::parse(id).map_err(|_| corrupt("no job id"))?;
    Ok(Claim {
        job: NewJob {
            id,
            tenant: TenantId::parse(tenant).map_err(|_| corrupt("no tenant"))?,
            kind: Kind::parse(kind).map_err(|_| corrupt("no kind"))?,
            params: serde_json::from_str(params).map_err(|_| corrupt("no params"))?,
            step: String::new(),
            origin: Origin {
                created_by: created_by.clone(),
                request_id: request_id.clone(),
                retry_of: JobId::parse(retry_of).ok(),
            },
            idempotency_key: None,
        },
        created_at: created.parse().map_err(|_| corrupt("no creation time"))?,
        run: RunId {
            id,
            claim: claim.parse().map_err(|_| corrupt("no claim"))?,
        },
        attempt: attempt.parse().map_err(|_| corrupt("no attempt"))?,
    })
}
