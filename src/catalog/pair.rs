//! pair: each product's nearest neighbours by TF-IDF cosine over its *identity* — the set of
//! words that says what it is (`catalog::tokens`: the name without the variant attributes
//! enrichment found, plus the brand; case, hyphens, joined words and plurals folded) — so that
//! the variants of one product are each other's nearest neighbours.
//!
//! **The score.** Each identity word weighs its inverse document frequency
//! `ln((n + 1) / (df + 1)) + 1`, a word counted once per product; vectors are L2-normalised
//! and the score is their dot product (cosine). Two products are comparable only within the
//! same top-level category (a product without one is comparable to all) and when the larger
//! price is at most `PRICE_BAND` times the smaller. Ties go to the neighbour of the same
//! material, then to the smaller product key. Kept: the `top_k` best with score ≥ `min_score`.
//!
//! **The method: exact top-k, no candidate is cut.** Three steps:
//! 1. *embed* — identity vectors in one flat, cache-friendly array (`Embedding`);
//! 2. *index* — one posting list per (category, word), sorted by weight, heaviest first;
//! 3. *score* — per query, MaxScore-style pruning: its lists are visited in decreasing
//!    order of their upper bound (the query weight times the list's heaviest weight); a list
//!    is stopped at the first posting whose bound, plus the bounds of the lists not yet
//!    visited, cannot reach the current k-th score, and the whole query stops once the lists
//!    left cannot. A product first met in list `i` scores at most its weight there plus the
//!    bounds of lists `i+1..`, so nothing that could enter the top k is skipped; each
//!    candidate met is scored exactly on the two sparse vectors. Products with the same
//!    category and identity (a family whose names differ only by variant, case, order or
//!    spelling) form one group: the index holds groups, each group is queried once and its
//!    members' top-k lists are filled side by side (each with its own price band and
//!    tie-break), which is exact because they score the same against everything. The group's
//!    own members, at 1.0, raise the bar before any list is read.
//!
//! Why not a document-frequency cut (what this replaced): products made only of common words
//! (a brand, a line name, "t-shirt") had no candidates at all. Why not blocked brute force
//! per category: quadratic in the category's size (a 1M catalogue has categories of 150k+).
//! The test `pair_neighbours_equal_an_exhaustive_top_k` checks the result against brute force.
//!
//! Scoring runs on every core, claiming groups in runs of `QUERIES_PER_CLAIM` and checking
//! the cancel token between runs, so a cancel is seen within milliseconds even at 1M
//! products. The neighbour table (keys and scores; names are joined when a product is
//! read) is replaced as a whole at the end, so pair is safe to run again (a recovered job's
//! next attempt does) and a stop on request leaves the old table whole. The swap is fenced:
//! it happens only while the run still holds its job (`jobs::fence`), so a run fenced off
//! while it scored never replaces the table its successor wrote.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::LazyLock;

use serde_json::Value;

use super::extract::{identity_tokens, name_words};
use super::products::{Enrichment, Neighbour, ProductKey, Stored, Swap};
use super::report::{to_result, PairPhase, PairReport, PairStopped};
use super::tokens::{identity, Vocabulary};
use super::{check, retrying, Catalog, CatalogError, Monotonic};
use crate::jobs::fence::{Fence, Unfenced};
use crate::jobs::registry::Progress;
use crate::jobs::TenantId;
use tokio_util::sync::CancellationToken;

/// From how many products scoring is spread over threads: below it, thread start-up costs
/// more than the work.
const PARALLEL_FROM: usize = 4096;

/// How many groups (queries) a scoring worker claims at a time. Small enough that a cancel
/// is noticed within milliseconds (one query costs microseconds, up to about a millisecond
/// at 1M products) and that workers finish together; large enough that the shared counter
/// is not contended.
const QUERIES_PER_CLAIM: usize = 64;

/// Slack on score bounds for f32 rounding: a bound this close to the bar is not pruned, so
/// rounding can never drop a true neighbour.
const BOUND_SLACK: f32 = 1e-5;

