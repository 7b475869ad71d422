//! What each store operation answers, and the facts of a run the store is handed (its id,
//! its claim, how it ended): expected outcomes are values here, not errors.

use std::time::Duration;

use serde_json::Value;

use super::NewJob;
use crate::jobs::{JobId, Snapshot, Status};

/// The answer to a create: the job is queued now, another active job holds the lock, or
/// the shared ready queue is full (nothing was created).
#[derive(Clone, Debug, PartialEq)]
pub enum Created {
    /// The job as created (a pipeline's create: the pipeline), and the stale holders whose
    /// locks it took over. Each of those was fenced off in the same step and reads `lost`,
    /// and its pipeline, if it was a step, ended `failed`, `Lost` with it: ends that no run
    /// and no recovery sweep sees, so whoever made the create counts them.
    Created(Box<Snapshot>, Vec<JobId>),
    AlreadyRunning(JobId),
    QueueFull,
    /// The idempotency key was recorded with this job, with the same parameters: a retry.
    Replayed(JobId),
    /// The idempotency key was recorded with this job, with other parameters.
    KeyReused(JobId),
    /// The tenant created `creates_per_minute` jobs in this window; it ends in this long.
    RateLimited(Duration),
}

/// One run of a job: which attempt it is (counted against `max_attempts`) and its fencing
/// token (`claim`, raised by every claim, so a run that lost the job can never write again).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RunId {
    pub id: JobId,
    pub claim: u64,
}

/// A job a worker claimed from the ready queue: it reads `running` with this worker's
/// lease from now on.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    pub job: NewJob,
    pub created_at: u64,
    pub run: RunId,
    pub attempt: u32,
}

impl Claim {
    /// The claimed run, as `finish` and `restore` are handed it.
    pub fn run_ref(&self) -> RunRef<'_> {
        RunRef::new(&self.job, &self.run, self.created_at)
    }
}

/// A run as the store is handed it to end it or to write its lost record back: its id and
/// fencing token, and the job and creation time its record is rebuilt from when the store
/// lost it.
#[derive(Clone, Copy, Debug)]
pub struct RunRef<'a> {
    pub job: &'a NewJob,
    pub run: &'a RunId,
    pub created_at: u64,
}

impl<'a> RunRef<'a> {
    pub fn new(job: &'a NewJob, run: &'a RunId, created_at: u64) -> Self {
        Self {
            job,
            run,
            created_at,
        }
    }

    /// The run's end: how it ended, with the last percent it reported.
    pub fn ended(self, outcome: &'a Outcome, percent: u8) -> RunEnd<'a> {
        RunEnd {
            of: self,
            outcome,
            percent,
        }
    }
}

/// A run's end as the runner hands it to `finish`: the run, how it ended, and the last
/// percent it reported (so the last tick needs no write of its own).
#[derive(Clone, Copy, Debug)]
pub struct RunEnd<'a> {
    pub of: RunRef<'a>,
    pub outcome: &'a Outcome,
    pub percent: u8,
}

/// How a job ended, as the runner hands it to the store.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Done, with the job's report.
    Done(Value),
    /// Failed, with the error's class name (`SourceUnreachable`, `Panic`) and the partial
    /// report of what the job did before it failed, if it kept one (shown as `result`).
    Failed(String, Option<Value>),
    /// Stopped on request before its work was done, with the report of what it saved.
    Cancelled(Value),
}

impl Outcome {
    pub fn status(&self) -> Status {
        match self {
            Outcome::Done(_) => Status::Done,
            Outcome::Failed(..) => Status::Failed,
            Outcome::Cancelled(_) => Status::Cancelled,
        }
    }

    /// The readable step a finished job shows.
    pub fn step(&self) -> String {
        match self {
            Outcome::Done(_) => "finished".to_owned(),
            Outcome::Failed(class, _) => format!("failed: {class}"),
            Outcome::Cancelled(_) => "cancelled on request".to_owned(),
        }
    }
}

/// What the runner knows of a live job, for writing its lost record back.
#[derive(Clone, Debug, PartialEq)]
pub struct Live {
    pub percent: u8,
    pub step: String,
    pub attempt: u32,
}

/// The answer to a progress write of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tick {
    Applied,
    /// The job's record is not in the store (expired, or the store lost its data).
    Missing,
    /// This run no longer holds the job (it ended, was recovered, taken over or re-claimed).
    Fenced,
}

/// The answer to a finish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    Applied,
    /// The job had already ended: nothing changed.
    AlreadyEnded,
    /// This run no longer holds the job: its end is not recorded.
    Fenced,
}

/// What one process's heartbeat learned about one of its runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// The lease is renewed.
    Held,
    /// The lease is renewed, and the job has been asked to stop.
    CancelRequested,
    /// The record is gone (the store came back empty): write it back with `restore`.
    Missing,
    /// This run no longer holds the job: it must stop at its next safe point.
    Fenced,
}

/// The answer to a restore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restore {
    Restored,
    /// The record exists: nothing changed.
    Present,
    /// Something newer says otherwise (a newer job, the tenant deleted since): this run
    /// may not write.
    Fenced,
}

/// The answer to a release at shutdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// The job is back at the head of the queue; its attempt will not be counted again.
    Requeued,
    /// This run no longer holds the job: nothing changed.
    Fenced,
}

/// The error class of a job whose run was lost for good (out of attempts, or taken over).
pub const LOST: &str = "Lost";

/// What the recovery sweep did with one job whose lease had expired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovered {
    /// Back in the queue for its next attempt.
    Requeued(JobId),
    /// Out of attempts: ended `failed` with class [`LOST`], lock released.
    Lost(JobId),
    /// Out of its one attempt (`MAX_ATTEMPTS=1`): left reading `lost`, its lock held until
    /// the next create of its tenant and kind takes over; its tenant's order and its
    /// pipeline went on without it (the pipeline ended `failed` with class [`LOST`]).
    LeftLost(JobId),
}

/// The answer to a cancel request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancel {
    /// The running job is asked to stop (its process is told at once), or the queued job
    /// ended `cancelled` at once without running.
    Requested,
    /// The job has already ended (or was taken over): there is nothing to stop.
    NotActive,
    /// No such job.
    Missing,
}

/// The answer to a tenant's purge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Purge {
    /// This many job records were removed (0 when there were none: purging is idempotent),
    /// and the hashes of the tenant's data with them, each of this many fields (in the order
    /// given; none from the embedded store, which holds no such hashes).
    Removed { jobs: u64, hashes: Vec<u64> },
    /// This job of the tenant is queued or running: nothing was removed.
    StillActive(JobId),
}

/// What a store tells every process of the same namespace (Redis pub/sub, or a channel).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The ready queue got work while it was empty: idle dispatchers should claim.
    Wake,
    /// A running job was asked to stop: the process that runs it trips its token.
    Cancel(JobId),
    /// A job ended (wherever it ran) that a `wait=true` request waits for (`expect_end`):
    /// those requests learn of it.
    Ended(JobId),
    /// Messages may have been missed (reconnect, lag): re-check everything.
    Resync,
}
