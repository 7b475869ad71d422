//! The catalogue domain: the job kinds this service exists to run — sync, enrich, pair —
//! as plain blocking functions with an optional progress callback, over a per-tenant
//! catalogue store. Knows nothing of HTTP or of job keys.
//!
//! Every job function does the same work with or without a callback. Its data writes pass
//! its run's fence (`jobs::fence`): a refused write stops the job at once, its end not
//! recorded. Its store calls are retried while the store is unreachable (for `write_retry`),
//! so a Redis outage pauses a job instead of throwing its work away.

pub mod currency;
pub mod demo;
pub mod enrich;
pub mod extract;
pub mod feed;
pub mod pair;
pub mod products;
pub mod report;
pub mod rows;
pub mod search;
pub mod source;
pub mod sync;
pub mod tokens;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::jobs::fence::{Fence, Unfenced};
use crate::jobs::registry::{ErrorClass, JobError, JobInput, Progress, QuickAnswer, Registry};
use crate::jobs::TenantId;
use futures_util::future::BoxFuture;
use products::{CatalogStore, CatalogStoreError};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// What the catalogue jobs need besides their parameters.
#[derive(Clone, Debug)]
pub struct CatalogSettings {
    pub feeds_dir: PathBuf,
    /// Where sync may fetch http(s) feeds from (`SYNC_ALLOWED_HOSTS`).
    pub allowed_hosts: Vec<source::AllowedHost>,
    /// Largest feed read, in bytes.
    pub max_feed_bytes: u64,
    /// The waiting in which an http(s) feed must send each KiB (`SYNC_SLOW_FEED_SECONDS`).
    pub slow_feed: Duration,
    pub enrich_batch: usize,
    pub pair_top_k: usize,
    pub pair_min_score: f64,
    /// The most memory one pair may take, in MiB (`PAIR_MAX_MEMORY_MB`).
    pub pair_max_memory_mb: u64,
    /// The share of the catalogue the last full pair counted that may change (added,
    /// changed, removed) before a pair is a full one again.
    pub pair_full_after_share: f64,
    /// How long a job's data write is retried while the store is unreachable.
    pub write_retry: Duration,
    /// The currency of every `price_cents` (`PRICE_CURRENCY`), when one is set.
    pub currency: Option<String>,
}

impl Default for CatalogSettings {
    fn default() -> Self {
        Self {
            feeds_dir: PathBuf::from("examples/feeds"),
            allowed_hosts: Vec::new(),
            max_feed_bytes: 1 << 30,
            slow_feed: Duration::from_secs(60),
            enrich_batch: 500,
            pair_top_k: 5,
            pair_min_score: 0.2,
            pair_max_memory_mb: DEFAULT_PAIR_MAX_MEMORY_MB,
            pair_full_after_share: 0.2,
            write_retry: Duration::from_secs(300),
            currency: None,
        }
    }
}

/// `PAIR_MAX_MEMORY_MB`'s default: a pair of a million hard products is estimated at about
/// 650 MiB of its own heap (`pair::budget`; docs/performance.md has the measured figures).
pub const DEFAULT_PAIR_MAX_MEMORY_MB: u64 = 1024;

/// The catalogue: its store and settings, shared by the job functions and the API.
pub struct Catalog {
    pub store: Arc<dyn CatalogStore>,
    pub settings: CatalogSettings,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("the catalogue store stayed unreachable past the retry window: {0}")]
    StoreUnavailable(String),
    #[error("the catalogue store holds a malformed record: {0}")]
    CorruptRecord(String),
    /// Every source of a sync failed; `class` is theirs (or `SourcesFailed` when they differ)
    /// and `report` the per-source report with the rows read and saved before each failed.
    #[error("no source could be read to its end ({class})")]
    SyncFailed {
        class: &'static str,
        report: serde_json::Value,
    },
    #[error("the job was asked to stop")]
    Cancelled,
    /// Pairing this catalogue would take more memory than `PAIR_MAX_MEMORY_MB` allows.
    #[error("pairing this catalogue needs about {needed_mb} MiB, more than PAIR_MAX_MEMORY_MB ({limit_mb})")]
    PairTooLarge { needed_mb: u64, limit_mb: u64 },
    /// The store refused a write of the run: another run or job holds the job, or its
    /// tenant was deleted.
    #[error("the store refused this run's write: another run or job holds the job, or its tenant was deleted")]
    Fenced,
    /// Stopped on request, with the report of what it had saved so far.
    #[error("the job was asked to stop")]
    CancelledWith(serde_json::Value),
    /// Failed with `cause` (whose class it keeps), with the report of what the job had done
    /// by then: counts and phases only, never a message.
    #[error("{cause}")]
    FailedWith {
        cause: Box<CatalogError>,
        report: serde_json::Value,
    },
}

