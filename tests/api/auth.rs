//! Tenant tokens through the real server, on both stores: 401 without a known token, 403 for
//! another tenant named in the request, 404 for another tenant's job by id (exactly as an
//! unknown id), open health routes, and the open mode that says so.

use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::both_stores;
use crate::helpers::{settings, spawn_app_with, started_id, store, strings_of, tenant};
use crate::helpers::{tenant_routes, test_config, Backend, Gate, TestApp, Tokens, OPERATOR};
use catalog_jobs::config::tokens::hash_token;
use catalog_jobs::jobs::TenantId;

both_stores!(
    with_tokens_every_catalog_route_answers_401_without_a_known_token,
    a_tenant_token_naming_another_tenant_is_forbidden_and_its_own_tenant_is_served,
    another_tenants_job_by_id_is_404_exactly_like_an_unknown_id,
    an_operator_token_reaches_every_tenant,
    an_operator_lists_every_tenants_jobs_newest_first_page_by_page,
    a_tenant_token_listing_without_a_tenant_is_told_to_add_its_own,
    health_and_readiness_stay_open_with_tokens,
    without_tokens_every_route_is_open_and_readiness_says_so,
);

/// An app that knows the operator's token and one token each for two tenants.
struct Tenants {
    app: TestApp,
    tokens: Tokens,
}

impl std::ops::Deref for Tenants {
    type Target = Tokens;

    fn deref(&self) -> &Tokens {
        &self.tokens
    }
}

async fn app_with_tokens(b: Backend) -> Tenants {
    let tokens = Tokens::new();
    let mut config = test_config();
    config.api_tokens = Some(tokens.api_tokens());
    let app = spawn_app_with(config, store(b, settings())).await;
    Tenants { app, tokens }
}

async fn a_tenant_token_listing_without_a_tenant_is_told_to_add_its_own(b: Backend) {
    let t = app_with_tokens(b).await;
    let r = t.app.get_as("/catalog/jobs", &t.a_token).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        (body["error"].as_str(), body["field"].as_str()),
        (Some("forbidden"), Some("tenant_id"))
    );
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("add tenant_id={}", t.a)),
        "the message names what to add: {message}"
    );
}

/// Every guarded route of tenant `t` and its job `job`, and a route that does not exist.
fn routes(t: &TenantId, job: &str) -> Vec<(Method, String)> {
    let mut routes = tenant_routes(t, job);
    routes.push((Method::GET, "/catalog/nowhere".to_owned()));
    routes
}

/// Asserts that `r` is refused with `status` and the envelope's `code`, with a message.
async fn assert_refused(r: reqwest::Response, status: StatusCode, code: &str, what: &str) {
    assert_eq!(r.status(), status, "{what}");
    let body: Value = r.json().await.expect("a JSON envelope");
    assert_eq!(body["error"], code, "{what}: {body}");
    assert!(body["message"].is_string(), "{what}: {body}");
}

async fn start_as(app: &TestApp, t: &TenantId, token: &str) -> String {
    let form = [("tenant_id", t.as_str())];
    started_id(app.start_as("ticker", &form, token).await).await
}

