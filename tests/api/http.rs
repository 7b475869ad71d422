//! The HTTP contract (SPEC §1) through the real server on an ephemeral port, on both stores.

use std::time::Duration;

use reqwest::multipart::Form;
use serde_json::{json, Value};

use crate::both_stores;
use catalog_jobs::jobs::TenantId;

use crate::helpers::{
    retry_after, settings, spawn_app, spawn_app_with, started_id, store, strings_of, tenant,
    test_config, Backend, Gate, TestApp, Tokens, OPERATOR,
};

both_stores!(
    starting_a_job_answers_202_with_its_id_and_location_then_polls_to_done,
    wait_true_returns_the_report_inline,
    wait_true_on_a_failing_job_answers_502_with_the_job_and_only_the_error_class,
    a_second_job_of_the_same_kind_is_refused_with_409_naming_the_first,
    a_panicking_job_fails_with_panic_and_the_service_lives_on,
    unknown_and_malformed_job_ids_are_404_json,
    the_listing_is_newest_first_and_honours_the_limit,
    every_content_type_starts_a_job,
    a_bad_start_gets_its_4xx_envelope_and_creates_nothing,
    a_bad_listing_query_is_422_naming_its_problem,
    an_unknown_route_is_404_and_a_wrong_method_405_in_the_envelope,
    a_wait_longer_than_the_maximum_turns_into_202_and_the_job_goes_on,
    a_client_that_hangs_up_on_a_wait_does_not_stop_the_job,
    health_and_readiness_answer,
    a_running_job_is_cancelled_on_request_and_frees_its_kind,
    a_job_waiting_for_a_worker_is_cancelled_without_running,
    an_ended_job_is_retried_with_its_parameters_and_an_active_one_is_refused,
    the_listing_pages_with_a_cursor_newest_first_and_its_last_page_says_so,
    the_listing_filters_by_status_and_kind,
    a_bad_filter_or_cursor_is_422_naming_its_field,
    an_active_job_answers_retry_after_from_its_eta_and_an_ended_one_does_not,
    a_finished_job_polled_again_answers_the_same_json_to_its_tenant_only,
    quick_answers_hold_no_worker_and_only_max_concurrent_functions_run,
    a_poll_of_a_job_being_answered_quickly_reads_its_end,
    a_process_answers_as_many_jobs_quickly_at_once_as_it_has_quick_seats,
    a_job_claimed_with_a_create_whose_caller_left_runs_on_its_first_attempt,
);

