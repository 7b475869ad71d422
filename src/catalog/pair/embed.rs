//! Embedding: every product's identity (`catalog::tokens`) as a TF-IDF vector in flat,
//! compact arrays (u32 word ids, f32 weights), with what decides comparability (category,
//! price) and the tie-break (material, key rank), and the groups of products that share a
//! category and an identity (they score the same against everything, so each group is one
//! query and one posting).
//!
//! Names are tokenised on every core in chunks; words are interned in the order they first
//! appear in the catalogue whatever the number of cores, so a word's id is the same on any
//! machine. Scores do not depend on the ids at all: weights sit on a grid on which `dot`
//! sums exactly, so two catalogues that weigh the same words alike score them alike to the
//! bit, whatever order their words were numbered in (a full pair after an incremental one).

use std::collections::HashMap;

use tokio_util::sync::CancellationToken;

pub use super::vectors::{dot, weigh};
use super::{Weights, CORES};
use crate::catalog::extract::{identity_tokens, name_words};
use crate::catalog::products::{PairingInput, ProductKey, Traits, NO_CATEGORY};
use crate::catalog::rows::Rows;
use crate::catalog::tokens::{frozen_identity, identity, Vocabulary};
use crate::catalog::{check, CatalogError};

/// Two prices are comparable when the larger is at most this many times the smaller.
const PRICE_BAND: f64 = 3.0;

/// From how many products a chunk is tokenised on several threads.
const PARALLEL_FROM: usize = 2048;

/// Products (or groups) made between two looks at the stop token while identities are made,
/// products grouped and vectors weighed (a million took seconds unchecked).
const STOP_STRIDE: usize = 1_024;

/// Categories and materials by name, in order of first appearance.
#[derive(Clone, Debug, Default)]
pub struct Names {
    ids: HashMap<String, u32>,
    names: Vec<String>,
}

impl Names {
    pub fn id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.ids.insert(name.to_owned(), id);
        self.names.push(name.to_owned());
        id
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn from_names(names: Vec<String>) -> Self {
        let ids = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i as u32))
            .collect();
        Self { ids, names }
    }
}

/// The traits of one product, naming its category (lowercased) and material.
pub fn traits_of(input: &PairingInput, categories: &mut Names, materials: &mut Names) -> Traits {
    Traits {
        category: input
            .category
            .as_deref()
            .map_or(NO_CATEGORY, |c| categories.id(&c.to_lowercase())),
        price: input.price_cents,
        material: input.material.as_deref().map(|m| materials.id(m)),
    }
}

/// One product's words as text: its name's identity words (variants out where enrichment
/// ran; every word where it has not) and its brand's words.
pub fn words_of(input: &PairingInput) -> (Vec<String>, Vec<String>) {
    let name = if input.enriched {
        identity_tokens(&input.name)
    } else {
        name_words(&input.name)
    };
    let brand = input.brand.as_deref().map(name_words).unwrap_or_default();
    (name, brand)
}

/// A catalogue read for a full pair: keys, traits and each product's words as ids of one
/// vocabulary, before folding. Chunks are added in key order.
#[derive(Default)]
pub struct Reading {
    pub keys: Vec<ProductKey>,
    pub versions: Vec<u64>,
    pub traits: Vec<Traits>,
    pub categories: Names,
    pub materials: Names,
    vocabulary: Vocabulary,
    /// Per product two rows: its name's words, then its brand's.
    words: Rows<u32>,
}

/// One thread's share of a chunk: its words interned locally, in order of first appearance.
struct LocalWords {
    texts: Vec<String>,
    rows: Rows<u32>,
}

fn tokenise(inputs: &[PairingInput]) -> LocalWords {
    let mut ids: HashMap<String, u32> = HashMap::new();
    let mut texts = Vec::new();
    let mut rows = Rows::with_capacity(inputs.len() * 2, inputs.len() * 8);
    let mut row = Vec::new();
    for input in inputs {
        let (name, brand) = words_of(input);
        for words in [name, brand] {
            row.clear();
            for w in words {
                let next = texts.len() as u32;
                let id = *ids.entry(w).or_insert_with_key(|w| {
                    texts.push(w.clone());
                    next
                });
                row.push(id);
            }
            rows.push(&row);
        }
    }
    LocalWords { texts, rows }
}

