//! The catalogue store's contract: what the job functions and the API may ask of a tenant's
//! catalogue, answered the same by both backends (`memory`, `redis`). Blocking, no TTL on
//! catalogue data, no HTTP and no job keys: every write passes its writer's fence
//! (`jobs::fence`), checked in the same atomic step, so a run that lost its job or an import
//! into a tenant deleted since changes nothing.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::feed::Changed;
use super::pairing::Pairing;
use super::record::{Enrichment, Neighbour, PairingInput, Product, ProductKey, Stored};
use crate::jobs::fence::{Fence, Hold};
use crate::jobs::TenantId;

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
    /// A run's job record is gone and nothing says why (the store lost it): the write waits
    /// for the run's heartbeat to write the record back, and is tried again.
    #[error("the run's job record is missing; waiting for it to be written back")]
    RecordMissing,
    /// The caller's run was asked to stop while a long read or staging was under way.
    #[error("stopped on request")]
    Stopped,
}

/// `Stopped` once `stop` is cancelled: what a long read or staging checks between steps.
pub fn stopped(stop: &CancellationToken) -> Result<(), CatalogStoreError> {
    if stop.is_cancelled() {
        Err(CatalogStoreError::Stopped)
    } else {
        Ok(())
    }
}

/// How a fenced write went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write<T> {
    /// Written, with what the write counted.
    Done(T),
    /// Refused by its fence (the run no longer holds its job, or the tenant was deleted
    /// since its writer began): nothing of it was written, and the writer stops.
    Fenced,
}

impl<T> Write<T> {
    /// What a fence answered about a write that gave `value` when it ran.
    pub(super) fn from_hold(hold: Hold, value: T) -> Result<Self, CatalogStoreError> {
        match hold {
            Hold::Held => Ok(Write::Done(value)),
            Hold::Fenced => Ok(Write::Fenced),
            Hold::Missing => Err(CatalogStoreError::RecordMissing),
        }
    }

    /// The write's counts, or `fenced()` when it was refused.
    pub fn or_else<E>(self, fenced: impl FnOnce() -> E) -> Result<T, E> {
        match self {
            Write::Done(v) => Ok(v),
            Write::Fenced => Err(fenced()),
        }
    }
}