async fn an_ended_job_is_retried_with_its_parameters_and_an_active_one_is_refused(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    let (gate, first) = app.start_gated(&t).await;
    let retry = |id: &str| {
        reqwest::Client::new()
            .post(app.url(&format!("/catalog/jobs/{id}/retry")))
            .header("x-request-id", "retry-req-1")
    };
    let r = retry(&first).send().await.unwrap();
    assert_eq!(r.status(), 409);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "still_active");
    assert_eq!(body["job_id"], first.as_str());
    assert_eq!(cancel(&app, &first).await.0, 202);
    assert_eq!(app.poll_until_ended(&first).await["status"], "cancelled");

    let ticker = app
        .start(
            "ticker",
            &[("tenant_id", t.as_str()), ("n", "3"), ("wait", "1")],
        )
        .await;
    let ticker_id = ticker.headers()["location"]
        .to_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    let r = retry(&ticker_id).send().await.unwrap();
    assert_eq!(r.status(), 202);
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    let again: Value = r.json().await.unwrap();
    let again_id = again["job_id"].as_str().unwrap();
    assert_ne!(again_id, ticker_id);
    assert_eq!(location, format!("/catalog/jobs/{again_id}"));
    assert_eq!(again["retry_of"], ticker_id.as_str());
    assert_eq!(again["kind"], "ticker");
    assert_eq!(again["tenant_id"], t.as_str());
    assert_eq!(again["params"], app.get_job(&ticker_id).await["params"]);
    assert_eq!(again["request_id"], "retry-req-1");
    let done = app.poll_until_ended(again_id).await;
    assert_eq!(done["result"], json!({"ticks": 3}));
    assert_eq!(done["retry_of"], ticker_id.as_str());
    assert_eq!(app.get_job(&ticker_id).await["retry_of"], Value::Null);

    // Single flight as for any start: while the retry waits or runs, another one is 409.
    let r = retry(&first).send().await.unwrap();
    assert_eq!(r.status(), 202);
    let second: Value = r.json().await.unwrap();
    let r = retry(&first).send().await.unwrap();
    assert_eq!(r.status(), 409);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "already_running");
    assert_eq!(body["job_id"], second["job_id"]);
    gate.release();
    app.poll_until_ended(second["job_id"].as_str().unwrap())
        .await;

    let missing = retry(&uuid::Uuid::new_v4().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let other_tenant = reqwest::Client::new()
        .post(app.url(&format!(
            "/catalog/jobs/{ticker_id}/retry?tenant_id=someone-else"
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(
        other_tenant.status(),
        404,
        "another tenant's job is unknown"
    );
}

async fn an_active_job_answers_retry_after_from_its_eta_and_an_ended_one_does_not(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    let (gate, id) = app.start_gated(&t).await;
    let half = app.wait_for(&id, |j| j["percent"] == 50).await;
    assert!(
        half["eta_seconds"].is_u64(),
        "a job halfway has an estimate: {half}"
    );
    let r = app.get(&format!("/catalog/jobs/{id}")).await;
    let secs = retry_after(&r);
    assert!((1..=30).contains(&secs), "Retry-After {secs} is bounded");
    gate.release();
    let done = app.poll_until_ended(&id).await;
    assert_eq!(
        done["eta_seconds"],
        Value::Null,
        "an ended job has no estimate"
    );
    let r = app.get(&format!("/catalog/jobs/{id}")).await;
    assert!(r.headers().get("retry-after").is_none());
}

/// A poll's answer as the tests compare it: status, content type, whether it has a
/// `Retry-After`, and the body's bytes.
async fn poll_answer(app: &TestApp, path: &str, token: &str) -> (u16, String, bool, Vec<u8>) {
    let r = app.get_as(path, token).await;
    let header = |name| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let (status, kind) = (
        r.status().as_u16(),
        header("content-type").unwrap_or_default(),
    );
    let retry = header("retry-after").is_some();
    (status, kind, retry, r.bytes().await.unwrap().to_vec())
}

/// A finished job polled again and again (on Redis, from the finished-jobs cache after the
/// first read) answers the bytes of its snapshot's JSON, with the same headers, to its
/// tenant and the operator; another tenant's token, a query naming another tenant, or an
/// unknown query field are refused as before.
async fn a_finished_job_polled_again_answers_the_same_json_to_its_tenant_only(b: Backend) {
    let tokens = Tokens::new();
    let mut config = test_config();
    config.api_tokens = Some(tokens.api_tokens());
    let app = spawn_app_with(config, store(b, settings())).await;
    let a = tokens.a.as_str();
    let id = started_id(app.start_as("ticker", &[("tenant_id", a)], OPERATOR).await).await;
    let path = format!("/catalog/jobs/{id}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let job: Value = app.get_as(&path, OPERATOR).await.json().await.unwrap();
        if job["status"] == "done" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the job did not end: {job}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let job_id = catalog_jobs::jobs::JobId::parse(&id).unwrap();
    let snapshot = app.store.get(&job_id).await.unwrap().expect("the job");
    let json = serde_json::to_vec(&snapshot).unwrap();
    let ok = (200, "application/json".to_owned(), false, json);
    let named_a = format!("{path}?tenant_id={a}");
    for _ in 0..3 {
        for (path, token) in [
            (&path, OPERATOR),
            (&path, &tokens.a_token),
            (&named_a, OPERATOR),
        ] {
            assert_eq!(poll_answer(&app, path, token).await, ok, "{path}");
        }
    }
    let named_b = format!("{path}?tenant_id={}", tokens.b);
    let unknown = format!("{path}?nope=1");
    let refused = [
        (&path, tokens.b_token.as_str(), 404, "not_found"),
        (&named_b, OPERATOR, 404, "not_found"),
        (&named_b, tokens.a_token.as_str(), 404, "not_found"),
        (&unknown, OPERATOR, 422, "unknown_field"),
    ];
    for (path, token, status, code) in refused {
        let (got, _, _, body) = poll_answer(&app, path, token).await;
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (got, body["error"].as_str()),
            (status, Some(code)),
            "{path}"
        );
    }
}

async fn starting_a_job_answers_202_with_its_id_and_location_then_polls_to_done(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    let r = app
        .start("ticker", &[("tenant_id", t.as_str()), ("n", "5")])
        .await;
    assert_eq!(r.status(), 202);
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    let body: Value = r.json().await.unwrap();
    let id = body["job_id"].as_str().unwrap().to_owned();
    assert_eq!(location, format!("/catalog/jobs/{id}"));
    assert_eq!(body["status"], "queued");
    assert_eq!(body["tenant_id"], t.as_str());
    assert_eq!(body["kind"], "ticker");
    assert_eq!(body["percent"], 0);
    for field in ["created_at", "updated_at", "heartbeat_at"] {
        assert!(
            body[field].as_str().unwrap().ends_with('Z'),
            "{field}: {body}"
        );
    }
    let done = app.poll_until_ended(&id).await;
    assert_eq!(done["status"], "done");
    assert_eq!(done["percent"], 100);
    assert_eq!(done["result"], json!({"ticks": 5}));
    assert_eq!(done["error"], Value::Null);
    assert!(done["finished_at"].is_string() && done["started_at"].is_string());
    let polled = app.get(&location).await.status();
    assert_eq!(polled, 200, "the Location header is pollable as given");
}

async fn wait_true_returns_the_report_inline(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    let r = app
        .start(
            "ticker",
            &[("tenant_id", t.as_str()), ("n", "7"), ("wait", "true")],
        )
        .await;
    assert_eq!(r.status(), 200);
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"ticks": 7}));
    // The waited job was created exactly like any other: it is listed, and done.
    let listed: Value = app.get_json(&format!("/catalog/jobs?tenant_id={t}")).await;
    assert_eq!(listed["jobs"][0]["status"], "done");
    assert_eq!(
        location,
        format!(
            "/catalog/jobs/{}",
            listed["jobs"][0]["job_id"].as_str().unwrap()
        ),
        "the waited 200 names its job in Location"
    );
    assert_eq!(listed["jobs"][0]["result"], json!({"ticks": 7}));
}

