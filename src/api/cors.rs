//! Cross-origin access (`CORS_ALLOWED_ORIGINS`): an admin page served from another origin may
//! call the API. tower-http's CORS layer answers preflights and adds the headers, but only
//! for a request whose `Origin` is one of the configured ones: any other request (another
//! origin, none, or no origin configured at all) passes through untouched, without a single
//! CORS header — so a refused origin learns nothing, and `OPTIONS` stays the 405 it was.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{header, HeaderName, HeaderValue, Method};
use axum::response::Response;
use tower::{Layer, Service};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::config::origins::Origin;

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
    /// The layer for the configured origins; none when there are none (no CORS at all).
    pub fn new(origins: &[Origin]) -> Option<Self> {
        if origins.is_empty() {
            return None;
        }
        let origins: Vec<HeaderValue> = origins
            .iter()
            .map(|o| {
                HeaderValue::from_str(o.as_str())
                    .expect("an origin is visible ASCII by construction")
            })
            .collect();
        let layer = CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins.clone()))
            .allow_methods([Method::GET, Method::POST, Method::DELETE])
            .allow_headers(ALLOWED_HEADERS.map(HeaderName::from_static))
            .expose_headers(EXPOSED_HEADERS.map(HeaderName::from_static))
            .max_age(PREFLIGHT_MAX_AGE);
        Some(Self {
            origins: Arc::new(origins),
            layer,
        })
    }

    fn allows(&self, request: &Request) -> bool {
        request
            .headers()
            .get(header::ORIGIN)
            .is_some_and(|origin| self.origins.contains(origin))
    }
}

/// The CORS layer around `inner` for an allowed origin's request, else `inner` as is (the
/// routes' layer, `access::edge`).
pub async fn around<F, Fut>(cors: Option<&Cors>, request: Request, inner: F) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    match cors {
        Some(cors) if cors.allows(&request) => {
            // The layer is made for this one request: it calls `inner` once at most (never
            // for a preflight, which it answers itself).
            let mut inner = Some(inner);
            let mut service = cors.layer.layer(tower::service_fn(|request| {
                let inner = inner.take();
                async move {
                    match inner {
                        Some(inner) => Ok::<_, Infallible>(inner(request).await),
                        None => unreachable!("the CORS layer of a request calls it once"),
                    }
                }
            }));
            // `service_fn` is always ready and never fails.
            match std::future::poll_fn(|cx| service.poll_ready(cx)).await {
                Ok(()) => service.call(request).await.unwrap_or_else(|e| match e {}),
                Err(e) => match e {},
            }
        }
        _ => inner(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_origin_configured_means_no_cors_at_all() {
        assert!(Cors::new(&[]).is_none());
        let one = Origin::parse("http://a.example").unwrap();
        assert!(Cors::new(&[one]).is_some());
    }
}
