//! The create path: a job, or a pipeline and its steps, made by create.lua in one step, its
//! answer read into the store's values. Each create's call goes through the group commit
//! (`commit.rs`): alone when no create call is in flight, else with the creates that queued
//! meanwhile, in one call; either way create.lua answers it as a call of its own would.

use std::sync::Arc;
use std::time::Duration;

use super::super::keys::Group;
use super::super::pipeline;
use super::super::runner::QUEUED_STEP;
use super::super::store::{params_fingerprint, Created, NewJob, NewPipeline, StoreError};
use super::super::{JobId, Kind, Status};
use super::commit::{Step, StepCall};
use super::declare::{read_unless_stale, stale_too_often, STALE_TRIES};
use super::record::{Field, Pairs};
use super::scripts::{self, CreateCode};
use super::RedisStore;

/// What create.lua did: refused (the answer says why), or created, with the stale holders
/// it took over.
enum Made {
    Refused(Created),
    Created(New, Vec<JobId>),
}

/// How the job the request named was created, at the store's time.
enum New {
    Queued(u64),
    /// Claimed, and whether the key its claim probed does not exist.
    Claimed(u64, bool),
    /// Waiting for its tenant's job ahead of it (its id and kind).
    Waiting(u64, JobId, Kind),
}

/// Where a created answer of create.lua names the stale holders it took over.
const TOOK_OVER_FROM: usize = 4;

/// A new job's fields create.lua takes beside its origin (`Pairs::append_origin_to`): its
/// step unless it is the usual `queued`, which create.lua writes when none is sent (two
/// arguments less a create).
fn created_fields(job: &NewJob) -> Pairs {
    let fields = Pairs::default();
    if job.step == QUEUED_STEP {
        return fields;
    }
    fields.with(Field::Step, &job.step)
}

impl RedisStore {
    /// create.lua for `worker` ("": queue the job; else claim it when nothing waits), a claim
    /// also reading whether `probe` exists (`JobStore::create_probing`): true when the job was
    /// claimed and the key is not there.
    pub(super) async fn create_for(
        &self,
        mut job: NewJob,
        worker: &str,
        probe: Option<&str>,
    ) -> Result<(Created, bool), StoreError> {
        let fields = created_fields(&job);
        let jobs = vec![(&job, fields)];
        let (made, took_over) = match self.create_jobs(&job, jobs, (worker, probe)).await? {
            Made::Refused(answer) => return Ok((answer, false)),
            Made::Created(made, took_over) => (made, took_over),
        };
        let max = self.settings.max_attempts;
        let mut absent = false;
        let record = match made {
            New::Claimed(now, probed_absent) => {
                absent = probed_absent;
                job.into_claimed_record(worker, now, max)
            }
            New::Queued(now) => {
                let step = std::mem::take(&mut job.step);
                job.into_record(Status::Queued, 0, &step, now, now, max)
            }
            New::Waiting(now, ahead, kind) => job.waiting_record(now, ahead, &kind, max),
        };
        Ok((Created::Created(Box::new(record), took_over), absent))
    }

    /// create.lua for a pipeline and its steps, in one step; answers the pipeline as it reads
    /// once created.
    pub(super) async fn create_pipeline_jobs(
        &self,
        pipeline: NewPipeline,
    ) -> Result<Created, StoreError> {
        let mut jobs = vec![(
            &pipeline.job,
            created_fields(&pipeline.job)
                .with_pieces(Field::Steps, &pipeline::encode(&pipeline.refs())),
        )];
        for (step, _) in &pipeline.steps {
            jobs.push((step, created_fields(step)));
        }
        match self.create_jobs(&pipeline.job, jobs, ("", None)).await? {
            Made::Refused(answer) => Ok(answer),
            Made::Created(_, took_over) => self
                .read_job(&pipeline.job.id)
                .await?
                .map(|s| Created::Created(Box::new(s), took_over))
                .ok_or_else(|| StoreError::Corrupt("a created pipeline reads as missing".into())),
        }
    }

