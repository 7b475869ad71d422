//! `/readyz`'s `durable` tells the truth about the Redis behind it: true only when Redis
//! itself persists (AOF on, or RDB save points), checked against real redis-servers.

use std::sync::Arc;

use catalog_jobs::jobs::redis::RedisStore;
use serde_json::Value;

use crate::helpers::{config_set, settings, spawn_app_with, test_config, RedisServer};

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
