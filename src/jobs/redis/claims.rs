//! The dispatcher's claims: up to `n` jobs from the slot groups whose ready queue may have
//! work, round robin, each group's claim one call of claim.lua naming the records of the
//! queue's head as the last claim there answered it (`declare.rs`, `RedisStore::heads`).

use std::sync::atomic::Ordering;

use super::super::keys::{Group, GROUPS};
use super::super::store::{Claim, StoreError};
use super::super::{JobId, Kind};
use super::record::Hash;
use super::scripts::{self, Call};
use super::RedisStore;

/// A claim as claim.lua and finish.lua answer it: the job's id, then its record as HGETALL
/// answers it.
pub(super) fn claim_from(raw: &[String]) -> Result<Claim, StoreError> {
    let Some((id, fields)) = raw.split_first() else {
        return Err(StoreError::Corrupt("a claim named no job".into()));
    };
    let id = JobId::parse(id).map_err(|_| StoreError::Corrupt("a claim named no id".into()))?;
    Hash::from_flat(fields).claim(id)
}

/// A finish's claim of its worker's next job: the group it claims from, the worker and the
/// kinds it runs.
pub(super) struct NextClaim<'a> {
    pub from: Group,
    pub worker: &'a str,
    pub kinds: &'a [Kind],
}

/// How many calls one group's claim makes at most: the heads they name pass over 4, 8, 16, …
/// entries, ~1,000 in all, of kinds this worker does not run (replicas of two versions
/// during a deploy); a longer run of them waits for the next claim.
const CLAIM_CALLS: usize = 8;

impl RedisStore {
    /// Claims up to `n` jobs from the groups whose queue may have work (`pending`: a wake-up
    /// named them, or the last claim there left jobs behind), round robin: starting after the
    /// group the last claim was served from, so a busy group never holds back another; a
    /// group whose queue a claim left empty (its head answered empty) is not asked again
    /// until a wake-up names it. No group pending: no call.
    pub(super) async fn claim_many_for(
        &self,
        worker: &str,
        kinds: &[Kind],
        n: usize,
    ) -> Result<Vec<Claim>, StoreError> {
        let mut claims = Vec::new();
        let start = self.next_group.load(Ordering::Relaxed);
        for i in 0..GROUPS {
            if claims.len() >= n {
                break;
            }
            let group = Group::at((start + i) % GROUPS).expect("an index below GROUPS");
            let bit = 1u64 << group.index();
            // Cleared before the call: a wake-up heard while it runs sets it again.
            if self.pending.fetch_and(!bit, Ordering::AcqRel) & bit == 0 {
                continue;
            }
            let want = n - claims.len();
            match self.claim_in(group, worker, kinds, want).await {
                Ok((got, more)) => {
                    if more {
                        self.pending.fetch_or(bit, Ordering::AcqRel);
                    }
                    if !got.is_empty() {
                        self.next_group.store(group.index() + 1, Ordering::Relaxed);
                    }
                    claims.extend(got);
                }
                Err(e) => {
                    self.pending.fetch_or(bit, Ordering::AcqRel);
                    // Claims already made must be run, not dropped with the error.
                    if claims.is_empty() {
                        return Err(e);
                    }
                    break;
                }
            }
        }
        Ok(claims)
    }