/// The per-tenant catalogue. Blocking: the job functions call it from their blocking
/// threads, the HTTP handlers through `spawn_blocking`.
pub trait CatalogStore: Send + Sync + 'static {
    /// Writes the products whose content changed, while `fence` holds; counts created,
    /// updated and unchanged.
    fn upsert(
        &self,
        tenant: &TenantId,
        products: &[Product],
        fence: &dyn Fence,
    ) -> Result<Write<Upserted>, CatalogStoreError>;
    /// `upsert` of one batch of a run, named by `batch` (the same each time the batch is sent,
    /// no other batch's): a batch sent again after its answer was lost (Redis paused or failed
    /// over mid-write) counts what its first sending wrote, not `unchanged`. A store whose
    /// write never loses its answer (the embedded one) needs no name.
    fn upsert_batch(
        &self,
        tenant: &TenantId,
        products: &[Product],
        fence: &dyn Fence,
        _batch: &str,
    ) -> Result<Write<Upserted>, CatalogStoreError> {
        self.upsert(tenant, products, fence)
    }
    fn get(&self, tenant: &TenantId, key: &ProductKey)
        -> Result<Option<Stored>, CatalogStoreError>;
    /// A page of at most `limit` products in key order, after the cursor's key: following
    /// the cursor lists a product at most once, and every product present throughout
    /// exactly once, however the catalogue changes meanwhile. The
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
    /// Saves a batch of enrichments while `fence` holds.
    fn save_enrichments(
        &self,
        tenant: &TenantId,
        batch: &[(ProductKey, Enrichment)],
        fence: &dyn Fence,
    ) -> Result<Write<()>, CatalogStoreError>;
    /// Replaces the whole neighbour table at once: readers see the old table or the new one.
    /// The swap (and the staging of the new table) happens only while `fence` holds,
    /// checked in the same atomic step (`jobs::fence`); otherwise the old table stays whole
    /// and it is `Fenced`.
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
    /// Every row of the neighbour table, in no set order: the rows of products removed since
    /// the last pair included (as `neighbours` still answers them). One read of the whole
    /// table, not a round trip per product.
    fn neighbour_table(
        &self,
        tenant: &TenantId,
    ) -> Result<Vec<(ProductKey, Vec<Neighbour>)>, CatalogStoreError>;
    /// Removes the tenant's whole catalogue in one step and counts what was there.
    fn clear(&self, tenant: &TenantId) -> Result<Cleared, CatalogStoreError>;
    /// The Redis keys that hold the tenant's catalogue (the hashes of products, extracted
    /// attributes and neighbours, in that order, then pair's state, then the set naming the
    /// keys pair stages aside, which go with it, then the change feed's two keys, then the
    /// listing's index), for a delete that removes them in the same step as the tenant's
    /// jobs (`JobStore::purge`); none for the embedded catalogue.
    fn hashes(&self, tenant: &TenantId) -> Vec<String>;
    /// Removes these products and what enrichment found for them; counts the products that
    /// were there. Their neighbour rows stay until the next pair (a product view skips a
    /// neighbour removed since). No job writes through it: tests and benchmarks use it to
    /// stand for a catalogue that lost products, so it passes no fence.
    fn remove(&self, tenant: &TenantId, keys: &[ProductKey]) -> Result<u64, CatalogStoreError>;

    /// A page of about `limit` products' keys with their versions: a number that changes
    /// whenever the product or what enrichment found for it changes (`record::version`).
    /// Pair compares them with the versions it paired, so it reads only what changed, and
    /// reads them a page at a time so that it can stop between pages. Following the cursor
    /// (opaque; `None` after the last page) visits every product present throughout at
    /// least once, in no set order (`in_key_order` sorts a listing).
    fn versions_page(
        &self,
        tenant: &TenantId,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<VersionsPage, CatalogStoreError>;

    /// Every product's key, in key order, with its version (`versions_page`, every page).
    fn versions(&self, tenant: &TenantId) -> Result<Vec<(ProductKey, u64)>, CatalogStoreError> {
        let (mut out, mut cursor) = (Vec::new(), None);
        loop {
            let (page, next) = self.versions_page(tenant, cursor.as_deref(), VERSIONS_PAGE)?;
            out.extend(page);
            match next {
                Some(next) => cursor = Some(next),
                None => return Ok(in_key_order(out)),
            }
        }
    }
    /// The versions (`versions_page`'s) of `keys`, in their order; `None` for a product not
    /// there.
    fn versions_of(
        &self,
        tenant: &TenantId,
        keys: &[ProductKey],
    ) -> Result<Vec<Option<u64>>, CatalogStoreError>;
    /// The change feed (`feed`): the products written or removed since the tenant's pairing
    /// state was saved, and the feed's position to hand back to `save_pairing`. Every write
    /// that changes a product's version (`upsert`, `save_enrichments`, `remove`) notes its
    /// keys in the same step; a tenant's delete (`clear`, or the job store's purge of
    /// `hashes`) takes the feed with it.
    fn changed(&self, tenant: &TenantId) -> Result<Changed, CatalogStoreError>;
    /// What pairing reads of each of `keys`, in their order; `None` for a product not there.
    fn pairing_inputs(
        &self,
        tenant: &TenantId,
        keys: &[ProductKey],
    ) -> Result<Vec<Option<PairingInput>>, CatalogStoreError>;
    /// The state the tenant's last pair kept; `None` before any, after a table replaced by
    /// `replace_neighbours`, or when the stored state is of another format. A store that
    /// reads it in parts answers `Stopped` between parts once `stop` is cancelled.
    fn pairing(
        &self,
        tenant: &TenantId,
        stop: &CancellationToken,
    ) -> Result<Option<Arc<Pairing>>, CatalogStoreError>;
    /// Puts `pairing` in place of the tenant's state and its rows in the neighbour table, in
    /// one step: readers see the old table or the new one. `rewrite` says which rows
    /// changed. In the same step the change feed forgets what it noted up to `fed_upto` (the
    /// `Changed::upto` this pair read before reading any product). Fenced as
    /// `replace_neighbours`: refused, nothing changes. A store that stages in parts answers
    /// `Stopped` between parts once `stop` is cancelled, and changes nothing.
    fn save_pairing(
        &self,
        tenant: &TenantId,
        pairing: Arc<Pairing>,
        rewrite: Rewrite<'_>,
        fed_upto: u64,
        fence: &dyn Fence,
        stop: &CancellationToken,
    ) -> Result<Swap, CatalogStoreError>;
}

