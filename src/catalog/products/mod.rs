//! Products: the record (`record`), the per-tenant catalogue store's contract (`store`), the
//! state pair keeps between runs (`pairing`), the change feed it reads (`feed`) and the
//! store's two backends, embedded (`memory`) and Redis (`redis`). The jobs and the API name
//! everything through this module, so a backend is chosen at start-up and nowhere else.
//!
//! Catalogue data has no TTL. The store knows nothing of HTTP and builds no job keys.

mod feed;
mod memory;
mod pairing;
mod record;
mod redis;
mod store;

pub use self::feed::{Changed, CHANGE_FEED_MAX};
pub use self::memory::MemoryCatalog;
pub use self::pairing::{rounded, Known, Pairing, Traits, WeightParts, NO_CATEGORY};
pub use self::record::{
    fingerprint, limits, split_taxonomy, version, Enrichment, Neighbour, PairingInput, Product,
    ProductKey, Stored,
};
pub use self::redis::{CatalogKeys, RedisCatalog};
pub use self::store::{
    in_key_order, CatalogStore, CatalogStoreError, Cleared, Rewrite, Swap, Upserted, VersionsPage,
    Write, VERSIONS_PAGE,
};
