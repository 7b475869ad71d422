//! Bad input gets a clear 4xx and changes nothing: a table of malformed requests across every
//! route with the exact status and error code each must get, and a property test throwing
//! random fields, content types and bodies at each route. Both run against the real service
//! with the real job kinds, on both stores; on Redis, the app's key namespaces must hold no
//! new key afterwards.

use std::collections::BTreeSet;
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use serde_json::Value;

mod bodies;
mod headers;
mod reads;

use crate::both_stores;
use crate::helpers::{
    keys_matching, shared_redis, shared_redis_url, store, test_config, unique, Backend, TestApp,
};
use catalog_jobs::catalog::products::{CatalogStore, MemoryCatalog, RedisCatalog};
use catalog_jobs::catalog::Catalog;
use catalog_jobs::jobs::store::StoreSettings;
use catalog_jobs::startup::{catalog_settings, App};

both_stores!(every_malformed_request_in_the_table_gets_its_status_and_code_and_writes_nothing);

/// The process registry's key ends so (`Keys::processes`).
const PROCESS_REGISTRY_SUFFIX: &str = ":processes";

/// The real service with the catalogue kinds, in key namespaces of its own, so the keys it
/// writes can be listed while other tests share the Redis.
struct Isolated {
    app: TestApp,
    prefixes: Vec<String>,
    backend: Backend,
}

async fn isolated(backend: Backend) -> Isolated {
    let (job_prefix, catalog_prefix) = (unique("bad"), unique("badcat"));
    let mut config = test_config();
    config.max_start_body_bytes = 4096;
    // A random `wait=true` must not hold the property test for minutes.
    config.wait_max_seconds = std::time::Duration::from_secs(2);
    let catalog_store: Arc<dyn CatalogStore> = match backend {
        Backend::Memory => Arc::new(MemoryCatalog::new()),
        Backend::Redis => {
            Arc::new(RedisCatalog::open(&shared_redis_url(), &catalog_prefix).unwrap())
        }
    };
    let catalog = Arc::new(Catalog {
        store: catalog_store,
        settings: catalog_settings(&config).expect("the allow-list parses"),
    });
    let registry = catalog_jobs::catalog::registry(catalog.clone());
    let jobs = store(
        backend,
        StoreSettings {
            prefix: job_prefix.clone(),
            ..StoreSettings::default()
        },
    );
    let app = App::build_with(config, jobs.clone(), catalog, registry)
        .await
        .expect("the app builds");
    Isolated {
        app: TestApp::run(app, jobs),
        prefixes: vec![job_prefix, catalog_prefix],
        backend,
    }
}

impl Isolated {
    /// Every key under the app's prefixes (none to list for the embedded store).
    async fn keys(&self) -> BTreeSet<String> {
        if self.backend == Backend::Memory {
            return BTreeSet::new();
        }
        let mut conn = shared_redis().await;
        let mut keys = BTreeSet::new();
        for prefix in &self.prefixes {
            keys.extend(keys_matching(&mut conn, &format!("{prefix}*")).await);
        }
        // The registry of live processes is the service's own heartbeat, written whatever
        // the requests are.
        keys.retain(|k| !k.ends_with(PROCESS_REGISTRY_SUFFIX));
        keys
    }

