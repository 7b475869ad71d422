//! A tenant's order and its pipelines. Jobs of the kinds the registry declares ordered run
//! one at a time per tenant, in creation order: a later one waits (`waiting_for`) and the
//! store step that ends the one ahead releases it. A pipeline is a parent job whose steps
//! are such jobs; its record keeps only its steps (`StepRef`), and what a reader sees of it —
//! status, percent, step, result — is composed here from the steps' own snapshots, the same
//! way for both stores. Knows nothing of HTTP or of catalogues.

use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::store::{Outcome, LOST};
use super::{JobId, Kind, Snapshot, Status};

mod plan;
pub use plan::{plan, Plan, STEPS_FIELD};

/// The kind of a pipeline's parent job (its tenant+kind lock makes one pipeline a tenant).
pub const PIPELINE_KIND: &str = "pipeline";

/// How the step of a step that never ran begins: it ended `cancelled` with its pipeline.
const SKIPPED: &str = "skipped: ";

/// The step a step that never ran ends with when its pipeline was cancelled.
pub const SKIPPED_CANCELLED: &str = "skipped: the pipeline was cancelled";

/// The step a step that never ran ends with when an earlier step failed.
pub fn skipped_failed(failed_kind: &Kind) -> String {
    format!("{SKIPPED}the pipeline failed in {failed_kind}")
}

/// The step a failed pipeline ends with: which step failed, and its class.
pub fn failed_step(kind: &Kind, class: &str) -> String {
    format!("failed in {kind}: {class}")
}

/// The step of a job waiting for `ahead` (its tenant's job of `kind` created before it).
pub fn waiting_step(kind: &Kind, ahead: &JobId) -> String {
    format!("waiting for {kind} {}… to end", &ahead.to_string()[..8])
}

/// How `pipeline` ended, when it ended in the store step that ended `step` (its end carries
/// the same time), or that left `step` reading `lost` for good (the pipeline then failed in
/// it with class `Lost`): the one place that tells a pipeline's end apart from a step's, so
/// the process that ended the step counts the pipeline's end once.
fn ended_with(pipeline: &Snapshot, step: &Snapshot) -> Option<Outcome> {
    let same_step = match step.finished_at {
        Some(at) => pipeline.finished_at == Some(at),
        None => {
            step.status == Status::Lost
                && pipeline.finished_at.is_some()
                && pipeline.step == failed_step(&step.kind, LOST)
        }
    };
    if !same_step || step.pipeline_id != Some(pipeline.job_id) {
        return None;
    }
    match pipeline.status {
        Status::Done => Some(Outcome::Done(pipeline.result.clone())),
        Status::Cancelled => Some(Outcome::Cancelled(pipeline.result.clone())),
        Status::Failed | Status::Lost => Some(Outcome::Failed(
            pipeline.error.clone().unwrap_or_else(|| FAILED.to_owned()),
            None,
        )),
        _ => None,
    }
}

/// The ends to count once `pipeline` ended in the store step that ended `step` (see
/// [`ended_with`]): the pipeline's own, then each of its steps that never ran, as cancelled.
/// No run ends a skipped step, so whoever counts its pipeline's end counts it too.
pub fn ends_counted_with(pipeline: &Snapshot, step: &Snapshot) -> Vec<(Kind, Outcome)> {
    match ended_with(pipeline, step) {
        Some(outcome) => std::iter::once((pipeline.kind.clone(), outcome))
            .chain(skipped_ends(pipeline))
            .collect(),
        None => Vec::new(),
    }
}

/// The ends of `pipeline`'s steps that never ran (they ended `cancelled`, skipped), read from
/// its composed snapshot: none for a job that is not a pipeline.
pub fn skipped_ends(pipeline: &Snapshot) -> Vec<(Kind, Outcome)> {
    let steps = pipeline.steps.as_deref().unwrap_or_default();
    steps
        .iter()
        .filter(|s| s.status == Status::Cancelled && s.step.starts_with(SKIPPED))
        .map(|s| (s.kind.clone(), Outcome::Cancelled(Value::Null)))
        .collect()
}

/// The class of a failed pipeline whose record names none (never written so by this service).
const FAILED: &str = "Failed";

