//! The overview: on both stores, every end is counted once in its minute by kind and outcome
//! (whoever ended it: a finish, a cancel while queued, recovery), a heartbeat registers its
//! process and a stale or departed one drops out; and through the app, `GET /catalog/stats`
//! agrees with what the jobs API says after a mix of done, failed and cancelled jobs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use catalog_jobs::config::tokens::hash_token;
use catalog_jobs::jobs::stats::Overview;
use catalog_jobs::jobs::store::{JobStore, Outcome, StoreSettings};
use catalog_jobs::jobs::{worker_name, Status, TenantId};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::both_stores;
use crate::helpers::{create, finish, new_job, settings, start, store, tenant, Backend};
use crate::helpers::{metrics_text, scrape, value, HeldFeeds, RedisServer, Service};
use crate::helpers::{spawn_app, spawn_app_with, test_config, test_kinds, Gate, TestApp};

both_stores!(
    every_end_is_counted_once_in_its_minute_by_kind_and_outcome,
    a_heartbeat_registers_its_process_until_it_goes_stale_or_leaves,
    the_overview_agrees_with_the_jobs_api_after_done_failed_and_cancelled_jobs,
    a_tenant_token_is_refused_the_overview_and_an_operator_reads_it,
    every_kind_is_in_the_overview_zeroed_before_any_job_of_it_pipelines_included,
);

/// The store's ends summed over the day, by (kind, outcome).
fn ends_by_kind(o: &Overview) -> BTreeMap<(String, &'static str), u64> {
    let mut sums = BTreeMap::new();
    for e in &o.ended {
        *sums
            .entry((e.kind.to_string(), e.outcome.as_str()))
            .or_default() += e.count;
    }
    sums
}

fn status_key(kind: &str, outcome: Status) -> (String, &'static str) {
    (kind.to_owned(), outcome.as_str())
}

/// A store whose runs go stale after `ms`, with one attempt (a lost run ends at once).
fn short_leases(b: Backend, ms: u64, max_attempts: u32) -> Arc<dyn JobStore> {
    store(
        b,
        StoreSettings {
            stale_after: Duration::from_millis(ms),
            max_attempts,
            ..settings()
        },
    )
}

async fn every_end_is_counted_once_in_its_minute_by_kind_and_outcome(b: Backend) {
    let s = short_leases(b, 300, 2);
    let t = tenant();
    let done = new_job(&t, "sync");
    let (created, run) = start(&*s, &done).await;
    finish(&*s, &done, &run, &created, Outcome::Done(json!({}))).await;
    finish(&*s, &done, &run, &created, Outcome::Done(json!({}))).await;
    let failed = new_job(&t, "enrich");
    let (created, run) = start(&*s, &failed).await;
    let class = Outcome::Failed("SourceUnreachable".into(), None);
    finish(&*s, &failed, &run, &created, class).await;
    let queued = new_job(&t, "pair");
    create(&*s, &queued).await;
    s.cancel(&queued.id, "ops").await.unwrap();
    // A run lost on its second (last) attempt ends failed (Lost) in the recovery sweep. The
    // store's clock must pass the lease: no signal exists for that but time.
    let lost = new_job(&t, "k1");
    start(&*s, &lost).await;
    tokio::time::sleep(Duration::from_millis(450)).await;
    s.recover().await.unwrap();
    let again = s.claim("test/1", &test_kinds()).await.unwrap();
    assert_eq!(again.map(|c| c.attempt), Some(2));
    tokio::time::sleep(Duration::from_millis(450)).await;
    s.recover().await.unwrap();
    assert_eq!(
        s.get(&lost.id).await.unwrap().unwrap().status,
        Status::Failed
    );
    let o = s.overview().await.unwrap();
    let expected = BTreeMap::from([
        (status_key("sync", Status::Done), 1),
        (status_key("enrich", Status::Failed), 1),
        (status_key("pair", Status::Cancelled), 1),
        (status_key("k1", Status::Failed), 1),
    ]);
    assert_eq!(ends_by_kind(&o), expected, "a repeated finish counts once");
    let minute = o.now_ms / 60_000;
    assert!(
        o.ended
            .iter()
            .all(|e| e.minute + 1 >= minute && e.minute <= minute),
        "each end is in the minute it happened: {:?}",
        o.ended
    );
}

