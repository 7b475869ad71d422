//! The walk's machinery: requests as rows of data (`Row`), sent to one of six apps that each
//! answer a different way (open, store down, shutting down, rate-limited, token-guarded,
//! short request timeout), and every answer checked against the served document — its
//! status documented, the headers that status always carries present, the body valid
//! against its schema (`jsonschema`, with every object closed: an undocumented field fails).
//! A row names its route by its path; the route's template is the document's that matches.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use catalog_jobs::catalog::products::{CatalogStore, MemoryCatalog, RedisCatalog};
use catalog_jobs::catalog::Catalog;
use catalog_jobs::config::tokens::hash_token;
use catalog_jobs::config::Config;
use catalog_jobs::jobs::memory::MemoryStore;
use catalog_jobs::jobs::redis::RedisStore;
use catalog_jobs::jobs::store::JobStore;
use catalog_jobs::startup::{catalog_settings, store_settings, App as Service};
use futures_util::{stream, StreamExt};
use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder};
use serde_json::{json, Value};

use crate::helpers::{dead_redis_url, test_config, unique, HeldFeeds, NOBODY_LISTENS};

/// Small enough that a test body can exceed it.
const MAX_BODY: usize = 16 * 1024;

/// The slow app's `REQUEST_TIMEOUT_SECONDS`: short, so a stalled body is answered soon; the
/// body never arrives, so no load can make it too short.
const SHORT_REQUEST_TIMEOUT: Duration = Duration::from_millis(400);

/// The operator's token on the guarded app (scope `*`); tenant `a`'s is `{a_token}`.
pub const OPERATOR_TOKEN: &str = "oas-operator-secret";
/// A read-only operator's token on the guarded app (scope `read:*`).
pub const READER_TOKEN: &str = "oas-reader-secret";
/// A well-formed job id that no job has (a guard answers before the store is asked).
const ANY_JOB_ID: &str = "4f1c2d3e-0000-4000-8000-000000000000";

/// Whether a documented response header is sent on some answers of its status only, as
/// the document says: `Idempotent-Replayed` on a replay, and `Retry-After` on a job read
/// while it is active (on a 429 and a 503 it is always sent). Every other documented header
/// must be on every answer of its status; a row that expects a conditional one names it in
/// `carries`.
pub fn conditional(status: &str, header: &str) -> bool {
    header == "Idempotent-Replayed" || (header == "Retry-After" && status == "200")
}

/// The apps a walk sends its rows to; each is started the first time a row names it. All
/// have one worker and one waiting place, so held jobs fill them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum App {
    Good,
    /// Its Redis (jobs and catalogue) accepts connections and closes them at once.
    Dead,
    /// Shut down before its first request: it takes no job.
    Closing,
    /// One create per tenant per minute, and ten waiting places.
    Limited,
    /// Tokens configured: the operator's, a read-only operator's and tenant `a`'s.
    Guarded,
    /// `REQUEST_TIMEOUT_SECONDS` of 400 ms.
    Slow,
    /// A tenant may hold one event stream at a time.
    Streaming,
}

