//! Idempotency keys, joining an active job, the per-tenant create limit and the audit
//! fields: the store contract on both stores, then end to end over real HTTP.

use std::sync::Arc;
use std::time::{Duration, Instant};

use catalog_jobs::jobs::store::{params_fingerprint, Created, JobStore, RunId, StoreSettings};
use catalog_jobs::jobs::Status;
use serde_json::{json, Value};

use crate::both_stores;
use crate::helpers::{
    create, create_at_once, eventually, finish, new_job, retry_after, settings, spawn_app_with,
    store, tenant, test_config, test_kinds, Backend, CountingStore, Gate, TestApp,
};
use catalog_jobs::config::tokens::hash_token;
use catalog_jobs::jobs::store::Outcome;
use catalog_jobs::jobs::TenantId;
use reqwest::{Method, Response};

use crate::helpers::{RedisServer, Service};

fn keyed(t: &catalog_jobs::jobs::TenantId, key: &str) -> catalog_jobs::jobs::store::NewJob {
    let mut job = new_job(t, "sync");
    job.idempotency_key = Some(key.to_owned());
    job
}

/// Claims the one queued job of a fresh store.
async fn claimed(s: &dyn JobStore) -> RunId {
    let claim = s.claim("test/1", &test_kinds()).await.unwrap();
    claim.expect("a job is queued").run
}

both_stores!(
    a_keyed_retry_answers_the_first_job_while_queued_and_after_it_ended,
    a_key_sent_with_other_parameters_is_reused_and_creates_nothing,
    a_refused_create_records_no_key,
    keys_are_scoped_to_tenant_and_kind,
    twenty_concurrent_keyed_creates_make_one_job_and_all_name_it,
    beyond_the_tenants_creates_per_minute_a_create_is_rate_limited_and_leaves_nothing,
    a_job_records_who_created_it_in_which_request_and_who_cancelled_it,
);

async fn a_keyed_retry_answers_the_first_job_while_queued_and_after_it_ended(b: Backend) {
    let s = store(b, settings());
    let t = tenant();
    let first = keyed(&t, "k-1");
    let created = create(&*s, &first).await;
    let retry = keyed(&t, "k-1");
    assert_eq!(
        s.create(retry.clone()).await.unwrap(),
        Created::Replayed(first.id),
        "queued"
    );
    let run = claimed(&*s).await;
    assert_eq!(
        s.create(retry.clone()).await.unwrap(),
        Created::Replayed(first.id),
        "running"
    );
    finish(&*s, &first, &run, &created, Outcome::Done(json!({}))).await;
    assert_eq!(
        s.create(retry).await.unwrap(),
        Created::Replayed(first.id),
        "ended: the key lives as long as the job"
    );
    assert_eq!(s.recent(&t, 10).await.unwrap().len(), 1, "one job only");
}

async fn a_key_sent_with_other_parameters_is_reused_and_creates_nothing(b: Backend) {
    let s = store(b, settings());
    let t = tenant();
    let first = keyed(&t, "k");
    create(&*s, &first).await;
    let mut other = keyed(&t, "k");
    other.params = json!({"source": ["elsewhere.jsonl"]});
    assert_ne!(
        params_fingerprint(&other.params),
        params_fingerprint(&first.params)
    );
    assert_eq!(
        s.create(other.clone()).await.unwrap(),
        Created::KeyReused(first.id)
    );
    assert!(s.get(&other.id).await.unwrap().is_none());
}

async fn a_refused_create_records_no_key(b: Backend) {
    let s = store(b, settings());
    let t = tenant();
    let holder = new_job(&t, "sync");
    create(&*s, &holder).await;
    let refused = keyed(&t, "k");
    assert_eq!(
        s.create(refused.clone()).await.unwrap(),
        Created::AlreadyRunning(holder.id)
    );
    s.cancel(&holder.id, "tester").await.unwrap();
    let again = keyed(&t, "k");
    let made = create(&*s, &again).await;
    assert_eq!(
        made.job_id, again.id,
        "the key was free: the 409 recorded nothing"
    );
}