async fn with_tokens_every_catalog_route_answers_401_without_a_known_token(b: Backend) {
    let s = app_with_tokens(b).await;
    let job = start_as(&s.app, &s.a, &s.a_token).await;
    for (method, path) in routes(&s.a, &job) {
        for token in [None, Some("not-a-token"), Some("")] {
            let r = s.app.send_as(method.clone(), &path, token).await;
            let what = format!("{method} {path} {token:?}");
            let challenge = r.headers().get("www-authenticate");
            assert_eq!(
                challenge.map(|v| v.to_str().unwrap()),
                Some("Bearer"),
                "{what}"
            );
            assert_refused(r, StatusCode::UNAUTHORIZED, "unauthorized", &what).await;
        }
    }
    // A token in another scheme is not a bearer token.
    let r = s
        .app
        .client
        .get(s.app.url(&format!("/catalog/jobs?tenant_id={}", s.a)))
        .basic_auth("a", Some(&s.a_token))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

async fn a_tenant_token_naming_another_tenant_is_forbidden_and_its_own_tenant_is_served(
    b: Backend,
) {
    let s = app_with_tokens(b).await;
    let (a, tb) = (&s.a, &s.b);
    let named = [
        (Method::POST, format!("/catalog/ticker?tenant_id={tb}")),
        (Method::GET, format!("/catalog/jobs?tenant_id={tb}")),
        (Method::GET, format!("/catalog/products?tenant_id={tb}")),
        (Method::POST, format!("/catalog/products?tenant_id={tb}")),
        (Method::GET, format!("/catalog/products/p1?tenant_id={tb}")),
    ];
    for (method, path) in named {
        let r = s.app.send_as(method.clone(), &path, Some(&s.a_token)).await;
        let what = format!("{method} {path}");
        assert_refused(r, StatusCode::FORBIDDEN, "forbidden", &what).await;
    }
    // Nothing was started for b.
    let r = s
        .app
        .get_as(&format!("/catalog/jobs?tenant_id={tb}"), &s.b_token)
        .await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["jobs"].as_array().unwrap().len(), 0, "{body}");
    // The same routes for its own tenant are served.
    let own = [
        (Method::POST, format!("/catalog/ticker?tenant_id={a}"), 202),
        (Method::GET, format!("/catalog/jobs?tenant_id={a}"), 200),
        (Method::GET, format!("/catalog/products?tenant_id={a}"), 200),
        (
            Method::POST,
            format!("/catalog/products?tenant_id={a}"),
            200,
        ),
        (
            Method::GET,
            format!("/catalog/products/p1?tenant_id={a}"),
            404,
        ),
    ];
    for (method, path, status) in own {
        let r = s.app.send_as(method.clone(), &path, Some(&s.a_token)).await;
        assert_eq!(r.status(), status, "{method} {path}");
    }
}

async fn another_tenants_job_by_id_is_404_exactly_like_an_unknown_id(b: Backend) {
    let s = app_with_tokens(b).await;
    let job = start_as(&s.app, &s.a, &s.a_token).await;
    let unknown = catalog_jobs::jobs::JobId::new().to_string();
    for (method, suffix) in [
        (Method::GET, ""),
        (Method::POST, "/cancel"),
        (Method::POST, "/retry"),
    ] {
        let as_b = async |id: &str| {
            let path = format!("/catalog/jobs/{id}{suffix}");
            s.app.send_as(method.clone(), &path, Some(&s.b_token)).await
        };
        let (theirs, none) = (as_b(&job).await, as_b(&unknown).await);
        assert_eq!(theirs.status(), 404);
        assert_eq!(none.status(), 404);
        let (theirs, none): (Value, Value) =
            (theirs.json().await.unwrap(), none.json().await.unwrap());
        assert_eq!(theirs["error"], none["error"]);
        assert_eq!(
            theirs["message"].as_str().unwrap().replace(&job, "ID"),
            none["message"].as_str().unwrap().replace(&unknown, "ID"),
            "{method} {suffix}"
        );
    }
    // The owner still sees it, and a wrong tenant_id on a job-id route is the same 404.
    let (a, b) = (&s.a, &s.b);
    for (path, token, status) in [
        (format!("/catalog/jobs/{job}"), s.a_token.as_str(), 200),
        (format!("/catalog/jobs/{job}?tenant_id={b}"), OPERATOR, 404),
        (format!("/catalog/jobs/{job}?tenant_id={a}"), OPERATOR, 200),
    ] {
        let r = s.app.get_as(&path, token).await;
        if status == 404 {
            assert_refused(r, StatusCode::NOT_FOUND, "not_found", &path).await;
        } else {
            assert_eq!(r.status(), status, "{path}");
        }
    }
}

async fn an_operator_token_reaches_every_tenant(b: Backend) {
    let s = app_with_tokens(b).await;
    let job = start_as(&s.app, &s.a, OPERATOR).await;
    let _ = start_as(&s.app, &s.b, OPERATOR).await;
    let b_jobs = format!("/catalog/jobs?tenant_id={}", s.b);
    for path in [format!("/catalog/jobs/{job}"), b_jobs] {
        assert_eq!(s.app.get_as(&path, OPERATOR).await.status(), 200, "{path}");
    }
}

async fn health_and_readiness_stay_open_with_tokens(b: Backend) {
    let s = app_with_tokens(b).await;
    assert_eq!(s.app.get("/healthz").await.status(), 200);
    let ready = s.app.get("/readyz").await;
    assert_eq!(ready.status(), 200);
    let ready: Value = ready.json().await.unwrap();
    assert_eq!(ready["auth"], "tokens");
    assert!(!ready.to_string().contains(s.a.as_str()), "{ready}");
}

