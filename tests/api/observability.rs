//! Logs and metrics as an operator sees them, from the real binary: JSON log lines that
//! carry request and job ids, one access line per request (a 5xx logged once, never at
//! error level for a refusal), and `/metrics` in Prometheus text format that counts a job.

use std::collections::HashMap;
use std::time::Duration;

use catalog_jobs::metrics::ALL;
use serde_json::Value;

use crate::helpers::{
    counted_once, eventually, metrics_text, parse_exposition, scrape, scrape_until,
    service_with_an_unreachable_feed, started_id, unique, value, HeldFeeds, Sample, Service,
};

fn json_lines(log: &str) -> Vec<Value> {
    log.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not one JSON object ({e}): {l}"))
        })
        .collect()
}

#[tokio::test]
async fn every_json_log_line_is_an_object_and_carries_request_and_job_ids() {
    let mut svc = Service::embedded().env("LOG_FORMAT", "json").start().await;
    let tenant = unique("logs");
    let r = svc
        .client
        .post(svc.url("/catalog/sync"))
        .header("x-request-id", "req-logs-1")
        .form(&[
            ("tenant_id", tenant.as_str()),
            ("source", "demo.jsonl"),
            ("wait", "true"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["x-request-id"],
        "req-logs-1",
        "the request id is echoed"
    );
    let r = svc.get("/no/such/path").await;
    assert_eq!(r.status(), 404);
    let generated = r.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert!(!generated.is_empty(), "a request without an id gets one");
    svc.stop();

    let lines = json_lines(&svc.log());
    let access = lines
        .iter()
        .find(|l| l["message"] == "request" && l["request_id"] == "req-logs-1")
        .expect("an access line for the sync request");
    assert_eq!(access["method"], "POST");
    assert_eq!(
        access["route"], "/catalog/{kind}",
        "the matched template, not the path"
    );
    assert_eq!(access["status"], 200);
    assert_eq!(access["level"], "INFO");
    assert!(access["latency_ms"].is_number());
    assert!(
        access.get("error_code").is_none(),
        "no error fields on a success: {access}"
    );
    let ended = lines
        .iter()
        .find(|l| l["message"] == "job ended" && l["tenant_id"] == tenant.as_str())
        .expect("the job's end is logged");
    assert_eq!(ended["kind"], "sync");
    assert!(ended["job_id"].as_str().is_some_and(|s| !s.is_empty()));
    let not_found = lines
        .iter()
        .find(|l| l["message"] == "request" && l["request_id"] == generated.as_str())
        .expect("an access line for the 404");
    assert_eq!(
        not_found["route"], "unmatched",
        "a raw path never becomes a route"
    );
    assert_eq!(
        not_found["level"], "INFO",
        "a client's mistake is not an error"
    );
    let requests = lines.iter().filter(|l| l["message"] == "request").count();
    assert_eq!(
        requests, 3,
        "one access line per request (healthz, sync, 404)"
    );
}

/// A refresh's steps are claimed one at the end of the other: each step's lines are in its
/// own job's span (with the request that started the refresh named), not nested in the step
/// before it nor in the request's span.
#[tokio::test]
async fn each_step_of_a_refresh_logs_in_its_own_job_span_not_nested_in_the_step_before() {
    let mut svc = Service::embedded().start().await;
    let tenant = unique("spans");
    let r = svc
        .start(
            "pipeline",
            &[("tenant_id", tenant.as_str()), ("source", "demo.jsonl")],
        )
        .await;
    let id = started_id(r).await;
    svc.poll(&id, "the refresh done", |j| j["status"] == "done")
        .await;
    svc.stop();
    let log = svc.log();
    let ended: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("job ended") && l.contains(tenant.as_str()))
        .collect();
    assert!(ended.len() >= 3, "each step's end is logged:\n{log}");
    for line in ended {
        assert_eq!(line.matches("job{").count(), 1, "one job span: {line}");
        assert!(!line.contains("request{"), "no request span: {line}");
        assert!(line.contains("request_id="), "the request is named: {line}");
    }
}

#[tokio::test]
async fn a_5xx_is_logged_once_with_its_route_and_cause_and_a_refusal_never_at_error_level() {
    // A Redis nobody listens on: the service starts, and readiness answers 503.
    let mut svc = Service::on_unreachable_redis()
        .env("LOG_FORMAT", "json")
        .start()
        .await;
    let r = svc
        .get_with("/readyz", &[("x-request-id", "req-503")])
        .await;
    assert_eq!(r.status(), 503);
    svc.stop();
    let lines = json_lines(&svc.log());
    let about_it: Vec<&Value> = lines
        .iter()
        .filter(|l| l["request_id"] == "req-503")
        .collect();
    assert_eq!(about_it.len(), 1, "logged once: {about_it:?}");
    let line = about_it[0];
    assert_eq!(line["route"], "/readyz");
    assert_eq!(line["method"], "GET");
    assert_eq!(line["status"], 503);
    assert_eq!(line["level"], "WARN");
    assert_eq!(line["error_code"], "store_unavailable");
    assert!(
        line["cause"].as_str().is_some_and(|c| !c.is_empty()),
        "the cause is in the log"
    );
    assert!(
        !lines.iter().any(|l| l["level"] == "ERROR"),
        "nothing an operator must act on happened in this process"
    );
}

/// A metric's name and the labels a sample must carry.
type Series = (&'static str, &'static [(&'static str, &'static str)]);

/// What two syncs (one run at once, one waiting for the worker), one start refused as
/// already running and one refused beyond the queue add to each series, exactly.
const TWO_SYNCS_AND_TWO_REFUSALS: &[(Series, f64)] = &[
    (("catalog_jobs_created_total", &[("kind", "sync")]), 2.0),
    (
        (
            "catalog_jobs_finished_total",
            &[("kind", "sync"), ("status", "done")],
        ),
        2.0,
    ),
    (
        (
            "catalog_jobs_refused_total",
            &[("reason", "already_running")],
        ),
        1.0,
    ),
    (
        ("catalog_jobs_refused_total", &[("reason", "overloaded")]),
        1.0,
    ),
    (
        ("catalog_job_duration_seconds_count", &[("kind", "sync")]),
        2.0,
    ),
    (
        ("catalog_job_queue_wait_seconds_count", &[("kind", "sync")]),
        2.0,
    ),
    // Two created, one already running and one beyond the queue: the store decides all four.
    (
        ("catalog_store_latency_seconds_count", &[("op", "create")]),
        4.0,
    ),
    (
        (
            "catalog_http_requests_total",
            &[
                ("route", "/catalog/{kind}"),
                ("method", "POST"),
                ("status", "202"),
            ],
        ),
        2.0,
    ),
    (
        (
            "catalog_http_requests_total",
            &[
                ("route", "/catalog/{kind}"),
                ("method", "POST"),
                ("status", "409"),
            ],
        ),
        1.0,
    ),
];

/// What the same adds to each series at the least (a running job wrote progress, its
/// snapshot was read, its route was timed).
const TWO_SYNCS_AT_LEAST: &[(Series, f64)] = &[
    (("catalog_job_progress_writes_total", &[]), 1.0),
    (
        ("catalog_store_latency_seconds_count", &[("op", "get")]),
        1.0,
    ),
    (
        (
            "catalog_http_request_duration_seconds_count",
            &[("route", "/catalog/jobs/{job_id}")],
        ),
        2.0,
    ),
];

/// A service with one worker and room for one waiting job, whose syncs may read `feeds`.
async fn one_worker_one_waiting(feeds: &HeldFeeds) -> Service {
    Service::embedded()
        .env("MAX_CONCURRENT_JOBS", "1")
        .env("MAX_QUEUED_JOBS", "1")
        .reading(feeds)
        .start()
        .await
}

/// Scrapes until the one running sync wrote progress (one tick interval after it started)
/// and the waiting one is counted in the shared queue; the running gauge holds 1 throughout.
async fn until_one_runs_and_one_waits(svc: &Service, before: &[Sample]) {
    let one_runs_and_one_waits = async || {
        let during = scrape(&metrics_text(svc).await);
        assert_eq!(
            value(&during, "catalog_jobs_running", &[("kind", "sync")]),
            1.0
        );
        let wrote = value(&during, "catalog_job_progress_writes_total", &[])
            > value(before, "catalog_job_progress_writes_total", &[]);
        match wrote && value(&during, "catalog_jobs_queued", &[("kind", "sync")]) == 1.0 {
            true => Ok(()),
            false => Err(
                "the waiting job was never counted as queued, or the running one \
                          wrote no progress"
                    .to_owned(),
            ),
        }
    };
    eventually(Duration::from_secs(10), one_runs_and_one_waits).await;
}

/// No label names a tenant or a job: series stay few however many there are.
async fn assert_no_label_names(svc: &Service, tenant: &str, job: &str) {
    let text = metrics_text(svc).await;
    assert!(
        !text.contains(tenant) && !text.contains(job),
        "no tenant or job id in a label"
    );
}

#[tokio::test]
async fn metrics_count_a_job_from_its_creation_through_refusals_to_its_end() {
    let feeds = HeldFeeds::start().await;
    let svc = one_worker_one_waiting(&feeds).await;
    let before = scrape(&metrics_text(&svc).await);
    let (tenant, held) = (unique("metrics"), feeds.url("m1"));
    let sync = [("tenant_id", tenant.as_str()), ("source", held.as_str())];
    let id = svc.start_id("sync", &sync).await;
    svc.wait_for_status(&id, "running").await;
    assert_eq!(svc.start("sync", &sync).await.status(), 409);
    // A second tenant's job waits for the one worker; a third finds the queue full.
    let other = unique("metrics");
    let waiting = svc.start_sync(&other, &held).await;
    let third = unique("metrics");
    let refused = svc
        .start("sync", &[("tenant_id", &third), ("source", &held)])
        .await;
    assert_eq!(refused.status(), 503);
    until_one_runs_and_one_waits(&svc, &before).await;
    feeds.release("m1");
    svc.wait_for_status(&id, "done").await;
    svc.wait_for_status(&waiting, "done").await;
    let after = scrape(&metrics_text(&svc).await);
    let delta = |(name, labels): Series| value(&after, name, labels) - value(&before, name, labels);
    for &(series, exactly) in TWO_SYNCS_AND_TWO_REFUSALS {
        assert_eq!(delta(series), exactly, "{series:?}");
    }
    for &(series, at_least) in TWO_SYNCS_AT_LEAST {
        assert!(delta(series) >= at_least, "{series:?}: {}", delta(series));
    }
    for gauge in ["catalog_jobs_running", "catalog_jobs_queued"] {
        assert_eq!(value(&after, gauge, &[("kind", "sync")]), 0.0, "{gauge}");
    }
    assert_no_label_names(&svc, &tenant, &id).await;
}

#[tokio::test]
async fn a_failed_job_is_counted_with_its_error_class_and_a_done_one_carries_no_error_label() {
    let (svc, nowhere) = service_with_an_unreachable_feed().await;
    let tenant = unique("metrics");
    let wait = |source: &str| {
        let form = [
            ("tenant_id", tenant.clone()),
            ("source", source.to_owned()),
            ("wait", "true".to_owned()),
        ];
        svc.client.post(svc.url("/catalog/sync")).form(&form).send()
    };
    let done = wait("demo.jsonl").await.expect("the service answers");
    assert_eq!(done.status(), 200);
    let failed = wait(&nowhere).await.expect("the service answers");
    assert_eq!(failed.status(), 502);
    let id = failed.json::<Value>().await.expect("a JSON body")["job"]["job_id"]
        .as_str()
        .expect("a job id")
        .to_owned();
    let labels = [
        ("kind", "sync"),
        ("status", "failed"),
        ("error", "SourceUnreachable"),
    ];
    // The run counts its end just after the store step that answers `wait=true`.
    let samples = scrape_until(&svc, |s| {
        value(s, "catalog_jobs_finished_total", &labels) > 0.0
    })
    .await;
    assert_eq!(value(&samples, "catalog_jobs_finished_total", &labels), 1.0);
    let done_samples: Vec<&Sample> = samples
        .iter()
        .filter(|s| {
            s.name == "catalog_jobs_finished_total"
                && s.labels.get("status").map(String::as_str) == Some("done")
        })
        .collect();
    assert!(!done_samples.is_empty(), "the done sync is counted");
    assert!(done_samples.iter().all(|s| !s.labels.contains_key("error")));
    assert_no_label_names(&svc, &tenant, &id).await;
}

#[tokio::test]
async fn a_job_cancelled_while_queued_ends_at_once_and_is_counted_once() {
    let feeds = HeldFeeds::start().await;
    let svc = one_worker_one_waiting(&feeds).await;
    let tenant = unique("metrics");
    let running = svc.start_sync(&tenant, &feeds.url("m2")).await;
    svc.wait_for_status(&running, "running").await;
    let before = scrape(&metrics_text(&svc).await);
    // It never reaches a runner: the one worker is busy.
    let queued = svc.start_sync(&unique("metrics"), &feeds.url("m1")).await;
    assert_eq!(svc.cancel(&queued).await.status(), 202);
    svc.wait_for_status(&queued, "cancelled").await;
    let ended = scrape(&metrics_text(&svc).await);
    let cancelled = [("kind", "sync"), ("status", "cancelled")];
    assert_eq!(
        value(&ended, "catalog_jobs_finished_total", &cancelled)
            - value(&before, "catalog_jobs_finished_total", &cancelled),
        1.0,
        "the queued job's cancel is counted once"
    );
    feeds.release("m2");
    svc.wait_for_status(&running, "done").await;
    assert_no_label_names(&svc, &tenant, &running).await;
}

/// How long Redis holds every write in the test of a create whose client hung up: long
/// beyond the client's patience, short against the service's store timeout.
const WRITES_HELD_MS: u64 = 1_500;
/// How long that client waits for its 202.
const CLIENT_PATIENCE: Duration = Duration::from_millis(300);

/// A client that hangs up on its POST while Redis holds the create still made a job: the job
/// is counted when the store answers, once, not when the 202 is written (which nobody reads).
#[tokio::test]
async fn a_job_whose_client_hung_up_on_its_post_is_counted_created_once() {
    let redis = crate::helpers::RedisServer::start(false);
    let svc = Service::on(&redis).start().await;
    let tenant = unique("hung-up");
    let before = scrape(&metrics_text(&svc).await);
    let mut conn = redis.connection().await;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(WRITES_HELD_MS)
        .arg("WRITE")
        .query_async(&mut conn)
        .await
        .unwrap();
    let impatient = reqwest::Client::builder()
        .timeout(CLIENT_PATIENCE)
        .build()
        .unwrap();
    let post = impatient
        .post(svc.url(&format!("/catalog/enrich?tenant_id={tenant}")))
        .send()
        .await;
    assert!(
        post.as_ref().is_err_and(|e| e.is_timeout()),
        "the create waited on Redis past the client's patience: {post:?}"
    );
    let enrich = [("kind", "enrich")];
    let wanted = [("the hung-up client's job", &enrich[..], 1.0)];
    counted_once(
        &svc,
        "catalog_jobs_created_total",
        &before,
        &wanted,
        CLIENT_PATIENCE,
    )
    .await;
    let listed = svc
        .get_json(&format!("/catalog/jobs?tenant_id={tenant}"))
        .await;
    assert_eq!(
        listed["jobs"].as_array().map(Vec::len),
        Some(1),
        "{listed:#}"
    );
}

#[tokio::test]
async fn the_metrics_output_is_valid_prometheus_text_and_names_only_listed_metrics() {
    let svc = Service::on_unreachable_redis().start().await;
    // A store error, a refused start and a few routes, so most families have samples.
    let r = svc.get("/readyz").await;
    assert_eq!(r.status(), 503);
    let r = svc
        .post_form(
            "/catalog/sync",
            &[("tenant_id", "acme"), ("source", "demo.jsonl")],
        )
        .await;
    assert_eq!(r.status(), 503);
    let text = metrics_text(&svc).await;
    let (parsed, help) =
        parse_exposition(&text).unwrap_or_else(|line| panic!("not Prometheus text format: {line}"));
    let listed: HashMap<&str, ()> = ALL.iter().map(|(name, _, _)| (*name, ())).collect();
    for sample in &parsed {
        let family = ["_count", "_sum", "_bucket"]
            .iter()
            .find_map(|s| sample.name.strip_suffix(s))
            .filter(|f| listed.contains_key(f))
            .unwrap_or(&sample.name);
        assert!(
            listed.contains_key(family),
            "{} is not in metrics::ALL",
            sample.name
        );
        assert!(!sample.labels.contains_key("tenant_id") && !sample.labels.contains_key("tenant"));
    }
    assert!(value(&parsed, "catalog_store_errors_total", &[("op", "ping")]) >= 1.0);
    assert!(
        help.contains_key("catalog_http_requests_total"),
        "HELP lines are written"
    );
    assert!(
        parsed
            .iter()
            .any(|s| s.labels.get("route").map(String::as_str) == Some("/readyz")),
        "labels with braces and slashes are read"
    );
}

/// A log shipper that dies closes the pipe the service logs into: every line it writes then
/// fails. The service loses its log lines, not its work: it keeps answering, runs a job to
/// `done`, and still stops on SIGTERM (it panicked at its first line, or with Redis out of
/// reach stayed up ignoring SIGTERM).
#[tokio::test]
async fn a_replica_whose_log_reader_went_away_keeps_serving_and_stops_on_sigterm() {
    let redis = crate::helpers::RedisServer::start(false);
    for (store, launch) in [
        ("embedded", Service::embedded()),
        ("redis", Service::on(&redis)),
    ] {
        let mut svc = launch.with_log_reader_gone().start().await;
        let id = svc.start_sync(&unique("nolog"), "demo.jsonl").await;
        assert_eq!(svc.poll_until_ended(&id).await["status"], "done", "{store}");
        let refused = svc.post_form("/catalog/sync", &[("wait", "maybe")]).await;
        assert_eq!(refused.status(), 422, "{store}");
        svc.signal("TERM");
        assert_eq!(svc.wait_exit(), Some(0), "{store}: exits as told");
    }
    let mut svc = Service::on_unreachable_redis()
        .with_log_reader_gone()
        .start()
        .await;
    let refused = svc.start("enrich", &[("tenant_id", "nolog")]).await;
    assert_eq!(refused.status(), 503, "Redis is out of reach");
    svc.signal("TERM");
    assert_eq!(
        svc.wait_exit(),
        Some(0),
        "out of Redis's reach: exits as told"
    );
}