/// One step as its pipeline's record keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepRef {
    pub kind: Kind,
    pub job_id: JobId,
    /// Its share of the pipeline's percent; a pipeline's shares add up to 100.
    pub share: u8,
}

/// The record's form of a pipeline's steps: one piece a step, `kind:job_id:share,`, in order
/// (`lua/order.lua` reads each piece; joined, they read back with [`decode`]).
pub fn encode(steps: &[StepRef]) -> Vec<String> {
    steps
        .iter()
        .map(|s| format!("{}:{}:{},", s.kind, s.job_id, s.share))
        .collect()
}

/// Reads [`encode`]'s pieces, joined; `None` when it is not that (a corrupt record).
pub fn decode(raw: &str) -> Option<Vec<StepRef>> {
    let steps: Option<Vec<StepRef>> = raw
        .split(',')
        .filter(|one| !one.is_empty())
        .map(|one| {
            let mut parts = one.split(':');
            let step = StepRef {
                kind: Kind::parse(parts.next()?).ok()?,
                job_id: JobId::parse(parts.next()?).ok()?,
                share: parts.next()?.parse().ok()?,
            };
            parts.next().is_none().then_some(step)
        })
        .collect();
    steps.filter(|s| !s.is_empty())
}

/// Shares of 100 in proportion to `weights` (largest remainder, ties to the earlier step),
/// so that a pipeline of fewer steps divides its percent as a whole one does.
pub fn shares(weights: &[u32]) -> Vec<u8> {
    let total: u32 = weights.iter().sum::<u32>().max(1);
    let mut out: Vec<u32> = weights.iter().map(|w| w * 100 / total).collect();
    let mut left = 100 - out.iter().sum::<u32>().min(100);
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(weights[i] * 100 % total));
    for i in order.into_iter().cycle().take(weights.len() * 2) {
        if left == 0 {
            break;
        }
        out[i] += 1;
        left -= 1;
    }
    out.into_iter()
        .map(|s| u8::try_from(s).expect("a share of 100 fits in u8"))
        .collect()
}

/// A step as a reader sees it in its pipeline's snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = PipelineStep)]
pub struct StepView {
    pub kind: Kind,
    /// The step's own job.
    pub job_id: JobId,
    /// The step's own status, as its job reads.
    pub status: Status,
    /// The step's own percent, as its job reads.
    #[schema(minimum = 0, maximum = 100)]
    pub percent: u8,
    /// The step's own step text, as its job reads.
    pub step: String,
    /// Its share of the pipeline's percent (a pipeline's shares add up to 100).
    #[schema(minimum = 0, maximum = 100)]
    pub share: u8,
}

impl StepView {
    fn of(step: &StepRef, job: Option<&Snapshot>, pipeline: Status) -> Self {
        let (status, percent, text) = match job {
            Some(s) => (s.status, s.percent, s.step.clone()),
            // The step's record is gone (expired, or a store that lost its data): a done
            // pipeline's steps were all done; otherwise nothing is known of it.
            None if pipeline == Status::Done => (Status::Done, 100, String::new()),
            None => (Status::Queued, 0, String::new()),
        };
        Self {
            kind: step.kind.clone(),
            job_id: step.job_id,
            status,
            percent,
            step: text,
            share: step.share,
        }
    }
}

