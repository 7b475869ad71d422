//! Our own extractors, so that every rejection a client can cause uses our error envelope.
//!
//! `StartFields` gathers a start request's fields from the query string and from a body in
//! any of the accepted content types into one `Fields` map (a repeated field, or a JSON
//! array, gives several values). Nothing here knows what the fields mean.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Multipart, Path, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode, Uri};
use serde_json::Value;

use super::error::{ApiError, IDEMPOTENCY_KEY};
use super::AppState;
use crate::catalog::products::ProductKey;
use crate::jobs::params::{parse_bool, Fields};
use crate::jobs::{JobId, TenantId};

/// The fields of a request: query string and body together.
pub struct StartFields(pub Fields);

impl FromRequest<AppState> for StartFields {
    type Rejection = ApiError;

    /// The body must arrive whole within `REQUEST_TIMEOUT_SECONDS` (408) and be at most
    /// `MAX_START_BODY_BYTES` (413, refused by its `Content-Length` before it is read).
    async fn from_request(req: Request, app: &AppState) -> Result<Self, Self::Rejection> {
        let fields = query_fields(req.uri())?;
        if declared_length(&req).is_some_and(|n| n > app.guard.max_start_body_bytes as u64) {
            return Err(ApiError::PayloadTooLarge("MAX_START_BODY_BYTES"));
        }
        tokio::time::timeout(app.guard.request_timeout, body_fields(req, fields, app))
            .await
            .map_err(|_| ApiError::RequestTimeout)?
            .map(Self)
    }
}

/// The whole body of a small request (a bulk call), as bytes: held to `MAX_START_BODY_BYTES`
/// (413 `payload_too_large`, by its `Content-Length` before it is read, or as it comes
/// chunked) and to `REQUEST_TIMEOUT_SECONDS` (408). axum's own `Bytes` answers plain text.
pub struct SmallBody(pub Bytes);

impl FromRequest<AppState> for SmallBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &AppState) -> Result<Self, Self::Rejection> {
        if declared_length(&req).is_some_and(|n| n > app.guard.max_start_body_bytes as u64) {
            return Err(ApiError::PayloadTooLarge("MAX_START_BODY_BYTES"));
        }
        tokio::time::timeout(app.guard.request_timeout, body_bytes(req, app))
            .await
            .map_err(|_| ApiError::RequestTimeout)?
            .map(Self)
    }
}

async fn body_fields(req: Request, mut fields: Fields, app: &AppState) -> Result<Fields, ApiError> {
    // A coding says how a body is sent: with none (a start by its query), nothing comes
    // compressed, and it is accepted as on a route that reads no body (`call::refuse_body`).
    if !axum::body::HttpBody::is_end_stream(req.body()) {
        identity_encoding(req.headers())?;
    }
    let content_type = media_type(req.headers());
    if content_type == "multipart/form-data" {
        let mut multipart = Multipart::from_request(req, app).await.map_err(|e| {
            ApiError::MalformedBody(format!(
                "the multipart body could not be read: {}",
                e.body_text()
            ))
        })?;
        loop {
            let field = match multipart.next_field().await {
                Ok(Some(field)) => field,
                Ok(None) => break,
                Err(e) => return Err(multipart_error(e)),
            };
            let Some(name) = field.name().map(str::to_owned) else {
                return Err(ApiError::MalformedBody(
                    "a multipart part has no field name".into(),
                ));
            };
            let text = field.text().await.map_err(multipart_error)?;
            fields.entry(name).or_default().push(Value::String(text));
        }
        return Ok(fields);
    }
    let body = body_bytes(req, app).await?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(fields);
    }
    match content_type.as_str() {
        "application/json" => merge_json(&mut fields, &body)?,
        "application/x-www-form-urlencoded" => {
            let pairs: Vec<(String, String)> =
                serde_urlencoded::from_bytes(&body).map_err(|e| {
                    ApiError::MalformedBody(format!("the form body could not be read: {e}"))
                })?;
            for (k, v) in pairs {
                fields.entry(k).or_default().push(Value::String(v));
            }
        }
        ct if ct.ends_with("+json") => merge_json(&mut fields, &body)?,
        other => {
            return Err(refused_media(
                other,
                "(none given, with a body)",
                START_MEDIA_TYPES,
            ))
        }
    }
    Ok(fields)
}