async fn a_heartbeat_registers_its_process_until_it_goes_stale_or_leaves(b: Backend) {
    let s = short_leases(b, 400, 3);
    assert!(s.overview().await.unwrap().processes.is_empty());
    s.renew(&[]).await.unwrap();
    let o = s.overview().await.unwrap();
    let [beat] = o.processes.as_slice() else {
        panic!("one process after a heartbeat: {:?}", o.processes)
    };
    assert_eq!(beat.process.worker, worker_name());
    assert!(beat.heartbeat_at <= o.now_ms && beat.process.started_at <= o.now_ms);
    // No heartbeat for longer than the stale threshold (only time passing shows it): gone,
    // as a killed process would be.
    tokio::time::sleep(Duration::from_millis(550)).await;
    assert!(s.overview().await.unwrap().processes.is_empty());
    s.renew(&[]).await.unwrap();
    assert_eq!(s.overview().await.unwrap().processes.len(), 1);
    s.leave().await.unwrap();
    assert!(
        s.overview().await.unwrap().processes.is_empty(),
        "left at once"
    );
}

/// Starts `kind` for tenant `t` through the app, answering the job's id.
async fn start_job(app: &TestApp, kind: &str, t: &TenantId) -> String {
    app.start_id(kind, &[("tenant_id", t.as_str())]).await
}

/// A mix through the app: 3 tickers done, 2 failures, a gated job cancelled while it ran,
/// a ticker cancelled while queued behind a held one, and a gated job held running.
/// Answers the held job's tenant and id.
async fn a_mix_of_ends(app: &TestApp) -> (TenantId, String) {
    let mut ended = Vec::new();
    for kind in ["ticker", "ticker", "ticker", "fail", "fail"] {
        ended.push(start_job(app, kind, &tenant()).await);
    }
    for id in &ended {
        app.poll_until_ended(id).await;
    }
    let cancelled = tenant();
    let id = start_job(app, "gated", &cancelled).await;
    Gate::of(&cancelled).reached().await;
    assert_eq!(app.cancel(&id).await.status(), 202);
    app.wait_for_status(&id, "cancelled").await;
    let held = tenant();
    let running = start_job(app, "gated", &held).await;
    Gate::of(&held).reached().await;
    app.wait_for(&running, |j| j["percent"] == 50).await;
    (held, running)
}

/// The jobs `ids` as the jobs API reads each, counted by (kind, status).
async fn listed(app: &TestApp, ids: &[String]) -> BTreeMap<(String, String), u64> {
    let mut counts = BTreeMap::new();
    for id in ids {
        let job = app.get_job(id).await;
        let key = (
            job["kind"].as_str().unwrap().to_owned(),
            job["status"].as_str().unwrap().to_owned(),
        );
        *counts.entry(key).or_default() += 1;
    }
    counts
}

