//! `GET /admin`: the admin page — one HTML document, its stylesheet and its script modules,
//! embedded in the binary (`src/api/admin/`), so the page works offline and nothing comes
//! from a CDN. `GET /` sends a browser there. The page itself is static and open; every API
//! call it makes carries the token the operator typed (`Authorization: Bearer`), so the guard
//! stays where it is, on `/catalog`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::{ApiError, ErrorBody};
use super::extract::{echoed, InPath, Segment};

const PAGE: &str = include_str!("admin/index.html");

const CSS: &str = "text/css; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";

/// The page's files beside its document, by name: the stylesheet, and the script modules
/// (`admin.js` loads the others).
pub const ASSETS: [(&str, &str, &str); 10] = [
    ("admin.css", include_str!("admin/admin.css"), CSS),
    ("admin.js", include_str!("admin/admin.js"), JS),
    ("core.js", include_str!("admin/core.js"), JS),
    ("live.js", include_str!("admin/live.js"), JS),
    ("jobs.js", include_str!("admin/jobs.js"), JS),
    ("job.js", include_str!("admin/job.js"), JS),
    ("products.js", include_str!("admin/products.js"), JS),
    ("overview.js", include_str!("admin/overview.js"), JS),
    ("pipeline.js", include_str!("admin/pipeline.js"), JS),
    ("bulk.js", include_str!("admin/bulk.js"), JS),
];

/// Where the page lives; `/` redirects here.
pub const PAGE_PATH: &str = "/admin";

/// Only this origin's files may load or be called, and nothing inline runs: a product name
/// that smuggled markup in could not execute even if it were ever rendered as HTML.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// Revalidate every time: the files change with the binary, and they are small.
const CACHE_CONTROL: &str = "no-cache";

/// The admin page: the overview, tenant and token, job starts with live progress, the jobs
/// table, a job's timeline, cancel and retry, and the product browser.
#[utoipa::path(get, path = "/admin", tag = "admin", operation_id = "admin_page",
    responses((status = 200, description = "The admin page (HTML; its stylesheet and scripts are `/admin/{asset}`).",
        body = String, content_type = "text/html")))]
pub async fn page() -> Response {
    asset(PAGE, "text/html; charset=utf-8")
}

/// One of the admin page's files: its stylesheet (`admin.css`) or a script module (`admin.js`
/// and the modules it imports; plain JavaScript, no framework).
#[utoipa::path(get, path = "/admin/{asset}", tag = "admin", operation_id = "admin_asset",
    params(("asset" = String, Path, description = "The file's name: `admin.css`, `admin.js`, or a module `admin.js` imports.")),
    responses(
        (status = 200, description = "The file.", content((String = "text/css"), (String = "text/javascript"))),
        (status = 404, description = "`not_found`: the page has no such file.", body = ErrorBody),
    ))]
pub async fn file(InPath(AssetName(name)): InPath<AssetName>) -> Result<Response, ApiError> {
    ASSETS
        .iter()
        .find(|(file, _, _)| *file == name)
        .map(|(_, body, media)| asset(body, media))
        .ok_or_else(|| ApiError::NotFound(format!("the admin page has no file {}", echoed(&name))))
}

/// An `{asset}` segment as sent: any name is looked up (one that is not UTF-8, `%ff`, finds
/// nothing: a JSON 404 like any unknown file).
pub struct AssetName(String);

impl Segment for AssetName {
    fn from_segment(raw: &str) -> Result<Self, ApiError> {
        Ok(Self(raw.to_owned()))
    }
}

/// Sends a browser that opens the service's root to the admin page.
#[utoipa::path(get, path = "/", tag = "admin", operation_id = "admin_redirect",
    responses((status = 303, description = "See `/admin`.", body = String, content_type = "text/html",
        headers(("Location" = String, description = "`/admin`.")))))]
pub async fn root() -> Response {
    let mut response = asset(
        "<!doctype html><title>catalog-jobs</title><a href=\"/admin\">admin page</a>\n",
        "text/html; charset=utf-8",
    );
    *response.status_mut() = StatusCode::SEE_OTHER;
    response
        .headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(PAGE_PATH));
    response
}

/// A static file with the page's security headers.
fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, CACHE_CONTROL),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}