    /// Sends a raw request; answers its status, its JSON body (Null when it has none) and
    /// whether the body was the error envelope.
    async fn send(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> (u16, Value) {
        let mut req = self
            .app
            .client
            .request(method.parse().unwrap(), self.app.url(path))
            .body(body);
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        let r = req.send().await.expect("the app answers");
        let status = r.status().as_u16();
        let bytes = r.bytes().await.unwrap_or_default();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }
}

const FORM: Option<&str> = Some("application/x-www-form-urlencoded");
const JSON: Option<&str> = Some("application/json");

/// (what, method, path, content type, body, status, error code; "" = no JSON envelope,
/// as for the answers hyper gives before a request reaches the router). In a path or a
/// body, `{t}` stands for the test's tenant, `{job}` for a job id nobody created, `{long}`
/// for a tenant one character too long and `{pad}` for 5,000 bytes of padding.
type Case = (
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
    &'static [u8],
    u16,
    &'static str,
);

const MALFORMED: &[Case] = &[
    (
        "tenant empty",
        "POST",
        "/catalog/enrich",
        FORM,
        b"tenant_id=",
        422,
        "invalid_field",
    ),
    (
        "tenant too long",
        "POST",
        "/catalog/enrich",
        FORM,
        b"tenant_id={long}",
        422,
        "invalid_field",
    ),
    (
        "tenant with :",
        "POST",
        "/catalog/enrich",
        FORM,
        b"tenant_id=a%3Ab",
        422,
        "invalid_field",
    ),
    (
        "tenant with *",
        "POST",
        "/catalog/pair",
        FORM,
        b"tenant_id=a*",
        422,
        "invalid_field",
    ),
    (
        "tenant with {",
        "POST",
        "/catalog/pair",
        FORM,
        b"tenant_id=a%7Bb",
        422,
        "invalid_field",
    ),
    (
        "tenant with a space",
        "POST",
        "/catalog/pair",
        FORM,
        b"tenant_id=a+b",
        422,
        "invalid_field",
    ),
    (
        "tenant with a newline",
        "POST",
        "/catalog/sync",
        FORM,
        b"tenant_id=a%0Ab&source=demo.jsonl",
        422,
        "invalid_field",
    ),
    (
        "tenant with NUL",
        "POST",
        "/catalog/sync",
        FORM,
        b"tenant_id=a%00b&source=demo.jsonl",
        422,
        "invalid_field",
    ),
    (
        "tenant `..` (a path segment URLs resolve away)",
        "POST",
        "/catalog/enrich",
        FORM,
        b"tenant_id=..",
        422,
        "invalid_field",
    ),
    (
        "tenant `.`",
        "POST",
        "/catalog/pair",
        JSON,
        br#"{"tenant_id":"."}"#,
        422,
        "invalid_field",
    ),
    (
        "tenant non-ASCII",
        "POST",
        "/catalog/enrich",
        FORM,
        b"tenant_id=caf%C3%A9",
        422,
        "invalid_field",
    ),
    (
        "tenant differs in query and body",
        "POST",
        "/catalog/enrich?tenant_id={t}",
        FORM,
        b"tenant_id=other",
        422,
        "invalid_field",
    ),
    (
        "tenant missing",
        "POST",
        "/catalog/enrich",
        FORM,
        b"force=true",
        422,
        "missing_field",
    ),
    (
        "tenant as a JSON object",
        "POST",
        "/catalog/enrich",
        JSON,
        br#"{"tenant_id":{"a":1}}"#,
        422,
        "invalid_field",
    ),
    (
        "tenant as JSON null",
        "POST",
        "/catalog/enrich",
        JSON,
        br#"{"tenant_id":null}"#,
        422,
        "missing_field",
    ),
    (
        "unknown kind",
        "POST",
        "/catalog/nope?tenant_id={t}",
        None,
        b"",
        404,
        "unknown_kind",
    ),
    (
        "kind in capitals",
        "POST",
        "/catalog/SYNC?tenant_id={t}",
        None,
        b"",
        404,
        "unknown_kind",
    ),
    (
        "unknown field",
        "POST",
        "/catalog/enrich",
        FORM,
        b"tenant_id={t}&colour=red",
        422,
        "unknown_field",
    ),
    (
        "unknown field for pair",
        "POST",
        "/catalog/pair",
        JSON,
        br#"{"tenant_id":"{t}","force":true}"#,
        422,
        "unknown_field",
    ),
    (
        "a tenant delete with a query field (dry_run is no option of it)",
        "DELETE",
        "/catalog/tenants/{t}?dry_run=true",
        None,
        b"",
        422,
        "unknown_field",
    ),
    (
        "a bulk cancel with a query field (dry_run goes in the body)",
        "POST",
        "/catalog/bulk/cancel?dry_run=true",
        JSON,
        br#"{"tenant_id":"{t}"}"#,
        422,
        "unknown_field",
    ),
    (
        "a bulk retry with a query field (dry_run goes in the body)",
        "POST",
        "/catalog/bulk/retry?dry_run=true",
        JSON,
        br#"{"filter":{"tenant_id":"{t}"}}"#,
        422,
        "unknown_field",
    ),
    (
        "wait not a boolean",
        "POST",
        "/catalog/enrich",
        FORM,
        b"tenant_id={t}&wait=maybe",
        422,
        "invalid_field",
    ),
    (
        "wait a JSON number",
        "POST",
        "/catalog/enrich",
        JSON,
        br#"{"tenant_id":"{t}","wait":2}"#,
        422,
        "invalid_field",
    ),
    (
        "wait twice, differently",
        "POST",
        "/catalog/enrich",
        JSON,
        br#"{"tenant_id":"{t}","wait":[true,false]}"#,
        422,
        "invalid_field",
    ),
    (
        "force not a boolean",
        "POST",
        "/catalog/enrich",
        FORM,
        b"tenant_id={t}&force=sure",
        422,
        "invalid_field",
    ),
    (
        "force a JSON object",
        "POST",
        "/catalog/enrich",
        JSON,
        br#"{"tenant_id":"{t}","force":{}}"#,
        422,
        "invalid_field",
    ),
    (
        "sync without a source",
        "POST",
        "/catalog/sync",
        FORM,
        b"tenant_id={t}",
        422,
        "missing_field",
    ),
    (
        "sync source outside FEEDS_DIR",
        "POST",
        "/catalog/sync",
        FORM,
        b"tenant_id={t}&source=../Cargo.toml",
        422,
        "source_not_allowed",
    ),
    (
        "JSON array body",
        "POST",
        "/catalog/enrich",
        JSON,
        b"[1,2]",
        400,
        "malformed_body",
    ),
    (
        "JSON null body",
        "POST",
        "/catalog/enrich",
        JSON,
        b"null",
        400,
        "malformed_body",
    ),
    (
        "JSON string body",
        "POST",
        "/catalog/enrich",
        JSON,
        b"\"acme\"",
        400,
        "malformed_body",
    ),
    (
        "JSON broken",
        "POST",
        "/catalog/enrich",
        JSON,
        br#"{"tenant_id":"#,
        400,
        "malformed_body",
    ),
    (
        "JSON duplicate key",
        "POST",
        "/catalog/enrich",
        JSON,
        br#"{"tenant_id":"{t}","tenant_id":"other"}"#,
        422,
        "duplicate_key",
    ),
    (
        "JSON duplicate nested key",
        "POST",
        "/catalog/enrich",
        JSON,
        br#"{"tenant_id":"{t}","x":{"a":1,"a":2}}"#,
        422,
        "duplicate_key",
    ),
    (
        "JSON not UTF-8",
        "POST",
        "/catalog/enrich",
        JSON,
        b"{\"tenant_id\":\"\xff\xfe\"}",
        400,
        "malformed_body",
    ),
    (
        "form not UTF-8",
        "POST",
        "/catalog/enrich",
        FORM,
        b"tenant_id=\xff\xfe",
        422,
        "invalid_field",
    ),
    (
        "multipart without a boundary",
        "POST",
        "/catalog/enrich",
        Some("multipart/form-data"),
        b"x",
        400,
        "malformed_body",
    ),
    (
        "text/plain",
        "POST",
        "/catalog/enrich",
        Some("text/plain"),
        b"tenant_id={t}",
        415,
        "unsupported_media_type",
    ),
    (
        "application/xml",
        "POST",
        "/catalog/enrich",
        Some("application/xml"),
        b"<x/>",
        415,
        "unsupported_media_type",
    ),
    (
        "a body without a content type",
        "POST",
        "/catalog/enrich",
        None,
        b"tenant_id={t}",
        415,
        "unsupported_media_type",
    ),
    (
        "start body over MAX_START_BODY_BYTES",
        "POST",
        "/catalog/enrich",
        FORM,
        b"tenant_id={t}&pad={pad}",
        413,
        "payload_too_large",
    ),
    (
        "job id not a UUID",
        "GET",
        "/catalog/jobs/not-a-uuid",
        None,
        b"",
        404,
        "not_found",
    ),
    (
        "unknown job id",
        "GET",
        "/catalog/jobs/{job}",
        None,
        b"",
        404,
        "not_found",
    ),
    (
        "job route with a bad tenant",
        "GET",
        "/catalog/jobs/{job}?tenant_id=a:b",
        None,
        b"",
        422,
        "invalid_field",
    ),
    (
        "job route with an unknown field",
        "GET",
        "/catalog/jobs/{job}?verbose=1",
        None,
        b"",
        422,
        "unknown_field",
    ),
    (
        "cancel of a non-UUID",
        "POST",
        "/catalog/jobs/42/cancel",
        None,
        b"",
        404,
        "not_found",
    ),
    (
        "cancel of an unknown job",
        "POST",
        "/catalog/jobs/{job}/cancel",
        None,
        b"",
        404,
        "not_found",
    ),
    (
        "DELETE a job",
        "DELETE",
        "/catalog/jobs/{job}",
        None,
        b"",
        405,
        "method_not_allowed",
    ),
    (
        "listing an unknown status",
        "GET",
        "/catalog/jobs?status=stuck",
        None,
        b"",
        422,
        "invalid_field",
    ),
    (
        "listing limit 0",
        "GET",
        "/catalog/jobs?tenant_id={t}&limit=0",
        None,
        b"",
        422,
        "invalid_field",
    ),
    (
        "listing limit 101",
        "GET",
        "/catalog/jobs?tenant_id={t}&limit=101",
        None,
        b"",
        422,
        "invalid_field",
    ),
    (
        "listing limit -1",
        "GET",
        "/catalog/jobs?tenant_id={t}&limit=-1",
        None,
        b"",
        422,
        "invalid_field",
    ),
    (
        "listing limit a word",
        "GET",
        "/catalog/jobs?tenant_id={t}&limit=ten",
        None,
        b"",
        422,
        "invalid_field",
    ),
    (
        "listing two tenants",
        "GET",
        "/catalog/jobs?tenant_id={t}&tenant_id=other",
        None,
        b"",
        422,
        "invalid_field",
    ),
    (
        "listing with a cursor it never answered",
        "GET",
        "/catalog/jobs?tenant_id={t}&cursor=x",
        None,
        b"",
        422,
        "invalid_field",
    ),
    (
        "products limit 501",
        "GET",
        "/catalog/products?tenant_id={t}&limit=501",
        None,
        b"",
        422,
        "invalid_field",
    ),
    (
        "products limit 1.5",
        "GET",
        "/catalog/products?tenant_id={t}&limit=1.5",
        None,
        b"",
        422,
        "invalid_field",
    ),
    (
        "products cursor twice",
        "GET",
        "/catalog/products?tenant_id={t}&cursor=a&cursor=b",
        None,
        b"",
        422,
        "invalid_field",
    ),
    (
        "products unknown field",
        "GET",
        "/catalog/products?tenant_id={t}&sort=name",
        None,
        b"",
        422,
        "unknown_field",
    ),
    (
        "product without a tenant",
        "GET",
        "/catalog/products/p1",
        None,
        b"",
        422,
        "missing_field",
    ),
    (
        "product with a bad tenant",
        "GET",
        "/catalog/products/p1?tenant_id=%E2%9C%93",
        None,
        b"",
        422,
        "invalid_field",
    ),
    (
        "import as text/plain",
        "POST",
        "/catalog/products?tenant_id={t}",
        Some("text/plain"),
        b"p1,x",
        415,
        "unsupported_media_type",
    ),
    (
        "import without a content type",
        "POST",
        "/catalog/products?tenant_id={t}",
        None,
        b"product_key,name\np1,x\n",
        415,
        "unsupported_media_type",
    ),
    (
        "import with a bad tenant",
        "POST",
        "/catalog/products?tenant_id=a%20b",
        Some("text/csv"),
        b"product_key,name\np1,x\n",
        422,
        "invalid_field",
    ),
    (
        "import with an unknown field",
        "POST",
        "/catalog/products?tenant_id={t}&dry_run=1",
        Some("text/csv"),
        b"product_key,name\np1,x\n",
        422,
        "unknown_field",
    ),
    (
        "import of a CSV whose header repeats a column",
        "POST",
        "/catalog/products?tenant_id={t}",
        Some("text/csv"),
        b"product_key,Product Key,name\np1,p2,x\n",
        400,
        "malformed_body",
    ),
    (
        "import of a broken JSON array",
        "POST",
        "/catalog/products?tenant_id={t}",
        JSON,
        br#"[{"product_key":"#,
        400,
        "malformed_body",
    ),
    (
        "no such route",
        "GET",
        "/catalog",
        None,
        b"",
        404,
        "not_found",
    ),
];

/// A path or body of the table with its placeholders filled in (a body that is not
/// UTF-8 has none).
fn filled(template: &[u8], t: &str) -> Vec<u8> {
    match std::str::from_utf8(template) {
        Ok(text) => text
            .replace("{t}", t)
            .replace("{job}", "6f0c1d2e-0000-4000-8000-000000000000")
            .replace("{long}", &"a".repeat(129))
            .replace("{pad}", &"x".repeat(5000))
            .into_bytes(),
        Err(_) => template.to_vec(),
    }
}

async fn every_malformed_request_in_the_table_gets_its_status_and_code_and_writes_nothing(
    b: Backend,
) {
    let app = isolated(b).await;
    let t = unique("t");
    let before = app.keys().await;
    assert!(MALFORMED.len() >= 40, "{} cases", MALFORMED.len());
    for &(what, method, path, content_type, body, status, code) in MALFORMED {
        let path = String::from_utf8(filled(path.as_bytes(), &t)).expect("paths are text");
        let body = filled(body, &t);
        let (got, body) = app.send(method, &path, content_type, body).await;
        assert_eq!(got, status, "{what}: {body}");
        if code.is_empty() {
            continue;
        }
        assert_eq!(body["error"], code, "{what}: {body}");
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: {body}"
        );
    }
    oversized_heads_get_hypers_bare_431(&app.app, &t).await;
    assert_eq!(app.keys().await, before, "the table wrote keys");
    assert!(app
        .app
        .store
        .recent(&catalog_jobs::jobs::TenantId::parse(&t).unwrap(), 10)
        .await
        .unwrap()
        .is_empty());
}

