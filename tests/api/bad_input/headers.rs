//! A header read once (`Authorization`, `Idempotency-Key`) given twice is refused with 400
//! `duplicate_header` naming it, never "the first one wins": which one the client meant is
//! not ours to guess. The refused requests start nothing, on both stores.

use serde_json::Value;

use crate::both_stores;
use crate::helpers::{settings, spawn_app_with, store, tenant, test_config, Backend, TestApp};
use catalog_jobs::config::tokens::hash_token;

both_stores!(a_header_read_once_given_twice_is_400_naming_it_and_starts_nothing);

/// A request of the table: what it is, its path (`{t}` the tenant), JSON body, and headers.
type Twice = (
    &'static str,
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

const OPS: (&str, &str) = ("authorization", "Bearer ops");

#[rustfmt::skip]
const TWICE: &[Twice] = &[
    ("two tokens on a start", "/catalog/ticker", r#"{"tenant_id":"{t}"}"#, &[OPS, ("authorization", "Bearer nobody")]),
    ("one token twice on a read", "/catalog/jobs?tenant_id={t}", "", &[OPS, OPS]),
    ("two keys on a start", "/catalog/ticker", r#"{"tenant_id":"{t}"}"#, &[OPS, ("idempotency-key", "k1"), ("idempotency-key", "k2")]),
    ("two keys on a bulk cancel", "/catalog/bulk/cancel", r#"{"tenant_id":"{t}"}"#, &[OPS, ("idempotency-key", "k1"), ("idempotency-key", "k1")]),
];

/// Sends the request (a POST with its body, a GET without one); answers status and body.
async fn send(app: &TestApp, path: &str, body: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let url = app.url(path);
    let mut req = match body {
        "" => app.client.get(url),
        body => app
            .client
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_owned()),
    };
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let r = req.send().await.expect("the app answers");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn a_header_read_once_given_twice_is_400_naming_it_and_starts_nothing(b: Backend) {
    let jobs = store(b, settings());
    let mut config = test_config();
    config.api_tokens = Some(format!("* ops {}", hash_token("ops")));
    let app = spawn_app_with(config, jobs).await;
    let t = tenant();
    let fill = |s: &str| s.replace("{t}", t.as_str());
    for &(what, path, body, headers) in TWICE {
        let (status, answer) = send(&app, &fill(path), &fill(body), headers).await;
        assert_eq!(
            (status, answer["error"].as_str()),
            (400, Some("duplicate_header")),
            "{what}: {answer}"
        );
        let named = answer["field"].as_str().unwrap_or_default();
        assert!(
            ["Authorization", "Idempotency-Key"].contains(&named),
            "{what}: {answer}"
        );
    }
    assert!(
        app.store.recent(&t, 10).await.unwrap().is_empty(),
        "nothing started"
    );
    // Each header once: the same start is taken.
    let headers = [OPS, ("idempotency-key", "k1")];
    let (status, answer) = send(&app, "/catalog/ticker", &fill(TWICE[0].2), &headers).await;
    assert_eq!(status, 202, "{answer}");
}
