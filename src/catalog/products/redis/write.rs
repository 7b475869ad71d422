//! The Redis catalogue's fenced writes: one write to one key, made only while its writer's
//! fence holds (`fenced_write.lua`, or the job store's own check), with what goes beside it
//! in the same step — a staged key's name in the tenant's set of staging keys, or a
//! catalogue write's fields in the change feed (`feed`), or a batch's record — and which
//! rows of an upsert are written at all (`changed`). A batch of a run is named: its write
//! records its counts in the same step (`Recorded`), so a batch sent again after its answer
//! was lost counts what it first counted, not the rows it wrote as `unchanged`.

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::Script;

use super::{feed, RedisCatalog, Resend, CHUNK};
use crate::catalog::products::record::{Product, Stored};
use crate::catalog::products::store::{CatalogStoreError, Upserted, Write};
use crate::jobs::fence::{Fence, Hold, ScriptFence};
use crate::jobs::TenantId;

/// How long an unfinished staging neighbour table may linger.
const STAGING_TTL_SECS: u64 = 3600;
/// How long a batch's record lives: well past any resend of its write (a sync retries for
/// `write_retry`, 300 s by default). One key a tenant, overwritten by each batch.
const BATCH_RECORD_TTL_SECS: u64 = 3600;
/// A fenced write to one key: fields of a hash (products, enrichments, a staged table),
/// members of a staged set, a slice of a staged pairing state.
static FENCED_WRITE: LazyLock<Script> = LazyLock::new(|| {
    fenced_script(&format!(
        "{}\n{}",
        feed::FEED_LUA,
        include_str!("fenced_write.lua")
    ))
});

