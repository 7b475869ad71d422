//! What a pair keeps in memory for the next one: the groups of the state it saved (each
//! group's vector and category, each product's group) and their index, so that an
//! incremental pair patches them — its changed and added products in new groups, indexed
//! apart — instead of weighing every product and indexing every group again.
//!
//! A cache, never the truth: it is found only by its tenant and the token of the state it
//! was made for (`Pairing::token`, minted at each save), and it is exactly what that state's
//! products would be weighed, grouped and indexed into again (the same vectors to the bit,
//! the same weights; an index is a list of groups per word, read until nothing unread can
//! reach a bar, so which groups share an index never changes an answer). A restart, a state
//! saved by another replica, or a run that did not save finds none, and the pair builds
//! them afresh. Bounded: the indexes kept for all tenants, with the pair running, stay
//! within `PAIR_MAX_MEMORY_MB` (`make_room`, `keep`), and at most `KEPT_TENANTS` tenants'
//! are kept; the least recently paired tenant's goes first.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tokio_util::sync::CancellationToken;

use super::embed::{weigh, Embedding};
use super::index::{IdHasher, Index};
use super::Weights;
use crate::catalog::products::{Pairing, Traits};
use crate::catalog::rows::Rows;
use crate::catalog::CatalogError;
use crate::jobs::TenantId;

/// At most this many indexes are read per query: past it, the ones made since the first are
/// made again as one.
const MAX_INDEXES: usize = 4;

/// At most this many tenants' engines are kept. Without it, every tenant a replica ever
/// paired kept its engine until `PAIR_MAX_MEMORY_MB` (1 GiB by default) was full, deleted
/// tenants' too (their state is gone, so nothing could use them): an idle replica's heap grew
/// with each new tenant paired (the soak's untouched replica, 240 tenants turned over as they
/// are deleted: ~45 more small engines a round, the only part of its live heap that grew).
/// Keeping pays for a large catalogue (1M products: 0.6 s of an incremental pair's 2.1 s of
/// CPU) and costs its size; a small one is weighed and indexed anew in about a millisecond.
pub const KEPT_TENANTS: usize = 32;

/// Once the groups made since the first index was built, or the groups left without
/// members, pass this share of the groups it holds, every group is indexed afresh in one
/// index (and the memberless ones dropped): a patched index stays within this of a rebuilt
/// one in size and in the lists a query reads.
const REBUILD_SHARE: f64 = 0.1;

/// A state's groups and their indexes, kept for the next pair.
pub struct Kept {
    token: u64,
    vectors: Rows<(u32, f32)>,
    group_category: Vec<u32>,
    /// The group of each of the state's products, by its index in the state.
    group_of: Vec<u32>,
    indexes: Vec<Index>,
    /// Index `i` holds the groups `ends[i - 1]..ends[i]` (the first from 0).
    ends: Vec<u32>,
    by_identity: Groups,
}

/// The embedding a pair scores with, the indexes that together list its groups, and its
/// groups found by category and identity.
pub struct Engine {
    pub e: Embedding,
    pub indexes: Vec<Index>,
    ends: Vec<u32>,
    by_identity: Groups,
}

/// Groups by a hash of their category and identity (a vector's words are its identity),
/// so that a changed product whose category and identity a group already has joins it:
/// its query then starts from its twins at their own score, as a full pair's does, instead
/// of finding them through the lists. A hash two identities share names one of them; the
/// other makes a group of its own (the same answers, a query less quick).
struct Groups(HashMap<u64, u32, BuildHasherDefault<IdHasher>>);

impl Groups {
    fn of(e: &Embedding) -> Self {
        let mut map = HashMap::with_capacity_and_hasher(e.group_count(), Default::default());
        for g in 0..e.group_count() {
            let words = e.vectors.row(g).iter().map(|&(t, _)| t);
            map.entry(identity_hash(e.group_category[g], words))
                .or_insert(g as u32);
        }
        Self(map)
    }

    /// The group of category `c` and `identity` among those of `vectors` and `categories`,
    /// if there is one.
    fn find(
        &self,
        vectors: &Rows<(u32, f32)>,
        categories: &[u32],
        c: u32,
        identity: &[u32],
    ) -> Option<u32> {
        let g = *self.0.get(&identity_hash(c, identity.iter().copied()))?;
        let words = vectors.row(g as usize).iter().map(|&(t, _)| t);
        (categories[g as usize] == c && words.eq(identity.iter().copied())).then_some(g)
    }

