//! The sets of query words an unmet product may still share with a query, and which list to
//! read next: the bookkeeping behind both searches (`score`'s top k, `reverse`'s "whose top
//! k can this enter"). See `score` for why reading lists this way is exact.
//!
//! A product met in no list read so far shares with the query a set `S` of its words that
//! holds no read word and no read pair: an *open* set. Sets are tracked exactly over the
//! query's `TOP` heaviest words (pairs and triples are indexed among those), and the lighter
//! words are counted whole until their own list is read. Three top words common enough to
//! have their triples listed (`Index::triple_from`) but no list are held by no product: the
//! sets holding them are closed from the start.
//!
//! The cover also bounds a group's whole score from its signature alone (`bound`), read
//! beside its posting: a list read through long postings scores only the groups whose
//! shared bits can still reach the bar (few, when every word is on a tenth of the catalogue).

use super::embed::word_bit;
use super::index::{Index, List, PairPosting};

/// The query's heaviest words that sets are tracked over (and pairs read among).
pub const TOP: usize = 6;
const MASKS: usize = 1 << TOP;

/// Slack on score bounds for f32 rounding: a bound this close to the bar is not pruned.
pub const BOUND_SLACK: f32 = 1e-5;

/// Bit `m` set in `CONTAINS[i]` when subset `m` of the top words holds word `i`.
const CONTAINS: [u64; TOP] = {
    let mut out = [0u64; TOP];
    let mut i = 0;
    while i < TOP {
        let mut m = 0;
        while m < MASKS {
            if m & (1 << i) != 0 {
                out[i] |= 1 << m;
            }
            m += 1;
        }
        i += 1;
    }
    out
};

/// The subsets of the top words holding words `i`, `j` and `k`, as a bit set.
fn holding_all(i: usize, j: usize, k: usize) -> u64 {
    CONTAINS[i] & CONTAINS[j] & CONTAINS[k]
}

/// A query word in one partition: its weight, its bound and its list.
#[derive(Clone, Copy)]
pub struct Word {
    pub weight: f32,
    /// The query's weight times the heaviest weight in the list: the most the word adds.
    pub bound: f32,
    pub list: List,
    pub word: u32,
}

/// The next list to read: a word's (by its place in `Cover::words`), a pair's or a triple's.
#[derive(Clone, Copy)]
pub enum Next {
    Word(usize),
    Pair(usize, usize),
    Triple(usize, usize, usize),
}

/// One query's open sets in one partition; reused from query to query.
pub struct Cover {
    /// The query's words that have a list in the partition, heaviest bound first.
    pub words: Vec<Word>,
    /// Each subset of the top words' summed bounds.
    sums: [f32; MASKS],
    /// Bit `m` set while subset `m` of the top words is open.
    open: u64,
    /// The indexed pair lists among the top words, by (i, j) with i < j.
    pairs: [[Option<List>; TOP]; TOP],
    /// The indexed triple lists among the top words, by (i, j, k) with i < j < k.
    triples: [[[Option<List>; TOP]; TOP]; TOP],
    /// How many of `words` are top words.
    pub top: usize,
    /// The summed bounds of the lighter words not read yet.
    tail: f32,
    tail_read: Vec<bool>,
    /// The query's words in the partition as a signature (`Embedding::signatures`), and
    /// per bit the summed bounds of its words on that bit (`bound`).
    signature: u64,
    bit_bounds: [f32; 64],
    /// The heaviest of `bit_bounds`: a first, branch-free bound (shared bits times it).
    heaviest_bit: f32,
}

impl Cover {
    pub fn new() -> Self {
        Self {
            words: Vec::new(),
            sums: [0.0; MASKS],
            open: 0,
            pairs: [[None; TOP]; TOP],
            triples: [[[None; TOP]; TOP]; TOP],
            top: 0,
            tail: 0.0,
            tail_read: Vec::new(),
            signature: 0,
            bit_bounds: [0.0; 64],
            heaviest_bit: 0.0,
        }
    }

