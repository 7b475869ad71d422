//! An incremental pair's re-scoring: who is queried anew, whose kept list is refilled or
//! merged with what entered it, and which table rows moved (the rule is in `incremental`'s
//! doc).

use tokio_util::sync::CancellationToken;

use super::embed::Embedding;
use super::full::{known_of, scored};
use super::incremental::{Built, Rescored};
use super::index::Index;
use super::reverse::{reverse, Bars, Entry};
use super::score::{Ask, Best, PARALLEL_FROM};
use crate::catalog::products::{Known, Pairing};
use crate::catalog::rows::Rows;
use crate::catalog::{CatalogError, Monotonic};

/// Who is re-scored, and how.
pub struct Plan {
    /// Products queried anew: the changed and added ones, and those whose kept list no
    /// longer proves their top k. Only they: a group's other members keep their lists (a
    /// group of a thousand identical names that one product left is not queried a
    /// thousand times over).
    requeried: Vec<bool>,
    /// Groups holding a changed product: each searches whose list it can enter.
    changed_groups: Vec<u32>,
    /// Each product's bar for the reverse search (`f32::INFINITY` when requeried): what a
    /// changed product must score to enter its list.
    bars: Vec<f32>,
    /// The state's products in the new indices.
    mapped: Mapped,
}

/// The new index of each of the state's products kept unchanged (`u32::MAX` otherwise), and
/// what it tells of the state's lists.
struct Mapped {
    old_to_new: Vec<u32>,
    /// A bit per state's product changed or removed since: what deciding whether a kept
    /// list stands reads (a million lists' neighbours looked up in an array 64 times
    /// smaller than `old_to_new`, which stays in cache).
    gone: Vec<u64>,
}

impl Plan {
    pub fn new(
        state: &Pairing,
        e: &Embedding,
        old_of: &[Option<u32>],
        changed: &[bool],
        ask: &Ask,
    ) -> Self {
        let mut old_to_new = vec![u32::MAX; state.keys.len()];
        for (u, o) in old_of.iter().enumerate() {
            if let Some(o) = o {
                old_to_new[*o as usize] = u as u32;
            }
        }
        let mut gone = vec![0u64; state.keys.len().div_ceil(64)];
        for (o, &u) in old_to_new.iter().enumerate() {
            if u == u32::MAX {
                gone[o / 64] |= 1 << (o % 64);
            }
        }
        let mapped = Mapped { old_to_new, gone };
        let mut changed_group = vec![false; e.group_count()];
        let mut bars = vec![f32::INFINITY; e.len()];
        let mut requeried = Vec::with_capacity(e.len());
        for (u, o) in old_of.iter().enumerate() {
            let unproven = o.is_some_and(|o| {
                let (proves, bar) = mapped.standing(state, o, ask);
                bars[u] = if proves { bar } else { f32::INFINITY };
                !proves
            });
            requeried.push(changed[u] || unproven);
            changed_group[e.group_of[u] as usize] |= changed[u];
        }
        let changed_groups = (0..changed_group.len() as u32)
            .filter(|&g| changed_group[g as usize])
            .collect();
        Self {
            requeried,
            changed_groups,
            bars,
            mapped,
        }
    }
}

/// The queries that answer `products` (sorted): one per group, for its members among them.
fn queries(e: &Embedding, products: &[u32]) -> Rows<u32> {
    let mut by_group: Vec<(u32, u32)> = products
        .iter()
        .map(|&u| (e.group_of[u as usize], u))
        .collect();
    by_group.sort_unstable();
    let mut out = Rows::with_capacity(by_group.len(), by_group.len());
    let mut row = Vec::new();
    for run in by_group.chunk_by(|a, b| a.0 == b.0) {
        row.clear();
        row.extend(run.iter().map(|&(_, u)| u));
        out.push(&row);
    }
    out
}

impl Mapped {
    /// Whether the state's product `o` changed or was removed since.
    fn is_gone(&self, o: u32) -> bool {
        self.gone[o as usize / 64] & (1 << (o % 64)) != 0
    }