impl Reading {
    pub fn new() -> Self {
        Self {
            words: Rows::new(),
            ..Self::default()
        }
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Adds a chunk of products (with their versions): tokenised on every core, interned in
    /// catalogue order.
    pub fn add(&mut self, inputs: Vec<PairingInput>, versions: &[u64]) {
        self.versions.extend_from_slice(versions);
        let threads = if inputs.len() < PARALLEL_FROM {
            1
        } else {
            *CORES
        };
        let per = inputs.len().div_ceil(threads.max(1)).max(1);
        let locals: Vec<LocalWords> = std::thread::scope(|scope| {
            let handles: Vec<_> = inputs
                .chunks(per)
                .map(|part| scope.spawn(move || tokenise(part)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("tokenising does not panic: it reads text"))
                .collect()
        });
        for local in locals {
            let global: Vec<u32> = local
                .texts
                .iter()
                .map(|t| self.vocabulary.intern(t))
                .collect();
            for r in 0..local.rows.len() {
                let row: Vec<u32> = local
                    .rows
                    .row(r)
                    .iter()
                    .map(|&l| global[l as usize])
                    .collect();
                self.words.push(&row);
            }
        }
        for input in inputs {
            let traits = traits_of(&input, &mut self.categories, &mut self.materials);
            self.traits.push(traits);
            self.keys.push(input.product_key);
        }
    }

    /// Folds the vocabulary and makes every product's identity, then counts each word's
    /// products: the catalogue ready to weigh. `Cancelled` once `stop` is (looked at every
    /// `STOP_STRIDE` products on each thread).
    pub fn identities(mut self, stop: &CancellationToken) -> Result<Prepared, CatalogError> {
        self.vocabulary.fold_plurals();
        let n = self.keys.len();
        let vocabulary = &self.vocabulary;
        let words = &self.words;
        let threads = if n < PARALLEL_FROM { 1 } else { *CORES };
        let per = n.div_ceil(threads.max(1)).max(1);
        let parts: Vec<Rows<u32>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..n)
                .step_by(per)
                .map(|start| {
                    scope.spawn(move || {
                        let end = (start + per).min(n);
                        let mut out = Rows::with_capacity(end - start, (end - start) * 5);
                        for i in start..end {
                            if (i - start) % STOP_STRIDE == 0 && stop.is_cancelled() {
                                break;
                            }
                            out.push(&identity(
                                words.row(2 * i),
                                words.row(2 * i + 1),
                                vocabulary,
                            ));
                        }
                        out
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("making identities does not panic"))
                .collect()
        });
        check(stop)?;
        drop(self.words);
        let mut identities = Rows::with_capacity(n, parts.iter().map(|p| p.items().len()).sum());
        for part in &parts {
            for i in 0..part.len() {
                identities.push(part.row(i));
            }
        }
        drop(parts);
        let weights = Weights::counted(self.vocabulary, &identities);
        Ok(Prepared {
            keys: self.keys,
            versions: self.versions,
            traits: self.traits,
            categories: self.categories,
            materials: self.materials,
            identities,
            weights,
        })
    }
}

/// A catalogue ready to weigh and score: per product (in key order) its key, version,
/// traits and identity, with the weights and the names its ids refer to.
pub struct Prepared {
    pub keys: Vec<ProductKey>,
    pub versions: Vec<u64>,
    pub traits: Vec<Traits>,
    pub categories: Names,
    pub materials: Names,
    pub identities: Rows<u32>,
    pub weights: Weights,
}

impl Prepared {
    /// The products' embedding, each at its rank in `ranks` (its traits are taken);
    /// `Cancelled` once `stop` is (`Embedding::new`).
    pub fn embed(
        &mut self,
        ranks: Vec<u32>,
        stop: &CancellationToken,
    ) -> Result<Embedding, CatalogError> {
        Embedding::new(
            &self.identities,
            std::mem::take(&mut self.traits),
            (ranks, self.categories.len() as u32),
            &self.weights,
            stop,
        )
    }
}

/// A product's identity under frozen weights (an incremental run's changed products).
pub fn frozen_identity_of(input: &PairingInput, weights: &mut Weights) -> Vec<u32> {
    let (name, brand) = words_of(input);
    frozen_identity(&name, &brand, &mut weights.vocabulary)
}

/// A product's identity under frozen weights, from its words (`words_of`).
pub fn frozen_identity_of_words(words: &Words, weights: &mut Weights) -> Vec<u32> {
    frozen_identity(&words.0, &words.1, &mut weights.vocabulary)
}

/// A product's name words and brand words, as text (`words_of`).
pub type Words = (Vec<String>, Vec<String>);

/// Each product's words (`words_of`; `None` for none), found on every core from
/// `PARALLEL_FROM` products (tokenising is most of reading a product), in order.
pub fn words_on_every_core(inputs: &[Option<&PairingInput>]) -> Vec<Option<Words>> {
    let threads = if inputs.len() < PARALLEL_FROM {
        1
    } else {
        *CORES
    };
    let per = inputs.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = inputs
            .chunks(per)
            .map(|part| scope.spawn(move || part.iter().map(|i| i.map(words_of)).collect()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| -> Vec<Option<Words>> {
                h.join().expect("tokenising does not panic: it reads text")
            })
            .collect()
    })
}

/// Every product's vector and traits, and the groups, ready to index and score. A vector
/// is kept per group (its members share it), so a group's number names its vector too.
pub struct Embedding {
    /// Each group's identity vector: (word id, weight), sorted by word, L2-normalised.
    pub vectors: Rows<(u32, f32)>,
    pub traits: Vec<Traits>,
    /// The rank of each product's key among all keys: the last tie-break.
    pub key_rank: Vec<u32>,
    /// How many categories there are (ids `0..categories`; `NO_CATEGORY` aside).
    pub categories: u32,
    /// Products with the same category and identity: group `g`'s members, in key order
    /// (`key_rank`; scoring stops reading a group on that order). A group kept from an
    /// earlier run may have none left (`kept`): it scores nothing.
    pub groups: Rows<u32>,
    /// Each member's price beside `groups.items()` (`price_of`): what offering a group to a
    /// product reads, one array in member order instead of each member's traits, a cache
    /// miss each (a group of thousands of identical names mostly outside the price band).
    pub member_price: Vec<i64>,
    /// Each group's lowest and highest member price (`price_of`); (0, 0) when a member has
    /// none, which every price meets.
    pub group_price: Vec<(i64, i64)>,
    /// Each group's category.
    pub group_category: Vec<u32>,
    /// Each product's group.
    pub group_of: Vec<u32>,
}

impl Embedding {
    /// Weighs `identities` by `weights` and groups the products. `key_rank` is each
    /// product's rank in key order, `categories` how many there are. `Cancelled` once
    /// `stop` is (looked at every `STOP_STRIDE` products while grouping, groups while
    /// weighing).
    pub fn new(
        identities: &Rows<u32>,
        traits: Vec<Traits>,
        (key_rank, categories): (Vec<u32>, u32),
        weights: &Weights,
        stop: &CancellationToken,
    ) -> Result<Self, CatalogError> {
        debug_assert_eq!(identities.len(), traits.len());
        let idf = weights.idf();
        let (groups, member_price, group_of) =
            group_identical(identities, &traits, &key_rank, stop)?;
        let group_price = price_ranges(&groups, &member_price);
        let mut vectors = Rows::with_capacity(groups.len(), identities.items().len());
        let mut group_category = Vec::with_capacity(groups.len());
        let mut row = Vec::new();
        for g in 0..groups.len() {
            if g % STOP_STRIDE == 0 {
                check(stop)?;
            }
            let first = groups.row(g)[0] as usize;
            weigh(identities.row(first), |t| idf[t as usize], &mut row);
            vectors.push(&row);
            group_category.push(traits[first].category);
        }
        check(stop)?;
        Ok(Self {
            vectors,
            traits,
            key_rank,
            categories,
            groups,
            member_price,
            group_price,
            group_category,
            group_of,
        })
    }