async fn wait_true_on_a_failing_job_answers_502_with_the_job_and_only_the_error_class(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    let waited = [("tenant_id", t.as_str()), ("wait", "yes")];
    let r = app.start("fail", &waited).await;
    assert_eq!(r.status(), 502);
    let text = r.text().await.unwrap();
    assert!(
        !text.contains("customer-secret"),
        "the error's message never reaches a client: {text}"
    );
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["error"], "job_failed");
    assert!(body["message"]
        .as_str()
        .unwrap()
        .contains("SourceUnreachable"));
    assert_eq!(body["job"]["status"], "failed");
    assert_eq!(body["job"]["error"], "SourceUnreachable");
    let polled = app.get_job(body["job"]["job_id"].as_str().unwrap()).await;
    assert_eq!(polled["error"], "SourceUnreachable");
    assert!(!polled.to_string().contains("customer-secret"));
}

async fn a_second_job_of_the_same_kind_is_refused_with_409_naming_the_first(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    let gate = Gate::of(&t);
    let first = app.start_json("gated", &[("tenant_id", t.as_str())]).await;
    let first_id = first["job_id"].as_str().unwrap();
    gate.reached().await;
    app.wait_for_status(first_id, "running").await;
    let running = app.wait_for(first_id, |j| j["percent"] == 50).await;
    assert_eq!(running["percent"], 50);
    assert_eq!(running["step"], "waiting at the gate");
    let r = app.start("gated", &[("tenant_id", t.as_str())]).await;
    assert_eq!(r.status(), 409);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "already_running");
    assert_eq!(body["job_id"], first_id);
    assert!(body["message"].is_string());
    // Another kind for the same tenant runs meanwhile.
    let other = app
        .start("ticker", &[("tenant_id", t.as_str()), ("wait", "1")])
        .await;
    assert_eq!(other.status(), 200);
    gate.release();
    assert_eq!(app.poll_until_ended(first_id).await["status"], "done");
    // Once it ended, the kind is free again.
    let again = app.start("ticker", &[("tenant_id", t.as_str())]).await;
    assert_eq!(again.status(), 202);
}