async fn keys_are_scoped_to_tenant_and_kind(b: Backend) {
    let s = store(b, settings());
    let (t, u) = (tenant(), tenant());
    create(&*s, &keyed(&t, "same")).await;
    create(&*s, &keyed(&u, "same")).await;
    let mut enrich = keyed(&t, "same");
    enrich.kind = catalog_jobs::jobs::Kind::parse("enrich").unwrap();
    create(&*s, &enrich).await;
}

async fn twenty_concurrent_keyed_creates_make_one_job_and_all_name_it(b: Backend) {
    let s = store(b, settings());
    let t = tenant();
    let (mut made, mut replayed) = (Vec::new(), Vec::new());
    for answer in create_at_once(&s, 20, || keyed(&t, "burst")).await {
        match answer {
            (id, Created::Created(..)) => made.push(id),
            (_, Created::Replayed(id)) => replayed.push(id),
            (_, other) => panic!("a keyed retry is a replay: {other:?}"),
        }
    }
    assert_eq!(made.len(), 1);
    assert_eq!(replayed.len(), 19);
    assert!(replayed.iter().all(|id| *id == made[0]));
    assert_eq!(s.recent(&t, 100).await.unwrap().len(), 1);
}

async fn beyond_the_tenants_creates_per_minute_a_create_is_rate_limited_and_leaves_nothing(
    b: Backend,
) {
    let s = store(
        b,
        StoreSettings {
            creates_per_minute: 2,
            ..settings()
        },
    );
    crate::helpers::clear_of_a_minute_edge().await;
    let t = tenant();
    for kind in ["sync", "enrich"] {
        create(&*s, &new_job(&t, kind)).await;
    }
    let third = new_job(&t, "pair");
    match s.create(third.clone()).await.unwrap() {
        Created::RateLimited(wait) => {
            assert!(
                wait > Duration::ZERO && wait <= Duration::from_secs(60),
                "{wait:?}"
            )
        }
        other => panic!("expected a rate limit, got {other:?}"),
    }
    assert!(s.get(&third.id).await.unwrap().is_none());
    assert_eq!(s.recent(&t, 10).await.unwrap().len(), 2);
    create(&*s, &new_job(&tenant(), "pair")).await;
}

async fn a_job_records_who_created_it_in_which_request_and_who_cancelled_it(b: Backend) {
    let s = store(b, settings());
    let t = tenant();
    let mut job = new_job(&t, "sync");
    job.origin.created_by = "ci-bot".into();
    job.origin.request_id = "req-42".into();
    let made = create(&*s, &job).await;
    claimed(&*s).await;
    assert_eq!(made.created_by.as_deref(), Some("ci-bot"));
    let read = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(read.created_by.as_deref(), Some("ci-bot"));
    assert_eq!(read.request_id.as_deref(), Some("req-42"));
    assert_eq!(read.cancelled_by, None);
    s.cancel(&job.id, "ops-alice").await.unwrap();
    s.cancel(&job.id, "ops-bob").await.unwrap();
    let asked = s.get(&job.id).await.unwrap().unwrap();
    assert_eq!(asked.status, Status::Cancelling);
    assert_eq!(
        asked.cancelled_by.as_deref(),
        Some("ops-alice"),
        "the first to ask is recorded"
    );
    let queued = new_job(&t, "enrich");
    create(&*s, &queued).await;
    s.cancel(&queued.id, "ops-carol").await.unwrap();
    let ended = s.get(&queued.id).await.unwrap().unwrap();
    assert_eq!(ended.status, Status::Cancelled);
    assert_eq!(ended.cancelled_by.as_deref(), Some("ops-carol"));
}

// ---------------------------------------------------------------------------------------
// Over HTTP

