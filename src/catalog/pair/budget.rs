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
//!
//! A catalogue of few words fills the index's pair and triple lists up to their budgets
//! (`index::PAIR_BUDGET`, `TRIPLE_BUDGET`), where the hard catalogue holds well under one of
//! each a word: names of 6 words out of 40 make 3 pair and 5 triple postings a word, and a
//! pair of 100,000 such products peaked at 142 MiB of its own heap against 65 MiB counted by
//! words alone. Once identities are made, the postings each list could hold are counted
//! (`Postings::bound`: every group's common words, at most the budgets) and each costs
//! what building it holds at the peak (the sorted entries beside the list they become).

use std::collections::{HashMap, HashSet};

use tokio_util::sync::CancellationToken;

use super::index::{PAIR_BUDGET, PAIR_FROM, TRIPLE_BUDGET};
use crate::catalog::products::Traits;
use crate::catalog::rows::Rows;
use crate::catalog::{check, CatalogError};

/// Products counted between two looks at the stop.
const STOP_STRIDE: usize = 4096;

/// Bytes a pair holds per product besides its identity's words: keys, versions, traits,
/// groups, ranks, neighbour lists, the state it keeps and the old state beside it.
const PER_PRODUCT: u64 = 440;
/// Bytes per identity word: the identity, the vector, word postings and pair postings.
const PER_WORD: u64 = 40;
/// Words an identity is taken to hold before any is counted.
const WORDS_GUESSED: u64 = 6;
/// Bytes per pair posting: the posting (16) and its share of the sorted entries it is made
/// from (24 bytes each, a `Vec` grown by doubling) while the lists are built.
const PER_PAIR: u64 = 24;
/// Bytes per triple posting: the posting (4) and its sorted entry (16, grown by doubling).
const PER_TRIPLE: u64 = 20;

/// The most pair and triple postings the index can hold for some products: as the index
/// does, per group (products of one category and identity), each group's words held by at
/// least `PAIR_FROM` groups of its category, two and three at a time, at most the index's
/// budgets (a word posting a group's word).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Postings {
    pub pairs: u64,
    pub triples: u64,
}

impl Postings {
    /// `Cancelled` once `stop` is: a large catalogue's count takes a while.
    pub fn bound(
        identities: &Rows<u32>,
        traits: &[Traits],
        stop: &CancellationToken,
    ) -> Result<Self, CatalogError> {
        let mut groups: HashSet<(u32, &[u32])> = HashSet::with_capacity(traits.len());
        let mut on: HashMap<(u32, u32), u32> = HashMap::new();
        for (i, t) in traits.iter().enumerate() {
            if i % STOP_STRIDE == 0 {
                check(stop)?;
            }
            let group = (t.category, identities.row(i));
            if groups.insert(group) {
                for &w in group.1 {
                    *on.entry((t.category, w)).or_default() += 1;
                }
            }
        }
        check(stop)?;
        let (mut words, mut pairs, mut triples) = (0u64, 0u64, 0u64);
        for &(c, row) in &groups {
            let common = row.iter().filter(|&&w| on[&(c, w)] >= PAIR_FROM).count() as u64;
            words += row.len() as u64;
            pairs += common * common.saturating_sub(1) / 2;
            triples += common * common.saturating_sub(1) * common.saturating_sub(2) / 6;
        }
        Ok(Self {
            pairs: pairs.min(words.saturating_mul(PAIR_BUDGET as u64)),
            triples: triples.min(words.saturating_mul(TRIPLE_BUDGET as u64)),
        })
    }
}

/// What a pair of `products` is estimated to take before any is read, in MiB: what
/// `PAIR_MAX_MEMORY_MB` is compared with first.
pub fn estimated_mb(products: usize) -> u64 {
    before_reading(products).div_ceil(1 << 20)
}

fn before_reading(products: usize) -> u64 {
    (products as u64).saturating_mul(PER_PRODUCT + WORDS_GUESSED * PER_WORD)
}

