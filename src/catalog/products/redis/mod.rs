//! The catalogue in Redis: one hash per tenant for products, enrichments and the neighbour
//! table, and a string for the pairing state (`CatalogKeys` is the only place their names
//! are built). Every write is one fenced script call per batch (`jobs::fence`). A new
//! neighbour table is staged under keys of its own and put in place in one fenced step
//! (`table`), so readers see the old table or the new one, never half of each.

mod cursor;
mod table;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Script;
use serde::Deserialize;
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

use self::cursor::ScanCursor;
use super::pairing::Pairing;
use super::record::{Enrichment, Neighbour, PairingInput, Product, ProductKey, Stored};
use super::store::{
    CatalogStore, CatalogStoreError, Cleared, Rewrite, Swap, Upserted, VersionsPage, Write,
};
use crate::jobs::fence::{Fence, Hold, ScriptFence};
use crate::jobs::TenantId;
use crate::topology::{Connection, Primary, Target};

/// Builds the catalogue's keys: `<prefix>:<tenant>:products|enriched|neighbours|pairing`, and
/// pair's staging keys with the set that names them.
#[derive(Clone, Debug)]
pub struct CatalogKeys {
    prefix: String,
}

impl CatalogKeys {
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }
    pub fn products(&self, t: &TenantId) -> String {
        format!("{}:{t}:products", self.prefix)
    }
    pub fn enriched(&self, t: &TenantId) -> String {
        format!("{}:{t}:enriched", self.prefix)
    }
    pub fn neighbours(&self, t: &TenantId) -> String {
        format!("{}:{t}:neighbours", self.prefix)
    }
    /// The state the last pair kept (`Pairing::encode`).
    pub fn pairing(&self, t: &TenantId) -> String {
        format!("{}:{t}:pairing", self.prefix)
    }
    /// Where a new neighbour table is written before it is renamed over the old one (and,
    /// with suffixes, the keys whose rows go and the new pairing state).
    pub fn neighbours_staging(&self, t: &TenantId) -> String {
        format!(
            "{}:{t}:neighbours:staging:{}",
            self.prefix,
            crate::jobs::JobId::new()
        )
    }
    /// The set naming the tenant's staging keys while they live (written in the step that
    /// stages each one), so that a delete finds them without a scan.
    pub fn staged(&self, t: &TenantId) -> String {
        format!("{}:{t}:neighbours:staged", self.prefix)
    }
}

/// The catalogue in Redis. Its methods block (job functions call them from their blocking
/// threads, handlers through `spawn_blocking`), but the I/O is the runtime's: each call is
/// handed to one multiplexed connection of the catalogue's own, so concurrent jobs' calls
/// share its round trips, and a blocked thread parks instead of sleeping on a socket. The
/// job store keeps its own connection, so a large catalogue page never delays a poll.
/// Never call these methods on an async worker thread: `block_on` would panic there.
pub struct RedisCatalog {
    primary: Primary,
    runtime: Handle,
    keys: CatalogKeys,
}

/// How long one catalogue call may take before the store counts as unreachable.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an unfinished staging neighbour table may linger.
const STAGING_TTL_SECS: u64 = 3600;
/// A fenced write to one key: fields of a hash (products, enrichments, a staged table),
/// members of a staged set, a slice of a staged pairing state.
static FENCED_WRITE: LazyLock<Script> =
    LazyLock::new(|| fenced_script(include_str!("fenced_write.lua")));

/// The writes `fenced_write.lua` makes.
#[derive(Clone, Copy, Debug)]
enum FencedWrite {
    /// Fields and values of a hash.
    Hset,
    /// Members of a set.
    Sadd,
    /// Bytes appended to a string.
    Append,
}

impl FencedWrite {
    fn command(self) -> &'static str {
        match self {
            FencedWrite::Hset => "HSET",
            FencedWrite::Sadd => "SADD",
            FencedWrite::Append => "APPEND",
        }
    }
}