impl CatalogError {
    /// This error with the partial `report` of a job: a stop on request keeps it as the
    /// cancelled job's report, a failure as the failed job's (a sync failure keeps its own).
    pub fn with_report(self, report: serde_json::Value) -> Self {
        match self {
            CatalogError::Cancelled => CatalogError::CancelledWith(report),
            e @ (CatalogError::StoreUnavailable(_)
            | CatalogError::CorruptRecord(_)
            | CatalogError::PairTooLarge { .. }) => CatalogError::FailedWith {
                cause: Box::new(e),
                report,
            },
            e => e,
        }
    }
}

impl ErrorClass for CatalogError {
    fn class(&self) -> &'static str {
        match self {
            CatalogError::StoreUnavailable(_) => "StoreUnavailable",
            CatalogError::CorruptRecord(_) => "CorruptRecord",
            CatalogError::PairTooLarge { .. } => "PairTooLarge",
            CatalogError::SyncFailed { class, .. } => class,
            CatalogError::FailedWith { cause, .. } => cause.class(),
            CatalogError::Cancelled | CatalogError::CancelledWith(_) => {
                crate::jobs::registry::CANCELLED
            }
            CatalogError::Fenced => crate::jobs::registry::FENCED,
        }
    }

    fn partial_report(&self) -> Option<serde_json::Value> {
        match self {
            CatalogError::SyncFailed { report, .. } | CatalogError::FailedWith { report, .. } => {
                Some(report.clone())
            }
            _ => None,
        }
    }
}

impl From<CatalogStoreError> for CatalogError {
    fn from(e: CatalogStoreError) -> Self {
        match e {
            CatalogStoreError::Unavailable(m) => CatalogError::StoreUnavailable(m),
            CatalogStoreError::Corrupt(m) => CatalogError::CorruptRecord(m),
            CatalogStoreError::BadCursor => CatalogError::CorruptRecord("a cursor".into()),
            e @ CatalogStoreError::RecordMissing => CatalogError::StoreUnavailable(e.to_string()),
            CatalogStoreError::Stopped => CatalogError::Cancelled,
        }
    }
}

/// Stops a job at a safe point once it was asked to (between rows, batches or phases).
pub fn check(stop: &CancellationToken) -> Result<(), CatalogError> {
    if stop.is_cancelled() {
        Err(CatalogError::Cancelled)
    } else {
        Ok(())
    }
}