    /// Starts a query of `mine` in `partition`; false when none of its words is there.
    pub fn reset(&mut self, index: &Index, partition: u32, mine: &[(u32, f32)]) -> bool {
        self.words.clear();
        for &(t, weight) in mine {
            if let Some(list) = index.single(partition, t) {
                self.words.push(Word {
                    weight,
                    bound: weight * list.heaviest,
                    list,
                    word: t,
                });
            }
        }
        if self.words.is_empty() {
            return false;
        }
        self.words
            .sort_unstable_by(|a, b| b.bound.total_cmp(&a.bound));
        self.signature = 0;
        self.bit_bounds = [0.0; 64];
        for w in &self.words {
            let bit = word_bit(w.word);
            self.signature |= bit;
            self.bit_bounds[bit.trailing_zeros() as usize] += w.bound;
        }
        self.heaviest_bit = self.bit_bounds.iter().copied().fold(0.0, f32::max);
        let top = self.words.len().min(TOP);
        self.top = top;
        for m in 1..(1usize << top) {
            let low = m.trailing_zeros() as usize;
            self.sums[m] = self.sums[m & (m - 1)] + self.words[low].bound;
        }
        for i in 0..top {
            for j in i + 1..top {
                let (a, b) = (self.words[i].word, self.words[j].word);
                self.pairs[i][j] = index.pair(partition, a.min(b), a.max(b));
            }
        }
        self.open = if top == TOP {
            u64::MAX
        } else {
            (1u64 << (1 << top)) - 1
        };
        self.find_triples(index, partition);
        self.tail = self.words[top..].iter().map(|w| w.bound).sum();
        self.tail_read.clear();
        self.tail_read.resize(self.words.len() - top, false);
        true
    }

    /// Looks up the triple lists among the top words; closes the sets holding a triple of
    /// words common enough to be listed that has no list (no product holds all three).
    fn find_triples(&mut self, index: &Index, partition: u32) {
        let common = |w: &Word| w.list.len >= index.triple_from;
        for i in 0..self.top {
            for j in i + 1..self.top {
                for k in j + 1..self.top {
                    let (a, b, c) = (self.words[i], self.words[j], self.words[k]);
                    let mut ids = [a.word, b.word, c.word];
                    ids.sort_unstable();
                    let list = index.triple(partition, ids);
                    self.triples[i][j][k] = list;
                    if list.is_none() && common(&a) && common(&b) && common(&c) {
                        self.open &= !holding_all(i, j, k);
                    }
                }
            }
        }
    }

    /// The most a group of `signature` (`Embedding::signatures`) in the partition can score
    /// against the query: the bounds of the query's words on the bits it shares (a word's
    /// bound is the heaviest weight a group of the partition gives it, times the query's).
    /// Whether a group of `signature` cannot reach `bar`, with `BOUND_SLACK`: first each
    /// shared bit at the heaviest bit's bound (no branch per bit: most groups of a long
    /// list are settled so), then each at its own.
    pub fn below(&self, signature: u64, bar: f32) -> bool {
        let shared = (signature & self.signature).count_ones() as f32;
        shared * self.heaviest_bit + BOUND_SLACK < bar || self.bound(signature) + BOUND_SLACK < bar
    }

    /// Without `BOUND_SLACK`.
    fn bound(&self, signature: u64) -> f32 {
        let mut shared = signature & self.signature;
        let mut bound = 0.0;
        while shared != 0 {
            bound += self.bit_bounds[shared.trailing_zeros() as usize];
            shared &= shared - 1;
        }
        bound
    }

    /// The open subsets of the top words, as a bit set.
    pub fn open(&self) -> u64 {
        self.open
    }

    /// Subset `m`'s summed bounds.
    pub fn sum(&self, m: usize) -> f32 {
        self.sums[m]
    }

    /// The summed bounds of the lighter words not read yet.
    pub fn tail(&self) -> f32 {
        self.tail
    }

