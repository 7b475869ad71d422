//! The store's writes: each operation is one script call (`scripts.rs`), its arguments built
//! from the job's fields by name (`record.rs`) and its answer read into the store's values.
//!
//! Nothing here builds a key: the scripts build them from the prefix, inside the step.

use std::time::Duration;

use serde_json::Value;

use super::super::store::{
    params_fingerprint, Cancel, Claim, Created, Finish, Live, NewJob, Outcome, Purge, Recovered,
    Release, Renewal, Restore, RunId, StoreError, Tick,
};
use super::super::{worker_name, JobId, Kind, Status, TenantId};
use super::record::{Field, Hash, Pairs};
use super::scripts::{self, unexpected, Code, CreateCode};
use super::{bounded_on, RedisStore};

/// How many expired leases one recovery step handles: bounds the script's run time; the
/// rest wait for the next sweep.
const RECOVER_BATCH: usize = 100;

/// A claim as claim.lua and finish.lua answer it: the job's id, then its record as HGETALL
/// answers it.
fn claim_from(raw: &[String]) -> Result<Claim, StoreError> {
    let Some((id, fields)) = raw.split_first() else {
        return Err(StoreError::Corrupt("a claim named no job".into()));
    };
    let id = JobId::parse(id).map_err(|_| StoreError::Corrupt("a claim named no id".into()))?;
    Hash::from_flat(fields).claim(id)
}

impl RedisStore {
    /// Runs a script that answers one code word, on the shared connection.
    async fn code(&self, inv: redis::ScriptInvocation<'_>) -> Result<Code, StoreError> {
        let mut conn = self.connection().await?;
        let word: String = self.bounded(inv.invoke_async(&mut conn)).await?;
        Code::parse(&word)
    }

    /// create.lua for `worker` ("": queue the job; else claim it when nothing waits).
    pub(super) async fn create_for(
        &self,
        job: NewJob,
        worker: &str,
    ) -> Result<Created, StoreError> {
        let mut conn = self.write_connection().await?;
        let mut inv = scripts::invocation(&scripts::CREATE, &self.settings);
        inv.arg(job.id.to_string());
        Pairs::origin(&job)
            .with(Field::Step, &job.step)
            .append_to(&mut inv);
        inv.arg(job.idempotency_key.as_deref().unwrap_or(""))
            .arg(params_fingerprint(&job.params))
            .arg(self.settings.creates_per_minute)
            .arg(worker);
        let (word, value): (String, String) =
            bounded_on(self.writer(), inv.invoke_async(&mut conn)).await?;
        let job_id = |value: &str| {
            JobId::parse(value).map_err(|_| StoreError::Corrupt("create named no job id".into()))
        };
        let number = |what: &str| {
            value
                .parse::<u64>()
                .map_err(|_| StoreError::Corrupt(format!("create answered no {what}")))
        };
        let code = CreateCode::parse(&word)?;
        let now = match code {
            CreateCode::Held => return Ok(Created::AlreadyRunning(job_id(&value)?)),
            CreateCode::QueueFull => return Ok(Created::QueueFull),
            CreateCode::Replayed => return Ok(Created::Replayed(job_id(&value)?)),
            CreateCode::KeyReused => return Ok(Created::KeyReused(job_id(&value)?)),
            CreateCode::RateLimited => {
                let ms = number("delay")?;
                return Ok(Created::RateLimited(Duration::from_millis(ms)));
            }
            CreateCode::Queued | CreateCode::Claimed => number("time")?,
        };
        self.replicated(&mut conn, &self.keys.job(&job.id), Some(job.id))
            .await?;
        let max = self.settings.max_attempts;
        let record = match code {
            CreateCode::Claimed => job.claimed_record(worker, now, max),
            _ => job.record(Status::Queued, 0, &job.step, now, now, max),
        };
        Ok(Created::Created(Box::new(record)))
    }

