//! Creating jobs in the embedded store, as create.lua does: one job, or a pipeline and its
//! steps, in one step under the store's lock — single flight for every lock, the idempotency
//! key, the tenant's rate and the queue's cap checked before anything changes, stale holders
//! that will not run again taken over, ordered jobs put in their tenant's lane.

use super::super::pipeline::StepRef;
use super::super::store::{
    params_fingerprint, Created, Event, NewJob, NewPipeline, StoreError, FIRST_CLAIM, LOST,
};
use super::super::{is_stale, now_ms, JobId, Snapshot, Status};
use super::record::Record;
use super::state::{Expiring, State};
use super::MemoryStore;

/// A job to create: the job, and its steps when it is a pipeline.
struct ToCreate<'a> {
    job: &'a NewJob,
    steps: Vec<StepRef>,
}

impl MemoryStore {
    /// Like create.lua: `worker` set, the job is claimed for it when nothing waits.
    pub(super) fn create_for(
        &self,
        job: NewJob,
        worker: Option<&str>,
    ) -> Result<Created, StoreError> {
        let jobs = [ToCreate {
            job: &job,
            steps: Vec::new(),
        }];
        Ok(self.create_all(&jobs, worker))
    }

    /// Like create.lua for a pipeline and its steps; answers the pipeline as it reads then.
    pub(super) fn create_pipeline_jobs(&self, p: NewPipeline) -> Result<Created, StoreError> {
        let mut jobs = vec![ToCreate {
            job: &p.job,
            steps: p.refs(),
        }];
        jobs.extend(p.steps.iter().map(|(job, _)| ToCreate {
            job,
            steps: Vec::new(),
        }));
        Ok(match self.create_all(&jobs, None) {
            Created::Created(_, took_over) => {
                let now = now_ms();
                let state = self.state();
                let entry = state.jobs.get(&p.job.id).expect("created just above");
                Created::Created(Box::new(self.read(&state, &entry.value, now)), took_over)
            }
            refused => refused,
        })
    }

