//! `PAIR_MAX_MEMORY_MB`: the memory a pair may take, checked before it takes it — once the
//! products are counted (before any is read) and again once identities are made (before
//! the index) — so that a catalogue too large fails with `PairTooLarge` instead of the
//! process being killed by the kernel.
//!
//! The estimate is what a pair holds at its peak, per product and per identity word, with
//! about 15 % to spare: on the hard catalogue (docs/performance.md) the incremental pair —
//! the larger, holding the old state beside the new — was measured at about 535 bytes a
//! product at 100,000 and 300,000 products (51 and 153 MiB of its own heap), and the
//! estimate is about 620 bytes a product once identities are counted, 680 before. The
//! catalogue the store holds is not counted; the groups and indexes kept for other tenants
//! between pairs (`kept`) are, and are dropped to make room before a pair runs.

use crate::catalog::CatalogError;

/// Bytes a pair holds per product besides its identity's words: keys, versions, traits,
/// groups, ranks, neighbour lists, the state it keeps and the old state beside it.
const PER_PRODUCT: u64 = 440;
/// Bytes per identity word: the identity, the vector, word postings and pair postings.
const PER_WORD: u64 = 40;
/// Words an identity is taken to hold before any is counted.
const WORDS_GUESSED: u64 = 6;

/// What a pair of `products` is estimated to take before any is read, in MiB: what
/// `PAIR_MAX_MEMORY_MB` is compared with first.
pub fn estimated_mb(products: usize) -> u64 {
    before_reading(products).div_ceil(1 << 20)
}

fn before_reading(products: usize) -> u64 {
    (products as u64).saturating_mul(PER_PRODUCT + WORDS_GUESSED * PER_WORD)
}

/// The limit of one pair.
#[derive(Clone, Copy, Debug)]
pub struct Limit {
    mb: u64,
}

impl Limit {
    pub fn new(mb: u64) -> Self {
        Self { mb }
    }

    /// Before reading: `products` at the guessed identity length.
    pub fn check_products(&self, products: usize) -> Result<(), CatalogError> {
        self.check(before_reading(products))
    }

    /// Once the identities are made: `products` holding `words` identity words in all.
    pub fn check_identities(&self, products: usize, words: usize) -> Result<(), CatalogError> {
        let (n, words) = (products as u64, words as u64);
        self.check(n.saturating_mul(PER_PRODUCT) + words.saturating_mul(PER_WORD))
    }

    fn check(&self, bytes: u64) -> Result<(), CatalogError> {
        let needed_mb = bytes.div_ceil(1 << 20);
        if needed_mb > self.mb {
            return Err(CatalogError::PairTooLarge {
                needed_mb,
                limit_mb: self.mb,
            });
        }
        Ok(())
    }
}