    /// The embedding of products whose groups are already numbered: `group_of` each
    /// product's, `vectors` and `group_category` every group's (groups may be memberless).
    pub fn of_groups(
        vectors: Rows<(u32, f32)>,
        group_category: Vec<u32>,
        traits: Vec<Traits>,
        group_of: Vec<u32>,
        categories: u32,
    ) -> Self {
        debug_assert_eq!(vectors.len(), group_category.len());
        let (groups, member_price) = members(&group_of, vectors.len(), None, &traits);
        let group_price = price_ranges(&groups, &member_price);
        Self {
            vectors,
            key_rank: (0..traits.len() as u32).collect(),
            traits,
            categories,
            groups,
            member_price,
            group_price,
            group_category,
            group_of,
        }
    }

    /// The same embedding without its memberless groups, the rest numbered anew in order.
    pub fn compacted(self) -> Self {
        let mut new_id = vec![u32::MAX; self.group_count()];
        let mut vectors = Rows::with_capacity(self.group_count(), self.vectors.items().len());
        let mut group_category = Vec::with_capacity(self.group_count());
        for (g, id) in new_id.iter_mut().enumerate() {
            if !self.groups.row(g).is_empty() {
                *id = vectors.len() as u32;
                vectors.push(self.vectors.row(g));
                group_category.push(self.group_category[g]);
            }
        }
        let group_of: Vec<u32> = self.group_of.iter().map(|&g| new_id[g as usize]).collect();
        let (groups, member_price) =
            members(&group_of, vectors.len(), Some(&self.key_rank), &self.traits);
        let group_price = price_ranges(&groups, &member_price);
        Self {
            vectors,
            groups,
            member_price,
            group_price,
            group_category,
            group_of,
            ..self
        }
    }

