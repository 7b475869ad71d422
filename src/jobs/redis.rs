//! `RedisStore`: the durable job store shared by every replica.
//!
//! Each operation that changes several keys is one Lua script (in `lua/`), loaded once and
//! called by its hash; reads are one pipelined round trip that includes `TIME`, so staleness
//! is judged on Redis's clock. `Keys` is the only place a key name is built. Every call is
//! bounded by a timeout, so an unreachable Redis is a prompt `StoreError::Unavailable`.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{AsyncCommands, Script};
use serde_json::Value;

use super::cache::FinishedCache;
use super::store::{
    BoxFuture, Cancel, Created, JobStore, Live, NewJob, Outcome, StoreError, StoreSettings, Write,
};
use super::{JobId, Kind, Snapshot, Status, TenantId};

static CREATE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/create.lua")));
static TICK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/tick.lua")));
static HEARTBEAT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/heartbeat.lua")));
static FINISH: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/finish.lua")));
static RESTORE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/restore.lua")));
static CANCEL: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/cancel.lua")));
static CLEAR_TENANT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/clear_tenant.lua")));

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

    /// `<prefix>:` — what a job id is appended to for its hash (used inside `create.lua`).
    pub fn job_prefix(&self) -> String {
        format!("{}:", self.prefix)
    }

    /// `<prefix>:lock:<tenant>:<kind>` — holds the active job's id.
    pub fn lock(&self, tenant: &TenantId, kind: &Kind) -> String {
        format!("{}:lock:{tenant}:{kind}", self.prefix)
    }

    /// `<prefix>:tenant:<tenant>` — the tenant's job ids, newest first.
    pub fn tenant(&self, tenant: &TenantId) -> String {
        format!("{}:tenant:{tenant}", self.prefix)
    }
}

#[derive(Clone)]
pub struct RedisStore {
    /// One multiplexed connection: concurrent calls are pipelined on it, which under load
    /// measured faster here than spreading them over several (fewer syscalls per call).
    conn: ConnectionManager,
    keys: Keys,
    settings: StoreSettings,
    finished: Arc<FinishedCache>,
}

impl RedisStore {
    /// Connects lazily: the service starts even while Redis is down, answers 503 until it
    /// is reachable, and reconnects by itself.
    pub fn open(url: &str, settings: StoreSettings) -> Result<Self, StoreError> {
        let client =
            redis::Client::open(url).map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(CALL_TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        Ok(Self {
            conn,
            keys: Keys::new(&settings.prefix),
            finished: Arc::new(FinishedCache::new(settings.finished_cache, 10_000)),
            settings,
        })
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// A handle on the store's connection (cheap: it is multiplexed).
    fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    async fn write_script(&self, inv: redis::ScriptInvocation<'_>) -> Result<Write, StoreError> {
        let mut conn = self.connection();
        let code: i64 = bounded(inv.invoke_async(&mut conn)).await?;
        Ok(match code {
            1 => Write::Applied,
            0 => Write::Missing,
            2 => Write::Ignored,
            3 => Write::CancelRequested,
            -1 => Write::Fenced,
            other => return Err(StoreError::Corrupt(format!("script answered {other}"))),
        })
    }
}

/// Runs one Redis call under [`CALL_TIMEOUT`], mapping every failure to `Unavailable`.
async fn bounded<T>(
    fut: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(StoreError::Unavailable(e.to_string())),
        Err(_) => Err(StoreError::Unavailable("no answer within 2 s".into())),
    }
}

fn time_ms(t: &(u64, u64)) -> u64 {
    t.0 * 1000 + t.1 / 1000
}

/// Turns a job hash into what a reader sees, deriving `lost` at `now_ms`.
fn snapshot_from_hash(
    id: &JobId,
    h: &HashMap<String, String>,
    now_ms: u64,
    stale_ms: u64,
) -> Result<Option<Snapshot>, StoreError> {
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
    Ok(Some(Snapshot {
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
    }))
}

impl JobStore for RedisStore {
    fn create(&self, job: NewJob) -> BoxFuture<'_, Result<Created, StoreError>> {
        Box::pin(async move {
            let mut conn = self.connection();
            let params = job.params.to_string();
            let mut inv = CREATE.prepare_invoke();
            inv.key(self.keys.job(&job.id))
                .key(self.keys.lock(&job.tenant, &job.kind))
                .key(self.keys.tenant(&job.tenant))
                .arg(job.id.to_string())
                .arg(job.tenant.as_str())
                .arg(job.kind.as_str())
                .arg(&params)
                .arg(&job.step)
                .arg(self.settings.ttl_secs())
                .arg(self.settings.stale_ms())
                .arg(self.settings.list_cap)
                .arg(self.keys.job_prefix());
            let (code, value): (i64, String) = bounded(inv.invoke_async(&mut conn)).await?;
            if code == 0 {
                let holder = JobId::parse(&value)
                    .map_err(|_| StoreError::Corrupt("the lock holds no job id".into()))?;
                return Ok(Created::AlreadyRunning(holder));
            }
            let now: u64 = value
                .parse()
                .map_err(|_| StoreError::Corrupt("create answered no time".into()))?;
            Ok(Created::Created(Box::new(job.record(
                Status::Queued,
                0,
                &job.step,
                now,
                now,
            ))))
        })
    }

