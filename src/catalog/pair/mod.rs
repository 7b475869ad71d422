//! pair: each product's nearest neighbours by TF-IDF cosine over its *identity* — the set of
//! words that says what it is (`catalog::tokens`: the name without the variant attributes
//! enrichment found, plus the brand; case, hyphens, joined words and plurals folded) — so that
//! the variants of one product are each other's nearest neighbours.
//!
//! **The score.** Each identity word weighs `ln((n + 1) / (df + 1)) + 1` (`weights`), a word
//! counted once per product; vectors are L2-normalised and the score is their dot product.
//! Two products are comparable only within the same top-level category (a product without
//! one is comparable to all) and when the larger price is at most 3 times the smaller. Ties
//! go to the neighbour of the same material, then to the smaller product key. Kept: the
//! `top_k` best with score ≥ `min_score`.
//!
//! **The method: exact top-k, no candidate cut.** `embed` makes the vectors and groups the
//! products of one category and identity (they score the same against everything); `index`
//! lists the groups per (category, word) and per (category, pair of common words); `score`
//! answers each group's query by reading lists until no product left unread can reach its
//! top k (the argument is in `score`'s doc). The test
//! `pair_neighbours_equal_an_exhaustive_top_k` checks the result against brute force.
//!
//! **Full or incremental.** A pair keeps its state in the catalogue store (`Pairing`: the
//! weights, and per product its version, identity and best neighbours: the top k and a few
//! more, so that losing one does not mean a new query). The next pair re-scores only
//! what changed (`incremental`, where the weights rule is) — unless `full=true` asks for a
//! full one, there is no state or one of no products (`first`), `PAIR_TOP_K` or `PAIR_MIN_SCORE` changed
//! (`settings`), or more than `pair_full_after_share` of the catalogue the last full pair
//! counted changed since (`share`, 20 % by default): then it pairs everything with weights
//! counted afresh. The report says which, and how many products were re-scored and why.
//! Between runs the service also keeps in memory the groups and index of the state it saved
//! (`kept`, a cache found by the state's token), which the next incremental pair patches
//! instead of weighing and indexing every product again.
//!
//! The new table and state replace the old in one step at the end, so pair is safe to run
//! again and a stop on request leaves the old table whole; the step is fenced: it happens
//! only while the run still holds its job (`jobs::fence`). `PAIR_MAX_MEMORY_MB` is checked
//! before the memory is taken (`budget`), what is kept for other tenants counted with it.

mod budget;
mod cover;
mod direct;
mod embed;
mod full;
mod incremental;
mod index;
pub mod kept;
mod listing;
mod reading;
mod rescore;
mod reverse;
mod score;
mod vectors;
mod weights;

use std::sync::{Arc, LazyLock};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use budget::estimated_mb;
pub use direct::{embed, full_with_weights, inputs_of, neighbours};
pub use embed::Embedding;
pub use score::Ask;
pub use weights::Weights;

use super::products::{Pairing, ProductKey, Rewrite, Swap};
use super::report::{
    to_result, FoundBy, FullBecause, PairChanges, PairMode, PairPhase, PairReport, PairStopped,
    RescoredBecause,
};
use super::{check, retrying, Catalog, CatalogError, CatalogRun, Monotonic, RunContext};
use crate::jobs::fence::Fence;
use crate::jobs::registry::Progress;
use crate::jobs::TenantId;
use incremental::Outcome;
use kept::Engine;

/// The cores to tokenise and score on. Asked once: `available_parallelism` reads cgroup
/// files each call.
static CORES: LazyLock<usize> = LazyLock::new(|| {
    std::thread::available_parallelism()
        .map(|p| p.get())
        .unwrap_or(1)
        .clamp(1, 8)
});

/// Progress at the end of each phase (loading → 5, embedding → 35, indexing → 45, scoring →
/// 90, writing → 100), as docs/api.md documents.
const LOADED: u8 = 5;
const EMBEDDED: u8 = 35;
const INDEXED: u8 = 45;
const SCORED: u8 = 90;
/// Where the store's writing of the table reaches once it is done; 100 follows when the
/// kept engine is put away.
const WRITTEN: u8 = 99;

