//! The request edge: a request id (the client's `x-request-id` when it is sane, else a new
//! one) echoed on every response and carried by every log event of the request, one access
//! line per request, and the HTTP metrics. It is the only place a request is logged, so a
//! 5xx is logged once, with the cause `ApiError` attached to the response.

use std::future::Future;
use std::time::Instant;

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use tracing::{info_span, Instrument, Level};

use super::{auth, cors, AppState};
use crate::metrics;

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Longest request id taken from a client: room for any trace id format, while a client
/// cannot bloat every log line of its request.
const MAX_REQUEST_ID_LEN: usize = 128;

/// Why a response is an error, for the access line: the envelope's code, and for a 5xx
/// its cause (never sent to the client).
#[derive(Clone, Debug)]
pub struct ErrorNote {
    pub code: &'static str,
    pub cause: Option<String>,
}

/// The request's id as the access layer took or made it, for a handler that records it
/// (a job's `request_id`).
#[derive(Clone, Debug)]
pub struct RequestId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for RequestId {
    type Rejection = std::convert::Infallible;

    /// Outside the access layer (never in the service) a request gets an id of its own.
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<RequestId>()
            .cloned()
            .unwrap_or_else(|| RequestId(uuid::Uuid::new_v4().to_string())))
    }
}

/// Outer layer: request id, access line, metrics.
pub async fn access(request: Request, next: Next) -> Response {
    logged(request, |request| next.run(request)).await
}

/// The routes' one layer: the access line around CORS (preflights are answered before
/// authentication: a browser sends them without the token) around authentication, each as
/// its own layer did. One `from_fn` layer, not three: each layer a request passed cloned its
/// service and boxed and moved its future, ~1.5k instructions a request (callgrind).
pub async fn edge(State(app): State<AppState>, request: Request, next: Next) -> Response {
    logged(request, |request| async move {
        let cors = app.guard.cors.clone();
        cors::around(cors.as_ref(), request, |request| {
            auth::authenticate(State(app), request, next)
        })
        .await
    })
    .await
}

/// The access line of `request`, as `inner` answers it: its request id (echoed on the
/// answer and carried by every log event of it), the line, the HTTP metrics.
async fn logged<F, Fut>(mut request: Request, inner: F) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    let started = Instant::now();
    let id = request_id(request.headers());
    request.extensions_mut().insert(RequestId(id.clone()));
    let method = request.method().clone();
    // `Router::layer` wraps each route after routing, so the route matched is known here (a
    // clone of the shared template, an `Arc`); a request no route took has none.
    let matched = request.extensions().get::<MatchedPath>().cloned();
    let span = info_span!("request", request_id = %id);
    let mut response = inner(request).instrument(span.clone()).await;
    let elapsed = started.elapsed();
    let route = matched
        .as_ref()
        .map_or(metrics::UNMATCHED_ROUTE, MatchedPath::as_str);
    let status = response.status();
    metrics::http_request(route, method.as_str(), status.as_u16(), elapsed);
    let note = response.extensions().get::<ErrorNote>();
    // Absent on a success (an `Option` field with `None` records nothing).
    let code = note.map(|n| n.code);
    let cause = note.and_then(|n| n.cause.as_deref());
    let latency_ms = elapsed.as_secs_f64() * 1000.0;
    let status_code = status.as_u16();
    let _in_request = span.enter();
    macro_rules! line {
        ($level:expr) => {
            tracing::event!(
                $level,
                method = %method,
                route = %route,
                status = status_code,
                latency_ms,
                error_code = code,
                cause,
                "request"
            )
        };
    }
    match level(status) {
        Level::ERROR => line!(Level::ERROR),
        Level::WARN => line!(Level::WARN),
        _ => line!(Level::INFO),
    }
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    response
}

/// `error` only for what an operator must act on (a 500); 503 (store unreachable, full
/// queue, shutting down) is `warn`; client errors, refusals and a failed `wait=true` job
/// (502) are the ordinary life of a job service: `info`.
fn level(status: StatusCode) -> Level {
    match status.as_u16() {
        502 => Level::INFO,
        503 => Level::WARN,
        500..=599 => Level::ERROR,
        _ => Level::INFO,
    }
}

/// The client's request id when it is 1–128 visible ASCII characters, else a new UUID.
fn request_id(headers: &HeaderMap) -> String {
    headers
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            !v.is_empty()
                && v.len() <= MAX_REQUEST_ID_LEN
                && v.bytes().all(|b| b.is_ascii_graphic())
        })
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
}
