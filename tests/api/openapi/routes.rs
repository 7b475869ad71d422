//! Every route walked through each answer the document lists, as tables of rows (see
//! `walk`): each test starts the apps and jobs its rows need, then sends them. The last test
//! holds the tables against the document: every answer and conditional header it lists has
//! a row, so an answer the document promises cannot go unexercised.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::walk::{conditional, methods_of, route_of_row, walks, App::*, Body, Row, Walk, METHODS};

// The tests that send one table, each after its walk's start (a fresh one, or one holding
// the jobs of `HELD_JOBS`).
walks! {
    products_are_imported_listed_searched_and_refused_as_documented: Walk::start() => PRODUCTS,
    jobs_waited_for_answer_their_reports_and_the_product_view_shows_what_they_found: Walk::start() => WAITED,
    a_start_is_refused_as_documented: Walk::start() => REFUSED_STARTS,
    a_full_service_refuses_a_twin_joins_a_match_turns_a_third_away_and_keeps_a_busy_tenant: walk_with_held_jobs() => FULL,
    jobs_are_read_and_listed_as_documented: walk_with_held_jobs() => READ,
    jobs_are_cancelled_and_refused_as_documented: walk_with_held_jobs() => CANCEL,
    every_tenants_jobs_and_the_tenant_picker_answer_as_documented: walk_with_held_jobs() => BROWSE,
    the_overview_is_read_and_refused_as_documented: walk_with_held_jobs() => STATS,
    a_read_only_token_is_told_what_it_may_do_and_refused_changes: Walk::start() => READ_ONLY,
    a_body_that_stalls_is_answered_408: Walk::start() => STALLED,
    every_route_refuses_a_doubled_token_and_a_body_it_does_not_read: Walk::start() => GUARD_REFUSED,
}

/// The same `Authorization` header twice.
const TWO_TOKENS: &[(&str, &str)] = &[
    ("authorization", "Bearer {reader}"),
    ("authorization", "Bearer {reader}"),
];
/// A body no `/catalog` read takes.
const UNREAD: Body = Body::Raw("text/plain", "x");

/// What the guard refuses on every route, before the route reads anything: a doubled
/// `Authorization` (400 `duplicate_header`) and a body it does not read (415). The delete's
/// tenant is fresh each time, and stays: nothing was deleted.
const GUARD_REFUSED: &[Row] = &[
    Row::get(Guarded, "/catalog/whoami", 400).headers(TWO_TOKENS),
    Row::get(Guarded, "/catalog/whoami", 415)
        .headers(READER)
        .body(UNREAD),
    Row::get(Guarded, "/catalog/stats", 400).headers(TWO_TOKENS),
    Row::get(Guarded, "/catalog/stats", 415)
        .headers(READER)
        .body(UNREAD),
    Row::get(Guarded, "/catalog/tenants", 400).headers(TWO_TOKENS),
    Row::get(Guarded, "/catalog/tenants", 415)
        .headers(READER)
        .body(UNREAD),
    Row::get(Guarded, "/catalog/jobs?tenant_id={a}", 400).headers(TWO_TOKENS),
    Row::get(Guarded, "/catalog/jobs?tenant_id={a}", 415)
        .headers(READER)
        .body(UNREAD),
    Row::get(Guarded, "/catalog/jobs/{any_id}", 400).headers(TWO_TOKENS),
    Row::get(Guarded, "/catalog/jobs/{any_id}", 415)
        .headers(READER)
        .body(UNREAD),
    Row::get(Guarded, "/catalog/jobs/{any_id}/events", 400).headers(TWO_TOKENS),
    Row::get(Guarded, "/catalog/jobs/{any_id}/events", 415)
        .headers(READER)
        .body(UNREAD),
    Row::get(Guarded, "/catalog/events?tenant_id={a}", 400).headers(TWO_TOKENS),
    Row::get(Guarded, "/catalog/events?tenant_id={a}", 415)
        .headers(READER)
        .body(UNREAD),
    Row::get(Guarded, "/catalog/products?tenant_id={a}", 400).headers(TWO_TOKENS),
    Row::get(Guarded, "/catalog/products?tenant_id={a}", 415)
        .headers(READER)
        .body(UNREAD),
    Row::get(Guarded, "/catalog/products/p1?tenant_id={a}", 400).headers(TWO_TOKENS),
    Row::get(Guarded, "/catalog/products/p1?tenant_id={a}", 415)
        .headers(READER)
        .body(UNREAD),
    Row::delete(Guarded, "/catalog/tenants/{a}", 400).headers(TWO_TOKENS),
    Row::delete(Guarded, "/catalog/tenants/{a}", 415)
        .headers(READER)
        .body(UNREAD),
];

/// Two products and a row without a key (refused, counted `invalid`).
const PRODUCT_ROWS: &str = r#"[
    {"product_key": "p1", "name": "Steel Bottle 500 ml Black", "brand": "Acme", "price_cents": 1200, "taxonomy_path": ["Home", "Kitchen"]},
    {"product_key": "p2", "name": "Steel Bottle 750 ml Black", "brand": "Acme", "price_cents": 1400, "taxonomy_path": ["Home", "Kitchen"]},
    {"name": "no key"}
]"#;