/// The phase a run had reached at `percent`, as a stopped or failed pair reports it.
fn phase_at(percent: u8) -> PairPhase {
    match percent {
        p if p < LOADED => PairPhase::Loading,
        p if p < EMBEDDED => PairPhase::Embedding,
        p if p < INDEXED => PairPhase::Indexing,
        p if p < SCORED => PairPhase::Scoring,
        _ => PairPhase::Writing,
    }
}

/// A pair's parameters, read from the request's fields.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PairParams {
    /// Pair every product with weights counted afresh, even when an incremental pair could.
    #[serde(default)]
    pub full: bool,
}

impl CatalogRun for PairParams {
    /// Pairs the tenant's products (incrementally when it can). The table is swapped in the
    /// same atomic step as the fence's check; a run fenced off before its swap leaves the old
    /// table whole. A run that stops on request or fails reports the phase it had reached
    /// (`{"phase": "scoring"}`); the old neighbour table is left whole either way.
    fn run_in(&self, cx: &RunContext<'_>, progress: Progress<'_>) -> Result<Value, CatalogError> {
        let progress = Monotonic::new(progress);
        let run = Run {
            catalog: cx.catalog,
            tenant: cx.tenant,
            fence: cx.fence,
            stop: cx.stop,
            progress: &progress,
            fed_upto: 0,
        };
        run.phases(self).map_err(|e| {
            e.with_report(to_result(&PairStopped {
                phase: phase_at(progress.last()),
            }))
        })
    }
}

/// One pair's context.
struct Run<'a> {
    catalog: &'a Catalog,
    tenant: &'a TenantId,
    fence: &'a dyn Fence,
    stop: &'a CancellationToken,
    progress: &'a Monotonic<'a>,
    /// The change feed's position when this run read it, before any product.
    fed_upto: u64,
}

