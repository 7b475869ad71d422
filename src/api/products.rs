//! The catalogue over HTTP: `POST /catalog/products` imports synchronously (JSON array, JSON
//! Lines or CSV, streamed through the same `feed` reader as sync; one bad row never sinks the
//! rest), `GET /catalog/products` pages, and
//! `GET /catalog/products/{product_key}` shows a product with its enrichment and neighbours.

use std::io::{self, Read};
use std::pin::Pin;
use std::sync::Arc;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use tokio::sync::{mpsc, Semaphore};

use super::answers::{BadField, OtherTenant, StoreUnavailable};
use super::call::{Call, WithBody};
use super::error::{ApiError, ErrorBody};
use super::extract::{
    cursor_field, declared_length, identity_encoding, limit_field, media_type, product_not_found,
    take_single, InPath,
};
use super::product_view::{NeighbourView, ProductPage, ProductView};
use crate::catalog::feed::{self, FeedError, Format, RowReport};
use crate::catalog::products::{CatalogStore, CatalogStoreError};
use crate::catalog::products::{Product, ProductKey};
use crate::catalog::search::{search, ProductQuery};
use crate::jobs::fence::{StoreFence, Writer};

/// Products per upsert of an import: one round trip carries many, and memory holds one batch.
const IMPORT_BATCH: usize = 1000;
/// Body chunks in flight between the connection and the reading thread: enough to keep the
/// thread busy while the next chunk arrives, few enough that memory follows a batch, not
/// the body (hyper's chunks are at most a few hundred KiB).
const CHUNKS_IN_FLIGHT: usize = 8;
const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 500;

/// What imports share: how many may run at once, and how large a body may be.
#[derive(Clone)]
pub struct Imports {
    permits: Arc<Semaphore>,
    concurrent: usize,
    max_body_bytes: usize,
}

impl Imports {
    /// `concurrent` imports at once (`MAX_CONCURRENT_IMPORTS`), bodies of `max_body_bytes`.
    pub fn new(concurrent: usize, max_body_bytes: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(concurrent)),
            concurrent,
            max_body_bytes,
        }
    }

    /// Imports running right now.
    pub fn running(&self) -> usize {
        self.concurrent
            .saturating_sub(self.permits.available_permits())
    }
}

/// Runs a blocking catalogue call off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, CatalogStoreError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(format!("a catalogue call stopped: {e}")))?
        .map_err(ApiError::from)
}

/// The body went past `MAX_BODY_BYTES` while it was streamed in.
#[derive(Debug, thiserror::Error)]
#[error("the body is larger than MAX_BODY_BYTES")]
struct BodyTooLarge;

