//! `POST /catalog/pipeline` through the real service with the real catalogue kinds: a demo
//! refresh to its end (its percent polled, `wait=true`), a cancel during its sync and the
//! retry, a failing source, bad requests, and two replicas running 200 tenants' pipelines
//! across a `kill -9`. The store contract of pipelines is in `conformance` (both stores).

use std::collections::HashMap;

use catalog_jobs::jobs::TenantId;
use serde_json::{json, Value};

mod counted;
mod lost;

use crate::both_stores;
use crate::helpers::{
    eventually, free_port, spawn_catalog_app, started_id, tenant, test_config, Api, Backend,
    HeldFeeds, TestApp,
};

both_stores!(
    a_demo_refresh_ends_done_with_three_reports_and_its_percent_never_goes_backwards,
    cancelling_a_refresh_during_its_sync_skips_the_rest_frees_the_locks_and_a_retry_runs_from_sync,
    a_failing_source_fails_the_refresh_with_the_sync_s_class_and_skips_the_rest,
    a_refresh_is_refused_for_bad_steps_and_fields_and_joined_or_refused_while_active,
);

/// Request fields, or a series' labels, written `name=value&name=value`: as pairs.
fn pairs(form: &str) -> Vec<(&str, &str)> {
    form.split('&')
        .map(|pair| pair.split_once('=').expect("each pair is name=value"))
        .collect()
}

/// Refreshes refused with 422: the form, the error code, and the field the error names.
#[rustfmt::skip]
const REFUSED_REFRESHES: &[(&str, &str, &str)] = &[
    ("steps=pair,sync&source=demo.jsonl", "invalid_field", "steps"),
    ("steps=sync,sync&source=demo.jsonl", "invalid_field", "steps"),
    ("steps=publish", "invalid_field", "steps"),
    ("steps=enrich,pair&source=demo.jsonl", "unknown_field", "source"),
    ("source=demo.jsonl&colour=red", "unknown_field", "colour"),
    ("steps=sync", "missing_field", "source"),
    ("source=../etc/passwd", "source_not_allowed", "source"),
];

/// The catalogue app on `b`, allowed to read the held feeds, and a fresh tenant.
async fn app_with_held_feeds(b: Backend) -> (HeldFeeds, TestApp, TenantId) {
    let feeds = HeldFeeds::start().await;
    let mut config = test_config();
    config.sync_allowed_hosts = vec![feeds.allowed()];
    let app = spawn_catalog_app(b, config).await;
    (feeds, app, tenant())
}

/// Starts a pipeline for `tenant` with these fields; answers the response.
async fn refresh(api: &Api, tenant: &str, fields: &[(&str, &str)]) -> reqwest::Response {
    let mut form = vec![("tenant_id", tenant)];
    form.extend_from_slice(fields);
    api.post_form("/catalog/pipeline", &form).await
}

/// The kinds and statuses of a pipeline's steps, in order.
fn steps_of(pipeline: &Value) -> Vec<(String, String)> {
    pipeline["steps"]
        .as_array()
        .expect("a pipeline lists its steps")
        .iter()
        .map(|s| (s["kind"].to_string(), s["status"].to_string()))
        .collect()
}

async fn a_demo_refresh_ends_done_with_three_reports_and_its_percent_never_goes_backwards(
    b: Backend,
) {
    let app = spawn_catalog_app(b, test_config()).await;
    let t = tenant();
    let r = refresh(&app, t.as_str(), &[("source", "demo.jsonl")]).await;
    assert_eq!(r.status(), 202);
    let created: Value = r.json().await.expect("a snapshot");
    assert_eq!(created["kind"], "pipeline");
    let id = created["job_id"].as_str().expect("an id").to_owned();
    let mut last = 0;
    for _ in 0..1_000 {
        let now = app.get_job(&id).await;
        let percent = now["percent"].as_u64().expect("a percent");
        assert!(
            percent >= last,
            "the percent went back from {last} to {percent}: {now}"
        );
        last = percent;
    }
    let done = app.wait_for_status(&id, "done").await;
    assert_eq!(done["percent"], 100);
    assert_eq!(done["result"]["sync"]["totals"]["created"], 2400, "{done}");
    assert_eq!(done["result"]["enrich"]["products"], 2400, "{done}");
    assert_eq!(done["result"]["pair"]["products"], 2400, "{done}");
    for step in done["steps"].as_array().expect("steps") {
        assert_eq!(
            (step["status"].as_str(), step["percent"].as_u64()),
            (Some("done"), Some(100))
        );
    }
    let other = tenant();
    let fields = [("source", "demo.jsonl"), ("wait", "true")];
    let r = refresh(&app, other.as_str(), &fields).await;
    assert_eq!(r.status(), 200, "wait=true answers inline");
    let reports: Value = r.json().await.expect("the reports");
    assert_eq!(reports["enrich"]["products"], 2400, "{reports}");
    assert_eq!(reports["pair"]["products"], 2400, "{reports}");
}

