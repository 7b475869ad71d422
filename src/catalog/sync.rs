//! sync: streams each source feed (JSON Lines or CSV; a file inside `FEEDS_DIR` or an
//! http(s) URL on an allowed host) and upserts its products in batches.
//!
//! Sources are checked before a job is created (`prepare`): absolute paths, `..`, symlinks
//! leaving `FEEDS_DIR`, other hosts and other schemes are refused, so nothing outside the
//! allowed places is ever read. A source that fails mid-way is reported with its error class;
//! the job fails only when no source could be read.
//!
//! Safe to run again (a recovered job's next attempt does): products are upserted by
//! content hash, so rows already written read `unchanged`. It stops on request between rows
//! and during a stalled feed read, reporting what it saved.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use super::products::{csv_reader, csv_row_to_json, strip_bom, Product};
use super::{check, retrying, Catalog, CatalogError, CatalogSettings, Monotonic};
use crate::jobs::registry::{only_fields, Fields, ParamError, Progress};
use crate::jobs::TenantId;
use tokio_util::sync::CancellationToken;

const BATCH: usize = 500;
const MAX_SOURCES: usize = 100;
const MAX_LINE: usize = 1 << 20;
/// How many row errors a source's report keeps.
const ERROR_SAMPLE: usize = 5;

/// Checks the `source` fields: each must resolve to an allowed place that exists.
/// A sync's parameters, as the POST checked them.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SyncParams {
    pub sources: Vec<String>,
}

pub fn prepare(fields: &Fields, settings: &CatalogSettings) -> Result<SyncParams, ParamError> {
    only_fields(fields, &["source"])?;
    let raw = fields.get("source").map(Vec::as_slice).unwrap_or_default();
    if raw.is_empty() {
        return Err(ParamError::missing(
            "source",
            "sync needs at least one source: a feed path inside FEEDS_DIR (e.g. demo.jsonl) or an http(s) URL",
        ));
    }
    if raw.len() > MAX_SOURCES {
        return Err(ParamError::invalid(
            "source",
            format!("at most {MAX_SOURCES} sources per sync"),
        ));
    }
    let mut sources = Vec::with_capacity(raw.len());
    for v in raw {
        let s = v
            .as_str()
            .ok_or_else(|| ParamError::invalid("source", "each source must be a string"))?
            .trim();
        resolve(s, settings)?;
        sources.push(s.to_owned());
    }
    Ok(SyncParams { sources })
}

/// Where a source points, once it is known to be allowed.
#[derive(Debug, PartialEq)]
pub enum Resolved {
    File(PathBuf),
    Url(reqwest::Url),
}

fn not_allowed(message: String) -> ParamError {
    ParamError::invalid("source", message).with_code("source_not_allowed")
}

/// Resolves a source to a file inside `FEEDS_DIR` or a URL on an allowed host.
pub fn resolve(source: &str, settings: &CatalogSettings) -> Result<Resolved, ParamError> {
    if source.is_empty() {
        return Err(ParamError::invalid("source", "a source must not be empty"));
    }
    let lower = source.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        let url = reqwest::Url::parse(source)
            .map_err(|_| ParamError::invalid("source", format!("`{source}` is not a valid URL")))?;
        let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
        if !settings.allowed_hosts.contains(&host) {
            return Err(not_allowed(format!(
                "host `{host}` is not in SYNC_ALLOWED_HOSTS; feeds are fetched only from listed hosts"
            )));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(not_allowed("URLs with credentials are not accepted".into()));
        }
        return Ok(Resolved::Url(url));
    }
    if source.contains("://") || lower.starts_with("file:") {
        return Err(not_allowed(format!(
            "`{source}`: only relative paths inside FEEDS_DIR and http(s) URLs are accepted"
        )));
    }
    let path = Path::new(source);
    let escapes = path.is_absolute()
        || source.starts_with('\\')
        || source.contains('\0')
        || path
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    if escapes {
        return Err(not_allowed(format!(
            "`{source}` must be a relative path inside FEEDS_DIR, without `..`"
        )));
    }
    let base = settings.feeds_dir.canonicalize().map_err(|_| {
        ParamError::invalid("source", "FEEDS_DIR does not exist on this server")
            .with_code("source_not_found")
    })?;
    let full = match base.join(path).canonicalize() {
        Ok(p) => p,
        Err(_) => {
            return Err(
                ParamError::invalid("source", format!("no feed `{source}` in FEEDS_DIR"))
                    .with_code("source_not_found"),
            )
        }
    };
    // Canonical paths: a symlink that leads out of FEEDS_DIR is caught here.
    if !full.starts_with(&base) {
        return Err(not_allowed(format!("`{source}` leads outside FEEDS_DIR")));
    }
    if !full.is_file() {
        return Err(
            ParamError::invalid("source", format!("`{source}` is not a file"))
                .with_code("source_not_found"),
        );
    }
    Ok(Resolved::File(full))
}

