//! The store contract, run against both stores: the embedded `MemoryStore` and `RedisStore`
//! on a real redis-server.

use std::sync::Arc;
use std::time::Duration;

use catalog_jobs::jobs::store::{Cancel, Created, JobStore, Live, Outcome, StoreSettings, Write};
use catalog_jobs::jobs::{JobId, Status};
use serde_json::json;

use crate::both_stores;
use crate::helpers::{create, finish, new_job, settings, store, tenant, Backend};

fn fresh(backend: Backend) -> Arc<dyn JobStore> {
    store(backend, settings())
}

/// A store in which every active job is already stale (threshold 0).
fn stale_at_once(backend: Backend) -> Arc<dyn JobStore> {
    store(
        backend,
        StoreSettings {
            stale_after: Duration::ZERO,
            ..settings()
        },
    )
}

both_stores!(
    a_new_job_is_queued_at_zero_with_its_kind,
    a_tick_moves_it_to_running_with_percent_and_step,
    finish_with_a_report_is_done_at_100_with_the_result_intact,
    a_failure_carries_the_class_only,
    a_second_job_of_the_same_kind_is_refused_with_the_first_id,
    a_different_kind_runs_concurrently,
    finish_releases_the_lock,
    a_silent_job_reads_lost,
    a_finished_job_is_never_lost,
    an_unknown_id_is_none,
    recent_lists_newest_first_within_the_limit,
    a_tick_on_an_unknown_job_does_not_fail,
    a_lost_job_does_not_block_a_new_create_and_is_fenced_off,
    an_old_jobs_finish_does_not_release_a_newer_jobs_lock,
    a_tick_never_lowers_percent_and_is_ignored_after_finish,
    fifty_concurrent_creates_of_one_tenant_and_kind_have_exactly_one_winner,
    a_repeated_finish_changes_nothing,
    a_finish_whose_record_vanished_writes_it_back_whole,
    a_vanished_record_is_not_written_back_over_a_newer_lock,
    a_heartbeat_keeps_a_job_alive_and_ignores_finished_ones,
    a_live_job_whose_record_vanished_is_restored_with_its_progress_and_lock,
    a_cancelled_job_reads_cancelling_until_it_finishes_cancelled_and_frees_its_lock,
    a_cancelling_job_that_goes_silent_reads_lost,
    clearing_a_tenant_removes_its_jobs_and_locks,
);

async fn a_new_job_is_queued_at_zero_with_its_kind(b: Backend) {
    let s = fresh(b);
    let mut job = new_job(&tenant(), "sync");
    job.params = json!({"sources": ["a.jsonl"]});
    let created = create(&*s, &job).await;
    let got = s.get(&job.id).await.unwrap().expect("the job exists");
    assert_eq!(got, created);
    assert_eq!(got.status, Status::Queued);
    assert_eq!(got.percent, 0);
    assert_eq!(got.kind.as_str(), "sync");
    assert_eq!(
        got.params,
        json!({"sources": ["a.jsonl"]}),
        "the record holds what is needed to run it again"
    );
    assert_eq!(got.started_at, None);
    assert_eq!(got.finished_at, None);
}

async fn a_tick_moves_it_to_running_with_percent_and_step(b: Backend) {
    let s = fresh(b);
    let job = new_job(&tenant(), "enrich");
    create(&*s, &job).await;
    assert_eq!(
        s.tick(&job.id, 45, "batch 5 of 11").await.unwrap(),
        Write::Applied
    );
    let got = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(got.status, Status::Running);
    assert_eq!(got.percent, 45);
    assert_eq!(got.step, "batch 5 of 11");
    assert!(got.started_at.is_some());
}

async fn finish_with_a_report_is_done_at_100_with_the_result_intact(b: Backend) {
    let s = fresh(b);
    let job = new_job(&tenant(), "pair");
    let created = create(&*s, &job).await;
    s.tick(&job.id, 30, "scoring").await.unwrap();
    let report = json!({"products": 3, "paired": 2, "pairs": [1, 2.5, "x"], "nested": {"ü": null}});
    assert_eq!(
        finish(&*s, &job, &created, Outcome::Done(report.clone())).await,
        Write::Applied
    );
    let got = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(got.status, Status::Done);
    assert_eq!(got.percent, 100);
    assert_eq!(got.result, report);
    assert_eq!(got.error, None);
    assert!(got.finished_at.is_some());
}

