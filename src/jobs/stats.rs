//! The overview of the whole service: jobs ended per minute (counted by the store in the step
//! that ends each job, kept a day), the live processes (each renews its entry with its
//! heartbeat), and the figures built from them and the active jobs — the same from every
//! replica, since every input is the shared store's. Bounded by construction: a minute holds
//! one count per kind and outcome, the process list one entry per live process.
//! Nothing here knows HTTP; the store keeps the counts, this module only reads them.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

use super::pipeline::PIPELINE_KIND;
use super::{ser_opt_time, ser_time, JobId, Kind, Snapshot, Status, REQUEUED_STEP};

mod processes;
use processes::process_views;
pub use processes::{Beat, Beats, Process, ProcessJob, ProcessView, SILENT_BEATS};

/// Minutes in the longest window the overview counts (`last_day`); the store keeps at least
/// this many minutes of ends.
pub const DAY_MINUTES: u64 = 1440;
/// Minutes in the short window (`last_hour`) and entries in the throughput chart.
pub const HOUR_MINUTES: u64 = 60;
const MINUTE_MS: u64 = 60_000;

/// The minute (since the epoch) a time falls in: the bucket an end is counted in.
pub fn minute_of(ms: u64) -> u64 {
    ms / MINUTE_MS
}

/// How many jobs of `kind` ended `outcome` (done, failed, cancelled) in `minute`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    pub minute: u64,
    pub kind: Kind,
    pub outcome: Status,
    pub count: u64,
}

/// What the store answers for the overview: its clock, the ends of the last
/// [`DAY_MINUTES`] minutes (the current one included), and the processes whose heartbeat
/// is younger than the stale threshold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overview {
    pub now_ms: u64,
    pub ended: Vec<Ended>,
    pub processes: Vec<Beat>,
}

/// Reads a bucket field, `<minute>:<kind>:<outcome>`, and its count, as the store writes it.
pub fn parse_bucket_field(field: &str, count: u64) -> Option<Ended> {
    let mut parts = field.splitn(3, ':');
    let minute = parts.next()?.parse().ok()?;
    let kind = Kind::parse(parts.next()?).ok()?;
    let outcome = Status::parse_stored(parts.next()?).filter(|s| s.is_finished())?;
    Some(Ended {
        minute,
        kind,
        outcome,
        count,
    })
}

/// Active jobs by the status a read answers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct StatusCounts {
    pub queued: u64,
    pub running: u64,
    pub cancelling: u64,
    pub lost: u64,
}

impl StatusCounts {
    fn add(&mut self, status: Status) {
        match status {
            Status::Queued => self.queued += 1,
            Status::Running => self.running += 1,
            Status::Cancelling => self.cancelling += 1,
            Status::Lost => self.lost += 1,
            Status::Done | Status::Failed | Status::Cancelled => {}
        }
    }
}

/// Jobs that have not ended: how many, by status, and by kind and status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct ActiveCounts {
    pub total: u64,
    pub by_status: StatusCounts,
    /// Every kind this service runs (zeros included), and any other kind that has jobs.
    pub by_kind: BTreeMap<String, StatusCounts>,
}

/// Ended jobs by outcome.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct Outcomes {
    pub done: u64,
    pub failed: u64,
    pub cancelled: u64,
}

impl Outcomes {
    fn add(&mut self, outcome: Status, n: u64) {
        match outcome {
            Status::Done => self.done += n,
            Status::Failed => self.failed += n,
            Status::Cancelled => self.cancelled += n,
            _ => {}
        }
    }
}

/// Jobs that ended in a window: how many, by outcome, and by kind and outcome.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct OutcomeCounts {
    pub total: u64,
    pub by_outcome: Outcomes,
    /// Every kind this service runs (zeros included), and any other kind that has ends.
    pub by_kind: BTreeMap<String, Outcomes>,
}

/// The two windows of ended jobs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct Finished {
    /// The current minute and the 59 before it.
    pub last_hour: OutcomeCounts,
    /// The current minute and the 1,439 before it.
    pub last_day: OutcomeCounts,
}

/// Jobs that ended in one minute, by outcome (one bar of the throughput chart).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct MinuteCount {
    /// The minute's start.
    #[serde(serialize_with = "ser_time")]
    #[schema(value_type = String, format = DateTime)]
    pub minute: u64,
    pub done: u64,
    pub failed: u64,
    pub cancelled: u64,
}

