//! The service's HTTP API as the CLI uses it: start, get, list, cancel. Answers are the
//! server's JSON; failures are sorted by whose fault they are, which decides the exit code.

use std::path::Path;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, RETRY_AFTER};
use reqwest::{Response, StatusCode};
use serde_json::Value;

use super::Exit;

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
    /// Whether the job will not change any more (`lost` included: nobody runs it).
    pub fn has_ended(&self) -> bool {
        !matches!(self.status(), "queued" | "running" | "cancelling")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the service at {url}: {cause}")]
    Unreachable { url: String, cause: String },
    #[error("the service answered {status}: {message}")]
    Server {
        status: StatusCode,
        message: String,
        retry_after: Option<Duration>,
    },
    #[error("{message} ({code}, HTTP {status})")]
    Rejected {
        status: StatusCode,
        code: String,
        message: String,
    },
    #[error("cannot read the token file {path}: {cause}")]
    Token { path: String, cause: String },
    #[error("{0}")]
    BadServerUrl(String),
    /// A 2xx whose JSON is not what the route answers (a job without `job_id`/`status`).
    #[error("the service's answer makes no sense: {0}")]
    BadAnswer(String),
}

impl ClientError {
    pub fn exit(&self) -> Exit {
        match self {
            ClientError::Unreachable { .. }
            | ClientError::Server { .. }
            | ClientError::BadAnswer(_) => Exit::Unreachable,
            ClientError::Rejected { .. }
            | ClientError::Token { .. }
            | ClientError::BadServerUrl(_) => Exit::Usage,
        }
    }

    /// Worth retrying while following a job: the service or its store may be back soon.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ClientError::Unreachable { .. } | ClientError::Server { .. }
        )
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ClientError::Server { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

pub enum Started {
    Accepted(Job),
    AlreadyRunning(String),
}

pub struct Client {
    base: String,
    http: reqwest::Client,
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
        Ok(Self { base, http })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Response, ClientError> {
        request.send().await.map_err(|e| ClientError::Unreachable {
            url: self.base.clone(),
            cause: cause_chain(&e),
        })
    }

    /// `POST /catalog/{kind}` with form fields.
    pub async fn start(&self, kind: &str, form: &[(&str, String)]) -> Result<Started, ClientError> {
        let body = serde_urlencoded::to_string(form).expect("string pairs always encode");
        let request = self
            .http
            .post(self.url(&format!("/catalog/{kind}")))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        let response = self.send(request).await?;
        if response.status() == StatusCode::CONFLICT {
            let body = json_body(response).await?;
            if body["error"] == "already_running" {
                let id = body["job_id"].as_str().unwrap_or_default().to_owned();
                return Ok(Started::AlreadyRunning(id));
            }
            return Err(rejected(StatusCode::CONFLICT, &body));
        }
        Ok(Started::Accepted(Job::from_answer(
            answer(response).await?,
        )?))
    }

    /// `GET /catalog/jobs/{id}`, with the server's `Retry-After` when it sent one.
    pub async fn job(&self, id: &str) -> Result<(Job, Option<Duration>), ClientError> {
        let response = self
            .send(
                self.http
                    .get(self.url(&format!("/catalog/jobs/{}", path_segment(id)))),
            )
            .await?;
        let retry_after = retry_after(response.headers());
        Ok((Job::from_answer(answer(response).await?)?, retry_after))
    }

    /// `GET /catalog/jobs?tenant_id=T&limit=N`.
    pub async fn list(&self, tenant: &str, limit: usize) -> Result<Vec<Job>, ClientError> {
        let request = self.http.get(self.url("/catalog/jobs")).query(&[
            ("tenant_id", tenant.to_owned()),
            ("limit", limit.to_string()),
        ]);
        let body = answer(self.send(request).await?).await?;
        let jobs = body["jobs"].as_array().cloned().unwrap_or_default();
        jobs.into_iter().map(Job::from_answer).collect()
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
            return Err(rejected(StatusCode::CONFLICT, &body));
        }
        Ok((true, Job::from_answer(answer(response).await?)?))
    }
}

/// A job id goes into a path segment: anything but the id alphabet is percent-encoded, so
/// a stray `/` or `?` cannot reach another route.
fn path_segment(id: &str) -> String {
    id.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'-' {
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

/// The body of a 2xx, or the failure its status stands for.
async fn answer(response: Response) -> Result<Value, ClientError> {
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
    Err(rejected(status, &body))
}

fn rejected(status: StatusCode, body: &Value) -> ClientError {
    ClientError::Rejected {
        status,
        code: body["error"].as_str().unwrap_or("error").to_owned(),
        message: body["message"]
            .as_str()
            .unwrap_or("the service refused the request")
            .to_owned(),
    }
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
