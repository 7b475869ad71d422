//! The OpenAPI document cannot drift from the server: every route is walked with real
//! requests — its successes and each error it documents — and every answer is checked
//! against the document (status documented, headers present, body valid against the
//! schema with `jsonschema`); every documented answer must have been seen. And a route
//! cannot be added without its documentation.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use catalog_jobs::catalog::products::{CatalogStore, MemoryCatalog, RedisCatalog};
use catalog_jobs::catalog::Catalog;
use catalog_jobs::config::tokens::hash_token;
use catalog_jobs::config::Config;
use catalog_jobs::jobs::memory::MemoryStore;
use catalog_jobs::jobs::redis::RedisStore;
use catalog_jobs::jobs::store::JobStore;
use catalog_jobs::startup::{catalog_settings, store_settings, App};
use futures_util::{stream, StreamExt};
use reqwest::{Method, RequestBuilder};
use serde_json::{json, Value};

use crate::helpers::{free_port, test_config, unique, HeldFeeds};

/// Small enough that a test body can exceed it.
const MAX_BODY: usize = 16 * 1024;

/// The slow app's `REQUEST_TIMEOUT_SECONDS`: short, so a stalled body is answered soon; the
/// body never arrives, so no load can make it too short.
const SHORT_REQUEST_TIMEOUT: Duration = Duration::from_millis(400);

/// A body that sends `head` and then nothing, ever (the client stalls).
fn stalled_body(head: &'static str) -> reqwest::Body {
    let first = stream::once(async move { Ok::<_, std::io::Error>(head.as_bytes().to_vec()) });
    reqwest::Body::wrap_stream(first.chain(stream::pending()))
}

async fn serve(
    config: Config,
    store: Arc<dyn JobStore>,
    catalog: Arc<dyn CatalogStore>,
    closing: bool,
) -> String {
    let catalog = Arc::new(Catalog {
        store: catalog,
        settings: catalog_settings(&config),
    });
    let registry = catalog_jobs::catalog::registry(catalog.clone());
    let app = App::build_with(config, store, catalog, registry)
        .await
        .expect("the app builds");
    if closing {
        app.runner().shutdown(Duration::ZERO).await;
    }
    let base = format!("http://{}", app.local_addr());
    tokio::spawn(app.run_until(std::future::pending()));
    base
}

/// The walk's configuration; `allowed` names the loopback host and port its syncs may read.
fn config(allowed: &[String]) -> Config {
    let mut config = test_config();
    config.sync_allowed_hosts = allowed.to_vec();
    config.max_body_bytes = MAX_BODY;
    config.max_start_body_bytes = MAX_BODY;
    config.max_concurrent_jobs = 1;
    config.max_queued_jobs = 1;
    config
}

struct Walk {
    doc: Value,
    client: reqwest::Client,
    seen: BTreeSet<(String, String, String)>,
    /// Each (route, method, status, header) an answer carried.
    seen_headers: BTreeSet<(String, String, String, String)>,
}

/// Response headers sent on some answers of a status only (the document says when); every
/// other documented header must be on every answer of its status. Each must be seen once.
const CONDITIONAL_HEADERS: [&str; 2] = ["Idempotent-Replayed", "Retry-After"];

impl Walk {
    /// Sends `request` (for the route `template`), expects `status`, and checks the answer
    /// against the document. Answers the body (JSON, or the text as a string).
    async fn check(&mut self, template: &str, request: RequestBuilder, status: u16) -> Value {
        let request = request.build().expect("the request builds");
        let method = request.method().as_str().to_lowercase();
        let url = request.url().clone();
        let response = self.client.execute(request).await.expect("the app answers");
        let got = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("a body");
        assert_eq!(got, status, "{method} {url}: {text}");
        let documented = &self.doc["paths"][template][&method]["responses"][status.to_string()];
        assert!(
            documented.is_object(),
            "{method} {template} answered {status}, which the document does not list"
        );
        self.seen
            .insert((template.to_owned(), method.clone(), status.to_string()));
        for name in documented["headers"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
        {
            let present = headers.contains_key(name.as_str());
            assert!(
                present || CONDITIONAL_HEADERS.contains(&name.as_str()),
                "{method} {url} {status}: no {name} header"
            );
            if present {
                self.seen_headers.insert((
                    template.to_owned(),
                    method.clone(),
                    status.to_string(),
                    name.clone(),
                ));
            }
        }
        let Some(content) = documented["content"].as_object() else {
            assert!(
                text.is_empty(),
                "{method} {url} {status} is documented without a body"
            );
            return Value::Null;
        };
        let content_type = headers["content-type"].to_str().unwrap();
        let (media, schema) = content
            .iter()
            .find(|(media, _)| content_type.starts_with(media.as_str()))
            .unwrap_or_else(|| {
                panic!(
                    "{method} {url}: {content_type}, documented {:?}",
                    content.keys()
                )
            });
        let body = if media == "application/json" {
            serde_json::from_str(&text).expect("a JSON body")
        } else {
            Value::String(text)
        };
        self.validate(
            &schema["schema"],
            &body,
            &format!("{method} {url} {status}"),
        );
        body
    }

    fn validate(&self, schema: &Value, body: &Value, what: &str) {
        // The response's schema, with the document's components beside it so that its
        // `#/components/schemas/…` references resolve.
        let mut root = schema.clone();
        root["components"] = closed(&self.doc["components"]);
        let validator =
            jsonschema::draft202012::new(&root).expect("the document's schema compiles");
        let errors: Vec<String> = validator
            .iter_errors(body)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{what}: the body does not match the document: {errors:?}\n{body}"
        );
    }
}

