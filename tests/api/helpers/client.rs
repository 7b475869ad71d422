//! The service's HTTP API as a test reaches it, the same whether the app runs in this
//! process (`TestApp`) or as the built binary (`Service`): requests by route, and polls
//! that wait for a job to reach a state (bounded, so a stuck job fails its test).

use std::future::Future;
use std::time::{Duration, Instant};

use std::sync::Arc;

use catalog_jobs::jobs::TenantId;
use reqwest::{Method, Response, StatusCode};
use serde_json::Value;

use super::{Gate, HeldFeeds};

/// How often a poll asks again.
const POLL_EVERY: Duration = Duration::from_millis(20);

/// Real HTTP to one running service.
#[derive(Clone)]
pub struct Api {
    base: String,
    pub client: reqwest::Client,
    /// Longest a poll waits for a job to get where the test expects it.
    patience: Duration,
}

impl Api {
    pub fn new(base: String, client: reqwest::Client, patience: Duration) -> Self {
        Self {
            base,
            client,
            patience,
        }
    }

    /// The same service, polled with `patience` instead (for a test whose jobs wait behind
    /// many others in the shared queue).
    pub fn patient(&self, patience: Duration) -> Self {
        Self {
            patience,
            ..self.clone()
        }
    }

    /// `http://host:port`, without a trailing slash.
    pub fn base(&self) -> String {
        self.base.clone()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// GET a path of the service.
    pub async fn get(&self, path: &str) -> Response {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("the service answers")
    }

    /// GET a path with these headers, whatever it answers.
    pub async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        let request = self.client.get(self.url(path));
        let request = headers
            .iter()
            .fold(request, |r, (name, value)| r.header(*name, *value));
        request.send().await.expect("the service answers")
    }

    /// GET a path as an event stream (`Accept: text/event-stream`), whatever it answers.
    pub async fn stream(&self, path: &str) -> Response {
        self.get_with(path, &[("accept", "text/event-stream")])
            .await
    }

    /// GET a path and read its JSON body, whatever the status.
    pub async fn get_json(&self, path: &str) -> Value {
        self.get(path).await.json().await.expect("a JSON body")
    }

    pub async fn post_form(&self, path: &str, form: &[(&str, &str)]) -> Response {
        self.client
            .post(self.url(path))
            .form(form)
            .send()
            .await
            .expect("the service answers")
    }

    /// Sends `method path` with `token` as its bearer (`None`: no `Authorization`) and an
    /// empty NDJSON body (an empty import, where the route reads one), whatever it answers.
    pub async fn send_as(&self, method: Method, path: &str, token: Option<&str>) -> Response {
        let mut request = self.client.request(method, self.url(path));
        request = request
            .header("content-type", "application/x-ndjson")
            .body("");
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send().await.expect("the service answers")
    }

    /// GETs `path` with `token` as its bearer, whatever it answers.
    pub async fn get_as(&self, path: &str, token: &str) -> Response {
        self.send_as(Method::GET, path, Some(token)).await
    }

    /// Asks for a job of `kind` (`POST /catalog/{kind}`).
    pub async fn start(&self, kind: &str, form: &[(&str, &str)]) -> Response {
        self.post_form(&format!("/catalog/{kind}"), form).await
    }

    /// Asks for a job of `kind` with `token` as the bearer, whatever it answers.
    pub async fn start_as(&self, kind: &str, form: &[(&str, &str)], token: &str) -> Response {
        let request = self.client.post(self.url(&format!("/catalog/{kind}")));
        let request = request.bearer_auth(token).form(form);
        request.send().await.expect("the service answers")
    }

    /// Starts a job and answers its id (the start must be accepted).
    pub async fn start_id(&self, kind: &str, form: &[(&str, &str)]) -> String {
        started_id(self.start(kind, form).await).await
    }

    /// Asks for a job of `kind` and reads its JSON answer, whatever the status.
    pub async fn start_json(&self, kind: &str, form: &[(&str, &str)]) -> Value {
        let answer = self.start(kind, form).await;
        answer.json().await.expect("a JSON answer")
    }

    /// Asks for a job of `kind`, under an `Idempotency-Key` when one is given.
    pub async fn start_keyed(
        &self,
        kind: &str,
        form: &[(&str, &str)],
        key: Option<&str>,
    ) -> Response {
        let mut request = self
            .client
            .post(self.url(&format!("/catalog/{kind}")))
            .form(form);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request.send().await.expect("the service answers")
    }

