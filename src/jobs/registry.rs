//! The seam between the runner and the work: job kinds, their functions and their errors.
//!
//! A job function is a plain blocking function that takes an *optional* progress callback
//! and behaves the same with or without it. Its error exposes a class name (the variant),
//! which is all the job record keeps; the message goes to the log only. Each kind also checks
//! its own parameters before a job is created, so bad input never creates a job: it declares
//! them as a type read from the request's fields (`params::from_fields`), or reads the fields
//! itself; either way a mistake is a `ParamError`, which the HTTP boundary answers.

use std::collections::BTreeMap;
use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::fence::Fence;
use super::params::{field_names, from_fields, Fields, NoParams, ParamError};
use super::store::RunId;
use super::{JobId, Kind, TenantId};

/// The optional progress callback: `(percent, step)`. `Sync` so a job may report from
/// several threads. It never blocks and never fails the job.
pub type Progress<'a> = Option<&'a (dyn Fn(u8, &str) + Sync)>;

/// A job's report: the object polling shows as `result`.
pub type Report = Value;

/// What a job function is given.
#[derive(Clone, Debug)]
pub struct JobInput {
    pub job_id: JobId,
    pub tenant: TenantId,
    pub kind: Kind,
    /// The parameters its kind's `prepare` produced.
    pub params: Value,
    /// Cancelled when someone asked the job to stop. A job that looks at it between units of
    /// work returns `JobError::cancelled()`; one that never looks simply runs to its end.
    pub cancel: CancellationToken,
    /// This run: the job's id and its claim token (raised by every claim).
    pub run: RunId,
    /// What every catalogue write of this run passes (`jobs::fence`): it happens only while
    /// this run still holds its job and its tenant was not deleted since.
    pub fence: Arc<dyn Fence>,
    /// The key its kind probes (`Registry::with_probe`) did not exist in the step that claimed
    /// the job at its create, its start: its quick answer's first read, already made. False
    /// when that was not read (any other claim).
    pub probed_absent: bool,
}

/// The error class of a job that stopped because it was asked to.
pub const CANCELLED: &str = "Cancelled";
/// The class of a run whose write was refused (never recorded: see `JobError::Fenced`).
pub const FENCED: &str = "Fenced";
const FENCED_MESSAGE: &str = "the store refused this run's write: another run or job holds the job";
/// The error class of a job whose stored parameters are not its kind's.
pub const CORRUPT_PARAMS: &str = "CorruptParams";

/// An error type whose variants name the job's error class (`SourceUnreachable`, …).
pub trait ErrorClass: StdError + Send + Sync + 'static {
    fn class(&self) -> &'static str;

    /// What the job did before it failed, for the record's `result` (none by default).
    fn partial_report(&self) -> Option<Report> {
        None
    }
}

/// How a job function ended without a report: it failed (the class for the record, the
/// error itself for the log), or it stopped on request with what it had saved so far.
pub enum JobError {
    Failed {
        class: String,
        /// What the job did before it failed, shown as its `result`.
        report: Option<Report>,
        source: Box<dyn StdError + Send + Sync>,
    },
    /// Stopped because `JobInput::cancel` was tripped (a cancel request, or the run was
    /// fenced off); `report` becomes the cancelled job's `result`.
    Cancelled { report: Option<Report> },
    /// The store refused a write of the run: another run or job holds the job now, or its
    /// tenant was deleted. The run ends as a fenced-off run does: its end is not recorded.
    Fenced,
}

impl JobError {
    pub fn class(&self) -> &str {
        match self {
            JobError::Failed { class, .. } => class,
            JobError::Cancelled { .. } => CANCELLED,
            JobError::Fenced => FENCED,
        }
    }

    /// The partial report a failed or cancelled job kept, shown as its `result`.
    pub fn report(&self) -> Option<&Report> {
        match self {
            JobError::Failed { report, .. } | JobError::Cancelled { report } => report.as_ref(),
            JobError::Fenced => None,
        }
    }

    /// The job stopped on request (see `JobInput::cancel`).
    pub fn cancelled() -> Self {
        JobError::Cancelled { report: None }
    }

    /// The job stopped on request, with a report of what it had saved so far.
    pub fn cancelled_with(report: Report) -> Self {
        JobError::Cancelled {
            report: Some(report),
        }
    }

    /// A job error with an explicit class, for errors without their own `ErrorClass` type.
    pub fn new(class: &str, source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        JobError::Failed {
            class: class.to_owned(),
            report: None,
            source: source.into(),
        }
    }
}