/// Runs a store call, retrying with backoff while the store is unreachable (or a write
/// waits for its run's lost record to be written back), for `window`, and no longer once
/// the job is asked to stop (`stop`: a cancel, or its run fenced off). A malformed record is
/// not retried.
pub fn retrying<T>(
    window: Duration,
    stop: &CancellationToken,
    mut op: impl FnMut() -> Result<T, CatalogStoreError>,
) -> Result<T, CatalogError> {
    let started = Instant::now();
    let mut delay = Duration::from_millis(50);
    let mut warned = false;
    loop {
        let e = match op() {
            Ok(v) => return Ok(v),
            Err(e @ (CatalogStoreError::Unavailable(_) | CatalogStoreError::RecordMissing))
                if started.elapsed() < window =>
            {
                e
            }
            Err(e) => return Err(e.into()),
        };
        if !warned {
            tracing::warn!(error = %e, "a catalogue call must wait; the job retries it");
            warned = true;
        }
        std::thread::sleep(delay);
        check(stop)?;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

/// Reports progress monotonically even when several threads report at once, and never
/// calls the job's callback twice at the same time.
pub struct Monotonic<'a> {
    progress: Progress<'a>,
    last: Mutex<Option<u8>>,
}

impl<'a> Monotonic<'a> {
    pub fn new(progress: Progress<'a>) -> Self {
        Self {
            progress,
            last: Mutex::new(None),
        }
    }

    pub fn report(&self, percent: u8, step: &str) {
        let Some(cb) = self.progress else {
            return;
        };
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let percent = percent.min(100).max(last.unwrap_or(0));
        *last = Some(percent);
        cb(percent, step);
    }

    /// The last percent reported (0 before any).
    pub fn last(&self) -> u8 {
        self.last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .unwrap_or(0)
    }

    /// `from + (to - from) · done / total`, for progress inside a phase.
    pub fn interpolate(&self, from: u8, to: u8, done: usize, total: usize, step: &str) {
        let span = f64::from(to.saturating_sub(from));
        let frac = if total == 0 {
            1.0
        } else {
            done as f64 / total as f64
        };
        self.report(from + (span * frac.clamp(0.0, 1.0)) as u8, step);
    }
}

/// A catalogue error as the runner records it: a stop on request keeps its partial report.
fn job_error(e: CatalogError) -> JobError {
    match e {
        CatalogError::CancelledWith(report) => JobError::cancelled_with(report),
        other => JobError::from(other),
    }
}

/// Where a catalogue job runs: its catalogue and tenant, the fence every data write of the
/// run passes, and the token that asks it to stop.
#[derive(Clone, Copy)]
pub struct RunContext<'a> {
    pub catalog: &'a Catalog,
    pub tenant: &'a TenantId,
    /// A refused write ends the run with `CatalogError::Fenced`, its end not recorded.
    pub fence: &'a dyn Fence,
    pub stop: &'a CancellationToken,
}

/// A catalogue job kind's parameters, which run that kind.
pub trait CatalogRun: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// Runs the job, reporting `(percent, step)` through `progress`.
    fn run_in(
        &self,
        cx: &RunContext<'_>,
        progress: Progress<'_>,
    ) -> Result<serde_json::Value, CatalogError>;
}

/// Runs a catalogue job outside any job (tests, benchmarks): its writes are unfenced.
pub fn run_unfenced<P: CatalogRun>(
    catalog: &Catalog,
    tenant: &TenantId,
    params: &P,
    stop: &CancellationToken,
    progress: Progress<'_>,
) -> Result<serde_json::Value, CatalogError> {
    let cx = RunContext {
        catalog,
        tenant,
        fence: &Unfenced,
        stop,
    };
    params.run_in(&cx, progress)
}

/// A kind's run as the registry calls it: on `catalog`, fenced by the job, a stop on request
/// keeping its partial report.
fn job_run<P: CatalogRun>(
    catalog: Arc<Catalog>,
) -> impl Fn(&JobInput, &P, Progress<'_>) -> Result<serde_json::Value, JobError> + Send + Sync + 'static
{
    move |input, params, progress| {
        let cx = RunContext {
            catalog: &catalog,
            tenant: &input.tenant,
            fence: &*input.fence,
            stop: &input.cancel,
        };
        params.run_in(&cx, progress).map_err(job_error)
    }
}

/// Reads of a catalogue made on the runtime, blocking no thread (the Redis catalogue's, on
/// its multiplexed connection).
pub trait RuntimeReads: Send + Sync + 'static {
    /// Whether the tenant holds no product.
    fn holds_no_products<'a>(
        &'a self,
        tenant: &'a TenantId,
    ) -> BoxFuture<'a, Result<bool, CatalogStoreError>>;

    /// The key that exists exactly while the tenant holds a product (the one
    /// `holds_no_products` reads), in the tenant's slot group: what a create probes.
    fn products_key(&self, tenant: &TenantId) -> String;
}

