//! Bulk actions through the real server, on both stores: a bulk retry of 30 failed jobs
//! across 3 tenants starts 30 new jobs with `retry_of` and the audit fields set; a bulk
//! cancel of a tenant's active jobs; a filter retries each failed job once; every skip says
//! why; a keyed call is answered once; read-only and tenant tokens are held to their scope.

use std::sync::Arc;

use catalog_jobs::api::bulk::BULK_MAX;
use catalog_jobs::config::tokens::hash_token;
use catalog_jobs::jobs::store::JobStore;
use catalog_jobs::jobs::{JobId, TenantId};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::both_stores;
use crate::helpers::{
    create, failed_job, new_job, pipeline_of, settings, spawn_app_with, started_id, store,
    strings_of, tenant, test_config, Backend, Gate, TestApp,
};

both_stores!(
    a_bulk_retry_of_30_failed_jobs_across_3_tenants_starts_30_audited_retries,
    a_bulk_cancel_stops_every_active_job_of_a_tenant_and_no_other,
    a_filter_retries_each_failed_job_once_and_every_skip_says_why,
    a_keyed_bulk_call_is_answered_once_and_tokens_keep_to_their_scope,
    a_dry_run_counts_every_job_a_filter_or_tenant_matches_and_calls_sent_again_finish_them,
    a_bulk_call_not_sent_as_json_or_naming_a_bad_id_is_refused_saying_so_and_does_nothing,
    a_tenant_s_bulk_cancel_reports_a_pipeline_and_its_steps_as_cancelled_whichever_comes_first,
);

/// Ten kinds no runner of the test app runs: jobs of them wait in the queue untouched.
const KINDS: usize = 10;

fn kind(i: usize) -> String {
    format!("bulk{i}")
}

/// An app with an operator (`ops`), a reader (`viewer`) and a token for `own`, whose one
/// worker is held by a gated job (answered, with its gate), so nothing else runs here.
struct Console {
    app: TestApp,
    store: Arc<dyn JobStore>,
    gate: Arc<Gate>,
    own: TenantId,
}

async fn console(b: Backend) -> Console {
    let s = store(b, settings());
    let own = tenant();
    let mut config = test_config();
    config.max_concurrent_jobs = 1;
    config.api_tokens = Some(format!(
        "* ops {};read:* viewer {};{own} bot {}",
        hash_token("ops"),
        hash_token("viewer"),
        hash_token("bot")
    ));
    let app = spawn_app_with(config, s.clone()).await;
    let held = tenant();
    let form = [("tenant_id", held.as_str())];
    started_id(app.start_as("gated", &form, "ops").await).await;
    let gate = Gate::of(&held);
    gate.reached().await;
    Console {
        app,
        store: s,
        gate,
        own,
    }
}

/// POSTs `body` to `/catalog/bulk/<action>` as `token`, with an `Idempotency-Key` if given.
async fn bulk(
    c: &Console,
    action: &str,
    token: &str,
    body: &Value,
    key: Option<&str>,
) -> (StatusCode, Value, bool) {
    let mut req = c
        .app
        .client
        .post(c.app.url(&format!("/catalog/bulk/{action}")))
        .bearer_auth(token)
        .json(body);
    if let Some(key) = key {
        req = req.header("idempotency-key", key);
    }
    let r = req.send().await.unwrap();
    let status = r.status();
    let replayed = r.headers().get("idempotent-replayed").is_some();
    (status, r.json().await.unwrap(), replayed)
}

async fn job(c: &Console, id: &str) -> Value {
    let r = c.app.get_as(&format!("/catalog/jobs/{id}"), "ops").await;
    assert_eq!(r.status(), 200, "{id}");
    r.json().await.unwrap()
}

async fn a_bulk_retry_of_30_failed_jobs_across_3_tenants_starts_30_audited_retries(b: Backend) {
    let c = console(b).await;
    let mut old = Vec::new();
    for t in [tenant(), tenant(), tenant()] {
        for i in 0..KINDS {
            old.push(failed_job(&*c.store, &t, &kind(i)).await.to_string());
        }
    }
    let (status, answer, _) = bulk(&c, "retry", "ops", &json!({"job_ids": old}), None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        (answer["done"].as_u64(), answer["skipped"].as_u64()),
        (Some(30), Some(0))
    );
    assert_eq!(answer["more"], false);
    let results = answer["results"].as_array().unwrap();
    assert_eq!(results.len(), 30);
    let mut new_ids = Vec::new();
    for (id, r) in old.iter().zip(results) {
        assert_eq!(
            (r["job_id"].as_str(), r["outcome"].as_str()),
            (Some(id.as_str()), Some("retried"))
        );
        let new_id = r["new_job_id"].as_str().unwrap().to_owned();
        let new = job(&c, &new_id).await;
        assert_eq!(new["retry_of"], id.as_str());
        assert_eq!(new["created_by"], "ops");
        assert_eq!(new["status"], "queued");
        let was = job(&c, id).await;
        assert_eq!(
            (was["retried_by"].as_str(), was["retried_as"].as_str()),
            (Some("ops"), Some(new_id.as_str()))
        );
        assert_eq!(was["status"], "failed", "an ended job stays ended");
        new_ids.push(new_id);
    }
    new_ids.sort();
    new_ids.dedup();
    assert_eq!(new_ids.len(), 30, "30 new jobs");
    c.gate.release();
}

