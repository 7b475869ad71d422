//! The job hash's schema on the Rust side: [`Field`] names every field once, [`Pairs`] builds
//! the named lists scripts take, and [`Hash`] decodes every answer that carries a job (a
//! read's `HGETALL`, a claim's named list) into what a reader or a worker sees.
//!
//! `lua/record.lua` names the same fields for the scripts (`FIELDS`; a test holds the two
//! lists equal), and says how a long value is split into pieces and how the job's timeline
//! is kept in its record; [`Pairs::with_long`] and [`Hash::timeline`] are the Rust side of
//! both. Nothing here knows a key name or a script.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

use super::super::pipeline::{self, StepRef};
use super::super::store::{Claim, NewJob, Origin, RunId, StoreError, StoreSettings};
use super::super::timeline::{EventId, TimelineEvent, TIMELINE_CAP};
use super::super::{InvalidId, JobId, Kind, Snapshot, Status, TenantId};
use codes::decoded;
pub use codes::{DEFAULT_STEPS, EVENT_CODES, STATUS_CODES, USUAL_STEPS};

macro_rules! fields {
    ($($(#[$doc:meta])* $variant:ident = $label:literal => $name:literal,)*) => {
        /// A field of the job hash (`<prefix>:<id>`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Field {
            $($(#[$doc])* $variant,)*
        }

        impl Field {
            /// Every field, in the order `lua/record.lua` lists them.
            pub const ALL: &'static [Field] = &[$(Field::$variant,)*];

            /// The field's stored name: what the hash holds (one or two characters).
            pub fn name(self) -> &'static str {
                match self {
                    $(Field::$variant => $name,)*
                }
            }

            /// The field's name in scripts, named lists and docs (`lua/record.lua` maps it to
            /// its stored name).
            pub fn label(self) -> &'static str {
                match self {
                    $(Field::$variant => $label,)*
                }
            }
        }
    };
}

fields! {
    Tenant = "tenant" => "t",
    Kind = "kind" => "k",
    /// The job's parameters (JSON).
    Params = "params" => "p",
    /// `queued`, `running`, `done`, `failed` or `cancelled` (`lost` is never stored).
    Status = "status" => "s",
    Percent = "percent" => "%",
    Step = "step" => "sp",
    /// The report (JSON); a failed job may carry its partial report.
    Result = "result" => "r",
    /// A failed job's error class.
    Error = "error" => "e",
    CreatedMs = "created_ms" => "c",
    StartedMs = "started_ms" => "b",
    UpdatedMs = "updated_ms" => "u",
    HeartbeatMs = "heartbeat_ms" => "h",
    FinishedMs = "finished_ms" => "f",
    CancelRequestedMs = "cancel_requested_ms" => "x",
    /// When recovery last put the job back in the queue.
    RecoveredMs = "recovered_ms" => "rq",
    /// Counted runs.
    Attempt = "attempt" => "a",
    /// The current run's fencing token, raised by every claim.
    Claim = "claim" => "cl",
    /// The process that runs (or last ran) the job: `host/pid`.
    Worker = "worker" => "w",
    CreatedBy = "created_by" => "by",
    RequestId = "request_id" => "id",
    RetryOf = "retry_of" => "ro",
    CancelledBy = "cancelled_by" => "xb",
    /// Who last retried the ended job, and the job that retries it.
    RetriedBy = "retried_by" => "rb",
    RetriedAs = "retried_as" => "ra",
    /// The job that took over this one's stale lock: it is fenced off for good.
    SupersededBy = "superseded_by" => "sb",
    /// The next claim does not count an attempt (the run was given back at shutdown).
    FreeRetry = "free_retry" => "fr",
    LostMs = "lost_ms" => "lm",
    /// The record was written back by its live run after the store lost it.
    Restored = "restored" => "rs",
    /// How many timeline events were noted (ticks included): the next event's seq.
    Events = "events" => "n",
    /// When the last event was noted: the next one is never dated before it.
    EventMs = "event_ms" => "nt",
    /// How many progress ticks were sampled into the timeline, and when the last one was.
    Sampled = "sampled" => "sn",
    SampledMs = "sampled_ms" => "sm",
    /// A `wait=true` request waits for the job: its end is published to every process.
    Awaited = "awaited" => "aw",
    /// Set when the job runs in its tenant's order: `1` in the tenant's lane, `2` its lane's
    /// head by itself, standing in none (a lone first job: LONE in lua/order.lua).
    InOrder = "in_order" => "io",
    /// The job this queued job waits for, while it waits.
    WaitingFor = "waiting_for" => "wf",
    /// The pipeline this job is a step of.
    Pipeline = "pipeline" => "pl",
    /// A pipeline's steps, one piece a step: `kind:job_id:share,` (`steps`, `steps.2`, …).
    Steps = "steps" => "st",
}

/// The longest value a field holds in one piece: Redis keeps a hash compact (a listpack)
/// while every value is at most `hash-max-listpack-value` (64) bytes long.
pub const PIECE: usize = 64;

/// The first byte of a timeline event's field name (`@<seq>`, `@p<slot>`, `@tick`).
const EVENT_MARK: char = '@';

/// A job's usual `created` event, which its record implies when it stores none (`@0`).
const IMPLIED_CREATED: &str = "0|c|0|q|0||";

/// A done job's step (`Outcome::step`), which its record no longer stores.
const DONE_STEP: &str = "finished";

/// The creator a record leaves out (`ANONYMOUS` in `lua/record.lua`): the one a request
/// without a token names (`api::auth::ANONYMOUS`, the same word; a test holds them equal), so
/// a short job's record is 15 bytes smaller. A record without `created_by` reads as it.
pub const ANONYMOUS: &str = "anonymous";

/// The field of the `started` event of a job's first claim, which its record implies rather
/// than stores when it is the job's second event (`implied_start` in `lua/prelude.lua`).
const IMPLIED_START_FIELD: &str = "@1";

/// `value` cut into pieces of at most [`PIECE`] bytes, each ending on a character boundary.
fn pieces(value: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = value;
    while rest.len() > PIECE {
        let mut cut = PIECE;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        out.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    out.push(rest);
    out
}

/// A named list of job fields as scripts take it (`named_args` in the prelude): how many
/// pairs, then name, value, … (by [`Field::label`]; the scripts store each under its
/// [`Field::name`]).
#[derive(Clone, Debug, Default)]
pub struct Pairs(Vec<(String, String)>);

impl Pairs {
    pub fn with(mut self, field: Field, value: impl ToString) -> Self {
        self.0.push((field.label().to_owned(), value.to_string()));
        self
    }

    /// With `field` only when there is a value (a script reads an absent field as unset).
    pub fn with_some(self, field: Field, value: Option<impl ToString>) -> Self {
        match value {
            Some(value) => self.with(field, value),
            None => self,
        }
    }

    /// With a value that may be long (params, a result) in pieces of at most [`PIECE`]
    /// bytes: `<field>`, `<field>.2`, `<field>.3`, … ([`Hash`] joins them again).
    pub fn with_long(self, field: Field, value: &str) -> Self {
        let pieces: Vec<String> = pieces(value).into_iter().map(str::to_owned).collect();
        self.with_pieces(field, &pieces)
    }

    /// With `pieces` as one value in pieces, as written: `<field>`, `<field>.2`, … (each at
    /// most a few dozen bytes, so the hash stays compact; [`Hash`] joins them again).
    pub fn with_pieces(mut self, field: Field, pieces: &[String]) -> Self {
        for (i, piece) in pieces.iter().enumerate() {
            let name = match i {
                0 => field.label().to_owned(),
                n => format!("{}.{}", field.label(), n + 1),
            };
            self.0.push((name, piece.clone()));
        }
        self
    }

    /// The fields that say what the job is and where it came from: everything needed to
    /// run it again or write it back whole.
    pub fn origin(job: &NewJob) -> Self {
        Self::default()
            .with(Field::Tenant, job.tenant.as_str())
            .with(Field::Kind, job.kind.as_str())
            .with(Field::CreatedBy, &job.origin.created_by)
            .with(Field::RequestId, &job.origin.request_id)
            .with_rest_of_origin(job)
    }

    /// The origin's fields but the four every job has (tenant, kind, creator, request), which
    /// a create sends first, unnamed (`Pairs::append_origin_to`).
    fn with_rest_of_origin(self, job: &NewJob) -> Self {
        self.with_long(Field::Params, &job.params.to_string())
            .with_some(Field::RetryOf, job.origin.retry_of)
            .with_some(Field::InOrder, job.in_order.then_some(1))
            .with_some(Field::Pipeline, job.pipeline)
    }

    /// A new job's fields as create.lua reads them (`new_record` in lua/walks.lua): its
    /// tenant, kind, creator and request, in that order and unnamed (four arguments less a
    /// create), then the rest of its origin and `self` as a named list.
    pub fn append_origin_to(&self, job: &NewJob, inv: &mut super::scripts::Call) {
        inv.arg(job.tenant.as_str()).arg(job.kind.as_str());
        inv.arg(&job.origin.created_by).arg(&job.origin.request_id);
        let rest = Self::default().with_rest_of_origin(job).0.into_iter();
        Self(rest.chain(self.0.iter().cloned()).collect()).append_to(inv);
    }

    /// Appends the list to a script call's arguments.
    pub fn append_to(&self, inv: &mut super::scripts::Call) {
        inv.arg(self.0.len());
        for (name, value) in &self.0 {
            inv.arg(name).arg(value);
        }
    }
}

/// A job's fields as Redis answered them (a hash read, or a script's named list).
pub struct Hash(HashMap<String, String>);

impl Hash {
    pub fn new(map: HashMap<String, String>) -> Self {
        Self(map)
    }

    /// Reads a flat name, value, … list (a script's answer).
    pub fn from_flat(flat: &[String]) -> Self {
        Self(
            flat.chunks_exact(2)
                .map(|pair| (pair[0].clone(), pair[1].clone()))
                .collect(),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, field: Field) -> Option<&str> {
        self.0.get(field.name()).map(String::as_str)
    }

    fn required(&self, field: Field) -> Result<&str, StoreError> {
        self.get(field)
            .ok_or_else(|| StoreError::Corrupt(format!("job hash lacks `{}`", field.name())))
    }

    fn num(&self, field: Field) -> Result<u64, StoreError> {
        self.required(field)?
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("`{}` is not a number", field.name())))
    }

    fn opt_num(&self, field: Field) -> Option<u64> {
        self.get(field).and_then(|v| v.parse().ok())
    }

    fn owned(&self, field: Field) -> Option<String> {
        self.get(field).map(str::to_owned)
    }

    /// A value written in pieces (`Pairs::with_long`), joined again.
    fn long(&self, field: Field) -> Option<String> {
        let mut value = self.get(field)?.to_owned();
        for n in 2.. {
            match self.0.get(&format!("{}.{n}", field.name())) {
                Some(piece) => value.push_str(piece),
                None => break,
            }
        }
        Some(value)
    }

    fn json(&self, field: Field) -> Value {
        self.long(field)
            .and_then(|v| serde_json::from_str(&v).ok())
            .unwrap_or(Value::Null)
    }

    fn tenant(&self) -> Result<TenantId, StoreError> {
        TenantId::parse(self.required(Field::Tenant)?).map_err(corrupt)
    }

    fn kind(&self) -> Result<Kind, StoreError> {
        Kind::parse(self.required(Field::Kind)?).map_err(corrupt)
    }

    /// Who created the job: a record without a creator was created by ANONYMOUS.
    fn creator(&self) -> String {
        self.owned(Field::CreatedBy)
            .unwrap_or_else(|| ANONYMOUS.to_owned())
    }

    fn origin(&self) -> Origin {
        Origin {
            created_by: self.creator(),
            request_id: self.owned(Field::RequestId).unwrap_or_default(),
            retry_of: self.id(Field::RetryOf),
        }
    }

    /// What a reader sees, `lost` derived at `now_ms`; `None` for an empty hash (no job).
    /// create.lua leaves out what equals a default: percent 0, attempt 0, updated_ms and
    /// heartbeat_ms equal to created_ms; a first claim leaves out updated_ms and heartbeat_ms
    /// equal to its started_ms; an end leaves updated_ms as it was, and an ended job was last
    /// updated when it finished.
    pub fn snapshot(
        &self,
        id: &JobId,
        now_ms: u64,
        settings: &StoreSettings,
    ) -> Result<Option<Snapshot>, StoreError> {
        if self.is_empty() {
            return Ok(None);
        }
        let stored = Status::parse_stored(self.required(Field::Status)?)
            .ok_or_else(|| StoreError::Corrupt("unknown status".into()))?;
        let created_at = self.num(Field::CreatedMs)?;
        let started_at = self.opt_num(Field::StartedMs);
        let since_start = |field| self.opt_num(field).or(started_at).unwrap_or(created_at);
        let finished_at = self.opt_num(Field::FinishedMs);
        // A done job's finish writes neither its percent, step nor heartbeat: it reads 100 %,
        // `finished`, and last heartbeat at its end (lua/record.lua, what a record implies).
        let done = stored == Status::Done;
        let heartbeat_at = match finished_at {
            Some(end) if done => end,
            _ => since_start(Field::HeartbeatMs),
        };
        let updated_at = since_start(Field::UpdatedMs);
        let cancel_requested_at = self.opt_num(Field::CancelRequestedMs);
        // A record with a worker and no claim has had its first claim, which left out its
        // attempt (1), and at its create its start (its creation): FIRST_CLAIM in
        // lua/record.lua.
        let at_create = self.claimed_once();
        let origin = self.origin();
        let snapshot = Snapshot {
            job_id: *id,
            tenant_id: self.tenant()?,
            kind: self.kind()?,
            status: stored,
            percent: if done {
                100
            } else {
                self.opt_num(Field::Percent).unwrap_or(0).min(100) as u8
            },
            step: if done {
                DONE_STEP.to_owned()
            } else {
                self.owned(Field::Step).unwrap_or_else(|| {
                    let usual = USUAL_STEPS.iter().find(|(s, _)| *s == stored.as_str());
                    usual.map_or("", |(_, step)| step).to_owned()
                })
            },
            params: self.json(Field::Params),
            result: self.json(Field::Result),
            error: self.owned(Field::Error),
            created_at,
            started_at: started_at.or(at_create.then_some(created_at)),
            updated_at: finished_at.map_or(updated_at, |f| f.max(updated_at)),
            heartbeat_at,
            finished_at,
            cancel_requested_at,
            attempt: self.opt_num(Field::Attempt).unwrap_or(u64::from(at_create)) as u32,
            max_attempts: self.max_attempts(settings),
            worker: self.owned(Field::Worker),
            recovered_at: self.opt_num(Field::RecoveredMs),
            created_by: Some(self.creator()),
            cancelled_by: self.owned(Field::CancelledBy),
            retried_by: self.owned(Field::RetriedBy),
            retried_as: self.id(Field::RetriedAs),
            request_id: self.owned(Field::RequestId),
            retry_of: origin.retry_of,
            eta_seconds: None,
            waiting_for: self.id(Field::WaitingFor),
            pipeline_id: self.id(Field::Pipeline),
            steps: None,
        };
        Ok(Some(self.read_at(snapshot, now_ms, settings)))
    }

    /// Whether the job was claimed once, at its create or from the queue: a record with a
    /// worker and no claim (FIRST_CLAIM in lua/record.lua), which leaves out its claim (1),
    /// attempt (1), its `started` event when it is the job's second, and at its create its
    /// start (its creation).
    fn claimed_once(&self) -> bool {
        self.get(Field::Worker).is_some() && self.get(Field::Claim).is_none()
    }

    /// A pipeline's steps, as its record lists them (`None` for any other job).
    pub fn steps(&self) -> Result<Option<Vec<StepRef>>, StoreError> {
        self.long(Field::Steps)
            .map(|raw| {
                pipeline::decode(&raw)
                    .ok_or_else(|| StoreError::Corrupt("a pipeline's steps are malformed".into()))
            })
            .transpose()
    }

    fn id(&self, field: Field) -> Option<JobId> {
        self.get(field).and_then(|v| JobId::parse(v).ok())
    }

    /// The run a claim handed to a worker (claim.lua's answer after the job's id).
    pub fn claim(&self, id: JobId) -> Result<Claim, StoreError> {
        let params = self
            .long(Field::Params)
            .ok_or_else(|| StoreError::Corrupt("claim answered no params".into()))?;
        Ok(Claim {
            job: NewJob {
                id,
                tenant: self.tenant()?,
                kind: self.kind()?,
                params: serde_json::from_str(&params)
                    .map_err(|_| StoreError::Corrupt("claim answered no params".into()))?,
                step: String::new(),
                origin: self.origin(),
                idempotency_key: None,
                in_order: self.get(Field::InOrder).is_some(),
                pipeline: self.id(Field::Pipeline),
            },
            created_at: self.num(Field::CreatedMs)?,
            run: RunId {
                id,
                claim: self.num(Field::Claim)?,
            },
            attempt: self.num(Field::Attempt)? as u32,
        })
    }
}

impl Hash {
    /// The job's timeline as its record keeps it (see `lua/record.lua`): the events after
    /// `after`, oldest first, at most [`TIMELINE_CAP`] (the newest). The latest progress tick
    /// is among them, after the events noted before it. Empty when there is no job.
    pub fn timeline(
        &self,
        id: &JobId,
        after: Option<EventId>,
    ) -> Result<Vec<TimelineEvent>, StoreError> {
        let Some(created) = self.opt_num(Field::CreatedMs) else {
            return Ok(Vec::new());
        };
        // Keyed by seq: a sampled tick that is also the latest is one event.
        let mut events = BTreeMap::new();
        let implied = match self.get(Field::Worker) {
            Some(worker) if self.claimed_once() && !self.0.contains_key(IMPLIED_START_FIELD) => {
                let at = self.opt_num(Field::StartedMs).unwrap_or(created);
                Some(format!(
                    "1|s|{}|r|0|1;{worker}|",
                    at.saturating_sub(created)
                ))
            }
            _ => None,
        };
        let stored = self
            .0
            .iter()
            .filter(|(name, _)| name.starts_with(EVENT_MARK))
            .map(|(_, value)| value);
        let implied = [
            implied,
            self.implied_created(),
            self.implied_finished(created),
        ];
        for value in stored.chain(implied.iter().flatten()) {
            let (seq, event) = self.event(created, value).ok_or_else(|| {
                StoreError::Corrupt(format!("a timeline event of job {id} is malformed"))
            })?;
            if after.is_none_or(|after| event.event_id() > Some(after)) {
                events.insert(seq, event);
            }
        }
        let skip = events.len().saturating_sub(TIMELINE_CAP);
        Ok(events.into_values().skip(skip).collect())
    }

    /// The usual `created` event, when the record implies it: it stores no `@0`, and was not
    /// written back by its run (a record the store lost starts a new timeline).
    fn implied_created(&self) -> Option<String> {
        let implies = !self.0.contains_key("@0") && self.get(Field::Restored).is_none();
        implies.then(|| IMPLIED_CREATED.to_owned())
    }

    /// A done job's usual `finished` event, when the record implies it (it stores no event of
    /// the job's last number): at its finished_ms.
    fn implied_finished(&self, created: u64) -> Option<String> {
        if self.get(Field::Status) != Some("done") {
            return None;
        }
        let seq = self.opt_num(Field::Events)?.checked_sub(1)?;
        let finished = self.opt_num(Field::FinishedMs)?;
        (!self.0.contains_key(&format!("{EVENT_MARK}{seq}")))
            .then(|| format!("{seq}|f|{}|d|100||", finished.saturating_sub(created)))
    }

    /// One event's value, `seq|type|ms since created|status|percent|extra|step` (type and
    /// status as their codes, [`EVENT_CODES`] and [`STATUS_CODES`]; the step empty when it is
    /// its type's [`DEFAULT_STEPS`]), with the
    /// fields its type adds: its own (`extra`: attempt and worker of a start) or the
    /// record's (the request id of `created`, who asked of `cancel_requested`, …).
    fn event(&self, created: u64, value: &str) -> Option<(u64, TimelineEvent)> {
        let mut parts = value.splitn(7, '|');
        let seq: u64 = parts.next()?.parse().ok()?;
        let kind = decoded(EVENT_CODES, parts.next()?);
        let at = created + parts.next()?.parse::<u64>().ok()?;
        let status = decoded(STATUS_CODES, parts.next()?);
        let percent = parts.next()?.parse::<f64>().ok()?.clamp(0.0, 100.0) as u8;
        let own = parts.next()?;
        let step = match parts.next()? {
            "" => DEFAULT_STEPS
                .iter()
                .find(|(t, _)| *t == kind)
                .map_or("", |(_, step)| step),
            step => step,
        }
        .to_owned();
        let mut extra = Map::new();
        let mut from_record = |name: &str, field: Field| {
            if let Some(v) = self.get(field) {
                extra.insert(name.to_owned(), v.into());
            }
        };
        match kind.as_str() {
            "created" => from_record("request_id", Field::RequestId),
            "cancel_requested" => from_record("by", Field::CancelledBy),
            "superseded" => from_record("superseded_by", Field::SupersededBy),
            "finished" => from_record("error", Field::Error),
            _ => {}
        }
        if own.contains('=') {
            // A tenant's order and its pipelines note theirs by name (`lua/order.lua`).
            for pair in own.split(';') {
                let (name, value) = pair.split_once('=')?;
                extra.insert(name.to_owned(), value.into());
            }
        } else if !own.is_empty() {
            let (attempt, worker) = own
                .split_once(';')
                .map_or((own, None), |(a, w)| (a, Some(w)));
            extra.insert("attempt".into(), attempt.parse::<u64>().ok()?.into());
            if let Some(worker) = worker {
                extra.insert("worker".into(), worker.into());
            }
        }
        let event = TimelineEvent {
            id: EventId { seq, ms: at }.to_string(),
            kind,
            at,
            status,
            percent,
            step,
            extra,
        };
        Some((seq, event))
    }
}

fn corrupt(e: InvalidId) -> StoreError {
    StoreError::Corrupt(e.to_string())
}
mod codes;
mod lost;
#[cfg(test)]
mod tests;
