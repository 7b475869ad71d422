//! A refusal from Redis that no retry mends (`topology::is_permanent`: here `WRONGTYPE`, a
//! key of the service's that something else overwrote with another type) is a defect, not an
//! outage, with the built binary on a real redis-server: a request answers 500
//! `internal_error` at once (no `Retry-After`, its cause in the access line, logged once), and
//! a job whose catalogue write is refused fails with a class, without waiting out the
//! catalogue's retry window as it would for an outage. A Redis out of memory (`noeviction`)
//! refuses writes with words an outage does not have: the 503 says so, and it mends.

use std::time::{Duration, Instant};

use catalog_jobs::catalog::products::CatalogKeys;
use catalog_jobs::jobs::keys::Keys;
use serde_json::Value;

use crate::helpers::{started_id, status_and_json, tenant, RedisServer, Service};

/// The window a catalogue write is retried in while Redis is out of reach (it follows
/// `FINISH_RETRY_SECONDS`): a refused write must fail the job well before it.
const RETRY_WINDOW_SECONDS: u64 = 60;

/// The answer must be a 500 `internal_error` with no `Retry-After` and a message that says
/// nothing of the cause.
async fn a_defect(r: reqwest::Response, what: &str) {
    assert!(
        r.headers().get("retry-after").is_none(),
        "{what}: a defect says no retry"
    );
    let (status, body): (u16, Value) = status_and_json(r).await;
    assert_eq!(status, 500, "{what}: {body}");
    assert_eq!(body["error"], "internal_error", "{what}: {body}");
    assert!(
        !body.to_string().contains("WRONGTYPE"),
        "{what}: no internals: {body}"
    );
}

#[tokio::test]
async fn a_refusal_no_retry_mends_answers_500_once_and_fails_the_job_not_as_an_outage() {
    let redis = tokio::task::spawn_blocking(|| RedisServer::start(false))
        .await
        .expect("the server starts");
    let svc = Service::on(&redis)
        .env("FINISH_RETRY_SECONDS", RETRY_WINDOW_SECONDS.to_string())
        .start()
        .await;
    let t = tenant();
    let mut conn = redis.connection().await;
    let overwrite = [
        Keys::new("job").tenant(&t),
        CatalogKeys::new("catalog").products(&t),
    ];
    for key in &overwrite {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("not the service's")
            .query_async(&mut conn)
            .await
            .expect("SET");
    }

    let jobs = svc.get(&format!("/catalog/jobs?tenant_id={t}")).await;
    a_defect(jobs, "the job listing").await;
    let products = svc.get(&format!("/catalog/products?tenant_id={t}")).await;
    a_defect(products, "the product listing").await;
    let log = svc.log();
    let causes: Vec<&str> = log.lines().filter(|l| l.contains("WRONGTYPE")).collect();
    assert_eq!(
        causes.len(),
        2,
        "each logged once, with its cause: {causes:#?}"
    );

    // Its listing is the job index's key (written by the create script): a job of a tenant
    // of its own, whose catalogue key alone is overwritten.
    let u = tenant();
    let key = CatalogKeys::new("catalog").products(&u);
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("not the service's")
        .query_async(&mut conn)
        .await
        .expect("SET");
    let started = Instant::now();
    let id = started_id(svc.sync(u.as_str(), &["demo.jsonl".into()]).await).await;
    let job = svc.poll_until_ended(&id).await;
    assert_eq!(job["status"], "failed", "{job}");
    assert_eq!(job["error"], "CorruptRecord", "{job}");
    assert!(
        started.elapsed() < Duration::from_secs(RETRY_WINDOW_SECONDS / 2),
        "failed at once, not after the retry window: {:?}",
        started.elapsed()
    );
}

/// Sets Redis's `maxmemory` (0: no limit) under its default policy, `noeviction`.
async fn set_maxmemory(conn: &mut redis::aio::MultiplexedConnection, bytes: u64) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(bytes)
        .query_async(conn)
        .await
        .expect("CONFIG SET maxmemory");
}

/// The answer must be the outage's 503 and `Retry-After`, saying Redis is out of memory.
async fn out_of_memory(r: reqwest::Response, what: &str) {
    assert!(
        r.headers().get("retry-after").is_some(),
        "{what}: freeing memory mends it, so a retry is said"
    );
    let (status, body): (u16, Value) = status_and_json(r).await;
    assert_eq!(status, 503, "{what}: {body}");
    assert_eq!(body["error"], "store_unavailable", "{what}: {body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("Redis is out of memory") && !message.contains("unreachable"),
        "{what}: the message names the cause: {body}"
    );
}

#[tokio::test]
async fn a_full_redis_is_named_as_out_of_memory_not_as_unreachable_and_mends_when_freed() {
    let redis = tokio::task::spawn_blocking(|| RedisServer::start(false))
        .await
        .expect("the server starts");
    let svc = Service::on(&redis).start().await;
    let mut conn = redis.connection().await;
    let t = tenant();
    set_maxmemory(&mut conn, 1).await;

    let create = svc.start("enrich", &[("tenant_id", t.as_str())]).await;
    out_of_memory(create, "a job's start").await;
    let row = r#"{"product_key":"k1","name":"Linen shirt","price_cents":1000}"#;
    let import = svc.import(t.as_str(), "application/x-ndjson", row).await;
    out_of_memory(import, "a catalogue import").await;
    let jobs = svc.get(&format!("/catalog/jobs?tenant_id={t}")).await;
    assert_eq!(
        jobs.status(),
        200,
        "reads still answer while writes are refused"
    );

    set_maxmemory(&mut conn, 0).await;
    let id = started_id(svc.start("enrich", &[("tenant_id", t.as_str())]).await).await;
    let job = svc.poll_until_ended(&id).await;
    assert_eq!(job["status"], "done", "{job}");
}
