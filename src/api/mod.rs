//! The HTTP boundary: the only module that knows status codes. It turns requests into calls
//! on the job store and runner, and every failure into `ApiError`'s envelope.

pub mod access;
pub mod admin;
pub mod auth;
pub mod catalog;
pub mod cors;
pub mod error;
pub mod events;
pub mod extract;
pub mod job_filter;
pub mod jobs;
pub mod openapi;
pub mod products;
pub mod server;
pub mod tenants;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::middleware;
use axum::response::IntoResponse;
use axum::{Json, Router};
use serde_json::json;
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

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
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
    pub tokens: Arc<auth::Tokens>,
    /// Largest body of a start request (`MAX_START_BODY_BYTES`).
    pub max_start_body_bytes: usize,
    /// How long a start request's body may take to arrive (`REQUEST_TIMEOUT_SECONDS`).
    pub request_timeout: Duration,
    /// The origins whose pages may call the API (`CORS_ALLOWED_ORIGINS`); None: no CORS.
    pub cors: Option<cors::Cors>,
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
    // `layer` wraps only the routes added before it: here, the start route alone.
    OpenApiRouter::new()
        .routes(routes!(catalog::start))
        .layer(DefaultBodyLimit::max(max_start_body))
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
        .routes(routes!(openapi_json))
        .routes(routes!(jobs::list))
        .routes(routes!(jobs::get_one))
        .routes(routes!(jobs::cancel))
        .routes(routes!(jobs::retry))
        .routes(routes!(events::job_events))
        .routes(routes!(events::tenant_events))
        .routes(routes!(products::list, products::import))
        .routes(routes!(products::get_one))
        .routes(routes!(tenants::remove))
        .routes(routes!(admin::root))
        .routes(routes!(admin::page))
        .routes(routes!(admin::style))
        .routes(routes!(admin::script))
}

pub fn router(state: AppState, max_body_bytes: usize) -> Router {
    let (router, _document) = routes_limited(state.guard.max_start_body_bytes).split_for_parts();
    let router = router
        .route_layer(middleware::from_fn(access::remember_route))
        .fallback(|| async { ApiError::NoRoute })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(max_body_bytes));
    // A `Caller` on every /catalog request, or 401 (inside the access line, which logs it).
    let router = router.layer(middleware::from_fn_with_state(
        state.clone(),
        auth::authenticate,
    ));
    // Preflights are answered before authentication (a browser sends them without the
    // token), inside the access line so they are logged.
    let router = router.layer(middleware::from_fn_with_state(
        state.guard.cors.clone(),
        cors::apply,
    ));
    router
        .layer(middleware::from_fn(access::access))
        .with_state(state)
}

/// The process is up and serving HTTP (liveness: it says nothing of the store).
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "The process is up.", body = openapi::Health)))]
async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

/// The store answers, and this instance takes jobs. Warnings (an eviction policy that can
/// evict live locks) and `durable: false` (a Redis that does not persist) are reported
/// without failing readiness.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "The store answers and this instance takes jobs.", body = openapi::Readiness),
        (status = 503, description = "`store_unavailable` or `shutting_down`.", body = openapi::ErrorBody),
    ))]
async fn readyz(State(app): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    if app.runner.is_closing() {
        return Err(ApiError::ShuttingDown);
    }
    app.store.ping().await?;
    let mut warnings = app.store.warnings().await.unwrap_or_default();
    let open = app.guard.tokens.is_open();
    if open {
        warnings.push(OPEN_WARNING.to_owned());
    }
    // `durable`: job state survives a restart of the store itself (null: cannot tell).
    let durable = app.store.persists().await?;
    let topology = app.store.topology().await?;
    Ok(Json(json!({
        "status": "ready",
        "store": if app.store.is_durable() { "redis" } else { "memory" },
        "durable": durable,
        "active_jobs": app.runner.active_jobs(),
        "active_imports": app.imports.running(),
        "auth": if open { "open" } else { "tokens" },
        "warnings": warnings,
        "topology": topology,
    })))
}

/// Prometheus text format: every metric of this process (see `crate::metrics`).
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4; counters are per process.",
        body = String, content_type = "text/plain")))]
async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    // The queue is shared by every replica, so its depth is read from the store at the
    // scrape; a store that does not answer leaves the last value (the scrape still answers).
    if let Ok(depths) = app.store.queued_by_kind().await {
        for kind in app.runner.registry().kinds() {
            let waiting = depths
                .iter()
                .find(|(k, _)| k == kind)
                .map_or(0, |(_, n)| *n);
            crate::metrics::queue_depth(kind.as_str(), waiting);
        }
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        crate::metrics::render(),
    )
}

/// This document (OpenAPI 3.1), for any OpenAPI viewer or client generator.
#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "The OpenAPI 3.1 document of this service.", body = Object)))]
async fn openapi_json() -> impl IntoResponse {
    Json(openapi::document())
}
