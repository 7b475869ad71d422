//! `ApiError`: every failure a client can see, with its status decided in one `match`.
//!
//! Every error body is `{"error": "<code>", "message": "<one sentence>", ...context}`. Client
//! mistakes are 4xx and not logged as errors; a 5xx never echoes internals and is logged once,
//! with its cause, here at the boundary (the trace layer does not log failures again).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::access::ErrorNote;
use crate::catalog::feed::RowReport;
use crate::catalog::products::CatalogStoreError;
use crate::jobs::params::{
    ParamError, ParamErrorKind, INVALID_FIELD, MISSING_FIELD, UNKNOWN_FIELD,
};
use crate::jobs::runner::Refused;
use crate::jobs::store::StoreError;
use crate::jobs::{InvalidId, JobId, Snapshot, TenantId};

#[derive(Debug)]
pub enum ApiError {
    /// The body could not be read as its content type says (malformed JSON, bad multipart).
    MalformedBody(String),
    /// A field is missing or its value is not acceptable.
    InvalidField {
        code: &'static str,
        field: String,
        message: String,
    },
    /// The request names a field the job does not take.
    UnknownField {
        field: String,
        message: String,
    },
    /// The body's content type (or its absence, `got`) is not one the route reads.
    UnsupportedMediaType {
        got: String,
        accepted: &'static str,
    },
    /// A route that reads no body was sent one over `MAX_START_BODY_BYTES` (blanks or not:
    /// past that size it is not read to find out).
    BodyNotRead,
    /// The body comes in a content coding (`Content-Encoding: gzip`, as given) no route decodes.
    UnsupportedEncoding(String),
    /// The body is over the limit the named setting gives its route.
    PayloadTooLarge(&'static str),
    UnknownKind {
        kind: String,
        known: Vec<String>,
    },
    NotFound(String),
    NoRoute,
    MethodNotAllowed,
    /// A job of the kind is active for the tenant; `params_differ` when the request asked
    /// to join it and its parameters are not the request's.
    AlreadyRunning {
        job: JobId,
        params_differ: bool,
    },
    /// A job of the tenant whose data is to be removed is queued or running.
    StillActive(JobId),
    /// The `Idempotency-Key` was first sent with other parameters (for this job).
    IdempotencyKeyReused(JobId),
    /// A bulk call's `Idempotency-Key` was first sent with another body.
    BulkKeyReused,
    /// The tenant created `TENANT_CREATES_PER_MINUTE` jobs this minute; retry after this.
    RateLimited(std::time::Duration),
    NotActive(Box<Snapshot>),
    /// A retry names a job that has not ended (it is queued, running or cancelling).
    NotEnded(Box<Snapshot>),
    JobFailed(Box<Snapshot>),
    /// The job store failed: out of reach or misconfigured (503), or it refused a call no
    /// retry mends (`StoreError::Refused`: 500, a defect, logged with its cause).
    StoreUnavailable(StoreError),
    /// The catalogue store did not answer.
    CatalogUnavailable(CatalogStoreError),
    /// The catalogue store answered with a record it cannot read: not an outage, a defect.
    CatalogCorrupt(CatalogStoreError),
    /// A blocking task of this process stopped before it answered (a panic, or shutdown).
    Internal(String),
    ShuttingDown,
    /// A `wait=true` start's job on the embedded store, whose process is stopping: the job
    /// ends with it (nothing keeps it), so it is not answered as going on.
    LostWithProcess(JobId),
    /// A `wait=true` start's job, created and going on, whose state the job store did not
    /// give when the wait ended (out of reach, or its record not yet written back).
    WaitUnread(JobId),
    Overloaded,
    /// No token, or one this service does not know (with tokens configured).
    Unauthorized,
    /// The caller's token is for another tenant than the one the request names.
    Forbidden,
    /// A read-only token (`read:…`) asked for a change.
    ReadOnly,
    /// A tenant token asked for what only an operator token may read (the overview).
    OperatorsOnly,
    /// A tenant token asked for something only an operator may ask without naming a tenant
    /// (every tenant's jobs); it names the tenant the token is for.
    TenantNotNamed(TenantId),
    /// The request (headers or body) did not arrive within `REQUEST_TIMEOUT_SECONDS`.
    RequestTimeout,
    /// A JSON body names the same key twice.
    DuplicateKey(String),
    /// A header read once (`Authorization`, `Idempotency-Key`) is given more than once.
    DuplicateHeader(&'static str),
    /// `MAX_CONCURRENT_IMPORTS` imports are already running.
    ImportsBusy,
    /// The import's tenant was deleted while it ran: it stopped at its next batch.
    TenantDeleted,
    /// The tenant holds `MAX_EVENT_STREAMS_PER_TENANT` event streams on this instance.
    TenantStreamsFull(TenantId),
    /// `MAX_EVENT_STREAMS` event streams are open on this instance.
    StreamsFull,
    /// A connection beyond `MAX_CONNECTIONS`, kept for the probes, asked for something else.
    ConnectionsFull,
    /// An import that stopped part-way: its cause, and the report of the rows already saved.
    PartialImport {
        cause: Box<ApiError>,
        report: RowReport,
    },
}

/// Every error's body: a code, a sentence for a person, and the context fields its code
/// carries (absent otherwise).
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct ErrorBody {
    #[schema(value_type = ErrorCode)]
    pub error: &'static str,
    /// What happened and what to do, in one sentence.
    pub message: String,
    /// The request field at fault (4xx field errors).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The active job (`already_running`, `still_active`), the one an `Idempotency-Key`
    /// started, or one created whose replication was not confirmed (`store_unavailable`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<JobId>,
    /// The kinds this service runs (`unknown_kind`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub known_kinds: Option<Vec<String>>,
    /// The job as it ended (`job_failed`) or as it is (`not_active`, `still_active`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<Box<Snapshot>>,
    /// What an import saved before it stopped part-way (`payload_too_large`,
    /// `malformed_body`, `request_timeout`, `tenant_deleted` on `POST /catalog/products`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<RowReport>,
}

/// Every code an error body's `error` can be: those `ApiError` answers with, and those a job
/// kind's parameters give (`source_not_allowed`, `source_not_found`). Clients match on
/// these; the OpenAPI walk checks every error the suite provokes against this list.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum ErrorCode {
    MalformedBody,
    MissingField,
    InvalidField,
    UnknownField,
    SourceNotAllowed,
    SourceNotFound,
    UnsupportedMediaType,
    PayloadTooLarge,
    UnknownKind,
    NotFound,
    MethodNotAllowed,
    AlreadyRunning,
    NotActive,
    JobFailed,
    StoreUnavailable,
    ShuttingDown,
    Overloaded,
    IdempotencyKeyReused,
    RateLimited,
    TooManyStreams,
    StillActive,
    TenantDeleted,
    DuplicateKey,
    DuplicateHeader,
    Unauthorized,
    Forbidden,
    RequestTimeout,
    InternalError,
}

impl ApiError {
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        Self::InvalidField {
            code: INVALID_FIELD,
            field: field.to_owned(),
            message: message.into(),
        }
    }