/// A head hyper refuses before it reaches the router gets its bare 431 (no envelope): a
/// header over 64 KiB, a URL over it, more than 100 header fields.
async fn oversized_heads_get_hypers_bare_431(app: &TestApp, t: &str) {
    // An oversized header is refused by hyper before it reaches the router (no envelope).
    let r = app
        .client
        .get(app.url(&format!("/catalog/jobs?tenant_id={t}")))
        .header("x-big", "z".repeat(70 * 1024))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 431, "oversized header");
    // So is a URL beyond the head limit (raw TCP: client libraries refuse to send one).
    let answer = raw_request(
        app.addr,
        &format!(
            "GET /catalog/jobs?tenant_id={t}&pad={} HTTP/1.1\r\nHost: x\r\n\r\n",
            "y".repeat(70 * 1024)
        ),
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 431") || answer.starts_with("HTTP/1.1 414"),
        "oversized URL: {}",
        &answer[..answer.len().min(200)]
    );
    // 100 fields pass, a 101st does not (raw TCP, so no client adds its own).
    for (fields, status) in [(100, "200"), (101, "431")] {
        let head: String = (2..fields).map(|i| format!("X-F{i}: v\r\n")).collect();
        let answer = raw_request(
            app.addr,
            &format!("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{head}\r\n"),
        )
        .await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{fields} header fields: {}",
            &answer[..answer.len().min(200)]
        );
    }
}

