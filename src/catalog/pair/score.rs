//! Scoring: each queried group's members' exact best `Ask::depth` (the top k and a few more), on
//! every core.
//!
//! **Why it is exact.** A product `u` met in no list read so far shares with the query some
//! set `S` of its words; its score is at most the sum over `S` of each word's *bound* (the
//! query's weight times the heaviest weight in that word's list). Reading a word's list
//! meets every product whose `S` holds the word; reading a pair's list every product whose
//! `S` holds both; a triple's, every product whose `S` holds all three. So after a set `R` of
//! lists was read, an unmet product's `S` holds no read word, pair or triple, and the most it
//! can score is `U(R)`, the heaviest such set.
//! The query reads lists until `U(R)` is below the current bar (the k-th best so far, or
//! `min_score` while fewer than k were found) and scores every product it meets exactly;
//! nothing that could enter the top k is left unmet. The bookkeeping of open sets is in
//! `cover`.
//!
//! **Which list next.** One that holds the heaviest unread set together — the shortest of
//! its words', indexed pairs' and indexed triples' lists. A word's list is read heaviest first and left as
//! soon as the rest of it cannot reach the bar (MaxScore's cut), which also settles the word.
//! The group's own members, at their own score, raise the bar before any list is read.
//!
//! Workers claim groups in runs of `QUERIES_PER_CLAIM` and check the cancel token between
//! runs, so a cancel is seen within milliseconds; each worker reuses its scratch space.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio_util::sync::CancellationToken;

use super::cover::{Cover, Next, BOUND_SLACK};
use super::embed::{categories_meet, dot, price_of, prices_meet, Embedding};
use super::index::Index;
use super::CORES;
use crate::catalog::products::NO_CATEGORY;
use crate::catalog::rows::Rows;
use crate::catalog::{check, CatalogError};

/// From how many queries scoring is spread over threads.
pub const PARALLEL_FROM: usize = 2048;

/// How many groups (queries) a worker claims at a time: small enough that a cancel is seen
/// within milliseconds and workers finish together, large enough that the shared counter
/// is not contended.
pub const QUERIES_PER_CLAIM: usize = 64;

/// From how many groups scored a query whose bar is still `min_score` passes over groups no
/// price of its members meets (`Query::visit`): most queries fill their lists before, and
/// the price range read first would be one more cache miss each.
const LONG_QUERY: usize = 64;

/// A product's neighbours: (product, score), best first.
pub type Best = Vec<(u32, f32)>;

/// How many neighbours beyond the top k a pair keeps per product (`Ask::depth`): when an
/// incremental pair finds one of a product's top k changed or removed, the next best are
/// already known and the product is not queried again. Each one costs a full pair a lower bar
/// (more lists read) and the state 8 bytes a product.
pub const KEPT_BEYOND_TOP_K: usize = 2;

/// What is asked of a pair: how many neighbours, scoring at least what.
#[derive(Clone, Copy, Debug)]
pub struct Ask {
    pub top_k: usize,
    pub min_score: f32,
}

impl Ask {
    /// How many neighbours a query keeps per product: the top k and `KEPT_BEYOND_TOP_K` more.
    pub fn depth(&self) -> usize {
        if self.top_k == 0 {
            0
        } else {
            self.top_k + KEPT_BEYOND_TOP_K
        }
    }
}

/// Runs `work(worker state, item)` over `items` on every core (one core below
/// `PARALLEL_FROM`), in claims of `QUERIES_PER_CLAIM`, until done or cancelled; calls
/// `progress(done, total)` now and then. Answers what each worker collected.
pub fn on_every_core<S, T: Send>(
    items: &[u32],
    stop: &CancellationToken,
    progress: &(dyn Fn(usize, usize) + Sync),
    state: impl Fn() -> S + Sync,
    work: impl Fn(&mut S, u32, &mut Vec<T>) + Sync,
) -> Result<Vec<T>, CatalogError> {
    let total = items.len();
    let workers = if total < PARALLEL_FROM { 1 } else { *CORES };
    let next = AtomicUsize::new(0);
    let every = (total / 40).max(QUERIES_PER_CLAIM);
    let collected: Vec<Vec<T>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                let (next, state, work) = (&next, &state, &work);
                scope.spawn(move || {
                    let mut mine = state();
                    let mut out = Vec::new();
                    while !stop.is_cancelled() {
                        let start = next.fetch_add(QUERIES_PER_CLAIM, Ordering::Relaxed);
                        if start >= total {
                            break;
                        }
                        let end = (start + QUERIES_PER_CLAIM).min(total);
                        for &item in &items[start..end] {
                            work(&mut mine, item, &mut out);
                        }
                        if start / every != end / every {
                            progress(end, total);
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
                    .expect("a scoring worker does not panic: it reads its inputs")
            })
            .collect()
    });
    check(stop)?;
    Ok(collected.into_iter().flatten().collect())
}

