//! An incremental pair: from the state of the last pair, re-score only what changed.
//!
//! **What changed.** The catalogue's versions (`listing`: the state's with the products the
//! change feed names read anew, or every product's listed) are compared with the ones the
//! state was paired at; only products whose version moved, and new ones, are read.
//! A product *changed* when its identity, category, price or material did (a new
//! description changes its version, not its neighbours); products are also *added* and
//! *removed*.
//!
//! **The weights.** Word weights are the last full pair's (`weights`): its vocabulary folds
//! and joins new words, its counts weigh them, a word it never counted weighs as if seen
//! once. So every unchanged product keeps its vector and every score between unchanged
//! products stands, and the result is exactly the table a full pair with these weights
//! writes.
//!
//! **Who is re-scored.** Exactly those whose top k can differ. Every product keeps its best
//! `Ask::depth` — the top k and `KEPT_BEYOND_TOP_K` more — and how far that list is known
//! (`Known`: all of it; every product ranking up to its last; or, once its last has left,
//! every product scoring above that last's score). Changed and added products are queried
//! anew. An unchanged product drops the changed and removed products from its list; while
//! what is left still proves its top k (`Known::proves`) it is not queried — the next best
//! it kept take the places freed (*refilled*) — else it is queried anew, with the rest of
//! its group (*lost a neighbour*). Changed and added products that can enter an unchanged
//! product's known list are found by their own reverse search (`reverse`, the bar being
//! where the list is known to) and merged into it (*gained a neighbour*). Every other list
//! stands as it was.
//!
//! **What is not made again.** The groups and index the last pair kept for this state
//! (`kept`) are patched: unchanged products stay in their groups, the others join the group
//! of their category and identity or a new one, indexed apart. Without them (a restart,
//! another replica's state) every product is weighed and indexed again, to the same table.

use tokio_util::sync::CancellationToken;

use super::embed::Embedding;
use super::full::indexing;
use super::kept::{self, Engine, Kept};
use super::listing::Listed;
use super::reading::{frozen_identity_of_words, traits_of, words_on_every_core, Names};
use super::rescore::{rescore, Plan};
use super::score::Ask;
use super::{Weights, EMBEDDED, INDEXED, LOADED, SCORED};
use crate::catalog::products::{Pairing, PairingInput, ProductKey, Traits};
use crate::catalog::rows::Rows;
use crate::catalog::{check, retrying, Catalog, CatalogError, Monotonic};
use crate::jobs::TenantId;

/// Products read from the store per call, with a cancel check between calls.
const READ_CHUNK: usize = 2_000;

/// How many products changed, were added and were removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub added: usize,
    pub changed: usize,
    pub removed: usize,
}

impl Changes {
    pub fn total(&self) -> usize {
        self.added + self.changed + self.removed
    }
}

/// Why products were re-scored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rescored {
    /// Changed or added.
    pub changed: usize,
    /// Their list no longer proved their top k once changed or removed products left it:
    /// queried anew.
    pub lost_a_neighbour: usize,
    /// Their top k held a changed or removed product, refilled from the rest of their kept
    /// list: not queried.
    pub refilled: usize,
    /// A changed or added product entered their top k.
    pub gained_a_neighbour: usize,
}

/// What an incremental run found.
pub enum Outcome {
    /// Nothing the state holds changed: no write.
    Unchanged,
    /// More than the allowed share changed since the last full pair: pair it all, these
    /// products (the listing handed back, so that it need not be kept twice).
    TooMuchChanged(Vec<(ProductKey, u64)>),
    Paired(Box<Paired>),
}

/// A new state and which of its rows are new.
pub struct Paired {
    pub pairing: Pairing,
    /// What to keep for the next pair once the state is saved.
    pub engine: Engine,
    /// Indices of the rows that changed.
    pub rows: Vec<u32>,
    pub removed: Vec<ProductKey>,
    pub changes: Changes,
    pub rescored: Rescored,
}

/// Where a product of the new catalogue comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Origin {
    /// Unchanged for pairing since the state's product `old` (its version may have moved).
    Same(u32),
    /// Version moved since the state's product `old`: to be read.
    Touched(u32),
    /// Not in the state: to be read.
    New,
}

/// The new catalogue, in key order, with where each product comes from.
pub struct Catalogue {
    keys: Vec<ProductKey>,
    versions: Vec<u64>,
    origin: Vec<Origin>,
    /// The state's products no longer present.
    removed: Vec<u32>,
}

