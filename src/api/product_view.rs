//! What the products routes answer: a page of stored products, and one product with what
//! enrich and pair found for it. The view is joined at read (the neighbour table holds keys
//! and scores; names come from the products as they are now).

use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::catalog::products::{Enrichment, ProductKey, Stored};

/// A page of a tenant's products, or of what a search found.
#[derive(Serialize, ToSchema)]
pub struct ProductPage {
    pub products: Vec<Stored>,
    /// Pass as `cursor` for the next page; null on the last.
    pub next_cursor: Option<String>,
}

/// A product with what enrich and pair found for it.
#[derive(Serialize, ToSchema)]
pub struct ProductView {
    #[serde(flatten)]
    pub product: Stored,
    /// The currency `price_cents` is in: the product's own `currency`, else `PRICE_CURRENCY`
    /// (an ISO 4217 code); null when neither names one.
    pub currency: Option<String>,
    pub enrichment: EnrichmentView,
    pub neighbours: Vec<NeighbourView>,
}

/// What enrich extracted for a product, and whether it still fits the product.
#[derive(Serialize, ToSchema)]
pub struct EnrichmentView {
    pub state: EnrichmentState,
    /// The extracted attributes (empty when none were found or enrich has not run).
    #[schema(value_type = Object)]
    pub attributes: Map<String, Value>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EnrichmentState {
    /// Extracted from the product as it is now.
    Enriched,
    /// Extracted from an older version of the product.
    Stale,
    /// The product as it is now gave nothing to extract.
    Unextractable,
    NotEnriched,
}

/// One of a product's nearest neighbours, named as it is now.
#[derive(Serialize, ToSchema)]
#[schema(as = Neighbour)]
pub struct NeighbourView {
    pub product_key: ProductKey,
    pub name: String,
    pub score: f64,
}

impl ProductView {
    /// The view of `product`, with its enrichment (if any) and its neighbours; its prices in
    /// its own currency, else in `fallback` (`PRICE_CURRENCY`).
    pub fn new(
        mut product: Stored,
        fallback: Option<String>,
        enrichment: Option<Enrichment>,
        neighbours: Vec<NeighbourView>,
    ) -> Self {
        let state = match &enrichment {
            None => EnrichmentState::NotEnriched,
            Some(e) if e.content_hash != product.content_hash => EnrichmentState::Stale,
            Some(e) if e.unextractable => EnrichmentState::Unextractable,
            Some(_) => EnrichmentState::Enriched,
        };
        let attributes = enrichment.map(|e| e.attributes).unwrap_or_default();
        // Named once, here: the product's own field would repeat the key in the flattened answer.
        let currency = product.product.currency.take().or(fallback);
        Self {
            product,
            currency,
            enrichment: EnrichmentView { state, attributes },
            neighbours,
        }
    }
}
