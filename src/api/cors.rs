//! Cross-origin access (`CORS_ALLOWED_ORIGINS`): an admin page served from another origin may
//! call the API. tower-http's CORS layer answers preflights and adds the headers, but only
//! for a request whose `Origin` is one of the configured ones: any other request (another
//! origin, none, or no origin configured at all) passes through untouched, without a single
//! CORS header — so a refused origin learns nothing, and `OPTIONS` stays the 405 it was.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, HeaderName, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;
use tower::{Layer, Service};
use tower_http::cors::{AllowOrigin, CorsLayer};

/// The variable the origins come from, named in every complaint about them.
pub const CORS_VARIABLE: &str = "CORS_ALLOWED_ORIGINS";

/// How long a browser may cache a preflight's answer: the allowed set changes only with a
/// restart, and an hour saves a round trip per request of an open admin page.
const PREFLIGHT_MAX_AGE: Duration = Duration::from_secs(3600);

/// The request headers a page may send: the token, the body's type, a start's idempotency
/// key, an event stream's resume point, and a request id to correlate logs.
const ALLOWED_HEADERS: [&str; 5] = [
    "authorization",
    "content-type",
    "idempotency-key",
    "last-event-id",
    "x-request-id",
];

/// The response headers a page may read: where a job is, when to poll again, the request's
/// id, and whether a start was a replay.
const EXPOSED_HEADERS: [&str; 4] = [
    "location",
    "retry-after",
    "x-request-id",
    "idempotent-replayed",
];

/// The configured origins, and the layer that serves them.
#[derive(Clone)]
pub struct Cors {
    origins: Arc<Vec<HeaderValue>>,
    layer: CorsLayer,
}

impl Cors {
    /// The origins of `CORS_ALLOWED_ORIGINS` (empty entries ignored), or a message naming
    /// the variable and the first one that is not an origin. None when there are none.
    pub fn from_config(entries: &[String]) -> Result<Option<Self>, String> {
        let origins = entries
            .iter()
            .map(|e| e.trim())
            .filter(|e| !e.is_empty())
            .map(parse_origin)
            .collect::<Result<Vec<_>, _>>()?;
        if origins.is_empty() {
            return Ok(None);
        }
        let layer = CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins.clone()))
            .allow_methods([Method::GET, Method::POST, Method::DELETE])
            .allow_headers(ALLOWED_HEADERS.map(HeaderName::from_static))
            .expose_headers(EXPOSED_HEADERS.map(HeaderName::from_static))
            .max_age(PREFLIGHT_MAX_AGE);
        Ok(Some(Self {
            origins: Arc::new(origins),
            layer,
        }))
    }

    fn allows(&self, request: &Request) -> bool {
        request
            .headers()
            .get(header::ORIGIN)
            .is_some_and(|origin| self.origins.contains(origin))
    }
}

/// An origin as a browser sends it: `http` or `https`, `://`, a host with an optional port,
/// nothing after (no path, no trailing slash), compared exactly (lower-case it as browsers do).
pub fn parse_origin(raw: &str) -> Result<HeaderValue, String> {
    let bad = || {
        format!("{CORS_VARIABLE}: `{raw}` is not an origin such as https://admin.example.com or http://localhost:8080 (scheme, host and optional port, no path)")
    };
    let rest = raw
        .strip_prefix("https://")
        .or_else(|| raw.strip_prefix("http://"))
        .ok_or_else(bad)?;
    let (host, port) = match rest.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (rest, None),
    };
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-'));
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|n| n > 0));
    if !(host_ok && port_ok) {
        return Err(bad());
    }
    HeaderValue::from_str(raw).map_err(|_| bad())
}

/// The middleware: the CORS layer for an allowed origin's request, else the request as is.
pub async fn apply(State(cors): State<Option<Cors>>, request: Request, next: Next) -> Response {
    match cors {
        Some(cors) if cors.allows(&request) => {
            let mut service = cors.layer.layer(next);
            // `Next` is always ready and never fails.
            match std::future::poll_fn(|cx| service.poll_ready(cx)).await {
                Ok(()) => service.call(request).await.unwrap_or_else(|e| match e {}),
                Err(e) => match e {},
            }
        }
        _ => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_a_scheme_a_host_and_an_optional_port() {
        for ok in [
            "https://admin.example.com",
            "http://localhost:8080",
            "http://127.0.0.1:3000",
        ] {
            assert!(parse_origin(ok).is_ok(), "{ok}");
        }
        for bad in [
            "admin.example.com",
            "https://admin.example.com/",
            "https://admin.example.com/page",
            "ftp://x.example",
            "https://",
            "http://host:0",
            "http://host:99999",
            "https://Admin.example.com",
            "*",
        ] {
            let message = parse_origin(bad).unwrap_err();
            assert!(message.contains(CORS_VARIABLE), "{message}");
        }
    }

    #[test]
    fn no_origin_configured_means_no_cors_at_all() {
        assert!(Cors::from_config(&[]).unwrap().is_none());
        assert!(Cors::from_config(&[String::new()]).unwrap().is_none());
        assert!(Cors::from_config(&["http://a.example".into(), "nope".into()]).is_err());
    }
}