/// The document's components with every object schema closed: a field it does not name is
/// refused (unless it takes any, as a timeline event's extras do), so an answer carrying an
/// undocumented field fails the walk. The published document leaves objects open, so that a
/// client keeps working when a field is added; the walk holds the service to naming it.
/// Flattened types (`allOf` of objects) are merged first: closed apart, each part would
/// refuse the other's fields.
fn closed(components: &Value) -> Value {
    let schemas = &components["schemas"];
    let mut out = components.clone();
    for (name, schema) in schemas.as_object().expect("the document has schemas") {
        let mut schema = merged(schema, schemas);
        close(&mut schema);
        out["schemas"][name] = schema;
    }
    out
}

/// `schema` with an `allOf` of objects merged into one object (properties and required).
fn merged(schema: &Value, schemas: &Value) -> Value {
    let Some(parts) = schema["allOf"].as_array() else {
        return schema.clone();
    };
    let mut object = json!({"type": "object", "properties": {}, "required": []});
    for part in parts {
        let part = match part["$ref"].as_str() {
            Some(to) => merged(
                &schemas[to.trim_start_matches("#/components/schemas/")],
                schemas,
            ),
            None => part.clone(),
        };
        let properties = part["properties"].as_object().cloned().unwrap_or_default();
        object["properties"]
            .as_object_mut()
            .unwrap()
            .extend(properties);
        let required = part["required"].as_array().cloned().unwrap_or_default();
        object["required"].as_array_mut().unwrap().extend(required);
    }
    object
}