async fn a_failure_carries_the_class_only(b: Backend) {
    let s = fresh(b);
    let job = new_job(&tenant(), "sync");
    let created = create(&*s, &job).await;
    s.tick(&job.id, 20, "syncing a (1 of 2)").await.unwrap();
    finish(
        &*s,
        &job,
        &created,
        Outcome::Failed("SourceUnreachable".into(), None),
    )
    .await;
    let got = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(got.status, Status::Failed);
    assert_eq!(got.error.as_deref(), Some("SourceUnreachable"));
    assert_eq!(got.result, serde_json::Value::Null);
    assert_eq!(got.percent, 20, "a failed job keeps the progress it made");

    // The last reported percent comes with the finish, so the last tick needs no write of its own.
    let job = new_job(&tenant(), "sync");
    let created = create(&*s, &job).await;
    s.tick(&job.id, 20, "syncing a (1 of 2)").await.unwrap();
    let failed = Outcome::Failed("Panic".into(), None);
    s.finish(&job, created.created_at, &failed, 35)
        .await
        .unwrap();
    assert_eq!(s.get(&job.id).await.unwrap().unwrap().percent, 35);
}

async fn a_second_job_of_the_same_kind_is_refused_with_the_first_id(b: Backend) {
    let s = fresh(b);
    let t = tenant();
    let first = new_job(&t, "sync");
    create(&*s, &first).await;
    let second = new_job(&t, "sync");
    assert_eq!(
        s.create(second.clone()).await.unwrap(),
        Created::AlreadyRunning(first.id)
    );
    assert_eq!(
        s.get(&second.id).await.unwrap(),
        None,
        "the refused job left nothing behind"
    );
    assert_eq!(s.recent(&t, 10).await.unwrap().len(), 1);
}

async fn a_different_kind_runs_concurrently(b: Backend) {
    let s = fresh(b);
    let t = tenant();
    create(&*s, &new_job(&t, "sync")).await;
    create(&*s, &new_job(&t, "enrich")).await;
    create(&*s, &new_job(&tenant(), "sync")).await;
}

async fn finish_releases_the_lock(b: Backend) {
    let s = fresh(b);
    let t = tenant();
    let first = new_job(&t, "sync");
    let created = create(&*s, &first).await;
    finish(&*s, &first, &created, Outcome::Done(json!({}))).await;
    create(&*s, &new_job(&t, "sync")).await;
}

async fn a_silent_job_reads_lost(b: Backend) {
    let s = stale_at_once(b);
    let job = new_job(&tenant(), "sync");
    create(&*s, &job).await;
    assert_eq!(s.get(&job.id).await.unwrap().unwrap().status, Status::Lost);
    s.tick(&job.id, 10, "working").await.unwrap();
    let got = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(
        got.status,
        Status::Lost,
        "lost is derived on read, from the heartbeat"
    );
    assert_eq!(got.percent, 10);
}

async fn a_finished_job_is_never_lost(b: Backend) {
    let s = stale_at_once(b);
    for outcome in [
        Outcome::Done(json!({"ok": 1})),
        Outcome::Failed("Panic".into(), None),
    ] {
        let job = new_job(&tenant(), "sync");
        let created = create(&*s, &job).await;
        finish(&*s, &job, &created, outcome.clone()).await;
        assert_eq!(
            s.get(&job.id).await.unwrap().unwrap().status,
            outcome.status()
        );
    }
}

async fn an_unknown_id_is_none(b: Backend) {
    let s = fresh(b);
    assert_eq!(s.get(&JobId::new()).await.unwrap(), None);
    assert!(s.recent(&tenant(), 20).await.unwrap().is_empty());
}