/// The ready queue: how many jobs wait for a worker, and the oldest of them; and apart, how
/// many queued jobs wait for their tenant's earlier job (not in the ready queue until it ends).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct QueueFigures {
    pub depth: u64,
    /// Queued jobs waiting for their tenant's earlier job (`waiting_for`).
    pub waiting: u64,
    /// The queued job created first (null when none waits).
    pub oldest_job_id: Option<JobId>,
    #[serde(serialize_with = "ser_opt_time")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub oldest_created_at: Option<u64>,
    /// How long it has waited since it was created, in whole seconds.
    pub oldest_wait_seconds: Option<u64>,
}

/// The overview of the whole service (`GET /catalog/stats`).
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct Stats {
    /// The store's clock when the figures were read; every window is on it.
    #[serde(serialize_with = "ser_time")]
    #[schema(value_type = String, format = DateTime)]
    pub at: u64,
    /// A process (and a running job) whose heartbeat is this old is gone (lost).
    pub stale_after_seconds: f64,
    /// How often a process beats (this replica's interval; replicas share their settings).
    pub heartbeat_seconds: f64,
    /// A process whose heartbeat is this old (`SILENT_BEATS`, 3, intervals) reads
    /// `answering: false`.
    pub not_answering_after_seconds: f64,
    pub active: ActiveCounts,
    pub finished: Finished,
    /// Jobs ended per minute: the current minute and the 59 before it, oldest first.
    pub throughput: Vec<MinuteCount>,
    pub queue: QueueFigures,
    /// Live processes, the most recently started first.
    pub processes: Vec<ProcessView>,
}

impl Stats {
    /// The figures from the store's `overview`, its active jobs (as `JobStore::active` reads
    /// them), the kinds this service runs and its heartbeat's measures.
    pub fn build(overview: Overview, active: &[Snapshot], kinds: &[Kind], beats: Beats) -> Self {
        let now = overview.now_ms;
        let silent_ms = beats.heartbeat_ms.saturating_mul(SILENT_BEATS);
        Self {
            at: now,
            stale_after_seconds: beats.stale_ms as f64 / 1000.0,
            heartbeat_seconds: beats.heartbeat_ms as f64 / 1000.0,
            not_answering_after_seconds: silent_ms as f64 / 1000.0,
            active: active_counts(active, kinds),
            finished: Finished {
                last_hour: outcome_counts(&overview.ended, now, HOUR_MINUTES, kinds),
                last_day: outcome_counts(&overview.ended, now, DAY_MINUTES, kinds),
            },
            throughput: throughput(&overview.ended, now),
            queue: queue_figures(active, now),
            processes: process_views(overview.processes, active, |beat| {
                now.saturating_sub(beat) <= silent_ms
            }),
        }
    }
}

/// A zero count for each kind a job may have: the kinds this service runs and a pipeline's
/// (its parent job, which no registry holds), so every kind is in the answer on both stores
/// before any job of it; a kind appeared only once a job of it had.
fn zero_per_kind<T: Default>(kinds: &[Kind]) -> BTreeMap<String, T> {
    kinds
        .iter()
        .map(Kind::as_str)
        .chain([PIPELINE_KIND])
        .map(|k| (k.to_owned(), T::default()))
        .collect()
}

fn active_counts(active: &[Snapshot], kinds: &[Kind]) -> ActiveCounts {
    let mut counts = ActiveCounts {
        by_kind: zero_per_kind(kinds),
        ..ActiveCounts::default()
    };
    for s in active.iter().filter(|s| !s.status.is_finished()) {
        counts.total += 1;
        counts.by_status.add(s.status);
        counts
            .by_kind
            .entry(s.kind.to_string())
            .or_default()
            .add(s.status);
    }
    counts
}

/// Whether `minute` is one of the `span` minutes up to and including the current one.
fn within(minute: u64, now_ms: u64, span: u64) -> bool {
    let current = minute_of(now_ms);
    minute <= current && minute + span > current
}

fn outcome_counts(ended: &[Ended], now_ms: u64, span: u64, kinds: &[Kind]) -> OutcomeCounts {
    let mut counts = OutcomeCounts {
        by_kind: zero_per_kind(kinds),
        ..OutcomeCounts::default()
    };
    for e in ended.iter().filter(|e| within(e.minute, now_ms, span)) {
        counts.total += e.count;
        counts.by_outcome.add(e.outcome, e.count);
        counts
            .by_kind
            .entry(e.kind.to_string())
            .or_default()
            .add(e.outcome, e.count);
    }
    counts
}

