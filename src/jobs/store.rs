//! The store seam: what a job store must do, and the values it answers with.
//!
//! Expected outcomes are values, not errors: a held lock is `Created::AlreadyRunning`, an
//! unknown job is `Ok(None)`, a write from a job that was taken over is `Write::Fenced`.
//! `StoreError` means only that the store could not be reached or answered nonsense.
//! Both stores run the same conformance suite (tests/api/conformance.rs).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde_json::Value;

use super::{JobId, Kind, Snapshot, Status, TenantId};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Settings every store honours in the same way.
#[derive(Clone, Debug)]
pub struct StoreSettings {
    /// Prefix of every key (`job` → `job:<id>`, `job:lock:…`, `job:tenant:…`).
    pub prefix: String,
    /// Time to live of every key, renewed by each write to it.
    pub ttl: Duration,
    /// An active job whose heartbeat is this old reads as lost.
    pub stale_after: Duration,
    /// How many job ids a tenant's listing keeps (newest first).
    pub list_cap: usize,
    /// How long a replica may answer a poll of a finished job from memory (0: never).
    pub finished_cache: Duration,
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            prefix: "job".into(),
            ttl: Duration::from_secs(86_400),
            stale_after: Duration::from_secs(300),
            list_cap: 100,
            finished_cache: Duration::from_secs(1),
        }
    }
}

impl StoreSettings {
    pub fn ttl_secs(&self) -> u64 {
        self.ttl.as_secs().max(1)
    }

    pub fn stale_ms(&self) -> u64 {
        self.stale_after.as_millis() as u64
    }
}

/// Everything needed to create a job, and to run it again or write it back whole.
#[derive(Clone, Debug, PartialEq)]
pub struct NewJob {
    pub id: JobId,
    pub tenant: TenantId,
    pub kind: Kind,
    pub params: Value,
    /// The readable step it starts with ("queued", "waiting for a free worker").
    pub step: String,
}

impl NewJob {
    /// The job's record as it is first written: no result, no error, not finished.
    pub fn record(
        &self,
        status: Status,
        percent: u8,
        step: &str,
        created_at: u64,
        now: u64,
    ) -> Snapshot {
        Snapshot {
            job_id: self.id,
            tenant_id: self.tenant.clone(),
            kind: self.kind.clone(),
            status,
            percent,
            step: step.to_owned(),
            params: self.params.clone(),
            result: serde_json::Value::Null,
            error: None,
            created_at,
            started_at: (status == Status::Running).then_some(now),
            updated_at: now,
            heartbeat_at: now,
            finished_at: None,
            cancel_requested_at: None,
        }
    }
}

/// The answer to a create: the job exists now, or another active job holds the lock.
#[derive(Clone, Debug, PartialEq)]
pub enum Created {
    Created(Box<Snapshot>),
    AlreadyRunning(JobId),
}

/// How a job ended, as the runner hands it to the store.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Done, with the job's report.
    Done(Value),
    /// Failed, with the error's class name only (`SourceUnreachable`, `Panic`).
    Failed(String),
    /// Stopped on request before its work was done.
    Cancelled,
}

impl Outcome {
    pub fn status(&self) -> Status {
        match self {
            Outcome::Done(_) => Status::Done,
            Outcome::Failed(_) => Status::Failed,
            Outcome::Cancelled => Status::Cancelled,
        }
    }

    /// The readable step a finished job shows.
    pub fn step(&self) -> String {
        match self {
            Outcome::Done(_) => "finished".to_owned(),
            Outcome::Failed(class) => format!("failed: {class}"),
            Outcome::Cancelled => "cancelled on request".to_owned(),
        }
    }
}

/// What the runner knows of a live job, for writing its lost record back.
#[derive(Clone, Debug, PartialEq)]
pub struct Live {
    /// `Queued` or `Running`.
    pub status: Status,
    pub percent: u8,
    pub step: String,
}

/// The answer to a write on an existing job (tick, heartbeat, finish).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// The write took effect.
    Applied,
    /// Nothing to do: the job is already finished (or, for a tick, unknown).
    Ignored,
    /// The job's record is not in the store (expired, or the store lost its data).
    Missing,
    /// A newer job of the same tenant and kind took the lock over: this one may not write.
    Fenced,
    /// The heartbeat took effect, and the job has been asked to stop.
    CancelRequested,
}

