//! What a pair reads first: every product's key and version, in key order. From the change
//! feed when it can (`CatalogStore::changed`: the last state's versions, with the products
//! the feed names read anew), else by listing every product's version a page at a time: no
//! state, a feed that overflowed or began after the state, or `full=true` (a full pair asked
//! for reads everything afresh, the feed included).

use super::Run;
use crate::catalog::products::{in_key_order, Changed, Pairing, ProductKey, VERSIONS_PAGE};
use crate::catalog::report::FoundBy;
use crate::catalog::{check, retrying, CatalogError};

/// Progress while the versions are read.
const LISTING: u8 = 2;

/// A listing of versions and how the changes in it were found.
pub(super) type Listing = (Vec<(ProductKey, u64)>, FoundBy);

impl Run<'_> {
    /// Every product's version, in key order: from `fed` over `state` when the feed can
    /// say and no full pair was asked for, else listed.
    pub(super) fn listing(
        &self,
        state: Option<&Pairing>,
        fed: &Changed,
        full: bool,
    ) -> Result<Listing, CatalogError> {
        match (state, &fed.keys) {
            (Some(state), Some(changed)) if !full => Ok((self.fed(state, changed)?, FoundBy::Feed)),
            _ => Ok((self.versions()?, FoundBy::Listing)),
        }
    }

    /// Every product's version, read a page at a time with a cancel check before each page.
    fn versions(&self) -> Result<Vec<(ProductKey, u64)>, CatalogError> {
        let window = self.catalog.settings.write_retry;
        let (mut out, mut cursor) = (Vec::new(), None::<String>);
        loop {
            check(self.stop)?;
            self.progress
                .report(LISTING, &format!("listing products ({} so far)", out.len()));
            let (page, next) = retrying(window, self.stop, || {
                let store = &self.catalog.store;
                store.versions_page(self.tenant, cursor.as_deref(), VERSIONS_PAGE)
            })?;
            out.extend(page);
            match next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        check(self.stop)?;
        Ok(in_key_order(out))
    }

    /// The state's versions with those of the `changed` products (in key order) read anew,
    /// a page at a time with a cancel check before each page.
    fn fed(
        &self,
        state: &Pairing,
        changed: &[ProductKey],
    ) -> Result<Vec<(ProductKey, u64)>, CatalogError> {
        let window = self.catalog.settings.write_retry;
        let mut now = Vec::with_capacity(changed.len());
        for page in changed.chunks(VERSIONS_PAGE) {
            check(self.stop)?;
            self.progress.report(
                LISTING,
                &format!("reading the {} products that changed", changed.len()),
            );
            let versions = retrying(window, self.stop, || {
                self.catalog.store.versions_of(self.tenant, page)
            })?;
            now.extend(page.iter().zip(versions));
        }
        check(self.stop)?;
        Ok(merged(state, now))
    }
}

/// The state's keys and versions, with `changed` (in key order: a version, or `None` for a
/// product gone) in place of theirs. Each changed key is found by a binary search, so the
/// unchanged runs between them are copied without comparing their keys.
fn merged(state: &Pairing, changed: Vec<(&ProductKey, Option<u64>)>) -> Vec<(ProductKey, u64)> {
    let mut out = Vec::with_capacity(state.keys.len() + changed.len());
    let kept = |range: std::ops::Range<usize>| {
        let keys = state.keys[range.clone()].iter().cloned();
        keys.zip(state.versions[range].iter().copied())
    };
    let mut from = 0;
    for (key, version) in changed {
        let (at, found) = find_from(&state.keys, from, key);
        out.extend(kept(from..at));
        out.extend(version.map(|v| (key.clone(), v)));
        from = at + usize::from(found);
    }
    out.extend(kept(from..state.keys.len()));
    out
}

/// Where `key` is or would go in `keys` (sorted), searched from `from` on, and whether it
/// is there: galloping from `from` (1, 2, 4 … keys on), then a binary search of the last
/// step. The changed keys are spread through the state's, so the next one is usually a
/// hundred keys on: its probes land among the keys copied next (each key's first read is a
/// cache miss either way) instead of across the whole list, 20 misses each at 1M.
fn find_from(keys: &[ProductKey], from: usize, key: &ProductKey) -> (usize, bool) {
    let rest = &keys[from..];
    let mut end = 1;
    while end <= rest.len() && rest[end - 1] < *key {
        end *= 2;
    }
    let start = end / 2;
    match rest[start..end.min(rest.len())].binary_search(key) {
        Ok(i) => (from + start + i, true),
        Err(i) => (from + start + i, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> ProductKey {
        ProductKey::parse(k).expect("a valid key")
    }

    #[test]
    fn the_feed_s_products_replace_add_to_or_leave_the_state_s_listing() {
        let state = Pairing {
            keys: ["b", "d", "f", "h"].map(key).to_vec(),
            versions: vec![2, 4, 6, 8],
            ..Pairing::default()
        };
        let (a, d, e, f, z) = (key("a"), key("d"), key("e"), key("f"), key("z"));
        let changed = vec![
            (&a, Some(1)),
            (&d, Some(40)),
            (&e, Some(5)),
            (&f, None),
            (&z, None),
        ];
        let want: Vec<(ProductKey, u64)> = [("a", 1), ("b", 2), ("d", 40), ("e", 5), ("h", 8)]
            .into_iter()
            .map(|(k, v)| (key(k), v))
            .collect();
        assert_eq!(merged(&state, changed), want);
        assert_eq!(merged(&state, vec![]).len(), 4);
    }

    #[test]
    fn a_search_from_a_place_finds_what_a_binary_search_of_the_rest_finds() {
        let keys: Vec<ProductKey> = (0..300).map(|i| key(&format!("k{:04}", 2 * i))).collect();
        for from in [0, 1, 7, 150, 299, 300] {
            for probe in 0..610 {
                let probe = key(&format!("k{probe:04}"));
                let want = match keys[from..].binary_search(&probe) {
                    Ok(i) => (from + i, true),
                    Err(i) => (from + i, false),
                };
                assert_eq!(
                    find_from(&keys, from, &probe),
                    want,
                    "{probe:?} from {from}"
                );
            }
        }
    }
}
