//! The operator's console, as the page (and any operator tool) reads it: who the caller is
//! and what it may do (`whoami`), the overview of the whole service (`stats`) and the tenant
//! picker. Every figure is the store's, shared by all replicas; nothing here scans keys.

use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::answers::{NoQueryField, StoreUnavailable};
use super::call::Call;
use super::error::{ApiError, ErrorBody};
use super::extract::{limit_field, refuse_unknown, take_single};
use crate::config::tokens::Scope;
use crate::jobs::browse::{self, RecentTenant};
use crate::jobs::stats::{Beats, Stats};
use crate::jobs::{Kind, TenantId};

/// What a caller may do, one flag per control a page shows.
#[derive(Serialize, ToSchema)]
pub struct Permissions {
    /// Read the overview (`GET /catalog/stats`).
    stats: bool,
    /// List every tenant's jobs (`GET /catalog/jobs` without `tenant_id`).
    list_every_tenant: bool,
    /// Start jobs and pipelines.
    start: bool,
    cancel: bool,
    retry: bool,
    /// The bulk actions (`POST /catalog/bulk/…`).
    bulk: bool,
    /// Import products (`POST /catalog/products`).
    import: bool,
    /// Remove a tenant's data (`DELETE /catalog/tenants/{tenant_id}`).
    delete_tenant: bool,
}

/// `GET /catalog/whoami`'s answer.
#[derive(Serialize, ToSchema)]
pub struct WhoAmI {
    /// The token's holder, or `anonymous` on a service without tokens.
    name: String,
    /// `tokens` when bearer tokens guard the API, `open` when they do not.
    auth: &'static str,
    /// The scope as the token file spells it: `*`, `<tenant_id>`, `read:*`, `read:<tenant_id>`.
    scope: String,
    /// The scope's tenant; null for `*` and `read:*`.
    tenant_id: Option<TenantId>,
    /// Whether the token may read but change nothing.
    read_only: bool,
    may: Permissions,
}

/// Who the caller is and what it may do, so a page shows only the controls that will work.
#[utoipa::path(get, path = "/catalog/whoami", tag = "console", operation_id = "whoami",
    responses(
        (status = 200, description = "The caller: its name, scope and what it may do.", body = WhoAmI),
        NoQueryField,
    ))]
pub async fn whoami(call: Call) -> Result<Json<WhoAmI>, ApiError> {
    call.no_query()?;
    let Call { app, caller, .. } = call;
    let (write, operator) = (caller.may_write(), caller.is_operator());
    Ok(Json(WhoAmI {
        auth: if app.guard.tokens.is_open() {
            "open"
        } else {
            "tokens"
        },
        scope: caller.scope_label(),
        tenant_id: match &caller.scope {
            Scope::All => None,
            Scope::Tenant(t) => Some(t.clone()),
        },
        read_only: !write,
        may: Permissions {
            stats: operator,
            list_every_tenant: operator,
            start: write,
            cancel: write,
            retry: write,
            bulk: write,
            import: write,
            delete_tenant: write,
        },
        name: caller.name,
    }))
}

/// The overview of the whole service: active jobs by status and kind, jobs ended in the last
/// hour and day by outcome, ends per minute over the last hour, the ready queue, and the live
/// processes with the jobs each runs. For an operator token (`*`, `read:*`) or any caller of
/// a service without tokens.
#[utoipa::path(get, path = "/catalog/stats", tag = "console", operation_id = "stats",
    responses(
        (status = 200, description = "The figures, read now from the store every replica shares.", body = Stats),
        (status = 403, description = "`forbidden`: a tenant token (only an operator token reads every tenant's figures).", body = ErrorBody),
        NoQueryField, StoreUnavailable,
    ))]
pub async fn stats(call: Call) -> Result<Json<Stats>, ApiError> {
    call.caller.may_read_every_tenant()?;
    call.no_query()?;
    let app = call.app;
    let overview = app.store.overview().await?;
    let active = app.store.active().await?;
    let kinds: Vec<Kind> = app.runner.registry().kinds().cloned().collect();
    let beats = Beats {
        heartbeat_ms: app.runner.heartbeat().as_millis() as u64,
        stale_ms: app.store.settings().stale_ms(),
    };
    Ok(Json(Stats::build(overview, &active, &kinds, beats)))
}

/// How many tenants the picker answers unless `limit` says otherwise, and at most.
const PICKER_DEFAULT: usize = 20;
const PICKER_MAX: usize = 100;

/// The tenant picker's answer.
#[derive(Serialize, ToSchema)]
pub struct Tenants {
    /// The tenants that created a job most recently first.
    tenants: Vec<RecentTenant>,
}

/// The tenant picker: tenants that created jobs recently, most recent first, whose id starts
/// with `prefix`. Reads the store's bounded list of the tenants that created jobs most
/// recently (`browse::PICKER_CAP`); a tenant token gets its own tenant only.
#[utoipa::path(get, path = "/catalog/tenants", tag = "console", operation_id = "tenants",
    params(
        ("prefix" = Option<String>, Query, description = "Only tenants whose id starts with this (case-sensitive)."),
        ("limit" = Option<u32>, Query, description = "How many tenants, 1–100 (default 20).", minimum = 1, maximum = 100),
    ),
    responses(
        (status = 200, description = "The tenants, the one that created a job most recently first.", body = Tenants),
        (status = 422, description = "`invalid_field` (a bad `prefix` or `limit`) or `unknown_field`, with `field`.", body = ErrorBody),
        StoreUnavailable,
    ))]
pub async fn tenants(call: Call) -> Result<Json<Tenants>, ApiError> {
    let mut fields = call.query()?;
    let prefix = match take_single(&mut fields, "prefix")? {
        None => String::new(),
        Some(v) => v
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| ApiError::invalid("prefix", "prefix must be text"))?,
    };
    let limit = limit_field(&mut fields, PICKER_DEFAULT, PICKER_MAX)?;
    refuse_unknown(&fields, "prefix and limit")?;
    let recent = call.app.store.recent_tenants().await?;
    let tenants = browse::pick(recent, &prefix, |t| call.caller.sees(t), limit);
    Ok(Json(Tenants { tenants }))
}
