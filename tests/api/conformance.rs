//! The store contract, run against every store: the embedded `MemoryStore`, and `RedisStore`
//! on a real redis-server and on a real Redis Cluster (three primaries, a replica each). Covers the shared queue (order, cap, cancel while queued), claims
//! as leases (attempt, worker), fencing by claim, one renewal for many runs, recovery of
//! expired leases, release at shutdown, bounded job records, timelines, a tenant's order and
//! pipelines.

use std::sync::Arc;
use std::time::Duration;

use catalog_jobs::jobs::redis::record::Field;
use catalog_jobs::jobs::store::{
    Cancel, Claim, Created, Event, Finish, JobStore, NewJob, NewPipeline, Outcome, Purge,
    Recovered, Release, Renewal, Restore, RunId, RunRef, StoreSettings, Tick,
};
use catalog_jobs::jobs::{JobId, Snapshot, Status, TenantId, REQUEUED_STEP};
use serde_json::json;

use crate::helpers::{claim_next, claim_queued, create, create_at_once, created, end, failure};
use crate::helpers::{
    cluster_job_store, started, store, tenant, tenant_beside, test_kinds, Backend,
};
use crate::helpers::{
    finish, first_run_at, made_by, new_job, ordered, pipeline_of, settings, start,
};

/// Where a case runs: the embedded store, the shared redis-server, or the shared loopback
/// Redis Cluster (on which every script must keep to one slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stores {
    Memory,
    Redis,
    Cluster,
}

/// Runs a case once per store: `every_store!(name)` makes `name::memory`, `name::redis` and
/// `name::cluster` from `async fn name(b: Stores)`.
macro_rules! every_store {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                super::$name(super::Stores::Memory).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                super::$name(super::Stores::Redis).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn cluster() {
                super::$name(super::Stores::Cluster).await
            }
        }
    )*};
}

/// A store of `stores` with `settings` (a namespace of its own on Redis).
fn store_of(stores: Stores, settings: StoreSettings) -> Arc<dyn JobStore> {
    match stores {
        Stores::Memory => store(Backend::Memory, settings),
        Stores::Redis => store(Backend::Redis, settings),
        Stores::Cluster => cluster_job_store(settings),
    }
}

fn fresh(backend: Stores) -> Arc<dyn JobStore> {
    store_of(backend, settings())
}

/// A store whose leases expire after `ms` (the stale threshold).
fn leases_of(backend: Stores, ms: u64, max_attempts: u32) -> Arc<dyn JobStore> {
    store_of(
        backend,
        StoreSettings {
            stale_after: Duration::from_millis(ms),
            max_attempts,
            ..settings()
        },
    )
}

/// A store in which every running job is already stale (threshold 0).
fn stale_at_once(backend: Stores) -> Arc<dyn JobStore> {
    leases_of(backend, 0, 1)
}

/// The job's snapshot, which must show it running, started, in its first attempt, on `worker`.
async fn running_on(s: &dyn JobStore, id: &JobId, worker: &str) -> Snapshot {
    let got = s.get(id).await.unwrap().expect("the job exists");
    assert_eq!(got.status, Status::Running);
    assert_eq!((got.attempt, got.worker.as_deref()), (1, Some(worker)));
    assert!(got.started_at.is_some());
    got
}

/// The ids of the tenant's `limit` most recent jobs, as the store lists them.
async fn recent_ids(s: &dyn JobStore, t: &TenantId, limit: usize) -> Vec<JobId> {
    let recent = s.recent(t, limit).await.unwrap();
    recent.iter().map(|j| j.job_id).collect()
}

/// Lets the store's clock move past a lease of `ms`: the only way to expire it.
async fn outlive(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms + 150)).await;
}

every_store!(
    a_claim_passes_over_a_hundred_queued_jobs_of_kinds_its_worker_does_not_run,
    the_queue_gauge_counts_each_kinds_queued_jobs_and_not_the_running_ones,
    the_active_jobs_of_every_tenant_are_the_queued_and_the_running_ones,
    a_running_job_whose_lease_went_stale_is_listed_active_as_lost,
    a_new_job_is_queued_at_zero_with_its_kind,
    a_claim_makes_it_running_with_attempt_and_worker,
    jobs_are_claimed_in_creation_order_and_an_empty_queue_claims_nothing,
    a_worker_claims_only_kinds_it_runs_and_passes_others_on,
    beyond_the_queue_cap_a_create_is_refused_and_leaves_nothing,
    a_tick_records_percent_and_step,
    finish_with_a_report_is_done_at_100_with_the_result_intact,
    a_failure_carries_the_class_only,
    a_second_job_of_the_same_kind_is_refused_with_the_first_id,
    a_different_kind_runs_concurrently,
    finish_releases_the_lock,
    a_silent_running_job_reads_lost_and_a_queued_one_never_does,
    a_finished_job_is_never_lost,
    an_unknown_id_is_none,
    recent_lists_newest_first_within_the_limit,
    a_tick_on_an_unknown_job_does_not_fail,
    a_lost_job_does_not_block_a_new_create_and_is_fenced_off,
    an_old_jobs_finish_does_not_release_a_newer_jobs_lock,
    a_tick_never_lowers_percent_and_is_fenced_after_finish,
    fifty_concurrent_creates_of_one_tenant_and_kind_have_exactly_one_winner,
    a_repeated_finish_changes_nothing,
    one_renewal_keeps_many_runs_alive_and_answers_each,
    an_expired_lease_is_requeued_with_the_next_attempt_and_the_old_run_is_fenced,
    after_the_last_attempt_a_lost_run_fails_lost_with_its_lock_free,
    with_one_attempt_a_lost_run_reads_lost_and_the_next_create_takes_over,
    a_run_left_lost_under_one_attempt_reads_lost_under_three_and_a_cancel_frees_its_tenant,
    with_one_attempt_a_lost_run_taken_over_reads_failed_lost_in_the_listing_and_not_active,
    with_one_attempt_a_run_claimed_at_its_create_left_lost_reads_lost_attempt_one,
    with_one_attempt_a_run_left_lost_that_comes_back_is_fenced_and_reads_lost_for_good,
    with_one_attempt_a_run_left_lost_is_counted_active_until_the_next_create_takes_over,
    with_one_attempt_cancelling_a_run_left_lost_ends_it_cancelled_at_once_and_frees_its_tenant,
    a_run_lost_after_its_last_attempt_is_cancelled_at_once_and_its_paused_run_is_fenced,
    with_one_attempt_a_tenant_whose_job_reads_lost_is_deleted_and_its_run_writes_nothing_back,
    a_tenant_whose_last_attempt_went_silent_is_deleted_before_any_sweep_and_the_sweep_finds_nothing,
    a_create_names_the_stale_holders_it_took_over_and_only_those,
    a_released_run_goes_back_to_the_head_without_counting_an_attempt,
    a_cancelled_job_reads_cancelling_until_it_finishes_cancelled_and_frees_its_lock,
    a_job_cancelled_while_queued_ends_at_once_and_is_never_claimed,
    a_cancelling_job_that_goes_silent_reads_cancelling_until_the_sweep_ends_it_cancelled,
    trimmed_jobs_that_ended_are_deleted_with_their_listing_entry,
    a_job_created_with_an_empty_queue_is_claimed_for_the_creating_worker_in_the_same_step,
    a_job_created_behind_a_waiting_one_is_queued_so_creation_order_holds,
    a_job_claimed_at_create_whose_worker_dies_is_recovered_and_fenced,
    a_claim_carries_who_started_the_job_in_which_request_and_what_it_retries,
);

async fn a_new_job_is_queued_at_zero_with_its_kind(b: Stores) {
    let s = fresh(b);
    let mut job = new_job(&tenant(), "sync");
    job.params = json!({"sources": ["a.jsonl"]});
    let created = create(&*s, &job).await;
    let got = s.get(&job.id).await.unwrap().expect("the job exists");
    assert_eq!(got, created);
    assert_eq!(got.status, Status::Queued);
    assert_eq!((got.percent, got.attempt, got.max_attempts), (0, 0, 3));
    assert_eq!(got.kind.as_str(), "sync");
    assert_eq!(
        got.params,
        json!({"sources": ["a.jsonl"]}),
        "the record holds what is needed to run it again"
    );
    assert_eq!(
        (got.started_at, got.finished_at, got.worker),
        (None, None, None)
    );
}

async fn a_claim_makes_it_running_with_attempt_and_worker(b: Stores) {
    let s = fresh(b);
    let mut job = new_job(&tenant(), "enrich");
    job.params = json!({"batch": 5});
    create(&*s, &job).await;
    let claim = claim_queued(&*s, "host-a/42").await;
    assert_eq!(claim.job.id, job.id);
    assert_eq!(
        claim.job.params, job.params,
        "the claim carries what runs it"
    );
    assert_eq!(claim.attempt, 1);
    running_on(&*s, &job.id, "host-a/42").await;
    assert_eq!(
        claim_next(&*s, "host-b/7").await,
        None,
        "a job is claimed once"
    );
}

/// Jobs of one slot group share its ready queue (on Redis; the embedded store has one queue).
async fn jobs_are_claimed_in_creation_order_and_an_empty_queue_claims_nothing(b: Stores) {
    let s = fresh(b);
    assert_eq!(claim_next(&*s, "w/1").await, None);
    let mut ids = Vec::new();
    let first = tenant();
    for _ in 0..5 {
        let job = new_job(&tenant_beside(&first), "sync");
        create(&*s, &job).await;
        ids.push(job.id);
    }
    let mut claimed = Vec::new();
    while let Some(c) = claim_next(&*s, "w/1").await {
        claimed.push(c.job.id);
    }
    assert_eq!(claimed, ids);
}

async fn a_worker_claims_only_kinds_it_runs_and_passes_others_on(b: Stores) {
    // Replicas of two versions during a deploy: the old one does not know `k1`.
    let s = fresh(b);
    let new_kind = new_job(&tenant(), "k1");
    create(&*s, &new_kind).await;
    let behind = new_job(&tenant(), "sync");
    create(&*s, &behind).await;
    let old_kinds = [catalog_jobs::jobs::Kind::parse("sync").unwrap()];
    let next = s.claim("old/1", &old_kinds).await.unwrap().expect("queued");
    assert_eq!(
        next.job.id, behind.id,
        "the old worker takes what it can run"
    );
    assert_eq!(
        s.claim("old/1", &old_kinds).await.unwrap(),
        None,
        "and claims nothing once it has seen the whole queue"
    );
    let got = s.get(&new_kind.id).await.unwrap().unwrap();
    assert_eq!(got.status, Status::Queued, "left for a worker that runs it");
    let claimed = claim_queued(&*s, "new/2").await;
    assert_eq!(claimed.job.id, new_kind.id);
}

async fn beyond_the_queue_cap_a_create_is_refused_and_leaves_nothing(b: Stores) {
    let mut capped = settings();
    capped.max_queued = 2;
    let s = store_of(b, capped);
    let t = tenant();
    create(&*s, &new_job(&t, "k1")).await;
    create(&*s, &new_job(&t, "k2")).await;
    let refused = new_job(&t, "k3");
    assert_eq!(s.create(refused.clone()).await.unwrap(), Created::QueueFull);
    assert_eq!(s.get(&refused.id).await.unwrap(), None);
    assert_eq!(s.recent(&t, 10).await.unwrap().len(), 2);
    // A claim makes room; the lock of the refused kind was never taken.
    claim_queued(&*s, "w/1").await;
    create(&*s, &new_job(&t, "k3")).await;
}

async fn a_tick_records_percent_and_step(b: Stores) {
    let s = fresh(b);
    let job = new_job(&tenant(), "enrich");
    let (_, run) = start(&*s, &job).await;
    assert_eq!(
        s.tick(&run, 45, "batch 5 of 11").await.unwrap(),
        Tick::Applied
    );
    let got = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(got.status, Status::Running);
    assert_eq!(got.percent, 45);
    assert_eq!(got.step, "batch 5 of 11");
}

async fn finish_with_a_report_is_done_at_100_with_the_result_intact(b: Stores) {
    let s = fresh(b);
    let job = new_job(&tenant(), "pair");
    let (created, run) = start(&*s, &job).await;
    s.tick(&run, 30, "scoring").await.unwrap();
    let report = json!({"products": 3, "paired": 2, "pairs": [1, 2.5, "x"], "nested": {"ü": null}});
    assert_eq!(
        finish(&*s, &job, &run, &created, Outcome::Done(report.clone())).await,
        Finish::Applied
    );
    let got = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(got.status, Status::Done);
    assert_eq!(got.percent, 100);
    assert_eq!(got.result, report);
    assert_eq!(got.error, None);
    assert!(got.finished_at.is_some());
}

async fn a_failure_carries_the_class_only(b: Stores) {
    let s = fresh(b);
    let job = new_job(&tenant(), "sync");
    let (created, run) = start(&*s, &job).await;
    s.tick(&run, 20, "syncing a (1 of 2)").await.unwrap();
    finish(&*s, &job, &run, &created, failure("SourceUnreachable")).await;
    let got = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(got.status, Status::Failed);
    assert_eq!(got.error.as_deref(), Some("SourceUnreachable"));
    assert_eq!(got.result, serde_json::Value::Null);
    assert_eq!(got.percent, 20, "a failed job keeps the progress it made");

    // The last reported percent comes with the finish, so the last tick needs no write of its own.
    let job = new_job(&tenant(), "sync");
    let (created, run) = start(&*s, &job).await;
    let failed = failure("Panic");
    let end = RunRef::new(&job, &run, created.created_at).ended(&failed, 35);
    s.finish(end).await.unwrap();
    assert_eq!(s.get(&job.id).await.unwrap().unwrap().percent, 35);
}

