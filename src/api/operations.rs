//! The operator's routes: liveness (`/healthz`), readiness (`/readyz`), Prometheus metrics
//! (`/metrics`) and the OpenAPI document (`/openapi.json`). None is behind the bearer-token
//! guard, so probes and scrapers need no token.

use axum::extract::State;
use axum::http::Uri;
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody};
use super::extract::{query_fields, refuse_unknown};
use super::{openapi, AppState, OPEN_WARNING};
use crate::jobs::store::Topology;

/// `/healthz`'s answer.
#[derive(Serialize, ToSchema)]
pub struct Health {
    /// `ok`.
    status: &'static str,
}

/// `/readyz`'s answer: the store answers and this instance takes jobs.
#[derive(Serialize, ToSchema)]
pub struct Readiness {
    /// `ready`.
    status: &'static str,
    /// `redis` or `memory`.
    store: &'static str,
    /// Job state survives a restart of the store itself (Redis with AOF or RDB save
    /// points); null when Redis will not say (CONFIG disabled).
    durable: Option<bool>,
    active_jobs: usize,
    /// Product imports running in this process (at most `MAX_CONCURRENT_IMPORTS`).
    active_imports: usize,
    /// `tokens` when bearer tokens guard `/catalog/...`, `open` when any client may act
    /// for any tenant (then also a warning).
    auth: &'static str,
    /// Things an operator should fix that do not stop the service (an evicting Redis).
    warnings: Vec<String>,
    /// How the Redis primary is reached, how many replicas it has and how far the slowest
    /// lags; null for the embedded store.
    topology: Option<Topology>,
}

/// The process is up and serving HTTP (liveness: it says nothing of the store).
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses(
        (status = 200, description = "The process is up.", body = Health),
        (status = 422, description = "`unknown_field`: a query field (this route takes none).", body = ErrorBody),
    ))]
pub(super) async fn healthz(uri: Uri) -> Result<Json<Health>, ApiError> {
    no_query(&uri)?;
    Ok(Json(Health { status: "ok" }))
}

/// 422 `unknown_field` for any query field, as on every route that takes none (`Call`'s
/// `no_query`): a probe's option is never silently ignored.
fn no_query(uri: &Uri) -> Result<(), ApiError> {
    refuse_unknown(&query_fields(uri)?, "no query field at all")
}

/// The store answers, and this instance takes jobs. Warnings (an eviction policy that can
/// evict live locks) and `durable: false` (a Redis that does not persist) are reported
/// without failing readiness; a Redis full under `noeviction` (it refuses every write), or
/// fewer replicas connected than `REDIS_MIN_REPLICAS_ACK` asks for, fails it (every start
/// would be refused).
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "The store answers and this instance takes jobs.", body = Readiness),
        (status = 422, description = "`unknown_field`: a query field (this route takes none).", body = ErrorBody),
        (status = 503, description = "`store_unavailable` (Redis does not answer, refuses writes for want of memory (over `maxmemory` under `noeviction`: the message says so), or fewer replicas are connected than `REDIS_MIN_REPLICAS_ACK` asks for: the message names both counts) or `shutting_down`.", body = ErrorBody),
    ))]
pub(super) async fn readyz(
    State(app): State<AppState>,
    uri: Uri,
) -> Result<Json<Readiness>, ApiError> {
    no_query(&uri)?;
    if app.runner.is_closing() {
        return Err(ApiError::ShuttingDown);
    }
    app.store.ping().await?;
    // Not ready while Redis refuses writes for want of memory: no start or end goes through.
    app.store.writable().await?;
    let mut warnings = app.store.warnings().await.unwrap_or_default();
    let open = app.guard.tokens.is_open();
    if open {
        warnings.push(OPEN_WARNING.to_owned());
    }
    let topology = app.store.topology().await?;
    // Not ready while a start would be refused for want of replicas (REDIS_MIN_REPLICAS_ACK).
    if let Some(t) = &topology {
        t.enough_replicas()?;
    }
    Ok(Json(Readiness {
        status: "ready",
        store: if app.store.is_durable() {
            "redis"
        } else {
            "memory"
        },
        durable: app.store.persists().await?,
        active_jobs: app.runner.active_jobs(),
        active_imports: app.imports.running(),
        auth: if open { "open" } else { "tokens" },
        warnings,
        topology,
    }))
}

/// Prometheus text format: every metric of this process (see `crate::metrics`).
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4; counters are per process.",
        body = String, content_type = "text/plain")))]
pub(super) async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
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
pub(super) async fn openapi_json() -> impl IntoResponse {
    Json(openapi::document())
}
