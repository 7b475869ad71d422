//! Pairing outside a job: products given directly (the quality tests against brute force,
//! the benchmark), and a full pair of a tenant's catalogue with weights given rather than
//! counted (what the tests hold an incremental pair to). The same embedding, index and
//! scoring as a full pair; nothing is written.

use std::collections::HashMap;

use tokio_util::sync::CancellationToken;

use super::budget::Limit;
use super::embed::Embedding;
use super::full::{indexing, pair_all, score_groups};
use super::index::Index;
use super::reading::{frozen_identity_of, traits_of, Names, Prepared, Reading};
use super::score::Ask;
use super::{Weights, EMBEDDED, INDEXED, LOADED, SCORED};
use crate::catalog::products::{
    rounded, Enrichment, Neighbour, Pairing, PairingInput, ProductKey, Stored, WeightParts,
};
use crate::catalog::rows::Rows;
use crate::catalog::{check, Catalog, CatalogError, Monotonic};
use crate::jobs::TenantId;

/// Inputs for products as the store holds them and what enrichment found.
pub fn inputs_of(
    products: &[Stored],
    enriched: &HashMap<ProductKey, Enrichment>,
) -> Vec<PairingInput> {
    products
        .iter()
        .map(|s| PairingInput::of(s, enriched.get(&s.product.product_key)))
        .collect()
}

/// Each product's rank in key order.
fn key_ranks(keys: &[ProductKey]) -> Vec<u32> {
    let mut by_key: Vec<u32> = (0..keys.len() as u32).collect();
    by_key.sort_unstable_by(|a, b| keys[*a as usize].cmp(&keys[*b as usize]));
    let mut rank = vec![0u32; keys.len()];
    for (r, i) in by_key.into_iter().enumerate() {
        rank[i as usize] = r as u32;
    }
    rank
}

/// Embeds products in their order, with weights counted on them; answers their keys too.
fn embed_keyed(
    inputs: Vec<PairingInput>,
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
) -> Result<(Vec<ProductKey>, Embedding), CatalogError> {
    check(stop)?;
    let n = inputs.len();
    let mut reading = Reading::new();
    reading.add(inputs, &vec![0; n]);
    progress.report(LOADED, "embedding product names");
    let mut prepared = reading.identities(stop)?;
    progress.report(EMBEDDED, "weighting words");
    let ranks = key_ranks(&prepared.keys);
    let e = prepared.embed(ranks, stop)?;
    Ok((prepared.keys, e))
}

/// Embeds products: identities (`catalog::tokens`), TF-IDF weights, norms, groups.
pub fn embed(
    inputs: Vec<PairingInput>,
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
) -> Result<Embedding, CatalogError> {
    embed_keyed(inputs, stop, progress).map(|(_, e)| e)
}

/// The neighbour table of `inputs`, in their order, as a full pair makes it.
pub fn neighbours(
    inputs: Vec<PairingInput>,
    ask: &Ask,
    stop: &CancellationToken,
    progress: &Monotonic<'_>,
) -> Result<Vec<(ProductKey, Vec<Neighbour>)>, CatalogError> {
    let (keys, e) = embed_keyed(inputs, stop, progress)?;
    check(stop)?;
    let index = Index::build(&e, stop, &|done, all| indexing(progress, done, all))?;
    progress.report(INDEXED, "scoring neighbours");
    let best = score_groups(
        &e,
        std::slice::from_ref(&index),
        &e.groups,
        ask,
        stop,
        progress,
    )?;
    progress.report(SCORED, "scored all products");
    Ok(keys
        .iter()
        .zip(best)
        .map(|(key, best)| {
            let row = best
                .into_iter()
                .take(ask.top_k)
                .map(|(j, s)| Neighbour {
                    product_key: keys[j as usize].clone(),
                    score: rounded(s),
                })
                .collect();
            (key.clone(), row)
        })
        .collect())
}

/// The state a full pair of the tenant's catalogue makes with `weights` instead of weights
/// counted on it: what an incremental pair with those weights must write, row for row.
pub fn full_with_weights(
    catalog: &Catalog,
    tenant: &TenantId,
    weights: &WeightParts,
    ask: &Ask,
) -> Result<Pairing, CatalogError> {
    let versions = catalog.store.versions(tenant)?;
    let keys: Vec<ProductKey> = versions.iter().map(|(k, _)| k.clone()).collect();
    let inputs = catalog.store.pairing_inputs(tenant, &keys)?;
    let mut weights = Weights::from_parts(weights.clone())
        .ok_or_else(|| CatalogError::CorruptRecord("weights".into()))?;
    let (mut categories, mut materials) = (Names::default(), Names::default());
    let mut prepared_keys = Vec::new();
    let mut prepared_versions = Vec::new();
    let mut traits = Vec::new();
    let mut identities = Rows::new();
    for ((key, version), input) in versions.into_iter().zip(inputs) {
        let Some(input) = input else { continue };
        identities.push(&frozen_identity_of(&input, &mut weights));
        traits.push(traits_of(&input, &mut categories, &mut materials));
        prepared_keys.push(key);
        prepared_versions.push(version);
    }
    let prepared = Prepared {
        keys: prepared_keys,
        versions: prepared_versions,
        traits,
        categories,
        materials,
        identities,
        weights,
    };
    let never = CancellationToken::new();
    let (pairing, _) = pair_all(
        prepared,
        ask,
        &Limit::new(u64::MAX),
        &never,
        &Monotonic::new(None),
    )?;
    Ok(pairing)
}
