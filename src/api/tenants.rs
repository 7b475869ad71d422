//! `DELETE /catalog/tenants/{tenant_id}`: a tenant's data removed — its jobs (once none is
//! active), its idempotency keys and create windows, and its catalogue (products, extracted
//! attributes, neighbours) — in one step of the job store when the catalogue is in the same
//! Redis. It leaves the tenant's tombstone: nothing of a run or an import begun before the
//! delete is written after it (`jobs::fence`), while new jobs and imports work as usual.

use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::answers::StoreUnavailable;
use super::call::Call;
use super::error::{ApiError, ErrorBody};
use super::extract::InPath;
use crate::catalog::products::Cleared;
use crate::jobs::pipeline::PIPELINE_KIND;
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

/// Removes a tenant's ended jobs and its catalogue, for good: a run or an import of the
/// tenant begun before the delete writes nothing after it (an import streaming in stops at
/// its next batch with 409 `tenant_deleted`), and no record of its jobs is written back; a
/// job or import begun after it works as usual. Refused while one of its jobs is queued or
/// running (nothing is removed then); asking again answers zero counts. With tokens, the
/// tenant's own token or an operator's (`*`); another tenant's is 403 `forbidden`.
#[utoipa::path(delete, path = "/catalog/tenants/{tenant_id}", tag = "tenants", operation_id = "remove_tenant",
    params(("tenant_id" = String, Path, description = "The tenant whose data is removed.")),
    responses(
        (status = 200, description = "Removed: how many job records, products, products with extracted attributes and neighbour lists there were.", body = Removal),
        (status = 403, description = "`forbidden`: the token is another tenant's, or may only read (`read:…`).", body = ErrorBody),
        (status = 409, description = "`still_active`: a job of the tenant is queued or running (its `job_id`); nothing was removed.", body = ErrorBody),
        (status = 422, description = "`invalid_field`: not a tenant id (with `field`); `unknown_field`: a query field (the route takes none — the tenant is in the path).", body = ErrorBody),
        StoreUnavailable,
    ))]
pub async fn remove(
    InPath(tenant): InPath<TenantId>,
    call: Call,
) -> Result<Json<Removal>, ApiError> {
    call.no_query()?;
    let Call { app, caller, .. } = call;
    caller.may_change()?;
    caller.may_act_for(&tenant)?;
    // A pipeline's lock names an active job too.
    let pipeline = Kind::parse(PIPELINE_KIND).expect("the pipeline kind is a valid kind");
    let mut kinds: Vec<Kind> = app.runner.registry().kinds().cloned().collect();
    kinds.push(pipeline);
    let hashes = app.catalog.store.hashes(&tenant);
    let (jobs, sizes) = match app.store.purge(&tenant, &kinds, &hashes).await? {
        Purge::StillActive(job) => return Err(ApiError::StillActive(job)),
        Purge::Removed { jobs, hashes } => (jobs, hashes),
    };
    // A catalogue the job store could not remove in its step (the embedded one) is cleared
    // now; the tombstone already refuses every writer begun before the delete.
    let catalogue = match Cleared::from_sizes(&sizes) {
        Some(cleared) => cleared,
        None => {
            let store = app.catalog.store.clone();
            let owner = tenant.clone();
            tokio::task::spawn_blocking(move || store.clear(&owner))
                .await
                .map_err(|e| ApiError::Internal(format!("a catalogue call stopped: {e}")))??
        }
    };
    Ok(Json(Removal {
        tenant_id: tenant,
        jobs,
        catalogue,
    }))
}