/// A request body; its text may hold `{placeholders}`.
#[derive(Clone, Copy, Debug)]
pub enum Body {
    None,
    Form(&'static [(&'static str, &'static str)]),
    Json(&'static str),
    /// A content type and a body.
    Raw(&'static str, &'static str),
    Multipart(&'static [(&'static str, &'static str)]),
    /// Twice `MAX_BODY` bytes of the content type.
    TooBig(&'static str),
    /// The content type, then a head of the body and nothing more, ever.
    Stalled(&'static str, &'static str),
    /// JSON Lines: 1,500 rows, then the request's tenant (`{t}`) deleted on the same app,
    /// then 1,500 more.
    DeletedMidway,
}

/// One request and what its answer must be. Paths, header values, bodies and expected values
/// may hold `{name}`s, filled from the walk's values (`{fresh}`: a new tenant each time).
#[derive(Clone, Copy, Debug)]
pub struct Row {
    pub app: App,
    pub method: &'static str,
    pub path: &'static str,
    /// A query string too long to read inside `path`, without its `?` ("" for none).
    pub query: &'static str,
    pub body: Body,
    pub headers: &'static [(&'static str, &'static str)],
    pub status: u16,
    /// Conditional headers the answer carries, with their value ("" for any).
    pub carries: &'static [(&'static str, &'static str)],
    /// JSON pointers into the answer and the value each must have.
    pub expect: &'static [(&'static str, &'static str)],
    /// Values the answer gives later rows: a name and a JSON pointer ("" for the body).
    pub keep: &'static [(&'static str, &'static str)],
    /// Text the answer's body contains ("" for none).
    pub contains: &'static str,
    /// A kept value the whole answer must equal ("" for none).
    pub same_as: &'static str,
}

/// Tests that each send one table of rows, a line each: the test's name, the walk it starts
/// from (a `Walk`, awaited), and the table.
macro_rules! walks {
    ($($name:ident: $start:expr => $rows:expr,)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            $start.await.run($rows).await;
        }
    )*};
}
pub(crate) use walks;

impl Row {
    pub const fn new(app: App, method: &'static str, path: &'static str, status: u16) -> Row {
        Row {
            app,
            method,
            path,
            query: "",
            body: Body::None,
            headers: &[],
            status,
            carries: &[],
            expect: &[],
            keep: &[],
            contains: "",
            same_as: "",
        }
    }

    pub const fn get(app: App, path: &'static str, status: u16) -> Row {
        Row::new(app, "GET", path, status)
    }

    pub const fn post(app: App, path: &'static str, status: u16) -> Row {
        Row::new(app, "POST", path, status)
    }

    pub const fn delete(app: App, path: &'static str, status: u16) -> Row {
        Row::new(app, "DELETE", path, status)
    }

    pub const fn query(self, query: &'static str) -> Row {
        Row { query, ..self }
    }

    pub const fn body(self, body: Body) -> Row {
        Row { body, ..self }
    }

    pub const fn form(self, fields: &'static [(&'static str, &'static str)]) -> Row {
        self.body(Body::Form(fields))
    }

    pub const fn headers(self, headers: &'static [(&'static str, &'static str)]) -> Row {
        Row { headers, ..self }
    }

    pub const fn carries(self, carries: &'static [(&'static str, &'static str)]) -> Row {
        Row { carries, ..self }
    }

    pub const fn expect(self, expect: &'static [(&'static str, &'static str)]) -> Row {
        Row { expect, ..self }
    }

    pub const fn keep(self, keep: &'static [(&'static str, &'static str)]) -> Row {
        Row { keep, ..self }
    }

    pub const fn contains(self, contains: &'static str) -> Row {
        Row { contains, ..self }
    }

    pub const fn same_as(self, same_as: &'static str) -> Row {
        Row { same_as, ..self }
    }
}

/// A walk: the apps it started, the document they serve, and the values rows fill in.
pub struct Walk {
    pub doc: Value,
    /// The document's components, every object closed (see `closed`).
    components: Value,
    /// Never follows a redirect: `/`'s 303 is an answer to check.
    client: reqwest::Client,
    apps: HashMap<App, String>,
    /// The hosts and ports syncs may read: the held feeds and a port nobody listens on.
    allowed: Vec<String>,
    pub feeds: HeldFeeds,
    values: BTreeMap<String, Value>,
}

impl Walk {
    /// A walk with its own tenants (`t`, `other`, and `a` and `b` for the guarded app), its
    /// held feed (`held`), a source that cannot be reached (`unreachable`) and a job id no
    /// job has (`any_id`).
    pub async fn start() -> Walk {
        let feeds = HeldFeeds::start().await;
        let a = unique("oas");
        let mut values = BTreeMap::new();
        for (name, value) in [
            ("t", unique("oas")),
            ("other", unique("oas")),
            ("b", unique("oas")),
            ("a_token", format!("{a}-secret")),
            ("a", a),
            ("operator", OPERATOR_TOKEN.to_owned()),
            ("reader", READER_TOKEN.to_owned()),
            ("any_id", ANY_JOB_ID.to_owned()),
            ("held", feeds.url("oas")),
            ("unreachable", format!("http://{NOBODY_LISTENS}/feed.jsonl")),
        ] {
            values.insert(name.to_owned(), json!(value));
        }
        let mut walk = Walk {
            doc: Value::Null,
            components: Value::Null,
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("a client builds"),
            apps: HashMap::new(),
            allowed: vec![feeds.allowed(), NOBODY_LISTENS.to_owned()],
            feeds,
            values,
        };
        let base = walk.base(App::Good).await;
        let doc: Value = walk
            .client
            .get(format!("{base}/openapi.json"))
            .send()
            .await
            .expect("the app answers")
            .json()
            .await
            .expect("the document is JSON");
        assert_eq!(doc["openapi"], "3.1.0");
        walk.components = closed(&doc["components"]);
        walk.doc = doc;
        walk
    }

    /// A value a row kept, or the walk began with.
    pub fn value(&self, name: &str) -> &Value {
        self.values
            .get(name)
            .unwrap_or_else(|| panic!("no value `{name}`"))
    }

    /// Gives rows a value to fill in as `{name}`.
    pub fn set(&mut self, name: &str, value: impl Into<String>) {
        self.values
            .insert(name.to_owned(), Value::String(value.into()));
    }

    /// `text` with each `{name}` of a value filled in, and each `{fresh}` a new tenant.
    pub fn fill(&self, text: &str) -> String {
        let mut filled = text.to_owned();
        while filled.contains("{fresh}") {
            filled = filled.replacen("{fresh}", &unique("oas"), 1);
        }
        for (name, value) in &self.values {
            let value = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned);
            filled = filled.replace(&format!("{{{name}}}"), &value);
        }
        filled
    }

    /// The base URL of `app`, started the first time it is asked for.
    pub async fn base(&mut self, app: App) -> String {
        if let Some(base) = self.apps.get(&app) {
            return base.clone();
        }
        let base = serve(app, self.config(app)).await;
        self.apps.insert(app, base.clone());
        base
    }

    fn config(&self, app: App) -> Config {
        let mut config = test_config();
        config.sync_allowed_hosts = self.allowed.clone();
        config.max_body_bytes = MAX_BODY;
        config.max_start_body_bytes = MAX_BODY;
        config.max_concurrent_jobs = 1;
        config.max_queued_jobs = 1;
        match app {
            App::Limited => {
                config.tenant_creates_per_minute = 1;
                config.max_queued_jobs = 10;
            }
            App::Guarded => {
                let (a, a_token) = (self.fill("{a}"), self.fill("{a_token}"));
                config.api_tokens = Some(format!(
                    "* ops {};{a} a-bot {};read:* viewer {}",
                    hash_token(OPERATOR_TOKEN),
                    hash_token(&a_token),
                    hash_token(READER_TOKEN)
                ));
            }
            App::Slow => config.request_timeout_seconds = SHORT_REQUEST_TIMEOUT,
            App::Streaming => config.max_event_streams_per_tenant = 1,
            App::Good | App::Dead | App::Closing => {}
        }
        config
    }

    /// Sends every row, in order.
    pub async fn run(&mut self, rows: &[Row]) {
        for row in rows {
            self.row(row).await;
        }
    }
}

/// Starts `app` on `config` and answers its base URL.
async fn serve(app: App, config: Config) -> String {
    let (store, catalog): (Arc<dyn JobStore>, Arc<dyn CatalogStore>) = match app {
        App::Dead => {
            let url = dead_redis_url();
            (
                Arc::new(RedisStore::open(&url, store_settings(&config)).expect("the URL parses")),
                Arc::new(RedisCatalog::open(&url, "cat").expect("the URL parses")),
            )
        }
        // The limit is the store's: its settings carry one create per minute, and, as the
        // other apps', one waiting place.
        App::Limited => (
            Arc::new(MemoryStore::new(store_settings(&Config {
                max_queued_jobs: 1,
                ..config.clone()
            }))),
            Arc::new(MemoryCatalog::new()),
        ),
        _ => (
            Arc::new(MemoryStore::new(store_settings(&config))),
            Arc::new(MemoryCatalog::new()),
        ),
    };
    let catalog = Arc::new(Catalog {
        store: catalog,
        settings: catalog_settings(&config).expect("the allow-list parses"),
    });
    let registry = catalog_jobs::catalog::registry(catalog.clone());
    let service = Service::build_with(config, store, catalog, registry)
        .await
        .expect("the app builds");
    if app == App::Closing {
        service.runner().shutdown(Duration::ZERO).await;
    }
    let base = format!("http://{}", service.local_addr());
    tokio::spawn(service.run_until(std::future::pending()));
    base
}

impl Walk {
    /// Sends `row` and checks its answer: the status the row expects, which the document
    /// must list for the route, with the headers that status always carries and a body its
    /// schema allows; then the row's own expectations. Answers the body (JSON, or the text
    /// as a string).
    pub async fn row(&mut self, row: &Row) -> Value {
        let base = self.base(row.app).await;
        let path = match row.query {
            "" => self.fill(row.path),
            query => self.fill(&format!("{}?{query}", row.path)),
        };
        let method = Method::from_bytes(row.method.as_bytes()).expect("a method name");
        let mut request = self.client.request(method, format!("{base}{path}"));
        for (name, value) in row.headers {
            let value = self.fill(value);
            if !value.is_empty() {
                request = request.header(*name, value);
            }
        }
        let what = format!("{} {path} on the {:?} app", row.method, row.app);
        if let Body::DeletedMidway = row.body {
            let delete = format!("{base}/catalog/tenants/{}", self.fill("{t}"));
            request = request
                .header("content-type", "application/x-ndjson")
                .body(deleted_midway(self.client.clone(), delete));
        }
        let response = self
            .with_body(request, row.body)
            .send()
            .await
            .expect("the app answers");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("a body");
        assert_eq!(status, row.status, "{what}: {text}");
        let template = route_of_row(&self.doc, row.method, &path, status)
            .unwrap_or_else(|| panic!("{what}: no route of the document matches"));
        let documented = documented_answer(&self.doc, &template, row.method, status, &what);
        if status == 405 {
            check_allow(&self.doc["paths"][&template], &headers, &what);
        }
        check_headers(&documented, &headers, row, &what);
        let body = self.check_body(&documented, &headers, text, &what);
        self.check_expectations(row, &body, &what);
        body
    }