async fn a_second_job_of_the_same_kind_is_refused_with_the_first_id(b: Stores) {
    let s = fresh(b);
    let t = tenant();
    let first = created(&*s, &t, "sync").await;
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

async fn a_different_kind_runs_concurrently(b: Stores) {
    let s = fresh(b);
    let t = tenant();
    create(&*s, &new_job(&t, "sync")).await;
    create(&*s, &new_job(&t, "enrich")).await;
    create(&*s, &new_job(&tenant(), "sync")).await;
}

async fn finish_releases_the_lock(b: Stores) {
    let s = fresh(b);
    let t = tenant();
    let first = new_job(&t, "sync");
    let (created, run) = start(&*s, &first).await;
    finish(&*s, &first, &run, &created, Outcome::Done(json!({}))).await;
    create(&*s, &new_job(&t, "sync")).await;
}

async fn a_silent_running_job_reads_lost_and_a_queued_one_never_does(b: Stores) {
    let s = stale_at_once(b);
    let waiting = new_job(&tenant(), "sync");
    let job = new_job(&tenant(), "sync");
    let (_, run) = start(&*s, &job).await;
    create(&*s, &waiting).await;
    assert_eq!(s.get(&job.id).await.unwrap().unwrap().status, Status::Lost);
    s.tick(&run, 10, "working").await.unwrap();
    let got = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(
        got.status,
        Status::Lost,
        "lost is derived on read, from the lease"
    );
    assert_eq!(got.percent, 10);
    assert_eq!(
        s.get(&waiting.id).await.unwrap().unwrap().status,
        Status::Queued,
        "a queued job costs nothing and is never lost"
    );
}

async fn a_finished_job_is_never_lost(b: Stores) {
    let s = stale_at_once(b);
    for outcome in [Outcome::Done(json!({"ok": 1})), failure("Panic")] {
        let job = new_job(&tenant(), "sync");
        let (created, run) = start(&*s, &job).await;
        finish(&*s, &job, &run, &created, outcome.clone()).await;
        assert_eq!(
            s.get(&job.id).await.unwrap().unwrap().status,
            outcome.status()
        );
    }
}

async fn an_unknown_id_is_none(b: Stores) {
    let s = fresh(b);
    assert_eq!(s.get(&JobId::new()).await.unwrap(), None);
    assert!(s.recent(&tenant(), 20).await.unwrap().is_empty());
}

async fn recent_lists_newest_first_within_the_limit(b: Stores) {
    let s = fresh(b);
    let t = tenant();
    let mut ids = Vec::new();
    for kind in ["k1", "k2", "k3", "k4"] {
        let job = new_job(&t, kind);
        create(&*s, &job).await;
        ids.push(job.id);
    }
    create(&*s, &new_job(&tenant(), "k1")).await; // another tenant's job stays out
    ids.reverse();
    assert_eq!(recent_ids(&*s, &t, 20).await, ids);
    assert_eq!(recent_ids(&*s, &t, 2).await, ids[..2]);
}

async fn a_tick_on_an_unknown_job_does_not_fail(b: Stores) {
    let s = fresh(b);
    let run = RunId {
        id: JobId::new(),
        claim: 1,
    };
    assert_eq!(s.tick(&run, 50, "x").await.unwrap(), Tick::Missing);
    assert_eq!(
        s.get(&run.id).await.unwrap(),
        None,
        "a tick never creates a job"
    );
}

async fn a_lost_job_does_not_block_a_new_create_and_is_fenced_off(b: Stores) {
    let s = stale_at_once(b);
    let t = tenant();
    let old = new_job(&t, "sync");
    let (old_created, old_run) = start(&*s, &old).await;
    s.tick(&old_run, 40, "halfway").await.unwrap();
    let new = new_job(&t, "sync");
    create(&*s, &new).await;
    // The old process comes back: none of its writes land.
    assert_eq!(
        s.tick(&old_run, 90, "back from the dead").await.unwrap(),
        Tick::Fenced
    );
    assert_eq!(s.renew(&[old_run]).await.unwrap(), vec![Renewal::Fenced]);
    assert_eq!(
        finish(&*s, &old, &old_run, &old_created, Outcome::Done(json!({}))).await,
        Finish::Fenced
    );
    let old_now = s.get(&old.id).await.unwrap().unwrap();
    // Taken over, it ended: failed/Lost, as its takeover recorded it.
    assert_eq!(
        (old_now.status, old_now.percent, old_now.error.as_deref()),
        (Status::Failed, 40, Some("Lost"))
    );
    assert_eq!(
        s.get(&new.id).await.unwrap().unwrap().status,
        Status::Queued
    );
}

async fn an_old_jobs_finish_does_not_release_a_newer_jobs_lock(b: Stores) {
    let s = leases_of(b, 1000, 1);
    let t = tenant();
    let (old, old_created, old_run) = started(&*s, &t, "sync").await;
    outlive(1000).await;
    let new = new_job(&t, "sync");
    create(&*s, &new).await; // takes over the stale holder
    assert_eq!(
        finish(&*s, &old, &old_run, &old_created, failure("Panic")).await,
        Finish::Fenced
    );
    assert_eq!(
        s.create(new_job(&t, "sync")).await.unwrap(),
        Created::AlreadyRunning(new.id),
        "the newer job still holds its lock"
    );
}

async fn a_tick_never_lowers_percent_and_is_fenced_after_finish(b: Stores) {
    let s = fresh(b);
    let job = new_job(&tenant(), "enrich");
    let (created, run) = start(&*s, &job).await;
    s.tick(&run, 60, "batch 6 of 10").await.unwrap();
    s.tick(&run, 30, "batch 3 of 10, reported late")
        .await
        .unwrap();
    assert_eq!(s.get(&job.id).await.unwrap().unwrap().percent, 60);
    s.tick(&run, 200, "over the top").await.unwrap();
    assert_eq!(s.get(&job.id).await.unwrap().unwrap().percent, 100);
    finish(&*s, &job, &run, &created, failure("Panic")).await;
    let before = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(s.tick(&run, 100, "too late").await.unwrap(), Tick::Fenced);
    assert_eq!(s.get(&job.id).await.unwrap().unwrap(), before);
}

async fn fifty_concurrent_creates_of_one_tenant_and_kind_have_exactly_one_winner(b: Stores) {
    let s = fresh(b);
    let t = tenant();
    let mut winners = Vec::new();
    let mut named = Vec::new();
    for answer in create_at_once(&s, 50, || new_job(&t, "sync")).await {
        match answer {
            (id, Created::Created(..)) => winners.push(id),
            (_, Created::AlreadyRunning(holder)) => named.push(holder),
            (_, other) => panic!("only one winner and refusals naming it: {other:?}"),
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

async fn a_repeated_finish_changes_nothing(b: Stores) {
    let s = fresh(b);
    let job = new_job(&tenant(), "pair");
    let (created, run) = start(&*s, &job).await;
    finish(
        &*s,
        &job,
        &run,
        &created,
        Outcome::Done(json!({"pairs": 1})),
    )
    .await;
    let first = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(
        finish(&*s, &job, &run, &created, failure("Panic")).await,
        Finish::AlreadyEnded
    );
    assert_eq!(
        s.get(&job.id).await.unwrap().unwrap(),
        first,
        "a finished job is never changed"
    );
}

async fn one_renewal_keeps_many_runs_alive_and_answers_each(b: Stores) {
    let s = leases_of(b, 1000, 3);
    let mut runs = Vec::new();
    let mut jobs = Vec::new();
    for _ in 0..3 {
        let job = new_job(&tenant(), "sync");
        let (created, run) = start(&*s, &job).await;
        runs.push(run);
        jobs.push((job, created));
    }
    for _ in 0..5 {
        // The only way to let the store's clock move on is to wait for it.
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(s.renew(&runs).await.unwrap(), vec![Renewal::Held; 3]);
        assert!(
            s.recover().await.unwrap().is_empty(),
            "renewed leases are not recovered"
        );
    }
    assert_eq!(
        s.get(&runs[0].id).await.unwrap().unwrap().status,
        Status::Running
    );
    // One asked to stop, one ended, one unknown: each gets its own answer.
    s.cancel(&runs[0].id, "tester").await.unwrap();
    let (job, created) = &jobs[1];
    finish(&*s, job, &runs[1], created, Outcome::Done(json!({}))).await;
    let unknown = RunId {
        id: JobId::new(),
        claim: 1,
    };
    assert_eq!(
        s.renew(&[runs[0], runs[1], runs[2], unknown])
            .await
            .unwrap(),
        vec![
            Renewal::CancelRequested,
            Renewal::Fenced,
            Renewal::Held,
            Renewal::Missing
        ]
    );
}

async fn an_expired_lease_is_requeued_with_the_next_attempt_and_the_old_run_is_fenced(b: Stores) {
    let s = leases_of(b, 300, 3);
    let job = new_job(&tenant(), "sync");
    let (created, old_run) = start(&*s, &job).await;
    s.tick(&old_run, 30, "a third").await.unwrap();
    assert!(
        s.recover().await.unwrap().is_empty(),
        "a live lease is left alone"
    );
    outlive(300).await;
    assert_eq!(
        s.recover().await.unwrap(),
        vec![Recovered::Requeued(job.id)]
    );
    let requeued = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(requeued.status, Status::Queued);
    assert!(requeued.recovered_at.is_some());
    let again = claim_queued(&*s, "host-b/2").await;
    assert_eq!((again.job.id, again.attempt), (job.id, 2));
    // The paused first run comes back: every write is refused.
    assert_eq!(s.tick(&old_run, 90, "late").await.unwrap(), Tick::Fenced);
    assert_eq!(s.renew(&[old_run]).await.unwrap(), vec![Renewal::Fenced]);
    assert_eq!(
        finish(
            &*s,
            &job,
            &old_run,
            &created,
            Outcome::Done(json!({"old": true}))
        )
        .await,
        Finish::Fenced
    );
    assert_eq!(
        finish(
            &*s,
            &job,
            &again.run,
            &created,
            Outcome::Done(json!({"new": true}))
        )
        .await,
        Finish::Applied
    );
    let done = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!((done.status, done.attempt), (Status::Done, 2));
    assert_eq!(done.result, json!({"new": true}));
    assert_eq!(done.worker.as_deref(), Some("host-b/2"));
}

async fn after_the_last_attempt_a_lost_run_fails_lost_with_its_lock_free(b: Stores) {
    let s = leases_of(b, 200, 2);
    let t = tenant();
    let job = new_job(&t, "sync");
    start(&*s, &job).await;
    outlive(200).await;
    assert_eq!(
        s.recover().await.unwrap(),
        vec![Recovered::Requeued(job.id)]
    );
    let second = claim_queued(&*s, "w/2").await;
    assert_eq!(second.attempt, 2);
    outlive(200).await;
    assert_eq!(s.recover().await.unwrap(), vec![Recovered::Lost(job.id)]);
    let got = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(
        (got.status, got.error.as_deref()),
        (Status::Failed, Some("Lost"))
    );
    assert_eq!(claim_next(&*s, "w/3").await, None, "not in the queue");
    create(&*s, &new_job(&t, "sync")).await; // its lock is free
}

/// With one attempt, a started job of a new tenant whose lease expired, left lost by the sweep.
async fn left_lost(b: Stores) -> (Arc<dyn JobStore>, TenantId, NewJob, RunId) {
    let s = leases_of(b, 200, 1);
    let t = tenant();
    let job = new_job(&t, "sync");
    let (_, run) = start(&*s, &job).await;
    outlive(200).await;
    assert_eq!(
        s.recover().await.unwrap(),
        vec![Recovered::LeftLost(job.id)]
    );
    (s, t, job, run)
}

async fn with_one_attempt_a_lost_run_reads_lost_and_the_next_create_takes_over(b: Stores) {
    let (s, t, job, run) = left_lost(b).await;
    assert_eq!(s.get(&job.id).await.unwrap().unwrap().status, Status::Lost);
    create(&*s, &new_job(&t, "sync")).await;
    assert_eq!(s.tick(&run, 50, "late").await.unwrap(), Tick::Fenced);
}

/// A run claimed at its create (its record leaves out claim, attempt and start: lean jobs)
/// left lost by the sweep reads `lost`, attempt 1, started when it was created — the sweep's
/// raised claim once made the record read attempt 0 and "re-queued" (a flaky fault test).
async fn with_one_attempt_a_run_claimed_at_its_create_left_lost_reads_lost_attempt_one(b: Stores) {
    let s = leases_of(b, 200, 1);
    let job = new_job(&tenant(), "sync");
    let made = made_by(s.create_claimed(job.clone(), "w/1").await);
    outlive(200).await;
    assert_eq!(
        s.recover().await.unwrap(),
        vec![Recovered::LeftLost(job.id)]
    );
    let got = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(
        (got.status, got.attempt, got.started_at),
        (Status::Lost, 1, Some(made.created_at)),
        "{got:?}"
    );
}

/// `lost` is final: a run left lost whose process comes back (paused, not dead) is fenced
/// off — its heartbeat, progress and finish land nowhere, and the job never reads running
/// again or takes its lock back.
async fn with_one_attempt_a_run_left_lost_that_comes_back_is_fenced_and_reads_lost_for_good(
    b: Stores,
) {
    let s = leases_of(b, 200, 1);
    let t = tenant();
    let job = new_job(&t, "sync");
    let (created, run) = start(&*s, &job).await;
    s.tick(&run, 30, "a third").await.unwrap();
    outlive(200).await;
    assert_eq!(
        s.recover().await.unwrap(),
        vec![Recovered::LeftLost(job.id)]
    );
    assert_eq!(s.renew(&[run]).await.unwrap(), vec![Renewal::Fenced]);
    assert_eq!(s.tick(&run, 60, "back").await.unwrap(), Tick::Fenced);
    assert_eq!(
        finish(&*s, &job, &run, &created, Outcome::Done(json!({}))).await,
        Finish::Fenced
    );
    let now = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!((now.status, now.percent), (Status::Lost, 30));
    create(&*s, &new_job(&t, "sync")).await; // its lock stayed free
}

/// A run the sweep left lost is still among the active jobs (the overview counts it `lost`,
/// as `status=lost` lists it), and is found by no later sweep; the create that takes it over
/// ends it (it left the lease index, so the overview never counted it).
async fn with_one_attempt_a_run_left_lost_is_counted_active_until_the_next_create_takes_over(
    b: Stores,
) {
    let (s, t, job, _) = left_lost(b).await;
    let active = |s: Arc<dyn JobStore>| async move {
        let jobs = s.active().await.unwrap();
        jobs.iter()
            .map(|j| (j.job_id, j.status))
            .collect::<Vec<_>>()
    };
    assert_eq!(active(s.clone()).await, vec![(job.id, Status::Lost)]);
    assert!(
        s.recover().await.unwrap().is_empty(),
        "no sweep takes it again"
    );
    assert_eq!(active(s.clone()).await, vec![(job.id, Status::Lost)]);
    let next = new_job(&t, "sync");
    create(&*s, &next).await;
    assert_eq!(active(s.clone()).await, vec![(next.id, Status::Queued)]);
}

/// Cancelling a run the sweep left lost (its lease is not due again for a job TTL, and no
/// process runs it) ends it `cancelled` in the cancel itself. It once read `cancelling` for the
/// job TTL: its tenant's next create of the kind, its retry and its tenant's delete refused.
async fn with_one_attempt_cancelling_a_run_left_lost_ends_it_cancelled_at_once_and_frees_its_tenant(
    b: Stores,
) {
    let (s, t, job, run) = left_lost(b).await;
    assert_eq!(s.cancel(&job.id, "ops").await.unwrap(), Cancel::Requested);
    let got = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(
        (got.status, got.cancelled_by.as_deref()),
        (Status::Cancelled, Some("ops")),
        "{got:?}"
    );
    assert!(got.cancel_requested_at.is_some() && got.finished_at.is_some());
    let events = s.timeline(&job.id, None).await.unwrap();
    assert_eq!(
        types(&events)[events.len() - 3..],
        ["lost", "cancel_requested", "finished"]
    );
    assert_eq!(s.cancel(&job.id, "ops").await.unwrap(), Cancel::NotActive);
    // Its run, should its process come back, still lands nowhere.
    assert_eq!(s.tick(&run, 60, "back").await.unwrap(), Tick::Fenced);
    assert_eq!(s.renew(&[run]).await.unwrap(), vec![Renewal::Fenced]);
    assert!(s.active().await.unwrap().is_empty(), "no longer active");
    assert!(s.recover().await.unwrap().is_empty());
    // Its lock is free, and nothing of it holds back its tenant's delete.
    a_new_start_and_the_tenants_delete_go_through(&*s, &t).await;
}

/// Nothing of an ended lost job holds its tenant back: a new start of its kind is accepted
/// (then asked to stop), and the tenant's delete removes both jobs.
async fn a_new_start_and_the_tenants_delete_go_through(s: &dyn JobStore, t: &TenantId) {
    let next = new_job(t, "sync");
    create(s, &next).await;
    assert_eq!(s.cancel(&next.id, "ops").await.unwrap(), Cancel::Requested);
    let purged = s.purge(t, &test_kinds(), &[]).await.unwrap();
    assert!(
        matches!(purged, Purge::Removed { jobs: 2, .. }),
        "{purged:?}"
    );
}

/// A run the sweep left lost under MAX_ATTEMPTS=1, then read by a store opened on the same
/// Redis with MAX_ATTEMPTS=3 (replicas restarted with more attempts): it reads `lost` from
/// the sweep's mark (`lost_ms`), not `queued` ("re-queued") for ever as when the current
/// MAX_ATTEMPTS decided; a cancel ends it cancelled at once, a new start is accepted after
/// it, and the tenant's delete goes through. The embedded store cannot be reopened: its
/// record keeps the attempts its job was created with, so it reads the same.
async fn a_run_left_lost_under_one_attempt_reads_lost_under_three_and_a_cancel_frees_its_tenant(
    b: Stores,
) {
    let one = StoreSettings {
        stale_after: Duration::from_millis(200),
        max_attempts: 1,
        ..settings()
    };
    let first = store_of(b, one.clone());
    let t = tenant();
    let job = new_job(&t, "sync");
    let (_, run) = start(&*first, &job).await;
    outlive(200).await;
    assert_eq!(
        first.recover().await.unwrap(),
        vec![Recovered::LeftLost(job.id)]
    );
    let s = match b {
        Stores::Memory => first,
        _ => store_of(
            b,
            StoreSettings {
                max_attempts: 3,
                ..one
            },
        ),
    };
    let got = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(got.status, Status::Lost, "{got:?}");
    let listed = s.active().await.unwrap();
    assert!(
        listed
            .iter()
            .any(|a| a.job_id == job.id && a.status == Status::Lost),
        "{listed:?}"
    );
    assert!(
        s.recover().await.unwrap().is_empty(),
        "no sweep re-queues it"
    );
    assert_eq!(s.cancel(&job.id, "ops").await.unwrap(), Cancel::Requested);
    let got = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(got.status, Status::Cancelled, "at once: {got:?}");
    assert_eq!(s.tick(&run, 60, "back").await.unwrap(), Tick::Fenced);
    a_new_start_and_the_tenants_delete_go_through(&*s, &t).await;
}

/// A run left lost under MAX_ATTEMPTS=1 whose lock the next create took over is ended: its
/// takeover recorded it `failed`/`Lost` for its tenant's order and its pipeline, and it reads
/// so — it read `lost` for ever, listed by `status=lost` while the stats' `active.lost`
/// (from `active`) did not count it. The listing and the active jobs agree.
async fn with_one_attempt_a_lost_run_taken_over_reads_failed_lost_in_the_listing_and_not_active(
    b: Stores,
) {
    let (s, t, job, _) = left_lost(b).await;
    let next = new_job(&t, "sync");
    create(&*s, &next).await;
    let old = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(
        (old.status, old.error.as_deref()),
        (Status::Failed, Some("Lost")),
        "{old:?}"
    );
    assert!(old.finished_at.is_some(), "{old:?}");
    let listed = s.recent(&t, 10).await.unwrap();
    let lost: Vec<_> = listed.iter().filter(|j| j.status == Status::Lost).collect();
    assert!(lost.is_empty(), "{listed:?}");
    let active = s.active().await.unwrap();
    assert!(active.iter().all(|a| a.job_id != job.id), "{active:?}");
}

/// A job whose second and last attempt (MAX_ATTEMPTS=2) reached 40 % and went silent: it
/// reads `lost` before any sweep comes by. Answers its store, tenant, job and that claim.
async fn lost_on_its_last_attempt(b: Stores) -> (Arc<dyn JobStore>, TenantId, NewJob, Claim) {
    let s = leases_of(b, 200, 2);
    let t = tenant();
    let job = new_job(&t, "sync");
    start(&*s, &job).await;
    outlive(200).await;
    assert_eq!(
        s.recover().await.unwrap(),
        vec![Recovered::Requeued(job.id)]
    );
    let second = claim_queued(&*s, "w/2").await;
    s.tick(&second.run, 40, "halfway").await.unwrap();
    outlive(200).await;
    assert_eq!(s.get(&job.id).await.unwrap().unwrap().status, Status::Lost);
    (s, t, job, second)
}

/// A run whose last attempt went silent reads `lost` before any sweep comes by; cancelled
/// then, it ends `cancelled` at once (not `cancelling` until a sweep), and its run — paused,
/// not dead — that comes back is refused every write: the job stays cancelled.
async fn a_run_lost_after_its_last_attempt_is_cancelled_at_once_and_its_paused_run_is_fenced(
    b: Stores,
) {
    let (s, t, job, second) = lost_on_its_last_attempt(b).await;
    assert_eq!(s.cancel(&job.id, "ops").await.unwrap(), Cancel::Requested);
    let got = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(
        (got.status, got.percent),
        (Status::Cancelled, 40),
        "{got:?}"
    );
    assert!(
        s.recover().await.unwrap().is_empty(),
        "nothing left to sweep"
    );
    assert_eq!(s.tick(&second.run, 90, "back").await.unwrap(), Tick::Fenced);
    let done = Outcome::Done(json!({}));
    let finished = s.finish(second.run_ref().ended(&done, 0)).await.unwrap();
    assert_ne!(finished, Finish::Applied);
    let after = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!((after.status, after.percent), (Status::Cancelled, 40));
    create(&*s, &new_job(&t, "sync")).await; // its lock is free
}

/// A tenant whose job reads `lost` (left lost under MAX_ATTEMPTS=1) is deleted: no run holds
/// that job and none will, so it does not hold the delete back (it answered `StillActive`
/// until a cancel ended it). Its run — paused, not dead — that comes back writes nothing back
/// for the deleted tenant: its tick, renewal, restore and finish are refused.
async fn with_one_attempt_a_tenant_whose_job_reads_lost_is_deleted_and_its_run_writes_nothing_back(
    b: Stores,
) {
    let (s, t, job, run) = left_lost(b).await;
    let was = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(was.status, Status::Lost);
    let purged = s.purge(&t, &test_kinds(), &[]).await.unwrap();
    assert!(
        matches!(purged, Purge::Removed { jobs: 1, .. }),
        "{purged:?}"
    );
    assert_eq!(s.get(&job.id).await.unwrap(), None);
    assert!(s.active().await.unwrap().is_empty(), "no longer active");
    assert!(s.recover().await.unwrap().is_empty());
    assert_ne!(s.tick(&run, 60, "back").await.unwrap(), Tick::Applied);
    assert_ne!(s.renew(&[run]).await.unwrap(), vec![Renewal::Held]);
    let back = RunRef::new(&job, &run, was.created_at);
    let restored = s.restore(back, &first_run_at(60, "back")).await.unwrap();
    assert_eq!(
        restored,
        Restore::Fenced,
        "the tombstone refuses the write-back"
    );
    let done = Outcome::Done(json!({}));
    assert_ne!(
        s.finish(back.ended(&done, 0)).await.unwrap(),
        Finish::Applied
    );
    assert_eq!(s.get(&job.id).await.unwrap(), None, "nothing written back");
    assert!(s.recent(&t, 10).await.unwrap().is_empty());
    assert!(s.active().await.unwrap().is_empty());
    create(&*s, &new_job(&t, "sync")).await; // the tenant works as new
}

/// A run whose last attempt went silent reads `lost` before any sweep comes by: its tenant's
/// delete goes through then, its lease with it, and the sweep that comes by finds nothing.
async fn a_tenant_whose_last_attempt_went_silent_is_deleted_before_any_sweep_and_the_sweep_finds_nothing(
    b: Stores,
) {
    let (s, t, job, second) = lost_on_its_last_attempt(b).await;
    let purged = s.purge(&t, &test_kinds(), &[]).await.unwrap();
    assert!(
        matches!(purged, Purge::Removed { jobs: 1, .. }),
        "{purged:?}"
    );
    assert!(s.recover().await.unwrap().is_empty(), "nothing to sweep");
    assert_ne!(
        s.tick(&second.run, 90, "back").await.unwrap(),
        Tick::Applied
    );
    let done = Outcome::Done(json!({}));
    let finished = s.finish(second.run_ref().ended(&done, 0)).await.unwrap();
    assert_ne!(finished, Finish::Applied);
    assert_eq!(s.get(&job.id).await.unwrap(), None, "nothing written back");
}

/// A take-over ends the stale holder (and its pipeline) inside the create, where no run and no
/// sweep sees it: the create's answer names it so its maker can count those ends.
async fn a_create_names_the_stale_holders_it_took_over_and_only_those(b: Stores) {
    let s = stale_at_once(b);
    let t = tenant();
    let created_over = |c: Created| match c {
        Created::Created(_, took_over) => took_over,
        other => panic!("expected a new job, got {other:?}"),
    };
    let old = new_job(&t, "sync");
    assert_eq!(
        created_over(s.create(old.clone()).await.unwrap()),
        vec![],
        "none held it"
    );
    assert_eq!(claim_queued(&*s, "test/1").await.job.id, old.id);
    let new = new_job(&t, "sync");
    assert_eq!(created_over(s.create(new).await.unwrap()), vec![old.id]);
    claim_queued(&*s, "test/1").await;
    // A pipeline's create takes over a stale holder of any of its steps' kinds.
    let other = tenant();
    let (pair_old, step_old) = (new_job(&other, "pair"), new_job(&other, "sync"));
    start(&*s, &pair_old).await;
    start(&*s, &step_old).await;
    let pipeline = pipeline_of(&other, &["sync", "pair"]);
    let mut took = created_over(s.create_pipeline(pipeline).await.unwrap());
    took.sort_by_key(|id| id.to_string());
    let mut wanted = vec![pair_old.id, step_old.id];
    wanted.sort_by_key(|id| id.to_string());
    assert_eq!(took, wanted);
}

async fn a_released_run_goes_back_to_the_head_without_counting_an_attempt(b: Stores) {
    let s = fresh(b);
    let t = tenant();
    let job = new_job(&t, "sync");
    let (created, run) = start(&*s, &job).await;
    // In the same slot group, so in the same ready queue on Redis.
    let behind = new_job(&tenant_beside(&t), "sync");
    create(&*s, &behind).await;
    assert_eq!(s.release(&run).await.unwrap(), Release::Requeued);
    assert_eq!(
        s.get(&job.id).await.unwrap().unwrap().status,
        Status::Queued
    );
    assert_eq!(s.release(&run).await.unwrap(), Release::Fenced, "once only");
    let again = claim_queued(&*s, "w/2").await;
    assert_eq!(
        (again.job.id, again.attempt),
        (job.id, 1),
        "first in line, same attempt"
    );
    assert_eq!(
        finish(&*s, &job, &run, &created, Outcome::Done(json!({}))).await,
        Finish::Fenced,
        "the given-back run may not write"
    );
}

/// The store's events, once the subscription is live (it says so with a resync).
async fn live_events(s: &dyn JobStore) -> tokio::sync::broadcast::Receiver<Event> {
    let mut events = s.subscribe();
    tokio::time::timeout(Duration::from_secs(5), async {
        while events.recv().await.unwrap() != Event::Resync {}
    })
    .await
    .expect("the subscription goes live");
    events
}

/// The job the next cancel announced to every process names.
async fn next_cancel(events: &mut tokio::sync::broadcast::Receiver<Event>) -> JobId {
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match events.recv().await {
                Ok(Event::Cancel(id)) => return id,
                Ok(_) => continue,
                Err(e) => panic!("events: {e}"),
            }
        }
    })
    .await
    .expect("the cancel is announced to every process")
}

async fn a_cancelled_job_reads_cancelling_until_it_finishes_cancelled_and_frees_its_lock(
    b: Stores,
) {
    let s = fresh(b);
    let t = tenant();
    let job = new_job(&t, "enrich");
    let (created, run) = start(&*s, &job).await;
    let mut events = live_events(&*s).await;
    s.tick(&run, 30, "batch 3 of 10").await.unwrap();
    assert_eq!(
        s.cancel(&job.id, "tester").await.unwrap(),
        Cancel::Requested
    );
    assert_eq!(next_cancel(&mut events).await, job.id);
    let asked = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(asked.status, Status::Cancelling);
    let first_ask = asked.cancel_requested_at.expect("the request is recorded");
    assert_eq!(
        s.cancel(&job.id, "tester").await.unwrap(),
        Cancel::Requested,
        "asking twice is harmless"
    );
    assert_eq!(
        s.get(&job.id).await.unwrap().unwrap().cancel_requested_at,
        Some(first_ask)
    );
    assert_eq!(
        s.renew(&[run]).await.unwrap(),
        vec![Renewal::CancelRequested]
    );
    assert_eq!(
        s.tick(&run, 40, "batch 4 of 10").await.unwrap(),
        Tick::Applied
    );
    assert_eq!(
        s.create(new_job(&t, "enrich")).await.unwrap(),
        Created::AlreadyRunning(job.id),
        "it holds its lock until it stops"
    );
    let partial = json!({"enriched": 4});
    let cancelled = Outcome::Cancelled(partial.clone());
    let end = RunRef::new(&job, &run, created.created_at).ended(&cancelled, 40);
    s.finish(end).await.unwrap();
    let ended = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(
        (ended.status, ended.percent, ended.error.clone()),
        (Status::Cancelled, 40, None)
    );
    assert_eq!(
        ended.result, partial,
        "a cancelled job keeps what it had saved"
    );
    assert!(ended.finished_at.is_some());
    assert_eq!(
        s.cancel(&job.id, "tester").await.unwrap(),
        Cancel::NotActive
    );
    assert_eq!(
        s.cancel(&JobId::new(), "tester").await.unwrap(),
        Cancel::Missing
    );
    create(&*s, &new_job(&t, "enrich")).await; // the lock is free
}

async fn a_job_cancelled_while_queued_ends_at_once_and_is_never_claimed(b: Stores) {
    let s = fresh(b);
    let t = tenant();
    let job = new_job(&t, "sync");
    create(&*s, &job).await;
    let behind = new_job(&tenant(), "sync");
    create(&*s, &behind).await;
    assert_eq!(
        s.cancel(&job.id, "tester").await.unwrap(),
        Cancel::Requested
    );
    let got = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(got.status, Status::Cancelled);
    assert!(got.finished_at.is_some());
    assert_eq!(
        claim_next(&*s, "w/1").await.map(|c| c.job.id),
        Some(behind.id)
    );
    assert_eq!(claim_next(&*s, "w/1").await, None);
    create(&*s, &new_job(&t, "sync")).await; // the lock is free
}

/// `lost` is final, so a job whose end is already decided never reads it: one asked to stop
/// whose worker went silent reads `cancelling` until the sweep ends it `cancelled` (it read
/// `lost` for a moment first, and a watcher that stopped there got the wrong end: a hostile
/// probe's finding on a pipeline's step).
async fn a_cancelling_job_that_goes_silent_reads_cancelling_until_the_sweep_ends_it_cancelled(
    b: Stores,
) {
    // Asked while its lease is fresh (a lease generous for a loaded machine: a job that reads
    // `lost` when asked ends at once instead), then silent past it.
    let s = leases_of(b, 3000, 1);
    let job = new_job(&tenant(), "sync");
    start(&*s, &job).await;
    assert_eq!(
        s.cancel(&job.id, "tester").await.unwrap(),
        Cancel::Requested
    );
    assert_eq!(read(&*s, &job.id).await.status, Status::Cancelling);
    outlive(3000).await;
    assert_eq!(read(&*s, &job.id).await.status, Status::Cancelling);
    // Its end is decided: a create meanwhile is told of it, and does not take it over (a
    // job taken over is never swept, and would read cancelling for ever).
    let t = job.tenant.clone();
    assert_eq!(
        s.create(new_job(&t, "sync")).await.unwrap(),
        Created::AlreadyRunning(job.id)
    );
    s.recover().await.unwrap();
    assert_cancelled_by(&*s, &job.id, "tester").await;
    create(&*s, &new_job(&t, "sync")).await;
}

async fn trimmed_jobs_that_ended_are_deleted_with_their_listing_entry(b: Stores) {
    let mut capped = settings();
    capped.list_cap = 3;
    let s = store_of(b, capped);
    let t = tenant();
    let mut ended = Vec::new();
    for _ in 0..3 {
        let job = new_job(&t, "sync");
        let (created, run) = start(&*s, &job).await;
        finish(&*s, &job, &run, &created, Outcome::Done(json!({}))).await;
        ended.push(job.id);
    }
    let active = new_job(&t, "enrich");
    create(&*s, &active).await;
    assert_eq!(
        s.get(&ended[0]).await.unwrap(),
        None,
        "the oldest ended job went with its entry"
    );
    assert!(s.get(&ended[1]).await.unwrap().is_some());
    // An active job that is trimmed keeps its record until it ends.
    for kind in ["k1", "k2", "k3"] {
        create(&*s, &new_job(&t, kind)).await;
    }
    assert!(
        s.get(&active.id).await.unwrap().is_some(),
        "active jobs are never deleted"
    );
    assert_eq!(s.recent(&t, 10).await.unwrap().len(), 3);
}

#[path = "conformance_keys.rs"]
mod keys;

#[path = "conformance_commit.rs"]
mod commit;

mod redis_only {
    use super::*;
    use crate::helpers::{config_set, keys_matching, memory_usage, shared_redis};
    use catalog_jobs::jobs::browse::EVERYONE_CAP;
    use catalog_jobs::jobs::keys::{Group, Keys};

    async fn redis() -> redis::aio::MultiplexedConnection {
        shared_redis().await
    }

    /// A Redis store in a namespace of its own, and the namespace's key prefix.
    fn redis_store() -> (Arc<dyn JobStore>, String) {
        let settings = settings();
        let prefix = settings.prefix.clone();
        (store(Backend::Redis, settings), prefix)
    }

    /// Stands for a Redis that came back empty: every key of the namespace is gone.
    async fn lose_everything(prefix: &str) {
        let mut conn = redis().await;
        let keys = keys_matching(&mut conn, &format!("{prefix}:*")).await;
        if !keys.is_empty() {
            let _: () = redis::cmd("DEL")
                .arg(keys)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_job_key_carries_a_ttl() {
        let (s, prefix) = redis_store();
        let t = tenant();
        let job = new_job(&t, "sync");
        let (created, run) = start(&*s, &job).await;
        s.tick(&run, 10, "x").await.unwrap();
        s.renew(&[run]).await.unwrap();
        let mut keyed = new_job(&t, "enrich");
        keyed.idempotency_key = Some("retry-me".into());
        create(&*s, &keyed).await;
        let mut conn = redis().await;
        let keys = keys_matching(&mut conn, &format!("{prefix}:*")).await;
        // The queue and the lease index belong to the tenant's slot group, not to a job: they
        // hold only active jobs' ids and empty themselves as jobs are claimed and end. The
        // group's part of the cross-tenant index and of the tenant picker too, each bounded by
        // its cap.
        let (k, group) = (Keys::new(&prefix), Group::of(&t));
        let shared = [
            k.leases(group),
            k.queue(group),
            k.everyone(group),
            k.recent_tenants(group),
        ];
        assert_eq!(
            keys.len(),
            12,
            "two hashes (each holding its timeline), two locks, one listing (which also counts \
             the minute's creates), one idempotency key and the tenant's set of their names, \
             the process registry, queue, leases, the index and the picker: {keys:?}"
        );
        for key in keys.iter().filter(|k| !shared.contains(k)) {
            let ttl: i64 = redis::cmd("TTL")
                .arg(key)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert!(ttl > 0 && ttl <= 86_400, "{key} has TTL {ttl}");
        }
        finish(&*s, &job, &run, &created, Outcome::Done(json!({}))).await;
        let lock: Option<String> = redis::cmd("GET")
            .arg(k.lock(&t, &job.kind))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(lock, None, "finish released the lock in the same step");
        let leased: i64 = redis::cmd("ZCARD")
            .arg(k.leases(group))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(leased, 0, "finish dropped the lease in the same step");
        let ttl: i64 = redis::cmd("TTL")
            .arg(k.job(&job.id))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(ttl > 0, "a finished job keeps its TTL");
    }

    /// Jobs ended for the overview's figures: many, of one kind, two outcomes.
    const ENDS: u64 = 30;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_overviews_counts_are_a_hash_an_hour_that_expires_with_a_field_per_minute_kind_and_outcome(
    ) {
        let (s, prefix) = redis_store();
        // One tenant: its ends are counted in its slot group's hashes.
        let t = tenant();
        for i in 0..ENDS {
            let job = new_job(&t, "sync");
            let (created, run) = start(&*s, &job).await;
            let outcome = match i % 2 {
                0 => Outcome::Done(json!({})),
                _ => failure("SourceUnreachable"),
            };
            finish(&*s, &job, &run, &created, outcome).await;
        }
        let mut conn = redis().await;
        let keys = keys_matching(&mut conn, &format!("{prefix}:*:stats:*")).await;
        let base = Keys::new(&prefix).base(Group::of(&t));
        assert!(keys.iter().all(|k| k.starts_with(&base)), "{keys:?}");
        // The ends may straddle an hour's turn, and so a minute's: two hashes, two minutes.
        assert!((1..=2).contains(&keys.len()), "a hash an hour: {keys:?}");
        let (mut fields, mut counted) = (0, 0);
        for key in &keys {
            let ttl: i64 = redis::cmd("TTL")
                .arg(key)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert!(
                ttl > 0 && ttl <= 26 * 3600,
                "{key} expires within 26 hours: {ttl}"
            );
            let counts: Vec<u64> = redis::cmd("HVALS")
                .arg(key)
                .query_async(&mut conn)
                .await
                .unwrap();
            fields += counts.len();
            counted += counts.iter().sum::<u64>();
        }
        assert_eq!(counted, ENDS, "every end counted once");
        assert!(
            fields <= 2 * 2,
            "a field per minute, kind and outcome, not per job: {fields} for {ENDS} ends"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_finish_whose_record_vanished_writes_it_back_whole() {
        let (s, prefix) = redis_store();
        let t = tenant();
        let job = NewJob {
            params: json!({"sources": ["x.jsonl"]}),
            ..new_job(&t, "sync")
        };
        let (created, run) = start(&*s, &job).await;
        lose_everything(&prefix).await;
        assert_eq!(s.get(&job.id).await.unwrap(), None);
        let report = json!({"totals": {"read": 5}});
        assert_eq!(
            finish(&*s, &job, &run, &created, Outcome::Done(report.clone())).await,
            Finish::Applied
        );
        let got = s.get(&job.id).await.unwrap().expect("written back");
        assert_eq!((got.status, got.percent), (Status::Done, 100));
        assert_eq!(got.result, report);
        assert_eq!(got.params, job.params);
        assert_eq!(got.created_at, created.created_at);
        assert_eq!(s.recent(&t, 5).await.unwrap().len(), 1, "listed again");
        create(&*s, &new_job(&t, "sync")).await; // and it holds no lock
    }

    /// The runner writes back the job its claim answered: its audit trail must be in it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_record_written_back_after_redis_lost_it_keeps_who_started_it_and_in_which_request() {
        let (s, prefix) = redis_store();
        let t = tenant();
        for ending in [false, true] {
            let mut job = audited_job(&t);
            let kind = if ending { "enrich" } else { "sync" };
            job.kind = catalog_jobs::jobs::Kind::parse(kind).unwrap();
            create(&*s, &job).await;
            let claim = claim_queued(&*s, "w/1").await;
            lose_everything(&prefix).await;
            if ending {
                let outcome = Outcome::Done(json!({}));
                let answer = s.finish(claim.run_ref().ended(&outcome, 0));
                assert_eq!(answer.await.unwrap(), Finish::Applied);
            } else {
                let live = first_run_at(10, "x");
                let answer = s.restore(claim.run_ref(), &live);
                assert_eq!(answer.await.unwrap(), Restore::Restored);
            }
            let got = s.get(&job.id).await.unwrap().expect("written back");
            assert_eq!(
                (got.created_by, got.request_id, got.retry_of),
                (
                    Some("alice".into()),
                    Some("req-alice-1".into()),
                    job.origin.retry_of
                ),
                "{kind}: the audit trail survives the lost record"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_vanished_record_is_not_written_back_over_a_newer_lock() {
        let (s, prefix) = redis_store();
        let t = tenant();
        let (old, old_created, old_run) = started(&*s, &t, "sync").await;
        lose_everything(&prefix).await;
        let new = created(&*s, &t, "sync").await;
        assert_eq!(
            finish(&*s, &old, &old_run, &old_created, Outcome::Done(json!({}))).await,
            Finish::Fenced
        );
        assert_eq!(
            s.get(&old.id).await.unwrap(),
            None,
            "fencing wins over writing back"
        );
        let live = first_run_at(40, "x");
        assert_eq!(
            s.restore(RunRef::new(&old, &old_run, old_created.created_at), &live)
                .await
                .unwrap(),
            Restore::Fenced
        );
        assert_eq!(
            s.create(new_job(&t, "sync")).await.unwrap(),
            Created::AlreadyRunning(new.id)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_live_job_whose_record_vanished_is_restored_with_its_progress_lease_and_lock() {
        let (s, prefix) = redis_store();
        let t = tenant();
        let mut job = new_job(&t, "sync");
        job.params = json!({"sources": ["a.jsonl"]});
        let (created, run) = start(&*s, &job).await;
        let live = first_run_at(40, "syncing a.jsonl (1 of 1)");
        assert_eq!(
            s.restore(RunRef::new(&job, &run, created.created_at), &live)
                .await
                .unwrap(),
            Restore::Present,
            "a record that exists is left alone"
        );
        lose_everything(&prefix).await;
        assert_eq!(s.renew(&[run]).await.unwrap(), vec![Renewal::Missing]);
        assert_eq!(
            s.restore(RunRef::new(&job, &run, created.created_at), &live)
                .await
                .unwrap(),
            Restore::Restored
        );
        let got = s.get(&job.id).await.unwrap().unwrap();
        assert_eq!(
            (got.status, got.percent, got.step.as_str(), got.attempt),
            (Status::Running, 40, "syncing a.jsonl (1 of 1)", 1)
        );
        let restored = s.timeline(&job.id, None).await.unwrap();
        assert_eq!(
            types(&restored),
            ["restored"],
            "a new timeline, in the same step"
        );
        assert_eq!(
            (restored[0].percent, restored[0].extra["attempt"].clone()),
            (40, json!(1))
        );
        assert_eq!(
            (got.params.clone(), got.created_at),
            (job.params.clone(), created.created_at)
        );
        assert_eq!(
            s.renew(&[run]).await.unwrap(),
            vec![Renewal::Held],
            "the run holds it again"
        );
        assert_eq!(
            s.create(new_job(&t, "sync")).await.unwrap(),
            Created::AlreadyRunning(job.id),
            "its lock is back"
        );
        assert_eq!(s.recent(&t, 5).await.unwrap().len(), 1, "listed again");
        let index = s.index_page(None, EVERYONE_CAP).await.unwrap();
        assert_eq!(
            index,
            vec![(created.created_at, job.id)],
            "back in the operators' index, under its create's time"
        );
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
        let (created, run) = start(&*s, &job).await;
        finish(&*s, &job, &run, &created, Outcome::Done(json!({"n": 1}))).await;
        let running = new_job(&tenant(), "sync");
        create(&*s, &running).await;
        assert!(s.get(&job.id).await.unwrap().is_some());
        assert!(s.get(&running.id).await.unwrap().is_some());
        let mut conn = shared_redis().await;
        for id in [job.id, running.id] {
            let _: () = redis::cmd("DEL")
                .arg(Keys::new(&prefix).job(&id))
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
        let mut job = new_job(&t, "sync");
        job.idempotency_key = Some("nightly:2026-11-30".into());
        create(&*s, &job).await;
        // Every key of the tenant and its jobs carries its slot group's hash tag, and the
        // job's id names that group.
        let tag = Group::of(&t).tag();
        assert_eq!(job.id.group(), Some(Group::of(&t).index() as u8));
        let mut conn = shared_redis().await;
        let lock: String = redis::cmd("GET")
            .arg(format!("{prefix}:{{{tag}}}:lock:{t}:sync"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(lock, job.id.to_string());
        let listed: Vec<String> = redis::cmd("ZREVRANGE")
            .arg(format!("{prefix}:{{{tag}}}:tenant:{t}"))
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .unwrap();
        let (counted, ids): (Vec<String>, Vec<String>) =
            listed.into_iter().partition(|m| JobId::parse(m).is_err());
        assert_eq!(ids, vec![job.id.to_string()]);
        let status: String = redis::cmd("HGET")
            .arg(format!("{prefix}:{{{tag}}}:{}", job.id))
            .arg(Field::Status.name())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(status, "queued");
        let named: String = redis::cmd("HGET")
            .arg(format!(
                "{prefix}:{{{tag}}}:idem:{t}:sync:nightly:2026-11-30"
            ))
            .arg("job")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(named, job.id.to_string(), "the key may itself hold `:`");
        assert_eq!(
            counted.len(),
            1,
            "one fixed-window counter per tenant and minute"
        );
    }

    /// A busy slot group never holds back another: a worker's next job comes from the next
    /// group that has work (round robin), not from the group of the job it just finished.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_busy_slot_group_never_holds_back_another() {
        for s in [
            store(Backend::Redis, settings()),
            cluster_job_store(settings()),
        ] {
            // The busy group comes first in the store's round (a new store starts at the
            // first group), so it is the one served first.
            let busy = std::iter::repeat_with(tenant)
                .find(|t| Group::of(t).index() < 40)
                .expect("most tenants are in the first 40 groups");
            for _ in 0..3 {
                create(&*s, &new_job(&tenant_beside(&busy), "sync")).await;
            }
            let other = std::iter::repeat_with(tenant)
                .find(|t| Group::of(t) > Group::of(&busy))
                .expect("a later group has tenants");
            let lone = new_job(&other, "sync");
            create(&*s, &lone).await;
            let kinds = [catalog_jobs::jobs::Kind::parse("sync").unwrap()];
            let mut order = Vec::new();
            let mut next = s.claim_many("w/1", &kinds, 1).await.unwrap().pop();
            while let Some(claim) = next {
                order.push(claim.job.id);
                let done = Outcome::Done(json!({}));
                let (finished, then) = s
                    .finish_and_claim(claim.run_ref().ended(&done, 0), "w/1", &kinds)
                    .await
                    .unwrap();
                assert_eq!(finished, Finish::Applied);
                next = match then {
                    Some(then) => Some(then),
                    None => s.claim_many("w/1", &kinds, 1).await.unwrap().pop(),
                };
            }
            assert_eq!(order.len(), 4, "{order:?}");
            let lone_at = order.iter().position(|id| *id == lone.id);
            assert!(
                lone_at.is_some_and(|at| at <= 1),
                "the other group's job waited behind the busy group's: {order:?}"
            );
        }
    }

    /// A job made before slot groups has a v4 id that names none: on a single Redis its
    /// record stays under the bare prefix, where every script and read still finds it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_whose_id_names_no_group_lives_and_ends_under_the_bare_prefix() {
        let (s, prefix) = redis_store();
        let t = tenant();
        let job = NewJob {
            id: JobId::new(),
            ..new_job(&t, "sync")
        };
        assert_eq!(Group::of_job(&job.id), None);
        let (created, run) = start(&*s, &job).await;
        s.tick(&run, 40, "half").await.unwrap();
        assert_eq!(s.renew(&[run]).await.unwrap(), vec![Renewal::Held]);
        finish(&*s, &job, &run, &created, Outcome::Done(json!({}))).await;
        let mut conn = redis().await;
        let status: String = redis::cmd("HGET")
            .arg(format!("{prefix}:{}", job.id))
            .arg(Field::Status.name())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(status, "done");
        let read = s.get(&job.id).await.unwrap().expect("the job reads");
        assert_eq!((read.status, read.percent), (Status::Done, 100));
        assert_eq!(recent_ids(&*s, &t, 5).await, vec![job.id]);
    }

    /// How many calls of `command` Redis's `INFO commandstats` counts.
    fn calls(stats: &str, command: &str) -> u64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .and_then(|rest| rest.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }

    /// Lean jobs: a poll of a job is one read (`HGETALL`); Redis's clock, on which a read
    /// judges staleness, is read at most once a second, not once a poll.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_polls_are_one_read_each_and_the_store_clock_is_read_once_a_second() {
        let redis = crate::helpers::RedisServer::start(false);
        let s = catalog_jobs::jobs::redis::RedisStore::open(&redis.url(), settings()).unwrap();
        let job = new_job(&tenant(), "sync");
        create(&s, &job).await;
        let mut conn = redis.connection().await;
        crate::helpers::reset_stats(&mut conn).await;
        let began = std::time::Instant::now();
        const POLLS: u64 = 50;
        for _ in 0..POLLS {
            let got = s.get(&job.id).await.unwrap().expect("the job");
            assert_eq!(got.status, Status::Queued);
        }
        let seconds = began.elapsed().as_secs();
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(calls(&stats, "hgetall"), POLLS, "{stats}");
        assert!(
            calls(&stats, "time") <= 1 + seconds,
            "TIME at most once a second ({seconds} s): {stats}"
        );
    }

    /// How many of the job store's Function libraries Redis holds.
    async fn libraries(conn: &mut redis::aio::MultiplexedConnection) -> usize {
        let list: redis::Value = redis::cmd("FUNCTION")
            .arg("LIST")
            .query_async(conn)
            .await
            .unwrap();
        format!("{list:?}").matches("catalog_jobs_").count()
    }

    /// Lean jobs: the job scripts are one Redis Function library, called with `FCALL` (its
    /// head runs once at load, not at every call as a script's would), and a Redis that lost
    /// it (restarted empty, `FUNCTION FLUSH`) is given it again by the next call.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_job_scripts_are_a_function_library_given_again_to_a_redis_that_lost_it() {
        let redis = crate::helpers::RedisServer::start(false);
        let s = catalog_jobs::jobs::redis::RedisStore::open(&redis.url(), settings()).unwrap();
        let mut conn = redis.connection().await;
        let first = new_job(&tenant(), "sync");
        let (created, run) = start(&s, &first).await;
        finish(&s, &first, &run, &created, Outcome::Done(json!({}))).await;
        assert!(libraries(&mut conn).await >= 1, "the library is loaded");
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(calls(&stats, "fcall") >= 2, "{stats}");
        assert_eq!(
            calls(&stats, "evalsha") + calls(&stats, "eval"),
            0,
            "{stats}"
        );
        let _: () = redis::cmd("FUNCTION")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .unwrap();
        let second = new_job(&tenant(), "sync");
        let (created, run) = start(&s, &second).await;
        finish(&s, &second, &run, &created, Outcome::Done(json!({}))).await;
        let got = s.get(&second.id).await.unwrap().expect("the job");
        assert_eq!(got.status, Status::Done);
        assert!(
            libraries(&mut conn).await >= 1,
            "the library is loaded again"
        );
    }

    /// Lean jobs: on a single Redis a finish hands its worker the next job in its own call,
    /// from the group the round robin serves next — here another group's, whose job the
    /// dispatcher would otherwise claim with a call of its own (two calls a job, not three).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_finish_claims_its_workers_next_job_from_another_group_in_its_own_call() {
        let (redis, s, kinds) = drained().await;
        let first = new_job(&tenant(), "sync");
        create(&s, &first).await;
        let claim = s.claim_many("w/1", &kinds, 1).await.unwrap().pop();
        let claim = claim.expect("the first job is claimed");
        assert_eq!(claim.job.id, first.id);
        let other = std::iter::repeat_with(tenant)
            .find(|t| Group::of(t) != Group::of(&first.tenant))
            .expect("tenants fall in every group");
        let next = new_job(&other, "sync");
        create(&s, &next).await;
        let mut conn = redis.connection().await;
        let done = Outcome::Done(json!({}));
        let ended = claim.run_ref().ended(&done, 0);
        let (stats, (finished, then)) = counted(&mut conn, async {
            s.finish_and_claim(ended, "w/1", &kinds).await.unwrap()
        })
        .await;
        assert_eq!(finished, Finish::Applied);
        let then = then.expect("the other group's job, claimed in the finish's call");
        assert_eq!(then.job.id, next.id);
        assert_eq!(
            calls(&stats, "fcall"),
            1,
            "one call ends one job and starts the next: {stats}"
        );
        let read = s.get(&next.id).await.unwrap().expect("the job reads");
        assert_eq!(read.status, Status::Running);
        assert_eq!(read.worker.as_deref(), Some("w/1"));
        assert_eq!(
            s.get(&first.id).await.unwrap().unwrap().status,
            Status::Done
        );
        assert!(
            s.claim_many("w/1", &kinds, 4).await.unwrap().is_empty(),
            "nothing is left to claim"
        );
    }

    /// Lean jobs: a job this process queued is claimed in one call: its create told the
    /// process the job stands in its group's queue, so the claim names its record at once (it
    /// named none before, and was answered the queue's head, and called again).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_job_queued_here_is_claimed_in_one_call() {
        let (redis, s, kinds) = drained().await;
        let job = new_job(&tenant(), "sync");
        create(&s, &job).await;
        let mut conn = redis.connection().await;
        let (stats, claims) = counted(&mut conn, s.claim_many("w/1", &kinds, 4)).await;
        let claimed: Vec<JobId> = claims.unwrap().iter().map(|c| c.job.id).collect();
        assert_eq!(claimed, vec![job.id]);
        assert_eq!(calls(&stats, "fcall"), 1, "{stats}");
    }

    /// A Redis of its own, its store, and the test kind, with every group's mark cleared by
    /// a claim that found nothing (a new store marks them all).
    async fn drained() -> (
        crate::helpers::RedisServer,
        catalog_jobs::jobs::redis::RedisStore,
        [catalog_jobs::jobs::Kind; 1],
    ) {
        let redis = crate::helpers::RedisServer::start(false);
        let s = catalog_jobs::jobs::redis::RedisStore::open(&redis.url(), settings()).unwrap();
        let kinds = [catalog_jobs::jobs::Kind::parse("sync").unwrap()];
        assert!(s.claim_many("w/1", &kinds, 4).await.unwrap().is_empty());
        (redis, s, kinds)
    }

    /// What `step` answers, and Redis's `INFO commandstats` counted over it alone.
    async fn counted<T>(
        conn: &mut redis::aio::MultiplexedConnection,
        step: impl std::future::Future<Output = T>,
    ) -> (String, T) {
        crate::helpers::reset_stats(conn).await;
        let answer = step.await;
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(conn)
            .await
            .unwrap();
        (stats, answer)
    }

    /// Every command Redis's `INFO commandstats` counts (the `FCALL`s and the commands inside
    /// them), but `counted`'s own `CONFIG RESETSTAT`.
    fn commands(stats: &str) -> u64 {
        stats
            .lines()
            .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(":calls="))
            .filter(|(name, _)| !name.starts_with("config"))
            .filter_map(|(_, rest)| rest.split(',').next()?.parse::<u64>().ok())
            .sum()
    }

    /// Lean jobs: the harness's job — its tenant's first, ordered, claimed for the worker of
    /// the process that accepted it — is created in one call of 13 commands (the `FCALL`
    /// and what it runs), not 19: its empty listing says the tenant created nothing this
    /// minute (no `ZSCORE`), and the count is written in the listing's own `ZADD` (no
    /// `ZINCRBY`); alone in its tenant's order it stands in no lane (no `RPUSH` and `EXPIRE`
    /// of one). Its finish is one call of 7, not 11: the lock read and released with one
    /// `GETDEL`, and no lane read or dropped (`LRANGE`, `DEL`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_tenants_first_job_is_created_in_13_commands_and_finished_in_7() {
        let (redis, s, _) = drained().await;
        let mut conn = redis.connection().await;
        let job = ordered(&tenant(), "sync");
        let (stats, made) = counted(&mut conn, s.create_claimed(job.clone(), "w/1")).await;
        let made = made_by(made);
        assert_eq!(made.status, Status::Running);
        assert_eq!(calls(&stats, "fcall"), 1, "{stats}");
        assert_eq!(
            calls(&stats, "zscore") + calls(&stats, "zincrby"),
            0,
            "{stats}"
        );
        assert_eq!(calls(&stats, "rpush"), 0, "no lane: {stats}");
        assert!(commands(&stats) <= 13, "{stats}");
        let lane = Keys::new(&s.settings().prefix).lane(&job.tenant);
        let exists: u64 = redis::cmd("EXISTS")
            .arg(&lane)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(exists, 0, "a lone ordered job stands in no lane");
        let run = job.clone().first_claim(made.created_at).run;
        let done = Outcome::Done(json!({}));
        let ended = RunRef::new(&job, &run, made.created_at).ended(&done, 0);
        let (stats, finished) = counted(&mut conn, s.finish(ended)).await;
        assert_eq!(finished.unwrap(), Finish::Applied);
        assert_eq!(calls(&stats, "get"), 0, "{stats}");
        assert_eq!(calls(&stats, "getdel"), 1, "{stats}");
        assert_eq!(calls(&stats, "lrange") + calls(&stats, "del"), 0, "{stats}");
        // (An hour's first end in the group also sets its stats bucket's expiry: EXPIREAT.)
        assert!(commands(&stats) - calls(&stats, "expireat") <= 7, "{stats}");
        let lock = Keys::new(&s.settings().prefix).lock(&job.tenant, &job.kind);
        let held: Option<String> = redis::cmd("GET")
            .arg(&lock)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(held, None, "the lock is released");
        // The count written with the listing holds: a second create this minute reads 1.
        let limited = catalog_jobs::jobs::redis::RedisStore::open(
            &redis.url(),
            StoreSettings {
                creates_per_minute: 1,
                prefix: s.settings().prefix.clone(),
                ..settings()
            },
        )
        .unwrap();
        crate::helpers::clear_of_a_minute_edge().await;
        let t = tenant();
        create(&limited, &ordered(&t, "sync")).await;
        let again = limited.create(ordered(&t, "enrich")).await.unwrap();
        assert!(matches!(again, Created::RateLimited(_)), "{again:?}");
    }

    /// Lean jobs: a finish that claims nothing sends no claim (no `''` queue and worker: two
    /// arguments less, each ~1,150 Redis instructions), a done one no status (two more), and
    /// it is answered a word, not a table
    /// (`applied`, `ended`: ~7,000 instructions less for Redis to reply). The call is read
    /// back from Redis's slow log (every call logged) and made again as it was sent: its job
    /// has ended, so it answers the word `ended`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_done_finish_claiming_nothing_sends_no_claim_nor_status_and_is_answered_a_word()
    {
        let (redis, s, _) = drained().await;
        let mut conn = redis.connection().await;
        let job = ordered(&tenant(), "sync");
        log_every_call(&mut conn).await;
        let made = made_by(s.create_claimed(job.clone(), "w/1").await);
        let run = job.clone().first_claim(made.created_at).run;
        let done = Outcome::Done(json!({}));
        let ended = RunRef::new(&job, &run, made.created_at).ended(&done, 0);
        assert_eq!(s.finish(ended).await.unwrap(), Finish::Applied);
        let finish = fcall_args(&mut conn, "_finish").await.remove(0);
        // The settings last; before them the job's own four its run holds (tenant, kind,
        // created_ms, pipeline), and before those the outcome's last value, not '' and ''; a
        // done outcome names no status.
        assert_eq!(finish[finish.len() - 3], made.created_at.to_string());
        assert_ne!(finish[finish.len() - 6], "", "{finish:?}");
        assert!(!finish.iter().any(|arg| arg == "status"), "{finish:?}");
        let again: redis::Value = called(&finish).query_async(&mut conn).await.unwrap();
        assert_eq!(again, redis::Value::BulkString(b"ended".to_vec()));
    }

    /// Lean jobs: a create that waits for no job and took none over is answered its time
    /// alone, no table (Redis turns a table into its reply ~7,000 instructions dearer): an
    /// integer when it claimed its job (a queued one, its string: `commit::
    /// one_call_of_several_creates_answers_each_as_alone_and_a_refusal_changes_nothing`). The
    /// create is read back from Redis's slow log and made again once its job has ended (its
    /// lock free): claimed again, answered its time as an integer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_create_claimed_with_nothing_ahead_is_answered_its_time_alone() {
        let (redis, s, _) = drained().await;
        let mut conn = redis.connection().await;
        let job = new_job(&tenant(), "sync");
        log_every_call(&mut conn).await;
        let made = made_by(s.create_claimed(job.clone(), "w/1").await);
        let create = fcall_args(&mut conn, "_create").await.remove(0);
        let run = job.clone().first_claim(made.created_at).run;
        let done = Outcome::Done(json!({}));
        let ended = RunRef::new(&job, &run, made.created_at).ended(&done, 0);
        assert_eq!(s.finish(ended).await.unwrap(), Finish::Applied);
        let again: redis::Value = called(&create).query_async(&mut conn).await.unwrap();
        let redis::Value::Int(now) = again else {
            panic!("claimed: its time alone, an integer: {again:?}")
        };
        assert!(now >= made.created_at as i64, "{now}");
        let job = s.get(&job.id).await.unwrap().expect("the job reads");
        assert_eq!(job.status, Status::Running, "claimed again");
    }

    /// Lean jobs: a create that claims its job reads in the same step, the job's start,
    /// whether the key its kind probes exists (`JobStore::create_probing`: the products key
    /// an enrich's quick answer would read next, one round trip before its end): absent, it
    /// says so; holding a product, it does not; and a job it queues (a job of its slot group
    /// waits in the ready queue) reads nothing and says nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_create_that_claims_its_job_tells_whether_its_probe_exists() {
        let (redis, s, _) = drained().await;
        let mut conn = redis.connection().await;
        let catalog = catalog_jobs::catalog::products::CatalogKeys::new("catalog");
        let (empty, stocked) = (tenant(), tenant());
        let _: () = redis::cmd("HSET")
            .arg(catalog.products(&stocked))
            .arg("p-1")
            .arg("{}")
            .query_async(&mut conn)
            .await
            .unwrap();
        let probing = |t: &TenantId| {
            let (s, probe) = (&s, catalog.products(t));
            let job = new_job(t, "enrich");
            async move { s.create_probing(job, "w/1", &probe).await.unwrap() }
        };
        for (t, absent) in [(&empty, true), (&stocked, false)] {
            let (made, probed) = probing(t).await;
            let Created::Created(made, _) = made else {
                panic!("created: {made:?}")
            };
            assert_eq!(made.status, Status::Running, "claimed at its create");
            assert_eq!(probed, absent, "{t}: the products key absent");
        }
        let queued = tenant();
        let mut behind = tenant();
        while Group::of(&behind) != Group::of(&queued) {
            behind = tenant();
        }
        created(&s, &queued, "enrich").await;
        let (made, probed) = probing(&behind).await;
        let Created::Created(made, _) = made else {
            panic!("created: {made:?}")
        };
        assert_eq!(
            made.status,
            Status::Queued,
            "a job waits in its group's queue"
        );
        assert!(!probed, "a job not claimed reads no probe");
    }

    /// Lean jobs: a tenant's first ordered job stands in no lane while it is alone, and the
    /// tenant's next create puts it there first: the job created behind it waits for it, the
    /// one after waits for that one, and its end releases the next (the order holds as with
    /// a lane from the start). A lone job that ended is not put back in any lane.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_lone_first_job_joins_its_lane_when_its_tenant_creates_the_next() {
        let (redis, s, _) = drained().await;
        let mut conn = redis.connection().await;
        let t = tenant();
        let lane = Keys::new(&s.settings().prefix).lane(&t);
        let first = ordered(&t, "sync");
        let made = made_by(s.create_claimed(first.clone(), "w/1").await);
        assert!(lane_of(&mut conn, &lane).await.is_empty(), "alone: no lane");
        let second = ordered(&t, "enrich");
        let waiting = create(&s, &second).await;
        assert_eq!(waiting.waiting_for, Some(first.id));
        let third = ordered(&t, "pair");
        assert_eq!(create(&s, &third).await.waiting_for, Some(second.id));
        let ids = [first.id, second.id, third.id].map(|id| id.to_string());
        assert_eq!(
            lane_of(&mut conn, &lane).await,
            ids,
            "the first joined at the head"
        );
        let run = first.clone().first_claim(made.created_at).run;
        let done = Outcome::Done(json!({}));
        let ended = RunRef::new(&first, &run, made.created_at).ended(&done, 0);
        assert_eq!(s.finish(ended).await.unwrap(), Finish::Applied);
        let released = s.get(&second.id).await.unwrap().expect("the job reads");
        assert_eq!(
            (released.status, released.waiting_for),
            (Status::Queued, None)
        );
        let behind = s.get(&third.id).await.unwrap().expect("the job reads");
        assert_eq!(behind.waiting_for, Some(second.id));
        assert_eq!(lane_of(&mut conn, &lane).await, ids[1..]);
        // A tenant whose lone first job ended: its next job runs at once, in a lane of its own.
        // (The released job is claimed first: the next tenant's jobs may share its group's
        // queue, where a create claims only with nothing queued ahead of it.)
        let enrich = [catalog_jobs::jobs::Kind::parse("enrich").unwrap()];
        let claimed = s.claim_many("w/2", &enrich, 4).await.unwrap();
        assert_eq!(
            claimed.len(),
            1,
            "the released job alone is claimed: {claimed:?}"
        );
        let u = tenant();
        let alone = ordered(&u, "sync");
        let made = made_by(s.create_claimed(alone.clone(), "w/1").await);
        let run = alone.clone().first_claim(made.created_at).run;
        let ended = RunRef::new(&alone, &run, made.created_at).ended(&done, 0);
        assert_eq!(s.finish(ended).await.unwrap(), Finish::Applied);
        let next = ordered(&u, "enrich");
        let made = made_by(s.create_claimed(next.clone(), "w/1").await);
        assert_eq!((made.status, made.waiting_for), (Status::Running, None));
        let u_lane = Keys::new(&s.settings().prefix).lane(&u);
        assert_eq!(lane_of(&mut conn, &u_lane).await, [next.id.to_string()]);
    }

    /// The ids in the lane at `lane`, head first.
    async fn lane_of(conn: &mut redis::aio::MultiplexedConnection, lane: &str) -> Vec<String> {
        redis::cmd("LRANGE")
            .arg(lane)
            .arg(0)
            .arg(-1)
            .query_async(conn)
            .await
            .unwrap()
    }

    /// Lean jobs: a finish whose process knows of no queue with work (no group marked: no
    /// wake-up heard, nothing left by a claim) claims nothing in its call — it popped its own
    /// group's empty queue before (`LPOP`, ~10k of Redis's instructions a harness job); one
    /// whose group a create of this process marked still claims that job in the same call.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_finish_claims_nothing_while_no_queue_is_marked_and_the_marked_one_in_its_call()
    {
        let (redis, s, kinds) = drained().await;
        let mut conn = redis.connection().await;
        let t = tenant();
        let job = ordered(&t, "sync");
        let made = made_by(s.create_claimed(job.clone(), "w/1").await);
        let run = job.clone().first_claim(made.created_at).run;
        let done = Outcome::Done(json!({}));
        let ended = RunRef::new(&job, &run, made.created_at).ended(&done, 0);
        let (stats, answer) = counted(&mut conn, s.finish_and_claim(ended, "w/1", &kinds)).await;
        let (finished, next) = answer.unwrap();
        assert_eq!((finished, next.is_none()), (Finish::Applied, true));
        assert_eq!(calls(&stats, "fcall"), 1, "{stats}");
        assert_eq!(calls(&stats, "lpop"), 0, "no queue popped: {stats}");
        // A job this process queued marks its group: the next finish claims it in its call.
        let first = ordered(&tenant(), "sync");
        let made = made_by(s.create_claimed(first.clone(), "w/1").await);
        let queued = new_job(&tenant(), "sync");
        create(&s, &queued).await;
        let run = first.clone().first_claim(made.created_at).run;
        let ended = RunRef::new(&first, &run, made.created_at).ended(&done, 0);
        let (stats, answer) = counted(&mut conn, s.finish_and_claim(ended, "w/1", &kinds)).await;
        let (finished, next) = answer.unwrap();
        assert_eq!(finished, Finish::Applied);
        assert_eq!(next.map(|c| c.job.id), Some(queued.id), "{stats}");
        assert_eq!(calls(&stats, "fcall"), 1, "{stats}");
    }

    /// Lean jobs: a job's life asks Redis nothing of who follows its tenant (a `PUBSUB
    /// NUMSUB` a step, ~10k of Redis's instructions, two a job, before): a process's listener
    /// names the tenant channels it follows to the job library, which the scripts look up in
    /// their own state. A tenant nobody follows has nothing published; one another process
    /// follows (a second store on the same Redis) hears the job's end.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_jobs_life_asks_redis_nothing_of_who_follows_its_tenant() {
        use catalog_jobs::jobs::watch::Change;
        let (redis, s, _) = drained().await;
        let mut conn = redis.connection().await;
        let job = ordered(&tenant(), "sync");
        let (stats, made) = counted(&mut conn, s.create_claimed(job.clone(), "w/1")).await;
        let made = made_by(made);
        assert_eq!(calls(&stats, "pubsub|numsub"), 0, "{stats}");
        assert_eq!(
            calls(&stats, "publish"),
            0,
            "nobody follows the tenant: {stats}"
        );
        let other = catalog_jobs::jobs::redis::RedisStore::open(
            &redis.url(),
            StoreSettings {
                prefix: s.settings().prefix.clone(),
                ..settings()
            },
        )
        .unwrap();
        let mut watch = other.watch_tenant(&job.tenant).await;
        let run = job.clone().first_claim(made.created_at).run;
        let done = Outcome::Done(json!({}));
        let ended = RunRef::new(&job, &run, made.created_at).ended(&done, 0);
        let (stats, finished) = counted(&mut conn, s.finish(ended)).await;
        assert_eq!(finished.unwrap(), Finish::Applied);
        assert_eq!(calls(&stats, "pubsub|numsub"), 0, "{stats}");
        assert_eq!(calls(&stats, "publish"), 1, "the follower is told: {stats}");
        loop {
            let change = tokio::time::timeout(Duration::from_secs(10), watch.changes.recv())
                .await
                .expect("the end reaches the other process's watcher within 10 s")
                .expect("the watch lives");
            if let Change::Job(c) = change {
                assert_eq!(c.job_id, job.id.to_string());
                if c.kind_of_event == "finished" {
                    break;
                }
            }
        }
    }

    /// Lean jobs: a job claimed at its create is written without its claim, attempt and start
    /// (three fields fewer to write and keep): its worker and no claim say them — claim 1,
    /// attempt 1, started when it was created. It reads as before, its run holds it, and a
    /// claim after it was given back is its second (the first run is fenced off) and keeps
    /// its attempt.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_job_claimed_at_its_create_keeps_no_claim_attempt_or_start() {
        let (redis, s, _) = drained().await;
        let mut conn = redis.connection().await;
        let job = ordered(&tenant(), "sync");
        let made = made_by(s.create_claimed(job.clone(), "w/1").await);
        let record = Keys::new(&s.settings().prefix).job(&job.id);
        let stored: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
            .arg(&record)
            .query_async(&mut conn)
            .await
            .unwrap();
        for field in [Field::Claim, Field::Attempt, Field::StartedMs] {
            assert!(!stored.contains_key(field.name()), "{field:?}: {stored:?}");
        }
        assert_eq!(stored[Field::Worker.name()], "w/1");
        let read = s.get(&job.id).await.unwrap().unwrap();
        assert_eq!(read.status, Status::Running);
        assert_eq!((read.attempt, read.started_at), (1, Some(made.created_at)));
        let run = job.clone().first_claim(made.created_at).run;
        assert_eq!(s.tick(&run, 10, "working").await.unwrap(), Tick::Applied);
        assert_eq!(s.release(&run).await.unwrap(), Release::Requeued);
        let again = claim_queued(&s, "w/2").await;
        assert_eq!(
            (again.job.id, again.run.claim, again.attempt),
            (job.id, 2, 1)
        );
        assert_eq!(s.tick(&run, 20, "late").await.unwrap(), Tick::Fenced);
        let read = s.get(&job.id).await.unwrap().unwrap();
        assert_eq!(
            read.started_at,
            Some(made.created_at),
            "started when it was created"
        );
    }

    /// Lean jobs: a job claimed at its create stores no `started` event (its record implies
    /// it: seq 1, at its creation, attempt 1 by its worker). Its timeline reads it as before, its
    /// watchers hear it, and a claim after the job was given back stores it before the record
    /// stops implying it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_job_claimed_at_its_create_stores_no_started_event() {
        use catalog_jobs::jobs::watch::Change;
        let (redis, s, _) = drained().await;
        let mut conn = redis.connection().await;
        let job = ordered(&tenant(), "sync");
        let mut watch = s.watch_tenant(&job.tenant).await;
        let made = made_by(s.create_claimed(job.clone(), "w/1").await);
        let record = Keys::new(&s.settings().prefix).job(&job.id);
        let stored = stored_fields(&mut conn, &record).await;
        assert!(!stored.contains_key("@1"), "{stored:?}");
        let first = s.timeline(&job.id, None).await.unwrap();
        assert_eq!(types(&first), ["created", "started"]);
        let started = &first[1];
        assert_eq!(
            (started.at, started.status.as_str()),
            (made.created_at, "running")
        );
        assert_eq!(started.extra["attempt"], 1);
        assert_eq!(started.extra["worker"], "w/1");
        let mut heard = Vec::new();
        while heard.len() < 2 {
            let change = tokio::time::timeout(Duration::from_secs(10), watch.changes.recv())
                .await
                .expect("the create's events reach the watcher within 10 s")
                .expect("the watch lives");
            if let Change::Job(c) = change {
                heard.push((c.id, c.kind_of_event));
            }
        }
        let read: Vec<_> = first
            .iter()
            .map(|e| (e.id.clone(), e.kind.clone()))
            .collect();
        assert_eq!(
            heard, read,
            "the watcher heard the events the timeline reads"
        );
        let run = job.clone().first_claim(made.created_at).run;
        assert_eq!(s.release(&run).await.unwrap(), Release::Requeued);
        claim_queued(&s, "w/2").await;
        let stored = stored_fields(&mut conn, &record).await;
        assert!(
            stored.contains_key("@1"),
            "stored once claimed again: {stored:?}"
        );
        let again = s.timeline(&job.id, None).await.unwrap();
        assert_eq!(types(&again), ["created", "started", "released", "started"]);
        assert_eq!(again[1], first[1], "the first start reads as it did");
        assert_eq!(again[3].extra["worker"], "w/2");
    }

    /// Lean jobs: a job ending leaves another job's lock as it was (the lock it took expired
    /// and another job took it): `GETDEL` reads and releases it in one command, and puts back
    /// a lock it finds held by another.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_job_ending_puts_back_a_lock_another_job_holds() {
        let (redis, s, _) = drained().await;
        let mut conn = redis.connection().await;
        let job = new_job(&tenant(), "sync");
        let (made, run) = start(&s, &job).await;
        let lock = Keys::new(&s.settings().prefix).lock(&job.tenant, &job.kind);
        let other = JobId::for_tenant(&job.tenant).to_string();
        let _: () = redis::cmd("SET")
            .arg(&lock)
            .arg(&other)
            .arg("EX")
            .arg(86_400)
            .query_async(&mut conn)
            .await
            .unwrap();
        let outcome = Outcome::Done(json!({}));
        assert_eq!(
            finish(&s, &job, &run, &made, outcome).await,
            Finish::Applied
        );
        let held: Option<String> = redis::cmd("GET")
            .arg(&lock)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(held.as_deref(), Some(other.as_str()));
        let ttl: i64 = redis::cmd("TTL")
            .arg(&lock)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(ttl > 0, "the lock put back keeps an expiry: {ttl}");
    }

    /// Lean jobs: a claim takes each job off the ready queue with one `LPOP` (no `LINDEX`
    /// first); a job whose record the call did not name (another process queued it) is put
    /// back at the head, so the queue keeps its order and the claim's next call takes it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_claim_takes_a_job_with_one_pop_and_puts_back_one_it_did_not_name() {
        let (redis, s, kinds) = drained().await;
        let other = catalog_jobs::jobs::redis::RedisStore::open(
            &redis.url(),
            StoreSettings {
                prefix: s.settings().prefix.clone(),
                ..settings()
            },
        )
        .unwrap();
        let t = tenant();
        let (mine, theirs) = (new_job(&t, "sync"), new_job(&tenant_beside(&t), "sync"));
        create(&s, &mine).await;
        create(&other, &theirs).await;
        let mut conn = redis.connection().await;
        let (stats, claims) = counted(&mut conn, s.claim_many("w/1", &kinds, 2)).await;
        let claimed: Vec<JobId> = claims.unwrap().iter().map(|c| c.job.id).collect();
        assert_eq!(claimed, vec![mine.id, theirs.id], "{stats}");
        assert_eq!(calls(&stats, "lindex"), 0, "{stats}");
        // Its own job, theirs (not named: put back), theirs again in the next call.
        assert_eq!(calls(&stats, "lpop"), 3, "{stats}");
        assert_eq!(calls(&stats, "lpush"), 1, "{stats}");
        assert_eq!(calls(&stats, "fcall"), 2, "{stats}");
    }

    /// The harness's job: ordered, its tenant's first, claimed at its create for `w/1`; and
    /// when it was created.
    async fn claimed_at_create(s: &catalog_jobs::jobs::redis::RedisStore) -> (NewJob, u64) {
        let job = ordered(&tenant(), "sync");
        let made = made_by(s.create_claimed(job.clone(), "w/1").await);
        (job, made.created_at)
    }

    /// Lean jobs: a finished job's record keeps no field a reader can tell from the others —
    /// no `updated_ms` (an ended job reads as updated when it finished) and no event step
    /// that is its type's usual one (`queued`, `starting`, `finished`) — so an ordered job
    /// claimed at its create and done keeps at most 470 bytes by `MEMORY USAGE` (504 before,
    /// 440 now; the harness's job 552 -> 488), and reads as before.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_finished_jobs_record_keeps_no_field_a_reader_can_tell_from_the_others() {
        let (redis, s, _) = drained().await;
        let mut conn = redis.connection().await;
        let (job, created_at) = claimed_at_create(&s).await;
        let run = job.clone().first_claim(created_at).run;
        let done = Outcome::Done(json!({"products": 0, "extracted": 0, "skipped": 0}));
        let ended = RunRef::new(&job, &run, created_at).ended(&done, 0);
        assert_eq!(s.finish(ended).await.unwrap(), Finish::Applied);
        let record = Keys::new(&s.settings().prefix).job(&job.id);
        let stored = stored_fields(&mut conn, &record).await;
        let bytes = memory_usage(&mut conn, &record).await;
        assert!(bytes <= 470, "{bytes} bytes: {stored:?}");
        assert!(!stored.contains_key(Field::UpdatedMs.name()), "{stored:?}");
        assert!(
            stored
                .iter()
                .filter(|(name, _)| name.starts_with('@'))
                .all(|(_, event)| event.ends_with('|')),
            "{stored:?}"
        );
        let read = s.get(&job.id).await.unwrap().expect("the job reads");
        assert_eq!(read.status, Status::Done);
        assert_eq!(Some(read.updated_at), read.finished_at);
        let steps: Vec<String> = s
            .timeline(&job.id, None)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.step)
            .collect();
        assert_eq!(steps, ["queued", "starting", "finished"]);
    }

    /// Lean jobs: a job's first claim from the queue writes no claim, attempt, updated_ms or
    /// heartbeat_ms, nor its `started` event when it is the job's second: the record implies
    /// them (claim 1, attempt 1, each time its start, the event at its start), as a job
    /// claimed at its create already does: ~50 bytes of the harness's finished record. It
    /// reads as before, and a later claim stores that start before its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_first_claim_from_the_queue_writes_only_what_its_record_cannot_tell() {
        let (redis, s, _) = drained().await;
        let mut conn = redis.connection().await;
        let job = ordered(&tenant(), "sync");
        create(&s, &job).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        let claimed = claim_queued(&s, "w/1").await;
        let record = Keys::new(&s.settings().prefix).job(&job.id);
        let stored = stored_fields(&mut conn, &record).await;
        let left_out = [
            Field::Claim,
            Field::Attempt,
            Field::UpdatedMs,
            Field::HeartbeatMs,
        ];
        for name in left_out.map(Field::name).into_iter().chain(["@1"]) {
            assert!(!stored.contains_key(name), "{name}: {stored:?}");
        }
        let read = s.get(&job.id).await.unwrap().expect("the job reads");
        let started = read.started_at.expect("it started");
        assert!(started > read.created_at, "{read:?}");
        assert_eq!((read.status, read.attempt), (Status::Running, 1));
        assert_eq!((claimed.run.claim, claimed.attempt), (1, 1));
        assert_eq!((read.updated_at, read.heartbeat_at), (started, started));
        let first = s.timeline(&job.id, None).await.unwrap();
        assert_eq!(types(&first), ["created", "started"]);
        assert_eq!(
            (first[1].id.clone(), first[1].at),
            (format!("{started}-1"), started)
        );
        assert_eq!(first[1].extra["worker"], "w/1", "{first:?}");
        // Given back and claimed again: the first start is stored as it read.
        assert_eq!(s.release(&claimed.run).await.unwrap(), Release::Requeued);
        let again = claim_queued(&s, "w/2").await;
        assert_eq!((again.run.claim, again.attempt), (2, 1));
        let now = s.timeline(&job.id, None).await.unwrap();
        assert_eq!(types(&now), ["created", "started", "released", "started"]);
        assert_eq!(now[..2], first[..]);
        assert_eq!(now[3].extra["worker"], "w/2", "{now:?}");
        let done = Outcome::Done(json!({"products": 0, "extracted": 0, "skipped": 0}));
        let ended = RunRef::new(&job, &again.run, again.created_at).ended(&done, 0);
        assert_eq!(s.finish(ended).await.unwrap(), Finish::Applied);
        let read = s.get(&job.id).await.unwrap().expect("the job reads");
        assert_eq!((read.attempt, read.started_at), (1, Some(started)));
    }

    /// The harness's job as its lifecycle makes it: an ordered enrich job of its own tenant
    /// (36 characters), by an anonymous caller in a request of its own.
    fn harness_job() -> NewJob {
        let mut job = ordered(
            &TenantId::parse(&format!("{:-<36}", crate::helpers::unique("lg"))).unwrap(),
            "sync",
        );
        job.params = json!({"force": false});
        job.origin.created_by = "anonymous".into();
        job.origin.request_id = JobId::new().to_string();
        job
    }

    /// Lean jobs: the harness's job claimed from the queue (not at its create, as most are
    /// under its load), done, keeps its record's listpack (~310 bytes) in jemalloc's 320-byte
    /// class: at most 440 bytes by `MEMORY USAGE` with this test's longer key (568 before: a
    /// listpack of ~422 bytes, in the 448-byte class; the harness's record 552 -> 424). Its
    /// first claim writes less (above), and a done job's record implies its usual `created`
    /// and `finished` events, its percent (100), step (`finished`) and last heartbeat (its
    /// end); it reads as before.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_job_claimed_from_the_queue_and_done_keeps_at_most_440_bytes() {
        let (redis, s, _) = drained().await;
        let mut conn = redis.connection().await;
        let job = harness_job();
        create(&s, &job).await;
        let claimed = claim_queued(&s, "vm/3128").await;
        let done = Outcome::Done(json!({"products": 0, "extracted": 0, "unextractable": 0,
            "skipped": 0, "batches": 0}));
        let ended = RunRef::new(&job, &claimed.run, claimed.created_at).ended(&done, 0);
        assert_eq!(s.finish(ended).await.unwrap(), Finish::Applied);
        let record = Keys::new(&s.settings().prefix).job(&job.id);
        let bytes = memory_usage(&mut conn, &record).await;
        let stored = stored_fields(&mut conn, &record).await;
        assert!(bytes <= 440, "{bytes} bytes: {stored:?}");
        for name in [Field::Percent, Field::HeartbeatMs].map(Field::name) {
            assert!(!stored.contains_key(name), "{name}: {stored:?}");
        }
        let read = s.get(&job.id).await.unwrap().expect("the job reads");
        assert_eq!((read.percent, read.step.as_str()), (100, "finished"));
        assert_eq!(Some(read.heartbeat_at), read.finished_at);
        let timeline = s.timeline(&job.id, None).await.unwrap();
        assert_eq!(types(&timeline), ["created", "started", "finished"]);
        let created = read.created_at;
        assert_eq!(timeline[0].id, format!("{created}-0"));
        assert_eq!(timeline[2].id, format!("{}-2", read.finished_at.unwrap()));
        assert_eq!(
            (timeline[2].percent, timeline[2].status.as_str()),
            (100, "done")
        );
    }

    /// Lean jobs: a job created without a token stores no creator (`by` and `anonymous`: 15
    /// bytes of its record's listpack, which put the harness's done record, ~270 bytes, in
    /// jemalloc's 320-byte class, now 256) and reads `anonymous` — in its snapshot and in the
    /// claim its worker is handed, as the API's word for it; a named creator is stored and
    /// reads as named.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_an_anonymous_jobs_record_stores_no_creator_and_reads_anonymous() {
        use catalog_jobs::jobs::redis::record::ANONYMOUS;
        assert_eq!(ANONYMOUS, catalog_jobs::api::auth::ANONYMOUS);
        let (redis, s, _) = drained().await;
        let mut conn = redis.connection().await;
        let keys = Keys::new(&s.settings().prefix);
        let job = harness_job();
        create(&s, &job).await;
        let claimed = claim_queued(&s, "vm/3128").await;
        assert_eq!(claimed.job.origin.created_by, ANONYMOUS);
        let stored = stored_fields(&mut conn, &keys.job(&job.id)).await;
        assert!(!stored.contains_key(Field::CreatedBy.name()), "{stored:?}");
        let read = s.get(&job.id).await.unwrap().expect("the job reads");
        assert_eq!(read.created_by.as_deref(), Some(ANONYMOUS));
        let mut named = harness_job();
        named.origin.created_by = "acme-ci".into();
        create(&s, &named).await;
        let stored = stored_fields(&mut conn, &keys.job(&named.id)).await;
        assert_eq!(
            stored.get(Field::CreatedBy.name()).map(String::as_str),
            Some("acme-ci")
        );
        let read = s.get(&named.id).await.unwrap().expect("the job reads");
        assert_eq!(read.created_by.as_deref(), Some("acme-ci"));
    }

    /// Lean jobs: a finish is called without the job's own fields (tenant, kind, params,
    /// creator, request, order, created_ms: 14 arguments), which it reads only to write back a
    /// record Redis lost — that call answers `missing`, having written nothing, and the store
    /// calls again with them (a_finish_whose_record_vanished_writes_it_back_whole) — nor a
    /// done job's step (`finished`: finish.lua implies it) nor its status (`done`), nor, claiming
    /// nothing, the claim's queue and worker ('' and '') — so the usual finish is one call of 22
    /// arguments (24 with the status, 26 with the claim's two, 28 with the step, 42 with the
    /// fields), four of them what its run holds of the job and its finish reads from no record:
    /// tenant, kind, created_ms and pipeline ('' for none), after the outcome (an argument
    /// costs Redis ~1,150 instructions, a field asked of the record ~2,500); on a single Redis
    /// no group's `migrating` key (lean_a_single_redis_call_names_no_migrating_key).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_finish_sends_the_jobs_own_fields_only_to_write_back_a_lost_record() {
        let (redis, s, _) = drained().await;
        let mut conn = redis.connection().await;
        let (job, created_at) = claimed_at_create(&s).await;
        let run = job.clone().first_claim(created_at).run;
        let done = Outcome::Done(json!({}));
        let ended = RunRef::new(&job, &run, created_at).ended(&done, 0);
        log_every_call(&mut conn).await;
        assert_eq!(s.finish(ended).await.unwrap(), Finish::Applied);
        let argc = fcall_argc(&mut conn, "finish").await;
        assert_eq!(argc, [22], "one call of 22 arguments");
        let finish = fcall_args(&mut conn, "_finish").await.remove(0);
        let held = [
            job.tenant.to_string(),
            job.kind.as_str().to_owned(),
            created_at.to_string(),
            String::new(),
        ];
        // Then the settings, last.
        let at = finish.len() - 1 - held.len();
        assert_eq!(finish[at..finish.len() - 1], held, "{finish:?}");
    }

    /// Lean jobs: a single Redis moves no slot, so its calls name no group's `migrating` key
    /// (a key named costs Redis ~1,150 instructions a call): the group's queue first, then the
    /// step's own keys. (On a cluster every call names it second: `cluster_reshard`.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_single_redis_call_names_no_migrating_key() {
        let (redis, s, _) = drained().await;
        let mut conn = redis.connection().await;
        log_every_call(&mut conn).await;
        let (job, created_at) = claimed_at_create(&s).await;
        let run = job.clone().first_claim(created_at).run;
        let done = Outcome::Done(json!({}));
        let ended = RunRef::new(&job, &run, created_at).ended(&done, 0);
        assert_eq!(s.finish(ended).await.unwrap(), Finish::Applied);
        let keys = Keys::new(&s.settings().prefix);
        let group = Group::of(&job.tenant);
        for script in ["_create", "_finish"] {
            let call = fcall_args(&mut conn, script).await.remove(0);
            let n: usize = call[2].parse().unwrap();
            let named = &call[3..3 + n];
            assert_eq!(named[0], keys.queue(group), "{call:?}");
            let migrating = keys.migrating(group);
            let no_group_key = named[1..]
                .iter()
                .all(|k| k.contains(':') && *k != migrating);
            assert!(
                no_group_key,
                "{script}: its step's own keys after the queue: {call:?}"
            );
        }
    }

    /// Lean jobs: a create without an idempotency key sends neither a key nor the parameters'
    /// fingerprint (the key was '' and the fingerprint, 64 hex digits, sent with every
    /// create); nor the step `queued` (create.lua writes it when none is sent), nor the
    /// names of the four fields every job has (tenant, kind, creator and request come first,
    /// unnamed): the harness's create is one call of 27 arguments on a single Redis (no
    /// `migrating` key: 28 with it, 34 before the last two, 36 before the first; an enrich's
    /// claim 28, the key it probes). A keyed create sends both (the idempotency tests:
    /// replayed, key reused).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_create_without_an_idempotency_key_sends_no_key_and_no_fingerprint() {
        let (redis, s, _) = drained().await;
        let mut conn = redis.connection().await;
        log_every_call(&mut conn).await;
        claimed_at_create(&s).await;
        assert_eq!(fcall_argc(&mut conn, "create").await, [27]);
    }

    /// Lean jobs: a claim answers the fields the worker is handed (the claim and attempt it
    /// wrote, then the job's own fields: tenant, kind, params, creator, request, order,
    /// created_ms), not the whole record — its events, status and times were ~20 strings more
    /// a claim for Redis to answer and the store to read.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_claim_answers_the_fields_the_worker_is_handed_not_the_whole_record() {
        use catalog_jobs::jobs::redis::scripts;
        let (redis, s, _) = drained().await;
        let mut conn = redis.connection().await;
        let job = ordered(&tenant(), "sync");
        create(&s, &job).await;
        let keys = Keys::new(&s.settings().prefix);
        let group = Group::of(&job.tenant);
        let route = scripts::Route {
            queue: keys.queue(group),
            migrating: keys.migrating(group),
            declared: vec![keys.leases(group), keys.job(&job.id)],
            cluster: false,
        };
        let mut claim = scripts::invocation(&scripts::CLAIM, s.settings(), route);
        claim.arg("w/1").arg(1).arg("sync");
        let answer: Vec<Vec<String>> = claim.invoke_async(&mut conn).await.unwrap();
        assert_eq!(answer[0][0], job.id.to_string(), "{answer:?}");
        let names: Vec<&str> = answer[0][1..]
            .iter()
            .step_by(2)
            .map(String::as_str)
            .collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            ["a", "by", "c", "cl", "id", "io", "k", "p", "t"],
            "{answer:?}"
        );
        let read = s.get(&job.id).await.unwrap().expect("the job reads");
        assert_eq!((read.status, read.attempt), (Status::Running, 1));
    }

    /// A record's fields by stored name, as Redis holds them.
    async fn stored_fields(
        conn: &mut redis::aio::MultiplexedConnection,
        record: &str,
    ) -> std::collections::HashMap<String, String> {
        redis::cmd("HGETALL")
            .arg(record)
            .query_async(conn)
            .await
            .unwrap()
    }

    /// Has Redis log every call in its slow log, emptied.
    async fn log_every_call(conn: &mut redis::aio::MultiplexedConnection) {
        for (name, value) in [("slowlog-log-slower-than", "0"), ("slowlog-max-len", "128")] {
            config_set(conn, name, value).await;
        }
        let _: () = redis::cmd("SLOWLOG")
            .arg("RESET")
            .query_async(conn)
            .await
            .unwrap();
    }

    /// The arguments of each `FCALL` of `script` the slow log holds, newest first: FCALL, the
    /// function, its keys and arguments (at most 32, the last then `... (n more arguments)`).
    async fn fcall_args(
        conn: &mut redis::aio::MultiplexedConnection,
        script: &str,
    ) -> Vec<Vec<String>> {
        // Each entry: id, time, duration, the call's arguments, client, name.
        let log: Vec<(u64, u64, u64, Vec<String>, String, String)> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(128)
            .query_async(conn)
            .await
            .unwrap();
        log.into_iter()
            .map(|entry| entry.3)
            .filter(|args| args[0] == "FCALL" && args[1].ends_with(script))
            .collect()
    }

    /// How many arguments each `FCALL` of `script` the slow log holds was called with.
    async fn fcall_argc(conn: &mut redis::aio::MultiplexedConnection, script: &str) -> Vec<usize> {
        fcall_args(conn, script)
            .await
            .iter()
            .map(
                |args| match args.last().and_then(|a| a.strip_prefix("... (")) {
                    Some(more) => {
                        args.len() - 1 + more.split(' ').next().unwrap().parse::<usize>().unwrap()
                    }
                    None => args.len(),
                },
            )
            .collect()
    }

    /// `args` (a call as the slow log holds it, whole) as a command, to make it again.
    fn called(args: &[String]) -> redis::Cmd {
        let mut cmd = redis::cmd(&args[0]);
        for arg in &args[1..] {
            cmd.arg(arg);
        }
        cmd
    }

    /// Lean jobs: a record keeps no `event_ms` equal to its `created_ms` (a create's events
    /// are dated at its creation, and a record without one had its last event then), so the
    /// harness's job is written with 16 fields, not 17 (12 since a job claimed at its create
    /// keeps no claim, attempt, start or `started` event, 11 since its usual `created` event
    /// is implied, 10 since its usual step `starting` is: it reads so, as a queued job reads
    /// `queued` with none stored): a field less for its create to write
    /// and for its finish to read (its listpack 17 bytes shorter, still in jemalloc's 384-byte
    /// class); its events read as before, ids dated at the creation, and a later event dates
    /// itself.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_record_keeps_no_event_time_equal_to_its_creation() {
        let (redis, s, _) = drained().await;
        let mut conn = redis.connection().await;
        let (job, created_at) = claimed_at_create(&s).await;
        let record = Keys::new(&s.settings().prefix).job(&job.id);
        let stored = stored_fields(&mut conn, &record).await;
        assert!(!stored.contains_key(Field::EventMs.name()), "{stored:?}");
        assert_eq!(stored.len(), 10, "{stored:?}");
        let read = s.get(&job.id).await.unwrap().expect("the job reads");
        assert_eq!(read.step, "starting");
        let queued = new_job(&tenant(), "sync");
        create(&s, &queued).await;
        let stored =
            stored_fields(&mut conn, &Keys::new(&s.settings().prefix).job(&queued.id)).await;
        assert!(!stored.contains_key(Field::Step.name()), "{stored:?}");
        let read = s.get(&queued.id).await.unwrap().expect("the job reads");
        assert_eq!(read.step, "queued");
        let run = job.clone().first_claim(created_at).run;
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(s.tick(&run, 40, "halfway").await.unwrap(), Tick::Applied);
        let ticked: Option<String> = redis::cmd("HGET")
            .arg(&record)
            .arg(Field::EventMs.name())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(ticked.unwrap().parse::<u64>().unwrap() > created_at);
        let done = Outcome::Done(json!({"products": 0, "extracted": 0, "skipped": 0}));
        let ended = RunRef::new(&job, &run, created_at).ended(&done, 0);
        assert_eq!(s.finish(ended).await.unwrap(), Finish::Applied);
        let ids: Vec<String> = s
            .timeline(&job.id, None)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(
            ids[..2],
            [format!("{created_at}-0"), format!("{created_at}-1")]
        );
        assert_eq!(ids.len(), 4, "{ids:?}");
    }

    /// Lean jobs: a tenant's listing counts its creates this minute under the minute's number,
    /// which Redis keeps as an integer (`~<minute>` was a string), so a listing of one job
    /// fits a 64-byte listpack: at most 176 bytes by `MEMORY USAGE` (184 before, 168 now; the
    /// harness's 152 -> 136); the count still limits the tenant's creates
    /// (lean_a_tenants_first_job_is_created_in_17_commands_and_finished_in_10).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lean_a_tenants_listing_counts_its_minute_under_the_minutes_number() {
        let (redis, s, _) = drained().await;
        let mut conn = redis.connection().await;
        let (job, _) = claimed_at_create(&s).await;
        let listing = Keys::new(&s.settings().prefix).tenant(&job.tenant);
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg(&listing)
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            members.len(),
            2,
            "the job and its minute's count: {members:?}"
        );
        assert!(members[0].parse::<u64>().is_ok(), "{members:?}");
        let bytes = memory_usage(&mut conn, &listing).await;
        assert!(bytes <= 176, "{bytes} bytes: {members:?}");
    }
}