/// Sets `additionalProperties: false` on every object schema in `schema` that names its
/// properties and says nothing of others.
fn close(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if map.contains_key("properties") && !map.contains_key("additionalProperties") {
                map.insert("additionalProperties".into(), json!(false));
            }
            map.values_mut().for_each(close);
        }
        Value::Array(items) => items.iter_mut().for_each(close),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_as_the_openapi_document_says() {
    let feeds = HeldFeeds::start().await;
    // Syncs may read the held feeds and one port nobody listens on (a source that fails).
    let unreachable_port = free_port();
    let allowed = [feeds.allowed(), format!("127.0.0.1:{unreachable_port}")];
    let config = || config(&allowed);
    let good = serve(
        config(),
        Arc::new(MemoryStore::new(store_settings(&config()))),
        Arc::new(MemoryCatalog::new()),
        false,
    )
    .await;
    let dead_url = crate::helpers::dead_redis_url();
    let dead = serve(
        config(),
        Arc::new(RedisStore::open(&dead_url, store_settings(&config())).unwrap()),
        Arc::new(RedisCatalog::open(&dead_url, "cat").unwrap()),
        false,
    )
    .await;
    let closing = serve(
        config(),
        Arc::new(MemoryStore::new(store_settings(&config()))),
        Arc::new(MemoryCatalog::new()),
        true,
    )
    .await;

    let limited = serve(
        Config {
            tenant_creates_per_minute: 1,
            max_queued_jobs: 10,
            ..config()
        },
        Arc::new(MemoryStore::new(store_settings(&Config {
            tenant_creates_per_minute: 1,
            ..config()
        }))),
        Arc::new(MemoryCatalog::new()),
        false,
    )
    .await;

    // Tokens: an operator's (`*`) and tenant A's.
    let (tenant_a, tenant_b) = (unique("oas"), unique("oas"));
    let (operator, a_token) = ("oas-operator-secret", format!("{tenant_a}-secret"));
    let guarded = serve(
        Config {
            api_tokens: Some(format!(
                "* ops {};{tenant_a} a-bot {}",
                hash_token(operator),
                hash_token(&a_token)
            )),
            ..config()
        },
        Arc::new(MemoryStore::new(store_settings(&config()))),
        Arc::new(MemoryCatalog::new()),
        false,
    )
    .await;
    let slow = serve(
        Config {
            request_timeout_seconds: SHORT_REQUEST_TIMEOUT,
            ..config()
        },
        Arc::new(MemoryStore::new(store_settings(&config()))),
        Arc::new(MemoryCatalog::new()),
        false,
    )
    .await;

    let client = reqwest::Client::new();
    let doc: Value = client
        .get(format!("{good}/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut w = Walk {
        doc,
        client: client.clone(),
        seen: BTreeSet::new(),
        seen_headers: BTreeSet::new(),
    };
    let c = client;
    let t = unique("oas");
    let get = |base: &str, path: &str| c.get(format!("{base}{path}"));
    let post = |base: &str, path: &str| c.post(format!("{base}{path}"));
    let too_big = "x".repeat(MAX_BODY * 2);

    // Operations.
    w.check("/healthz", get(&good, "/healthz"), 200).await;
    w.check("/readyz", get(&good, "/readyz"), 200).await;
    w.check("/metrics", get(&good, "/metrics"), 200).await;
    w.check("/openapi.json", get(&good, "/openapi.json"), 200)
        .await;
    w.check("/readyz", get(&dead, "/readyz"), 503).await;

    // The admin page: static and open, even where tokens are configured.
    w.check("/admin", get(&guarded, "/admin"), 200).await;
    w.check("/admin/admin.css", get(&good, "/admin/admin.css"), 200)
        .await;
    w.check("/admin/admin.js", get(&good, "/admin/admin.js"), 200)
        .await;
    // The walk's client follows redirects; this answer is the redirect itself.
    let following = std::mem::replace(
        &mut w.client,
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap(),
    );
    w.check("/", get(&good, "/"), 303).await;
    w.client = following;

    // Products.
    let products = format!("/catalog/products?tenant_id={t}");
    let rows = json!([
        {"product_key": "p1", "name": "Steel Bottle 500 ml Black", "brand": "Acme", "price_cents": 1200, "taxonomy_path": ["Home", "Kitchen"]},
        {"product_key": "p2", "name": "Steel Bottle 750 ml Black", "brand": "Acme", "price_cents": 1400, "taxonomy_path": ["Home", "Kitchen"]},
        {"name": "no key"}
    ]);
    let report = w
        .check("/catalog/products", post(&good, &products).json(&rows), 200)
        .await;
    assert_eq!(report["invalid"], 1);
    let ndjson = "{\"product_key\":\"p3\",\"name\":\"Cotton Shirt Blue M\"}\n";
    w.check(
        "/catalog/products",
        post(&good, &products)
            .header("content-type", "application/x-ndjson")
            .body(ndjson),
        200,
    )
    .await;
    let csv = "product_key,name,taxonomy_path\np4,Cotton Shirt Red L,Clothing > Shirts\n";
    w.check(
        "/catalog/products",
        post(&good, &products)
            .header("content-type", "text/csv")
            .body(csv),
        200,
    )
    .await;
    w.check(
        "/catalog/products",
        post(&good, &products)
            .header("content-type", "application/json")
            .body("[{"),
        400,
    )
    .await;
    w.check(
        "/catalog/products",
        post(&good, &products)
            .header("content-type", "text/plain")
            .body("hi"),
        415,
    )
    .await;
    w.check(
        "/catalog/products",
        post(&good, &products)
            .header("content-type", "text/csv")
            .body(too_big.clone()),
        413,
    )
    .await;
    w.check(
        "/catalog/products",
        post(&good, "/catalog/products").json(&rows),
        422,
    )
    .await;
    w.check("/catalog/products", post(&dead, &products).json(&rows), 503)
        .await;
    w.check(
        "/catalog/products",
        get(&good, &format!("{products}&limit=2")),
        200,
    )
    .await;
    w.check(
        "/catalog/products",
        get(&good, &format!("{products}&limit=0")),
        422,
    )
    .await;
    w.check("/catalog/products", get(&dead, &products), 503)
        .await;
    // Search: a page of what `q` finds (shaped like the listing), and an empty `q` refused.
    let first_key = rows[0]["product_key"].as_str().unwrap();
    let found = w
        .check(
            "/catalog/products",
            get(&good, &products).query(&[("q", first_key), ("limit", "1")]),
            200,
        )
        .await;
    assert_eq!(found["products"][0]["product_key"], first_key, "{found}");
    let refused = w
        .check(
            "/catalog/products",
            get(&good, &format!("{products}&q=")),
            422,
        )
        .await;
    assert_eq!(refused["field"], "q");

    // Jobs: a sync, an enrich and a pair waited for, each field style once.
    let sync = w
        .check(
            "/catalog/{kind}",
            post(&good, "/catalog/sync").form(&[
                ("tenant_id", t.as_str()),
                ("source", "sample.csv"),
                ("wait", "true"),
            ]),
            200,
        )
        .await;
    assert!(sync["totals"]["read"].as_u64().unwrap() > 0);
    w.check(
        "/catalog/{kind}",
        post(&good, "/catalog/enrich").json(&json!({"tenant_id": t, "wait": true})),
        200,
    )
    .await;
    // A retry of a start that waited answers the report again, marked as a replay.
    let waited = || {
        post(&good, "/catalog/enrich")
            .header("Idempotency-Key", "waited")
            .form(&[("tenant_id", t.as_str()), ("wait", "true")])
    };
    let report = w.check("/catalog/{kind}", waited(), 200).await;
    let again = waited().send().await.unwrap();
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(w.check("/catalog/{kind}", waited(), 200).await, report);
    let form = reqwest::multipart::Form::new()
        .text("tenant_id", t.clone())
        .text("wait", "true");
    w.check(
        "/catalog/{kind}",
        post(&good, "/catalog/pair").multipart(form),
        200,
    )
    .await;
    let product = format!("/catalog/products/p1?tenant_id={t}");
    let view = w
        .check("/catalog/products/{product_key}", get(&good, &product), 200)
        .await;
    assert_eq!(view["enrichment"]["state"], "enriched");
    w.check(
        "/catalog/products/{product_key}",
        get(&good, &format!("/catalog/products/nope?tenant_id={t}")),
        404,
    )
    .await;
    w.check(
        "/catalog/products/{product_key}",
        get(&good, "/catalog/products/p1"),
        422,
    )
    .await;
    w.check("/catalog/products/{product_key}", get(&dead, &product), 503)
        .await;

    // A start's refusals.
    let sync_path = "/catalog/sync";
    w.check(
        "/catalog/{kind}",
        post(&good, "/catalog/nope").form(&[("tenant_id", t.as_str())]),
        404,
    )
    .await;
    w.check(
        "/catalog/{kind}",
        post(&good, sync_path)
            .header("content-type", "application/json")
            .body("{"),
        400,
    )
    .await;
    w.check(
        "/catalog/{kind}",
        post(&good, sync_path)
            .header("content-type", "text/plain")
            .body("x"),
        415,
    )
    .await;
    w.check(
        "/catalog/{kind}",
        post(&good, sync_path)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(too_big),
        413,
    )
    .await;
    w.check(
        "/catalog/{kind}",
        post(&good, sync_path).form(&[("source", "demo.jsonl")]),
        422,
    )
    .await;
    w.check(
        "/catalog/{kind}",
        post(&good, sync_path).form(&[("tenant_id", t.as_str()), ("source", "../secret.jsonl")]),
        422,
    )
    .await;
    let unreachable = format!("http://127.0.0.1:{unreachable_port}/feed.jsonl");
    let failed = w
        .check(
            "/catalog/{kind}",
            post(&good, sync_path).form(&[
                ("tenant_id", t.as_str()),
                ("source", &unreachable),
                ("wait", "true"),
            ]),
            502,
        )
        .await;
    assert_eq!(failed["job"]["error"], "SourceUnreachable");
    let failed_id = failed["job"]["job_id"].as_str().unwrap().to_owned();
    w.check(
        "/catalog/{kind}",
        post(&dead, sync_path).form(&[("tenant_id", t.as_str()), ("source", "demo.jsonl")]),
        503,
    )
    .await;
    w.check(
        "/catalog/{kind}",
        post(&closing, sync_path).form(&[("tenant_id", t.as_str()), ("source", "demo.jsonl")]),
        503,
    )
    .await;

    // One worker and one waiting place: a held job runs, its twin is refused, a second
    // tenant's waits, a third is turned away.
    let held = feeds.url("oas");
    let running = w
        .check(
            "/catalog/{kind}",
            post(&good, sync_path).query(&[("tenant_id", t.as_str()), ("source", held.as_str())]),
            202,
        )
        .await;
    let running_id = running["job_id"].as_str().unwrap().to_owned();
    w.check(
        "/catalog/{kind}",
        post(&good, sync_path).form(&[("tenant_id", t.as_str()), ("source", held.as_str())]),
        409,
    )
    .await;
    let joined = w
        .check(
            "/catalog/{kind}",
            post(&good, sync_path).form(&[
                ("tenant_id", t.as_str()),
                ("source", held.as_str()),
                ("on_conflict", "join"),
            ]),
            202,
        )
        .await;
    assert_eq!(joined["job_id"], running_id.as_str());
    let tenant_data = |who: &str| c.delete(format!("{good}/catalog/tenants/{who}"));
    let busy = w
        .check("/catalog/tenants/{tenant_id}", tenant_data(&t), 409)
        .await;
    assert_eq!(busy["job_id"], running_id.as_str());
    let gone = w
        .check(
            "/catalog/tenants/{tenant_id}",
            tenant_data(&unique("oas")),
            200,
        )
        .await;
    assert_eq!(gone["jobs"], 0);
    w.check("/catalog/tenants/{tenant_id}", tenant_data("a:b"), 422)
        .await;
    w.check(
        "/catalog/tenants/{tenant_id}",
        c.delete(format!("{dead}/catalog/tenants/{t}")),
        503,
    )
    .await;
    // An idempotent retry, then the tenant's minute used up.
    let keyed = |key: &str| {
        post(&limited, "/catalog/enrich")
            .header("Idempotency-Key", key)
            .form(&[("tenant_id", t.as_str())])
    };
    let first = w.check("/catalog/{kind}", keyed("k1"), 202).await;
    let replay = keyed("k1").send().await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let replayed = w.check("/catalog/{kind}", keyed("k1"), 202).await;
    assert_eq!(replayed["job_id"], first["job_id"]);
    w.check(
        "/catalog/{kind}",
        post(&limited, "/catalog/enrich")
            .header("Idempotency-Key", "k1")
            .form(&[("tenant_id", t.as_str()), ("force", "true")]),
        422,
    )
    .await;
    w.check(
        "/catalog/{kind}",
        post(&limited, "/catalog/pair").form(&[("tenant_id", t.as_str())]),
        429,
    )
    .await;
    let other = unique("oas");
    let waiting = w
        .check(
            "/catalog/{kind}",
            post(&good, sync_path)
                .form(&[("tenant_id", other.as_str()), ("source", held.as_str())]),
            202,
        )
        .await;
    w.check(
        "/catalog/{kind}",
        post(&good, sync_path).form(&[
            ("tenant_id", unique("oas").as_str()),
            ("source", held.as_str()),
        ]),
        503,
    )
    .await;

    // Reading and cancelling jobs.
    let job = |id: &str| format!("/catalog/jobs/{id}");
    w.check("/catalog/jobs/{job_id}", get(&good, &job(&running_id)), 200)
        .await;
    w.check("/catalog/jobs/{job_id}", get(&good, &job(&failed_id)), 200)
        .await;
    w.check("/catalog/jobs/{job_id}", get(&good, &job("nope")), 404)
        .await;
    w.check("/catalog/jobs/{job_id}", get(&dead, &job(&running_id)), 503)
        .await;
    w.check(
        "/catalog/jobs",
        get(&good, &format!("/catalog/jobs?tenant_id={t}&limit=50")),
        200,
    )
    .await;
    w.check(
        "/catalog/jobs",
        get(&good, &format!("/catalog/jobs?tenant_id={t}&limit=1000")),
        422,
    )
    .await;
    // Every tenant's active jobs (the service runs open), filtered and paged.
    let active = w
        .check(
            "/catalog/jobs",
            get(
                &good,
                "/catalog/jobs?status=queued,running&kind=sync&limit=1",
            ),
            200,
        )
        .await;
    assert_eq!(active["jobs"][0]["status"], "queued", "{active}");
    let cursor = active["next_cursor"]
        .as_str()
        .expect("a second page")
        .to_owned();
    let rest = w
        .check(
            "/catalog/jobs",
            get(&good, "/catalog/jobs").query(&[
                ("limit", "1"),
                ("status", "queued,running"),
                ("cursor", cursor.as_str()),
            ]),
            200,
        )
        .await;
    assert_eq!(rest["jobs"][0]["job_id"], running_id.as_str());
    w.check(
        "/catalog/jobs",
        get(&dead, &format!("/catalog/jobs?tenant_id={t}")),
        503,
    )
    .await;
    let waiting_id = waiting["job_id"].as_str().unwrap();
    let cancel = |id: &str| format!("/catalog/jobs/{id}/cancel");
    w.check(
        "/catalog/jobs/{job_id}/cancel",
        post(&good, &cancel(waiting_id)),
        202,
    )
    .await;
    w.check(
        "/catalog/jobs/{job_id}/cancel",
        post(&good, &cancel(&failed_id)),
        409,
    )
    .await;
    w.check(
        "/catalog/jobs/{job_id}/cancel",
        post(&good, &cancel("nope")),
        404,
    )
    .await;
    w.check(
        "/catalog/jobs/{job_id}/cancel",
        post(&dead, &cancel(&running_id)),
        503,
    )
    .await;
    // A job's timeline, as JSON and as a stream (the failed job's has ended: it closes), 204
    // after its last event; the tenant stream of a closing app (it ends at once).
    let events = |id: &str| format!("/catalog/jobs/{id}/events");
    let sse = |r: RequestBuilder| r.header("accept", "text/event-stream");
    let timeline = w
        .check(
            "/catalog/jobs/{job_id}/events",
            get(&good, &events(&failed_id)),
            200,
        )
        .await;
    let last = timeline["events"].as_array().unwrap().last().unwrap()["id"].clone();
    assert_eq!(
        timeline["events"].as_array().unwrap().last().unwrap()["type"],
        "finished"
    );
    let streamed = w
        .check(
            "/catalog/jobs/{job_id}/events",
            sse(get(&good, &events(&failed_id))),
            200,
        )
        .await;
    assert!(
        streamed.as_str().unwrap().contains("event: finished"),
        "{streamed}"
    );
    w.check(
        "/catalog/jobs/{job_id}/events",
        sse(get(&good, &events(&failed_id))).header("last-event-id", last.as_str().unwrap()),
        204,
    )
    .await;
    w.check(
        "/catalog/jobs/{job_id}/events",
        get(&good, &events("nope")),
        404,
    )
    .await;
    w.check(
        "/catalog/jobs/{job_id}/events",
        get(&good, &format!("{}?after=soon", events(&failed_id))),
        422,
    )
    .await;
    w.check(
        "/catalog/jobs/{job_id}/events",
        get(&dead, &events(&running_id)),
        503,
    )
    .await;
    let tenant_events = format!("/catalog/events?tenant_id={t}");
    w.check("/catalog/events", get(&closing, &tenant_events), 200)
        .await;
    w.check("/catalog/events", get(&good, "/catalog/events"), 422)
        .await;
    w.check("/catalog/events", get(&dead, &tenant_events), 503)
        .await;

    // A job's `tenant_id` query: another tenant's job reads as unknown; a bad query is 422.
    let of = |id: &str, query: &str| format!("/catalog/jobs/{id}{query}");
    let mine = format!("?tenant_id={t}");
    let others = format!("?tenant_id={other}");
    w.check(
        "/catalog/jobs/{job_id}",
        get(&good, &of(&failed_id, &mine)),
        200,
    )
    .await;
    w.check(
        "/catalog/jobs/{job_id}",
        get(&good, &of(&failed_id, &others)),
        404,
    )
    .await;
    w.check(
        "/catalog/jobs/{job_id}",
        get(&good, &of(&failed_id, "?tenant_id=a:b")),
        422,
    )
    .await;
    w.check(
        "/catalog/jobs/{job_id}",
        get(&good, &of(&failed_id, "?limit=1")),
        422,
    )
    .await;
    let cancel_of = |id: &str, query: &str| format!("/catalog/jobs/{id}/cancel{query}");
    let refused = w
        .check(
            "/catalog/jobs/{job_id}/cancel",
            post(&good, &cancel_of(&running_id, &others)),
            404,
        )
        .await;
    assert_eq!(refused["error"], "not_found");
    let unknown = w
        .check(
            "/catalog/jobs/{job_id}/cancel",
            post(&good, &cancel_of(&running_id, "?force=1")),
            422,
        )
        .await;
    assert_eq!(unknown["error"], "unknown_field");
    w.check(
        "/catalog/jobs/{job_id}/cancel",
        post(&good, &cancel_of(&running_id, "?tenant_id=")),
        422,
    )
    .await;
    let running_now = get(&good, &job(&running_id)).send().await.unwrap();
    let running_now: Value = running_now.json().await.unwrap();
    assert_eq!(
        running_now["status"], "running",
        "the refused cancels changed nothing"
    );
    // Retrying: a job that has not ended, one whose kind is taken, unknown ids, bad queries,
    // a dead store; then, once the held jobs are let go, a retry that starts.
    let retry = |id: &str| format!("/catalog/jobs/{id}/retry");
    let active = w
        .check(
            "/catalog/jobs/{job_id}/retry",
            post(&good, &retry(&running_id)),
            409,
        )
        .await;
    assert_eq!(active["error"], "still_active");
    let taken = w
        .check(
            "/catalog/jobs/{job_id}/retry",
            post(&good, &retry(&failed_id)),
            409,
        )
        .await;
    assert_eq!(taken["error"], "already_running");
    assert_eq!(taken["job_id"], running_id.as_str());
    w.check(
        "/catalog/jobs/{job_id}/retry",
        post(&good, &retry("nope")),
        404,
    )
    .await;
    w.check(
        "/catalog/jobs/{job_id}/retry",
        post(&good, &format!("{}?tenant_id=a:b", retry(&failed_id))),
        422,
    )
    .await;
    w.check(
        "/catalog/jobs/{job_id}/retry",
        post(&dead, &retry(&failed_id)),
        503,
    )
    .await;
    feeds.release("oas");
    let again = w
        .check(
            "/catalog/jobs/{job_id}/retry",
            post(&good, &retry(waiting_id)),
            202,
        )
        .await;
    assert_eq!(again["retry_of"], waiting_id);
    assert_eq!(again["tenant_id"], other.as_str());
    // The limited app's tenant spent its minute: its ended enrich cannot be retried yet.
    let first_id = first["job_id"].as_str().unwrap();
    for _ in 0..200 {
        let read: Value = get(&limited, &job(first_id))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if read["status"] == "done" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // The limit counts per clock minute, and the walk has run for a while since the tenant's
    // first create: spend the current minute's one create (or find it spent) right before
    // the retry, away from a minute's edge, so the retry meets a spent minute.
    crate::helpers::clear_of_a_minute_edge().await;
    let spend = post(&limited, "/catalog/pair").form(&[("tenant_id", t.as_str())]);
    let spent = spend.send().await.unwrap().status().as_u16();
    assert!(spent == 202 || spent == 429, "{spent}");
    w.check(
        "/catalog/jobs/{job_id}/retry",
        post(&limited, &retry(first_id)),
        429,
    )
    .await;

    // A JSON start giving a key twice.
    let twice = w
        .check(
            "/catalog/{kind}",
            post(&good, "/catalog/enrich")
                .header("content-type", "application/json")
                .body(format!(r#"{{"tenant_id":"{t}","tenant_id":"{other}"}}"#)),
            422,
        )
        .await;
    assert_eq!(twice["error"], "duplicate_key");

    // With tokens: every /catalog operation answers 401 without a known token, and 403 where
    // tenant A's token names tenant B.
    let (a, b) = (tenant_a.as_str(), tenant_b.as_str());
    let guarded_requests = |token: Option<&str>, named: &str| {
        let with = |r: RequestBuilder| match token {
            Some(token) => r.bearer_auth(token),
            None => r,
        };
        vec![
            (
                "/catalog/{kind}",
                with(post(&guarded, "/catalog/enrich").form(&[("tenant_id", named)])),
            ),
            (
                "/catalog/jobs",
                with(get(&guarded, &format!("/catalog/jobs?tenant_id={named}"))),
            ),
            (
                "/catalog/products",
                with(post(&guarded, &format!("/catalog/products?tenant_id={named}")).json(&rows)),
            ),
            (
                "/catalog/products",
                with(get(
                    &guarded,
                    &format!("/catalog/products?tenant_id={named}"),
                )),
            ),
            (
                "/catalog/products/{product_key}",
                with(get(
                    &guarded,
                    &format!("/catalog/products/p1?tenant_id={named}"),
                )),
            ),
            (
                "/catalog/tenants/{tenant_id}",
                with(c.delete(format!("{guarded}/catalog/tenants/{named}"))),
            ),
            (
                "/catalog/events",
                with(get(&guarded, &format!("/catalog/events?tenant_id={named}"))),
            ),
        ]
    };
    for (template, request) in guarded_requests(None, a) {
        let body = w.check(template, request, 401).await;
        assert_eq!(body["error"], "unauthorized");
    }
    for (template, request) in guarded_requests(Some("not-a-known-token"), a) {
        w.check(template, request, 401).await;
    }
    for (template, request) in guarded_requests(Some(&a_token), b) {
        let body = w.check(template, request, 403).await;
        assert_eq!(body["error"], "forbidden");
    }
    for path in [
        job(&failed_id),
        cancel(&failed_id),
        retry(&failed_id),
        events(&failed_id),
    ] {
        let method = if path.ends_with("/cancel") || path.ends_with("/retry") {
            Method::POST
        } else {
            Method::GET
        };
        let template = if path.ends_with("/cancel") {
            "/catalog/jobs/{job_id}/cancel"
        } else if path.ends_with("/retry") {
            "/catalog/jobs/{job_id}/retry"
        } else if path.ends_with("/events") {
            "/catalog/jobs/{job_id}/events"
        } else {
            "/catalog/jobs/{job_id}"
        };
        w.check(template, c.request(method, format!("{guarded}{path}")), 401)
            .await;
    }
    // The forbidden requests changed nothing: B has no job and no product.
    let b_jobs: Value = get(&guarded, &format!("/catalog/jobs?tenant_id={b}"))
        .bearer_auth(operator)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(b_jobs["jobs"], json!([]));
    // A's own token is served.
    w.check(
        "/catalog/jobs",
        get(&guarded, &format!("/catalog/jobs?tenant_id={a}")).bearer_auth(&a_token),
        200,
    )
    .await;

    // A start and an import whose body stalls: 408 once `REQUEST_TIMEOUT_SECONDS` passes.
    let stalled = w
        .check(
            "/catalog/{kind}",
            post(&slow, "/catalog/enrich")
                .header("content-type", "application/x-www-form-urlencoded")
                .body(stalled_body("tenant_id=")),
            408,
        )
        .await;
    assert_eq!(stalled["error"], "request_timeout");
    w.check(
        "/catalog/products",
        post(&slow, &products)
            .header("content-type", "application/x-ndjson")
            .body(stalled_body("{\"product_key\"")),
        408,
    )
    .await;

    // The check can fail: a body the document does not allow is refused.
    let error_body = json!({"$ref": "#/components/schemas/ErrorBody"});
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        w.validate(
            &error_body,
            &json!({"error": "no_such_code", "message": "m"}),
            "a made-up error",
        )
    }));
    assert!(refused.is_err(), "an unknown error code must not validate");

    // Every answer the document lists was seen.
    let mut documented = BTreeSet::new();
    for (path, item) in w.doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for status in op["responses"].as_object().unwrap().keys() {
                documented.insert((path.clone(), method.clone(), status.clone()));
            }
        }
    }
    let unseen: Vec<_> = documented.difference(&w.seen).collect();
    assert!(
        unseen.is_empty(),
        "documented but never exercised: {unseen:?}"
    );
    let mut documented_headers = BTreeSet::new();
    for (path, item) in w.doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for (status, answer) in op["responses"].as_object().unwrap() {
                for name in answer["headers"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, _)| k)
                {
                    documented_headers.insert((
                        path.clone(),
                        method.clone(),
                        status.clone(),
                        name.clone(),
                    ));
                }
            }
        }
    }
    let unseen: Vec<_> = documented_headers.difference(&w.seen_headers).collect();
    assert!(
        unseen.is_empty(),
        "documented headers never seen: {unseen:?}"
    );
}

