//! The embedded catalogue: every tenant's products, enrichments and neighbour table in one
//! mutex-guarded map. Same contract as Redis (`store::CatalogStore`), not durable; every
//! write happens under the embedded job store's lock (`Fence::while_held`), so no claim,
//! end or delete comes between the fence's check and the write.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use super::record::{Enrichment, Neighbour, Product, ProductKey, Stored};
use super::store::{CatalogStore, CatalogStoreError, Cleared, Swap, Upserted, Write};
use crate::jobs::fence::Fence;
use crate::jobs::TenantId;

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
        fence: &dyn Fence,
    ) -> Result<Write<Upserted>, CatalogStoreError> {
        let mut counts = Upserted::default();
        let hold = fence.while_held(&mut || {
            counts = self.with(tenant, |c| {
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
            })
        });
        Write::from_hold(hold, counts)
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
        fence: &dyn Fence,
    ) -> Result<Write<()>, CatalogStoreError> {
        let hold = fence.while_held(&mut || {
            self.with(tenant, |c| {
                for (k, e) in batch {
                    c.enriched.insert(k.clone(), e.clone());
                }
            })
        });
        Write::from_hold(hold, ())
    }

    fn replace_neighbours(
        &self,
        tenant: &TenantId,
        table: &[(ProductKey, Vec<Neighbour>)],
        fence: &dyn Fence,
    ) -> Result<Swap, CatalogStoreError> {
        let mut fresh: Option<HashMap<_, _>> = Some(table.iter().cloned().collect());
        // Under the job store's lock (the embedded one): no claim comes between check and swap.
        let hold = fence.while_held(&mut || {
            let fresh = fresh.take().unwrap_or_default();
            let mut tenants = self.tenants();
            match tenants.get_mut(tenant) {
                Some(c) => c.neighbours = fresh,
                // No catalogue and nothing to write: nothing to make.
                None if fresh.is_empty() => {}
                None => tenants.entry(tenant.clone()).or_default().neighbours = fresh,
            }
        });
        Write::from_hold(hold, ()).map(Swap::from)
    }

    fn neighbours(
        &self,
        tenant: &TenantId,
        key: &ProductKey,
    ) -> Result<Option<Vec<Neighbour>>, CatalogStoreError> {
        Ok(self.read(tenant, |c| c.neighbours.get(key).cloned()))
    }

    fn hashes(&self, _tenant: &TenantId) -> Vec<String> {
        Vec::new()
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