/// One source's part of the report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SourceReport {
    pub source: String,
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'static str>,
    pub read: u64,
    pub created: u64,
    pub updated: u64,
    pub unchanged: u64,
    pub invalid: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<Value>,
}

#[derive(Debug, thiserror::Error)]
enum SourceError {
    #[error("{0}")]
    Unreachable(String),
    #[error("the feed is larger than the limit")]
    TooLarge,
    #[error("the feed could not be read: {0}")]
    Malformed(String),
}

impl SourceError {
    fn class(&self) -> &'static str {
        match self {
            SourceError::Unreachable(_) => "SourceUnreachable",
            SourceError::TooLarge => "FeedTooLarge",
            SourceError::Malformed(_) => "MalformedFeed",
        }
    }
}

/// Counts bytes read, for progress by bytes, and refuses to read past a limit.
struct Counting<R> {
    inner: R,
    read: Arc<AtomicU64>,
    limit: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Everything up to the limit is handed on (and its rows kept); only a byte beyond it
        // is an error.
        let remaining = self.limit.saturating_sub(self.read.load(Ordering::Relaxed));
        if remaining == 0 {
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(io::Error::other(SourceError::TooLarge)),
            };
        }
        let max = buf
            .len()
            .min(usize::try_from(remaining).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..max])?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// An HTTP body read from a blocking thread, one chunk at a time (never buffered whole).
/// A read waiting on a stalled feed gives up as soon as the job is asked to stop.
struct HttpBody {
    handle: tokio::runtime::Handle,
    response: reqwest::Response,
    stop: CancellationToken,
    /// The last chunk received, and how much of it was read.
    data: Vec<u8>,
    at: usize,
}

impl Read for HttpBody {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at >= self.data.len() {
            let stop = self.stop.clone();
            let chunk = self.handle.block_on(async {
                tokio::select! {
                    chunk = self.response.chunk() => Some(chunk),
                    () = stop.cancelled() => None,
                }
            });
            let Some(chunk) = chunk else {
                return Err(io::Error::other("the job was asked to stop"));
            };
            match chunk {
                Ok(Some(bytes)) => {
                    self.data.clear();
                    self.data.extend_from_slice(&bytes);
                    self.at = 0;
                }
                Ok(None) => return Ok(0),
                Err(e) => return Err(io::Error::other(e)),
            }
        }
        let n = buf.len().min(self.data.len() - self.at);
        buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// An opened source: its reader, its size if known, and its format.
type Opened = (Box<dyn Read + Send>, Option<u64>, Format);

enum Format {
    JsonLines,
    Csv,
}

/// Opens a source for streaming: the reader, its size if known, and its format.
fn open(
    source: &str,
    settings: &CatalogSettings,
    stop: &CancellationToken,
) -> Result<Opened, SourceError> {
    let resolved = resolve(source, settings).map_err(|e| SourceError::Unreachable(e.message))?;
    match resolved {
        Resolved::File(path) => {
            let file = File::open(&path).map_err(|e| SourceError::Unreachable(e.to_string()))?;
            let size = file.metadata().ok().map(|m| m.len());
            let format = if path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
            {
                Format::Csv
            } else {
                Format::JsonLines
            };
            Ok((Box::new(file), size, format))
        }
        Resolved::Url(url) => {
            let handle = tokio::runtime::Handle::try_current().map_err(|_| {
                SourceError::Unreachable("URL feeds are fetched only inside the service".into())
            })?;
            let client = reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                .read_timeout(Duration::from_secs(30))
                // A redirect could lead to a host that is not allowed.
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| SourceError::Unreachable(e.to_string()))?;
            let response = handle
                .block_on(async {
                    tokio::select! {
                        r = client.get(url.clone()).send() => Some(r),
                        () = stop.cancelled() => None,
                    }
                })
                .ok_or_else(|| SourceError::Unreachable("the job was asked to stop".into()))?
                .map_err(|e| SourceError::Unreachable(e.to_string()))?;
            if !response.status().is_success() {
                return Err(SourceError::Unreachable(format!(
                    "the feed answered HTTP {}",
                    response.status()
                )));
            }
            let size = response.content_length();
            let is_csv = url.path().to_ascii_lowercase().ends_with(".csv")
                || response
                    .headers()
                    .get(reqwest::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|ct| ct.contains("csv"));
            let body = HttpBody {
                handle,
                response,
                stop: stop.clone(),
                data: Vec::new(),
                at: 0,
            };
            Ok((
                Box::new(body),
                size,
                if is_csv {
                    Format::Csv
                } else {
                    Format::JsonLines
                },
            ))
        }
    }
}