async fn cancelling_a_refresh_during_its_sync_skips_the_rest_frees_the_locks_and_a_retry_runs_from_sync(
    b: Backend,
) {
    let (feeds, app, t) = app_with_held_feeds(b).await;
    let held = feeds.url("cancelled");
    let id = started_id(refresh(&app, t.as_str(), &[("source", held.as_str())]).await).await;
    app.poll(&id, "syncing", |p| p["steps"][0]["status"] == "running")
        .await;
    let r = app.cancel(&id).await;
    assert_eq!(r.status(), 202);
    let cancelled = app.wait_for_status(&id, "cancelled").await;
    let steps = cancelled["steps"].as_array().expect("steps").clone();
    assert_eq!(steps[0]["status"], "cancelled");
    for skipped in &steps[1..] {
        let job = app
            .get_job(skipped["job_id"].as_str().expect("an id"))
            .await;
        assert_eq!(
            (job["status"].as_str(), job["step"].as_str()),
            (
                Some("cancelled"),
                Some("skipped: the pipeline was cancelled")
            )
        );
    }
    for kind in ["enrich", "pair"] {
        let r = app.start(kind, &[("tenant_id", t.as_str())]).await;
        assert_eq!(r.status(), 202, "the {kind} lock is free");
        let job: Value = r.json().await.expect("a snapshot");
        app.wait_for_status(job["job_id"].as_str().expect("an id"), "done")
            .await;
    }
    let r = app
        .post_form(&format!("/catalog/jobs/{id}/retry"), &[])
        .await;
    assert_eq!(r.status(), 202);
    let retry: Value = r.json().await.expect("a snapshot");
    assert_eq!(retry["retry_of"], id.as_str());
    let kinds: Vec<String> = steps_of(&retry).into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        kinds,
        ["\"sync\"", "\"enrich\"", "\"pair\""],
        "it runs from the sync"
    );
    feeds.release("cancelled");
    let done = app
        .wait_for_status(retry["job_id"].as_str().expect("an id"), "done")
        .await;
    assert_eq!(done["result"]["sync"]["totals"]["created"], 40, "{done}");
}

async fn a_failing_source_fails_the_refresh_with_the_sync_s_class_and_skips_the_rest(b: Backend) {
    let mut config = test_config();
    let nobody = format!("127.0.0.1:{}", free_port());
    config.sync_allowed_hosts = vec![nobody.clone()];
    let app = spawn_catalog_app(b, config).await;
    let t = tenant();
    let source = format!("http://{nobody}/feed.jsonl");
    let id = started_id(refresh(&app, t.as_str(), &[("source", source.as_str())]).await).await;
    let failed = app.wait_for_status(&id, "failed").await;
    assert_eq!(failed["error"], "SourceUnreachable", "{failed}");
    assert_eq!(failed["step"], "failed in sync: SourceUnreachable");
    let statuses: Vec<(String, String)> = steps_of(&failed);
    assert_eq!(statuses[0].1, "\"failed\"");
    for skipped in &failed["steps"].as_array().expect("steps")[1..] {
        let job = app
            .get_job(skipped["job_id"].as_str().expect("an id"))
            .await;
        assert_eq!(job["step"], "skipped: the pipeline failed in sync", "{job}");
    }
    let r = refresh(
        &app,
        t.as_str(),
        &[("source", source.as_str()), ("wait", "true")],
    )
    .await;
    assert_eq!(
        r.status(),
        502,
        "wait=true answers a failed refresh as a failed job"
    );
}

