//! Embedding: every product's identity (`catalog::tokens`, as `reading` makes it) as a
//! TF-IDF vector in flat, compact arrays (u32 word ids, f32 weights), with what decides
//! comparability (category, price) and the tie-break (material, key rank), and the groups
//! of products that share a category and an identity (they score the same against
//! everything, so each group is one query and one posting).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use tokio_util::sync::CancellationToken;

use super::index::IdHasher;
pub use super::vectors::{dot, weigh};
use super::Weights;
use crate::catalog::products::{Traits, NO_CATEGORY};
use crate::catalog::rows::Rows;
use crate::catalog::{check, CatalogError};

/// Two prices are comparable when the larger is at most this many times the smaller.
const PRICE_BAND: f64 = 3.0;

/// Products (or groups) made between two looks at the stop token while identities are made,
/// products grouped and vectors weighed (a million took seconds unchecked).
pub const STOP_STRIDE: usize = 1_024;

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
    /// Each group's words as a bit set (`signature_of`), read beside a posting to bound a
    /// group's score without reading its vector.
    pub signatures: Vec<u64>,
}

/// Word `t`'s bit in a signature: ids are dense (numbered by first appearance), so words
/// spread over the 64 bits; two words on one bit only loosen a bound.
pub fn word_bit(t: u32) -> u64 {
    1 << (t % 64)
}

/// The bit set of a vector's words (`word_bit`).
fn signature_of(vector: &[(u32, f32)]) -> u64 {
    vector.iter().fold(0, |sig, &(t, _)| sig | word_bit(t))
}

/// Every group's signature.
fn signatures(vectors: &Rows<(u32, f32)>) -> Vec<u64> {
    (0..vectors.len())
        .map(|g| signature_of(vectors.row(g)))
        .collect()
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
            signatures: signatures(&vectors),
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
            signatures: signatures(&vectors),
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
            signatures: signatures(&vectors),
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

/// A product's category and identity, as products are grouped by: hashed word by word with
/// `IdHasher` (SipHash over a million identities' bytes took most of the grouping's time;
/// the ids are this process's own, chosen by no client).
#[derive(PartialEq, Eq)]
struct Kind<'a>(u32, &'a [u32]);

impl Hash for Kind<'_> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u32(self.0);
        for &t in self.1 {
            h.write_u32(t);
        }
    }
}

/// Groups products of the same category and identity; `Cancelled` once `stop` is.
fn group_identical(
    identities: &Rows<u32>,
    traits: &[Traits],
    key_rank: &[u32],
    stop: &CancellationToken,
) -> Result<Grouped, CatalogError> {
    let n = identities.len();
    let mut ids: HashMap<Kind<'_>, u32, BuildHasherDefault<IdHasher>> =
        HashMap::with_capacity_and_hasher(n, Default::default());
    let mut group_of = Vec::with_capacity(n);
    for (i, t) in traits.iter().enumerate() {
        if i % STOP_STRIDE == 0 {
            check(stop)?;
        }
        let next = ids.len() as u32;
        group_of.push(
            *ids.entry(Kind(t.category, identities.row(i)))
                .or_insert(next),
        );
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