    /// Starts a `gated` job of tenant `t` and waits until it holds at its gate (running, at
    /// 50 %): the gate to release it by, and its id.
    pub async fn start_gated(&self, t: &TenantId) -> (Arc<Gate>, String) {
        let gate = Gate::of(t);
        let id = self.start_id("gated", &[("tenant_id", t.as_str())]).await;
        gate.reached().await;
        (gate, id)
    }

    /// Starts a sync of `t` from the held feed `name` of `feeds` and waits until it runs
    /// (polling through a store that is coming back): its id.
    pub async fn start_held_sync(&self, feeds: &HeldFeeds, t: &TenantId, name: &str) -> String {
        let id = self.start_sync(t.as_str(), &feeds.url(name)).await;
        self.poll(&id, "running", running).await;
        id
    }

    /// Starts a sync of the tenant's catalogue from one source; answers its id (the start
    /// must be accepted).
    pub async fn start_sync(&self, tenant: &str, source: &str) -> String {
        self.start_id("sync", &[("tenant_id", tenant), ("source", source)])
            .await
    }

    /// Asks for a sync of the tenant's catalogue from these sources.
    pub async fn sync(&self, tenant: &str, sources: &[String]) -> Response {
        let mut form: Vec<(&str, &str)> = vec![("tenant_id", tenant)];
        form.extend(sources.iter().map(|s| ("source", s.as_str())));
        self.post_form("/catalog/sync", &form).await
    }

    /// The ids `GET /catalog/jobs?{query}` lists, in its order (it must answer 200).
    pub async fn job_ids(&self, query: &str) -> Vec<String> {
        let r = self.get(&format!("/catalog/jobs?{query}")).await;
        assert_eq!(r.status(), 200, "the listing ?{query}");
        let listing: Value = r.json().await.expect("a JSON listing");
        listing["jobs"]
            .as_array()
            .expect("a listing holds jobs")
            .iter()
            .map(|j| j["job_id"].as_str().expect("a job id").to_owned())
            .collect()
    }

    /// Every page of a paged listing, from `path` (with its query) on, following each page's
    /// `next_cursor` until a page has none; more than `at_most` pages fails the test.
    pub async fn pages(&self, path: &str, at_most: usize) -> Vec<Value> {
        let mut pages = vec![self.get_json(path).await];
        while let Some(cursor) = pages[pages.len() - 1]["next_cursor"].as_str() {
            assert!(pages.len() < at_most, "{path} goes on past {at_most} pages");
            let next = self.get_json(&format!("{path}&cursor={cursor}")).await;
            pages.push(next);
        }
        pages
    }

