//! The Redis product listing's page cursor.

use super::super::record::{fingerprint, ProductKey};
use super::super::store::CatalogStoreError;
use crate::jobs::TenantId;

/// The Redis listing's cursor: `<check>:<scan>` or `<check>:<scan>-<key>` — the HSCAN cursor
/// of the batch a page stopped in, and the last key served from that batch (the scan part is
/// digits, so the first `-` ends it; without a key the page stopped between batches). HSCAN
/// takes any number, so the cursor starts with a check of the tenant and what follows (eight
/// hex digits of its FNV-1a hash): a cursor this listing did not hand out, or handed out for
/// another tenant, is refused instead of answering a page from nowhere (or an empty last page).
/// A check, not a secret: it catches made-up and mixed-up cursors, not forged ones, which
/// could only read the tenant's own products anyway.
pub(super) struct ScanCursor;

impl ScanCursor {
    pub(super) fn decode(
        tenant: &TenantId,
        raw: Option<&str>,
    ) -> Result<(u64, Option<String>), CatalogStoreError> {
        let Some(raw) = raw else {
            return Ok((0, None));
        };
        let (check, body) = raw.split_once(':').ok_or(CatalogStoreError::BadCursor)?;
        if check != Self::check(tenant, body) {
            return Err(CatalogStoreError::BadCursor);
        }
        let (scan, after) = match body.split_once('-') {
            Some((scan, key)) => (scan, Some(key)),
            None => (body, None),
        };
        let scan = scan.parse().map_err(|_| CatalogStoreError::BadCursor)?;
        let after = after
            .map(|k| ProductKey::parse(k).map(|k| k.as_str().to_owned()))
            .transpose()
            .map_err(|_| CatalogStoreError::BadCursor)?;
        Ok((scan, after))
    }

    pub(super) fn inside(tenant: &TenantId, scan: u64, last: Option<&str>) -> String {
        let body = match last {
            Some(k) => format!("{scan}-{k}"),
            None => scan.to_string(),
        };
        format!("{}:{body}", Self::check(tenant, &body))
    }

    /// Eight hex digits of the 64-bit FNV-1a hash of the tenant, a NUL and the cursor's body.
    fn check(tenant: &TenantId, body: &str) -> String {
        let hash = fingerprint(format!("{tenant}\0{body}").as_bytes());
        format!("{:08x}", hash as u32)
    }
}