/// 415 for a body of a media type the route does not read, naming the type given (`none`:
/// what to say when none was) and the ones it reads.
pub fn refused_media(content_type: &str, none: &str, accepted: &'static str) -> ApiError {
    let given = if content_type.is_empty() {
        none.to_owned()
    } else {
        format!("`{content_type}`")
    };
    ApiError::unsupported_media(given, accepted)
}

/// What a start request's body may be.
const START_MEDIA_TYPES: &str =
    "application/json, application/x-www-form-urlencoded, multipart/form-data, or only query parameters";

/// The route's one path parameter as text ("" when it cannot be decoded: the typed
/// extractors below answer that as an unknown id).
async fn path_segment<S: Send + Sync>(parts: &mut Parts, state: &S) -> String {
    Path::<String>::from_request_parts(parts, state)
        .await
        .map(|Path(p)| p)
        // A segment whose percent-decoded bytes are not UTF-8 (`%ff`) matches nothing.
        .unwrap_or_else(|_| char::REPLACEMENT_CHARACTER.to_string())
}

/// How much of a client's path segment a message repeats.
const MAX_ECHOED_CHARS: usize = 80;

/// A client's path segment as a message shows it: control and invisible formatting
/// characters (a NUL, a right-to-left override) escaped, and cut after
/// [`MAX_ECHOED_CHARS`], so a message never carries them or grows with the request.
pub(super) fn echoed(raw: &str) -> String {
    // Every start echoes its kind: one string, no allocation a character.
    let mut shown = String::with_capacity(raw.len().min(4 * MAX_ECHOED_CHARS));
    for c in raw.chars().take(MAX_ECHOED_CHARS) {
        match c.is_control() || is_format_char(c) {
            true => shown.extend(c.escape_unicode()),
            false => shown.push(c),
        }
    }
    if raw.chars().count() > MAX_ECHOED_CHARS {
        shown.push('…');
    }
    shown
}

/// Unicode's invisible formatting characters that can reorder or hide text around them
/// (bidirectional overrides and isolates, zero-width characters).
fn is_format_char(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

/// What a route's one path parameter may be, and how a segment that is not one is answered.
pub trait Segment: Sized {
    fn from_segment(raw: &str) -> Result<Self, ApiError>;
}

/// The route's one path parameter, read as a `T` (and refused as `T` says).
pub struct InPath<T>(pub T);

impl<S: Send + Sync, T: Segment> FromRequestParts<S> for InPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        T::from_segment(&path_segment(parts, state).await).map(Self)
    }
}

/// A segment whose refusal waits: a handler that checks its query first takes its segment
/// so, and answers the segment's refusal after (a missing `tenant_id` is 422 before a key
/// that cannot be one is 404, as before a key that is not found).
impl<T: Segment> Segment for Result<T, ApiError> {
    fn from_segment(raw: &str) -> Result<Self, ApiError> {
        Ok(T::from_segment(raw))
    }
}

/// A `{job_id}` that is not a UUID is answered exactly as an unknown id (404), so the two
/// cannot be told apart.
impl Segment for JobId {
    fn from_segment(raw: &str) -> Result<Self, ApiError> {
        JobId::parse(raw)
            .map_err(|_| ApiError::NotFound(format!("no job has the id `{}`", echoed(raw))))
    }
}

/// A `{product_key}` that cannot be a key is answered as a product the tenant does not
/// have (404).
impl Segment for ProductKey {
    fn from_segment(raw: &str) -> Result<Self, ApiError> {
        ProductKey::parse(raw).map_err(|_| product_not_found(&echoed(raw)))
    }
}

/// A `{tenant_id}` that cannot be a tenant is a 422 `invalid_field` naming `tenant_id`, as in
/// a query string.
impl Segment for TenantId {
    fn from_segment(raw: &str) -> Result<Self, ApiError> {
        TenantId::parse(raw).map_err(|e| ApiError::bad_id("tenant_id", e))
    }
}

/// The one answer for a job id nobody may see.
pub fn job_not_found(id: &JobId) -> ApiError {
    ApiError::NotFound(format!("no job has the id `{id}`"))
}

/// The body length the request declares (`Content-Length`), if any: a body declared over a
/// limit is refused before a byte of it is read.
pub fn declared_length(req: &Request) -> Option<u64> {
    req.headers()
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Refuses a body in a content coding (`Content-Encoding: gzip`): no route decodes one, and
/// read as it came, compressed bytes would be refused as a malformed body at best. No
/// header, or `identity`, passes.
pub fn identity_encoding(headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_ENCODING) else {
        return Ok(());
    };
    let given = value.to_str().unwrap_or("").trim();
    if given.eq_ignore_ascii_case("identity") {
        return Ok(());
    }
    Err(ApiError::UnsupportedEncoding(match given {
        "" => "(not text, or empty)".to_owned(),
        coding => format!("`{}`", echoed(coding)),
    }))
}