async fn a_refresh_is_refused_for_bad_steps_and_fields_and_joined_or_refused_while_active(
    b: Backend,
) {
    let (feeds, app, t) = app_with_held_feeds(b).await;
    for (form, code, field) in REFUSED_REFRESHES {
        let r = refresh(&app, t.as_str(), &pairs(form)).await;
        assert_eq!(r.status(), 422, "{form}");
        let body: Value = r.json().await.expect("an error");
        assert_eq!(
            (body["error"].as_str(), body["field"].as_str()),
            (Some(*code), Some(*field)),
            "{body}"
        );
    }
    // A JSON list that names no step is refused as `steps=` is, never read as every step.
    for steps in [json!([]), Value::Null] {
        let r = app
            .client
            .post(app.url("/catalog/pipeline"))
            .json(&json!({"tenant_id": t.as_str(), "steps": steps, "source": "demo.jsonl"}))
            .send()
            .await
            .expect("the service answers");
        assert_eq!(r.status(), 422, "steps {steps}");
        let body: Value = r.json().await.expect("an error");
        assert_eq!(body["field"], "steps", "{body}");
    }
    assert!(
        app.job_ids(&format!("tenant_id={t}")).await.is_empty(),
        "nothing was created"
    );
    let held = feeds.url("active");
    let fields = [("source", held.as_str())];
    let first = started_id(refresh(&app, t.as_str(), &fields).await).await;
    let r = refresh(&app, t.as_str(), &fields).await;
    assert_eq!(r.status(), 409);
    let body: Value = r.json().await.expect("an error");
    assert_eq!(body["job_id"], first.as_str());
    let join = [("source", held.as_str()), ("on_conflict", "join")];
    let r = refresh(&app, t.as_str(), &join).await;
    assert_eq!(r.status(), 202, "a refresh with the same fields joins");
    assert_eq!(started_id(r).await, first);
    let r = app.start("enrich", &[("tenant_id", t.as_str())]).await;
    assert_eq!(
        r.status(),
        409,
        "the refresh's enrich holds the enrich lock"
    );
    feeds.release("active");
    app.wait_for_status(&first, "done").await;
}

/// Each job's runs, from its timeline: (started, ended) times in ms, in order.
fn runs_of(events: &[Value]) -> Vec<(u64, u64)> {
    let mut runs = Vec::new();
    let mut open = None;
    for e in events {
        let at = e["at"].as_u64().expect("an event time");
        match e["type"].as_str() {
            Some("started") => {
                assert!(
                    open.is_none(),
                    "a run started while another was open: {events:?}"
                );
                open = Some(at);
            }
            Some("requeued" | "released" | "finished" | "superseded") => {
                if let Some(start) = open.take() {
                    runs.push((start, at));
                }
            }
            _ => {}
        }
    }
    runs
}

