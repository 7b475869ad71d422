//! API tokens for tests of who may do what: two tenants with a token each, and an
//! operator's token that reaches every tenant, as one `API_TOKENS` value.

use catalog_jobs::config::tokens::hash_token;
use catalog_jobs::jobs::TenantId;
use reqwest::Method;

use super::tenant;

/// The operator's token (`*`: every tenant).
pub const OPERATOR: &str = "op-secret-token";

/// Every route of tenant `t` and its job `job` that a token guards, as (method, path): the
/// reads (GET) first, then the changes, removing the tenant last.
pub fn tenant_routes(t: &TenantId, job: &str) -> Vec<(Method, String)> {
    vec![
        (Method::GET, format!("/catalog/jobs?tenant_id={t}")),
        (Method::GET, format!("/catalog/jobs/{job}")),
        (Method::GET, format!("/catalog/products?tenant_id={t}")),
        (Method::GET, format!("/catalog/products/p1?tenant_id={t}")),
        (Method::POST, format!("/catalog/ticker?tenant_id={t}")),
        (Method::POST, format!("/catalog/jobs/{job}/cancel")),
        (Method::POST, format!("/catalog/jobs/{job}/retry")),
        (Method::POST, format!("/catalog/products?tenant_id={t}")),
        (Method::DELETE, format!("/catalog/tenants/{t}")),
    ]
}

/// Two new tenants, each with its own token (`{tenant}-secret`).
pub struct Tokens {
    pub a: TenantId,
    pub b: TenantId,
    pub a_token: String,
    pub b_token: String,
}

impl Tokens {
    pub fn new() -> Self {
        let (a, b) = (tenant(), tenant());
        let (a_token, b_token) = (format!("{a}-secret"), format!("{b}-secret"));
        Self {
            a,
            b,
            a_token,
            b_token,
        }
    }

    /// The `API_TOKENS` setting that knows the operator's token and both tenants'.
    pub fn api_tokens(&self) -> String {
        format!(
            "* ops {};{} a-bot {};{} b-bot {}",
            hash_token(OPERATOR),
            self.a,
            hash_token(&self.a_token),
            self.b,
            hash_token(&self.b_token)
        )
    }
}