    /// Creates `jobs` in one step (the first is the one the request named: its key, its count
    /// and the answer are its), or answers why not.
    fn create_all(&self, jobs: &[ToCreate<'_>], worker: Option<&str>) -> Created {
        let now = now_ms();
        let expires_ms = self.expiry(now);
        let mut state = self.state();
        state.sweep(now);
        let first = jobs[0].job;
        let stale = match self.refusal(&mut state, jobs, now) {
            Ok(stale) => stale,
            Err(answer) => return answer,
        };
        if self.settings.creates_per_minute > 0 {
            state.count_create(&first.tenant, now);
        }
        if let Some(key) = first.idempotency_key.clone() {
            let value = (first.id, params_fingerprint(&first.params));
            let id_key = (first.tenant.clone(), first.kind.clone(), key);
            state.idem.insert(id_key, Expiring { value, expires_ms });
        }
        for &(holder, by) in &stale {
            state.supersede(holder, by, now);
        }
        // A retry is recorded on the job it retries in this same step.
        if let Some(old) = first.origin.retry_of {
            state.note_retried(&old, &first.origin.created_by, first.id, now);
        }
        let lone = jobs.len() == 1 && state.queue.is_empty();
        let mut answer = None;
        for new in jobs {
            let made = self.insert_new(&mut state, new, worker.filter(|_| lone), now);
            answer.get_or_insert(made);
        }
        self.flush(state);
        let created = answer.expect("at least one job is created");
        let took_over = stale.into_iter().map(|(holder, _)| holder).collect();
        Created::Created(Box::new(created), took_over)
    }

    /// Writes one new job (queued, waiting for its tenant's job ahead of it, or claimed for
    /// `worker`) with its lock, listing entry and timeline; answers it as created.
    fn insert_new(
        &self,
        state: &mut State,
        new: &ToCreate<'_>,
        worker: Option<&str>,
        now: u64,
    ) -> Snapshot {
        let (job, max) = (new.job, self.settings.max_attempts);
        let ahead = match job.in_order {
            true => state.lane_join(job.id, &job.tenant, now),
            false => None,
        };
        let mut snapshot = match &ahead {
            Some((id, kind)) => job.waiting_record(now, *id, kind, max),
            None => job.record(Status::Queued, 0, &job.step, now, now, max),
        };
        let mut record = Record::new(snapshot.clone());
        record.in_order = job.in_order;
        record.steps.clone_from(&new.steps);
        state.insert(record, self.expiry(now), self.settings.list_cap);
        let mut extra = vec![("request_id", job.origin.request_id.clone().into())];
        if let Some((id, _)) = &ahead {
            extra.push(("waiting_for", id.to_string().into()));
        } else if !new.steps.is_empty() {
            let ids: Vec<String> = new.steps.iter().map(|s| s.job_id.to_string()).collect();
            extra.push(("steps", ids.join(",").into()));
        }
        state.note(job.id, "created", None, &extra, now);
        state.index_job(&job.tenant, job.id, now);
        if ahead.is_some() || !new.steps.is_empty() {
            return snapshot;
        }
        if let Some(worker) = worker {
            // Claimed in the same step, as create.lua does: created, then started.
            snapshot = job.claimed_record(worker, now, max);
            let stale_ms = self.settings.stale_ms();
            if let Some(entry) = state.job_mut(&job.id, now) {
                entry.value.snapshot = snapshot.clone();
                entry.value.claim = FIRST_CLAIM;
                entry.value.lease_ms = Some(now + stale_ms);
            }
            let extra = [("attempt", FIRST_CLAIM.into()), ("worker", worker.into())];
            state.note(job.id, "started", None, &extra, now);
            return snapshot;
        }
        state.queue.push_back(job.id);
        if state.queue.len() == 1 {
            state.outbox.push(Event::Wake);
        }
        snapshot
    }

    /// The answer that refuses `jobs`, checked in create.lua's order (the first job's recorded
    /// idempotency key, an active holder of any of their locks, the queue's cap, the tenant's
    /// rate); else the stale holders they take over, each with the job that takes it over. A
    /// holder is active while queued, while running live, and while stale but to be run again
    /// by recovery (attempts left) or ended cancelled by it (asked to stop). A refusal changes
    /// nothing.
    fn refusal(
        &self,
        state: &mut State,
        jobs: &[ToCreate<'_>],
        now: u64,
    ) -> Result<Vec<(JobId, JobId)>, Created> {
        let first = jobs[0].job;
        if let Some(answer) = state.recorded(first, now) {
            return Err(answer);
        }
        let mut stale = Vec::new();
        for new in jobs {
            let job = new.job;
            let Some(holder) = state.lock(&job.tenant, &job.kind, now) else {
                continue;
            };
            let Some(entry) = state.job_mut(&holder, now) else {
                continue;
            };
            let s = &entry.value.snapshot;
            match s.status {
                Status::Queued => return Err(Created::AlreadyRunning(holder)),
                Status::Running => {
                    let live = !is_stale(s.heartbeat_at, now, self.settings.stale_ms());
                    // Asked to stop: the sweep ends it cancelled (it reads cancelling until
                    // then); else it runs again while it has attempts left.
                    let again = s.cancel_requested_at.is_some()
                        || s.attempt < self.settings.max_attempts.max(1);
                    if live || again {
                        return Err(Created::AlreadyRunning(holder));
                    }
                    stale.push((holder, job.id));
                }
                _ => {}
            }
        }
        // The cap is the ready queue's: jobs that will wait behind their tenant's job do not
        // join it.
        let busy = state.lane_busy(&first.tenant, now);
        let queues = jobs
            .iter()
            .any(|new| new.steps.is_empty() && !(new.job.in_order && busy));
        if queues && state.queue.len() >= self.settings.max_queued {
            return Err(Created::QueueFull);
        }
        let limit = self.settings.creates_per_minute;
        if let Some(wait) = state.rate_limited(&first.tenant, limit, now) {
            return Err(Created::RateLimited(wait));
        }
        Ok(stale)
    }
}

impl State {
    /// Fences off a stale holder that will not run again: `by` took its lock over. It counts
    /// as lost for its tenant's order and its pipeline.
    fn supersede(&mut self, holder: JobId, by: JobId, now: u64) {
        let Some(entry) = self.job_mut(&holder, now) else {
            return;
        };
        entry.value.superseded_by = Some(by);
        entry.value.lease_ms = None;
        let extra = [("superseded_by", by.to_string().into())];
        self.note(holder, "superseded", Some("lost"), &extra, now);
        self.after_end(holder, Status::Failed, Some(LOST), now);
    }
}
