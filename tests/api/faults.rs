//! Faults lose nothing, proven with real processes: the built `catalog-jobs` binary and
//! `redis-server`, started, paused, killed and restarted by pid. Long jobs are real `sync`
//! jobs reading a feed that a test-held HTTP server releases when the test says so.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::helpers::{
    eventually, free_port, keys_matching, running, started_id, tenant, HeldFeeds, RedisServer,
    Service, HELD_ROWS,
};

async fn outage(keep_data: bool) {
    let mut redis = RedisServer::start(true);
    let feeds = HeldFeeds::start().await;
    let svc = Service::on(&redis).reading(&feeds).start().await;
    let t = tenant();
    let name = format!("outage-{keep_data}-{t}");
    let id = svc.start_held_sync(&feeds, &t, &name).await;

    redis.stop();
    let outage_started = Instant::now();
    feeds.release(&name); // the job goes on: it reads its feed and waits to write
    let mut answers = Vec::new();
    while outage_started.elapsed() < Duration::from_secs(3) {
        let asked = Instant::now();
        let r = svc.job(&id).await;
        answers.push((r.status().as_u16(), asked.elapsed()));
        if r.status() == 503 {
            assert!(r.headers().contains_key("retry-after"));
            assert_eq!(
                r.json::<Value>().await.unwrap()["error"],
                "store_unavailable"
            );
        }
        let p = svc.sync(t.as_str(), &["demo.jsonl".into()]).await;
        answers.push((p.status().as_u16(), asked.elapsed()));
        let ready = svc.readyz().await;
        answers.push((ready.status().as_u16(), asked.elapsed()));
    }
    assert!(
        answers.iter().all(|(s, _)| *s == 503),
        "every request during the outage got 503: {answers:?}"
    );
    assert!(
        answers
            .iter()
            .all(|(_, took)| *took < Duration::from_secs(5)),
        "none hung: {answers:?}"
    );

    redis.restart(keep_data);
    let done = svc.poll(&id, "done", |j| j["status"] == "done").await;
    // The outage outlasted the stale threshold, so the run may have been recovered and
    // run again (attempt 2): sync is safe to run twice, and either way every row is in.
    let totals = &done["result"]["totals"];
    let rows = totals["created"].as_u64().unwrap() + totals["unchanged"].as_u64().unwrap();
    assert_eq!(rows, HELD_ROWS as u64, "the full report landed: {done}");
    assert_eq!(done["percent"], 100);
    let ready = svc.readyz().await;
    assert_eq!(ready.status(), 200, "reconnected by itself");
    // The products the job wrote once Redis was back are there.
    let p = svc
        .get(&format!("/catalog/products/{name}.jsonl-0?tenant_id={t}"))
        .await;
    assert_eq!(p.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_survives_a_redis_outage_with_its_data_kept() {
    outage(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_survives_a_redis_that_comes_back_empty_and_its_record_is_written_back() {
    outage(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_job_whose_record_redis_lost_is_written_back_while_it_runs() {
    let mut redis = RedisServer::start(false);
    let feeds = HeldFeeds::start().await;
    let svc = Service::on(&redis).reading(&feeds).start().await;
    let t = tenant();
    let name = format!("wiped-{t}");
    let id = svc.start_sync(t.as_str(), &feeds.url(&name)).await;
    let before = svc.poll(&id, "running", running).await;
    redis.restart(false); // comes back empty while the job is still running
    let restored = svc.poll(&id, "running again", running).await;
    assert!(
        restored["percent"].as_u64() >= before["percent"].as_u64(),
        "percent never goes backwards: {before} then {restored}"
    );
    assert_eq!(restored["created_at"], before["created_at"]);
    let r = svc.sync(t.as_str(), &["demo.jsonl".into()]).await;
    assert_eq!(r.status(), 409, "its lock is back too");
    feeds.release(&name);
    let done = svc.poll(&id, "done", |j| j["status"] == "done").await;
    assert_eq!(done["result"]["totals"]["created"], HELD_ROWS);
}

/// A sync the store's outage fails keeps its partial report, as enrich and pair do: the
/// source it finished and the one it was saving, each with its rows. It ended
/// `failed`/`StoreUnavailable` with `result: null` (a hostile probe's finding).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_an_outage_fails_keeps_its_partial_report() {
    let redis = RedisServer::start(false);
    let feeds = HeldFeeds::start().await;
    // Writes paused past the retry window, but not past the retry window of the job's end.
    let svc = Service::on(&redis)
        .reading(&feeds)
        .env("FINISH_RETRY_SECONDS", "5")
        .start()
        .await;
    let t = tenant();
    let name = format!("paused-{t}");
    let sources = ["demo.jsonl".to_owned(), feeds.url(&name)];
    let id = started_id(svc.sync(t.as_str(), &sources).await).await;
    let on_the_held_feed = |j: &Value| j["step"].as_str().is_some_and(|s| s.contains("2 of 2"));
    svc.poll(&id, "on its second source", on_the_held_feed)
        .await;
    let mut conn = redis.connection().await;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(9_000)
        .arg("WRITE")
        .query_async(&mut conn)
        .await
        .unwrap();
    feeds.release(&name);
    let failed = svc
        .poll(&id, "ended", |j| j["finished_at"].is_string())
        .await;
    assert_eq!(failed["error"], "StoreUnavailable", "{failed:#}");
    let report = &failed["result"];
    let first = &report["sources"][0];
    assert_eq!(
        (first["status"].as_str(), first["created"].as_u64()),
        (Some("ok"), Some(2_400)),
        "the source it finished: {report:#}"
    );
    let second = &report["sources"][1];
    assert_eq!(
        (second["status"].as_str(), second["error"].as_str()),
        (Some("failed"), Some("StoreUnavailable")),
        "the source it was saving: {report:#}"
    );
    assert_eq!(second["read"], HELD_ROWS, "{report:#}");
    assert_eq!(report["totals"]["created"], 2_400, "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_never_returns_leaves_the_process_up_and_the_outcome_logged() {
    let mut redis = RedisServer::start(false);
    let feeds = HeldFeeds::start().await;
    let svc = Service::on(&redis)
        .reading(&feeds)
        .env("FINISH_RETRY_SECONDS", "1")
        .start()
        .await;
    let t = tenant();
    let name = format!("gone-{t}");
    let id = svc.start_held_sync(&feeds, &t, &name).await;
    redis.stop();
    feeds.release(&name);
    let log = svc
        .wait_for_log("could not be recorded", Duration::from_secs(15))
        .await;
    let line = log
        .lines()
        .find(|l| l.contains("could not be recorded"))
        .unwrap();
    assert!(
        line.contains(&id) && line.contains("ERROR"),
        "logged at error level with the job id: {line}"
    );
    assert!(
        line.contains("StoreUnavailable") || line.contains("totals"),
        "with its outcome: {line}"
    );
    assert_eq!(svc.get("/healthz").await.status(), 200, "still up");
    let ready = svc.readyz().await;
    assert_eq!(ready.status(), 503);
    assert_eq!(
        ready.json::<Value>().await.unwrap()["error"],
        "store_unavailable"
    );
}

/// A Redis on the same host, reached over its unix socket (`REDIS_URL=unix:///path`): the
/// job store and the catalogue both work through it, so a whole sync → pair round goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_reached_over_its_unix_socket_serves_jobs_and_the_catalogue() {
    let redis = RedisServer::start(false);
    let svc = Service::on_redis(&redis.socket_url()).start().await;
    assert_eq!(svc.readyz().await.status(), 200);
    let t = tenant();
    let synced = svc.start_sync(t.as_str(), "demo.jsonl").await;
    let synced = svc.poll(&synced, "done", |j| j["status"] == "done").await;
    let imported = synced["result"]["totals"]["created"].as_u64();
    assert!(imported.is_some_and(|n| n > 0), "{synced}");
    let r = svc
        .client
        .post(svc.url("/catalog/pair"))
        .form(&[("tenant_id", t.as_str()), ("wait", "true")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let paired: Value = r.json().await.unwrap();
    assert_eq!(paired["products"].as_u64(), imported, "{paired}");
    // It is the server behind the socket that holds them: read back over TCP.
    let mut conn = redis.connection().await;
    let stored: u64 = redis::cmd("HLEN")
        .arg(catalog_jobs::catalog::products::CatalogKeys::new("catalog").products(&t))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(Some(stored), imported);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_service_leaves_a_job_that_reads_lost_and_does_not_block_the_next() {
    let redis = RedisServer::start(false);
    // A longer threshold here, so the restart below surely happens before the job is stale;
    // one attempt, so a lost run is not re-run (MAX_ATTEMPTS=1 keeps this behaviour).
    let stale = Service::on(&redis)
        .env("STALE_AFTER_SECONDS", "4")
        .env("MAX_ATTEMPTS", "1");
    let feeds = HeldFeeds::start().await;
    let mut svc = stale.clone().reading(&feeds).start().await;
    let t = tenant();
    let id = svc.start_held_sync(&feeds, &t, &format!("crash-{t}")).await;
    svc.kill9();
    let restarted = stale.start().await;
    let refused = restarted.sync(t.as_str(), &["demo.jsonl".into()]).await;
    assert_eq!(
        refused.status(),
        409,
        "until it is stale, the dead job still holds its lock"
    );
    let lost = restarted.poll(&id, "lost", |j| j["status"] == "lost").await;
    assert!(lost["heartbeat_at"].is_string());
    let r = restarted.sync(t.as_str(), &["demo.jsonl".into()]).await;
    assert_eq!(r.status(), 202, "a lost job never blocks its tenant+kind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_short_jobs_finish_gives_long_ones_back_and_exits_zero() {
    let redis = RedisServer::start(false);
    let feeds = HeldFeeds::start().await;
    let mut svc = Service::on(&redis)
        .reading(&feeds)
        .env("SHUTDOWN_GRACE_SECONDS", "2")
        .start()
        .await;
    let (short_t, long_t) = (tenant(), tenant());
    let short = svc.start_sync(short_t.as_str(), &feeds.url("short")).await;
    let long = svc.start_sync(long_t.as_str(), &feeds.url("long")).await;
    svc.poll(&short, "running", running).await;
    svc.poll(&long, "running", running).await;
    svc.signal("TERM");
    // Readiness turns 503 as soon as the signal is handled: the moment to try a new job.
    let reported = async || match svc.readyz().await.status().as_u16() {
        503 => Ok(()),
        other => Err(format!("readiness still answers {other}, not the shutdown")),
    };
    eventually(Duration::from_secs(5), reported).await;
    let refused = svc.sync(tenant().as_str(), &["demo.jsonl".into()]).await;
    assert_eq!(refused.status(), 503);
    assert_eq!(
        refused.json::<Value>().await.unwrap()["error"],
        "shutting_down"
    );
    assert_eq!(
        svc.job(&long).await.status(),
        200,
        "reads are still served during the grace period"
    );
    feeds.release("short");
    let done = svc.poll(&short, "done", |j| j["status"] == "done").await;
    assert_eq!(done["result"]["totals"]["created"], HELD_ROWS);
    assert_eq!(svc.wait_exit(), Some(0), "exit status 0");
    // The long job went back to the queue: a fresh process (a deploy's new version) runs it.
    let after = Service::on(&redis).reading(&feeds).start().await;
    let requeued: Value = after.job(&long).await.json().await.unwrap();
    assert!(
        matches!(requeued["status"].as_str(), Some("queued" | "running")),
        "given back, not failed: {requeued}"
    );
    feeds.release("long");
    let long_job = after.poll(&long, "done", |j| j["status"] == "done").await;
    assert_eq!(
        long_job["attempt"], 1,
        "the given-back run is not counted: {long_job}"
    );
    assert_eq!(long_job["result"]["totals"]["read"], HELD_ROWS);
    assert!(
        long_job["worker"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/{}", after.pid())),
        "it ran on the new process: {long_job}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_attempt_a_paused_process_that_comes_back_is_fenced_off() {
    let redis = RedisServer::start(false);
    let one = [("MAX_ATTEMPTS", "1".to_owned())];
    let feeds = HeldFeeds::start().await;
    let a = Service::on(&redis).reading(&feeds).envs(&one).start().await;
    let t = tenant();
    let old = a.start_sync(t.as_str(), &feeds.url("paused")).await;
    a.poll(&old, "running", running).await;
    // Started once A runs the job: B cannot have claimed it.
    let b = Service::on(&redis).reading(&feeds).envs(&one).start().await;
    a.signal("STOP"); // partitioned / paused: no heartbeats
    b.poll(&old, "lost", |j| j["status"] == "lost").await;
    let new = b.start_sync(t.as_str(), &feeds.url("fresh")).await;
    a.signal("CONT");
    feeds.release("paused"); // the old job finishes its work and tries to record it
    a.wait_for_log("fenced off", Duration::from_secs(10)).await;
    let old_job: Value = b.job(&old).await.json().await.unwrap();
    // Taken over by the new start, it ended failed/Lost: not resurrected.
    assert_eq!(
        (&old_job["status"], &old_job["error"]),
        (&json!("failed"), &json!("Lost")),
        "the old job was not resurrected: {old_job}"
    );
    let new_job: Value = b.job(&new).await.json().await.unwrap();
    assert!(
        matches!(new_job["status"].as_str(), Some("queued" | "running")),
        "the new job is untouched: {new_job}"
    );
    let again = b.sync(t.as_str(), &["demo.jsonl".into()]).await;
    assert_eq!(again.status(), 409, "the new job still holds the lock");
    assert_eq!(again.json::<Value>().await.unwrap()["job_id"], new.as_str());
    feeds.release("fresh");
    b.poll(&new, "done", |j| j["status"] == "done").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_behave_as_one_service() {
    let redis = RedisServer::start(false);
    let feeds = HeldFeeds::start().await;
    let launch = Service::on(&redis).reading(&feeds);
    let (a, b) = (launch.clone().start().await, launch.start().await);
    let t = tenant();
    let source = feeds.url("burst");
    let mut tasks = Vec::new();
    for i in 0..64 {
        let url = if i % 2 == 0 {
            a.url("/catalog/sync")
        } else {
            b.url("/catalog/sync")
        };
        let (client, t, source) = (a.client.clone(), t.to_string(), source.clone());
        tasks.push(tokio::spawn(async move {
            let r = client
                .post(url)
                .form(&[("tenant_id", t.as_str()), ("source", source.as_str())])
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }));
    }
    let mut accepted = Vec::new();
    let mut conflicts = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            (202, body) => accepted.push(body["job_id"].as_str().unwrap().to_owned()),
            (409, body) => conflicts.push(body["job_id"].as_str().unwrap().to_owned()),
            other => panic!("unexpected answer {other:?}"),
        }
    }
    assert_eq!(accepted.len(), 1, "exactly one 202");
    assert_eq!(conflicts.len(), 63);
    assert!(
        conflicts.iter().all(|id| *id == accepted[0]),
        "every 409 names the one job"
    );
    // The running job's heartbeat moves between two reads; everything else is the same.
    let stable = |mut j: Value| {
        for moving in [
            "heartbeat_at",
            "updated_at",
            "percent",
            "step",
            "status",
            "started_at",
        ] {
            j.as_object_mut().unwrap().remove(moving);
        }
        j
    };
    let on_a: Value = a.job(&accepted[0]).await.json().await.unwrap();
    let on_b: Value = b.job(&accepted[0]).await.json().await.unwrap();
    assert_eq!(
        stable(on_a),
        stable(on_b),
        "a job is read identically on both replicas"
    );
    let listing = format!("tenant_id={t}");
    let (la, lb) = (a.job_ids(&listing).await, b.job_ids(&listing).await);
    assert_eq!(la, lb, "listings agree");
    assert_eq!(la, vec![accepted[0].clone()]);
    feeds.release("burst");
    b.poll(&accepted[0], "done", |j| j["status"] == "done")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_the_queue_a_new_job_is_refused_as_overloaded_and_leaves_nothing_behind() {
    let redis = RedisServer::start(false);
    let feeds = HeldFeeds::start().await;
    let svc = Service::on(&redis)
        .reading(&feeds)
        .env("MAX_CONCURRENT_JOBS", "1")
        .env("MAX_QUEUED_JOBS", "2")
        .start()
        .await;
    // In one slot group: the cap holds for each group's queue.
    let first_tenant = tenant();
    let mut tenants = vec![first_tenant.clone()];
    tenants.extend((0..3).map(|_| crate::helpers::tenant_beside(&first_tenant)));
    let first = svc.start_sync(tenants[0].as_str(), &feeds.url("bp")).await;
    svc.poll(&first, "running", running).await;
    for t in &tenants[1..3] {
        let r = svc.sync(t.as_str(), &[feeds.url("bp")]).await;
        let body: Value = r.json().await.unwrap();
        assert_eq!(
            (body["status"].as_str(), body["step"].as_str()),
            (Some("queued"), Some("queued"))
        );
    }
    let r = svc.sync(tenants[3].as_str(), &[feeds.url("bp")]).await;
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "overloaded");
    let mut conn = redis.connection().await;
    let keys = keys_matching(&mut conn, &format!("*{}*", tenants[3])).await;
    assert!(keys.is_empty(), "no orphan lock or job: {keys:?}");
    feeds.release("bp");
}

async fn eviction_policy(conn: &mut redis::aio::MultiplexedConnection, policy: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg(policy)
        .query_async(conn)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_redis_is_warned_about_at_start_up_and_in_readiness() {
    let redis = RedisServer::start(false);
    let mut conn = redis.connection().await;
    eviction_policy(&mut conn, "allkeys-lru").await;
    let svc = Service::on(&redis).start().await;
    let ready: Value = svc.readyz().await.json().await.unwrap();
    let warnings = ready["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("allkeys-lru")),
        "{ready}"
    );
    assert!(
        svc.log().contains("noeviction"),
        "warned at start-up:\n{}",
        svc.log()
    );
    eviction_policy(&mut conn, "noeviction").await;
    let ready: Value = svc.readyz().await.json().await.unwrap();
    // Only the open-mode warning (no API tokens) remains.
    assert_eq!(
        ready["warnings"],
        serde_json::json!([catalog_jobs::api::OPEN_WARNING])
    );
}

/// A status line of `/proc/<pid>/status` in MiB (`VmHWM`: the peak resident set).
fn proc_status_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"));
    kib / 1024.0
}

/// The peak RSS the service may reach importing 30 MB: its baseline plus a few batches and
/// the runtime's buffers. Before imports streamed, the same body cost 538 MB.
const IMPORT_RSS_CEILING_MIB: f64 = 150.0;

/// About 30 MiB of JSON Lines, one product a line: the body and its rows.
fn thirty_mib_of_products() -> (String, u64) {
    let filler = "Sturdy everyday product with a long description. ".repeat(4);
    let mut body = String::with_capacity(31 << 20);
    let mut rows = 0u64;
    while body.len() < 30 << 20 {
        body.push_str(&format!(
            "{{\"product_key\":\"m{rows}\",\"name\":\"Memory Mug {rows} Navy 350 ml\",\"brand\":\"Acme\",\"description\":\"{filler}\",\"price_cents\":{rows},\"taxonomy_path\":[\"Home\",\"Mugs\"]}}\n"
        ));
        rows += 1;
    }
    (body, rows)
}

/// Asks `/healthz` every 100 ms until `until` has finished; answers the slowest answer.
async fn slowest_healthz_while<T>(svc: &Service, until: &tokio::task::JoinHandle<T>) -> Duration {
    // Each probe waits on nothing but the runtime.
    let mut slowest = Duration::ZERO;
    while !until.is_finished() {
        let probe = Instant::now();
        let r = svc.get("/healthz").await;
        assert_eq!(r.status(), 200);
        slowest = slowest.max(probe.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    slowest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn importing_a_30_mb_body_keeps_the_service_under_150_mb_and_healthz_answering() {
    let redis = RedisServer::start(false);
    let svc = Service::on(&redis).start().await;
    let t = tenant();
    let (body, rows) = thirty_mib_of_products();
    let size_mib = body.len() as f64 / (1 << 20) as f64;
    let before = proc_status_mib(svc.pid(), "VmHWM");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .unwrap();
    let started = Instant::now();
    let import = tokio::spawn(
        client
            .post(svc.url(&format!("/catalog/products?tenant_id={t}")))
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send(),
    );
    // /healthz answers while the import runs.
    let slowest = slowest_healthz_while(&svc, &import).await;
    let r = import.await.unwrap().unwrap();
    let took = started.elapsed();
    assert_eq!(r.status(), 200);
    let report: Value = r.json().await.unwrap();
    assert_eq!(
        (report["created"].as_u64(), report["invalid"].as_u64()),
        (Some(rows), Some(0)),
        "{report}"
    );
    let peak = proc_status_mib(svc.pid(), "VmHWM");
    eprintln!(
        "import of {size_mib:.1} MiB ({rows} rows) in {:.1} s: VmHWM {before:.1} MiB before, \
         {peak:.1} MiB after; slowest /healthz {} ms",
        took.as_secs_f64(),
        slowest.as_millis()
    );
    assert!(
        peak < IMPORT_RSS_CEILING_MIB,
        "peak RSS {peak:.1} MiB importing {size_mib:.1} MiB"
    );
    // Generous: the machine is shared; before imports streamed, /healthz waited seconds.
    assert!(
        slowest < Duration::from_secs(2),
        "slowest /healthz {slowest:?}"
    );

    // One CSV row of 25 MB is one invalid row, read in bounded pieces and discarded.
    let csv = format!(
        "product_key,name\nhuge,{}\nafter,Row After\n",
        "x".repeat(25 << 20)
    );
    let r = client
        .post(svc.url(&format!("/catalog/products?tenant_id={t}")))
        .header("content-type", "text/csv")
        .body(csv)
        .send()
        .await
        .unwrap();
    let report: Value = r.json().await.unwrap();
    assert_eq!(
        (report["invalid"].as_u64(), report["created"].as_u64()),
        (Some(1), Some(1)),
        "{report}"
    );
    let peak = proc_status_mib(svc.pid(), "VmHWM");
    eprintln!("after a 25 MiB CSV row: VmHWM {peak:.1} MiB");
    assert!(peak < IMPORT_RSS_CEILING_MIB, "peak RSS {peak:.1} MiB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_promptly_while_a_client_dribbles_a_body() {
    use tokio::io::AsyncWriteExt;
    let redis = RedisServer::start(false);
    // The request timeout is far off, so only the bounded drain can end the dribbler.
    let mut svc = Service::on(&redis)
        .env("SHUTDOWN_GRACE_SECONDS", "0.5")
        .env("REQUEST_TIMEOUT_SECONDS", "300")
        .start()
        .await;
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", svc.port))
        .await
        .unwrap();
    s.write_all(
        b"POST /catalog/sync HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\nt",
    )
    .await
    .unwrap();
    let dribbler = tokio::spawn(async move {
        // A byte every 100 ms: the connection is never idle, and never done.
        while s.write_all(b"x").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    // No signal says "the handler is reading the body"; a few dribbled bytes make it likely.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let signalled = Instant::now();
    svc.signal("TERM");
    assert_eq!(svc.wait_exit(), Some(0), "exit status 0");
    let took = signalled.elapsed();
    let bound = Duration::from_secs_f64(0.5) + catalog_jobs::api::server::DRAIN_MAX;
    assert!(
        took < bound + Duration::from_secs(3),
        "exited {took:?} after SIGTERM (grace + drain is {bound:?})"
    );
    assert!(
        took > Duration::from_millis(500),
        "the grace was kept: {took:?}"
    );
    eprintln!("SIGTERM to exit with a dribbling client: {took:?}");
    dribbler.abort();
}

#[test]
fn an_unknown_redis_variable_stops_start_up_with_a_did_you_mean() {
    let out = Command::new(env!("CARGO_BIN_EXE_catalog-jobs"))
        .env_clear()
        .env("BIND_ADDR", "127.0.0.1:0")
        .env("REDIS_URI", "redis://127.0.0.1:1/")
        .output()
        .expect("the binary runs");
    assert!(!out.status.success(), "it refused to start");
    let log =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("REDIS_URI") && log.contains("did you mean REDIS_URL"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_silent_sockets_under_a_128_file_limit_do_not_make_the_service_unreachable() {
    let port = free_port();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 128 && exec {}",
            env!("CARGO_BIN_EXE_catalog-jobs")
        ))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("BIND_ADDR", format!("127.0.0.1:{port}"))
        .env("MAX_CONNECTIONS", "64")
        .env("REQUEST_TIMEOUT_SECONDS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary starts");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let health = format!("http://127.0.0.1:{port}/healthz");
    // No signal exists for "the port is bound" in another process: poll it.
    let up = async || match client.get(&health).send().await {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("the service never came up: {e}")),
    };
    eventually(Duration::from_secs(10), up).await;
    let mut silent = Vec::new();
    for _ in 0..200 {
        match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            Ok(s) => silent.push(s),
            Err(_) => break, // the kernel's backlog is full: as many as it holds are held
        }
    }
    let asked = Instant::now();
    let r = client.get(&health).send().await;
    let took = asked.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    let r = r.expect("healthz answered while the silent sockets were open");
    assert_eq!(r.status(), 200);
    eprintln!(
        "{} silent sockets held; /healthz answered in {took:?}",
        silent.len()
    );
}

/// A replica's catalogue connection sits idle while Redis restarts; the connection manager
/// learns it was dropped only from the next call. That call is sent again on a new
/// connection, so the first listing and the first import after the outage are answered, not
/// refused 503 while Redis answers (a hostile probe's finding: "broken pipe", 503
/// `store_unavailable` on the first catalogue request of each replica, even a minute later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_catalogue_requests_after_redis_restarts_are_answered() {
    let mut redis = RedisServer::start(true);
    let svc = Service::on(&redis).start().await;
    let t = tenant();
    let listing = format!("/catalog/products?tenant_id={t}&limit=10");
    let rows =
        |key: &str| format!(r#"{{"product_key":"{key}","name":"Mug {key}","price_cents":1200}}"#);
    let imported = svc
        .import(t.as_str(), "application/x-ndjson", rows("before"))
        .await;
    assert_eq!(imported.status(), 200);
    assert_eq!(svc.get(&listing).await.status(), 200);
    redis.restart(true);
    let ready = async || match svc.readyz().await.status().as_u16() {
        200 => Ok(()),
        other => Err(format!("readyz {other}")),
    };
    eventually(Duration::from_secs(10), ready).await;
    let first = svc.get(&listing).await;
    assert_eq!(first.status(), 200, "the first listing after the restart");
    let page: Value = first.json().await.unwrap();
    assert_eq!(page["products"][0]["product_key"], "before", "{page}");
    let imported = svc
        .import(t.as_str(), "application/x-ndjson", rows("after"))
        .await;
    assert_eq!(imported.status(), 200, "the first import after the restart");
}

/// A batch whose write Redis ran while the service had given up on its answer (Redis paused
/// at the write, past the service's 5 s I/O timeout) is sent again by the sync: it counts
/// what it wrote as it counted it, not as `unchanged` — the report reads as a run without
/// the pause. A proxy between the service and Redis makes the timing exact: it pauses Redis
/// (SIGSTOP) at the first products write of the tenant it is armed for, passes the write on
/// and never passes its answer back; once the service has closed that connection it resumes
/// Redis, which runs the write then, and only after that lets new connections through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_sent_again_after_a_redis_pause_lost_its_answer_counts_as_without_the_pause() {
    let redis = RedisServer::start(false);
    let proxy = PausingProxy::start(&redis).await;
    // A lease that outlives the pause: the run keeps its job while Redis is stopped.
    let svc = Service::on_redis(&proxy.url())
        .env("STALE_AFTER_SECONDS", "60")
        .start()
        .await;
    let totals = |id: String| {
        let svc = &svc;
        async move {
            let done = svc.poll(&id, "done", |j| j["status"] == "done").await;
            done["result"]["totals"].clone()
        }
    };
    let plain = svc.start_sync(tenant().as_str(), "demo.jsonl").await;
    let without_the_pause = totals(plain).await;
    assert!(without_the_pause["created"].as_u64().unwrap() > 500);
    let t = tenant();
    proxy.arm(t.as_str());
    let paused = svc.start_sync(t.as_str(), "demo.jsonl").await;
    let answer = proxy.lost_answer().await;
    assert!(
        String::from_utf8_lossy(&answer).contains("written"),
        "Redis ran the write whose answer was lost: {answer:?}"
    );
    assert_eq!(totals(paused).await, without_the_pause);
}

/// See `a_batch_sent_again_after_a_redis_pause_lost_its_answer_counts_as_without_the_pause`.
struct PausingProxy {
    port: u16,
    state: std::sync::Arc<Pausing>,
}

struct Pausing {
    redis_port: u16,
    redis_pid: u32,
    /// The tenant whose next products write is paused, once armed.
    armed: std::sync::Mutex<Option<String>>,
    /// False from that write until Redis answered it: new connections wait.
    open: tokio::sync::watch::Sender<bool>,
    /// The answer the service never got.
    lost: tokio::sync::watch::Sender<Option<Vec<u8>>>,
}

impl PausingProxy {
    async fn start(redis: &RedisServer) -> Self {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut redis.connection().await)
            .await
            .unwrap();
        let pid = info
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|p| p.trim().parse().ok())
            .expect("INFO names the server's pid");
        let state = std::sync::Arc::new(Pausing {
            redis_port: redis.port,
            redis_pid: pid,
            armed: std::sync::Mutex::new(None),
            open: tokio::sync::watch::channel(true).0,
            lost: tokio::sync::watch::channel(None).0,
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, shared.clone()));
            }
        });
        PausingProxy { port, state }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn arm(&self, tenant: &str) {
        *self.state.armed.lock().unwrap() = Some(tenant.to_owned());
    }

    /// Once Redis ran the paused write: its answer, which the service never got.
    async fn lost_answer(&self) -> Vec<u8> {
        let mut lost = self.state.lost.subscribe();
        let within = Duration::from_secs(60);
        let got = tokio::time::timeout(within, lost.wait_for(Option::is_some)).await;
        let answer = got.expect("the paused write was answered within 60 s");
        let kept: Option<Vec<u8>> = answer.unwrap().clone();
        drop(lost);
        kept.expect("an answer")
    }
}

fn kill(sig: &str, pid: u32) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
    assert!(ok.unwrap().success(), "kill -{sig} {pid}");
}

/// Passes one connection's bytes both ways; the armed write is paused and its answer kept.
async fn relay(client: tokio::net::TcpStream, state: std::sync::Arc<Pausing>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = state.open.subscribe().wait_for(|open| *open).await;
    let Ok(upstream) = tokio::net::TcpStream::connect(("127.0.0.1", state.redis_port)).await else {
        return;
    };
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_redis, mut to_redis) = upstream.into_split();
    let (paused_tx, mut paused) = tokio::sync::watch::channel(false);
    let answers = {
        let state = state.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            let mut kept = Vec::new();
            while let Ok(n @ 1..) = from_redis.read(&mut buf).await {
                if !*paused.borrow_and_update() {
                    if to_client.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                    continue;
                }
                kept.extend_from_slice(&buf[..n]);
                if kept.ends_with(b"\r\n") {
                    state.lost.send_replace(Some(kept));
                    state.open.send_replace(true);
                    return;
                }
            }
        })
    };
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n @ 1..) = from_client.read(&mut buf).await {
        let chunk = &buf[..n];
        let writes_products = |t: &String| {
            let has = |s: &[u8]| chunk.windows(s.len()).any(|w| w == s);
            has(b"EVALSHA") && has(b"HSET") && has(format!("{t}:products").as_bytes())
        };
        let hit = {
            let mut armed = state.armed.lock().unwrap();
            let hit = armed.as_ref().is_some_and(writes_products);
            if hit {
                *armed = None;
            }
            hit
        };
        if hit {
            // Its answer is kept here whatever Redis does: no need to wait for the stop.
            state.open.send_replace(false);
            paused_tx.send_replace(true);
            kill("STOP", state.redis_pid);
        }
        if to_redis.write_all(chunk).await.is_err() {
            break;
        }
    }
    // The service closed this connection (it gave up on the paused write): Redis resumes and
    // runs it; its answer goes nowhere.
    if *paused_tx.borrow() {
        kill("CONT", state.redis_pid);
        let _ = answers.await;
    }
}