/// Where a fenced write goes besides its key.
#[derive(Clone, Copy)]
pub(super) enum Beside<'a> {
    /// A key staged aside: named in the tenant's set of staging keys (`CatalogKeys::staged`).
    Staged(&'a str),
    /// A hash of the catalogue: its fields are noted in the tenant's change feed.
    Feed(&'a TenantId),
    /// The products hash: its fields are noted in the change feed and join the listing's
    /// index (`listing.lua`), which holds every key the hash holds.
    Listed(&'a TenantId),
}

/// The writes `fenced_write.lua` makes.
#[derive(Clone, Copy, Debug)]
pub(super) enum FencedWrite {
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

    /// An append run twice appends twice; a hash or set write run twice leaves what it left.
    fn resend(self) -> Resend {
        match self {
            FencedWrite::Append => Resend::No,
            FencedWrite::Hset | FencedWrite::Sadd => Resend::Yes,
        }
    }
}

pub(super) fn fenced_script(body: &str) -> Script {
    Script::new(&format!("{}\n{body}", *crate::jobs::fence::FENCE_LUA))
}

/// Puts a fence's keys and values where `fence_at` reads them (jobs/lua/fence.lua), after
/// the script's own keys.
pub(super) fn with_fence(inv: &mut redis::ScriptInvocation<'_>, fence: &ScriptFence) {
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
pub(super) fn hold_of(word: &str) -> Result<Hold, CatalogStoreError> {
    match word {
        "written" | "swapped" => Ok(Hold::Held),
        "fenced" => Ok(Hold::Fenced),
        "missing" => Ok(Hold::Missing),
        other => Err(CatalogStoreError::Corrupt(format!(
            "a fenced write answered `{other}`"
        ))),
    }
}

/// What a named batch's write records beside its rows, in the same step
/// (`CatalogKeys::batch`: one key a tenant, whose one sync at a time writes its batches in
/// turn): the batch's name, how many of its chunks are written, and their counts.
#[derive(Debug, PartialEq)]
struct Recorded {
    batch: String,
    chunks: usize,
    counts: Upserted,
}

impl Recorded {
    fn value(&self) -> String {
        let c = &self.counts;
        let (batch, chunks) = (&self.batch, self.chunks);
        format!(
            "{batch} {chunks} {} {} {}",
            c.created, c.updated, c.unchanged
        )
    }

    /// The record, when `raw` is one (anything else reads as none: the batch is counted).
    fn parse(raw: &str) -> Option<Self> {
        let mut parts = raw.split(' ');
        let batch = parts.next()?.to_owned();
        let mut n = || parts.next()?.parse::<u64>().ok();
        let (chunks, created, updated, unchanged) = (n()?, n()?, n()?, n()?);
        Some(Self {
            batch,
            chunks: usize::try_from(chunks).ok()?,
            counts: Upserted {
                created,
                updated,
                unchanged,
            },
        })
    }
}

fn plus(a: Upserted, b: Upserted) -> Upserted {
    Upserted {
        created: a.created + b.created,
        updated: a.updated + b.updated,
        unchanged: a.unchanged + b.unchanged,
    }
}

impl RedisCatalog {
    /// Upserts `products` a chunk at a time (what `upsert` and `upsert_batch` do). A named
    /// `batch` reads its record after each chunk's stored rows: rows its earlier sending wrote
    /// were written with the record, so the record is read whenever they are (and when it
    /// landed between the two reads, its counts are the ones this sending would make). A
    /// chunk the record says is written counts as recorded; each chunk it writes records the
    /// batch's counts so far in the write's own step.
    pub(super) fn upsert_chunks(
        &self,
        tenant: &TenantId,
        products: &[Product],
        fence: &dyn Fence,
        batch: Option<&str>,
    ) -> Result<Write<Upserted>, CatalogStoreError> {
        let key = self.keys.products(tenant);
        let record_key = self.keys.batch(tenant);
        let mut counts = Upserted::default();
        for (i, chunk) in products.chunks(CHUNK).enumerate() {
            let fields: Vec<&str> = chunk.iter().map(|p| p.product_key.as_str()).collect();
            let (old, recorded) = match batch {
                Some(_) => {
                    // Not a transaction (one slot's MULTI breaks while a cluster moves it):
                    // the rows first, then the record, is enough (see above).
                    let mut pipe = redis::pipe();
                    pipe.cmd("HMGET").arg(&key).arg(&fields).get(&record_key);
                    let (old, raw): (Vec<Option<String>>, Option<String>) =
                        self.query_pipe(&pipe)?;
                    (old, raw.as_deref().and_then(Recorded::parse))
                }
                None => (
                    self.query(redis::cmd("HMGET").arg(&key).arg(&fields))?,
                    None,
                ),
            };
            if let Some(r) = recorded.filter(|r| Some(r.batch.as_str()) == batch && r.chunks > i) {
                counts = r.counts;
                continue;
            }
            let (writes, chunk_counts) = changed(chunk, old);
            let total = plus(counts, chunk_counts);
            // Rows that changed nothing need no write, so no fence either (and nothing to
            // record: sent again, they count the same).
            if !writes.is_empty() {
                let fields: Vec<&str> = writes.iter().map(|(k, _)| *k).collect();
                let record = batch.map(|batch| Recorded {
                    batch: batch.to_owned(),
                    chunks: i + 1,
                    counts: total,
                });
                let beside = Beside::Listed(tenant);
                let write = (&writes[..], &fields[..]);
                let recording = record.as_ref().map(|r| (record_key.as_str(), r.value()));
                let hold =
                    self.write_recording(FencedWrite::Hset, &key, beside, write, fence, recording)?;
                if hold != Hold::Held {
                    return Write::from_hold(hold, counts);
                }
            }
            counts = total;
        }
        Ok(Write::Done(counts))
    }

    /// Makes one write to `key` while `fence` holds: checked inside the script when the jobs
    /// are in this Redis, else under the job store's own check (`Fence::while_held`). A key
    /// staged aside (`Beside::Staged`, the set naming the tenant's staging keys) expires
    /// after `STAGING_TTL_SECS` and is named in that set in the same step; a write to the
    /// catalogue (`Beside::Feed`, an HSET) notes its `fields` in the change feed, and a
    /// write to the products hash (`Beside::Listed`) adds them to the listing's index too.
    pub(super) fn write_fenced<A: redis::ToRedisArgs + Copy + Send + Sync>(
        &self,
        write: FencedWrite,
        key: &str,
        beside: Beside<'_>,
        args: (A, &[&str]),
        fence: &dyn Fence,
    ) -> Result<Hold, CatalogStoreError> {
        self.write_recording(write, key, beside, args, fence, None)
    }

    /// `write_fenced`, setting `record` (a key and its value, a batch's record that lives
    /// `BATCH_RECORD_TTL_SECS`) in the same step when given.
    fn write_recording<A: redis::ToRedisArgs + Copy + Send + Sync>(
        &self,
        write: FencedWrite,
        key: &str,
        beside: Beside<'_>,
        (args, fields): (A, &[&str]),
        fence: &dyn Fence,
        record: Option<(&str, String)>,
    ) -> Result<Hold, CatalogStoreError> {
        let ttl = match beside {
            Beside::Staged(_) => STAGING_TTL_SECS,
            Beside::Feed(_) | Beside::Listed(_) => 0,
        };
        if let Some(checked) = fence.in_script() {
            let beside_keys = match beside {
                Beside::Staged(set) => vec![set.to_owned()],
                Beside::Feed(t) => vec![self.keys.changes(t), self.keys.changes_at(t)],
                Beside::Listed(t) => vec![
                    self.keys.changes(t),
                    self.keys.changes_at(t),
                    self.keys.listing(t),
                ],
            };
            let mut inv = FENCED_WRITE.key(key);
            inv.key(&beside_keys);
            let (record_key, value) = record.clone().unwrap_or_default();
            if !record_key.is_empty() {
                inv.key(record_key);
            }
            with_fence(&mut inv, &checked);
            inv.arg(ttl)
                .arg(self.feed_bound)
                .arg(u8::from(matches!(beside, Beside::Listed(_))))
                .arg(write.command())
                .arg(value)
                .arg(BATCH_RECORD_TTL_SECS)
                .arg(args);
            let word: String = self.invoke(write.resend(), &inv)?;
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
            match beside {
                Beside::Staged(set) => {
                    pipe.expire(key, ttl as i64).ignore();
                    pipe.sadd(set, key)
                        .ignore()
                        .expire(set, ttl as i64)
                        .ignore();
                }
                Beside::Feed(t) => self.note_in(&mut pipe, t, fields),
                Beside::Listed(t) => {
                    self.note_in(&mut pipe, t, fields);
                    if !fields.is_empty() {
                        let scored: Vec<(u8, &str)> = fields.iter().map(|f| (0, *f)).collect();
                        pipe.zadd_multiple(self.keys.listing(t), &scored).ignore();
                    }
                }
            }
            if let Some((record_key, value)) = &record {
                pipe.set_ex(*record_key, value, BATCH_RECORD_TTL_SECS)
                    .ignore();
            }
            written = self.query_pipe_as::<()>(write.resend(), &pipe);
        });
        written.map(|()| hold)
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
        let same = previous.as_ref() == Some(&hash);
        match previous {
            Some(_) if same => counts.unchanged += 1,
            Some(_) => counts.updated += 1,
            None => counts.created += 1,
        }
        // Only what changed is written, so only it is noted in the change feed.
        if !same {
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