/// Replicas of two versions during a deploy: the queue's head holds jobs of kinds this
/// worker does not run; its claim passes them to the tail and finds its own behind them.
async fn a_claim_passes_over_a_hundred_queued_jobs_of_kinds_its_worker_does_not_run(b: Stores) {
    let store = fresh(b);
    let t = tenant();
    for i in 0..100 {
        create(&*store, &new_job(&t, &format!("other{i}"))).await;
    }
    let mine = new_job(&t, "sync");
    create(&*store, &mine).await;
    let claim = claim_next(&*store, "test/1")
        .await
        .expect("the sync job behind them");
    assert_eq!(claim.job.id, mine.id);
}

async fn the_queue_gauge_counts_each_kinds_queued_jobs_and_not_the_running_ones(b: Stores) {
    let store = fresh(b);
    assert_eq!(
        store.queued_by_kind().await.unwrap(),
        vec![],
        "nothing queued"
    );
    start(&*store, &new_job(&tenant(), "enrich")).await;
    for kind in ["sync", "enrich", "sync"] {
        create(&*store, &new_job(&tenant(), kind)).await;
    }
    let mut counts: Vec<(String, u64)> = store
        .queued_by_kind()
        .await
        .unwrap()
        .into_iter()
        .map(|(kind, n)| (kind.as_str().to_owned(), n))
        .collect();
    counts.sort();
    assert_eq!(counts, [("enrich".into(), 1), ("sync".into(), 2)]);
}

