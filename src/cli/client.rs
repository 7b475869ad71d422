//! The service's HTTP API as the CLI uses it: start, get, list, cancel, retry, products.
//! Answers are the server's JSON; a failure becomes a [`ClientError`] in the command line's
//! words.

use std::path::Path;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, RETRY_AFTER};
use reqwest::{RequestBuilder, Response, StatusCode};
use serde_json::Value;

pub use super::error::ClientError;

/// How long one request may take: a `wait`-less start, a poll or a listing answers in
/// milliseconds; this only bounds a server that hangs.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A job snapshot as the server sent it (kept whole for `--json`).
#[derive(Clone, Debug)]
pub struct Job(pub Value);

impl Job {
    /// A job as the server answered it: without a `job_id` and a `status` the answer is not
    /// a job, and the server (or whatever answers at `--server`) is at fault.
    fn from_answer(value: Value) -> Result<Self, ClientError> {
        let is_job = ["job_id", "status"]
            .iter()
            .all(|f| value[f].as_str().is_some_and(|s| !s.is_empty()));
        if is_job {
            Ok(Self(value))
        } else {
            Err(ClientError::BadAnswer(
                "the answer is not a job (it has no job_id and status): is --server a \
                 catalog-jobs service?"
                    .into(),
            ))
        }
    }

    fn text(&self, field: &str) -> &str {
        self.0[field].as_str().unwrap_or("")
    }
    pub fn id(&self) -> String {
        self.text("job_id").to_owned()
    }
    pub fn tenant(&self) -> &str {
        self.text("tenant_id")
    }
    pub fn kind(&self) -> &str {
        self.text("kind")
    }
    pub fn status(&self) -> &str {
        self.text("status")
    }
    pub fn step(&self) -> &str {
        self.text("step")
    }
    pub fn error(&self) -> Option<&str> {
        self.0["error"].as_str()
    }
    pub fn percent(&self) -> u64 {
        self.0["percent"].as_u64().unwrap_or(0)
    }
    /// The service's estimate of the seconds left: none while queued, before any progress
    /// (no rate is known yet) and once ended.
    pub fn eta_seconds(&self) -> Option<u64> {
        self.0["eta_seconds"].as_u64()
    }
    /// A pipeline's steps, each as a job of its own as far as the pipeline's snapshot tells
    /// (kind, id, status, percent, step; once ended, its report from the pipeline's result).
    pub fn steps(&self) -> Vec<Job> {
        let steps = self.0["steps"].as_array().map(Vec::as_slice);
        steps
            .unwrap_or_default()
            .iter()
            .map(|step| {
                let mut job = step.clone();
                let report = &self.0["result"][step["kind"].as_str().unwrap_or("")];
                job["result"] = report.clone();
                Job(job)
            })
            .collect()
    }
    /// Whether the job will not change any more (`lost` included: nobody runs it).
    pub fn has_ended(&self) -> bool {
        !matches!(self.status(), "queued" | "running" | "cancelling")
    }
}

/// What a start (or a retry) came to.
pub enum Started {
    Accepted(Job),
    /// A job of that tenant and kind is active: its id.
    AlreadyRunning(String),
}

/// One page of a listing and the cursor of the next (none on the last).
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

/// What `jobs` asks the listing for.
pub struct JobQuery<'a> {
    pub tenant: Option<&'a str>,
    pub statuses: &'a [String],
    pub kind: Option<&'a str>,
    pub limit: usize,
    pub cursor: Option<String>,
}

pub struct Client {
    base: String,
    http: reqwest::Client,
    /// The `--token-file` given, for the words of a refusal.
    token_file: Option<String>,
}