impl Catalogue {
    fn with_capacity(n: usize) -> Self {
        Self {
            keys: Vec::with_capacity(n),
            versions: Vec::with_capacity(n),
            origin: Vec::with_capacity(n),
            removed: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Every product's key and version, in key order (what a full pair reads).
    pub fn into_versions(self) -> Vec<(ProductKey, u64)> {
        self.keys.into_iter().zip(self.versions).collect()
    }

    /// The state's catalogue with the `changed` products (in key order: a version, or
    /// `None` for a product gone) in place of theirs: the unchanged runs between them are
    /// taken from the state as they are, without comparing a key or a version.
    pub fn fed(state: &Pairing, changed: Vec<(&ProductKey, Option<u64>)>) -> Self {
        let mut cat = Self::with_capacity(state.keys.len() + changed.len());
        let mut from = 0;
        for (key, version) in changed {
            let (at, found) = find_from(&state.keys, from, key);
            cat.kept(state, from..at);
            match (found, version) {
                (true, Some(v)) if v == state.versions[at] => cat.kept(state, at..at + 1),
                (true, Some(v)) => cat.push(key.clone(), v, Origin::Touched(at as u32)),
                (true, None) => cat.removed.push(at as u32),
                (false, Some(v)) => cat.push(key.clone(), v, Origin::New),
                (false, None) => {}
            }
            from = at + usize::from(found);
        }
        cat.kept(state, from..state.keys.len());
        cat
    }

    /// The state's products `range`, unchanged.
    fn kept(&mut self, state: &Pairing, range: std::ops::Range<usize>) {
        self.keys.extend_from_slice(&state.keys[range.clone()]);
        self.versions
            .extend_from_slice(&state.versions[range.clone()]);
        self.origin.extend(range.map(|o| Origin::Same(o as u32)));
    }

    /// Drops the products at `positions` (ascending) from the keys and versions.
    fn drop_at(&mut self, positions: &[usize]) {
        if !positions.is_empty() {
            without(&mut self.keys, positions);
            without(&mut self.versions, positions);
        }
    }

    fn push(&mut self, key: ProductKey, version: u64, origin: Origin) {
        self.keys.push(key);
        self.versions.push(version);
        self.origin.push(origin);
    }
}

/// `items` without the ones at `positions` (ascending).
fn without<T>(items: &mut Vec<T>, positions: &[usize]) {
    let mut gone = positions.iter().copied().peekable();
    let mut at = 0;
    items.retain(|_| {
        let dropped = gone.next_if_eq(&at).is_some();
        at += 1;
        !dropped
    });
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

/// Runs an incremental pair against `state` (5 → 90 %); see the module doc.
#[allow(clippy::too_many_arguments)]
pub fn run(
    catalog: &Catalog,
    tenant: &TenantId,
    state: &Pairing,
    listed: Listed,
    ask: &Ask,
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
) -> Result<Outcome, CatalogError> {
    let mut cat = match listed {
        Listed::All(versions) => diff(state, versions),
        Listed::Fed(cat) => cat,
    };
    let moved = cat.origin.iter().any(|o| !matches!(o, Origin::Same(_)));
    if !moved && cat.removed.is_empty() {
        return Ok(Outcome::Unchanged);
    }
    let kept = kept::take(tenant, state);
    progress.report(LOADED, "reading the products that changed");
    let mut weights = Weights::from_parts(state.weights.clone())
        .ok_or_else(|| CatalogError::CorruptRecord("the pairing state's vocabulary".into()))?;
    let read = read_moved(catalog, tenant, &cat, stop)?;
    let mut built = build(state, &mut cat, read, &mut weights);
    let changes = built.changes;
    let share = catalog.settings.pair_full_after_share;
    let since = state.changed_since_full as usize + changes.total();
    if since as f64 > share * f64::from(state.weights.counted.max(1)) {
        return Ok(Outcome::TooMuchChanged(cat.into_versions()));
    }
    check(stop)?;
    progress.report(EMBEDDED, "weighting words");
    let mut engine = engine(kept, &mut built, &weights, stop, progress)?;
    check(stop)?;
    progress.report(INDEXED, "finding whose neighbours changed");
    let e = &engine.e;
    let plan = Plan::new(state, e, &built.old_of, &built.changed, ask);
    let r = rescore(e, &engine.indexes, plan, state, &built, ask, stop, progress)?;
    progress.report(SCORED, "re-scored the products that changed");
    let removed = cat
        .removed
        .iter()
        .map(|&o| state.keys[o as usize].clone())
        .collect();
    let pairing = Pairing {
        token: 0,
        top_k: state.top_k,
        min_score: state.min_score,
        changed_since_full: since as u64,
        weights: weights.parts(),
        categories: built.categories.names().to_vec(),
        materials: built.materials.names().to_vec(),
        keys: cat.keys,
        versions: cat.versions,
        traits: std::mem::take(&mut engine.e.traits),
        identities: built.identities,
        best: r.best,
        known: r.known,
    };
    Ok(Outcome::Paired(Box::new(Paired {
        pairing,
        engine,
        rows: r.rows,
        removed,
        changes,
        rescored: r.rescored,
    })))
}

/// The new catalogue's embedding and indexes: what the last pair kept for this state,
/// patched; without it (a restart, another replica's state) every product is weighed and
/// indexed again, to the same answer. Takes the products' traits.
fn engine(
    kept: Option<Kept>,
    built: &mut Built,
    weights: &Weights,
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
) -> Result<Engine, CatalogError> {
    let traits = std::mem::take(&mut built.traits);
    let categories = built.categories.len() as u32;
    let indexed = |done: usize, all: usize| indexing(progress, done, all);
    match kept {
        Some(k) => k.patched(
            &built.old_of,
            &built.identities,
            traits,
            categories,
            weights,
            stop,
            &indexed,
        ),
        None => {
            let ranks = (0..traits.len() as u32).collect();
            let e = Embedding::new(
                &built.identities,
                traits,
                (ranks, categories),
                weights,
                stop,
            )?;
            Engine::built(e, stop, &indexed)
        }
    }
}

/// The store's products (every one listed) against the state's, both in key order.
fn diff(state: &Pairing, versions: Vec<(ProductKey, u64)>) -> Catalogue {
    let mut cat = Catalogue::with_capacity(versions.len());
    let mut old = 0usize;
    for (key, version) in versions {
        while old < state.keys.len() && state.keys[old] < key {
            cat.removed.push(old as u32);
            old += 1;
        }
        let origin = if old < state.keys.len() && state.keys[old] == key {
            old += 1;
            if state.versions[old - 1] == version {
                Origin::Same(old as u32 - 1)
            } else {
                Origin::Touched(old as u32 - 1)
            }
        } else {
            Origin::New
        };
        cat.push(key, version, origin);
    }
    cat.removed.extend(old as u32..state.keys.len() as u32);
    cat
}

/// The products whose version moved (or that are new), as the store has them now, by
/// position in the catalogue; `None` for one gone since its version was read.
fn read_moved(
    catalog: &Catalog,
    tenant: &TenantId,
    cat: &Catalogue,
    stop: &CancellationToken,
) -> Result<Vec<(usize, Option<PairingInput>)>, CatalogError> {
    let window = catalog.settings.write_retry;
    let moved: Vec<usize> = (0..cat.keys.len())
        .filter(|&i| !matches!(cat.origin[i], Origin::Same(_)))
        .collect();
    let mut out = Vec::with_capacity(moved.len());
    for chunk in moved.chunks(READ_CHUNK) {
        check(stop)?;
        let keys: Vec<ProductKey> = chunk.iter().map(|&i| cat.keys[i].clone()).collect();
        let inputs = retrying(window, stop, || catalog.store.pairing_inputs(tenant, &keys))?;
        out.extend(chunk.iter().copied().zip(inputs));
    }
    Ok(out)
}

/// The new catalogue's pairing inputs in ids: kept from the state where unchanged, made
/// from what was read otherwise.
pub struct Built {
    traits: Vec<Traits>,
    identities: Rows<u32>,
    categories: Names,
    materials: Names,
    /// The state's index of each product unchanged for pairing.
    pub old_of: Vec<Option<u32>>,
    /// Changed or added.
    pub changed: Vec<bool>,
    changes: Changes,
}

/// Builds the new catalogue's arrays; a product gone since its version was read is
/// dropped from `cat` (and counted removed when the state had it).
fn build(
    state: &Pairing,
    cat: &mut Catalogue,
    read: Vec<(usize, Option<PairingInput>)>,
    weights: &mut Weights,
) -> Built {
    let mut categories = Names::from_names(state.categories.clone());
    let mut materials = Names::from_names(state.materials.clone());
    let mut fresh = made(read, weights, &mut categories, &mut materials)
        .into_iter()
        .peekable();
    let n = cat.keys.len();
    let mut out = Built {
        traits: Vec::with_capacity(n),
        identities: Rows::with_capacity(n, state.identities.items().len()),
        categories,
        materials,
        old_of: Vec::with_capacity(n),
        changed: Vec::with_capacity(n),
        changes: Changes::default(),
    };
    // Products gone since their version was read, by position: dropped at the end, so
    // that the million keys that stay are not moved one by one.
    let mut vanished = Vec::new();
    for i in 0..n {
        let old = match cat.origin[i] {
            Origin::Same(o) | Origin::Touched(o) => Some(o),
            Origin::New => None,
        };
        // Read products come in catalogue order: only they are looked at apart.
        let fresh = match fresh.next_if(|(at, _)| *at == i).map(|(_, now)| now) {
            Some(None) => {
                cat.removed.extend(old);
                vanished.push(i);
                continue;
            }
            now => now.flatten(),
        };
        let same = match (&fresh, old) {
            (None, Some(o)) => Some(o),
            (Some((identity, traits)), Some(o))
                if identity.as_slice() == state.identities.row(o as usize)
                    && *traits == state.traits[o as usize] =>
            {
                Some(o)
            }
            _ => None,
        };
        match (same, &fresh) {
            (Some(o), _) => {
                out.identities.push(state.identities.row(o as usize));
                out.traits.push(state.traits[o as usize]);
            }
            (None, Some((identity, traits))) => {
                out.identities.push(identity);
                out.traits.push(*traits);
                if old.is_some() {
                    out.changes.changed += 1;
                } else {
                    out.changes.added += 1;
                }
            }
            (None, None) => unreachable!("a product is either kept or read"),
        }
        out.old_of.push(same);
        out.changed.push(same.is_none());
    }
    cat.origin = Vec::new();
    cat.drop_at(&vanished);
    cat.removed.sort_unstable();
    out.changes.removed = cat.removed.len();
    out
}

/// A product read anew: its identity and traits.
type Made = (Vec<u32>, Traits);

/// Each read product's identity and traits (`None` for one gone when read), by position
/// in the catalogue, in the order read: only the products read, not a slot per product.
/// Their words are found on every core; the frozen vocabulary, which may learn words, is
/// consulted here in catalogue order.
fn made(
    read: Vec<(usize, Option<PairingInput>)>,
    weights: &mut Weights,
    categories: &mut Names,
    materials: &mut Names,
) -> Vec<(usize, Option<Made>)> {
    let inputs: Vec<Option<&PairingInput>> = read.iter().map(|(_, i)| i.as_ref()).collect();
    let words = words_on_every_core(&inputs);
    drop(inputs);
    read.into_iter()
        .zip(words)
        .map(|((i, input), words)| {
            let made = input.zip(words).map(|(input, words)| {
                let identity = frozen_identity_of_words(&words, weights);
                (identity, traits_of(&input, categories, materials))
            });
            (i, made)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> ProductKey {
        ProductKey::parse(k).expect("a valid key")
    }

    #[test]
    fn the_feed_s_products_replace_add_to_or_leave_the_state_s_catalogue_as_a_listing_would() {
        let state = Pairing {
            keys: ["b", "d", "f", "h", "j"].map(key).to_vec(),
            versions: vec![2, 4, 6, 8, 10],
            ..Pairing::default()
        };
        let (a, d, e, f, j, z) = (key("a"), key("d"), key("e"), key("f"), key("j"), key("z"));
        let changed = vec![
            (&a, Some(1)),
            (&d, Some(40)),
            (&e, Some(5)),
            (&f, None),
            (&j, Some(10)),
            (&z, None),
        ];
        let want: Vec<(ProductKey, u64)> =
            [("a", 1), ("b", 2), ("d", 40), ("e", 5), ("h", 8), ("j", 10)]
                .into_iter()
                .map(|(k, v)| (key(k), v))
                .collect();
        let fed = Catalogue::fed(&state, changed);
        let listed = diff(&state, want.clone());
        assert_eq!(
            (&fed.origin, &fed.removed),
            (&listed.origin, &listed.removed)
        );
        use Origin::*;
        assert_eq!(
            fed.origin,
            [New, Same(0), Touched(1), New, Same(3), Same(4)]
        );
        assert_eq!(fed.removed, [2]);
        assert_eq!(fed.into_versions(), want);
        assert_eq!(Catalogue::fed(&state, vec![]).len(), 5);
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
