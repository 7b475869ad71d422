//! Job timelines and live streams over real HTTP: `GET /catalog/jobs/{id}/events`
//! as JSON and as Server-Sent Events (resuming with `Last-Event-ID`, 204 after the end, seen
//! from another replica), `GET /catalog/events?tenant_id=T`, their 404/403/422s, and a
//! shutdown that does not wait on open streams.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use catalog_jobs::config::tokens::hash_token;
use catalog_jobs::jobs::store::{Outcome, Tick};
use catalog_jobs::jobs::timeline::EventId;
use catalog_jobs::jobs::TenantId;
use catalog_jobs::startup::App;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::both_stores;
use crate::helpers::RedisServer;
use crate::helpers::{eventually, finish, new_job, settings, start, store, tenant, Api, Backend};
use crate::helpers::{spawn_app, spawn_app_with, test_config, Gate, Service, TestApp};
use crate::helpers::{JsonAnswer, SseFrame, SseReader};

both_stores!(
    a_job_stream_sends_its_timeline_from_created_to_finished_then_closes,
    reconnecting_with_last_event_id_mid_job_misses_nothing_and_repeats_nothing,
    a_stream_asked_for_after_the_end_gets_204_and_json_after_the_end_is_empty,
    the_tenant_stream_sees_that_tenant_s_jobs_only,
    an_unknown_id_or_a_bad_resume_id_is_refused_with_json,
    a_last_event_id_given_twice_is_400_naming_it,
    a_stream_resumed_after_an_id_beyond_the_job_s_last_event_ends_when_the_job_ends,
    a_tenant_beyond_its_share_of_streams_is_refused_429_and_a_full_instance_503,
    a_stream_opened_at_any_moment_gets_every_tick_after_what_it_replayed,
    a_reconnecting_tenant_stream_starts_with_a_resync_and_then_follows_live,
);

/// Resume ids no clock reaches: past the year 9999, and the largest pair of numbers, after
/// which Redis has no next id to read from.
const FAR_BEYOND: [&str; 3] = [
    "18446744073709551615-18446744073709551615",
    "99999999999999999999-0",
    "253402300800000-0",
];
/// A bound on a stream that should end, so that one that never does fails the test instead
/// of hanging it (its keep-alives would keep a reader waiting for ever).
const ENDS_WITHIN: Duration = Duration::from_secs(30);
/// A bound on a frame the service sends as the stream opens: under the 15 s keep-alive.
const FIRST_FRAME_WITHIN: Duration = Duration::from_secs(10);

/// Opens a job's event stream, resuming after `last` when given.
async fn open(api: &Api, id: &str, last: Option<&str>) -> reqwest::Response {
    let path = format!("/catalog/jobs/{id}/events");
    match last {
        None => api.stream(&path).await,
        Some(last) => {
            let resumed = [("accept", "text/event-stream"), ("last-event-id", last)];
            api.get_with(&path, &resumed).await
        }
    }
}

/// Asserts that resuming job `id`'s timeline after `bad` is refused: asked for as JSON
/// (naming `after`) and as a stream (`Last-Event-ID`).
async fn assert_resume_is_refused(api: &Api, id: &str, bad: &str) {
    let body = api
        .get_json(&format!("/catalog/jobs/{id}/events?after={bad}"))
        .await;
    let refusal = (body["error"].as_str(), body["field"].as_str());
    assert_eq!(refusal, (Some("invalid_field"), Some("after")), "{bad}");
    let status = open(api, id, Some(bad)).await.status();
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "Last-Event-ID {bad}"
    );
    // A bad `after` is refused even beside a good Last-Event-ID, which takes its place.
    let path = format!("/catalog/jobs/{id}/events?after={bad}");
    let resumed = [("accept", "text/event-stream"), ("last-event-id", "1-0")];
    let r = api.get_with(&path, &resumed).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "after={bad}");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["field"], "after", "{body}");
}

/// Reads frames until the server closes the stream.
async fn read_to_end(reader: &mut SseReader) -> Vec<SseFrame> {
    let mut frames = Vec::new();
    while let Some(frame) = reader.next().await {
        frames.push(frame);
    }
    frames
}

