//! The index scoring reads: per (category, word) a list of the groups whose identity holds
//! the word, heaviest first; and per (category, word pair), for pairs of *common* words (each
//! on at least `pair_from` groups of the category), the list of groups holding both.
//!
//! Why pairs: in a large catalogue a family shares each of its words with thousands of other
//! products, so an exact answer that reads whole word lists reads thousands of products per
//! query. A product that could enter a top k must usually share two or more of the query's
//! words; the pair lists name exactly those, and are a hundred times shorter. Which lists a
//! query reads, and why that is exact, is in `score`.
//!
//! Postings carry the group's vector span, so scoring a candidate reads one place in memory.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::embed::Embedding;
use crate::catalog::products::NO_CATEGORY;

/// Words on fewer groups of a category than this are read whole, never through pairs.
const PAIR_FROM: u32 = 32;

/// Pair postings may take at most this many times the single-word postings; past it the
/// threshold for a common word doubles until they fit (pairs are an accelerator: fewer of
/// them costs time, never exactness).
const PAIR_BUDGET: usize = 3;

/// A multiply-rotate hasher for the index's small integer keys: SipHash's resistance to
/// chosen keys is not needed for ids this process assigned, and it costs a third of a
/// query's time.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// The pair lists by (category, word, word) and their postings.
type PairLists = (IdMap<(u32, u32, u32), List>, Vec<PairPosting>);

/// A list's place in its postings, its heaviest weight, and its number among the lists of
/// its kind (words' or pairs'), for facts kept per list (`reverse`'s bars).
#[derive(Clone, Copy, Debug)]
pub struct List {
    pub start: u32,
    pub len: u32,
    pub heaviest: f32,
    pub slot: u32,
}

/// A group in a word's list: its weight for the word, and where its vector is.
#[derive(Clone, Copy, Debug)]
pub struct Posting {
    pub weight: f32,
    pub group: u32,
    pub start: u32,
    pub end: u32,
}

/// A group in a pair's list, and where its vector is.
#[derive(Clone, Copy, Debug)]
pub struct PairPosting {
    pub group: u32,
    pub start: u32,
    pub end: u32,
}

pub struct Index {
    singles: IdMap<(u32, u32), List>,
    postings: Vec<Posting>,
    pairs: IdMap<(u32, u32, u32), List>,
    pair_postings: Vec<PairPosting>,
    /// The categories products are in, `NO_CATEGORY` included when some have none.
    pub partitions: Vec<u32>,
}

impl Index {
    pub fn build(e: &Embedding) -> Self {
        let mut entries: Vec<(u32, u32, Posting)> = Vec::with_capacity(e.vectors.items().len());
        for g in 0..e.group_count() {
            let first = e.groups.row(g)[0] as usize;
            let (start, end) = e.vectors.span(first);
            for &(t, weight) in e.vector(first) {
                let posting = Posting {
                    weight,
                    group: g as u32,
                    start,
                    end,
                };
                entries.push((e.traits[first].category, t, posting));
            }
        }
        entries.sort_unstable_by(|a, b| {
            (a.0, a.1)
                .cmp(&(b.0, b.1))
                .then(b.2.weight.total_cmp(&a.2.weight))
                .then(a.2.group.cmp(&b.2.group))
        });
        let mut singles = IdMap::default();
        for_each_run(
            &entries,
            |a, b| (a.0, a.1) == (b.0, b.1),
            |start, end| {
                let (c, t, p) = entries[start];
                let list = List {
                    start: start as u32,
                    len: (end - start) as u32,
                    heaviest: p.weight,
                    slot: singles.len() as u32,
                };
                singles.insert((c, t), list);
            },
        );
        let postings: Vec<Posting> = entries.into_iter().map(|(_, _, p)| p).collect();
        let (pairs, pair_postings) = pair_lists(e, &singles, postings.len());
        let mut partitions: Vec<u32> = (0..e.categories).collect();
        if e.traits.iter().any(|t| t.category == NO_CATEGORY) {
            partitions.push(NO_CATEGORY);
        }
        Self {
            singles,
            postings,
            pairs,
            pair_postings,
            partitions,
        }
    }

