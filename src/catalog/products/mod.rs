//! Products: the record (`record`), the per-tenant catalogue store's contract (`store`) and
//! its two backends, embedded (`memory`) and Redis (`redis`). The jobs and the API name
//! everything through this module, so a backend is chosen at start-up and nowhere else.
//!
//! Catalogue data has no TTL. The store knows nothing of HTTP and builds no job keys.

mod memory;
mod record;
mod redis;
mod store;

pub use self::memory::MemoryCatalog;
pub use self::record::{
    limits, split_taxonomy, Enrichment, Neighbour, Product, ProductKey, Stored,
};
pub use self::redis::{CatalogKeys, RedisCatalog};
pub use self::store::{CatalogStore, CatalogStoreError, Cleared, Swap, Upserted, Write};
