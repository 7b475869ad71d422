//! The one feed reader, proven from both ends: the same malformed rows give the same row
//! report through `sync` (a feed file in FEEDS_DIR) and through `POST /catalog/products`; a
//! sync that fails says why, keeps its partial report and does not read 100 %; imports run
//! at most MAX_CONCURRENT_IMPORTS at once while /healthz keeps answering.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use catalog_jobs::catalog::products::MemoryCatalog;
use catalog_jobs::catalog::{run_unfenced, sync, Catalog, CatalogError, CatalogSettings};
use catalog_jobs::config::Config;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::both_stores;
use crate::helpers::{
    eventually, serve, spawn_catalog_app, status_and_json, temp_dir, tenant, test_config, Backend,
    RedisServer, Service, TestApp,
};

both_stores!(
    the_same_malformed_rows_give_the_same_report_through_sync_and_through_import,
    a_failing_sync_reports_its_real_class_its_partial_counts_and_not_100_percent,
    a_feed_that_misnames_its_fields_is_refused_once_by_sync_and_import_naming_the_columns,
    a_csv_value_under_a_column_the_header_leaves_unnamed_is_an_invalid_row_naming_the_column,
    a_key_no_url_can_name_is_an_invalid_row,
    a_price_as_text_is_its_digits_through_sync_and_import_alike,
    a_slow_but_steady_feed_is_read_to_its_end_across_many_slow_feed_windows,
);