fn fenced_script(body: &str) -> Script {
    Script::new(&format!("{}\n{body}", *crate::jobs::fence::FENCE_LUA))
}

/// Puts a fence's keys and values where `fence_at` reads them (jobs/lua/fence.lua), after
/// the script's own keys.
fn with_fence(inv: &mut redis::ScriptInvocation<'_>, fence: &ScriptFence) {
    inv.key(&fence.gone);
    match &fence.run {
        Some((record, claim)) => {
            inv.key(record).arg(fence.since).arg(*claim);
        }
        None => {
            inv.arg(fence.since).arg("");
        }
    }
}

/// A fenced script's answer: written (or swapped), or why not.
fn hold_of(word: &str) -> Result<Hold, CatalogStoreError> {
    match word {
        "written" | "swapped" => Ok(Hold::Held),
        "fenced" => Ok(Hold::Fenced),
        "missing" => Ok(Hold::Missing),
        other => Err(CatalogStoreError::Corrupt(format!(
            "a fenced write answered `{other}`"
        ))),
    }
}
/// How many fields one HSET/HMGET carries at most, to keep each command small.
const CHUNK: usize = 1000;

impl RedisCatalog {
    /// Connects lazily to a fixed Redis, on the runtime it is opened in (it must be opened
    /// inside one).
    pub fn open(url: &str, prefix: &str) -> Result<Self, CatalogStoreError> {
        Self::open_target(Target::Url(url.to_owned()), prefix)
    }