/// The best `ask.depth()` of every product of `queries`, as (product, neighbours). Each row of
/// `queries` is one query: products of one group (all of its members for a full pair, those
/// whose list must be made anew for an incremental one). `indexes` together list every group
/// with members, each in one of them (an incremental pair's kept index and the index of the
/// groups made since): a query reads each until nothing unmet in it can reach its bar.
pub fn score(
    e: &Embedding,
    indexes: &[Index],
    queries: &Rows<u32>,
    ask: &Ask,
    stop: &CancellationToken,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<(u32, Best)>, CatalogError> {
    let rows: Vec<u32> = (0..queries.len() as u32).collect();
    on_every_core(
        &rows,
        stop,
        progress,
        || Query::new(e.group_count()),
        |query, q, out| query.top_k(e, indexes, queries.row(q as usize), ask, out),
    )
}

/// Whether a query of `category` reads `partition`: its own, and the products without one
/// (a product without one reads them all).
pub fn reads(category: u32, partition: u32) -> bool {
    category == NO_CATEGORY || partition == category || partition == NO_CATEGORY
}

/// One worker's reusable state for top-k queries.
struct Query {
    /// `seen[h] == epoch` when group `h` was already scored for the current query.
    seen: Vec<u32>,
    epoch: u32,
    cover: Cover,
    /// Per member of the queried group: its best so far, (score, product), best first.
    best: Vec<Vec<(f32, u32)>>,
    /// Groups scored for the current query.
    scored: usize,
}

/// The query being answered: the members of its group it answers, and their vector.
struct Asked<'a> {
    e: &'a Embedding,
    members: &'a [u32],
    mine: &'a [(u32, f32)],
    ask: &'a Ask,
}

impl Query {
    fn new(groups: usize) -> Self {
        Self {
            seen: vec![0; groups],
            epoch: 0,
            cover: Cover::new(),
            best: Vec::new(),
            scored: 0,
        }
    }