async fn a_bulk_cancel_stops_every_active_job_of_a_tenant_and_no_other(b: Backend) {
    let c = console(b).await;
    let (t, other) = (tenant(), tenant());
    let mut queued = Vec::new();
    for i in 0..5 {
        queued.push(
            create(&*c.store, &new_job(&t, &kind(i)))
                .await
                .job_id
                .to_string(),
        );
    }
    let spared = create(&*c.store, &new_job(&other, &kind(0))).await.job_id;
    let newest_first: Vec<Value> = listed(&c, &t).await.iter().map(|j| j[0].clone()).collect();
    let (status, answer, _) = bulk(&c, "cancel", "ops", &json!({"tenant_id": t}), None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        (answer["done"].as_u64(), answer["more"].as_bool()),
        (Some(5), Some(false))
    );
    let mut cancelled: Vec<String> = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["outcome"], "cancelled", "a queued job ends at once: {r}");
            r["job_id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(
        cancelled.iter().map(|id| json!(id)).collect::<Vec<_>>(),
        newest_first,
        "newest first, as listed"
    );
    cancelled.sort();
    queued.sort();
    assert_eq!(cancelled, queued);
    for id in &queued {
        let j = job(&c, id).await;
        assert_eq!(
            (j["status"].as_str(), j["cancelled_by"].as_str()),
            (Some("cancelled"), Some("ops"))
        );
    }
    assert_eq!(job(&c, &spared.to_string()).await["status"], "queued");
    // By ids: the ended ones are skipped, saying why; the other tenant's is asked to stop.
    let body = json!({"job_ids": [queued[0], spared.to_string()]});
    let (_, answer, _) = bulk(&c, "cancel", "ops", &body, None).await;
    assert_eq!(answer["results"][0]["reason"], "not_active");
    assert_eq!(answer["results"][1]["outcome"], "cancelled");
    c.gate.release();
}

async fn a_filter_retries_each_failed_job_once_and_every_skip_says_why(b: Backend) {
    let c = console(b).await;
    let t = tenant();
    let mut olds = Vec::new();
    for i in 0..3 {
        olds.push(failed_job(&*c.store, &t, &kind(i)).await.to_string());
    }
    failed_job(&*c.store, &tenant(), &kind(0)).await;
    // Newest first as the listing orders them (jobs made in one millisecond in id order).
    let newest_first: Vec<String> = listed(&c, &t)
        .await
        .iter()
        .map(|j| j[0].as_str().unwrap().to_owned())
        .collect();
    let mut made = olds.clone();
    made.sort();
    let mut listed_ids = newest_first.clone();
    listed_ids.sort();
    assert_eq!(listed_ids, made, "the tenant's failed jobs");
    let filter = json!({"filter": {"tenant_id": t}});
    let (_, answer, _) = bulk(&c, "retry", "ops", &filter, None).await;
    assert_eq!(answer["done"], 3, "{answer}");
    let retried = strings_of(&answer["results"], "job_id");
    assert_eq!(retried, newest_first, "newest first, as listed");
    let (_, again, _) = bulk(&c, "retry", "ops", &filter, None).await;
    assert_eq!(
        (
            again["done"].as_u64(),
            again["results"].as_array().map(Vec::len)
        ),
        (Some(0), Some(0)),
        "each is retried once: {again}"
    );
    // The new jobs wait: retrying one is still_active, retrying the old one again is
    // already_running (its kind is taken), an unknown id is not_found.
    let retry_of_last = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["job_id"] == olds[2].as_str())
        .expect("the last failed job was retried");
    let new_id = retry_of_last["new_job_id"].as_str().unwrap().to_owned();
    let unknown = JobId::new().to_string();
    let body = json!({"job_ids": [new_id, olds[2], unknown]});
    let (_, answer, _) = bulk(&c, "retry", "ops", &body, None).await;
    let reasons: Vec<&str> = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["reason"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(reasons, ["still_active", "already_running", "not_found"]);
    assert_eq!(answer["results"][1]["active_job_id"], new_id.as_str());
    assert!(answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["message"].is_string()));
    c.gate.release();
}