/// The pipeline as a reader sees it, from its stored record (`queued` while active: it is
/// never claimed, leased or stale; its end fields once ended) and its steps' snapshots
/// (`None` for one whose record is gone), read at `now_ms`.
///
/// Its percent is the steps' percents weighted by their shares, rounded down, and never
/// below what the record holds: each step's percent never goes backwards, so neither does
/// this. While active its status is `cancelling` once asked to stop, else `running` from its
/// first step's start on (never back to `queued`: not while a step is re-queued after its
/// worker stopped answering, nor while the next step waits for a worker), else `queued`; its
/// step, worker and heartbeat are those of its first step not done. Its result holds the
/// report of each step that ended, by kind.
pub fn compose(
    mut pipeline: Snapshot,
    steps: &[StepRef],
    jobs: &[Option<Snapshot>],
    now_ms: u64,
) -> Snapshot {
    let views: Vec<StepView> = steps
        .iter()
        .zip(jobs)
        .map(|(step, job)| StepView::of(step, job.as_ref(), pipeline.status))
        .collect();
    let weighted: u32 = views
        .iter()
        .map(|v| u32::from(v.share) * u32::from(v.percent))
        .sum();
    let percent = u8::try_from((weighted / 100).min(100)).expect("at most 100");
    pipeline.percent = pipeline.percent.max(percent);
    let present = || jobs.iter().flatten();
    if pipeline.status.is_active() {
        pipeline.status = if pipeline.cancel_requested_at.is_some() {
            Status::Cancelling
        } else if views.iter().zip(jobs).any(|(v, job)| {
            v.status != Status::Queued || job.as_ref().is_some_and(|j| j.started_at.is_some())
        }) {
            Status::Running
        } else {
            Status::Queued
        };
        let current = steps.iter().zip(jobs).find_map(|(step, job)| {
            job.as_ref()
                .filter(|j| j.status != Status::Done)
                .map(|j| (step, j))
        });
        if let Some((step, job)) = current {
            pipeline.step = format!("{}: {}", step.kind, job.step);
            pipeline.worker.clone_from(&job.worker);
            pipeline.heartbeat_at = pipeline.heartbeat_at.max(job.heartbeat_at);
        }
    }
    pipeline.started_at = present().filter_map(|j| j.started_at).min();
    pipeline.updated_at = present()
        .map(|j| j.updated_at)
        .fold(pipeline.updated_at, u64::max);
    let mut reports = Map::new();
    for (step, job) in steps.iter().zip(jobs) {
        if let Some(job) = job.as_ref().filter(|j| j.status.is_finished()) {
            reports.insert(step.kind.to_string(), job.result.clone());
        }
    }
    pipeline.result = if reports.is_empty() {
        Value::Null
    } else {
        Value::Object(reports)
    };
    pipeline.steps = Some(views);
    pipeline.eta_seconds = None;
    pipeline.with_eta(now_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::store::NewJob;
    use crate::jobs::TenantId;

    fn kind(k: &str) -> Kind {
        Kind::parse(k).unwrap()
    }

    fn new_job(k: &str) -> NewJob {
        NewJob {
            id: JobId::new(),
            tenant: TenantId::parse("t").unwrap(),
            kind: kind(k),
            params: Value::Null,
            step: String::new(),
            origin: Default::default(),
            idempotency_key: None,
            in_order: true,
            pipeline: None,
        }
    }

    fn job(k: &str, status: Status, percent: u8, at: u64) -> Snapshot {
        let new = new_job(k);
        let mut s = new.record(status, percent, "working", 1_000, at, 3);
        s.started_at = (status != Status::Queued).then_some(at);
        s.result = match status.is_finished() {
            true => serde_json::json!({ "kind": k }),
            false => Value::Null,
        };
        s
    }

    fn pipeline_of(jobs: &[Snapshot]) -> (Snapshot, Vec<StepRef>) {
        let parent = new_job(PIPELINE_KIND);
        let refs = jobs
            .iter()
            .zip(shares(&[40, 30, 30][..jobs.len()]))
            .map(|(j, share)| StepRef {
                kind: j.kind.clone(),
                job_id: j.job_id,
                share,
            })
            .collect();
        (
            parent.record(Status::Queued, 0, "queued", 1_000, 1_000, 3),
            refs,
        )
    }

    fn read(jobs: &[Snapshot]) -> Snapshot {
        let (parent, refs) = pipeline_of(jobs);
        let present: Vec<Option<Snapshot>> = jobs.iter().cloned().map(Some).collect();
        compose(parent, &refs, &present, 9_000)
    }

    #[test]
    fn shares_divide_100_in_proportion_whatever_the_steps() {
        assert_eq!(shares(&[40, 30, 30]), vec![40, 30, 30]);
        assert_eq!(shares(&[30, 30]), vec![50, 50]);
        assert_eq!(shares(&[40, 30]), vec![57, 43]);
        assert_eq!(shares(&[1, 1, 1]), vec![34, 33, 33]);
        assert_eq!(shares(&[7]), vec![100]);
    }

    #[test]
    fn a_step_list_reads_back_as_it_was_written() {
        let steps = vec![
            StepRef {
                kind: kind("sync"),
                job_id: JobId::new(),
                share: 40,
            },
            StepRef {
                kind: kind("pair"),
                job_id: JobId::new(),
                share: 60,
            },
        ];
        assert_eq!(decode(&encode(&steps).concat()), Some(steps));
        for corrupt in [
            "",
            "sync",
            "sync:nope:40",
            "sync:4f1c2d3e-0000-4000-8000-000000000000:x",
        ] {
            assert_eq!(decode(corrupt), None, "{corrupt}");
        }
    }

    #[test]
    fn the_percent_is_the_weighted_steps_and_the_step_is_the_running_one() {
        let got = read(&[
            job("sync", Status::Done, 100, 2_000),
            job("enrich", Status::Running, 50, 3_000),
            job("pair", Status::Queued, 0, 1_000),
        ]);
        assert_eq!(got.percent, 40 + 15);
        assert_eq!(got.status, Status::Running);
        assert_eq!(got.step, "enrich: working");
        assert_eq!(got.started_at, Some(2_000));
        assert_eq!(got.updated_at, 3_000);
        assert_eq!(got.result, serde_json::json!({"sync": {"kind": "sync"}}));
        let steps = got.steps.expect("a pipeline lists its steps");
        let seen: Vec<(Status, u8, u8)> = steps
            .iter()
            .map(|s| (s.status, s.percent, s.share))
            .collect();
        assert_eq!(
            seen,
            vec![
                (Status::Done, 100, 40),
                (Status::Running, 50, 30),
                (Status::Queued, 0, 30)
            ]
        );
        assert!(got.eta_seconds.is_some(), "a running pipeline has a rate");
    }

    #[test]
    fn a_pipeline_waiting_for_its_first_step_is_queued_and_one_asked_to_stop_is_cancelling() {
        let jobs = [
            job("sync", Status::Queued, 0, 1_000),
            job("pair", Status::Queued, 0, 1_000),
        ];
        assert_eq!(read(&jobs).status, Status::Queued);
        // Once a step started it reads running until it ends: between steps, and while its
        // step is re-queued (it read queued then: a hostile probe's finding).
        let between = [
            job("sync", Status::Done, 100, 2_000),
            job("pair", Status::Queued, 0, 1_000),
        ];
        assert_eq!(read(&between).status, Status::Running);
        let mut requeued = job("sync", Status::Queued, 10, 2_000);
        requeued.started_at = Some(1_500);
        assert_eq!(read(&[requeued, jobs[1].clone()]).status, Status::Running);
        let (mut parent, refs) = pipeline_of(&jobs);
        parent.cancel_requested_at = Some(5_000);
        let present: Vec<Option<Snapshot>> = jobs.iter().cloned().map(Some).collect();
        assert_eq!(
            compose(parent, &refs, &present, 9_000).status,
            Status::Cancelling
        );
    }

    #[test]
    fn an_ended_pipeline_keeps_its_stored_end_and_never_reads_a_lower_percent() {
        let jobs = [
            job("sync", Status::Done, 100, 2_000),
            job("enrich", Status::Failed, 30, 3_000),
        ];
        let (mut parent, refs) = pipeline_of(&jobs);
        parent.status = Status::Failed;
        parent.step = "failed in enrich: Panic".into();
        parent.percent = 99;
        let present: Vec<Option<Snapshot>> = jobs.iter().cloned().map(Some).collect();
        let got = compose(parent, &refs, &present, 9_000);
        assert_eq!(
            (got.status, got.step.as_str()),
            (Status::Failed, "failed in enrich: Panic")
        );
        assert_eq!(got.percent, 99, "the record's percent is a floor");
        assert_eq!(got.eta_seconds, None);
    }

    #[test]
    fn the_waiting_step_names_the_job_ahead_by_kind_and_short_id() {
        let ahead = JobId::parse("6f0c1a2b-0000-4000-8000-000000000000").unwrap();
        assert_eq!(
            waiting_step(&kind("sync"), &ahead),
            "waiting for sync 6f0c1a2b… to end"
        );
    }
}