both_stores!(
    a_keyed_retry_replays_the_first_job_before_and_after_it_ends,
    a_key_sent_again_with_other_parameters_is_422_and_creates_nothing,
    an_empty_or_overlong_key_is_an_invalid_field,
    twenty_concurrent_keyed_requests_start_one_job_and_all_answer_with_it,
    joining_an_active_job_with_the_same_parameters_answers_with_it_with_and_without_wait,
    joining_an_active_job_with_other_parameters_is_409_saying_they_differ,
    two_requests_waiting_for_one_job_both_answer_at_its_end,
    the_snapshot_shows_who_started_and_cancelled_the_job_and_the_request_id,
    beyond_tenant_creates_per_minute_a_start_is_429_with_retry_after,
);

/// One worker, so a held job keeps a second one of its tenant queued.
async fn app(b: Backend) -> TestApp {
    let mut config = test_config();
    config.max_concurrent_jobs = 1;
    spawn_app_with(config, store(b, settings())).await
}

fn replayed(r: &Response) -> bool {
    r.headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

async fn accepted_id(r: Response) -> String {
    assert_eq!(r.status(), 202);
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    let body: Value = r.json().await.unwrap();
    let id = body["job_id"].as_str().unwrap().to_owned();
    assert_eq!(location, format!("/catalog/jobs/{id}"));
    id
}

async fn job_count(app: &TestApp, t: &TenantId) -> usize {
    let list = app.get_json(&format!("/catalog/jobs?tenant_id={t}")).await;
    list["jobs"].as_array().unwrap().len()
}

async fn a_keyed_retry_replays_the_first_job_before_and_after_it_ends(b: Backend) {
    let app = app(b).await;
    let t = tenant();
    let form = [("tenant_id", t.as_str())];
    let first = app.start_keyed("gated", &form, Some("order-1")).await;
    assert!(!replayed(&first), "the first request is not a replay");
    let id = accepted_id(first).await;
    Gate::of(&t).reached().await;
    let retry = app.start_keyed("gated", &form, Some("order-1")).await;
    assert!(replayed(&retry));
    assert_eq!(accepted_id(retry).await, id, "running: the same job");
    Gate::of(&t).release();
    app.poll_until_ended(&id).await;
    let waiting = [("tenant_id", t.as_str()), ("wait", "true")];
    let waited = app.start_keyed("gated", &waiting, Some("order-1")).await;
    assert_eq!(waited.status(), 200, "ended: wait=true answers its outcome");
    assert!(replayed(&waited));
    assert_eq!(
        waited.json::<Value>().await.unwrap(),
        json!({"gated": true})
    );
    let late = app.start_keyed("gated", &form, Some("order-1")).await;
    assert!(replayed(&late));
    assert_eq!(accepted_id(late).await, id);
    assert_eq!(job_count(&app, &t).await, 1);
}

async fn a_key_sent_again_with_other_parameters_is_422_and_creates_nothing(b: Backend) {
    let app = app(b).await;
    let t = tenant();
    let one_tick = [("tenant_id", t.as_str()), ("n", "1")];
    let id = accepted_id(app.start_keyed("ticker", &one_tick, Some("k")).await).await;
    app.poll_until_ended(&id).await;
    let two_ticks = [("tenant_id", t.as_str()), ("n", "2")];
    let other = app.start_keyed("ticker", &two_ticks, Some("k")).await;
    assert_eq!(other.status(), 422);
    let body: Value = other.json().await.unwrap();
    assert_eq!(body["error"], "idempotency_key_reused");
    assert_eq!(body["job_id"], id.as_str());
    assert_eq!(job_count(&app, &t).await, 1);
}

async fn an_empty_or_overlong_key_is_an_invalid_field(b: Backend) {
    let app = app(b).await;
    let t = tenant();
    let form = [("tenant_id", t.as_str())];
    for key in [String::new(), "k".repeat(256), "a\tb".to_owned()] {
        let r = app.start_keyed("ticker", &form, Some(&key)).await;
        assert_eq!(r.status(), 422, "key {key:?}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "invalid_field");
        assert_eq!(body["field"], "Idempotency-Key");
        let message = body["message"].as_str().unwrap();
        assert!(
            message.contains("visible ASCII characters or spaces"),
            "{message}"
        );
    }
    assert_eq!(job_count(&app, &t).await, 0);
    let longest = "k".repeat(255);
    accepted_id(app.start_keyed("ticker", &form, Some(&longest)).await).await;
    // What the message allows is taken: a space is one of them.
    let other = tenant();
    let form = [("tenant_id", other.as_str())];
    accepted_id(app.start_keyed("ticker", &form, Some("a b")).await).await;
}

async fn twenty_concurrent_keyed_requests_start_one_job_and_all_answer_with_it(b: Backend) {
    let app = Arc::new(app(b).await);
    let t = tenant();
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (app, t) = (app.clone(), t.clone());
            tokio::spawn(async move {
                let r = app
                    .start_keyed("gated", &[("tenant_id", t.as_str())], Some("burst"))
                    .await;
                let again = replayed(&r);
                (accepted_id(r).await, again)
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    let id = &answers[0].0;
    assert!(answers.iter().all(|(other, _)| other == id), "{answers:?}");
    assert_eq!(answers.iter().filter(|(_, again)| !again).count(), 1);
    assert_eq!(job_count(&app, &t).await, 1);
    Gate::of(&t).release();
    app.poll_until_ended(id).await;
}

async fn joining_an_active_job_with_the_same_parameters_answers_with_it_with_and_without_wait(
    b: Backend,
) {
    let counting = Arc::new(CountingStore::new(store(b, settings())));
    let creates = counting.creates.clone();
    let app = Arc::new(spawn_app_with(test_config(), counting).await);
    let t = tenant();
    let form = [("tenant_id", t.as_str())];
    let id = accepted_id(app.start_keyed("gated", &form, None).await).await;
    Gate::of(&t).reached().await;
    let join = [("tenant_id", t.as_str()), ("on_conflict", "join")];
    assert_eq!(
        accepted_id(app.start_keyed("gated", &join, None).await).await,
        id
    );
    let waiter = {
        let (app, t) = (app.clone(), t.clone());
        tokio::spawn(async move {
            let form = [
                ("tenant_id", t.as_str()),
                ("on_conflict", "join"),
                ("wait", "true"),
            ];
            let r = app.start_keyed("gated", &form, None).await;
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        })
    };
    // Released only once the waiter's create was answered (it joined the held job): else it
    // could start a job of its own.
    let reached = async || match creates.load(std::sync::atomic::Ordering::SeqCst) {
        3.. => Ok(()),
        _ => Err("the waiter never reached the store".to_owned()),
    };
    eventually(Duration::from_secs(10), reached).await;
    assert!(!waiter.is_finished(), "the waiter waits for the held job");
    Gate::of(&t).release();
    let (status, body) = waiter.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"gated": true}));
    let bad = app
        .start_keyed(
            "gated",
            &[("tenant_id", t.as_str()), ("on_conflict", "merge")],
            None,
        )
        .await;
    assert_eq!(bad.status(), 422);
    assert_eq!(bad.json::<Value>().await.unwrap()["field"], "on_conflict");
    assert_eq!(job_count(&app, &t).await, 1);
}

/// A `wait=true` start of a held job, keyed `key`, answered in a task: its status, whether
/// it replayed, its body, and when it was answered.
fn waiting_start(
    app: &Arc<TestApp>,
    t: &TenantId,
    key: &'static str,
) -> tokio::task::JoinHandle<(u16, bool, Value, Instant)> {
    let (app, t) = (app.clone(), t.clone());
    tokio::spawn(async move {
        let form = [("tenant_id", t.as_str()), ("wait", "true")];
        let r = app.start_keyed("gated", &form, Some(key)).await;
        let (status, again) = (r.status().as_u16(), replayed(&r));
        (status, again, r.json().await.unwrap(), Instant::now())
    })
}

/// Two requests waiting for one job (the second replays the first's key) both wake at its
/// end: neither's wake-up takes the other's place, which left the first to its 1 s re-read.
async fn two_requests_waiting_for_one_job_both_answer_at_its_end(b: Backend) {
    let counting = Arc::new(CountingStore::new(store(b, settings())));
    let awaits = counting.awaits.clone();
    let app = Arc::new(spawn_app_with(test_config(), counting).await);
    let t = tenant();
    let waiting = |n: usize| {
        let awaits = awaits.clone();
        async move || match awaits.load(std::sync::atomic::Ordering::SeqCst) {
            k if k >= n => Ok(()),
            k => Err(format!("{k} of {n} requests wait")),
        }
    };
    let first = waiting_start(&app, &t, "one-job");
    Gate::of(&t).reached().await;
    eventually(Duration::from_secs(10), waiting(1)).await;
    let second = waiting_start(&app, &t, "one-job");
    eventually(Duration::from_secs(10), waiting(2)).await;
    assert!(!first.is_finished() && !second.is_finished(), "both wait");
    let ended = Instant::now();
    Gate::of(&t).release();
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    for (what, (status, _, body, at)) in [("first", &first), ("second", &second)] {
        assert_eq!(*status, 200, "{what}: {body}");
        assert_eq!(*body, json!({"gated": true}), "{what}: the end state");
        assert!(*at > ended, "{what} answered after the end");
    }
    assert!(!first.1 && second.1, "the second replays the first's key");
    // Both are woken by the same end: a request left to its once-a-second re-read answers
    // most of a second after the other.
    let apart = first.3.max(second.3) - first.3.min(second.3);
    assert!(
        apart < Duration::from_millis(500),
        "answered {apart:?} apart: one of them was not woken by the end"
    );
}

async fn joining_an_active_job_with_other_parameters_is_409_saying_they_differ(b: Backend) {
    let app = app(b).await;
    let t = tenant();
    // The held job takes the only worker: the ticker waits queued (active) behind it.
    let held = accepted_id(
        app.start_keyed("gated", &[("tenant_id", t.as_str())], None)
            .await,
    )
    .await;
    Gate::of(&t).reached().await;
    let queued = accepted_id(
        app.start_keyed("ticker", &[("tenant_id", t.as_str()), ("n", "5")], None)
            .await,
    )
    .await;
    let same = [
        ("tenant_id", t.as_str()),
        ("n", "5"),
        ("on_conflict", "join"),
    ];
    assert_eq!(
        accepted_id(app.start_keyed("ticker", &same, None).await).await,
        queued
    );
    let other = [
        ("tenant_id", t.as_str()),
        ("n", "6"),
        ("on_conflict", "join"),
    ];
    let r = app.start_keyed("ticker", &other, None).await;
    assert_eq!(r.status(), 409);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "already_running");
    assert_eq!(body["job_id"], queued.as_str());
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("different parameters"),
        "{body}"
    );
    Gate::of(&t).release();
    app.poll_until_ended(&held).await;
    app.poll_until_ended(&queued).await;
    assert_eq!(job_count(&app, &t).await, 2);
}

