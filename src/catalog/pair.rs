//! pair: each product's nearest neighbours by TF-IDF cosine over its *identity* — the name
//! without the variant attributes enrichment found (colour, size, quantities, pack count),
//! plus brand — so that the variants of one product are each other's nearest neighbours.
//!
//! Sub-quadratic: candidates come from an inverted index over informative tokens (document
//! frequency capped), and are kept only within the same top-level category and a comparable
//! price band; their exact cosine is then computed from sparse vectors. Scoring runs on every
//! core. The neighbour table is replaced as a whole at the end, so it is safe to run again
//! (a recovered job's next attempt does) and a stop on request leaves the old table whole.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::LazyLock;

use serde_json::{json, Value};

use super::extract::identity_tokens;
use super::products::{Neighbour, ProductKey, Stored};
use super::{check, retrying, Catalog, CatalogError, Monotonic};
use crate::jobs::registry::Progress;
use crate::jobs::TenantId;
use tokio_util::sync::CancellationToken;

/// From how many products scoring is spread over threads.
const PARALLEL_FROM: usize = 4096;

/// The cores to score on. Asked once: `available_parallelism` reads cgroup files each call.
static CORES: LazyLock<usize> = LazyLock::new(|| {
    std::thread::available_parallelism()
        .map(|p| p.get())
        .unwrap_or(1)
        .clamp(1, 8)
});

/// Two prices are comparable when the larger is at most this many times the smaller.
const PRICE_BAND: f64 = 3.0;

/// A product as pairing sees it.
struct Doc {
    /// (token id, weight), sorted by token id, L2-normalised.
    terms: Vec<(u32, f32)>,
    category: Option<String>,
    price: Option<i64>,
    material: Option<String>,
}

fn raw_tokens(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() > 1)
        .map(str::to_lowercase)
        .collect()
}

fn comparable(a: &Doc, b: &Doc) -> bool {
    if let (Some(x), Some(y)) = (&a.category, &b.category) {
        if x != y {
            return false;
        }
    }
    if let (Some(x), Some(y)) = (a.price, b.price) {
        if x > 0 && y > 0 {
            let (lo, hi) = (x.min(y) as f64, x.max(y) as f64);
            return hi / lo <= PRICE_BAND;
        }
    }
    true
}

fn dot(a: &[(u32, f32)], b: &[(u32, f32)]) -> f32 {
    let (mut i, mut j, mut sum) = (0, 0, 0.0);
    while i < a.len() && j < b.len() {
        match a[i].0.cmp(&b[j].0) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                sum += a[i].1 * b[j].1;
                i += 1;
                j += 1;
            }
        }
    }
    sum
}

pub fn run(
    catalog: &Catalog,
    tenant: &TenantId,
    stop: &CancellationToken,
    progress: Progress<'_>,
) -> Result<Value, CatalogError> {
    let progress = Monotonic::new(progress);
    let window = catalog.settings.write_retry;
    progress.report(0, "loading products");
    let products = retrying(window, || catalog.store.all(tenant))?;
    progress.report(3, "loading extracted attributes");
    // An empty catalogue pairs to an empty table whatever was extracted: one round trip fewer.
    let enriched = if products.is_empty() {
        HashMap::new()
    } else {
        retrying(window, || catalog.store.enrichments(tenant))?
    };
    progress.report(5, "loaded products");

    check(stop)?;
    let table = neighbours(
        &products,
        &enriched,
        catalog.settings.pair_top_k,
        catalog.settings.pair_min_score,
        stop,
        &progress,
    )?;
    // The old table stays whole until the swap below; a cancelled run leaves it untouched.
    check(stop)?;

    let paired = table.iter().filter(|(_, n)| !n.is_empty()).count();
    let pairs: usize = table.iter().map(|(_, n)| n.len()).sum();
    progress.report(
        90,
        &format!("writing the neighbour table ({paired} products)"),
    );
    let rows: Vec<(ProductKey, Vec<Neighbour>)> =
        table.into_iter().filter(|(_, n)| !n.is_empty()).collect();
    retrying(window, || catalog.store.replace_neighbours(tenant, &rows))?;
    progress.report(
        100,
        &format!("paired {paired} of {} products", products.len()),
    );
    Ok(json!({ "products": products.len(), "paired": paired, "pairs": pairs }))
}

