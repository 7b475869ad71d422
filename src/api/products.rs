//! The catalogue over HTTP: `POST /catalog/products` imports synchronously (JSON array, JSON
//! Lines or CSV; one bad row never sinks the rest), `GET /catalog/products` pages, and
//! `GET /catalog/products/{product_key}` shows a product with its enrichment and neighbours.

use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::Uri;
use axum::Json;
use serde::Serialize;
use serde_json::{json, Value};

use super::error::ApiError;
use super::extract::{body_bytes, media_type, query_fields, take_single};
use super::jobs::tenant_field;
use super::AppState;
use crate::catalog::products::{
    csv_reader, csv_row_to_json, strip_bom, CatalogStore, CatalogStoreError, Product, ProductKey,
};
use crate::jobs::registry::Fields;
use crate::jobs::TenantId;

/// How many row errors an import answers with.
const ERROR_SAMPLE: usize = 20;
const IMPORT_BATCH: usize = 1000;
const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 500;

impl From<CatalogStoreError> for ApiError {
    fn from(e: CatalogStoreError) -> Self {
        match e {
            CatalogStoreError::BadCursor => ApiError::invalid(
                "cursor",
                "cursor must be a next_cursor this listing handed out",
            ),
            other => ApiError::StoreUnavailable(crate::jobs::store::StoreError::Unavailable(
                other.to_string(),
            )),
        }
    }
}

/// Runs a blocking catalogue call off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, CatalogStoreError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| {
            ApiError::StoreUnavailable(crate::jobs::store::StoreError::Unavailable(
                "the catalogue call was cancelled".into(),
            ))
        })?
        .map_err(ApiError::from)
}

fn only_tenant(uri: &Uri, extra: &[&str]) -> Result<(TenantId, Fields), ApiError> {
    let mut fields = query_fields(uri)?;
    let tenant = tenant_field(&mut fields)?;
    if let Some(name) = fields.keys().find(|k| !extra.contains(&k.as_str())) {
        let allowed = if extra.is_empty() {
            "tenant_id".to_owned()
        } else {
            format!("tenant_id, {}", extra.join(", "))
        };
        return Err(ApiError::UnknownField {
            field: name.clone(),
            message: format!("`{name}` is not a parameter here; use {allowed}"),
        });
    }
    Ok((tenant, fields))
}

#[derive(Default, Serialize)]
pub struct ImportReport {
    read: u64,
    created: u64,
    updated: u64,
    unchanged: u64,
    invalid: u64,
    errors: Vec<Value>,
}

impl ImportReport {
    fn row(&mut self, line: u64, parsed: Result<Product, String>, valid: &mut Vec<Product>) {
        self.read += 1;
        match parsed {
            Ok(p) => valid.push(p),
            Err(error) => {
                self.invalid += 1;
                if self.errors.len() < ERROR_SAMPLE {
                    self.errors.push(json!({ "line": line, "error": error }));
                }
            }
        }
    }
}