/// One row of a table: its bytes, and a part of the error it must be reported with (`None`
/// for a valid row).
type Row = (Vec<u8>, Option<&'static str>);

const TOO_LONG: &str = "longer than 256 KiB";
const PRICE: &str = "price_cents must be a whole number of cents from 0";

fn valid(key: &str) -> Row {
    (
        json!({"product_key": key, "name": format!("Stoneware Mug {key} 350 ml")})
            .to_string()
            .into_bytes(),
        None,
    )
}

fn bad(row: Value, error: &'static str) -> Row {
    (row.to_string().into_bytes(), Some(error))
}

/// JSON rows, for JSON Lines and JSON arrays alike. `non_utf8` is what the format calls a row
/// whose bytes are not UTF-8.
fn json_rows(non_utf8: &'static str) -> Vec<Row> {
    let mut rows = json_values(non_utf8);
    rows.insert(
        rows.len() - 1,
        (b"[1, 2]".to_vec(), Some("must be a JSON object")),
    );
    rows
}

/// JSON Lines rows: the JSON rows and a line that is not JSON at all (in an array, such an
/// element breaks the array itself: see `a_failing_sync_reports_its_real_class…`).
fn json_lines_rows() -> Vec<Row> {
    let mut rows = json_rows("not UTF-8");
    rows.insert(
        rows.len() - 1,
        (b"{not json".to_vec(), Some("not valid JSON")),
    );
    rows
}

fn json_values(non_utf8: &'static str) -> Vec<Row> {
    let mut not_utf8 = br#"{"product_key":"u1","name":"Bad "#.to_vec();
    not_utf8.extend_from_slice(b"\xff\xfe bytes\"}");
    vec![
        valid("k1"),
        bad(
            json!({"product_key": "long", "name": "x".repeat(300 * 1024)}),
            TOO_LONG,
        ),
        valid("k2"),
        (
            br#"{"product_key":"p1","name":"Huge","price_cents":1e400}"#.to_vec(),
            Some("not valid JSON"),
        ),
        (
            br#"{"product_key":"p2","name":"Huge","price_cents":99999999999999999999}"#.to_vec(),
            Some(PRICE),
        ),
        bad(
            json!({"product_key": "p3", "name": "Neg", "price_cents": -5}),
            PRICE,
        ),
        bad(
            json!({"product_key": "n1", "name": "y".repeat(2 * 1024 * 1024)}),
            TOO_LONG,
        ),
        bad(
            json!({"product_key": "n2", "name": "é".repeat(1001)}),
            "name is longer than 1000 characters",
        ),
        (not_utf8, Some(non_utf8)),
        bad(
            json!({"product_key": "t1", "name": 42}),
            "name must be a string",
        ),
        bad(
            json!({"product_key": "t2", "name": "Ok", "taxonomy_path": 5}),
            "taxonomy_path must be",
        ),
        bad(
            json!({"product_key": "t3", "name": "Ok", "taxonomy_path": vec!["a"; 11]}),
            "more than 10 levels",
        ),
        bad(
            json!({"product_key": "t4", "name": "Ok", "brand": "b".repeat(201)}),
            "brand is longer than 200",
        ),
        bad(
            json!({"product_key": "t5", "name": "Ok", "attributes": (0..101).map(|i| (format!("a{i}"), json!(i))).collect::<serde_json::Map<_, _>>()}),
            "more than 100 entries",
        ),
        bad(json!({"name": "No Key"}), "product_key is required"),
        (
            br#"{"product_key":1e2,"name":"Exponent Key"}"#.to_vec(),
            Some("product_key must be a string or a whole number"),
        ),
        (
            br#"{"product_key":0.1,"name":"Fraction Key"}"#.to_vec(),
            Some("product_key must be a string or a whole number"),
        ),
        (
            br#"{"product_key":12345,"name":"Numbered Key"}"#.to_vec(),
            None,
        ),
        (
            br#"{"product_key":"d1","product_key":"d2","name":"Twice"}"#.to_vec(),
            Some("the key `product_key` is given twice"),
        ),
        (
            br#"{"product_key":"d3","name":"Ok","attributes":{"c":"red","c":"blue"}}"#.to_vec(),
            Some("the key `c` is given twice"),
        ),
        bad(
            json!({"product_key": "k".repeat(129), "name": "Ok"}),
            "product_key must be 1–128",
        ),
        valid("k3"),
    ]
}

fn csv_rows() -> Vec<Row> {
    let mut not_utf8 = b"u1,Bad ".to_vec();
    not_utf8.extend_from_slice(b"\xff\xfe bytes,,");
    let row = |s: String, e: Option<&'static str>| (s.into_bytes(), e);
    vec![
        row("k1,Oak Desk 120 cm,2500,".into(), None),
        row(
            format!("long,{},1,", "x".repeat(300 * 1024)),
            Some(TOO_LONG),
        ),
        row(
            "k2,\"Oak Desk, 55\"\" wide\",2600,Home > Desks".into(),
            None,
        ),
        row("p1,Huge,1e400,".into(), Some(PRICE)),
        row("p2,Huge,99999999999999999999,".into(), Some(PRICE)),
        row(
            format!("n1,{},1,", "y".repeat(2 * 1024 * 1024)),
            Some(TOO_LONG),
        ),
        row(
            format!("n2,{},1,", "é".repeat(1001)),
            Some("name is longer than 1000 characters"),
        ),
        (not_utf8, Some("not UTF-8")),
        row(",No Key,1,".into(), Some("product_key is required")),
        row(
            "t1,Ok,1,a>b>c>d>e>f>g>h>i>j>k".into(),
            Some("more than 10 levels"),
        ),
        row("t2,Ok,1,,extra".into(), Some("the row has 5 fields")),
        row("k3,Oak Desk 140 cm,2700,Home".into(), None),
    ]
}

/// A body in `format` and the report it must give: rows numbered as the format numbers them.
fn table(format: &str) -> (Vec<u8>, Value) {
    let (rows, first_line, header, separator, open, close): (_, u64, &[u8], &[u8], &[u8], &[u8]) =
        match format {
            "jsonl" => (json_lines_rows(), 1, b"", b"\n", b"", b"\n"),
            "json" => (json_rows("not valid JSON"), 1, b"", b",\n", b"[", b"]"),
            _ => (
                csv_rows(),
                2,
                b"Product Key,Name,Price_Cents,taxonomy_path\n",
                b"\n",
                b"",
                b"\n",
            ),
        };
    let mut body = [header, open].concat();
    let mut errors = Vec::new();
    for (i, (bytes, error)) in rows.iter().enumerate() {
        if i > 0 {
            body.extend_from_slice(separator);
        }
        body.extend_from_slice(bytes);
        if let Some(e) = error {
            errors.push(json!({"line": first_line + i as u64, "error": e}));
        }
    }
    body.extend_from_slice(close);
    let read = rows.len();
    let expected = json!({
        "read": read,
        "created": read - errors.len(),
        "invalid": errors.len(),
        "errors": errors,
    });
    (body, expected)
}

/// The row report's fields, wherever it sits.
fn rows_of(report: &Value) -> Value {
    json!({
        "read": report["read"],
        "created": report["created"],
        "updated": report["updated"],
        "unchanged": report["unchanged"],
        "invalid": report["invalid"],
        "errors": report["errors"],
    })
}

/// The report matches the expected one: counts equal, each error names its line and says
/// what the table says it must.
fn assert_matches(got: &Value, expected: &Value, what: &str) {
    for field in ["read", "created", "invalid"] {
        assert_eq!(got[field], expected[field], "{what}: {field} in {got:#}");
    }
    let (got_errors, want) = (
        got["errors"].as_array().unwrap(),
        expected["errors"].as_array().unwrap(),
    );
    assert_eq!(got_errors.len(), want.len(), "{what}: {got:#}");
    for (g, w) in got_errors.iter().zip(want) {
        assert_eq!(g["line"], w["line"], "{what}: {g} vs {w}");
        let message = g["error"].as_str().unwrap();
        assert!(
            message.contains(w["error"].as_str().unwrap()),
            "{what}: line {}: `{message}` should say `{}`",
            g["line"],
            w["error"]
        );
    }
}

async fn import(app: &TestApp, tenant: &str, content_type: &str, body: Vec<u8>) -> (u16, Value) {
    status_and_json(app.import(tenant, content_type, body).await).await
}

async fn sync_wait(app: &TestApp, tenant: &str, sources: &[&str]) -> (u16, Value) {
    let mut form = vec![("tenant_id", tenant), ("wait", "true")];
    form.extend(sources.iter().map(|s| ("source", *s)));
    status_and_json(app.start("sync", &form).await).await
}

/// How many products a tenant has, page by page.
async fn count_products(app: &TestApp, tenant: &str) -> u64 {
    let mut count = 0;
    let mut cursor = String::new();
    loop {
        let page = app
            .get_json(&format!(
                "/catalog/products?tenant_id={tenant}&limit=500&cursor={cursor}"
            ))
            .await;
        count += page["products"].as_array().unwrap().len() as u64;
        match page["next_cursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => return count,
        }
    }
}

async fn the_same_malformed_rows_give_the_same_report_through_sync_and_through_import(b: Backend) {
    let dir = temp_dir("feeds");
    let formats = [
        ("jsonl", "application/x-ndjson"),
        ("csv", "text/csv"),
        ("json", "application/json"),
    ];
    for (ext, _) in formats {
        std::fs::write(dir.join(format!("table.{ext}")), table(ext).0).unwrap();
    }
    let mut config = test_config();
    config.feeds_dir = dir;
    let app = spawn_catalog_app(b, config).await;
    for (ext, content_type) in formats {
        let (body, expected) = table(ext);
        let (by_sync, by_import) = (tenant(), tenant());
        let (status, report) = sync_wait(&app, by_sync.as_str(), &[&format!("table.{ext}")]).await;
        assert_eq!(status, 200, "{ext}: {report}");
        let synced = &report["sources"][0];
        assert_eq!(synced["status"], "ok", "{ext}: {report}");
        assert_matches(synced, &expected, &format!("sync of {ext}"));

        let (status, imported) = import(&app, by_import.as_str(), content_type, body).await;
        assert_eq!(status, 200, "{ext}: {imported}");
        assert_matches(&imported, &expected, &format!("import of {ext}"));
        assert_eq!(
            rows_of(synced),
            rows_of(&imported),
            "{ext}: one reader, one report"
        );
    }
}

/// A price as text (a CSV cell, a JSON string) is its digits, trimmed, as a JSON number
/// spells it: `+5` and `-0` were stored 5 and 0, where docs/api.md calls `-0` an invalid row
/// (and the JSON number `-0` was one).
async fn a_price_as_text_is_its_digits_through_sync_and_import_alike(b: Backend) {
    let csv =
        "product_key,name,price_cents\nplus,Plus,+5\nnegzero,Neg Zero,-0\nzeros,Zeros, 0250 \n";
    let jsonl = [
        r#"{"product_key":"plus","name":"Plus","price_cents":"+5"}"#,
        r#"{"product_key":"negzero","name":"Neg Zero","price_cents":"-0"}"#,
        r#"{"product_key":"zeros","name":"Zeros","price_cents":" 0250 "}"#,
    ]
    .join("\n");
    let dir = temp_dir("feeds");
    std::fs::write(dir.join("prices.csv"), csv).unwrap();
    std::fs::write(dir.join("prices.jsonl"), &jsonl).unwrap();
    let mut config = test_config();
    config.feeds_dir = dir;
    let app = spawn_catalog_app(b, config).await;
    // Rows numbered as each format numbers them (a CSV's header is its line 1).
    for (file, body, content_type, first) in [
        ("prices.csv", csv.to_owned(), "text/csv", 2),
        ("prices.jsonl", jsonl, "application/x-ndjson", 1),
    ] {
        let expected = json!({"read": 3, "created": 1, "invalid": 2, "errors": [
            {"line": first, "error": PRICE}, {"line": first + 1, "error": PRICE}
        ]});
        let (by_sync, by_import) = (tenant(), tenant());
        let (status, report) = sync_wait(&app, by_sync.as_str(), &[file]).await;
        assert_eq!(status, 200, "{file}: {report}");
        assert_matches(&report["sources"][0], &expected, &format!("sync of {file}"));
        let (status, imported) = import(&app, by_import.as_str(), content_type, body.into()).await;
        assert_eq!(status, 200, "{file}: {imported}");
        assert_matches(&imported, &expected, &format!("import of {file}"));
        for t in [&by_sync, &by_import] {
            assert_eq!(app.product(t.as_str(), "zeros").await["price_cents"], 250);
        }
    }
}

/// CSV rows under a header with an unnamed third column: a value there, or past the header's
/// last column, is an invalid row naming the column; an empty cell in either place is none.
const UNNAMED_COLUMNS: &str = "product_key,name,,brand
k1,Oak Desk,,Fjord
k2,Oak Desk,surprise,Fjord
k3,Oak Desk,,Fjord,extra
k4,Oak Desk,,Fjord,,
";

async fn a_csv_value_under_a_column_the_header_leaves_unnamed_is_an_invalid_row_naming_the_column(
    b: Backend,
) {
    let dir = temp_dir("unnamed");
    std::fs::write(dir.join("unnamed.csv"), UNNAMED_COLUMNS).unwrap();
    let mut config = test_config();
    config.feeds_dir = dir;
    let app = spawn_catalog_app(b, config).await;
    let expected = json!({
        "read": 4, "created": 2, "invalid": 2,
        "errors": [
            {"line": 3, "error": "column 3 has a value but the header leaves it unnamed"},
            {"line": 4, "error": "the row has 5 fields but the header names 4: column 5 has a value"},
        ],
    });
    let (by_sync, by_import) = (tenant(), tenant());
    let (status, report) = sync_wait(&app, by_sync.as_str(), &["unnamed.csv"]).await;
    assert_eq!(status, 200, "{report}");
    let synced = &report["sources"][0];
    assert_matches(synced, &expected, "sync");
    let body = UNNAMED_COLUMNS.as_bytes().to_vec();
    let (status, imported) = import(&app, by_import.as_str(), "text/csv", body).await;
    assert_eq!(status, 200, "{imported}");
    assert_matches(&imported, &expected, "import");
    for t in [&by_sync, &by_import] {
        assert_eq!(
            count_products(&app, t.as_str()).await,
            2,
            "only the valid rows"
        );
    }
}

/// `.` and `..` are refused as keys: `GET /catalog/products/{key}` could not name them, since
/// browsers and URL libraries resolve those segments away, escaped (`%2E%2E`) or not (the
/// admin page asked `/catalog/?tenant_id=…` for `..`: a hostile probe's finding). Other keys
/// of dots are keys like any other.
async fn a_key_no_url_can_name_is_an_invalid_row(b: Backend) {
    let app = spawn_catalog_app(b, test_config()).await;
    let t = tenant();
    let rows = [".", "..", "...", ".a."]
        .map(|k| json!({"product_key": k, "name": format!("Dots {k}")}).to_string() + "\n")
        .concat();
    let (status, report) = import(&app, t.as_str(), "application/x-ndjson", rows.into()).await;
    assert_eq!(status, 200, "{report}");
    let expected = json!({
        "read": 4, "created": 2, "invalid": 2,
        "errors": [
            {"line": 1, "error": "product_key `.` cannot be named in a URL"},
            {"line": 2, "error": "product_key `..` cannot be named in a URL"},
        ],
    });
    assert_matches(&report, &expected, "import");
    for key in ["...", ".a."] {
        let product = app.product(t.as_str(), key).await;
        assert_eq!(product["product_key"], key);
    }
}

/// A loopback HTTP server that answers every request with `response` (raw bytes) and then
/// closes the connection.
async fn canned_server(response: Vec<u8>) -> SocketAddr {
    serve_canned(response, false).await
}

/// A loopback HTTP server that answers every request with `response` (raw bytes) and then
/// says nothing more, the connection left open: a stalled feed.
async fn stalled_server(response: Vec<u8>) -> SocketAddr {
    serve_canned(response, true).await
}

async fn serve_canned(response: Vec<u8>, stall: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let response = response.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 1024];
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = socket.write_all(&response).await;
                if stall {
                    // Until the client gives up and closes.
                    let _ = socket.read(&mut buf).await;
                }
                let _ = socket.shutdown().await;
            });
        }
    });
    addr
}

