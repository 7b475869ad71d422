//! A tenant's order and its pipelines in the embedded store, as `lua/order.lua` keeps them:
//! each tenant's lane of ordered jobs (the head may run, each other waits for the one before
//! it, outside the ready queue), the job behind released by the end of the one ahead in the
//! same step; a pipeline ended by its steps' ends, the steps after a failed or cancelled one
//! skipped first so that none of them ever starts.

use std::collections::VecDeque;

use super::super::pipeline::{self, StepRef, SKIPPED_CANCELLED};
use super::super::runner::QUEUED_STEP;
use super::super::store::{Cancel, Event};
use super::super::{JobId, Kind, Status, TenantId};
use super::state::State;

impl State {
    /// Whether job `id` is queued or running and not taken over (so it holds its place).
    pub(super) fn is_active(&self, id: &JobId, now: u64) -> bool {
        self.jobs.get(id).is_some_and(|e| {
            e.expires_ms > now
                && e.value.superseded_by.is_none()
                && matches!(e.value.snapshot.status, Status::Queued | Status::Running)
        })
    }

    /// Whether an active job stands in the tenant's lane: an ordered job created now waits.
    pub(super) fn lane_busy(&self, tenant: &TenantId, now: u64) -> bool {
        self.lanes
            .get(tenant)
            .is_some_and(|lane| lane.iter().any(|id| self.is_active(id, now)))
    }

    /// Puts an ordered job at the tail of its tenant's lane; answers the job it must wait for
    /// (and its kind), or `None` when nothing of its tenant is ahead. Entries whose job is no
    /// longer active are dropped, and a job left at the head waiting for one is released.
    pub(super) fn lane_join(
        &mut self,
        id: JobId,
        tenant: &TenantId,
        now: u64,
    ) -> Option<(JobId, Kind)> {
        let listed: Vec<JobId> = self
            .lanes
            .get(tenant)
            .map(|lane| lane.iter().copied().collect())
            .unwrap_or_default();
        let mut kept = VecDeque::new();
        for other in listed {
            if !self.is_active(&other, now) {
                continue;
            }
            let waits_for = self
                .jobs
                .get(&other)
                .and_then(|e| e.value.snapshot.waiting_for);
            if let (true, Some(gone)) = (kept.is_empty(), waits_for) {
                self.release(other, gone, now);
            }
            kept.push_back(other);
        }
        let ahead = kept.back().and_then(|last| {
            let kind = self.jobs.get(last)?.value.snapshot.kind.clone();
            Some((*last, kind))
        });
        kept.push_back(id);
        self.lanes.insert(tenant.clone(), kept);
        ahead
    }

    /// Takes a job out of its tenant's lane: the job behind it waits for the one before it,
    /// or joins the ready queue when it was at the head.
    fn lane_leave(&mut self, id: JobId, tenant: &TenantId, now: u64) {
        let Some(lane) = self.lanes.get_mut(tenant) else {
            return;
        };
        let Some(at) = lane.iter().position(|other| *other == id) else {
            return;
        };
        lane.remove(at);
        let behind = lane.get(at).copied();
        let ahead = at.checked_sub(1).and_then(|i| lane.get(i).copied());
        if lane.is_empty() {
            self.lanes.remove(tenant);
        }
        match (behind, ahead) {
            (Some(behind), Some(ahead)) => self.repoint(behind, ahead, now),
            (Some(behind), None) => self.release(behind, id, now),
            _ => {}
        }
    }

    /// A waiting job joins the ready queue: `after`, the job it waited for, ended.
    fn release(&mut self, id: JobId, after: JobId, now: u64) {
        let Some(entry) = self.job_mut(&id, now) else {
            return;
        };
        let s = &mut entry.value.snapshot;
        s.waiting_for = None;
        QUEUED_STEP.clone_into(&mut s.step);
        s.updated_at = now;
        self.note(
            id,
            "ready",
            None,
            &[("after", after.to_string().into())],
            now,
        );
        self.queue.push_back(id);
        if self.queue.len() == 1 {
            self.outbox.push(Event::Wake);
        }
    }

