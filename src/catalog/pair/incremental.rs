//! An incremental pair: from the state of the last pair, re-score only what changed.
//!
//! **What changed.** The store's versions (`CatalogStore::versions_page`, every page) are compared with the
//! ones the state was paired at; only products whose version moved, and new ones, are read.
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
//! **Who is re-scored.** Exactly those whose top k can differ: changed and added products
//! (queried anew); unchanged products whose top k held a changed or removed one (queried
//! anew, with the rest of their group); and unchanged products whose top k a changed or
//! added product can now enter — found by that product's own reverse search (`reverse`) and
//! merged into the kept list. Every other list stands as it was.

use tokio_util::sync::CancellationToken;

use super::embed::{frozen_identity_of, traits_of, Embedding, Names};
use super::full::{indexing, known_of, score_groups};
use super::index::Index;
use super::reverse::{reverse, Bars, Entry};
use super::score::{Ask, Best};
use super::{Weights, EMBEDDED, INDEXED, LOADED, SCORED};
use crate::catalog::products::{Known, Pairing, PairingInput, ProductKey, Traits};
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
    /// queried anew (with their group's other members).
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
    /// More than the allowed share changed since the last full pair: pair it all.
    TooMuchChanged,
    Paired(Box<Paired>),
}

/// A new state and which of its rows are new.
pub struct Paired {
    pub pairing: Pairing,
    /// Indices of the rows that changed.
    pub rows: Vec<u32>,
    pub removed: Vec<ProductKey>,
    pub changes: Changes,
    pub rescored: Rescored,
}

/// Where a product of the new catalogue comes from.
#[derive(Clone, Copy)]
enum Origin {
    /// Unchanged for pairing since the state's product `old` (its version may have moved).
    Same(u32),
    /// Version moved since the state's product `old`: to be read.
    Touched(u32),
    /// Not in the state: to be read.
    New,
}

/// The new catalogue, in key order, with where each product comes from.
struct Catalogue {
    keys: Vec<ProductKey>,
    versions: Vec<u64>,
    origin: Vec<Origin>,
    /// The state's products no longer present.
    removed: Vec<u32>,
}

/// Runs an incremental pair against `state` (5 → 90 %); see the module doc.
#[allow(clippy::too_many_arguments)]
pub fn run(
    catalog: &Catalog,
    tenant: &TenantId,
    state: &Pairing,
    versions: Vec<(ProductKey, u64)>,
    ask: &Ask,
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
) -> Result<Outcome, CatalogError> {
    let mut cat = diff(state, versions);
    let moved = cat.origin.iter().any(|o| !matches!(o, Origin::Same(_)));
    if !moved && cat.removed.is_empty() {
        return Ok(Outcome::Unchanged);
    }
    progress.report(LOADED, "reading the products that changed");
    let mut weights = Weights::from_parts(state.weights.clone())
        .ok_or_else(|| CatalogError::CorruptRecord("the pairing state's vocabulary".into()))?;
    let read = read_moved(catalog, tenant, &cat, stop)?;
    let mut built = build(state, &mut cat, read, &mut weights);
    let changes = built.changes;
    let share = catalog.settings.pair_full_after_share;
    let since = state.changed_since_full as usize + changes.total();
    if since as f64 > share * f64::from(state.weights.counted.max(1)) {
        return Ok(Outcome::TooMuchChanged);
    }
    check(stop)?;
    progress.report(EMBEDDED, "weighting words");
    let e = Embedding::new(
        &built.identities,
        std::mem::take(&mut built.traits),
        (0..cat.keys.len() as u32).collect(),
        built.categories.len() as u32,
        &weights,
    );
    let index = Index::build(&e, stop, &|done, all| indexing(progress, done, all))?;
    check(stop)?;
    progress.report(INDEXED, "finding whose neighbours changed");
    let plan = Plan::new(state, &e, &built.old_of, &built.changed, ask);
    let (best, known, rescored) = rescore(&e, &index, &plan, state, &built, ask, stop, progress)?;
    progress.report(SCORED, "re-scored the products that changed");
    let rows = changed_rows(state, &built, &plan, &best, ask.top_k);
    let mut table: Rows<(u32, f32)> = Rows::with_capacity(best.len(), best.len() * ask.depth());
    for b in &best {
        table.push(b);
    }
    let removed = cat
        .removed
        .iter()
        .map(|&o| state.keys[o as usize].clone())
        .collect();
    let pairing = Pairing {
        top_k: state.top_k,
        min_score: state.min_score,
        changed_since_full: since as u64,
        weights: weights.parts(),
        categories: built.categories.names().to_vec(),
        materials: built.materials.names().to_vec(),
        keys: cat.keys,
        versions: cat.versions,
        traits: e.traits,
        identities: built.identities,
        best: table,
        known,
    };
    Ok(Outcome::Paired(Box::new(Paired {
        pairing,
        rows,
        removed,
        changes,
        rescored,
    })))
}

