//! The catalogue jobs doing real work: through the real service on both stores (sync,
//! enrich, pair, the products API), and directly (the progress contract, pairing quality).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use catalog_jobs::catalog::pair::PairParams;
use catalog_jobs::catalog::products::{CatalogStoreError, MemoryCatalog, Product, ProductKey};
use catalog_jobs::catalog::{demo, enrich, run_unfenced, sync, Catalog, CatalogSettings};
use catalog_jobs::jobs::fence::Unfenced;
use catalog_jobs::jobs::progress::guarded;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::both_stores;
use crate::helpers::{
    demo_catalog, serve, spawn_catalog_app, status_and_json, store_pages, strings_of, temp_dir,
    tenant, test_config, Backend, TestApp,
};

both_stores!(
    the_quickstart_syncs_enriches_pairs_and_shows_a_products_neighbours,
    sync_reports_each_source_and_fails_only_when_none_could_be_read,
    sources_outside_the_allowed_places_are_refused_before_a_job_exists,
    an_http_feed_on_an_allowed_host_is_streamed_in,
    a_json_import_keeps_its_good_rows_and_reports_each_bad_one_by_line,
    ndjson_and_csv_imports_create_update_and_leave_unchanged_rows_be,
    imports_read_what_spreadsheets_save_and_a_line_not_utf8_is_one_invalid_row,
    a_bad_import_body_is_refused_with_its_code_and_a_product_is_read_by_tenant,
    paging_visits_every_product_exactly_once,
    every_page_holds_at_most_limit_and_paging_visits_each_product_once,
    paging_while_the_catalogue_grows_lists_each_product_at_most_once,
    enrich_resumes_skipping_unchanged_products_unless_forced,
    a_body_without_a_content_type_is_told_what_its_own_route_reads,
    a_price_is_in_its_products_currency_else_price_currency_and_a_code_not_iso_4217_is_a_row_error,
);

/// A feeds directory of the test's own, with a subdirectory.
fn feeds_dir() -> PathBuf {
    let dir = temp_dir("feeds");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    dir
}

async fn post(app: &TestApp, kind: &str, form: &[(&str, &str)]) -> (u16, Value) {
    status_and_json(app.start(kind, form).await).await
}

const JSON: &str = "application/json";

async fn the_quickstart_syncs_enriches_pairs_and_shows_a_products_neighbours(b: Backend) {
    let app = spawn_catalog_app(b, test_config()).await;
    let t = tenant();
    let ts = t.as_str();
    let sync_demo = [
        ("tenant_id", ts),
        ("source", "demo.jsonl"),
        ("wait", "true"),
    ];
    let (status, report) = post(&app, "sync", &sync_demo).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        report["totals"],
        json!({"read": 2400, "created": 2400, "updated": 0, "unchanged": 0, "invalid": 0})
    );
    assert_eq!(report["sources"][0]["status"], "ok");

    let (status, report) = post(&app, "enrich", &[("tenant_id", ts), ("wait", "true")]).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["products"], 2400);
    assert_eq!(report["skipped"], 0);
    assert_eq!(report["batches"], 5);
    assert_eq!(
        report["extracted"].as_u64().unwrap() + report["unextractable"].as_u64().unwrap(),
        2400
    );
    assert!(report["extracted"].as_u64().unwrap() > 2000);

    let (status, report) = post(&app, "pair", &[("tenant_id", ts), ("wait", "true")]).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["products"], 2400);
    assert!(report["paired"].as_u64().unwrap() > 2000, "{report}");

    let p = app.product(ts, "fam000001-v0").await;
    assert_eq!(p["enrichment"]["state"], "enriched");
    assert!(
        !p["enrichment"]["attributes"]
            .as_object()
            .unwrap()
            .is_empty(),
        "{p}"
    );
    let neighbours = strings_of(&p["neighbours"], "product_key");
    assert!(
        neighbours.contains(&"fam000001-v1"),
        "its sibling is a neighbour: {p}"
    );
    assert!(p["neighbours"][0]["score"].as_f64().unwrap() > 0.5);
    assert!(p["neighbours"][0]["name"].is_string());

    // A re-sync finds nothing changed, and a re-enrich skips everything.
    let (_, report) = post(&app, "sync", &sync_demo).await;
    assert_eq!(report["totals"]["unchanged"], 2400);
    let (_, report) = post(&app, "enrich", &[("tenant_id", ts), ("wait", "true")]).await;
    assert_eq!(
        (report["skipped"].as_u64(), report["batches"].as_u64()),
        (Some(2400), Some(0))
    );
}

