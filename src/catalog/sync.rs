//! sync: streams each source feed (JSON Lines or CSV; a file inside `FEEDS_DIR` or an
//! http(s) URL on an allowed host) and upserts its products in batches.
//!
//! Sources are checked before a job is created (`prepare`, by `source::resolve`), and again
//! when each is opened, so nothing outside the allowed places is ever read. Rows are read by `feed` (the reader `POST /catalog/products`
//! uses too). A source that fails mid-way is reported with its error class, its HTTP status
//! and the rows read and saved before it failed; the job fails only when no source could be
//! read, with the sources' class and the same partial report. A store outage past the retry
//! window ends it `StoreUnavailable`, its report up to the source it was saving.
//!
//! Safe to run again (a recovered job's next attempt does): products are upserted by
//! content hash, so rows already written read `unchanged` — but not a batch sent again
//! within a run after its answer was lost: it is named, and counts as it first counted. Each batch's upsert passes the
//! run's fence (`jobs::fence`): a run that lost its job, or whose tenant was deleted, writes
//! nothing more and stops. It stops on request between rows and during a stalled feed
//! read, reporting what it saved. An http(s) feed that sends less than 1 KiB in
//! `SYNC_SLOW_FEED_SECONDS` of waiting fails `FeedTooSlow`; one in a content coding fails
//! `UnsupportedEncoding`; a declared size over `MAX_FEED_BYTES` fails before a row is read.

use std::fs::File;
use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::feed::{self, FeedError, Format, RowReport};
use super::report::{to_result, RowCounts, SourceReport, SyncReport};
use super::source::{resolve, Resolved};
use super::{
    check, retrying, Catalog, CatalogError, CatalogRun, CatalogSettings, Monotonic, RunContext,
};
use crate::jobs::fence::Fence;
use crate::jobs::params::{from_fields, Fields, ParamError};
use crate::jobs::registry::{ErrorClass, Progress};
use crate::jobs::TenantId;
use tokio_util::sync::CancellationToken;

/// Products per upsert: one round trip carries many rows, and a failure loses little.
const BATCH: usize = 500;
/// Sources per sync: enough for a feed split by category, few enough to report on one page.
const MAX_SOURCES: usize = 100;
/// The most of a source's share of progress reading can show: all bytes read is not done
/// (the feed may still turn out malformed), so only a source that ended well shows 100 %.
const READ_BUT_NOT_DONE: f64 = 0.99;
/// A source of unknown length (an http(s) feed sent chunked) shows `read / (read + this)` of
/// its share: half at 4 MiB, 80 % at 16 MiB. It moves while the feed is read and never
/// reaches the end before the feed does; a guess at a size would stall or overshoot.
const UNKNOWN_LENGTH_HALF: f64 = 4.0 * 1024.0 * 1024.0;
/// How long connecting to an http(s) source may take before it counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest silence between two pieces of an http(s) feed.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// What an http(s) feed must send in each `SYNC_SLOW_FEED_SECONDS` of waiting for it: 1 KiB a
/// minute by default, far below any real feed (a row is ~200 bytes), far above a trickle
/// that would hold a worker for ever while never tripping `READ_TIMEOUT`.
const SLOW_FEED_BYTES: u64 = 1024;

/// A sync's parameters, as the POST checked them: its feeds, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SyncParams {
    pub sources: Vec<String>,
}

/// A sync request's fields as the client spells them: one `source` per feed. Kept apart from
/// `SyncParams`, whose record spells them `sources`, so stored jobs keep reading.
#[derive(Debug, Deserialize)]
pub struct SyncFields {
    #[serde(default)]
    pub source: Vec<String>,
}

/// Reads the `source` fields and checks them (see [`checked`]).
pub fn prepare(fields: &Fields, settings: &CatalogSettings) -> Result<SyncParams, ParamError> {
    checked(from_fields(fields)?, settings)
}

/// Checks a request's sources: at least one, each resolving to an allowed place that exists.
pub fn checked(
    SyncFields { source }: SyncFields,
    settings: &CatalogSettings,
) -> Result<SyncParams, ParamError> {
    if source.is_empty() {
        return Err(ParamError::missing(
            "source",
            "sync needs at least one source: a feed path inside FEEDS_DIR (e.g. demo.jsonl) or an http(s) URL",
        ));
    }
    if source.len() > MAX_SOURCES {
        return Err(ParamError::invalid(
            "source",
            format!("at most {MAX_SOURCES} sources per sync"),
        ));
    }
    let sources = source
        .iter()
        .map(|s| s.trim().to_owned())
        .collect::<Vec<_>>();
    for s in &sources {
        resolve(s, settings)?;
    }
    Ok(SyncParams { sources })
}

