//! The HTTP boundary: the only module that knows status codes. It turns requests into calls
//! on the job store and runner, and every failure into `ApiError`'s envelope.

pub mod auth;
pub mod catalog;
pub mod error;
pub mod extract;
pub mod jobs;
pub mod products;
pub mod server;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tower_http::trace::TraceLayer;

use crate::catalog::Catalog;
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

/// What the hardening layers need (issue 9): who may call, how large and how slow a request may be.
#[derive(Clone)]
pub struct Guard {
    /// The configured tokens; empty means the service runs open.
    pub tokens: Arc<auth::Tokens>,
    /// Largest body of a start request (`MAX_START_BODY_BYTES`).
    pub max_start_body_bytes: usize,
    /// How long a start request's body may take to arrive (`REQUEST_TIMEOUT_SECONDS`).
    pub request_timeout: Duration,
}

pub fn router(state: AppState, max_body_bytes: usize) -> Router {
    let routes = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/catalog/jobs", get(jobs::list))
        .route("/catalog/jobs/{job_id}", get(jobs::get_one))
        .route("/catalog/jobs/{job_id}/cancel", post(jobs::cancel))
        .route(
            "/catalog/products",
            get(products::list).post(products::import),
        )
        .route("/catalog/products/{product_key}", get(products::get_one))
        .route(
            "/catalog/{kind}",
            post(catalog::start).layer(DefaultBodyLimit::max(state.guard.max_start_body_bytes)),
        )
        .fallback(|| async { ApiError::NoRoute })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(max_body_bytes));
    // --- hardening (issue 9): a `Caller` on every /catalog request, or 401 ---
    let routes = routes.layer(axum::middleware::from_fn_with_state(
        state.clone(),
        auth::authenticate,
    ));
    // --- end hardening ---
    // A 5xx is logged once, by `ApiError`, with its cause; the trace layer does not repeat it.
    routes
        .layer(TraceLayer::new_for_http().on_failure(()))
        .with_state(state)
}

/// The process is up and serving HTTP.
async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

/// The store answers, and this instance takes jobs. Warnings (an eviction policy that can
/// evict live locks) are reported without failing readiness.
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
    Ok(Json(json!({
        "status": "ready",
        "store": if app.store.is_durable() { "redis" } else { "memory" },
        "durable": app.store.is_durable(),
        "active_jobs": app.runner.active_jobs(),
        "active_imports": app.imports.running(),
        "auth": if open { "open" } else { "tokens" },
        "warnings": warnings,
    })))
}
