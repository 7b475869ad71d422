//! Every key a job script touches is named in its call's `KEYS` (issue 23): a script (the
//! prelude's guard, `key`) refuses a call that leaves out a key its step touches, before it
//! writes anything, or answers `stale` with the keys it learnt as it ran. The store's own
//! calls name them all: the conformance cases around this module pass on a single Redis and
//! on the cluster with the guard on in every script.

use std::collections::HashMap;

use catalog_jobs::jobs::keys::{Group, Keys};
use catalog_jobs::jobs::redis::scripts::{self, Call, Function, Route};
use catalog_jobs::jobs::redis::RedisStore;
use catalog_jobs::jobs::store::{JobStore, NewJob, RunId, Tick};
use catalog_jobs::jobs::{JobId, TenantId};

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
async fn a_job_script_refuses_a_call_that_leaves_out_a_key_before_it_writes() {
    let redis = RedisServer::start(false);
    let s = RedisStore::open(&redis.url(), settings()).unwrap();
    let t = tenant();
    let (job, _, run) = started(&s, &t, "sync").await;
    let keys = s.keys().clone();
    let group = Group::of(&t);
    let mut conn = redis.connection().await;
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

/// A step that learns keys as it runs (a job's end: its lock, its tenant's lane, its
/// pipeline) reaches every key before it writes: a call that left one out is answered `stale`
/// with the keys it met, and nothing is written; the store names them and calls again.
/// A real redis-server, a store on it and one queued sync of a new tenant, with its keys.
struct Queued {
    redis: RedisServer,
    s: RedisStore,
    t: TenantId,
    job: NewJob,
    keys: Keys,
    group: Group,
}

impl Queued {
    async fn start() -> Self {
        let redis = RedisServer::start(false);
        let s = RedisStore::open(&redis.url(), settings()).unwrap();
        let t = tenant();
        let job = crate::helpers::created(&s, &t, "sync").await;
        let keys = s.keys().clone();
        Self {
            redis,
            s,
            group: Group::of(&t),
            t,
            job,
            keys,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_that_meets_keys_its_call_left_out_answers_stale_with_them_and_writes_nothing() {
    let Queued {
        redis,
        s,
        t,
        job,
        keys,
        group,
    } = Queued::start().await;
    let mut conn = redis.connection().await;
    let record = || async {
        let mut conn = redis.connection().await;
        let read: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(keys.job(&job.id))
            .query_async(&mut conn)
            .await
            .unwrap();
        read
    };
    let before = record().await;

    // A queued job's cancel ends it: its lock, the lease index, the waiting set and this
    // hour's stats bucket are touched too.
    let mut cancel = call(&s, &scripts::CANCEL, &job.id, vec![keys.job(&job.id)]);
    cancel.arg(job.id.to_string()).arg("guard");
    let answer: Vec<String> = cancel.invoke_async(&mut conn).await.unwrap();
    assert_eq!(answer[0], "stale", "{answer:?}");
    for named in [
        keys.lock(&t, &job.kind),
        keys.leases(group),
        keys.waiting(group),
    ] {
        assert!(answer.contains(&named), "{named} in {answer:?}");
    }
    assert_eq!(record().await, before, "a stale answer wrote nothing");
    let queue: Vec<String> = redis::cmd("LRANGE")
        .arg(keys.queue(group))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(queue, [job.id.to_string()], "still queued");

    // Its record left out is no stale answer but the guard's refusal: the step reads it first.
    let mut cancel = call(&s, &scripts::CANCEL, &job.id, vec![]);
    cancel.arg(job.id.to_string()).arg("guard");
    refused(cancel, &mut conn, "a cancel that names not its record").await;

    // The store's own cancel names what the stale answer listed, and ends the job.
    assert_eq!(
        s.cancel(&job.id, "guard").await.unwrap(),
        catalog_jobs::jobs::store::Cancel::Requested
    );
    let read = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(read.status, catalog_jobs::jobs::Status::Cancelled);
}

/// A claim pops ids it cannot know before it runs: it takes only jobs whose records its call
/// names, and answers the queue's head for the next call to name. Leaving the head unnamed
/// claims nothing and writes nothing; the store's claim names what the answer listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_takes_only_jobs_its_call_names_and_answers_the_queues_head() {
    let Queued {
        redis,
        s,
        t: _,
        job,
        keys,
        group,
    } = Queued::start().await;
    let mut conn = redis.connection().await;
    let mut claim = call(&s, &scripts::CLAIM, &job.id, vec![keys.leases(group)]);
    claim.arg("guard/1").arg(1).arg("sync");
    let answer: Vec<Vec<String>> = claim.invoke_async(&mut conn).await.unwrap();
    let head = vec!["head".to_owned(), job.id.to_string()];
    assert_eq!(
        answer,
        [vec![], head],
        "nothing claimed; jobs left; the head named"
    );
    let read = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(read.status, catalog_jobs::jobs::Status::Queued);
    let claimed = crate::helpers::claim_queued(&s, "guard/2").await;
    assert_eq!(claimed.job.id, job.id);
}
