//! The Redis catalogue's neighbour table and pairing state, and what pair reads: versions,
//! pairing inputs. A new table (whole, or the rows that changed) and its state are staged
//! under keys of their own, each staging write fenced (`fenced_write.lua`: a run that lost
//! its job stages nothing), and put in place by one fenced script (`swap_table.lua`), which
//! also has the change feed forget what the pair read of it (`feed`).
//!
//! The state is one binary string (`Pairing::encode`), written and read in slices so that
//! no command carries more than `SLICE` bytes.

use std::cell::Cell;
use std::sync::{Arc, LazyLock};

use redis::Script;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::write::{fenced_script, hold_of, with_fence, Beside, FencedWrite};
use super::{RedisCatalog, Resend, CHUNK};
use crate::catalog::products::pairing::Pairing;
use crate::catalog::products::record::{fingerprint, version, Neighbour, PairingInput, ProductKey};
use crate::catalog::products::store::{
    stopped, CatalogStoreError, Rewrite, Swap, VersionsPage, Write,
};
use crate::jobs::fence::{Fence, Hold, ScriptFence};
use crate::jobs::TenantId;

/// The swap of a staged table and state, fenced (see the script): it reads the job record
/// and the tenant's tombstone through the job store's own Lua (`jobs::fence::FENCE_LUA`).
static SWAP_TABLE: LazyLock<Script> =
    LazyLock::new(|| fenced_script(include_str!("swap_table.lua")));

/// The most bytes of the pairing state one command carries.
const SLICE: usize = 8 << 20;

/// The staging keys of one swap: rows, keys whose rows go, state; and the tenant's set that
/// names them while they live (a delete reads it).
struct Staged {
    rows: String,
    gone: String,
    state: String,
    set: String,
}

/// How the swap script treats the staged rows.
#[derive(Clone, Copy)]
enum Mode {
    Whole,
    Rows,
}

/// Counts a save's writes done and tells its `Rewrite` (`Rewrite::written`).
struct Tally<'a> {
    rewrite: Rewrite<'a>,
    done: Cell<usize>,
    all: usize,
}

impl<'a> Tally<'a> {
    fn new(rewrite: Rewrite<'a>, all: usize) -> Self {
        Self {
            rewrite,
            done: Cell::new(0),
            all,
        }
    }

    /// One more write done.
    fn one(&self) {
        self.done.set(self.done.get() + 1);
        self.rewrite.written(self.done.get(), self.all);
    }
}

/// Stored products and their enrichments as Redis holds them, `None` where there is none.
pub(super) type Records = (Vec<Option<String>>, Vec<Option<String>>);

/// A stored product's content hash, read without the rest of it.
#[derive(Deserialize)]
pub(super) struct Hashed {
    content_hash: String,
}

impl Hashed {
    /// The product's version (`CatalogStore::versions`), with its enrichment's record.
    pub(super) fn version(&self, enrichment: Option<&str>) -> u64 {
        let content = fingerprint(self.content_hash.as_bytes());
        version(content, enrichment.map(|e| fingerprint(e.as_bytes())))
    }
}

impl RedisCatalog {
    fn staged(&self, tenant: &TenantId) -> Staged {
        let rows = self.keys.neighbours_staging(tenant);
        Staged {
            gone: format!("{rows}:gone"),
            state: format!("{rows}:pairing"),
            rows,
            set: self.keys.staged(tenant),
        }
    }

    /// Forgets what was staged: its keys, and their names in the tenant's set.
    fn drop_staged(&self, staged: &Staged) -> Result<(), CatalogStoreError> {
        let keys = [&staged.rows, &staged.gone, &staged.state];
        self.query_pipe(
            redis::pipe()
                .atomic()
                .del(&keys)
                .ignore()
                .srem(&staged.set, &keys)
                .ignore(),
        )
    }

    /// Writes rows to the staged table (nothing for no rows), in chunks, while `fence`
    /// holds; stops at the first write the fence refuses and answers why, and before the
    /// next chunk once `stop` is cancelled (`Stopped`).
    fn stage_rows<'a>(
        &self,
        staged: &Staged,
        rows: impl Iterator<Item = (&'a str, Vec<Neighbour>)>,
        (fence, stop): (&dyn Fence, &CancellationToken),
        tally: &Tally<'_>,
    ) -> Result<Hold, CatalogStoreError> {
        let mut writes: Vec<(&str, String)> = Vec::with_capacity(CHUNK);
        let mut rows = rows.peekable();
        while rows.peek().is_some() {
            stopped(stop)?;
            writes.clear();
            for (key, row) in rows.by_ref().take(CHUNK) {
                let json = serde_json::to_string(&row).expect("neighbours always serialise");
                writes.push((key, json));
            }
            let hold = self.stage(FencedWrite::Hset, staged, &staged.rows, &writes[..], fence)?;
            if hold != Hold::Held {
                return Ok(hold);
            }
            tally.one();
        }
        Ok(Hold::Held)
    }

