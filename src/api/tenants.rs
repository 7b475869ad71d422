//! `DELETE /catalog/tenants/{tenant_id}`: a tenant's data removed — its jobs (once none is
//! active) and then its catalogue (products, extracted attributes, neighbours).

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::extract::TenantPath;
use super::AppState;
use crate::catalog::products::Cleared;
use crate::jobs::store::Purge;
use crate::jobs::{Kind, TenantId};

/// What a removal took away.
#[derive(Serialize, ToSchema)]
#[schema(as = TenantRemoval)]
pub struct Removal {
    tenant_id: TenantId,
    /// Job records removed (every one had ended).
    jobs: u64,
    #[serde(flatten)]
    catalogue: Cleared,
}

/// Removes a tenant's ended jobs and its catalogue. Refused while one of its jobs is queued
/// or running (nothing is removed then); asking again answers zero counts. With tokens, the
/// tenant's own token or an operator's (`*`); another tenant's is 403 `forbidden`.
#[utoipa::path(delete, path = "/catalog/tenants/{tenant_id}", tag = "tenants", operation_id = "remove_tenant",
    params(("tenant_id" = String, Path, description = "The tenant whose data is removed.")),
    responses(
        (status = 200, description = "Removed: how many job records, products, products with extracted attributes and neighbour lists there were.", body = Removal),
        (status = 403, description = "`forbidden`: the token is another tenant's, or may only read (`read:…`).", body = ErrorBody),
        (status = 409, description = "`still_active`: a job of the tenant is queued or running (its `job_id`); nothing was removed.", body = ErrorBody),
        (status = 422, description = "`invalid_field`: not a tenant id (with `field`).", body = ErrorBody),
        (status = 503, description = "`store_unavailable`.", body = ErrorBody),
    ))]
pub async fn remove(
    State(app): State<AppState>,
    caller: Caller,
    TenantPath(tenant): TenantPath,
) -> Result<Json<Removal>, ApiError> {
    caller.may_change()?;
    caller.may_act_for(&tenant)?;
    let kinds: Vec<Kind> = app.runner.registry().kinds().cloned().collect();
    let jobs = match app.store.purge(&tenant, &kinds).await? {
        Purge::StillActive(job) => return Err(ApiError::StillActive(job)),
        Purge::Removed(n) => n,
    };
    let store = app.catalog.store.clone();
    let owner = tenant.clone();
    let catalogue = tokio::task::spawn_blocking(move || store.clear(&owner))
        .await
        .map_err(|e| ApiError::Internal(format!("a catalogue call stopped: {e}")))??;
    Ok(Json(Removal {
        tenant_id: tenant,
        jobs,
        catalogue,
    }))
}