/// The cores to score on. Asked once: `available_parallelism` reads cgroup files each call.
static CORES: LazyLock<usize> = LazyLock::new(|| {
    std::thread::available_parallelism()
        .map(|p| p.get())
        .unwrap_or(1)
        .clamp(1, 8)
});

/// Two prices are comparable when the larger is at most this many times the smaller.
const PRICE_BAND: f64 = 3.0;

/// The partition of products without a category: comparable to every category.
const NO_CATEGORY: u32 = u32::MAX;

/// Progress at the end of each phase (loading → 5, embedding → 45, scoring → 90, writing →
/// 100), as the README documents.
const LOADED: u8 = 5;
const EMBEDDED: u8 = 35;
const INDEXED: u8 = 45;
const SCORED: u8 = 90;

/// The phase a run had reached at `percent`, as a stopped or failed pair reports it.
fn phase_at(percent: u8) -> PairPhase {
    match percent {
        p if p < LOADED => PairPhase::Loading,
        p if p < EMBEDDED => PairPhase::Embedding,
        p if p < INDEXED => PairPhase::Indexing,
        p if p < SCORED => PairPhase::Scoring,
        _ => PairPhase::Writing,
    }
}

/// A pair's parameters (none yet): each one is a field here, read from the request's fields.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PairParams {}

/// Pairs the tenant's products. A run that stops on request or fails reports the phase it
/// had reached (`{"phase": "scoring"}`); the old neighbour table is left whole either way.
/// Outside any job (tests, benchmarks): the table is swapped unfenced.
pub fn run(
    catalog: &Catalog,
    tenant: &TenantId,
    stop: &CancellationToken,
    progress: Progress<'_>,
) -> Result<Value, CatalogError> {
    run_in(catalog, tenant, &Unfenced, stop, progress)
}

/// Pairs the tenant's products as a job's run: the table is swapped only while the run
/// still holds its job (`fence`), in the same atomic step; a run fenced off before its swap
/// leaves the old table whole and ends `CatalogError::Fenced` (its end is not recorded).
pub fn run_in(
    catalog: &Catalog,
    tenant: &TenantId,
    fence: &dyn Fence,
    stop: &CancellationToken,
    progress: Progress<'_>,
) -> Result<Value, CatalogError> {
    let progress = Monotonic::new(progress);
    run_phases(catalog, tenant, fence, stop, &progress).map_err(|e| {
        e.with_report(to_result(&PairStopped {
            phase: phase_at(progress.last()),
        }))
    })
}

fn run_phases(
    catalog: &Catalog,
    tenant: &TenantId,
    fence: &dyn Fence,
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
) -> Result<Value, CatalogError> {
    let window = catalog.settings.write_retry;
    progress.report(0, "loading products");
    let products = retrying(window, stop, || catalog.store.all(tenant))?;
    progress.report(3, "loading extracted attributes");
    // An empty catalogue pairs to an empty table whatever was extracted: one round trip fewer.
    let enriched = if products.is_empty() {
        HashMap::new()
    } else {
        retrying(window, stop, || catalog.store.enrichments(tenant))?
    };
    progress.report(LOADED, "loaded products");

    let scored = check(stop).and_then(|()| {
        neighbours(
            &products,
            &enriched,
            catalog.settings.pair_top_k,
            catalog.settings.pair_min_score,
            stop,
            progress,
        )
    });
    // Freeing a million loaded products takes most of a second; a cancelled job should not
    // wait for it, nor should the table's write below.
    let count = products.len();
    drop_aside((products, enriched));
    let table = scored?;
    // The old table stays whole until the swap below; a cancelled run leaves it untouched.
    check(stop)?;

    let paired = table.iter().filter(|(_, n)| !n.is_empty()).count();
    let pairs: usize = table.iter().map(|(_, n)| n.len()).sum();
    progress.report(
        SCORED,
        &format!("writing the neighbour table ({paired} products)"),
    );
    let rows: Vec<(ProductKey, Vec<Neighbour>)> =
        table.into_iter().filter(|(_, n)| !n.is_empty()).collect();
    // A run fenced off after the check above (recovered, taken over) must not swap: the
    // store checks the job record in the same step as the swap.
    let swap = retrying(window, stop, || {
        catalog.store.replace_neighbours(tenant, &rows, fence)
    })?;
    if swap == Swap::Fenced {
        return Err(CatalogError::Fenced);
    }
    progress.report(100, &format!("paired {paired} of {count} products"));
    Ok(to_result(&PairReport {
        products: count,
        paired,
        pairs,
    }))
}

