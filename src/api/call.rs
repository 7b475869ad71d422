//! `Call`: what the handler of a guarded route starts from — the service, who is calling,
//! the request's id and its query string — taken in one extractor, so a handler's head
//! names only what is its own (a path segment, headers, a body). The query is read when the
//! handler asks for it, and every handler asks: one that takes no query field refuses any
//! (`no_query`), so an option put in the wrong place (`?dry_run=true` on a bulk call or a
//! tenant delete) is a 422, never silently ignored.
//! Nothing here knows what a route's fields mean beyond the tenant they name.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::Uri;

use super::access::RequestId;
use super::auth::Caller;
use super::error::ApiError;
use super::extract::{query_fields, refuse_unknown, tenant_field};
use super::AppState;
use crate::jobs::params::Fields;
use crate::jobs::TenantId;

/// A guarded request, as its handler sees it before its own parameters.
pub struct Call {
    pub app: AppState,
    pub caller: Caller,
    /// The request's id (`access`), recorded on the jobs the call starts.
    pub request_id: String,
    uri: Uri,
}

impl FromRequestParts<AppState> for Call {
    type Rejection = ApiError;

    /// 401 when the request has no caller (a route the guard does not cover).
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, app).await?;
        let Ok(RequestId(request_id)) = RequestId::from_request_parts(parts, app).await;
        Ok(Self {
            app: app.clone(),
            caller,
            request_id,
            uri: parts.uri.clone(),
        })
    }
}

impl Call {
    /// The query string's fields; an undecodable one is a 400.
    pub fn query(&self) -> Result<Fields, ApiError> {
        query_fields(&self.uri)
    }

    /// 422 `unknown_field` for any query field: the route takes none.
    pub fn no_query(&self) -> Result<(), ApiError> {
        refuse_unknown(&self.query()?, "no query field at all")
    }

    /// The query's required `tenant_id` (which the caller must be allowed to act for) and
    /// its other fields, refusing any not in `extra`.
    pub fn tenant_query(&self, extra: &[&str]) -> Result<(TenantId, Fields), ApiError> {
        let mut fields = self.query()?;
        let tenant = tenant_field(&mut fields)?;
        self.caller.may_act_for(&tenant)?;
        let unknown: Fields = fields
            .iter()
            .filter(|(k, _)| !extra.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let allowed = std::iter::once("tenant_id")
            .chain(extra.iter().copied())
            .collect::<Vec<_>>()
            .join(", ");
        refuse_unknown(&unknown, &allowed)?;
        Ok((tenant, fields))
    }
}
