//! A refresh whose step is lost for good ends `failed`, `Lost`, and counts like any job end
//! (its skipped step too, as cancelled):
//! in the process's `catalog_jobs_finished_total` (the recovery sweep that ended it tells
//! the metrics, once, or the start that took its lock over) and in the store's per-minute
//! ends (the overview), on both stores. The step runs on a "ghost" worker that claims it and
//! never renews its lease, as a killed process would; the service's own sweep finds it, or a
//! new start of its kind comes first. The counters are the test process's
//! own (one recorder for every app in it), so these tests take turns.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use catalog_jobs::config::Config;
use catalog_jobs::jobs::store::{JobStore, StoreSettings};
use catalog_jobs::jobs::{Kind, Status};

use crate::both_stores;
use crate::helpers::{self, claim_next, eventually, pipeline_of, scrape, settings, spawn_app_with};
use crate::helpers::{store, tenant, test_config, Backend, Moved, Sample, TestApp};

both_stores!(
    a_refresh_whose_step_ran_out_of_attempts_counts_failed_lost_once_with_its_step,
    a_refresh_whose_one_attempt_was_lost_counts_failed_lost_once,
    a_refresh_whose_lost_step_a_new_start_took_over_counts_failed_lost_once,
);

/// Held through each test: no other in this process ends a refresh `Lost`.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long a lease lives without renewal, and how often the service sweeps for such.
const STALE: Duration = Duration::from_millis(300);
const SWEEP: Duration = Duration::from_millis(50);
/// How long the service gets to count an end it decided.
const COUNTED_WITHIN: Duration = Duration::from_secs(10);

/// Which count, its labels, and how much it should have moved by.
type Delta = Moved<'static>;
type Deltas = Vec<Delta>;

/// The refresh's own end, counted once.
const THE_REFRESH_LOST: Delta = (
    "the refresh",
    &[
        ("kind", "pipeline"),
        ("status", "failed"),
        ("error", "Lost"),
    ],
    1.0,
);

/// The refresh's second step, which never ran: skipped, counted cancelled once.
const ITS_SKIPPED_STEP: Delta = (
    "its skipped step",
    &[("kind", "k2"), ("status", "cancelled")],
    1.0,
);

/// The refresh's end and its skipped step's, counted once each, and `step`'s.
fn the_refresh_its_skipped_step_and(step: Delta) -> Deltas {
    vec![THE_REFRESH_LOST, ITS_SKIPPED_STEP, step]
}

/// A service on its own store whose leases go stale after `STALE`, with `attempts`.
async fn service(b: Backend, attempts: u32) -> (Arc<dyn JobStore>, TestApp) {
    let s = leases(b, attempts);
    let app = serve(s.clone(), attempts, SWEEP).await;
    (s, app)
}

/// A store whose leases go stale after `STALE`, with `attempts`.
fn leases(b: Backend, attempts: u32) -> Arc<dyn JobStore> {
    store(
        b,
        StoreSettings {
            stale_after: STALE,
            max_attempts: attempts,
            ..settings()
        },
    )
}

/// A service on `s` that sweeps for stale leases every `sweep`.
async fn serve(s: Arc<dyn JobStore>, attempts: u32, sweep: Duration) -> TestApp {
    // The service's own setting only has to outlast its sweep interval; the store, which
    // judges leases, keeps `STALE`.
    let config = Config {
        stale_after_seconds: STALE.max(sweep * 2),
        heartbeat_seconds: Some(sweep),
        max_attempts: attempts,
        ..test_config()
    };
    spawn_app_with(config, s).await
}

async fn finished_counts(app: &TestApp) -> Vec<Sample> {
    scrape(&app.get("/metrics").await.text().await.unwrap())
}

/// A ghost claims the refresh's first step (once the queue offers it) and never renews.
async fn ghost_claims(s: &dyn JobStore, attempt: u32) {
    let queued = async || {
        let claim = claim_next(s, "ghost/1").await;
        claim.ok_or_else(|| "the step was never queued again".to_owned())
    };
    assert_eq!(eventually(COUNTED_WITHIN, queued).await.attempt, attempt);
}

/// Checks that the finished counts have moved by `wanted` since `before`, and stay there
/// across further sweeps (counted once).
async fn counted_once(app: &TestApp, before: &[Sample], wanted: &Deltas) {
    let finished = "catalog_jobs_finished_total";
    helpers::counted_once(app, finished, before, wanted, STALE * 2).await;
}

/// The store's ends by kind and outcome (the overview's figures).
async fn ends_by_kind(s: &dyn JobStore) -> BTreeMap<(String, &'static str), u64> {
    let mut sums = BTreeMap::new();
    for e in s.overview().await.unwrap().ended {
        *sums
            .entry((e.kind.to_string(), e.outcome.as_str()))
            .or_default() += e.count;
    }
    sums
}

fn key(kind: &str, status: Status) -> (String, &'static str) {
    (kind.to_owned(), status.as_str())
}

/// Creates a refresh of two steps in `s`; answers its id and its steps' ids.
async fn a_refresh(
    s: &dyn JobStore,
) -> (catalog_jobs::jobs::JobId, Vec<catalog_jobs::jobs::JobId>) {
    refresh_of(s, &tenant(), &["k1", "k2"]).await
}