#[test]
fn the_router_is_built_only_from_documented_handlers() {
    // utoipa-axum's `routes!` will not compile a handler without `#[utoipa::path]`; a plain
    // `.route(…)` would bypass it, so none may exist in the HTTP layer.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/api");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let source = std::fs::read_to_string(&path).unwrap();
            for bypass in [
                ".route(",
                ".route_service(",
                ".nest(",
                ".nest_service(",
                ".merge(",
            ] {
                assert!(
                    !source.contains(bypass),
                    "{} calls {bypass}: register routes with routes!(…) and #[utoipa::path]",
                    path.display()
                );
            }
        }
    }
}

#[tokio::test]
async fn every_documented_operation_has_a_description_and_the_document_is_openapi_3_1() {
    let doc = serde_json::to_value(catalog_jobs::api::openapi::document()).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            assert!(
                op["description"].as_str().is_some_and(|d| !d.is_empty())
                    || op["summary"].is_string(),
                "{method} {path} has no description"
            );
            let methods = Method::from_bytes(method.to_uppercase().as_bytes());
            assert!(methods.is_ok());
        }
    }
}

#[test]
fn every_catalog_operation_requires_the_bearer_scheme_and_the_operations_routes_stay_open() {
    let doc = serde_json::to_value(catalog_jobs::api::openapi::document()).unwrap();
    let scheme = &doc["components"]["securitySchemes"]["bearer"];
    assert_eq!(scheme["type"], "http");
    assert_eq!(scheme["scheme"], "bearer");
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if path.starts_with("/catalog") {
                assert_eq!(
                    op["security"],
                    json!([{"bearer": []}]),
                    "{method} {path} does not require the bearer scheme"
                );
                let unauthorized = &op["responses"]["401"];
                assert!(
                    unauthorized["headers"]["WWW-Authenticate"].is_object(),
                    "{method} {path} does not document 401 with WWW-Authenticate"
                );
            } else {
                assert!(op.get("security").is_none(), "{method} {path} is open");
                assert!(
                    op["responses"].get("401").is_none(),
                    "{method} {path} is open"
                );
            }
        }
    }
}

