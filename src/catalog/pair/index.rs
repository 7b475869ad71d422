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
//! Why triples: in a catalogue large enough that a query's top k is filled by products that
//! share all but one of its words, the bar is above what any two words can add, and what is
//! left to rule out is a product sharing three. The lists of groups holding three common
//! words (each on at least `triple_from` groups, at least the pairs' threshold) name those,
//! and are a hundred times shorter again than the pairs' at a million products.
//!
//! Postings carry the group's vector span, so scoring a candidate reads one place in memory.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use tokio_util::sync::CancellationToken;

use super::embed::Embedding;
use crate::catalog::products::NO_CATEGORY;
use crate::catalog::{check, CatalogError};

/// Words on fewer groups of a category than this are read whole, never through pairs.
pub(super) const PAIR_FROM: u32 = 32;

/// Pair postings may take at most this many times the single-word postings; past it the
/// threshold for a common word doubles until they fit (pairs are an accelerator: fewer of
/// them costs time, never exactness).
pub(super) const PAIR_BUDGET: usize = 3;

/// Triple postings may take at most this many times the single-word postings, their
/// threshold doubled from the pairs' until they fit (an accelerator too). A triple posting
/// is 4 bytes against a word posting's 16: 6 of them take the bytes 2 took at 12 bytes, and
/// a catalogue of few words (35 triples a group of 7) gets its triples.
pub(super) const TRIPLE_BUDGET: usize = 6;

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

/// A list's place in its postings, its heaviest weight, and its number among the lists of
/// its kind (words' or pairs'), for facts kept per list (`reverse`'s bars).
#[derive(Clone, Copy, Debug)]
pub struct List {
    pub start: u32,
    pub len: u32,
    pub heaviest: f32,
    pub slot: u32,
}

/// A group in a word's list: its signature (`Embedding::signatures`, which bounds its score
/// before its vector is read) and its weight for the word.
#[derive(Clone, Copy, Debug)]
pub struct Posting {
    pub signature: u64,
    pub weight: f32,
    pub group: u32,
}

/// A group in a pair's list, its signature, and its weights for the pair's two words (the
/// lower word id's first), each rounded up to a 65,535th (`Quantised`): 4 bytes that bound
/// its score from the posting alone.
#[derive(Clone, Copy, Debug)]
pub struct PairPosting {
    pub signature: u64,
    pub group: u32,
    pub weights: [Quantised; 2],
}

/// A group in a triple's list (its signature is read from `Embedding::signatures`: triple
/// lists are short).
#[derive(Clone, Copy, Debug)]
pub struct Span {
    pub group: u32,
}

/// A weight in `0..=1` rounded up to a 65,535th: never below the weight it stands for.
#[derive(Clone, Copy, Debug)]
pub struct Quantised(u16);

impl Quantised {
    const STEPS: f32 = u16::MAX as f32;

    pub fn up(weight: f32) -> Self {
        let steps = (weight.clamp(0.0, 1.0) * Self::STEPS).ceil();
        // f32 rounding can land a step short of the weight: one more keeps it above.
        let q = if steps / Self::STEPS < weight {
            steps + 1.0
        } else {
            steps
        };
        Self(q.min(Self::STEPS) as u16)
    }

    pub fn get(self) -> f32 {
        f32::from(self.0) / Self::STEPS
    }
}

pub struct Index {
    singles: IdMap<(u32, u32), List>,
    postings: Vec<Posting>,
    pairs: IdMap<(u32, u32, u32), List>,
    pair_postings: Vec<PairPosting>,
    triples: IdMap<(u32, u32, u32, u32), List>,
    triple_postings: Vec<Span>,
    /// Words on at least this many groups of a category have their triples listed: a
    /// triple of such words with no list is held by no group.
    pub triple_from: u32,
    /// The categories products are in, `NO_CATEGORY` included when some have none.
    pub partitions: Vec<u32>,
}

impl Index {
    /// The index of every group of `e` (`build_from`).
    pub fn build(
        e: &Embedding,
        stop: &CancellationToken,
        built: &dyn Fn(usize, usize),
    ) -> Result<Self, CatalogError> {
        Self::build_from(e, 0, stop, built)
    }