    /// Product `o`'s kept list in the new indices: without the products changed or removed
    /// since.
    fn list<'a>(&'a self, row: &'a [(u32, f32)]) -> impl Iterator<Item = (u32, f32)> + 'a {
        row.iter()
            .map(|&(j, s)| (self.old_to_new[j as usize], s))
            .filter(|&(j, _)| j != u32::MAX)
    }

    /// How far product `o`'s kept list is known now: a list known up to its last is known
    /// only above its last's score once that one has left.
    fn known_now(&self, state: &Pairing, o: u32) -> Known {
        match (state.known[o as usize], state.best.row(o as usize).last()) {
            (Known::ToLast, Some(&(last, s))) if self.is_gone(last) => Known::Above(s),
            (known, _) => known,
        }
    }

    /// Whether product `o`'s kept list (`kept`) still proves its top k, and its bar for the
    /// reverse search — what a changed product must score to enter it — without making
    /// the list: every kept product is looked at here, most of them unchanged.
    fn standing(&self, state: &Pairing, o: u32, ask: &Ask) -> (bool, f32) {
        let row = state.best.row(o as usize);
        let stays = |&&(j, _): &&(u32, f32)| !self.is_gone(j);
        match self.known_now(state, o) {
            Known::All => (true, ask.min_score),
            Known::ToLast => {
                let last = row.iter().rev().find(stays).map_or(ask.min_score, |l| l.1);
                (row.iter().filter(stays).count() >= ask.top_k, last)
            }
            Known::Above(floor) => {
                let above = row.iter().filter(stays).filter(|&&(_, s)| s > floor);
                (above.count() >= ask.top_k, floor)
            }
        }
    }

    /// Whether the state's top k of product `o`, in the new indices (`u32::MAX` for a
    /// product changed or removed since), is `top`.
    fn same_top(&self, state: &Pairing, o: u32, top: &[(u32, f32)]) -> bool {
        let old = state.top(o as usize);
        old.len() == top.len()
            && old
                .iter()
                .zip(top)
                .all(|(&(j, s), &n)| (self.old_to_new[j as usize], s) == n)
    }
}

/// The new table: every product's list, how far it is known, which rows differ from the
/// state's, and why products were re-scored.
pub struct Rescoring {
    pub best: Rows<(u32, f32)>,
    pub known: Vec<Known>,
    /// Indices of the rows that differ from the state's: every changed or added product's,
    /// and every kept product's whose top k moved.
    pub rows: Vec<u32>,
    pub rescored: Rescored,
}

/// A kept list something entered, merged: its product, how far it is known, and whether
/// it lost a product and gained one; the list itself is `MergedLists::lists`' row.
struct Merged {
    u: u32,
    known: Known,
    lost: bool,
    gained: bool,
}

/// The kept lists something entered, merged, by product: row `i` of `lists` is the list of
/// `merged[i]` (one flat array, not a list allocated per product).
struct MergedLists {
    merged: Vec<Merged>,
    lists: Rows<(u32, f32)>,
}

/// Every product's new list and how far it is known: queried anew, merged with what entered
/// it, or kept.
#[allow(clippy::too_many_arguments)]
pub fn rescore(
    e: &Embedding,
    indexes: &[Index],
    plan: Plan,
    state: &Pairing,
    built: &Built,
    ask: &Ask,
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
) -> Result<Rescoring, CatalogError> {
    let Plan {
        requeried,
        changed_groups,
        bars,
        mapped,
    } = plan;
    let bars = Bars::new(e, indexes, bars);
    let mut entries: Vec<Entry> = reverse(
        e,
        indexes,
        &bars,
        &changed_groups,
        &built.changed,
        stop,
        &|_, _| {},
    )?;
    drop(bars);
    entries.sort_unstable_by_key(|&(u, j, _)| (u, j));
    let cx = Context {
        e,
        state,
        built,
        mapped: &mapped,
        ask,
    };
    let (merged_lists, unproven) = cx.merge_entered(&entries, &requeried);
    drop(entries);
    let mut asked: Vec<u32> = (0..e.len() as u32)
        .filter(|&u| requeried[u as usize])
        .collect();
    asked.extend(&unproven);
    asked.sort_unstable();
    let queries = queries(e, &asked);
    drop(asked);
    let fresh = scored(e, indexes, &queries, ask, stop, progress)?;
    Ok(cx.table(&requeried, &fresh, &merged_lists, &unproven))
}

