//! A tenant's order and the honest `lost`, through the real service: the README's CLI example
//! run back to back, waiting that costs Redis nothing and holds no worker, and a killed
//! replica's job that is polled, started again and watched from another replica until it
//! runs again. The store contract itself is in `conformance` (both stores).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use catalog_jobs::jobs::redis::RedisStore;
use catalog_jobs::jobs::registry::Registry;
use catalog_jobs::jobs::{Kind, TenantId, REQUEUED_STEP};
use catalog_jobs::startup::App;
use serde_json::{json, Value};

use crate::helpers::{
    cli, code, command_counts, running, settings, started_id, stderr, stdout, submit_a_demo_sync,
    tenant, test_catalog, test_config, test_registry, unique, Api, Gate, HeldFeeds, RedisServer,
    Service, TestApp,
};

/// The events of a job's timeline.
async fn events(api: &Api, id: &str) -> Vec<Value> {
    let timeline = api.get_json(&format!("/catalog/jobs/{id}/events")).await;
    timeline["events"].as_array().expect("a timeline").clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_s_cli_example_twenty_times_over_enriches_every_product_its_sync_imported() {
    let svc = Service::embedded().start().await;
    let mut waited = 0;
    for _ in 0..20 {
        let tenant = unique("readme");
        let o = cli(&svc.base(), &submit_a_demo_sync(&tenant)).await;
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let sync_id = stdout(&o).trim().to_owned();
        let args = ["submit", "enrich", "--tenant", &tenant, "--wait", "--json"];
        let o = cli(&svc.base(), &args).await;
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let enrich: Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON job");
        assert_eq!(enrich["result"]["products"], 2400, "{enrich}");
        let sync = svc.get_job(&sync_id).await;
        assert_eq!(sync["result"]["totals"]["created"], 2400, "{sync}");
        // RFC 3339 times of one clock, one format: they compare as strings.
        let (sync_end, enrich_start) = (&sync["finished_at"], &enrich["started_at"]);
        assert!(
            enrich_start.as_str() >= sync_end.as_str(),
            "the enrich started once the sync had ended: {sync_end} then {enrich_start}"
        );
        let timeline = events(&svc, enrich["job_id"].as_str().expect("an id")).await;
        if sync_end.as_str() > enrich["created_at"].as_str() {
            waited += 1;
            assert_eq!(timeline[0]["type"], "created");
            assert_eq!(timeline[0]["waiting_for"], sync_id.as_str(), "{timeline:?}");
            assert_eq!(timeline[1]["type"], "ready");
            assert_eq!(timeline[1]["after"], sync_id.as_str());
        }
    }
    println!(
        "the enrich was created while its sync ran, and waited for it, in {waited} of 20 runs"
    );
}

/// The test kinds, with `sync` a job that holds at its tenant's gate and `w01`…`w20`
/// instant ones, all run in their tenant's order.
fn ordered_registry() -> (Registry, Vec<String>) {
    let base = test_registry();
    let gated = base
        .get(&Kind::parse("gated").expect("a kind"))
        .expect("the test kinds have gated")
        .run
        .clone();
    let mut registry = base.with("sync", |_| Ok(json!({})), move |input, p| gated(input, p));
    let waiting: Vec<String> = (1..=20).map(|n| format!("w{n:02}")).collect();
    let mut order = vec![("sync".to_owned(), 1)];
    for kind in &waiting {
        registry = registry.with_plain(kind, |_, _| Ok(json!({})));
        order.push((kind.clone(), 1));
    }
    let order: Vec<(&str, u32)> = order.iter().map(|(k, w)| (k.as_str(), *w)).collect();
    (registry.in_order(&order), waiting)
}

/// Starts `tenant`'s gated sync and, once it runs, one job of each of `kinds`: each waits for
/// the one created before it.
async fn line_up(api: &Api, tenant: &TenantId, kinds: &[String]) {
    let mut ahead = api
        .start_id("sync", &[("tenant_id", tenant.as_str())])
        .await;
    Gate::of(tenant).reached().await;
    for kind in kinds {
        let r = api.start(kind, &[("tenant_id", tenant.as_str())]).await;
        let status = r.status();
        let job: Value = r.json().await.expect("a JSON answer");
        assert_eq!(status, 202, "{kind} of {tenant}: {job}");
        assert_eq!(job["waiting_for"], ahead.as_str(), "{job}");
        ahead = job["job_id"].as_str().expect("an id").to_owned();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_jobs_waiting_behind_their_tenants_running_syncs_cost_no_redis_call_and_no_worker(
) {
    const TENANTS: usize = 100;
    let redis = RedisServer::start(false);
    let mut config = test_config();
    config.max_concurrent_jobs = TENANTS + 1;
    // No heartbeat or recovery sweep falls in the measured window: what Redis does then is
    // what the waiting jobs cost.
    config.heartbeat_seconds = Some(Duration::from_secs(60));
    let store = Arc::new(RedisStore::open(&redis.url(), settings()).expect("the url parses"));
    let (registry, waiting_kinds) = ordered_registry();
    let app = App::build_with(
        config.clone(),
        store.clone(),
        test_catalog(&config),
        registry,
    )
    .await
    .expect("the app builds");
    let runner = app.runner();
    let app = TestApp::run(app, store);
    let tenants: Vec<_> = (0..TENANTS).map(|_| tenant()).collect();
    // Ten tenants line up at a time: side by side, so the lining up ends well within a gate's
    // hold; ten, so that a loaded machine still answers every start in time.
    for some in tenants.chunks(10) {
        let lines: Vec<_> = some
            .iter()
            .map(|t| {
                let (api, t, kinds) = (Api::clone(&app), t.clone(), waiting_kinds.clone());
                tokio::spawn(async move { line_up(&api, &t, &kinds).await })
            })
            .collect();
        for line in lines {
            line.await.expect("a tenant's jobs line up");
        }
    }
    assert_eq!(
        runner.active_jobs(),
        TENANTS,
        "the waiting jobs hold no worker"
    );
    let mut conn = redis.connection().await;
    let before = settled(&mut conn).await;
    // Only the passing of time can show that waiting costs nothing.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = command_counts(&mut conn).await;
    let (total, spent) = spent_between(&before, &after);
    println!("Redis commands in 6 s with 2,000 jobs waiting behind 100 running: {total} {spent:?}");
    // The INFO that reads the counts and the idle dispatcher's re-check (one claim every 5 s,
    // a few commands) are all: one command per waiting job would be 2,000.
    assert!(total < 50, "{total} commands: {spent:?}");
    let other = tenant();
    let id = app.start_id("w01", &[("tenant_id", other.as_str())]).await;
    let done = app.wait_for_status(&id, "done").await;
    assert_eq!(done["waiting_for"], Value::Null);
    // Its lifecycle: a progress tick ("starting") may be written too when the machine is slow.
    let types: Vec<Value> = events(&app, &id)
        .await
        .iter()
        .map(|e| e["type"].clone())
        .filter(|t| t != "progress")
        .collect();
    assert_eq!(types, ["created", "started", "finished"], "it never waited");
    for t in &tenants {
        Gate::of(t).release();
    }
}

/// Commands Redis ran between two readings of its counts, in all and by command.
fn spent_between<'a>(
    before: &HashMap<String, u64>,
    after: &'a HashMap<String, u64>,
) -> (u64, Vec<(&'a String, u64)>) {
    let spent: Vec<(&String, u64)> = after
        .iter()
        .map(|(k, v)| (k, v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    (spent.iter().map(|(_, n)| n).sum(), spent)
}

/// Most commands a settled Redis runs in [`SETTLE_WINDOW`]: the INFO that reads the counts
/// and the idle dispatcher's re-check. One job's first progress write is five.
const SETTLED_AT_MOST: u64 = 8;
const SETTLE_WINDOW: Duration = Duration::from_secs(1);
/// Longest the last started jobs' first writes may take to land.
const SETTLES_WITHIN: Duration = Duration::from_secs(30);

/// Waits until the jobs just started have written their first progress, so that what Redis
/// does next is what the waiting jobs cost; answers the counts it settled at.
async fn settled(conn: &mut redis::aio::MultiplexedConnection) -> HashMap<String, u64> {
    let deadline = tokio::time::Instant::now() + SETTLES_WITHIN;
    let mut last = command_counts(conn).await;
    loop {
        tokio::time::sleep(SETTLE_WINDOW).await;
        let now = command_counts(conn).await;
        let (total, _) = spent_between(&last, &now);
        if total <= SETTLED_AT_MOST || tokio::time::Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// Polls job `id` on `svc` every 20 ms and tries to start another sync of its tenant, until
/// the job is done: every status read, and the answers to the starts.
async fn poll_and_start(svc: &Api, id: &str, tenant: &str) -> (Vec<Value>, Vec<Value>) {
    let (mut seen, mut starts) = (Vec::new(), Vec::new());
    loop {
        let job = svc.get_job(id).await;
        let done = job["status"] == "done";
        seen.push(job);
        if done {
            return (seen, starts);
        }
        let r = svc.sync(tenant, &["demo.jsonl".to_owned()]).await;
        let status = r.status().as_u16();
        let body: Value = r.json().await.expect("a JSON answer");
        starts.push(json!({"status": status, "body": body, "read": seen.last()}));
        // The poll interval the contract is tested at; nothing to wait on but the clock.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_job_with_attempts_left_never_reads_lost_and_watch_follows_it_to_done() {
    let redis = RedisServer::start(false);
    let feeds = HeldFeeds::start().await;
    // A renews a 6 s lease; B judges a heartbeat stale after 1.5 s. So from 1.5 s after A's
    // kill until B's sweep can re-queue the job (6 s or more), B's readers see a stale run
    // that will run again: a window of seconds, not a sweep's jitter, in which a poller must
    // not read `lost`.
    let long_lease = [("STALE_AFTER_SECONDS", "6"), ("MAX_ATTEMPTS", "3")];
    let mut a = Service::on(&redis)
        .reading(&feeds)
        .envs(&long_lease)
        .start()
        .await;
    let t = tenant();
    let id = started_id(a.sync(t.as_str(), &[feeds.url("honest")]).await).await;
    a.poll(&id, "running on A", running).await;
    let b = Service::on(&redis)
        .reading(&feeds)
        .env("MAX_ATTEMPTS", "3")
        .start()
        .await;
    let watch = tokio::spawn({
        let (base, id) = (b.base(), id.clone());
        async move { cli(&base, &["watch", &id]).await }
    });
    let polls = tokio::spawn({
        let (b, id, t) = (Api::clone(&b), id.clone(), t.to_string());
        async move { poll_and_start(&b, &id, &t).await }
    });
    a.kill9();
    b.poll(&id, "run again on B", |j| j["attempt"] == 2 && running(j))
        .await;
    feeds.release("honest");
    let (seen, starts) = polls.await.expect("the poller ends");
    assert!(
        seen.iter().all(|j| j["status"] != "lost"),
        "a job that runs again never reads lost"
    );
    let honest: Vec<&Value> = seen
        .iter()
        .filter(|j| j["status"] == "queued" && j["step"] == REQUEUED_STEP)
        .collect();
    assert!(!honest.is_empty(), "the stale run was seen, as queued");
    assert!(honest.iter().all(|j| j["attempt"] == 1));
    let done = seen.last().expect("the poller saw the end");
    for start in &starts {
        // The job can end between the poller's read and its start: a start then takes the
        // free lock, and is no refusal owed.
        let after_the_end = start["body"]["created_at"].as_str() >= done["finished_at"].as_str();
        if start["status"] == 202 && after_the_end {
            continue;
        }
        assert_eq!(start["status"], 409, "{start}");
        assert_eq!(start["body"]["job_id"], id.as_str(), "{start}");
    }
    assert!(
        starts.iter().any(|s| s["read"]["step"] == REQUEUED_STEP),
        "starts were refused while the job was stale"
    );
    assert_eq!(
        (done["status"].as_str(), done["attempt"].as_u64()),
        (Some("done"), Some(2))
    );
    let o = watch.await.expect("watch ends");
    assert_eq!(
        code(&o),
        0,
        "watch followed the job to done: {}",
        stderr(&o)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_attempt_a_killed_replicas_job_reads_lost_and_a_new_start_takes_over() {
    let redis = RedisServer::start(false);
    let feeds = HeldFeeds::start().await;
    let one = [("MAX_ATTEMPTS", "1")];
    let mut a = Service::on(&redis).reading(&feeds).envs(&one).start().await;
    let t = tenant();
    let id = started_id(a.sync(t.as_str(), &[feeds.url("gone")]).await).await;
    a.poll(&id, "running on A", running).await;
    let b = Service::on(&redis).reading(&feeds).envs(&one).start().await;
    a.kill9();
    let lost = b.poll(&id, "lost", |j| j["status"] == "lost").await;
    assert_eq!(lost["attempt"], 1);
    let o = cli(&b.base(), &["watch", &id]).await;
    assert_eq!(code(&o), 1, "lost is final: {}", stderr(&o));
    let next = started_id(b.sync(t.as_str(), &["demo.jsonl".to_owned()]).await).await;
    assert_ne!(next, id, "a new start takes the lost job's lock over");
    b.poll(&next, "done", |j| j["status"] == "done").await;
    feeds.release("gone");
}