fn rows_text(keys: std::ops::Range<usize>) -> String {
    keys.map(|i| format!("{{\"product_key\":\"r{i}\",\"name\":\"Row {i}\"}}\n"))
        .collect()
}

/// The slow-feed window of the failing feeds' configuration (`SYNC_SLOW_FEED_SECONDS`).
const SLOW_FEED_WINDOW: Duration = Duration::from_secs(2);

/// A feed of five rows, then a space every 100 ms for ever: 10 bytes a second, never silent
/// for the 30-second read timeout. Such a sync ran at 0 % for ever, holding a worker.
async fn trickling_feed() -> SocketAddr {
    let body = || async {
        let chunks = futures_util::stream::unfold(0u64, |n| async move {
            let chunk = match n {
                0 => rows_text(0..5),
                _ => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    " ".to_owned()
                }
            };
            Some((Ok::<_, std::io::Error>(chunk), n + 1))
        });
        axum::body::Body::from_stream(chunks)
    };
    serve(axum::Router::new().route("/feed.jsonl", axum::routing::get(body))).await
}

/// A loopback HTTP server whose every answer is `head` (status line and headers, without the
/// blank line) and then `body`.
async fn answering(head: &str, body: &[u8]) -> SocketAddr {
    let mut response = format!("{head}\r\nconnection: close\r\n\r\n").into_bytes();
    response.extend_from_slice(body);
    canned_server(response).await
}