async fn a_keyed_bulk_call_is_answered_once_and_tokens_keep_to_their_scope(b: Backend) {
    let c = console(b).await;
    let t = tenant();
    let old = failed_job(&*c.store, &t, &kind(0)).await.to_string();
    let body = json!({"job_ids": [old]});
    let (s1, first, replayed) = bulk(&c, "retry", "ops", &body, Some("k-1")).await;
    assert_eq!((s1.as_u16(), replayed), (200, false));
    let (s2, second, replayed) = bulk(&c, "retry", "ops", &body, Some("k-1")).await;
    assert_eq!((s2.as_u16(), replayed), (200, true));
    assert_eq!(first, second, "the first answer again, no second retry");
    let other = json!({"job_ids": [JobId::new().to_string()]});
    let (s3, err, _) = bulk(&c, "retry", "ops", &other, Some("k-1")).await;
    assert_eq!(
        (s3.as_u16(), err["error"].as_str()),
        (422, Some("idempotency_key_reused"))
    );
    // A reader may do nothing; a tenant token acts on its own tenant only: another tenant's
    // job is skipped as an unknown one, and naming another tenant is refused.
    for action in ["retry", "cancel"] {
        let (s, err, _) = bulk(&c, action, "viewer", &body, None).await;
        assert_eq!(
            (s.as_u16(), err["error"].as_str()),
            (403, Some("forbidden"))
        );
    }
    let (_, answer, _) = bulk(&c, "cancel", "bot", &body, None).await;
    assert_eq!(
        answer["results"][0]["reason"], "not_found",
        "another tenant's job: {answer}"
    );
    let (s, _, _) = bulk(&c, "cancel", "bot", &json!({"tenant_id": t}), None).await;
    assert_eq!(s.as_u16(), 403);
    let own_cancel = json!({"tenant_id": c.own});
    let (s, _, _) = bulk(&c, "cancel", "bot", &own_cancel, None).await;
    assert_eq!(s.as_u16(), 200);
    // Bad bodies change nothing and say which field.
    let before = listed(&c, &t).await;
    let too_many: Vec<String> = (0..=BULK_MAX).map(|_| JobId::new().to_string()).collect();
    let cases = [
        (json!({"job_ids": too_many}), "job_ids"),
        (json!({"job_ids": []}), "job_ids"),
        (json!({"job_ids": ["x"]}), "job_ids"),
        (json!({}), "job_ids"),
        (json!({"job_ids": [old], "filter": {}}), "filter"),
        (json!({"ids": [old]}), "ids"),
        (json!({"filter": {"tenant": "x"}}), "filter.tenant"),
        (json!({"filter": {"until": "x"}}), "filter.until"),
    ];
    for (body, field) in cases {
        let (s, err, _) = bulk(&c, "retry", "ops", &body, None).await;
        assert_eq!(
            (s.as_u16(), err["field"].as_str()),
            (422, Some(field)),
            "{body}: {err}"
        );
    }
    assert_eq!(
        listed(&c, &t).await,
        before,
        "the refused calls changed nothing"
    );
    c.gate.release();
}

/// `(done, matched, more, results)` of an answer.
fn tally(answer: &Value) -> (u64, u64, bool, usize) {
    (
        answer["done"].as_u64().unwrap_or(u64::MAX),
        answer["matched"].as_u64().unwrap_or(u64::MAX),
        answer["more"].as_bool().unwrap_or_default(),
        answer["results"].as_array().map_or(usize::MAX, Vec::len),
    )
}

/// More than one call's worth: a call acts on `BULK_MAX`, the next on the rest.
const BEYOND: usize = BULK_MAX + 5;