fn types(frames: &[SseFrame]) -> Vec<String> {
    frames.iter().map(|f| f.event.clone().unwrap()).collect()
}

/// The job's whole timeline as JSON.
async fn timeline(app: &TestApp, id: &str) -> Vec<Value> {
    let body = app.get_json(&format!("/catalog/jobs/{id}/events")).await;
    body["events"].as_array().expect("an events array").clone()
}

/// The ids of the job's timeline events, in order.
async fn timeline_ids(app: &TestApp, id: &str) -> Vec<Value> {
    timeline(app, id)
        .await
        .iter()
        .map(|e| e["id"].clone())
        .collect()
}

/// The ids the stream sent its frames under, in order.
fn frame_ids(frames: &[SseFrame]) -> Vec<Value> {
    frames
        .iter()
        .map(|f| Value::from(f.id.clone().expect("a timeline frame has an id")))
        .collect()
}

async fn a_job_stream_sends_its_timeline_from_created_to_finished_then_closes(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    let three_ticks = [("tenant_id", t.as_str()), ("n", "3")];
    let id = app.start_id("ticker", &three_ticks).await;
    let response = open(&app, &id, None).await;
    assert_eq!(response.headers()["x-accel-buffering"], "no");
    assert_eq!(response.headers()["cache-control"], "no-cache");
    let frames = read_to_end(&mut SseReader::new(response)).await;
    let seen = types(&frames);
    assert_eq!(
        seen.first().map(String::as_str),
        Some("created"),
        "{seen:?}"
    );
    assert_eq!(
        seen.last().map(String::as_str),
        Some("finished"),
        "{seen:?}"
    );
    assert!(seen.contains(&"started".to_owned()), "{seen:?}");
    for frame in &frames {
        let event = frame.json();
        assert_eq!(
            frame.id.as_deref(),
            event["id"].as_str(),
            "id: is the event's id"
        );
        assert_eq!(frame.event.as_deref(), event["type"].as_str());
        for field in ["at", "status", "percent", "step"] {
            assert!(!event[field].is_null(), "{field} in {event}");
        }
    }
    let finished = frames.last().unwrap().json();
    assert_eq!(
        (finished["status"].as_str(), finished["percent"].as_u64()),
        (Some("done"), Some(100))
    );
    let ids = timeline_ids(&app, &id).await;
    let sent = frame_ids(&frames);
    assert_eq!(sent, ids, "the stream sent the timeline, in order, once");
}

async fn reconnecting_with_last_event_id_mid_job_misses_nothing_and_repeats_nothing(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    let gate = Gate::of(&t);
    let id = app.start_id("gated", &[("tenant_id", t.as_str())]).await;
    gate.reached().await;
    let mut first = SseReader::new(open(&app, &id, None).await);
    let mut before = Vec::new();
    // The gated job reports 50 % and waits: read up to that progress event, then go away.
    while before
        .last()
        .is_none_or(|f: &SseFrame| f.json()["percent"] != 50)
    {
        before.push(
            first
                .next()
                .await
                .expect("the stream stays open while the job runs"),
        );
    }
    drop(first);
    gate.release();
    app.wait_for_status(&id, "done").await;
    let last = before.last().unwrap().id.clone().unwrap();
    let after = read_to_end(&mut SseReader::new(open(&app, &id, Some(&last)).await)).await;
    assert_eq!(types(&after).last().map(String::as_str), Some("finished"));
    let both = frame_ids(&[before, after].concat());
    let all = timeline_ids(&app, &id).await;
    assert_eq!(
        both, all,
        "nothing missed, nothing repeated across the reconnect"
    );
}

async fn a_stream_asked_for_after_the_end_gets_204_and_json_after_the_end_is_empty(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    let id = app.start_id("ticker", &[("tenant_id", t.as_str())]).await;
    app.poll_until_ended(&id).await;
    let events = timeline(&app, &id).await;
    let last = events.last().unwrap()["id"].as_str().unwrap().to_owned();
    assert_eq!(events.last().unwrap()["type"], "finished");
    assert_eq!(
        open(&app, &id, Some(&last)).await.status(),
        StatusCode::NO_CONTENT
    );
    let query = app
        .stream(&format!("/catalog/jobs/{id}/events?after={last}"))
        .await;
    assert_eq!(
        query.status(),
        StatusCode::NO_CONTENT,
        "?after= works as Last-Event-ID"
    );
    let json = app
        .get_json(&format!("/catalog/jobs/{id}/events?after={last}"))
        .await;
    assert_eq!(json["events"], serde_json::json!([]));
    // From the start, an ended job's stream is its whole timeline, then the end.
    let frames = read_to_end(&mut SseReader::new(open(&app, &id, None).await)).await;
    assert_eq!(frames.len(), events.len());
}