    /// Connects lazily to the primary `target` names (following a failover), on the runtime
    /// it is opened in.
    pub fn open_target(target: Target, prefix: &str) -> Result<Self, CatalogStoreError> {
        let unavailable = |e: &dyn std::fmt::Display| CatalogStoreError::Unavailable(e.to_string());
        let runtime = Handle::try_current().map_err(|e| unavailable(&e))?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(IO_TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let primary = {
            let _entered = runtime.enter();
            Primary::open(target, config).map_err(|e| unavailable(&e))?
        };
        Ok(Self {
            primary,
            runtime,
            keys: CatalogKeys::new(prefix),
        })
    }

    /// Runs one command, blocking this thread until it is answered.
    fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, CatalogStoreError> {
        self.block(|mut conn| async move { cmd.query_async(&mut conn).await })
    }

    /// Runs a pipeline (a transaction if it is `atomic`) in one round trip.
    fn query_pipe<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, CatalogStoreError> {
        self.block(|mut conn| async move { pipe.query_async(&mut conn).await })
    }

    /// Runs `call` on the primary's connection under [`IO_TIMEOUT`], telling the primary of
    /// a failure (a sign of a failover makes it ask the sentinels again).
    fn block<T, F>(&self, call: impl FnOnce(Connection) -> F) -> Result<T, CatalogStoreError>
    where
        F: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let primary = &self.primary;
        let answer = self.runtime.block_on(async {
            tokio::time::timeout(IO_TIMEOUT, async {
                let conn = primary.connection().await?;
                call(conn).await
            })
            .await
        });
        match answer {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e))
                if matches!(
                    e.kind(),
                    redis::ErrorKind::Parse | redis::ErrorKind::UnexpectedReturnType
                ) =>
            {
                Err(CatalogStoreError::Corrupt(e.to_string()))
            }
            Ok(Err(e)) => {
                primary.failed(&e);
                Err(CatalogStoreError::Unavailable(e.to_string()))
            }
            Err(_) => {
                primary.suspect();
                Err(CatalogStoreError::Unavailable(format!(
                    "no answer within {} s",
                    IO_TIMEOUT.as_secs()
                )))
            }
        }
    }

    /// Makes one write to `key` while `fence` holds: checked inside the script when the jobs
    /// are in this Redis, else under the job store's own check (`Fence::while_held`). A key
    /// staged aside (`staged_in`, the set naming the tenant's staging keys) expires after
    /// `STAGING_TTL_SECS` and is named in that set in the same step.
    fn write_fenced<A: redis::ToRedisArgs + Copy + Send + Sync>(
        &self,
        write: FencedWrite,
        key: &str,
        staged_in: Option<&str>,
        args: A,
        fence: &dyn Fence,
    ) -> Result<Hold, CatalogStoreError> {
        let ttl = staged_in.map_or(0, |_| STAGING_TTL_SECS);
        if let Some(checked) = fence.in_script() {
            let word: String = self.block(|mut conn| async move {
                let mut inv = FENCED_WRITE.key(key);
                if let Some(set) = staged_in {
                    inv.key(set);
                }
                with_fence(&mut inv, &checked);
                inv.arg(ttl)
                    .arg(write.command())
                    .arg(args)
                    .invoke_async(&mut conn)
                    .await
            })?;
            return hold_of(&word);
        }
        let mut written = Ok(());
        let hold = fence.while_held(&mut || {
            let mut pipe = redis::pipe();
            pipe.atomic()
                .cmd(write.command())
                .arg(key)
                .arg(args)
                .ignore();
            if let Some(set) = staged_in {
                pipe.expire(key, ttl as i64).ignore();
                pipe.sadd(set, key)
                    .ignore()
                    .expire(set, ttl as i64)
                    .ignore();
            }
            written = self.query_pipe::<()>(&pipe);
        });
        written.map(|()| hold)
    }

    fn decode<T: for<'de> Deserialize<'de>>(raw: &str) -> Result<T, CatalogStoreError> {
        serde_json::from_str(raw).map_err(|e| CatalogStoreError::Corrupt(e.to_string()))
    }

    fn hget_decoded<T: for<'de> Deserialize<'de>>(
        &self,
        key: &str,
        field: &ProductKey,
    ) -> Result<Option<T>, CatalogStoreError> {
        let raw: Option<String> = self.query(redis::cmd("HGET").arg(key).arg(field.as_str()))?;
        raw.map(|r| Self::decode(&r)).transpose()
    }

    fn hgetall_decoded<T: for<'de> Deserialize<'de>>(
        &self,
        key: &str,
    ) -> Result<Vec<(String, T)>, CatalogStoreError> {
        self.hscan_raw(key)?
            .into_iter()
            .map(|(k, v)| Ok((k, Self::decode(&v)?)))
            .collect()
    }

    /// Every field of a hash and its value as stored, in scan order.
    fn hscan_raw(&self, key: &str) -> Result<Vec<(String, String)>, CatalogStoreError> {
        let mut out = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, chunk): (u64, Vec<(String, String)>) = self.query(
                redis::cmd("HSCAN")
                    .arg(key)
                    .arg(cursor)
                    .arg("COUNT")
                    .arg(CHUNK),
            )?;
            out.extend(chunk);
            if next == 0 {
                return Ok(out);
            }
            cursor = next;
        }
    }
}

/// The rows of `chunk` whose content differs from what the store holds (`old`, the stored
/// records of the same keys, in order), as fields to write, and how each row counts. A key
/// repeated inside one chunk: the later row wins, counted as an update.
fn changed(chunk: &[Product], old: Vec<Option<String>>) -> (Vec<(&str, String)>, Upserted) {
    let mut counts = Upserted::default();
    let mut writes: Vec<(&str, String)> = Vec::new();
    let mut seen: HashMap<&str, String> = HashMap::new();
    for (p, old) in chunk.iter().zip(old) {
        let hash = p.content_hash();
        let previous = seen.get(p.product_key.as_str()).cloned().or_else(|| {
            old.and_then(|raw| {
                serde_json::from_str::<Stored>(&raw)
                    .ok()
                    .map(|s| s.content_hash)
            })
        });
        match previous {
            Some(h) if h == hash => counts.unchanged += 1,
            Some(_) => counts.updated += 1,
            None => counts.created += 1,
        }
        if seen.get(p.product_key.as_str()) != Some(&hash) {
            let stored = Stored {
                product: p.clone(),
                content_hash: hash.clone(),
            };
            writes.push((
                p.product_key.as_str(),
                serde_json::to_string(&stored).expect("a product always serialises"),
            ));
        }
        seen.insert(p.product_key.as_str(), hash);
    }
    (writes, counts)
}