    /// Group `g`, of category `c` and `identity`, unless its hash names another.
    fn add(&mut self, c: u32, identity: &[u32], g: u32) {
        self.0
            .entry(identity_hash(c, identity.iter().copied()))
            .or_insert(g);
    }
}

fn identity_hash(category: u32, words: impl Iterator<Item = u32>) -> u64 {
    let mut h = IdHasher::default();
    h.write_u32(category);
    for t in words {
        h.write_u32(t);
    }
    h.finish()
}

impl Engine {
    /// Every group of `e` indexed at once.
    pub fn built(
        e: Embedding,
        stop: &CancellationToken,
        built: &dyn Fn(usize, usize),
    ) -> Result<Self, CatalogError> {
        let index = Index::build(&e, stop, built)?;
        let ends = vec![e.group_count() as u32];
        let by_identity = Groups::of(&e);
        Ok(Self {
            e,
            indexes: vec![index],
            ends,
            by_identity,
        })
    }

    /// What is kept of it once its products' traits went to the state: for the state
    /// saved with `token`.
    pub fn kept(self, token: u64) -> Kept {
        Kept {
            token,
            vectors: self.e.vectors,
            group_category: self.e.group_category,
            group_of: self.e.group_of,
            indexes: self.indexes,
            ends: self.ends,
            by_identity: self.by_identity,
        }
    }
}

impl Kept {
    /// Whether it was kept for `state`.
    pub fn is_for(&self, state: &Pairing) -> bool {
        self.token != 0 && self.token == state.token && self.group_of.len() == state.keys.len()
    }

    /// The engine of a new catalogue whose product `u` is the state's `old_of[u]` unchanged
    /// (same identity and traits: its group's vector stands), or else has `identities`'
    /// row: it joins the group of its category and identity, or one made for it, weighed by
    /// `weights`. The new groups get an index of their own, unless they or the groups left
    /// empty grew past `REBUILD_SHARE`: then every group is indexed afresh.
    #[allow(clippy::too_many_arguments)]
    pub fn patched(
        self,
        old_of: &[Option<u32>],
        identities: &Rows<u32>,
        traits: Vec<Traits>,
        categories: u32,
        weights: &Weights,
        stop: &CancellationToken,
        built: &dyn Fn(usize, usize),
    ) -> Result<Engine, CatalogError> {
        let Kept {
            mut vectors,
            mut group_category,
            group_of: old_group,
            mut indexes,
            mut ends,
            mut by_identity,
            ..
        } = self;
        let mut row = Vec::new();
        let group_of: Vec<u32> = old_of
            .iter()
            .enumerate()
            .map(|(u, old)| match old {
                Some(o) => old_group[*o as usize],
                None => {
                    let (c, identity) = (traits[u].category, identities.row(u));
                    let found = by_identity.find(&vectors, &group_category, c, identity);
                    found.unwrap_or_else(|| {
                        weigh(identity, |t| weights.idf_of(t), &mut row);
                        vectors.push(&row);
                        group_category.push(c);
                        let g = (vectors.len() - 1) as u32;
                        by_identity.add(c, identity, g);
                        g
                    })
                }
            })
            .collect();
        drop(old_group);
        let mut e = Embedding::of_groups(vectors, group_category, traits, group_of, categories);
        let groups = e.group_count() as u32;
        let first = f64::from(ends[0]);
        let empty = (0..e.group_count())
            .filter(|&g| e.groups.row(g).is_empty())
            .count();
        let since = f64::from(groups - ends[0]);
        if since > REBUILD_SHARE * first || empty as f64 > REBUILD_SHARE * first {
            e = e.compacted();
            return Engine::built(e, stop, built);
        }
        let last = *ends.last().expect("a kept engine has an index");
        if groups > last {
            if indexes.len() >= MAX_INDEXES {
                indexes.truncate(1);
                ends.truncate(1);
            }
            let from = *ends.last().expect("the first index stays");
            indexes.push(Index::build_from(&e, from, stop, built)?);
            ends.push(groups);
        }
        Ok(Engine {
            e,
            indexes,
            ends,
            by_identity,
        })
    }