async fn the_active_jobs_of_every_tenant_are_the_queued_and_the_running_ones(b: Stores) {
    let store = fresh(b);
    let (one, two) = (tenant(), tenant());
    let ended = new_job(&one, "sync");
    let (created, run) = start(&*store, &ended).await;
    finish(&*store, &ended, &run, &created, Outcome::Done(json!({}))).await;
    let running = new_job(&one, "enrich");
    start(&*store, &running).await;
    let queued = new_job(&two, "sync");
    create(&*store, &queued).await;
    let mut seen: Vec<_> = store
        .active()
        .await
        .unwrap()
        .iter()
        .map(|s| (s.job_id, s.status))
        .collect();
    seen.sort_by_key(|(id, _)| *id);
    let mut expected = vec![(running.id, Status::Running), (queued.id, Status::Queued)];
    expected.sort_by_key(|(id, _)| *id);
    assert_eq!(
        seen, expected,
        "the ended job is not active; both tenants' active jobs are"
    );
    store.cancel(&queued.id, "test").await.unwrap();
    let after: Vec<_> = store
        .active()
        .await
        .unwrap()
        .iter()
        .map(|s| s.job_id)
        .collect();
    assert_eq!(
        after,
        vec![running.id],
        "a job cancelled while queued is no longer active"
    );
}