    /// One write to `key`, one of `staged`'s keys, fenced like every catalogue write (a run
    /// that lost its job stages nothing). The key is named in the tenant's set in the same
    /// step, so that a delete finds it; it expires if this process dies before the swap.
    fn stage<A: redis::ToRedisArgs + Copy + Send + Sync>(
        &self,
        write: FencedWrite,
        staged: &Staged,
        key: &str,
        args: A,
        fence: &dyn Fence,
    ) -> Result<Hold, CatalogStoreError> {
        self.write_fenced(write, key, Beside::Staged(&staged.set), (args, &[]), fence)
    }

    /// Stages each of `parts` in turn (`stage`), stopping at the first the fence refuses,
    /// and before the next once `stop` is cancelled (`Stopped`); counts each in `tally`.
    fn stage_each<A: redis::ToRedisArgs + Copy + Send + Sync>(
        &self,
        write: FencedWrite,
        staged: &Staged,
        key: &str,
        parts: impl IntoIterator<Item = A>,
        (fence, stop): (&dyn Fence, &CancellationToken),
        tally: &Tally<'_>,
    ) -> Result<Hold, CatalogStoreError> {
        for part in parts {
            stopped(stop)?;
            let hold = self.stage(write, staged, key, part, fence)?;
            if hold != Hold::Held {
                return Ok(hold);
            }
            tally.one();
        }
        Ok(Hold::Held)
    }

    /// Runs the swap while `fence` holds: checked inside the script when the jobs are in
    /// this Redis, else under the job store's own check (`Fence::while_held`).
    fn swap(
        &self,
        tenant: &TenantId,
        staged: &Staged,
        mode: (Mode, Option<u64>),
        fence: &dyn Fence,
    ) -> Result<Hold, CatalogStoreError> {
        if let Some(checked) = fence.in_script() {
            return self.run_swap(tenant, staged, mode, Some(&checked));
        }
        let mut answer = Ok(Hold::Fenced);
        let hold = fence.while_held(&mut || {
            answer = self.run_swap(tenant, staged, mode, None);
        });
        answer.map(|swapped| if hold == Hold::Held { swapped } else { hold })
    }

    /// The swap script, checking `fence` inside it (nothing when the caller checks); a new
    /// pairing state that read the change feed at `fed_upto` has it forget what it noted up
    /// to there.
    fn run_swap(
        &self,
        tenant: &TenantId,
        staged: &Staged,
        (mode, fed_upto): (Mode, Option<u64>),
        fence: Option<&ScriptFence>,
    ) -> Result<Hold, CatalogStoreError> {
        let live = self.keys.neighbours(tenant);
        let state = self.keys.pairing(tenant);
        let (feed, feed_at) = (self.keys.changes(tenant), self.keys.changes_at(tenant));
        let mode = match mode {
            Mode::Whole => "whole",
            Mode::Rows => "rows",
        };
        let upto = fed_upto.map(|u| u.to_string()).unwrap_or_default();
        let (live, state, feed, feed_at, upto) = (&live, &state, &feed, &feed_at, &upto);
        // Swapped once, the staged keys are gone: a second run would answer otherwise.
        let word: String = self.block(Resend::No, |mut conn| async move {
            let mut inv = SWAP_TABLE.key(&staged.rows);
            inv.key(live)
                .key(&staged.gone)
                .key(&staged.state)
                .key(state)
                .key(&staged.set)
                .key(feed)
                .key(feed_at);
            match fence {
                Some(fence) => with_fence(&mut inv, fence),
                None => {
                    inv.arg("").arg("");
                }
            }
            inv.arg(mode).arg(upto).invoke_async(&mut conn).await
        })?;
        hold_of(&word)
    }

    /// Stages with `stage` (each write fenced: it answers the first refusal), swaps, and
    /// drops what was staged unless it was swapped.
    fn staged_swap(
        &self,
        tenant: &TenantId,
        mode: (Mode, Option<u64>),
        fence: &dyn Fence,
        stage: impl FnOnce(&Staged) -> Result<Hold, CatalogStoreError>,
    ) -> Result<Swap, CatalogStoreError> {
        let staged = self.staged(tenant);
        let hold = stage(&staged).and_then(|hold| match hold {
            Hold::Held => self.swap(tenant, &staged, mode, fence),
            refused => Ok(refused),
        });
        if !matches!(hold, Ok(Hold::Held)) {
            // Best effort: a staged key left behind expires, and a delete finds it by its name
            // in the tenant's set.
            let _ = self.drop_staged(&staged);
        }
        Write::from_hold(hold?, ()).map(Swap::from)
    }