/// Parses products from a JSON Lines or CSV stream, calling `row` for each (line, result).
fn parse_stream(
    reader: impl Read,
    format: Format,
    mut row: impl FnMut(u64, Result<Product, String>) -> Result<(), CatalogError>,
) -> Result<Result<(), SourceError>, CatalogError> {
    match format {
        Format::JsonLines => {
            let mut reader = BufReader::with_capacity(64 * 1024, reader);
            let mut line = Vec::new();
            let mut n = 0u64;
            loop {
                line.clear();
                let read = match (&mut reader)
                    .take(MAX_LINE as u64 + 1)
                    .read_until(b'\n', &mut line)
                {
                    Ok(r) => r,
                    Err(e) => return Ok(Err(io_error(e))),
                };
                if read == 0 {
                    return Ok(Ok(()));
                }
                n += 1;
                if line.len() > MAX_LINE {
                    return Ok(Err(SourceError::Malformed(format!(
                        "line {n} is longer than 1 MiB"
                    ))));
                }
                let text = String::from_utf8_lossy(&line);
                if text.trim().is_empty() {
                    continue;
                }
                let parsed = serde_json::from_str::<Value>(strip_bom(text.trim()))
                    .map_err(|e| format!("not valid JSON: {e}"))
                    .and_then(Product::from_json);
                row(n, parsed)?;
            }
        }
        Format::Csv => {
            let mut csv = match csv_reader(reader) {
                Ok(csv) => csv,
                Err(e) => return Ok(Err(io_error(e))),
            };
            let headers = match csv.headers() {
                Ok(h) => h.clone(),
                Err(e) => return Ok(Err(csv_error(e))),
            };
            let mut record = csv::StringRecord::new();
            loop {
                match csv.read_record(&mut record) {
                    Ok(false) => return Ok(Ok(())),
                    Ok(true) => {
                        let line = record.position().map(|p| p.line()).unwrap_or(0);
                        row(line, Product::from_json(csv_row_to_json(&headers, &record)))?;
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            csv::ErrorKind::Utf8 { .. } | csv::ErrorKind::UnequalLengths { .. }
                        ) =>
                    {
                        let line = e.position().map(|p| p.line()).unwrap_or(0);
                        row(line, Err(e.to_string()))?;
                    }
                    Err(e) => return Ok(Err(csv_error(e))),
                }
            }
        }
    }
}

fn io_error(e: io::Error) -> SourceError {
    let too_large = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<SourceError>())
        .is_some_and(|inner| matches!(inner, SourceError::TooLarge));
    if too_large {
        SourceError::TooLarge
    } else {
        SourceError::Unreachable(e.to_string())
    }
}

fn csv_error(e: csv::Error) -> SourceError {
    match e.into_kind() {
        csv::ErrorKind::Io(io) => io_error(io),
        other => SourceError::Malformed(format!("{other:?}")),
    }
}