    /// The index of the groups of `e` from `first` on that have members. Builds the lists
    /// one partition (category) at a time, so that the arrays sorted hold one category's
    /// entries, and a cancel is seen between partitions; calls `built(done, all)` after each
    /// of the `all` steps (each partition's word lists, each one's pair lists, each one's
    /// triple lists).
    pub fn build_from(
        e: &Embedding,
        first: u32,
        stop: &CancellationToken,
        built: &dyn Fn(usize, usize),
    ) -> Result<Self, CatalogError> {
        let live: Vec<u32> = (first..e.group_count() as u32)
            .filter(|&g| !e.groups.row(g as usize).is_empty())
            .collect();
        let mut partitions: Vec<u32> = (0..e.categories).collect();
        if live
            .iter()
            .any(|&g| e.group_category[g as usize] == NO_CATEGORY)
        {
            partitions.push(NO_CATEGORY);
        }
        let members = groups_by_partition(e, &live, &partitions);
        let mut singles = IdMap::default();
        let words: usize = live.iter().map(|&g| e.vectors.row(g as usize).len()).sum();
        let mut postings = Vec::with_capacity(words);
        let steps = partitions.len();
        let all = 3 * steps;
        for (done, (&c, groups)) in partitions.iter().zip(&members).enumerate() {
            check(stop)?;
            single_lists(e, c, groups, &mut singles, &mut postings);
            built(done + 1, all);
        }
        let pair_budget = postings.len().saturating_mul(PAIR_BUDGET);
        let from = common_from(e, &live, &singles, (2, PAIR_FROM, pair_budget), stop)?;
        let mut pairs = IdMap::default();
        let mut pair_postings = Vec::new();
        for (done, (&c, groups)) in partitions.iter().zip(&members).enumerate() {
            check(stop)?;
            let common = Common {
                singles: &singles,
                from,
            };
            pair_lists(e, (c, groups), &common, &mut pairs, &mut pair_postings);
            built(steps + done + 1, all);
        }
        let triple_budget = postings.len().saturating_mul(TRIPLE_BUDGET);
        let triple_from = common_from(e, &live, &singles, (3, from, triple_budget), stop)?;
        let mut triples = IdMap::default();
        let mut triple_postings = Vec::new();
        for (done, (&c, groups)) in partitions.iter().zip(&members).enumerate() {
            check(stop)?;
            let common = Common {
                singles: &singles,
                from: triple_from,
            };
            triple_lists(e, (c, groups), &common, &mut triples, &mut triple_postings);
            built(2 * steps + done + 1, all);
        }
        check(stop)?;
        Ok(Self {
            singles,
            postings,
            pairs,
            pair_postings,
            triples,
            triple_postings,
            triple_from,
            partitions,
        })
    }

    /// The list of `word` in `partition`.
    pub fn single(&self, partition: u32, word: u32) -> Option<List> {
        self.singles.get(&(partition, word)).copied()
    }

    /// The list of groups holding both words (`a < b`) in `partition`, when it is indexed.
    pub fn pair(&self, partition: u32, a: u32, b: u32) -> Option<List> {
        self.pairs.get(&(partition, a, b)).copied()
    }

    /// The list of groups holding all three words (`a < b < d`) in `partition`, when any
    /// group does and they are common from `triple_from`.
    pub fn triple(&self, partition: u32, [a, b, d]: [u32; 3]) -> Option<List> {
        self.triples.get(&(partition, a, b, d)).copied()
    }

    pub fn postings(&self, list: List) -> &[Posting] {
        &self.postings[list.start as usize..(list.start + list.len) as usize]
    }

    pub fn pair_postings(&self, list: List) -> &[PairPosting] {
        &self.pair_postings[list.start as usize..(list.start + list.len) as usize]
    }

    pub fn triple_postings(&self, list: List) -> &[Span] {
        &self.triple_postings[list.start as usize..(list.start + list.len) as usize]
    }

    /// Bytes held, about: the postings and the maps of lists.
    pub fn bytes(&self) -> usize {
        use std::mem::size_of;
        let entry = |key: usize| key + size_of::<List>() + 8;
        self.postings.capacity() * size_of::<Posting>()
            + self.pair_postings.capacity() * size_of::<PairPosting>()
            + self.triple_postings.capacity() * size_of::<Span>()
            + self.singles.capacity() * entry(8)
            + self.pairs.capacity() * entry(12)
            + self.triples.capacity() * entry(16)
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

/// The `live` groups of each partition, in group order.
fn groups_by_partition(e: &Embedding, live: &[u32], partitions: &[u32]) -> Vec<Vec<u32>> {
    let at: IdMap<u32, usize> = partitions
        .iter()
        .enumerate()
        .map(|(i, &c)| (c, i))
        .collect();
    let mut members = vec![Vec::new(); partitions.len()];
    for &g in live {
        members[at[&e.group_category[g as usize]]].push(g);
    }
    members
}

/// Appends partition `c`'s word lists (its `groups`' postings, heaviest first).
fn single_lists(
    e: &Embedding,
    c: u32,
    groups: &[u32],
    singles: &mut IdMap<(u32, u32), List>,
    postings: &mut Vec<Posting>,
) {
    let mut entries: Vec<(u32, Posting)> = Vec::new();
    for &g in groups {
        let signature = e.signatures[g as usize];
        for &(t, weight) in e.vectors.row(g as usize) {
            let posting = Posting {
                signature,
                weight,
                group: g,
            };
            entries.push((t, posting));
        }
    }
    entries.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then(b.1.weight.total_cmp(&a.1.weight))
            .then(a.1.group.cmp(&b.1.group))
    });
    let base = postings.len();
    for_each_run(
        &entries,
        |a, b| a.0 == b.0,
        |start, end| {
            let (t, p) = entries[start];
            let list = List {
                start: (base + start) as u32,
                len: (end - start) as u32,
                heaviest: p.weight,
                slot: singles.len() as u32,
            };
            singles.insert((c, t), list);
        },
    );
    postings.extend(entries.into_iter().map(|(_, p)| p));
}

