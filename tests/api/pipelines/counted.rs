//! A cancelled refresh counts each of its ends once in the process's
//! `catalog_jobs_finished_total`: its own, its sync's, and each skipped step's (as
//! cancelled: no run ends a step that never ran), whether it ended when its running sync
//! stopped or at once because none of it had started. Through the real binary.

use std::time::{Duration, Instant};

use crate::helpers::{metrics_text, scrape, service_reading_held_feeds, value, Sample};
use crate::helpers::{started_id, tenant, HeldFeeds, Service};

/// How long the service gets to count the ends it decided.
const COUNTED_WITHIN: Duration = Duration::from_secs(10);
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

/// Waits for each kind of [`ALL_CANCELLED`] to have one more cancelled end than in `before`,
/// then checks the counts stay there.
async fn counted_once(svc: &Service, before: &[Sample]) {
    let moved = |after: &[Sample]| -> Vec<f64> {
        ALL_CANCELLED
            .iter()
            .map(|kind| {
                let labels = [("kind", *kind), ("status", "cancelled")];
                value(after, "catalog_jobs_finished_total", &labels)
                    - value(before, "catalog_jobs_finished_total", &labels)
            })
            .collect()
    };
    let once = vec![1.0; ALL_CANCELLED.len()];
    let deadline = Instant::now() + COUNTED_WITHIN;
    loop {
        let seen = moved(&scrape(&metrics_text(svc).await));
        if seen == once || Instant::now() > deadline {
            assert_eq!(seen, once, "cancelled ends of {ALL_CANCELLED:?}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(STAYS_FOR).await;
    let seen = moved(&scrape(&metrics_text(svc).await));
    assert_eq!(seen, once, "counted once: {ALL_CANCELLED:?}");
}