async fn refresh_of(
    s: &dyn JobStore,
    t: &catalog_jobs::jobs::TenantId,
    kinds: &[&str],
) -> (catalog_jobs::jobs::JobId, Vec<catalog_jobs::jobs::JobId>) {
    let p = pipeline_of(t, kinds);
    let ids = p.steps.iter().map(|(step, _)| step.id).collect();
    let id = p.job.id;
    s.create_pipeline(p).await.unwrap();
    (id, ids)
}

async fn the_refresh_failed_lost_and_its_step_reads_lost(
    s: &dyn JobStore,
    refresh: &catalog_jobs::jobs::JobId,
    step: &catalog_jobs::jobs::JobId,
) {
    let lost = (Status::Failed, Some("Lost".to_owned()));
    assert_eq!(read_status(s, refresh).await, lost);
    assert_eq!(read_status(s, step).await.0, Status::Lost);
}

async fn read_status(s: &dyn JobStore, id: &catalog_jobs::jobs::JobId) -> (Status, Option<String>) {
    let job = s.get(id).await.unwrap().expect("the job exists");
    (job.status, job.error)
}

async fn a_refresh_whose_step_ran_out_of_attempts_counts_failed_lost_once_with_its_step(
    b: Backend,
) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let (s, app) = service(b, 2).await;
    let before = finished_counts(&app).await;
    let (id, steps) = a_refresh(&*s).await;
    ghost_claims(&*s, 1).await;
    ghost_claims(&*s, 2).await;
    let wanted = the_refresh_its_skipped_step_and((
        "its step",
        &[("kind", "k1"), ("status", "failed"), ("error", "Lost")],
        1.0,
    ));
    counted_once(&app, &before, &wanted).await;
    let lost = (Status::Failed, Some("Lost".to_owned()));
    assert_eq!(read_status(&*s, &id).await, lost);
    assert_eq!(read_status(&*s, &steps[0]).await, lost);
    assert_eq!(read_status(&*s, &steps[1]).await.0, Status::Cancelled);
    let ends = BTreeMap::from([
        (key("pipeline", Status::Failed), 1),
        (key("k1", Status::Failed), 1),
        (key("k2", Status::Cancelled), 1),
    ]);
    assert_eq!(ends_by_kind(&*s).await, ends);
}

async fn a_refresh_whose_one_attempt_was_lost_counts_failed_lost_once(b: Backend) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let (s, app) = service(b, 1).await;
    let before = finished_counts(&app).await;
    let (id, steps) = a_refresh(&*s).await;
    ghost_claims(&*s, 1).await;
    let wanted = the_refresh_its_skipped_step_and((
        "its step, which reads lost and has not ended",
        &[("kind", "k1"), ("status", "failed")],
        0.0,
    ));
    counted_once(&app, &before, &wanted).await;
    the_refresh_failed_lost_and_its_step_reads_lost(&*s, &id, &steps[0]).await;
    let ends = BTreeMap::from([
        (key("pipeline", Status::Failed), 1),
        (key("k2", Status::Cancelled), 1),
    ]);
    assert_eq!(ends_by_kind(&*s).await, ends);
}

/// With one attempt, a step whose worker vanished reads `lost`; a new start of its kind that
/// comes before any sweep takes its lock over and ends the refresh in that same store step.
/// No run and no sweep sees that end: the start that made it counts it (and the skipped
/// step), once. The ghost claims the step before the service exists (its kind is one the
/// service runs), and the service's sweep is an hour away, so only the start can count.
async fn a_refresh_whose_lost_step_a_new_start_took_over_counts_failed_lost_once(b: Backend) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let s = leases(b, 1);
    let t = tenant();
    let (id, steps) = refresh_of(&*s, &t, &["ticker", "k2"]).await;
    let ticker = [Kind::parse("ticker").unwrap()];
    let ghost = s.claim("ghost/1", &ticker).await.unwrap();
    assert_eq!(
        ghost.map(|c| c.job.id),
        Some(steps[0]),
        "the ghost runs the step"
    );
    let app = serve(s.clone(), 1, Duration::from_secs(3600)).await;
    let before = finished_counts(&app).await;
    tokio::time::sleep(STALE * 2).await;
    let form = [("tenant_id", t.as_str()), ("n", "1")];
    let started = app.start("ticker", &form).await;
    assert_eq!(
        started.status(),
        202,
        "the new start takes the stale lock over"
    );
    let wanted = the_refresh_its_skipped_step_and((
        "its step, which the new start took over: ended failed/Lost",
        &[("kind", "ticker"), ("status", "failed"), ("error", "Lost")],
        0.0,
    ));
    counted_once(&app, &before, &wanted).await;
    // Taken over, the step is ended, and reads as it is counted (since 98b482c; it read
    // `lost` for ever before).
    let lost = (Status::Failed, Some("Lost".to_owned()));
    assert_eq!(read_status(&*s, &id).await, lost);
    assert_eq!(read_status(&*s, &steps[0]).await, lost);
}