    /// A waiting job now waits for `ahead`: the job it waited for ended while waiting itself.
    fn repoint(&mut self, id: JobId, ahead: JobId, now: u64) {
        let Some(kind) = self.jobs.get(&ahead).map(|e| e.value.snapshot.kind.clone()) else {
            return;
        };
        let Some(entry) = self.job_mut(&id, now) else {
            return;
        };
        let s = &mut entry.value.snapshot;
        s.waiting_for = Some(ahead);
        s.step = pipeline::waiting_step(&kind, &ahead);
        s.updated_at = now;
        let extra = [("waiting_for", ahead.to_string().into())];
        self.note(id, "waiting", None, &extra, now);
    }

    /// What follows a job's end (or the decision that it will not run again, counted as
    /// `status` with `error`): its pipeline hears of it, and it leaves its tenant's lane.
    pub(super) fn after_end(&mut self, id: JobId, status: Status, error: Option<&str>, now: u64) {
        let Some(entry) = self.jobs.get_mut(&id) else {
            return;
        };
        let rec = &mut entry.value;
        rec.snapshot.waiting_for = None;
        let (in_order, pipeline) = (rec.in_order, rec.snapshot.pipeline_id);
        let (tenant, kind) = (rec.snapshot.tenant_id.clone(), rec.snapshot.kind.clone());
        if let Some(parent) = pipeline {
            self.step_ended(parent, id, &kind, status, error, now);
        }
        if in_order {
            self.lane_leave(id, &tenant, now);
        }
    }

    /// The pipeline's percent: its steps' percents weighted by their shares, rounded down.
    fn pipeline_percent(&self, steps: &[StepRef]) -> u8 {
        let weighted: u32 = steps
            .iter()
            .map(|s| {
                let percent = self
                    .jobs
                    .get(&s.job_id)
                    .map_or(0, |e| e.value.snapshot.percent);
                u32::from(s.share) * u32::from(percent)
            })
            .sum();
        u8::try_from((weighted / 100).min(100)).expect("at most 100")
    }

    /// The step a reader sees of the pipeline of `steps` (`pipeline::compose`): `kind: step` of
    /// its first step not done whose record is there, `None` when none is.
    fn current_step(&self, steps: &[StepRef], now: u64) -> Option<String> {
        steps.iter().find_map(|step| {
            let e = self.jobs.get(&step.job_id)?;
            let s = &e.value.snapshot;
            (e.expires_ms > now && s.status != Status::Done)
                .then(|| format!("{}: {}", step.kind, s.step))
        })
    }

    /// Like `step_ended` in order.lua: a step of pipeline `parent` ended as `status`.
    fn step_ended(
        &mut self,
        parent: JobId,
        id: JobId,
        kind: &Kind,
        status: Status,
        error: Option<&str>,
        now: u64,
    ) {
        if self.closing.contains(&parent) {
            return;
        }
        let Some(entry) = self.job_mut(&parent, now) else {
            return;
        };
        if entry.value.snapshot.status.is_finished() {
            return;
        }
        let asked = entry.value.snapshot.cancel_requested_at.is_some();
        let steps = entry.value.steps.clone();
        let last = steps.last().is_some_and(|s| s.job_id == id);
        let after = match status {
            // Done after its pipeline was asked to stop (it finished before it read the
            // request): the steps after it were skipped, so the pipeline ends cancelled now;
            // the last one leaves nothing skipped, so it ends done (docs/api.md, Cancel).
            Status::Done if !last && asked => Status::Cancelled,
            // It goes on: a pipeline reads running from its first step's start on.
            Status::Done if !last => Status::Running,
            other => other,
        };
        if matches!(after, Status::Failed | Status::Cancelled) {
            let why = match after {
                Status::Failed => pipeline::skipped_failed(kind),
                _ => SKIPPED_CANCELLED.to_owned(),
            };
            self.skip_steps(parent, &steps, Some(id), &why, None, now);
        }
        let percent = self.pipeline_percent(&steps);
        let by = self.jobs.get(&id).map(|e| {
            let s = &e.value.snapshot;
            (s.cancelled_by.clone(), s.cancel_requested_at)
        });
        if let Some(entry) = self.job_mut(&parent, now) {
            let s = &mut entry.value.snapshot;
            s.percent = s.percent.max(percent);
            s.step = format!("{kind}: {}", status.as_str());
            s.updated_at = now;
        }
        let extra = [
            ("step_job_id", id.to_string().into()),
            ("step_kind", kind.to_string().into()),
            ("step_status", status.as_str().into()),
        ];
        self.note(parent, "step_ended", Some(after.as_str()), &extra, now);
        if after == Status::Running {
            return;
        }
        self.end(parent, after, now, |s| {
            s.step = match (after, error) {
                (Status::Failed, Some(class)) => pipeline::failed_step(kind, class),
                (Status::Cancelled, _) => "cancelled on request".to_owned(),
                _ => "finished".to_owned(),
            };
            if after == Status::Failed {
                s.error = error.map(str::to_owned);
            }
            if let (Status::Cancelled, Some((by, at))) = (after, by) {
                s.cancelled_by = s.cancelled_by.take().or(by);
                s.cancel_requested_at = s.cancel_requested_at.or(at).or(Some(now));
            }
        });
    }