async fn recent_lists_newest_first_within_the_limit(b: Backend) {
    let s = fresh(b);
    let t = tenant();
    let mut ids = Vec::new();
    for kind in ["k1", "k2", "k3", "k4"] {
        let job = new_job(&t, kind);
        create(&*s, &job).await;
        ids.push(job.id);
    }
    create(&*s, &new_job(&tenant(), "k1")).await; // another tenant's job stays out
    let listed: Vec<JobId> = s
        .recent(&t, 20)
        .await
        .unwrap()
        .iter()
        .map(|j| j.job_id)
        .collect();
    ids.reverse();
    assert_eq!(listed, ids);
    let two: Vec<JobId> = s
        .recent(&t, 2)
        .await
        .unwrap()
        .iter()
        .map(|j| j.job_id)
        .collect();
    assert_eq!(two, ids[..2]);
}

async fn a_tick_on_an_unknown_job_does_not_fail(b: Backend) {
    let s = fresh(b);
    let id = JobId::new();
    assert_eq!(s.tick(&id, 50, "x").await.unwrap(), Write::Missing);
    assert_eq!(
        s.get(&id).await.unwrap(),
        None,
        "a tick never creates a job"
    );
}

async fn a_lost_job_does_not_block_a_new_create_and_is_fenced_off(b: Backend) {
    let s = stale_at_once(b);
    let t = tenant();
    let old = new_job(&t, "sync");
    let old_created = create(&*s, &old).await;
    s.tick(&old.id, 40, "halfway").await.unwrap();
    let new = new_job(&t, "sync");
    create(&*s, &new).await;
    // The old process comes back: none of its writes land.
    assert_eq!(
        s.tick(&old.id, 90, "back from the dead").await.unwrap(),
        Write::Fenced
    );
    assert_eq!(
        s.heartbeat(&old.id, &old.tenant, &old.kind).await.unwrap(),
        Write::Fenced
    );
    assert_eq!(
        finish(&*s, &old, &old_created, Outcome::Done(json!({}))).await,
        Write::Fenced
    );
    let old_now = s.get(&old.id).await.unwrap().unwrap();
    assert_eq!((old_now.status, old_now.percent), (Status::Lost, 40));
    // The new job still holds the lock: it is not yet stale… in a store with a real threshold.
    let new_now = s.get(&new.id).await.unwrap().unwrap();
    assert_eq!(new_now.percent, 0);
}

async fn an_old_jobs_finish_does_not_release_a_newer_jobs_lock(b: Backend) {
    let s = store(
        b,
        StoreSettings {
            stale_after: Duration::from_millis(1000),
            ..settings()
        },
    );
    let t = tenant();
    let old = new_job(&t, "sync");
    let old_created = create(&*s, &old).await;
    // Staleness is judged on the store's clock: the only way to make the old job stale is to
    // let that clock move past the threshold.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let new = new_job(&t, "sync");
    create(&*s, &new).await; // takes over the stale holder
    assert_eq!(
        finish(
            &*s,
            &old,
            &old_created,
            Outcome::Failed("Panic".into(), None)
        )
        .await,
        Write::Fenced
    );
    assert_eq!(
        s.create(new_job(&t, "sync")).await.unwrap(),
        Created::AlreadyRunning(new.id),
        "the newer job still holds its lock"
    );
}

async fn a_tick_never_lowers_percent_and_is_ignored_after_finish(b: Backend) {
    let s = fresh(b);
    let job = new_job(&tenant(), "enrich");
    let created = create(&*s, &job).await;
    s.tick(&job.id, 60, "batch 6 of 10").await.unwrap();
    s.tick(&job.id, 30, "batch 3 of 10, reported late")
        .await
        .unwrap();
    assert_eq!(s.get(&job.id).await.unwrap().unwrap().percent, 60);
    s.tick(&job.id, 200, "over the top").await.unwrap();
    assert_eq!(s.get(&job.id).await.unwrap().unwrap().percent, 100);
    finish(&*s, &job, &created, Outcome::Failed("Panic".into(), None)).await;
    let before = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(
        s.tick(&job.id, 100, "too late").await.unwrap(),
        Write::Ignored
    );
    assert_eq!(s.get(&job.id).await.unwrap().unwrap(), before);
}

