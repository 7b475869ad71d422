//! `Call`: what the handler of a guarded route starts from — the service, who is calling,
//! the request's id and its query string — taken in one extractor, so a handler's head
//! names only what is its own (a path segment, headers, a body). The query is read when the
//! handler asks for it, and every handler asks: one that takes no query field refuses any
//! (`no_query`), so an option put in the wrong place (`?dry_run=true` on a bulk call or a
//! tenant delete) is a 422, never silently ignored. A body is refused the same way unless
//! the handler says it reads one (`Call<WithBody>`): a plain `Call` reads the body itself,
//! and a field in it (`{"full": true}` on a retry) is a 422 naming the field, never dropped.
//! Nothing here knows what a route's fields mean beyond the tenant they name.

use std::marker::PhantomData;

use axum::body::{Body, HttpBody};
use axum::extract::{FromRequest, FromRequestParts, MatchedPath, Request};
use axum::http::request::Parts;
use axum::http::Uri;
use serde_json::Value;

use super::access::RequestId;
use super::auth::Caller;
use super::error::ApiError;
use super::extract::{
    identity_encoding, media_type, query_fields, refuse_unknown, strict_json, tenant_field,
};
use super::AppState;
use crate::jobs::params::Fields;
use crate::jobs::TenantId;

/// A guarded request, as its handler sees it before its own parameters. `B` says whether
/// the handler reads the body: [`NoBody`] (the default) refuses any, [`WithBody`] leaves it
/// to the handler's own extractor.
pub struct Call<B = NoBody> {
    pub app: AppState,
    pub caller: Caller,
    /// The request's id (`access`), recorded on the jobs the call starts.
    pub request_id: String,
    uri: Uri,
    body: PhantomData<B>,
}

/// A route that reads no body: `Call` reads it, accepts only one that says nothing (none,
/// blanks, `{}`, an empty form) and refuses any other. It is the last of its handler's
/// extractors, as any that reads the body must be.
pub struct NoBody;

/// A route whose handler reads the body with an extractor of its own (a start, a bulk call,
/// an import).
pub struct WithBody;

impl FromRequestParts<AppState> for Call<WithBody> {
    type Rejection = ApiError;

    /// 401 when the request has no caller (a route the guard does not cover).
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        Call::from_parts(parts, app).await
    }
}

impl FromRequest<AppState> for Call<NoBody> {
    type Rejection = ApiError;

    /// As `Call<WithBody>`, then the body: see [`refuse_body`].
    async fn from_request(req: Request, app: &AppState) -> Result<Self, ApiError> {
        let (mut parts, body) = req.into_parts();
        let call = Call::from_parts(&mut parts, app).await?;
        refuse_body(&parts, body, app).await?;
        Ok(call)
    }
}

/// What a route that reads no body accepts from a client that sends one anyway, e.g. a
/// client library that sends `{}` with every POST.
const NO_BODY: &str = "no body: this route reads none";

/// Refuses the body of a request to a route that reads none, so nothing sent is dropped
/// without a word: a field of a JSON object or a form is 422 `unknown_field` naming it; a
/// body of another content type, or one that is not a JSON object, is 415
/// `unsupported_media_type`; a broken JSON body is 400 `malformed_body`. A body of only
/// blanks, `{}` or an empty form names nothing and is accepted. At most
/// `MAX_START_BODY_BYTES` of it are read, within `REQUEST_TIMEOUT_SECONDS` (408): a longer
/// body is refused (415) with a message that says so, blanks or not.
async fn refuse_body(parts: &Parts, body: Body, app: &AppState) -> Result<(), ApiError> {
    // Most such requests come without a body: nothing to read, and no timer to set for it.
    if body.is_end_stream() {
        return Ok(());
    }
    let content_type = media_type(&parts.headers);
    let got = || match content_type.as_str() {
        "" => "(none given, with a body)".to_owned(),
        ct => format!("`{ct}`"),
    };
    let limit = app.guard.max_start_body_bytes;
    let read = tokio::time::timeout(app.guard.request_timeout, axum::body::to_bytes(body, limit));
    let bytes = match read.await {
        Err(_) => return Err(ApiError::RequestTimeout),
        // Over the limit (or broken off): whatever it holds, it is not read, and the answer
        // says so rather than blame its content type.
        Ok(Err(_)) => return Err(ApiError::BodyNotRead),
        Ok(Ok(bytes)) => bytes,
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    identity_encoding(&parts.headers)?;
    let names: Vec<String> = match content_type.as_str() {
        "application/x-www-form-urlencoded" => {
            let pairs: Vec<(String, String)> =
                serde_urlencoded::from_bytes(&bytes).map_err(|e| {
                    ApiError::MalformedBody(format!("the form body could not be read: {e}"))
                })?;
            pairs.into_iter().map(|(name, _)| name).collect()
        }
        ct if ct == "application/json" || ct.ends_with("+json") => match strict_json(&bytes)? {
            Value::Object(map) => map.into_iter().map(|(name, _)| name).collect(),
            _ => return Err(ApiError::unsupported_media(got(), NO_BODY)),
        },
        _ => return Err(ApiError::unsupported_media(got(), NO_BODY)),
    };
    let Some(name) = names.into_iter().next() else {
        return Ok(());
    };
    let route = parts
        .extensions
        .get::<MatchedPath>()
        .map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned());
    Err(ApiError::UnknownField {
        message: format!(
            "`{name}` is not a parameter of {} {route}: it reads no request body",
            parts.method
        ),
        field: name,
    })
}

impl<B> Call<B> {
    /// 401 when the request has no caller (a route the guard does not cover).
    async fn from_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, app).await?;
        let Ok(RequestId(request_id)) = RequestId::from_request_parts(parts, app).await;
        Ok(Self {
            app: app.clone(),
            caller,
            request_id,
            uri: parts.uri.clone(),
            body: PhantomData,
        })
    }

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
