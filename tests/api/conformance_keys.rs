//! Every key a job script touches is named in its call's `KEYS` (issue 23): a guarded script
//! (the prelude's `key`) refuses a call that leaves out a key its step touches, before it
//! writes anything. The store's own calls of the same scripts name them all: the conformance
//! cases around this module pass on a single Redis and on the cluster with the guard on.

use std::collections::HashMap;

use catalog_jobs::jobs::keys::Group;
use catalog_jobs::jobs::redis::scripts::{self, Call, Function, Route};
use catalog_jobs::jobs::redis::RedisStore;
use catalog_jobs::jobs::store::{JobStore, RunId, Tick};
use catalog_jobs::jobs::JobId;

use crate::helpers::{settings, started, tenant, RedisServer};

/// A call of `function` in `job`'s group that declares `declared` beyond the group's two.
fn call(s: &RedisStore, function: &Function, job: &JobId, declared: Vec<String>) -> Call {
    let group = Group::of_job_or_first(job);
    let route = Route {
        queue: s.keys().queue(group),
        migrating: s.keys().migrating(group),
        declared,
        cluster: false,
    };
    scripts::invocation(function, s.settings(), route)
}

/// Everything Redis holds of `run`'s job: its record as stored and its lease's score.
async fn held(
    conn: &mut redis::aio::MultiplexedConnection,
    s: &RedisStore,
    run: &RunId,
) -> (HashMap<String, String>, Option<f64>) {
    let record: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(s.keys().job(&run.id))
        .query_async(conn)
        .await
        .unwrap();
    let lease: Option<f64> = redis::cmd("ZSCORE")
        .arg(s.keys().leases(Group::of_job_or_first(&run.id)))
        .arg(run.id.to_string())
        .query_async(conn)
        .await
        .unwrap();
    (record, lease)
}

/// Calls `inv` and answers Redis's refusal, which must be the guard's.
async fn refused(inv: Call, conn: &mut redis::aio::MultiplexedConnection, what: &str) {
    let err = inv
        .invoke_async::<redis::Value>(conn)
        .await
        .expect_err(what);
    assert!(err.to_string().contains("undeclared key"), "{what}: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_job_script_refuses_a_call_that_leaves_out_a_key_before_it_writes() {
    let redis = RedisServer::start(false);
    let s = RedisStore::open(&redis.url(), settings()).unwrap();
    let t = tenant();
    let (job, _, run) = started(&s, &t, "sync").await;
    let keys = s.keys().clone();
    let group = Group::of(&t);
    let mut conn = redis.connection().await;
    for function in [&scripts::TICK, &scripts::RENEW, &scripts::AWAITED] {
        assert!(function.guarded(), "{}", function.name());
    }
    let before = held(&mut conn, &s, &run).await;

    let mut tick = call(&s, &scripts::TICK, &job.id, vec![]);
    tick.arg(job.id.to_string())
        .arg(run.claim)
        .arg(50)
        .arg("half");
    refused(tick, &mut conn, "a tick that names not its record").await;

    let mut awaited = call(&s, &scripts::AWAITED, &job.id, vec![]);
    awaited.arg(job.id.to_string());
    refused(awaited, &mut conn, "awaited without its record").await;

    // A renewal in the run's group (the registry is renewed in the first group's call) touches
    // the lease index, the run's record and its lock: each left out in turn.
    let all = [
        keys.leases(group),
        keys.job(&job.id),
        keys.lock(&t, &job.kind),
    ];
    for left_out in 0..all.len() {
        let declared = all.iter().enumerate().filter(|(i, _)| *i != left_out);
        let declared = declared.map(|(_, k)| k.clone()).collect();
        let mut renew = call(&s, &scripts::RENEW, &job.id, declared);
        renew.arg("").arg(job.id.to_string()).arg(run.claim);
        refused(
            renew,
            &mut conn,
            &format!("a renewal without {}", all[left_out]),
        )
        .await;
    }
    assert_eq!(
        held(&mut conn, &s, &run).await,
        before,
        "a refused call wrote nothing: the record and the lease are as they were"
    );

    // The same calls naming every key they touch apply, and so do the store's own.
    let mut tick = call(&s, &scripts::TICK, &job.id, vec![keys.job(&job.id)]);
    tick.arg(job.id.to_string())
        .arg(run.claim)
        .arg(50)
        .arg("half");
    let word: String = tick.invoke_async(&mut conn).await.unwrap();
    assert_eq!(word, "applied");
    let mut renew = call(&s, &scripts::RENEW, &job.id, all.to_vec());
    renew.arg("").arg(job.id.to_string()).arg(run.claim);
    let words: Vec<String> = renew.invoke_async(&mut conn).await.unwrap();
    assert_eq!(words, ["held"]);
    assert_eq!(s.tick(&run, 60, "more").await.unwrap(), Tick::Applied);
    s.renew(std::slice::from_ref(&run)).await.unwrap();
    s.expect_end(&job.id).await.unwrap();
    assert_eq!(s.get(&job.id).await.unwrap().unwrap().percent, 60);
}