/// The request's media type, lower-cased and without parameters (`""` when none is given);
/// a value with no type before its parameters (`;;;==`) is answered whole, so a refusal
/// quotes what was given rather than saying none was.
pub fn media_type(headers: &axum::http::HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            let media = v.split(';').next().unwrap_or("").trim();
            if media.is_empty() { v.trim() } else { media }.to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// Reads the whole body under the router's body limit; too large is 413, never a 5xx.
pub async fn body_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(req, state)
        .await
        .map_err(|r| unreadable(r.status(), "body", r.body_text()))
}

fn multipart_error(e: axum::extract::multipart::MultipartError) -> ApiError {
    unreadable(e.status(), "multipart body", e.body_text())
}

/// A body axum could not read (`status`, `why`): 413 past the limit, else 400 `malformed_body`.
fn unreadable(status: StatusCode, what: &str, why: String) -> ApiError {
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::PayloadTooLarge("MAX_START_BODY_BYTES")
    } else {
        ApiError::MalformedBody(format!("the {what} could not be read: {why}"))
    }
}

fn merge_json(fields: &mut Fields, body: &[u8]) -> Result<(), ApiError> {
    let value = strict_json(body)?;
    let Value::Object(map) = value else {
        return Err(ApiError::MalformedBody(
            "the JSON body must be an object such as {\"tenant_id\": \"acme\"}".into(),
        ));
    };
    for (k, v) in map {
        let values = fields.entry(k).or_default();
        match v {
            Value::Array(items) => values.extend(items),
            Value::Null => {}
            other => values.push(other),
        }
    }
    Ok(())
}

/// Parses JSON refusing a key given twice in any object (422), where serde_json would let
/// the last value silently win.
pub fn strict_json(body: &[u8]) -> Result<Value, ApiError> {
    crate::strict_json::parse(body).map_err(|e| match e {
        crate::strict_json::StrictJsonError::DuplicateKey(key) => ApiError::DuplicateKey(key),
        crate::strict_json::StrictJsonError::Invalid(text) => {
            ApiError::MalformedBody(format!("the JSON body is not valid JSON: {text}"))
        }
    })
}

/// The query string as fields; an undecodable one is a 400.
pub fn query_fields(uri: &Uri) -> Result<Fields, ApiError> {
    let mut fields = Fields::new();
    if let Some(q) = uri.query() {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(q).map_err(|e| {
            ApiError::MalformedBody(format!("the query string could not be read: {e}"))
        })?;
        for (k, v) in pairs {
            fields.entry(k).or_default().push(Value::String(v));
        }
    }
    Ok(fields)
}

/// Takes a field that must be given at most once, as a string.
pub fn take_single(fields: &mut Fields, name: &str) -> Result<Option<Value>, ApiError> {
    match fields.remove(name) {
        None => Ok(None),
        Some(values) => {
            let mut distinct: Vec<Value> = Vec::with_capacity(1);
            for v in values {
                if !distinct.contains(&v) {
                    distinct.push(v);
                }
            }
            match distinct.len() {
                0 => Ok(None),
                1 => Ok(distinct.pop()),
                _ => Err(ApiError::invalid(
                    name,
                    format!("`{name}` was given more than once with different values"),
                )),
            }
        }
    }
}

/// Takes the required `tenant_id` field and parses it.
pub fn tenant_field(fields: &mut Fields) -> Result<TenantId, ApiError> {
    let value = take_single(fields, "tenant_id")?.ok_or_else(|| {
        ApiError::missing("tenant_id", "tenant_id is required, e.g. tenant_id=acme")
    })?;
    let raw = value
        .as_str()
        .ok_or_else(|| ApiError::invalid("tenant_id", "tenant_id must be a string"))?;
    TenantId::parse(raw).map_err(|e| ApiError::bad_id("tenant_id", e))
}

/// Takes the optional `tenant_id` field and parses it (`None` when it is not given).
pub fn named_tenant(fields: &mut Fields) -> Result<Option<TenantId>, ApiError> {
    match fields.contains_key("tenant_id") {
        true => tenant_field(fields).map(Some),
        false => Ok(None),
    }
}