/// Checks one tenant's refresh from its steps' timelines: each step ran once per attempt,
/// and no two of the tenant's jobs ran at once.
async fn no_overlap(api: &Api, pipeline: &Value) {
    let mut all: Vec<(u64, u64)> = Vec::new();
    for step in pipeline["steps"].as_array().expect("steps") {
        let id = step["job_id"].as_str().expect("an id");
        let job = api.get_job(id).await;
        let timeline = api.get_json(&format!("/catalog/jobs/{id}/events")).await;
        let events = timeline["events"].as_array().expect("events").clone();
        let runs = runs_of(&events);
        assert_eq!(
            runs.len() as u64,
            job["attempt"].as_u64().expect("an attempt"),
            "{events:?}"
        );
        all.extend(runs);
    }
    all.sort();
    for pair in all.windows(2) {
        assert!(
            pair[0].1 <= pair[1].0,
            "two of a tenant's jobs ran at once: {all:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_run_200_tenants_refreshes_to_done_across_a_kill_9_one_job_of_a_tenant_at_a_time(
) {
    use crate::helpers::{RedisServer, Service};
    let redis = RedisServer::start(false);
    let feeds = HeldFeeds::start().await;
    let launch = Service::on(&redis).reading(&feeds);
    let (mut a, b) = (launch.clone().start().await, launch.start().await);
    let mut ids = HashMap::new();
    for n in 0..200 {
        let t = tenant();
        let via: &Api = if n % 2 == 0 { &a } else { &b };
        let held = feeds.url(&format!("held-{n}"));
        let fields = [("source", held.as_str())];
        ids.insert(started_id(refresh(via, t.as_str(), &fields).await).await, n);
    }
    // Mid-run: A's workers hold syncs of held feeds when it is killed.
    let on_a = format!("/{}", a.pid());
    // Another process's claim sends this one no signal: its listing is polled.
    let a_runs_a_step = async || {
        let listing = b.get_json("/catalog/jobs?status=running").await;
        let running = listing["jobs"].as_array().expect("a listing").clone();
        let on_a = |j: &Value| j["worker"].as_str().is_some_and(|w| w.ends_with(&on_a));
        match running.iter().any(on_a) {
            true => Ok(()),
            false => Err("A never ran a step".to_owned()),
        }
    };
    eventually(std::time::Duration::from_secs(20), a_runs_a_step).await;
    a.kill9();
    for n in 0..200 {
        feeds.release(&format!("held-{n}"));
    }
    for done in all_done(&b, ids.keys()).await {
        no_overlap(&b, &done).await;
    }
}

/// How long one replica may take to run 200 refreshes (600 steps) after the other's
/// `kill -9`, with room for a loaded two-core machine.
const ALL_DONE_WITHIN: std::time::Duration = std::time::Duration::from_secs(180);

/// Polls every pipeline of `ids` until each reads `done` (any other end fails at once);
/// answers their last snapshots.
async fn all_done<'a>(api: &Api, ids: impl Iterator<Item = &'a String>) -> Vec<Value> {
    let deadline = std::time::Instant::now() + ALL_DONE_WITHIN;
    let mut waiting: Vec<&String> = ids.collect();
    let mut done = Vec::new();
    while !waiting.is_empty() {
        let mut still = Vec::new();
        for id in waiting {
            let job = api.get_job(id).await;
            match job["status"].as_str() {
                Some("done") => done.push(job),
                Some("failed" | "cancelled" | "lost") => {
                    panic!("a refresh did not end done: {job}")
                }
                _ => still.push(id),
            }
        }
        waiting = still;
        let left = waiting.len();
        assert!(
            std::time::Instant::now() < deadline,
            "{left} refreshes not done within {ALL_DONE_WITHIN:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    done
}

/// The counts a demo refresh done and a refresh whose sync fails add, once both ended: by
/// counter, each set of labels and what it adds.
const TWO_REFRESHES: &[(&str, &[(&str, f64)])] = &[
    (
        "catalog_jobs_created_total",
        &[
            ("kind=pipeline", 2.0),
            ("kind=sync", 2.0),
            ("kind=pair", 2.0),
        ],
    ),
    (
        "catalog_jobs_finished_total",
        &[
            ("kind=pipeline&status=done", 1.0),
            ("kind=pipeline&status=failed&error=SourceUnreachable", 1.0),
            ("kind=pair&status=done", 1.0),
            // The failed refresh's enrich and pair never ran: they end cancelled (skipped),
            // and count.
            ("kind=enrich&status=cancelled", 1.0),
            ("kind=pair&status=cancelled", 1.0),
        ],
    ),
];

#[tokio::test]
async fn metrics_count_a_refresh_as_a_job_of_kind_pipeline_besides_its_steps() {
    use crate::helpers::{metrics_text, scrape, service_with_an_unreachable_feed, value};
    let (svc, nowhere) = service_with_an_unreachable_feed().await;
    let before = scrape(&metrics_text(&svc).await);
    let done = [("source", "demo.jsonl"), ("wait", "true")];
    assert_eq!(refresh(&svc, tenant().as_str(), &done).await.status(), 200);
    let failing = [("source", nowhere.as_str()), ("wait", "true")];
    assert_eq!(
        refresh(&svc, tenant().as_str(), &failing).await.status(),
        502
    );
    // The process that ran the last step counts the pipeline's end just after the store
    // step that ended both, which may be after `wait=true` answered.
    let counted = async || {
        let after = scrape(&metrics_text(&svc).await);
        let delta = |name: &str, labels: &str| {
            let labels = pairs(labels);
            value(&after, name, &labels) - value(&before, name, &labels)
        };
        let rows = TWO_REFRESHES
            .iter()
            .flat_map(|(name, rows)| rows.iter().map(move |r| (*name, r)));
        let (mut seen, mut wanted) = (Vec::new(), Vec::new());
        for (name, (labels, adds)) in rows {
            seen.push((name, *labels, delta(name, labels)));
            wanted.push((name, *labels, *adds));
        }
        if seen == wanted {
            Ok(())
        } else {
            Err(format!("counted {seen:?}, not {wanted:?}"))
        }
    };
    eventually(std::time::Duration::from_secs(10), counted).await;
}
