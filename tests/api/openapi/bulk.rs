//! The bulk actions walked through each answer the document lists: done (and replayed with
//! its `Idempotency-Key`), a body that is no object or too large, a missing token, a reader, a tenant
//! token naming another tenant, bad fields, and a dead store.

use super::walk::{walks, App::*, Body, Row, Walk};

/// A bulk body naming one job no store holds: answered 200, the job skipped `not_found`.
const SOME_ID: &str = r#"{"job_ids": ["00000000-0000-4000-8000-000000000000"]}"#;
const READER: &[(&str, &str)] = &[("authorization", "Bearer {reader}")];
const TENANT_A: &[(&str, &str)] = &[("authorization", "Bearer {a_token}")];

pub const BULK: &[Row] = &[
    Row::post(Good, "/catalog/bulk/retry", 200)
        .body(Body::Json(SOME_ID))
        .expect(&[("/results/0/reason", "not_found"), ("/skipped", "1")]),
    Row::post(Good, "/catalog/bulk/retry", 200)
        .headers(&[("Idempotency-Key", "bulk-k1")])
        .body(Body::Json(r#"{"filter": {"tenant_id": "{t}"}}"#)),
    Row::post(Good, "/catalog/bulk/retry", 200)
        .headers(&[("Idempotency-Key", "bulk-k1")])
        .body(Body::Json(r#"{"filter": {"tenant_id": "{t}"}}"#))
        .carries(&[("Idempotent-Replayed", "true")]),
    Row::post(Good, "/catalog/bulk/retry", 422)
        .headers(&[("Idempotency-Key", "bulk-k1")])
        .body(Body::Json(SOME_ID))
        .expect(&[("/error", "idempotency_key_reused")]),
    Row::post(Good, "/catalog/bulk/cancel", 200)
        .body(Body::Json(r#"{"tenant_id": "{fresh}"}"#))
        .expect(&[("/done", "0"), ("/more", "false")]),
    Row::post(Good, "/catalog/bulk/cancel", 200)
        .headers(&[("Idempotency-Key", "bulk-k2")])
        .body(Body::Json(SOME_ID)),
    Row::post(Good, "/catalog/bulk/cancel", 200)
        .headers(&[("Idempotency-Key", "bulk-k2")])
        .body(Body::Json(SOME_ID))
        .carries(&[("Idempotent-Replayed", "true")]),
    Row::post(Good, "/catalog/bulk/retry", 400)
        .body(Body::Json("[]"))
        .expect(&[("/error", "malformed_body")]),
    Row::post(Good, "/catalog/bulk/cancel", 400).body(Body::Json("3")),
    Row::post(Good, "/catalog/bulk/retry", 413)
        .body(Body::TooBig("application/json"))
        .expect(&[("/error", "payload_too_large")]),
    Row::post(Good, "/catalog/bulk/cancel", 413)
        .body(Body::TooBig("application/json"))
        .expect(&[("/error", "payload_too_large")]),
    Row::post(Good, "/catalog/bulk/retry", 415).form(&[("job_ids", "{t}")]),
    Row::post(Good, "/catalog/bulk/cancel", 415).body(Body::Raw("text/plain", "{}")),
    Row::post(Good, "/catalog/bulk/retry", 422)
        .body(Body::Json("{}"))
        .expect(&[("/error", "missing_field"), ("/field", "job_ids")]),
    Row::post(Good, "/catalog/bulk/retry", 422)
        .body(Body::Json(r#"{"filter": {"kind": "synk"}}"#))
        .expect(&[("/error", "invalid_field"), ("/field", "filter.kind")]),
    Row::post(Good, "/catalog/bulk/retry", 422)
        .body(Body::Json(r#"{"filter": {"tenant": "x"}}"#))
        .expect(&[("/error", "unknown_field"), ("/field", "filter.tenant")]),
    Row::post(Good, "/catalog/bulk/cancel", 422)
        .body(Body::Json(r#"{"job_ids": []}"#))
        .expect(&[("/error", "invalid_field"), ("/field", "job_ids")]),
    Row::post(Guarded, "/catalog/bulk/retry", 401).body(Body::Json(SOME_ID)),
    Row::post(Guarded, "/catalog/bulk/cancel", 401).body(Body::Json(SOME_ID)),
    Row::post(Guarded, "/catalog/bulk/retry", 403)
        .headers(READER)
        .body(Body::Json(SOME_ID))
        .expect(&[("/error", "forbidden")]),
    Row::post(Guarded, "/catalog/bulk/cancel", 403)
        .headers(READER)
        .body(Body::Json(SOME_ID))
        .expect(&[("/error", "forbidden")]),
    Row::post(Guarded, "/catalog/bulk/retry", 403)
        .headers(TENANT_A)
        .body(Body::Json(r#"{"filter": {"tenant_id": "{b}"}}"#)),
    Row::post(Guarded, "/catalog/bulk/cancel", 403)
        .headers(TENANT_A)
        .body(Body::Json(r#"{"tenant_id": "{b}"}"#)),
    Row::post(Dead, "/catalog/bulk/retry", 503).body(Body::Json(SOME_ID)),
    Row::post(Dead, "/catalog/bulk/cancel", 503).body(Body::Json(SOME_ID)),
];

walks! {
    bulk_retry_and_cancel_answer_as_documented: Walk::start() => BULK,
}