async fn the_snapshot_shows_who_started_and_cancelled_the_job_and_the_request_id(b: Backend) {
    let t = tenant();
    let token = format!("{t}-secret");
    let mut config = test_config();
    config.api_tokens = Some(format!("{t} shop-bot {}", hash_token(&token)));
    let app = spawn_app_with(config, store(b, settings())).await;
    let r = app
        .client
        .post(app.url("/catalog/gated"))
        .bearer_auth(&token)
        .header("x-request-id", "audit-1")
        .form(&[("tenant_id", t.as_str())])
        .send()
        .await
        .unwrap();
    let started: Value = r.json().await.unwrap();
    assert_eq!(started["created_by"], "shop-bot");
    assert_eq!(started["request_id"], "audit-1");
    assert_eq!(started["cancelled_by"], Value::Null);
    let id = started["job_id"].as_str().unwrap().to_owned();
    Gate::of(&t).reached().await;
    let cancel = format!("/catalog/jobs/{id}/cancel");
    let cancel = app.send_as(Method::POST, &cancel, Some(&token)).await;
    assert_eq!(cancel.status(), 202);
    let read = app.get_as(&format!("/catalog/jobs/{id}"), &token).await;
    let read: Value = read.json().await.unwrap();
    assert_eq!(read["cancelled_by"], "shop-bot");
    assert_eq!(read["created_by"], "shop-bot");
    assert_eq!(read["request_id"], "audit-1");

    // Without tokens the caller is `anonymous`; a request without an id gets the one echoed.
    let open = spawn_app_with(test_config(), store(b, settings())).await;
    let u = tenant();
    let r = open
        .start_keyed("ticker", &[("tenant_id", u.as_str()), ("n", "1")], None)
        .await;
    let echoed = r.headers()["x-request-id"].to_str().unwrap().to_owned();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["created_by"], "anonymous");
    assert_eq!(body["request_id"], echoed.as_str());
}

