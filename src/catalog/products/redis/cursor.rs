//! The Redis product listing's page cursor.

use super::super::record::ProductKey;
use super::super::store::CatalogStoreError;

/// The Redis listing's cursor: the HSCAN cursor of the batch a page stopped in, and the
/// last key served from that batch (`<scan>-<key>`; the scan part is digits, so the first
/// `-` ends it). Without a key the page stopped between batches.
pub(super) struct ScanCursor;

impl ScanCursor {
    pub(super) fn decode(raw: Option<&str>) -> Result<(u64, Option<String>), CatalogStoreError> {
        let Some(raw) = raw else {
            return Ok((0, None));
        };
        let (scan, after) = match raw.split_once('-') {
            Some((scan, key)) => (scan, Some(key)),
            None => (raw, None),
        };
        let scan = scan.parse().map_err(|_| CatalogStoreError::BadCursor)?;
        let after = after
            .map(|k| ProductKey::parse(k).map(|k| k.as_str().to_owned()))
            .transpose()
            .map_err(|_| CatalogStoreError::BadCursor)?;
        Ok((scan, after))
    }

    pub(super) fn inside(scan: u64, last: Option<&str>) -> String {
        match last {
            Some(k) => format!("{scan}-{k}"),
            None => scan.to_string(),
        }
    }
}
