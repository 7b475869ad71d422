//! Quiet logs: jobs that end normally leave no warning in the binary's log, even with a
//! heartbeat so frequent that it keeps crossing the jobs' ends (a renewal that finds its job
//! just ended is no fence).

use std::time::Duration;

use crate::helpers::{started_id, unique, RedisServer, Service};

/// Jobs run: enough that, with a heartbeat every few milliseconds, many of their ends are
/// crossed by one (before the fix, 31 of 200 such finishes warned).
const JOBS: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_logs_a_hundred_normal_finishes_under_a_racing_heartbeat_log_no_warning() {
    // Append-only, so the Redis gives start-up nothing to warn about; fsync'd once a second,
    // not at every write: 1,600 heartbeats a second each waiting on a disk that other builds
    // keep busy outlast the store's 2-second call timeout, and a start answers 503.
    let redis = RedisServer::start_with(true, "--appendfsync everysec");
    let svc = Service::on(&redis)
        .env("HEARTBEAT_SECONDS", "0.01")
        .env("MAX_CONCURRENT_JOBS", "8")
        .env("TENANT_CREATES_PER_MINUTE", "100000")
        .start()
        .await;
    let mut ids = Vec::with_capacity(JOBS);
    for i in 0..JOBS {
        let tenant = unique(&format!("quiet{i}-"));
        let started = svc
            .start(
                "sync",
                &[("tenant_id", tenant.as_str()), ("source", "sample.csv")],
            )
            .await;
        ids.push(started_id(started).await);
    }
    for id in &ids {
        let job = svc.poll(id, "done", |j| j["status"] == "done").await;
        assert_eq!(job["attempt"], 1, "{job}");
    }
    // Give the last heartbeats their turn.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = svc.log();
    // Start-up's own warning (no tokens configured) is about the set-up, not the jobs.
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .filter(|l| !l.contains("catalog_jobs::startup"))
        .collect();
    assert!(
        warnings.is_empty(),
        "{} of {JOBS} normal finishes left warnings:\n{}",
        warnings.len(),
        warnings.join("\n")
    );
}
