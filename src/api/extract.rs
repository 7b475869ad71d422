//! Our own extractors, so that every rejection a client can cause uses our error envelope.
//!
//! `StartFields` gathers a start request's fields from the query string and from a body in
//! any of the accepted content types into one `Fields` map (a repeated field, or a JSON
//! array, gives several values). Nothing here knows what the fields mean.

use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Request};
use axum::http::{header, StatusCode, Uri};
use serde_json::Value;

use super::error::ApiError;
use crate::jobs::registry::Fields;

/// The fields of a request: query string and body together.
pub struct StartFields(pub Fields);

impl<S: Send + Sync> FromRequest<S> for StartFields {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let mut fields = query_fields(req.uri())?;
        let content_type = media_type(req.headers());
        if content_type == "multipart/form-data" {
            let mut multipart = Multipart::from_request(req, state).await.map_err(|e| {
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
            return Ok(Self(fields));
        }
        let body = body_bytes(req, state).await?;
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self(fields));
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
            "" => {
                return Err(ApiError::UnsupportedMediaType(
                    "(none given, with a body)".into(),
                ))
            }
            other => return Err(ApiError::UnsupportedMediaType(other.to_owned())),
        }
        Ok(Self(fields))
    }
}

/// The request's media type, lower-cased and without parameters (`""` when none is given).
pub fn media_type(headers: &axum::http::HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// Reads the whole body under the router's body limit; too large is 413, never a 5xx.
pub async fn body_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge
        } else {
            ApiError::MalformedBody(format!(
                "the body could not be read: {}",
                rejection.body_text()
            ))
        }
    })
}

fn multipart_error(e: axum::extract::multipart::MultipartError) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::PayloadTooLarge
    } else {
        ApiError::MalformedBody(format!(
            "the multipart body could not be read: {}",
            e.body_text()
        ))
    }
}

fn merge_json(fields: &mut Fields, body: &[u8]) -> Result<(), ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::MalformedBody(format!("the JSON body is not valid JSON: {e}")))?;
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
