//! The runner through the real service: progress honesty, write coalescing, panics,
//! heartbeats, worker limits, and a job that outlives a Redis outage.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use catalog_jobs::jobs::redis::RedisStore;
use catalog_jobs::jobs::registry::JobInput;
use catalog_jobs::jobs::{JobId, Kind};
use serde_json::{json, Value};

use crate::both_stores;
use crate::helpers::{
    settings, spawn_app, spawn_app_with, store, tenant, test_config, test_registry, Backend,
    CountingStore, Gate, RedisServer,
};

both_stores!(
    percent_observed_by_a_poller_never_goes_backwards_and_ends_at_100,
    a_job_reporting_100_000_ticks_costs_a_few_dozen_writes,
    a_slow_job_keeps_its_heartbeat_and_is_never_read_as_lost,
    jobs_beyond_max_concurrent_wait_as_queued_for_a_free_worker,
);

#[test]
fn a_job_function_gives_the_same_report_without_a_callback() {
    let registry = test_registry();
    let kind = Kind::parse("ticker").unwrap();
    let spec = registry.get(&kind).unwrap();
    let job_id = JobId::new();
    let input = JobInput {
        job_id,
        tenant: tenant(),
        kind,
        params: json!({"n": 50, "slow": false}),
        cancel: Default::default(),
        run: catalog_jobs::jobs::store::RunId {
            id: job_id,
            claim: 1,
        },
        fence: std::sync::Arc::new(catalog_jobs::jobs::fence::Unfenced),
        probed_absent: false,
    };
    let seen = std::sync::Mutex::new(Vec::new());
    let record = |p: u8, _: &str| seen.lock().unwrap().push(p);
    let with = (spec.run)(&input, Some(&record)).unwrap();
    let without = (spec.run)(&input, None).unwrap();
    assert_eq!(with, without);
    assert_eq!(seen.lock().unwrap().len(), 50);
}

async fn percent_observed_by_a_poller_never_goes_backwards_and_ends_at_100(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    let slow = [("tenant_id", t.as_str()), ("n", "400"), ("slow", "true")];
    let id = app.start_id("ticker", &slow).await;
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let job = app.get_job(&id).await;
        seen.push(job["percent"].as_u64().unwrap());
        assert!(job["step"].as_str().is_some_and(|s| !s.is_empty()));
        if job["status"] == "done" {
            break;
        }
        assert!(Instant::now() < deadline, "the job ended");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]),
        "percent went backwards: {seen:?}"
    );
    assert_eq!(*seen.last().unwrap(), 100);
    let distinct = {
        let mut d = seen.clone();
        d.dedup();
        d.len()
    };
    assert!(
        distinct >= 3,
        "a poller saw the job move, not just 0 and 100: {seen:?}"
    );
}

async fn a_job_reporting_100_000_ticks_costs_a_few_dozen_writes(b: Backend) {
    let counting = Arc::new(CountingStore::new(store(b, settings())));
    let app = spawn_app_with(test_config(), counting.clone()).await;
    let t = tenant();
    let started = Instant::now();
    let r = app
        .start(
            "ticker",
            &[("tenant_id", t.as_str()), ("n", "100000"), ("wait", "true")],
        )
        .await;
    let elapsed = started.elapsed();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"ticks": 100000}));
    let writes = counting.ticks.load(Ordering::Relaxed);
    // One "starting" write, then at most one per 100 ms of the run, plus the final flush.
    let allowed = 3 + (elapsed.as_millis() as usize / 100);
    assert!(
        writes <= allowed.min(40),
        "{writes} progress writes for 100,000 ticks in {elapsed:?}"
    );
    let job = &app.store.recent(&t, 1).await.unwrap()[0];
    assert_eq!(job.percent, 100);
}