    fn with_body(&self, request: RequestBuilder, body: Body) -> RequestBuilder {
        let fields = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), self.fill(v)))
                .collect()
        };
        let typed = |r: RequestBuilder, content_type: &str| r.header("content-type", content_type);
        match body {
            Body::None => request,
            Body::Form(pairs) => request.form(&fields(pairs)),
            Body::Json(text) => typed(request, "application/json").body(self.fill(text)),
            Body::Raw(content_type, text) => typed(request, content_type).body(self.fill(text)),
            Body::Multipart(pairs) => {
                let form = fields(pairs)
                    .into_iter()
                    .fold(reqwest::multipart::Form::new(), |f, (k, v)| f.text(k, v));
                request.multipart(form)
            }
            Body::TooBig(content_type) => {
                typed(request, content_type).body("x".repeat(MAX_BODY * 2))
            }
            Body::Stalled(content_type, head) => {
                typed(request, content_type).body(stalled_body(head))
            }
            Body::DeletedMidway => request,
        }
    }

    /// The body, which the document must give for this answer (or say there is none), in a
    /// content type it lists, valid against that content's schema.
    fn check_body(
        &self,
        documented: &Value,
        headers: &HeaderMap,
        text: String,
        what: &str,
    ) -> Value {
        let Some(content) = documented["content"].as_object() else {
            assert!(text.is_empty(), "{what} is documented without a body");
            return Value::Null;
        };
        let content_type = headers["content-type"]
            .to_str()
            .expect("an ASCII content type");
        let (media, schema) = content
            .iter()
            .find(|(media, _)| content_type.starts_with(media.as_str()))
            .unwrap_or_else(|| panic!("{what}: {content_type}, documented {:?}", content.keys()));
        let body = if media == "application/json" {
            serde_json::from_str(&text).expect("a JSON body")
        } else {
            Value::String(text)
        };
        self.validate(&schema["schema"], &body, what);
        body
    }

    /// Panics when `body` does not match `schema` (a schema of the document, or a
    /// `$ref` into its components).
    pub fn validate(&self, schema: &Value, body: &Value, what: &str) {
        let mut root = schema.clone();
        root["components"] = self.components.clone();
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

    fn check_expectations(&mut self, row: &Row, body: &Value, what: &str) {
        for (pointer, expected) in row.expect {
            let got = body.pointer(pointer).unwrap_or(&Value::Null);
            let got = got.as_str().map_or_else(|| got.to_string(), str::to_owned);
            assert_eq!(got, self.fill(expected), "{what}: {pointer} of {body}");
        }
        if !row.contains.is_empty() {
            let text = body
                .as_str()
                .map_or_else(|| body.to_string(), str::to_owned);
            assert!(
                text.contains(row.contains),
                "{what}: no {:?} in {text}",
                row.contains
            );
        }
        if !row.same_as.is_empty() {
            assert_eq!(body, self.value(row.same_as), "{what}: not the same answer");
        }
        for (name, pointer) in row.keep {
            let kept = body
                .pointer(pointer)
                .unwrap_or_else(|| panic!("{what}: no {pointer} in {body}"));
            self.values.insert((*name).to_owned(), kept.clone());
        }
    }

    /// Reads `path` on `app` until its JSON has `want` at `pointer` (5 s at most); not a
    /// check of the document, a wait for a job to end.
    pub async fn poll(&mut self, app: App, path: &str, pointer: &str, want: &str) {
        let url = format!("{}{}", self.base(app).await, self.fill(path));
        for _ in 0..200 {
            let read: Value = self
                .client
                .get(&url)
                .send()
                .await
                .expect("the app answers")
                .json()
                .await
                .expect("a JSON body");
            if read.pointer(pointer).and_then(Value::as_str) == Some(want) {
                return;
            }
            // The job runs in the app; its end is polled like a client would.
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("{url} never read {want} at {pointer}");
    }
}

/// The headers `documented` lists are on the answer (the conditional ones when the row says
/// so, with the value it gives).
fn check_headers(documented: &Value, headers: &HeaderMap, row: &Row, what: &str) {
    let status = row.status.to_string();
    for (name, _) in documented["headers"].as_object().into_iter().flatten() {
        assert!(
            headers.contains_key(name.as_str()) || conditional(&status, name),
            "{what}: no {name} header"
        );
    }
    for (name, value) in row.carries {
        assert!(
            documented["headers"][*name].is_object(),
            "{what}: {name} is not documented here"
        );
        let got = headers.get(*name).and_then(|v| v.to_str().ok());
        assert!(
            got.is_some_and(|got| value.is_empty() || got == *value),
            "{what}: {name} is {got:?}, not {value:?}"
        );
    }
}

/// The methods an operation of the document may have (a path item's other keys are not).
pub const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

/// The methods of a path's operations, lower case.
pub fn methods_of(item: &Value) -> Vec<&'static str> {
    METHODS
        .into_iter()
        .filter(|m| item.get(*m).is_some())
        .collect()
}

