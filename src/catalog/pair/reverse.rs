//! The reverse search of an incremental pair: for each changed or added product, every
//! unchanged product whose top k it can now enter — exactly, by the symmetry of the score:
//! the changed product's own query meets the products it may now beat.
//!
//! An unchanged product `u` takes a changed `a` when `score(a, u)` reaches `u`'s *bar* (its
//! k-th score, or `min_score` while it has fewer than k). Bars differ from product to
//! product, so each list carries the lowest bar of the groups in it (`Bars`): a product that
//! shares with the query exactly the open set `S` lies in the list of every word and pair of
//! `S`, so its bar is at least the highest of their lowest bars. The search reads lists
//! (`cover`) until no open set's bound reaches that; every product it meets is scored
//! exactly and compared with its own bar.

use std::sync::atomic::{AtomicU32, Ordering};

use tokio_util::sync::CancellationToken;

use super::cover::{Cover, Next, BOUND_SLACK, TOP};
use super::embed::{dot, Embedding};
use super::index::{Index, List};
use super::score::{on_every_core, reads};
use crate::catalog::CatalogError;

const MASKS: usize = 1 << TOP;

/// An unchanged product `u` may take changed product `j` at score `s`: (u, j, s).
pub type Entry = (u32, u32, f32);

/// The bar of every product searched for (`f32::INFINITY` for one whose list is made anew
/// anyway), and the lowest per group and, for each index, per list.
pub struct Bars {
    pub product: Vec<f32>,
    group: Vec<f32>,
    lists: Vec<ListBars>,
}

/// The lowest bar of each of one index's lists, by slot: made the first time a search
/// needs it (`UNSET` until then), so that a run reads only the lists its changed products
/// meet, not every posting of the catalogue. Workers that race on a list make the same
/// value.
struct ListBars {
    single: Vec<AtomicU32>,
    pair: Vec<AtomicU32>,
}

/// A list's bar not made yet: a NaN no lowest of bars is.
const UNSET: u32 = 0x7fc0_dead;

impl Bars {
    pub fn new(e: &Embedding, indexes: &[Index], product: Vec<f32>) -> Self {
        let group: Vec<f32> = (0..e.group_count())
            .map(|g| lowest(e.groups.row(g).iter().map(|&i| product[i as usize])))
            .collect();
        let unset = |n: usize| (0..n).map(|_| AtomicU32::new(UNSET)).collect();
        let lists = indexes
            .iter()
            .map(|index| {
                let (w, p) = index.list_counts();
                ListBars {
                    single: unset(w),
                    pair: unset(p),
                }
            })
            .collect();
        Self {
            product,
            group,
            lists,
        }
    }
}

/// A list's bar from its slot, made from `postings` when not made yet.
fn bar_of(slot: &AtomicU32, postings: impl FnOnce() -> f32) -> f32 {
    let bits = slot.load(Ordering::Relaxed);
    if bits != UNSET {
        return f32::from_bits(bits);
    }
    let bar = postings();
    slot.store(bar.to_bits(), Ordering::Relaxed);
    bar
}

/// For each group in `groups` (those holding changed products; `changed[i]` marks them),
/// every unchanged product whose top k a changed member can enter.
pub fn reverse(
    e: &Embedding,
    indexes: &[Index],
    bars: &Bars,
    groups: &[u32],
    changed: &[bool],
    stop: &CancellationToken,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<Entry>, CatalogError> {
    let search = Search {
        e,
        indexes,
        bars,
        changed,
    };
    on_every_core(
        groups,
        stop,
        progress,
        || Reverse {
            seen: vec![0; e.group_count()],
            epoch: 0,
            cover: Cover::new(),
            floor: [0.0; MASKS],
        },
        |r, g, out| r.group(&search, g as usize, out),
    )
}

struct Search<'a> {
    e: &'a Embedding,
    indexes: &'a [Index],
    bars: &'a Bars,
    changed: &'a [bool],
}

/// The index being read and its lists' bars.
struct At<'a> {
    index: &'a Index,
    bars: &'a ListBars,
    group: &'a [f32],
}

impl At<'_> {
    /// The lowest bar of the groups in word list `list`.
    fn single(&self, list: List) -> f32 {
        bar_of(&self.bars.single[list.slot as usize], || {
            lowest(
                self.index
                    .postings(list)
                    .iter()
                    .map(|p| self.group[p.group as usize]),
            )
        })
    }

    /// The lowest bar of the groups in pair list `list`.
    fn pair(&self, list: List) -> f32 {
        bar_of(&self.bars.pair[list.slot as usize], || {
            let postings = self.index.pair_postings(list).iter();
            lowest(postings.map(|p| self.group[p.group as usize]))
        })
    }
}

/// One worker's reusable state.
struct Reverse {
    seen: Vec<u32>,
    epoch: u32,
    cover: Cover,
    /// Per open subset of the top words: the lowest bar a product sharing it can have.
    floor: [f32; MASKS],
}