/// Why one source could not be read to its end. Each variant is a class in the report.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("the source is no longer allowed: {0}")]
    NotAllowed(String),
    #[error("the source does not exist: {0}")]
    NotFound(String),
    #[error("the source answered HTTP {0}: there is no such feed")]
    HttpNotFound(u16),
    #[error("the source could not be reached: {0}")]
    Unreachable(String),
    #[error("the source answered HTTP {0}")]
    Refused(u16),
    #[error("the source failed with HTTP {0}")]
    ServerError(u16),
    #[error("the feed stopped part-way: {0}")]
    Truncated(String),
    #[error("the feed is larger than MAX_FEED_BYTES")]
    TooLarge,
    #[error("the feed is too slow: {0}")]
    TooSlow(String),
    #[error("the feed came in a content coding this service does not decode: {0}")]
    UnsupportedEncoding(String),
    #[error("the feed is malformed: {0}")]
    Malformed(String),
}

impl SourceError {
    pub fn class(&self) -> &'static str {
        match self {
            SourceError::NotAllowed(_) => "SourceNotAllowed",
            SourceError::NotFound(_) | SourceError::HttpNotFound(_) => "SourceNotFound",
            SourceError::Unreachable(_) => "SourceUnreachable",
            SourceError::Refused(_) => "SourceRefused",
            SourceError::ServerError(_) => "SourceServerError",
            SourceError::Truncated(_) => "FeedTruncated",
            SourceError::TooLarge => "FeedTooLarge",
            SourceError::TooSlow(_) => "FeedTooSlow",
            SourceError::UnsupportedEncoding(_) => "UnsupportedEncoding",
            SourceError::Malformed(_) => "MalformedFeed",
        }
    }

    fn http_status(&self) -> Option<u16> {
        match self {
            SourceError::Refused(s)
            | SourceError::ServerError(s)
            | SourceError::HttpNotFound(s) => Some(*s),
            _ => None,
        }
    }

    /// An HTTP answer that is not a success, by what the client can do about it.
    fn from_status(status: reqwest::StatusCode) -> Self {
        match status.as_u16() {
            s @ (404 | 410) => SourceError::HttpNotFound(s),
            s if status.is_server_error() => SourceError::ServerError(s),
            s => SourceError::Refused(s),
        }
    }

    /// A source that passed `prepare` but no longer resolves (deleted, or its link changed).
    fn from_param(e: ParamError) -> Self {
        match e.code {
            "source_not_found" => SourceError::NotFound(e.message),
            "source_not_allowed" => SourceError::NotAllowed(e.message),
            _ => SourceError::Unreachable(e.message),
        }
    }

    /// Why the feed stopped, from the reader's side: the size cap, a broken body, or a file
    /// that could not be read further.
    fn from_feed(e: FeedError) -> Self {
        match e {
            FeedError::Malformed(m) => SourceError::Malformed(m),
            // The reader's own verdict (the size cap, a source gone silent or too slow), else a
            // broken body.
            FeedError::Read(io) => {
                let text = io.to_string();
                match io.into_inner().map(|inner| inner.downcast::<Self>()) {
                    Some(Ok(verdict)) => *verdict,
                    _ => SourceError::Truncated(text),
                }
            }
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

/// The slow-feed rule: each `SLOW_FEED_BYTES` must come within `window` of time spent waiting
/// for the feed. Only the waiting counts — time spent saving rows is ours, not the feed's —
/// and each KiB received starts a new window, so a slow but steady feed is never cut.
struct Pace {
    window: Duration,
    waited: Duration,
    got: u64,
}

impl Pace {
    fn new(window: Duration) -> Self {
        Self {
            window,
            waited: Duration::ZERO,
            got: 0,
        }
    }

    /// How long the next read may wait.
    fn left(&self) -> Duration {
        self.window.saturating_sub(self.waited)
    }

    fn received(&mut self, bytes: usize, waited: Duration) {
        self.waited += waited;
        self.got += bytes as u64;
        if self.got >= SLOW_FEED_BYTES {
            *self = Self::new(self.window);
        }
    }

    fn too_slow(&self) -> SourceError {
        SourceError::TooSlow(format!(
            "it sent {} bytes in {:.1} s; a feed must send {SLOW_FEED_BYTES} bytes in every {:.1} s \
             waited for it (SYNC_SLOW_FEED_SECONDS)",
            self.got,
            self.window.as_secs_f64(),
            self.window.as_secs_f64(),
        ))
    }
}

/// An HTTP body read from a blocking thread, one chunk at a time (never buffered whole).
/// A read waiting on a stalled feed gives up as soon as the job is asked to stop.
struct HttpBody {
    handle: tokio::runtime::Handle,
    response: reqwest::Response,
    stop: CancellationToken,
    pace: Pace,
    /// The last chunk received, and how much of it was read.
    data: Vec<u8>,
    at: usize,
}

impl Read for HttpBody {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at >= self.data.len() {
            let stop = self.stop.clone();
            let (left, waiting) = (self.pace.left(), Instant::now());
            let chunk = self.handle.block_on(async {
                tokio::select! {
                    chunk = tokio::time::timeout(left, self.response.chunk()) => Some(chunk),
                    () = stop.cancelled() => None,
                }
            });
            let Some(chunk) = chunk else {
                return Err(io::Error::other("the job was asked to stop"));
            };
            let Ok(chunk) = chunk else {
                return Err(io::Error::other(self.pace.too_slow()));
            };
            match chunk {
                Ok(Some(bytes)) => {
                    self.pace.received(bytes.len(), waiting.elapsed());
                    self.data.clear();
                    self.data.extend_from_slice(&bytes);
                    self.at = 0;
                }
                Ok(None) => return Ok(0),
                Err(e) if e.is_timeout() => {
                    let silent = format!("it sent nothing for {} s", READ_TIMEOUT.as_secs());
                    return Err(io::Error::other(SourceError::Unreachable(silent)));
                }
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
struct Opened {
    reader: Box<dyn Read + Send>,
    size: Option<u64>,
    format: Format,
}

/// Opens a source for streaming.
fn open(
    source: &str,
    settings: &CatalogSettings,
    stop: &CancellationToken,
) -> Result<Opened, SourceError> {
    match resolve(source, settings).map_err(SourceError::from_param)? {
        Resolved::File(path) => {
            let file = File::open(&path).map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => SourceError::NotFound(e.to_string()),
                _ => SourceError::Unreachable(e.to_string()),
            })?;
            Ok(Opened {
                size: file.metadata().ok().map(|m| m.len()),
                reader: Box::new(file),
                format: Format::from_name(&path.to_string_lossy()),
            })
        }
        Resolved::Url(url) => open_url(url, settings.slow_feed, stop),
    }
}

fn open_url(
    url: reqwest::Url,
    slow_feed: Duration,
    stop: &CancellationToken,
) -> Result<Opened, SourceError> {
    let unreachable = |e: &dyn std::fmt::Display| SourceError::Unreachable(e.to_string());
    let handle = tokio::runtime::Handle::try_current()
        .map_err(|_| unreachable(&"URL feeds are fetched only inside the service"))?;
    let client = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
        // A redirect could lead to a host that is not allowed.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| unreachable(&e))?;
    let response = handle
        .block_on(async {
            tokio::select! {
                // No content coding is decoded here (reqwest is built without them).
                r = client.get(url.clone()).header(reqwest::header::ACCEPT_ENCODING, "identity").send() => Some(r),
                () = stop.cancelled() => None,
            }
        })
        .ok_or_else(|| unreachable(&"the job was asked to stop"))?
        .map_err(|e| unreachable(&e))?;
    if !response.status().is_success() {
        return Err(SourceError::from_status(response.status()));
    }
    // A compressed body read as it came would be one "not UTF-8" row and a sync `done`.
    if let Some(coding) = response.headers().get(reqwest::header::CONTENT_ENCODING) {
        let coding = String::from_utf8_lossy(coding.as_bytes()).trim().to_owned();
        if !coding.eq_ignore_ascii_case("identity") {
            return Err(SourceError::UnsupportedEncoding(coding));
        }
    }
    let csv_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.contains("csv"));
    let format = if csv_type {
        Format::Csv
    } else {
        Format::from_name(url.path())
    };
    Ok(Opened {
        size: response.content_length(),
        reader: Box::new(HttpBody {
            handle,
            response,
            stop: stop.clone(),
            pace: Pace::new(slow_feed),
            data: Vec::new(),
            at: 0,
        }),
        format,
    })
}

impl CatalogRun for SyncParams {
    /// Every source in turn, upserting in batches, reporting per source.
    fn run_in(&self, cx: &RunContext<'_>, progress: Progress<'_>) -> Result<Value, CatalogError> {
        let (catalog, tenant, fence, stop) = (cx.catalog, cx.tenant, cx.fence, cx.stop);
        let sources = &self.sources;
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
            let outcome = sync_source(
                catalog,
                (tenant, fence),
                source,
                stop,
                &mut report.rows,
                &|frac, rows_read| {
                    let p = ((i as f64 + frac.clamp(0.0, 1.0)) * 100.0 / n as f64) as u8;
                    match rows_read {
                        Some(rows) => progress.report(p, &format!("{step}: {rows} rows read")),
                        None => progress.report(p, &step),
                    }
                },
            );
            // A stop (between rows, or during a stalled read, which then fails the source) is
            // reported with what was saved before it.
            if stop.is_cancelled() || matches!(outcome, Err(CatalogError::Cancelled)) {
                report.status = "cancelled";
                report.error = None;
                reports.push(report);
                return Err(CatalogError::CancelledWith(summary(&reports)));
            }
            let outcome = match outcome {
                Ok(outcome) => outcome,
                // The job ends here (the store stayed down, a corrupt record): its report
                // keeps the sources it got to, this one failed with the job's class.
                Err(e) => {
                    report.status = "failed";
                    report.error = Some(e.class());
                    reports.push(report);
                    return Err(e.with_report(summary(&reports)));
                }
            };
            match outcome {
                Ok(()) => report.status = "ok",
                Err(e) => {
                    tracing::warn!(source = %source, error_class = e.class(), error = %e, "a sync source failed");
                    report.status = "failed";
                    report.error = Some(e.class());
                    report.http_status = e.http_status();
                }
            }
            reports.push(report);
        }
        let summary = summary(&reports);
        if let Some(class) = all_failed(&reports) {
            return Err(CatalogError::SyncFailed {
                class,
                report: summary,
            });
        }
        progress.report(
            100,
            &format!("synced {n} source{}", if n == 1 { "" } else { "s" }),
        );
        Ok(summary)
    }
}

/// The job's report: each source's, the totals and how many sources failed.
fn summary(reports: &[SourceReport]) -> Value {
    to_result(&SyncReport {
        sources: reports.to_vec(),
        totals: RowCounts::of(reports),
        sources_failed: reports.iter().filter(|r| r.status == "failed").count(),
    })
}

/// When every source failed: their common class, or `SourcesFailed` when they differ.
fn all_failed(reports: &[SourceReport]) -> Option<&'static str> {
    let mut classes = reports.iter().map(|r| r.error);
    let first = classes.next()??;
    Some(if classes.all(|c| c == Some(first)) {
        first
    } else if reports.iter().all(|r| r.error.is_some()) {
        "SourcesFailed"
    } else {
        return None;
    })
}