    /// Bytes held, about.
    pub fn bytes(&self) -> usize {
        self.vectors.bytes()
            + (self.group_category.capacity() + self.group_of.capacity()) * 4
            + self.indexes.iter().map(Index::bytes).sum::<usize>()
            + self.by_identity.0.capacity() * 16
    }
}

/// A new state's token: unique to this save among all replicas and restarts (random keys
/// std draws from the OS per process, a counter, the time), never 0.
pub fn mint() -> u64 {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNT.fetch_add(1, Ordering::Relaxed));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.write_u32(std::process::id());
    h.finish().max(1)
}

/// The kept engines, least recently kept first: one per tenant at most.
static KEPT: Mutex<Vec<(TenantId, Kept)>> = Mutex::new(Vec::new());

fn kept() -> std::sync::MutexGuard<'static, Vec<(TenantId, Kept)>> {
    // Every change is a push or a remove of a whole entry: a poisoned list is still whole.
    KEPT.lock().unwrap_or_else(|p| p.into_inner())
}

/// Takes what was kept for the tenant, if it was kept for `state`; either way the tenant
/// has nothing kept afterwards (the run makes anew what it keeps next).
pub fn take(tenant: &TenantId, state: &Pairing) -> Option<Kept> {
    let mut all = kept();
    let at = all.iter().position(|(t, _)| t == tenant)?;
    let (_, k) = all.remove(at);
    k.is_for(state).then_some(k)
}

/// Drops what was kept for the tenant (a full pair makes everything anew).
pub fn forget(tenant: &TenantId) {
    kept().retain(|(t, _)| t != tenant);
}

/// Whether something is kept for the tenant's `state` (what the next pair would patch).
pub fn holds(tenant: &TenantId, state: &Pairing) -> bool {
    kept().iter().any(|(t, k)| t == tenant && k.is_for(state))
}

/// Drops other tenants' engines, least recently kept first, until they and `needed_mb` fit
/// in `limit_mb`: a pair about to run counts what is kept against its limit.
pub fn make_room(needed_mb: u64, limit_mb: u64) {
    let limit = limit_mb.saturating_mul(1 << 20);
    let needed = needed_mb.saturating_mul(1 << 20);
    let mut all = kept();
    while !all.is_empty() && held(&all).saturating_add(needed) > limit {
        all.remove(0);
    }
}

/// Keeps the tenant's engine when it fits in `limit_mb` with the others, among at most
/// `KEPT_TENANTS` (dropping the least recently kept as needed); one that alone does not fit
/// is not kept.
pub fn keep(tenant: &TenantId, k: Kept, limit_mb: u64) {
    let limit = limit_mb.saturating_mul(1 << 20);
    let bytes = k.bytes() as u64;
    let mut all = kept();
    all.retain(|(t, _)| t != tenant);
    if bytes > limit {
        return;
    }
    while !all.is_empty() && (all.len() >= KEPT_TENANTS || held(&all).saturating_add(bytes) > limit)
    {
        all.remove(0);
    }
    all.push((tenant.clone(), k));
}

/// MiB held by everything kept (what a benchmark prints).
pub fn held_mb() -> f64 {
    held(&kept()) as f64 / f64::from(1u32 << 20)
}

fn held(all: &[(TenantId, Kept)]) -> u64 {
    all.iter().map(|(_, k)| k.bytes() as u64).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a pair of an empty catalogue would keep.
    fn empty(token: u64) -> Kept {
        Kept {
            token,
            vectors: Rows::new(),
            group_category: Vec::new(),
            group_of: Vec::new(),
            indexes: Vec::new(),
            ends: Vec::new(),
            by_identity: Groups(HashMap::default()),
        }
    }

    #[test]
    fn pairs_of_many_tenants_keep_the_engines_of_the_last_kept_tenants_only() {
        let tenant = |i: usize| TenantId::parse(&format!("kept-cap-{i}")).unwrap();
        let many = 4 * KEPT_TENANTS;
        for i in 0..many {
            keep(&tenant(i), empty(i as u64 + 1), 1024);
            // Other tests of this process keep engines too: the cap holds for all of them.
            assert!(kept().len() <= KEPT_TENANTS, "after {} pairs", i + 1);
        }
        let held = |i: usize| kept().iter().any(|(t, _)| *t == tenant(i));
        assert!(!held(0), "the least recently kept went first");
        assert!(held(many - 1), "the last kept stays");
        for i in 0..many {
            forget(&tenant(i));
        }
    }
}