/// Imports products from a JSON array, JSON Lines or CSV body, streamed: the body flows in
/// chunks to a blocking thread that reads rows with `feed` (as sync does) and saves them in
/// batches, so memory follows a batch, not the body. At most `MAX_CONCURRENT_IMPORTS` run at
/// once; beyond that the answer is 503 `overloaded` at once. A body that breaks off part-way
/// (over `MAX_BODY_BYTES`, or a malformed JSON array) is answered with its error and the
/// `report` of the rows already saved.
#[utoipa::path(post, path = "/catalog/products", tag = "products", operation_id = "import_products",
    params(("tenant_id" = String, Query, description = "The tenant.")),
    request_body(description = "A JSON array (or one object), JSON Lines, or CSV with a header row.", content(
        (Vec<Product> = "application/json"),
        (String = "application/x-ndjson"),
        (String = "text/csv"),
    )),
    responses(
        (status = 200, description = "What was read, created, updated, unchanged and invalid.", body = RowReport),
        (status = 400, description = "`malformed_body`.", body = ErrorBody),
        (status = 403, description = "`forbidden`: the token is for another tenant than the one named, or may only read (`read:…`).", body = ErrorBody),
        (status = 408, description = "`request_timeout`: the body did not arrive within `REQUEST_TIMEOUT_SECONDS`; the connection is closed.", body = ErrorBody),
        (status = 409, description = "`tenant_deleted`: the tenant was deleted while the import ran; it stopped at its next batch, and `report` counts what it saved before (which the delete removed).", body = ErrorBody),
        (status = 413, description = "`payload_too_large` (beyond `MAX_BODY_BYTES`); the answer carries `Connection: close` and the connection ends with it (the rest of the body is left unread).", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`: a content type not listed, or a compressed body (a `Content-Encoding` other than `identity`; that answer carries `Accept-Encoding: identity` and `Connection: close`, and the connection ends with it).", body = ErrorBody),
        (status = 503, description = "`overloaded` (`MAX_CONCURRENT_IMPORTS` imports are running) or `store_unavailable`.", body = ErrorBody),
        BadField,
    ))]
pub async fn import(call: Call<WithBody>, req: Request) -> Response {
    match import_rows(call, req).await {
        Ok(report) => Json(report).into_response(),
        Err(e) => {
            // The rest of the body may be unread: the connection cannot carry another request,
            // and a client that pooled it would find it closed under its next one.
            let mut response = e.into_response();
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            response
        }
    }
}

async fn import_rows(call: Call<WithBody>, req: Request) -> Result<RowReport, ApiError> {
    call.caller.may_change()?;
    let (tenant, _) = call.tenant_query(&[])?;
    let app = call.app;
    let format = import_format(req.headers())?;
    identity_encoding(req.headers())?;
    let limit = app.imports.max_body_bytes;
    if declared_length(&req).is_some_and(|n| n > limit as u64) {
        // Refused before a byte is read: its report says nothing was saved, as a streamed
        // body's 413 says what was.
        let nothing = RowReport::default();
        return Err(ApiError::PayloadTooLarge("MAX_BODY_BYTES").with_import_report(nothing));
    }
    let permit = app
        .imports
        .permits
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::ImportsBusy)?;
    // The tombstone as the import begins, before a byte of its body is read: a delete of the
    // tenant from now on refuses its later batches (`jobs::fence`), so nothing it streams in
    // outlives the delete.
    let seen = app.store.tombstone(&tenant).await?;
    let fence = StoreFence::new(
        app.store.clone(),
        Writer::Import {
            tenant: tenant.clone(),
            seen,
        },
    );
    let (tx, rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let pump = tokio::spawn(pump_body(
        req.into_body(),
        limit,
        app.guard.request_timeout,
        tx,
    ));
    let store = app.catalog.store.clone();
    let joined = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let mut report = RowReport::default();
        let reader = BodyReader {
            chunks: rx,
            current: Bytes::new(),
        };
        let no_check = || Ok(());
        let outcome = feed::load(
            reader,
            format,
            IMPORT_BATCH,
            &mut report,
            no_check,
            |batch| {
                store
                    .upsert(&tenant, batch, &fence)?
                    .or_else(|| Stopped::TenantDeleted)
            },
        );
        (report, outcome)
    })
    .await;
    // A refusal for a deleted tenant is read by the client only once it has sent its body
    // (a connection closed mid-body is a broken pipe to it): the rest is read and dropped,
    // within the body's limits. Other refusals close the connection at once.
    if matches!(&joined, Ok((_, Err(Stopped::TenantDeleted)))) {
        let _ = pump.await;
    } else {
        pump.abort();
    }
    let (report, outcome) =
        joined.map_err(|e| ApiError::Internal(format!("the import stopped: {e}")))?;
    match outcome {
        Ok(Ok(())) => Ok(report),
        Ok(Err(e)) => Err(unread(e).with_import_report(report)),
        Err(Stopped::Store(e)) => Err(ApiError::from(e).with_import_report(report)),
        Err(Stopped::TenantDeleted) => Err(ApiError::TenantDeleted.with_import_report(report)),
    }
}

/// The feed format an import's `Content-Type` names.
fn import_format(headers: &HeaderMap) -> Result<Format, ApiError> {
    match media_type(headers).as_str() {
        "" => Err(ApiError::unsupported_media(
            "(none given)",
            IMPORT_MEDIA_TYPES,
        )),
        other => Format::from_media_type(other)
            .ok_or_else(|| ApiError::unsupported_media(format!("`{other}`"), IMPORT_MEDIA_TYPES)),
    }
}

/// Why an import's body could not be read to its end: too large, stalled, or broken.
fn unread(e: FeedError) -> ApiError {
    match e {
        FeedError::Malformed(why) => ApiError::MalformedBody(why),
        FeedError::Read(e) if e.get_ref().is_some_and(|i| i.is::<BodyTooLarge>()) => {
            ApiError::PayloadTooLarge("MAX_BODY_BYTES")
        }
        FeedError::Read(e) if e.get_ref().is_some_and(|i| i.is::<BodyStalled>()) => {
            ApiError::RequestTimeout
        }
        FeedError::Read(e) => ApiError::MalformedBody(format!("the body could not be read: {e}")),
    }
}

/// Why an import stopped saving: the store failed, or its tenant was deleted meanwhile.
enum Stopped {
    Store(CatalogStoreError),
    TenantDeleted,
}

impl From<CatalogStoreError> for Stopped {
    fn from(e: CatalogStoreError) -> Self {
        Stopped::Store(e)
    }
}

/// What an import's body may be.
const IMPORT_MEDIA_TYPES: &str =
    "application/json (an array), application/x-ndjson (JSON Lines) or text/csv";

/// The body paused longer than `REQUEST_TIMEOUT_SECONDS` between two chunks.
#[derive(Debug, thiserror::Error)]
#[error("the body stalled for longer than REQUEST_TIMEOUT_SECONDS")]
struct BodyStalled;

/// Moves the body's chunks to the reading thread, counting bytes: past `limit` it sends
/// `BodyTooLarge` and stops; when no chunk arrives for `stall`, `BodyStalled`. It stops too
/// when the thread stopped reading. An import may take long, so the clock is per chunk, not
/// for the whole body.
async fn pump_body(
    mut body: Body,
    limit: usize,
    stall: std::time::Duration,
    tx: mpsc::Sender<io::Result<Bytes>>,
) {
    let mut seen = 0usize;
    loop {
        let next = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx));
        let Ok(frame) = tokio::time::timeout(stall, next).await else {
            let _ = tx.send(Err(io::Error::other(BodyStalled))).await;
            return;
        };
        let item = match frame {
            None => return,
            Some(Err(e)) => Err(io::Error::other(e)),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    seen = seen.saturating_add(data.len());
                    if seen > limit {
                        Err(io::Error::other(BodyTooLarge))
                    } else {
                        Ok(data)
                    }
                }
                // Trailers carry no rows.
                Err(_) => continue,
            },
        };
        let last = item.is_err();
        if tx.send(item).await.is_err() {
            return drain(body, limit.saturating_sub(seen), stall).await;
        }
        if last {
            return;
        }
    }
}

/// Reads and drops what is left of a body the import stopped reading: up to `left` bytes,
/// while chunks keep coming within `stall`.
async fn drain(mut body: Body, mut left: usize, stall: std::time::Duration) {
    loop {
        let next = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx));
        let Ok(Some(Ok(frame))) = tokio::time::timeout(stall, next).await else {
            return;
        };
        let read = frame.data_ref().map_or(0, Bytes::len);
        if read > left {
            return;
        }
        left -= read;
    }
}

/// The body as a blocking `Read`, one chunk at a time (never buffered whole).
struct BodyReader {
    chunks: mpsc::Receiver<io::Result<Bytes>>,
    current: Bytes,
}

impl Read for BodyReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.chunks.blocking_recv() {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = self.current.slice(n..);
        Ok(n)
    }
}

/// A page of a tenant's products; with `q`, the products it finds.
#[utoipa::path(get, path = "/catalog/products", tag = "products", operation_id = "list_products",
    params(
        ("tenant_id" = String, Query, description = "The tenant."),
        ("q" = Option<String>, Query, description = "Search: products whose key starts with `q` (case-insensitively), or whose name has every word of `q` (read as the catalogue reads names: case, hyphens and plurals folded, so `t-shirts` finds `T Shirt`). 1–200 characters. A search examines at most 100,000 products per request and may answer a short (even empty) page with a `next_cursor` to go on."),
        ("limit" = Option<u32>, Query, description = "How many, 1–500 (default 50).", minimum = 1, maximum = 500),
        ("cursor" = Option<String>, Query, description = "The `next_cursor` of the previous page (of the same `q`); empty (`cursor=`), the first page, as on every listing."),
    ),
    responses(
        (status = 200, description = "The page.", body = ProductPage),
        (status = 422, description = "`missing_field`, `invalid_field` (a bad `limit` or `cursor`, or a `q` empty or over 200 characters) or `unknown_field`.", body = ErrorBody),
        OtherTenant, StoreUnavailable,
    ))]
pub async fn list(call: Call) -> Result<Json<ProductPage>, ApiError> {
    let (tenant, mut fields) = call.tenant_query(&["limit", "cursor", "q"])?;
    let limit = limit_field(&mut fields, DEFAULT_PAGE, MAX_PAGE)?;
    let cursor = cursor_field(&mut fields)?.and_then(|v| v.as_str().map(str::to_owned));
    let query = take_single(&mut fields, "q")?
        .map(|v| ProductQuery::parse(v.as_str().unwrap_or_default()))
        .transpose()
        .map_err(|message| ApiError::invalid("q", message))?;
    let store = call.app.catalog.store.clone();
    let (items, next) = blocking(move || match query {
        Some(query) => search(&*store, &tenant, &query, limit, cursor.as_deref()),
        None => store.page(&tenant, limit, cursor.as_deref()),
    })
    .await?;
    Ok(Json(ProductPage {
        products: items,
        next_cursor: next,
    }))
}

/// A product with its enrichment and nearest neighbours.
#[utoipa::path(get, path = "/catalog/products/{product_key}", tag = "products", operation_id = "get_product",
    params(
        ("product_key" = String, Path, description = "The product's key."),
        ("tenant_id" = String, Query, description = "The tenant."),
    ),
    responses(
        (status = 200, description = "The product.", body = ProductView),
        (status = 404, description = "`not_found`: the tenant has no product of this key, or it cannot be a key (checked after the query: a missing `tenant_id` is 422 whatever the key).", body = ErrorBody),
        OtherTenant, BadField, StoreUnavailable,
    ))]
pub async fn get_one(
    InPath(key): InPath<Result<ProductKey, ApiError>>,
    call: Call,
) -> Result<Json<ProductView>, ApiError> {
    let (tenant, _) = call.tenant_query(&[])?;
    let key = key?;
    let app = call.app;
    let raw = key.as_str().to_owned();
    let not_found = || product_not_found(&raw);
    let store: Arc<dyn CatalogStore> = app.catalog.store.clone();
    let currency = app.catalog.settings.currency.clone();
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
                neighbours.push(NeighbourView {
                    product_key: n.product_key,
                    name: other.product.name,
                    score: n.score,
                });
            }
        }
        Ok(Some(ProductView::new(
            stored, currency, enrichment, neighbours,
        )))
    })
    .await?;
    found.map(Json).ok_or_else(not_found)
}
