//! The HTTP boundary: the only module that knows status codes. It turns requests into calls
//! on the job store and runner, and every failure into `ApiError`'s envelope.

pub mod access;
pub mod admin;
pub mod answers;
pub mod auth;
pub mod bulk;
pub mod call;
pub mod catalog;
pub mod console;
pub mod cors;
pub mod error;
pub mod events;
pub mod extract;
pub mod job_filter;
pub mod jobs;
pub mod openapi;
pub mod operations;
pub mod pipeline;
pub mod product_view;
pub mod products;
pub mod server;
pub mod snapshot_json;
pub mod streams;
pub mod tenants;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::Router;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::catalog::Catalog;
use crate::config::DEFAULT_START_BODY_BYTES;
use crate::jobs::runner::Runner;
use crate::jobs::store::JobStore;
use error::ApiError;

/// Said at start-up and by /readyz when no token is configured.
pub const OPEN_WARNING: &str =
    "no API_TOKENS_FILE or API_TOKENS: every client may read and act on every tenant's jobs and products";

/// What every handler shares, behind one `Arc`: axum clones the state of every
/// `from_fn_with_state` layer and every extractor's `State` for each request, and cloning the
/// fields one by one (the runner's cancellation tokens take a lock each, its worker name is a
/// `String`) was ~8 % of a poll's CPU in the profile (docs/performance.md, "The service's own
/// CPU"). Fields read through `Deref`: `app.store`, `app.runner`.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The services and settings [`AppState`] shares.
pub struct Shared {
    pub runner: Runner,
    pub store: Arc<dyn JobStore>,
    pub catalog: Arc<Catalog>,
    /// Longest a `wait=true` request is held before it answers 202.
    pub wait_max: Duration,
    pub imports: products::Imports,
    /// The hardening settings: tokens, request size and time limits.
    pub guard: Guard,
}

/// What the hardening layers need: who may call, how large and how slow a request may be.
#[derive(Clone)]
pub struct Guard {
    /// The configured tokens; empty means the service runs open.
    pub tokens: Arc<crate::config::tokens::Tokens>,
    /// Largest body of a start request (`MAX_START_BODY_BYTES`).
    pub max_start_body_bytes: usize,
    /// How long a start request's body may take to arrive (`REQUEST_TIMEOUT_SECONDS`).
    pub request_timeout: Duration,
    /// The origins whose pages may call the API (`CORS_ALLOWED_ORIGINS`); None: no CORS.
    pub cors: Option<cors::Cors>,
    /// The event streams' share of the connections (`MAX_EVENT_STREAMS`, per tenant).
    pub streams: Arc<streams::StreamBudget>,
}

/// Every route, each registered through its OpenAPI annotation (`routes!`), so a route
/// cannot be added without its documentation. Nothing else in `api` may add a route with
/// axum's plain `route` (a test checks).
pub(crate) fn routes() -> OpenApiRouter<AppState> {
    routes_limited(DEFAULT_START_BODY_BYTES)
}

/// The routes, with start requests held to `max_start_body` bytes (`MAX_START_BODY_BYTES`)
/// even when their body comes chunked, without a `Content-Length` to refuse up front.
fn routes_limited(max_start_body: usize) -> OpenApiRouter<AppState> {
    // `layer` wraps only the routes added before it: here, the starts and the bulk calls.
    OpenApiRouter::new()
        .routes(routes!(catalog::start))
        .routes(routes!(pipeline::start))
        .routes(routes!(bulk::retry))
        .routes(routes!(bulk::cancel))
        .layer(DefaultBodyLimit::max(max_start_body))
        .routes(routes!(operations::healthz))
        .routes(routes!(operations::readyz))
        .routes(routes!(operations::metrics))
        .routes(routes!(operations::openapi_json))
        .routes(routes!(jobs::list))
        .routes(routes!(jobs::get_one))
        .routes(routes!(jobs::cancel))
        .routes(routes!(jobs::retry))
        .routes(routes!(events::job_events))
        .routes(routes!(events::tenant_events))
        .routes(routes!(products::list, products::import))
        .routes(routes!(products::get_one))
        .routes(routes!(tenants::remove))
        .routes(routes!(console::whoami))
        .routes(routes!(console::stats))
        .routes(routes!(console::tenants))
        .routes(routes!(admin::root))
        .routes(routes!(admin::page))
        .routes(routes!(admin::file))
}

/// What a connection kept beyond `MAX_CONNECTIONS` is served (see `server`): the probes, so
/// a full instance still says whether it lives, is ready and how it fares; anything else is
/// 503 `overloaded`. No token is asked: these routes are open on the main router too.
pub fn probe_router(state: AppState) -> Router {
    let (router, _document) = OpenApiRouter::new()
        .routes(routes!(operations::healthz))
        .routes(routes!(operations::readyz))
        .routes(routes!(operations::metrics))
        .split_for_parts();
    router
        .fallback(|| async { ApiError::ConnectionsFull })
        .method_not_allowed_fallback(|| async { ApiError::ConnectionsFull })
        .layer(middleware::from_fn(access::access))
        .with_state(state)
}

pub fn router(state: AppState, max_body_bytes: usize) -> Router {
    let (router, _document) = routes_limited(state.guard.max_start_body_bytes).split_for_parts();
    // One `layer` call for the whole stack, outermost first: `Router::layer` boxes each
    // route's service once a call, and each request clones every box of its route (a layer
    // a call was ~5 % of the service's instructions a create, in four boxes).
    let stack = tower::ServiceBuilder::new()
        // The access line, outermost, logs what CORS and authentication below it answer
        // (a preflight; a 401 without a known token; else a `Caller` on every /catalog
        // request): one layer for the three (`access::edge`).
        .layer(middleware::from_fn_with_state(state.clone(), access::edge))
        .layer(DefaultBodyLimit::max(max_body_bytes));
    router
        .fallback(|| async { ApiError::NoRoute })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(stack)
        .with_state(state)
}