/// The common-word threshold for lists of `r` words: raised from `from` until their
/// postings (each group's `r`-word sets of common words) fit `budget`.
fn common_from(
    e: &Embedding,
    live: &[u32],
    singles: &IdMap<(u32, u32), List>,
    (r, mut from, budget): (usize, u32, usize),
    stop: &CancellationToken,
) -> Result<u32, CatalogError> {
    let mut common = Vec::new();
    loop {
        check(stop)?;
        let count: usize = live
            .iter()
            .map(|&g| {
                let at = Common { singles, from };
                at.words(e, g as usize, &mut common);
                choose(common.len(), r)
            })
            .sum();
        if count <= budget {
            return Ok(from);
        }
        from = from.saturating_mul(2);
    }
}

/// How many sets of `r` words `n` words make.
fn choose(n: usize, r: usize) -> usize {
    (0..r).fold(1, |c, i| c * n.saturating_sub(i) / (i + 1))
}

/// Which words of a category are common: those on at least `from` of its groups.
struct Common<'a> {
    singles: &'a IdMap<(u32, u32), List>,
    from: u32,
}

impl Common<'_> {
    /// The words of group `g` common in its category, by id, with its weights.
    fn words(&self, e: &Embedding, g: usize, out: &mut Vec<(u32, f32)>) {
        let c = e.group_category[g];
        out.clear();
        out.extend(e.vectors.row(g).iter().copied().filter(|&(t, _)| {
            self.singles
                .get(&(c, t))
                .is_some_and(|l| l.len >= self.from)
        }));
    }
}

/// Appends partition `c`'s pair lists: for each pair of words common from `from` groups,
/// the `groups` holding both.
fn pair_lists(
    e: &Embedding,
    (c, groups): (u32, &[u32]),
    at: &Common<'_>,
    pairs: &mut IdMap<(u32, u32, u32), List>,
    pair_postings: &mut Vec<PairPosting>,
) {
    let mut common = Vec::new();
    let mut entries: Vec<(u32, u32, PairPosting)> = Vec::new();
    for &g in groups {
        at.words(e, g as usize, &mut common);
        let signature = e.signatures[g as usize];
        for (x, &(a, wa)) in common.iter().enumerate() {
            for &(b, wb) in &common[x + 1..] {
                let posting = PairPosting {
                    signature,
                    group: g,
                    weights: [Quantised::up(wa), Quantised::up(wb)],
                };
                entries.push((a, b, posting));
            }
        }
    }
    entries.sort_unstable_by_key(|&(a, b, p)| (a, b, p.group));
    let base = pair_postings.len();
    for_each_run(
        &entries,
        |x, y| (x.0, x.1) == (y.0, y.1),
        |start, end| {
            let (a, b, _) = entries[start];
            let list = List {
                start: (base + start) as u32,
                len: (end - start) as u32,
                heaviest: 0.0,
                slot: pairs.len() as u32,
            };
            pairs.insert((c, a, b), list);
        },
    );
    pair_postings.extend(entries.into_iter().map(|(_, _, p)| p));
}

/// Appends partition `c`'s triple lists: for each three words common from `at.from`, the
/// `groups` holding all three.
fn triple_lists(
    e: &Embedding,
    (c, groups): (u32, &[u32]),
    at: &Common<'_>,
    triples: &mut IdMap<(u32, u32, u32, u32), List>,
    triple_postings: &mut Vec<Span>,
) {
    let mut common = Vec::new();
    let mut entries: Vec<([u32; 3], Span)> = Vec::new();
    for &g in groups {
        at.words(e, g as usize, &mut common);
        let span = Span { group: g };
        // A vector is sorted by word id, so each triple comes in id order.
        for (x, &(a, _)) in common.iter().enumerate() {
            for (y, &(b, _)) in common.iter().enumerate().skip(x + 1) {
                for &(d, _) in &common[y + 1..] {
                    entries.push(([a, b, d], span));
                }
            }
        }
    }
    entries.sort_unstable_by_key(|&(words, p)| (words, p.group));
    let base = triple_postings.len();
    for_each_run(
        &entries,
        |x, y| x.0 == y.0,
        |start, end| {
            let [a, b, d] = entries[start].0;
            let list = List {
                start: (base + start) as u32,
                len: (end - start) as u32,
                heaviest: 0.0,
                slot: triples.len() as u32,
            };
            triples.insert((c, a, b, d), list);
        },
    );
    triple_postings.extend(entries.into_iter().map(|(_, p)| p));
}