async fn a_running_job_whose_lease_went_stale_is_listed_active_as_lost(b: Stores) {
    let store = stale_at_once(b);
    let job = new_job(&tenant(), "sync");
    start(&*store, &job).await;
    let active = store.active().await.unwrap();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].job_id, job.id);
    assert_eq!(active[0].status, Status::Lost);
}

// ---------------------------------------------------------------------------------------
// Timelines: each state change writes its event in the same step.

every_store!(
    a_job_s_timeline_reads_created_started_progress_finished_in_order,
    a_cancel_request_is_on_the_timeline_with_who_asked,
    a_job_taken_over_gets_superseded_on_its_own_timeline,
    a_timeline_keeps_every_lifecycle_event_and_a_bounded_sample_of_progress,
    progress_within_the_sample_interval_reaches_watchers_but_only_the_latest_is_kept,
    a_timeline_read_after_an_id_answers_only_later_events,
    a_tenant_watch_hears_its_jobs_changes_and_no_other_tenant_s,
    runs_given_back_recovered_or_lost_are_on_the_timeline,
);

fn types(events: &[catalog_jobs::jobs::timeline::TimelineEvent]) -> Vec<&str> {
    events.iter().map(|e| e.kind.as_str()).collect()
}

async fn a_job_s_timeline_reads_created_started_progress_finished_in_order(b: Stores) {
    let s = fresh(b);
    let job = new_job(&tenant(), "sync");
    let (created, run) = start(&*s, &job).await;
    let tick = s.tick(&run, 40, "reading feeds").await.unwrap();
    assert_eq!(tick, Tick::Applied);
    finish(&*s, &job, &run, &created, failure("SourceUnreachable")).await;
    let events = s.timeline(&job.id, None).await.unwrap();
    assert_eq!(
        types(&events),
        ["created", "started", "progress", "finished"]
    );
    let [c, st, p, f] = &events[..] else {
        unreachable!()
    };
    assert_eq!(
        (c.status.as_str(), c.percent, c.step.as_str()),
        ("queued", 0, "queued")
    );
    assert_eq!(c.extra["request_id"], "req-test");
    assert_eq!(
        (st.status.as_str(), st.step.as_str()),
        ("running", "starting")
    );
    assert_eq!(st.extra["attempt"], 1);
    assert_eq!(st.extra["worker"], "test/1");
    assert_eq!(
        (p.status.as_str(), p.percent, p.step.as_str()),
        ("running", 40, "reading feeds")
    );
    assert_eq!((f.status.as_str(), f.percent), ("failed", 40));
    assert_eq!(f.step, "failed: SourceUnreachable");
    assert_eq!(f.extra["error"], "SourceUnreachable");
    let ids: Vec<_> = events
        .iter()
        .map(|e| e.event_id().expect("a <ms>-<seq> id"))
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids grow: {ids:?}");
    assert!(events.windows(2).all(|w| w[0].at <= w[1].at));
    assert!(events[3].is_last());
    let unknown = s.timeline(&JobId::new(), None).await.unwrap();
    assert!(unknown.is_empty());
}

