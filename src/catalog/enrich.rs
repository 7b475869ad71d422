//! enrich: extracts attributes from each product's text, in batches persisted as they go,
//! so a crash keeps the work done and a re-run resumes: a product whose content hash is
//! unchanged since its last enrichment is skipped unless `force`. So it is safe to run
//! again (a recovered job's next attempt resumes), and a stop on request, checked between
//! products, reports the batches it saved. Each batch's save passes the run's fence
//! (`jobs::fence`): a run that lost its job, or whose tenant was deleted, writes nothing more
//! and stops.

use std::sync::LazyLock;

use serde_json::Value;

use super::extract::extract;
use super::products::{Enrichment, Stored};
use super::report::{to_result, EnrichReport};
use super::{check, retrying, Catalog, CatalogError, CatalogRun, Monotonic, RunContext};
use crate::jobs::registry::Progress;
use crate::jobs::TenantId;
use tokio_util::sync::CancellationToken;

/// An enrich's parameters, as the POST checked them.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EnrichParams {
    /// Re-extract products whose content is unchanged since their last enrichment.
    #[serde(default)]
    pub force: bool,
}

/// The first step an enrich reports, before it reads the tenant's products.
const LOADING: &str = "loading products";

/// Products read a round trip at a time while an enrich loads the catalogue: between pages
/// it sees a stop on request, so a cancel during the load of a large catalogue is seen
/// within a page's read (a few milliseconds), not after the whole catalogue's.
const LOAD_PAGE: usize = 1000;

impl CatalogRun for EnrichParams {
    /// The tenant's products that changed since their last enrichment (all with `force`),
    /// a batch at a time.
    fn run_in(&self, cx: &RunContext<'_>, progress: Progress<'_>) -> Result<Value, CatalogError> {
        let progress = Monotonic::new(progress);
        progress.report(0, LOADING);
        let products = load(cx.catalog, cx.tenant, cx.stop)?;
        self.run_on(cx, &products, &progress)
    }
}

impl EnrichParams {
    /// The enrich of a tenant that holds no product, once that was read (by a read that did
    /// not block: `catalog::RuntimeReads`): it reads and writes nothing more, so it never
    /// blocks, and it reports and answers what `run_in` would.
    pub fn run_empty(
        &self,
        cx: &RunContext<'_>,
        progress: Progress<'_>,
    ) -> Result<Value, CatalogError> {
        let progress = Monotonic::new(progress);
        progress.report(0, LOADING);
        self.run_on(cx, &[], &progress)
    }

    /// The enrich once the tenant's `products` are read.
    fn run_on(
        &self,
        cx: &RunContext<'_>,
        products: &[Stored],
        progress: &Monotonic<'_>,
    ) -> Result<Value, CatalogError> {
        let (catalog, tenant, fence, stop) = (cx.catalog, cx.tenant, cx.fence, cx.stop);
        let window = catalog.settings.write_retry;
        check(stop)?;
        let todo = to_enrich(catalog, tenant, products, self.force, stop)?;
        let size = catalog.settings.enrich_batch.max(1);
        let batches = todo.len().div_ceil(size);
        // Batches already saved stay saved: a re-run resumes after them, and a stop on request
        // or a failure reports them (`report.batches` counts the saved ones).
        let mut report = EnrichReport {
            products: products.len(),
            extracted: 0,
            unextractable: 0,
            skipped: products.len() - todo.len(),
            batches: 0,
        };
        for (n, chunk) in todo.chunks(size).enumerate() {
            let step = format!("extracting attributes — batch {} of {batches}", n + 1);
            progress.interpolate(0, 100, n * size, todo.len(), &step);
            let mut batch = Vec::with_capacity(chunk.len());
            for p in chunk {
                check(stop).map_err(|e| e.with_report(to_result(&report)))?;
                batch.push((p.product.product_key.clone(), enrich(p)));
            }
            retrying(window, stop, || {
                catalog.store.save_enrichments(tenant, &batch, fence)
            })
            .and_then(|saved| saved.or_else(|| CatalogError::Fenced))
            .map_err(|e| e.with_report(to_result(&report)))?;
            report.batches += 1;
            for (_, e) in &batch {
                match e.unextractable {
                    true => report.unextractable += 1,
                    false => report.extracted += 1,
                }
            }
            progress.interpolate(0, 100, n * size + chunk.len(), todo.len(), &step);
        }
        progress.report(100, &last_step(batches));
        // A tenant with no product is the most common enrich of a burst (answered on the
        // runtime: `catalog::enrich_quick`), and its report is always the same.
        match products.is_empty() {
            true => Ok(NO_PRODUCT.clone()),
            false => Ok(to_result(&report)),
        }
    }
}

/// The report of an enrich of no product, made once: cloned, it is ~1.5k instructions fewer
/// than serialising it into a `Value` again (callgrind, a create burst).
static NO_PRODUCT: LazyLock<Value> = LazyLock::new(|| {
    to_result(&EnrichReport {
        products: 0,
        extracted: 0,
        unextractable: 0,
        skipped: 0,
        batches: 0,
    })
});

/// The tenant's products in key order, each once, read a page at a time ([`LOAD_PAGE`]) with
/// a stop check before each page. A product present throughout is read; one written or
/// removed meanwhile may or may not be, as with a run started a moment earlier or later.
fn load(
    catalog: &Catalog,
    tenant: &TenantId,
    stop: &CancellationToken,
) -> Result<Vec<Stored>, CatalogError> {
    let window = catalog.settings.write_retry;
    let (mut products, mut cursor) = (Vec::new(), None::<String>);
    loop {
        check(stop)?;
        let read = || catalog.store.page(tenant, LOAD_PAGE, cursor.as_deref());
        let (page, next) = retrying(window, stop, read)?;
        products.extend(page);
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    // Pages come in key order, each product at most once (the store's paging contract).
    Ok(products)
}

/// The products to enrich: all with `force`, else those whose content changed since their
/// last enrichment (or that have none).
fn to_enrich<'p>(
    catalog: &Catalog,
    tenant: &TenantId,
    products: &'p [Stored],
    force: bool,
    stop: &CancellationToken,
) -> Result<Vec<&'p Stored>, CatalogError> {
    // With nothing to enrich there is nothing to compare against: one round trip fewer.
    if force || products.is_empty() {
        return Ok(products.iter().collect());
    }
    let window = catalog.settings.write_retry;
    let done = retrying(window, stop, || catalog.store.enrichments(tenant))?;
    let changed = |p: &&Stored| {
        done.get(&p.product.product_key)
            .is_none_or(|e| e.content_hash != p.content_hash)
    };
    Ok(products.iter().filter(changed).collect())
}

/// What the text of one product yields, for the version of it that was read.
fn enrich(p: &Stored) -> Enrichment {
    let product = &p.product;
    let attributes = extract(
        &product.name,
        product.description.as_deref(),
        &product.attributes,
    );
    Enrichment {
        content_hash: p.content_hash.clone(),
        unextractable: attributes.is_empty(),
        attributes,
    }
}

fn last_step(batches: usize) -> String {
    match batches {
        0 => "nothing to extract: every product is up to date".to_owned(),
        1 => "extracted attributes — 1 batch".to_owned(),
        n => format!("extracted attributes — {n} batches"),
    }
}
