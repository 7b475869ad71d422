//! Prometheus metrics: the recorder, every metric name in one list, and one function per
//! thing worth counting, so call sites elsewhere stay one line.
//!
//! Labels are bounded sets (job kind, status, error class, store operation, route template,
//! method, status code, refusal reason): never a tenant id, a job id or a raw path. Values
//! are per process; aggregate replicas in PromQL (`sum by (kind) (rate(...))`).

pub mod store;

use std::collections::HashMap;
use std::sync::{LazyLock, OnceLock, RwLock};
use std::time::Duration;

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter,
    Gauge, Histogram,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::jobs::keys::NameHash;
use crate::jobs::run::RunObserver;
use crate::jobs::store::Outcome;
use crate::jobs::Kind;

pub const JOBS_CREATED: &str = "catalog_jobs_created_total";
pub const JOBS_FINISHED: &str = "catalog_jobs_finished_total";
pub const JOB_DURATION: &str = "catalog_job_duration_seconds";
pub const JOB_QUEUE_WAIT: &str = "catalog_job_queue_wait_seconds";
pub const JOBS_RUNNING: &str = "catalog_jobs_running";
pub const JOBS_QUEUED: &str = "catalog_jobs_queued";
pub const PROGRESS_WRITES: &str = "catalog_job_progress_writes_total";
pub const STORE_ERRORS: &str = "catalog_store_errors_total";
pub const STORE_LATENCY: &str = "catalog_store_latency_seconds";
pub const HTTP_REQUESTS: &str = "catalog_http_requests_total";
pub const HTTP_DURATION: &str = "catalog_http_request_duration_seconds";
pub const JOBS_REFUSED: &str = "catalog_jobs_refused_total";

pub enum Type {
    Counter,
    Gauge,
    Histogram,
}

/// Every metric this service exports, with its help text: the list in docs/operations.md and the
/// `# HELP` lines both come from here.
pub const ALL: &[(&str, Type, &str)] = &[
    (JOBS_CREATED, Type::Counter, "Jobs created, by kind."),
    (JOBS_FINISHED, Type::Counter, "Jobs ended, by kind and status (done, failed, cancelled: a pipeline's steps that never ran count as cancelled with it); failed jobs carry their error class (`Lost`: out of attempts, counted by the process whose recovery sweep ended it)."),
    (JOB_DURATION, Type::Histogram, "Seconds a job ran, from its start on a worker to its end, by kind."),
    (JOB_QUEUE_WAIT, Type::Histogram, "Seconds a job waited in the shared queue, from its creation to its claim by this process (store clock to this host's clock), by kind."),
    (JOBS_RUNNING, Type::Gauge, "Jobs running on a worker in this process, by kind."),
    (JOBS_QUEUED, Type::Gauge, "Jobs waiting in the shared queue (all replicas), counted by the store at each scrape, by kind."),
    (PROGRESS_WRITES, Type::Counter, "Progress writes sent to the job store (coalesced ticks)."),
    (STORE_ERRORS, Type::Counter, "Job store operations that failed (store unreachable), by operation."),
    (STORE_LATENCY, Type::Histogram, "Seconds a job store operation took, by operation."),
    (HTTP_REQUESTS, Type::Counter, "HTTP requests answered, by route template, method and status."),
    (HTTP_DURATION, Type::Histogram, "Seconds to answer an HTTP request (headers sent), by route template."),
    (JOBS_REFUSED, Type::Counter, "Job starts refused, by reason (already_running, overloaded, shutting_down)."),
];

/// Histogram buckets in seconds: from a 0.5 ms Redis round trip to a 10-minute job. Fixed
/// buckets (not summaries) so replicas can be summed and quantiles taken over the sum.
const SECONDS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0, 600.0,
];

/// How often histograms are drained into their buckets (the exporter's upkeep). Rendering
/// also drains, so this only bounds memory between scrapes.
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The route label of a request no route matched (a 404 fallback): one value, whatever
/// path was asked for.
pub const UNMATCHED_ROUTE: &str = "unmatched";

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process's recorder, installed on first use (the facade has one global recorder; a
/// test process building several apps shares it).
pub fn handle() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
            .expect("the bucket list is not empty")
            .build_recorder();
        let handle = recorder.handle();
        // Another recorder can only be installed by code outside this module; then our
        // handle renders nothing, which the metrics tests would show.
        let _ = metrics::set_global_recorder(recorder);
        describe();
        handle
    })
}

fn describe() {
    for (name, kind, help) in ALL {
        match kind {
            Type::Counter => describe_counter!(*name, *help),
            Type::Gauge => describe_gauge!(*name, *help),
            Type::Histogram => describe_histogram!(*name, *help),
        }
    }
}

/// The Prometheus text exposition of every metric.
pub fn render() -> String {
    handle().render()
}

/// Drains histograms now and then; runs until the process ends.
pub async fn upkeep() {
    let mut tick = tokio::time::interval(UPKEEP_INTERVAL);
    loop {
        tick.tick().await;
        handle().run_upkeep();
    }
}

