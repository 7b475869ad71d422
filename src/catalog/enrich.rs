//! enrich: extracts attributes from each product's text, in batches persisted as they go,
//! so a crash keeps the work done and a re-run resumes: a product whose content hash is
//! unchanged since its last enrichment is skipped unless `force`. So it is safe to run
//! again (a recovered job's next attempt resumes), and a stop on request, checked between
//! products, reports the batches it saved. It has no final state write to fence (unlike
//! pair's table swap, `jobs::fence`): a fenced-off run's last batch is one its successor
//! would write the same (extraction is a function of the product's content).

use serde_json::Value;

use super::extract::extract;
use super::products::Enrichment;
use super::report::{to_result, EnrichReport};
use super::{check, retrying, Catalog, CatalogError, Monotonic};
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

pub fn run(
    catalog: &Catalog,
    tenant: &TenantId,
    params: &EnrichParams,
    stop: &CancellationToken,
    progress: Progress<'_>,
) -> Result<Value, CatalogError> {
    let force = params.force;
    let progress = Monotonic::new(progress);
    progress.report(0, "loading products");
    let window = catalog.settings.write_retry;
    let products = retrying(window, || catalog.store.all(tenant))?;
    check(stop)?;
    // With nothing to enrich there is nothing to compare against: one round trip fewer.
    let done = if force || products.is_empty() {
        Default::default()
    } else {
        retrying(window, || catalog.store.enrichments(tenant))?
    };
    let todo: Vec<_> = products
        .iter()
        .filter(|p| {
            force
                || done
                    .get(&p.product.product_key)
                    .is_none_or(|e| e.content_hash != p.content_hash)
        })
        .collect();
    let skipped = products.len() - todo.len();
    let size = catalog.settings.enrich_batch.max(1);
    let batches = todo.len().div_ceil(size);
    let (mut extracted, mut unextractable) = (0u64, 0u64);
    // Batches already saved stay saved: a re-run resumes after them, and a stop on request
    // or a failure reports them.
    let partial = |saved: usize, extracted: u64, unextractable: u64| {
        to_result(&EnrichReport {
            products: products.len(),
            extracted,
            unextractable,
            skipped,
            batches: saved,
        })
    };
    let stopped = |saved: usize, extracted: u64, unextractable: u64| {
        check(stop).map_err(|e| e.with_report(partial(saved, extracted, unextractable)))
    };
    for (n, chunk) in todo.chunks(size).enumerate() {
        let step = format!("extracting attributes — batch {} of {batches}", n + 1);
        progress.interpolate(0, 100, n * size, todo.len(), &step);
        let mut batch = Vec::with_capacity(chunk.len());
        for p in chunk {
            stopped(n, extracted, unextractable)?;
            let attributes = extract(
                &p.product.name,
                p.product.description.as_deref(),
                &p.product.attributes,
            );
            let e = Enrichment {
                content_hash: p.content_hash.clone(),
                unextractable: attributes.is_empty(),
                attributes,
            };
            batch.push((p.product.product_key.clone(), e));
        }
        retrying(window, || catalog.store.save_enrichments(tenant, &batch))
            .map_err(|e| e.with_report(partial(n, extracted, unextractable)))?;
        for (_, e) in &batch {
            if e.unextractable {
                unextractable += 1;
            } else {
                extracted += 1;
            }
        }
        progress.interpolate(0, 100, n * size + chunk.len(), todo.len(), &step);
    }
    let last = if batches == 0 {
        "nothing to extract: every product is up to date".to_owned()
    } else {
        format!(
            "extracted attributes — {batches} batch{}",
            if batches == 1 { "" } else { "es" }
        )
    };
    progress.report(100, &last);
    Ok(partial(batches, extracted, unextractable))
}