async fn fifty_concurrent_creates_of_one_tenant_and_kind_have_exactly_one_winner(b: Backend) {
    let s = fresh(b);
    let t = tenant();
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (s, job) = (s.clone(), new_job(&t, "sync"));
            tokio::spawn(async move { (job.id, s.create(job).await.unwrap()) })
        })
        .collect();
    let mut winners = Vec::new();
    let mut named = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            (id, Created::Created(_)) => winners.push(id),
            (_, Created::AlreadyRunning(holder)) => named.push(holder),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one create wins");
    assert_eq!(named.len(), 49);
    assert!(
        named.iter().all(|id| *id == winners[0]),
        "every refusal names the winner"
    );
    assert_eq!(
        s.recent(&t, 100).await.unwrap().len(),
        1,
        "no orphan job from a refused create"
    );
}

async fn a_repeated_finish_changes_nothing(b: Backend) {
    let s = fresh(b);
    let job = new_job(&tenant(), "pair");
    let created = create(&*s, &job).await;
    finish(&*s, &job, &created, Outcome::Done(json!({"pairs": 1}))).await;
    let first = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(
        finish(&*s, &job, &created, Outcome::Failed("Panic".into(), None)).await,
        Write::Ignored
    );
    assert_eq!(
        s.get(&job.id).await.unwrap().unwrap(),
        first,
        "a finished job is never changed"
    );
}

async fn a_finish_whose_record_vanished_writes_it_back_whole(b: Backend) {
    // Stands for a Redis that came back empty: the job was created, then its keys were lost.
    let s = fresh(b);
    let t = tenant();
    let mut job = new_job(&t, "sync");
    job.params = json!({"sources": ["x.jsonl"]});
    let created = create(&*s, &job).await;
    assert_eq!(s.clear_tenant(&t).await.unwrap(), 1);
    assert_eq!(s.get(&job.id).await.unwrap(), None);
    let report = json!({"totals": {"read": 5}});
    assert_eq!(
        finish(&*s, &job, &created, Outcome::Done(report.clone())).await,
        Write::Applied
    );
    let got = s.get(&job.id).await.unwrap().expect("written back");
    assert_eq!((got.status, got.percent), (Status::Done, 100));
    assert_eq!(got.result, report);
    assert_eq!(got.params, job.params);
    assert_eq!(got.created_at, created.created_at);
    assert_eq!(s.recent(&t, 5).await.unwrap().len(), 1, "listed again");
    create(&*s, &new_job(&t, "sync")).await; // and it holds no lock
}

async fn a_vanished_record_is_not_written_back_over_a_newer_lock(b: Backend) {
    let s = fresh(b);
    let t = tenant();
    let old = new_job(&t, "sync");
    let old_created = create(&*s, &old).await;
    s.clear_tenant(&t).await.unwrap();
    let new = new_job(&t, "sync");
    create(&*s, &new).await;
    assert_eq!(
        finish(&*s, &old, &old_created, Outcome::Done(json!({}))).await,
        Write::Fenced
    );
    assert_eq!(
        s.get(&old.id).await.unwrap(),
        None,
        "fencing wins over writing back"
    );
    assert_eq!(
        s.create(new_job(&t, "sync")).await.unwrap(),
        Created::AlreadyRunning(new.id)
    );
}

async fn a_heartbeat_keeps_a_job_alive_and_ignores_finished_ones(b: Backend) {
    let s = store(
        b,
        StoreSettings {
            stale_after: Duration::from_millis(1000),
            ..settings()
        },
    );
    let job = new_job(&tenant(), "sync");
    let created = create(&*s, &job).await;
    for _ in 0..4 {
        // The only way to let the store's clock move on is to wait for it.
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(
            s.heartbeat(&job.id, &job.tenant, &job.kind).await.unwrap(),
            Write::Applied
        );
    }
    assert_eq!(
        s.get(&job.id).await.unwrap().unwrap().status,
        Status::Queued
    );
    // Without heartbeats it goes lost.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(s.get(&job.id).await.unwrap().unwrap().status, Status::Lost);
    s.heartbeat(&job.id, &job.tenant, &job.kind).await.unwrap();
    assert_eq!(
        s.get(&job.id).await.unwrap().unwrap().status,
        Status::Queued,
        "a job that was only slow is back"
    );
    finish(&*s, &job, &created, Outcome::Done(json!({}))).await;
    assert_eq!(
        s.heartbeat(&job.id, &job.tenant, &job.kind).await.unwrap(),
        Write::Ignored
    );
    assert_eq!(
        s.heartbeat(&JobId::new(), &job.tenant, &job.kind)
            .await
            .unwrap(),
        Write::Missing
    );
}