async fn the_tenant_stream_sees_that_tenant_s_jobs_only(b: Backend) {
    let app = spawn_app(b).await;
    let (mine, theirs) = (tenant(), tenant());
    let response = app.get(&format!("/catalog/events?tenant_id={mine}")).await;
    let mut reader = SseReader::new(response);
    let other = app
        .start_id("ticker", &[("tenant_id", theirs.as_str())])
        .await;
    app.poll_until_ended(&other).await;
    let id = app
        .start_id("ticker", &[("tenant_id", mine.as_str())])
        .await;
    let (mut seen, mut resynced) = (Vec::new(), false);
    loop {
        let frame = reader.next().await.expect("the tenant stream stays open");
        // A subscription that went live late (a loaded machine) says changes may have been
        // missed: as the docs tell a client, re-read what it follows.
        if frame.event.as_deref() == Some("resync") {
            resynced = true;
            if app.get_job(&id).await["status"] == "done" {
                break;
            }
            continue;
        }
        let change = frame.json();
        assert_eq!(change["tenant_id"], mine.as_str(), "{change}");
        assert_eq!(
            change["job_id"],
            id.as_str(),
            "only this tenant's job: {change}"
        );
        assert_eq!(frame.event.as_deref(), change["type"].as_str());
        for field in ["kind", "status", "percent", "step", "id"] {
            assert!(!change[field].is_null(), "{field} in {change}");
        }
        seen.push(frame.event.unwrap());
        if change["type"] == "finished" {
            break;
        }
    }
    if !resynced {
        assert_eq!(
            seen.first().map(String::as_str),
            Some("created"),
            "{seen:?}"
        );
    }
}

/// A tenant stream keeps nothing to replay, so a reconnect (`Last-Event-ID`, whatever its
/// value: it may be an id this stream sent or garbage) first says `resync`, then follows the
/// tenant's jobs as a first connection does; two such headers are refused as on a job stream.
async fn a_reconnecting_tenant_stream_starts_with_a_resync_and_then_follows_live(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    let path = format!("/catalog/events?tenant_id={t}");
    for last in ["1764524000412-0", "garbage"] {
        let r = app.get_with(&path, &[("last-event-id", last)]).await;
        assert_eq!(r.status(), StatusCode::OK, "{last}");
        let mut reader = SseReader::new(r);
        // Sent at once, not after a keep-alive (15 s) or a change: a bound fails the test
        // instead of hanging it.
        let first = tokio::time::timeout(FIRST_FRAME_WITHIN, reader.next())
            .await
            .expect("a reconnect's first frame is sent at once")
            .expect("the stream opens");
        assert_eq!(first.event.as_deref(), Some("resync"), "{last}");
        let id = app.start_id("ticker", &[("tenant_id", t.as_str())]).await;
        loop {
            let frame = reader.next().await.expect("the tenant stream stays open");
            // A subscription that went live late (a loaded machine) says resync again.
            let late = frame.event.as_deref() == Some("resync");
            if late && app.get_job(&id).await["status"] == "done" {
                break;
            }
            if frame.event.as_deref() == Some("finished") {
                assert_eq!(frame.json()["job_id"], id.as_str());
                break;
            }
        }
    }
    let twice = [("last-event-id", "1-0"), ("last-event-id", "2-0")];
    let r = app.get_with(&path, &twice).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"],
        "duplicate_header"
    );
}