fn throughput(ended: &[Ended], now_ms: u64) -> Vec<MinuteCount> {
    let current = minute_of(now_ms);
    let first = current + 1 - HOUR_MINUTES;
    let mut minutes: Vec<MinuteCount> = (first..=current)
        .map(|m| MinuteCount {
            minute: m * MINUTE_MS,
            done: 0,
            failed: 0,
            cancelled: 0,
        })
        .collect();
    for e in ended
        .iter()
        .filter(|e| within(e.minute, now_ms, HOUR_MINUTES))
    {
        let bar = &mut minutes[(e.minute - first) as usize];
        match e.outcome {
            Status::Done => bar.done += e.count,
            Status::Failed => bar.failed += e.count,
            Status::Cancelled => bar.cancelled += e.count,
            _ => {}
        }
    }
    minutes
}

fn queue_figures(active: &[Snapshot], now_ms: u64) -> QueueFigures {
    let queued = active
        .iter()
        .filter(|s| s.status == Status::Queued && queues(s));
    // A job waiting for its tenant's earlier one is parked outside the ready queue until that
    // one ends (both stores clear `waiting_for` as they move it in).
    let (waiting, ready): (Vec<_>, Vec<_>) = queued.partition(|s| s.waiting_for.is_some());
    let oldest = ready.iter().min_by_key(|s| (s.created_at, s.job_id));
    QueueFigures {
        depth: ready.len() as u64,
        waiting: waiting.len() as u64,
        oldest_job_id: oldest.map(|s| s.job_id),
        oldest_created_at: oldest.map(|s| s.created_at),
        oldest_wait_seconds: oldest.map(|s| now_ms.saturating_sub(s.created_at) / 1000),
    }
}

