//! `/readyz`'s `durable` tells the truth about the Redis behind it: true only when Redis
//! itself persists (AOF on, or RDB save points), checked against real redis-servers. And it
//! reads not ready while Redis refuses writes for want of memory, ready again once it has
//! room, with the built binary on a real redis-server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use catalog_jobs::jobs::redis::RedisStore;
use serde_json::Value;

use crate::helpers::{
    config_set, settings, spawn_app_with, status_and_json, tenant, test_config, RedisServer,
    Service,
};

/// Generous on a loaded 2-core machine: what is polled for comes within a second or two.
const WITHIN: Duration = Duration::from_secs(30);

async fn durable(redis: &RedisServer) -> Value {
    let store = Arc::new(RedisStore::open(&redis.url(), settings()).expect("the URL parses"));
    let app = spawn_app_with(test_config(), store).await;
    let body = app.get_json("/readyz").await;
    assert_eq!(body["status"], "ready", "{body}");
    assert_eq!(body["store"], "redis");
    body["durable"].clone()
}

#[tokio::test]
async fn a_redis_that_persists_nothing_is_not_durable_until_it_gets_save_points() {
    // The harness starts Redis with `--save ''` and, here, `--appendonly no`.
    let redis = RedisServer::start(false);
    assert_eq!(durable(&redis).await, false);
    config_set(&mut redis.connection().await, "save", "3600 1").await;
    assert_eq!(durable(&redis).await, true, "an RDB save point persists");
}

#[tokio::test]
async fn a_redis_with_an_append_only_file_is_durable() {
    let redis = RedisServer::start(true);
    assert_eq!(durable(&redis).await, true);
}

/// `INFO memory`'s `used_memory`.
async fn used_memory(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(conn)
        .await
        .expect("INFO memory");
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory in INFO memory")
}

/// Polls `/readyz` until its status is `wanted`, and answers its body.
async fn readyz_until(svc: &Service, wanted: u16) -> serde_json::Value {
    let deadline = Instant::now() + WITHIN;
    loop {
        let (status, body) = status_and_json(svc.readyz().await).await;
        if status == wanted {
            return body;
        }
        assert!(Instant::now() < deadline, "/readyz stays {status}: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_redis_that_refuses_writes_for_want_of_memory_reads_not_ready_until_it_has_room() {
    let redis = tokio::task::spawn_blocking(|| RedisServer::start(false))
        .await
        .expect("the server starts");
    let svc = Service::on(&redis).start().await;
    let mut conn = redis.connection().await;
    readyz_until(&svc, 200).await;
    // A little room above what Redis holds now (its policy is the default, noeviction):
    // starts fill it until Redis answers OOM.
    let room = used_memory(&mut conn).await + 64 * 1024;
    config_set(&mut conn, "maxmemory", &room.to_string()).await;
    let deadline = Instant::now() + WITHIN;
    let (status, refused) = loop {
        let t = tenant();
        let r = svc.start("enrich", &[("tenant_id", t.as_str())]).await;
        if r.status() != 202 {
            break status_and_json(r).await;
        }
        assert!(Instant::now() < deadline, "Redis never filled up");
    };
    assert_eq!(status, 503, "a start Redis refuses: {refused}");
    assert_eq!(refused["error"], "store_unavailable", "{refused}");
    let says_full = |body: &serde_json::Value| {
        let message = body["message"].as_str().unwrap_or_default().to_owned();
        message.contains("Redis is out of memory")
    };
    assert!(
        says_full(&refused),
        "the refusal names the cause: {refused}"
    );

    let not_ready = readyz_until(&svc, 503).await;
    assert_eq!(not_ready["error"], "store_unavailable", "{not_ready}");
    assert!(
        says_full(&not_ready),
        "/readyz names the cause: {not_ready}"
    );

    config_set(&mut conn, "maxmemory", "0").await;
    let ready = readyz_until(&svc, 200).await;
    assert_eq!(ready["status"], "ready", "{ready}");
    let t = tenant();
    let r = svc.start("enrich", &[("tenant_id", t.as_str())]).await;
    assert_eq!(r.status(), 202, "a start goes through again");
}