/// The answer to a cancel request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancel {
    /// The job is asked to stop; its runner sees it at its next heartbeat.
    Requested,
    /// The job has already ended (or was taken over): there is nothing to stop.
    NotActive,
    /// No such job.
    Missing,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the job store is unreachable: {0}")]
    Unavailable(String),
    #[error("the job store returned a malformed record: {0}")]
    Corrupt(String),
}

/// A job store: Redis for production, memory for the embedded mode. Every operation that
/// changes more than one key is one atomic step.
pub trait JobStore: Send + Sync + 'static {
    /// Creates the job and takes its tenant+kind lock, or names the active holder. A holder
    /// that is finished, missing or stale is taken over and fenced off.
    fn create(&self, job: NewJob) -> BoxFuture<'_, Result<Created, StoreError>>;

    /// Records progress: moves a queued job to running, raises percent (never lowers it),
    /// sets the step and refreshes the heartbeat. A finished job is left as it is.
    fn tick<'a>(
        &'a self,
        id: &'a JobId,
        percent: u8,
        step: &'a str,
    ) -> BoxFuture<'a, Result<Write, StoreError>>;

    /// Refreshes the heartbeat and renews the job's and its lock's TTL.
    fn heartbeat<'a>(
        &'a self,
        id: &'a JobId,
        tenant: &'a TenantId,
        kind: &'a Kind,
    ) -> BoxFuture<'a, Result<Write, StoreError>>;

    /// Ends the job and releases its lock if the lock still holds this job. If the record
    /// is missing (the store came back empty) it is written back whole, unless a newer job
    /// holds the lock. Repeating a finish answers `Ignored`. `percent` is the job's last
    /// reported progress (a failed job keeps it; a done job reads 100), so the last tick
    /// need not be written separately.
    fn finish<'a>(
        &'a self,
        job: &'a NewJob,
        created_at: u64,
        outcome: &'a Outcome,
        percent: u8,
    ) -> BoxFuture<'a, Result<Write, StoreError>>;

    /// Writes back the record of a job that is alive but whose record the store lost (it
    /// came back empty), with its last known progress, and retakes its lock — unless a newer
    /// job holds it (`Fenced`). A record that exists is left alone (`Ignored`).
    fn restore<'a>(
        &'a self,
        job: &'a NewJob,
        created_at: u64,
        live: &'a Live,
    ) -> BoxFuture<'a, Result<Write, StoreError>>;

    /// Asks an active job to stop: it reads `cancelling` at once, and its runner learns of it
    /// from its next heartbeat (`Write::CancelRequested`). Asking again changes nothing.
    fn cancel<'a>(&'a self, id: &'a JobId) -> BoxFuture<'a, Result<Cancel, StoreError>>;

    /// The job as a reader sees it, `lost` derived on the store's clock.
    fn get<'a>(&'a self, id: &'a JobId) -> BoxFuture<'a, Result<Option<Snapshot>, StoreError>>;

    /// A tenant's jobs, newest first.
    fn recent<'a>(
        &'a self,
        tenant: &'a TenantId,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Snapshot>, StoreError>>;

    /// Removes a tenant's jobs and the locks they hold; answers how many jobs went.
    fn clear_tenant<'a>(&'a self, tenant: &'a TenantId)
        -> BoxFuture<'a, Result<usize, StoreError>>;

    /// Whether the store answers at all.
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>>;

    /// A warning an operator should see (e.g. an eviction policy that evicts live locks).
    fn warnings(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Whether state outlives this process (false for the embedded store).
    fn is_durable(&self) -> bool;

    /// Whether the store keeps its data across its own restart: `Some(false)` for a Redis
    /// with neither AOF nor RDB save points, `None` when it cannot tell (CONFIG disabled).
    fn persists(&self) -> BoxFuture<'_, Result<Option<bool>, StoreError>> {
        let durable = self.is_durable();
        Box::pin(async move { Ok(Some(durable)) })
    }

    fn settings(&self) -> &StoreSettings;
}
