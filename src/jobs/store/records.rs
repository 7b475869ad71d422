//! A new job's record as a store first answers it — queued, claimed at its create — made from
//! the job, copied (`record`) or moved (`into_record`, for a store that holds the job and drops
//! it after); and the create's 202 of a job claimed at its create, made from that claim's record.

use super::{Claim, NewJob, RunId, FIRST_CLAIM, STARTING_STEP};
use crate::jobs::{JobId, Kind, Snapshot, Status};

impl NewJob {
    /// The job's record as it is first written: no result, no error, not finished.
    pub fn record(
        &self,
        status: Status,
        percent: u8,
        step: &str,
        created_at: u64,
        now: u64,
        max_attempts: u32,
    ) -> Snapshot {
        self.recorded_part()
            .into_record(status, percent, step, created_at, now, max_attempts)
    }

    /// A copy of what the job's record is made of (no step, no idempotency key).
    fn recorded_part(&self) -> Self {
        Self {
            id: self.id,
            tenant: self.tenant.clone(),
            kind: self.kind.clone(),
            params: self.params.clone(),
            step: String::new(),
            origin: self.origin.clone(),
            idempotency_key: None,
            in_order: self.in_order,
            pipeline: self.pipeline,
        }
    }

    /// `record`, made of the job itself: its names, parameters and origin moved, not copied.
    pub fn into_record(
        self,
        status: Status,
        percent: u8,
        step: &str,
        created_at: u64,
        now: u64,
        max_attempts: u32,
    ) -> Snapshot {
        Snapshot {
            job_id: self.id,
            tenant_id: self.tenant,
            kind: self.kind,
            status,
            percent,
            step: step.to_owned(),
            params: self.params,
            result: serde_json::Value::Null,
            error: None,
            created_at,
            started_at: (status == Status::Running).then_some(now),
            updated_at: now,
            heartbeat_at: now,
            finished_at: None,
            cancel_requested_at: None,
            attempt: 0,
            max_attempts,
            worker: None,
            recovered_at: None,
            created_by: Some(self.origin.created_by),
            cancelled_by: None,
            retried_by: None,
            retried_as: None,
            request_id: Some(self.origin.request_id),
            retry_of: self.origin.retry_of,
            eta_seconds: None,
            waiting_for: None,
            pipeline_id: self.pipeline,
            steps: None,
        }
    }

    /// The record of a job claimed in the step that created it (`create_claimed`).
    pub fn claimed_record(&self, worker: &str, now: u64, max_attempts: u32) -> Snapshot {
        self.recorded_part()
            .into_claimed_record(worker, now, max_attempts)
    }

    /// `claimed_record`, made of the job itself (a store that answers a create with it holds
    /// the job, which it drops after).
    pub fn into_claimed_record(self, worker: &str, now: u64, max_attempts: u32) -> Snapshot {
        Snapshot {
            attempt: FIRST_CLAIM as u32,
            worker: Some(worker.to_owned()),
            ..self.into_record(Status::Running, 0, STARTING_STEP, now, now, max_attempts)
        }
    }

    /// The record of a job created behind `ahead` (its tenant's job of `kind` created before
    /// it, in the tenant's order): queued, waiting for it.
    pub fn waiting_record(
        &self,
        now: u64,
        ahead: JobId,
        kind: &Kind,
        max_attempts: u32,
    ) -> Snapshot {
        let step = crate::jobs::pipeline::waiting_step(kind, &ahead);
        Snapshot {
            waiting_for: Some(ahead),
            ..self.record(Status::Queued, 0, &step, now, now, max_attempts)
        }
    }

    /// The run of a job claimed in the step that created it, to hand to a worker.
    pub fn first_claim(self, created_at: u64) -> Claim {
        let run = RunId {
            id: self.id,
            claim: FIRST_CLAIM,
        };
        Claim {
            job: self,
            created_at,
            run,
            attempt: FIRST_CLAIM as u32,
        }
    }
}

/// A job claimed in the step that created it as the create's answer shows it: as
/// `NewJob::record` makes it queued (`step` its step), its function not started — the
/// contract's 202 — made of the record the store answered the claim with
/// (`NewJob::claimed_record`) rather than copied again from the job.
pub fn accepted_at_create(claimed: Snapshot, step: &str) -> Snapshot {
    let mut accepted = claimed;
    accepted.status = Status::Queued;
    accepted.step.clear();
    accepted.step.push_str(step);
    accepted.started_at = None;
    accepted.updated_at = accepted.created_at;
    accepted.heartbeat_at = accepted.created_at;
    accepted.attempt = 0;
    accepted.worker = None;
    accepted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::store::Origin;
    use crate::jobs::TenantId;

    #[test]
    fn a_job_claimed_at_its_create_is_answered_as_its_queued_record_and_moved_records_equal_copied_ones(
    ) {
        let tenant = TenantId::parse("t-1").expect("a tenant id");
        let job = NewJob {
            id: JobId::for_tenant(&tenant),
            tenant,
            kind: Kind::parse("enrich").expect("a kind"),
            params: serde_json::json!({"force": true}),
            step: "queued".into(),
            origin: Origin {
                created_by: "ops".into(),
                request_id: "req-1".into(),
                retry_of: Some(JobId::new()),
            },
            idempotency_key: Some("k".into()),
            in_order: true,
            pipeline: Some(JobId::new()),
        };
        let (now, max) = (1_764_496_800_123, 3);
        let claimed = job.claimed_record("host/1", now, max);
        assert_eq!(claimed.status, Status::Running);
        assert_eq!(
            accepted_at_create(claimed.clone(), &job.step),
            job.record(Status::Queued, 0, &job.step, now, now, max)
        );
        assert_eq!(job.clone().into_claimed_record("host/1", now, max), claimed);
        assert_eq!(
            job.clone()
                .into_record(Status::Queued, 0, "queued", now, now, max),
            job.record(Status::Queued, 0, "queued", now, now, max)
        );
    }
}
