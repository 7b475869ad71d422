//! The Redis catalogue's fenced writes: one write to one key, made only while its writer's
//! fence holds (`fenced_write.lua`, or the job store's own check), with what goes beside it
//! in the same step — a staged key's name in the tenant's set of staging keys, or a
//! catalogue write's fields in the change feed (`feed`) — and which rows of an upsert are
//! written at all (`changed`).

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::Script;

use super::{feed, RedisCatalog, Resend};
use crate::catalog::products::record::{Product, Stored};
use crate::catalog::products::store::{CatalogStoreError, Upserted};
use crate::jobs::fence::{Fence, Hold, ScriptFence};
use crate::jobs::TenantId;

/// How long an unfinished staging neighbour table may linger.
const STAGING_TTL_SECS: u64 = 3600;
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

impl RedisCatalog {
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
        (args, fields): (A, &[&str]),
        fence: &dyn Fence,
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
            with_fence(&mut inv, &checked);
            inv.arg(ttl)
                .arg(self.feed_bound)
                .arg(u8::from(matches!(beside, Beside::Listed(_))))
                .arg(write.command())
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
            written = self.query_pipe_as::<()>(write.resend(), &pipe);
        });
        written.map(|()| hold)
    }
}

/// The rows of `chunk` whose content differs from what the store holds (`old`, the stored
/// records of the same keys, in order), as fields to write, and how each row counts. A key
/// repeated inside one chunk: the later row wins, counted as an update.
pub(super) fn changed(
    chunk: &[Product],
    old: Vec<Option<String>>,
) -> (Vec<(&str, String)>, Upserted) {
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