/// Takes the optional `wait` field of a start request (false when absent).
pub fn wait_field(fields: &mut Fields) -> Result<bool, ApiError> {
    match take_single(fields, "wait")? {
        None => Ok(false),
        Some(v) => parse_bool(&v).ok_or_else(|| {
            ApiError::invalid(
                "wait",
                "wait must be one of true, false, 1, 0, yes, no, on, off",
            )
        }),
    }
}

/// Takes an optional `limit`: a whole number from 1 to `max`, `default` when absent.
pub fn limit_field(fields: &mut Fields, default: usize, max: usize) -> Result<usize, ApiError> {
    let Some(v) = take_single(fields, "limit")? else {
        return Ok(default);
    };
    let n = match &v {
        Value::String(s) => s.trim().parse::<usize>().ok(),
        Value::Number(n) => n.as_u64().and_then(|n| usize::try_from(n).ok()),
        _ => None,
    };
    n.filter(|n| (1..=max).contains(n)).ok_or_else(|| {
        ApiError::invalid(
            "limit",
            format!("limit must be a whole number from 1 to {max}"),
        )
    })
}

/// Takes a listing's optional `cursor`, as given. An empty one (`cursor=`) is the first page,
/// as none is, on every listing: a client that pages with `cursor={next}` from an empty
/// start reads alike from jobs and products.
pub fn cursor_field(fields: &mut Fields) -> Result<Option<Value>, ApiError> {
    Ok(take_single(fields, "cursor")?.filter(|v| v.as_str() != Some("")))
}

/// Refuses the first field left over once a route took the ones it knows (`allowed` names
/// those, for the message), so a typo is a clear 422 rather than silently ignored.
pub fn refuse_unknown(fields: &Fields, allowed: &str) -> Result<(), ApiError> {
    match fields.keys().next() {
        None => Ok(()),
        Some(name) => Err(ApiError::UnknownField {
            message: format!("`{name}` is not a parameter here; use {allowed}"),
            field: name.clone(),
        }),
    }
}

/// The one answer for a product the tenant does not have.
pub fn product_not_found(key: &str) -> ApiError {
    ApiError::NotFound(format!("tenant has no product `{key}`"))
}

/// A `{kind}` path segment, as given: the registry, not the path, says which kinds exist.
pub struct KindPath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for KindPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(echoed(&path_segment(parts, state).await)))
    }
}

/// What a start does when a job of its tenant and kind is already active.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnConflict {
    /// 409 `already_running` (the default).
    Reject,
    /// Answer with the active job when its parameters are the request's.
    Join,
}

/// Takes the optional `on_conflict` field of a start request (`reject` when absent).
pub fn on_conflict_field(fields: &mut Fields) -> Result<OnConflict, ApiError> {
    match take_single(fields, "on_conflict")? {
        None => Ok(OnConflict::Reject),
        Some(v) => match v.as_str() {
            Some("reject") => Ok(OnConflict::Reject),
            Some("join") => Ok(OnConflict::Join),
            _ => Err(ApiError::invalid(
                "on_conflict",
                "on_conflict must be `reject` or `join`",
            )),
        },
    }
}

/// The one value of a header a request may give once (400 `duplicate_header` when it gives
/// several: taking the first, or the last, would be a guess at what the client meant).
pub fn single_header<'h>(
    headers: &'h axum::http::HeaderMap,
    name: &'static str,
) -> Result<Option<&'h axum::http::HeaderValue>, ApiError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    match values.next() {
        None => Ok(first),
        Some(_) => Err(ApiError::DuplicateHeader(name)),
    }
}

/// Longest `Idempotency-Key` taken: room for any UUID or client-made key, while a client
/// cannot bloat the store's key names.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// The request's `Idempotency-Key`, if it sent one: 1–255 visible ASCII characters or spaces
/// (a header value that is not text, or has a tab, is refused like an empty one).
pub fn idempotency_key(headers: &axum::http::HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = single_header(headers, IDEMPOTENCY_KEY)? else {
        return Ok(None);
    };
    let key = value.to_str().ok().filter(|k| {
        !k.is_empty()
            && k.len() <= MAX_IDEMPOTENCY_KEY_LEN
            && k.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
    });
    key.map(|k| Some(k.to_owned())).ok_or_else(|| {
        ApiError::invalid(
            IDEMPOTENCY_KEY,
            format!(
                "Idempotency-Key must be 1–{MAX_IDEMPOTENCY_KEY_LEN} visible ASCII characters or spaces"
            ),
        )
    })
}
