//! A full pair: every product read from the store (in key order, in chunks, tokenised as
//! they arrive), weighed by weights counted on this catalogue, and every group queried.
//! What it keeps is the pairing state the next incremental pair starts from.

use tokio_util::sync::CancellationToken;

use super::embed::Embedding;
use super::index::Index;
use super::kept::Engine;
use super::reading::{Prepared, Reading};
use super::score::{self, Ask, Best};
use super::{budget, EMBEDDED, INDEXED, LOADED, SCORED};
use crate::catalog::products::{Known, Pairing, ProductKey};
use crate::catalog::rows::Rows;
use crate::catalog::{check, retrying, Catalog, CatalogError, Monotonic};
use crate::jobs::TenantId;

/// Products read from the store per call, with a cancel check between calls: small enough
/// that a cancel is seen within a fraction of a second while reading.
const READ_CHUNK: usize = 2_000;

/// Reads the products `versions` names (in key order) and prepares them: tokenised,
/// identities made, weights counted (5 → 35 %). A product gone since is left out.
pub fn read(
    catalog: &Catalog,
    tenant: &TenantId,
    versions: &[(ProductKey, u64)],
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
) -> Result<Prepared, CatalogError> {
    let window = catalog.settings.write_retry;
    let n = versions.len();
    let mut reading = Reading::new();
    for chunk in versions.chunks(READ_CHUNK) {
        check(stop)?;
        let keys: Vec<ProductKey> = chunk.iter().map(|(k, _)| k.clone()).collect();
        let inputs = retrying(window, stop, || catalog.store.pairing_inputs(tenant, &keys))?;
        let (inputs, kept): (Vec<_>, Vec<u64>) = inputs
            .into_iter()
            .zip(chunk)
            .filter_map(|(input, (_, v))| input.map(|i| (i, *v)))
            .unzip();
        reading.add(inputs, &kept);
        let done = reading.len();
        progress.interpolate(
            LOADED,
            EMBEDDED - 5,
            done,
            n,
            &format!("embedding product names ({done} of {n})"),
        );
    }
    check(stop)?;
    progress.report(EMBEDDED - 5, "folding plurals and joining compound words");
    reading.identities(stop)
}

/// Scores every product of `prepared` (35 → 90 %) and makes the state to save, and the
/// engine to keep for the next pair.
pub fn pair_all(
    mut prepared: Prepared,
    ask: &Ask,
    limit: &budget::Limit,
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
) -> Result<(Pairing, Engine), CatalogError> {
    progress.report(EMBEDDED, "weighting words");
    let n = prepared.keys.len();
    limit.check_identities(&prepared.identities, &prepared.traits, stop)?;
    let e = prepared.embed((0..n as u32).collect(), stop)?;
    let mut engine = Engine::built(e, stop, &|done, all| indexing(progress, done, all))?;
    check(stop)?;
    progress.report(INDEXED, "scoring neighbours");
    let e = &engine.e;
    let best = score_groups(e, &engine.indexes, &e.groups, ask, stop, progress)?;
    progress.report(SCORED, "scored all products");
    let mut rows: Rows<(u32, f32)> = Rows::with_capacity(n, n * ask.depth());
    for b in &best {
        rows.push(b);
    }
    let known = best.iter().map(|b| known_of(b, ask)).collect();
    let pairing = Pairing {
        token: 0,
        top_k: ask.top_k as u32,
        min_score: ask.min_score,
        changed_since_full: 0,
        weights: prepared.weights.parts(),
        categories: prepared.categories.names().to_vec(),
        materials: prepared.materials.names().to_vec(),
        keys: prepared.keys,
        versions: prepared.versions,
        traits: std::mem::take(&mut engine.e.traits),
        identities: prepared.identities,
        best: rows,
        known,
    };
    Ok((pairing, engine))
}

/// How far a list a query made is known: up to its last when it is `ask.depth()` long, all
/// of it when shorter.
pub fn known_of(best: &[(u32, f32)], ask: &Ask) -> Known {
    if best.len() >= ask.depth() {
        Known::ToLast
    } else {
        Known::All
    }
}

/// Reports the index build's progress (35 → 45 %).
pub fn indexing(progress: &Monotonic<'_>, done: usize, all: usize) {
    let step = format!("indexing words (step {done} of {all})");
    progress.interpolate(EMBEDDED, INDEXED, done, all, &step);
}

/// Every product of `queries` scored (45 → 90 %; a row is one query, products of one group,
/// `score::score`): each product's best, by product index (other products get an empty list).
pub fn score_groups(
    e: &Embedding,
    indexes: &[Index],
    queries: &Rows<u32>,
    ask: &Ask,
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
) -> Result<Vec<Best>, CatalogError> {
    let scored = scored(e, indexes, queries, ask, stop, progress)?;
    let mut best: Vec<Best> = vec![Vec::new(); e.len()];
    for (i, b) in scored {
        best[i as usize] = b;
    }
    Ok(best)
}

/// The products of `queries` scored, as `score_groups` does, as (product, best) in product
/// order: only theirs, not a list per product of the catalogue.
pub fn scored(
    e: &Embedding,
    indexes: &[Index],
    queries: &Rows<u32>,
    ask: &Ask,
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
) -> Result<Vec<(u32, Best)>, CatalogError> {
    let total = queries.len();
    let report = |done: usize, all: usize| {
        progress.interpolate(
            INDEXED,
            SCORED,
            done,
            all,
            &format!("scoring neighbours (about {done} of {total} distinct identities)"),
        );
    };
    let mut scored = score::score(e, indexes, queries, ask, stop, &report)?;
    scored.sort_unstable_by_key(|&(i, _)| i);
    Ok(scored)
}
