//! Redis high availability with real processes: a primary, a replica and three sentinels
//! (`helpers::HaRedis`) and the built binary reaching Redis through the sentinels. The
//! primary is SIGKILLed mid-job; the sentinels promote the replica; nothing accepted is lost.

use std::time::{Duration, Instant};

use catalog_jobs::jobs::redis::record::Field;
use serde_json::Value;

use crate::helpers::{
    eventually, free_port, redis_connection, role, started_id, tenant, HaRedis, HeldFeeds, Service,
    HELD_ROWS,
};

/// A stale threshold longer than a failover, so the run that was going on is the one that
/// ends (a shorter one would have it recovered as attempt 2 — also correct, but not this test).
const STALE_SECONDS: &str = "20";
/// Longest a test waits for the sentinels to promote the replica and the service to follow.
const FAILOVER_WITHIN: Duration = Duration::from_secs(25);

/// The services' settings; `feeds` are the held feeds their syncs may read.
fn env(min_replicas_ack: u32, feeds: &HeldFeeds) -> Vec<(&'static str, String)> {
    vec![
        ("SYNC_ALLOWED_HOSTS", feeds.allowed()),
        ("STALE_AFTER_SECONDS", STALE_SECONDS.into()),
        ("HEARTBEAT_SECONDS", "0.5".into()),
        ("FINISH_RETRY_SECONDS", "60".into()),
        ("REDIS_MIN_REPLICAS_ACK", min_replicas_ack.to_string()),
    ]
}

async fn start_ha() -> HaRedis {
    tokio::task::spawn_blocking(HaRedis::start).await.unwrap()
}

/// `/readyz`'s topology once it names the primary on `port` (the service followed it) with
/// `replicas` replicas acknowledging it.
async fn following(svc: &Service, port: u16, replicas: u64) -> Value {
    let followed = async || {
        let r = svc.readyz().await;
        if r.status() == 200 {
            let topology = r.json::<Value>().await.unwrap()["topology"].clone();
            if topology["primary"]
                .as_str()
                .is_some_and(|p| p.ends_with(&format!(":{port}")))
                && topology["replicas"] == replicas
            {
                return Ok(topology);
            }
        }
        Err(format!(
            "the service never followed the primary to port {port} with {replicas} replicas"
        ))
    };
    eventually(FAILOVER_WITHIN, followed).await
}

/// What the service answered new jobs from the primary's kill until it accepted them again.
struct Failover {
    /// Jobs answered 202: each must outlive the failover.
    accepted: Vec<String>,
    /// Jobs a 503 named as created (on the new primary before its replica was back).
    named: Vec<String>,
    refused: usize,
}

/// Kills the primary, then posts a sync every 100 ms: during the failover they get 503 +
/// Retry-After; once the sentinels promoted the replica, the old primary rejoins as its
/// replica (with its old, stale data on disk), and the POSTs are accepted again.
async fn post_through_a_failover(
    ha: &mut HaRedis,
    svc: &Service,
    accepted: Vec<String>,
) -> Failover {
    let (old_port, new_port) = (ha.primary.port, ha.replica.port);
    let mut seen = Failover {
        accepted,
        named: Vec::new(),
        refused: 0,
    };
    let (mut rejoined, mut last) = (false, Value::Null);
    ha.primary.stop(); // SIGKILL
    let killed = Instant::now();
    loop {
        let r = svc.sync(tenant().as_str(), &["demo.jsonl".into()]).await;
        match r.status().as_u16() {
            202 => {
                seen.accepted.push(started_id(r).await);
                if seen.refused > 0 && rejoined {
                    break;
                }
            }
            503 => {
                assert!(
                    r.headers().contains_key("retry-after"),
                    "503 says when to retry"
                );
                let body: Value = r.json().await.unwrap();
                assert_eq!(body["error"], "store_unavailable", "{body}");
                // Created on the new primary before its replica was back: the answer names
                // the job, which exists (it is not a 202, so it promised nothing more).
                if let Some(job) = body["job_id"].as_str() {
                    seen.named.push(job.to_owned());
                }
                last = body;
                seen.refused += 1;
            }
            other => panic!("a POST during the failover answered {other}"),
        }
        if !rejoined && ha.failed_over_to(new_port) {
            eprintln!(
                "failover: the sentinels promoted the replica {:.1} s after the kill",
                killed.elapsed().as_secs_f64()
            );
            ha.primary.restart_as_replica_of(new_port);
            rejoined = true;
        }
        assert!(
            killed.elapsed() < FAILOVER_WITHIN,
            "no POST was accepted after the failover ({} refused, rejoined {rejoined}, \
             the last: {last}, old {old_port} new {new_port}); the log's tail: {}",
            seen.refused,
            svc.log()
                .lines()
                .rev()
                .take(14)
                .collect::<Vec<_>>()
                .join("\n")
        );
        // Paces the requests; the condition waited for is the loop's own answer.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "failover: {} POSTs refused, first accepted again {:.1} s after the kill",
        seen.refused,
        killed.elapsed().as_secs_f64()
    );
    seen
}