/// A sync's or a refresh's fields: the sample feed, waited for.
const WAITED_SAMPLE: &[(&str, &str)] = &[
    ("tenant_id", "{t}"),
    ("source", "sample.csv"),
    ("wait", "true"),
];

/// A sync's or a refresh's fields: the source nobody listens on, waited for (it fails).
const WAITED_UNREACHABLE: &[(&str, &str)] = &[
    ("tenant_id", "{t}"),
    ("source", "{unreachable}"),
    ("wait", "true"),
];

/// A sync of the source nobody listens on, waited for: it fails (502), and is kept as
/// `failed`.
const FAILED_SYNC: Row = Row::post(Good, "/catalog/sync", 502)
    .form(WAITED_UNREACHABLE)
    .expect(&[("/job/error", "SourceUnreachable")])
    .keep(&[("failed", "/job/job_id")]);

/// A refresh waited for to its end (every step's report) and its replay, one whose sync fails
/// (502), one held in its sync (202, kept as `pipeline`) and its replay, its twin (409), and
/// the refusals of a start.
const PIPELINES: &[Row] = &[
    Row::post(Good, "/catalog/pipeline", 200)
        .headers(&[("Idempotency-Key", "refresh")])
        .form(WAITED_SAMPLE)
        .expect(&[("/sync/totals/read", "5")])
        .keep(&[("reports", "")]),
    Row::post(Good, "/catalog/pipeline", 200)
        .headers(&[("Idempotency-Key", "refresh")])
        .form(WAITED_SAMPLE)
        .carries(&[("Idempotent-Replayed", "true")])
        .same_as("reports"),
    Row::post(Good, "/catalog/pipeline", 502)
        .form(WAITED_UNREACHABLE)
        .expect(&[
            ("/job/error", "SourceUnreachable"),
            ("/job/kind", "pipeline"),
        ]),
    Row::post(Good, "/catalog/pipeline?tenant_id={t}&source={held}", 202)
        .headers(&[("Idempotency-Key", "held")])
        .keep(&[("pipeline", "/job_id")]),
    Row::post(Good, "/catalog/pipeline?tenant_id={t}&source={held}", 202)
        .headers(&[("Idempotency-Key", "held")])
        .carries(&[("Idempotent-Replayed", "true")])
        .expect(&[("/job_id", "{pipeline}")]),
    Row::post(Good, "/catalog/pipeline", 409)
        .form(&[("tenant_id", "{t}"), ("steps", "enrich")])
        .expect(&[("/job_id", "{pipeline}")]),
    Row::post(Good, "/catalog/pipeline", 400).body(Body::Raw("application/json", "{")),
    Row::post(Good, "/catalog/pipeline", 415).body(Body::Raw("text/plain", "x")),
    Row::post(Good, "/catalog/pipeline", 413)
        .body(Body::TooBig("application/x-www-form-urlencoded")),
    Row::post(Good, "/catalog/pipeline", 422)
        .form(&[("tenant_id", "{other}"), ("steps", "pair,sync")])
        .expect(&[("/field", "steps")]),
    Row::post(Dead, "/catalog/pipeline", 503).form(&[("tenant_id", "{t}"), ("steps", "pair")]),
    Row::post(Closing, "/catalog/pipeline", 503).form(&[("tenant_id", "{t}"), ("steps", "pair")]),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_pipeline_is_started_waited_for_and_refused_as_documented() {
    let mut walk = Walk::start().await;
    walk.run(PIPELINES).await;
    walk.feeds.release("oas");
    walk.poll(Good, "/catalog/jobs/{pipeline}", "/status", "done")
        .await;
}

/// The operator's routes and the admin page's files: each answers 200 on the good app.
const OPEN: &[&str] = &[
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.json",
    "/admin/admin.css",
    "/admin/admin.js",
    "/admin/core.js",
];

/// `OPEN`, as rows.
fn open_rows() -> Vec<Row> {
    OPEN.iter().map(|path| Row::get(Good, path, 200)).collect()
}

/// Readiness on a dead store, a query field on the probes, the admin page (open, even where tokens are configured), a
/// file it does not have, and the root.
const OPERATIONS: &[Row] = &[
    Row::get(Dead, "/readyz", 503),
    Row::get(Good, "/healthz?verbose=1", 422).expect(&[("/error", "unknown_field")]),
    Row::get(Good, "/readyz?verbose=1", 422).expect(&[("/error", "unknown_field")]),
    Row::get(Guarded, "/admin", 200),
    Row::get(Good, "/admin/nope.js", 404).expect(&[("/error", "not_found")]),
    Row::get(Good, "/", 303),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operations_routes_and_the_admin_page_answer_as_documented() {
    let mut walk = Walk::start().await;
    walk.run(&open_rows()).await;
    walk.run(OPERATIONS).await;
}

/// Imports in each format and their refusals; pages, a search, and theirs; last, an import
/// whose tenant is removed while it streams in.
const PRODUCTS: &[Row] = &[
    Row::post(Good, "/catalog/products?tenant_id={t}", 200)
        .body(Body::Json(PRODUCT_ROWS))
        .expect(&[("/invalid", "1")]),
    Row::post(Good, "/catalog/products?tenant_id={t}", 200).body(Body::Raw(
        "application/x-ndjson",
        "{\"product_key\":\"p3\",\"name\":\"Cotton Shirt Blue M\"}\n",
    )),
    Row::post(Good, "/catalog/products?tenant_id={t}", 200).body(Body::Raw(
        "text/csv",
        "product_key,name,taxonomy_path\np4,Cotton Shirt Red L,Clothing > Shirts\n",
    )),
    Row::post(Good, "/catalog/products?tenant_id={t}", 400)
        .body(Body::Raw("application/json", "[{")),
    Row::post(Good, "/catalog/products?tenant_id={t}", 415).body(Body::Raw("text/plain", "hi")),
    Row::post(Good, "/catalog/products?tenant_id={t}", 413).body(Body::TooBig("text/csv")),
    Row::post(Good, "/catalog/products", 422).body(Body::Json(PRODUCT_ROWS)),
    Row::post(Dead, "/catalog/products?tenant_id={t}", 503).body(Body::Json(PRODUCT_ROWS)),
    Row::get(Good, "/catalog/products?tenant_id={t}&limit=2", 200),
    Row::get(Good, "/catalog/products?tenant_id={t}&limit=0", 422),
    Row::get(Dead, "/catalog/products?tenant_id={t}", 503),
    // A search answers a page of what `q` finds, shaped like the listing; an empty `q` is refused.
    Row::get(Good, "/catalog/products?tenant_id={t}&q=p1&limit=1", 200)
        .expect(&[("/products/0/product_key", "p1")]),
    Row::get(Good, "/catalog/products?tenant_id={t}&q=", 422).expect(&[("/field", "q")]),
    // Last: the tenant is removed while an import streams in; the import stops there.
    Row::post(Good, "/catalog/products?tenant_id={t}", 409)
        .body(Body::DeletedMidway)
        .expect(&[("/error", "tenant_deleted")]),
];

/// A sync, an enrich and a pair waited for (each field style once), then the product view.
const WAITED: &[Row] = &[
    Row::post(Good, "/catalog/products?tenant_id={t}", 200).body(Body::Json(PRODUCT_ROWS)),
    Row::post(Good, "/catalog/sync", 200)
        .form(WAITED_SAMPLE)
        .expect(&[("/totals/read", "5")]),
    Row::post(Good, "/catalog/enrich", 200)
        .body(Body::Json(r#"{"tenant_id": "{t}", "wait": true}"#)),
    // A retry of a start that waited answers the report again, marked as a replay.
    Row::post(Good, "/catalog/enrich", 200)
        .headers(&[("Idempotency-Key", "waited")])
        .form(&[("tenant_id", "{t}"), ("wait", "true")])
        .keep(&[("report", "")]),
    Row::post(Good, "/catalog/enrich", 200)
        .headers(&[("Idempotency-Key", "waited")])
        .form(&[("tenant_id", "{t}"), ("wait", "true")])
        .carries(&[("Idempotent-Replayed", "true")])
        .same_as("report"),
    Row::post(Good, "/catalog/pair", 200)
        .body(Body::Multipart(&[("tenant_id", "{t}"), ("wait", "true")])),
    Row::get(Good, "/catalog/products/p1?tenant_id={t}", 200)
        .expect(&[("/enrichment/state", "enriched")]),
    Row::get(Good, "/catalog/products/nope?tenant_id={t}", 404),
    Row::get(Good, "/catalog/products/p1", 422),
    Row::get(Dead, "/catalog/products/p1?tenant_id={t}", 503),
];

/// A start's refusals, before and after its job exists.
const REFUSED_STARTS: &[Row] = &[
    Row::post(Good, "/catalog/nope", 404).form(&[("tenant_id", "{t}")]),
    Row::post(Good, "/catalog/sync", 400).body(Body::Raw("application/json", "{")),
    Row::post(Good, "/catalog/sync", 415).body(Body::Raw("text/plain", "x")),
    Row::post(Good, "/catalog/sync", 413).body(Body::TooBig("application/x-www-form-urlencoded")),
    Row::post(Good, "/catalog/sync", 422).form(&[("source", "demo.jsonl")]),
    Row::post(Good, "/catalog/sync", 422)
        .form(&[("tenant_id", "{t}"), ("source", "../secret.jsonl")]),
    FAILED_SYNC,
    Row::post(Dead, "/catalog/sync", 503).form(&[("tenant_id", "{t}"), ("source", "demo.jsonl")]),
    Row::post(Closing, "/catalog/sync", 503)
        .form(&[("tenant_id", "{t}"), ("source", "demo.jsonl")]),
    // A JSON body giving a key twice.
    Row::post(Good, "/catalog/enrich", 422)
        .body(Body::Json(r#"{"tenant_id":"{t}","tenant_id":"{other}"}"#))
        .expect(&[("/error", "duplicate_key")]),
];

/// A failed job; then the one worker and the one waiting place taken: a held sync of `t`
/// runs (`running`, started with query-string fields) and one of `other` waits (`waiting`).
const HELD_JOBS: &[Row] = &[
    FAILED_SYNC,
    Row::post(Good, "/catalog/sync?tenant_id={t}&source={held}", 202)
        .keep(&[("running", "/job_id")]),
    Row::post(Good, "/catalog/sync", 202)
        .form(&[("tenant_id", "{other}"), ("source", "{held}")])
        .keep(&[("waiting", "/job_id")]),
];

/// A walk whose good app holds the jobs of `HELD_JOBS`, `running` read running.
async fn walk_with_held_jobs() -> Walk {
    let mut walk = Walk::start().await;
    walk.run(HELD_JOBS).await;
    walk.poll(Good, "/catalog/jobs/{running}", "/status", "running")
        .await;
    walk
}

/// With the worker and the waiting place taken: the kind's twin, a join, a third tenant,
/// and the removal of a tenant with a job running and of one without.
const FULL: &[Row] = &[
    Row::post(Good, "/catalog/sync", 409).form(&[("tenant_id", "{t}"), ("source", "{held}")]),
    Row::post(Good, "/catalog/sync", 202)
        .form(&[
            ("tenant_id", "{t}"),
            ("source", "{held}"),
            ("on_conflict", "join"),
        ])
        .expect(&[("/job_id", "{running}")]),
    Row::post(Good, "/catalog/sync", 503).form(&[("tenant_id", "{fresh}"), ("source", "{held}")]),
    Row::delete(Good, "/catalog/tenants/{t}", 409).expect(&[("/job_id", "{running}")]),
    Row::delete(Good, "/catalog/tenants/{fresh}", 200).expect(&[("/jobs", "0")]),
    Row::delete(Good, "/catalog/tenants/a:b", 422),
    Row::delete(Dead, "/catalog/tenants/{t}", 503),
];

/// Reading jobs: one, a tenant's, every tenant's active ones paged, and a job's
/// `tenant_id` query (another tenant's job reads as unknown; a bad query is 422).
const READ: &[Row] = &[
    Row::get(Good, "/catalog/jobs/{running}", 200).carries(&[("Retry-After", "")]),
    Row::get(Good, "/catalog/jobs/{failed}", 200),
    Row::get(Good, "/catalog/jobs/nope", 404),
    Row::get(Dead, "/catalog/jobs/{running}", 503),
    Row::get(Good, "/catalog/jobs?tenant_id={t}&limit=50", 200),
    Row::get(Good, "/catalog/jobs?tenant_id={t}&limit=1000", 422),
    // A kind no job has is a typo, not an empty page.
    Row::get(Good, "/catalog/jobs?tenant_id={t}&kind=synk", 422)
        .expect(&[("/error", "invalid_field"), ("/field", "kind")]),
    Row::get(Good, "/catalog/jobs?tenant_id={t}&kind=pipeline", 200),
    Row::get(Good, "/catalog/jobs", 200)
        .query("status=queued,running&kind=sync&limit=1")
        .expect(&[("/jobs/0/status", "queued")])
        .keep(&[("cursor", "/next_cursor")]),
    Row::get(Good, "/catalog/jobs", 200)
        .query("limit=1&status=queued,running&cursor={cursor}")
        .expect(&[("/jobs/0/job_id", "{running}")]),
    Row::get(Dead, "/catalog/jobs?tenant_id={t}", 503),
    Row::get(Good, "/catalog/jobs/{failed}?tenant_id={t}", 200),
    Row::get(Good, "/catalog/jobs/{failed}?tenant_id={other}", 404),
    Row::get(Good, "/catalog/jobs/{failed}?tenant_id=a:b", 422),
    Row::get(Good, "/catalog/jobs/{failed}?limit=1", 422),
];

/// Cancelling: the waiting job, an ended one, unknown ids, another tenant's, bad queries;
/// the refused ones changed nothing.
const CANCEL: &[Row] = &[
    Row::post(Good, "/catalog/jobs/{waiting}/cancel", 202),
    Row::post(Good, "/catalog/jobs/{failed}/cancel", 409),
    Row::post(Good, "/catalog/jobs/nope/cancel", 404),
    Row::post(Good, "/catalog/jobs/{running}/cancel", 422)
        .body(Body::Json(r#"{"reason":"slow"}"#))
        .expect(&[("/field", "reason")]),
    Row::post(Good, "/catalog/jobs/{running}/cancel", 415).body(Body::Raw("text/plain", "stop")),
    Row::post(Good, "/catalog/jobs/{running}/cancel", 400).body(Body::Json(r#"{"reason":"#)),
    Row::post(Dead, "/catalog/jobs/{running}/cancel", 503),
    Row::post(
        Good,
        "/catalog/jobs/{running}/cancel?tenant_id={other}",
        404,
    )
    .expect(&[("/error", "not_found")]),
    Row::post(Good, "/catalog/jobs/{running}/cancel?force=1", 422)
        .expect(&[("/error", "unknown_field")]),
    Row::post(Good, "/catalog/jobs/{running}/cancel?tenant_id=", 422),
    Row::get(Good, "/catalog/jobs/{running}", 200).expect(&[("/status", "running")]),
];

/// The failed job's timeline as JSON, kept whole.
const TIMELINE: Row =
    Row::get(Good, "/catalog/jobs/{failed}/events", 200).keep(&[("timeline", "")]);

/// The failed job's timeline as a stream (it has ended: the stream closes), 204 after its
/// last event, and the refusals; a tenant's stream on a closing app (it ends at once).
const EVENTS: &[Row] = &[
    Row::get(Good, "/catalog/jobs/{failed}/events", 200)
        .headers(&[("accept", "text/event-stream")])
        .contains("event: finished"),
    Row::get(Good, "/catalog/jobs/{failed}/events", 204)
        .headers(&[("accept", "text/event-stream"), ("last-event-id", "{last}")]),
    Row::get(Good, "/catalog/jobs/nope/events", 404),
    Row::get(Good, "/catalog/jobs/{failed}/events?after=soon", 422),
    Row::get(Dead, "/catalog/jobs/{failed}/events", 503),
    Row::get(Closing, "/catalog/events?tenant_id={t}", 200),
    Row::get(Good, "/catalog/events", 422),
    Row::get(Dead, "/catalog/events?tenant_id={t}", 503),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_s_timeline_is_read_as_json_and_followed_as_a_stream() {
    let mut walk = Walk::start().await;
    walk.row(&FAILED_SYNC).await;
    let timeline = walk.row(&TIMELINE).await;
    let last = timeline["events"]
        .as_array()
        .and_then(|e| e.last())
        .expect("events");
    assert_eq!(last["type"], "finished", "{timeline}");
    let last = last["id"].as_str().expect("an event id").to_owned();
    walk.set("last", last);
    walk.run(EVENTS).await;
}

/// A tenant holding its share of event streams (one, on this app) is refused another, as
/// its tenant stream and as a job's stream, and told when to ask again.
const STREAMS: &[Row] = &[
    Row::post(Streaming, "/catalog/pair", 202)
        .form(&[("tenant_id", "{t}")])
        .keep(&[("paired", "/job_id")]),
    Row::get(Streaming, "/catalog/events?tenant_id={t}", 429)
        .expect(&[("/error", "too_many_streams")]),
    Row::get(Streaming, "/catalog/jobs/{paired}/events", 429)
        .headers(&[("accept", "text/event-stream")])
        .expect(&[("/error", "too_many_streams")]),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_holding_its_share_of_streams_is_refused_another_as_documented() {
    let mut walk = Walk::start().await;
    let base = walk.base(Streaming).await;
    let held = reqwest::get(walk.fill(&format!("{base}/catalog/events?tenant_id={{t}}")))
        .await
        .expect("the app answers");
    assert_eq!(held.status(), 200, "the tenant's one stream is served");
    walk.run(STREAMS).await;
    drop(held);
}

/// Retrying: a job that has not ended, one whose kind is taken, unknown ids, a bad query,
/// a dead store (the waiting job is cancelled first, so it has ended).
const RETRY_REFUSED: &[Row] = &[
    Row::post(Good, "/catalog/jobs/{waiting}/cancel", 202),
    Row::post(Good, "/catalog/jobs/{running}/retry", 409).expect(&[("/error", "still_active")]),
    Row::post(Good, "/catalog/jobs/{failed}/retry", 409)
        .expect(&[("/error", "already_running"), ("/job_id", "{running}")]),
    Row::post(Good, "/catalog/jobs/nope/retry", 404),
    Row::post(Good, "/catalog/jobs/{failed}/retry", 422)
        .body(Body::Json(r#"{"full":true,"wait":true}"#))
        .expect(&[("/field", "full")]),
    Row::post(Good, "/catalog/jobs/{failed}/retry", 415).body(Body::Raw("text/plain", "full")),
    Row::post(Good, "/catalog/jobs/{failed}/retry", 400).body(Body::Json(r#"{"full":"#)),
    Row::post(Good, "/catalog/jobs/{failed}/retry?tenant_id=a:b", 422),
    Row::post(Dead, "/catalog/jobs/{failed}/retry", 503),
];

/// Once the held jobs are let go: a retry of the cancelled job starts a new one.
const RETRIED: Row = Row::post(Good, "/catalog/jobs/{waiting}/retry", 202)
    .expect(&[("/retry_of", "{waiting}"), ("/tenant_id", "{other}")]);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_job_is_retried_and_the_refusals_are_as_documented() {
    let mut walk = walk_with_held_jobs().await;
    walk.run(RETRY_REFUSED).await;
    walk.feeds.release("oas");
    walk.row(&RETRIED).await;
}

/// On the app with one create per tenant per minute: an idempotent start and its replay,
/// its key reused with other parameters, and the tenant's minute spent.
const LIMITED: &[Row] = &[
    Row::post(Limited, "/catalog/enrich", 202)
        .headers(&[("Idempotency-Key", "k1")])
        .form(&[("tenant_id", "{t}")])
        .keep(&[("first", "/job_id")]),
    Row::post(Limited, "/catalog/enrich", 202)
        .headers(&[("Idempotency-Key", "k1")])
        .form(&[("tenant_id", "{t}")])
        .carries(&[("Idempotent-Replayed", "true")])
        .expect(&[("/job_id", "{first}")]),
    Row::post(Limited, "/catalog/enrich", 422)
        .headers(&[("Idempotency-Key", "k1")])
        .form(&[("tenant_id", "{t}"), ("force", "true")]),
    Row::post(Limited, "/catalog/pair", 429).form(&[("tenant_id", "{t}")]),
    // A refresh counts as one create of its tenant: refused in a spent minute.
    Row::post(Limited, "/catalog/pipeline", 429).form(&[
        ("tenant_id", "{t}"),
        ("steps", "sync"),
        ("source", "demo.jsonl"),
    ]),
];

/// The ended enrich retried in a spent minute.
const SPENT_RETRY: Row = Row::post(Limited, "/catalog/jobs/{first}/retry", 429);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_start_replays_and_a_spent_minute_refuses_starts_and_retries() {
    crate::helpers::clear_of_a_minute_edge().await;
    let mut walk = Walk::start().await;
    walk.run(LIMITED).await;
    walk.poll(Limited, "/catalog/jobs/{first}", "/status", "done")
        .await;
    // The limit counts per clock minute and the enrich took a while: spend the current
    // minute's one create (or find it spent) right before the retry, clear of a minute's
    // edge, so the retry meets a spent minute.
    crate::helpers::clear_of_a_minute_edge().await;
    let spend = format!("{}/catalog/pair", walk.base(Limited).await);
    let form = [("tenant_id", walk.fill("{t}"))];
    let spent = reqwest::Client::new().post(spend).form(&form).send().await;
    let spent = spent.expect("the app answers").status().as_u16();
    assert!(spent == 202 || spent == 429, "{spent}");
    walk.row(&SPENT_RETRY).await;
}

/// Every `/catalog` operation that names a tenant, for tenant `{named}`, sending `{auth}`.
const GUARDED: &[Row] = &[
    Row::post(Guarded, "/catalog/enrich", 401)
        .headers(AUTH)
        .form(&[("tenant_id", "{named}")]),
    Row::post(Guarded, "/catalog/pipeline", 401)
        .headers(AUTH)
        .form(&[("tenant_id", "{named}"), ("steps", "pair")]),
    Row::get(Guarded, "/catalog/jobs?tenant_id={named}", 401).headers(AUTH),
    Row::post(Guarded, "/catalog/products?tenant_id={named}", 401)
        .headers(AUTH)
        .body(Body::Json(PRODUCT_ROWS)),
    Row::get(Guarded, "/catalog/products?tenant_id={named}", 401).headers(AUTH),
    Row::get(Guarded, "/catalog/products/p1?tenant_id={named}", 401).headers(AUTH),
    Row::delete(Guarded, "/catalog/tenants/{named}", 401).headers(AUTH),
    Row::get(Guarded, "/catalog/events?tenant_id={named}", 401).headers(AUTH),
];

const AUTH: &[(&str, &str)] = &[("authorization", "{auth}")];

/// Who calls `GUARDED` (an `Authorization` header), naming whom, and how it is answered:
/// without a token, with a token nobody issued, and with tenant `a`'s token naming `b`.
type Caller = (
    &'static str,
    &'static str,
    u16,
    &'static [(&'static str, &'static str)],
);
const CALLERS: [Caller; 3] = [
    ("", "{a}", 401, &[("/error", "unauthorized")]),
    (
        "Bearer not-a-known-token",
        "{a}",
        401,
        &[("/error", "unauthorized")],
    ),
    ("Bearer {a_token}", "{b}", 403, &[("/error", "forbidden")]),
];

/// The routes of one job, without a token (any id: the guard answers before the store).
const GUARDED_JOB: &[Row] = &[
    Row::get(Guarded, "/catalog/jobs/{any_id}", 401),
    Row::post(Guarded, "/catalog/jobs/{any_id}/cancel", 401),
    Row::post(Guarded, "/catalog/jobs/{any_id}/retry", 401),
    Row::get(Guarded, "/catalog/jobs/{any_id}/events", 401),
];

/// The refused requests changed nothing (`b` has no job), and `a`'s own token is served.
const TOKENS_SERVED: &[Row] = &[
    Row::get(Guarded, "/catalog/jobs?tenant_id={b}", 200)
        .headers(&[("authorization", "Bearer {operator}")])
        .expect(&[("/jobs", "[]")]),
    Row::get(Guarded, "/catalog/jobs?tenant_id={a}", 200).headers(A_TOKEN),
];

const READER: &[(&str, &str)] = &[("authorization", "Bearer {reader}")];
const A_TOKEN: &[(&str, &str)] = &[("authorization", "Bearer {a_token}")];

/// A read-only operator token (`read:*`): `whoami` says so, and a change is 403 before the
/// job is even looked for.
const READ_ONLY: &[Row] = &[
    Row::get(Guarded, "/catalog/whoami", 200)
        .headers(READER)
        .expect(&[
            ("/scope", "read:*"),
            ("/read_only", "true"),
            ("/may/cancel", "false"),
        ]),
    Row::get(Guarded, "/catalog/whoami?verbose=1", 422)
        .headers(READER)
        .expect(&[("/error", "unknown_field")]),
    Row::post(Guarded, "/catalog/jobs/{any_id}/cancel", 403)
        .headers(READER)
        .expect(&[("/error", "forbidden")]),
    Row::post(Guarded, "/catalog/jobs/{any_id}/retry", 403)
        .headers(READER)
        .expect(&[("/error", "forbidden")]),
    Row::post(Guarded, "/catalog/pipeline", 403)
        .headers(READER)
        .form(&[("tenant_id", "{a}"), ("steps", "pair")])
        .expect(&[("/error", "forbidden")]),
    Row::get(Good, "/catalog/whoami", 200).expect(&[("/name", "anonymous"), ("/auth", "open")]),
    Row::get(Guarded, "/catalog/whoami", 401).expect(&[("/error", "unauthorized")]),
];

/// The overview: open, for an operator, refused to a tenant token, a bad query, a dead store.
const STATS: &[Row] = &[
    Row::get(Good, "/catalog/stats", 200),
    Row::get(Guarded, "/catalog/stats", 200).headers(READER),
    Row::get(Guarded, "/catalog/stats", 403)
        .headers(A_TOKEN)
        .expect(&[("/error", "forbidden")]),
    Row::get(Guarded, "/catalog/stats", 401),
    Row::get(Good, "/catalog/stats?window=1h", 422).expect(&[("/error", "unknown_field")]),
    Row::get(Dead, "/catalog/stats", 503),
];

/// Every tenant's jobs by id prefix, and the tenant picker: open, for a reader, a bad query,
/// a dead store.
const BROWSE: &[Row] = &[
    Row::get(Good, "/catalog/jobs?id_prefix=0&status=failed", 200),
    Row::get(Good, "/catalog/jobs?id_prefix=nope", 422)
        .expect(&[("/error", "invalid_field"), ("/field", "id_prefix")]),
    Row::get(Good, "/catalog/tenants?prefix=t&limit=5", 200),
    Row::get(Guarded, "/catalog/tenants", 200).headers(READER),
    Row::get(Guarded, "/catalog/tenants", 401),
    Row::get(Good, "/catalog/tenants?limit=0", 422).expect(&[("/field", "limit")]),
    Row::get(Dead, "/catalog/tenants", 503),
];

/// `GUARDED` as `caller` sends it.
fn guarded_as(caller: &Caller) -> impl Iterator<Item = Row> {
    let &(_, _, status, expect) = caller;
    GUARDED.iter().map(move |row| Row {
        status,
        expect,
        ..*row
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tokens_every_catalog_route_answers_401_without_one_and_403_for_another_tenant() {
    let mut walk = Walk::start().await;
    for caller @ (auth, named, _, _) in &CALLERS {
        let (auth, named) = (walk.fill(auth), walk.fill(named));
        walk.set("auth", auth);
        walk.set("named", named);
        for row in guarded_as(caller) {
            walk.row(&row).await;
        }
    }
    walk.run(GUARDED_JOB).await;
    walk.run(TOKENS_SERVED).await;
}

/// A start, an import, a bulk call and every route that reads no body, whose body stalls:
/// 408 once `REQUEST_TIMEOUT_SECONDS` passes.
const STALLED: &[Row] = &[
    Row::post(Slow, "/catalog/enrich", 408)
        .body(Body::Stalled(
            "application/x-www-form-urlencoded",
            "tenant_id=",
        ))
        .expect(&[("/error", "request_timeout")]),
    Row::post(Slow, "/catalog/products?tenant_id={t}", 408)
        .body(Body::Stalled("application/x-ndjson", "{\"product_key\"")),
    Row::post(Slow, "/catalog/pipeline", 408).body(Body::Stalled(
        "application/x-www-form-urlencoded",
        "tenant_id=",
    )),
    Row::post(Slow, "/catalog/bulk/retry", 408)
        .body(Body::Stalled("application/json", "{\"job_ids\": ["))
        .expect(&[("/error", "request_timeout")]),
    Row::post(Slow, "/catalog/bulk/cancel", 408)
        .body(Body::Stalled("application/json", "{\"tenant_id\"")),
    // A route that reads no body reads one sent to it (to refuse what it names): one that
    // stalls is 408 there too, before anything is done.
    Row::get(Slow, "/catalog/whoami", 408)
        .body(STALLS)
        .headers(LENGTH)
        .expect(&[("/error", "request_timeout")]),
    Row::get(Slow, "/catalog/stats", 408)
        .body(STALLS)
        .headers(LENGTH),
    Row::get(Slow, "/catalog/tenants", 408)
        .body(STALLS)
        .headers(LENGTH),
    Row::get(Slow, "/catalog/jobs?tenant_id={t}", 408)
        .body(STALLS)
        .headers(LENGTH),
    Row::get(Slow, "/catalog/jobs/{any_id}", 408)
        .body(STALLS)
        .headers(LENGTH),
    Row::post(Slow, "/catalog/jobs/{any_id}/cancel", 408)
        .body(STALLS)
        .headers(LENGTH),
    Row::post(Slow, "/catalog/jobs/{any_id}/retry", 408)
        .body(STALLS)
        .headers(LENGTH),
    Row::get(Slow, "/catalog/jobs/{any_id}/events", 408)
        .body(STALLS)
        .headers(LENGTH),
    Row::get(Slow, "/catalog/events?tenant_id={t}", 408)
        .body(STALLS)
        .headers(LENGTH),
    Row::get(Slow, "/catalog/products?tenant_id={t}", 408)
        .body(STALLS)
        .headers(LENGTH),
    Row::get(Slow, "/catalog/products/p1?tenant_id={t}", 408)
        .body(STALLS)
        .headers(LENGTH),
    Row::delete(Slow, "/catalog/tenants/{t}", 408)
        .body(STALLS)
        .headers(LENGTH),
];
/// A JSON body that never ends.
const STALLS: Body = Body::Stalled("application/json", "{\"tenant_id\"");
/// The length of a body that stalls, said (hyper's client sends a GET's or a DELETE's body of
/// unknown length as none at all).
const LENGTH: &[(&str, &str)] = &[("content-length", "64")];

/// A request of each method no operation of a path has, to every path of the document (a
/// `{name}` of the template sent as it is: the router matches the path before any
/// parameter is read): 405 `method_not_allowed`, `Allow` naming the path's operations.
fn wrong_methods(doc: &Value) -> Vec<Row> {
    let mut rows = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        // A row's path is `'static`, as the tables' are; these few live as long as the test.
        let path: &'static str = path.clone().leak();
        let taken = methods_of(item);
        for method in METHODS.into_iter().filter(|m| !taken.contains(m)) {
            let method: &'static str = match method {
                "get" => "GET",
                "post" => "POST",
                "put" => "PUT",
                "delete" => "DELETE",
                _ => "PATCH",
            };
            rows.push(Row::new(Good, method, path, 405));
        }
    }
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_path_answers_a_method_it_does_not_take_405_with_allow_as_documented() {
    let mut walk = Walk::start().await;
    let rows = wrong_methods(&walk.doc);
    assert!(rows.len() >= walk.doc["paths"].as_object().unwrap().len() * 3);
    walk.run(&rows).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walk_refuses_a_body_the_document_does_not_allow() {
    let walk = Walk::start().await;
    let error_body = json!({"$ref": "#/components/schemas/ErrorBody"});
    let cases = [
        (
            "an unknown error code",
            json!({"error": "no_such_code", "message": "m"}),
        ),
        ("no message", json!({"error": "not_found"})),
        (
            "a field the envelope does not name",
            json!({"error": "not_found", "message": "m", "hint": "h"}),
        ),
    ];
    for (what, body) in cases {
        let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            walk.validate(&error_body, &body, what)
        }));
        assert!(refused.is_err(), "{what} must not validate");
    }
}

/// Every row the tests above send.
fn every_row() -> Vec<Row> {
    let tables = [
        OPERATIONS,
        PIPELINES,
        PRODUCTS,
        WAITED,
        REFUSED_STARTS,
        HELD_JOBS,
        FULL,
        READ,
        CANCEL,
        &[TIMELINE],
        EVENTS,
        STREAMS,
        RETRY_REFUSED,
        &[RETRIED],
        LIMITED,
        &[SPENT_RETRY],
        GUARDED_JOB,
        TOKENS_SERVED,
        READ_ONLY,
        STATS,
        BROWSE,
        super::bulk::BULK,
        STALLED,
        GUARD_REFUSED,
    ];
    let mut rows = tables.concat();
    rows.extend(open_rows());
    rows.extend(CALLERS.iter().flat_map(guarded_as));
    rows
}

#[test]
fn every_answer_and_conditional_header_the_document_lists_has_a_row() {
    let doc = serde_json::to_value(catalog_jobs::api::openapi::document()).expect("JSON");
    let (mut answers, mut carried) = (BTreeSet::new(), BTreeSet::new());
    for row in every_row().into_iter().chain(wrong_methods(&doc)) {
        let template = route_of_row(&doc, row.method, row.path, row.status)
            .unwrap_or_else(|| panic!("{} {}: no route of the document", row.method, row.path));
        // A 405 is the answer every operation of the path lists.
        let methods = match row.status {
            405 => methods_of(&doc["paths"][&template]),
            _ => vec![row.method],
        };
        for method in methods {
            let answer = (
                template.clone(),
                method.to_lowercase(),
                row.status.to_string(),
            );
            for (header, _) in row.carries {
                carried.insert((answer.clone(), (*header).to_owned()));
            }
            answers.insert(answer);
        }
    }
    let mut unwalked = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("operations") {
            for (status, response) in op["responses"].as_object().expect("responses") {
                let answer = (path.clone(), method.clone(), status.clone());
                if !answers.contains(&answer) {
                    unwalked.push(format!("{method} {path} {status}"));
                }
                let headers = response["headers"].as_object().into_iter().flatten();
                for (header, _) in headers.filter(|(h, _)| conditional(status, h)) {
                    if !carried.contains(&(answer.clone(), header.clone())) {
                        unwalked.push(format!("{method} {path} {status} with {header}"));
                    }
                }
            }
        }
    }
    assert!(
        unwalked.is_empty(),
        "documented, but no row asks for: {unwalked:#?}"
    );
}
