//! Timeline writes in the embedded store: an event kept in the job's timeline (by the rule of
//! `record::Timeline`) and handed to its tenant's watchers in the same step as the change, and the end of a job
//! (final fields, lock released, lease dropped, its `finished` event, its minute's count) — as `note` and
//! `end_job` do in the prelude.

use serde_json::Value;

use super::super::store::Event;
use super::super::timeline::{JobChange, TimelineEvent};
use super::super::{JobId, Snapshot, Status};
use super::state::State;

impl State {
    /// Like `note` in the prelude: appends an event to the job's timeline (the record as it
    /// reads now, `status` when given) and hands it to the tenant's watchers.
    pub(super) fn note(
        &mut self,
        id: JobId,
        typ: &str,
        status: Option<&str>,
        extra: &[(&str, Value)],
        now: u64,
    ) {
        let sample_ms = self.progress_sample_ms;
        let Some(entry) = self.jobs.get_mut(&id) else {
            return;
        };
        let rec = &mut entry.value;
        let (event_id, at) = rec.timeline.next_id(now);
        let s = &rec.snapshot;
        let status = status.unwrap_or(match s.cancel_requested_at {
            Some(_) if s.status == Status::Running => Status::Cancelling.as_str(),
            _ => s.status.as_str(),
        });
        let event = TimelineEvent {
            id: event_id,
            kind: typ.to_owned(),
            at,
            status: status.to_owned(),
            percent: s.percent,
            step: s.step.clone(),
            extra: extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        };
        let change = JobChange {
            id: event.id.clone(),
            kind_of_event: event.kind.clone(),
            job_id: id.to_string(),
            tenant_id: s.tenant_id.to_string(),
            kind: s.kind.to_string(),
            status: event.status.clone(),
            percent: event.percent,
            step: event.step.clone(),
        };
        rec.timeline.push(event, sample_ms);
        self.watchers.send(change);
    }

    /// Ends an active job: final fields set by `fill`, lock released, lease dropped, its
    /// `finished` event, its end told (`outbox`), and what follows it in its tenant's order
    /// and its pipeline (`after_end`).
    pub(super) fn end(
        &mut self,
        id: JobId,
        status: Status,
        now: u64,
        fill: impl FnOnce(&mut Snapshot),
    ) {
        let Some(entry) = self.jobs.get_mut(&id) else {
            return;
        };
        entry.value.lease_ms = None;
        let s = &mut entry.value.snapshot;
        s.status = status;
        s.updated_at = now;
        s.finished_at = Some(now);
        fill(s);
        let error: Vec<(&str, Value)> = s
            .error
            .iter()
            .map(|e| ("error", e.as_str().into()))
            .collect();
        let (tenant, kind) = (s.tenant_id.clone(), s.kind.clone());
        let class = s.error.clone();
        self.release_lock(&tenant, &kind, id, now);
        self.note(id, "finished", None, &error, now);
        self.count_end(&kind, status, now);
        self.outbox.push(Event::Ended(id));
        self.after_end(id, status, class.as_deref(), now);
    }
}
