//! A job as the embedded store keeps it: the snapshot a reader sees, plus the run's
//! bookkeeping no reader sees (its fencing claim, lease, free retry, takeover) and its
//! timeline.

use std::collections::VecDeque;

use super::super::store::Tick;
use super::super::timeline::TimelineEvent;
use super::super::{JobId, Snapshot, Status};

pub(super) struct Record {
    pub(super) snapshot: Snapshot,
    pub(super) superseded_by: Option<JobId>,
    /// The fencing token of the current run (raised by every claim).
    pub(super) claim: u64,
    /// The next claim does not count an attempt (the run was given back at shutdown).
    pub(super) free_retry: bool,
    /// When the running job's lease expires.
    pub(super) lease_ms: Option<u64>,
    /// Its timeline, oldest first, at most `TIMELINE_CAP` events (it expires with the record).
    pub(super) timeline: VecDeque<TimelineEvent>,
}

impl Record {
    pub(super) fn new(snapshot: Snapshot) -> Self {
        Self {
            snapshot,
            superseded_by: None,
            claim: 0,
            free_retry: false,
            lease_ms: None,
            timeline: VecDeque::new(),
        }
    }

    /// Whether run `claim` may write: `Ok`, or the answer `run_state` gives in the prelude.
    pub(super) fn held_by(&self, claim: u64) -> Result<(), Tick> {
        let active = self.snapshot.status == Status::Running;
        if self.superseded_by.is_some() || !active || self.claim != claim {
            return Err(Tick::Fenced);
        }
        Ok(())
    }
}
