//! A cancelled refresh counts each of its ends once in the process's
//! `catalog_jobs_finished_total`: its own, its sync's, and each skipped step's (as
//! cancelled: no run ends a step that never ran), whether it ended when its running sync
//! stopped or at once because none of it had started. Through the real binary.

use std::time::Duration;

use crate::helpers::{self, metrics_text, scrape, service_reading_held_feeds, Moved, Sample};
use crate::helpers::{started_id, tenant, HeldFeeds, Service};

/// How long the counts must then stay where they are.
const STAYS_FOR: Duration = Duration::from_secs(1);

/// Every kind of a refresh, each ended cancelled once.
const ALL_CANCELLED: [&str; 4] = ["pipeline", "sync", "enrich", "pair"];

#[tokio::test]
async fn a_refresh_cancelled_during_its_sync_counts_itself_its_sync_and_its_skipped_steps_once() {
    let (feeds, svc) = service_reading_held_feeds().await;
    let before = scrape(&metrics_text(&svc).await);
    let id = refresh(&svc, &feeds.url("cancelled")).await;
    svc.poll(&id, "syncing", |p| p["steps"][0]["status"] == "running")
        .await;
    assert_eq!(svc.cancel(&id).await.status(), 202);
    svc.wait_for_status(&id, "cancelled").await;
    counted_once(&svc, &before).await;
    feeds.release("cancelled");
}

#[tokio::test]
async fn a_refresh_cancelled_before_any_step_started_counts_itself_and_its_three_skipped_steps_once(
) {
    let feeds = HeldFeeds::start().await;
    let svc = Service::embedded()
        .env("MAX_CONCURRENT_JOBS", "1")
        .reading(&feeds)
        .start()
        .await;
    // Another tenant's sync holds the one worker: the refresh's sync waits in the queue.
    let busy = svc.start_sync(tenant().as_str(), &feeds.url("busy")).await;
    svc.wait_for_status(&busy, "running").await;
    let id = refresh(&svc, "demo.jsonl").await;
    let before = scrape(&metrics_text(&svc).await);
    assert_eq!(svc.get_job(&id).await["status"], "queued");
    assert_eq!(svc.cancel(&id).await.status(), 202);
    let ended = svc.get_job(&id).await;
    assert_eq!(ended["status"], "cancelled", "it ended at once: {ended}");
    counted_once(&svc, &before).await;
    feeds.release("busy");
    svc.wait_for_status(&busy, "done").await;
}

/// Starts a refresh of a new tenant from `source`; answers its id.
async fn refresh(svc: &Service, source: &str) -> String {
    let t = tenant();
    let form = [("tenant_id", t.as_str()), ("source", source)];
    started_id(svc.post_form("/catalog/pipeline", &form).await).await
}

/// Checks that each kind of [`ALL_CANCELLED`] has one more cancelled end than in `before`,
/// counted once.
async fn counted_once(svc: &Service, before: &[Sample]) {
    let labels = ALL_CANCELLED.map(|kind| [("kind", kind), ("status", "cancelled")]);
    let wanted: Vec<Moved> = (0..ALL_CANCELLED.len())
        .map(|k| (ALL_CANCELLED[k], &labels[k][..], 1.0))
        .collect();
    let finished = "catalog_jobs_finished_total";
    helpers::counted_once(svc, finished, before, &wanted, STAYS_FOR).await;
}