impl Reverse {
    fn group(&mut self, s: &Search<'_>, g: usize, out: &mut Vec<Entry>) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.seen.fill(0);
            self.epoch = 1;
        }
        self.seen[g] = self.epoch;
        let first = s.e.groups.row(g)[0] as usize;
        // The group's own unchanged members (kept, not queried) meet its changed ones at
        // the group's own score, in no list.
        let mine = s.e.vector(first);
        record(s, g, g, dot(mine, mine), out);
        let category = s.e.traits[first].category;
        for (x, index) in s.indexes.iter().enumerate() {
            let at = At {
                index,
                bars: &s.bars.lists[x],
                group: &s.bars.group,
            };
            for &p in &index.partitions {
                if reads(category, p) && self.cover.reset(index, p, s.e.vector(first)) {
                    self.floors(&at);
                    self.search(s, &at, g, out);
                }
            }
        }
    }

    /// The lowest bar of a product sharing each subset of the top words: the highest of the
    /// lowest bars of the subset's words and indexed pairs.
    fn floors(&mut self, at: &At<'_>) {
        let c = &self.cover;
        self.floor[0] = f32::NEG_INFINITY;
        for m in 1..(1usize << c.top) {
            let low = m.trailing_zeros() as usize;
            let mut floor = self.floor[m & (m - 1)].max(at.single(c.words[low].list));
            for j in low + 1..c.top {
                if m & (1 << j) != 0 {
                    if let Some(list) = c.pair(low, j) {
                        floor = floor.max(at.pair(list));
                    }
                }
            }
            self.floor[m] = floor;
        }
    }

    /// The open set whose bound most exceeds its floor, if any still reaches it.
    fn reaching(&self, at: &At<'_>) -> Option<usize> {
        let c = &self.cover;
        let tail_floor = c
            .unread_tail()
            .map(|k| at.single(c.words[k].list))
            .fold(f32::INFINITY, f32::min);
        let mut best: Option<(f32, usize)> = None;
        let mut open = c.open();
        while open != 0 {
            let m = open.trailing_zeros() as usize;
            open &= open - 1;
            let floor = if m == 0 { tail_floor } else { self.floor[m] };
            let bound = if m == 0 {
                c.tail()
            } else {
                c.sum(m) + c.tail()
            };
            let margin = bound + BOUND_SLACK - floor;
            if margin >= 0.0 && best.is_none_or(|(b, _)| margin > b) {
                best = Some((margin, m));
            }
        }
        best.map(|(_, m)| m)
    }

    fn search(&mut self, s: &Search<'_>, at: &At<'_>, g: usize, out: &mut Vec<Entry>) {
        let first = s.e.groups.row(g)[0] as usize;
        let mine = s.e.vector(first);
        while let Some(set) = self.reaching(at) {
            let Some(next) = self.cover.next(set) else {
                return;
            };
            match next {
                Next::Pair(i, j) => {
                    let list = self.cover.pair(i, j).expect("chosen among indexed pairs");
                    let bound = self.cover.pair_posting_bound(i, j);
                    for p in at.index.pair_postings(list) {
                        if bound(p) >= s.bars.group[p.group as usize] {
                            self.visit(s, g, mine, p.group as usize, p.signature, out);
                        }
                    }
                }
                Next::Triple(i, j, k) => {
                    let list = self.cover.triple(i, j, k).expect("chosen among triples");
                    let bound = self.cover.triple_bound(i, j, k) + BOUND_SLACK;
                    for p in at.index.triple_postings(list) {
                        if bound >= s.bars.group[p.group as usize] {
                            let signature = s.e.signatures[p.group as usize];
                            self.visit(s, g, mine, p.group as usize, signature, out);
                        }
                    }
                }
                Next::Word(i) => {
                    let w = self.cover.words[i];
                    let rest = self.cover.rest(i);
                    let floor = at.single(w.list);
                    for p in at.index.postings(w.list) {
                        let bound = w.weight * p.weight + rest + BOUND_SLACK;
                        if bound < floor {
                            break;
                        }
                        if bound >= s.bars.group[p.group as usize] {
                            self.visit(s, g, mine, p.group as usize, p.signature, out);
                        }
                    }
                }
            }
            self.cover.settle(next);
        }
    }

    /// Scores group `h` (of `signature`) once and records each of its members whose bar the
    /// score reaches; a group whose signature bounds its score below its bar is passed over.
    fn visit(
        &mut self,
        s: &Search<'_>,
        g: usize,
        mine: &[(u32, f32)],
        h: usize,
        signature: u64,
        out: &mut Vec<Entry>,
    ) {
        if self.seen[h] == self.epoch || s.bars.group[h] == f32::INFINITY {
            return;
        }
        if self.cover.below(signature, s.bars.group[h]) {
            return;
        }
        self.seen[h] = self.epoch;
        let score = dot(mine, s.e.vectors.row(h));
        record(s, g, h, score, out);
    }
}

/// Records each member of group `h` whose bar `score` reaches, with each changed member
/// of group `g` it is comparable with.
fn record(s: &Search<'_>, g: usize, h: usize, score: f32, out: &mut Vec<Entry>) {
    if score < s.bars.group[h] {
        return;
    }
    for &u in s.e.groups.row(h) {
        if score < s.bars.product[u as usize] {
            continue;
        }
        for &j in s.e.groups.row(g) {
            if s.changed[j as usize] && j != u && s.e.comparable(u as usize, j as usize) {
                out.push((u, j, score));
            }
        }
    }
}

/// The lowest of `values` (infinity for none).
fn lowest(values: impl Iterator<Item = f32>) -> f32 {
    values.fold(f32::INFINITY, f32::min)
}