async fn a_panicking_job_fails_with_panic_and_the_service_lives_on(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    let r = app.start("panic", &[("tenant_id", t.as_str())]).await;
    let id = r.json::<Value>().await.unwrap()["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let ended = app.poll_until_ended(&id).await;
    assert_eq!(ended["status"], "failed");
    assert_eq!(ended["error"], "Panic");
    let after = app
        .start("ticker", &[("tenant_id", t.as_str()), ("wait", "true")])
        .await;
    assert_eq!(after.status(), 200, "the service lives on");
    let again = app.start("panic", &[("tenant_id", t.as_str())]).await;
    assert_eq!(again.status(), 202, "the panicked job released its lock");
}

async fn unknown_and_malformed_job_ids_are_404_json(b: Backend) {
    let app = spawn_app(b).await;
    for id in [
        catalog_jobs::jobs::JobId::new().to_string(),
        "not-a-uuid".into(),
        "%FF%FE".into(),
    ] {
        let r = app.get(&format!("/catalog/jobs/{id}")).await;
        assert_eq!(r.status(), 404, "{id}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "not_found");
        assert!(body["message"].is_string());
    }
    // The message repeats what was asked for, but never invisibly, blank or whole.
    let long = "x".repeat(5_000);
    for (id, shown) in [
        ("%00%ff", "`\u{fffd}`".to_owned()),
        ("%00abc", "`\\u{0}abc`".to_owned()),
        ("ab%E2%80%AEcd", "`ab\\u{202e}cd`".to_owned()),
        (long.as_str(), format!("`{}…`", "x".repeat(80))),
    ] {
        let r = app.get(&format!("/catalog/jobs/{id}")).await;
        assert_eq!(r.status(), 404, "{id}");
        let body: Value = r.json().await.unwrap();
        let message = body["message"].as_str().unwrap();
        assert!(message.ends_with(&shown), "{id}: {message}");
    }
}

async fn the_listing_is_newest_first_and_honours_the_limit(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    let mut ids = Vec::new();
    for n in ["1", "2", "3"] {
        // wait=true so each job ends before the next of the same kind starts.
        let r = app
            .start(
                "ticker",
                &[("tenant_id", t.as_str()), ("n", n), ("wait", "true")],
            )
            .await;
        assert_eq!(r.status(), 200);
        let listed: Value = app
            .get_json(&format!("/catalog/jobs?tenant_id={t}&limit=1"))
            .await;
        ids.push(listed["jobs"][0]["job_id"].as_str().unwrap().to_owned());
    }
    let listed: Value = app.get_json(&format!("/catalog/jobs?tenant_id={t}")).await;
    let got = strings_of(&listed["jobs"], "job_id");
    ids.reverse();
    assert_eq!(got, ids);
    let two: Value = app
        .get_json(&format!("/catalog/jobs?tenant_id={t}&limit=2"))
        .await;
    assert_eq!(two["jobs"].as_array().unwrap().len(), 2);
    let none: Value = app
        .get_json(&format!("/catalog/jobs?tenant_id={}", tenant()))
        .await;
    assert_eq!(none, json!({"jobs": [], "next_cursor": null}));
}

async fn every_content_type_starts_a_job(b: Backend) {
    let app = spawn_app(b).await;
    let url = app.url("/catalog/ticker");
    let post = |query: &str| app.client.post(format!("{url}{query}"));
    // A tenant each, so that no start is refused as another's twin.
    let [t1, t2, t3, t4, t5] = [(); 5].map(|_| tenant());
    let form = Form::new()
        .text("tenant_id", t3.to_string())
        .text("n", "3")
        .text("wait", "1");
    let starts = [
        (
            "json",
            post("").json(&json!({"tenant_id": t1, "n": 3, "wait": true})),
        ),
        (
            "urlencoded",
            post("").form(&[("tenant_id", t2.as_str()), ("n", "3"), ("wait", "on")]),
        ),
        ("multipart", post("").multipart(form)),
        ("query", post(&format!("?tenant_id={t4}&n=3&wait=true"))),
        (
            "query+json",
            post("?wait=true").json(&json!({"tenant_id": t5, "n": "3"})),
        ),
    ];
    for (what, start) in starts {
        let r = start.send().await.unwrap();
        assert_eq!(r.status(), 200, "{what}");
        assert_eq!(
            r.json::<Value>().await.unwrap(),
            json!({"ticks": 3}),
            "{what}"
        );
    }
}

const FORM: &str = "application/x-www-form-urlencoded";
const JSON: &str = "application/json";

/// Start requests that are refused: (what, path, content type, body, status, code). In a
/// body, `{t}` stands for the test's tenant and `{long}` for a tenant one character too long.
const BAD_STARTS: &[(&str, &str, &str, &str, u16, &str)] = &[
    (
        "missing tenant",
        "/catalog/ticker",
        FORM,
        "n=2",
        422,
        "missing_field",
    ),
    (
        "empty tenant",
        "/catalog/ticker",
        FORM,
        "tenant_id=",
        422,
        "invalid_field",
    ),
    (
        "tenant with a space",
        "/catalog/ticker",
        FORM,
        "tenant_id=a+b",
        422,
        "invalid_field",
    ),
    (
        "tenant with a colon",
        "/catalog/ticker",
        JSON,
        r#"{"tenant_id":"a:b"}"#,
        422,
        "invalid_field",
    ),
    (
        "tenant too long",
        "/catalog/ticker",
        FORM,
        "tenant_id={long}",
        422,
        "invalid_field",
    ),
    (
        "tenant not a string",
        "/catalog/ticker",
        JSON,
        r#"{"tenant_id":42}"#,
        422,
        "invalid_field",
    ),
    (
        "tenant twice",
        "/catalog/ticker",
        FORM,
        "tenant_id={t}&tenant_id=other",
        422,
        "invalid_field",
    ),
    (
        "bad wait",
        "/catalog/ticker",
        FORM,
        "tenant_id={t}&wait=maybe",
        422,
        "invalid_field",
    ),
    (
        "wait as an object",
        "/catalog/ticker",
        JSON,
        r#"{"tenant_id":"{t}","wait":{}}"#,
        422,
        "invalid_field",
    ),
    (
        "unknown field",
        "/catalog/ticker",
        FORM,
        "tenant_id={t}&tenantid=x",
        422,
        "unknown_field",
    ),
    (
        "bad kind parameter",
        "/catalog/ticker",
        FORM,
        "tenant_id={t}&n=lots",
        422,
        "invalid_field",
    ),
    (
        "unknown kind",
        "/catalog/bogus",
        FORM,
        "tenant_id={t}",
        404,
        "unknown_kind",
    ),
    (
        "kind with capitals",
        "/catalog/TICKER",
        FORM,
        "tenant_id={t}",
        404,
        "unknown_kind",
    ),
    (
        "malformed JSON",
        "/catalog/ticker",
        JSON,
        "{\"tenant_id\": ",
        400,
        "malformed_body",
    ),
    (
        "JSON not an object",
        "/catalog/ticker",
        JSON,
        "[1,2]",
        400,
        "malformed_body",
    ),
    (
        "unsupported type",
        "/catalog/ticker",
        "text/plain",
        "tenant_id={t}",
        415,
        "unsupported_media_type",
    ),
    (
        "broken multipart",
        "/catalog/ticker",
        "multipart/form-data; boundary=zzz",
        "--zzz\r\nnonsense",
        400,
        "malformed_body",
    ),
    (
        "multipart without boundary",
        "/catalog/ticker",
        "multipart/form-data",
        "x",
        400,
        "malformed_body",
    ),
];

/// Listing queries that are refused with 422: (what, query, code), `{t}` as above.
const BAD_LISTINGS: &[(&str, &str, &str)] = &[
    (
        "a repeated tenant",
        "tenant_id={t}&tenant_id=x",
        "invalid_field",
    ),
    ("limit zero", "tenant_id={t}&limit=0", "invalid_field"),
    ("limit too big", "tenant_id={t}&limit=101", "invalid_field"),
    (
        "limit not a number",
        "tenant_id={t}&limit=ten",
        "invalid_field",
    ),
    (
        "unknown parameter",
        "tenant_id={t}&tenant=x",
        "unknown_field",
    ),
    ("bad tenant", "tenant_id=%2F", "invalid_field"),
];

fn filled(template: &str, t: &TenantId) -> String {
    template
        .replace("{t}", t.as_str())
        .replace("{long}", &"x".repeat(129))
}

async fn a_bad_start_gets_its_4xx_envelope_and_creates_nothing(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    for &(what, path, content_type, body, status, code) in BAD_STARTS {
        let r = app
            .client
            .post(app.url(path))
            .header("content-type", content_type)
            .body(filled(body, &t))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{what}");
        let body: Value = r
            .json()
            .await
            .unwrap_or_else(|e| panic!("{what}: not JSON: {e}"));
        assert_eq!(body["error"], code, "{what}: {body}");
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: {body}"
        );
    }
    assert!(
        app.store.recent(&t, 100).await.unwrap().is_empty(),
        "no bad request created a job"
    );
}

async fn a_bad_listing_query_is_422_naming_its_problem(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    for &(what, query, code) in BAD_LISTINGS {
        let r = app
            .get(&format!("/catalog/jobs?{}", filled(query, &t)))
            .await;
        assert_eq!(r.status(), 422, "{what}");
        assert_eq!(r.json::<Value>().await.unwrap()["error"], code, "{what}");
    }
}

async fn an_unknown_route_is_404_and_a_wrong_method_405_in_the_envelope(b: Backend) {
    let app = spawn_app(b).await;
    let r = app
        .client
        .delete(app.url("/catalog/jobs"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"],
        "method_not_allowed"
    );
    let r = app.get("/nowhere").await;
    assert_eq!(r.status(), 404);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "not_found");
}

async fn a_wait_longer_than_the_maximum_turns_into_202_and_the_job_goes_on(b: Backend) {
    let mut config = test_config();
    config.wait_max_seconds = Duration::from_millis(1500);
    let app = spawn_app_with(config, store(b, settings())).await;
    let t = tenant();
    let gate = Gate::of(&t);
    let r = app
        .start("gated", &[("tenant_id", t.as_str()), ("wait", "true")])
        .await;
    assert_eq!(r.status(), 202);
    assert!(r.headers().contains_key("location"));
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["status"], "running",
        "the 202 shows the job as it is now"
    );
    gate.release();
    let done = app.poll_until_ended(body["job_id"].as_str().unwrap()).await;
    assert_eq!(done["result"], json!({"gated": true}));
}