/// Sends raw bytes and reads the answer until the server closes (or 15 s pass).
async fn raw_request(addr: std::net::SocketAddr, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The server may answer and close before it has read all of an oversized head.
    let _ = s.write_all(request.as_bytes()).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(15), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

// ---------------------------------------------------------------------------------------
// The property test

/// Cases per store: enough to meet every route with many shapes, few enough that the suite
/// stays fast on a shared machine.
const CASES: u32 = 64;

/// The routes, as (method, path with `{id}` / `{key}` / `{kind}` holes).
const ROUTES: &[(&str, &str)] = &[
    ("POST", "/catalog/{kind}"),
    ("GET", "/catalog/jobs"),
    ("GET", "/catalog/jobs/{id}"),
    ("POST", "/catalog/jobs/{id}/cancel"),
    ("GET", "/catalog/products"),
    ("POST", "/catalog/products"),
    ("GET", "/catalog/products/{key}"),
];

#[derive(Clone, Debug)]
enum TenantChoice {
    /// A valid tenant no other case uses.
    Fresh,
    Raw(String),
    Missing,
}

#[derive(Clone, Debug)]
struct RandomRequest {
    route: usize,
    segment: String,
    tenant: TenantChoice,
    fields: Vec<(String, String)>,
    in_body: bool,
    content_type: Option<String>,
    raw_body: Option<Vec<u8>>,
}

/// Field names the routes know, each as likely as any other.
const FIELD_NAMES: &[&str] = &["wait", "force", "limit", "cursor", "source", "tenant_id"];

/// Values that mean something to some route.
const FIELD_VALUES: &[&str] = &[
    "true",
    "0",
    "-1",
    "101",
    "demo.jsonl",
    "../../etc/passwd",
    "http://127.0.0.1:6379/",
];

/// Content types the routes read or refuse.
const CONTENT_TYPES: &[&str] = &[
    "application/x-www-form-urlencoded",
    "application/json",
    "multipart/form-data",
    "multipart/form-data; boundary=zz",
    "text/csv",
    "application/x-ndjson",
    "text/plain",
];

/// Any one of `values`, each as likely as the others.
fn known(values: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop::sample::select(values).prop_map(|s| s.to_owned())
}

/// How often a strategy picks one of `values`: as often as one arm per value would.
fn weight(values: &[&str]) -> u32 {
    u32::try_from(values.len()).expect("a short list")
}

fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        weight(FIELD_NAMES) => known(FIELD_NAMES),
        1 => "\\PC{0,12}",
    ]
}