async fn a_cancel_request_is_on_the_timeline_with_who_asked(b: Stores) {
    let s = fresh(b);
    let t = tenant();
    let running = new_job(&t, "sync");
    let (_, run) = start(&*s, &running).await;
    assert_eq!(
        s.cancel(&running.id, "ops").await.unwrap(),
        Cancel::Requested
    );
    assert_eq!(
        s.cancel(&running.id, "again").await.unwrap(),
        Cancel::Requested
    );
    s.tick(&run, 10, "stopping").await.unwrap();
    let events = s.timeline(&running.id, None).await.unwrap();
    assert_eq!(
        types(&events),
        ["created", "started", "cancel_requested", "progress"]
    );
    assert_eq!(
        events[2].extra["by"], "ops",
        "only the first request is recorded"
    );
    assert_eq!(events[2].status, "cancelling");
    assert_eq!(events[3].status, "cancelling");

    let queued = new_job(&t, "enrich");
    create(&*s, &queued).await;
    s.cancel(&queued.id, "ops").await.unwrap();
    let events = s.timeline(&queued.id, None).await.unwrap();
    assert_eq!(types(&events), ["created", "cancel_requested", "finished"]);
    assert_eq!(events[2].status, "cancelled");
}

async fn a_job_taken_over_gets_superseded_on_its_own_timeline(b: Stores) {
    let s = stale_at_once(b);
    let t = tenant();
    let old = new_job(&t, "sync");
    start(&*s, &old).await;
    let new = new_job(&t, "sync");
    create(&*s, &new).await;
    let events = s.timeline(&old.id, None).await.unwrap();
    assert_eq!(types(&events), ["created", "started", "superseded"]);
    assert_eq!(events[2].extra["superseded_by"], new.id.to_string());
    assert_eq!(events[2].status, "lost");
    assert!(events[2].is_last());
    assert_eq!(
        types(&s.timeline(&new.id, None).await.unwrap()),
        ["created"]
    );
}