pub fn job_created(kind: &str) {
    COUNTERS
        .by(
            JOBS_CREATED,
            kind,
            || counter!(JOBS_CREATED, "kind" => kind.to_owned()),
        )
        .increment(1);
}

/// A job start refused before anything was created: `already_running`, `overloaded` or
/// `shutting_down`.
pub fn job_refused(reason: &'static str) {
    counter!(JOBS_REFUSED, "reason" => reason).increment(1);
}

pub fn progress_written() {
    counter!(PROGRESS_WRITES).increment(1);
}

/// A job ended. A failed one carries its error class as `error` (a bounded set of names
/// from the code, never a message).
pub fn job_finished(kind: &str, outcome: &Outcome) {
    let status = outcome.status().as_str();
    match outcome {
        Outcome::Failed(class, _) => counter!(JOBS_FINISHED, "kind" => kind.to_owned(), "status" => status, "error" => class.clone()).increment(1),
        _ => FINISHED
            .by(
                status,
                kind,
                || counter!(JOBS_FINISHED, "kind" => kind.to_owned(), "status" => status),
            )
            .increment(1),
    }
}

/// The jobs of `kind` waiting in the shared queue, as the store counted them at a scrape.
pub fn queue_depth(kind: &str, waiting: u64) {
    gauge!(JOBS_QUEUED, "kind" => kind.to_owned()).set(waiting as f64);
}

/// The runner's observer: the queue wait, the jobs running, how long each ran and how it
/// ended, by kind.
pub struct RunMetrics;

impl RunObserver for RunMetrics {
    fn created(&self, kind: &Kind) {
        job_created(kind.as_str());
    }

    fn started(&self, kind: &Kind, waited: Duration) {
        let kind = kind.as_str();
        HISTOGRAMS
            .by(
                JOB_QUEUE_WAIT,
                kind,
                || histogram!(JOB_QUEUE_WAIT, "kind" => kind.to_owned()),
            )
            .record(waited);
        running(kind).increment(1.0);
    }

    fn stopped(&self, kind: &Kind, ran: Duration) {
        let kind = kind.as_str();
        running(kind).decrement(1.0);
        HISTOGRAMS
            .by(
                JOB_DURATION,
                kind,
                || histogram!(JOB_DURATION, "kind" => kind.to_owned()),
            )
            .record(ran);
    }

    fn finished(&self, kind: &Kind, outcome: &Outcome) {
        job_finished(kind.as_str(), outcome);
    }
}

/// The jobs of `kind` running here.
fn running(kind: &str) -> Gauge {
    GAUGES.by(
        JOBS_RUNNING,
        kind,
        || gauge!(JOBS_RUNNING, "kind" => kind.to_owned()),
    )
}

