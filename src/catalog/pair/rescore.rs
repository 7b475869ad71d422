//! An incremental pair's re-scoring: who is queried anew, whose kept list is refilled or
//! merged with what entered it, and which table rows moved (the rule is in `incremental`'s
//! doc).

use tokio_util::sync::CancellationToken;

use super::embed::Embedding;
use super::full::{known_of, score_groups};
use super::incremental::{Built, Rescored};
use super::index::Index;
use super::reverse::{reverse, Bars, Entry};
use super::score::{Ask, Best};
use crate::catalog::products::{Known, Pairing};
use crate::catalog::{CatalogError, Monotonic};

/// Who is re-scored, and how.
pub struct Plan {
    /// Groups queried anew: those holding a changed product or one whose kept list no
    /// longer proves its top k.
    requery: Vec<u32>,
    requeried: Vec<bool>,
    /// Groups holding a changed product: each searches whose list it can enter.
    changed_groups: Vec<u32>,
    /// Each product's bar for the reverse search (`f32::INFINITY` when requeried): what a
    /// changed product must score to enter its list.
    bars: Vec<f32>,
    /// The new index of each of the state's products kept unchanged (`u32::MAX` otherwise).
    old_to_new: Vec<u32>,
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
        let mut plan = Self {
            requery: Vec::new(),
            requeried: Vec::new(),
            changed_groups: Vec::new(),
            bars: Vec::new(),
            old_to_new,
        };
        let mut requery_group = vec![false; e.group_count()];
        let mut changed_group = vec![false; e.group_count()];
        let mut bars = vec![f32::INFINITY; e.len()];
        for (u, o) in old_of.iter().enumerate() {
            let unproven = o.is_some_and(|o| {
                let (proves, bar) = plan.standing(state, o, ask);
                bars[u] = bar;
                !proves
            });
            let g = e.group_of[u] as usize;
            requery_group[g] |= changed[u] || unproven;
            changed_group[g] |= changed[u];
        }
        plan.requeried = e
            .group_of
            .iter()
            .map(|&g| requery_group[g as usize])
            .collect();
        for (bar, &requeried) in bars.iter_mut().zip(&plan.requeried) {
            if requeried {
                *bar = f32::INFINITY;
            }
        }
        plan.bars = bars;
        let which = |marks: &[bool]| {
            (0..marks.len() as u32)
                .filter(|&g| marks[g as usize])
                .collect::<Vec<u32>>()
        };
        plan.requery = which(&requery_group);
        plan.changed_groups = which(&changed_group);
        plan
    }

    /// The state's list of product `o` in the new indices, without the products changed or
    /// removed since, and how far it is known now (`known_now`).
    fn kept(&self, state: &Pairing, o: u32) -> (Best, Known) {
        let list = state
            .best
            .row(o as usize)
            .iter()
            .map(|&(j, s)| (self.old_to_new[j as usize], s))
            .filter(|&(j, _)| j != u32::MAX)
            .collect();
        (list, self.known_now(state, o))
    }

    /// How far product `o`'s kept list is known now: a list known up to its last is known
    /// only above its last's score once that one has left.
    fn known_now(&self, state: &Pairing, o: u32) -> Known {
        match (state.known[o as usize], state.best.row(o as usize).last()) {
            (Known::ToLast, Some(&(last, s))) if self.old_to_new[last as usize] == u32::MAX => {
                Known::Above(s)
            }
            (known, _) => known,
        }
    }

    /// Whether product `o`'s kept list (`kept`) still proves its top k, and its bar for the
    /// reverse search — what a changed product must score to enter it — without making
    /// the list: every kept product is looked at here, most of them unchanged.
    fn standing(&self, state: &Pairing, o: u32, ask: &Ask) -> (bool, f32) {
        let row = state.best.row(o as usize);
        let stays = |&&(j, _): &&(u32, f32)| self.old_to_new[j as usize] != u32::MAX;
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

/// Every product's new list and how far it is known: queried anew, merged with what entered
/// it, or kept.
#[allow(clippy::too_many_arguments)]
pub fn rescore(
    e: &Embedding,
    index: &Index,
    plan: &Plan,
    state: &Pairing,
    built: &Built,
    ask: &Ask,
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
) -> Result<(Vec<Best>, Vec<Known>, Rescored), CatalogError> {
    let bars = Bars::new(e, index, plan.bars.clone());
    let mut entries: Vec<Entry> = reverse(
        e,
        index,
        &bars,
        &plan.changed_groups,
        &built.changed,
        stop,
        &|_, _| {},
    )?;
    entries.sort_unstable_by_key(|&(u, j, _)| (u, j));
    let mut best = score_groups(e, index, &plan.requery, ask, stop, progress)?;
    let mut known = vec![Known::All; e.len()];
    let mut rescored = Rescored::default();
    let mut unproven = Vec::new();
    let mut entered = entries.chunk_by(|a, b| a.0 == b.0).peekable();
    for (u, best) in best.iter_mut().enumerate() {
        if plan.requeried[u] {
            if built.changed[u] {
                rescored.changed += 1;
            } else {
                rescored.lost_a_neighbour += 1;
            }
            known[u] = known_of(best, ask);
            continue;
        }
        let o = built.old_of[u].expect("a product not requeried is unchanged");
        let (mut list, mut k) = plan.kept(state, o);
        let lost = list.len() < state.best.row(o as usize).len();
        let mut gained = false;
        if let Some(new) = entered.next_if(|c| c[0].0 as usize == u) {
            let before = list.clone();
            let new = new.iter().map(|&(_, j, s)| (j, s));
            (list, k) = merged(e, u, list, k, new, ask.depth());
            gained = list != before;
        }
        if !k.proves(&list, ask.top_k) {
            unproven.push(u as u32);
        } else if lost {
            rescored.refilled += 1;
        } else {
            rescored.gained_a_neighbour += usize::from(gained);
        }
        (*best, known[u]) = (list, k);
    }
    requery_unproven(
        e, index, &unproven, ask, stop, progress, &mut best, &mut known,
    )?;
    rescored.lost_a_neighbour += unproven.len();
    Ok((best, known, rescored))
}

/// `u`'s kept `list`, known as far as `known`, with the changed products that may have
/// entered it (each scoring at least its bar): those it provably holds now are taken in
/// rank order, and the list is cut to `depth`. Answers the list and how far it is known.
fn merged(
    e: &Embedding,
    u: usize,
    mut list: Best,
    known: Known,
    entered: impl Iterator<Item = (u32, f32)>,
    depth: usize,
) -> (Best, Known) {
    let last = list.last().copied();
    list.extend(entered.filter(|&(j, s)| match (known, last) {
        (Known::All, _) | (Known::ToLast, None) => true,
        (Known::ToLast, Some(last)) => ranking(e, u, &(j, s), &last).is_lt(),
        (Known::Above(floor), _) => s > floor,
    }));
    list.sort_by(|a, b| ranking(e, u, a, b));
    if list.len() <= depth {
        return (list, known);
    }
    list.truncate(depth);
    let Some(&(_, cut)) = list.last() else {
        return (list, Known::ToLast);
    };
    match known {
        Known::Above(floor) if cut <= floor => (list, known),
        _ => (list, Known::ToLast),
    }
}

/// Queries anew the products whose list stopped proving its top k when what entered it
/// pushed out products tied with its last (rare): their groups are scored again.
#[allow(clippy::too_many_arguments)]
fn requery_unproven(
    e: &Embedding,
    index: &Index,
    unproven: &[u32],
    ask: &Ask,
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
    best: &mut [Best],
    known: &mut [Known],
) -> Result<(), CatalogError> {
    if unproven.is_empty() {
        return Ok(());
    }
    let mut groups: Vec<u32> = unproven.iter().map(|&u| e.group_of[u as usize]).collect();
    groups.sort_unstable();
    groups.dedup();
    let mut fresh = score_groups(e, index, &groups, ask, stop, progress)?;
    for &u in unproven {
        let u = u as usize;
        best[u] = std::mem::take(&mut fresh[u]);
        known[u] = known_of(&best[u], ask);
    }
    Ok(())
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

/// The table rows that differ from the state's: every changed or added product's, and every
/// kept product's whose top k moved.
pub fn changed_rows(
    state: &Pairing,
    built: &Built,
    plan: &Plan,
    best: &[Best],
    top_k: usize,
) -> Vec<u32> {
    (0..best.len())
        .filter(|&u| match built.old_of[u] {
            None => true,
            Some(o) => !plan.same_top(state, o, &best[u][..best[u].len().min(top_k)]),
        })
        .map(|u| u as u32)
        .collect()
}