async fn a_dry_run_counts_every_job_a_filter_or_tenant_matches_and_calls_sent_again_finish_them(
    b: Backend,
) {
    let c = console(b).await;
    let tenants = [tenant(), tenant(), tenant()];
    for i in 0..BEYOND {
        failed_job(&*c.store, &tenants[i % 3], &kind(i)).await;
    }
    let (n, all) = (BEYOND as u64, BULK_MAX as u64);
    let counted = json!({"filter": {}, "dry_run": true});
    let (_, answer, _) = bulk(&c, "retry", "ops", &counted, None).await;
    assert_eq!(
        tally(&answer),
        (0, n, true, 0),
        "counted, nothing done: {answer}"
    );
    assert!(listed(&c, &tenants[0]).await.iter().all(|j| j[3].is_null()));
    // A job failed after the count is not among those the calls that follow retry.
    let every = json!({"filter": {"until": answer["until"]}});
    let late = failed_job(&*c.store, &tenants[0], "late").await;
    let (_, answer, _) = bulk(&c, "retry", "ops", &every, None).await;
    assert_eq!(tally(&answer), (all, n, true, BULK_MAX));
    let (_, answer, _) = bulk(&c, "retry", "ops", &every, None).await;
    assert_eq!(tally(&answer), (n - all, n - all, false, BEYOND - BULK_MAX));
    let (_, answer, _) = bulk(&c, "retry", "ops", &counted, None).await;
    assert_eq!(
        tally(&answer),
        (0, 1, false, 0),
        "all but the late one: {answer}"
    );
    assert!(job(&c, &late.to_string()).await["retried_as"].is_null());

    // A tenant's active jobs: the retries just made wait in the queue (no runner runs them).
    let t = tenant();
    for i in 0..BEYOND {
        create(&*c.store, &new_job(&t, &kind(i))).await;
    }
    let counted = json!({"tenant_id": t, "dry_run": true});
    let (_, answer, _) = bulk(&c, "cancel", "ops", &counted, None).await;
    assert_eq!(tally(&answer), (0, n, true, 0), "{answer}");
    assert!(listed(&c, &t).await.iter().all(|j| j[1] == "queued"));
    let tenant_wide = json!({"tenant_id": t});
    let (_, answer, _) = bulk(&c, "cancel", "ops", &tenant_wide, None).await;
    assert_eq!(tally(&answer), (all, n, true, BULK_MAX));
    let (_, answer, _) = bulk(&c, "cancel", "ops", &tenant_wide, None).await;
    assert_eq!(tally(&answer), (n - all, n - all, false, BEYOND - BULK_MAX));
    let others = listed(&c, &tenants[1]).await;
    assert!(
        others.iter().any(|j| j[1] == "queued") && others.iter().all(|j| j[1] != "cancelled"),
        "another tenant's jobs are left as they were"
    );
    for bad in [json!("yes"), json!(1), json!(null)] {
        let body = json!({"tenant_id": t, "dry_run": bad});
        let (s, err, _) = bulk(&c, "cancel", "ops", &body, None).await;
        assert_eq!((s.as_u16(), err["field"].as_str()), (422, Some("dry_run")));
    }
    c.gate.release();
}

/// Each of the tenant's jobs as the API lists it: id, status, `retried_by` and `retried_as`.
async fn listed(c: &Console, t: &TenantId) -> Vec<Value> {
    let path = format!("/catalog/jobs?tenant_id={t}&limit=100");
    let r = c.app.get_as(&path, "ops").await;
    assert_eq!(r.status(), 200);
    let page: Value = r.json().await.unwrap();
    page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| json!([j["job_id"], j["status"], j["retried_by"], j["retried_as"]]))
        .collect()
}

/// A refused bulk call: what it is, the action, its content type and content encoding
/// ("" for none), its body (`{t}`: a tenant, `{queued}`: its queued job, `{gzip}`: the head
/// of a gzip stream), then the status and code it gets and what its message must say.
type BadCall = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    u16,
    &'static str,
    &'static [&'static str],
);

