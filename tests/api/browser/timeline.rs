//! A job's timeline on the admin page in a real browser: a run lost and queued again reads
//! which attempt was lost and which comes next.

use std::time::Duration;

use catalog_jobs::jobs::store::{JobStore, StoreSettings};
use catalog_jobs::jobs::{JobId, TenantId};
use serde_json::json;

use super::{use_identity, DESKTOP};
use crate::helpers::webdriver::Browser;
use crate::helpers::{
    new_job, settings, spawn_app_with, start, store, test_config, unique, Backend,
};

/// How long a run may go silent before the recovery sweep takes it back, here.
const STALE_MS: u64 = 300;

/// Sweeps until the job's first run is taken back (the app's own sweep may do it first).
async fn lose_its_run(s: &dyn JobStore, id: &JobId) {
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(STALE_MS)).await;
        s.recover().await.expect("the store answers");
        let events = s.timeline(id, None).await.expect("the store answers");
        if events.iter().any(|e| e.kind == "requeued") {
            return;
        }
    }
    panic!("the run was never taken back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_run_reads_the_attempt_it_lost_and_the_next_one_started() {
    let s = store(
        Backend::Redis,
        StoreSettings {
            stale_after: Duration::from_millis(STALE_MS),
            max_attempts: 3,
            ..settings()
        },
    );
    let app = spawn_app_with(test_config(), s.clone()).await;
    let tenant = unique("lost");
    let job = new_job(&TenantId::parse(&tenant).unwrap(), "k1");
    start(&*s, &job).await;
    // Queued again, the job stays so: this app runs no `k1`, and a queued job is not swept.
    lose_its_run(&*s, &job.id).await;

    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    b.goto(&app.url("/admin")).await;
    use_identity(&b, &tenant, "").await;
    b.goto(&app.url(&format!("/admin#job={}", job.id))).await;
    let lines = b
        .wait_for(
            "the timeline with its requeued line",
            "const l = [...document.querySelectorAll('[data-testid=timeline-line]')]
               .map((l) => [l.dataset.type, l.querySelector('span').textContent]);
             return l.some(([t]) => t === 'requeued') && l;",
            json!([]),
        )
        .await;
    let read: Vec<(String, String)> = serde_json::from_value(lines).expect("pairs");
    let texts: Vec<&str> = read.iter().map(|(_, text)| text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "created",
            "started (attempt 1 on test/1)",
            "its run (attempt 1) was lost; queued again for attempt 2",
        ],
        "{read:?}"
    );
}