/// Handles of metrics with one label, kept once made, by metric name and then the label's
/// value (a kind, a store operation: bounded sets). The recorder's own lookup, which the
/// macros make at every call, builds the labels (a `String` and a `Vec`) and hashes them; a
/// job made ~10 of them (docs/performance.md, "The service's own CPU").
struct Kept<H>(LazyLock<RwLock<HashMap<&'static str, ByValue<H>, NameHash>>>);

/// One metric's handles by label value.
type ByValue<H> = HashMap<String, H, NameHash>;

static COUNTERS: Kept<Counter> = Kept(LazyLock::new(Default::default));
static GAUGES: Kept<Gauge> = Kept(LazyLock::new(Default::default));
static HISTOGRAMS: Kept<Histogram> = Kept(LazyLock::new(Default::default));
/// The finished-jobs counters of a done or cancelled job, by status and then kind (a failed
/// job's carry its error class too, and are looked up each time).
static FINISHED: Kept<Counter> = Kept(LazyLock::new(Default::default));

impl<H: Clone> Kept<H> {
    /// The handle of metric `name` (or of `FINISHED`'s status) with label value `value`, made
    /// by `make` the first time.
    /// Until the recorder is installed a handle would count nowhere for ever: none is kept.
    fn by(&self, name: &'static str, value: &str, make: impl FnOnce() -> H) -> H {
        if HANDLE.get().is_none() {
            return make();
        }
        // A panic while the lock was held left whole entries only: a poisoned map is consistent.
        let kept = self.0.read().unwrap_or_else(|p| p.into_inner());
        if let Some(handle) = kept.get(name).and_then(|by_value| by_value.get(value)) {
            return handle.clone();
        }
        drop(kept);
        let mut kept = self.0.write().unwrap_or_else(|p| p.into_inner());
        kept.entry(name)
            .or_default()
            .entry(value.to_owned())
            .or_insert_with(make)
            .clone()
    }
}

/// A store operation answered (or failed) after `elapsed`.
pub fn store_op(op: &'static str, elapsed: Duration, failed: bool) {
    HISTOGRAMS
        .by(STORE_LATENCY, op, || histogram!(STORE_LATENCY, "op" => op))
        .record(elapsed);
    if failed {
        counter!(STORE_ERRORS, "op" => op).increment(1);
    }
}

/// Methods beyond these are counted as `OTHER`, so a client cannot grow the label set.
const KNOWN_METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// An HTTP request answered: `route` is the matched template (or [`UNMATCHED_ROUTE`]).
pub fn http_request(route: &str, method: &str, status: u16, elapsed: Duration) {
    let method = KNOWN_METHODS
        .iter()
        .find(|known| **known == method)
        .copied()
        .unwrap_or("OTHER");
    // Until the recorder is installed a handle would count nowhere for ever: not kept.
    if HANDLE.get().is_none() {
        counter!(HTTP_REQUESTS, "route" => route.to_owned(), "method" => method, "status" => status.to_string())
            .increment(1);
        histogram!(HTTP_DURATION, "route" => route.to_owned()).record(elapsed);
        return;
    }
    let (count, duration) = http_handles(route, method, status);
    count.increment(1);
    duration.record(elapsed);
}

/// The handles of one route's HTTP metrics: its duration, and its count by method and status
/// (a handful each: a short list beats a second map).
struct RouteHandles {
    duration: Histogram,
    counts: Vec<(&'static str, u16, Counter)>,
}

/// Every route's handles, kept once made. The recorder's own lookup builds the labels (three
/// `String`s and their `Vec`) and hashes them at every request: 1.3 % of a poll's CPU in the
/// profile (docs/performance.md, "The service's own CPU"). Routes, methods and statuses are
/// bounded sets (see the module's doc), so this holds a few hundred handles at most.
static HTTP_HANDLES: LazyLock<RwLock<HashMap<String, RouteHandles, NameHash>>> =
    LazyLock::new(Default::default);

/// The counter of `route`, `method` and `status`, and `route`'s histogram: read under the
/// shared lock, made (by the recorder, as the macros would) under the exclusive one the first time.
fn http_handles(route: &str, method: &'static str, status: u16) -> (Counter, Histogram) {
    let found = |routes: &HashMap<String, RouteHandles, NameHash>| {
        let handles = routes.get(route)?;
        let (_, _, count) = handles
            .counts
            .iter()
            .find(|(m, s, _)| *m == method && *s == status)?;
        Some((count.clone(), handles.duration.clone()))
    };
    // A panic while the lock was held left whole entries only: a poisoned map is consistent.
    if let Some(kept) = found(&HTTP_HANDLES.read().unwrap_or_else(|p| p.into_inner())) {
        return kept;
    }
    let mut routes = HTTP_HANDLES.write().unwrap_or_else(|p| p.into_inner());
    let handles = routes
        .entry(route.to_owned())
        .or_insert_with(|| RouteHandles {
            duration: histogram!(HTTP_DURATION, "route" => route.to_owned()),
            counts: Vec::new(),
        });
    let same = |(m, s, _): &&(&'static str, u16, Counter)| *m == method && *s == status;
    let count = match handles.counts.iter().find(same) {
        Some((_, _, count)) => count.clone(),
        None => {
            let count = counter!(HTTP_REQUESTS, "route" => route.to_owned(), "method" => method, "status" => status.to_string());
            handles.counts.push((method, status, count.clone()));
            count
        }
    };
    (count, handles.duration.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample of `metric` whose labels are exactly `labels`, as rendered.
    fn sample(metric: &str, labels: &str) -> Option<f64> {
        let head = format!("{metric}{{{labels}}} ");
        render()
            .lines()
            .find_map(|line| line.strip_prefix(&head)?.parse().ok())
    }

    #[test]
    fn kept_handles_count_each_route_method_and_status_and_each_kind_apart() {
        handle();
        let route = "/kept/handles";
        for (method, status) in [("GET", 200), ("GET", 200), ("GET", 404), ("POST", 200)] {
            http_request(route, method, status, Duration::from_millis(1));
        }
        http_request(route, "BREW", 200, Duration::from_millis(1));
        let count = |method: &str, status: u16| {
            let labels = format!(r#"route="{route}",method="{method}",status="{status}""#);
            sample(HTTP_REQUESTS, &labels)
        };
        assert_eq!(count("GET", 200), Some(2.0));
        assert_eq!(count("GET", 404), Some(1.0));
        assert_eq!(count("POST", 200), Some(1.0));
        assert_eq!(count("OTHER", 200), Some(1.0));
        let requests = format!(r#"route="{route}""#);
        assert_eq!(
            sample(&format!("{HTTP_DURATION}_count"), &requests),
            Some(4.0 + 1.0)
        );
        job_created("kept-a");
        job_created("kept-a");
        job_created("kept-b");
        assert_eq!(sample(JOBS_CREATED, r#"kind="kept-a""#), Some(2.0));
        assert_eq!(sample(JOBS_CREATED, r#"kind="kept-b""#), Some(1.0));
    }
}
