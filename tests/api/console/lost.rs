//! Jobs that read `lost` (running, their lease stale, no attempt left: no run holds them)
//! through the real server, on both stores: a tenant's bulk cancel picks them and ends them
//! `cancelled` at once, as the single cancel does. The lost run is a "ghost" worker's claim
//! that is never renewed, as a killed process's would be.

use std::sync::Arc;
use std::time::Duration;

use catalog_jobs::jobs::store::{JobStore, StoreSettings};
use serde_json::{json, Value};

use crate::both_stores;
use crate::helpers::{
    create, eventually, made_by, new_job, settings, spawn_app_with, store, tenant, test_config,
    Backend, TestApp,
};

both_stores!(a_tenant_s_bulk_cancel_ends_its_lost_job_cancelled_and_counts_it,);

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