/// The document's route for a request of `method` to `path` (its query ignored): among the
/// templates with that method and as many segments, the one with the most literal segments
/// equal to the path's (`/catalog/jobs` over `/catalog/{kind}`). A `{name}` of a row's path
/// matches only a template's parameter.
pub fn template_of(doc: &Value, method: &str, path: &str) -> Option<String> {
    route_among(doc, Some(method), path)
}

/// The route a row's answer is documented on: a 405 is the path's, whatever the method (the
/// router matches the path first, then finds no operation of the method); any other
/// answer is the operation's.
pub fn route_of_row(doc: &Value, method: &str, path: &str, status: u16) -> Option<String> {
    match status {
        405 => route_among(doc, None, path),
        _ => template_of(doc, method, path),
    }
}

/// The template of the document `path` matches best, among those with an operation of
/// `method` (any, for None).
fn route_among(doc: &Value, method: Option<&str>, path: &str) -> Option<String> {
    let path = path.split('?').next().unwrap_or_default();
    let segments: Vec<&str> = path.split('/').collect();
    let method = method.map(str::to_lowercase);
    let mut best: Option<(usize, &String)> = None;
    for (template, item) in doc["paths"].as_object()? {
        let parts: Vec<&str> = template.split('/').collect();
        let takes = method.as_ref().is_none_or(|m| item.get(m).is_some());
        if !takes || parts.len() != segments.len() {
            continue;
        }
        let matches = parts
            .iter()
            .zip(&segments)
            .all(|(t, s)| t.starts_with('{') || t == s);
        let literal = parts.iter().filter(|t| !t.starts_with('{')).count();
        if matches && best.is_none_or(|(n, _)| literal > n) {
            best = Some((literal, template));
        }
    }
    best.map(|(_, template)| template.clone())
}

