//! A delete is final, proven with real processes and real HTTP: a paused replica that comes
//! back after its tenant was deleted brings nothing back (products, job record), whether
//! its job was re-run elsewhere, cancelled or left lost; an import streaming into a tenant being
//! deleted stops and says what it saved before.

use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::both_stores;
use crate::helpers::{
    eventually, running, spawn_catalog_app, tenant, test_config, Api, Backend, HeldFeeds,
    RedisServer, Service,
};

both_stores!(an_import_streaming_into_a_tenant_being_deleted_stops_and_says_what_it_saved);

/// What happens to the paused replica's job while it is stopped.
#[derive(Clone, Copy, Debug)]
enum WhileStopped {
    /// The other replica runs it again (attempt 2) to `done`.
    RunAgain,
    /// It is cancelled; recovery ends it `cancelled`.
    Cancelled,
    /// With one attempt (MAX_ATTEMPTS=1), it is left `lost`: the delete goes through without
    /// a cancel first.
    LeftLost,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_replica_brings_nothing_back_of_a_tenant_deleted_after_a_rerun() {
    a_paused_replica_brings_nothing_back(WhileStopped::RunAgain).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_replica_brings_nothing_back_of_a_tenant_deleted_after_a_cancel() {
    a_paused_replica_brings_nothing_back(WhileStopped::Cancelled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_replica_brings_nothing_back_of_a_tenant_deleted_while_its_job_reads_lost() {
    a_paused_replica_brings_nothing_back(WhileStopped::LeftLost).await;
}

/// Replica A runs a sync of a held feed; A is paused (SIGSTOP); the job ends without it
/// (`case`); the tenant is deleted; A resumes (SIGCONT), reads its feed and tries to write
/// its rows and its end. Nothing of the tenant may exist afterwards.
async fn a_paused_replica_brings_nothing_back(case: WhileStopped) {
    let redis = RedisServer::start(false);
    let feeds = HeldFeeds::start().await;
    let attempts = match case {
        WhileStopped::LeftLost => "1",
        WhileStopped::RunAgain | WhileStopped::Cancelled => "3",
    };
    let launch = Service::on(&redis)
        .reading(&feeds)
        .env("MAX_ATTEMPTS", attempts);
    let a = launch.clone().start().await;
    let t = tenant();
    let feed = format!("paused-{t}");
    let id = a.start_held_sync(&feeds, &t, &feed).await;
    // Started once A runs the job: B cannot have claimed it first.
    let b = launch.start().await;
    a.signal("STOP");
    match case {
        WhileStopped::RunAgain => {
            b.poll(&id, "run again on B", |j| j["attempt"] == 2 && running(j))
                .await;
            feeds.release(&feed);
        }
        WhileStopped::Cancelled => {
            assert_eq!(b.cancel(&id).await.status(), 202);
        }
        WhileStopped::LeftLost => {}
    }
    let ended = b
        .poll(&id, "ended or lost", |j| {
            matches!(j["status"].as_str(), Some("done" | "cancelled" | "lost"))
        })
        .await;
    let deleted = delete(&b, t.as_str()).await;
    assert_eq!(deleted.0, 200, "{case:?}: {}", deleted.1);

    a.signal("CONT");
    feeds.release(&feed);
    // A's run learns it may not write (its batch, its end or its heartbeat's write-back is
    // refused) and ends without recording anything.
    a.wait_for_log("end is not recorded", Duration::from_secs(20))
        .await;
    assert_eq!(b.job(&id).await.status(), 404, "{case:?}: was {ended}");
    assert!(b.job_ids(&format!("tenant_id={t}")).await.is_empty());
    assert_eq!(products(&b, t.as_str()).await, 0, "{case:?}");
    // The tenant works as new afterwards.
    let fresh = b.start_sync(t.as_str(), "sample.csv").await;
    let done = b.poll(&fresh, "done", |j| j["status"] == "done").await;
    let created = done["result"]["totals"]["created"].as_u64().unwrap() as usize;
    assert_eq!(products(&b, t.as_str()).await, created, "{done}");
    assert!(created > 0);
}

async fn delete(api: &Api, tenant: &str) -> (u16, Value) {
    let r = api.delete_tenant(tenant).await;
    (r.status().as_u16(), r.json().await.unwrap())
}

/// How many products the tenant's first page shows (at most 500).
async fn products(api: &Api, tenant: &str) -> usize {
    let page = api
        .get_json(&format!("/catalog/products?tenant_id={tenant}&limit=500"))
        .await;
    page["products"]
        .as_array()
        .expect("a page of products")
        .len()
}

fn rows(from: usize, to: usize) -> String {
    (from..to)
        .map(|i| format!("{{\"product_key\":\"r{i}\",\"name\":\"Streamed Mug {i} Navy\"}}\n"))
        .collect()
}

/// 20,000 rows streamed in chunks: the first half, then a delete once some are saved, then
/// the rest. The import stops at its next batch: 409 `tenant_deleted`, with the rows it had
/// saved; nothing of the tenant is left, and a new import afterwards works.
async fn an_import_streaming_into_a_tenant_being_deleted_stops_and_says_what_it_saved(b: Backend) {
    let app = spawn_catalog_app(b, test_config()).await;
    let t = tenant();
    let (tx, rx) = mpsc::channel::<Result<String, std::io::Error>>(4);
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    let import = tokio::spawn(
        app.client
            .post(app.url(&format!("/catalog/products?tenant_id={t}")))
            .header("content-type", "application/x-ndjson")
            .body(reqwest::Body::wrap_stream(body))
            .send(),
    );
    for start in (0..10_000).step_by(1000) {
        tx.send(Ok(rows(start, start + 1000))).await.unwrap();
    }
    // Saved batches are the signal that the import is under way.
    let saves = async || match products(&app, t.as_str()).await {
        0 => Err("the import never saved a batch".to_owned()),
        _ => Ok(()),
    };
    eventually(Duration::from_secs(20), saves).await;
    let (status, removed) = delete(&app, t.as_str()).await;
    assert_eq!(status, 200, "{removed}");
    // The rest of the body: the import stops at its next batch, so a send may find it gone.
    for start in (10_000..20_000).step_by(1000) {
        if tx.send(Ok(rows(start, start + 1000))).await.is_err() {
            break;
        }
    }
    drop(tx);
    let answer = import.await.unwrap().unwrap();
    assert_eq!(answer.status(), 409);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"], "tenant_deleted", "{body}");
    let saved = body["report"]["created"].as_u64().expect("a report");
    let removed = removed["products"].as_u64().unwrap();
    assert!(
        saved >= removed && removed > 0 && saved <= 10_000,
        "it saved {saved} before the delete, which removed {removed}: {body}"
    );
    assert_eq!(products(&app, t.as_str()).await, 0, "nothing came back");

    let again = app
        .client
        .post(app.url(&format!("/catalog/products?tenant_id={t}")))
        .header("content-type", "application/x-ndjson")
        .body(rows(0, 300))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200, "an import after the delete works");
    assert_eq!(products(&app, t.as_str()).await, 300);
}