/// The neighbour table for a set of products: the embedding (5 → 45 %) and scoring
/// (45 → 90 %) phases. Public for the benchmark and the quality test.
pub fn neighbours(
    products: &[Stored],
    enriched: &HashMap<ProductKey, super::products::Enrichment>,
    top_k: usize,
    min_score: f64,
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
) -> Result<Vec<(ProductKey, Vec<Neighbour>)>, CatalogError> {
    let n = products.len();
    let every = (n / 40).max(500);

    // Embedding: identity tokens → ids → TF-IDF vectors.
    let mut vocab: HashMap<String, u32> = HashMap::new();
    let mut raw_docs: Vec<Vec<(u32, f32)>> = Vec::with_capacity(n);
    let mut df: Vec<u32> = Vec::new();
    for (i, stored) in products.iter().enumerate() {
        if i % every == 0 {
            check(stop)?;
            progress.interpolate(
                5,
                35,
                i,
                n,
                &format!("embedding product names ({i} of {n})"),
            );
        }
        let p = &stored.product;
        let key = &p.product_key;
        // Variants are taken out only where enrichment ran; others pair on their raw name.
        let mut tokens = if enriched.contains_key(key) {
            identity_tokens(&p.name)
        } else {
            raw_tokens(&p.name)
        };
        if let Some(brand) = &p.brand {
            tokens.extend(raw_tokens(brand));
        }
        let mut counts: HashMap<u32, f32> = HashMap::new();
        for t in tokens {
            let next = vocab.len() as u32;
            let id = *vocab.entry(t).or_insert(next);
            if id as usize == df.len() {
                df.push(0);
            }
            *counts.entry(id).or_insert(0.0) += 1.0;
        }
        let mut terms: Vec<(u32, f32)> = counts.into_iter().collect();
        terms.sort_unstable_by_key(|t| t.0);
        for (id, _) in &terms {
            df[*id as usize] += 1;
        }
        raw_docs.push(terms);
    }
    progress.report(35, "weighting terms");
    let idf: Vec<f32> = df
        .iter()
        .map(|d| ((n as f32 + 1.0) / (*d as f32 + 1.0)).ln() + 1.0)
        .collect();
    let docs: Vec<Doc> = raw_docs
        .into_iter()
        .zip(products)
        .map(|(mut terms, stored)| {
            for (id, w) in &mut terms {
                *w = (1.0 + w.ln()) * idf[*id as usize];
            }
            let norm = terms.iter().map(|(_, w)| w * w).sum::<f32>().sqrt();
            if norm > 0.0 {
                for (_, w) in &mut terms {
                    *w /= norm;
                }
            }
            let p = &stored.product;
            Doc {
                terms,
                category: p.top_category().map(str::to_lowercase),
                price: p.price_cents,
                material: enriched
                    .get(&p.product_key)
                    .and_then(|e| e.attributes.get("material"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            }
        })
        .collect();

    // The inverted index, over informative tokens only: a token in more than `max_df`
    // products says little about identity and would make candidate generation quadratic.
    let max_df = (n / 50).clamp(64, 1000) as u32;
    let mut postings: Vec<Vec<(u32, f32)>> = vec![Vec::new(); df.len()];
    for (i, doc) in docs.iter().enumerate() {
        for &(id, w) in &doc.terms {
            if df[id as usize] <= max_df {
                postings[id as usize].push((i as u32, w));
            }
        }
    }
    progress.report(45, "scoring candidates");

    // Scoring, split over the cores; each worker keeps its own accumulator. A small catalogue
    // is scored by one worker: more threads would cost more than the work.
    let workers = if n < PARALLEL_FROM { 1 } else { *CORES };
    let done = AtomicUsize::new(0);
    let chunk = n.div_ceil(workers).max(1);
    let mut results: Vec<Vec<Neighbour>> = Vec::with_capacity(n);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .step_by(chunk)
            .map(|start| {
                let (docs, postings, done, progress) = (&docs, &postings, &done, progress);
                scope.spawn(move || {
                    let end = (start + chunk).min(n);
                    let mut seen = vec![false; n];
                    let mut touched: Vec<u32> = Vec::new();
                    let mut out = Vec::with_capacity(end - start);
                    for i in start..end {
                        if i % 256 == 0 && stop.is_cancelled() {
                            break;
                        }
                        let doc = &docs[i];
                        for &(id, _) in &doc.terms {
                            for &(j, _) in &postings[id as usize] {
                                if j as usize != i && !seen[j as usize] {
                                    seen[j as usize] = true;
                                    touched.push(j);
                                }
                            }
                        }
                        let mut best: Vec<(f32, u8, usize)> = Vec::with_capacity(top_k + 1);
                        for &j in &touched {
                            seen[j as usize] = false;
                            let other = &docs[j as usize];
                            if !comparable(doc, other) {
                                continue;
                            }
                            let score = dot(&doc.terms, &other.terms);
                            if f64::from(score) < min_score {
                                continue;
                            }
                            let agree =
                                u8::from(doc.material.is_some() && doc.material == other.material);
                            best.push((score, agree, j as usize));
                        }
                        touched.clear();
                        best.sort_unstable_by(|a, b| {
                            b.0.partial_cmp(&a.0)
                                .unwrap_or(std::cmp::Ordering::Equal)
                                .then(b.1.cmp(&a.1))
                                .then_with(|| {
                                    products[a.2]
                                        .product
                                        .product_key
                                        .cmp(&products[b.2].product.product_key)
                                })
                        });
                        best.truncate(top_k);
                        out.push(
                            best.into_iter()
                                .map(|(score, _, j)| Neighbour {
                                    product_key: products[j].product.product_key.clone(),
                                    name: products[j].product.name.clone(),
                                    score: (f64::from(score) * 10_000.0).round() / 10_000.0,
                                })
                                .collect(),
                        );
                        let so_far = done.fetch_add(1, Ordering::Relaxed) + 1;
                        if so_far % every == 0 {
                            progress.interpolate(
                                45,
                                90,
                                so_far,
                                n,
                                &format!("scoring neighbours ({so_far} of {n})"),
                            );
                        }
                    }
                    out
                })
            })
            .collect();
        for h in handles {
            results.extend(
                h.join()
                    .expect("a scoring worker does not panic: it only indexes its own inputs"),
            );
        }
    });
    check(stop)?;
    progress.report(90, "scored all products");
    Ok(products
        .iter()
        .map(|p| p.product.product_key.clone())
        .zip(results)
        .collect())
}