fn field_value() -> impl Strategy<Value = String> {
    prop_oneof![
        weight(FIELD_VALUES) => known(FIELD_VALUES),
        1 => "\\PC{0,24}",
        1 => ".{0,24}",
    ]
}

fn content_type() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        1 => Just(None),
        weight(CONTENT_TYPES) => known(CONTENT_TYPES).prop_map(Some),
        1 => "[ -~]{0,30}".prop_map(Some),
    ]
}

fn random_request() -> impl Strategy<Value = RandomRequest> {
    (
        0..ROUTES.len(),
        prop_oneof![
            Just("sync".to_owned()),
            Just("enrich".to_owned()),
            Just("pair".to_owned()),
            Just("6f0c1d2e-0000-4000-8000-000000000000".to_owned()),
            "\\PC{1,20}",
        ],
        prop_oneof![
            Just(TenantChoice::Fresh),
            Just(TenantChoice::Missing),
            "\\PC{0,140}".prop_map(TenantChoice::Raw),
        ],
        proptest::collection::vec((field_name(), field_value()), 0..4),
        any::<bool>(),
        content_type(),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..96)),
    )
        .prop_map(
            |(route, segment, tenant, fields, in_body, content_type, raw_body)| RandomRequest {
                route,
                segment,
                tenant,
                fields,
                in_body,
                content_type,
                raw_body,
            },
        )
}