    /// A whole table given as rows; the tenant's pairing state goes with the old table.
    pub(super) fn replace_table(
        &self,
        tenant: &TenantId,
        table: &[(ProductKey, Vec<Neighbour>)],
        fence: &dyn Fence,
    ) -> Result<Swap, CatalogStoreError> {
        // A replace given its rows is not stopped midway: it has no stop to check.
        let never = CancellationToken::new();
        let tally = Tally::new(Rewrite::whole(), 0);
        self.staged_swap(tenant, (Mode::Whole, None), fence, |staged| {
            let rows = table.iter().map(|(k, n)| (k.as_str(), n.clone()));
            self.stage_rows(staged, rows, (fence, &never), &tally)
        })
    }

    /// Stages the rows `rewrite` names, the removed ones and the state, then swaps, telling
    /// `rewrite` after each staging write and after the swap how many of them are done.
    pub(super) fn save_pairing_table(
        &self,
        tenant: &TenantId,
        pairing: &Pairing,
        (rewrite, fed_upto): (Rewrite<'_>, u64),
        fence: &dyn Fence,
        stop: &CancellationToken,
    ) -> Result<Swap, CatalogStoreError> {
        let row = |i: usize| pairing.row(i).map(|r| (pairing.keys[i].as_str(), r));
        let has_row = |i: usize| !pairing.top(i).is_empty();
        let (mode, rows, gone): (Mode, Vec<u32>, Vec<&str>) = match rewrite.changed() {
            None => {
                let rows = (0..pairing.keys.len() as u32).filter(|&i| has_row(i as usize));
                (Mode::Whole, rows.collect(), Vec::new())
            }
            Some((changed, removed)) => {
                let (rows, emptied): (Vec<u32>, Vec<u32>) =
                    changed.iter().partition(|&&i| has_row(i as usize));
                let emptied = emptied
                    .into_iter()
                    .map(|i| pairing.keys[i as usize].as_str());
                let gone = removed.iter().map(ProductKey::as_str).chain(emptied);
                (Mode::Rows, rows, gone.collect())
            }
        };
        let state = pairing.encode();
        let writes = rows.len().div_ceil(CHUNK) + gone.len().div_ceil(CHUNK);
        let tally = Tally::new(rewrite, writes + state.len().div_ceil(SLICE) + 1);
        let swap = self.staged_swap(tenant, (mode, Some(fed_upto)), fence, |staged| {
            let rows = rows.iter().filter_map(|&i| row(i as usize));
            let mut hold = self.stage_rows(staged, rows, (fence, stop), &tally)?;
            if hold == Hold::Held && !gone.is_empty() {
                let chunks = gone.chunks(CHUNK);
                let gone_key = &staged.gone;
                hold = self.stage_each(
                    FencedWrite::Sadd,
                    staged,
                    gone_key,
                    chunks,
                    (fence, stop),
                    &tally,
                )?;
            }
            match hold {
                Hold::Held => {
                    let slices = state.chunks(SLICE);
                    let key = &staged.state;
                    self.stage_each(
                        FencedWrite::Append,
                        staged,
                        key,
                        slices,
                        (fence, stop),
                        &tally,
                    )
                }
                refused => Ok(refused),
            }
        })?;
        tally.one();
        Ok(swap)
    }

    /// The tenant's pairing state, read a slice at a time (`Stopped` between slices once
    /// `stop` is cancelled); a state that does not decode (another format) reads as none, so
    /// the next pair is a full one.
    pub(super) fn load_pairing(
        &self,
        tenant: &TenantId,
        stop: &CancellationToken,
    ) -> Result<Option<Arc<Pairing>>, CatalogStoreError> {
        let key = self.keys.pairing(tenant);
        let len: usize = self.query(redis::cmd("STRLEN").arg(&key))?;
        if len == 0 {
            return Ok(None);
        }
        let mut bytes = Vec::with_capacity(len);
        while bytes.len() < len {
            stopped(stop)?;
            let end = (bytes.len() + SLICE).min(len) - 1;
            let slice: Vec<u8> =
                self.query(redis::cmd("GETRANGE").arg(&key).arg(bytes.len()).arg(end))?;
            if slice.is_empty() {
                break;
            }
            bytes.extend_from_slice(&slice);
        }
        match Pairing::decode(&bytes) {
            Ok(p) => Ok(Some(Arc::new(p))),
            Err(why) => {
                tracing::warn!(%tenant, %why, "the stored pairing state does not read; the next pair is a full one");
                Ok(None)
            }
        }
    }

    /// A page of versions: one HSCAN batch of products and the enrichments of its keys.
    pub(super) fn product_versions(
        &self,
        tenant: &TenantId,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<VersionsPage, CatalogStoreError> {
        let scan: u64 = match cursor {
            Some(c) => c.parse().map_err(|_| CatalogStoreError::BadCursor)?,
            None => 0,
        };
        let (next, batch): (u64, Vec<(String, String)>) = self.query(
            redis::cmd("HSCAN")
                .arg(self.keys.products(tenant))
                .arg(scan)
                .arg("COUNT")
                .arg(limit.max(1)),
        )?;
        let enriched = self.keys.enriched(tenant);
        let mut out = Vec::with_capacity(batch.len());
        for chunk in batch.chunks(CHUNK) {
            let fields: Vec<&str> = chunk.iter().map(|(k, _)| k.as_str()).collect();
            let enrichments: Vec<Option<String>> =
                self.query(redis::cmd("HMGET").arg(&enriched).arg(&fields))?;
            for ((key, raw), enrichment) in chunk.iter().zip(enrichments) {
                let hashed: Hashed = Self::decode(raw)?;
                let key = ProductKey::parse(key).map_err(CatalogStoreError::Corrupt)?;
                out.push((key, hashed.version(enrichment.as_deref())));
            }
        }
        Ok((out, (next != 0).then(|| next.to_string())))
    }

    /// The stored products and enrichments of `keys` (at most `CHUNK` of them), in their
    /// order, in one round trip.
    pub(super) fn records_of(
        &self,
        tenant: &TenantId,
        keys: &[ProductKey],
    ) -> Result<Records, CatalogStoreError> {
        let fields: Vec<&str> = keys.iter().map(ProductKey::as_str).collect();
        self.query_pipe(
            redis::pipe()
                .cmd("HMGET")
                .arg(self.keys.products(tenant))
                .arg(&fields)
                .cmd("HMGET")
                .arg(self.keys.enriched(tenant))
                .arg(&fields),
        )
    }

    /// `each` of the product records of `keys`, decoded, with their enrichment records
    /// (raw, `None` where missing), read `CHUNK` keys a round trip; its answers in the keys'
    /// order, `None` for a key with no product.
    pub(super) fn map_records<R: for<'de> Deserialize<'de>, T>(
        &self,
        tenant: &TenantId,
        keys: &[ProductKey],
        each: impl Fn(R, Option<String>) -> Result<T, CatalogStoreError>,
    ) -> Result<Vec<Option<T>>, CatalogStoreError> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(CHUNK) {
            let (stored, enrichments) = self.records_of(tenant, chunk)?;
            for (stored, enrichment) in stored.into_iter().zip(enrichments) {
                let record = stored.map(|raw| Self::decode(&raw)).transpose()?;
                out.push(record.map(|r| each(r, enrichment)).transpose()?);
            }
        }
        Ok(out)
    }

    /// The pairing inputs of `keys`, read `CHUNK` keys a round trip, in the keys' order
    /// (`None` for a key with no product): only pairing's fields decoded
    /// (`PairingInput::from_json`), not the whole record and enrichment.
    pub(super) fn pairing_inputs_of(
        &self,
        tenant: &TenantId,
        keys: &[ProductKey],
    ) -> Result<Vec<Option<PairingInput>>, CatalogStoreError> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(CHUNK) {
            let (stored, enrichments) = self.records_of(tenant, chunk)?;
            for ((key, stored), enrichment) in chunk.iter().zip(stored).zip(enrichments) {
                let input = stored.map(|raw| {
                    let enrichment = enrichment.as_deref().map(str::as_bytes);
                    PairingInput::from_json(key, raw.as_bytes(), enrichment)
                        .map_err(|e| CatalogStoreError::Corrupt(e.to_string()))
                });
                out.push(input.transpose()?);
            }
        }
        Ok(out)
    }

    pub(super) fn remove_products(
        &self,
        tenant: &TenantId,
        keys: &[ProductKey],
    ) -> Result<u64, CatalogStoreError> {
        let mut removed = 0;
        for chunk in keys.chunks(CHUNK) {
            let fields: Vec<&str> = chunk.iter().map(ProductKey::as_str).collect();
            let mut pipe = redis::pipe();
            pipe.atomic()
                .cmd("HDEL")
                .arg(self.keys.products(tenant))
                .arg(&fields)
                .cmd("HDEL")
                .arg(self.keys.enriched(tenant))
                .arg(&fields)
                .ignore();
            self.note_in(&mut pipe, tenant, &fields);
            let (gone,): (u64,) = self.query_pipe(&pipe)?;
            removed += gone;
        }
        Ok(removed)
    }
}