async fn a_timeline_keeps_every_lifecycle_event_and_a_bounded_sample_of_progress(b: Stores) {
    use catalog_jobs::jobs::timeline::PROGRESS_KEPT;
    // No least interval between samples, and every tick a new step: every tick is sampled.
    let s = store_of(
        b,
        StoreSettings {
            progress_sample: Duration::ZERO,
            ..settings()
        },
    );
    let job = new_job(&tenant(), "sync");
    let (created, run) = start(&*s, &job).await;
    let ticks = PROGRESS_KEPT * 3;
    for i in 0..ticks {
        s.tick(&run, (i * 100 / ticks) as u8, &format!("tick {i}"))
            .await
            .unwrap();
    }
    finish(&*s, &job, &run, &created, Outcome::Done(json!({}))).await;
    let events = s.timeline(&job.id, None).await.unwrap();
    assert_eq!(
        types(&events)[..2],
        ["created", "started"],
        "a long job's start is never trimmed"
    );
    assert_eq!(events.len(), 2 + PROGRESS_KEPT + 1, "{:?}", types(&events));
    assert!(events[2..2 + PROGRESS_KEPT]
        .iter()
        .all(|e| e.kind == "progress"));
    assert_eq!(
        events[1 + PROGRESS_KEPT].step,
        format!("tick {}", ticks - 1),
        "the newest samples are kept"
    );
    assert_eq!(events.last().unwrap().kind, "finished");
}

async fn progress_within_the_sample_interval_reaches_watchers_but_only_the_latest_is_kept(
    b: Stores,
) {
    use catalog_jobs::jobs::watch::Change;
    let s = fresh(b);
    let t = tenant();
    let mut watch = s.watch_tenant(&t).await;
    let job = new_job(&t, "sync");
    let (_, run) = start(&*s, &job).await;
    for (percent, step) in [(10, "a"), (20, "b"), (30, "c")] {
        s.tick(&run, percent, step).await.unwrap();
    }
    let events = s.timeline(&job.id, None).await.unwrap();
    assert_eq!(
        types(&events),
        ["created", "started", "progress", "progress"]
    );
    assert_eq!(
        (events[2].step.as_str(), events[3].step.as_str()),
        ("a", "c"),
        "the first tick is sampled; the next ones come within the interval, and the latest shows"
    );
    let mut heard = Vec::new();
    while heard.len() < 3 {
        let change = tokio::time::timeout(Duration::from_secs(10), watch.changes.recv())
            .await
            .expect("every tick reaches the watchers within 10 s")
            .expect("the watch lives");
        if let Change::Job(c) = change {
            if c.kind_of_event == "progress" {
                heard.push(c.step);
            }
        }
    }
    assert_eq!(heard, ["a", "b", "c"], "live watchers hear every tick");
    assert_eq!(
        events[3].id,
        s.timeline(&job.id, events[2].event_id()).await.unwrap()[0].id
    );
}

async fn a_timeline_read_after_an_id_answers_only_later_events(b: Stores) {
    let s = fresh(b);
    let job = new_job(&tenant(), "sync");
    let (created, run) = start(&*s, &job).await;
    let all = s.timeline(&job.id, None).await.unwrap();
    let after = all[0].event_id().unwrap();
    assert_eq!(
        types(&s.timeline(&job.id, Some(after)).await.unwrap()),
        ["started"]
    );
    finish(&*s, &job, &run, &created, Outcome::Done(json!({}))).await;
    let last = s.timeline(&job.id, None).await.unwrap().pop().unwrap();
    assert_eq!((last.kind.as_str(), last.percent), ("finished", 100));
    assert!(s
        .timeline(&job.id, last.event_id())
        .await
        .unwrap()
        .is_empty());
}

async fn a_tenant_watch_hears_its_jobs_changes_and_no_other_tenant_s(b: Stores) {
    use catalog_jobs::jobs::watch::Change;
    let s = fresh(b);
    let (mine, theirs) = (tenant(), tenant());
    let mut watch = s.watch_tenant(&mine).await;
    create(&*s, &new_job(&theirs, "sync")).await;
    let job = new_job(&mine, "sync");
    create(&*s, &job).await;
    let heard = loop {
        let change = tokio::time::timeout(Duration::from_secs(10), watch.changes.recv())
            .await
            .expect("the change arrives within 10 s")
            .expect("the watch lives");
        if let Change::Job(c) = change {
            break c;
        }
    };
    assert_eq!(
        heard.job_id,
        job.id.to_string(),
        "another tenant's job is not heard"
    );
    assert_eq!(
        (heard.kind_of_event.as_str(), heard.status.as_str()),
        ("created", "queued")
    );
    assert_eq!(
        (heard.kind.as_str(), heard.tenant_id.as_str()),
        ("sync", mine.as_str())
    );
    assert_eq!(heard.id, s.timeline(&job.id, None).await.unwrap()[0].id);
}

