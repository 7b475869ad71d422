//! `REDIS_MIN_REPLICAS_ACK` when the primary has fewer replicas than it asks for, with the
//! built binary on real redis-servers: the service knows it before it writes, so `/readyz`
//! says not ready and a start is refused with nothing created (a start that `WAIT` could not
//! confirm used to answer 503 while its job was made and ran). A replica that connects makes
//! starts work again.

use std::time::Duration;

use serde_json::Value;

use crate::helpers::{
    eventually, keys_matching, retry_after, status_and_json, tenant, RedisServer, Service,
};

/// Longest a replica takes to connect and sync, and the service's count (read at most once a
/// second) to see it, on a loaded machine.
const REPLICA_WITHIN: Duration = Duration::from_secs(20);

/// A 503 `store_unavailable` with `Retry-After` whose message names the setting and both
/// counts, and no job.
fn too_few_replicas(status: u16, body: &Value, what: &str) {
    assert_eq!(status, 503, "{what}: {body}");
    assert_eq!(body["error"], "store_unavailable", "{what}: {body}");
    let message = body["message"].as_str().expect("a message");
    assert!(
        message.contains("0 Redis replicas are connected")
            && message.contains("fewer than the 1 REDIS_MIN_REPLICAS_ACK asks for"),
        "{what} names the setting and the counts: {message}"
    );
    assert!(body.get("job_id").is_none(), "{what} names no job: {body}");
}

#[tokio::test]
async fn with_no_replica_connected_a_start_is_refused_before_anything_is_written_until_one_connects(
) {
    let primary = tokio::task::spawn_blocking(|| RedisServer::start(false))
        .await
        .expect("the primary starts");
    let svc = Service::on(&primary)
        .env("REDIS_MIN_REPLICAS_ACK", "1")
        .start()
        .await;
    let t = tenant();

    let r = svc.readyz().await;
    assert!(
        retry_after(&r) >= 1,
        "a not-ready answer says when to ask again"
    );
    let (status, body) = status_and_json(r).await;
    too_few_replicas(status, &body, "/readyz");

    for attempt in 0..3 {
        let r = svc.sync(t.as_str(), &["demo.jsonl".into()]).await;
        assert!(retry_after(&r) >= 1, "a refused start says when to retry");
        let (status, body) = status_and_json(r).await;
        too_few_replicas(status, &body, &format!("start {attempt}"));
    }
    // Refused before the write: no job, no lock, no listing entry of the tenant in Redis.
    assert_eq!(
        svc.job_ids(&format!("tenant_id={t}")).await,
        Vec::<String>::new()
    );
    let mut conn = primary.connection().await;
    let written = keys_matching(&mut conn, &format!("*{t}*")).await;
    assert_eq!(
        written,
        Vec::<String>::new(),
        "nothing of the tenant was written"
    );

    let primary_port = primary.port;
    let _replica = tokio::task::spawn_blocking(move || {
        RedisServer::start_with(false, &format!("--replicaof 127.0.0.1 {primary_port}"))
    })
    .await
    .expect("the replica starts");
    let ready = eventually(REPLICA_WITHIN, async || match svc.readyz().await.status() {
        s if s == 200 => Ok(()),
        s => Err(format!("/readyz answers {s} with a replica started")),
    });
    ready.await;
    let id = eventually(REPLICA_WITHIN, async || {
        let r = svc.sync(t.as_str(), &["demo.jsonl".into()]).await;
        let (status, body) = status_and_json(r).await;
        match status {
            202 => Ok(body["job_id"].as_str().expect("a job id").to_owned()),
            // Created while the replica was still syncing: the write reached the primary but
            // `WAIT` timed out, and the answer names the job it made (docs/api.md). Retrying
            // would meet that job (409 `already_running`), so it is the one to follow.
            503 if body["job_id"].is_string() => {
                Ok(body["job_id"].as_str().expect("a job id").to_owned())
            }
            // The count read before the replica connected answers for a second at most.
            503 => Err(format!("still refused: {body}")),
            other => panic!("a start with a replica connecting answered {other}: {body}"),
        }
    })
    .await;
    let job = svc.poll_until_ended(&id).await;
    assert_eq!(job["status"], "done", "{job}");
    assert_eq!(svc.job_ids(&format!("tenant_id={t}")).await, vec![id]);
}