    /// The lighter words not read yet, by place in `words`.
    pub fn unread_tail(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.tail_read.len())
            .filter(|&k| !self.tail_read[k])
            .map(|k| self.top + k)
    }

    /// The pair list of top words `i < j`, when indexed.
    pub fn pair(&self, i: usize, j: usize) -> Option<List> {
        self.pairs[i][j]
    }

    /// The heaviest open set: (its bound, with every unread lighter word, and its subset
    /// of the top words).
    pub fn heaviest(&self) -> (f32, usize) {
        let (mut best, mut at) = (f32::NEG_INFINITY, 0);
        let mut open = self.open;
        while open != 0 {
            let m = open.trailing_zeros() as usize;
            open &= open - 1;
            if self.sums[m] > best {
                best = self.sums[m];
                at = m;
            }
        }
        (best.max(0.0) + self.tail, at)
    }

    /// The most a product in word `i`'s list can score besides that word: the heaviest open
    /// set holding `i`, without `i`.
    pub fn rest(&self, i: usize) -> f32 {
        let bound = self.words[i].bound;
        if i >= self.top {
            return self.heaviest().0 - bound;
        }
        let mut best = f32::NEG_INFINITY;
        let mut open = self.open & CONTAINS[i];
        while open != 0 {
            let m = open.trailing_zeros() as usize;
            open &= open - 1;
            best = best.max(self.sums[m]);
        }
        best - bound + self.tail
    }

    /// The most a product in the pair list of top words `i` and `j` can score: the
    /// heaviest open set holding both, with every unread lighter word.
    pub fn pair_bound(&self, i: usize, j: usize) -> f32 {
        let mut best = f32::NEG_INFINITY;
        let mut open = self.open & CONTAINS[i] & CONTAINS[j];
        while open != 0 {
            let m = open.trailing_zeros() as usize;
            open &= open - 1;
            best = best.max(self.sums[m]);
        }
        best + self.tail
    }

    /// The triple list of top words `i < j < k`, when indexed.
    pub fn triple(&self, i: usize, j: usize, k: usize) -> Option<List> {
        self.triples[i][j][k]
    }

    /// The most a product in the triple list of top words `i`, `j` and `k` can score: the
    /// heaviest open set holding all three, with every unread lighter word.
    pub fn triple_bound(&self, i: usize, j: usize, k: usize) -> f32 {
        let mut best = f32::NEG_INFINITY;
        let mut open = self.open & holding_all(i, j, k);
        while open != 0 {
            let m = open.trailing_zeros() as usize;
            open &= open - 1;
            best = best.max(self.sums[m]);
        }
        best + self.tail
    }

    /// The most the product of a posting in the pair list of top words `i` and `j` can
    /// score, with `BOUND_SLACK`: its own weights for the two words (`PairPosting`) times the
    /// query's, and the rest of the heaviest open set holding both with every unread lighter
    /// word. A product met first in that list shares such a set.
    pub fn pair_posting_bound(&self, i: usize, j: usize) -> impl Fn(&PairPosting) -> f32 {
        let (a, b) = (self.words[i], self.words[j]);
        let rest = self.pair_bound(i, j) - a.bound - b.bound + BOUND_SLACK;
        // The posting's weights are the lower word id's first.
        let (low, high) = if a.word < b.word {
            (a.weight, b.weight)
        } else {
            (b.weight, a.weight)
        };
        move |p| low * p.weights[0].get() + high * p.weights[1].get() + rest
    }

    /// The shortest list that holds the open set `set` (of the top words) together with
    /// the unread lighter words; `None` when nothing is left to read.
    pub fn next(&self, set: usize) -> Option<Next> {
        let mut best: Option<(u32, Next)> = None;
        let mut consider = |len: u32, next: Next| {
            if best.as_ref().is_none_or(|(l, _)| len < *l) {
                best = Some((len, next));
            }
        };
        for i in 0..self.top {
            if set & (1 << i) == 0 {
                continue;
            }
            consider(self.words[i].list.len, Next::Word(i));
            for j in i + 1..self.top {
                if set & (1 << j) == 0 {
                    continue;
                }
                if let Some(list) = self.pairs[i][j] {
                    consider(list.len, Next::Pair(i, j));
                }
                for k in j + 1..self.top {
                    if let (true, Some(list)) = (set & (1 << k) != 0, self.triples[i][j][k]) {
                        consider(list.len, Next::Triple(i, j, k));
                    }
                }
            }
        }
        for k in self.unread_tail() {
            consider(self.words[k].list.len, Next::Word(k));
        }
        best.map(|(_, next)| next)
    }

    /// Marks a list read: every set it holds is closed.
    pub fn settle(&mut self, read: Next) {
        match read {
            Next::Pair(i, j) => self.open &= !(CONTAINS[i] & CONTAINS[j]),
            Next::Triple(i, j, k) => self.open &= !holding_all(i, j, k),
            Next::Word(i) if i < self.top => self.open &= !CONTAINS[i],
            Next::Word(i) => {
                self.tail -= self.words[i].bound;
                self.tail_read[i - self.top] = true;
            }
        }
    }
}
