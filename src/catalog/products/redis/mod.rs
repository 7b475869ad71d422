//! The catalogue in Redis: one hash per tenant for products, enrichments and the neighbour
//! table, a string for the pairing state and the change feed's two keys, all in the tenant's
//! hash slot (`CatalogKeys` is the only place their names are built). Every write is one fenced script call per batch (`jobs::fence`). A new
//! neighbour table is staged under keys of its own and put in place in one fenced step
//! (`table`), so readers see the old table or the new one, never half of each.

mod cursor;
mod direct;
mod feed;
#[cfg(test)]
mod keys_test;
mod table;
mod write;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

use self::direct::Direct;
use self::table::Hashed;
use self::write::{Beside, FencedWrite};
use super::feed::{Changed, CHANGE_FEED_MAX};
use super::pairing::Pairing;
use super::record::{Enrichment, Neighbour, PairingInput, Product, ProductKey, Stored};
use super::store::{
    CatalogStore, CatalogStoreError, Cleared, Rewrite, Swap, Upserted, VersionsPage, Write,
};
use crate::jobs::fence::{Fence, Hold};
use crate::jobs::keys::Group;
use crate::jobs::TenantId;
use crate::topology::{Connection, Primary, Target};

/// Builds the catalogue's keys: `<prefix>:{<tag>}:<tenant>:products|enriched|neighbours|pairing`
/// and the change feed's, and pair's staging keys with the set that names them. `<tag>` is the
/// tenant's slot group's (`jobs::keys::Group`), the jobs' too: a fenced write's script reads
/// the tenant's tombstone and its run's record in the same hash slot as the key it writes.
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
    /// `<prefix>:{<tag>}:<tenant>`: where each of the tenant's keys starts.
    fn of(&self, t: &TenantId) -> String {
        self.named(t, "")
    }
    /// `<prefix>:{<tag>}:<tenant><suffix>`, in one allocation of its length (no `format!`:
    /// enrich's quick path names the products key of every job it answers).
    fn named(&self, t: &TenantId, suffix: &str) -> String {
        let (tag, tenant) = (Group::of(t).tag(), t.as_str());
        let mut key =
            String::with_capacity(self.prefix.len() + tag.len() + tenant.len() + suffix.len() + 4);
        for piece in [self.prefix.as_str(), ":{", tag, "}:", tenant, suffix] {
            key.push_str(piece);
        }
        key
    }
    pub fn products(&self, t: &TenantId) -> String {
        self.named(t, ":products")
    }
    /// The listing's index: the product keys in key order (`cursor`).
    pub fn listing(&self, t: &TenantId) -> String {
        self.named(t, ":products:order")
    }
    pub fn enriched(&self, t: &TenantId) -> String {
        self.named(t, ":enriched")
    }
    pub fn neighbours(&self, t: &TenantId) -> String {
        self.named(t, ":neighbours")
    }
    /// The state the last pair kept (`Pairing::encode`).
    pub fn pairing(&self, t: &TenantId) -> String {
        self.named(t, ":pairing")
    }
    /// Where a new neighbour table is written before it is renamed over the old one (and,
    /// with suffixes, the keys whose rows go and the new pairing state).
    pub fn neighbours_staging(&self, t: &TenantId) -> String {
        format!(
            "{}:neighbours:staging:{}",
            self.of(t),
            crate::jobs::JobId::new()
        )
    }
    /// The set naming the tenant's staging keys while they live (written in the step that
    /// stages each one), so that a delete finds them without a scan.
    pub fn staged(&self, t: &TenantId) -> String {
        self.named(t, ":neighbours:staged")
    }
    /// What the tenant's last written batch recorded beside its rows (`write::Recorded`): a
    /// batch sent again after its answer was lost counts what it first counted.
    pub fn batch(&self, t: &TenantId) -> String {
        self.named(t, ":batch")
    }
    /// The change feed: products by the position of their last write (`feed`).
    pub fn changes(&self, t: &TenantId) -> String {
        self.named(t, ":changes")
    }
    /// The change feed's position, and where the last pair read it and it overflowed.
    pub fn changes_at(&self, t: &TenantId) -> String {
        self.named(t, ":changes:at")
    }
}

/// The catalogue in Redis. Its methods block (job functions call them from their blocking
/// threads, handlers through `spawn_blocking`). On a fixed Redis the calling thread makes
/// the call over a connection of its own (`direct`), with no hand-off to the runtime and
/// back; through sentinels or on a cluster, and for a table's swap, the call is handed to a
/// multiplexed connection of the catalogue's own on the runtime, which follows the primary.
/// The job store keeps its own connection, so a large catalogue page never delays a poll.
/// Never call these methods on an async worker thread: they block it.
pub struct RedisCatalog {
    primary: Primary,
    /// The calling threads' own connections, on a fixed Redis.
    direct: Option<Direct>,
    runtime: Handle,
    keys: CatalogKeys,
    /// The most keys a tenant's change feed notes before it overflows.
    feed_bound: usize,
}