/// From how many products the loaded data is freed on a thread of its own: below it,
/// freeing is quicker than starting a thread.
const DROP_ASIDE_FROM: usize = 10_000;

/// Frees large loaded data on a short-lived thread of its own, so that the job ends (or
/// writes its table) without waiting for millions of small deallocations.
fn drop_aside((products, enriched): (Vec<Stored>, HashMap<ProductKey, Enrichment>)) {
    if products.len() < DROP_ASIDE_FROM {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("pair-free".into())
        .spawn(move || drop((products, enriched)));
    // Without a thread (the process is at its limit) the data is freed here, as before.
    drop(spawned);
}

/// The neighbour table for a set of products: embed (5 → 35 %), index (→ 45 %) and score
/// (→ 90 %). Public for the benchmark and the quality tests.
pub fn neighbours(
    products: &[Stored],
    enriched: &HashMap<ProductKey, Enrichment>,
    top_k: usize,
    min_score: f64,
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
) -> Result<Vec<(ProductKey, Vec<Neighbour>)>, CatalogError> {
    let embedding = embed(products, enriched, stop, progress)?;
    let index = Index::build(&embedding);
    progress.report(INDEXED, "scoring neighbours");
    let scored = score(&embedding, &index, top_k, min_score as f32, stop, progress)?;
    progress.report(SCORED, "scored all products");
    Ok(products
        .iter()
        .zip(scored)
        .map(|(p, best)| {
            let row = best
                .into_iter()
                .map(|(j, s)| Neighbour {
                    product_key: products[j as usize].product.product_key.clone(),
                    score: (f64::from(s) * 10_000.0).round() / 10_000.0,
                })
                .collect();
            (p.product.product_key.clone(), row)
        })
        .collect())
}

// ---------------------------------------------------------------------------------------
// Embed

/// Every product's identity vector and what decides comparability, in flat arrays: the
/// vector of product `i` is `vectors[offsets[i]..offsets[i + 1]]`, (word, weight) sorted by
/// word.
pub struct Embedding {
    offsets: Vec<u32>,
    vectors: Vec<(u32, f32)>,
    category: Vec<u32>,
    categories: u32,
    price: Vec<Option<i64>>,
    material: Vec<Option<u32>>,
    /// The rank of each product's key among all keys: the last tie-break.
    key_rank: Vec<u32>,
    terms_in_vocabulary: usize,
    /// Products with the same category and identity form one group: they score the same
    /// against everything, so the index holds groups and each group is queried once. The
    /// members of group `g` are `members[group_offsets[g]..group_offsets[g + 1]]`.
    group_offsets: Vec<u32>,
    members: Vec<u32>,
}

/// Embeds products (5 → 35 %): identities (`catalog::tokens`), TF-IDF weights, norms.
pub fn embed(
    products: &[Stored],
    enriched: &HashMap<ProductKey, Enrichment>,
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
) -> Result<Embedding, CatalogError> {
    let n = products.len();
    let every = (n / 40).max(500);
    let mut vocabulary = Vocabulary::default();
    let mut words: Vec<(Vec<u32>, Vec<u32>)> = Vec::with_capacity(n);
    for (i, stored) in products.iter().enumerate() {
        if i % every == 0 {
            check(stop)?;
            progress.interpolate(
                LOADED,
                EMBEDDED - 5,
                i,
                n,
                &format!("embedding product names ({i} of {n})"),
            );
        }
        let p = &stored.product;
        // Variants are taken out only where enrichment ran; others pair on their whole name.
        let name = if enriched.contains_key(&p.product_key) {
            identity_tokens(&p.name)
        } else {
            name_words(&p.name)
        };
        let brand = p.brand.as_deref().map(name_words).unwrap_or_default();
        words.push((vocabulary.words(&name), vocabulary.words(&brand)));
    }
    check(stop)?;
    progress.report(EMBEDDED - 5, "folding plurals and joining compound words");
    vocabulary.fold_plurals();
    let sets: Vec<Vec<u32>> = words
        .iter()
        .map(|(name, brand)| identity(name, brand, &vocabulary))
        .collect();
    drop(words);

    progress.report(EMBEDDED, "weighting words");
    let mut df = vec![0u32; vocabulary.len()];
    for set in &sets {
        for &t in set {
            df[t as usize] += 1;
        }
    }
    let idf: Vec<f32> = df
        .iter()
        .map(|d| ((n as f32 + 1.0) / (*d as f32 + 1.0)).ln() + 1.0)
        .collect();
    let mut offsets = Vec::with_capacity(n + 1);
    offsets.push(0u32);
    let total: usize = sets.iter().map(Vec::len).sum();
    let mut vectors = Vec::with_capacity(total);
    for set in &sets {
        let norm = set
            .iter()
            .map(|&t| idf[t as usize] * idf[t as usize])
            .sum::<f32>()
            .sqrt();
        vectors.extend(set.iter().map(|&t| (t, idf[t as usize] / norm)));
        offsets.push(vectors.len() as u32);
    }

    let mut categories: HashMap<String, u32> = HashMap::new();
    let mut materials: HashMap<String, u32> = HashMap::new();
    let mut category = Vec::with_capacity(n);
    let mut material = Vec::with_capacity(n);
    for stored in products {
        let p = &stored.product;
        category.push(match p.top_category() {
            Some(c) => {
                let next = categories.len() as u32;
                *categories.entry(c.to_lowercase()).or_insert(next)
            }
            None => NO_CATEGORY,
        });
        material.push(
            enriched
                .get(&p.product_key)
                .and_then(|e| e.attributes.get("material"))
                .and_then(Value::as_str)
                .map(|m| {
                    let next = materials.len() as u32;
                    *materials.entry(m.to_owned()).or_insert(next)
                }),
        );
    }
    let mut by_key: Vec<u32> = (0..n as u32).collect();
    by_key.sort_unstable_by(|a, b| {
        products[*a as usize]
            .product
            .product_key
            .cmp(&products[*b as usize].product.product_key)
    });
    let mut key_rank = vec![0u32; n];
    for (rank, i) in by_key.into_iter().enumerate() {
        key_rank[i as usize] = rank as u32;
    }
    let (group_offsets, members) = group_identical(&sets, &category);
    Ok(Embedding {
        group_offsets,
        members,
        offsets,
        vectors,
        category,
        categories: categories.len() as u32,
        price: products.iter().map(|s| s.product.price_cents).collect(),
        material,
        key_rank,
        terms_in_vocabulary: vocabulary.len(),
    })
}

/// Groups products of the same category and identity: (group offsets, members by group).
fn group_identical(sets: &[Vec<u32>], category: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let mut ids: HashMap<(u32, &[u32]), u32> = HashMap::with_capacity(sets.len());
    let mut group_of = Vec::with_capacity(sets.len());
    for (set, &c) in sets.iter().zip(category) {
        let next = ids.len() as u32;
        group_of.push(*ids.entry((c, set.as_slice())).or_insert(next));
    }
    let groups = ids.len();
    let mut group_offsets = vec![0u32; groups + 1];
    for &g in &group_of {
        group_offsets[g as usize + 1] += 1;
    }
    for g in 0..groups {
        group_offsets[g + 1] += group_offsets[g];
    }
    let mut fill = group_offsets.clone();
    let mut members = vec![0u32; sets.len()];
    for (i, &g) in group_of.iter().enumerate() {
        members[fill[g as usize] as usize] = i as u32;
        fill[g as usize] += 1;
    }
    (group_offsets, members)
}

impl Embedding {
    /// How many distinct (category, identity) groups the products form.
    pub fn groups(&self) -> usize {
        self.group_offsets.len() - 1
    }

    fn group(&self, g: usize) -> &[u32] {
        &self.members[self.group_offsets[g] as usize..self.group_offsets[g + 1] as usize]
    }

    pub fn len(&self) -> usize {
        self.category.len()
    }

    pub fn is_empty(&self) -> bool {
        self.category.is_empty()
    }

    /// The words in the vocabulary (after folding).
    pub fn vocabulary_size(&self) -> usize {
        self.terms_in_vocabulary
    }

    /// Product `i`'s identity: (word id, weight), sorted by word id, L2-normalised.
    pub fn vector(&self, i: usize) -> &[(u32, f32)] {
        &self.vectors[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    fn terms(&self, i: usize) -> impl Iterator<Item = (u32, f32)> + '_ {
        self.vector(i).iter().copied()
    }

    /// The documented score of two products: the cosine of their identity vectors.
    pub fn score(&self, i: usize, j: usize) -> f32 {
        dot(self.vector(i), self.vector(j))
    }

    /// Whether two products may be neighbours: same top-level category (or one has none) and
    /// comparable prices (or one has none).
    pub fn comparable(&self, i: usize, j: usize) -> bool {
        let (ci, cj) = (self.category[i], self.category[j]);
        if ci != NO_CATEGORY && cj != NO_CATEGORY && ci != cj {
            return false;
        }
        match (self.price[i], self.price[j]) {
            (Some(x), Some(y)) if x > 0 && y > 0 => {
                let (lo, hi) = (x.min(y) as f64, x.max(y) as f64);
                hi / lo <= PRICE_BAND
            }
            _ => true,
        }
    }

    /// Whether two products agree on a known material: the first tie-break.
    pub fn same_material(&self, i: usize, j: usize) -> bool {
        self.material[i].is_some() && self.material[i] == self.material[j]
    }

    /// Whether `(score_a, a)` ranks before `(score_b, b)` as a neighbour of `i`: higher
    /// score, then same material, then smaller key.
    pub fn ranks_before(&self, i: usize, (sa, a): (f32, usize), (sb, b): (f32, usize)) -> bool {
        match sa.partial_cmp(&sb).unwrap_or(Ordering::Equal) {
            Ordering::Greater => true,
            Ordering::Less => false,
            Ordering::Equal => match (self.same_material(i, a), self.same_material(i, b)) {
                (true, false) => true,
                (false, true) => false,
                _ => self.key_rank[a] < self.key_rank[b],
            },
        }
    }
}

// ---------------------------------------------------------------------------------------
// Index

/// A group in a posting list, with where its vector is: scoring a candidate then reads one
/// place in memory (`Embedding::vectors`), not four.
#[derive(Clone, Copy)]
struct Posting {
    weight: f32,
    group: u32,
    /// The group's vector is `Embedding::vectors[start..end]` (its first member's).
    start: u32,
    end: u32,
}

/// One posting list per (category, word), heaviest weight first, all in one array. A
/// posting is a group of identical products (`Embedding::group`), standing for all of them.
struct Index {
    /// (category, word) → the list's range in `postings`.
    lists: HashMap<(u32, u32), (u32, u32)>,
    postings: Vec<Posting>,
    /// The categories products are in, `NO_CATEGORY` included when some have none.
    partitions: Vec<u32>,
}

impl Index {
    fn build(e: &Embedding) -> Self {
        let mut entries: Vec<(u32, u32, Posting)> = Vec::with_capacity(e.vectors.len());
        for g in 0..e.groups() {
            let first = e.group(g)[0] as usize;
            let (start, end) = (e.offsets[first], e.offsets[first + 1]);
            for (t, weight) in e.terms(first) {
                let posting = Posting {
                    weight,
                    group: g as u32,
                    start,
                    end,
                };
                entries.push((e.category[first], t, posting));
            }
        }
        entries.sort_unstable_by(|a, b| {
            (a.0, a.1)
                .cmp(&(b.0, b.1))
                .then(
                    b.2.weight
                        .partial_cmp(&a.2.weight)
                        .unwrap_or(Ordering::Equal),
                )
                .then(a.2.group.cmp(&b.2.group))
        });
        let mut lists = HashMap::new();
        let mut start = 0;
        for k in 1..=entries.len() {
            if k == entries.len()
                || (entries[k].0, entries[k].1) != (entries[start].0, entries[start].1)
            {
                lists.insert(
                    (entries[start].0, entries[start].1),
                    (start as u32, k as u32),
                );
                start = k;
            }
        }
        let mut partitions: Vec<u32> = (0..e.categories).collect();
        if e.category.contains(&NO_CATEGORY) {
            partitions.push(NO_CATEGORY);
        }
        Self {
            lists,
            postings: entries.into_iter().map(|(_, _, p)| p).collect(),
            partitions,
        }
    }
}

/// The dot product of two sparse vectors sorted by word.
fn dot(a: &[(u32, f32)], b: &[(u32, f32)]) -> f32 {
    let (mut x, mut y, mut sum) = (0, 0, 0.0);
    while x < a.len() && y < b.len() {
        match a[x].0.cmp(&b[y].0) {
            Ordering::Less => x += 1,
            Ordering::Greater => y += 1,
            Ordering::Equal => {
                sum += a[x].1 * b[y].1;
                x += 1;
                y += 1;
            }
        }
    }
    sum
}

// ---------------------------------------------------------------------------------------
// Score

/// A product's neighbours: (product, score), best first.
type Best = Vec<(u32, f32)>;

/// A product and its neighbours.
type Scored = (u32, Best);

/// Every product's top `k` (product, score), best first (45 → 90 %). Each group of
/// identical products is one query; its members' top-k lists are kept side by side.
fn score(
    e: &Embedding,
    index: &Index,
    top_k: usize,
    min_score: f32,
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
) -> Result<Vec<Best>, CatalogError> {
    let (n, groups) = (e.len(), e.groups());
    let workers = if n < PARALLEL_FROM { 1 } else { *CORES };
    let next = AtomicUsize::new(0);
    let every = (groups / 40).max(QUERIES_PER_CLAIM);
    let scored: Vec<Vec<Scored>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                let next = &next;
                scope.spawn(move || {
                    let mut query = Query::new(groups);
                    let mut out = Vec::new();
                    loop {
                        if stop.is_cancelled() {
                            break;
                        }
                        let start = next.fetch_add(QUERIES_PER_CLAIM, AtomicOrdering::Relaxed);
                        if start >= groups {
                            break;
                        }
                        let end = (start + QUERIES_PER_CLAIM).min(groups);
                        for g in start..end {
                            query.top_k(e, index, g, top_k, min_score, &mut out);
                        }
                        if start / every != end / every {
                            progress.interpolate(
                                INDEXED,
                                SCORED,
                                end,
                                groups,
                                &format!(
                                    "scoring neighbours (about {end} of {groups} distinct identities)"
                                ),
                            );
                        }
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .expect("a scoring worker does not panic: it only indexes its own inputs")
            })
            .collect()
    });
    check(stop)?;
    let mut results: Vec<Best> = vec![Vec::new(); n];
    for (i, best) in scored.into_iter().flatten() {
        results[i as usize] = best;
    }
    Ok(results)
}

/// One worker's reusable state for top-k queries.
struct Query {
    /// `seen[h] == epoch` when group `h` was already scored for the current query.
    seen: Vec<u32>,
    epoch: u32,
    /// (upper bound, query weight, list) of the current query.
    lists: Vec<(f32, f32, (u32, u32))>,
    /// The bound of lists `i..`.
    rest: Vec<f32>,
    /// Per member of the queried group: its best so far, (score, product), best first.
    best: Vec<Vec<(f32, usize)>>,
}

impl Query {
    fn new(groups: usize) -> Self {
        Self {
            seen: vec![0; groups],
            epoch: 0,
            lists: Vec::new(),
            rest: Vec::new(),
            best: Vec::new(),
        }
    }

    /// The top `k` of every member of group `g` by MaxScore pruning (see the module doc),
    /// appended to `out`.
    fn top_k(
        &mut self,
        e: &Embedding,
        index: &Index,
        g: usize,
        k: usize,
        min_score: f32,
        out: &mut Vec<Scored>,
    ) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.seen.fill(0);
            self.epoch = 1;
        }
        let members = e.group(g);
        let first = members[0] as usize;
        self.best.clear();
        self.best.resize_with(members.len(), Vec::new);
        if k > 0 {
            self.order_lists(e, index, first);
            // The group's own members first: identical identities raise the bar at once.
            self.seen[g] = self.epoch;
            let mine = e.vector(first);
            let own = dot(mine, mine);
            let mut bar = if own >= min_score {
                self.offer(e, members, g, own, k, min_score)
            } else {
                min_score
            };
            for l in 0..self.lists.len() {
                if self.rest[l] + BOUND_SLACK < bar {
                    break;
                }
                let (_, qw, (a, b)) = self.lists[l];
                let rest = self.rest[l + 1];
                for p in &index.postings[a as usize..b as usize] {
                    let (w, h) = (p.weight, p.group);
                    if qw * w + rest + BOUND_SLACK < bar {
                        break;
                    }
                    let h = h as usize;
                    if self.seen[h] == self.epoch {
                        continue;
                    }
                    self.seen[h] = self.epoch;
                    let s = dot(mine, &e.vectors[p.start as usize..p.end as usize]);
                    if s >= min_score {
                        bar = self.offer(e, members, h, s, k, min_score);
                    }
                }
            }
        }
        for (i, best) in members.iter().zip(self.best.drain(..)) {
            out.push((*i, best.into_iter().map(|(s, j)| (j as u32, s)).collect()));
        }
    }

    /// The current query's lists in decreasing order of their upper bound, and `rest`.
    fn order_lists(&mut self, e: &Embedding, index: &Index, first: usize) {
        let own = e.category[first];
        self.lists.clear();
        for (t, qw) in e.terms(first) {
            let mut add = |partition: u32| {
                if let Some(&(a, b)) = index.lists.get(&(partition, t)) {
                    let heaviest = index.postings[a as usize].weight;
                    self.lists.push((qw * heaviest, qw, (a, b)));
                }
            };
            if own == NO_CATEGORY {
                index.partitions.iter().for_each(|&p| add(p));
            } else {
                add(own);
                add(NO_CATEGORY);
            }
        }
        self.lists
            .sort_unstable_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(Ordering::Equal));
        self.rest.clear();
        self.rest.resize(self.lists.len() + 1, 0.0);
        for l in (0..self.lists.len()).rev() {
            self.rest[l] = self.rest[l + 1] + self.lists[l].0;
        }
    }

    /// Offers group `h`, scoring `s`, to every member of the queried group (each keeps only
    /// comparable products other than itself); returns the new bar: the lowest score any
    /// member still needs to beat.
    fn offer(
        &mut self,
        e: &Embedding,
        members: &[u32],
        h: usize,
        s: f32,
        k: usize,
        min_score: f32,
    ) -> f32 {
        let mut bar = f32::INFINITY;
        for (&i, best) in members.iter().zip(self.best.iter_mut()) {
            let i = i as usize;
            for &j in e.group(h) {
                let j = j as usize;
                if j == i || !e.comparable(i, j) {
                    continue;
                }
                if best.len() == k && !e.ranks_before(i, (s, j), best[k - 1]) {
                    continue;
                }
                let at = best
                    .iter()
                    .position(|&other| e.ranks_before(i, (s, j), other))
                    .unwrap_or(best.len());
                best.insert(at, (s, j));
                best.truncate(k);
            }
            bar = bar.min(if best.len() < k {
                min_score
            } else {
                best[k - 1].0
            });
        }
        bar
    }
}