    /// The claim a finish in `group` makes for `worker` (which runs `kinds`): from the first
    /// group whose queue may have work in the round robin's order (as `claim_many_for` takes
    /// them), its mark cleared (a wake-up heard meanwhile sets it again; `claimed_in` sets it
    /// again when jobs are left); none when no group may: the dispatcher's own claims trust the
    /// marks so (a job queued anywhere wakes every process), and a finish that popped an empty
    /// queue cost Redis ~10k instructions, 2 % of a harness job (docs/performance.md). On a
    /// cluster a call reaches its own group's keys only: from `group` while no other group may
    /// have work, else none (the dispatcher serves the next group first).
    pub(super) fn finish_claim<'a>(
        &self,
        group: Group,
        worker: &'a str,
        kinds: &'a [Kind],
    ) -> Option<NextClaim<'a>> {
        let pending = self.pending.load(Ordering::Acquire);
        let from = if self.on_cluster() {
            (pending & !(1u64 << group.index()) == 0).then_some(group)?
        } else {
            let start = self.next_group.load(Ordering::Relaxed);
            let from = (0..GROUPS)
                .map(|i| Group::at((start + i) % GROUPS).expect("an index below GROUPS"))
                .find(|g| pending & (1u64 << g.index()) != 0)?;
            self.pending
                .fetch_and(!(1u64 << from.index()), Ordering::AcqRel);
            from
        };
        Some(NextClaim {
            from,
            worker,
            kinds,
        })
    }

    /// The keys a finish in `group` names for `claim` beside its own: the records at the head
    /// of the queue it claims from, and another group's queue and lease index.
    pub(super) fn claim_keys(&self, group: Group, claim: &NextClaim) -> Vec<String> {
        let mut keys = Vec::new();
        if claim.from != group {
            keys.push(self.keys.queue(claim.from));
            keys.push(self.keys.leases(claim.from));
        }
        keys.extend(self.head_records(claim.from));
        keys
    }

    /// A finish's arguments for `claim` (finish.lua): the queue it claims from ('' for the
    /// call's own group's), the worker and its kinds; none for no claim (two arguments less
    /// than '' and '': ~2,300 Redis instructions a finish).
    pub(super) fn claim_args(&self, group: Group, claim: Option<&NextClaim>, inv: &mut Call) {
        let Some(claim) = claim else {
            return;
        };
        match claim.from == group {
            true => inv.arg(""),
            false => inv.arg(self.keys.queue(claim.from)),
        };
        inv.arg(claim.worker);
        for kind in claim.kinds {
            inv.arg(kind.as_str());
        }
    }

    /// After a claim in `group` (a finish's) that `claimed` or not and answered the queue's
    /// `head` (`{'head', id…}`, or nothing when it found the queue empty): the head is kept for
    /// the next call to name, the group marked again while its queue holds jobs, and the round
    /// robin moves past it when it served.
    pub(super) fn claimed_in(
        &self,
        group: Group,
        claimed: bool,
        head: &[String],
    ) -> Result<(), StoreError> {
        let left = match head.is_empty() {
            true => self.learn_head(group, &[String::from("head")])?,
            false => self.learn_head(group, head)?,
        };
        if !left.is_empty() {
            self.pending
                .fetch_or(1u64 << group.index(), Ordering::AcqRel);
        }
        if claimed {
            self.next_group.store(group.index() + 1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// One job from the first group (in turn) whose queue has one this worker runs, whatever
    /// the marks say: up to a call a group. For a caller outside the dispatcher (which claims
    /// with `claim_many_for`, and so never looks at a queue no wake-up named).
    pub(super) async fn claim_any(
        &self,
        worker: &str,
        kinds: &[Kind],
    ) -> Result<Option<Claim>, StoreError> {
        let start = self.next_group.fetch_add(1, Ordering::Relaxed);
        for i in 0..GROUPS {
            let group = Group::at((start + i) % GROUPS).expect("an index below GROUPS");
            if let Some(claim) = self.claim_in(group, worker, kinds, 1).await?.0.pop() {
                return Ok(Some(claim));
            }
        }
        Ok(None)
    }

    /// claim.lua in one group: its claims, and whether the queue still holds jobs (its head
    /// as answered is not empty).
    /// The call names the records of the queue's head as the last claim there answered it; a
    /// claim that stopped at a job it did not name (one queued since, or given back to the
    /// head, or past jobs of kinds this worker does not run) is made again naming the head it
    /// answered, at least twice as long as what it took off (`queue_head` in the prelude), up
    /// to `CLAIM_CALLS` calls.
    async fn claim_in(
        &self,
        group: Group,
        worker: &str,
        kinds: &[Kind],
        n: usize,
    ) -> Result<(Vec<Claim>, bool), StoreError> {
        let mut conn = self.connection().await?;
        let mut claims = Vec::new();
        for _ in 0..CLAIM_CALLS {
            // The head this call names, compared with the one it answers: another claim of
            // this process may have kept a newer one meanwhile.
            let named = self.head_of(group);
            let mut route = self.route(group).with(self.keys.leases(group));
            route
                .declared
                .extend(named.iter().map(|id| self.record(id)));
            let mut inv = scripts::invocation(&scripts::CLAIM, &self.settings, route);
            inv.arg(worker).arg(n - claims.len());
            for kind in kinds {
                inv.arg(kind.as_str());
            }
            let mut raw: Vec<Vec<String>> = self.bounded(inv.invoke_async(&mut conn)).await?;
            let head = raw.pop().unwrap_or_default();
            let head = self.learn_head(group, &head)?;
            let moved = head != named;
            let left = raw.last().is_some_and(Vec::is_empty);
            if left {
                raw.pop();
            }
            for claimed in &raw {
                claims.push(claim_from(claimed)?);
            }
            if !(left && moved && claims.len() < n) {
                return Ok((claims, !head.is_empty()));
            }
        }
        Ok((claims, true))
    }
}