/// What a pair of products holding `identities`, of `traits`, is estimated to take, in
/// bytes.
pub fn after_identities(
    identities: &Rows<u32>,
    traits: &[Traits],
    stop: &CancellationToken,
) -> Result<u64, CatalogError> {
    let (n, words) = (identities.len() as u64, identities.items().len() as u64);
    let lists = Postings::bound(identities, traits, stop)?;
    Ok(n.saturating_mul(PER_PRODUCT)
        + words.saturating_mul(PER_WORD)
        + lists.pairs.saturating_mul(PER_PAIR)
        + lists.triples.saturating_mul(PER_TRIPLE))
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

    /// Once the identities are made, before the index: products holding `identities`, of
    /// `traits` (their categories).
    pub fn check_identities(
        &self,
        identities: &Rows<u32>,
        traits: &[Traits],
        stop: &CancellationToken,
    ) -> Result<(), CatalogError> {
        self.check(after_identities(identities, traits, stop)?)
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

#[cfg(test)]
mod tests {
    use super::{after_identities, Limit, Postings, PER_PRODUCT, PER_WORD};
    use crate::catalog::products::Traits;
    use crate::catalog::rows::Rows;
    use tokio_util::sync::CancellationToken;

    fn never() -> CancellationToken {
        CancellationToken::new()
    }

    fn in_category(category: u32, n: usize) -> Vec<Traits> {
        let t = Traits {
            category,
            price: None,
            material: None,
        };
        vec![t; n]
    }

    /// `n` names of `per` distinct words out of `vocabulary` (a fixed pseudo-random draw),
    /// each sorted as identities are.
    fn few_words(n: usize, per: usize, vocabulary: u32) -> Rows<u32> {
        let mut rows = Rows::new();
        let mut x: u64 = 7;
        for _ in 0..n {
            let mut row: Vec<u32> = Vec::with_capacity(per);
            while row.len() < per {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let w = ((x >> 33) % u64::from(vocabulary)) as u32;
                if !row.contains(&w) {
                    row.push(w);
                }
            }
            row.sort_unstable();
            rows.push(&row);
        }
        rows
    }

    #[test]
    fn a_few_words_catalogue_counts_every_pair_and_triple_of_its_names() {
        // 3,000 names of 6 of 24 words: every word is on hundreds of names, so every name
        // makes its 15 pairs and 20 triples (within the budgets of 3 and 6 a word).
        let identities = few_words(3_000, 6, 24);
        let traits = in_category(0, 3_000);
        let lists = Postings::bound(&identities, &traits, &never()).unwrap();
        let groups = {
            let mut all: Vec<&[u32]> = (0..3_000).map(|i| identities.row(i)).collect();
            all.sort_unstable();
            all.dedup();
            all.len() as u64
        };
        assert_eq!(lists.pairs, 15 * groups);
        assert_eq!(lists.triples, 20 * groups);
        // The bench's 3,000 products of 6 of 24 words (catalog_bench, VOCAB=24) peaked at
        // 4 MiB of the pair's own heap, which words alone put at 2 MiB.
        let words_alone = 3_000 * PER_PRODUCT + 18_000 * PER_WORD;
        assert!(words_alone < 4 << 20, "{words_alone}");
        let estimate = after_identities(&identities, &traits, &never()).unwrap();
        assert!(estimate >= 4 << 20, "{estimate}");
        assert!(Limit::new(4)
            .check_identities(&identities, &traits, &never())
            .is_err());
        assert!(Limit::new(6)
            .check_identities(&identities, &traits, &never())
            .is_ok());
    }

    #[test]
    fn rare_words_and_repeated_names_add_nothing_and_the_budgets_cap_the_rest() {
        // Every word on one name: no word is common, no pair or triple list is made.
        let mut rare = Rows::new();
        for i in 0..1_000u32 {
            rare.push(&[3 * i, 3 * i + 1, 3 * i + 2]);
        }
        let traits = in_category(0, 1_000);
        assert_eq!(
            Postings::bound(&rare, &traits, &never()).unwrap(),
            Postings {
                pairs: 0,
                triples: 0
            }
        );
        assert_eq!(
            after_identities(&rare, &traits, &never()).unwrap(),
            1_000 * PER_PRODUCT + 3_000 * PER_WORD
        );
        // One name 100 times is one group: its words are on one group, not common.
        let mut same = Rows::new();
        for _ in 0..100 {
            same.push(&[1, 2, 3, 4]);
        }
        assert_eq!(
            Postings::bound(&same, &in_category(0, 100), &never())
                .unwrap()
                .pairs,
            0
        );
        // 12 common words a name: 66 pairs and 220 triples, capped at 3 and 6 a word.
        let wide = few_words(2_000, 12, 30);
        let lists = Postings::bound(&wide, &in_category(0, 2_000), &never()).unwrap();
        assert_eq!((lists.pairs, lists.triples), (3 * 24_000, 6 * 24_000));
        // The same names split over two categories are counted in each.
        let mut split = in_category(0, 2_000);
        split[1_000..].fill(in_category(1, 1)[0]);
        assert_eq!(Postings::bound(&wide, &split, &never()).unwrap(), lists);
    }
}