async fn runs_given_back_recovered_or_lost_are_on_the_timeline(b: Stores) {
    let s = leases_of(b, 300, 2);
    let t = tenant();
    let job = new_job(&t, "sync");
    let (created, run) = start(&*s, &job).await;
    assert_eq!(s.release(&run).await.unwrap(), Release::Requeued);
    let again = claim_queued(&*s, "test/2").await;
    outlive(300).await;
    assert_eq!(
        s.recover().await.unwrap(),
        vec![Recovered::Requeued(job.id)]
    );
    let events = s.timeline(&job.id, None).await.unwrap();
    assert_eq!(
        types(&events),
        ["created", "started", "released", "started", "requeued"]
    );
    assert_eq!(events[2].status, "queued");
    assert_eq!(events[3].extra["worker"], "test/2");
    assert_eq!(
        (events[4].status.as_str(), &events[4].extra["attempt"]),
        ("queued", &json!(1))
    );
    let last = claim_queued(&*s, "test/3").await;
    outlive(300).await;
    assert_eq!(s.recover().await.unwrap(), vec![Recovered::Lost(job.id)]);
    let end = s.timeline(&job.id, None).await.unwrap().pop().unwrap();
    assert_eq!(
        (end.kind.as_str(), end.status.as_str()),
        ("finished", "failed")
    );
    assert_eq!(end.extra["error"], "Lost");
    drop((created, run, again, last));

    // With one attempt, an expired run is left to read lost: `lost`, and nothing ends.
    let s = leases_of(b, 300, 1);
    let job = new_job(&t, "sync");
    start(&*s, &job).await;
    outlive(300).await;
    s.recover().await.unwrap();
    let last = s.timeline(&job.id, None).await.unwrap().pop().unwrap();
    assert_eq!((last.kind.as_str(), last.status.as_str()), ("lost", "lost"));
    assert!(!last.is_last());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_s_record_holds_its_timeline_and_stays_compact_with_long_params_and_result() {
    let s = fresh(Stores::Redis);
    let ttl = s.settings().ttl_secs() as i64;
    let mut job = new_job(&tenant(), "sync");
    job.params =
        json!({"sources": ["a-feed-whose-name-takes-the-parameters-past-sixty-four-bytes.jsonl"]});
    let (created, run) = start(&*s, &job).await;
    s.tick(&run, 50, "halfway").await.unwrap();
    let report = json!({"products": 123_456, "extracted": 123_456, "unextractable": 0, "skipped": 0, "batches": 247});
    finish(&*s, &job, &run, &created, Outcome::Done(report.clone())).await;
    let client = redis::Client::open(crate::helpers::shared_redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let key = catalog_jobs::jobs::keys::Keys::new(&s.settings().prefix).job(&job.id);
    let keys = crate::helpers::keys_matching(&mut conn, &format!("{key}*")).await;
    assert_eq!(keys, vec![key.clone()], "the timeline is in the record");
    let encoding: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        encoding, "listpack",
        "every value fits Redis's compact encoding"
    );
    let left: i64 = redis::cmd("TTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(left > ttl - 10 && left <= ttl, "TTL {left} of {ttl}");
    let read = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!((read.params, read.result), (job.params.clone(), report));
    assert_eq!(
        types(&s.timeline(&job.id, None).await.unwrap()),
        ["created", "started", "progress", "finished"]
    );
}

async fn a_job_created_with_an_empty_queue_is_claimed_for_the_creating_worker_in_the_same_step(
    b: Stores,
) {
    let s = fresh(b);
    let job = new_job(&tenant(), "enrich");
    let Created::Created(answer, _) = s.create_claimed(job.clone(), "host-a/1").await.unwrap()
    else {
        panic!("expected a new job");
    };
    assert_eq!(answer.status, Status::Running);
    let got = running_on(&*s, &job.id, "host-a/1").await;
    assert_eq!(
        claim_next(&*s, "host-b/2").await,
        None,
        "it never went through the queue: no other worker can claim it"
    );
    let events = s.timeline(&job.id, None).await.unwrap();
    assert_eq!(types(&events), ["created", "started"]);
    assert_eq!(
        (events[0].status.as_str(), events[0].step.as_str()),
        ("queued", "queued"),
        "created reads as the job was accepted"
    );
    assert_eq!(events[1].extra["worker"], "host-a/1");
    let run = job.clone().first_claim(got.created_at).run;
    assert_eq!(s.renew(&[run]).await.unwrap(), vec![Renewal::Held]);
    assert_eq!(s.tick(&run, 40, "half").await.unwrap(), Tick::Applied);
    let later = new_job(&job.tenant, "enrich");
    assert_eq!(
        s.create(later).await.unwrap(),
        Created::AlreadyRunning(job.id),
        "it holds its tenant+kind lock like any job"
    );
    assert_eq!(
        finish(&*s, &job, &run, &got, Outcome::Done(json!({"n": 1}))).await,
        Finish::Applied
    );
    let done = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!((done.status, done.percent), (Status::Done, 100));
}

async fn a_job_created_behind_a_waiting_one_is_queued_so_creation_order_holds(b: Stores) {
    let s = fresh(b);
    let t = tenant();
    let first = new_job(&t, "sync");
    create(&*s, &first).await;
    let second = new_job(&tenant_beside(&t), "sync");
    let Created::Created(answer, _) = s.create_claimed(second.clone(), "host-a/1").await.unwrap()
    else {
        panic!("expected a new job");
    };
    assert_eq!(answer.status, Status::Queued, "a job waits ahead of it");
    let got = s.get(&second.id).await.unwrap().unwrap();
    assert_eq!(
        (got.status, got.attempt, got.worker),
        (Status::Queued, 0, None)
    );
    let order: Vec<JobId> = [claim_next(&*s, "w/1").await, claim_next(&*s, "w/1").await]
        .into_iter()
        .map(|c| c.expect("both queued").job.id)
        .collect();
    assert_eq!(order, vec![first.id, second.id]);
}

async fn a_job_claimed_at_create_whose_worker_dies_is_recovered_and_fenced(b: Stores) {
    let s = leases_of(b, 300, 3);
    let job = new_job(&tenant(), "pair");
    let Created::Created(created, _) = s.create_claimed(job.clone(), "dead/1").await.unwrap()
    else {
        panic!("expected a new job");
    };
    let old_run = job.clone().first_claim(created.created_at).run;
    outlive(300).await;
    assert_eq!(
        s.recover().await.unwrap(),
        vec![Recovered::Requeued(job.id)]
    );
    let again = claim_queued(&*s, "host-b/2").await;
    assert_eq!((again.job.id, again.attempt), (job.id, 2));
    assert_eq!(s.tick(&old_run, 90, "late").await.unwrap(), Tick::Fenced);
}

/// A job with a full audit trail: started by `alice`, in request `req-alice-1`, retrying
/// another job.
fn audited_job(t: &TenantId) -> catalog_jobs::jobs::store::NewJob {
    let mut job = new_job(t, "sync");
    job.origin.created_by = "alice".into();
    job.origin.request_id = "req-alice-1".into();
    job.origin.retry_of = Some(JobId::new());
    job
}

async fn a_claim_carries_who_started_the_job_in_which_request_and_what_it_retries(b: Stores) {
    let s = fresh(b);
    let job = audited_job(&tenant());
    create(&*s, &job).await;
    let claim = claim_queued(&*s, "w/1").await;
    assert_eq!(
        claim.job.origin, job.origin,
        "the run writes back what it was told"
    );
}

every_store!(a_retry_is_recorded_on_the_job_it_retries_in_the_step_that_creates_it);

/// The create alone records it: no second write, which a store failing between the retry's
/// start and its audit would miss.
async fn a_retry_is_recorded_on_the_job_it_retries_in_the_step_that_creates_it(b: Stores) {
    let s = fresh(b);
    let t = tenant();
    let old = new_job(&t, "sync");
    create(&*s, &old).await;
    s.cancel(&old.id, "tester").await.unwrap();
    let mut retry = new_job(&t, "sync");
    retry.origin.created_by = "bob".into();
    retry.origin.retry_of = Some(old.id);
    create(&*s, &retry).await;
    let was = s.get(&old.id).await.unwrap().expect("the retried job");
    assert_eq!(was.status, Status::Cancelled);
    assert_eq!(
        (was.retried_by.as_deref(), was.retried_as),
        (Some("bob"), Some(retry.id))
    );
    // A retry of a record gone since does not make it again.
    let gone = JobId::new();
    let mut orphan = new_job(&t, "enrich");
    orphan.origin.retry_of = Some(gone);
    create(&*s, &orphan).await;
    assert_eq!(s.get(&gone).await.unwrap(), None);
}

// ---------------------------------------------------------------------------------------
// The honest lost, a tenant's order and pipelines: each change happens in the step that
// causes it (the end of the job ahead releases the one behind; a step's end ends its
// pipeline), the same way on both stores.

every_store!(
    a_stale_run_with_attempts_left_reads_queued_and_keeps_its_lock_until_it_runs_again,
    an_ordered_job_created_behind_an_active_one_waits_outside_the_queue_until_it_ends,
    a_waiting_job_never_holds_back_another_tenant,
    a_tenant_s_jobs_run_in_creation_order_and_a_cancelled_waiting_one_is_passed_over,
    a_job_waiting_for_one_that_failed_still_runs,
    a_job_that_will_not_run_again_releases_the_one_behind_it,
    a_job_that_will_wait_is_created_whatever_the_ready_queue_holds,
    a_pipeline_is_created_whole_its_first_step_queued_and_the_others_waiting,
    a_pipeline_runs_its_steps_in_turn_and_ends_done_with_every_report,
    a_failed_step_fails_its_pipeline_with_its_class_and_skips_the_steps_after_it,
    cancelling_a_pipeline_stops_its_running_step_and_skips_the_others,
    a_step_that_ends_done_after_its_pipeline_was_asked_to_stop_ends_it_cancelled,
    the_last_step_ending_done_after_its_pipeline_was_asked_to_stop_ends_it_done,
    a_started_pipeline_reads_running_until_it_ends_never_queued_again,
    a_pipeline_cancelled_before_any_step_started_ends_at_once,
    cancelling_a_step_ends_its_pipeline_as_cancelled,
    cancelling_a_waiting_step_stops_the_running_one_and_ends_the_pipeline_with_it,
    a_step_lost_for_good_fails_its_pipeline_as_lost,
    a_pipeline_waits_behind_its_tenant_s_running_job,
    a_pipeline_s_cancel_request_is_on_its_timeline_at_the_percent_and_step_it_read,
);

async fn create_pipeline(s: &dyn JobStore, p: &NewPipeline) -> Snapshot {
    match s
        .create_pipeline(p.clone())
        .await
        .expect("the store answers")
    {
        Created::Created(snapshot, _) => *snapshot,
        other => panic!("expected a new pipeline, got {other:?}"),
    }
}

async fn read(s: &dyn JobStore, id: &JobId) -> Snapshot {
    s.get(id).await.unwrap().expect("the job exists")
}

/// Claims the next job of the ready queue, which must be `id`.
async fn claim_exactly(s: &dyn JobStore, id: JobId) -> Claim {
    let claim = claim_queued(s, "test/1").await;
    assert_eq!(claim.job.id, id, "the expected job is the next one ready");
    claim
}

async fn nothing_ready(s: &dyn JobStore) {
    assert_eq!(claim_next(s, "test/1").await, None);
}

/// A pipeline of `kinds` for `t`, created, and the claim of its first step.
async fn running_pipeline(s: &dyn JobStore, t: &TenantId, kinds: &[&str]) -> (NewPipeline, Claim) {
    let p = pipeline_of(t, kinds);
    create_pipeline(s, &p).await;
    let first = claim_exactly(s, p.steps[0].0.id).await;
    (p, first)
}

/// Asserts that the tenant's pipeline and step kinds are free: a job of each is created.
async fn every_lock_is_free(s: &dyn JobStore, t: &TenantId) {
    for kind in ["pipeline", "sync", "enrich", "pair"] {
        create(s, &new_job(t, kind)).await;
    }
}

/// Asserts that the job ended cancelled, by `who`.
async fn assert_cancelled_by(s: &dyn JobStore, id: &JobId, who: &str) {
    let job = read(s, id).await;
    assert_eq!(
        (job.status, job.cancelled_by.as_deref()),
        (Status::Cancelled, Some(who))
    );
}

async fn a_stale_run_with_attempts_left_reads_queued_and_keeps_its_lock_until_it_runs_again(
    b: Stores,
) {
    let s = leases_of(b, 200, 2);
    let t = tenant();
    let job = new_job(&t, "sync");
    start(&*s, &job).await;
    outlive(200).await;
    let stale = read(&*s, &job.id).await;
    assert_eq!(
        (stale.status, stale.step.as_str(), stale.attempt),
        (Status::Queued, REQUEUED_STEP, 1),
        "it will run again: it reads queued, never lost"
    );
    assert_eq!(
        s.create(new_job(&t, "sync")).await.unwrap(),
        Created::AlreadyRunning(job.id),
        "it keeps its lock"
    );
    assert!(s.active().await.unwrap().iter().any(|a| a.job_id == job.id));
    assert_eq!(
        s.recover().await.unwrap(),
        vec![Recovered::Requeued(job.id)]
    );
    let requeued = read(&*s, &job.id).await;
    assert_eq!(
        (requeued.status, requeued.step.as_str()),
        (Status::Queued, REQUEUED_STEP)
    );
    let again = claim_exactly(&*s, job.id).await;
    assert_eq!(again.attempt, 2);
    outlive(200).await;
    assert_eq!(
        read(&*s, &job.id).await.status,
        Status::Lost,
        "on its last attempt it will not run again: lost"
    );
}

async fn an_ordered_job_created_behind_an_active_one_waits_outside_the_queue_until_it_ends(
    b: Stores,
) {
    let s = fresh(b);
    let t = tenant();
    let sync = ordered(&t, "sync");
    create(&*s, &sync).await;
    let enrich = ordered(&t, "enrich");
    let waiting = create(&*s, &enrich).await;
    let short = &sync.id.to_string()[..8];
    assert_eq!(
        (waiting.status, waiting.waiting_for, waiting.step),
        (
            Status::Queued,
            Some(sync.id),
            format!("waiting for sync {short}… to end")
        )
    );
    assert_eq!(read(&*s, &enrich.id).await.waiting_for, Some(sync.id));
    assert!(
        s.active()
            .await
            .unwrap()
            .iter()
            .any(|a| a.job_id == enrich.id),
        "a waiting job is active"
    );
    let running = claim_exactly(&*s, sync.id).await;
    nothing_ready(&*s).await;
    end(&*s, &running, Outcome::Done(json!({}))).await;
    let released = read(&*s, &enrich.id).await;
    assert_eq!(
        (
            released.status,
            released.waiting_for,
            released.step.as_str()
        ),
        (Status::Queued, None, "queued")
    );
    claim_exactly(&*s, enrich.id).await;
    let events = s.timeline(&enrich.id, None).await.unwrap();
    assert_eq!(types(&events), ["created", "ready", "started"]);
    assert_eq!(events[0].extra["waiting_for"], json!(sync.id.to_string()));
    assert_eq!(events[1].extra["after"], json!(sync.id.to_string()));
}

async fn a_waiting_job_never_holds_back_another_tenant(b: Stores) {
    let s = fresh(b);
    let (a, other) = (tenant(), tenant());
    let sync = ordered(&a, "sync");
    create(&*s, &sync).await;
    claim_exactly(&*s, sync.id).await;
    create(&*s, &ordered(&a, "enrich")).await;
    let theirs = ordered(&other, "enrich");
    let created = create(&*s, &theirs).await;
    assert_eq!(created.waiting_for, None);
    claim_exactly(&*s, theirs.id).await;
}

async fn a_tenant_s_jobs_run_in_creation_order_and_a_cancelled_waiting_one_is_passed_over(
    b: Stores,
) {
    let s = fresh(b);
    let t = tenant();
    let (sync, enrich, pair) = (
        ordered(&t, "sync"),
        ordered(&t, "enrich"),
        ordered(&t, "pair"),
    );
    create(&*s, &sync).await;
    create(&*s, &enrich).await;
    assert_eq!(create(&*s, &pair).await.waiting_for, Some(enrich.id));
    let running = claim_exactly(&*s, sync.id).await;
    assert_eq!(
        s.cancel(&enrich.id, "tester").await.unwrap(),
        Cancel::Requested
    );
    assert_eq!(read(&*s, &enrich.id).await.status, Status::Cancelled);
    let repointed = read(&*s, &pair.id).await;
    assert_eq!(
        repointed.waiting_for,
        Some(sync.id),
        "it waits for the one ahead now"
    );
    assert!(
        repointed.step.starts_with("waiting for sync "),
        "{}",
        repointed.step
    );
    nothing_ready(&*s).await;
    end(&*s, &running, Outcome::Done(json!({}))).await;
    claim_exactly(&*s, pair.id).await;
    let events = s.timeline(&pair.id, None).await.unwrap();
    assert_eq!(types(&events), ["created", "waiting", "ready", "started"]);
}

async fn a_job_waiting_for_one_that_failed_still_runs(b: Stores) {
    let s = fresh(b);
    let t = tenant();
    let (sync, enrich) = (ordered(&t, "sync"), ordered(&t, "enrich"));
    create(&*s, &sync).await;
    create(&*s, &enrich).await;
    let running = claim_exactly(&*s, sync.id).await;
    end(
        &*s,
        &running,
        Outcome::Failed("SourceNotFound".into(), None),
    )
    .await;
    claim_exactly(&*s, enrich.id).await;
}

async fn a_job_that_will_not_run_again_releases_the_one_behind_it(b: Stores) {
    let s = leases_of(b, 200, 1);
    let t = tenant();
    let (sync, enrich) = (ordered(&t, "sync"), ordered(&t, "enrich"));
    create(&*s, &sync).await;
    create(&*s, &enrich).await;
    claim_exactly(&*s, sync.id).await;
    outlive(200).await;
    s.recover().await.unwrap();
    assert_eq!(read(&*s, &sync.id).await.status, Status::Lost);
    claim_exactly(&*s, enrich.id).await;
}

async fn a_job_that_will_wait_is_created_whatever_the_ready_queue_holds(b: Stores) {
    let s = store_of(
        b,
        StoreSettings {
            max_queued: 1,
            ..settings()
        },
    );
    let t = tenant();
    create(&*s, &ordered(&t, "sync")).await;
    assert_eq!(
        s.create(new_job(&tenant_beside(&t), "sync")).await.unwrap(),
        Created::QueueFull,
        "the ready queue (of the tenant's slot group, on Redis) is full"
    );
    let waiting = create(&*s, &ordered(&t, "enrich")).await;
    assert!(waiting.waiting_for.is_some(), "it waits outside the queue");
    let p = pipeline_of(&t, &["pair"]);
    assert!(matches!(
        s.create_pipeline(p).await.unwrap(),
        Created::Created(..)
    ));
}

async fn a_pipeline_is_created_whole_its_first_step_queued_and_the_others_waiting(b: Stores) {
    let s = fresh(b);
    let t = tenant();
    let p = pipeline_of(&t, &["sync", "enrich", "pair"]);
    let created = create_pipeline(&*s, &p).await;
    assert_eq!(
        (
            created.job_id,
            created.kind.as_str(),
            created.status,
            created.percent
        ),
        (p.job.id, "pipeline", Status::Queued, 0)
    );
    let steps = created.steps.expect("a pipeline lists its steps");
    let ids: Vec<JobId> = steps.iter().map(|s| s.job_id).collect();
    assert_eq!(ids, p.steps.iter().map(|(j, _)| j.id).collect::<Vec<_>>());
    assert_eq!(
        steps.iter().map(|s| s.share).collect::<Vec<_>>(),
        [34, 33, 33]
    );
    let enrich = read(&*s, &ids[1]).await;
    assert_eq!(
        (enrich.waiting_for, enrich.pipeline_id),
        (Some(ids[0]), Some(p.job.id))
    );
    assert_eq!(read(&*s, &ids[2]).await.waiting_for, Some(ids[1]));
    for (kind, holder) in [("pipeline", p.job.id), ("sync", ids[0]), ("pair", ids[2])] {
        assert_eq!(
            s.create(new_job(&t, kind)).await.unwrap(),
            Created::AlreadyRunning(holder),
            "{kind} is held"
        );
    }
    assert_eq!(
        s.create_pipeline(pipeline_of(&t, &["sync"])).await.unwrap(),
        Created::AlreadyRunning(p.job.id),
        "one pipeline a tenant"
    );
    let active: Vec<JobId> = s.active().await.unwrap().iter().map(|a| a.job_id).collect();
    assert!(active.contains(&p.job.id), "the pipeline is listed active");
    claim_exactly(&*s, ids[0]).await;
    nothing_ready(&*s).await;
}

async fn a_pipeline_runs_its_steps_in_turn_and_ends_done_with_every_report(b: Stores) {
    let s = fresh(b);
    let t = tenant();
    let p = pipeline_of(&t, &["sync", "enrich", "pair"]);
    create_pipeline(&*s, &p).await;
    let mut seen = 0;
    for (step, _) in &p.steps {
        let claim = claim_exactly(&*s, step.id).await;
        let running = read(&*s, &p.job.id).await;
        assert_eq!(running.status, Status::Running);
        assert!(
            running.step.starts_with(&format!("{}: ", step.kind)),
            "{}",
            running.step
        );
        s.tick(&claim.run, 50, "halfway").await.unwrap();
        let halfway = read(&*s, &p.job.id).await.percent;
        assert!(
            halfway > seen,
            "the percent moves on: {seen} then {halfway}"
        );
        seen = halfway;
        end(&*s, &claim, Outcome::Done(json!({ "kind": step.kind }))).await;
        assert!(read(&*s, &p.job.id).await.percent >= seen);
    }
    let done = read(&*s, &p.job.id).await;
    assert_eq!((done.status, done.percent), (Status::Done, 100));
    assert_eq!(
        done.result,
        json!({"sync": {"kind": "sync"}, "enrich": {"kind": "enrich"}, "pair": {"kind": "pair"}})
    );
    let events = s.timeline(&p.job.id, None).await.unwrap();
    assert_eq!(
        types(&events),
        [
            "created",
            "step_ended",
            "step_ended",
            "step_ended",
            "finished"
        ]
    );
    assert_eq!(events[1].extra["step_kind"], "sync");
    create(&*s, &new_job(&t, "pipeline")).await; // every lock is free
}

async fn a_failed_step_fails_its_pipeline_with_its_class_and_skips_the_steps_after_it(b: Stores) {
    let s = fresh(b);
    let t = tenant();
    let (p, claim) = running_pipeline(&*s, &t, &["sync", "enrich", "pair"]).await;
    end(&*s, &claim, Outcome::Failed("SourceNotFound".into(), None)).await;
    let failed = read(&*s, &p.job.id).await;
    assert_eq!(
        (failed.status, failed.error.as_deref(), failed.step.as_str()),
        (
            Status::Failed,
            Some("SourceNotFound"),
            "failed in sync: SourceNotFound"
        )
    );
    for (step, _) in &p.steps[1..] {
        let skipped = read(&*s, &step.id).await;
        assert_eq!(
            (skipped.status, skipped.step.as_str()),
            (Status::Cancelled, "skipped: the pipeline failed in sync")
        );
    }
    nothing_ready(&*s).await;
    every_lock_is_free(&*s, &t).await;
}

/// Asserts that pipeline `p`, whose first step runs as `running`, is stopping: it and that
/// step read `cancelling` (the run is told at its renewal), the other steps were skipped.
async fn assert_stopping(s: &dyn JobStore, p: &NewPipeline, running: &Claim) {
    assert_eq!(read(s, &p.job.id).await.status, Status::Cancelling);
    assert_eq!(read(s, &running.job.id).await.status, Status::Cancelling);
    for (step, _) in &p.steps[1..] {
        let skipped = read(s, &step.id).await;
        assert_eq!(
            (skipped.status, skipped.step.as_str()),
            (Status::Cancelled, "skipped: the pipeline was cancelled")
        );
    }
    assert_eq!(
        s.renew(&[running.run]).await.unwrap(),
        vec![Renewal::CancelRequested]
    );
}

async fn cancelling_a_pipeline_stops_its_running_step_and_skips_the_others(b: Stores) {
    let s = fresh(b);
    let t = tenant();
    let (p, claim) = running_pipeline(&*s, &t, &["sync", "enrich", "pair"]).await;
    assert_eq!(s.cancel(&p.job.id, "ops").await.unwrap(), Cancel::Requested);
    assert_stopping(&*s, &p, &claim).await;
    end(&*s, &claim, Outcome::Cancelled(json!({"saved": 1}))).await;
    assert_cancelled_by(&*s, &p.job.id, "ops").await;
    nothing_ready(&*s).await;
    every_lock_is_free(&*s, &t).await;
}

/// The race a cancel can lose: the running step finishes its work before it reads the
/// request and ends `done`. The steps after it were skipped, so the pipeline ends `cancelled`
/// with it, not `cancelling` for ever (the embedded store left it so: a hostile probe's
/// finding, 1 pipeline in ~25).
async fn a_step_that_ends_done_after_its_pipeline_was_asked_to_stop_ends_it_cancelled(b: Stores) {
    let s = fresh(b);
    let t = tenant();
    let (p, claim) = running_pipeline(&*s, &t, &["sync", "enrich", "pair"]).await;
    assert_eq!(s.cancel(&p.job.id, "ops").await.unwrap(), Cancel::Requested);
    end(&*s, &claim, Outcome::Done(json!({"read": 1}))).await;
    assert_eq!(read(&*s, &claim.job.id).await.status, Status::Done);
    assert_cancelled_by(&*s, &p.job.id, "ops").await;
    assert!(read(&*s, &p.job.id).await.finished_at.is_some());
    nothing_ready(&*s).await;
    every_lock_is_free(&*s, &t).await;
}

/// The same race on the last step: nothing was skipped and all of the pipeline's work is done,
/// so it ends `done` (as a job that finishes before it reads a cancel does), keeping who asked
/// and when; never `cancelled` on one store and `done` on the other.
async fn the_last_step_ending_done_after_its_pipeline_was_asked_to_stop_ends_it_done(b: Stores) {
    let s = fresh(b);
    let t = tenant();
    let (p, sync) = running_pipeline(&*s, &t, &["sync", "enrich"]).await;
    end(&*s, &sync, Outcome::Done(json!({"read": 1}))).await;
    let enrich = claim_exactly(&*s, p.steps[1].0.id).await;
    assert_eq!(s.cancel(&p.job.id, "ops").await.unwrap(), Cancel::Requested);
    assert_eq!(read(&*s, &p.job.id).await.status, Status::Cancelling);
    end(&*s, &enrich, Outcome::Done(json!({"enriched": 1}))).await;
    let done = read(&*s, &p.job.id).await;
    assert_eq!(
        (done.status, done.step.as_str(), done.percent),
        (Status::Done, "finished", 100)
    );
    assert_eq!(done.cancelled_by.as_deref(), Some("ops"));
    assert!(done.cancel_requested_at.is_some() && done.finished_at.is_some());
    let ended = s.timeline(&p.job.id, None).await.unwrap();
    let last = ended.last().expect("the pipeline's timeline");
    assert_eq!(
        (last.kind.as_str(), last.status.as_str()),
        ("finished", "done")
    );
    nothing_ready(&*s).await;
    every_lock_is_free(&*s, &t).await;
}

/// A pipeline reads `running` from its first step's start until it ends: while that step's
/// lease is stale and once it is re-queued (attempt left), and between its steps while the
/// next one waits for a worker; its `step_ended` event carries `running`. It read `queued`
/// then, its events too (a hostile probe's finding).
async fn a_started_pipeline_reads_running_until_it_ends_never_queued_again(b: Stores) {
    let s = leases_of(b, 200, 2);
    let (p, _) = running_pipeline(&*s, &tenant(), &["sync", "enrich"]).await;
    assert_eq!(read(&*s, &p.job.id).await.status, Status::Running);
    outlive(200).await;
    let stale = read(&*s, &p.steps[0].0.id).await;
    assert_eq!(stale.status, Status::Queued, "its step will run again");
    assert_eq!(
        read(&*s, &p.job.id).await.status,
        Status::Running,
        "its step's lease is stale"
    );
    s.recover().await.unwrap();
    assert_eq!(
        read(&*s, &p.job.id).await.status,
        Status::Running,
        "its step is re-queued"
    );
    let sync = claim_exactly(&*s, p.steps[0].0.id).await;
    end(&*s, &sync, Outcome::Done(json!({}))).await;
    assert_eq!(read(&*s, &p.steps[1].0.id).await.status, Status::Queued);
    assert_eq!(
        read(&*s, &p.job.id).await.status,
        Status::Running,
        "between its steps"
    );
    let events = s.timeline(&p.job.id, None).await.unwrap();
    let ended = events
        .iter()
        .find(|e| e.kind == "step_ended")
        .expect("the step's end is on the pipeline's timeline");
    assert_eq!(ended.status, "running");
}

/// The `cancel_requested` event of a pipeline carries what the pipeline read when it was
/// asked: its steps' percents by their shares and its running step's step, `kind: step` (it
/// carried its record's 0 % and `queued`, which a pipeline's record keeps while it runs).
async fn a_pipeline_s_cancel_request_is_on_its_timeline_at_the_percent_and_step_it_read(b: Stores) {
    let s = fresh(b);
    let (p, sync) = running_pipeline(&*s, &tenant(), &["sync", "enrich", "pair"]).await;
    end(&*s, &sync, Outcome::Done(json!({}))).await;
    let enrich = claim_exactly(&*s, p.steps[1].0.id).await;
    s.tick(&enrich.run, 50, "matching").await.unwrap();
    let before = read(&*s, &p.job.id).await;
    assert_eq!(before.step, "enrich: matching");
    assert!(
        before.percent > 0,
        "the done sync counts: {}",
        before.percent
    );
    assert_eq!(s.cancel(&p.job.id, "ops").await.unwrap(), Cancel::Requested);
    let events = s.timeline(&p.job.id, None).await.unwrap();
    let asked = events
        .iter()
        .find(|e| e.kind == "cancel_requested")
        .expect("the request is on the pipeline's timeline");
    assert_eq!(
        (asked.status.as_str(), asked.percent, asked.step.as_str()),
        ("cancelling", before.percent, before.step.as_str())
    );
}

async fn a_pipeline_cancelled_before_any_step_started_ends_at_once(b: Stores) {
    let s = fresh(b);
    let p = pipeline_of(&tenant(), &["sync", "enrich"]);
    create_pipeline(&*s, &p).await;
    assert_eq!(s.cancel(&p.job.id, "ops").await.unwrap(), Cancel::Requested);
    assert_eq!(read(&*s, &p.job.id).await.status, Status::Cancelled);
    assert_eq!(read(&*s, &p.steps[0].0.id).await.status, Status::Cancelled);
    nothing_ready(&*s).await;
    assert_eq!(s.cancel(&p.job.id, "ops").await.unwrap(), Cancel::NotActive);
}

async fn cancelling_a_step_ends_its_pipeline_as_cancelled(b: Stores) {
    let s = fresh(b);
    let (p, sync) = running_pipeline(&*s, &tenant(), &["sync", "enrich", "pair"]).await;
    end(&*s, &sync, Outcome::Done(json!({}))).await;
    let enrich = p.steps[1].0.id;
    assert_eq!(s.cancel(&enrich, "alice").await.unwrap(), Cancel::Requested);
    assert_cancelled_by(&*s, &p.job.id, "alice").await;
    assert_eq!(read(&*s, &p.steps[2].0.id).await.status, Status::Cancelled);
    nothing_ready(&*s).await;
}

/// A step cancelled on its own while an earlier one runs ends its pipeline the same way as
/// the pipeline's own cancel: the running step is asked to stop, the others are skipped, and
/// the pipeline reads `cancelling` until the running step stops (it was ended `cancelled` at
/// once while its sync ran on, and the enrich after it then ran: a hostile probe's finding).
async fn cancelling_a_waiting_step_stops_the_running_one_and_ends_the_pipeline_with_it(b: Stores) {
    let s = fresh(b);
    let t = tenant();
    let (p, sync) = running_pipeline(&*s, &t, &["sync", "enrich", "pair"]).await;
    let pair = p.steps[2].0.id;
    assert_eq!(s.cancel(&pair, "alice").await.unwrap(), Cancel::Requested);
    assert_stopping(&*s, &p, &sync).await;
    assert_eq!(s.cancel(&pair, "bob").await.unwrap(), Cancel::NotActive);
    end(&*s, &sync, Outcome::Cancelled(json!({"saved": 1}))).await;
    assert_cancelled_by(&*s, &p.job.id, "alice").await;
    nothing_ready(&*s).await;
    every_lock_is_free(&*s, &t).await;
}

async fn a_step_lost_for_good_fails_its_pipeline_as_lost(b: Stores) {
    let s = leases_of(b, 200, 1);
    let (p, _) = running_pipeline(&*s, &tenant(), &["sync", "enrich"]).await;
    outlive(200).await;
    s.recover().await.unwrap();
    let failed = read(&*s, &p.job.id).await;
    assert_eq!(
        (failed.status, failed.error.as_deref()),
        (Status::Failed, Some("Lost"))
    );
    assert_eq!(read(&*s, &p.steps[1].0.id).await.status, Status::Cancelled);
    nothing_ready(&*s).await;
}

async fn a_pipeline_waits_behind_its_tenant_s_running_job(b: Stores) {
    let s = fresh(b);
    let t = tenant();
    let before = ordered(&t, "k1");
    create(&*s, &before).await;
    let running = claim_exactly(&*s, before.id).await;
    let p = pipeline_of(&t, &["sync", "enrich"]);
    create_pipeline(&*s, &p).await;
    assert_eq!(
        read(&*s, &p.steps[0].0.id).await.waiting_for,
        Some(before.id)
    );
    nothing_ready(&*s).await;
    end(&*s, &running, Outcome::Done(json!({}))).await;
    claim_exactly(&*s, p.steps[0].0.id).await;
}
