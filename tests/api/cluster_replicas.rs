//! Two replicas of the built binary on the shared loopback Redis Cluster behave as one
//! service: single flight under a burst of starts spread over both, `wait=true` answered by
//! the replica that does not run the job, and a cancel through it reaching the job.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::helpers::{
    running, shared_cluster, started_id, status_and_json, tenant, unique, HeldFeeds, Service,
    HELD_ROWS,
};

/// Starts in the burst, half through each replica.
const BURST: usize = 64;
/// How long a cancel may take to end the job here: the service's target is 250 ms to reach
/// it and 250 ms to stop (docs/api.md; the figure is printed); this bound leaves room for a
/// machine at load 20–30 while still failing a cancel only learnt from a heartbeat (60 s).
const CANCEL_BOUND: Duration = Duration::from_secs(10);

/// Two replicas on the shared cluster reading `feeds`, with one worker each and a heartbeat
/// slower than `CANCEL_BOUND` (so only a pushed cancel meets it). Their keys have prefixes of
/// their own: another test's replicas on the cluster would claim their jobs (and fail them,
/// not allowed to read these feeds).
async fn two_replicas(feeds: &HeldFeeds) -> [Service; 2] {
    let cluster = shared_cluster().await;
    let launch = Service::embedded()
        .env("REDIS_CLUSTER_NODES", cluster.nodes_env())
        .reading(feeds)
        .env("KEY_PREFIX", unique("job"))
        .env("CATALOG_PREFIX", unique("cat"))
        .env("MAX_CONCURRENT_JOBS", "1")
        .env("STALE_AFTER_SECONDS", "120")
        .env("HEARTBEAT_SECONDS", "60");
    [launch.clone().start().await, launch.start().await]
}

/// The pid of the process a job runs on (`worker` is `host/pid`).
fn worker_pid(job: &Value) -> u32 {
    let worker = job["worker"].as_str().unwrap_or_default();
    let pid = worker.rsplit('/').next().and_then(|p| p.parse().ok());
    pid.unwrap_or_else(|| panic!("the job names its worker: {job}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_64_starts_of_one_tenant_and_kind_over_two_replicas_make_one_job() {
    let feeds = HeldFeeds::start().await;
    let replicas = two_replicas(&feeds).await;
    let t = tenant();
    let source = feeds.url("burst");
    let form = [("tenant_id", t.as_str()), ("source", source.as_str())];
    let burst = (0..BURST).map(|n| {
        let svc = &replicas[n % 2];
        async move { status_and_json(svc.start("sync", &form).await).await }
    });
    let answers = futures_util::future::join_all(burst).await;
    let mut accepted = 0;
    let mut ids = std::collections::BTreeSet::new();
    for (status, body) in &answers {
        match status {
            202 => accepted += 1,
            409 => assert_eq!(body["error"], "already_running", "{body}"),
            // A start whose store call outlived its timeout: its outcome is unknown
            // (docs/api.md), so it names no job here.
            503 => continue,
            other => panic!("a start of the burst answered {other}: {body}"),
        }
        ids.insert(body["job_id"].as_str().expect("a job id").to_owned());
    }
    let refused = answers.iter().filter(|(s, _)| *s == 503).count();
    println!("a burst of {BURST}: {accepted} accepted, {refused} refused 503");
    assert!(accepted <= 1, "one start is accepted at most: {answers:?}");
    assert_eq!(ids.len(), 1, "every answer names one job: {answers:?}");
    let id = ids.pop_first().unwrap();
    feeds.release("burst");
    let done = replicas[1]
        .poll(&id, "done", |j| j["status"] == "done")
        .await;
    assert_eq!(
        done["result"]["totals"]["created"], HELD_ROWS as u64,
        "{done}"
    );
    let listed = replicas[0]
        .job_ids(&format!("tenant_id={}&kind=sync", t.as_str()))
        .await;
    assert_eq!(listed, [id], "the tenant has one sync");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_a_job_one_replica_runs_is_waited_for_and_cancelled_through_the_other() {
    let feeds = HeldFeeds::start().await;
    let replicas = two_replicas(&feeds).await;
    let t = tenant();

    // wait=true on the replica that does not run the job: it joins it and answers its report.
    let source = feeds.url("waited");
    let form = [("tenant_id", t.as_str()), ("source", source.as_str())];
    let id = started_id(replicas[0].start("sync", &form).await).await;
    let job = replicas[0].poll(&id, "running", running).await;
    let other = &replicas[usize::from(worker_pid(&job) == replicas[0].pid())];
    assert_ne!(other.pid(), worker_pid(&job));
    let mut join = form.to_vec();
    join.extend([("on_conflict", "join"), ("wait", "true")]);
    let (waited, _) = tokio::join!(
        async {
            let r = other.start("sync", &join).await;
            let location = r.headers()["location"].to_str().unwrap().to_owned();
            assert!(
                location.ends_with(&id),
                "it answers the running job: {location}"
            );
            status_and_json(r).await
        },
        async {
            // The waiting request must be in before the feed is let go; no signal crosses
            // from the service to say it is waiting.
            tokio::time::sleep(Duration::from_millis(300)).await;
            feeds.release("waited");
        }
    );
    let (status, report) = waited;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["totals"]["created"], HELD_ROWS as u64, "{report}");
    let done = other.get_job(&id).await;
    assert_eq!(done["status"], "done", "{done}");

    // A cancel through the replica that does not run the job.
    let source = feeds.url("cancelled");
    let form = [("tenant_id", t.as_str()), ("source", source.as_str())];
    let id = started_id(replicas[1].start("sync", &form).await).await;
    let job = replicas[1].poll(&id, "running", running).await;
    let other = &replicas[usize::from(worker_pid(&job) == replicas[0].pid())];
    assert_ne!(other.pid(), worker_pid(&job));
    let r = other.cancel(&id).await;
    let answered = Instant::now();
    assert_eq!(r.status(), 202);
    let ended = other
        .poll(&id, "ended", |j| {
            matches!(j["status"].as_str(), Some("cancelled" | "done" | "failed"))
        })
        .await;
    let took = answered.elapsed();
    println!("cancel through the other replica → cancelled: {took:?}");
    assert_eq!(ended["status"], "cancelled", "{ended}");
    assert!(took < CANCEL_BOUND, "cancelled {took:?} after its answer");
}
