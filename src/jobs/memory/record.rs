//! A job as the embedded store keeps it: the snapshot a reader sees, plus the run's
//! bookkeeping no reader sees (its fencing claim, lease, free retry, takeover) and its
//! timeline, kept as the Redis record keeps it (every lifecycle event, a ring of sampled
//! progress events, the latest tick).

use std::collections::VecDeque;

use super::super::pipeline::StepRef;
use super::super::store::Tick;
use super::super::timeline::{EventId, TimelineEvent, PROGRESS_KEPT, TIMELINE_CAP};
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
    /// Its timeline (it expires with the record).
    pub(super) timeline: Timeline,
    /// Whether the job runs in its tenant's order (it is in its tenant's lane).
    pub(super) in_order: bool,
    /// A pipeline's steps (empty for any other job).
    pub(super) steps: Vec<StepRef>,
}

impl Record {
    pub(super) fn new(snapshot: Snapshot) -> Self {
        Self {
            snapshot,
            superseded_by: None,
            claim: 0,
            free_retry: false,
            lease_ms: None,
            timeline: Timeline::default(),
            in_order: false,
            steps: Vec::new(),
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

/// A job's timeline: the rule is at `PROGRESS_KEPT` in jobs/timeline.rs.
#[derive(Default)]
pub(super) struct Timeline {
    /// The next event's number (every event noted counts, kept or not).
    next_seq: u64,
    /// When the last event was noted: the next one is never dated before it.
    last_ms: u64,
    lifecycle: Vec<TimelineEvent>,
    sampled: VecDeque<TimelineEvent>,
    sampled_ms: Option<u64>,
    tick: Option<TimelineEvent>,
}

impl Timeline {
    /// When the last event was noted.
    pub(super) fn last_ms(&self) -> u64 {
        self.last_ms
    }

    /// The id of the next event, noted at `now`, and its time (never before the last one's).
    pub(super) fn next_id(&mut self, now: u64) -> (String, u64) {
        self.last_ms = self.last_ms.max(now);
        let id = EventId {
            ms: self.last_ms,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        (id.to_string(), self.last_ms)
    }

    /// Keeps `event`: a lifecycle event always; a progress tick as the latest, and sampled
    /// when `sample_ms` passed since the last sample and its step differs (or twelve times
    /// that passed).
    pub(super) fn push(&mut self, event: TimelineEvent, sample_ms: u64) {
        if event.kind != "progress" {
            self.lifecycle.push(event);
            return;
        }
        let since = event.at.saturating_sub(self.sampled_ms.unwrap_or(0));
        let changed = self
            .sampled
            .back()
            .is_none_or(|last| last.step != event.step);
        if since >= sample_ms.saturating_mul(12) || (since >= sample_ms && changed) {
            self.sampled_ms = Some(event.at);
            self.sampled.push_back(event.clone());
            if self.sampled.len() > PROGRESS_KEPT {
                self.sampled.pop_front();
            }
        }
        self.tick = Some(event);
    }

    /// The events after `after`, oldest first, at most `TIMELINE_CAP` (the newest).
    pub(super) fn after(&self, after: Option<EventId>) -> Vec<TimelineEvent> {
        let mut events: Vec<TimelineEvent> = self
            .lifecycle
            .iter()
            .chain(&self.sampled)
            .chain(&self.tick)
            .filter(|e| after.is_none_or(|after| e.event_id() > Some(after)))
            .cloned()
            .collect();
        events.sort_by_key(TimelineEvent::event_id);
        events.dedup_by_key(|e| e.event_id());
        let skip = events.len().saturating_sub(TIMELINE_CAP);
        events.split_off(skip)
    }
}