impl Isolated {
    /// Keys under the app's prefixes that name `tenant`.
    async fn keys_of(&self, tenant: &str) -> BTreeSet<String> {
        self.keys()
            .await
            .into_iter()
            .filter(|k| !tenant.is_empty() && k.contains(tenant))
            .collect()
    }

    async fn throw(&self, req: RandomRequest) -> Result<(), TestCaseError> {
        let (method, template) = ROUTES[req.route];
        let tenant = match &req.tenant {
            TenantChoice::Fresh => Some(unique("pt")),
            TenantChoice::Raw(t) => Some(t.clone()),
            TenantChoice::Missing => None,
        };
        let mut fields = req.fields.clone();
        if let Some(t) = &tenant {
            fields.insert(0, ("tenant_id".to_owned(), t.clone()));
        }
        let mut url = reqwest::Url::parse(&self.app.url("/")).unwrap();
        {
            let mut segments = url.path_segments_mut().unwrap();
            segments.clear();
            for part in template.trim_start_matches('/').split('/') {
                segments.push(if part.starts_with('{') {
                    &req.segment
                } else {
                    part
                });
            }
        }
        let mut body = Vec::new();
        if req.in_body && method == "POST" {
            body = match req.content_type.as_deref() {
                Some("application/json") => {
                    let object: serde_json::Map<String, Value> = fields
                        .iter()
                        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                        .collect();
                    serde_json::to_vec(&object).unwrap()
                }
                _ => serde_urlencoded::to_string(&fields).unwrap().into_bytes(),
            };
        } else {
            url.query_pairs_mut().extend_pairs(&fields);
        }
        if let Some(raw) = &req.raw_body {
            body = raw.clone();
        }
        let before = self.keys_of(tenant.as_deref().unwrap_or("")).await;
        let (status, answer) = self
            .send(
                method,
                url.as_str().trim_start_matches(&self.app.url("")),
                req.content_type.as_deref(),
                body,
            )
            .await;
        prop_assert!(status < 500, "{method} {url}: {status} {answer}");
        if status >= 400 {
            prop_assert!(
                answer["error"].is_string() && answer["message"].is_string(),
                "{method} {url}: {status} {answer}"
            );
            let after = self.keys_of(tenant.as_deref().unwrap_or("")).await;
            prop_assert_eq!(
                before,
                after,
                "a refused request wrote keys: {} {}",
                method,
                url
            );
        }
        Ok(())
    }
}

#[test]
fn random_requests_to_every_route_get_a_2xx_or_a_4xx_envelope_and_refusals_write_nothing() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for backend in [Backend::Memory, Backend::Redis] {
        let app = rt.block_on(isolated(backend));
        let mut runner = TestRunner::new(ProptestConfig {
            cases: CASES,
            failure_persistence: None,
            ..ProptestConfig::default()
        });
        runner
            .run(&random_request(), |req| rt.block_on(app.throw(req)))
            .unwrap_or_else(|e| panic!("{backend:?}: {e}"));
    }
}
