//! Products: the record, its checking from one row's JSON object (rows are framed by
//! `feed`), its field limits, its content hash, and the per-tenant catalogue store (Redis,
//! or embedded) the jobs read and write.
//!
//! A product is valid by construction: `Product::from_json` checks every field against
//! `limits`, so one bad row is reported with its line and never stops the rows around it.
//! Catalogue data has no TTL. The store knows nothing of HTTP and builds no job keys: the
//! neighbour swap checks the job record its run's fence names (`jobs::fence`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::Script;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::runtime::Handle;

use crate::jobs::fence::Fence;
use crate::jobs::TenantId;
use crate::topology::{Primary, Target};

/// A product's key: 1–128 characters of `A-Z a-z 0-9 _ . : -`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ProductKey(String);

impl ProductKey {
    pub fn parse(raw: &str) -> Result<Self, String> {
        let ok = (1..=limits::KEY).contains(&raw.len())
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'));
        if ok {
            Ok(Self(raw.to_owned()))
        } else {
            Err("product_key must be 1–128 characters of A-Z a-z 0-9 _ . : -".into())
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Product {
    pub product_key: ProductKey,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brand: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_cents: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taxonomy_path: Vec<String>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub attributes: Map<String, Value>,
}

/// Field limits, checked at parse time for every entry point (sync, import). Counted in
/// characters, so a limit means the same in any script. Each is far above what a real
/// catalogue writes and far below what would let one row crowd out the rest.
pub mod limits {
    /// `product_key`: the longest key a URL path and a Redis field name carry comfortably.
    pub const KEY: usize = 128;
    /// `name`: a product title; a page shows a few hundred characters at most.
    pub const NAME: usize = 1_000;
    /// `brand`: a brand or maker's name.
    pub const BRAND: usize = 200;
    /// `description`: a product page's text.
    pub const DESCRIPTION: usize = 10_000;
    /// `taxonomy_path`: levels in a category tree (Google's has 7).
    pub const TAXONOMY_DEPTH: usize = 10;
    /// One `taxonomy_path` level's name.
    pub const TAXONOMY_SEGMENT: usize = 200;
    /// `attributes`: how many.
    pub const ATTRIBUTES: usize = 100;
    /// One attribute's name.
    pub const ATTRIBUTE_NAME: usize = 100;
    /// All attributes together, as JSON text, in bytes.
    pub const ATTRIBUTES_BYTES: usize = 16 * 1024;
}

/// A text field: trimmed, absent when blank, at most `max` characters.
fn text_field(field: &str, v: Option<Value>, max: usize) -> Result<Option<String>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => {
            let s = s.trim();
            if s.is_empty() {
                Ok(None)
            } else if s.chars().count() > max {
                Err(format!("{field} is longer than {max} characters"))
            } else {
                Ok(Some(s.to_owned()))
            }
        }
        Some(_) => Err(format!("{field} must be a string")),
    }
}

fn key_field(v: Option<Value>) -> Result<ProductKey, String> {
    match v {
        Some(Value::String(s)) => ProductKey::parse(s.trim()),
        Some(Value::Number(n)) => ProductKey::parse(&n.to_string()),
        Some(_) => Err("product_key must be a string".into()),
        None => Err("product_key is required".into()),
    }
}

fn name_field(v: Option<Value>) -> Result<String, String> {
    match text_field("name", v, limits::NAME)? {
        Some(name) => Ok(name),
        None => Err("name is required and must not be empty".into()),
    }
}

const PRICE_RULE: &str =
    "price_cents must be a whole number of cents from 0 to 9223372036854775807";

/// A price in cents: a JSON whole number or its text. Anything that does not fit an i64
/// (1e400, 2^63) is an invalid value, never rounded and never dropped to null.
fn price_field(v: Option<Value>) -> Result<Option<i64>, String> {
    let cents = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => return Ok(None),
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) => s.trim().parse::<i64>().ok(),
        Some(_) => return Err("price_cents must be a number".into()),
    };
    match cents {
        Some(c) if c >= 0 => Ok(Some(c)),
        _ => Err(PRICE_RULE.into()),
    }
}