async fn without_tokens_every_route_is_open_and_readiness_says_so(b: Backend) {
    let app = spawn_app_with(test_config(), store(b, settings())).await;
    let t = tenant();
    let job = app.start_id("ticker", &[("tenant_id", t.as_str())]).await;
    app.poll_until_ended(&job).await;
    for (method, path) in routes(&t, &job) {
        let r = app.send_as(method.clone(), &path, None).await;
        assert!(
            ![401, 403].contains(&r.status().as_u16()),
            "{method} {path}: {}",
            r.status()
        );
    }
    let ready: Value = app.get_json("/readyz").await;
    assert_eq!(ready["auth"], "open");
    assert!(
        ready["warnings"].to_string().contains("API_TOKENS"),
        "{ready}"
    );
}

#[tokio::test]
async fn a_malformed_token_entry_stops_start_up_naming_its_line() {
    let dir = std::env::temp_dir().join(format!("tokens-{}", tenant()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tokens");
    std::fs::write(
        &file,
        format!(
            "# ops\n* ops {}\n\nacme bot sha256:nothex\n",
            hash_token("x")
        ),
    )
    .unwrap();
    let mut config = test_config();
    config.api_tokens_file = Some(file.clone());
    let e = catalog_jobs::startup::load_tokens(&config)
        .err()
        .expect("refused");
    let text = e.to_string();
    assert!(text.contains("line 4"), "{text}");
    assert!(
        !text.contains("nothex") || text.contains("64 hex"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn hash_token_prints_the_sha256_form_of_a_token_read_on_stdin() {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_catalog-jobs"))
        .arg("hash-token")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the binary runs");
    child.stdin.take().unwrap().write_all(b"abc\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

/// Holds a gated job of each tenant, started with its own token; answers each gate and
/// job id, A's first.
async fn a_held_job_each(t: &Tenants) -> Vec<(std::sync::Arc<Gate>, String)> {
    let mut held = Vec::new();
    for (tenant, token) in [(&t.a, &t.a_token), (&t.b, &t.b_token)] {
        let gate = Gate::of(tenant);
        let form = [("tenant_id", tenant.as_str())];
        let id = started_id(t.app.start_as("gated", &form, token).await).await;
        gate.reached().await;
        held.push((gate, id));
        a_later_millisecond().await;
    }
    held
}

/// Waits until the wall clock has passed the millisecond it read: a job's times have a
/// millisecond's resolution, and the listing orders jobs of the same millisecond by id, so
/// a test that expects creation order starts each job in a later millisecond.
async fn a_later_millisecond() {
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    };
    let read = now_ms();
    while now_ms() <= read + 1 {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

async fn an_operator_lists_every_tenants_jobs_newest_first_page_by_page(b: Backend) {
    let t = app_with_tokens(b).await;
    let held = a_held_job_each(&t).await;
    // An ended job of A's is listed too, newest.
    let r = t
        .app
        .client
        .post(t.app.url("/catalog/ticker"))
        .bearer_auth(&t.a_token)
        .form(&[("tenant_id", t.a.as_str()), ("n", "1"), ("wait", "1")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // A waited start answers the report; the job is where `Location` points.
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    let ended_id = location.rsplit('/').next().unwrap().to_owned();
    let r = t.app.get_as("/catalog/jobs", OPERATOR).await;
    assert_eq!(r.status(), 200);
    let listed: Value = r.json().await.unwrap();
    let ids = strings_of(&listed["jobs"], "job_id");
    assert_eq!(
        ids,
        vec![ended_id.as_str(), held[1].1.as_str(), held[0].1.as_str()],
        "both tenants' jobs, ended ones included, newest first: {listed}"
    );
    assert_eq!(listed["next_cursor"], Value::Null);
    let first = "/catalog/jobs?kind=gated&status=running,cancelling&limit=1";
    let page: Value = t.app.get_as(first, OPERATOR).await.json().await.unwrap();
    assert_eq!(page["jobs"][0]["job_id"], held[1].1.as_str());
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    let r = t
        .app
        .client
        .get(t.app.url("/catalog/jobs"))
        .query(&[("kind", "gated"), ("limit", "1"), ("cursor", &cursor)])
        .bearer_auth(OPERATOR)
        .send()
        .await
        .unwrap();
    let page: Value = r.json().await.unwrap();
    assert_eq!(page["jobs"][0]["job_id"], held[0].1.as_str());
    assert_eq!(page["next_cursor"], Value::Null);
    for (gate, id) in &held {
        gate.release();
        t.app.get_as(&format!("/catalog/jobs/{id}"), OPERATOR).await;
    }
}