/// A page of products' versions and the cursor of the next page.
pub type VersionsPage = (Vec<(ProductKey, u64)>, Option<String>);

/// Products per page of a listing of versions: one round trip each on Redis, and between
/// pages a reader can stop.
pub const VERSIONS_PAGE: usize = 1000;

/// A listing of versions in key order, each product once (a Redis scan may visit a product
/// twice; its versions then agree or the later one is as good).
pub fn in_key_order(mut versions: Vec<(ProductKey, u64)>) -> Vec<(ProductKey, u64)> {
    versions.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    versions.dedup_by(|a, b| a.0 == b.0);
    versions
}

/// Which rows of the neighbour table a new pairing changes, and whom a store that writes
/// them in parts tells how far it is.
#[derive(Clone, Copy)]
pub struct Rewrite<'a> {
    /// `None` for the whole table.
    rows: Option<(&'a [u32], &'a [ProductKey])>,
    written: &'a (dyn Fn(usize, usize) + Sync),
}

/// Nobody to tell (`Rewrite::written`).
fn nobody(_: usize, _: usize) {}

impl<'a> Rewrite<'a> {
    /// All of them: the table becomes the pairing's rows.
    pub fn whole() -> Self {
        Self {
            rows: None,
            written: &nobody,
        }
    }

    /// Only the rows of `changed` (indices into the pairing's keys; a product whose row is
    /// now empty loses it), and the rows of the `removed` products go.
    pub fn rows(changed: &'a [u32], removed: &'a [ProductKey]) -> Self {
        Self {
            rows: Some((changed, removed)),
            written: &nobody,
        }
    }

    /// The same, telling `written(done, all)` after each part a store writes (`all` the
    /// parts it writes in all, the swap the last).
    pub fn telling(self, written: &'a (dyn Fn(usize, usize) + Sync)) -> Self {
        Self { written, ..self }
    }

    /// The rows that change and the removed products' keys; `None` for the whole table.
    pub fn changed(&self) -> Option<(&'a [u32], &'a [ProductKey])> {
        self.rows
    }

    /// Tells that `done` of the `all` parts are written.
    pub fn written(&self, done: usize, all: usize) {
        (self.written)(done, all);
    }
}

/// How a fenced swap of a whole table went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Swap {
    Swapped,
    /// The run no longer holds its job (or its tenant was deleted): nothing was changed.
    Fenced,
}

impl From<Write<()>> for Swap {
    fn from(write: Write<()>) -> Self {
        match write {
            Write::Done(()) => Swap::Swapped,
            Write::Fenced => Swap::Fenced,
        }
    }
}

impl Cleared {
    /// The sizes of the keys `CatalogStore::hashes` named, in its order (pair's state, its
    /// staging keys, the change feed and the last batch's record count nothing).
    pub fn from_sizes(sizes: &[u64]) -> Option<Self> {
        match *sizes {
            [products, extracted_attributes, neighbours, _pairing, _staging, _feed, _feed_at, _listing, _batch] => {
                Some(Cleared {
                    products,
                    extracted_attributes,
                    neighbours,
                })
            }
            _ => None,
        }
    }
}

/// What a tenant's catalogue held when it was cleared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Cleared {
    pub products: u64,
    /// Products with extracted attributes.
    pub extracted_attributes: u64,
    /// Products with a neighbour list.
    pub neighbours: u64,
}