async fn a_live_job_whose_record_vanished_is_restored_with_its_progress_and_lock(b: Backend) {
    let s = fresh(b);
    let t = tenant();
    let mut job = new_job(&t, "sync");
    job.params = json!({"sources": ["a.jsonl"]});
    let created = create(&*s, &job).await;
    let live = Live {
        status: Status::Running,
        percent: 40,
        step: "syncing a.jsonl (1 of 1)".into(),
    };
    assert_eq!(
        s.restore(&job, created.created_at, &live).await.unwrap(),
        Write::Ignored,
        "a record that exists is left alone"
    );
    s.clear_tenant(&t).await.unwrap(); // the store lost everything
    assert_eq!(
        s.heartbeat(&job.id, &job.tenant, &job.kind).await.unwrap(),
        Write::Missing
    );
    assert_eq!(
        s.restore(&job, created.created_at, &live).await.unwrap(),
        Write::Applied
    );
    let got = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(
        (got.status, got.percent, got.step.as_str()),
        (Status::Running, 40, "syncing a.jsonl (1 of 1)")
    );
    assert_eq!(
        (got.params.clone(), got.created_at),
        (job.params.clone(), created.created_at)
    );
    assert_eq!(
        s.create(new_job(&t, "sync")).await.unwrap(),
        Created::AlreadyRunning(job.id),
        "its lock is back"
    );
    assert_eq!(s.recent(&t, 5).await.unwrap().len(), 1, "listed again");
    // A newer job that took the lock meanwhile wins.
    let other = new_job(&t, "enrich");
    let other_created = create(&*s, &other).await;
    s.clear_tenant(&t).await.unwrap();
    let newer = new_job(&t, "enrich");
    create(&*s, &newer).await;
    assert_eq!(
        s.restore(&other, other_created.created_at, &live)
            .await
            .unwrap(),
        Write::Fenced
    );
}

async fn a_cancelled_job_reads_cancelling_until_it_finishes_cancelled_and_frees_its_lock(
    b: Backend,
) {
    let s = fresh(b);
    let t = tenant();
    let job = new_job(&t, "enrich");
    let created = create(&*s, &job).await;
    s.tick(&job.id, 30, "batch 3 of 10").await.unwrap();
    assert_eq!(s.cancel(&job.id).await.unwrap(), Cancel::Requested);
    let asked = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(asked.status, Status::Cancelling);
    let first_ask = asked.cancel_requested_at.expect("the request is recorded");
    assert_eq!(
        s.cancel(&job.id).await.unwrap(),
        Cancel::Requested,
        "asking twice is harmless"
    );
    assert_eq!(
        s.get(&job.id).await.unwrap().unwrap().cancel_requested_at,
        Some(first_ask)
    );
    assert_eq!(
        s.heartbeat(&job.id, &job.tenant, &job.kind).await.unwrap(),
        Write::CancelRequested,
        "the runner learns of it"
    );
    assert_eq!(
        s.tick(&job.id, 40, "batch 4 of 10").await.unwrap(),
        Write::Applied,
        "a cancelling job still reports"
    );
    assert_eq!(
        s.create(new_job(&t, "enrich")).await.unwrap(),
        Created::AlreadyRunning(job.id),
        "it holds its lock until it stops"
    );
    s.finish(&job, created.created_at, &Outcome::Cancelled, 40)
        .await
        .unwrap();
    let ended = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(
        (ended.status, ended.percent, ended.error.clone()),
        (Status::Cancelled, 40, None)
    );
    assert_eq!(ended.result, serde_json::Value::Null);
    assert!(ended.finished_at.is_some());
    assert_eq!(s.cancel(&job.id).await.unwrap(), Cancel::NotActive);
    assert_eq!(s.cancel(&JobId::new()).await.unwrap(), Cancel::Missing);
    create(&*s, &new_job(&t, "enrich")).await; // the lock is free
}

async fn a_cancelling_job_that_goes_silent_reads_lost(b: Backend) {
    let s = stale_at_once(b);
    let job = new_job(&tenant(), "sync");
    create(&*s, &job).await;
    assert_eq!(s.cancel(&job.id).await.unwrap(), Cancel::Requested);
    assert_eq!(
        s.get(&job.id).await.unwrap().unwrap().status,
        Status::Lost,
        "lost wins: nobody is there to stop it"
    );
}