fn taxonomy_field(v: Option<Value>) -> Result<Vec<String>, String> {
    let levels = match v {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => split_taxonomy(&s),
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
                _ => Err("taxonomy_path must be a list of non-empty strings".to_owned()),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("taxonomy_path must be a list of strings or \"A > B > C\"".into()),
    };
    if levels.len() > limits::TAXONOMY_DEPTH {
        return Err(format!(
            "taxonomy_path has more than {} levels",
            limits::TAXONOMY_DEPTH
        ));
    }
    if levels
        .iter()
        .any(|l| l.chars().count() > limits::TAXONOMY_SEGMENT)
    {
        return Err(format!(
            "a taxonomy_path level is longer than {} characters",
            limits::TAXONOMY_SEGMENT
        ));
    }
    Ok(levels)
}

fn attributes_field(v: Option<Value>) -> Result<Map<String, Value>, String> {
    let not_object = || "attributes must be a JSON object".to_owned();
    let attributes = match v {
        None | Some(Value::Null) => return Ok(Map::new()),
        Some(Value::Object(m)) => m,
        Some(Value::String(s)) if s.trim().is_empty() => return Ok(Map::new()),
        Some(Value::String(s)) => match crate::strict_json::parse(s.as_bytes()) {
            Ok(Value::Object(m)) => m,
            Err(e @ crate::strict_json::StrictJsonError::DuplicateKey(_)) => {
                return Err(format!("attributes: {e}"))
            }
            _ => return Err(not_object()),
        },
        Some(_) => return Err(not_object()),
    };
    if attributes.len() > limits::ATTRIBUTES {
        return Err(format!(
            "attributes has more than {} entries",
            limits::ATTRIBUTES
        ));
    }
    if attributes
        .keys()
        .any(|k| k.trim().is_empty() || k.chars().count() > limits::ATTRIBUTE_NAME)
    {
        return Err(format!(
            "an attribute name is empty or longer than {} characters",
            limits::ATTRIBUTE_NAME
        ));
    }
    let size = serde_json::to_string(&attributes)
        .expect("a JSON map always serialises")
        .len();
    if size > limits::ATTRIBUTES_BYTES {
        return Err(format!(
            "attributes take more than {} KiB as JSON",
            limits::ATTRIBUTES_BYTES / 1024
        ));
    }
    Ok(attributes)
}

impl Product {
    /// Checks and builds a product from a JSON object (a JSON Lines row, an array element,
    /// or a CSV row turned into an object). The message says what to fix.
    pub fn from_json(value: Value) -> Result<Self, String> {
        let Value::Object(mut obj) = value else {
            return Err("a product must be a JSON object".into());
        };
        let product = Self {
            product_key: key_field(obj.remove("product_key"))?,
            name: name_field(obj.remove("name"))?,
            description: text_field(
                "description",
                obj.remove("description"),
                limits::DESCRIPTION,
            )?,
            brand: text_field("brand", obj.remove("brand"), limits::BRAND)?,
            price_cents: price_field(obj.remove("price_cents"))?,
            taxonomy_path: taxonomy_field(obj.remove("taxonomy_path"))?,
            attributes: attributes_field(obj.remove("attributes"))?,
        };
        if let Some(other) = obj.keys().next() {
            return Err(format!("`{other}` is not a product field"));
        }
        Ok(product)
    }

    /// A stable hash of everything a product says (FNV-1a over its canonical JSON), so an
    /// unchanged product is recognised on re-import and skipped by enrichment.
    pub fn content_hash(&self) -> String {
        let canonical = serde_json::to_string(self).expect("a product always serialises");
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in canonical.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{h:016x}")
    }

    pub fn top_category(&self) -> Option<&str> {
        self.taxonomy_path.first().map(String::as_str)
    }
}

/// `"Apparel > T-Shirts"` → `["Apparel", "T-Shirts"]`.
pub fn split_taxonomy(raw: &str) -> Vec<String> {
    raw.split('>')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A product as stored, with its content hash.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    #[serde(flatten)]
    pub product: Product,
    pub content_hash: String,
}

/// What enrichment found for a product, and for which version of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Enrichment {
    /// The content hash the attributes were extracted from.
    pub content_hash: String,
    pub attributes: Map<String, Value>,
    pub unextractable: bool,
}