async fn a_client_that_hangs_up_on_a_wait_does_not_stop_the_job(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    let gate = Gate::of(&t);
    let waiting = tokio::spawn(
        app.client
            .post(app.url("/catalog/gated"))
            .form(&[("tenant_id", t.as_str()), ("wait", "true")])
            .send(),
    );
    // The client hangs up while its job is running, whatever time the request took to land.
    gate.reached().await;
    waiting.abort();
    assert!(
        waiting.await.is_err_and(|e| e.is_cancelled()),
        "the client hung up before the job ended"
    );
    gate.release();
    let listed: Value = app.get_json(&format!("/catalog/jobs?tenant_id={t}")).await;
    let id = listed["jobs"][0]["job_id"].as_str().unwrap().to_owned();
    let done = app.poll_until_ended(&id).await;
    assert_eq!(done["status"], "done");
}

fn quick_heartbeats() -> catalog_jobs::config::Config {
    let mut config = test_config();
    // The runner learns of a cancel request from its next heartbeat.
    config.heartbeat_seconds = Some(Duration::from_millis(50));
    config
}

async fn cancel(app: &TestApp, id: &str) -> (u16, Value) {
    let r = app.cancel(id).await;
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn a_running_job_is_cancelled_on_request_and_frees_its_kind(b: Backend) {
    let app = spawn_app_with(quick_heartbeats(), store(b, settings())).await;
    let t = tenant();
    let gate = Gate::of(&t);
    let waiter = {
        let (client, url) = (app.client.clone(), app.url("/catalog/gated"));
        let form = [("tenant_id", t.to_string()), ("wait", "true".to_owned())];
        tokio::spawn(async move { client.post(url).form(&form).send().await.unwrap() })
    };
    gate.reached().await;
    let id = app.store.recent(&t, 1).await.unwrap()[0].job_id.to_string();
    let (status, body) = cancel(&app, &id).await;
    assert_eq!(status, 202, "{body}");
    // The cancel reaches the job at once (an event, not the next heartbeat): by the time the
    // answer is read back the job may already have stopped.
    assert!(
        matches!(body["status"].as_str(), Some("cancelling" | "cancelled")),
        "{body}"
    );
    assert!(body["cancel_requested_at"].is_string());
    let ended = app.poll_until_ended(&id).await;
    assert_eq!(
        (ended["status"].as_str(), ended["error"].as_str()),
        (Some("cancelled"), None),
        "{ended}"
    );
    assert_eq!(ended["percent"], 50, "it keeps the progress it made");
    let waited = waiter.await.unwrap();
    assert_eq!(
        waited.status(),
        502,
        "a wait=true caller learns the job did not finish"
    );
    assert_eq!(
        waited.json::<Value>().await.unwrap()["job"]["status"],
        "cancelled"
    );

    let (status, body) = cancel(&app, &id).await;
    assert_eq!((status, body["error"].as_str()), (409, Some("not_active")));
    assert_eq!(body["job"]["status"], "cancelled");
    for unknown in [
        catalog_jobs::jobs::JobId::new().to_string(),
        "nope".to_owned(),
    ] {
        let (status, body) = cancel(&app, &unknown).await;
        assert_eq!((status, body["error"].as_str()), (404, Some("not_found")));
    }
    gate.release();
    let again = app
        .start("gated", &[("tenant_id", t.as_str()), ("wait", "true")])
        .await;
    assert_eq!(again.status(), 200, "the kind is free again");
}

async fn a_job_waiting_for_a_worker_is_cancelled_without_running(b: Backend) {
    let mut config = quick_heartbeats();
    config.max_concurrent_jobs = 1;
    let app = spawn_app_with(config, store(b, settings())).await;
    let (t1, t2) = (tenant(), tenant());
    let g1 = Gate::of(&t1);
    app.start("gated", &[("tenant_id", t1.as_str())]).await;
    g1.reached().await;
    let waiting = app.start_json("gated", &[("tenant_id", t2.as_str())]).await;
    let id = waiting["job_id"].as_str().unwrap();
    let (status, _) = cancel(&app, id).await;
    assert_eq!(status, 202);
    let ended = app.poll_until_ended(id).await;
    assert_eq!(
        (ended["status"].as_str(), ended["percent"].as_u64()),
        (Some("cancelled"), Some(0))
    );
    assert!(
        !*Gate::of(&t2).started.subscribe().borrow(),
        "its function never ran"
    );
    g1.release();
}

async fn health_and_readiness_answer(b: Backend) {
    let app = spawn_app(b).await;
    let r = app.get("/healthz").await;
    assert_eq!(r.status(), 200);
    let r = app.get("/readyz").await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "ready");
    match b {
        Backend::Memory => assert_eq!(body["durable"], false),
        // Whether Redis persists depends on the Redis (tests/api/readiness.rs checks both).
        Backend::Redis => assert!(body["durable"].is_boolean(), "{body}"),
    }
}