impl Run<'_> {
    fn phases(mut self, params: &PairParams) -> Result<Value, CatalogError> {
        let window = self.catalog.settings.write_retry;
        self.progress.report(0, "reading the last pair's state");
        let state = retrying(window, self.stop, || {
            self.catalog.store.pairing(self.tenant, self.stop)
        })?;
        // A state of no products is none: there is nothing to start from, and the stores
        // agree (Redis keeps the state of an empty catalogue's pair; the embedded store keeps
        // none for a tenant that has no catalogue).
        let state = state.filter(|s| !s.keys.is_empty());
        check(self.stop)?;
        // The feed answers for the state read above: only the run that holds the tenant's
        // pair saves a state, and it saves the feed's position with it.
        let fed = retrying(window, self.stop, || {
            self.catalog.store.changed(self.tenant)
        })?;
        self.fed_upto = fed.upto;
        let (listed, found_by) = self.listing(state.as_deref(), &fed, params.full)?;
        drop(fed);
        let limit_mb = self.catalog.settings.pair_max_memory_mb;
        budget::Limit::new(limit_mb).check_products(listed.len())?;
        kept::make_room(estimated_mb(listed.len()), limit_mb);
        let ask = self.ask();
        let (because, versions) = match (&state, params.full) {
            (_, true) => (FullBecause::Asked, listed.into_versions()),
            (None, _) => (FullBecause::First, listed.into_versions()),
            (Some(s), _) if s.top_k as usize != ask.top_k || s.min_score != ask.min_score => {
                (FullBecause::Settings, listed.into_versions())
            }
            (Some(state), false) => {
                let outcome = incremental::run(
                    self.catalog,
                    self.tenant,
                    state,
                    listed,
                    &ask,
                    self.stop,
                    self.progress,
                )?;
                match outcome {
                    Outcome::Unchanged => return Ok(self.unchanged(state, found_by)),
                    Outcome::Paired(paired) => return self.save_incremental(*paired, found_by),
                    Outcome::TooMuchChanged(versions) => (FullBecause::Share, versions),
                }
            }
        };
        drop(state);
        self.full(versions, &ask, because)
    }

    fn ask(&self) -> Ask {
        Ask {
            top_k: self.catalog.settings.pair_top_k,
            min_score: self.catalog.settings.pair_min_score as f32,
        }
    }

    fn full(
        &self,
        versions: Vec<(ProductKey, u64)>,
        ask: &Ask,
        because: FullBecause,
    ) -> Result<Value, CatalogError> {
        // A full pair makes everything anew: what was kept for the last state goes first.
        kept::forget(self.tenant);
        self.progress.report(LOADED, "reading products");
        let limit = budget::Limit::new(self.catalog.settings.pair_max_memory_mb);
        let prepared = full::read(
            self.catalog,
            self.tenant,
            &versions,
            self.stop,
            self.progress,
        )?;
        drop(versions);
        let (pairing, engine) = full::pair_all(prepared, ask, &limit, self.stop, self.progress)?;
        let n = pairing.keys.len();
        let report = PairReport {
            mode: PairMode::Full,
            full_because: Some(because),
            rescored: n,
            changes: None,
            rescored_because: None,
            ..counts(&pairing)
        };
        self.save(pairing, engine, Rewrite::whole())?;
        Ok(to_result(&report))
    }

    fn save_incremental(
        &self,
        paired: incremental::Paired,
        found_by: FoundBy,
    ) -> Result<Value, CatalogError> {
        let r = paired.rescored;
        let c = paired.changes;
        let report = PairReport {
            mode: PairMode::Incremental,
            full_because: None,
            rescored: r.changed + r.lost_a_neighbour + r.refilled + r.gained_a_neighbour,
            changes: Some(PairChanges {
                added: c.added,
                changed: c.changed,
                removed: c.removed,
                found_by,
            }),
            rescored_because: Some(RescoredBecause {
                changed: r.changed,
                lost_a_neighbour: r.lost_a_neighbour,
                refilled: r.refilled,
                gained_a_neighbour: r.gained_a_neighbour,
            }),
            ..counts(&paired.pairing)
        };
        let rewrite = Rewrite::rows(&paired.rows, &paired.removed);
        self.save(paired.pairing, paired.engine, rewrite)?;
        Ok(to_result(&report))
    }

    /// Nothing changed since the last pair: nothing is written.
    fn unchanged(&self, state: &Pairing, found_by: FoundBy) -> Value {
        self.progress
            .report(100, "nothing changed since the last pair");
        to_result(&PairReport {
            mode: PairMode::Incremental,
            full_because: None,
            rescored: 0,
            changes: Some(PairChanges {
                found_by,
                ..PairChanges::default()
            }),
            rescored_because: Some(RescoredBecause::default()),
            ..counts(state)
        })
    }

    /// Puts the new state and table in place, fenced, and once they are keeps `engine` for
    /// the next pair, under the new state's token.
    fn save(
        &self,
        mut pairing: Pairing,
        engine: Engine,
        rewrite: Rewrite<'_>,
    ) -> Result<(), CatalogError> {
        // The old table stays whole until the swap below; a cancelled run leaves it untouched.
        check(self.stop)?;
        pairing.token = kept::mint();
        let token = pairing.token;
        let pairing = Arc::new(pairing);
        let paired = pairing.paired();
        self.progress.report(
            SCORED,
            &format!("writing the neighbour table ({paired} products)"),
        );
        let window = self.catalog.settings.write_retry;
        let step = format!("writing the neighbour table ({paired} products)");
        let written = |done: usize, all: usize| {
            self.progress.interpolate(SCORED, WRITTEN, done, all, &step);
        };
        let rewrite = rewrite.telling(&written);
        // A run fenced off after the check above (recovered, taken over) must not swap: the
        // store checks the job record in the same step as the swap.
        let swap = retrying(window, self.stop, || {
            self.catalog.store.save_pairing(
                self.tenant,
                pairing.clone(),
                rewrite,
                self.fed_upto,
                self.fence,
                self.stop,
            )
        })?;
        if swap == Swap::Fenced {
            return Err(CatalogError::Fenced);
        }
        let limit_mb = self.catalog.settings.pair_max_memory_mb;
        kept::keep(self.tenant, engine.kept(token), limit_mb);
        let n = pairing.keys.len();
        self.progress
            .report(100, &format!("paired {paired} of {n} products"));
        Ok(())
    }
}

/// A report's counts of a pairing's table; the rest filled by the caller.
fn counts(p: &Pairing) -> PairReport {
    PairReport {
        mode: PairMode::Full,
        full_because: None,
        products: p.keys.len(),
        paired: p.paired(),
        pairs: p.pairs(),
        rescored: 0,
        changes: None,
        rescored_because: None,
    }
}