    fn tick<'a>(
        &'a self,
        id: &'a JobId,
        percent: u8,
        step: &'a str,
    ) -> BoxFuture<'a, Result<Write, StoreError>> {
        Box::pin(async move {
            let mut inv = TICK.prepare_invoke();
            inv.key(self.keys.job(id)).arg(percent.min(100)).arg(step);
            self.write_script(inv).await
        })
    }

    fn heartbeat<'a>(
        &'a self,
        id: &'a JobId,
        tenant: &'a TenantId,
        kind: &'a Kind,
    ) -> BoxFuture<'a, Result<Write, StoreError>> {
        Box::pin(async move {
            let mut inv = HEARTBEAT.prepare_invoke();
            inv.key(self.keys.job(id))
                .key(self.keys.lock(tenant, kind))
                .arg(id.to_string())
                .arg(self.settings.ttl_secs());
            self.write_script(inv).await
        })
    }

    fn finish<'a>(
        &'a self,
        job: &'a NewJob,
        created_at: u64,
        outcome: &'a Outcome,
        percent: u8,
    ) -> BoxFuture<'a, Result<Write, StoreError>> {
        Box::pin(async move {
            let (result, error) = match outcome {
                Outcome::Done(report) => (report.to_string(), ""),
                Outcome::Failed(class) => (String::new(), class.as_str()),
                Outcome::Cancelled => (String::new(), ""),
            };
            let mut inv = FINISH.prepare_invoke();
            inv.key(self.keys.job(&job.id))
                .key(self.keys.lock(&job.tenant, &job.kind))
                .key(self.keys.tenant(&job.tenant))
                .arg(job.id.to_string())
                .arg(outcome.status().as_str())
                .arg(result)
                .arg(error)
                .arg(outcome.step())
                .arg(self.settings.ttl_secs())
                .arg(job.tenant.as_str())
                .arg(job.kind.as_str())
                .arg(job.params.to_string())
                .arg(created_at)
                .arg(self.settings.list_cap)
                .arg(percent.min(100));
            self.write_script(inv).await
        })
    }

    fn restore<'a>(
        &'a self,
        job: &'a NewJob,
        created_at: u64,
        live: &'a Live,
    ) -> BoxFuture<'a, Result<Write, StoreError>> {
        Box::pin(async move {
            let mut inv = RESTORE.prepare_invoke();
            inv.key(self.keys.job(&job.id))
                .key(self.keys.lock(&job.tenant, &job.kind))
                .key(self.keys.tenant(&job.tenant))
                .arg(job.id.to_string())
                .arg(job.tenant.as_str())
                .arg(job.kind.as_str())
                .arg(job.params.to_string())
                .arg(created_at)
                .arg(live.status.as_str())
                .arg(live.percent.min(100))
                .arg(&live.step)
                .arg(self.settings.ttl_secs())
                .arg(self.settings.list_cap);
            self.write_script(inv).await
        })
    }

    fn cancel<'a>(&'a self, id: &'a JobId) -> BoxFuture<'a, Result<Cancel, StoreError>> {
        Box::pin(async move {
            let mut conn = self.connection();
            let mut inv = CANCEL.prepare_invoke();
            inv.key(self.keys.job(id));
            let code: i64 = bounded(inv.invoke_async(&mut conn)).await?;
            Ok(match code {
                1 => Cancel::Requested,
                2 => Cancel::NotActive,
                _ => Cancel::Missing,
            })
        })
    }

    fn get<'a>(&'a self, id: &'a JobId) -> BoxFuture<'a, Result<Option<Snapshot>, StoreError>> {
        Box::pin(async move {
            if let Some(hit) = self.finished.get(id) {
                return Ok(Some(hit));
            }
            let mut conn = self.connection();
            let (hash, time): (HashMap<String, String>, (u64, u64)) = bounded(
                redis::pipe()
                    .hgetall(self.keys.job(id))
                    .cmd("TIME")
                    .query_async(&mut conn),
            )
            .await?;
            let snapshot = snapshot_from_hash(id, &hash, time_ms(&time), self.settings.stale_ms())?;
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
            let mut conn = self.connection();
            let stop = limit.max(1) as isize - 1;
            let raw: Vec<String> = bounded(conn.lrange(self.keys.tenant(tenant), 0, stop)).await?;
            // An entry that is not a job id was not written by this service; it is skipped.
            let ids: Vec<JobId> = raw.iter().filter_map(|r| JobId::parse(r).ok()).collect();
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            let mut pipe = redis::pipe();
            for id in &ids {
                pipe.hgetall(self.keys.job(id));
            }
            pipe.cmd("TIME");
            let mut values: Vec<redis::Value> = bounded(pipe.query_async(&mut conn)).await?;
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
                // A job whose hash expired before its list entry is simply gone.
                if let Some(s) =
                    snapshot_from_hash(id, &hash, time_ms(&time), self.settings.stale_ms())?
                {
                    out.push(s);
                }
            }
            Ok(out)
        })
    }

    fn clear_tenant<'a>(
        &'a self,
        tenant: &'a TenantId,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        Box::pin(async move {
            self.finished.forget_tenant(tenant);
            let mut conn = self.connection();
            let list = self.keys.tenant(tenant);
            let ids: Vec<String> = bounded(conn.lrange(&list, 0, -1)).await?;
            let mut kinds_pipe = redis::pipe();
            for id in &ids {
                kinds_pipe.hget(format!("{}{id}", self.keys.job_prefix()), "kind");
            }
            let kinds: Vec<Option<String>> = if ids.is_empty() {
                Vec::new()
            } else {
                bounded(kinds_pipe.query_async(&mut conn)).await?
            };
            let mut inv = CLEAR_TENANT.prepare_invoke();
            inv.key(&list);
            for (id, kind) in ids.iter().zip(&kinds) {
                inv.key(format!("{}{id}", self.keys.job_prefix()));
                // A job whose hash is gone has no kind to name its lock by; its lock (if any)
                // expires with its TTL.
                let lock = match kind.as_deref().map(Kind::parse) {
                    Some(Ok(kind)) => self.keys.lock(tenant, &kind),
                    _ => format!("{}:lock:-", self.settings.prefix),
                };
                inv.key(lock).arg(id);
            }
            let n: usize = bounded(inv.invoke_async(&mut conn)).await?;
            Ok(n)
        })
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let mut conn = self.connection();
            let _: String = bounded(redis::cmd("PING").query_async(&mut conn)).await?;
            Ok(())
        })
    }

    fn warnings(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(async move {
            let mut conn = self.connection();
            let policy: Vec<String> = bounded(
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

    fn is_durable(&self) -> bool {
        true
    }

    /// AOF on, or at least one RDB save point. A Redis that answers neither (CONFIG renamed
    /// or disabled, as on some managed services) cannot be judged: `None`.
    fn persists(&self) -> BoxFuture<'_, Result<Option<bool>, StoreError>> {
        Box::pin(async move {
            let mut conn = self.connection();
            let get = |name: &'static str| {
                let mut cmd = redis::cmd("CONFIG");
                cmd.arg("GET").arg(name);
                cmd
            };
            let Ok(appendonly) =
                bounded(get("appendonly").query_async::<Vec<String>>(&mut conn)).await
            else {
                return Ok(None);
            };
            let Ok(save) = bounded(get("save").query_async::<Vec<String>>(&mut conn)).await else {
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
}
