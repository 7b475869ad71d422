//! Two replicas of the real binary on one real Redis, for the overview's tests (the API's and
//! the page's): started reading held feeds and a source that cannot be reached, a scripted
//! mix of done, failed and cancelled syncs with one held running, and the checks that both
//! replicas' overviews agree with each other and with the jobs API.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{started_id, tenant, HeldFeeds, RedisServer, Service, NOBODY_LISTENS};

/// The figures two replicas must agree on: not the clock, the heartbeats, or a running
/// job's step and percent, which move between the two reads.
fn shared_figures(stats: &Value) -> Value {
    let ids = |jobs: &Value| -> Vec<Value> {
        jobs.as_array()
            .expect("a process's jobs")
            .iter()
            .map(|j| j["job_id"].clone())
            .collect()
    };
    json!({
        "active": stats["active"],
        "finished": stats["finished"],
        "queue": stats["queue"]["depth"],
        "processes": stats["processes"]
            .as_array()
            .expect("a process list")
            .iter()
            .map(|p| json!([p["worker"], ids(&p["jobs"])]))
            .collect::<Vec<_>>(),
    })
}

/// The overview from `svc`, checked to list no process whose heartbeat is stale, and to
/// mark `answering: false` exactly the processes whose heartbeat is older than
/// `not_answering_after_seconds`, 3 of its `heartbeat_seconds`.
pub async fn stats_of(svc: &Service) -> Value {
    let stats = svc.get_json("/catalog/stats").await;
    let at = svc_time(&stats["at"]);
    let seconds = |field: &str| stats[field].as_f64().expect(field) * 1000.0;
    let (stale_ms, silent_ms) = (
        seconds("stale_after_seconds"),
        seconds("not_answering_after_seconds"),
    );
    assert_eq!(
        silent_ms.round(),
        (3.0 * seconds("heartbeat_seconds")).round()
    );
    for p in stats["processes"].as_array().expect("a process list") {
        let beat = svc_time(&p["heartbeat_at"]);
        assert!(
            at - beat < stale_ms,
            "a listed process is fresh: {p} at {}",
            stats["at"]
        );
        assert_eq!(
            p["answering"],
            at - beat <= silent_ms.round(),
            "answering as its last beat says: {p} at {}",
            stats["at"]
        );
    }
    stats
}

/// Milliseconds since the epoch of a time the service wrote (`2026-11-30T10:00:00.123Z`).
fn svc_time(v: &Value) -> f64 {
    let raw = v.as_str().expect("a time");
    let n = |range: std::ops::Range<usize>| -> i64 { raw[range].parse().expect("a time's digits") };
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    // Howard Hinnant's days_from_civil: a proleptic Gregorian date to days since 1970-01-01.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    let secs = days * 86_400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19);
    (secs * 1000 + n(20..23)) as f64
}

/// The pid in a `host/pid` worker name.
pub fn pid_of(worker: &Value) -> u32 {
    worker
        .as_str()
        .and_then(|w| w.rsplit('/').next())
        .and_then(|p| p.parse().ok())
        .expect("a host/pid worker")
}

/// The mix, through both replicas: two syncs done (through A), one failed (through B), one
/// cancelled while it read a held feed (started on A, cancelled through B), then one held
/// running (through B) on `held_source`. Answers the ended jobs' ids and the held one's.
pub async fn a_scripted_mix(
    a: &Service,
    b: &Service,
    feeds: &HeldFeeds,
    dead: String,
    held_source: String,
) -> (Vec<String>, String) {
    let mut ended = Vec::new();
    for _ in 0..2 {
        ended.push(started_id(a.sync(tenant().as_str(), &["demo.jsonl".into()]).await).await);
    }
    ended.push(started_id(b.sync(tenant().as_str(), &[dead]).await).await);
    let cancelled = started_id(a.sync(tenant().as_str(), &[feeds.url("cancelled")]).await).await;
    a.wait_for_status(&cancelled, "running").await;
    assert_eq!(b.cancel(&cancelled).await.status(), 202);
    ended.push(cancelled);
    for id in &ended {
        a.poll_until_ended(id).await;
    }
    let held = started_id(b.sync(tenant().as_str(), &[held_source]).await).await;
    b.wait_for_status(&held, "running").await;
    (ended, held)
}

/// Both replicas' overviews agree with each other and with the jobs API, and list both
/// processes, the held sync under the one that runs it (`runner`).
pub async fn both_agree(a: &Service, b: &Service, ended: &[String], held: &str, runner: u32) {
    let (from_a, from_b) = (stats_of(a).await, stats_of(b).await);
    assert_eq!(
        shared_figures(&from_a),
        shared_figures(&from_b),
        "both replicas say the same"
    );
    let hour = &from_a["finished"]["last_hour"];
    assert_eq!(
        hour["by_kind"]["sync"],
        json!({"done": 2, "failed": 1, "cancelled": 1}),
        "{from_a}"
    );
    let mut by_status = BTreeMap::new();
    for id in ended {
        let job = b.get_job(id).await;
        *by_status
            .entry(job["status"].as_str().unwrap().to_owned())
            .or_insert(0u64) += 1;
    }
    let expected = [("cancelled", 1), ("done", 2), ("failed", 1)].map(|(s, n)| (s.to_owned(), n));
    assert_eq!(
        by_status,
        BTreeMap::from(expected),
        "the jobs API reads the same outcomes"
    );
    assert_eq!(from_a["active"]["by_kind"]["sync"]["running"], 1);
    let processes = from_a["processes"].as_array().unwrap();
    let pids: Vec<u32> = processes.iter().map(|p| pid_of(&p["worker"])).collect();
    assert_eq!(pids.len(), 2, "{processes:?}");
    assert!(
        pids.contains(&a.pid()) && pids.contains(&b.pid()),
        "{pids:?}"
    );
    for p in processes {
        let jobs = p["jobs"].as_array().unwrap();
        let runs: Vec<&str> = jobs.iter().map(|j| j["job_id"].as_str().unwrap()).collect();
        let expected = if pid_of(&p["worker"]) == runner {
            vec![held]
        } else {
            vec![]
        };
        assert_eq!(
            runs, expected,
            "the held sync shows on the replica that runs it: {p}"
        );
    }
}

/// Two replicas of the binary on one Redis, reading the held feeds and a source that
/// cannot be reached (`dead`).
pub struct Replicas {
    pub redis: RedisServer,
    pub feeds: HeldFeeds,
    pub a: Service,
    pub b: Service,
    pub dead: String,
}

impl Replicas {
    pub async fn start() -> Replicas {
        let redis = RedisServer::start(false);
        let feeds = HeldFeeds::start().await;
        let unreachable = NOBODY_LISTENS;
        let allowed = format!("{},{unreachable}", feeds.allowed());
        let a = Service::on(&redis)
            .env("SYNC_ALLOWED_HOSTS", &allowed)
            .start()
            .await;
        let b = Service::on(&redis)
            .env("SYNC_ALLOWED_HOSTS", &allowed)
            .start()
            .await;
        let dead = format!("http://{unreachable}/feed.jsonl");
        Replicas {
            redis,
            feeds,
            a,
            b,
            dead,
        }
    }
}
