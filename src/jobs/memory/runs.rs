//! A run's life in the embedded store: claim, progress, heartbeat, finish, restore, release
//! and recovery, each under the store's one lock (atomic, as a script is on Redis), each with
//! the same answers as its script.
//!
//! The bookkeeping they share (locks, listing, queue) is `state.rs`; timeline writes are
//! `timeline.rs`.

use super::super::store::{
    Claim, Event, Finish, Live, NewJob, Origin, Outcome, Recovered, Release, Renewal, Restore,
    RunEnd, RunId, RunRef, StoreError, Tick, LOST, STARTING_STEP,
};
use super::super::{now_ms, worker_name, JobId, Kind, Status, REQUEUED_STEP};
use super::record::Record;
use super::MemoryStore;

impl MemoryStore {
    pub(super) fn claim_next(
        &self,
        worker: &str,
        kinds: &[Kind],
    ) -> Result<Option<Claim>, StoreError> {
        let now = now_ms();
        let expires_ms = self.expiry(now);
        let lease_ms = now + self.settings.stale_ms();
        let mut state = self.state();
        // Like claim.lua: a job of a kind this worker does not run goes to the tail; met
        // again, the whole queue was seen.
        let mut first_passed = None;
        while let Some(id) = state.queue.pop_front() {
            if first_passed == Some(id) {
                state.queue.push_front(id);
                return Ok(None);
            }
            let Some(entry) = state.job_mut(&id, now) else {
                continue;
            };
            let rec = &mut entry.value;
            if rec.snapshot.status != Status::Queued || rec.superseded_by.is_some() {
                continue;
            }
            if !kinds.contains(&rec.snapshot.kind) {
                state.queue.push_back(id);
                first_passed.get_or_insert(id);
                continue;
            }
            if !std::mem::take(&mut rec.free_retry) {
                rec.snapshot.attempt += 1;
            }
            rec.claim += 1;
            rec.lease_ms = Some(lease_ms);
            entry.expires_ms = expires_ms;
            let in_order = rec.in_order;
            let s = &mut rec.snapshot;
            s.status = Status::Running;
            s.worker = Some(worker.to_owned());
            STARTING_STEP.clone_into(&mut s.step);
            s.updated_at = now;
            s.heartbeat_at = now;
            s.started_at.get_or_insert(now);
            let claim = Claim {
                job: NewJob {
                    id,
                    tenant: s.tenant_id.clone(),
                    kind: s.kind.clone(),
                    params: s.params.clone(),
                    step: String::new(),
                    origin: Origin {
                        created_by: s.created_by.clone().unwrap_or_default(),
                        request_id: s.request_id.clone().unwrap_or_default(),
                        retry_of: s.retry_of,
                    },
                    idempotency_key: None,
                    in_order,
                    pipeline: s.pipeline_id,
                },
                created_at: s.created_at,
                run: RunId {
                    id,
                    claim: rec.claim,
                },
                attempt: s.attempt,
            };
            let extra = [("attempt", claim.attempt.into()), ("worker", worker.into())];
            state.note(id, "started", None, &extra, now);
            return Ok(Some(claim));
        }
        Ok(None)
    }

    pub(super) fn tick_run(
        &self,
        run: &RunId,
        percent: u8,
        step: &str,
    ) -> Result<Tick, StoreError> {
        let now = now_ms();
        let mut state = self.state();
        let Some(entry) = state.job_mut(&run.id, now) else {
            return Ok(Tick::Missing);
        };
        if let Err(answer) = entry.value.held_by(run.claim) {
            return Ok(answer);
        }
        let s = &mut entry.value.snapshot;
        s.percent = s.percent.max(percent.min(100));
        step.clone_into(&mut s.step);
        s.updated_at = now;
        state.note(run.id, "progress", None, &[], now);
        Ok(Tick::Applied)
    }

    pub(super) fn renew_runs(&self, runs: &[RunId]) -> Result<Vec<Renewal>, StoreError> {
        let now = now_ms();
        let expires_ms = self.expiry(now);
        let lease_ms = now + self.settings.stale_ms();
        let mut state = self.state();
        state.heartbeat_at = Some(now);
        let mut out = Vec::with_capacity(runs.len());
        for run in runs {
            let Some(entry) = state.job_mut(&run.id, now) else {
                out.push(Renewal::Missing);
                continue;
            };
            if entry.value.held_by(run.claim).is_err() {
                out.push(Renewal::Fenced);
                continue;
            }
            let s = &entry.value.snapshot;
            let (tenant, kind) = (s.tenant_id.clone(), s.kind.clone());
            if state
                .lock(&tenant, &kind, now)
                .is_some_and(|holder| holder != run.id)
            {
                out.push(Renewal::Fenced);
                continue;
            }
            let entry = state.job_mut(&run.id, now).expect("found above");
            entry.expires_ms = expires_ms;
            entry.value.lease_ms = Some(lease_ms);
            let s = &mut entry.value.snapshot;
            s.heartbeat_at = now;
            out.push(if s.cancel_requested_at.is_some() {
                Renewal::CancelRequested
            } else {
                Renewal::Held
            });
            state.take_lock(&tenant, &kind, run.id, expires_ms);
        }
        Ok(out)
    }