async fn a_slow_job_keeps_its_heartbeat_and_is_never_read_as_lost(b: Backend) {
    let mut config = test_config();
    // 30 heartbeats to a stale threshold: a loaded 2-core machine can hold the heartbeat task
    // back for a second, which must not read as a dead worker.
    config.stale_after_seconds = Duration::from_millis(3000);
    config.heartbeat_seconds = Some(Duration::from_millis(100));
    let app = spawn_app_with(
        config.clone(),
        store(
            b,
            catalog_jobs::jobs::store::StoreSettings {
                stale_after: config.stale_after_seconds,
                ..settings()
            },
        ),
    )
    .await;
    let t = tenant();
    let gate = Gate::of(&t);
    let id = app.start_id("gated", &[("tenant_id", t.as_str())]).await;
    gate.reached().await;
    app.wait_for_status(&id, "running").await;
    // The job reports nothing while it waits at its gate; the heartbeat alone must keep it
    // alive for well over the stale threshold. Only the passing of time can show that.
    let until = Instant::now() + Duration::from_millis(7000);
    while Instant::now() < until {
        assert_eq!(app.get_job(&id).await["status"], "running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gate.release();
    assert_eq!(app.poll_until_ended(&id).await["status"], "done");
}

async fn jobs_beyond_max_concurrent_wait_as_queued_for_a_free_worker(b: Backend) {
    let mut config = test_config();
    config.max_concurrent_jobs = 1;
    let app = spawn_app_with(config, store(b, settings())).await;
    let (t1, t2) = (tenant(), tenant());
    let (g1, first) = app.start_gated(&t1).await;
    let g2 = Gate::of(&t2);
    let second = app.start_json("gated", &[("tenant_id", t2.as_str())]).await;
    assert_eq!(second["status"], "queued");
    assert_eq!(second["step"], "queued");
    let id2 = second["job_id"].as_str().unwrap();
    assert_eq!(app.get_job(id2).await["status"], "queued");
    g1.release();
    g2.reached().await;
    app.wait_for_status(id2, "running").await;
    g2.release();
    assert_eq!(app.poll_until_ended(&first).await["status"], "done");
    assert_eq!(app.poll_until_ended(id2).await["status"], "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_outlives_a_redis_outage_and_its_result_lands_when_redis_is_back() {
    let mut redis = RedisServer::start(true);
    let store = Arc::new(RedisStore::open(&redis.url(), settings()).unwrap());
    let mut config = test_config();
    config.heartbeat_seconds = Some(Duration::from_millis(100));
    let app = spawn_app_with(config, store).await;
    let t = tenant();
    let gate = Gate::of(&t);
    let id = app.start_id("gated", &[("tenant_id", t.as_str())]).await;
    gate.reached().await;
    redis.stop();
    // While Redis is down, reads answer 503 promptly with the envelope and Retry-After.
    let started = Instant::now();
    let r = app.get(&format!("/catalog/jobs/{id}")).await;
    assert_eq!(r.status(), 503);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the 503 came promptly"
    );
    assert!(r.headers().contains_key("retry-after"));
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"],
        "store_unavailable"
    );
    // The job function runs to its end although nothing it reports can be written.
    gate.release();
    // Give the runner time to try (and fail) its finish against the dead store, so the
    // retry path is what lands the result; there is no signal for "a write failed".
    tokio::time::sleep(Duration::from_millis(500)).await;
    redis.restart(true);
    let done = app.poll_until_ended(&id).await;
    assert_eq!(done["status"], "done");
    assert_eq!(done["result"], json!({"gated": true}));
    assert_eq!(done["percent"], 100);
}

/// A kind's quick answer (`Registry::with_quick`) ends the job on the runner's own task when
/// it answers, and its function never runs; when it answers
/// `None` the function runs; when it panics the job fails as a panicking function's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kinds_quick_answer_ends_its_job_without_the_function_or_hands_it_on() {
    use crate::helpers::{test_catalog, TestApp};
    use catalog_jobs::jobs::registry::Registry;
    use catalog_jobs::startup::App;
    let registry = Registry::new()
        .with_plain("quick", |input, _| {
            match input.tenant.as_str().ends_with("x") {
                true => Ok(json!({"by": "function"})),
                false => panic!("a quickly answered job's function ran"),
            }
        })
        .with_quick("quick", |input, progress| {
            Box::pin(async move {
                let tenant = input.tenant.as_str();
                if tenant.ends_with("p") {
                    panic!("the quick answer fell over");
                }
                if tenant.ends_with("x") {
                    return None;
                }
                tokio::task::yield_now().await;
                progress.expect("a reporter")(100, "answered quickly");
                Some(Ok(json!({"by": "quick answer"})))
            })
        });
    let config = test_config();
    let jobs = store(Backend::Redis, settings());
    let app = App::build_with(
        config.clone(),
        jobs.clone(),
        test_catalog(&config),
        registry,
    );
    let app = TestApp::run(app.await.expect("the app builds"), jobs);
    let ended = async |suffix: &str| {
        let t = format!("{}{suffix}", tenant());
        let id = app.start_id("quick", &[("tenant_id", &t)]).await;
        app.poll_until_ended(&id).await
    };
    let quick = ended("q").await;
    assert_eq!(quick["status"], "done", "{quick}");
    assert_eq!(quick["result"], json!({"by": "quick answer"}), "{quick}");
    assert_eq!(quick["percent"], 100, "{quick}");
    let handed_on = ended("x").await;
    assert_eq!(
        handed_on["result"],
        json!({"by": "function"}),
        "{handed_on}"
    );
    let panicked = ended("p").await;
    assert_eq!(panicked["status"], "failed", "{panicked}");
    assert_eq!(panicked["error"], "Panic", "{panicked}");
}