/// Five ended jobs of the tenant, oldest first: ticker, fail, ticker, fail, ticker.
async fn five_ended_jobs(app: &TestApp, t: &TenantId) -> Vec<String> {
    let mut started = Vec::new();
    for kind in ["ticker", "fail", "ticker", "fail", "ticker"] {
        let form = [("tenant_id", t.as_str()), ("n", "1"), ("wait", "1")];
        let form = if kind == "fail" {
            &form[..1]
        } else {
            &form[..]
        };
        let r = app.start(kind, form).await;
        let id = r
            .headers()
            .get("location")
            .map(|l| l.to_str().unwrap().rsplit('/').next().unwrap().to_owned());
        let id = match id {
            Some(id) => id,
            None => r.json::<Value>().await.unwrap()["job"]["job_id"]
                .as_str()
                .unwrap()
                .to_owned(),
        };
        app.poll_until_ended(&id).await;
        started.push(id);
    }
    started
}

async fn the_listing_pages_with_a_cursor_newest_first_and_its_last_page_says_so(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    let newest_first: Vec<String> = five_ended_jobs(&app, &t).await.into_iter().rev().collect();
    let mut seen = Vec::new();
    for page in app
        .pages(&format!("/catalog/jobs?tenant_id={t}&limit=2"), 10)
        .await
    {
        let jobs = page["jobs"].as_array().unwrap();
        assert!(jobs.len() <= 2);
        seen.extend(
            jobs.iter()
                .map(|j| j["job_id"].as_str().unwrap().to_owned()),
        );
    }
    assert_eq!(seen, newest_first);
}