    /// The list of `word` in `partition`.
    pub fn single(&self, partition: u32, word: u32) -> Option<List> {
        self.singles.get(&(partition, word)).copied()
    }

    /// The list of groups holding both words (`a < b`) in `partition`, when it is indexed.
    pub fn pair(&self, partition: u32, a: u32, b: u32) -> Option<List> {
        self.pairs.get(&(partition, a, b)).copied()
    }

    pub fn postings(&self, list: List) -> &[Posting] {
        &self.postings[list.start as usize..(list.start + list.len) as usize]
    }

    pub fn pair_postings(&self, list: List) -> &[PairPosting] {
        &self.pair_postings[list.start as usize..(list.start + list.len) as usize]
    }

    /// Every word's list and every pair's.
    pub fn lists(&self) -> (impl Iterator<Item = &List>, impl Iterator<Item = &List>) {
        (self.singles.values(), self.pairs.values())
    }

    /// How many word lists and pair lists there are (their slots are below these).
    pub fn list_counts(&self) -> (usize, usize) {
        (self.singles.len(), self.pairs.len())
    }
}

/// Calls `run(start, end)` for each run of entries `same` holds together.
fn for_each_run<T>(items: &[T], same: impl Fn(&T, &T) -> bool, mut run: impl FnMut(usize, usize)) {
    let mut start = 0;
    for k in 1..=items.len() {
        if k == items.len() || !same(&items[start], &items[k]) {
            if k > start {
                run(start, k);
            }
            start = k;
        }
    }
}

/// The pair lists, with the common-word threshold raised until they fit the budget.
fn pair_lists(
    e: &Embedding,
    singles: &IdMap<(u32, u32), List>,
    single_postings: usize,
) -> PairLists {
    let budget = single_postings.saturating_mul(PAIR_BUDGET);
    let mut from = PAIR_FROM;
    let mut common = Vec::new();
    let count_at = |from: u32, common: &mut Vec<u32>| -> usize {
        (0..e.group_count())
            .map(|g| {
                common_words(e, singles, g, from, common);
                common.len() * common.len().saturating_sub(1) / 2
            })
            .sum()
    };
    while count_at(from, &mut common) > budget {
        from = from.saturating_mul(2);
    }
    let mut entries: Vec<(u32, u32, u32, PairPosting)> = Vec::new();
    for g in 0..e.group_count() {
        common_words(e, singles, g, from, &mut common);
        let first = e.groups.row(g)[0] as usize;
        let c = e.traits[first].category;
        let (start, end) = e.vectors.span(first);
        for (x, &a) in common.iter().enumerate() {
            for &b in &common[x + 1..] {
                let posting = PairPosting {
                    group: g as u32,
                    start,
                    end,
                };
                entries.push((c, a, b, posting));
            }
        }
    }
    entries.sort_unstable_by_key(|&(c, a, b, p)| (c, a, b, p.group));
    let mut pairs = IdMap::default();
    for_each_run(
        &entries,
        |x, y| (x.0, x.1, x.2) == (y.0, y.1, y.2),
        |start, end| {
            let (c, a, b, _) = entries[start];
            let list = List {
                start: start as u32,
                len: (end - start) as u32,
                heaviest: 0.0,
                slot: pairs.len() as u32,
            };
            pairs.insert((c, a, b), list);
        },
    );
    (pairs, entries.into_iter().map(|(_, _, _, p)| p).collect())
}

/// The words of group `g` that are common in its category (on at least `from` groups),
/// by id.
fn common_words(
    e: &Embedding,
    singles: &IdMap<(u32, u32), List>,
    g: usize,
    from: u32,
    out: &mut Vec<u32>,
) {
    let first = e.groups.row(g)[0] as usize;
    let c = e.traits[first].category;
    out.clear();
    out.extend(
        e.vector(first)
            .iter()
            .map(|&(t, _)| t)
            .filter(|&t| singles.get(&(c, t)).is_some_and(|l| l.len >= from)),
    );
}
