//! The Redis product listing: pages in key order, read from the listing's index
//! (`listing.lua`), and their cursor.

use std::sync::LazyLock;

use redis::Script;

use super::super::record::{fingerprint, ProductKey, Stored};
use super::super::store::CatalogStoreError;
use super::{RedisCatalog, Resend};
use crate::jobs::TenantId;

/// A page of products in key order from the listing's index, which products writes keep
/// (`Beside::Listed`) and which it makes again from the hash when the two do not count the
/// same keys.
static LISTING: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("listing.lua")));

/// The Redis listing's cursor: `<check>:<key>`, the last key a page held. The next page
/// starts after it in key order, so a key is listed at most once however the hash grows
/// (HSCAN's order, which pages once followed, revisits keys when the hash is rehashed).
/// The check is eight hex digits of the tenant and the key (FNV-1a): a cursor this listing
/// did not hand out, handed out for another tenant, or by the scan-order listing before it,
/// is refused instead of answering a page from nowhere. A check, not a secret: it catches
/// made-up and mixed-up cursors, not forged ones, which could only read the tenant's own
/// products anyway.
pub(super) struct KeyCursor;

impl KeyCursor {
    pub(super) fn decode(
        tenant: &TenantId,
        raw: Option<&str>,
    ) -> Result<Option<String>, CatalogStoreError> {
        let Some(raw) = raw else {
            return Ok(None);
        };
        let (check, key) = raw.split_once(':').ok_or(CatalogStoreError::BadCursor)?;
        if check != Self::check(tenant, key) {
            return Err(CatalogStoreError::BadCursor);
        }
        let key = ProductKey::parse(key).map_err(|_| CatalogStoreError::BadCursor)?;
        Ok(Some(key.as_str().to_owned()))
    }

    pub(super) fn after(tenant: &TenantId, key: &str) -> String {
        format!("{}:{key}", Self::check(tenant, key))
    }

    /// Eight hex digits of the 64-bit FNV-1a hash of the tenant, `key` and the last key.
    fn check(tenant: &TenantId, key: &str) -> String {
        let hash = fingerprint(format!("{tenant}\0key\0{key}").as_bytes());
        format!("{:08x}", hash as u32)
    }
}

impl RedisCatalog {
    /// At most `limit` of the tenant's products after the cursor's key, in key order, and
    /// the cursor of the next page (None once the last key was listed).
    pub(super) fn key_page(
        &self,
        tenant: &TenantId,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<(Vec<Stored>, Option<String>), CatalogStoreError> {
        let limit = limit.max(1);
        let after = KeyCursor::decode(tenant, cursor)?;
        let mut inv = LISTING.key(self.keys.products(tenant));
        inv.key(self.keys.listing(tenant))
            .arg(after.as_deref().unwrap_or(""))
            .arg(limit + 1);
        let (mut keys, mut values): (Vec<String>, Vec<Option<String>>) =
            self.invoke(Resend::Yes, &inv)?;
        let more = keys.len() > limit;
        keys.truncate(limit);
        values.truncate(limit);
        let next = match (more, keys.last()) {
            (true, Some(last)) => Some(KeyCursor::after(tenant, last)),
            _ => None,
        };
        // A key the index holds is in the hash (the script checked their counts); a value
        // that is none all the same is skipped, not listed as null.
        let items = values
            .iter()
            .flatten()
            .map(|v| Self::decode(v))
            .collect::<Result<_, _>>()?;
        Ok((items, next))
    }
}