/// A configuration whose feeds fail in every way a sync can see: local files too large,
/// cut short or without a key column, and servers that answer 500, 403, less than they
/// promised, more than MAX_FEED_BYTES (declared, or sent chunked), a compressed body, or a
/// trickle. Answers it and the failing servers' feed URLs.
async fn failing_feeds() -> (Config, [String; 7]) {
    let dir = temp_dir("feeds");
    let big = rows_text(0..400);
    std::fs::write(dir.join("big.jsonl"), &big).unwrap();
    let array: String = format!(
        "[{}",
        (0..3)
            .map(|i| format!("{{\"product_key\":\"a{i}\",\"name\":\"Arr {i}\"}}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    std::fs::write(dir.join("cut.json"), array).unwrap();
    std::fs::write(dir.join("nokey.csv"), "sku,name\n1,Thing\n").unwrap();
    let server_error = canned_server(
        b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            .to_vec(),
    )
    .await;
    let forbidden = canned_server(
        b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_vec(),
    )
    .await;
    // Promises 4 kB (within MAX_FEED_BYTES), sends five rows, hangs up.
    let rows = rows_text(0..5);
    let truncated = canned_server(
        format!("HTTP/1.1 200 OK\r\ncontent-length: 4000\r\nconnection: close\r\n\r\n{rows}")
            .into_bytes(),
    )
    .await;
    let declared_big = answering(
        &format!("HTTP/1.1 200 OK\r\ncontent-length: {}", big.len()),
        big.as_bytes(),
    )
    .await;
    let chunked_big = answering(
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked",
        format!("{:x}\r\n{big}\r\n0\r\n\r\n", big.len()).as_bytes(),
    )
    .await;
    // Not real gzip: the bytes are never looked at.
    let gzipped = answering(
        "HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: 10",
        b"\x1f\x8b\x08\0\0\0\0\0\0\x03",
    )
    .await;
    let servers = [
        server_error,
        forbidden,
        truncated,
        declared_big,
        chunked_big,
        gzipped,
        trickling_feed().await,
    ];
    let mut config = test_config();
    config.feeds_dir = dir;
    config.sync_allowed_hosts = servers.iter().map(SocketAddr::to_string).collect();
    config.max_feed_bytes = big.len() as u64 / 2;
    config.sync_slow_feed_seconds = SLOW_FEED_WINDOW;
    let urls = servers.map(|addr| format!("http://{addr}/feed.jsonl"));
    (config, urls)
}

/// Syncs `source` alone and checks the job failed with `class`, below 100 %, its source's
/// report saying the same (and the HTTP status), with `saved` rows within the bounds both
/// in its report and in the catalogue.
async fn assert_fails_keeping_what_it_saved(
    app: &TestApp,
    (source, class, http_status, at_least, at_most): (&str, &str, Option<u16>, u64, u64),
) {
    let t = tenant();
    let (status, body) = sync_wait(app, t.as_str(), &[source]).await;
    assert_eq!(status, 502, "{source}: {body}");
    let job = &body["job"];
    assert_eq!(
        (job["status"].as_str(), job["error"].as_str()),
        (Some("failed"), Some(class)),
        "{source}: {job:#}"
    );
    assert!(
        job["percent"].as_u64().unwrap() < 100,
        "{source}: a failed sync does not read 100 %: {job:#}"
    );
    let report = &job["result"]["sources"][0];
    assert_eq!(
        (report["status"].as_str(), report["error"].as_str()),
        (Some("failed"), Some(class)),
        "{source}: {job:#}"
    );
    assert_eq!(
        report["http_status"].as_u64(),
        http_status.map(u64::from),
        "{source}"
    );
    let saved = report["created"].as_u64().unwrap();
    assert!(
        (at_least..=at_most).contains(&saved),
        "{source}: {saved} rows saved: {job:#}"
    );
    assert_eq!(job["result"]["totals"]["created"], saved, "{source}");
    assert_eq!(
        count_products(app, t.as_str()).await,
        saved,
        "{source}: saved for real"
    );
}

async fn a_failing_sync_reports_its_real_class_its_partial_counts_and_not_100_percent(b: Backend) {
    let (config, [server_error, forbidden, truncated, declared_big, chunked_big, gzipped, trickle]) =
        failing_feeds().await;
    let app = spawn_catalog_app(b, config).await;
    // (source, class, http_status, rows saved before the failure: at least, at most)
    let cases = [
        // A size known up front and over MAX_FEED_BYTES is refused before a row is read, as
        // an import's is (it read and saved up to the limit first); sent chunked, the feed
        // is cut at the limit, the rows before it saved.
        ("big.jsonl", "FeedTooLarge", None, 0, 0),
        (declared_big.as_str(), "FeedTooLarge", None, 0, 0),
        (chunked_big.as_str(), "FeedTooLarge", None, 100, 399),
        // Compressed, it was read as raw bytes: one "not UTF-8" row, the sync `done`.
        (gzipped.as_str(), "UnsupportedEncoding", None, 0, 0),
        // Under 1 KiB in a SYNC_SLOW_FEED_SECONDS window of waiting: it ran for ever.
        (trickle.as_str(), "FeedTooSlow", None, 5, 5),
        ("cut.json", "MalformedFeed", None, 3, 3),
        ("nokey.csv", "MalformedFeed", None, 0, 0),
        (server_error.as_str(), "SourceServerError", Some(500), 0, 0),
        (forbidden.as_str(), "SourceRefused", Some(403), 0, 0),
        (truncated.as_str(), "FeedTruncated", None, 5, 5),
    ];
    for case in cases {
        assert_fails_keeping_what_it_saved(&app, case).await;
    }
    // Two sources failing differently: the job's class says so, each source keeps its own.
    let t = tenant();
    let (status, body) = sync_wait(&app, t.as_str(), &["cut.json", &server_error]).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["job"]["error"], "SourcesFailed");
    assert_eq!(body["job"]["result"]["sources_failed"], 2);
}

/// Chunks of the steady feed, each two rows (~70 bytes): under 1 KiB each, so the slow-feed
/// rule must count bytes across chunks.
const STEADY_CHUNKS: usize = 60;

/// A feed of `STEADY_CHUNKS` chunks, one every 50 ms: ~3 KB/s for 3 s, well above the 1 KiB
/// in `SLOW_FEED_WINDOW` the rule asks, and longer than the window.
async fn steady_feed() -> SocketAddr {
    let body = || async {
        let chunks = futures_util::stream::unfold(0, |n| async move {
            if n == STEADY_CHUNKS {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            Some((Ok::<_, std::io::Error>(rows_text(2 * n..2 * n + 2)), n + 1))
        });
        axum::body::Body::from_stream(chunks)
    };
    serve(axum::Router::new().route("/steady.jsonl", axum::routing::get(body))).await
}

/// The slow-feed rule ends a trickle (`a_failing_sync_reports…`), not a feed that is slow but
/// steady: one taking longer than the window, in chunks smaller than the KiB it asks, is read
/// to its end.
async fn a_slow_but_steady_feed_is_read_to_its_end_across_many_slow_feed_windows(b: Backend) {
    let addr = steady_feed().await;
    let mut config = test_config();
    config.sync_allowed_hosts = vec![addr.to_string()];
    config.sync_slow_feed_seconds = SLOW_FEED_WINDOW;
    let app = spawn_catalog_app(b, config).await;
    let t = tenant();
    let started = Instant::now();
    let (status, body) =
        sync_wait(&app, t.as_str(), &[&format!("http://{addr}/steady.jsonl")]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["sources"][0]["status"], "ok", "{body}");
    assert_eq!(body["totals"]["created"], 2 * STEADY_CHUNKS, "{body}");
    assert!(
        started.elapsed() > SLOW_FEED_WINDOW,
        "the feed outlasted the window: {:?}",
        started.elapsed()
    );
}

/// A feed that sends its head and five rows and then nothing, its connection open, fails
/// `SourceUnreachable` once the read timeout (30 s) passes — the source stopped answering —
/// not `FeedTruncated` ("error decoding response body"), which sent operators looking at the
/// feed's bytes. What it sent is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_that_stalls_part_way_fails_unreachable_after_the_read_timeout_keeping_its_rows() {
    let rows = rows_text(0..5);
    let stalled = stalled_server(
        format!("HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n{rows}").into_bytes(),
    )
    .await;
    let mut config = test_config();
    config.sync_allowed_hosts = vec![stalled.to_string()];
    let app = spawn_catalog_app(Backend::Memory, config).await;
    let source = format!("http://{stalled}/feed.jsonl");
    assert_fails_keeping_what_it_saved(&app, (&source, "SourceUnreachable", None, 5, 5)).await;
}

/// Feeds whose names for the fields are wrong, each 2,400 rows: (file, content type, the
/// header or the start of every row, what the one error must say).
const MISNAMED: [(&str, &str, &str, &[&str]); 3] = [
    (
        "price.csv",
        "text/csv",
        "product_key,name,price",
        &[
            "CSV header",
            "`price` is not a product field (did you mean `price_cents`?)",
        ],
    ),
    (
        "sku.csv",
        "text/csv",
        "sku,title,price_cents",
        &[
            "`product_key` is required",
            "`name` is required",
            "`sku`, `title`, `price_cents`",
        ],
    ),
    (
        "price.jsonl",
        "application/x-ndjson",
        r#"{"product_key":"m{i}","name":"Mug {i}","price":1300}"#,
        &[
            "first row",
            "`price` is not a product field (did you mean `price_cents`?)",
        ],
    ),
];

fn misnamed_feed(file: &str, head: &str) -> String {
    if file.ends_with(".csv") {
        let rows: String = (0..2_400).map(|i| format!("m{i},Mug {i},1300\n")).collect();
        return format!("{head}\n{rows}");
    }
    (0..2_400)
        .map(|i| head.replace("{i}", &i.to_string()) + "\n")
        .collect()
}

async fn a_feed_that_misnames_its_fields_is_refused_once_by_sync_and_import_naming_the_columns(
    b: Backend,
) {
    let dir = temp_dir("feeds");
    for (file, _, head, _) in MISNAMED {
        std::fs::write(dir.join(file), misnamed_feed(file, head)).unwrap();
    }
    let mut config = test_config();
    config.feeds_dir = dir;
    let app = spawn_catalog_app(b, config).await;
    for (file, content_type, head, says) in MISNAMED {
        let t = tenant();
        let (status, body) = import(
            &app,
            t.as_str(),
            content_type,
            misnamed_feed(file, head).into(),
        )
        .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("malformed_body")),
            "{file}: {body}"
        );
        let message = body["message"].as_str().unwrap();
        for part in says {
            assert!(message.contains(part), "{file}: {message}");
        }
        assert_eq!(
            body["report"]["read"], 0,
            "{file}: not a row error per line: {body}"
        );
        let (status, body) = sync_wait(&app, t.as_str(), &[file]).await;
        assert_eq!(status, 502, "{file}: {body}");
        let source = &body["job"]["result"]["sources"][0];
        assert_eq!(
            (
                source["error"].as_str(),
                &source["read"],
                &source["invalid"]
            ),
            (Some("MalformedFeed"), &json!(0), &json!(0)),
            "{file}: {source}"
        );
        assert_eq!(count_products(&app, t.as_str()).await, 0, "{file}");
    }
}

