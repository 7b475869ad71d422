//! Deterministic demo catalogues with planted families: one product in several colours,
//! sizes or pack sizes. `generate` (easy: each family has a word of its own) writes the
//! committed demo feed (`catalog-jobs gen-feed`); `generate_hard` (families told apart only
//! by combinations of common words) is what the pairing tests and the benchmark use. Keys
//! are `fam<family>-v<variant>` (and `nse<number>` for the hard catalogue's noise), so a
//! test can tell which products are one family.

mod easy;
mod edits;
mod hard;
mod hard_words;

pub use easy::generate;
pub use edits::{edit_hard, Edits};
pub use hard::generate_hard;

use super::products::{Product, ProductKey};

/// A small, fast, deterministic generator (SplitMix64): the same seed gives the same feed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

pub(super) const COLOURS: &[&str] = &[
    "Black",
    "White",
    "Navy Blue",
    "Grey",
    "Olive Green",
    "Burgundy",
    "Off-White",
    "Mustard",
    "Teal",
    "Charcoal",
    "Sky Blue",
    "Rose Gold",
];
pub(super) const SIZES: &[&str] = &["XS", "S", "M", "L", "XL", "XXL"];

/// The family a generated product belongs to (`fam000123-v2` → `fam000123`).
pub fn family_of(key: &ProductKey) -> &str {
    key.as_str().split('-').next().unwrap_or(key.as_str())
}

/// Family recall at k of a neighbour table over a generated catalogue: of each product's
/// family siblings (at most k of them), the share found among its neighbours.
/// Returns (found, expected).
pub fn family_recall<'a>(
    products: &'a [Product],
    neighbours_of: impl Fn(&ProductKey) -> Vec<ProductKey>,
    k: usize,
) -> (usize, usize) {
    let mut families: std::collections::HashMap<&'a str, Vec<&'a ProductKey>> =
        std::collections::HashMap::new();
    for p in products {
        families
            .entry(family_of(&p.product_key))
            .or_default()
            .push(&p.product_key);
    }
    let (mut found, mut expected) = (0, 0);
    for p in products {
        let siblings = &families[family_of(&p.product_key)];
        let wanted = (siblings.len() - 1).min(k);
        if wanted == 0 {
            continue;
        }
        let got = neighbours_of(&p.product_key);
        let hits = got
            .iter()
            .take(k)
            .filter(|g| **g != p.product_key && siblings.contains(g))
            .count();
        found += hits.min(wanted);
        expected += wanted;
    }
    (found, expected)
}