impl Client {
    pub fn new(server: &str, token_file: Option<&Path>) -> Result<Self, ClientError> {
        let base = server.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ClientError::BadServerUrl(format!(
                "--server must be an http:// or https:// URL, got `{server}`"
            )));
        }
        let mut headers = HeaderMap::new();
        if let Some(path) = token_file {
            headers.insert(AUTHORIZATION, bearer(path)?);
        }
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .default_headers(headers)
            .build()
            .map_err(|e| ClientError::BadServerUrl(e.to_string()))?;
        let token_file = token_file.map(|p| p.display().to_string());
        Ok(Self {
            base,
            http,
            token_file,
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn send(&self, request: RequestBuilder) -> Result<Response, ClientError> {
        request.send().await.map_err(|e| ClientError::Unreachable {
            url: self.base.clone(),
            cause: cause_chain(&e),
        })
    }

    /// The body of a 2xx, or the failure its status stands for.
    async fn answer(&self, response: Response) -> Result<Value, ClientError> {
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let body = json_body(response).await;
        if status.is_success() {
            return body;
        }
        let body = body.unwrap_or(Value::Null);
        if status.is_server_error() {
            return Err(ClientError::Server {
                status,
                message: body["message"].as_str().unwrap_or("no message").to_owned(),
                retry_after,
            });
        }
        Err(self.refused(&body))
    }

    fn refused(&self, body: &Value) -> ClientError {
        ClientError::refused(body, self.token_file.as_deref())
    }

    /// A start's answer: the job, or the active job's id on 409 `already_running`.
    async fn started(&self, response: Response) -> Result<Started, ClientError> {
        if response.status() == StatusCode::CONFLICT {
            let body = json_body(response).await?;
            if body["error"] == "already_running" {
                let id = body["job_id"].as_str().unwrap_or_default().to_owned();
                return Ok(Started::AlreadyRunning(id));
            }
            return Err(self.refused(&body));
        }
        Ok(Started::Accepted(Job::from_answer(
            self.answer(response).await?,
        )?))
    }

    /// `POST {path}` with form fields (a start of a kind, or a pipeline).
    pub async fn start(&self, path: &str, form: &[(&str, String)]) -> Result<Started, ClientError> {
        let body = serde_urlencoded::to_string(form).expect("string pairs always encode");
        let request = self
            .http
            .post(self.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        self.started(self.send(request).await?).await
    }

    /// `POST /catalog/jobs/{id}/retry`: a new job with the old one's tenant, kind and fields.
    pub async fn retry(&self, id: &str) -> Result<Started, ClientError> {
        let url = self.url(&format!("/catalog/jobs/{}/retry", path_segment(id)));
        self.started(self.send(self.http.post(url)).await?).await
    }

    /// `GET /catalog/jobs/{id}`.
    pub async fn job(&self, id: &str) -> Result<Job, ClientError> {
        let url = self.url(&format!("/catalog/jobs/{}", path_segment(id)));
        let response = self.send(self.http.get(url)).await?;
        Job::from_answer(self.answer(response).await?)
    }

    /// `GET /catalog/jobs` with the query's filters: one page.
    pub async fn list(&self, query: &JobQuery<'_>) -> Result<Page<Job>, ClientError> {
        let mut pairs = vec![("limit", query.limit.to_string())];
        if let Some(tenant) = query.tenant {
            pairs.push(("tenant_id", tenant.to_owned()));
        }
        if !query.statuses.is_empty() {
            pairs.push(("status", query.statuses.join(",")));
        }
        if let Some(kind) = query.kind {
            pairs.push(("kind", kind.to_owned()));
        }
        if let Some(cursor) = &query.cursor {
            pairs.push(("cursor", cursor.clone()));
        }
        let request = self.http.get(self.url("/catalog/jobs")).query(&pairs);
        let body = self.answer(self.send(request).await?).await?;
        let jobs = body["jobs"].as_array().cloned().unwrap_or_default();
        Ok(Page {
            items: jobs
                .into_iter()
                .map(Job::from_answer)
                .collect::<Result<_, _>>()?,
            next_cursor: body["next_cursor"].as_str().map(str::to_owned),
        })
    }

    /// `POST /catalog/jobs/{id}/cancel`: whether a stop was requested (false: it had
    /// already ended), and the job.
    pub async fn cancel(&self, id: &str) -> Result<(bool, Job), ClientError> {
        let url = self.url(&format!("/catalog/jobs/{}/cancel", path_segment(id)));
        let response = self.send(self.http.post(url)).await?;
        if response.status() == StatusCode::CONFLICT {
            let body = json_body(response).await?;
            if body["error"] == "not_active" {
                return Ok((false, Job::from_answer(body["job"].clone())?));
            }
            return Err(self.refused(&body));
        }
        Ok((true, Job::from_answer(self.answer(response).await?)?))
    }

    /// `GET /catalog/products`: a page of a tenant's products, or of what `search` finds.
    pub async fn products(
        &self,
        tenant: &str,
        search: Option<&str>,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<Value>, ClientError> {
        let mut pairs = vec![("tenant_id", tenant), ("limit", &limit.to_string())]
            .into_iter()
            .map(|(k, v)| (k, v.to_owned()))
            .collect::<Vec<_>>();
        if let Some(q) = search {
            pairs.push(("q", q.to_owned()));
        }
        if let Some(cursor) = cursor {
            pairs.push(("cursor", cursor.to_owned()));
        }
        let request = self.http.get(self.url("/catalog/products")).query(&pairs);
        let body = self.answer(self.send(request).await?).await?;
        Ok(Page {
            items: body["products"].as_array().cloned().unwrap_or_default(),
            next_cursor: body["next_cursor"].as_str().map(str::to_owned),
        })
    }

    /// `GET /catalog/products/{key}`: the product with its enrichment and neighbours.
    pub async fn product(&self, tenant: &str, key: &str) -> Result<Value, ClientError> {
        let url = self.url(&format!("/catalog/products/{}", path_segment(key)));
        let request = self.http.get(url).query(&[("tenant_id", tenant)]);
        self.answer(self.send(request).await?).await
    }
}

/// An id or a key goes into a path segment: anything but letters, digits and `- _ .` is
/// percent-encoded, so a stray `/` or `?` cannot reach another route.
fn path_segment(id: &str) -> String {
    id.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn bearer(path: &Path) -> Result<HeaderValue, ClientError> {
    let token_error = |cause: String| ClientError::Token {
        path: path.display().to_string(),
        cause,
    };
    let token = std::fs::read_to_string(path).map_err(|e| token_error(e.to_string()))?;
    let token = token.trim();
    if token.is_empty() {
        return Err(token_error("the file is empty".into()));
    }
    let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| token_error("the token is not one line of visible characters".into()))?;
    value.set_sensitive(true);
    Ok(value)
}

async fn json_body(response: Response) -> Result<Value, ClientError> {
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|e| ClientError::Unreachable {
            url: String::new(),
            cause: cause_chain(&e),
        })?;
    serde_json::from_str(&text).map_err(|_| ClientError::Server {
        status,
        message: "the answer is not JSON: is --server a catalog-jobs service?".into(),
        retry_after: None,
    })
}

fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

fn cause_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