async fn an_unknown_id_or_a_bad_resume_id_is_refused_with_json(b: Backend) {
    let app = spawn_app(b).await;
    let unknown = catalog_jobs::jobs::JobId::new().to_string();
    for accept in ["application/json", "text/event-stream"] {
        let path = format!("/catalog/jobs/{unknown}/events");
        let r = app.get_with(&path, &[("accept", accept)]).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert_eq!(r.json::<Value>().await.unwrap()["error"], "not_found");
    }
    let t = tenant();
    let id = app.start_id("ticker", &[("tenant_id", t.as_str())]).await;
    for bad in ["x", "1-", "-1", "1-2-3"].into_iter().chain(FAR_BEYOND) {
        assert_resume_is_refused(&app, &id, bad).await;
    }
    let r = app.get(&format!("/catalog/jobs/{id}/events?limit=2")).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let r = app.get("/catalog/events").await;
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "missing_field");
}

/// Two `Last-Event-ID` headers, alike or not, are refused: which one to resume after is not
/// the service's to guess. One of them alone is taken.
async fn a_last_event_id_given_twice_is_400_naming_it(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    let id = app.start_id("ticker", &[("tenant_id", t.as_str())]).await;
    let path = format!("/catalog/jobs/{id}/events");
    for accept in ["application/json", "text/event-stream"] {
        for second in ["1-0", "2-0"] {
            let twice = [
                ("accept", accept),
                ("last-event-id", "1-0"),
                ("last-event-id", second),
            ];
            let r = app.get_with(&path, &twice).await;
            assert_eq!(
                r.status(),
                StatusCode::BAD_REQUEST,
                "{accept}, 1-0 and {second}"
            );
            let body: Value = r.json().await.unwrap();
            assert_eq!(body["error"], "duplicate_header", "{body}");
            assert_eq!(body["field"], "Last-Event-ID", "{body}");
            assert!(
                body["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("Last-Event-ID")),
                "{body}"
            );
        }
    }
    let once = [("accept", "application/json"), ("last-event-id", "1-0")];
    assert_eq!(app.get_with(&path, &once).await.status(), StatusCode::OK);
}

async fn a_stream_resumed_after_an_id_beyond_the_job_s_last_event_ends_when_the_job_ends(
    b: Backend,
) {
    let app = spawn_app(b).await;
    let t = tenant();
    let gate = Gate::of(&t);
    let id = app.start_id("gated", &[("tenant_id", t.as_str())]).await;
    gate.reached().await;
    let far = "9999999999999-0";
    let by_header = open(&app, &id, Some(far)).await;
    let by_query = app
        .stream(&format!("/catalog/jobs/{id}/events?after={far}"))
        .await;
    let mut streams = [SseReader::new(by_header), SseReader::new(by_query)];
    gate.release();
    for stream in &mut streams {
        let frames = tokio::time::timeout(ENDS_WITHIN, read_to_end(stream))
            .await
            .expect("the stream ended with its job");
        assert_eq!(frames, [], "no event of the job comes after {far}");
    }
}

/// Refused for the stream budget: the status and code, and when to ask again.
async fn assert_refused(r: reqwest::Response, status: StatusCode, code: &str) {
    assert_eq!(r.status(), status);
    assert!(r.headers().contains_key("retry-after"), "{:?}", r.headers());
    assert_eq!(r.json::<Value>().await.unwrap()["error"], code);
}

async fn a_tenant_beyond_its_share_of_streams_is_refused_429_and_a_full_instance_503(b: Backend) {
    let mut config = test_config();
    config.max_event_streams_per_tenant = 2;
    config.max_event_streams = Some(3);
    let app = spawn_app_with(config, store(b, settings())).await;
    let (t, u, v) = (tenant(), tenant(), tenant());
    let gate = Gate::of(&t);
    let id = app.start_id("gated", &[("tenant_id", t.as_str())]).await;
    let tenant_stream = |t: &TenantId| {
        app.client
            .get(app.url(&format!("/catalog/events?tenant_id={t}")))
            .send()
    };
    let first = tenant_stream(&t).await.unwrap();
    let _job_stream = SseReader::new(open(&app, &id, None).await);
    assert_eq!(first.status(), 200);
    let too_many = StatusCode::TOO_MANY_REQUESTS;
    assert_refused(
        tenant_stream(&t).await.unwrap(),
        too_many,
        "too_many_streams",
    )
    .await;
    assert_refused(open(&app, &id, None).await, too_many, "too_many_streams").await;
    assert_eq!(
        app.get(&format!("/catalog/jobs/{id}/events"))
            .await
            .status(),
        200,
        "JSON is no stream"
    );
    let _last = SseReader::new(tenant_stream(&u).await.unwrap());
    let full = StatusCode::SERVICE_UNAVAILABLE;
    assert_refused(tenant_stream(&v).await.unwrap(), full, "overloaded").await;
    drop(first);
    // No signal says the server saw the client go: ask until its place is given back.
    let given_back = async || match tenant_stream(&v).await.unwrap().status() {
        StatusCode::OK => Ok(()),
        other => Err(format!("a closed stream's place never came back: {other}")),
    };
    eventually(ENDS_WITHIN, given_back).await;
    gate.release();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_id_beyond_any_clock_is_422_and_never_a_store_error() {
    let redis = RedisServer::start(false);
    let svc = Service::on(&redis).start().await;
    let t = tenant();
    let id = svc
        .start_id(
            "sync",
            &[("tenant_id", t.as_str()), ("source", "demo.jsonl")],
        )
        .await;
    svc.wait_for_status(&id, "done").await;
    for far in FAR_BEYOND {
        assert_resume_is_refused(&svc, &id, far).await;
    }
    let metrics = svc.get("/metrics").await.text().await.unwrap();
    let store_errors: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("catalog_store_errors_total"))
        .collect();
    assert_eq!(
        store_errors,
        Vec::<&str>::new(),
        "client input is not a store failure"
    );
    assert!(!svc.log().contains("invalid start ID"), "{}", svc.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_opened_on_a_second_replica_sees_the_first_replica_s_job() {
    let shared = settings();
    let first = spawn_app_with(test_config(), store(Backend::Redis, shared.clone())).await;
    let second = spawn_app_with(test_config(), store(Backend::Redis, shared)).await;
    let t = tenant();
    let gate = Gate::of(&t);
    let id = first.start_id("gated", &[("tenant_id", t.as_str())]).await;
    gate.reached().await;
    let mut tenant_stream =
        SseReader::new(second.get(&format!("/catalog/events?tenant_id={t}")).await);
    let mut reader = SseReader::new(open(&second, &id, None).await);
    let mut seen = Vec::new();
    while seen
        .last()
        .is_none_or(|f: &SseFrame| f.json()["percent"] != 50)
    {
        seen.push(reader.next().await.expect("open while the job waits"));
    }
    gate.release();
    seen.extend(read_to_end(&mut reader).await);
    assert_eq!(types(&seen).last().map(String::as_str), Some("finished"));
    let ids = timeline_ids(&first, &id).await;
    let sent = frame_ids(&seen);
    assert_eq!(sent, ids);
    // The tenant stream on the second replica heard the end the first replica wrote.
    loop {
        let frame = tenant_stream
            .next()
            .await
            .expect("the tenant stream stays open");
        if frame.event.as_deref() == Some("finished") {
            assert_eq!(frame.json()["job_id"], id.as_str());
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tokens_another_tenant_s_job_stream_is_404_and_its_tenant_stream_403() {
    let (a, b) = (tenant(), tenant());
    let (operator, a_token) = ("events-operator", format!("{a}-secret"));
    let mut config = test_config();
    config.api_tokens = Some(format!(
        "* ops {};{a} a-bot {}",
        hash_token(operator),
        hash_token(&a_token)
    ));
    let app = spawn_app_with(config, store(Backend::Memory, settings())).await;
    let start = |t: &catalog_jobs::jobs::TenantId| {
        app.client
            .post(app.url("/catalog/ticker"))
            .bearer_auth(operator)
            .form(&[("tenant_id", t.as_str())])
            .send()
    };
    let theirs: Value = start(&b).await.unwrap().json().await.unwrap();
    let theirs = theirs["job_id"].as_str().unwrap().to_owned();
    let mine: Value = start(&a).await.unwrap().json().await.unwrap();
    let mine = mine["job_id"].as_str().unwrap().to_owned();
    let get = |path: String, token: &str| {
        app.client
            .get(app.url(&path))
            .bearer_auth(token)
            .header("accept", "text/event-stream")
            .send()
    };
    let r = get(format!("/catalog/jobs/{theirs}/events"), &a_token)
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = get(
        format!("/catalog/jobs/{mine}/events?tenant_id={b}"),
        operator,
    )
    .await
    .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::NOT_FOUND,
        "the tenant named is not the job's"
    );
    let r = get(format!("/catalog/events?tenant_id={b}"), &a_token)
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = get(format!("/catalog/jobs/{mine}/events"), &a_token)
        .await
        .unwrap();
    assert_eq!(
        read_to_end(&mut SseReader::new(r))
            .await
            .last()
            .unwrap()
            .event
            .as_deref(),
        Some("finished")
    );
    let r = get(format!("/catalog/events?tenant_id={a}"), &a_token)
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = app.get(&format!("/catalog/jobs/{mine}/events")).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_streams_and_does_not_wait_on_them() {
    let mut config = test_config();
    config.shutdown_grace_seconds = Duration::from_millis(200);
    let catalog = crate::helpers::test_catalog(&config);
    let app = App::build_with(
        config,
        store(Backend::Memory, settings()),
        catalog,
        crate::helpers::test_registry(),
    )
    .await
    .expect("the app builds");
    let addr = app.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    let t = tenant();
    let gate = Gate::of(&t);
    let started = client
        .post(format!("http://{addr}/catalog/gated"))
        .form(&[("tenant_id", t.as_str())])
        .json_answer()
        .await;
    gate.reached().await;
    let id = started["job_id"].as_str().unwrap();
    let job_stream = client
        .get(format!("http://{addr}/catalog/jobs/{id}/events"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let tenant_stream = client
        .get(format!("http://{addr}/catalog/events?tenant_id={t}"))
        .send()
        .await
        .unwrap();
    let (mut job_stream, mut tenant_stream) =
        (SseReader::new(job_stream), SseReader::new(tenant_stream));
    assert_eq!(
        job_stream.next().await.unwrap().event.as_deref(),
        Some("created")
    );
    stop.send(()).unwrap();
    // Both streams end cleanly (a connection the drain bound force-closed would break the
    // body, and the reader would panic), and so does the server.
    while job_stream.next().await.is_some() {}
    while tenant_stream.next().await.is_some() {}
    tokio::time::timeout(Duration::from_secs(20), server)
        .await
        .expect("the server stopped without waiting on the streams")
        .unwrap()
        .unwrap();
    gate.release();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_tenant_stream_follows_its_jobs_again_after_redis_restarts() {
    let mut redis = crate::helpers::RedisServer::start(false);
    let store = std::sync::Arc::new(
        catalog_jobs::jobs::redis::RedisStore::open(&redis.url(), settings()).unwrap(),
    );
    let app = spawn_app_with(test_config(), store).await;
    let t = tenant();
    let mut reader = SseReader::new(app.get(&format!("/catalog/events?tenant_id={t}")).await);
    redis.restart(true);
    // The listener subscribes again (the watched tenant's channel too) and says so.
    let frame = reader.next().await.expect("the stream stays open");
    assert_eq!(frame.event.as_deref(), Some("resync"), "{frame:?}");
    let id = loop {
        let r = app.start("ticker", &[("tenant_id", t.as_str())]).await;
        if r.status() == StatusCode::ACCEPTED {
            break r.json::<Value>().await.unwrap()["job_id"]
                .as_str()
                .unwrap()
                .to_owned();
        }
        assert_eq!(
            r.status(),
            StatusCode::SERVICE_UNAVAILABLE,
            "only while Redis is back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    loop {
        let frame = tokio::time::timeout(ENDS_WITHIN, reader.next())
            .await
            .expect("the job's end, or a resync, within the bound")
            .expect("the stream stays open");
        // The first resync may come from the broken subscription, before the listener named
        // its channels again: a job that ended meanwhile went unpublished, and the listener's
        // next naming says resync again (as the docs tell a client: re-read).
        if frame.event.as_deref() == Some("resync") && app.get_job(&id).await["status"] == "done" {
            break;
        }
        if frame.event.as_deref() == Some("finished") {
            assert_eq!(frame.json()["job_id"], id.as_str());
            break;
        }
    }
}

/// Progress ticks the next test writes itself, back to back: no runner spaces them out, so a
/// timeline (which keeps the first and the latest of a quick burst) misses most of them, and
/// only a live watcher hears each one.
const TICKS: u64 = 240;
/// Ticks written while each next stream opens.
const BURST: u64 = 8;

async fn a_stream_opened_at_any_moment_gets_every_tick_after_what_it_replayed(b: Backend) {
    let app = spawn_app(b).await;
    // A kind the app's workers do not run: this test runs it, writing its ticks itself.
    let job = new_job(&tenant(), "k1");
    let (created, run) = start(&*app.store, &job).await;
    let id = job.id.to_string();
    // The number (`seq`) of the last event the writer may have written (`created` is 0,
    // `started` 1, tick i is 1 + i): raised BEFORE each write, so a stream whose answer came
    // back when it read n replayed nothing after n.
    let written = Arc::new(AtomicU64::new(1));
    let (go, mut bursts) = mpsc::unbounded_channel::<()>();
    let writer = tokio::spawn({
        let (store, written) = (app.store.clone(), written.clone());
        async move {
            for i in 1..=TICKS {
                if (i - 1) % BURST == 0 {
                    bursts
                        .recv()
                        .await
                        .expect("the test opens a stream a burst");
                }
                written.store(1 + i, SeqCst);
                let percent = u8::try_from(i * 99 / TICKS).expect("below 100");
                let step = format!("tick {i}");
                let applied = store.tick(&run, percent, &step).await.expect("a tick");
                assert_eq!(applied, Tick::Applied);
            }
            written.store(TICKS + 2, SeqCst);
            finish(&*store, &job, &run, &created, Outcome::Done(json!({}))).await;
        }
    });
    let mut readers = Vec::new();
    for _ in 0..TICKS / BURST {
        go.send(()).expect("the writer waits for a burst");
        // Opened while the burst is written: its replay reads at some point within it.
        let response = open(&app, &id, None).await;
        let replayed_at_most = written.load(SeqCst);
        let mut reader = SseReader::new(response);
        readers.push(tokio::spawn(async move {
            let frames = tokio::time::timeout(ENDS_WITHIN, read_to_end(&mut reader))
                .await
                .expect("the stream ends with the job");
            (replayed_at_most, frames)
        }));
    }
    writer
        .await
        .expect("the writer wrote every tick and the end");
    for reader in readers {
        let (replayed_at_most, frames) = reader.await.expect("a reader");
        assert_every_tick_after(replayed_at_most, &frames);
    }
}

/// A stream whose replay read no further than event `replayed_at_most` sent every event after
/// it up to the job's end, in order, once; each tick as the timeline keeps one.
fn assert_every_tick_after(replayed_at_most: u64, frames: &[SseFrame]) {
    let seqs: Vec<u64> = frames
        .iter()
        .map(|f| {
            let id: EventId =
                f.id.as_deref()
                    .expect("an id")
                    .parse()
                    .expect("an event id");
            id.seq
        })
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "ids increase, none sent twice: {seqs:?}"
    );
    let live: Vec<u64> = seqs
        .iter()
        .copied()
        .filter(|&s| s > replayed_at_most)
        .collect();
    let every: Vec<u64> = (replayed_at_most + 1..=TICKS + 2).collect();
    assert_eq!(
        live, every,
        "every event after the replay (which read no further than {replayed_at_most}); sent: {seqs:?}"
    );
    // A tick sent as heard reads as the timeline keeps one.
    for (frame, seq) in frames.iter().zip(&seqs) {
        let event = frame.json();
        if event["type"] == "progress" {
            let i = seq - 1;
            assert_eq!(event["step"], format!("tick {i}"), "{event}");
            assert_eq!(event["percent"], i * 99 / TICKS, "{event}");
            assert_eq!(event["status"], "running", "{event}");
            assert_eq!(Some(event["id"].as_str()), Some(frame.id.as_deref()));
            let at: EventId = frame.id.as_deref().unwrap().parse().unwrap();
            assert_eq!(event["at"], at.ms, "{event}");
            assert_eq!(event.as_object().map(|o| o.len()), Some(6), "{event}");
        }
    }
}