/// An error whose class is `Cancelled` is a stop on request, without a report; one whose class
/// is `Fenced` is a refused write.
impl<E: ErrorClass> From<E> for JobError {
    fn from(e: E) -> Self {
        match e.class() {
            CANCELLED => return JobError::cancelled(),
            FENCED => return JobError::Fenced,
            _ => {}
        }
        JobError::Failed {
            class: e.class().to_owned(),
            report: e.partial_report(),
            source: Box::new(e),
        }
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {self}", self.class())
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match self {
            JobError::Failed { source, .. } => source,
            JobError::Cancelled { .. } => return f.write_str("the job was asked to stop"),
            JobError::Fenced => return f.write_str(FENCED_MESSAGE),
        };
        write!(f, "{source}")?;
        let mut cause = source.source();
        while let Some(c) = cause {
            write!(f, ": {c}")?;
            cause = c.source();
        }
        Ok(())
    }
}

pub type JobFn = Arc<dyn Fn(&JobInput, Progress<'_>) -> Result<Report, JobError> + Send + Sync>;
pub type PrepareFn = Arc<dyn Fn(&Fields) -> Result<Value, ParamError> + Send + Sync>;
/// A kind's quick answer (see [`Registry::with_quick`]): the job's end, or `None` to run its
/// function.
pub type QuickAnswer = Option<Result<Report, JobError>>;
pub type QuickFn =
    Arc<dyn for<'a> Fn(&'a JobInput, Progress<'a>) -> BoxFuture<'a, QuickAnswer> + Send + Sync>;
/// The key a kind's quick answer reads first, for a tenant (see [`Registry::with_probe`]).
pub type ProbeFn = Arc<dyn Fn(&TenantId) -> String + Send + Sync>;

/// One job kind: how to check its parameters and how to run it.
#[derive(Clone)]
pub struct JobKind {
    pub run: JobFn,
    pub prepare: PrepareFn,
    /// The request fields a start of this kind takes (`None`: the kind reads them itself).
    pub fields: Option<&'static [&'static str]>,
    /// Answers a job on the runtime, without a blocking thread, when its work is known small.
    pub quick: Option<QuickFn>,
    /// The key whose absence the create step that claims a job reads for `quick`.
    pub probe: Option<ProbeFn>,
}

/// The job kinds a service runs, passed to the app builder: the binary registers the
/// catalogue jobs, tests register their own.
#[derive(Clone, Default)]
pub struct Registry {
    kinds: BTreeMap<Kind, JobKind>,
    /// The kinds a tenant runs one at a time, in creation order, with their weights as a
    /// pipeline's steps, in step order.
    order: Vec<(Kind, u32)>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a kind that reads the request's fields itself, with `prepare`.
    pub fn with(
        self,
        kind: &str,
        prepare: impl Fn(&Fields) -> Result<Value, ParamError> + Send + Sync + 'static,
        run: impl Fn(&JobInput, Progress<'_>) -> Result<Report, JobError> + Send + Sync + 'static,
    ) -> Self {
        self.insert(kind, Arc::new(prepare), Arc::new(run), None)
    }

    fn insert(
        mut self,
        kind: &str,
        prepare: PrepareFn,
        run: JobFn,
        fields: Option<&'static [&'static str]>,
    ) -> Self {
        let kind = Kind::parse(kind).expect("registered kind names are valid by construction");
        let spec = JobKind {
            run,
            prepare,
            fields,
            quick: None,
            probe: None,
        };
        self.kinds.insert(kind, spec);
        self
    }

    /// Gives the registered `kind` a quick answer: an async step the runner takes on its own
    /// task before the kind's blocking function, reading what the job's first read would
    /// (a catalogue's size, say) without a blocking thread. When that says the job's work is
    /// small, the step does it and answers the job's end, reporting progress as the function
    /// would; the function then never runs, and the job costs no hand-off to a blocking
    /// thread and back. It must never block, and answers `None` (the function runs) for
    /// anything it is not sure of — a failed read included: the function waits out an outage.
    pub fn with_quick(
        mut self,
        kind: &str,
        quick: impl for<'a> Fn(&'a JobInput, Progress<'a>) -> BoxFuture<'a, QuickAnswer>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        let kind = Kind::parse(kind).expect("registered kind names are valid by construction");
        let spec = self
            .kinds
            .get_mut(&kind)
            .unwrap_or_else(|| panic!("{kind} is registered before its quick answer"));
        spec.quick = Some(Arc::new(quick));
        self
    }