/// One row of the neighbour table: a key and a score, nothing more. The product view joins
/// the neighbour's name when it is read, so the table stays as small as keys and scores
/// need. (Tables written before this change carried a `name` too; it is ignored on read.)
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Neighbour {
    pub product_key: ProductKey,
    pub score: f64,
}

/// How an upsert went, per product.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Upserted {
    pub created: u64,
    pub updated: u64,
    pub unchanged: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogStoreError {
    #[error("the catalogue store is unreachable: {0}")]
    Unavailable(String),
    #[error("the catalogue store holds a malformed record: {0}")]
    Corrupt(String),
    #[error("the cursor is not one this listing handed out")]
    BadCursor,
}

/// The per-tenant catalogue. Blocking: the job functions call it from their blocking
/// threads, the HTTP handlers through `spawn_blocking`.
pub trait CatalogStore: Send + Sync + 'static {
    /// Writes the products whose content changed; counts created, updated and unchanged.
    fn upsert(
        &self,
        tenant: &TenantId,
        products: &[Product],
    ) -> Result<Upserted, CatalogStoreError>;
    fn get(&self, tenant: &TenantId, key: &ProductKey)
        -> Result<Option<Stored>, CatalogStoreError>;
    /// A page of at most `limit` products in key order (embedded) or scan order (Redis);
    /// following the cursor visits every product present throughout exactly once. The
    /// cursor is opaque; one this store did not hand out is `BadCursor`.
    fn page(
        &self,
        tenant: &TenantId,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<(Vec<Stored>, Option<String>), CatalogStoreError>;
    fn all(&self, tenant: &TenantId) -> Result<Vec<Stored>, CatalogStoreError>;
    fn enrichments(
        &self,
        tenant: &TenantId,
    ) -> Result<HashMap<ProductKey, Enrichment>, CatalogStoreError>;
    fn enrichment(
        &self,
        tenant: &TenantId,
        key: &ProductKey,
    ) -> Result<Option<Enrichment>, CatalogStoreError>;
    fn save_enrichments(
        &self,
        tenant: &TenantId,
        batch: &[(ProductKey, Enrichment)],
    ) -> Result<(), CatalogStoreError>;
    /// Replaces the whole neighbour table at once: readers see the old table or the new one.
    /// The swap happens only while `fence`'s run still holds its job, checked in the same
    /// atomic step (`jobs::fence`); otherwise the old table stays whole and it is `Fenced`.
    fn replace_neighbours(
        &self,
        tenant: &TenantId,
        table: &[(ProductKey, Vec<Neighbour>)],
        fence: &dyn Fence,
    ) -> Result<Swap, CatalogStoreError>;
    fn neighbours(
        &self,
        tenant: &TenantId,
        key: &ProductKey,
    ) -> Result<Option<Vec<Neighbour>>, CatalogStoreError>;
    /// Removes the tenant's whole catalogue in one step and counts what was there.
    fn clear(&self, tenant: &TenantId) -> Result<Cleared, CatalogStoreError>;
}

/// How a fenced swap of a whole table went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Swap {
    Swapped,
    /// The run no longer holds its job: nothing was changed.
    Fenced,
}

impl Swap {
    fn from_held(held: bool) -> Self {
        if held {
            Swap::Swapped
        } else {
            Swap::Fenced
        }
    }
}

/// What a tenant's catalogue held when it was cleared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Cleared {
    pub products: u64,
    /// Products with extracted attributes.
    pub extracted_attributes: u64,
    /// Products with a neighbour list.
    pub neighbours: u64,
}

// ---------------------------------------------------------------------------------------
// Embedded

#[derive(Default)]
struct TenantCatalog {
    products: BTreeMap<ProductKey, Stored>,
    enriched: HashMap<ProductKey, Enrichment>,
    neighbours: HashMap<ProductKey, Vec<Neighbour>>,
}

/// The embedded catalogue: same contract, one mutex, not durable.
#[derive(Default)]
pub struct MemoryCatalog {
    tenants: Mutex<HashMap<TenantId, TenantCatalog>>,
}