async fn sync_reports_each_source_and_fails_only_when_none_could_be_read(b: Backend) {
    let dir = feeds_dir();
    std::fs::write(
        dir.join("good.jsonl"),
        concat!(
            r#"{"product_key":"a1","name":"Acme Mug 350 ml Black","price_cents":1200,"taxonomy_path":["Home","Mugs"]}"#, "\n",
            "{not json}\n",
            r#"{"product_key":"a2","name":""}"#, "\n",
            r#"{"product_key":"a3","name":"Acme Mug 350 ml White","taxonomy_path":"Home > Mugs"}"#, "\n",
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("sub/more.csv"),
        // Saved by a spreadsheet: a byte-order mark and semicolons.
        "\u{feff}product_key;name;price_cents\nc1;Lumen Lamp;4000\nc2;Lumen Lamp XL;not-a-price\n",
    )
    .unwrap();
    let server = feed_server(vec![]).await;
    let mut config = test_config();
    config.feeds_dir = dir.clone();
    config.sync_allowed_hosts = vec![format!("127.0.0.1:{}", server.port())];
    let app = spawn_catalog_app(b, config).await;
    let t = tenant();
    let broken = format!("http://127.0.0.1:{}/missing.jsonl", server.port());
    let (status, report) = post(
        &app,
        "sync",
        &[
            ("tenant_id", t.as_str()),
            ("source", "good.jsonl"),
            ("source", "sub/more.csv"),
            ("source", &broken),
            ("wait", "true"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{report}");
    let sources = report["sources"].as_array().unwrap();
    assert_eq!(sources[0]["status"], "ok");
    assert_eq!(
        (
            sources[0]["read"].as_u64(),
            sources[0]["created"].as_u64(),
            sources[0]["invalid"].as_u64()
        ),
        (Some(4), Some(2), Some(2))
    );
    assert_eq!(sources[0]["errors"][0]["line"], 2);
    assert_eq!(sources[1]["status"], "ok");
    assert_eq!(
        (
            sources[1]["created"].as_u64(),
            sources[1]["invalid"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(sources[2]["status"], "failed");
    assert_eq!(sources[2]["error"], "SourceNotFound");
    assert_eq!(sources[2]["http_status"], 404);
    assert_eq!(report["totals"]["created"], 3);
    assert_eq!(report["sources_failed"], 1);
    let p = app.product(t.as_str(), "a3").await;
    assert_eq!(p["taxonomy_path"], json!(["Home", "Mugs"]));

    // Every source unreadable: the job fails, with the class only.
    let (status, body) = post(
        &app,
        "sync",
        &[
            ("tenant_id", t.as_str()),
            ("source", &broken),
            ("wait", "true"),
        ],
    )
    .await;
    assert_eq!(status, 502);
    assert_eq!(body["job"]["error"], "SourceNotFound");
    assert_eq!(body["job"]["result"]["sources"][0]["http_status"], 404);
}

async fn sources_outside_the_allowed_places_are_refused_before_a_job_exists(b: Backend) {
    let dir = feeds_dir();
    std::fs::write(dir.join("ok.jsonl"), "").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", dir.join("escape.jsonl")).unwrap();
    std::os::unix::fs::symlink("/etc", dir.join("etc")).unwrap();
    // Outside, and nothing there: the same answer as outside with a file there.
    std::os::unix::fs::symlink("/etc/no-such-feed", dir.join("nothing.jsonl")).unwrap();
    let mut config = test_config();
    config.feeds_dir = dir;
    config.sync_allowed_hosts = vec!["feeds.example.com".into(), "mirror.example.com:8443".into()];
    let app = spawn_catalog_app(b, config).await;
    let t = tenant();
    for (source, code) in [
        ("/etc/passwd", "source_not_allowed"),
        ("../Cargo.toml", "source_not_allowed"),
        ("sub/../../x.jsonl", "source_not_allowed"),
        ("escape.jsonl", "source_not_allowed"),
        ("etc/hostname", "source_not_allowed"),
        ("etc/no-such-feed", "source_not_allowed"),
        ("nothing.jsonl", "source_not_allowed"),
        // An allowed host on another port (the Redis port, the service's own API) is refused.
        (
            "http://feeds.example.com:6379/feed.jsonl",
            "source_not_allowed",
        ),
        (
            "https://feeds.example.com:8001/feed.jsonl",
            "source_not_allowed",
        ),
        (
            "https://mirror.example.com/feed.jsonl",
            "source_not_allowed",
        ),
        (
            "http://mirror.example.com:8444/feed.jsonl",
            "source_not_allowed",
        ),
        ("http://evil.example.org/feed.jsonl", "source_not_allowed"),
        (
            "https://feeds.example.com.evil.org/feed.jsonl",
            "source_not_allowed",
        ),
        (
            "http://user:pw@feeds.example.com/feed.jsonl",
            "source_not_allowed",
        ),
        ("ftp://feeds.example.com/feed.jsonl", "source_not_allowed"),
        ("file:///etc/passwd", "source_not_allowed"),
        ("missing.jsonl", "source_not_found"),
        ("sub", "source_not_found"),
        ("", "invalid_field"),
    ] {
        let (status, body) = post(
            &app,
            "sync",
            &[
                ("tenant_id", t.as_str()),
                ("source", source),
                ("source", "ok.jsonl"),
            ],
        )
        .await;
        assert_eq!(status, 422, "{source}: {body}");
        assert_eq!(body["error"], code, "{source}: {body}");
        assert_eq!(body["field"], "source");
    }
    let (status, body) = post(&app, "sync", &[("tenant_id", t.as_str())]).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (422, Some("missing_field"))
    );
    assert!(
        app.store.recent(&t, 10).await.unwrap().is_empty(),
        "no refused sync created a job"
    );
}

/// A tiny HTTP server on loopback serving `files` (path → body); anything else is 404.
async fn feed_server(files: Vec<(&'static str, String)>) -> std::net::SocketAddr {
    use axum::routing::get;
    let files: Arc<HashMap<String, String>> =
        Arc::new(files.into_iter().map(|(k, v)| (k.to_owned(), v)).collect());
    let router = axum::Router::new().route(
        "/{*path}",
        get(
            move |axum::extract::Path(path): axum::extract::Path<String>| {
                let files = files.clone();
                async move {
                    match files.get(&path) {
                        Some(body) => (axum::http::StatusCode::OK, body.clone()),
                        None => (axum::http::StatusCode::NOT_FOUND, String::new()),
                    }
                }
            },
        ),
    );
    serve(router).await
}

async fn an_http_feed_on_an_allowed_host_is_streamed_in(b: Backend) {
    let rows: String = demo::generate(1200, 3)
        .iter()
        .map(|p| serde_json::to_string(p).unwrap() + "\n")
        .collect();
    let server = feed_server(vec![
        ("feeds/today.jsonl", rows),
        ("feeds/today.csv", "product_key,name\nz1,Zen Chair\n".into()),
    ])
    .await;
    let mut config = test_config();
    config.sync_allowed_hosts = vec![format!("127.0.0.1:{}", server.port())];
    let app = spawn_catalog_app(b, config).await;
    let t = tenant();
    let jsonl = format!("http://127.0.0.1:{}/feeds/today.jsonl", server.port());
    let csv = format!("http://127.0.0.1:{}/feeds/today.csv", server.port());
    let (status, report) = post(
        &app,
        "sync",
        &[
            ("tenant_id", t.as_str()),
            ("source", &jsonl),
            ("source", &csv),
            ("wait", "true"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["sources"][0]["created"], 1200);
    assert_eq!(report["sources"][1]["created"], 1);
}

/// The catalogue app with a 64 KiB body limit, so an import can exceed it.
async fn importing_app(b: Backend) -> TestApp {
    let mut config = test_config();
    config.max_body_bytes = 64 * 1024;
    spawn_catalog_app(b, config).await
}

const NDJSON: &str = "application/x-ndjson";
const CSV: &str = "text/csv";

/// A report's counts, by name (`None` where it has no such count).
fn counts(report: &Value, names: &[&str]) -> Vec<Option<u64>> {
    names.iter().map(|n| report[*n].as_u64()).collect()
}

/// The currency the product view names for `key` (once: the product's own field is not
/// repeated beside it).
async fn currency_of(app: &TestApp, t: &str, key: &str) -> Value {
    let r = app
        .get(&format!("/catalog/products/{key}?tenant_id={t}"))
        .await;
    assert_eq!(r.status(), 200, "product {key}");
    let text = r.text().await.unwrap();
    assert_eq!(text.matches("\"currency\"").count(), 1, "{text}");
    serde_json::from_str::<Value>(&text).unwrap()["currency"].clone()
}

async fn a_price_is_in_its_products_currency_else_price_currency_and_a_code_not_iso_4217_is_a_row_error(
    b: Backend,
) {
    let mut config = test_config();
    config.price_currency = Some("EUR".into());
    let app = spawn_catalog_app(b, config).await;
    let t = tenant();
    let rows = concat!(
        r#"{"product_key":"usd","name":"Mug","price_cents":1200,"currency":"USD"}"#,
        "\n",
        r#"{"product_key":"plain","name":"Cup","price_cents":900}"#,
        "\n",
        r#"{"product_key":"low","name":"Bowl","price_cents":500,"currency":"usd"}"#,
        "\n",
        r#"{"product_key":"gone","name":"Plate","price_cents":500,"currency":"HRK"}"#,
        "\n",
        r#"{"product_key":"euro","name":"Jug","price_cents":500,"currency":"EURO"}"#,
        "\n",
    );
    let (status, r) = status_and_json(app.import(t.as_str(), NDJSON, rows).await).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(counts(&r, &["created", "invalid"]), [Some(2), Some(3)]);
    let errors: Vec<(u64, &str)> = r["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["line"].as_u64().unwrap(), e["error"].as_str().unwrap()))
        .collect();
    let rule = "is not an active ISO 4217 code in capitals, e.g. EUR, USD, GBP";
    assert_eq!(
        errors,
        [
            (
                3,
                format!("currency `usd` {rule} (did you mean USD?)").as_str()
            ),
            (4, format!("currency `HRK` {rule}").as_str()),
            (5, format!("currency `EURO` {rule}").as_str()),
        ]
    );
    let csv = "product_key,name,price_cents,currency\nc1,Lamp,4000,NOK\nc2,Lamp XL,4100,\n";
    let (status, r) = status_and_json(app.import(t.as_str(), CSV, csv).await).await;
    assert_eq!((status, r["created"].as_u64()), (200, Some(2)), "{r}");
    for (key, currency) in [
        ("usd", "USD"),
        ("plain", "EUR"),
        ("c1", "NOK"),
        ("c2", "EUR"),
    ] {
        assert_eq!(currency_of(&app, t.as_str(), key).await, currency, "{key}");
    }
    // Without PRICE_CURRENCY, a product that names none has no currency to show.
    let app = spawn_catalog_app(b, test_config()).await;
    let (status, _) = status_and_json(app.import(t.as_str(), NDJSON, rows).await).await;
    assert_eq!(status, 200);
    assert_eq!(currency_of(&app, t.as_str(), "usd").await, "USD");
    assert_eq!(currency_of(&app, t.as_str(), "plain").await, Value::Null);
}

async fn a_json_import_keeps_its_good_rows_and_reports_each_bad_one_by_line(b: Backend) {
    let app = importing_app(b).await;
    let t = tenant();
    let rows = json!([
        {"product_key": "j1", "name": "Oak Desk 120 x 60 cm", "price_cents": 25000, "taxonomy_path": ["Furniture"]},
        {"product_key": "bad key!", "name": "x"},
        {"product_key": "j2", "name": "Oak Desk 140 x 70 cm", "price_cents": -5},
        {"product_key": "j3", "name": "Desk Lamp", "attributes": {"colour": "Gray"}, "colour": "x"},
        {"product_key": "j4", "name": "Desk Lamp Brass", "brand": "Lumen"}
    ]);
    let (status, r) = status_and_json(app.import(t.as_str(), JSON, rows.to_string()).await).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        counts(&r, &["read", "created", "invalid"]),
        [Some(5), Some(2), Some(3)]
    );
    let lines: Vec<u64> = r["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, [2, 3, 4]);
}

async fn ndjson_and_csv_imports_create_update_and_leave_unchanged_rows_be(b: Backend) {
    let app = importing_app(b).await;
    let t = tenant();
    let j1 = r#"{"product_key":"j1","name":"Oak Desk 120 x 60 cm","price_cents":25000,"taxonomy_path":["Furniture"]}"#;
    let (status, r) =
        status_and_json(app.import(t.as_str(), NDJSON, format!("{j1}\n")).await).await;
    assert_eq!((status, r["created"].as_u64()), (200, Some(1)), "{r}");
    let ndjson = format!("{{\"product_key\":\"n1\",\"name\":\"Tea Cup\"}}\n\n{j1}\n{{oops\n");
    let (status, r) = status_and_json(app.import(t.as_str(), NDJSON, ndjson).await).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        counts(&r, &["created", "unchanged", "invalid"]),
        [Some(1), Some(1), Some(1)]
    );
    let csv = "product_key,name,taxonomy_path,price_cents\nc1,Linen Shirt Off-White - M,Apparel > Shirts,3900\nn1,Tea Cup Large,,\nc3,,x,1\n";
    let (status, r) = status_and_json(app.import(t.as_str(), CSV, csv).await).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        counts(&r, &["created", "updated", "invalid"]),
        [Some(1), Some(1), Some(1)]
    );
    let c1 = app.product(t.as_str(), "c1").await;
    assert_eq!(c1["taxonomy_path"], json!(["Apparel", "Shirts"]));
    assert_eq!(c1["enrichment"]["state"], "not_enriched");
    assert!(c1["content_hash"].is_string());
}

async fn imports_read_what_spreadsheets_save_and_a_line_not_utf8_is_one_invalid_row(b: Backend) {
    let app = importing_app(b).await;
    let t = tenant();
    // As spreadsheets save it: a byte-order mark, semicolons, headers in their own words.
    let csv = "\u{feff}Product Key;Name;Price_Cents\ns1;Stoneware Bowl 15 cm;1200\ns2;Stoneware Bowl 20 cm;1500\n";
    let (status, r) = status_and_json(app.import(t.as_str(), CSV, csv).await).await;
    assert_eq!(
        (status, r["created"].as_u64(), r["invalid"].as_u64()),
        (200, Some(2), Some(0)),
        "{r}"
    );
    assert_eq!(app.product(t.as_str(), "s2").await["price_cents"], 1500);
    let bom = "\u{feff}{\"product_key\":\"b1\",\"name\":\"Bom Thing\"}\n";
    let (status, r) = status_and_json(app.import(t.as_str(), NDJSON, bom).await).await;
    assert_eq!((status, r["created"].as_u64()), (200, Some(1)), "{r}");
    // One line that is not UTF-8 is one invalid row, not a refused body.
    let mut body = b"{\"product_key\":\"u1\",\"name\":\"Fine\"}\n".to_vec();
    body.extend_from_slice(b"{\"product_key\":\"u2\",\"name\":\"\xff\xfe\"}\n");
    let (_, r) = status_and_json(app.import(t.as_str(), NDJSON, body).await).await;
    let got = (
        r["created"].as_u64(),
        r["invalid"].as_u64(),
        r["errors"][0]["line"].as_u64(),
    );
    assert_eq!(got, (Some(1), Some(1), Some(2)), "{r}");
}

async fn a_bad_import_body_is_refused_with_its_code_and_a_product_is_read_by_tenant(b: Backend) {
    let app = importing_app(b).await;
    let t = tenant();
    for (ct, body, status, code) in [
        (JSON, "{\"product_key\":".to_owned(), 400, "malformed_body"),
        (JSON, "42".to_owned(), 400, "malformed_body"),
        ("text/plain", "x".to_owned(), 415, "unsupported_media_type"),
        (NDJSON, "x".repeat(70 * 1024), 413, "payload_too_large"),
    ] {
        let (got, r) = status_and_json(app.import(t.as_str(), ct, body).await).await;
        assert_eq!((got, r["error"].as_str()), (status, Some(code)), "{ct}");
        if status == 413 {
            // Refused by its Content-Length: the report says nothing was saved.
            assert_eq!(r["report"]["read"], 0, "{r}");
        }
    }
    let r = app
        .get(&format!("/catalog/products/nope?tenant_id={t}"))
        .await;
    assert_eq!(r.status(), 404);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "not_found");
    let r = app.get("/catalog/products/j1").await;
    assert_eq!(r.status(), 422, "tenant_id is required");
}

async fn a_body_without_a_content_type_is_told_what_its_own_route_reads(b: Backend) {
    let app = spawn_catalog_app(b, test_config()).await;
    let t = tenant();
    let send = |path: String| {
        app.client
            .post(app.url(&path))
            .body("product_key,name\np1,x\n")
            .send()
    };
    // An import names the import formats only, never the start forms (nor the other way).
    let r = send(format!("/catalog/products?tenant_id={t}"))
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    let message = r.json::<Value>().await.unwrap()["message"].to_string();
    assert!(message.contains("text/csv"), "{message}");
    assert!(!message.contains("x-www-form-urlencoded"), "{message}");
    let r = send(format!("/catalog/sync?tenant_id={t}")).await.unwrap();
    assert_eq!(r.status(), 415);
    let message = r.json::<Value>().await.unwrap()["message"].to_string();
    assert!(message.contains("x-www-form-urlencoded"), "{message}");
    assert!(!message.contains("text/csv"), "{message}");
    let r = app
        .get(&format!("/catalog/products/p1?tenant_id={t}"))
        .await;
    assert_eq!(r.status(), 404, "a refused import writes nothing");
}

async fn paging_visits_every_product_exactly_once(b: Backend) {
    let app = spawn_catalog_app(b, test_config()).await;
    let t = tenant();
    let rows: String = demo::generate(730, 11)
        .iter()
        .map(|p| serde_json::to_string(p).unwrap() + "\n")
        .collect();
    let r = app.import(t.as_str(), "application/x-ndjson", rows).await;
    assert_eq!(r.status(), 200);
    let mut seen = std::collections::HashSet::new();
    let first = format!("/catalog/products?tenant_id={t}&limit=100");
    for page in app.pages(&first, 100).await {
        for p in page["products"].as_array().unwrap() {
            assert!(
                seen.insert(p["product_key"].as_str().unwrap().to_owned()),
                "listed twice: {p}"
            );
        }
    }
    assert_eq!(seen.len(), 730);
    for bad in [
        "limit=0",
        "limit=501",
        "cursor=%20%20bad%20cursor",
        "cursor=garbage",
    ] {
        let r = app
            .get(&format!("/catalog/products?tenant_id={t}&{bad}"))
            .await;
        assert_eq!(r.status(), 422, "{bad}");
    }
}

/// Enough products that Redis stores the hash as a hash table (not one listpack).
const PAGED_PRODUCTS: usize = 1_200;

async fn every_page_holds_at_most_limit_and_paging_visits_each_product_once(b: Backend) {
    let (store, t, products) = demo_catalog(b, PAGED_PRODUCTS, 5).await;
    let all: std::collections::BTreeSet<String> = products
        .iter()
        .map(|p| p.product_key.as_str().to_owned())
        .collect();
    assert_eq!(all.len(), PAGED_PRODUCTS, "the demo keys are distinct");
    tokio::task::spawn_blocking(move || {
        for limit in [1, 2, 7, 500] {
            let mut seen = std::collections::BTreeSet::new();
            for page in store_pages(|cursor| store.page(&t, limit, cursor)) {
                assert!(
                    page.len() <= limit,
                    "limit {limit}: a page of {}",
                    page.len()
                );
                for s in page {
                    let key = s.product.product_key.as_str().to_owned();
                    assert!(
                        seen.insert(key.clone()),
                        "limit {limit}: {key} listed twice"
                    );
                }
            }
            assert_eq!(seen, all, "limit {limit}: every product, once");
        }
        // Products removed (on Redis the listing's index then counts keys the hash no longer
        // holds, and is made again): the rest, each once.
        let gone: Vec<ProductKey> = products
            .iter()
            .step_by(3)
            .map(|p| p.product_key.clone())
            .collect();
        assert_eq!(store.remove(&t, &gone).unwrap(), gone.len() as u64);
        let listed: Vec<String> = store_pages(|cursor| store.page(&t, 50, cursor))
            .into_iter()
            .flatten()
            .map(|s| s.product.product_key.as_str().to_owned())
            .collect();
        let left: Vec<&String> = all
            .iter()
            .filter(|k| !gone.iter().any(|g| g.as_str() == k.as_str()))
            .collect();
        assert_eq!(
            listed.iter().collect::<Vec<_>>(),
            left,
            "the rest, in key order, once"
        );
        // A page's cursor, for this tenant, and what it must refuse: made-up cursors (numbers
        // HSCAN would take: a page from nowhere, or an empty last page), and on Redis, whose
        // cursor is a scan position of one tenant's hash, the same cursor given for another
        // tenant (the embedded store's is a key, a place in any tenant's key order).
        let (_, Some(handed)) = store.page(&t, 7, None).unwrap() else {
            panic!("a first page of 7 leaves more");
        };
        assert!(store.page(&t, 7, Some(&handed)).is_ok());
        let other = tenant();
        let mut refused = vec![
            (&t, "garbage"),
            (&t, "5"),
            (&t, "18446744073709551615"),
            (&t, "0-zzz"),
        ];
        if b == Backend::Redis {
            refused.push((&other, handed.as_str()));
        }
        for (whose, cursor) in refused {
            assert!(
                matches!(
                    store.page(whose, 7, Some(cursor)),
                    Err(CatalogStoreError::BadCursor)
                ),
                "a cursor the listing did not hand out is refused: {cursor}"
            );
        }
    })
    .await
    .unwrap();
}

/// The catalogue a client pages through while imports keep adding to it.
const GROWING_FROM: usize = 20_000;

/// Products of `n` new keys (`grown-<batch>-<i>`), a batch of imports made while paging.
fn grown(batch: usize, n: usize) -> String {
    demo::generate(n, batch as u64)
        .into_iter()
        .enumerate()
        .map(|(i, mut p)| {
            p.product_key = ProductKey::parse(&format!("grown-{batch}-{i}")).unwrap();
            serde_json::to_string(&p).unwrap() + "\n"
        })
        .collect()
}

/// Paging with limit=100 through 20,000 products while another task imports new keys (Redis
/// rehashes the growing hash under the listing): no product is listed twice, and every
/// product there throughout is listed once.
async fn paging_while_the_catalogue_grows_lists_each_product_at_most_once(b: Backend) {
    let app = Arc::new(spawn_catalog_app(b, test_config()).await);
    let t = tenant();
    let rows: String = demo::generate(GROWING_FROM, 17)
        .iter()
        .map(|p| serde_json::to_string(p).unwrap() + "\n")
        .collect();
    let r = app.import(t.as_str(), NDJSON, rows).await;
    assert_eq!(r.status(), 200);
    let stop = CancellationToken::new();
    let grower = {
        let (app, t, stop) = (app.clone(), t.clone(), stop.clone());
        tokio::spawn(async move {
            let mut batch = 0;
            while !stop.is_cancelled() {
                let r = app.import(t.as_str(), NDJSON, grown(batch, 400)).await;
                assert_eq!(r.status(), 200);
                batch += 1;
            }
            batch
        })
    };
    let mut seen: HashMap<String, usize> = HashMap::new();
    let first = format!("/catalog/products?tenant_id={t}&limit=100");
    let pages = app.pages(&first, 10_000).await;
    stop.cancel();
    let batches = grower.await.unwrap();
    for page in &pages {
        let products = page["products"].as_array().unwrap();
        assert!(products.len() <= 100, "a page of {}", products.len());
        for p in products {
            *seen
                .entry(p["product_key"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
    }
    let twice: Vec<&String> = seen
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(k, _)| k)
        .collect();
    assert!(
        twice.is_empty(),
        "{} products listed twice over {} pages while {batches} imports added keys: {:?}",
        twice.len(),
        pages.len(),
        &twice[..twice.len().min(5)]
    );
    let throughout = seen.keys().filter(|k| !k.starts_with("grown-")).count();
    assert_eq!(
        throughout, GROWING_FROM,
        "every product there throughout, once"
    );
    assert!(batches > 0, "imports added keys while the listing paged");
}

async fn enrich_resumes_skipping_unchanged_products_unless_forced(b: Backend) {
    let mut config = test_config();
    config.enrich_batch_size = 3;
    let app = spawn_catalog_app(b, config).await;
    let t = tenant();
    let url = app.url(&format!("/catalog/products?tenant_id={t}"));
    let body = json!([
        {"product_key": "p1", "name": "Crew Tee Black - M"},
        {"product_key": "p2", "name": "Gift Card"},
        {"product_key": "p3", "name": "Olive Oil 500 ml"},
        {"product_key": "p4", "name": "Mystery Box"},
        {"product_key": "p5", "name": "Socks Pack of 3"},
    ]);
    app.client.post(&url).json(&body).send().await.unwrap();
    let (_, r) = post(&app, "enrich", &[("tenant_id", t.as_str()), ("wait", "1")]).await;
    assert_eq!(
        r,
        json!({"products": 5, "extracted": 3, "unextractable": 2, "skipped": 0, "batches": 2})
    );
    assert_eq!(
        app.product(t.as_str(), "p2").await["enrichment"]["state"],
        "unextractable"
    );
    assert_eq!(
        app.product(t.as_str(), "p1").await["enrichment"]["attributes"],
        json!({"color": "black", "size": "M"})
    );
    // One product changes: only it is extracted again; its old attributes read as stale until then.
    app.client
        .post(&url)
        .json(&json!([{"product_key": "p2", "name": "Gift Card 50 g"}]))
        .send()
        .await
        .unwrap();
    assert_eq!(
        app.product(t.as_str(), "p2").await["enrichment"]["state"],
        "stale"
    );
    let (_, r) = post(&app, "enrich", &[("tenant_id", t.as_str()), ("wait", "1")]).await;
    assert_eq!(
        r,
        json!({"products": 5, "extracted": 1, "unextractable": 0, "skipped": 4, "batches": 1})
    );
    let (_, r) = post(
        &app,
        "enrich",
        &[("tenant_id", t.as_str()), ("wait", "1"), ("force", "true")],
    )
    .await;
    assert_eq!(
        r,
        json!({"products": 5, "extracted": 4, "unextractable": 1, "skipped": 0, "batches": 2})
    );
    let (status, r) = post(
        &app,
        "enrich",
        &[("tenant_id", t.as_str()), ("force", "perhaps")],
    )
    .await;
    assert_eq!((status, r["error"].as_str()), (422, Some("invalid_field")));
}

// ---------------------------------------------------------------------------------------
// Directly, without the service

/// A token nobody cancels.
fn never() -> CancellationToken {
    CancellationToken::new()
}

fn catalog_with(
    products: &[Product],
    dir: Option<PathBuf>,
) -> (Catalog, catalog_jobs::jobs::TenantId) {
    let catalog = Catalog {
        store: Arc::new(MemoryCatalog::new()),
        settings: CatalogSettings {
            feeds_dir: dir.unwrap_or_else(|| PathBuf::from("examples/feeds")),
            enrich_batch: 200,
            ..CatalogSettings::default()
        },
    };
    let t = tenant();
    catalog.store.upsert(&t, products, &Unfenced).unwrap();
    (catalog, t)
}

type Job = fn(&Catalog, &catalog_jobs::jobs::TenantId, Option<&(dyn Fn(u8, &str) + Sync)>) -> Value;

fn jobs() -> Vec<(&'static str, Job)> {
    vec![
        ("sync", |c, t, p| {
            run_unfenced(c, t, &sources(&["demo.jsonl", "sample.csv"]), &never(), p).unwrap()
        }),
        ("enrich", |c, t, p| {
            run_unfenced(c, t, &no_force(), &never(), p).unwrap()
        }),
        ("pair", |c, t, p| {
            run_unfenced(c, t, &PairParams::default(), &never(), p).unwrap()
        }),
    ]
}

#[test]
fn every_kind_keeps_the_progress_contract_and_reports_the_same_without_a_callback() {
    let products = demo::generate(1500, 5);
    for (name, job) in jobs() {
        let seen: Mutex<Vec<(u8, String)>> = Mutex::new(Vec::new());
        let record = |p: u8, s: &str| seen.lock().unwrap().push((p, s.to_owned()));
        let (with_cb, t1) = catalog_with(&products, None);
        let (without_cb, t2) = catalog_with(&products, None);
        if name == "pair" {
            run_unfenced(&with_cb, &t1, &no_force(), &never(), None).unwrap();
            run_unfenced(&without_cb, &t2, &no_force(), &never(), None).unwrap();
        }
        let a = job(&with_cb, &t1, Some(&record));
        let b = job(&without_cb, &t2, None);
        assert_eq!(a, b, "{name}: the same report with and without a callback");
        let seen = seen.into_inner().unwrap();
        assert!(seen.len() >= 3, "{name} reports progress: {seen:?}");
        assert!(
            seen.windows(2).all(|w| w[0].0 <= w[1].0),
            "{name}: percent never goes backwards: {seen:?}"
        );
        assert!(
            seen.iter().all(|(p, s)| *p <= 100 && !s.trim().is_empty()),
            "{name}: 0..=100 and readable steps"
        );
        assert_eq!(seen.last().unwrap().0, 100, "{name} ends at 100");
        let steps: Vec<&str> = seen.iter().map(|(_, s)| s.as_str()).collect();
        match name {
            "sync" => assert!(
                steps
                    .iter()
                    .any(|s| s.starts_with("syncing demo.jsonl (1 of 2)")),
                "{steps:?}"
            ),
            "enrich" => assert!(
                steps
                    .iter()
                    .any(|s| s.starts_with("extracting attributes — batch 1 of ")),
                "{steps:?}"
            ),
            _ => assert!(steps.iter().any(|s| s.starts_with("scoring")), "{steps:?}"),
        }
    }
}

#[test]
fn a_panicking_callback_does_not_kill_the_job_behind_the_runners_guard() {
    let products = demo::generate(600, 9);
    for (name, job) in jobs() {
        let (catalog, t) = catalog_with(&products, None);
        let reporter = guarded(|_: u8, _: &str| panic!("the progress sink broke"));
        let report = job(&catalog, &t, Some(&reporter));
        assert!(
            report.is_object(),
            "{name} finished despite its callback panicking"
        );
    }
}

#[test]
fn a_file_over_the_feed_limit_is_refused_before_a_row_and_the_next_source_still_runs() {
    let dir = feeds_dir();
    let rows: String = demo::generate(300, 2)
        .iter()
        .map(|p| serde_json::to_string(p).unwrap() + "\n")
        .collect();
    std::fs::write(dir.join("big.jsonl"), &rows).unwrap();
    std::fs::write(
        dir.join("small.jsonl"),
        "{\"product_key\":\"s1\",\"name\":\"Small Thing\"}\n",
    )
    .unwrap();
    let (mut catalog, t) = catalog_with(&[], Some(dir));
    catalog.settings.max_feed_bytes = rows.len() as u64 / 2;
    let report = run_unfenced(
        &catalog,
        &t,
        &sources(&["big.jsonl", "small.jsonl"]),
        &never(),
        None,
    )
    .unwrap();
    let big = &report["sources"][0];
    assert_eq!(
        (big["status"].as_str(), big["error"].as_str()),
        (Some("failed"), Some("FeedTooLarge")),
        "{report}"
    );
    // A file's size is known before a row is read: nothing of it is saved, as an import
    // over the limit saves nothing (a feed sent chunked keeps what it read before the
    // limit: feeds::a_failing_sync_reports_its_real_class...).
    assert_eq!(big["created"], 0, "{report}");
    assert_eq!(catalog.store.all(&t).unwrap().len(), 1);
    assert_eq!(report["sources"][1]["status"], "ok");
}

#[test]
fn a_cancelled_catalogue_job_stops_at_a_safe_point_and_keeps_what_it_saved() {
    let products = demo::generate(800, 6);
    let (catalog, t) = catalog_with(&products, None);
    run_unfenced(&catalog, &t, &PairParams::default(), &never(), None).unwrap();
    let key = &products[0].product_key;
    let before = catalog.store.neighbours(&t, key).unwrap();
    let stopped = CancellationToken::new();
    stopped.cancel();
    let class = |e: catalog_jobs::catalog::CatalogError| {
        catalog_jobs::jobs::registry::ErrorClass::class(&e)
    };
    assert_eq!(
        run_unfenced(&catalog, &t, &no_force(), &stopped, None).map_err(class),
        Err("Cancelled")
    );
    assert!(
        catalog.store.enrichments(&t).unwrap().is_empty(),
        "no batch was started"
    );
    assert_eq!(
        run_unfenced(&catalog, &t, &PairParams::default(), &stopped, None).map_err(class),
        Err("Cancelled")
    );
    assert_eq!(
        catalog.store.neighbours(&t, key).unwrap(),
        before,
        "the old table is left whole"
    );
    let sync_params = sources(&["demo.jsonl"]);
    assert_eq!(
        run_unfenced(&catalog, &t, &sync_params, &stopped, None).map_err(class),
        Err("Cancelled")
    );
}

#[test]
fn pairing_finds_the_planted_families_and_never_crosses_a_top_level_category() {
    let products = demo::generate(4000, 21);
    let (catalog, t) = catalog_with(&products, None);
    run_unfenced(&catalog, &t, &no_force(), &never(), None).unwrap();
    let report = run_unfenced(&catalog, &t, &PairParams::default(), &never(), None).unwrap();
    assert_eq!(report["products"], 4000);
    let by_key: HashMap<&str, &Product> = products
        .iter()
        .map(|p| (p.product_key.as_str(), p))
        .collect();
    let mut families: HashMap<&str, Vec<&str>> = HashMap::new();
    for p in &products {
        families
            .entry(demo::family_of(&p.product_key))
            .or_default()
            .push(p.product_key.as_str());
    }
    let (mut expected, mut found) = (0usize, 0usize);
    for p in &products {
        let neighbours = catalog
            .store
            .neighbours(&t, &p.product_key)
            .unwrap()
            .unwrap_or_default();
        assert!(neighbours.len() <= 5);
        for n in &neighbours {
            let other = by_key[n.product_key.as_str()];
            assert_eq!(
                other.top_category(),
                p.top_category(),
                "{} paired across categories with {}",
                p.name,
                other.name
            );
        }
        let siblings: Vec<&&str> = families[demo::family_of(&p.product_key)]
            .iter()
            .filter(|k| **k != p.product_key.as_str())
            .collect();
        expected += siblings.len().min(5);
        found += siblings
            .iter()
            .filter(|s| neighbours.iter().any(|n| n.product_key.as_str() == ***s))
            .count()
            .min(5);
    }
    let recall = found as f64 / expected as f64;
    eprintln!("family recall in the top 5: {recall:.3} ({found} of {expected})");
    assert!(
        recall >= 0.9,
        "family recall in the top 5 is {recall:.3} ({found} of {expected})"
    );
}

#[test]
fn a_second_pair_replaces_the_whole_neighbour_table() {
    let products = demo::generate(300, 4);
    let (catalog, t) = catalog_with(&products, None);
    run_unfenced(&catalog, &t, &PairParams::default(), &never(), None).unwrap();
    let key = products[0].product_key.clone();
    assert!(catalog.store.neighbours(&t, &key).unwrap().is_some());
    // Rename every product of the first family beyond recognition: it has no neighbours now,
    // and the old rows must not linger.
    let family = demo::family_of(&key).to_owned();
    let changed: Vec<Product> = products
        .iter()
        .filter(|p| demo::family_of(&p.product_key) == family)
        .enumerate()
        .map(|(i, p)| Product {
            name: format!("Unrelated{i} Thing{i}"),
            ..p.clone()
        })
        .collect();
    catalog.store.upsert(&t, &changed, &Unfenced).unwrap();
    run_unfenced(&catalog, &t, &PairParams::default(), &never(), None).unwrap();
    assert_eq!(catalog.store.neighbours(&t, &key).unwrap(), None);
}

#[test]
fn an_empty_catalogue_enriches_and_pairs_to_nothing_and_clears_an_old_neighbour_table() {
    let products = demo::generate(40, 4);
    let (catalog, t) = catalog_with(&products, None);
    let (empty, other) = catalog_with(&[], None);
    let enriched = run_unfenced(&empty, &other, &no_force(), &never(), None).unwrap();
    assert_eq!(
        enriched,
        json!({"products": 0, "extracted": 0, "unextractable": 0, "skipped": 0, "batches": 0})
    );
    let paired = run_unfenced(&empty, &other, &PairParams::default(), &never(), None).unwrap();
    assert_eq!(
        paired,
        json!({"mode": "full", "full_because": "first", "products": 0, "paired": 0, "pairs": 0, "rescored": 0})
    );

    // A tenant whose products are gone (a store that came back empty) but whose old neighbour
    // table is still there: pairing it leaves no neighbour behind.
    run_unfenced(&catalog, &t, &PairParams::default(), &never(), None).unwrap();
    let key = products[0].product_key.clone();
    assert!(catalog.store.neighbours(&t, &key).unwrap().is_some());
    let emptied = Catalog {
        store: Arc::new(MemoryCatalog::new()),
        settings: catalog.settings.clone(),
    };
    let old = catalog.store.neighbours(&t, &key).unwrap().unwrap();
    emptied
        .store
        .replace_neighbours(
            &t,
            &[(key.clone(), old)],
            &catalog_jobs::jobs::fence::Unfenced,
        )
        .unwrap();
    run_unfenced(&emptied, &t, &PairParams::default(), &never(), None).unwrap();
    assert_eq!(emptied.store.neighbours(&t, &key).unwrap(), None);
}

fn no_force() -> enrich::EnrichParams {
    enrich::EnrichParams { force: false }
}

fn sources(names: &[&str]) -> sync::SyncParams {
    sync::SyncParams {
        sources: names.iter().map(|n| (*n).to_owned()).collect(),
    }
}

/// Runs `job` with a progress callback that asks it to stop once a step contains `at`, and
/// answers the report the stopped job kept.
fn cancelled_at(
    at: &str,
    job: impl FnOnce(
        &CancellationToken,
        catalog_jobs::jobs::registry::Progress<'_>,
    ) -> Result<Value, catalog_jobs::catalog::CatalogError>,
) -> Value {
    let stop = CancellationToken::new();
    let asked = stop.clone();
    let at = at.to_owned();
    let progress = move |_: u8, step: &str| {
        if step.contains(&at) {
            asked.cancel();
        }
    };
    match job(&stop, Some(&progress)) {
        Err(catalog_jobs::catalog::CatalogError::CancelledWith(report)) => report,
        other => panic!("the job was not cancelled with a report: {other:?}"),
    }
}

#[test]
fn a_cancelled_enrich_keeps_the_counts_of_the_batches_it_saved() {
    let products = demo::generate(50, 8);
    let catalog = Catalog {
        store: Arc::new(MemoryCatalog::new()),
        settings: CatalogSettings {
            enrich_batch: 10,
            ..CatalogSettings::default()
        },
    };
    let t = tenant();
    catalog.store.upsert(&t, &products, &Unfenced).unwrap();
    let report = cancelled_at("batch 3 of 5", |stop, progress| {
        run_unfenced(&catalog, &t, &no_force(), stop, progress)
    });
    assert_eq!(report["batches"], 2, "{report}");
    assert_eq!(report["products"], 50);
    let saved = report["extracted"].as_u64().unwrap() + report["unextractable"].as_u64().unwrap();
    assert_eq!(saved, 20, "{report}");
    assert_eq!(
        catalog.store.enrichments(&t).unwrap().len(),
        20,
        "the counts are what was saved"
    );
}

#[test]
fn a_cancelled_pair_names_the_phase_it_reached_and_nothing_else() {
    let products = demo::generate(400, 9);
    let (catalog, t) = catalog_with(&products, None);
    for (step, phase) in [
        // The stop is seen once the products are listed, before any is read.
        ("listing products", "loading"),
        ("scoring neighbours", "scoring"),
    ] {
        let report = cancelled_at(step, |stop, progress| {
            run_unfenced(&catalog, &t, &PairParams::default(), stop, progress)
        });
        assert_eq!(report, json!({ "phase": phase }), "cancelled at {step}");
    }
}

/// What a job of `kind` records when it is asked to stop at a step naming `at`, run as the
/// service runs it (through the catalogue's registry).
fn job_cancelled_at(
    (catalog, tenant): (Catalog, catalog_jobs::jobs::TenantId),
    kind: &str,
    at: &str,
) -> Value {
    let registry = catalog_jobs::catalog::registry(Arc::new(catalog));
    let kind = catalog_jobs::jobs::Kind::parse(kind).unwrap();
    let run = registry.get(&kind).unwrap().run.clone();
    let job_id = catalog_jobs::jobs::JobId::new();
    let input = catalog_jobs::jobs::registry::JobInput {
        job_id,
        tenant,
        kind,
        params: json!({}),
        cancel: CancellationToken::new(),
        run: catalog_jobs::jobs::store::RunId {
            id: job_id,
            claim: 1,
        },
        fence: Arc::new(Unfenced),
        probed_absent: false,
    };
    let asked = input.cancel.clone();
    let at = at.to_owned();
    let progress = move |_: u8, step: &str| {
        if step.contains(&at) {
            asked.cancel();
        }
    };
    match run(&input, Some(&progress)) {
        Err(e) if e.class() == "Cancelled" => e.report().cloned().unwrap_or(Value::Null),
        other => panic!("the job was not cancelled: {other:?}"),
    }
}

#[test]
fn a_cancelled_catalogue_job_records_its_partial_report_whatever_its_kind() {
    let products = demo::generate(400, 9);
    let pair = job_cancelled_at(catalog_with(&products, None), "pair", "scoring neighbours");
    assert_eq!(pair, json!({ "phase": "scoring" }));

    let enrich = job_cancelled_at(catalog_with(&products, None), "enrich", "batch 2 of 2");
    assert_eq!(enrich["batches"], 1, "{enrich}");
    assert_eq!(enrich["products"], 400, "{enrich}");
}

#[test]
fn a_store_failure_keeps_its_class_and_the_partial_report_of_what_was_done() {
    use catalog_jobs::catalog::CatalogError;
    use catalog_jobs::jobs::registry::ErrorClass;
    let failed = CatalogError::StoreUnavailable("redis at 10.0.0.3 refused".into())
        .with_report(json!({ "phase": "writing" }));
    assert_eq!(failed.class(), "StoreUnavailable");
    assert_eq!(failed.partial_report(), Some(json!({ "phase": "writing" })));
    let cancelled = CatalogError::Cancelled.with_report(json!({ "batches": 3 }));
    assert!(matches!(cancelled, CatalogError::CancelledWith(ref r) if r["batches"] == 3));
}

/// On a fixed Redis a catalogue call from a blocking thread goes over that thread's own
/// connection: it is answered while no runtime thread is free to drive a connection (the
/// runtime it was opened in is not running at all here), where a call handed to the
/// runtime's connection would wait for it.
#[test]
fn a_catalogue_call_on_a_fixed_redis_needs_no_runtime_thread() {
    use catalog_jobs::catalog::products::{CatalogStore, RedisCatalog};
    let idle = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let url = crate::helpers::shared_redis_url();
    let store = {
        let _entered = idle.enter();
        RedisCatalog::open(&url, &crate::helpers::unique("cat")).expect("the redis url parses")
    };
    let (t, products) = (tenant(), demo::generate(3, 7));
    let (sent, answered) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let written = store.upsert(&t, &products, &Unfenced).map(|_| ());
        let _ = sent.send(written.and_then(|()| store.all(&t)).map(|all| all.len()));
    });
    let answer = answered.recv_timeout(std::time::Duration::from_secs(3));
    assert_eq!(answer.expect("answered within 3 s").expect("read"), 3);
}

/// With the Redis catalogue's reads on the runtime (as the binary wires them), an enrich of
/// a tenant that holds no product is answered without its function, and answered as its
/// function answers it, forced or not; a tenant with products still gets the function.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enrich_of_a_tenant_without_products_is_answered_as_its_function_answers_it() {
    use crate::helpers::{blocking, settings, shared_redis_url, store, unique};
    use catalog_jobs::catalog::products::RedisCatalog;
    use catalog_jobs::startup::{catalog_settings, App};
    let config = test_config();
    let redis = Arc::new(RedisCatalog::open(&shared_redis_url(), &unique("cat")).unwrap());
    let catalog = Arc::new(Catalog {
        store: redis.clone(),
        settings: catalog_settings(&config).expect("the settings parse"),
    });
    let registry = catalog_jobs::catalog::registry_reading(catalog.clone(), Some(redis));
    let jobs = store(Backend::Redis, settings());
    let app = App::build_with(config, jobs.clone(), catalog.clone(), registry);
    let app = TestApp::run(app.await.expect("the app builds"), jobs);
    let t = tenant();
    for force in [false, true] {
        let form = [("tenant_id", t.as_str()), ("force", &force.to_string())];
        let id = app.start_id("enrich", &form).await;
        let answered = app.poll_until_ended(&id).await;
        let (c, tt) = (catalog.clone(), t.clone());
        let by_function = blocking(move || {
            let params = enrich::EnrichParams { force };
            run_unfenced(&c, &tt, &params, &CancellationToken::new(), None)
        })
        .await
        .expect("the function runs");
        assert_eq!(answered["status"], "done", "{answered}");
        assert_eq!(answered["result"], by_function, "force {force}: {answered}");
        assert_eq!(by_function["products"], 0, "{by_function}");
    }
    let (c, tt) = (catalog.clone(), t.clone());
    blocking(move || c.store.upsert(&tt, &demo::generate(3, 5), &Unfenced))
        .await
        .unwrap();
    let id = app.start_id("enrich", &[("tenant_id", t.as_str())]).await;
    let enriched = app.poll_until_ended(&id).await;
    assert_eq!(enriched["result"]["products"], 3, "{enriched}");
}