/// Whether a call may be sent once more when its connection is found dropped: one that
/// leaves the same state run twice (a read, a write of whole values or members, a delete);
/// not an `APPEND` or a table's swap.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Resend {
    Yes,
    No,
}

/// How long one catalogue call may take before the store counts as unreachable.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
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
        let direct = Direct::open(&target, IO_TIMEOUT).map_err(|e| unavailable(&e))?;
        let primary = {
            let _entered = runtime.enter();
            Primary::open(target, config).map_err(|e| unavailable(&e))?
        };
        Ok(Self {
            primary,
            direct,
            runtime,
            keys: CatalogKeys::new(prefix),
            feed_bound: CHANGE_FEED_MAX,
        })
    }

    /// The same store with a change feed that overflows past `bound` keys (tests make it
    /// overflow with a small catalogue).
    pub fn with_feed_bound(self, bound: usize) -> Self {
        Self {
            feed_bound: bound,
            ..self
        }
    }

    /// Runs one command, blocking this thread until it is answered.
    fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, CatalogStoreError> {
        match &self.direct {
            Some(direct) => self.answer(direct.call(Resend::Yes, |conn| cmd.query(conn))),
            None => self.block(Resend::Yes, |mut conn| async move {
                cmd.query_async(&mut conn).await
            }),
        }
    }

    /// Runs a pipeline (a transaction if it is `atomic`) in one round trip.
    fn query_pipe<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, CatalogStoreError> {
        self.query_pipe_as(Resend::Yes, pipe)
    }

    /// `query_pipe`, sent again on a dropped connection only when `resend` says so.
    fn query_pipe_as<T: redis::FromRedisValue>(
        &self,
        resend: Resend,
        pipe: &redis::Pipeline,
    ) -> Result<T, CatalogStoreError> {
        match &self.direct {
            Some(direct) => self.answer(direct.call(resend, |conn| pipe.query(conn))),
            None => self.block(resend, |mut conn| async move {
                pipe.query_async(&mut conn).await
            }),
        }
    }

    /// Runs a script, sent again on a dropped connection only when `resend` says so.
    fn invoke<T: redis::FromRedisValue>(
        &self,
        resend: Resend,
        script: &redis::ScriptInvocation<'_>,
    ) -> Result<T, CatalogStoreError> {
        match &self.direct {
            Some(direct) => self.answer(direct.call(resend, |conn| script.invoke(conn))),
            None => self.block(resend, |mut conn| async move {
                script.invoke_async(&mut conn).await
            }),
        }
    }

    /// The key that exists exactly while the tenant holds a product.
    pub fn products_key(&self, tenant: &TenantId) -> String {
        self.keys.products(tenant)
    }

    /// Whether the tenant holds no product: asked on the runtime's connection, blocking no
    /// thread (what `catalog::RuntimeReads` answers).
    pub async fn holds_no_products(&self, tenant: &TenantId) -> Result<bool, CatalogStoreError> {
        // One command built in place, sized for its two arguments (`redis::cmd(..).arg(..)`
        // grows its buffers and leaves a copy to make).
        let key = self.products_key(tenant);
        let mut exists = redis::Cmd::with_capacity(2, "EXISTS".len() + key.len());
        exists.arg("EXISTS").arg(key);
        let answer = tokio::time::timeout(IO_TIMEOUT, async {
            exists
                .query_async::<u64>(&mut self.primary.connection().await?)
                .await
        });
        match answer.await {
            Ok(answer) => self.answer(answer).map(|n| n == 0),
            Err(_) => Err(self.silent()),
        }
    }

    /// Runs `call` on the primary's connection under [`IO_TIMEOUT`], telling the primary of
    /// a failure (a sign of a failover makes it ask the sentinels again). A connection found
    /// dropped (Redis restarted or failed over while this store was idle: the connection
    /// manager learns it only from the next call) is made again and, when `resend` allows,
    /// the call sent once more on the new one, so the first request after an outage is not
    /// refused while Redis answers. A call whose answer was lost may thus run twice: only
    /// calls that leave the same state when run twice are sent again.
    fn block<T, F>(
        &self,
        resend: Resend,
        call: impl Fn(Connection) -> F,
    ) -> Result<T, CatalogStoreError>
    where
        F: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let primary = &self.primary;
        let answer = self.runtime.block_on(async {
            tokio::time::timeout(IO_TIMEOUT, async {
                match call(primary.connection().await?).await {
                    Err(e) if e.is_connection_dropped() && resend == Resend::Yes => {
                        primary.failed(&e);
                        call(primary.connection().await?).await
                    }
                    answer => answer,
                }
            })
            .await
        });
        match answer {
            Ok(answer) => self.answer(answer),
            Err(_) => Err(self.silent()),
        }
    }

    /// What a call's answer means to the store.
    fn answer<T>(&self, answer: redis::RedisResult<T>) -> Result<T, CatalogStoreError> {
        match answer {
            Ok(v) => Ok(v),
            // A refusal no retry mends (a key of another type, a call across slots) is a
            // defect like a record it cannot read, not an outage to wait out.
            Err(e)
                if matches!(
                    e.kind(),
                    redis::ErrorKind::Parse | redis::ErrorKind::UnexpectedReturnType
                ) || crate::topology::is_permanent(&e) =>
            {
                Err(CatalogStoreError::Corrupt(e.to_string()))
            }
            Err(e) if e.is_timeout() => Err(self.silent()),
            Err(e) => {
                self.primary.failed(&e);
                Err(CatalogStoreError::Unavailable(e.to_string()))
            }
        }
    }

    /// A call got no answer within [`IO_TIMEOUT`]: the primary may be gone.
    fn silent(&self) -> CatalogStoreError {
        self.primary.suspect();
        CatalogStoreError::Unavailable(format!("no answer within {} s", IO_TIMEOUT.as_secs()))
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

impl CatalogStore for RedisCatalog {
    fn upsert(
        &self,
        tenant: &TenantId,
        products: &[Product],
        fence: &dyn Fence,
    ) -> Result<Write<Upserted>, CatalogStoreError> {
        self.upsert_chunks(tenant, products, fence, None)
    }

    fn upsert_batch(
        &self,
        tenant: &TenantId,
        products: &[Product],
        fence: &dyn Fence,
        batch: &str,
    ) -> Result<Write<Upserted>, CatalogStoreError> {
        self.upsert_chunks(tenant, products, fence, Some(batch))
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
        self.key_page(tenant, limit, cursor)
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
            let fields: Vec<&str> = chunk.iter().map(|(k, _)| k.as_str()).collect();
            let beside = Beside::Feed(tenant);
            let write = (&writes[..], &fields[..]);
            let hold = self.write_fenced(FencedWrite::Hset, &key, beside, write, fence)?;
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

    fn neighbour_table(
        &self,
        tenant: &TenantId,
    ) -> Result<Vec<(ProductKey, Vec<Neighbour>)>, CatalogStoreError> {
        let rows = self.hgetall_decoded(&self.keys.neighbours(tenant))?;
        let key = |k: String| ProductKey::parse(&k).map_err(CatalogStoreError::Corrupt);
        rows.into_iter()
            .map(|(k, row)| Ok((key(k)?, row)))
            .collect()
    }

    fn hashes(&self, tenant: &TenantId) -> Vec<String> {
        vec![
            self.keys.products(tenant),
            self.keys.enriched(tenant),
            self.keys.neighbours(tenant),
            self.keys.pairing(tenant),
            self.keys.staged(tenant),
            self.keys.changes(tenant),
            self.keys.changes_at(tenant),
            self.keys.listing(tenant),
            self.keys.batch(tenant),
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
                // UNLINK: the keys leave the keyspace now and Redis frees a big tenant's
                // memory in its background thread, not while every other call waits.
                .unlink(&keys)
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

    fn versions_of(
        &self,
        tenant: &TenantId,
        keys: &[ProductKey],
    ) -> Result<Vec<Option<u64>>, CatalogStoreError> {
        self.map_records(tenant, keys, |hashed: Hashed, enrichment| {
            Ok(hashed.version(enrichment.as_deref()))
        })
    }

    fn changed(&self, tenant: &TenantId) -> Result<Changed, CatalogStoreError> {
        self.read_changed(tenant)
    }

    fn pairing_inputs(
        &self,
        tenant: &TenantId,
        keys: &[ProductKey],
    ) -> Result<Vec<Option<PairingInput>>, CatalogStoreError> {
        self.pairing_inputs_of(tenant, keys)
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
        fed_upto: u64,
        fence: &dyn Fence,
        stop: &CancellationToken,
    ) -> Result<Swap, CatalogStoreError> {
        self.save_pairing_table(tenant, &pairing, (rewrite, fed_upto), fence, stop)
    }
}