    pub fn len(&self) -> usize {
        self.traits.len()
    }

    pub fn is_empty(&self) -> bool {
        self.traits.is_empty()
    }

    /// How many distinct (category, identity) groups the products form.
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// Product `i`'s identity: (word id, weight), sorted by word id, L2-normalised.
    pub fn vector(&self, i: usize) -> &[(u32, f32)] {
        self.vectors.row(self.group_of[i] as usize)
    }

    /// The documented score of two products: the cosine of their identity vectors.
    pub fn score(&self, i: usize, j: usize) -> f32 {
        dot(self.vector(i), self.vector(j))
    }

    /// Whether product `i`'s price meets some member's of group `h` (`prices_meet`): false
    /// only when every member's is provably outside its band.
    pub fn price_meets_group(&self, i: usize, h: usize) -> bool {
        let (lo, hi) = self.group_price[h];
        let p = price_of(&self.traits[i]);
        // Every member's price is within lo..=hi, and the band is wider further from `p`.
        lo == 0 || (prices_meet(p, lo) || p > lo) && (prices_meet(p, hi) || p < hi)
    }

    /// Whether two products may be neighbours: same top-level category (or one has none)
    /// and comparable prices (or one has none).
    pub fn comparable(&self, i: usize, j: usize) -> bool {
        comparable(&self.traits[i], &self.traits[j])
    }

