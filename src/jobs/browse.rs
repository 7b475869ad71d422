//! The operators' view across tenants: an index of the newest jobs of every tenant (a job
//! enters it in the step that creates it) and the tenants that created jobs most recently
//! (the tenant picker) — both bounded, kept by the store, never a scan of keys — and the walk
//! of one listing page over the index.
//!
//! The index orders jobs as the listing does, newest first by (created time, id): on Redis a
//! sorted set whose members are `<ms, 13 digits>.<id>` at one score, so their names order
//! them (13 digits last until the year 2286), and a position is read from its name.

use serde::Serialize;
use utoipa::ToSchema;

use super::store::{BoxFuture, JobStore, StoreError};
use super::{ser_time, JobId, Snapshot, TenantId};

/// How many of the newest jobs (every tenant's) the index keeps; older ones leave it as new
/// ones come (`EVERYONE_CAP` in prelude.lua; on Redis it is trimmed every 64 creates, so it
/// may hold up to 64 more between trims).
pub const EVERYONE_CAP: usize = 10_000;
/// How many tenants the picker keeps: those that created a job most recently
/// (`PICKER_CAP` in prelude.lua).
pub const PICKER_CAP: usize = 1_000;
/// The most index entries one listing page examines; a page not full by then is answered
/// short, with a cursor to go on.
pub const EXAMINE_PER_PAGE: usize = 1_000;
/// Index entries read (and their jobs fetched) per round trip while a page fills.
const CHUNK: usize = 200;
/// The most entries one walk drops from the index for jobs whose record is gone
/// ([`Browse::unlist`]): all a listing page examined; a longer walk (a bulk action's) leaves
/// the rest to the walks after it.
pub const UNLIST_PER_WALK: usize = EXAMINE_PER_PAGE;

/// A place in the newest-first order: a job's created time (ms) and id.
pub type Position = (u64, JobId);

/// The index's name for a job created at `ms`.
pub fn index_member(ms: u64, id: &JobId) -> String {
    format!("{ms:013}.{id}")
}

/// Reads an index name back; `None` for one this service did not write.
pub fn parse_member(raw: &str) -> Option<Position> {
    let (ms, id) = raw.split_once('.')?;
    Some((ms.parse().ok()?, JobId::parse(id).ok()?))
}

/// What the view across tenants reads from a store; every `JobStore` is one. Each read is
/// bounded: a page of the index, named jobs, the picker's capped list.
pub trait Browse {
    /// Up to `count` entries of the cross-tenant index (`browse`), newest first, from just
    /// after `after` (the start when `None`).
    fn index_page(
        &self,
        after: Option<Position>,
        count: usize,
    ) -> BoxFuture<'_, Result<Vec<Position>, StoreError>>;

    /// The jobs named, in that order, as `get` reads each (a missing one left out).
    fn get_many<'a>(&'a self, ids: &'a [JobId])
        -> BoxFuture<'a, Result<Vec<Snapshot>, StoreError>>;

    /// The tenants that created jobs most recently (at most `browse::PICKER_CAP`), newest
    /// first, with their last create's time; a removed tenant leaves at once.
    fn recent_tenants(&self) -> BoxFuture<'_, Result<Vec<(TenantId, u64)>, StoreError>>;

    /// Drops from the index the entries `gone` names whose job record does not exist (checked
    /// by the store as it drops each: a job that is there keeps its entry); answers how many
    /// left. A walk calls it with the entries it found no job for.
    fn unlist<'a>(&'a self, gone: &'a [Position]) -> BoxFuture<'a, Result<u64, StoreError>>;
}

/// A tenant in the picker: one that created a job recently, and when it last did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct RecentTenant {
    pub tenant_id: TenantId,
    /// Its last job's creation (the store's clock).
    #[serde(serialize_with = "ser_time")]
    #[schema(value_type = String, format = DateTime)]
    pub last_job_at: u64,
}

/// The picker's answer: the tenants of `recent` (newest first) whose id starts with
/// `prefix` and that `sees` lets the caller see, at most `limit`.
pub fn pick(
    recent: Vec<(TenantId, u64)>,
    prefix: &str,
    sees: impl Fn(&TenantId) -> bool,
    limit: usize,
) -> Vec<RecentTenant> {
    recent
        .into_iter()
        .filter(|(t, _)| t.as_str().starts_with(prefix) && sees(t))
        .take(limit)
        .map(|(tenant_id, last_job_at)| RecentTenant {
            tenant_id,
            last_job_at,
        })
        .collect()
}