/// The overview's ended jobs after `a_mix_of_ends` (3 done, 2 failed, a running job cancelled)
/// and a queued job cancelled: by kind, by outcome, in the hour, the day and the chart.
fn the_hours_ends_are_three_done_two_failed_and_two_cancelled(stats: &Value) {
    let hour = &stats["finished"]["last_hour"];
    assert_eq!(
        hour["by_kind"]["ticker"],
        json!({"done": 3, "failed": 0, "cancelled": 1}),
        "{stats}"
    );
    assert_eq!(
        hour["by_kind"]["fail"],
        json!({"done": 0, "failed": 2, "cancelled": 0})
    );
    assert_eq!(
        hour["by_kind"]["gated"],
        json!({"done": 0, "failed": 0, "cancelled": 1})
    );
    assert_eq!(
        hour["by_outcome"],
        json!({"done": 3, "failed": 2, "cancelled": 2})
    );
    assert_eq!(
        (
            hour["total"].as_u64(),
            stats["finished"]["last_day"]["total"].as_u64()
        ),
        (Some(7), Some(7))
    );
    let charted: u64 = stats["throughput"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            m["done"].as_u64().unwrap()
                + m["failed"].as_u64().unwrap()
                + m["cancelled"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(charted, 7, "the chart holds the hour's ends");
}

async fn the_overview_agrees_with_the_jobs_api_after_done_failed_and_cancelled_jobs(b: Backend) {
    let mut config = test_config();
    config.max_concurrent_jobs = 1;
    let app = spawn_app_with(config, store(b, settings())).await;
    let (held, running) = a_mix_of_ends(&app).await;
    // One more behind the held job, cancelled while it waits in the queue.
    let queued = start_job(&app, "ticker", &tenant()).await;
    app.wait_for_status(&queued, "queued").await;
    assert_eq!(app.cancel(&queued).await.status(), 202);
    let waiting = start_job(&app, "ticker", &tenant()).await;
    let stats = app.get_json("/catalog/stats").await;
    the_hours_ends_are_three_done_two_failed_and_two_cancelled(&stats);
    assert_eq!(
        stats["active"]["by_status"],
        json!({"queued": 1, "running": 1, "cancelling": 0, "lost": 0})
    );
    assert_eq!(stats["active"]["by_kind"]["gated"]["running"], 1);
    assert_eq!(
        stats["active"]["by_kind"]["panic"],
        json!({"queued": 0, "running": 0, "cancelling": 0, "lost": 0}),
        "every kind is there"
    );
    assert_eq!(stats["queue"]["depth"], 1);
    assert_eq!(stats["queue"]["oldest_job_id"], waiting.as_str());
    let [process] = stats["processes"].as_array().unwrap().as_slice() else {
        panic!("one process: {stats}")
    };
    assert_eq!(process["worker"], worker_name());
    let jobs = process["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{process}");
    assert_eq!(
        (jobs[0]["job_id"].as_str(), jobs[0]["percent"].as_u64()),
        (Some(running.as_str()), Some(50))
    );
    // The jobs API says the same of the same jobs.
    let active = app.job_ids("status=queued,running,cancelling,lost").await;
    let by_status = listed(&app, &active).await;
    assert_eq!(
        by_status,
        BTreeMap::from([
            (("gated".to_owned(), "running".to_owned()), 1),
            (("ticker".to_owned(), "queued".to_owned()), 1),
        ])
    );
    Gate::of(&held).release();
    app.poll_until_ended(&waiting).await;
}

async fn a_tenant_token_is_refused_the_overview_and_an_operator_reads_it(b: Backend) {
    let t = tenant();
    let mut config = test_config();
    config.api_tokens = Some(format!(
        "* ops {};read:* viewer {};{t} bot {}",
        hash_token("ops"),
        hash_token("viewer"),
        hash_token("bot")
    ));
    let app = spawn_app_with(config, store(b, settings())).await;
    for (token, status) in [("ops", 200), ("viewer", 200), ("bot", 403)] {
        let r = app
            .client
            .get(app.url("/catalog/stats"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{token}");
    }
    let open = spawn_app(b).await;
    let r = open.get("/catalog/stats?window=1h").await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = open.get_json("/catalog/stats").await;
    assert_eq!(body["throughput"].as_array().map(Vec::len), Some(60));
}

/// The queue figures are the ready queue's: jobs queued behind their tenant's running sync
/// are not in it, and count apart as `waiting` (the binary on a real Redis). They read
/// `depth: 2` with an oldest wait while the ready queue was empty and `/metrics` said 0 —
/// a hostile probe's finding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_waiting_behind_their_tenants_sync_are_not_in_the_queue_depth() {
    let redis = RedisServer::start(false);
    let feeds = HeldFeeds::start().await;
    let svc = Service::on(&redis).reading(&feeds).start().await;
    let t = tenant();
    let name = format!("ahead-{t}");
    svc.start_held_sync(&feeds, &t, &name).await;
    let behind = [
        svc.start_id("enrich", &[("tenant_id", t.as_str())]).await,
        svc.start_id("pair", &[("tenant_id", t.as_str())]).await,
    ];
    for id in &behind {
        let job = svc.get_job(id).await;
        assert!(job["waiting_for"].is_string(), "waits its turn: {job}");
    }
    let stats = svc.get_json("/catalog/stats").await;
    assert_eq!(
        stats["queue"],
        json!({"depth": 0, "waiting": 2, "oldest_job_id": null, "oldest_created_at": null,
               "oldest_wait_seconds": null}),
        "{stats:#}"
    );
    assert_eq!(stats["active"]["by_status"]["queued"], 2, "{stats:#}");
    let queued = value(
        &scrape(&metrics_text(&svc).await),
        "catalog_jobs_queued",
        &[],
    );
    assert_eq!(queued, 0.0, "as /metrics says");
    feeds.release(&name);
    svc.poll_until_ended(&behind[1]).await;
}

/// A pipeline held behind its tenant's running sync is in no queue: its steps wait their turn
/// and its parent is never queued, so the depth stays the ready queue's length, 0, with no
/// oldest (the binary on a real Redis; the parent counted, named the oldest, as a hostile
/// probe found). `queued` in `/metrics` is the ready queue's length too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_pipeline_is_not_in_the_queue_depth() {
    let redis = RedisServer::start(false);
    let feeds = HeldFeeds::start().await;
    let svc = Service::on(&redis).reading(&feeds).start().await;
    let t = tenant();
    let name = format!("ahead-{t}");
    svc.start_held_sync(&feeds, &t, &name).await;
    let form = [("tenant_id", t.as_str()), ("steps", "enrich,pair")];
    let pipeline = svc.start_id("pipeline", &form).await;
    let held = svc.get_job(&pipeline).await;
    assert_eq!(held["status"], "queued", "{held}");
    let stats = svc.get_json("/catalog/stats").await;
    let queued = value(
        &scrape(&metrics_text(&svc).await),
        "catalog_jobs_queued",
        &[],
    );
    assert_eq!(queued, 0.0, "the ready queue is empty");
    assert_eq!(
        stats["queue"],
        json!({"depth": 0, "waiting": 2, "oldest_job_id": null, "oldest_created_at": null,
               "oldest_wait_seconds": null}),
        "{stats:#}"
    );
    feeds.release(&name);
    svc.poll_until_ended(&pipeline).await;
}

/// A new service's overview names every kind a job may have, each zeroed: the registry's and
/// a pipeline's (its parent job, which no registry holds). Before, either store's named a
/// pipeline only once one was active or had ended in the day (on a Redis whose key prefix
/// had run pipelines, it seemed always there).
async fn every_kind_is_in_the_overview_zeroed_before_any_job_of_it_pipelines_included(b: Backend) {
    let app = spawn_app(b).await;
    let stats = app.get_json("/catalog/stats").await;
    let active = json!({"queued": 0, "running": 0, "cancelling": 0, "lost": 0});
    let ended = json!({"done": 0, "failed": 0, "cancelled": 0});
    for (pointer, zero) in [
        ("/active/by_kind", &active),
        ("/finished/last_hour/by_kind", &ended),
        ("/finished/last_day/by_kind", &ended),
    ] {
        let by_kind = stats.pointer(pointer).and_then(Value::as_object).unwrap();
        for kind in ["pipeline", "ticker", "gated"] {
            assert_eq!(
                by_kind.get(kind),
                Some(zero),
                "{pointer}: {kind} in {stats}"
            );
        }
        assert!(by_kind.values().all(|v| v == zero), "{pointer}: {stats}");
    }
}