/// The store's products against the state's, both in key order.
fn diff(state: &Pairing, versions: Vec<(ProductKey, u64)>) -> Catalogue {
    let mut cat = Catalogue {
        keys: Vec::with_capacity(versions.len()),
        versions: Vec::with_capacity(versions.len()),
        origin: Vec::with_capacity(versions.len()),
        removed: Vec::new(),
    };
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
        cat.keys.push(key);
        cat.versions.push(version);
        cat.origin.push(origin);
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
struct Built {
    traits: Vec<Traits>,
    identities: Rows<u32>,
    categories: Names,
    materials: Names,
    /// The state's index of each product unchanged for pairing.
    old_of: Vec<Option<u32>>,
    /// Changed or added.
    changed: Vec<bool>,
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
    let (fresh, gone) = made(
        cat.keys.len(),
        read,
        weights,
        &mut categories,
        &mut materials,
    );
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
    let mut kept = Catalogue {
        keys: Vec::with_capacity(n),
        versions: Vec::with_capacity(n),
        origin: Vec::new(),
        removed: std::mem::take(&mut cat.removed),
    };
    for (i, key) in std::mem::take(&mut cat.keys).into_iter().enumerate() {
        let old = match cat.origin[i] {
            Origin::Same(o) | Origin::Touched(o) => Some(o),
            Origin::New => None,
        };
        if gone[i] {
            kept.removed.extend(old);
            continue;
        }
        let same = match (&fresh[i], old) {
            (None, Some(o)) => Some(o),
            (Some((identity, traits)), Some(o))
                if identity.as_slice() == state.identities.row(o as usize)
                    && *traits == state.traits[o as usize] =>
            {
                Some(o)
            }
            _ => None,
        };
        match (same, &fresh[i]) {
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
        kept.keys.push(key);
        kept.versions.push(cat.versions[i]);
    }
    kept.removed.sort_unstable();
    out.changes.removed = kept.removed.len();
    *cat = kept;
    out
}

/// A product read anew: its identity and traits.
type Made = (Vec<u32>, Traits);

/// Each read product's identity and traits, by position in the catalogue, and which were
/// gone when read.
fn made(
    n: usize,
    read: Vec<(usize, Option<PairingInput>)>,
    weights: &mut Weights,
    categories: &mut Names,
    materials: &mut Names,
) -> (Vec<Option<Made>>, Vec<bool>) {
    let mut fresh: Vec<Option<Made>> = vec![None; n];
    let mut gone = vec![false; n];
    for (i, input) in read {
        match input {
            Some(input) => {
                let identity = frozen_identity_of(&input, weights);
                let traits = traits_of(&input, categories, materials);
                fresh[i] = Some((identity, traits));
            }
            None => gone[i] = true,
        }
    }
    (fresh, gone)
}

/// Who is re-scored, and how.
struct Plan {
    /// Groups queried anew: those holding a changed product or one whose kept list no
    /// longer proves its top k.
    requery: Vec<u32>,
    requeried: Vec<bool>,
    /// Groups holding a changed product: each searches whose list it can enter.
    changed_groups: Vec<u32>,
    /// Each product's bar for the reverse search (`f32::INFINITY` when requeried): what a
    /// changed product must score to enter its list.
    bars: Vec<f32>,
    /// The new index of each of the state's products kept unchanged (`u32::MAX` otherwise).
    old_to_new: Vec<u32>,
}

impl Plan {
    fn new(
        state: &Pairing,
        e: &Embedding,
        old_of: &[Option<u32>],
        changed: &[bool],
        ask: &Ask,
    ) -> Self {
        let mut old_to_new = vec![u32::MAX; state.keys.len()];
        for (u, o) in old_of.iter().enumerate() {
            if let Some(o) = o {
                old_to_new[*o as usize] = u as u32;
            }
        }
        let mut plan = Self {
            requery: Vec::new(),
            requeried: Vec::new(),
            changed_groups: Vec::new(),
            bars: Vec::new(),
            old_to_new,
        };
        let mut requery_group = vec![false; e.group_count()];
        let mut changed_group = vec![false; e.group_count()];
        for (u, o) in old_of.iter().enumerate() {
            let unproven = o.is_some_and(|o| {
                let (kept, known) = plan.kept(state, o);
                !known.proves(&kept, ask.top_k)
            });
            let g = e.group_of[u] as usize;
            requery_group[g] |= changed[u] || unproven;
            changed_group[g] |= changed[u];
        }
        plan.requeried = e
            .group_of
            .iter()
            .map(|&g| requery_group[g as usize])
            .collect();
        plan.bars = (0..e.len())
            .map(|u| match old_of[u] {
                Some(o) if !plan.requeried[u] => match plan.kept(state, o) {
                    (_, Known::All) => ask.min_score,
                    (list, Known::ToLast) => list.last().map_or(ask.min_score, |l| l.1),
                    (_, Known::Above(floor)) => floor,
                },
                _ => f32::INFINITY,
            })
            .collect();
        let which = |marks: &[bool]| {
            (0..marks.len() as u32)
                .filter(|&g| marks[g as usize])
                .collect::<Vec<u32>>()
        };
        plan.requery = which(&requery_group);
        plan.changed_groups = which(&changed_group);
        plan
    }

    /// The state's list of product `o` in the new indices, without the products changed or
    /// removed since, and how far it is known now: a list known up to its last is known
    /// only above its last's score once that one has left.
    fn kept(&self, state: &Pairing, o: u32) -> (Best, Known) {
        let row = state.best.row(o as usize);
        let list = row
            .iter()
            .map(|&(j, s)| (self.old_to_new[j as usize], s))
            .filter(|&(j, _)| j != u32::MAX)
            .collect();
        let known = match (state.known[o as usize], row.last()) {
            (Known::ToLast, Some(&(last, s))) if self.old_to_new[last as usize] == u32::MAX => {
                Known::Above(s)
            }
            (known, _) => known,
        };
        (list, known)
    }

    /// The state's top k of product `o` in the new indices (`u32::MAX` for a product changed
    /// or removed since).
    fn old_top(&self, state: &Pairing, o: u32) -> Best {
        state
            .top(o as usize)
            .iter()
            .map(|&(j, s)| (self.old_to_new[j as usize], s))
            .collect()
    }
}

/// Every product's new list and how far it is known: queried anew, merged with what entered
/// it, or kept.
#[allow(clippy::too_many_arguments)]
fn rescore(
    e: &Embedding,
    index: &Index,
    plan: &Plan,
    state: &Pairing,
    built: &Built,
    ask: &Ask,
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
) -> Result<(Vec<Best>, Vec<Known>, Rescored), CatalogError> {
    let bars = Bars::new(e, index, plan.bars.clone());
    let mut entries: Vec<Entry> = reverse(
        e,
        index,
        &bars,
        &plan.changed_groups,
        &built.changed,
        stop,
        &|_, _| {},
    )?;
    entries.sort_unstable_by_key(|&(u, j, _)| (u, j));
    let mut best = score_groups(e, index, &plan.requery, ask, stop, progress)?;
    let mut known = vec![Known::All; e.len()];
    let mut rescored = Rescored::default();
    let mut unproven = Vec::new();
    let mut entered = entries.chunk_by(|a, b| a.0 == b.0).peekable();
    for (u, best) in best.iter_mut().enumerate() {
        if plan.requeried[u] {
            if built.changed[u] {
                rescored.changed += 1;
            } else {
                rescored.lost_a_neighbour += 1;
            }
            known[u] = known_of(best, ask);
            continue;
        }
        let o = built.old_of[u].expect("a product not requeried is unchanged");
        let (mut list, mut k) = plan.kept(state, o);
        let lost = list.len() < state.best.row(o as usize).len();
        let before = list.clone();
        if let Some(new) = entered.next_if(|c| c[0].0 as usize == u) {
            let new = new.iter().map(|&(_, j, s)| (j, s));
            (list, k) = merged(e, u, list, k, new, ask.depth());
        }
        if !k.proves(&list, ask.top_k) {
            unproven.push(u as u32);
        } else if lost {
            rescored.refilled += 1;
        } else {
            rescored.gained_a_neighbour += usize::from(list != before);
        }
        (*best, known[u]) = (list, k);
    }
    requery_unproven(
        e, index, &unproven, ask, stop, progress, &mut best, &mut known,
    )?;
    rescored.lost_a_neighbour += unproven.len();
    Ok((best, known, rescored))
}

/// `u`'s kept `list`, known as far as `known`, with the changed products that may have
/// entered it (each scoring at least its bar): those it provably holds now are taken in
/// rank order, and the list is cut to `depth`. Answers the list and how far it is known.
fn merged(
    e: &Embedding,
    u: usize,
    mut list: Best,
    known: Known,
    entered: impl Iterator<Item = (u32, f32)>,
    depth: usize,
) -> (Best, Known) {
    let last = list.last().copied();
    list.extend(entered.filter(|&(j, s)| match (known, last) {
        (Known::All, _) | (Known::ToLast, None) => true,
        (Known::ToLast, Some(last)) => ranking(e, u, &(j, s), &last).is_lt(),
        (Known::Above(floor), _) => s > floor,
    }));
    list.sort_by(|a, b| ranking(e, u, a, b));
    if list.len() <= depth {
        return (list, known);
    }
    list.truncate(depth);
    let Some(&(_, cut)) = list.last() else {
        return (list, Known::ToLast);
    };
    match known {
        Known::Above(floor) if cut <= floor => (list, known),
        _ => (list, Known::ToLast),
    }
}

/// Queries anew the products whose list stopped proving its top k when what entered it
/// pushed out products tied with its last (rare): their groups are scored again.
#[allow(clippy::too_many_arguments)]
fn requery_unproven(
    e: &Embedding,
    index: &Index,
    unproven: &[u32],
    ask: &Ask,
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
    best: &mut [Best],
    known: &mut [Known],
) -> Result<(), CatalogError> {
    if unproven.is_empty() {
        return Ok(());
    }
    let mut groups: Vec<u32> = unproven.iter().map(|&u| e.group_of[u as usize]).collect();
    groups.sort_unstable();
    groups.dedup();
    let mut fresh = score_groups(e, index, &groups, ask, stop, progress)?;
    for &u in unproven {
        let u = u as usize;
        best[u] = std::mem::take(&mut fresh[u]);
        known[u] = known_of(&best[u], ask);
    }
    Ok(())
}

/// The order of two neighbours of `u`: best first (`Embedding::ranks_before`).
fn ranking(e: &Embedding, u: usize, a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    let (a, b) = ((a.1, a.0 as usize), (b.1, b.0 as usize));
    if e.ranks_before(u, a, b) {
        std::cmp::Ordering::Less
    } else if e.ranks_before(u, b, a) {
        std::cmp::Ordering::Greater
    } else {
        std::cmp::Ordering::Equal
    }
}

/// The table rows that differ from the state's: every changed or added product's, and every
/// kept product's whose top k moved.
fn changed_rows(
    state: &Pairing,
    built: &Built,
    plan: &Plan,
    best: &[Best],
    top_k: usize,
) -> Vec<u32> {
    (0..best.len())
        .filter(|&u| match built.old_of[u] {
            None => true,
            Some(o) => plan.old_top(state, o) != best[u][..best[u].len().min(top_k)],
        })
        .map(|u| u as u32)
        .collect()
}
