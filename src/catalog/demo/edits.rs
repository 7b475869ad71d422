//! Random edits of a hard catalogue, as a nightly sync brings them: renames (a product
//! rewritten as another combination of the catalogue's words), price changes across the
//! ×3 band, moves to another category, new products (in an existing family or alone) and
//! removals. Deterministic for a seed; what the incremental pair tests and the benchmark
//! apply.

use serde_json::Map;

use super::hard::{hard_name, hard_product, hard_variant, Combination};
use super::hard_words::HARD;
use super::Rng;
use crate::catalog::products::{Product, ProductKey};

/// What to write and what to remove.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Edits {
    pub upserts: Vec<Product>,
    pub removals: Vec<ProductKey>,
}

/// Edits of `share` of `products` (each edit touches one product, or adds one): a quarter
/// renames, a fifth price changes, a sixth category moves, a fifth additions, the rest
/// removals. New keys are `add<seed>-<n>`.
pub fn edit_hard(products: &[Product], share: f64, seed: u64) -> Edits {
    let mut rng = Rng::new(seed);
    let count = ((products.len() as f64 * share).round() as usize).max(1);
    let mut touched = std::collections::HashSet::new();
    let mut edits = Edits::default();
    let mut added = 0;
    // Each product drawn makes one edit: itself edited or removed, or a product added beside
    // it.
    while touched.len() < count.min(products.len()) {
        let p = &products[rng.below(products.len())];
        if !touched.insert(p.product_key.clone()) {
            continue;
        }
        match rng.below(60) {
            0..=14 => edits.upserts.push(renamed(p, &mut rng)),
            15..=26 => edits.upserts.push(repriced(p, &mut rng)),
            27..=36 => edits.upserts.push(moved(p, &mut rng)),
            37..=48 => {
                edits.upserts.push(added_like(p, seed, added, &mut rng));
                added += 1;
            }
            _ => edits.removals.push(p.product_key.clone()),
        }
    }
    edits
}

/// The product under another combination of the catalogue's words, in its own category.
fn renamed(p: &Product, rng: &mut Rng) -> Product {
    let mut c = Combination::random(rng);
    c.category = category_of(p);
    let category = &HARD.categories[c.category];
    let (variant, _) = hard_variant(category.axis, rng.below(5), rng);
    let (name, brand) = hard_name(&c, &variant, rng);
    Product {
        name,
        brand,
        ..p.clone()
    }
}

/// The price times a factor from ×0.2 to ×5: across the ×3 band as often as not.
fn repriced(p: &Product, rng: &mut Rng) -> Product {
    let factor = [20, 40, 70, 130, 250, 500][rng.below(6)];
    Product {
        price_cents: p.price_cents.map(|c| (c * factor / 100).max(1)),
        ..p.clone()
    }
}

/// The product in another top-level category, name unchanged.
fn moved(p: &Product, rng: &mut Rng) -> Product {
    let now = category_of(p);
    let to = (now + 1 + rng.below(HARD.categories.len() - 1)) % HARD.categories.len();
    Product {
        taxonomy_path: HARD.categories[to]
            .path
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
        ..p.clone()
    }
}

/// A new product: half the time another variant of `p`'s name, else a new combination.
fn added_like(p: &Product, seed: u64, n: usize, rng: &mut Rng) -> Product {
    let key = format!("add{seed}-{n}");
    if rng.below(2) == 0 {
        let mut name = p.name.clone();
        name.push_str(&format!(
            " ({})",
            ["Black", "Teal", "XL", "500 ml"][rng.below(4)]
        ));
        return Product {
            product_key: ProductKey::parse(&key).expect("generated keys are valid"),
            name,
            attributes: Map::new(),
            ..p.clone()
        };
    }
    let c = Combination::random(rng);
    let category = &HARD.categories[c.category];
    let (variant, factor) = hard_variant(category.axis, rng.below(5), rng);
    let (name, brand) = hard_name(&c, &variant, rng);
    let price = category.price * (50 + rng.below(150) as i64) / 100 * factor / 100;
    hard_product(&key, name, brand, price, category)
}

/// The index of `p`'s top-level category among the hard catalogue's.
fn category_of(p: &Product) -> usize {
    HARD.categories
        .iter()
        .position(|c| p.taxonomy_path.first().map(String::as_str) == c.path.first().copied())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::demo::generate_hard;

    #[test]
    fn edits_are_deterministic_and_touch_the_share_asked() {
        let products = generate_hard(2_000, 5);
        let edits = edit_hard(&products, 0.1, 9);
        assert_eq!(edits, edit_hard(&products, 0.1, 9));
        assert_eq!(edits.upserts.len() + edits.removals.len(), 200);
        assert!(!edits.removals.is_empty());
        assert!(edits
            .upserts
            .iter()
            .any(|p| p.product_key.as_str().starts_with("add")));
    }
}