async fn the_listing_filters_by_status_and_kind(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    let started = five_ended_jobs(&app, &t).await;
    let failed = vec![started[3].clone(), started[1].clone()];
    let newest_first: Vec<String> = started.into_iter().rev().collect();
    for (query, expected) in [
        ("status=failed", failed.clone()),
        ("kind=fail", failed),
        ("status=done,failed&status=lost", newest_first),
        ("status=running", vec![]),
    ] {
        let listed = app.job_ids(&format!("tenant_id={t}&{query}")).await;
        assert_eq!(listed, expected, "{query}");
    }
}

/// Listing queries that are refused, and the field each refusal names.
const BAD_LISTING_QUERIES: [(&str, &str); 4] = [
    ("status=finished", "status"),
    ("kind=Not-A-Kind", "kind"),
    ("cursor=garbage", "cursor"),
    ("cursor=12.not-a-uuid", "cursor"),
];

async fn a_bad_filter_or_cursor_is_422_naming_its_field(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    for (query, field) in BAD_LISTING_QUERIES {
        let r = app
            .get(&format!("/catalog/jobs?tenant_id={t}&{query}"))
            .await;
        assert_eq!(r.status(), 422, "{query}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "invalid_field", "{query}");
        assert_eq!(body["field"], field, "{query}");
    }
}

/// What the jobs of `quick_kind` saw: quick answers and functions under way at once, the
/// most functions at once, and whether they may end.
#[derive(Default)]
struct Seen {
    quick: std::sync::atomic::AtomicUsize,
    functions: std::sync::atomic::AtomicUsize,
    most_functions: std::sync::atomic::AtomicUsize,
    open: std::sync::atomic::AtomicBool,
}

/// A kind with a quick answer: held until `seen.open`, for a tenant ending in `q`; none for
/// any other, whose function runs, held the same way.
fn quick_kind(seen: std::sync::Arc<Seen>) -> catalog_jobs::jobs::registry::Registry {
    use std::sync::atomic::Ordering::SeqCst;
    let ran = seen.clone();
    catalog_jobs::jobs::registry::Registry::new()
        .with_plain("quick", move |_, _| {
            let now = ran.functions.fetch_add(1, SeqCst) + 1;
            ran.most_functions.fetch_max(now, SeqCst);
            while !ran.open.load(SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
            ran.functions.fetch_sub(1, SeqCst);
            Ok(json!({"by": "function"}))
        })
        .with_quick("quick", move |input, _| {
            let seen = seen.clone();
            Box::pin(async move {
                if !input.tenant.as_str().ends_with('q') {
                    return None;
                }
                seen.quick.fetch_add(1, SeqCst);
                while !seen.open.load(SeqCst) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Some(Ok(json!({"by": "quick answer"})))
            })
        })
}

/// The app on `b` running `quick_kind` only, its jobs telling `seen`.
async fn quick_app(
    b: Backend,
    config: catalog_jobs::config::Config,
    seen: &std::sync::Arc<Seen>,
) -> TestApp {
    let jobs = store(b, settings());
    let catalog = crate::helpers::test_catalog(&config);
    let app = catalog_jobs::startup::App::build_with(
        config,
        jobs.clone(),
        catalog,
        quick_kind(seen.clone()),
    );
    TestApp::run(app.await.expect("the app builds"), jobs)
}

/// Polls `condition` every 10 ms for up to 20 s.
async fn until(what: &str, condition: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !condition() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// With `MAX_CONCURRENT_JOBS=1`, jobs answered quickly do not wait for the one worker: three
/// quick answers are under way at once (before, one, the others queued behind it). A job
/// whose function runs still takes the worker, and one more waits queued for it: one
/// function at a time.
async fn quick_answers_hold_no_worker_and_only_max_concurrent_functions_run(b: Backend) {
    use std::sync::atomic::Ordering::SeqCst;
    let mut config = test_config();
    config.max_concurrent_jobs = 1;
    let seen = std::sync::Arc::new(Seen::default());
    let app = quick_app(b, config, &seen).await;
    let start = async |suffix: char| {
        let t = format!("{}{suffix}", tenant());
        app.start_id("quick", &[("tenant_id", &t)]).await
    };
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(start('q').await);
    }
    until("three quick answers under way at once", || {
        seen.quick.load(SeqCst) == 3
    })
    .await;
    ids.push(start('x').await);
    until("a function runs", || seen.functions.load(SeqCst) == 1).await;
    let waiting = start('x').await;
    assert_eq!(
        app.get_job(&waiting).await["status"],
        "queued",
        "the worker is taken"
    );
    seen.open.store(true, SeqCst);
    ids.push(waiting);
    for id in &ids {
        assert_eq!(app.poll_until_ended(id).await["status"], "done", "{id}");
    }
    assert_eq!(
        seen.most_functions.load(SeqCst),
        1,
        "one function at a time"
    );
}

/// A poll of a job this process is answering quickly (claimed with its create) waits for
/// its end and reads it ended, where it read it running and came back a poll interval later:
/// the first poll a client sends right after the 202 now finds it done.
async fn a_poll_of_a_job_being_answered_quickly_reads_its_end(b: Backend) {
    use std::sync::atomic::Ordering::SeqCst;
    let seen = std::sync::Arc::new(Seen::default());
    let app = quick_app(b, test_config(), &seen).await;
    let t = format!("{}q", tenant());
    let id = app.start_id("quick", &[("tenant_id", &t)]).await;
    until("its quick answer is under way", || {
        seen.quick.load(SeqCst) == 1
    })
    .await;
    let mut poll = std::pin::pin!(app.get_job(&id));
    // No signal says a request is being held: the 50 ms give the poll the time to reach the
    // service before the answer is let go. Without the wait for the end the poll answers
    // `running` meanwhile; with it, reaching the service later changes nothing (the job is
    // then ended, or its end is being written and waited for).
    let early = tokio::select! {
        read = &mut poll => Some(read),
        () = tokio::time::sleep(Duration::from_millis(50)) => None,
    };
    seen.open.store(true, SeqCst);
    let read = match early {
        Some(read) => read,
        None => poll.await,
    };
    assert_eq!(read["status"], "done", "{read}");
    assert_eq!(read["result"], json!({"by": "quick answer"}), "{read}");
}

/// With `MAX_CONCURRENT_JOBS=1`, 128 jobs on quick seats and one on the worker are answered
/// at once (before, 32 quick seats: a queue of quick jobs drained with too few in flight to
/// keep Redis and the service busy at once), and the next job still waits queued: the
/// process takes no more of the queue than that.
async fn a_process_answers_as_many_jobs_quickly_at_once_as_it_has_quick_seats(b: Backend) {
    use std::sync::atomic::Ordering::SeqCst;
    let mut config = test_config();
    config.max_concurrent_jobs = 1;
    let seen = std::sync::Arc::new(Seen::default());
    let app = quick_app(b, config, &seen).await;
    let held = 128 + 1;
    let mut ids = Vec::new();
    for _ in 0..held {
        let t = format!("{}q", tenant());
        ids.push(app.start_id("quick", &[("tenant_id", &t)]).await);
    }
    until("129 quick answers under way at once", || {
        seen.quick.load(SeqCst) == held
    })
    .await;
    let t = format!("{}q", tenant());
    let waiting = app.start_id("quick", &[("tenant_id", &t)]).await;
    assert_eq!(
        app.get_job(&waiting).await["status"],
        "queued",
        "every seat is taken"
    );
    seen.open.store(true, SeqCst);
    ids.push(waiting);
    for id in &ids {
        assert_eq!(app.poll_until_ended(id).await["status"], "done", "{id}");
    }
    assert_eq!(seen.quick.load(SeqCst), held + 1, "all answered quickly");
}

/// A create that claims its job for this process (a worker free) is polled until the store
/// holds the job, then dropped, as a request is when its client hangs up on the POST: the
/// job still runs at once and ends on its first attempt. Before, the claim the store made
/// was started nowhere: the job read `running` until its lease ran out and recovery queued
/// it again (at the end of each `wrk` burst of the bench, a dozen jobs stayed so ~90 s).
async fn a_job_claimed_with_a_create_whose_caller_left_runs_on_its_first_attempt(b: Backend) {
    use catalog_jobs::jobs::runner::{Runner, RunnerSettings};
    use std::future::Future;
    let seen = std::sync::Arc::new(Seen::default());
    seen.open.store(true, std::sync::atomic::Ordering::SeqCst);
    let jobs = store(b, settings());
    let registry = std::sync::Arc::new(quick_kind(seen));
    let runner = Runner::new(jobs.clone(), registry, RunnerSettings::default());
    let t = TenantId::parse(&format!("{}q", tenant())).unwrap();
    let job = crate::helpers::new_job(&t, "quick");
    let id = job.id;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    {
        let mut create = std::pin::pin!(runner.create(job));
        // Polled until the store holds the job (or it answered: nothing left to drop).
        loop {
            let answered = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(create.as_mut().poll(cx).is_ready())
            })
            .await;
            if answered || jobs.get(&id).await.unwrap().is_some() {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "never created");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let ended = loop {
        match jobs.get(&id).await.unwrap() {
            Some(job) if job.status.is_finished() => break job,
            read => assert!(
                std::time::Instant::now() < deadline,
                "never ended: {read:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(ended.status.as_str(), "done", "{ended:?}");
    assert_eq!(ended.attempt, 1, "{ended:?}");
    assert_eq!(ended.recovered_at, None, "{ended:?}");
}
