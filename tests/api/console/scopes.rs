//! Read-only tokens (`read:*`, `read:<tenant>`) read what their scope covers and change
//! nothing (403 before anything is done), and `whoami` says what each scope may do.

use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::both_stores;
use crate::helpers::{
    settings, spawn_app, spawn_app_with, store, tenant, tenant_routes, test_config, Backend,
    TestApp,
};
use catalog_jobs::config::tokens::hash_token;
use catalog_jobs::jobs::TenantId;

both_stores!(
    a_read_only_token_reads_its_scope_and_every_change_is_forbidden,
    a_read_only_tenant_token_reads_its_tenant_only,
    whoami_says_what_each_scope_may_do,
);

/// The tokens of the app: one per scope a token file can spell.
const TOKENS: [(&str, &str); 4] = [
    ("*", "ops-secret"),
    ("read:*", "viewer-secret"),
    ("{a}", "a-secret"),
    ("read:{a}", "a-viewer-secret"),
];

struct Scoped {
    app: TestApp,
    a: TenantId,
    b: TenantId,
}

async fn app_with_every_scope(backend: Backend) -> Scoped {
    let (a, b) = (tenant(), tenant());
    let entries: Vec<String> = TOKENS
        .iter()
        .map(|(scope, token)| {
            let scope = scope.replace("{a}", a.as_str());
            format!("{scope} holder-of-{token} {}", hash_token(token))
        })
        .collect();
    let mut config = test_config();
    config.api_tokens = Some(entries.join(";"));
    let app = spawn_app_with(config, store(backend, settings())).await;
    Scoped { app, a, b }
}

/// A job of tenant `t` that ended (a ticker run to its end by the operator).
async fn ended_job(app: &TestApp, t: &TenantId) -> String {
    let r = app
        .client
        .post(app.url("/catalog/ticker"))
        .bearer_auth("ops-secret")
        .form(&[("tenant_id", t.as_str()), ("wait", "true")])
        .send()
        .await
        .expect("the app answers");
    assert_eq!(r.status(), 200, "the ticker ran");
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    location.rsplit('/').next().unwrap().to_owned()
}

/// Every route that changes something, for tenant `t` and its job `job`.
fn changes(t: &TenantId, job: &str) -> Vec<(Method, String)> {
    let routes = tenant_routes(t, job).into_iter();
    routes
        .filter(|(method, _)| *method != Method::GET)
        .collect()
}

/// Every read of tenant `t` and its job `job`.
fn reads(t: &TenantId, job: &str) -> Vec<String> {
    vec![
        format!("/catalog/jobs?tenant_id={t}"),
        format!("/catalog/jobs/{job}"),
        format!("/catalog/jobs/{job}/events"),
        format!("/catalog/products?tenant_id={t}"),
    ]
}

async fn a_read_only_token_reads_its_scope_and_every_change_is_forbidden(b: Backend) {
    let s = app_with_every_scope(b).await;
    let job = ended_job(&s.app, &s.a).await;
    for token in ["viewer-secret", "a-viewer-secret"] {
        for path in reads(&s.a, &job) {
            let r = s.app.get_as(&path, token).await;
            assert_eq!(r.status(), StatusCode::OK, "{token} reads {path}");
        }
        for (method, path) in changes(&s.a, &job) {
            let r = s.app.send_as(method.clone(), &path, Some(token)).await;
            assert_eq!(
                r.status(),
                StatusCode::FORBIDDEN,
                "{token}: {method} {path}"
            );
            let body: Value = r.json().await.unwrap();
            assert_eq!(body["error"], "forbidden");
            let message = body["message"].as_str().unwrap();
            assert!(message.contains("may read but not change"), "{message}");
        }
    }
    let path = format!("/catalog/jobs?tenant_id={}", s.a);
    let listing: Value = s
        .app
        .get_as(&path, "ops-secret")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        listing["jobs"].as_array().map(Vec::len),
        Some(1),
        "no refused start or retry made a job: {listing}"
    );
    let r = s.app.get_as("/catalog/jobs", "viewer-secret").await;
    assert_eq!(r.status(), StatusCode::OK, "read:* lists every tenant");
}

async fn a_read_only_tenant_token_reads_its_tenant_only(b: Backend) {
    let s = app_with_every_scope(b).await;
    let theirs = ended_job(&s.app, &s.b).await;
    let cases = [
        (format!("/catalog/jobs?tenant_id={}", s.b), 403),
        (format!("/catalog/jobs/{theirs}"), 404),
        ("/catalog/jobs".to_owned(), 403),
        (format!("/catalog/jobs?tenant_id={}", s.a), 200),
    ];
    for (path, status) in cases {
        let r = s.app.get_as(&path, "a-viewer-secret").await;
        assert_eq!(r.status().as_u16(), status, "read:{} GET {path}", s.a);
    }
}

async fn whoami_says_what_each_scope_may_do(b: Backend) {
    let s = app_with_every_scope(b).await;
    let a = s.a.as_str();
    // token, scope, tenant_id, read_only, may.stats, may.start
    let cases = [
        ("ops-secret", "*".to_owned(), None, false, true, true),
        (
            "viewer-secret",
            "read:*".to_owned(),
            None,
            true,
            true,
            false,
        ),
        ("a-secret", a.to_owned(), Some(a), false, false, true),
        (
            "a-viewer-secret",
            format!("read:{a}"),
            Some(a),
            true,
            false,
            false,
        ),
    ];
    for (token, scope, tenant_id, read_only, stats, start) in cases {
        let r = s.app.get_as("/catalog/whoami", token).await;
        assert_eq!(r.status(), StatusCode::OK, "{token}");
        let me: Value = r.json().await.unwrap();
        assert_eq!(me["name"], format!("holder-of-{token}"));
        assert_eq!(
            (me["auth"].as_str(), me["scope"].as_str()),
            (Some("tokens"), Some(scope.as_str()))
        );
        assert_eq!(me["tenant_id"].as_str(), tenant_id, "{token}");
        assert_eq!(me["read_only"], read_only, "{token}");
        assert_eq!(
            (
                me["may"]["stats"].as_bool(),
                me["may"]["list_every_tenant"].as_bool()
            ),
            (Some(stats), Some(stats)),
            "{token}"
        );
        for change in [
            "start",
            "cancel",
            "retry",
            "bulk",
            "import",
            "delete_tenant",
        ] {
            assert_eq!(me["may"][change], start, "{token} may {change}");
        }
    }
    let open = spawn_app(b).await.get_json("/catalog/whoami").await;
    assert_eq!(
        (
            &open["name"],
            &open["auth"],
            &open["scope"],
            &open["read_only"]
        ),
        (
            &Value::from("anonymous"),
            &Value::from("open"),
            &Value::from("*"),
            &Value::from(false)
        )
    );
}
