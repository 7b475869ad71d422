//! What a pair reads first: every product's key and version, in key order. From the change
//! feed when it can (`CatalogStore::changed`: the last state's versions, with the products
//! the feed names read anew), else by listing every product's version a page at a time: no
//! state, a feed that overflowed or began after the state, or `full=true` (a full pair asked
//! for reads everything afresh, the feed included).

use super::incremental::Catalogue;
use super::Run;
use crate::catalog::products::{in_key_order, Changed, Pairing, ProductKey, VERSIONS_PAGE};
use crate::catalog::report::FoundBy;
use crate::catalog::{check, retrying, CatalogError};

/// Progress while the versions are read.
const LISTING: u8 = 2;

/// A listing of versions and how the changes in it were found.
pub(super) type Listing = (Listed, FoundBy);

/// Every product's version, in key order: listed, or the last state's with the products
/// the feed names read anew (`Catalogue::fed`: the state's unchanged runs taken as they
/// are, so that an incremental pair need not compare them again).
pub(super) enum Listed {
    All(Vec<(ProductKey, u64)>),
    Fed(Catalogue),
}

impl Listed {
    pub(super) fn len(&self) -> usize {
        match self {
            Listed::All(versions) => versions.len(),
            Listed::Fed(cat) => cat.len(),
        }
    }

    /// Every product's key and version, in key order (what a full pair reads).
    pub(super) fn into_versions(self) -> Vec<(ProductKey, u64)> {
        match self {
            Listed::All(versions) => versions,
            Listed::Fed(cat) => cat.into_versions(),
        }
    }
}

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
            (Some(state), Some(changed)) if !full => {
                Ok((Listed::Fed(self.fed(state, changed)?), FoundBy::Feed))
            }
            _ => Ok((Listed::All(self.versions()?), FoundBy::Listing)),
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
    fn fed(&self, state: &Pairing, changed: &[ProductKey]) -> Result<Catalogue, CatalogError> {
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
        Ok(Catalogue::fed(state, now))
    }
}
