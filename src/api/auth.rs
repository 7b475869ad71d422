//! Bearer tokens → a `Caller` (scope, name) request extension; handlers ask the `Caller`,
//! never the header.
//!
//! The configured tokens (`config::tokens`) are looked up by the presented bearer token.
//! Without any entry the service runs open: every caller is an anonymous operator. A
//! read-only token (`read:…`) passes every read check of its scope and fails every change.
//! `/healthz`, `/readyz` and `/metrics` are never guarded.

use axum::extract::{FromRequestParts, Request, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::extract::single_header;
use super::AppState;
use crate::config::tokens::{Access, Holder, Scope};
use crate::jobs::TenantId;

/// The prefix every guarded path starts with.
pub(crate) const GUARDED_PREFIX: &str = "/catalog";
/// The name a caller gets when the service runs without tokens.
pub const ANONYMOUS: &str = "anonymous";

/// Who is asking: put on every guarded request by [`authenticate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub scope: Scope,
    pub access: Access,
    /// Who holds the token (for audit), or `anonymous`.
    pub name: String,
}

impl Caller {
    fn anonymous() -> Self {
        Self {
            scope: Scope::All,
            access: Access::ReadWrite,
            name: ANONYMOUS.to_owned(),
        }
    }

    /// Whether this caller reads every tenant (an operator token, read-only or not, or any
    /// caller of a service without tokens).
    pub fn is_operator(&self) -> bool {
        self.scope == Scope::All
    }

    /// Whether this caller may change anything at all.
    pub fn may_write(&self) -> bool {
        self.access == Access::ReadWrite
    }

    /// 403 `forbidden` for a read-only token: asked first by every route that changes
    /// something, before the request's content is looked at.
    pub fn may_change(&self) -> Result<(), ApiError> {
        if self.may_write() {
            Ok(())
        } else {
            Err(ApiError::ReadOnly)
        }
    }

    /// 403 `forbidden` unless this caller may read every tenant (the overview, every
    /// tenant's jobs).
    pub fn may_read_every_tenant(&self) -> Result<(), ApiError> {
        match &self.scope {
            Scope::All => Ok(()),
            Scope::Tenant(_) => Err(ApiError::OperatorsOnly),
        }
    }

    /// The scope as the token file spells it (`*`, `acme`, `read:*`, `read:acme`).
    pub fn scope_label(&self) -> String {
        Holder::scope_label(&self.scope, self.access)
    }

    /// Whether this caller may see and act on `tenant`'s data.
    pub fn sees(&self, tenant: &TenantId) -> bool {
        match &self.scope {
            Scope::All => true,
            Scope::Tenant(own) => own == tenant,
        }
    }

    /// 403 `forbidden` when the request names a tenant this caller may not act for.
    pub fn may_act_for(&self, tenant: &TenantId) -> Result<(), ApiError> {
        if self.sees(tenant) {
            Ok(())
        } else {
            Err(ApiError::Forbidden)
        }
    }
}

impl From<Holder> for Caller {
    fn from(h: Holder) -> Self {
        Self {
            scope: h.scope,
            access: h.access,
            name: h.name,
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    /// Fails closed: a route that was not guarded has no caller, and answers 401.
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or(ApiError::Unauthorized)
    }
}

/// Middleware: every `/catalog/...` request gets a `Caller`, or 401 without a known token.
pub async fn authenticate(State(app): State<AppState>, mut req: Request, next: Next) -> Response {
    if !req.uri().path().starts_with(GUARDED_PREFIX) {
        return next.run(req).await;
    }
    if let Err(twice) = single_header(req.headers(), AUTHORIZATION) {
        return twice.into_response();
    }
    let caller = if app.guard.tokens.is_open() {
        Some(Caller::anonymous())
    } else {
        bearer(&req)
            .and_then(|token| app.guard.tokens.holder(token))
            .map(Caller::from)
    };
    match caller {
        Some(caller) => {
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        None => ApiError::Unauthorized.into_response(),
    }
}

/// The header a token comes in, as errors name it.
const AUTHORIZATION: &str = "Authorization";

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(req: &Request) -> Option<&str> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}