    /// Gives the registered `kind` a probe: the key (of the tenant's slot group: its hash tag)
    /// whose absence its quick answer reads first. A create that claims a job of the kind for
    /// this process reads it in the same step — the job's start — and says so in
    /// `JobInput::probed_absent`, sparing the quick answer its own read (a store round trip
    /// before the job's end).
    pub fn with_probe(
        mut self,
        kind: &str,
        probe: impl Fn(&TenantId) -> String + Send + Sync + 'static,
    ) -> Self {
        let kind = Kind::parse(kind).expect("registered kind names are valid by construction");
        let spec = self
            .kinds
            .get_mut(&kind)
            .unwrap_or_else(|| panic!("{kind} is registered before its probe"));
        spec.probe = Some(Arc::new(probe));
        self
    }

    /// Declares `steps` (registered kinds, with their weights) as the kinds a tenant runs one
    /// at a time in creation order — the kinds that write what the others read, so that each
    /// report covers what the jobs before it did — and as the steps a pipeline may have, in
    /// this order, its percent shared by these weights.
    pub fn in_order(mut self, steps: &[(&str, u32)]) -> Self {
        self.order = steps
            .iter()
            .map(|(kind, weight)| {
                let kind = Kind::parse(kind).expect("ordered kind names are valid by construction");
                assert!(
                    self.kinds.contains_key(&kind),
                    "{kind} is registered before it is ordered"
                );
                (kind, *weight)
            })
            .collect();
        self
    }

    /// Whether jobs of `kind` run in their tenant's order.
    pub fn is_ordered(&self, kind: &Kind) -> bool {
        self.order.iter().any(|(k, _)| k == kind)
    }

    /// The ordered kinds, in a pipeline's step order, with their weights.
    pub fn order(&self) -> &[(Kind, u32)] {
        &self.order
    }

    /// Registers a kind with typed parameters: the request's fields are read once as `F`
    /// ([`from_fields`]) and `check`ed into its parameters `P` at the POST (stored with the
    /// job as JSON, so any replica can run it); `run` gets them deserialised once, when the
    /// job starts.
    pub fn with_typed<F, P>(
        self,
        kind: &str,
        check: impl Fn(F) -> Result<P, ParamError> + Send + Sync + 'static,
        run: impl Fn(&JobInput, &P, Progress<'_>) -> Result<Report, JobError> + Send + Sync + 'static,
    ) -> Self
    where
        F: DeserializeOwned,
        P: Serialize + DeserializeOwned,
    {
        let prepare = move |fields: &Fields| {
            let params = check(from_fields::<F>(fields)?)?;
            Ok(serde_json::to_value(params).expect("job parameters serialise to JSON"))
        };
        self.insert(
            kind,
            Arc::new(prepare),
            Arc::new(move |input: &JobInput, progress: Progress<'_>| {
                // Written by `prepare` above; anything else in the store is a corrupt record.
                // Read in place, not from a copy of the JSON tree.
                let params =
                    P::deserialize(&input.params).map_err(|e| JobError::new(CORRUPT_PARAMS, e))?;
                run(input, &params, progress)
            }),
            Some(field_names::<F>()),
        )
    }

    /// Registers a kind whose parameters are `P`, read from the request's fields as they
    /// are ([`from_fields`]): adding a parameter is adding a field to `P`.
    pub fn with_params<P>(
        self,
        kind: &str,
        run: impl Fn(&JobInput, &P, Progress<'_>) -> Result<Report, JobError> + Send + Sync + 'static,
    ) -> Self
    where
        P: Serialize + DeserializeOwned + 'static,
    {
        self.with_typed(kind, Ok::<P, ParamError>, run)
    }

    /// Registers a kind that takes no parameters (any field is refused).
    pub fn with_plain(
        self,
        kind: &str,
        run: impl Fn(&JobInput, Progress<'_>) -> Result<Report, JobError> + Send + Sync + 'static,
    ) -> Self {
        let prepare = |fields: &Fields| {
            let none: NoParams = from_fields(fields)?;
            Ok(serde_json::to_value(none).expect("an empty struct serialises to {}"))
        };
        self.insert(kind, Arc::new(prepare), Arc::new(run), Some(&[]))
    }

    pub fn get(&self, kind: &Kind) -> Option<&JobKind> {
        self.kinds.get(kind)
    }

    /// The key a create of `kind` for `tenant` probes, when the kind has a probe.
    pub fn probe(&self, kind: &Kind, tenant: &TenantId) -> Option<String> {
        let probe = self.kinds.get(kind)?.probe.as_ref()?;
        Some(probe(tenant))
    }

    pub fn kinds(&self) -> impl Iterator<Item = &Kind> {
        self.kinds.keys()
    }

    /// The kinds with a quick answer.
    pub fn quick_kinds(&self) -> impl Iterator<Item = &Kind> {
        self.kinds
            .iter()
            .filter(|(_, spec)| spec.quick.is_some())
            .map(|(kind, _)| kind)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.kinds.keys().map(Kind::as_str)
    }
}