    /// Whether `(score_a, a)` ranks before `(score_b, b)` as a neighbour of `i`: higher
    /// score, then same material, then smaller key.
    pub fn ranks_before(&self, i: usize, (sa, a): (f32, usize), (sb, b): (f32, usize)) -> bool {
        if sa != sb {
            return sa > sb;
        }
        let material = |j: usize| {
            let m = self.traits[i].material;
            m.is_some() && m == self.traits[j].material
        };
        match (material(a), material(b)) {
            (true, false) => true,
            (false, true) => false,
            _ => self.key_rank[a] < self.key_rank[b],
        }
    }
}

/// Whether two products' traits let them be neighbours (see `Embedding::comparable`).
pub fn comparable(a: &Traits, b: &Traits) -> bool {
    categories_meet(a.category, b.category) && prices_meet(price_of(a), price_of(b))
}

/// Whether products of these categories may be neighbours: the same, or one has none.
pub fn categories_meet(a: u32, b: u32) -> bool {
    a == NO_CATEGORY || b == NO_CATEGORY || a == b
}

/// A product's price as comparing prices reads it: 0 for none or one not above 0, which
/// compares with every price.
pub fn price_of(t: &Traits) -> i64 {
    t.price.filter(|&p| p > 0).unwrap_or(0)
}

/// Whether products of these prices (`price_of`) may be neighbours: the larger at most
/// `PRICE_BAND` times the smaller, or one has none.
pub fn prices_meet(x: i64, y: i64) -> bool {
    if x > 0 && y > 0 {
        let (lo, hi) = (x.min(y) as f64, x.max(y) as f64);
        hi / lo <= PRICE_BAND
    } else {
        true
    }
}

/// Members by group in key order, their prices, and each product's group.
type Grouped = (Rows<u32>, Vec<i64>, Vec<u32>);

/// Groups products of the same category and identity; `Cancelled` once `stop` is.
fn group_identical(
    identities: &Rows<u32>,
    traits: &[Traits],
    key_rank: &[u32],
    stop: &CancellationToken,
) -> Result<Grouped, CatalogError> {
    let n = identities.len();
    let mut ids: HashMap<(u32, &[u32]), u32> = HashMap::with_capacity(n);
    let mut group_of = Vec::with_capacity(n);
    for (i, t) in traits.iter().enumerate() {
        if i % STOP_STRIDE == 0 {
            check(stop)?;
        }
        let next = ids.len() as u32;
        group_of.push(*ids.entry((t.category, identities.row(i))).or_insert(next));
    }
    let count = ids.len();
    drop(ids);
    check(stop)?;
    let (groups, prices) = members(&group_of, count, Some(key_rank), traits);
    Ok((groups, prices, group_of))
}

/// Each group's lowest and highest member price, (0, 0) when one has none (`group_price`).
fn price_ranges(groups: &Rows<u32>, member_price: &[i64]) -> Vec<(i64, i64)> {
    (0..groups.len())
        .map(|g| {
            let (start, end) = groups.span(g);
            let prices = &member_price[start as usize..end as usize];
            match (prices.iter().min(), prices.iter().max()) {
                (Some(&lo), Some(&hi)) if lo > 0 => (lo, hi),
                _ => (0, 0),
            }
        })
        .collect()
}

/// Each of `count` groups' members, in key order, from each product's group (the products'
/// order, or `key_rank`'s when given and it differs), and their prices beside them.
fn members(
    group_of: &[u32],
    count: usize,
    key_rank: Option<&[u32]>,
    traits: &[Traits],
) -> (Rows<u32>, Vec<i64>) {
    let mut offsets = vec![0u32; count + 1];
    for &g in group_of {
        offsets[g as usize + 1] += 1;
    }
    for g in 0..count {
        offsets[g + 1] += offsets[g];
    }
    let mut fill = offsets.clone();
    let mut members = vec![0u32; group_of.len()];
    let mut prices = vec![0i64; group_of.len()];
    let put = |i: u32| {
        let g = group_of[i as usize] as usize;
        members[fill[g] as usize] = i;
        prices[fill[g] as usize] = price_of(&traits[i as usize]);
        fill[g] += 1;
    };
    match key_rank.filter(|r| r.iter().enumerate().any(|(i, &r)| r as usize != i)) {
        Some(rank) => {
            let mut by_rank = vec![0u32; rank.len()];
            for (i, &r) in rank.iter().enumerate() {
                by_rank[r as usize] = i as u32;
            }
            by_rank.into_iter().for_each(put);
        }
        None => (0..group_of.len() as u32).for_each(put),
    }
    let groups = Rows::from_parts(offsets, members).expect("offsets counted from the members");
    (groups, prices)
}
