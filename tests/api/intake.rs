//! Intake first (`src/jobs/dispatch.rs`): while creates press on a process, it takes only
//! `QUICK_FLOOR` quick seats and answers the creates; once they come one at a time again, all
//! the quick seats fill. Real app, real HTTP, a real Redis of the test's own (the embedded
//! store's create never waits, so creates never pile up in it).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use catalog_jobs::jobs::redis::RedisStore;
use catalog_jobs::jobs::registry::Registry;
use catalog_jobs::jobs::runner::{INTAKE_PRESSED, QUICK_FLOOR, QUICK_SEATS};
use catalog_jobs::jobs::store::JobStore;

use crate::helpers::{settings, tenant, test_catalog, test_config, RedisServer, TestApp};

/// The quick answers under way now, and whether they may end.
#[derive(Default)]
struct Answers {
    now: AtomicUsize,
    open: AtomicBool,
}

/// A kind every job of which is answered quickly, each answer held until `answers.open`.
fn held_quick_kind(answers: Arc<Answers>) -> Registry {
    Registry::new()
        .with_plain("held", |_, _| Ok(json!({"by": "function"})))
        .with_quick("held", move |_, _| {
            let answers = answers.clone();
            Box::pin(async move {
                answers.now.fetch_add(1, SeqCst);
                while !answers.open.load(SeqCst) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                answers.now.fetch_sub(1, SeqCst);
                Some(Ok(json!({"by": "quick answer"})))
            })
        })
}

/// Polls `condition` every 10 ms for up to 30 s (a loaded 2-core machine included).
async fn until(what: &str, condition: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !condition() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// With `MAX_CONCURRENT_JOBS=4`, 64 creates sent at once while Redis holds writes back (so
/// they are all under way in the process at once: a burst however fast this machine is)
/// take at most `QUICK_FLOOR` quick seats between them; the rest are created queued, and all
/// end done once the answers may end. Then creates sent one after another take more than the
/// floor again. Before, the burst's creates took 64 of the 128 quick seats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_creates_press_on_a_process_they_take_at_most_the_floor_of_quick_seats_and_all_end_done(
) {
    // A Redis of its own: the pause below must hold back no other test's writes.
    let redis = tokio::task::spawn_blocking(|| RedisServer::start(false))
        .await
        .expect("redis-server starts");
    let mut config = test_config();
    let workers = 4;
    config.max_concurrent_jobs = workers;
    let answers = Arc::new(Answers::default());
    let jobs: Arc<dyn JobStore> =
        Arc::new(RedisStore::open(&redis.url(), settings()).expect("the redis url parses"));
    let catalog = test_catalog(&config);
    let registry = held_quick_kind(answers.clone());
    let app = catalog_jobs::startup::App::build_with(config, jobs.clone(), catalog, registry);
    let app = app.await.expect("the app builds");
    let runner = app.runner();
    let app = TestApp::run(app, jobs);

    // Writes held back (a script call is a write) until every create of the burst is under
    // way in the process, at most 1.5 s (a store call gives up after 2 s).
    let mut admin = redis.connection().await;
    let _: () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "1500", "WRITE"])
        .query_async(&mut admin)
        .await
        .expect("CLIENT PAUSE");
    let burst = 64;
    let tenants: Vec<String> = (0..burst).map(|_| tenant().to_string()).collect();
    let creates = tenants
        .iter()
        .map(|t| async { app.start_id("held", &[("tenant_id", t.as_str())]).await });
    let taken = AtomicUsize::new(0);
    let unpause = async {
        let deadline = std::time::Instant::now() + Duration::from_millis(1500);
        while runner.creates_under_way() < burst && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Every create has asked for its seat by now: each takes it before its store call.
        taken.store(runner.quick_seats_taken(), SeqCst);
        let _: () = redis::cmd("CLIENT")
            .arg("UNPAUSE")
            .query_async(&mut admin)
            .await
            .expect("CLIENT UNPAUSE");
    };
    let (mut ids, ()) = tokio::join!(futures_util::future::join_all(creates), unpause);
    assert!(
        taken.load(SeqCst) <= QUICK_FLOOR,
        "{} quick seats taken while the burst's creates were under way (floor {QUICK_FLOOR})",
        taken.load(SeqCst)
    );
    answers.open.store(true, SeqCst);
    for id in &ids {
        assert_eq!(app.poll_until_ended(id).await["status"], "done", "{id}");
    }

    // Calm again: creates one after another take every quick seat they need.
    answers.open.store(false, SeqCst);
    let calm = QUICK_FLOOR + INTAKE_PRESSED + 2;
    assert!(calm < QUICK_SEATS);
    for _ in 0..calm {
        let t = tenant().to_string();
        ids.push(app.start_id("held", &[("tenant_id", t.as_str())]).await);
    }
    until("every calm create's answer under way at once", || {
        answers.now.load(SeqCst) == calm
    })
    .await;
    answers.open.store(true, SeqCst);
    for id in &ids {
        assert_eq!(app.poll_until_ended(id).await["status"], "done", "{id}");
    }
}