    /// Runs create.lua for `jobs` (each its id and fields; the first is `first`, the job the
    /// request named: its idempotency key, count and answer), claiming a lone job for `worker`
    /// when nothing waits ahead of it, and then reading whether `probe` exists.
    async fn create_jobs(
        &self,
        first: &NewJob,
        jobs: Vec<(&NewJob, Pairs)>,
        (worker, probe): (&str, Option<&str>),
    ) -> Result<Made, StoreError> {
        let group = Group::of(&first.tenant);
        let mut declared = self.creating(group, first, jobs.iter().map(|(job, _)| *job));
        let args = self.create_arguments(first, &jobs, worker, probe);
        if let Some(probe) = probe.filter(|_| !worker.is_empty()) {
            declared.push(probe.to_owned());
        }
        let answer = self.create_declaring(group, declared, args).await?;
        let at = |i: usize, what: &str| {
            answer
                .get(i)
                .ok_or_else(|| StoreError::Corrupt(format!("create answered no {what}")))
        };
        let job_id = |i: usize| {
            JobId::parse(at(i, "job id")?)
                .map_err(|_| StoreError::Corrupt("create named no job id".into()))
        };
        let number = |i: usize, what: &str| {
            at(i, what)?
                .parse::<u64>()
                .map_err(|_| StoreError::Corrupt(format!("create answered no {what}")))
        };
        let refused = match CreateCode::parse(at(0, "code")?)? {
            CreateCode::Held => Created::AlreadyRunning(job_id(1)?),
            CreateCode::QueueFull => Created::QueueFull,
            CreateCode::Replayed => Created::Replayed(job_id(1)?),
            CreateCode::KeyReused => Created::KeyReused(job_id(1)?),
            CreateCode::RateLimited => {
                Created::RateLimited(Duration::from_millis(number(1, "delay")?))
            }
            code => {
                // The job it retries was marked in this step (`retried_as`): a copy is stale.
                if let Some(old) = first.origin.retry_of {
                    self.finished.forget(&old);
                }
                // `WAIT` follows the create on the connection it went over (the writer's).
                let mut conn = self.write_connection().await?;
                self.replicated(&mut conn, &self.keys.job(&first.id), Some(first.id))
                    .await?;
                let now = number(1, "time")?;
                let new = match code {
                    CreateCode::Claimed => New::Claimed(now, false),
                    CreateCode::ClaimedAbsent => New::Claimed(now, true),
                    CreateCode::Waiting => {
                        let kind = Kind::parse(at(3, "kind")?)
                            .map_err(|_| StoreError::Corrupt("create named no kind".into()))?;
                        New::Waiting(now, job_id(2)?, kind)
                    }
                    _ => {
                        // Only a job put in the ready queue gives its group's queue work: one
                        // claimed here or waiting behind its tenant's job does not.
                        self.mark(group);
                        if jobs.len() == 1 {
                            self.queued_here(group, first.id);
                        }
                        New::Queued(now)
                    }
                };
                let took_over = (TOOK_OVER_FROM..answer.len()).map(job_id);
                return Ok(Made::Created(new, took_over.collect::<Result<_, _>>()?));
            }
        };
        Ok(Made::Refused(refused))
    }

    /// create.lua's arguments for `jobs` (see its header).
    fn create_arguments(
        &self,
        first: &NewJob,
        jobs: &[(&NewJob, Pairs)],
        worker: &str,
        probe: Option<&str>,
    ) -> scripts::Call {
        let mut args = scripts::Call::arguments();
        args.arg(jobs.len());
        for (job, fields) in jobs {
            args.arg(job.id.to_string());
            fields.append_origin_to(job, &mut args);
        }
        args.arg(self.settings.creates_per_minute).arg(worker);
        // Only a claim that probes a key sends it (create.lua tells it by the count).
        if let Some(probe) = probe.filter(|_| !worker.is_empty()) {
            args.arg(probe);
        }
        // Only a keyed create sends its key and the fingerprint it is checked against.
        if let Some(key) = &first.idempotency_key {
            args.arg(key).arg(params_fingerprint(&first.params));
        }
        args
    }

    /// Runs one create's call (`commit.rs`) naming `declared` (after its group's two keys)
    /// with `args`; a `stale` answer (the step met keys the call left out, and wrote nothing)
    /// is followed by the same call naming those too, up to `STALE_TRIES` calls.
    async fn create_declaring(
        &self,
        group: Group,
        declared: Vec<String>,
        args: scripts::Call,
    ) -> Result<Vec<String>, StoreError> {
        // Shared with each try's call, not copied: a `stale` answer is rare.
        let args = Arc::new(args);
        let mut declared = Arc::new(declared);
        for _ in 0..STALE_TRIES {
            let call = StepCall {
                step: Step::Create,
                group,
                declared: declared.clone(),
                args: args.clone(),
            };
            let answer = self.step_call(call).await?;
            if let Some(usual) = usual_answer(&answer) {
                return usual;
            }
            let mut met = Vec::new();
            if let Some(read) = read_unless_stale(answer, &mut met) {
                return read;
            }
            for name in met {
                if !declared.contains(&name) {
                    Arc::make_mut(&mut declared).push(name);
                }
            }
        }
        Err(stale_too_often(&scripts::CREATE.name()))
    }
}

/// create.lua's usual answer, a job claimed or queued that took no stale holder over: its
/// time alone, no table (`created` in lua/walks.lua: Redis replies a table ~7,000
/// instructions dearer), an integer when it was claimed (negative: the key its claim probed
/// does not exist), a string when it was queued. Read as the table it stands for, {code,
/// now}; none for any other answer.
fn usual_answer(answer: &redis::Value) -> Option<Result<Vec<String>, StoreError>> {
    let read = match answer {
        redis::Value::Int(now) if *now < 0 => Ok(vec![
            "claimed_absent".to_owned(),
            now.unsigned_abs().to_string(),
        ]),
        redis::Value::Int(now) => Ok(vec!["claimed".to_owned(), now.to_string()]),
        redis::Value::BulkString(now) => match std::str::from_utf8(now) {
            Ok(now) => Ok(vec!["queued".to_owned(), now.to_owned()]),
            Err(_) => Err(StoreError::Corrupt("create answered no time".into())),
        },
        _ => return None,
    };
    Some(read)
}