#[test]
fn a_source_that_disappears_after_it_was_accepted_fails_as_not_found() {
    let dir = temp_dir("feeds");
    std::fs::write(dir.join("here.jsonl"), rows_text(0..3)).unwrap();
    let catalog = Catalog {
        store: std::sync::Arc::new(MemoryCatalog::new()),
        settings: CatalogSettings {
            feeds_dir: dir.clone(),
            ..CatalogSettings::default()
        },
    };
    let t = tenant();
    let settings = catalog.settings.clone();
    let mut fields = catalog_jobs::jobs::params::Fields::new();
    fields.insert(
        "source".into(),
        vec![json!("here.jsonl"), json!("gone.jsonl")],
    );
    std::fs::write(dir.join("gone.jsonl"), rows_text(3..4)).unwrap();
    let params = sync::prepare(&fields, &settings).expect("both sources exist when asked");
    std::fs::remove_file(dir.join("gone.jsonl")).unwrap();
    let report = run_unfenced(&catalog, &t, &params, &CancellationToken::new(), None).unwrap();
    assert_eq!(report["sources"][0]["created"], 3, "{report}");
    assert_eq!(report["sources"][1]["error"], "SourceNotFound", "{report}");

    // When it was the only source, the job fails with that class and keeps the report.
    std::fs::write(dir.join("gone.jsonl"), "").unwrap();
    fields.insert("source".into(), vec![json!("gone.jsonl")]);
    let params = sync::prepare(&fields, &settings).unwrap();
    std::fs::remove_file(dir.join("gone.jsonl")).unwrap();
    match run_unfenced(&catalog, &t, &params, &CancellationToken::new(), None) {
        Err(CatalogError::SyncFailed { class, report }) => {
            assert_eq!(class, "SourceNotFound");
            assert_eq!(report["sources"][0]["source"], "gone.jsonl");
        }
        other => panic!("expected SyncFailed, got {other:?}"),
    }
}

