//! The catalogue store's contract: what the job functions and the API may ask of a tenant's
//! catalogue, answered the same by both backends (`memory`, `redis`). Blocking, no TTL on
//! catalogue data, no HTTP and no job keys: the neighbour swap checks the job record its
//! run's fence names (`jobs::fence`).

use std::collections::HashMap;

use serde::Serialize;

use super::record::{Enrichment, Neighbour, Product, ProductKey, Stored};
use crate::jobs::fence::Fence;
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
    pub(super) fn from_held(held: bool) -> Self {
        if held {
            Swap::Swapped
        } else {
            Swap::Fenced
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