impl MemoryCatalog {
    pub fn new() -> Self {
        Self::default()
    }

    fn tenants(&self) -> std::sync::MutexGuard<'_, HashMap<TenantId, TenantCatalog>> {
        // Every operation validates before it mutates, so a poisoned map is still consistent.
        self.tenants.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A write: the tenant's catalogue is made on first use.
    fn with<T>(&self, tenant: &TenantId, f: impl FnOnce(&mut TenantCatalog) -> T) -> T {
        f(self.tenants().entry(tenant.clone()).or_default())
    }

    /// A read: a tenant without a catalogue reads as empty and is not made.
    fn read<T>(&self, tenant: &TenantId, f: impl FnOnce(&TenantCatalog) -> T) -> T {
        match self.tenants().get(tenant) {
            Some(c) => f(c),
            None => f(&TenantCatalog::default()),
        }
    }
}

/// The embedded listing's cursor: `key:` and the last key a page held, so a cursor this
/// listing did not hand out (`garbage`) is refused like Redis refuses it.
struct KeyCursor;

impl KeyCursor {
    const PREFIX: &'static str = "key:";

    fn encode(last: &ProductKey) -> String {
        format!("{}{}", Self::PREFIX, last.as_str())
    }

    fn decode(raw: &str) -> Result<ProductKey, CatalogStoreError> {
        raw.strip_prefix(Self::PREFIX)
            .and_then(|k| ProductKey::parse(k).ok())
            .ok_or(CatalogStoreError::BadCursor)
    }
}

impl CatalogStore for MemoryCatalog {
    fn upsert(
        &self,
        tenant: &TenantId,
        products: &[Product],
    ) -> Result<Upserted, CatalogStoreError> {
        Ok(self.with(tenant, |c| {
            let mut counts = Upserted::default();
            for p in products {
                let hash = p.content_hash();
                match c.products.get(&p.product_key) {
                    Some(old) if old.content_hash == hash => counts.unchanged += 1,
                    Some(_) => counts.updated += 1,
                    None => counts.created += 1,
                }
                c.products.insert(
                    p.product_key.clone(),
                    Stored {
                        product: p.clone(),
                        content_hash: hash,
                    },
                );
            }
            counts
        }))
    }

    fn get(
        &self,
        tenant: &TenantId,
        key: &ProductKey,
    ) -> Result<Option<Stored>, CatalogStoreError> {
        Ok(self.read(tenant, |c| c.products.get(key).cloned()))
    }

