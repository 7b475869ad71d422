//! The HTTP boundary: the only module that knows status codes. It turns requests into calls
//! on the job store and runner, and every failure into `ApiError`'s envelope.

pub mod catalog;
pub mod error;
pub mod extract;
pub mod jobs;
pub mod products;

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

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub runner: Runner,
    pub store: Arc<dyn JobStore>,
    pub catalog: Arc<Catalog>,
    /// Longest a `wait=true` request is held before it answers 202.
    pub wait_max: Duration,
    pub imports: products::Imports,
}

pub fn router(state: AppState, max_body_bytes: usize) -> Router {
    Router::new()
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
        .route("/catalog/{kind}", post(catalog::start))
        .fallback(|| async { ApiError::NoRoute })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(TraceLayer::new_for_http())
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
    let warnings = app.store.warnings().await.unwrap_or_default();
    let topology = app.store.topology().await?;
    Ok(Json(json!({
        "status": "ready",
        "store": if app.store.is_durable() { "redis" } else { "memory" },
        "durable": app.store.is_durable(),
        "active_jobs": app.runner.active_jobs(),
        "active_imports": app.imports.running(),
        "warnings": warnings,
        "topology": topology,
    })))
}