/// Waits until the Redis on `port` holds job `id` as done (a replica catching up).
async fn until_it_holds_the_job_done(port: u16, id: &str) {
    let url = format!("redis://127.0.0.1:{port}/");
    let holds_it_done = async || {
        let mut conn = redis_connection(&url).await;
        let status: Option<String> =
            redis::cmd("HGET")
                .arg(catalog_jobs::jobs::keys::Keys::new("job").job(
                    &catalog_jobs::jobs::JobId::parse(id).expect("the service answers job ids"),
                ))
                .arg(Field::Status.name())
                .query_async(&mut conn)
                .await
                .unwrap();
        match status.as_deref() {
            Some("done") => Ok(()),
            _ => Err(format!("the Redis on {port} still says {status:?}")),
        }
    };
    eventually(Duration::from_secs(10), holds_it_done).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_sentinels_a_job_outlives_a_failover_and_no_accepted_job_vanishes() {
    let mut ha = start_ha().await;
    let (old_port, new_port) = (ha.primary.port, ha.replica.port);
    let feeds = HeldFeeds::start().await;
    let svc = Service::through_sentinels(&ha)
        .envs(&env(1, &feeds))
        .start()
        .await;
    let before = following(&svc, old_port, 1).await;
    assert_eq!(before["min_replicas_ack"], 1, "{before}");

    let t = tenant();
    let name = format!("ha-{t}");
    let id = svc.start_held_sync(&feeds, &t, &name).await;
    // Created just before the kill: with REDIS_MIN_REPLICAS_ACK=1 a 202 means the replica
    // has it, so it must be there after the failover.
    let r = svc.sync(tenant().as_str(), &["demo.jsonl".into()]).await;
    let mut accepted = vec![];
    if r.status() == 202 {
        accepted.push(started_id(r).await);
    }
    let failover = post_through_a_failover(&mut ha, &svc, accepted).await;
    let after = following(&svc, new_port, 1).await;
    assert!(failover.refused > 0, "the failover was seen");

    feeds.release(&name);
    let done = svc.poll(&id, "done", |j| j["status"] == "done").await;
    let totals = &done["result"]["totals"];
    let rows = totals["created"].as_u64().unwrap() + totals["unchanged"].as_u64().unwrap();
    assert_eq!(rows, HELD_ROWS as u64, "the full report landed: {done}");
    assert_eq!(
        done["attempt"], 1,
        "the run that was going on ended it: {done}"
    );
    for job in &failover.accepted {
        let r = svc.job(job).await;
        assert_eq!(
            r.status(),
            200,
            "job {job} was answered 202 and must not vanish"
        );
    }
    for job in &failover.named {
        let r = svc.job(job).await;
        assert_eq!(r.status(), 200, "the 503 named job {job} as created");
    }
    eprintln!(
        "failover: {} accepted, {} refused naming a job not yet on a replica",
        failover.accepted.len(),
        failover.named.len()
    );
    assert_eq!(
        after["replicas"], 1,
        "the old primary is the new one's replica: {after}"
    );
    assert!(
        role(old_port).is_some_and(|r| r.contains("slave")),
        "the old primary is a replica"
    );
    // The old primary's stale record (the job still running) did not come back: it holds
    // what the new primary has.
    until_it_holds_the_job_done(old_port, &id).await;
    assert_eq!(svc.get_job(&id).await["status"], "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_service_replicas_through_the_same_sentinels_keep_single_flight_across_a_failover() {
    let mut ha = start_ha().await;
    let new_port = ha.replica.port;
    let feeds = HeldFeeds::start().await;
    let a = Service::through_sentinels(&ha)
        .envs(&env(0, &feeds))
        .start()
        .await;
    let b = Service::through_sentinels(&ha)
        .envs(&env(0, &feeds))
        .start()
        .await;
    let t = tenant();
    let name = format!("ha-sf-{t}");
    let id = a.start_held_sync(&feeds, &t, &name).await;
    // Without REDIS_MIN_REPLICAS_ACK a write the replica had not received when its primary
    // died is lost (docs/reliability.md); single flight is owed for the lock it holds.
    let mut primary = ha.primary.connection().await;
    let acked: u64 = redis::cmd("WAIT")
        .arg(1)
        .arg(10_000)
        .query_async(&mut primary)
        .await
        .unwrap();
    assert_eq!(acked, 1, "the replica holds the running job and its lock");

    ha.primary.stop(); // SIGKILL
    let killed = Instant::now();
    following(&a, new_port, 0).await;
    following(&b, new_port, 0).await;
    eprintln!(
        "failover: both services follow the new primary {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    for svc in [&a, &b] {
        let r = svc.sync(t.as_str(), &["demo.jsonl".into()]).await;
        assert_eq!(
            r.status(),
            409,
            "one job per tenant and kind, also after a failover"
        );
        assert_eq!(r.json::<Value>().await.unwrap()["job_id"], id.as_str());
    }
    feeds.release(&name);
    let done = b.poll(&id, "done", |j| j["status"] == "done").await;
    assert_eq!(done["attempt"], 1, "it ran once: {done}");
    let next = b.start_sync(t.as_str(), "demo.jsonl").await;
    assert_ne!(next, id, "the lock was freed on the new primary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_that_do_not_answer_leave_the_service_up_and_answering_503_promptly() {
    let nobody = format!("127.0.0.1:{},127.0.0.1:{}", free_port(), free_port());
    let svc = Service::through_sentinels_at(&nobody).start().await;
    for _ in 0..3 {
        let asked = Instant::now();
        let r = svc.sync(tenant().as_str(), &["demo.jsonl".into()]).await;
        assert_eq!(r.status(), 503);
        assert!(r.headers().contains_key("retry-after"));
        assert_eq!(
            r.json::<Value>().await.unwrap()["error"],
            "store_unavailable"
        );
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "answered promptly"
        );
        assert_eq!(svc.readyz().await.status(), 503);
    }
}

#[test]
fn redis_url_and_sentinels_together_stop_the_binary_naming_both() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_catalog-jobs"))
        .env_clear()
        .env("BIND_ADDR", "127.0.0.1:0")
        .env("REDIS_URL", "redis://127.0.0.1:1/")
        .env("REDIS_SENTINELS", "127.0.0.1:2")
        .env("REDIS_MASTER_NAME", "m")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr) + String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("REDIS_URL") && said.contains("REDIS_SENTINELS"),
        "{said}"
    );
}