async fn clearing_a_tenant_removes_its_jobs_and_locks(b: Backend) {
    let s = fresh(b);
    let t = tenant();
    let other = tenant();
    create(&*s, &new_job(&t, "sync")).await;
    create(&*s, &new_job(&t, "enrich")).await;
    let kept = new_job(&other, "sync");
    create(&*s, &kept).await;
    assert_eq!(s.clear_tenant(&t).await.unwrap(), 2);
    assert!(s.recent(&t, 10).await.unwrap().is_empty());
    create(&*s, &new_job(&t, "sync")).await;
    assert!(
        s.get(&kept.id).await.unwrap().is_some(),
        "other tenants are untouched"
    );
}

mod redis_only {
    use super::*;
    use crate::helpers::shared_redis_url;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_key_carries_a_ttl() {
        let settings = settings();
        let prefix = settings.prefix.clone();
        let s = store(Backend::Redis, settings);
        let t = tenant();
        let job = new_job(&t, "sync");
        let created = create(&*s, &job).await;
        s.tick(&job.id, 10, "x").await.unwrap();
        s.heartbeat(&job.id, &job.tenant, &job.kind).await.unwrap();
        create(&*s, &new_job(&t, "enrich")).await;
        let mut conn = redis::Client::open(shared_redis_url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{prefix}:*"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(keys.len(), 5, "two hashes, two locks, one list: {keys:?}");
        for key in &keys {
            let ttl: i64 = redis::cmd("TTL")
                .arg(key)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert!(ttl > 0 && ttl <= 86_400, "{key} has TTL {ttl}");
        }
        finish(&*s, &job, &created, Outcome::Done(json!({}))).await;
        let lock: Option<String> = redis::cmd("GET")
            .arg(format!("{prefix}:lock:{t}:sync"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(lock, None, "finish released the lock in the same step");
        let ttl: i64 = redis::cmd("TTL")
            .arg(format!("{prefix}:{}", job.id))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(ttl > 0, "a finished job keeps its TTL");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_finished_job_deleted_behind_a_replicas_back_is_gone_within_the_cache_window() {
        let settings = StoreSettings {
            finished_cache: Duration::from_millis(1000),
            ..settings()
        };
        let prefix = settings.prefix.clone();
        let s = store(Backend::Redis, settings);
        let job = new_job(&tenant(), "sync");
        let created = create(&*s, &job).await;
        finish(&*s, &job, &created, Outcome::Done(json!({"n": 1}))).await;
        let running = new_job(&tenant(), "sync");
        create(&*s, &running).await;
        assert!(s.get(&job.id).await.unwrap().is_some());
        assert!(s.get(&running.id).await.unwrap().is_some());
        let mut conn = redis::Client::open(shared_redis_url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        for id in [job.id, running.id] {
            let _: () = redis::cmd("DEL")
                .arg(format!("{prefix}:{id}"))
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        assert_eq!(
            s.get(&running.id).await.unwrap(),
            None,
            "an active job is never served from memory"
        );
        assert!(
            s.get(&job.id).await.unwrap().is_some(),
            "a finished one may be, for the window"
        );
        // Only the passing of the window can show that it ends.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(s.get(&job.id).await.unwrap(), None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_key_layout_is_the_documented_one() {
        let settings = StoreSettings {
            prefix: crate::helpers::unique("layout"),
            ..StoreSettings::default()
        };
        let prefix = settings.prefix.clone();
        let s = store(Backend::Redis, settings);
        let t = tenant();
        let job = new_job(&t, "sync");
        create(&*s, &job).await;
        let mut conn = redis::Client::open(shared_redis_url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let lock: String = redis::cmd("GET")
            .arg(format!("{prefix}:lock:{t}:sync"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(lock, job.id.to_string());
        let ids: Vec<String> = redis::cmd("LRANGE")
            .arg(format!("{prefix}:tenant:{t}"))
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(ids, vec![job.id.to_string()]);
        let status: String = redis::cmd("HGET")
            .arg(format!("{prefix}:{}", job.id))
            .arg("status")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(status, "queued");
    }
}