pub async fn import(
    State(app): State<AppState>,
    req: Request,
) -> Result<Json<ImportReport>, ApiError> {
    let (tenant, _) = only_tenant(req.uri(), &[])?;
    let content_type = media_type(req.headers());
    let body = body_bytes(req, &()).await?;
    let mut report = ImportReport::default();
    let mut valid = Vec::new();
    match content_type.as_str() {
        "application/json" => {
            let value: Value = serde_json::from_slice(&body).map_err(|e| {
                ApiError::MalformedBody(format!("the JSON body is not valid JSON: {e}"))
            })?;
            let items = match value {
                Value::Array(items) => items,
                obj @ Value::Object(_) => vec![obj],
                _ => {
                    return Err(ApiError::MalformedBody(
                        "send a JSON array of products".into(),
                    ))
                }
            };
            for (i, item) in items.into_iter().enumerate() {
                report.row(i as u64 + 1, Product::from_json(item), &mut valid);
            }
        }
        "application/x-ndjson"
        | "application/jsonl"
        | "application/jsonlines"
        | "application/x-jsonlines" => {
            // Line by line, so one line that is not UTF-8 or not JSON is one invalid row.
            for (i, raw) in body.split(|b| *b == b'\n').enumerate() {
                let parsed = match std::str::from_utf8(raw) {
                    Ok(line) if line.trim().is_empty() => continue,
                    Ok(line) => serde_json::from_str::<Value>(strip_bom(line.trim()))
                        .map_err(|e| format!("not valid JSON: {e}"))
                        .and_then(Product::from_json),
                    Err(_) => Err("the line is not UTF-8 text".to_owned()),
                };
                report.row(i as u64 + 1, parsed, &mut valid);
            }
        }
        "text/csv" | "application/csv" => {
            let mut csv = csv_reader(&body[..]).map_err(|e| {
                ApiError::MalformedBody(format!("the CSV body could not be read: {e}"))
            })?;
            let headers = csv
                .headers()
                .map_err(|e| {
                    ApiError::MalformedBody(format!("the CSV header could not be read: {e}"))
                })?
                .clone();
            for record in csv.records() {
                match record {
                    Ok(r) => {
                        let line = r.position().map(|p| p.line()).unwrap_or(0);
                        report.row(
                            line,
                            Product::from_json(csv_row_to_json(&headers, &r)),
                            &mut valid,
                        );
                    }
                    Err(e) => {
                        let line = e.position().map(|p| p.line()).unwrap_or(0);
                        report.row(line, Err(format!("unreadable CSV row: {e}")), &mut valid);
                    }
                }
            }
        }
        "" => return Err(ApiError::UnsupportedMediaType("(none given)".into())),
        other => return Err(ApiError::UnsupportedMediaType(other.to_owned())),
    }
    let store = app.catalog.store.clone();
    let counts = blocking(move || {
        let mut total = crate::catalog::products::Upserted::default();
        for chunk in valid.chunks(IMPORT_BATCH) {
            let c = store.upsert(&tenant, chunk)?;
            total.created += c.created;
            total.updated += c.updated;
            total.unchanged += c.unchanged;
        }
        Ok(total)
    })
    .await?;
    report.created = counts.created;
    report.updated = counts.updated;
    report.unchanged = counts.unchanged;
    Ok(Json(report))
}

pub async fn list(State(app): State<AppState>, uri: Uri) -> Result<Json<Value>, ApiError> {
    let (tenant, mut fields) = only_tenant(&uri, &["limit", "cursor"])?;
    let limit = match take_single(&mut fields, "limit")? {
        None => DEFAULT_PAGE,
        Some(v) => v
            .as_str()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| {
                ApiError::invalid(
                    "limit",
                    format!("limit must be a whole number from 1 to {MAX_PAGE}"),
                )
            })?,
    };
    let cursor = take_single(&mut fields, "cursor")?
        .and_then(|v| v.as_str().map(str::to_owned))
        .filter(|c| !c.is_empty());
    let store = app.catalog.store.clone();
    let (items, next) = blocking(move || store.page(&tenant, limit, cursor.as_deref())).await?;
    Ok(Json(json!({ "products": items, "next_cursor": next })))
}

pub async fn get_one(
    State(app): State<AppState>,
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    let (tenant, _) = only_tenant(&uri, &[])?;
    let raw = path.map(|Path(p)| p).unwrap_or_default();
    let not_found = || ApiError::NotFound(format!("tenant has no product `{raw}`"));
    let key = ProductKey::parse(&raw).map_err(|_| not_found())?;
    let store: Arc<dyn CatalogStore> = app.catalog.store.clone();
    let found = blocking(move || {
        let Some(stored) = store.get(&tenant, &key)? else {
            return Ok(None);
        };
        let enrichment = store.enrichment(&tenant, &key)?;
        // The table holds keys and scores; names are joined here, at read. A neighbour
        // deleted since the last pair is skipped: there is nothing left to show or follow.
        let mut neighbours = Vec::new();
        for n in store.neighbours(&tenant, &key)?.unwrap_or_default() {
            if let Some(other) = store.get(&tenant, &n.product_key)? {
                neighbours.push(json!({
                    "product_key": n.product_key,
                    "name": other.product.name,
                    "score": n.score,
                }));
            }
        }
        Ok(Some((stored, enrichment, neighbours)))
    })
    .await?;
    let Some((stored, enrichment, neighbours)) = found else {
        return Err(not_found());
    };
    let state = match &enrichment {
        None => "not_enriched",
        Some(e) if e.content_hash != stored.content_hash => "stale",
        Some(e) if e.unextractable => "unextractable",
        Some(_) => "enriched",
    };
    let mut body = serde_json::to_value(&stored).expect("a stored product always serialises");
    body["enrichment"] = json!({
        "state": state,
        "attributes": enrichment.map(|e| Value::Object(e.attributes)).unwrap_or(json!({})),
    });
    body["neighbours"] = json!(neighbours);
    Ok(Json(body))
}