impl RuntimeReads for products::RedisCatalog {
    fn holds_no_products<'a>(
        &'a self,
        tenant: &'a TenantId,
    ) -> BoxFuture<'a, Result<bool, CatalogStoreError>> {
        Box::pin(products::RedisCatalog::holds_no_products(self, tenant))
    }

    fn products_key(&self, tenant: &TenantId) -> String {
        products::RedisCatalog::products_key(self, tenant)
    }
}

/// An enrich of a tenant that holds no product, answered on the runtime (`Registry::with_quick`):
/// it would read that, then nothing more. A job its create claimed read it there (its probe,
/// `registry_reading`), at its start, as the function would have read it then. Any doubt (a
/// failed read, parameters not enrich's) leaves the job to its function.
fn enrich_quick(
    catalog: Arc<Catalog>,
    reads: Arc<dyn RuntimeReads>,
) -> impl for<'a> Fn(&'a JobInput, Progress<'a>) -> BoxFuture<'a, QuickAnswer> + Send + Sync + 'static
{
    move |input, progress| {
        let (catalog, reads) = (catalog.clone(), reads.clone());
        Box::pin(async move {
            if !input.probed_absent && !reads.holds_no_products(&input.tenant).await.ok()? {
                return None;
            }
            let params = enrich::EnrichParams::deserialize(&input.params).ok()?;
            let cx = RunContext {
                catalog: &catalog,
                tenant: &input.tenant,
                fence: &*input.fence,
                stop: &input.cancel,
            };
            Some(params.run_empty(&cx, progress).map_err(job_error))
        })
    }
}

/// The catalogue job kinds, wired to a catalogue.
pub fn registry(catalog: Arc<Catalog>) -> Registry {
    registry_reading(catalog, None)
}

/// The catalogue job kinds, wired to a catalogue and, when it has them, its reads on the
/// runtime: an enrich of a tenant with no product is then answered without a blocking thread.
pub fn registry_reading(catalog: Arc<Catalog>, reads: Option<Arc<dyn RuntimeReads>>) -> Registry {
    let settings = catalog.clone();
    let registry = Registry::new()
        .with_typed(
            "sync",
            move |fields| sync::checked(fields, &settings.settings),
            job_run::<sync::SyncParams>(catalog.clone()),
        )
        .with_params("enrich", job_run::<enrich::EnrichParams>(catalog.clone()))
        .with_params("pair", job_run::<pair::PairParams>(catalog.clone()))
        // Each writes what the next reads: a tenant's run one at a time, in creation order.
        // The weights are the steps' shares of a pipeline's percent (see docs/api.md).
        .in_order(&PIPELINE_STEPS);
    match reads {
        Some(reads) => registry
            .with_quick("enrich", enrich_quick(catalog, reads.clone()))
            .with_probe("enrich", move |tenant| reads.products_key(tenant)),
        None => registry,
    }
}

/// The catalogue jobs in the order they feed each other, with their shares of a refresh
/// pipeline's percent.
pub const PIPELINE_STEPS: [(&str, u32); 3] = [("sync", 40), ("enrich", 30), ("pair", 30)];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::Kind;

    #[test]
    fn each_catalogue_kind_names_the_request_fields_it_takes() {
        let catalog = Arc::new(Catalog {
            store: Arc::new(products::MemoryCatalog::new()),
            settings: CatalogSettings::default(),
        });
        let kinds = registry(catalog);
        let fields = |kind: &str| {
            let kind = Kind::parse(kind).expect("a kind name");
            kinds.get(&kind).and_then(|k| k.fields)
        };
        assert_eq!(fields("sync"), Some(&["source"][..]));
        assert_eq!(fields("enrich"), Some(&["force"][..]));
        assert_eq!(fields("pair"), Some(&["full"][..]));
    }
}