    /// Imports products into the tenant's catalogue (`POST /catalog/products`).
    pub async fn import(
        &self,
        tenant: &str,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> Response {
        self.client
            .post(self.url(&format!("/catalog/products?tenant_id={tenant}")))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("the service answers")
    }

    /// The tenant's product (it must be there).
    pub async fn product(&self, tenant: &str, key: &str) -> Value {
        let r = self
            .get(&format!("/catalog/products/{key}?tenant_id={tenant}"))
            .await;
        assert_eq!(r.status(), 200, "product {key}");
        r.json().await.expect("a JSON product")
    }

    /// `GET /catalog/jobs/{id}`, whatever it answers.
    pub async fn job(&self, id: &str) -> Response {
        self.get(&format!("/catalog/jobs/{id}")).await
    }

    /// Asks for the tenant to be removed (`DELETE /catalog/tenants/{t}`), whatever it answers.
    pub async fn delete_tenant(&self, t: &str) -> Response {
        let url = self.url(&format!("/catalog/tenants/{t}"));
        self.client
            .delete(url)
            .send()
            .await
            .expect("the service answers")
    }

    /// Asks for the job to be cancelled (`POST /catalog/jobs/{id}/cancel`).
    pub async fn cancel(&self, id: &str) -> Response {
        self.client
            .post(self.url(&format!("/catalog/jobs/{id}/cancel")))
            .send()
            .await
            .expect("the service answers")
    }

    /// The job's snapshot (it must be there).
    pub async fn get_job(&self, id: &str) -> Value {
        let r = self.job(id).await;
        assert_eq!(r.status(), 200, "GET job {id}");
        r.json().await.expect("a JSON snapshot")
    }

    pub async fn readyz(&self) -> Response {
        self.get("/readyz").await
    }

    /// Polls a job until `done` holds for it; every read must find the job.
    pub async fn wait_for(&self, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        self.poll_job(id, "what the test waits for", |_| false, done)
            .await
    }

    /// Polls a job until it shows `status`: progress reaches the store at most one write
    /// interval after it is reported. Every read must find the job.
    pub async fn wait_for_status(&self, id: &str, status: &str) -> Value {
        self.poll_job(id, status, |_| false, |j| j["status"] == status)
            .await
    }

    /// Polls a job until it has ended or reads lost. A 503 (the store is coming back) is
    /// polled through.
    pub async fn poll_until_ended(&self, id: &str) -> Value {
        let ended = |j: &Value| {
            !matches!(
                j["status"].as_str(),
                Some("queued" | "running" | "cancelling")
            )
        };
        self.poll_job(id, "ended", |s| s == 503, ended).await
    }

    /// Polls a job until `done` holds, through any other answer (a 503 while the store is
    /// away, a 404 while its record is being written back): for tests of faults.
    pub async fn poll(&self, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        self.poll_job(id, what, |_| true, done).await
    }

    async fn poll_job(
        &self,
        id: &str,
        what: &str,
        tolerated: impl Fn(StatusCode) -> bool,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + self.patience;
        loop {
            let r = self.job(id).await;
            let status = r.status();
            let last = if status == 200 {
                let job: Value = r.json().await.expect("a JSON snapshot");
                if done(&job) {
                    return job;
                }
                job.to_string()
            } else {
                assert!(tolerated(status), "GET job {id} answered {status}");
                format!("HTTP {status}")
            };
            assert!(
                Instant::now() < deadline,
                "job {id} never became {what} within {:?}: {last}",
                self.patience
            );
            tokio::time::sleep(POLL_EVERY).await;
        }
    }
}

/// A request a test builds by hand (its own headers, method or client), sent, and its JSON
/// answer read whatever the status: `client.post(url).form(&f).json_answer().await`.
pub trait JsonAnswer {
    fn json_answer(self) -> impl Future<Output = Value> + Send;
}

impl JsonAnswer for reqwest::RequestBuilder {
    async fn json_answer(self) -> Value {
        let answer = self.send().await.expect("the server answers");
        answer.json().await.expect("a JSON answer")
    }
}

/// The id of the job a start accepted (it must answer 202).
pub async fn started_id(r: Response) -> String {
    assert_eq!(r.status(), 202, "the job was accepted");
    let body: Value = r.json().await.expect("a JSON snapshot");
    body["job_id"].as_str().expect("a job id").to_owned()
}

/// The seconds an answer's `Retry-After` asks the client to wait (it must carry one).
pub fn retry_after(r: &Response) -> u64 {
    let header = r.headers()["retry-after"]
        .to_str()
        .expect("an ASCII header");
    header.parse().expect("Retry-After in whole seconds")
}

/// An answer's status and its JSON body (it must have one).
pub async fn status_and_json(r: Response) -> (u16, Value) {
    let status = r.status().as_u16();
    (status, r.json().await.expect("a JSON body"))
}

/// Whether a job's snapshot says it runs.
pub fn running(job: &Value) -> bool {
    job["status"] == "running"
}

/// How long the tests' clients keep an idle connection for reuse: below the service's
/// `IDLE_TIMEOUT_SECONDS` (15 s), as any client of it should be. A connection kept longer can
/// be closed by the service just as a request is written on it, and that request fails
/// (`IncompleteMessage`: seen once in clean-clone CI, a poll after a pause of ~15 s in the
/// reshard test).
const POOL_IDLE: Duration = Duration::from_secs(5);

/// The tests' HTTP client: connections reused for at most [`POOL_IDLE`] idle, each request
/// bounded by `timeout` when given.
pub fn http_client(timeout: Option<Duration>) -> reqwest::Client {
    let builder = reqwest::Client::builder().pool_idle_timeout(POOL_IDLE);
    let builder = match timeout {
        Some(t) => builder.timeout(t),
        None => builder,
    };
    builder.build().expect("a client builds")
}