/// Runs a sync: every source in turn, upserting in batches, reporting per source.
pub fn run(
    catalog: &Catalog,
    tenant: &TenantId,
    params: &SyncParams,
    stop: &CancellationToken,
    progress: Progress<'_>,
) -> Result<Value, CatalogError> {
    let sources = &params.sources;
    let progress = Monotonic::new(progress);
    let n = sources.len();
    let mut reports = Vec::with_capacity(n);
    for (i, source) in sources.iter().enumerate() {
        check(stop)?;
        let step = format!("syncing {source} ({} of {n})", i + 1);
        progress.interpolate(0, 100, i, n, &step);
        let mut report = SourceReport {
            source: source.clone(),
            ..Default::default()
        };
        let outcome = sync_source(catalog, tenant, source, stop, &mut report, &|frac: f64| {
            let p = ((i as f64 + frac.clamp(0.0, 1.0)) * 100.0 / n as f64) as u8;
            progress.report(p, &step);
        });
        // A stop (between rows, or during a stalled read, which then fails the source) is
        // reported with what was saved before it.
        if stop.is_cancelled() || matches!(outcome, Err(CatalogError::Cancelled)) {
            report.status = "cancelled";
            report.error = None;
            reports.push(report);
            return Err(CatalogError::CancelledWith(summary(&reports)));
        }
        let outcome = outcome?;
        match outcome {
            Ok(()) => report.status = "ok",
            Err(e) => {
                tracing::warn!(source = %source, error_class = e.class(), error = %e, "a sync source failed");
                report.status = "failed";
                report.error = Some(e.class());
            }
        }
        reports.push(report);
    }
    if !reports.is_empty() && reports.iter().all(|r| r.status == "failed") {
        return Err(CatalogError::SourceUnreachable(format!(
            "all {n} sources failed"
        )));
    }
    progress.report(
        100,
        &format!("synced {n} source{}", if n == 1 { "" } else { "s" }),
    );
    Ok(summary(&reports))
}

/// The sync's report: per source, and totals.
fn summary(reports: &[SourceReport]) -> Value {
    let total = |f: fn(&SourceReport) -> u64| reports.iter().map(f).sum::<u64>();
    let totals = json!({
        "read": total(|r| r.read),
        "created": total(|r| r.created),
        "updated": total(|r| r.updated),
        "unchanged": total(|r| r.unchanged),
        "invalid": total(|r| r.invalid),
    });
    let failed = reports.iter().filter(|r| r.status == "failed").count();
    json!({ "sources": reports, "totals": totals, "sources_failed": failed })
}

/// Streams one source into the catalogue. The outer error ends the job (the store stayed
/// down); the inner one fails only this source.
fn sync_source(
    catalog: &Catalog,
    tenant: &TenantId,
    source: &str,
    stop: &CancellationToken,
    report: &mut SourceReport,
    on_progress: &dyn Fn(f64),
) -> Result<Result<(), SourceError>, CatalogError> {
    let (reader, size, format) = match open(source, &catalog.settings, stop) {
        Ok(opened) => opened,
        Err(e) => return Ok(Err(e)),
    };
    let bytes = Arc::new(AtomicU64::new(0));
    let counting = Counting {
        inner: reader,
        read: bytes.clone(),
        limit: catalog.settings.max_feed_bytes,
    };
    let mut batch: Vec<Product> = Vec::with_capacity(BATCH);
    let window = catalog.settings.write_retry;
    let flush = |batch: &mut Vec<Product>, report: &mut SourceReport| -> Result<(), CatalogError> {
        check(stop)?;
        if batch.is_empty() {
            return Ok(());
        }
        let counts = retrying(window, || catalog.store.upsert(tenant, batch))?;
        report.created += counts.created;
        report.updated += counts.updated;
        report.unchanged += counts.unchanged;
        batch.clear();
        Ok(())
    };
    let outcome = parse_stream(counting, format, |line, parsed| {
        check(stop)?;
        report.read += 1;
        match parsed {
            Ok(p) => batch.push(p),
            Err(message) => {
                report.invalid += 1;
                if report.errors.len() < ERROR_SAMPLE {
                    report
                        .errors
                        .push(json!({ "line": line, "error": message }));
                }
            }
        }
        if batch.len() >= BATCH {
            flush(&mut batch, report)?;
            if let Some(size) = size.filter(|s| *s > 0) {
                on_progress(bytes.load(Ordering::Relaxed) as f64 / size as f64);
            }
        }
        Ok(())
    })?;
    // What was read before a failure is kept.
    flush(&mut batch, report)?;
    on_progress(1.0);
    Ok(outcome)
}