impl CatalogStore for RedisCatalog {
    fn upsert(
        &self,
        tenant: &TenantId,
        products: &[Product],
        fence: &dyn Fence,
    ) -> Result<Write<Upserted>, CatalogStoreError> {
        let key = self.keys.products(tenant);
        let mut counts = Upserted::default();
        for chunk in products.chunks(CHUNK) {
            let fields: Vec<&str> = chunk.iter().map(|p| p.product_key.as_str()).collect();
            let old: Vec<Option<String>> =
                self.query(redis::cmd("HMGET").arg(&key).arg(&fields))?;
            let (writes, chunk_counts) = changed(chunk, old);
            // Rows that changed nothing need no write, so no fence either.
            if !writes.is_empty() {
                let hold = self.write_fenced(FencedWrite::Hset, &key, None, &writes[..], fence)?;
                if hold != Hold::Held {
                    return Write::from_hold(hold, counts);
                }
            }
            counts.created += chunk_counts.created;
            counts.updated += chunk_counts.updated;
            counts.unchanged += chunk_counts.unchanged;
        }
        Ok(Write::Done(counts))
    }

    fn get(
        &self,
        tenant: &TenantId,
        key: &ProductKey,
    ) -> Result<Option<Stored>, CatalogStoreError> {
        self.hget_decoded(&self.keys.products(tenant), key)
    }

