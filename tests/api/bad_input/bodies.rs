//! What a request sends that its route does not read is refused, never dropped: a body on a
//! route that reads none (a retry, a cancel, a read). Each refusal changes nothing in the
//! store, on both stores.

use reqwest::header::CONTENT_TYPE;
use serde_json::Value;

use crate::both_stores;
use crate::helpers::{create, failed_job, new_job, spawn_app, tenant, Backend, TestApp};

both_stores!(
    a_body_sent_to_a_route_that_reads_none_is_refused_naming_its_field_and_changes_nothing
);

/// A request with a body to a route that reads none: what it is, its method, path
/// (`{ended}`: a failed job, `{queued}`: a queued one, `{t}`: their tenant), content type and
/// body; then the status, code and field of its refusal (`None`: no field; status 202: not
/// refused).
type Sent = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    u16,
    &'static str,
    Option<&'static str>,
);

#[rustfmt::skip]
const REFUSED: &[Sent] = &[
    ("a retry with JSON fields", "POST", "/catalog/jobs/{ended}/retry", "application/json", r#"{"full":true,"wait":true}"#, 422, "unknown_field", Some("full")),
    ("a retry with a form field", "POST", "/catalog/jobs/{ended}/retry", "application/x-www-form-urlencoded", "wait=true", 422, "unknown_field", Some("wait")),
    ("a retry with a text body", "POST", "/catalog/jobs/{ended}/retry", "text/plain", "full", 415, "unsupported_media_type", None),
    ("a retry with a JSON array", "POST", "/catalog/jobs/{ended}/retry", "application/json", "[1]", 415, "unsupported_media_type", None),
    ("a retry with broken JSON", "POST", "/catalog/jobs/{ended}/retry", "application/json", r#"{"full":"#, 400, "malformed_body", None),
    ("a cancel with a JSON field", "POST", "/catalog/jobs/{queued}/cancel", "application/json", r#"{"reason":"too slow"}"#, 422, "unknown_field", Some("reason")),
    ("a read with a JSON field", "GET", "/catalog/jobs/{queued}", "application/json", r#"{"tenant_id":"someone"}"#, 422, "unknown_field", Some("tenant_id")),
    ("a tenant delete with a JSON field", "DELETE", "/catalog/tenants/{t}", "application/json", r#"{"dry_run":true}"#, 422, "unknown_field", Some("dry_run")),
];

/// A body that names nothing is no body: a client that sends `{}` with every POST works.
#[rustfmt::skip]
const ACCEPTED: &[Sent] = &[
    ("a cancel with {}", "POST", "/catalog/jobs/{queued}/cancel", "application/json", "{}", 202, "", None),
    ("a retry with blanks", "POST", "/catalog/jobs/{ended}/retry", "application/json", " \n", 202, "", None),
];

/// Sends `sent` with its placeholders filled in; answers the status and the JSON body (Null
/// when there is none).
async fn send(app: &TestApp, sent: &Sent, fill: &[(&str, String)]) -> (u16, Value) {
    let &(_, method, path, content_type, body, ..) = sent;
    let path = fill
        .iter()
        .fold(path.to_owned(), |p, (hole, value)| p.replace(hole, value));
    let r = app
        .client
        .request(method.parse().expect("a method"), app.url(&path))
        .header(CONTENT_TYPE, content_type)
        .body(body)
        .send()
        .await
        .expect("the app answers");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn a_body_sent_to_a_route_that_reads_none_is_refused_naming_its_field_and_changes_nothing(
    b: Backend,
) {
    let app = spawn_app(b).await;
    let t = tenant();
    let ended = failed_job(&*app.store, &t, "bulk0").await;
    let queued = create(&*app.store, &new_job(&t, "bulk1")).await.job_id;
    let fill = [
        ("{ended}", ended.to_string()),
        ("{queued}", queued.to_string()),
        ("{t}", t.to_string()),
    ];
    for sent in REFUSED {
        let &(what, .., status, code, field) = sent;
        let (got, body) = send(&app, sent, &fill).await;
        assert_eq!(
            (got, body["error"].as_str()),
            (status, Some(code)),
            "{what}: {body}"
        );
        assert_eq!(body["field"].as_str(), field, "{what}: {body}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(
            field.is_none_or(|f| message.contains(&format!("`{f}`"))),
            "{what}: {body}"
        );
    }
    let old = app.store.get(&ended).await.unwrap().expect("the job");
    assert_eq!(old.retried_as, None, "no retry started");
    let still = app.store.get(&queued).await.unwrap().expect("the job");
    assert_eq!(
        (still.status.as_str(), still.cancel_requested_at),
        ("queued", None),
        "the job was not asked to stop"
    );
    assert_eq!(
        app.store.recent(&t, 10).await.unwrap().len(),
        2,
        "no job added"
    );
    for sent in ACCEPTED {
        let (got, body) = send(&app, sent, &fill).await;
        assert_eq!(got, 202, "{}: {body}", sent.0);
    }
    let retried = app.store.get(&ended).await.unwrap().expect("the job");
    assert!(retried.retried_as.is_some(), "the retry with blanks ran");
}

both_stores!(a_compressed_body_is_415_saying_which_coding_would_do_and_nothing_is_saved);

/// The first bytes of a gzip stream: what a client that compresses its body sends.
const GZIP_HEAD: &[u8] = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03";

async fn a_compressed_body_is_415_saying_which_coding_would_do_and_nothing_is_saved(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    let routes = [
        (format!("/catalog/products?tenant_id={t}"), "text/csv"),
        (
            "/catalog/enrich".to_owned(),
            "application/x-www-form-urlencoded",
        ),
    ];
    for (path, content_type) in &routes {
        for coding in ["gzip", "br", "deflate, gzip"] {
            let r = app
                .client
                .post(app.url(path))
                .header(CONTENT_TYPE, *content_type)
                .header("content-encoding", coding)
                .body(GZIP_HEAD.to_vec())
                .send()
                .await
                .expect("the app answers");
            assert_eq!(r.status(), 415, "{path} {coding}");
            let accepted = r.headers().get("accept-encoding").cloned();
            assert_eq!(
                accepted.as_ref().map(|v| v.as_bytes()),
                Some(&b"identity"[..])
            );
            let body: Value = r.json().await.expect("the envelope");
            assert_eq!(body["error"], "unsupported_media_type", "{body}");
            let message = body["message"].as_str().unwrap_or_default();
            assert!(message.contains(&format!("`{coding}`")), "{message}");
        }
    }
    let products: Value = app
        .client
        .get(app.url(&format!("/catalog/products?tenant_id={t}")))
        .send()
        .await
        .expect("the app answers")
        .json()
        .await
        .expect("a page");
    assert_eq!(
        products["products"],
        serde_json::json!([]),
        "nothing imported"
    );
    assert!(
        app.store.recent(&t, 10).await.unwrap().is_empty(),
        "no job started"
    );
    // `identity` is no coding at all: the same import, uncompressed, is read.
    let r = app
        .client
        .post(app.url(&format!("/catalog/products?tenant_id={t}")))
        .header(CONTENT_TYPE, "text/csv")
        .header("content-encoding", "identity")
        .body("product_key,name\nk1,A Mug\n")
        .send()
        .await
        .expect("the app answers");
    assert_eq!(r.status(), 200);
}