/// The official JSON Schema of OpenAPI 3.1 documents (source and licence in tests/data/README.md).
const OPENAPI_3_1_SCHEMA: &str = include_str!("../data/openapi-3.1-schema.json");

/// What is wrong with `doc` as an OpenAPI 3.1 document: where it breaks the official schema,
/// each `operationId` used twice (generators name a client's methods by them), each `$ref`
/// that leads nowhere, and each component schema that is not valid JSON Schema 2020-12.
fn document_problems(doc: &Value) -> Vec<String> {
    let official: Value =
        serde_json::from_str(OPENAPI_3_1_SCHEMA).expect("the vendored schema is JSON");
    let validator = jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&official)
        .expect("the official schema compiles");
    let mut problems: Vec<String> = validator
        .iter_errors(doc)
        .map(|e| format!("OpenAPI 3.1 schema: {e} at {}", e.instance_path()))
        .collect();
    let mut ids = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for (method, op) in item.as_object().into_iter().flatten() {
            if let Some(id) = op["operationId"].as_str() {
                if !ids.insert(id) {
                    problems.push(format!(
                        "operationId `{id}` is used twice ({method} {path})"
                    ));
                }
            }
        }
    }
    let mut refs = Vec::new();
    collect_refs(doc, &mut refs);
    for target in refs {
        let resolves = target
            .strip_prefix('#')
            .is_some_and(|pointer| doc.pointer(pointer).is_some());
        if !resolves {
            problems.push(format!("$ref `{target}` leads nowhere"));
        }
    }
    for (name, schema) in doc["components"]["schemas"]
        .as_object()
        .into_iter()
        .flatten()
    {
        if let Err(e) = jsonschema::draft202012::meta::validate(schema) {
            problems.push(format!("schema {name} is not JSON Schema 2020-12: {e}"));
        }
    }
    problems
}