    fn page(
        &self,
        tenant: &TenantId,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<(Vec<Stored>, Option<String>), CatalogStoreError> {
        // HSCAN cannot resume inside a batch, so the cursor names the batch a page stopped
        // in and the last key served from it: `<scan cursor>` or `<scan cursor>-<key>`. A
        // batch is served in key order; resuming re-reads it and skips the keys up to that
        // one. Batches are read until the page is full, so a page holds at most `limit`.
        let limit = limit.max(1);
        let key = self.keys.products(tenant);
        let (mut scan, mut after) = ScanCursor::decode(cursor)?;
        let mut items: Vec<Stored> = Vec::with_capacity(limit);
        loop {
            let (next, mut batch): (u64, Vec<(String, String)>) = self.query(
                redis::cmd("HSCAN")
                    .arg(&key)
                    .arg(scan)
                    .arg("COUNT")
                    .arg(limit),
            )?;
            batch.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            if let Some(last) = after.take() {
                batch.retain(|(k, _)| *k > last);
            }
            let room = limit - items.len();
            if batch.len() > room {
                for (_, v) in &batch[..room] {
                    items.push(Self::decode(v)?);
                }
                let resume =
                    ScanCursor::inside(scan, items.last().map(|s| s.product.product_key.as_str()));
                return Ok((items, Some(resume)));
            }
            for (_, v) in &batch {
                items.push(Self::decode(v)?);
            }
            if next == 0 {
                return Ok((items, None));
            }
            scan = next;
            if items.len() == limit {
                return Ok((items, Some(next.to_string())));
            }
        }
    }

    fn all(&self, tenant: &TenantId) -> Result<Vec<Stored>, CatalogStoreError> {
        let mut items: Vec<Stored> = self
            .hgetall_decoded::<Stored>(&self.keys.products(tenant))?
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        items.sort_by(|a, b| a.product.product_key.cmp(&b.product.product_key));
        Ok(items)
    }

    fn enrichments(
        &self,
        tenant: &TenantId,
    ) -> Result<HashMap<ProductKey, Enrichment>, CatalogStoreError> {
        Ok(self
            .hgetall_decoded::<Enrichment>(&self.keys.enriched(tenant))?
            .into_iter()
            .filter_map(|(k, v)| ProductKey::parse(&k).ok().map(|k| (k, v)))
            .collect())
    }

    fn enrichment(
        &self,
        tenant: &TenantId,
        key: &ProductKey,
    ) -> Result<Option<Enrichment>, CatalogStoreError> {
        self.hget_decoded(&self.keys.enriched(tenant), key)
    }

    fn save_enrichments(
        &self,
        tenant: &TenantId,
        batch: &[(ProductKey, Enrichment)],
        fence: &dyn Fence,
    ) -> Result<Write<()>, CatalogStoreError> {
        let key = self.keys.enriched(tenant);
        for chunk in batch.chunks(CHUNK) {
            let writes: Vec<(&str, String)> = chunk
                .iter()
                .map(|(k, e)| {
                    (
                        k.as_str(),
                        serde_json::to_string(e).expect("an enrichment always serialises"),
                    )
                })
                .collect();
            let hold = self.write_fenced(FencedWrite::Hset, &key, None, &writes[..], fence)?;
            if hold != Hold::Held {
                return Write::from_hold(hold, ());
            }
        }
        Ok(Write::Done(()))
    }

    fn replace_neighbours(
        &self,
        tenant: &TenantId,
        table: &[(ProductKey, Vec<Neighbour>)],
        fence: &dyn Fence,
    ) -> Result<Swap, CatalogStoreError> {
        self.replace_table(tenant, table, fence)
    }

    fn neighbours(
        &self,
        tenant: &TenantId,
        key: &ProductKey,
    ) -> Result<Option<Vec<Neighbour>>, CatalogStoreError> {
        self.hget_decoded(&self.keys.neighbours(tenant), key)
    }

    fn hashes(&self, tenant: &TenantId) -> Vec<String> {
        vec![
            self.keys.products(tenant),
            self.keys.enriched(tenant),
            self.keys.neighbours(tenant),
            self.keys.pairing(tenant),
            self.keys.staged(tenant),
        ]
    }

    fn clear(&self, tenant: &TenantId) -> Result<Cleared, CatalogStoreError> {
        let mut keys = self.hashes(tenant);
        // A key staged after this read is a run's begun after the delete (older ones are refused).
        let staging: Vec<String> =
            self.query(redis::cmd("SMEMBERS").arg(self.keys.staged(tenant)))?;
        keys.extend(staging);
        let (products, extracted_attributes, neighbours): (u64, u64, u64) = self.query_pipe(
            redis::pipe()
                .atomic()
                .hlen(&keys[0])
                .hlen(&keys[1])
                .hlen(&keys[2])
                .del(&keys)
                .ignore(),
        )?;
        Ok(Cleared {
            products,
            extracted_attributes,
            neighbours,
        })
    }

    fn remove(&self, tenant: &TenantId, keys: &[ProductKey]) -> Result<u64, CatalogStoreError> {
        self.remove_products(tenant, keys)
    }

    fn versions_page(
        &self,
        tenant: &TenantId,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<VersionsPage, CatalogStoreError> {
        self.product_versions(tenant, cursor, limit)
    }

    fn pairing_inputs(
        &self,
        tenant: &TenantId,
        keys: &[ProductKey],
    ) -> Result<Vec<Option<PairingInput>>, CatalogStoreError> {
        self.read_pairing_inputs(tenant, keys)
    }

    fn pairing(
        &self,
        tenant: &TenantId,
        stop: &CancellationToken,
    ) -> Result<Option<Arc<Pairing>>, CatalogStoreError> {
        self.load_pairing(tenant, stop)
    }

    fn save_pairing(
        &self,
        tenant: &TenantId,
        pairing: Arc<Pairing>,
        rewrite: Rewrite<'_>,
        fence: &dyn Fence,
        stop: &CancellationToken,
    ) -> Result<Swap, CatalogStoreError> {
        self.save_pairing_table(tenant, &pairing, rewrite, fence, stop)
    }
}