/// Streams one source into the catalogue of `tenant`, each batch passing `fence`. The outer
/// error ends the job (the store stayed down, a cancel, or a refused batch); the inner one
/// fails only this source. After each batch, `on_progress` gets the share of the source read
/// and, when its length is unknown, the rows read so far (the step says them instead).
fn sync_source(
    catalog: &Catalog,
    (tenant, fence): (&TenantId, &dyn Fence),
    source: &str,
    stop: &CancellationToken,
    rows: &mut RowReport,
    on_progress: &dyn Fn(f64, Option<u64>),
) -> Result<Result<(), SourceError>, CatalogError> {
    let opened = match open(source, &catalog.settings, stop) {
        // A size declared past the limit (a file's, an HTTP Content-Length) is refused before
        // a row is read, as an import's is: nothing of a feed too large to take is saved.
        Ok(opened) if opened.size > Some(catalog.settings.max_feed_bytes) => {
            return Ok(Err(SourceError::TooLarge))
        }
        Ok(opened) => opened,
        Err(e) => return Ok(Err(e)),
    };
    let bytes = Arc::new(AtomicU64::new(0));
    let counting = Counting {
        inner: opened.reader,
        read: bytes.clone(),
        limit: catalog.settings.max_feed_bytes,
    };
    let window = catalog.settings.write_retry;
    // Rows read so far: `before_row` runs once for each, the batch's last included.
    let rows_read = std::cell::Cell::new(0u64);
    let between_rows = || {
        rows_read.set(rows_read.get() + 1);
        check(stop)
    };
    let outcome = feed::load(
        counting,
        opened.format,
        BATCH,
        rows,
        between_rows,
        |batch| {
            // Named once, outside the retries: a batch sent again after its answer was lost
            // counts what it first wrote as it counted it then, not `unchanged`.
            let name = uuid::Uuid::new_v4().simple().to_string();
            let upsert = || catalog.store.upsert_batch(tenant, batch, fence, &name);
            let counts = retrying(window, stop, upsert)?.or_else(|| CatalogError::Fenced)?;
            let read = bytes.load(Ordering::Relaxed) as f64;
            match opened.size {
                Some(size) => on_progress((read / size.max(1) as f64).min(READ_BUT_NOT_DONE), None),
                None => {
                    let share = read / (read + UNKNOWN_LENGTH_HALF);
                    on_progress(share.min(READ_BUT_NOT_DONE), Some(rows_read.get()));
                }
            }
            Ok::<_, CatalogError>(counts)
        },
    )?;
    check(stop)?;
    match outcome {
        Ok(()) => {
            on_progress(1.0, None);
            Ok(Ok(()))
        }
        // A failed source does not count as read to its end in the progress.
        Err(e) => Ok(Err(SourceError::from_feed(e))),
    }
}