    fn page(
        &self,
        tenant: &TenantId,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<(Vec<Stored>, Option<String>), CatalogStoreError> {
        let after = cursor.map(KeyCursor::decode).transpose()?;
        Ok(self.read(tenant, |c| {
            let mut items: Vec<Stored> = match &after {
                Some(k) => c
                    .products
                    .range((
                        std::ops::Bound::Excluded(k.clone()),
                        std::ops::Bound::Unbounded,
                    ))
                    .take(limit + 1)
                    .map(|(_, v)| v.clone())
                    .collect(),
                None => c.products.values().take(limit + 1).cloned().collect(),
            };
            let next = if items.len() > limit {
                items.truncate(limit);
                items
                    .last()
                    .map(|s| KeyCursor::encode(&s.product.product_key))
            } else {
                None
            };
            (items, next)
        }))
    }

    fn all(&self, tenant: &TenantId) -> Result<Vec<Stored>, CatalogStoreError> {
        Ok(self.read(tenant, |c| c.products.values().cloned().collect()))
    }

    fn enrichments(
        &self,
        tenant: &TenantId,
    ) -> Result<HashMap<ProductKey, Enrichment>, CatalogStoreError> {
        Ok(self.read(tenant, |c| c.enriched.clone()))
    }

    fn enrichment(
        &self,
        tenant: &TenantId,
        key: &ProductKey,
    ) -> Result<Option<Enrichment>, CatalogStoreError> {
        Ok(self.read(tenant, |c| c.enriched.get(key).cloned()))
    }

    fn save_enrichments(
        &self,
        tenant: &TenantId,
        batch: &[(ProductKey, Enrichment)],
    ) -> Result<(), CatalogStoreError> {
        self.with(tenant, |c| {
            for (k, e) in batch {
                c.enriched.insert(k.clone(), e.clone());
            }
        });
        Ok(())
    }

    fn replace_neighbours(
        &self,
        tenant: &TenantId,
        table: &[(ProductKey, Vec<Neighbour>)],
        fence: &dyn Fence,
    ) -> Result<Swap, CatalogStoreError> {
        let mut fresh: Option<HashMap<_, _>> = Some(table.iter().cloned().collect());
        // Under the job store's lock (the embedded one): no claim comes between check and swap.
        let held = fence.while_held(&mut || {
            let fresh = fresh.take().unwrap_or_default();
            let mut tenants = self.tenants();
            match tenants.get_mut(tenant) {
                Some(c) => c.neighbours = fresh,
                // No catalogue and nothing to write: nothing to make.
                None if fresh.is_empty() => {}
                None => tenants.entry(tenant.clone()).or_default().neighbours = fresh,
            }
        });
        Ok(Swap::from_held(held))
    }

    fn neighbours(
        &self,
        tenant: &TenantId,
        key: &ProductKey,
    ) -> Result<Option<Vec<Neighbour>>, CatalogStoreError> {
        Ok(self.read(tenant, |c| c.neighbours.get(key).cloned()))
    }

    fn clear(&self, tenant: &TenantId) -> Result<Cleared, CatalogStoreError> {
        let gone = self.tenants().remove(tenant).unwrap_or_default();
        Ok(Cleared {
            products: gone.products.len() as u64,
            extracted_attributes: gone.enriched.len() as u64,
            neighbours: gone.neighbours.len() as u64,
        })
    }
}

// ---------------------------------------------------------------------------------------
// Redis

/// Builds the catalogue's keys: `<prefix>:<tenant>:products|enriched|neighbours`.
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
    /// Where a new neighbour table is written before it is renamed over the old one.
    pub fn neighbours_staging(&self, t: &TenantId) -> String {
        format!(
            "{}:{t}:neighbours:staging:{}",
            self.prefix,
            crate::jobs::JobId::new()
        )
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
/// The swap of a staged neighbour table, fenced by the job record (see the script).
static SWAP_NEIGHBOURS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/swap_neighbours.lua")));
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
    fn block<T, F>(&self, call: impl FnOnce(ConnectionManager) -> F) -> Result<T, CatalogStoreError>
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

    /// Writes a neighbour table to `staging` (nothing for an empty table), in chunks.
    fn stage_neighbours(
        &self,
        staging: &str,
        table: &[(ProductKey, Vec<Neighbour>)],
    ) -> Result<(), CatalogStoreError> {
        for chunk in table.chunks(CHUNK) {
            let writes: Vec<(&str, String)> = chunk
                .iter()
                .map(|(k, n)| {
                    (
                        k.as_str(),
                        serde_json::to_string(n).expect("neighbours always serialise"),
                    )
                })
                .collect();
            // The staging table expires if this process dies before the swap.
            self.query_pipe::<()>(
                redis::pipe()
                    .cmd("HSET")
                    .arg(staging)
                    .arg(&writes)
                    .ignore()
                    .cmd("EXPIRE")
                    .arg(staging)
                    .arg(STAGING_TTL_SECS)
                    .ignore(),
            )?;
        }
        Ok(())
    }

    /// Puts the staged table in place of the live one (an absent staging table empties it)
    /// while the fence's run holds its job: checked inside the script when the jobs are in
    /// this Redis, else under the job store's own check (`Fence::while_held`).
    fn swap_neighbours(
        &self,
        staging: &str,
        live: &str,
        staged: bool,
        fence: &dyn Fence,
    ) -> Result<Swap, CatalogStoreError> {
        if let Some((record, claim)) = fence.job_record() {
            let swapped: i64 = self.block(|mut conn| async move {
                SWAP_NEIGHBOURS
                    .key(staging)
                    .key(live)
                    .key(&record)
                    .arg(claim)
                    .invoke_async(&mut conn)
                    .await
            })?;
            return Ok(Swap::from_held(swapped == 1));
        }
        let mut answer = Ok(Swap::Fenced);
        fence.while_held(&mut || {
            let mut swap = redis::pipe();
            if staged {
                swap.atomic()
                    .cmd("RENAME")
                    .arg(staging)
                    .arg(live)
                    .ignore()
                    .cmd("PERSIST")
                    .arg(live)
                    .ignore();
            } else {
                swap.cmd("DEL").arg(live).ignore();
            }
            answer = self.query_pipe::<()>(&swap).map(|()| Swap::Swapped);
        });
        answer
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
            for (k, v) in chunk {
                out.push((k, Self::decode(&v)?));
            }
            if next == 0 {
                return Ok(out);
            }
            cursor = next;
        }
    }
}