/// The answer of `status` the document lists for `method` on `template`, its `$ref`
/// followed. A 405 is no operation's answer: every operation of the path lists it, the same.
fn documented_answer(doc: &Value, template: &str, method: &str, status: u16, what: &str) -> Value {
    let item = &doc["paths"][template];
    let status = status.to_string();
    let listed: Vec<&Value> = match status.as_str() {
        "405" => methods_of(item)
            .into_iter()
            .map(|m| &item[m]["responses"]["405"])
            .collect(),
        _ => vec![&item[method.to_lowercase()]["responses"][&status]],
    };
    assert!(
        listed.iter().all(|answer| answer.is_object()),
        "{what} answered {status}, which the document does not list for {template}"
    );
    assert!(
        listed.windows(2).all(|pair| pair[0] == pair[1]),
        "{what}: the operations of {template} list {status} differently"
    );
    match listed[0]["$ref"].as_str() {
        Some(to) => doc
            .pointer(to.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("{what}: {to} leads nowhere"))
            .clone(),
        None => listed[0].clone(),
    }
}

/// A 405's `Allow` names the methods of the path's documented operations, and `HEAD` beside
/// `GET` (the router answers a `HEAD` as the `GET`).
fn check_allow(item: &Value, headers: &HeaderMap, what: &str) {
    let allow = headers
        .get("allow")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("{what}: a 405 without Allow"));
    let mut allowed: Vec<String> = allow.split(',').map(|m| m.trim().to_lowercase()).collect();
    allowed.sort();
    let mut documented: Vec<String> = methods_of(item).into_iter().map(str::to_owned).collect();
    if documented.iter().any(|m| m == "get") {
        documented.push("head".to_owned());
    }
    documented.sort();
    assert_eq!(allowed, documented, "{what}: Allow is {allow}");
}