async fn beyond_tenant_creates_per_minute_a_start_is_429_with_retry_after(b: Backend) {
    let mut config = test_config();
    config.tenant_creates_per_minute = 2;
    let s = store(
        b,
        StoreSettings {
            creates_per_minute: 2,
            ..settings()
        },
    );
    let app = spawn_app_with(config, s).await;
    crate::helpers::clear_of_a_minute_edge().await;
    let t = tenant();
    for n in ["1", "2"] {
        let id = accepted_id(
            app.start_keyed("ticker", &[("tenant_id", t.as_str()), ("n", n)], None)
                .await,
        )
        .await;
        app.poll_until_ended(&id).await;
    }
    let r = app
        .start_keyed("ticker", &[("tenant_id", t.as_str())], Some("after-limit"))
        .await;
    assert_eq!(r.status(), 429);
    let wait = retry_after(&r);
    assert!((1..=60).contains(&wait), "Retry-After {wait}");
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "rate_limited");
    assert_eq!(job_count(&app, &t).await, 2, "the refusal created nothing");
    let u = tenant();
    accepted_id(
        app.start_keyed("ticker", &[("tenant_id", u.as_str())], None)
            .await,
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// Two replicas (the real binary twice) on one Redis

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_from_a_second_replica_answers_the_first_job_and_the_rate_limit_is_shared() {
    let redis = RedisServer::start(false);
    let launch = Service::on(&redis).env("TENANT_CREATES_PER_MINUTE", "2");
    let (a, b) = (launch.clone().start().await, launch.start().await);
    crate::helpers::clear_of_a_minute_edge().await;
    let t = tenant();
    let sync = [("tenant_id", t.as_str()), ("source", "demo.jsonl")];
    let first = a.start_keyed("sync", &sync, Some("nightly-1")).await;
    let id = accepted_id(first).await;
    let retry = b.start_keyed("sync", &sync, Some("nightly-1")).await;
    assert!(replayed(&retry), "the key is in the shared store");
    assert_eq!(accepted_id(retry).await, id);
    let enrich = b
        .start_keyed("enrich", &[("tenant_id", t.as_str())], None)
        .await;
    assert_eq!(enrich.status(), 202, "the second create of the minute");
    let pair = a
        .start_keyed("pair", &[("tenant_id", t.as_str())], None)
        .await;
    assert_eq!(pair.status(), 429, "the two replicas count together");
    assert!(pair.headers().contains_key("retry-after"));
}
