//! `GET /admin`: the admin page — one HTML document, its stylesheet and its script, embedded
//! in the binary (`src/api/admin/`), so the page works offline and nothing comes from a CDN.
//! `GET /` sends a browser there. The page itself is static and open; every API call it
//! makes carries the token the operator typed (`Authorization: Bearer`), so the guard stays
//! where it is, on `/catalog`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

const PAGE: &str = include_str!("admin/index.html");
const STYLE: &str = include_str!("admin/admin.css");
const SCRIPT: &str = include_str!("admin/admin.js");

/// Where the page lives; `/` redirects here.
pub const PAGE_PATH: &str = "/admin";

/// Only this origin's files may load or be called, and nothing inline runs: a product name
/// that smuggled markup in could not execute even if it were ever rendered as HTML.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// Revalidate every time: the files change with the binary, and they are small.
const CACHE_CONTROL: &str = "no-cache";

/// The admin page: tenant and token pickers, job starts with live progress, the jobs table,
/// a job's timeline, cancel and retry, and the product browser.
#[utoipa::path(get, path = "/admin", tag = "admin", operation_id = "admin_page",
    responses((status = 200, description = "The admin page (HTML; its stylesheet and script are the two routes below).",
        body = String, content_type = "text/html")))]
pub async fn page() -> Response {
    asset(PAGE, "text/html; charset=utf-8")
}

/// The admin page's stylesheet.
#[utoipa::path(get, path = "/admin/admin.css", tag = "admin", operation_id = "admin_style",
    responses((status = 200, description = "The admin page's stylesheet.", body = String, content_type = "text/css")))]
pub async fn style() -> Response {
    asset(STYLE, "text/css; charset=utf-8")
}

/// The admin page's script (plain JavaScript, no framework).
#[utoipa::path(get, path = "/admin/admin.js", tag = "admin", operation_id = "admin_script",
    responses((status = 200, description = "The admin page's script.", body = String, content_type = "text/javascript")))]
pub async fn script() -> Response {
    asset(SCRIPT, "text/javascript; charset=utf-8")
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