/// Rows of the import a delete interrupts, before the delete and after it: the whole body
/// stays under `MAX_BODY`, so the only refusal it can meet is the delete's (a larger first
/// part raced the delete to the body limit and answered 413 on a loaded machine).
const ROWS_BEFORE_DELETE: usize = 300;
const ROWS_AFTER_DELETE: usize = 10;
/// How long the walk waits, after the first rows of the interrupted import, before the delete.
const IMPORT_BEGINS_WITHIN: std::time::Duration = std::time::Duration::from_millis(300);

/// A body whose second part is sent only once `delete` (a tenant's removal) has answered.
fn deleted_midway(client: reqwest::Client, delete: String) -> reqwest::Body {
    let rows = |from: usize, count: usize| -> Vec<u8> {
        (from..from + count)
            .map(|i| format!("{{\"product_key\":\"m{i}\",\"name\":\"Mug {i}\"}}\n"))
            .collect::<String>()
            .into_bytes()
    };
    assert!(
        rows(0, ROWS_BEFORE_DELETE + ROWS_AFTER_DELETE).len() < MAX_BODY,
        "the interrupted import fits the walk's body limit"
    );
    let first = stream::once(async move { Ok::<_, std::io::Error>(rows(0, ROWS_BEFORE_DELETE)) });
    let second = stream::once(async move {
        // The import reads the tenant's tombstone as it begins; a delete that came first would
        // make this a new import after the delete (answered 200). Nothing the client sees says
        // the import has begun, so it gives the server a moment first.
        tokio::time::sleep(IMPORT_BEGINS_WITHIN).await;
        let removed = client.delete(delete).send().await.expect("the app answers");
        assert_eq!(removed.status(), 200, "the tenant is removed mid-import");
        // A few rows after the delete: they fit the socket's buffer, so the client has sent
        // its whole body when the refusal comes and reads it (a large rest would meet a
        // closed connection mid-write).
        Ok(rows(ROWS_BEFORE_DELETE, ROWS_AFTER_DELETE))
    });
    reqwest::Body::wrap_stream(first.chain(second))
}

/// A body that sends `head` and then nothing, ever (the client stalls).
fn stalled_body(head: &'static str) -> reqwest::Body {
    let first = stream::once(async move { Ok::<_, std::io::Error>(head.as_bytes().to_vec()) });
    reqwest::Body::wrap_stream(first.chain(stream::pending()))
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