/// Starts an import whose body the test holds: headers and one row now, the rest later.
async fn held_import(addr: SocketAddr, tenant: &str, rest: &str) -> TcpStream {
    let first = "{\"product_key\":\"h0\",\"name\":\"Held Row\"}\n";
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /catalog/products?tenant_id={tenant} HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-ndjson\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{first}",
        first.len() + rest.len()
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    socket
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_max_concurrent_imports_an_import_is_refused_as_overloaded_while_healthz_answers() {
    let mut config = test_config();
    config.max_concurrent_imports = 2;
    let app = spawn_catalog_app(Backend::Memory, config).await;
    let (t1, t2, t3) = (tenant(), tenant(), tenant());
    let rest = rows_text(1..50);
    let mut held = vec![
        held_import(app.addr, t1.as_str(), &rest).await,
        held_import(app.addr, t2.as_str(), &rest).await,
    ];
    // The service says how many imports hold a slot; polling it is the signal.
    let both_started = async || match app.get_json("/readyz").await["active_imports"].as_u64() {
        Some(2) => Ok(()),
        held => Err(format!("{held:?} of the two held imports started")),
    };
    eventually(Duration::from_secs(20), both_started).await;
    let r = app
        .client
        .post(app.url(&format!("/catalog/products?tenant_id={t3}")))
        .header("content-type", "application/x-ndjson")
        .body("{\"product_key\":\"x\",\"name\":\"X\"}\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "overloaded");
    let started = Instant::now();
    let r = app.get("/healthz").await;
    assert_eq!(r.status(), 200);
    // Generous: /healthz does no work; before imports were bounded it waited seconds.
    assert!(started.elapsed() < Duration::from_secs(2));

    for socket in &mut held {
        socket.write_all(rest.as_bytes()).await.unwrap();
        let mut answer = String::new();
        socket.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("\"created\":50"), "{answer}");
    }
    let (status, report) = import(
        &app,
        t3.as_str(),
        "application/x-ndjson",
        b"{\"product_key\":\"x\",\"name\":\"X\"}\n".to_vec(),
    )
    .await;
    assert_eq!(
        (status, report["created"].as_u64()),
        (200, Some(1)),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_max_body_bytes_is_413_with_the_rows_already_saved() {
    let mut config = test_config();
    config.max_body_bytes = 64 * 1024;
    let app = spawn_catalog_app(Backend::Memory, config).await;
    let t = tenant();
    // No content-length: the body is counted as it streams in.
    let rows = rows_text(0..2000);
    assert!(rows.len() > 64 * 1024);
    let mut socket = TcpStream::connect(app.addr).await.unwrap();
    let head = format!(
        "POST /catalog/products?tenant_id={t} HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n{:x}\r\n{rows}\r\n0\r\n\r\n",
        rows.len()
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    let mut answer = String::new();
    socket.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["error"], "payload_too_large");
    let saved = body["report"]["created"].as_u64().unwrap();
    assert_eq!(
        count_products(&app, t.as_str()).await,
        saved,
        "the report says what was saved: {body}"
    );
    assert!(saved < 2000, "{body}");
}

/// Chunks of the slow chunked feed, and rows in each (~200 bytes a row).
const SLOW_CHUNKS: usize = 20;
const SLOW_CHUNK_ROWS: usize = 1_000;

/// A feed sent chunked (no `Content-Length`), one chunk of rows every 200 ms.
async fn slow_chunked_feed() -> SocketAddr {
    let chunk = |n: usize| {
        let first = n * SLOW_CHUNK_ROWS;
        (first..first + SLOW_CHUNK_ROWS)
            .map(|i| {
                format!(
                    "{{\"product_key\":\"s{i}\",\"name\":\"Slow Row {i} {:>130}\"}}\n",
                    "padded"
                )
            })
            .collect::<String>()
    };
    let body = move || {
        let chunks = futures_util::stream::unfold(0, move |n| async move {
            if n == SLOW_CHUNKS {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            Some((Ok::<_, std::io::Error>(chunk(n)), n + 1))
        });
        async move { axum::body::Body::from_stream(chunks) }
    };
    serve(axum::Router::new().route("/slow.jsonl", axum::routing::get(body))).await
}

/// A feed of unknown length shows its progress as it is read: the step counts the rows read
/// and the percent moves, never back and never to 100 before the feed ends. It read 0 % for
/// its whole run, `updated_at` frozen (a hostile probe's finding).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_feed_shows_its_progress_while_it_is_read() {
    let redis = RedisServer::start(false);
    let addr = slow_chunked_feed().await;
    let svc = Service::on(&redis)
        .env("SYNC_ALLOWED_HOSTS", addr.to_string())
        .start()
        .await;
    let t = tenant();
    let id = svc
        .start_sync(t.as_str(), &format!("http://{addr}/slow.jsonl"))
        .await;
    let mut seen = Vec::new();
    let done = loop {
        let job = svc.get_job(&id).await;
        if job["finished_at"].is_string() {
            break job;
        }
        seen.push((job["percent"].as_u64().unwrap(), job["step"].clone()));
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(done["status"], "done", "{done:#}");
    assert_eq!(
        done["result"]["totals"]["created"],
        SLOW_CHUNKS * SLOW_CHUNK_ROWS
    );
    assert!(
        seen.windows(2).all(|w| w[0].0 <= w[1].0),
        "never back: {seen:?}"
    );
    assert!(
        seen.iter().any(|(p, step)| (1..100).contains(p)
            && step.as_str().is_some_and(|s| s.contains("rows read"))),
        "moved while read: {seen:?}"
    );
}