    /// Ends the steps after `from` (all when `None`) that are still queued, last first, as
    /// `cancelled` with step `why` (and `cancelled_by`, when given); a running one is left to
    /// the caller.
    fn skip_steps(
        &mut self,
        parent: JobId,
        steps: &[StepRef],
        from: Option<JobId>,
        why: &str,
        by: Option<&str>,
        now: u64,
    ) {
        self.closing.insert(parent);
        let first = from
            .and_then(|from| steps.iter().position(|s| s.job_id == from))
            .map_or(0, |at| at + 1);
        for step in steps[first..].iter().rev() {
            let queued = self.job_mut(&step.job_id, now).is_some_and(|e| {
                e.value.superseded_by.is_none() && e.value.snapshot.status == Status::Queued
            });
            if queued {
                self.queue.retain(|q| *q != step.job_id);
                self.end(step.job_id, Status::Cancelled, now, |s| {
                    why.clone_into(&mut s.step);
                    if let Some(by) = by {
                        s.cancelled_by.get_or_insert_with(|| by.to_owned());
                    }
                });
            }
        }
        self.closing.remove(&parent);
    }

    /// Like `cancel_pipeline` in order.lua: the running step is asked to stop, the steps not
    /// started are skipped; the pipeline ends cancelled at once when no step was running.
    pub(super) fn cancel_pipeline(&mut self, id: JobId, by: &str, now: u64) -> Cancel {
        let Some(entry) = self.job_mut(&id, now) else {
            return Cancel::Missing;
        };
        if entry.value.snapshot.cancel_requested_at.is_some() {
            return Cancel::Requested;
        }
        let steps = entry.value.steps.clone();
        // Its event carries what the pipeline reads when asked, as a reader composes it (its
        // record keeps 0 % and `queued` while its steps run), kept as step_ended keeps them.
        let percent = self.pipeline_percent(&steps);
        let current = self.current_step(&steps, now);
        let Some(entry) = self.job_mut(&id, now) else {
            return Cancel::Missing;
        };
        let s = &mut entry.value.snapshot;
        s.cancel_requested_at = Some(now);
        s.cancelled_by = Some(by.to_owned());
        s.updated_at = now;
        s.percent = s.percent.max(percent);
        if let Some(current) = current {
            s.step = current;
        }
        self.note(
            id,
            "cancel_requested",
            Some("cancelling"),
            &[("by", by.into())],
            now,
        );
        self.skip_steps(id, &steps, None, SKIPPED_CANCELLED, Some(by), now);
        let mut running = false;
        for step in &steps {
            let Some(entry) = self.job_mut(&step.job_id, now) else {
                continue;
            };
            let rec = &mut entry.value;
            if rec.snapshot.status != Status::Running || rec.superseded_by.is_some() {
                continue;
            }
            running = true;
            if rec.snapshot.cancel_requested_at.is_none() {
                rec.snapshot.cancel_requested_at = Some(now);
                rec.snapshot.cancelled_by = Some(by.to_owned());
                rec.snapshot.updated_at = now;
                self.note(
                    step.job_id,
                    "cancel_requested",
                    Some("cancelling"),
                    &[("by", by.into())],
                    now,
                );
                self.outbox.push(Event::Cancel(step.job_id));
            }
        }
        if !running {
            let percent = self.pipeline_percent(&steps);
            self.end(id, Status::Cancelled, now, |s| {
                s.percent = s.percent.max(percent);
                "cancelled on request".clone_into(&mut s.step);
            });
        }
        Cancel::Requested
    }
}