    /// The best `ask.depth()` of each of `members` (products of one group), appended to `out`.
    fn top_k(
        &mut self,
        e: &Embedding,
        indexes: &[Index],
        members: &[u32],
        ask: &Ask,
        out: &mut Vec<(u32, Best)>,
    ) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.seen.fill(0);
            self.epoch = 1;
        }
        self.scored = 0;
        let first = members[0] as usize;
        let g = e.group_of[first] as usize;
        self.best.clear();
        self.best.resize_with(members.len(), Vec::new);
        if ask.top_k > 0 {
            self.seen[g] = self.epoch;
            let mine = e.vector(first);
            let q = Asked {
                e,
                members,
                mine,
                ask,
            };
            let own = dot(mine, mine);
            let mut bar = if own >= ask.min_score {
                self.offer(&q, g, own)
            } else {
                ask.min_score
            };
            let category = e.traits[first].category;
            for index in indexes {
                for &p in &index.partitions {
                    if reads(category, p) {
                        bar = self.search(&q, index, p, bar);
                    }
                }
            }
        }
        for (&i, best) in members.iter().zip(self.best.drain(..)) {
            out.push((i, best.into_iter().map(|(s, j)| (j, s)).collect()));
        }
    }

    /// Reads `partition`'s lists until no unmet product of it can reach the bar (see the
    /// module doc); returns the bar.
    fn search(&mut self, q: &Asked<'_>, index: &Index, partition: u32, mut bar: f32) -> f32 {
        if !self.cover.reset(index, partition, q.mine) {
            return bar;
        }
        loop {
            let (most, set) = self.cover.heaviest();
            if most + BOUND_SLACK < bar {
                return bar;
            }
            let Some(next) = self.cover.next(set) else {
                return bar;
            };
            match next {
                Next::Pair(i, j) => {
                    let list = self.cover.pair(i, j).expect("chosen among indexed pairs");
                    for p in index.pair_postings(list) {
                        bar = self.visit(q, p.group, p.signature, bar);
                    }
                }
                Next::Triple(i, j, k) => {
                    let list = self.cover.triple(i, j, k).expect("chosen among triples");
                    for p in index.triple_postings(list) {
                        let signature = q.e.signatures[p.group as usize];
                        bar = self.visit(q, p.group, signature, bar);
                    }
                }
                Next::Word(i) => {
                    let w = self.cover.words[i];
                    let rest = self.cover.rest(i);
                    for p in index.postings(w.list) {
                        if w.weight * p.weight + rest + BOUND_SLACK < bar {
                            break;
                        }
                        bar = self.visit(q, p.group, p.signature, bar);
                    }
                }
            }
            self.cover.settle(next);
        }
    }

    /// Scores group `h` (of `signature`) once per query and offers it. A group whose
    /// signature bounds its score below the bar is passed over unread and not marked seen:
    /// the bar only rises, so it never will reach it.
    fn visit(&mut self, q: &Asked<'_>, h: u32, signature: u64, bar: f32) -> f32 {
        if self.cover.below(signature, bar) {
            return bar;
        }
        let h = h as usize;
        if self.seen[h] == self.epoch {
            return bar;
        }
        // A long query whose bar is still `min_score` has a member that few products are
        // comparable with: a group none of its members' prices meets is passed over unscored
        // (`take` would refuse each of its members; not marked seen, as it stays so).
        if self.scored >= LONG_QUERY
            && bar <= q.ask.min_score
            && !q
                .members
                .iter()
                .any(|&i| q.e.price_meets_group(i as usize, h))
        {
            return bar;
        }
        self.scored += 1;
        self.seen[h] = self.epoch;
        let s = dot(q.mine, q.e.vectors.row(h));
        // Below the bar no member takes it (the bar is the lowest any member still needs).
        if s >= bar {
            self.offer(q, h, s)
        } else {
            bar
        }
    }

    /// Offers group `h`, scoring `s`, to every member of the queried group (each keeps only
    /// comparable products other than itself); returns the new bar: the lowest score any
    /// member still needs to beat.
    fn offer(&mut self, q: &Asked<'_>, h: usize, s: f32) -> f32 {
        let (e, k) = (q.e, q.ask.depth());
        let mut bar = f32::INFINITY;
        for (&i, best) in q.members.iter().zip(self.best.iter_mut()) {
            // Every member of `h` scores `s`: below a full list's last, none of them enters.
            if best.len() < k || s >= best[k - 1].0 {
                take(e, i as usize, h, s, k, best);
            }
            bar = bar.min(if best.len() < k {
                q.ask.min_score
            } else {
                best[k - 1].0
            });
        }
        bar
    }
}

/// Puts into product `i`'s `best` (its best `k` so far, best first) the members of group
/// `h`, all scoring `s`, that are comparable with it and rank among the `k`; reads the
/// members' prices beside them (`Embedding::member_price`), not their traits. Members come
/// in key order (`Embedding::groups`), so once a comparable one fails to rank, no later one
/// ranks unless it has `i`'s material and the one that failed had not: for a product
/// without a material the rest of the group is not read.
fn take(e: &Embedding, i: usize, h: usize, s: f32, k: usize, best: &mut Vec<(f32, u32)>) {
    let me = &e.traits[i];
    // A group's members share its category.
    if !categories_meet(me.category, e.group_category[h]) {
        return;
    }
    let (price, material) = (price_of(me), me.material);
    let (start, end) = e.groups.span(h);
    let (start, end) = (start as usize, end as usize);
    let members = &e.groups.items()[start..end];
    for (&j, &p) in members.iter().zip(&e.member_price[start..end]) {
        let j = j as usize;
        if j == i || !prices_meet(price, p) {
            continue;
        }
        let ranks = |other: &(f32, u32)| e.ranks_before(i, (s, j), (other.0, other.1 as usize));
        if best.len() == k && !ranks(&best[k - 1]) {
            if material.is_none() || e.traits[j].material == material {
                break;
            }
            continue;
        }
        let at = best.iter().position(ranks).unwrap_or(best.len());
        best.insert(at, (s, j as u32));
        best.truncate(k);
    }
}