/// The Redis listing's cursor: the HSCAN cursor of the batch a page stopped in, and the
/// last key served from that batch (`<scan>-<key>`; the scan part is digits, so the first
/// `-` ends it). Without a key the page stopped between batches.
struct ScanCursor;

impl ScanCursor {
    fn decode(raw: Option<&str>) -> Result<(u64, Option<String>), CatalogStoreError> {
        let Some(raw) = raw else {
            return Ok((0, None));
        };
        let (scan, after) = match raw.split_once('-') {
            Some((scan, key)) => (scan, Some(key)),
            None => (raw, None),
        };
        let scan = scan.parse().map_err(|_| CatalogStoreError::BadCursor)?;
        let after = after
            .map(|k| ProductKey::parse(k).map(|k| k.0))
            .transpose()
            .map_err(|_| CatalogStoreError::BadCursor)?;
        Ok((scan, after))
    }

    fn inside(scan: u64, last: Option<&str>) -> String {
        match last {
            Some(k) => format!("{scan}-{k}"),
            None => scan.to_string(),
        }
    }
}

impl CatalogStore for RedisCatalog {
    fn upsert(
        &self,
        tenant: &TenantId,
        products: &[Product],
    ) -> Result<Upserted, CatalogStoreError> {
        let key = self.keys.products(tenant);
        let mut counts = Upserted::default();
        for chunk in products.chunks(CHUNK) {
            let fields: Vec<&str> = chunk.iter().map(|p| p.product_key.as_str()).collect();
            let old: Vec<Option<String>> =
                self.query(redis::cmd("HMGET").arg(&key).arg(&fields))?;
            let mut writes: Vec<(String, String)> = Vec::new();
            // A key repeated inside one chunk: the later row wins, counted as an update.
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
                        p.product_key.as_str().to_owned(),
                        serde_json::to_string(&stored).expect("a product always serialises"),
                    ));
                }
                seen.insert(p.product_key.as_str(), hash);
            }
            if !writes.is_empty() {
                self.query::<()>(redis::cmd("HSET").arg(&key).arg(&writes))?;
            }
        }
        Ok(counts)
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
    ) -> Result<(), CatalogStoreError> {
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
            self.query::<()>(redis::cmd("HSET").arg(&key).arg(&writes))?;
        }
        Ok(())
    }

    fn replace_neighbours(
        &self,
        tenant: &TenantId,
        table: &[(ProductKey, Vec<Neighbour>)],
        fence: &dyn Fence,
    ) -> Result<Swap, CatalogStoreError> {
        let live = self.keys.neighbours(tenant);
        let staging = self.keys.neighbours_staging(tenant);
        let swapped = self
            .stage_neighbours(&staging, table)
            .and_then(|()| self.swap_neighbours(&staging, &live, !table.is_empty(), fence));
        if !matches!(swapped, Ok(Swap::Swapped)) {
            let _ = self.query::<()>(redis::cmd("DEL").arg(&staging));
        }
        swapped
    }

    fn neighbours(
        &self,
        tenant: &TenantId,
        key: &ProductKey,
    ) -> Result<Option<Vec<Neighbour>>, CatalogStoreError> {
        self.hget_decoded(&self.keys.neighbours(tenant), key)
    }

    fn clear(&self, tenant: &TenantId) -> Result<Cleared, CatalogStoreError> {
        let keys = [
            self.keys.products(tenant),
            self.keys.enriched(tenant),
            self.keys.neighbours(tenant),
        ];
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
}