/// Every `$ref` in `value`, in document order.
fn collect_refs(value: &Value, refs: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get("$ref") {
                refs.push(target.clone());
            }
            map.values().for_each(|v| collect_refs(v, refs));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, refs)),
        _ => {}
    }
}

#[tokio::test]
async fn the_served_document_is_valid_openapi_3_1_with_unique_operation_ids() {
    let app =
        crate::helpers::spawn_catalog_app(crate::helpers::Backend::Memory, test_config()).await;
    let doc = app.get_json("/openapi.json").await;
    let problems = document_problems(&doc);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_document_check_finds_a_twice_used_operation_id_a_dangling_ref_and_a_schema_breach() {
    type Plant = fn(&mut Value);
    let cases: [(&str, Plant, &str); 4] = [
        (
            "a second `readyz`",
            |d| d["paths"]["/healthz"]["get"]["operationId"] = json!("readyz"),
            "operationId `readyz` is used twice",
        ),
        (
            "a ref to no schema",
            |d| {
                d["paths"]["/healthz"]["get"]["responses"]["200"]["content"]["application/json"]
                    ["schema"] = json!({"$ref": "#/components/schemas/Nowhere"})
            },
            "`#/components/schemas/Nowhere` leads nowhere",
        ),
        (
            "no info",
            |d| {
                d.as_object_mut().unwrap().remove("info");
            },
            "OpenAPI 3.1 schema: \"info\" is a required property",
        ),
        (
            "a schema of a made-up type",
            |d| d["components"]["schemas"]["ErrorBody"]["type"] = json!("record"),
            "schema ErrorBody is not JSON Schema 2020-12",
        ),
    ];
    let served = serde_json::to_value(catalog_jobs::api::openapi::document()).unwrap();
    assert!(document_problems(&served).is_empty());
    for (what, plant, expected) in cases {
        let mut doc = served.clone();
        plant(&mut doc);
        let problems = document_problems(&doc);
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "{what}: expected `{expected}` among {problems:#?}"
        );
    }
}