/// What re-scoring reads besides the index: the new embedding, the state, the new
/// catalogue, and the state's products in the new indices.
struct Context<'a> {
    e: &'a Embedding,
    state: &'a Pairing,
    built: &'a Built,
    mapped: &'a Mapped,
    ask: &'a Ask,
}

impl Context<'_> {
    /// The kept lists something entered (`entries`, by product), merged. Only such a list
    /// can stop proving its top k (when what entered pushed out products tied with its
    /// last): those are answered apart (by product), to be queried with the products
    /// queried anyway.
    fn merge_entered(&self, entries: &[Entry], requeried: &[bool]) -> (MergedLists, Vec<u32>) {
        let mut out = MergedLists {
            merged: Vec::new(),
            lists: Rows::new(),
        };
        let mut unproven = Vec::new();
        // Reused from list to list.
        let (mut list, mut merged_list) = (Vec::new(), Vec::new());
        for entered in entries.chunk_by(|a, b| a.0 == b.0) {
            let u = entered[0].0;
            debug_assert!(
                !requeried[u as usize],
                "a requeried product's bar is infinite"
            );
            let o = self.built.old_of[u as usize].expect("a product not requeried is unchanged");
            let row = self.state.best.row(o as usize);
            list.clear();
            list.extend(self.mapped.list(row));
            let k = self.mapped.known_now(self.state, o);
            let new = entered.iter().map(|&(_, j, s)| (j, s));
            let depth = self.ask.depth();
            let k = merged(self.e, u as usize, &list, k, new, depth, &mut merged_list);
            if !k.proves(&merged_list, self.ask.top_k) {
                unproven.push(u);
                continue;
            }
            out.merged.push(Merged {
                u,
                gained: merged_list != list,
                known: k,
                lost: list.len() < row.len(),
            });
            out.lists.push(&merged_list);
        }
        (out, unproven)
    }

    /// The new table, written row by row as each list is found (the kept ones copied
    /// straight from the state's rows, so a million kept lists cost no list of their own):
    /// from `fresh` (by product) for the `requeried` and `unproven` products, from
    /// `merged_lists`, or kept. The two halves of the catalogue are made on two threads from
    /// `PARALLEL_FROM` products (a million kept lists remapped, each neighbour a cache miss).
    fn table(
        &self,
        requeried: &[bool],
        fresh: &[(u32, Best)],
        merged_lists: &MergedLists,
        unproven: &[u32],
    ) -> Rescoring {
        let n = self.e.len() as u32;
        let mid = if (n as usize) < PARALLEL_FROM {
            n
        } else {
            n / 2
        };
        let made = Made {
            requeried,
            fresh,
            merged_lists,
            unproven,
        };
        let (mut first, second) = std::thread::scope(|scope| {
            let second = scope.spawn(|| self.table_of(mid..n, n - mid, &made));
            // Room for the second half too: appended without moving the first.
            let first = self.table_of(0..mid, n, &made);
            (first, second.join().expect("a table half does not panic"))
        });
        first.append(second);
        first
    }

    /// The new table's rows of the products `range` (`table`), with room for `room`
    /// products' rows.
    fn table_of(&self, range: std::ops::Range<u32>, room: u32, made: &Made<'_>) -> Rescoring {
        let (state, built, ask) = (self.state, self.built, self.ask);
        let (from, room) = (range.start, room as usize);
        // The state's lists, and a list for each product more.
        let share = state.best.items().len() * room / self.e.len().max(1);
        let mut out = Rescoring {
            best: Rows::with_capacity(room, share + room),
            known: Vec::with_capacity(room),
            rows: Vec::new(),
            rescored: Rescored::default(),
        };
        let r = &mut out.rescored;
        let lists = &made.merged_lists.lists;
        let merged = &made.merged_lists.merged;
        let skip = merged.partition_point(|m| m.u < from);
        let mut merged_lists = merged.iter().enumerate().skip(skip).peekable();
        let unproven = &made.unproven[made.unproven.partition_point(|&x| x < from)..];
        let mut unproven = unproven.iter().peekable();
        let fresh = &made.fresh[made.fresh.partition_point(|&(x, _)| x < from)..];
        let mut fresh = fresh.iter().peekable();
        for u in range {
            let again = unproven.next_if(|&&x| x == u).is_some();
            // Whether the top k of a kept list moved: only when one of them is gone.
            let mut kept_top_moved = None;
            let known = if made.requeried[u as usize] || again {
                let (_, list) = fresh
                    .next_if(|(x, _)| *x == u)
                    .expect("every product queried anew was scored");
                if built.changed[u as usize] {
                    r.changed += 1;
                } else {
                    r.lost_a_neighbour += 1;
                }
                out.best.push(list);
                known_of(list, ask)
            } else if let Some((i, m)) = merged_lists.next_if(|(_, m)| m.u == u) {
                if m.lost {
                    r.refilled += 1;
                } else {
                    r.gained_a_neighbour += usize::from(m.gained);
                }
                out.best.push(lists.row(i));
                m.known
            } else {
                let o = built.old_of[u as usize].expect("a product not requeried is unchanged");
                let row = state.best.row(o as usize);
                out.best.push_from(self.mapped.list(row));
                let lost = out.best.row(out.best.len() - 1).len() < row.len();
                r.refilled += usize::from(lost);
                let top = &row[..row.len().min(ask.top_k)];
                kept_top_moved = Some(lost && top.iter().any(|&(j, _)| self.mapped.is_gone(j)));
                self.mapped.known_now(state, o)
            };
            out.known.push(known);
            let list = out.best.row(out.best.len() - 1);
            let top = &list[..list.len().min(ask.top_k)];
            let moved = kept_top_moved.unwrap_or_else(|| {
                built.old_of[u as usize].is_none_or(|o| !self.mapped.same_top(state, o, top))
            });
            if moved {
                out.rows.push(u);
            }
        }
        out
    }
}