/// Whether a job that reads `queued` stands in a queue (the ready queue or, with `waiting_for`,
/// the waiting set): not a pipeline's parent (never queued itself: its steps are), nor a run
/// whose lease went stale that reads `queued` until the sweep re-queues it (it still reads the
/// words the sweep writes, but no sweep recovered it since its last claim's heartbeat).
fn queues(s: &Snapshot) -> bool {
    let stale_run = s.step == REQUEUED_STEP && s.recovered_at.is_none_or(|at| at < s.heartbeat_at);
    s.kind.as_str() != PIPELINE_KIND && !stale_run
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(minute: u64, kind: &str, outcome: Status, count: u64) -> Ended {
        Ended {
            minute,
            kind: Kind::parse(kind).unwrap(),
            outcome,
            count,
        }
    }

    #[test]
    fn a_bucket_field_reads_back_and_a_foreign_one_is_skipped() {
        assert_eq!(
            parse_bucket_field("29000000:sync:failed", 3),
            Some(ended(29_000_000, "sync", Status::Failed, 3))
        );
        for foreign in ["x:sync:done", "1:Sync:done", "1:sync:running", "1:sync", ""] {
            assert_eq!(parse_bucket_field(foreign, 1), None, "{foreign}");
        }
    }

    fn queued_of(kind: &str, created_at: u64, behind: Option<JobId>) -> Snapshot {
        let job = crate::jobs::store::NewJob {
            id: JobId::new(),
            tenant: crate::jobs::TenantId::parse("t").unwrap(),
            kind: Kind::parse(kind).unwrap(),
            params: serde_json::Value::Null,
            step: String::new(),
            origin: Default::default(),
            idempotency_key: None,
            in_order: true,
            pipeline: None,
        };
        let mut s = job.record(Status::Queued, 0, "queued", created_at, created_at, 3);
        s.waiting_for = behind;
        s
    }

    /// The depth and the head are the ready queue's: a held pipeline's parent (it counted,
    /// and was named the oldest) and a stale run reading `queued` before the sweep re-queues
    /// it are in no queue; a run the sweep re-queued is.
    #[test]
    fn the_queue_figures_count_only_what_stands_in_a_queue() {
        let parent = queued_of(PIPELINE_KIND, 500, None);
        let held_step = queued_of("sync", 500, Some(JobId::new()));
        let mut stale = queued_of("enrich", 600, None);
        (stale.started_at, stale.heartbeat_at) = (Some(700), 800);
        REQUEUED_STEP.clone_into(&mut stale.step);
        let mut requeued = stale.clone();
        requeued.job_id = JobId::new();
        requeued.created_at = 650;
        requeued.recovered_at = Some(1_000);
        let ready = queued_of("pair", 2_000, None);
        let active = [parent, held_step, stale, requeued.clone(), ready];
        let figures = queue_figures(&active, 7_500);
        assert_eq!((figures.depth, figures.waiting), (2, 1));
        assert_eq!(figures.oldest_job_id, Some(requeued.job_id));
    }

    #[test]
    fn a_job_waiting_for_its_tenants_earlier_one_counts_apart_from_the_ready_queue() {
        let queued = |created_at, behind| queued_of("sync", created_at, behind);
        let ready = queued(2_000, None);
        let active = [queued(1_000, Some(JobId::new())), ready.clone()];
        let figures = queue_figures(&active, 7_500);
        let expected = QueueFigures {
            depth: 1,
            waiting: 1,
            oldest_job_id: Some(ready.job_id),
            oldest_created_at: Some(2_000),
            oldest_wait_seconds: Some(5),
        };
        assert_eq!(figures, expected);
    }

    /// A process is answering until it misses `SILENT_BEATS` beats; then it is marked, and
    /// still listed (the store drops it once its entry is stale).
    #[test]
    fn a_process_that_missed_three_beats_reads_not_answering() {
        let now = 10_000 * MINUTE_MS;
        let beat = |worker: &str, ago: u64| Beat {
            process: Process {
                worker: worker.into(),
                started_at: 1,
            },
            heartbeat_at: now - ago,
        };
        let overview = Overview {
            now_ms: now,
            ended: Vec::new(),
            processes: vec![beat("h/1", 15_000), beat("h/2", 15_001)],
        };
        let beats = Beats {
            heartbeat_ms: 5_000,
            stale_ms: 60_000,
        };
        let stats = Stats::build(overview, &[], &[], beats);
        let answering: Vec<(&str, bool)> = stats
            .processes
            .iter()
            .map(|p| (p.worker.as_str(), p.answering))
            .collect();
        assert_eq!(answering, [("h/1", true), ("h/2", false)]);
    }

    #[test]
    fn the_windows_hold_the_current_minute_and_the_ones_before_it() {
        let now = 10_000 * MINUTE_MS + 30_000;
        let cases = [
            (10_000, HOUR_MINUTES, true),
            (9_941, HOUR_MINUTES, true),
            (9_940, HOUR_MINUTES, false),
            (10_001, HOUR_MINUTES, false),
            (10_000 - 1_439, DAY_MINUTES, true),
            (10_000 - 1_440, DAY_MINUTES, false),
        ];
        for (minute, span, inside) in cases {
            assert_eq!(within(minute, now, span), inside, "{minute} in {span}");
        }
    }

    #[test]
    fn ends_are_summed_per_window_and_charted_per_minute() {
        let now = 10_000 * MINUTE_MS + 5;
        let overview = Overview {
            now_ms: now,
            ended: vec![
                ended(10_000, "sync", Status::Done, 2),
                ended(9_999, "pair", Status::Failed, 1),
                ended(9_500, "sync", Status::Cancelled, 4),
                ended(10_000 - 1_440, "sync", Status::Done, 9),
            ],
            processes: Vec::new(),
        };
        let kinds = [Kind::parse("sync").unwrap(), Kind::parse("enrich").unwrap()];
        let beats = Beats {
            heartbeat_ms: 5_000,
            stale_ms: 300_000,
        };
        let stats = Stats::build(overview, &[], &kinds, beats);
        let hour = &stats.finished.last_hour;
        assert_eq!(
            (hour.total, hour.by_outcome.done, hour.by_outcome.failed),
            (3, 2, 1)
        );
        assert_eq!(stats.finished.last_day.total, 7);
        assert_eq!(stats.finished.last_day.by_kind["sync"].cancelled, 4);
        assert_eq!(
            stats.finished.last_day.by_kind["enrich"],
            Outcomes::default()
        );
        assert_eq!(stats.finished.last_day.by_kind["pair"].failed, 1);
        assert_eq!(
            stats.finished.last_hour.by_kind["pipeline"],
            Outcomes::default(),
            "a pipeline's kind is there before any pipeline"
        );
        assert_eq!(stats.active.by_kind["pipeline"].queued, 0);
        assert_eq!(stats.throughput.len(), 60);
        let last = stats.throughput.last().unwrap();
        assert_eq!((last.minute, last.done), (10_000 * MINUTE_MS, 2));
        assert_eq!(stats.throughput[58].failed, 1);
        assert_eq!(stats.stale_after_seconds, 300.0);
        assert_eq!(stats.heartbeat_seconds, 5.0);
        assert_eq!(stats.not_answering_after_seconds, 15.0);
        assert_eq!(stats.queue, QueueFigures::default());
    }
}
