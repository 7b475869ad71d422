//! Jobs that read `lost` (running, their lease stale, no attempt left: no run holds them)
//! through the real server, on both stores: a tenant's bulk cancel picks them and ends them
//! `cancelled` at once, as the single cancel does; either cancel counts the end in
//! `catalog_jobs_finished_total` (no runner and no sweep does). The lost run is a "ghost" worker's claim
//! that is never renewed, as a killed process's would be.

use std::sync::Arc;
use std::time::Duration;

use catalog_jobs::jobs::store::{JobStore, StoreSettings};
use serde_json::{json, Value};

use crate::both_stores;
use crate::helpers::{
    counted_once, create, eventually, made_by, new_job, settings, spawn_app_with, store, tenant,
    test_config, Backend, TestApp,
};
use crate::helpers::{metrics_text, scrape};

both_stores!(
    a_tenant_s_bulk_cancel_ends_its_lost_job_cancelled_and_counts_it,
    a_lost_job_ended_by_a_cancel_is_counted_finished_cancelled_once,
);

/// How long a lease lives without renewal.
const STALE: Duration = Duration::from_millis(300);
/// How long a ghost's job gets to read `lost` (a loaded 2-core machine).
const PATIENCE: Duration = Duration::from_secs(20);

/// A service on its own store, one attempt a job, leases stale after [`STALE`].
async fn service(b: Backend) -> (Arc<dyn JobStore>, TestApp) {
    let s = store(
        b,
        StoreSettings {
            stale_after: STALE,
            max_attempts: 1,
            ..settings()
        },
    );
    let config = catalog_jobs::config::Config {
        max_attempts: 1,
        ..test_config()
    };
    (s.clone(), spawn_app_with(config, s).await)
}

/// A job of `kind` for `t` that a ghost claimed at its create and never renews, once it
/// reads `lost`: its id.
async fn lost_job(
    s: &dyn JobStore,
    app: &TestApp,
    t: &catalog_jobs::jobs::TenantId,
    kind: &str,
) -> String {
    let job = new_job(t, kind);
    made_by(s.create_claimed(job.clone(), "ghost/1").await);
    let id = job.id.to_string();
    let reads_lost = async || match app.get_job(&id).await {
        j if j["status"] == "lost" => Ok(()),
        j => Err(format!("not lost yet: {j}")),
    };
    eventually(PATIENCE, reads_lost).await;
    id
}

async fn bulk_cancel(app: &TestApp, body: &Value) -> Value {
    let r = app
        .client
        .post(app.url("/catalog/bulk/cancel"))
        .json(body)
        .send()
        .await
        .expect("the service answers");
    assert_eq!(r.status(), 200);
    r.json().await.expect("a JSON answer")
}

/// A tenant's bulk cancel once matched none of its `lost` jobs (it picked queued and
/// running ones only), so they stayed: now it ends them `cancelled` at once and counts them.
async fn a_tenant_s_bulk_cancel_ends_its_lost_job_cancelled_and_counts_it(b: Backend) {
    let (s, app) = service(b).await;
    let t = tenant();
    let lost = lost_job(&*s, &app, &t, "lostbulk1").await;
    let queued = create(&*s, &new_job(&t, "lostbulk2"))
        .await
        .job_id
        .to_string();
    let dry = bulk_cancel(&app, &json!({"tenant_id": t, "dry_run": true})).await;
    assert_eq!(dry["matched"], 2, "{dry}");
    let answer = bulk_cancel(&app, &json!({"tenant_id": t})).await;
    assert_eq!(
        (&answer["matched"], &answer["done"], &answer["skipped"]),
        (&json!(2), &json!(2), &json!(0)),
        "{answer}"
    );
    let outcomes: Vec<(&str, &str)> = answer["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            (
                r["job_id"].as_str().unwrap(),
                r["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [(queued.as_str(), "cancelled"), (lost.as_str(), "cancelled")],
        "newest first, each ended at once"
    );
    for id in [&lost, &queued] {
        assert_eq!(app.get_job(id).await["status"], "cancelled", "{id}");
    }
    let again = bulk_cancel(&app, &json!({"tenant_id": t})).await;
    assert_eq!(again["matched"], 0, "nothing left to cancel: {again}");
    // Its tenant's kind is free again.
    create(&*s, &new_job(&t, "lostbulk1")).await;
}

/// A `lost` job ended by the cancel route (or a bulk cancel) was counted by no one: the
/// sweep that left it lost counts no end, no runner holds it, and the cancel counted only a
/// job that was queued. Each is counted `cancelled` once. The kinds are this test's and
/// backend's own, so the process's other tests move none of these counts.
async fn a_lost_job_ended_by_a_cancel_is_counted_finished_cancelled_once(b: Backend) {
    let (s, app) = service(b).await;
    let t = tenant();
    let (one, many) = match b {
        Backend::Memory => ("lostonem", "lostbulkm"),
        Backend::Redis => ("lostoner", "lostbulkr"),
    };
    let by_route = lost_job(&*s, &app, &t, one).await;
    let by_bulk = lost_job(&*s, &app, &t, many).await;
    let before = scrape(&metrics_text(&app).await);
    let r = app.cancel(&by_route).await;
    assert_eq!(r.status(), 202);
    let cancelled: Value = r.json().await.expect("the job");
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    let answer = bulk_cancel(&app, &json!({"job_ids": [by_bulk]})).await;
    assert_eq!(answer["results"][0]["outcome"], "cancelled", "{answer}");
    let wanted = [
        (
            "the route's",
            &[("kind", one), ("status", "cancelled")][..],
            1.0,
        ),
        (
            "the bulk call's",
            &[("kind", many), ("status", "cancelled")][..],
            1.0,
        ),
    ];
    counted_once(
        &app,
        "catalog_jobs_finished_total",
        &before,
        &wanted,
        STALE * 2,
    )
    .await;
}