    pub(super) async fn claim_many_for(
        &self,
        worker: &str,
        kinds: &[Kind],
        n: usize,
    ) -> Result<Vec<Claim>, StoreError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut conn = self.connection().await?;
        let mut inv = scripts::invocation(&scripts::CLAIM, &self.settings);
        inv.arg(worker).arg(n);
        for kind in kinds {
            inv.arg(kind.as_str());
        }
        let raw: Vec<Vec<String>> = self.bounded(inv.invoke_async(&mut conn)).await?;
        raw.iter().map(|claimed| claim_from(claimed)).collect()
    }

    pub(super) async fn tick_run(
        &self,
        run: &RunId,
        percent: u8,
        step: &str,
    ) -> Result<Tick, StoreError> {
        let mut inv = scripts::invocation(&scripts::TICK, &self.settings);
        inv.arg(run.id.to_string())
            .arg(run.claim)
            .arg(percent.min(100))
            .arg(step);
        Ok(match self.code(inv).await? {
            Code::Applied => Tick::Applied,
            Code::Missing => Tick::Missing,
            Code::Ended | Code::Fenced => Tick::Fenced,
            other => return Err(unexpected(other)),
        })
    }

    pub(super) async fn renew_runs(&self, runs: &[RunId]) -> Result<Vec<Renewal>, StoreError> {
        let mut inv = scripts::invocation(&scripts::RENEW, &self.settings);
        inv.arg(self.process.member());
        for run in runs {
            inv.arg(run.id.to_string()).arg(run.claim);
        }
        let mut conn = self.connection().await?;
        let words: Vec<String> = self.bounded(inv.invoke_async(&mut conn)).await?;
        words
            .iter()
            .map(|word| match Code::parse(word)? {
                Code::Held => Ok(Renewal::Held),
                Code::CancelRequested => Ok(Renewal::CancelRequested),
                Code::Missing => Ok(Renewal::Missing),
                Code::Fenced => Ok(Renewal::Fenced),
                other => Err(unexpected(other)),
            })
            .collect()
    }

    /// finish.lua; with `next` (a worker and the kinds it runs), the worker's next job is
    /// claimed in the same step.
    pub(super) async fn finish_run(
        &self,
        job: &NewJob,
        run: &RunId,
        created_at: u64,
        (outcome, percent): (&Outcome, u8),
        next: Option<(&str, &[Kind])>,
    ) -> Result<(Finish, Option<Claim>), StoreError> {
        let (result, error) = match outcome {
            Outcome::Done(report) => (Some(report), None),
            Outcome::Failed(class, report) => (report.as_ref(), Some(class.as_str())),
            Outcome::Cancelled(Value::Null) => (None, None),
            Outcome::Cancelled(report) => (Some(report), None),
        };
        let mut inv = scripts::run_invocation(
            &scripts::FINISH,
            &self.settings,
            job,
            run,
            created_at,
            percent,
        );
        let mut ended = Pairs::default()
            .with(Field::Status, outcome.status().as_str())
            .with(Field::Step, outcome.step())
            .with_some(Field::Error, error);
        if let Some(result) = result {
            ended = ended.with_long(Field::Result, &result.to_string());
        }
        ended.append_to(&mut inv);
        let (worker, kinds) = next.unwrap_or(("", &[]));
        inv.arg(worker);
        for kind in kinds {
            inv.arg(kind.as_str());
        }
        let mut conn = self.write_connection().await?;
        let (word, claimed): (String, Vec<String>) =
            bounded_on(self.writer(), inv.invoke_async(&mut conn)).await?;
        let finish = match Code::parse(&word)? {
            Code::Applied => Finish::Applied,
            Code::Ended => Finish::AlreadyEnded,
            Code::Fenced => Finish::Fenced,
            other => return Err(unexpected(other)),
        };
        // Not acknowledged: the runner retries, the script answers `AlreadyEnded` and
        // this waits again, until the outcome is on the replicas or the retries end.
        if finish != Finish::Fenced {
            self.replicated(&mut conn, &self.keys.job(&job.id), None)
                .await?;
        }
        let next = match claimed.is_empty() {
            true => None,
            false => Some(claim_from(&claimed)?),
        };
        Ok((finish, next))
    }

    pub(super) async fn expect_end_of(&self, id: &JobId) -> Result<(), StoreError> {
        let mut inv = scripts::invocation(&scripts::AWAITED, &self.settings);
        inv.arg(id.to_string());
        match self.code(inv).await? {
            Code::Applied | Code::Missing => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    pub(super) async fn restore_run(
        &self,
        job: &NewJob,
        run: &RunId,
        created_at: u64,
        live: &Live,
    ) -> Result<Restore, StoreError> {
        let mut inv = scripts::run_invocation(
            &scripts::RESTORE,
            &self.settings,
            job,
            run,
            created_at,
            live.percent,
        );
        Pairs::default()
            .with(Field::Step, &live.step)
            .with(Field::Attempt, live.attempt)
            .with(Field::Worker, worker_name())
            .append_to(&mut inv);
        Ok(match self.code(inv).await? {
            Code::Restored => Restore::Restored,
            Code::Present => Restore::Present,
            Code::Fenced => Restore::Fenced,
            other => return Err(unexpected(other)),
        })
    }

    pub(super) async fn release_run(&self, run: &RunId) -> Result<Release, StoreError> {
        let mut inv = scripts::invocation(&scripts::RELEASE, &self.settings);
        inv.arg(run.id.to_string()).arg(run.claim);
        Ok(match self.code(inv).await? {
            Code::Requeued => Release::Requeued,
            Code::Fenced => Release::Fenced,
            other => return Err(unexpected(other)),
        })
    }

    pub(super) async fn recover_leases(&self) -> Result<Vec<Recovered>, StoreError> {
        let mut inv = scripts::invocation(&scripts::RECOVER, &self.settings);
        inv.arg(RECOVER_BATCH);
        let mut conn = self.connection().await?;
        let flat: Vec<String> = self.bounded(inv.invoke_async(&mut conn)).await?;
        flat.chunks(2)
            .map(|pair| {
                let id = pair
                    .get(1)
                    .and_then(|raw| JobId::parse(raw).ok())
                    .ok_or_else(|| StoreError::Corrupt("recover answered no id".into()))?;
                match Code::parse(&pair[0])? {
                    Code::Requeued => Ok(Recovered::Requeued(id)),
                    Code::Lost => Ok(Recovered::Lost(id)),
                    other => Err(unexpected(other)),
                }
            })
            .collect()
    }

    pub(super) async fn cancel_job(&self, id: &JobId, by: &str) -> Result<Cancel, StoreError> {
        let mut inv = scripts::invocation(&scripts::CANCEL, &self.settings);
        inv.arg(id.to_string()).arg(by);
        Ok(match self.code(inv).await? {
            Code::Requested => Cancel::Requested,
            Code::NotActive => Cancel::NotActive,
            Code::Missing => Cancel::Missing,
            other => return Err(unexpected(other)),
        })
    }

    pub(super) async fn purge_tenant(
        &self,
        tenant: &TenantId,
        kinds: &[Kind],
        hashes: &[String],
    ) -> Result<Purge, StoreError> {
        let mut inv = scripts::invocation(&scripts::PURGE, &self.settings);
        inv.arg(tenant.as_str()).arg(kinds.len());
        for kind in kinds {
            inv.arg(kind.as_str());
        }
        for hash in hashes {
            inv.arg(hash);
        }
        let mut conn = self.connection().await?;
        let answer: Vec<String> = self.bounded(inv.invoke_async(&mut conn)).await?;
        let corrupt = |what: &str| StoreError::Corrupt(format!("purge answered {what}"));
        let (word, rest) = answer.split_first().ok_or_else(|| corrupt("nothing"))?;
        let value = rest.first().ok_or_else(|| corrupt("no value"))?;
        match Code::parse(word)? {
            Code::Active => JobId::parse(value)
                .map(Purge::StillActive)
                .map_err(|_| corrupt("no job id")),
            Code::Removed => {
                let mut numbers = rest
                    .iter()
                    .map(|n| n.parse::<u64>().map_err(|_| corrupt("no count")));
                let jobs = numbers.next().ok_or_else(|| corrupt("no count"))??;
                Ok(Purge::Removed {
                    jobs,
                    hashes: numbers.collect::<Result<_, _>>()?,
                })
            }
            other => Err(unexpected(other)),
        }
    }
}