#[rustfmt::skip]
const BAD_CALLS: &[BadCall] = &[
    ("a form body", "cancel", "application/x-www-form-urlencoded", "", "tenant_id={t}", 415, "unsupported_media_type", &["`application/x-www-form-urlencoded`", "application/json"]),
    ("JSON without a content type", "cancel", "", "", r#"{"tenant_id":"{t}"}"#, 415, "unsupported_media_type", &["(none given: a bulk call reads a JSON body)"]),
    ("no body at all", "retry", "", "", "", 415, "unsupported_media_type", &["a bulk call reads a JSON body", "application/json"]),
    ("an empty JSON body", "cancel", "application/json", "", " \n", 400, "malformed_body", &["the body is empty", "job_ids"]),
    ("JSON that is no object", "retry", "application/json", "", "[1]", 400, "malformed_body", &["must be a JSON object"]),
    ("a compressed body", "cancel", "application/json", "gzip", "{gzip}", 415, "unsupported_media_type", &["`gzip`", "uncompressed"]),
    ("an id that is no UUID", "cancel", "application/json", "", r#"{"job_ids":["{queued}","not-a-uuid"]}"#, 422, "invalid_field", &["job_ids[1] `not-a-uuid` is not a job id"]),
    ("an id that is a number", "retry", "application/json", "", r#"{"job_ids":[7]}"#, 422, "invalid_field", &["job_ids[0] is a number"]),
    ("no id", "cancel", "application/json", "", r#"{"job_ids":[]}"#, 422, "invalid_field", &["names no job"]),
];

/// The first bytes of a gzip stream: what a client that compresses its body sends.
const GZIP_HEAD: &[u8] = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03";

/// Sends a bad call as `ops`, its holes filled; answers the status, the `Accept-Encoding`
/// header and the JSON body.
async fn send_bad(
    c: &Console,
    call: &BadCall,
    t: &TenantId,
    queued: &JobId,
) -> (u16, Option<String>, Value) {
    let &(_, action, content_type, encoding, body, ..) = call;
    let body = match body {
        "{gzip}" => GZIP_HEAD.to_vec(),
        text => text
            .replace("{t}", t.as_str())
            .replace("{queued}", &queued.to_string())
            .into_bytes(),
    };
    let mut req = c
        .app
        .client
        .post(c.app.url(&format!("/catalog/bulk/{action}")))
        .bearer_auth("ops")
        .body(body);
    for (name, value) in [
        ("content-type", content_type),
        ("content-encoding", encoding),
    ] {
        if !value.is_empty() {
            req = req.header(name, value);
        }
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let accepts = r
        .headers()
        .get("accept-encoding")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, accepts, r.json().await.unwrap_or(Value::Null))
}

async fn a_bulk_call_not_sent_as_json_or_naming_a_bad_id_is_refused_saying_so_and_does_nothing(
    b: Backend,
) {
    let c = console(b).await;
    let t = tenant();
    let queued = create(&*c.store, &new_job(&t, &kind(0))).await.job_id;
    for call in BAD_CALLS {
        let &(what, _, _, encoding, _, status, code, says) = call;
        let (got, accepts, answer) = send_bad(&c, call, &t, &queued).await;
        assert_eq!(
            (got, answer["error"].as_str()),
            (status, Some(code)),
            "{what}: {answer}"
        );
        let message = answer["message"].as_str().unwrap_or_default();
        for part in says {
            assert!(message.contains(part), "{what}: {message}");
        }
        let compressed = !encoding.is_empty();
        assert_eq!(
            accepts.as_deref(),
            compressed.then_some("identity"),
            "{what}"
        );
    }
    let still = c.store.get(&queued).await.unwrap().expect("the job");
    assert_eq!(
        (still.status.as_str(), still.cancel_requested_at),
        ("queued", None),
        "no refused call asked the job to stop"
    );
    c.gate.release();
}

async fn a_tenant_s_bulk_cancel_reports_a_pipeline_and_its_steps_as_cancelled_whichever_comes_first(
    b: Backend,
) {
    let c = console(b).await;
    let t = tenant();
    // Kinds no runner runs: the pipeline and its steps wait in the queue, so whichever of the
    // three the call reaches first ends the other two in the same store step.
    let p = pipeline_of(&t, &[&kind(0), &kind(1)]);
    let mut ids: Vec<String> = std::iter::once(&p.job)
        .chain(p.steps.iter().map(|(step, _)| step))
        .map(|j| j.id.to_string())
        .collect();
    c.store.create_pipeline(p).await.expect("the store answers");
    let (status, answer, _) = bulk(&c, "cancel", "ops", &json!({"tenant_id": t}), None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        (answer["done"].as_u64(), answer["skipped"].as_u64()),
        (Some(3), Some(0)),
        "{answer}"
    );
    let results = answer["results"].as_array().unwrap();
    // The first it reached was cancelled itself; of the others, those that had ended with it
    // by then say so (a later step cancelled on its own may leave an earlier one queued).
    let said = |r: &Value| {
        r["message"]
            .as_str()
            .is_some_and(|m| m.contains("which this call stopped"))
    };
    assert!(!said(&results[0]), "{answer}");
    assert!(results[1..].iter().any(said), "{answer}");
    for r in results {
        assert_eq!(r["outcome"], "cancelled", "{r}");
    }
    let mut answered: Vec<String> = strings_of(&answer["results"], "job_id")
        .into_iter()
        .map(str::to_owned)
        .collect();
    answered.sort();
    ids.sort();
    assert_eq!(answered, ids, "the pipeline and both steps");
    for id in &ids {
        assert_eq!(job(&c, id).await["status"], "cancelled", "{id}");
    }
    c.gate.release();
}