/// What the new table is made from besides the state's lists (`Context::table`).
struct Made<'a> {
    requeried: &'a [bool],
    fresh: &'a [(u32, Best)],
    merged_lists: &'a MergedLists,
    unproven: &'a [u32],
}

impl Rescoring {
    /// This table's rows followed by `other`'s (the products after these).
    fn append(&mut self, other: Rescoring) {
        self.best.append(&other.best);
        self.known.extend(other.known);
        self.rows.extend(other.rows);
        let (r, o) = (&mut self.rescored, other.rescored);
        r.changed += o.changed;
        r.lost_a_neighbour += o.lost_a_neighbour;
        r.refilled += o.refilled;
        r.gained_a_neighbour += o.gained_a_neighbour;
    }
}

/// `u`'s kept `kept` list, known as far as `known`, with the changed products that may have
/// entered it (each scoring at least its bar): those it provably holds now are taken in
/// rank order, and the list is cut to `depth`. Makes the list in `list` and answers how far
/// it is known.
fn merged(
    e: &Embedding,
    u: usize,
    kept: &[(u32, f32)],
    known: Known,
    entered: impl Iterator<Item = (u32, f32)>,
    depth: usize,
    list: &mut Best,
) -> Known {
    list.clear();
    list.extend_from_slice(kept);
    let last = kept.last().copied();
    list.extend(entered.filter(|&(j, s)| match (known, last) {
        (Known::All, _) | (Known::ToLast, None) => true,
        (Known::ToLast, Some(last)) => ranking(e, u, &(j, s), &last).is_lt(),
        (Known::Above(floor), _) => s > floor,
    }));
    list.sort_by(|a, b| ranking(e, u, a, b));
    if list.len() <= depth {
        return known;
    }
    list.truncate(depth);
    let Some(&(_, cut)) = list.last() else {
        return Known::ToLast;
    };
    match known {
        Known::Above(floor) if cut <= floor => known,
        _ => Known::ToLast,
    }
}

/// The order of two neighbours of `u`: best first (`Embedding::ranks_before`).
fn ranking(e: &Embedding, u: usize, a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    let (a, b) = ((a.1, a.0 as usize), (b.1, b.0 as usize));
    if e.ranks_before(u, a, b) {
        std::cmp::Ordering::Less
    } else if e.ranks_before(u, b, a) {
        std::cmp::Ordering::Greater
    } else {
        std::cmp::Ordering::Equal
    }
}