    pub(super) fn finish_run(&self, end: RunEnd) -> Result<Finish, StoreError> {
        let RunEnd {
            of,
            outcome,
            percent,
        } = end;
        let RunRef {
            job,
            run,
            created_at,
        } = of;
        let now = now_ms();
        let expires_ms = self.expiry(now);
        let mut state = self.state();
        match state.job_mut(&job.id, now) {
            None => {
                if !state.may_write_back(job, created_at, now) {
                    return Ok(Finish::Fenced);
                }
                // Written back whole; the outcome is applied below like any finish.
                let snapshot = job.record(
                    Status::Running,
                    percent.min(100),
                    &outcome.step(),
                    created_at,
                    now,
                    self.settings.max_attempts,
                );
                let mut record = Record::new(snapshot);
                record.claim = run.claim;
                state.insert(record, expires_ms, self.settings.list_cap);
                state.note(job.id, "restored", None, &[], now);
            }
            Some(entry) => {
                if entry.value.snapshot.status.is_finished() {
                    return Ok(Finish::AlreadyEnded);
                }
                if entry.value.held_by(run.claim).is_err() {
                    return Ok(Finish::Fenced);
                }
                entry.expires_ms = expires_ms;
            }
        }
        state.end(job.id, outcome.status(), now, |s| {
            s.step = outcome.step();
            s.heartbeat_at = now;
            s.started_at.get_or_insert(now);
            s.percent = s.percent.max(percent.min(100));
            match outcome {
                Outcome::Done(report) => {
                    s.percent = 100;
                    s.result = report.clone();
                }
                Outcome::Failed(class, report) => {
                    s.error = Some(class.clone());
                    if let Some(report) = report {
                        s.result = report.clone();
                    }
                }
                Outcome::Cancelled(report) => s.result = report.clone(),
            }
        });
        self.flush(state);
        Ok(Finish::Applied)
    }

    pub(super) fn restore_run(&self, lost: RunRef, live: &Live) -> Result<Restore, StoreError> {
        let (job, created_at) = (lost.job, lost.created_at);
        let now = now_ms();
        let expires_ms = self.expiry(now);
        let mut state = self.state();
        if state.job_mut(&job.id, now).is_some() {
            return Ok(Restore::Present);
        }
        if !state.may_write_back(job, created_at, now) {
            return Ok(Restore::Fenced);
        }
        let mut snapshot = job.record(
            Status::Running,
            live.percent.min(100),
            &live.step,
            created_at,
            now,
            self.settings.max_attempts,
        );
        snapshot.attempt = live.attempt;
        snapshot.worker = Some(worker_name());
        let mut record = Record::new(snapshot);
        record.claim = lost.run.claim;
        record.lease_ms = Some(now + self.settings.stale_ms());
        state.insert(record, expires_ms, self.settings.list_cap);
        let extra = [
            ("attempt", live.attempt.into()),
            ("worker", worker_name().into()),
        ];
        state.note(job.id, "restored", None, &extra, now);
        Ok(Restore::Restored)
    }

    pub(super) fn release_run(&self, run: &RunId) -> Result<Release, StoreError> {
        let now = now_ms();
        let mut state = self.state();
        let Some(entry) = state.job_mut(&run.id, now) else {
            return Ok(Release::Fenced);
        };
        if entry.value.held_by(run.claim).is_err() {
            return Ok(Release::Fenced);
        }
        if entry.value.snapshot.cancel_requested_at.is_some() {
            state.end(run.id, Status::Cancelled, now, Self::cancelled);
            self.flush(state);
            return Ok(Release::Requeued);
        }
        let rec = &mut entry.value;
        rec.free_retry = true;
        rec.lease_ms = None;
        rec.snapshot.status = Status::Queued;
        rec.snapshot.updated_at = now;
        "requeued: its replica shut down; waiting for a worker".clone_into(&mut rec.snapshot.step);
        state.queue.push_front(run.id);
        state.note(run.id, "released", None, &[], now);
        drop(state);
        self.publish(Event::Wake);
        Ok(Release::Requeued)
    }

    pub(super) fn recover_leases(&self) -> Result<Vec<Recovered>, StoreError> {
        let now = now_ms();
        let max = self.settings.max_attempts.max(1);
        let mut state = self.state();
        let due: Vec<JobId> = state
            .jobs
            .iter()
            .filter(|(_, e)| e.value.lease_ms.is_some_and(|at| at <= now))
            .map(|(id, _)| *id)
            .collect();
        let mut out = Vec::new();
        for id in due {
            let entry = state.jobs.get_mut(&id).expect("listed above");
            let rec = &mut entry.value;
            rec.lease_ms = None;
            if rec.snapshot.status != Status::Running || rec.superseded_by.is_some() {
                continue;
            }
            if rec.snapshot.cancel_requested_at.is_some() {
                state.end(id, Status::Cancelled, now, Self::cancelled);
            } else if rec.snapshot.attempt < max {
                let s = &mut rec.snapshot;
                s.status = Status::Queued;
                s.recovered_at = Some(now);
                s.updated_at = now;
                // The words it read since its lease went stale (`Snapshot::read_at`).
                REQUEUED_STEP.clone_into(&mut s.step);
                let attempt = [("attempt", s.attempt.into())];
                state.note(id, "requeued", None, &attempt, now);
                state.queue.push_front(id);
                out.push(Recovered::Requeued(id));
                state.outbox.push(Event::Wake);
            } else if max > 1 {
                state.end(id, Status::Failed, now, |s| {
                    s.error = Some(LOST.to_owned());
                    "failed: Lost".clone_into(&mut s.step);
                });
                out.push(Recovered::Lost(id));
            } else {
                // Its run is fenced off, should its process come back: it reads lost for good.
                rec.claim += 1;
                // Still leased, never due: the active jobs find it (counted lost) while its
                // record lives and no create took it over, and no sweep takes it again.
                rec.lease_ms = Some(u64::MAX);
                state.note(id, "lost", Some("lost"), &[], now);
                // It will not run again: its tenant's order and its pipeline go on without it.
                state.after_end(id, Status::Failed, Some(LOST), now);
                out.push(Recovered::LeftLost(id));
            }
        }
        self.flush(state);
        Ok(out)
    }
}