/// What one walk over the index found.
pub struct Walked {
    /// The jobs `keep` kept, newest first.
    pub jobs: Vec<Snapshot>,
    /// The last entry examined; `None` when the walk reached the index's end.
    pub examined_to: Option<Position>,
}

/// Walks the index newest first from just after `after` until `want` jobs are kept, the
/// index ends, or `examine` entries were examined ([`EXAMINE_PER_PAGE`] for a listing page). `named` filters entries by
/// id before any job is fetched; `keep` filters the fetched jobs. A job whose record is
/// gone (expired, trimmed, its tenant removed) is skipped, and its entry (up to
/// [`UNLIST_PER_WALK`] a walk) dropped from the index, so no later walk pays for it.
pub async fn walk(
    store: &dyn JobStore,
    mut after: Option<Position>,
    named: impl Fn(&JobId) -> bool,
    keep: impl Fn(&Snapshot) -> bool,
    want: usize,
    examine: usize,
) -> Result<Walked, StoreError> {
    let mut jobs = Vec::new();
    let mut gone = Vec::new();
    let mut examined = 0;
    let mut ended = false;
    while examined < examine && jobs.len() < want {
        let count = CHUNK.min(examine - examined);
        let entries = store.index_page(after, count).await?;
        examined += entries.len();
        let named: Vec<&Position> = entries.iter().filter(|e| named(&e.1)).collect();
        let ids: Vec<JobId> = named.iter().map(|e| e.1).collect();
        let mut found = store.get_many(&ids).await?;
        note_gone(&mut gone, &named, &found);
        found.retain(&keep);
        found.sort_unstable_by_key(|s| std::cmp::Reverse((s.created_at, s.job_id)));
        jobs.extend(found);
        if entries.len() < count {
            ended = true;
            break;
        }
        after = entries.last().copied();
    }
    unlist(store, &gone).await;
    // The index ended: no place to read on from.
    let examined_to = if ended { None } else { after };
    Ok(Walked { jobs, examined_to })
}

/// Adds to `gone` (up to [`UNLIST_PER_WALK`]) the entries of `named` whose job `found` lacks.
fn note_gone(gone: &mut Vec<Position>, named: &[&Position], found: &[Snapshot]) {
    let room = UNLIST_PER_WALK - gone.len();
    if room == 0 || found.len() == named.len() {
        return;
    }
    let there: std::collections::HashSet<JobId> = found.iter().map(|s| s.job_id).collect();
    let missing = named.iter().filter(|e| !there.contains(&e.1));
    gone.extend(missing.take(room).copied().copied());
}

/// Drops the `gone` entries from the index; a failure is logged, not answered: the page was
/// read, and the next walk tries again.
async fn unlist(store: &dyn JobStore, gone: &[Position]) {
    if gone.is_empty() {
        return;
    }
    if let Err(e) = store.unlist(gone).await {
        tracing::warn!(error = %e, entries = gone.len(), "the index kept entries of gone jobs");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_name_orders_as_the_listing_and_reads_back() {
        let (a, b) = (JobId::new(), JobId::new());
        let (lo, hi) = if a < b { (a, b) } else { (b, a) };
        let names = [
            index_member(999_999_999_999, &hi),
            index_member(1_764_600_000_000, &lo),
            index_member(1_764_600_000_000, &hi),
        ];
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(sorted, names, "name order is (ms, id) order");
        assert_eq!(parse_member(&names[2]), Some((1_764_600_000_000, hi)));
        assert_eq!(parse_member("x.y"), None);
    }

    #[test]
    fn the_caps_in_the_scripts_are_these() {
        let prelude = include_str!("lua/prelude.lua");
        for line in [
            format!("local EVERYONE_CAP = {EVERYONE_CAP}"),
            format!("local PICKER_CAP = {PICKER_CAP}"),
        ] {
            assert!(prelude.contains(&line), "prelude.lua says `{line}`");
        }
    }
}