    pub fn missing(field: &str, message: impl Into<String>) -> Self {
        Self::InvalidField {
            code: MISSING_FIELD,
            field: field.to_owned(),
            message: message.into(),
        }
    }

    /// This error, answered with the report of what an import saved before it.
    pub fn with_import_report(self, report: RowReport) -> Self {
        ApiError::PartialImport {
            cause: Box::new(self),
            report,
        }
    }

    /// The status and body a client gets. An import that stopped part-way answers as its
    /// cause does, with the report of what it saved.
    fn parts(&self) -> (StatusCode, ErrorBody) {
        if let ApiError::PartialImport { cause, report } = self {
            let (status, body) = cause.parts();
            let report = Some(report.clone());
            return (status, ErrorBody { report, ..body });
        }
        let body = ErrorBody {
            error: self.code(),
            message: self.message(),
            field: self.field(),
            job_id: self.job_id(),
            known_kinds: match self {
                ApiError::UnknownKind { known, .. } => Some(known.clone()),
                _ => None,
            },
            job: match self {
                ApiError::NotActive(s) | ApiError::NotEnded(s) | ApiError::JobFailed(s) => {
                    Some(s.clone())
                }
                _ => None,
            },
            report: None,
        };
        (self.status(), body)
    }

    /// The one status mapping.
    fn status(&self) -> StatusCode {
        use ApiError::*;
        match self {
            PartialImport { cause, .. } => cause.status(),
            MalformedBody(_) | DuplicateHeader(_) => StatusCode::BAD_REQUEST,
            InvalidField { .. } | UnknownField { .. } | DuplicateKey(_) => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            IdempotencyKeyReused(_) | BulkKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            UnsupportedMediaType { .. } | UnsupportedEncoding(_) | BodyNotRead => {
                StatusCode::UNSUPPORTED_MEDIA_TYPE
            }
            PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Unauthorized => StatusCode::UNAUTHORIZED,
            Forbidden | ReadOnly | OperatorsOnly | TenantNotNamed(_) => StatusCode::FORBIDDEN,
            RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            UnknownKind { .. } | NotFound(_) | NoRoute => StatusCode::NOT_FOUND,
            MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            AlreadyRunning { .. } | StillActive(_) | NotActive(_) | NotEnded(_) => {
                StatusCode::CONFLICT
            }
            TenantDeleted => StatusCode::CONFLICT,
            RateLimited(_) | TenantStreamsFull(_) => StatusCode::TOO_MANY_REQUESTS,
            JobFailed(_) => StatusCode::BAD_GATEWAY,
            StoreUnavailable(StoreError::Refused(_)) => StatusCode::INTERNAL_SERVER_ERROR,
            StoreUnavailable(_) | CatalogUnavailable(_) | WaitUnread(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ShuttingDown | LostWithProcess(_) | Overloaded | ImportsBusy => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            StreamsFull | ConnectionsFull => StatusCode::SERVICE_UNAVAILABLE,
            CatalogCorrupt(_) | Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The error code clients match on (the `ErrorCode` list).
    fn code(&self) -> &'static str {
        use ApiError::*;
        match self {
            PartialImport { cause, .. } => cause.code(),
            MalformedBody(_) => "malformed_body",
            InvalidField { code, .. } => code,
            UnknownField { .. } => UNKNOWN_FIELD,
            DuplicateKey(_) => "duplicate_key",
            DuplicateHeader(_) => "duplicate_header",
            IdempotencyKeyReused(_) | BulkKeyReused => "idempotency_key_reused",
            UnsupportedMediaType { .. } | UnsupportedEncoding(_) | BodyNotRead => {
                "unsupported_media_type"
            }
            PayloadTooLarge(_) => "payload_too_large",
            Unauthorized => "unauthorized",
            Forbidden | ReadOnly | OperatorsOnly | TenantNotNamed(_) => "forbidden",
            RequestTimeout => "request_timeout",
            UnknownKind { .. } => "unknown_kind",
            NotFound(_) | NoRoute => "not_found",
            MethodNotAllowed => "method_not_allowed",
            AlreadyRunning { .. } => "already_running",
            StillActive(_) | NotEnded(_) => "still_active",
            NotActive(_) => "not_active",
            RateLimited(_) => "rate_limited",
            TenantStreamsFull(_) => "too_many_streams",
            JobFailed(_) => "job_failed",
            StoreUnavailable(StoreError::Refused(_)) => "internal_error",
            StoreUnavailable(_) | CatalogUnavailable(_) | WaitUnread(_) => "store_unavailable",
            ShuttingDown | LostWithProcess(_) => "shutting_down",
            Overloaded | ImportsBusy | StreamsFull | ConnectionsFull => "overloaded",
            TenantDeleted => "tenant_deleted",
            CatalogCorrupt(_) | Internal(_) => "internal_error",
        }
    }

    /// One sentence: what happened and what to do. A 5xx's says nothing of its cause.
    fn message(&self) -> String {
        use ApiError::*;
        match self {
            PartialImport { cause, .. } => cause.message(),
            MalformedBody(why) => why.clone(),
            InvalidField { message, .. } | UnknownField { message, .. } => message.clone(),
            DuplicateKey(key) => format!("the JSON body gives `{key}` more than once; give each key once"),
            DuplicateHeader(name) => format!("the {name} header is given more than once; send it once (which one would count is a guess this service does not make)"),
            IdempotencyKeyReused(job) => format!("this Idempotency-Key started job {job} with other parameters; use a new key for a new request"),
            BulkKeyReused => "this Idempotency-Key was first sent with another body for this action; use a new key for a new call".to_owned(),
            UnsupportedMediaType { got, accepted } => format!("content type {got} is not accepted here; send {accepted}"),
            UnsupportedEncoding(coding) => format!("content encoding {coding} is not accepted here; send the body uncompressed (no Content-Encoding, or identity)"),
            BodyNotRead => "this route reads no request body, and this one is over MAX_START_BODY_BYTES (a body of only blanks, `{}` or an empty form is accepted up to that size); send none".to_owned(),
            PayloadTooLarge(setting) => format!("the request body is larger than this route accepts ({setting}); send less at a time"),
            Unauthorized => "send a valid token as `Authorization: Bearer <token>`".to_owned(),
            Forbidden => "this token may not act for that tenant".to_owned(),
            ReadOnly => "this token may read but not change anything; ask for a token without `read:` to do this".to_owned(),
            OperatorsOnly => "only an operator token (`*` or `read:*`) may read every tenant's figures".to_owned(),
            TenantNotNamed(own) => format!("a tenant token lists its own tenant's jobs: add tenant_id={own} (only an operator token lists every tenant's jobs)"),
            RequestTimeout => "the request did not arrive in time (REQUEST_TIMEOUT_SECONDS); send it again, faster".to_owned(),
            UnknownKind { kind, known } => format!("there is no job kind `{kind}`; use one of: {}", known.join(", ")),
            NotFound(what) => what.clone(),
            NoRoute => "no such endpoint; GET /openapi.json lists them all".to_owned(),
            MethodNotAllowed => "this endpoint does not take that method".to_owned(),
            AlreadyRunning { job, params_differ: false } => format!("a job of this kind is already active for this tenant (job {job}); poll it or wait for it to end"),
            AlreadyRunning { job, params_differ: true } => format!("a job of this kind is already active for this tenant (job {job}) with different parameters, so it cannot be joined; wait for it to end"),
            StillActive(job) => format!("job {job} of this tenant is still active; cancel it or wait for it to end, then remove the tenant"),
            NotActive(s) => format!("the job is {}: there is nothing left to cancel", s.status.as_str()),
            NotEnded(s) => format!("the job is {}: only a job that ended can be retried; wait for it or cancel it", s.status.as_str()),
            RateLimited(wait) => format!("this tenant started TENANT_CREATES_PER_MINUTE jobs this minute; retry in {} s", retry_after_secs(*wait)),
            JobFailed(s) => match s.error.as_deref() {
                Some(class) => format!("the job ended {} with error {class}", s.status.as_str()),
                None => format!("the job ended {} before its work was done", s.status.as_str()),
            },
            StoreUnavailable(StoreError::NotReplicated { job: Some(id), acked, wanted }) => format!(
                "job {id} was created, but only {acked} of the {wanted} replicas \
                 REDIS_MIN_REPLICAS_ACK asks for confirmed it: it may not survive a \
                 failover; poll it, or retry (a retry names it while it is active)"
            ),
            StoreUnavailable(StoreError::TooFewReplicas { connected, wanted }) => format!(
                "{connected} Redis replicas are connected, fewer than the {wanted} \
                 REDIS_MIN_REPLICAS_ACK asks for, so no job is started (nothing was written); \
                 retry once a replica is back"
            ),
            StoreUnavailable(StoreError::Misconfigured { cause, .. }) => format!(
                "the job store refuses this service's settings: {cause}; an operator must \
                 change them (retrying will not help until then)"
            ),
            StoreUnavailable(StoreError::Refused(_)) => INTERNAL.to_owned(),
            StoreUnavailable(StoreError::Unavailable(e))
            | CatalogUnavailable(CatalogStoreError::Unavailable(e))
                if is_out_of_memory(e) =>
            {
                OUT_OF_MEMORY.to_owned()
            }
            StoreUnavailable(_) => "the job store is unreachable right now; retry shortly".to_owned(),
            CatalogUnavailable(_) => "the catalogue store is unreachable right now; retry shortly".to_owned(),
            WaitUnread(job) => format!("job {job} was created and goes on, but the job store did not answer when this wait ended; poll /catalog/jobs/{job} (do not start it again)"),
            CatalogCorrupt(_) | Internal(_) => INTERNAL.to_owned(),
            ShuttingDown => "this instance is shutting down and takes no new jobs; retry on another".to_owned(),
            LostWithProcess(job) => format!("this instance is shutting down and keeps its jobs in memory (no REDIS_URL): job {job} stops with it and will not resume; start it again once the service is back"),
            Overloaded => "too many jobs are waiting for a worker; retry later".to_owned(),
            ImportsBusy => "MAX_CONCURRENT_IMPORTS imports are running already; retry shortly".to_owned(),
            TenantDeleted => "the tenant was deleted while this import ran; it stopped there, and `report` counts the rows it had saved before (the delete removed them)".to_owned(),
            TenantStreamsFull(tenant) => format!("tenant {tenant} holds MAX_EVENT_STREAMS_PER_TENANT event streams on this instance; close one, retry in {STREAM_RETRY_SECS} s, or poll"),
            StreamsFull => "MAX_EVENT_STREAMS event streams are open on this instance; retry shortly, or poll".to_owned(),
            ConnectionsFull => "MAX_CONNECTIONS connections are open; this one is kept for /healthz, /readyz and /metrics; retry shortly".to_owned(),
        }
    }

    /// The request field at fault, for the errors that have one.
    fn field(&self) -> Option<String> {
        match self {
            ApiError::InvalidField { field, .. } | ApiError::UnknownField { field, .. } => {
                Some(field.clone())
            }
            ApiError::DuplicateKey(key) => Some(key.clone()),
            ApiError::DuplicateHeader(name) => Some((*name).to_owned()),
            ApiError::TenantNotNamed(_) => Some("tenant_id".to_owned()),
            ApiError::IdempotencyKeyReused(_) | ApiError::BulkKeyReused => {
                Some(IDEMPOTENCY_KEY.to_owned())
            }
            _ => None,
        }
    }

    /// The job an error is about, for the errors that name one.
    fn job_id(&self) -> Option<JobId> {
        match self {
            ApiError::AlreadyRunning { job, .. }
            | ApiError::StillActive(job)
            | ApiError::IdempotencyKeyReused(job)
            | ApiError::LostWithProcess(job)
            | ApiError::WaitUnread(job) => Some(*job),
            ApiError::NotEnded(s) => Some(s.job_id),
            ApiError::StoreUnavailable(StoreError::NotReplicated { job, .. }) => *job,
            _ => None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body) = self.parts();
        let code = body.error;
        // Logged once, by the access line, with this note (a 5xx's cause never reaches the client).
        let logged = match &self {
            ApiError::PartialImport { cause, .. } => cause,
            other => other,
        };
        let note = ErrorNote {
            code,
            cause: match logged {
                ApiError::StoreUnavailable(cause) => Some(cause.to_string()),
                ApiError::CatalogUnavailable(cause) => {
                    Some(format!("the catalogue store is unreachable: {cause}"))
                }
                ApiError::CatalogCorrupt(cause) => {
                    Some(format!("a catalogue record cannot be read: {cause}"))
                }
                ApiError::Internal(cause) => Some(cause.to_string()),
                ApiError::JobFailed(s) => Some(format!(
                    "job {} ended {}",
                    s.job_id,
                    s.error.as_deref().unwrap_or(s.status.as_str())
                )),
                _ => None,
            },
        };
        let mut response = (status, Json(body)).into_response();
        let headers = response.headers_mut();
        if let ApiError::RateLimited(wait) = &self {
            headers.insert(
                header::RETRY_AFTER,
                HeaderValue::from(retry_after_secs(*wait)),
            );
        }
        // RFC 9110 (15.5.16): a 415 for a content coding says which codings would do.
        if let ApiError::UnsupportedEncoding(_) = &self {
            headers.insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
        }
        if let ApiError::TenantStreamsFull(_) = &self {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(STREAM_RETRY_SECS));
        }
        match status {
            StatusCode::SERVICE_UNAVAILABLE => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            StatusCode::UNAUTHORIZED => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        // Refused with the body (or its rest) unread: the connection cannot carry another
        // request, and hyper would close it without a word, under a client's next request.
        if matches!(
            logged,
            ApiError::RequestTimeout
                | ApiError::PayloadTooLarge(_)
                | ApiError::UnsupportedEncoding(_)
                | ApiError::BodyNotRead
        ) {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response.extensions_mut().insert(note);
        response
    }
}

/// A 500's message: nothing of its cause, which the access line logs.
const INTERNAL: &str = "the service could not answer this request; it has been logged";

/// What a write Redis refused for want of memory answers (an outage's 503 and retry: it
/// mends once memory is freed), instead of calling Redis unreachable.
const OUT_OF_MEMORY: &str = "Redis is out of memory (used memory above its maxmemory, under \
    noeviction) and refuses writes, so nothing was written; retry once an operator frees memory \
    or raises maxmemory";

/// Whether a store's failure is Redis refusing a write for want of memory (its `OOM` reply,
/// whose words are fixed: `command not allowed when used memory > 'maxmemory'`).
fn is_out_of_memory(error: &str) -> bool {
    error.contains("command not allowed when used memory")
}

/// The request header that makes a start idempotent (IETF draft "The Idempotency-Key HTTP
/// Header Field"), as errors name it.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// How long a client refused a stream for its tenant's share should wait: streams are long,
/// and a browser that reconnects at once would only be refused again.
const STREAM_RETRY_SECS: u64 = 5;

/// Whole seconds a client should wait, never 0 (a `Retry-After: 0` invites a busy loop).
fn retry_after_secs(wait: std::time::Duration) -> u64 {
    wait.as_millis().div_ceil(1000).max(1) as u64
}

impl From<CatalogStoreError> for ApiError {
    fn from(e: CatalogStoreError) -> Self {
        match e {
            CatalogStoreError::BadCursor => ApiError::invalid(
                "cursor",
                "cursor must be a next_cursor this listing handed out",
            ),
            e @ (CatalogStoreError::Unavailable(_) | CatalogStoreError::RecordMissing) => {
                ApiError::CatalogUnavailable(e)
            }
            e @ CatalogStoreError::Corrupt(_) => ApiError::CatalogCorrupt(e),
            // Only a job's run passes the store a stop; no request reaches this.
            e @ CatalogStoreError::Stopped => ApiError::CatalogUnavailable(e),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError::StoreUnavailable(e)
    }
}

impl From<Refused> for ApiError {
    fn from(r: Refused) -> Self {
        match r {
            Refused::ShuttingDown => ApiError::ShuttingDown,
            Refused::Overloaded => ApiError::Overloaded,
        }
    }
}

impl From<ParamError> for ApiError {
    fn from(e: ParamError) -> Self {
        match e.kind {
            ParamErrorKind::Unknown => ApiError::UnknownField {
                field: e.field,
                message: e.message,
            },
            ParamErrorKind::Unprocessable => ApiError::InvalidField {
                code: e.code,
                field: e.field,
                message: e.message,
            },
        }
    }
}

impl ApiError {
    /// An identifier that failed to parse, attributed to the field it came from.
    pub fn bad_id(field: &str, e: InvalidId) -> Self {
        ApiError::invalid(field, e.to_string())
    }

    /// A body whose content type (`got`, as the message shows it) the route does not read;
    /// `accepted` says what it does.
    pub fn unsupported_media(got: impl Into<String>, accepted: &'static str) -> Self {
        ApiError::UnsupportedMediaType {
            got: got.into(),
            accepted,
        }
    }
}
