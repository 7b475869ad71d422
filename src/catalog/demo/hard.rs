//! The hard catalogue: families told apart only by the combination of common words (each
//! shared by thousands of products), written the many ways real catalogues write them, and
//! noise products recombining the same words.

use std::collections::HashSet;

use serde_json::Map;

use super::hard_words::{HardCategory, HARD};
use super::{Rng, COLOURS, SIZES};
use crate::catalog::products::{Product, ProductKey};

/// The share of the hard catalogue that is noise: single products recombining the families'
/// vocabulary, in per mille.
const HARD_NOISE_PER_MILLE: usize = 300;

/// Families are spread over the combination space by this multiplier (prime, so coprime
/// with the space's size, so the map from family number to combination is one-to-one).
const COMBINATION_STRIDE: usize = 1_000_003;

/// A family's identity: brand, line, modifier, category and item, as indexes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Combination {
    pub(super) brand: usize,
    pub(super) line: usize,
    pub(super) modifier: usize,
    pub(super) category: usize,
    pub(super) item: usize,
}

impl Combination {
    /// Any combination of the vocabulary, each word as likely as another.
    pub(super) fn random(rng: &mut Rng) -> Self {
        Combination {
            brand: rng.below(HARD.brands.len()),
            line: rng.below(HARD.lines.len()),
            modifier: rng.below(HARD.modifiers.len()),
            category: rng.below(HARD.categories.len()),
            item: rng.below(ITEMS_PER_CATEGORY),
        }
    }
}

/// Items per category: each category of `hard_words.tsv` lists this many.
pub(super) const ITEMS_PER_CATEGORY: usize = 6;

fn combination_space() -> usize {
    HARD.brands.len()
        * HARD.lines.len()
        * HARD.modifiers.len()
        * HARD.categories.len()
        * ITEMS_PER_CATEGORY
}

/// The `family`-th combination: distinct families never share a combination.
fn combination(family: usize) -> Combination {
    let mut c = family.wrapping_mul(COMBINATION_STRIDE) % combination_space();
    let mut digit = |radix: usize| {
        let d = c % radix;
        c /= radix;
        d
    };
    Combination {
        brand: digit(HARD.brands.len()),
        line: digit(HARD.lines.len()),
        modifier: digit(HARD.modifiers.len()),
        category: digit(HARD.categories.len()),
        item: digit(ITEMS_PER_CATEGORY),
    }
}

/// The variant text (colour, size, volume, weight, pack, length) and its price factor in
/// percent. Enrichment extracts these words; identity leaves them out.
pub(super) fn hard_variant(axis: u8, v: usize, rng: &mut Rng) -> (String, i64) {
    let colour = *rng.pick(COLOURS);
    match axis {
        0 => (format!("{colour} - {}", SIZES[v % SIZES.len()]), 100),
        1 => (format!("{colour}, Size {}", 38 + v), 100),
        2 => {
            let ml = [250, 350, 500, 750, 1000][v % 5];
            (format!("{ml} ml {colour}"), 100 + 25 * (v as i64 % 3))
        }
        3 => {
            let (label, factor) = [
                ("250 g", 100),
                ("500 g", 180),
                ("1 kg", 300),
                ("2 x 250 g", 190),
                ("Pack of 3", 250),
            ][v % 5];
            (label.to_owned(), factor)
        }
        _ => {
            let m = ["1 m", "2 m", "0.5 m", "3 m", "1.5 m"][v % 5];
            (format!("{m} {colour}"), 100)
        }
    }
}

/// How one product of a combination is written: word order, spelling, plural, where the
/// brand goes. Returns the name and the brand field.
pub(super) fn hard_name(c: &Combination, variant: &str, rng: &mut Rng) -> (String, Option<String>) {
    let category = &HARD.categories[c.category];
    let item = &category.items[c.item];
    let item_text = if rng.below(100) < 20 {
        item.plural
    } else {
        *rng.pick(&item.spellings)
    };
    let mut brand = HARD.brands[c.brand].to_owned();
    if rng.below(100) < 10 {
        brand = brand.to_uppercase();
    }
    let line = HARD.lines[c.line];
    let modifier = HARD.modifiers[c.modifier];
    // Brand placement: 15 % only in the name, 15 % only in the field, the rest both.
    let placement = rng.below(100);
    let (in_name, field) = match placement {
        0..=14 => (true, None),
        15..=29 => (false, Some(HARD.brands[c.brand].to_owned())),
        _ => (true, Some(HARD.brands[c.brand].to_owned())),
    };
    let b = if in_name { brand.as_str() } else { "" };
    let words = match rng.below(4) {
        0 => format!("{b} {line} {modifier} {item_text}, {variant}"),
        1 => format!("{item_text} {line} {modifier} {b} - {variant}"),
        2 => format!("{b} {modifier} {item_text} {line} {variant}"),
        _ => format!("{line} {item_text} by {b} {modifier} ({variant})"),
    };
    let name = words.split_whitespace().collect::<Vec<_>>().join(" ");
    (name, field)
}

/// A hard catalogue of `n` products: families of 3–5 variants told apart only by the
/// combination of common words (brand, product line, modifier, item — each shared by
/// thousands of products), written with word-order, case, hyphen, spacing and plural
/// variants, brands sometimes only in the name or only in the field; plus 30 % noise
/// products recombining the same vocabulary. Keys: `fam<family>-v<variant>` for family
/// members, `nse<number>` for noise (a family of one). Deterministic for a seed.
pub fn generate_hard(n: usize, seed: u64) -> Vec<Product> {
    let mut rng = Rng::new(seed);
    let noise = n * HARD_NOISE_PER_MILLE / 1000;
    let mut out = Vec::with_capacity(n);
    let mut families = HashSet::new();
    let mut family = 0usize;
    while out.len() < n - noise {
        let c = combination(family);
        families.insert(c);
        let category = &HARD.categories[c.category];
        let base = category.price * (50 + rng.below(150) as i64) / 100;
        let members = 3 + rng.below(3);
        for v in 0..members.min(n - noise - out.len()) {
            let (variant, factor) = hard_variant(category.axis, v, &mut rng);
            let (name, brand) = hard_name(&c, &variant, &mut rng);
            out.push(hard_product(
                &format!("fam{family:07}-v{v}"),
                name,
                brand,
                base * factor / 100,
                category,
            ));
        }
        family += 1;
    }
    let mut i = 0;
    while out.len() < n {
        let c = Combination::random(&mut rng);
        if families.contains(&c) {
            continue;
        }
        let category = &HARD.categories[c.category];
        let (variant, factor) = hard_variant(category.axis, rng.below(5), &mut rng);
        let (name, brand) = hard_name(&c, &variant, &mut rng);
        let price = category.price * (50 + rng.below(150) as i64) / 100 * factor / 100;
        out.push(hard_product(
            &format!("nse{i:07}"),
            name,
            brand,
            price,
            category,
        ));
        i += 1;
    }
    out
}

pub(super) fn hard_product(
    key: &str,
    name: String,
    brand: Option<String>,
    price: i64,
    category: &HardCategory,
) -> Product {
    Product {
        product_key: ProductKey::parse(key).expect("generated keys are valid"),
        description: None,
        brand,
        price_cents: Some(price),
        currency: None,
        taxonomy_path: category.path.iter().map(|s| (*s).to_owned()).collect(),
        attributes: Map::new(),
        name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hard_catalogue_is_deterministic_and_its_families_have_distinct_combinations() {
        assert_eq!(generate_hard(500, 3), generate_hard(500, 3));
        let combos: std::collections::HashSet<_> = (0..200_000).map(combination).collect();
        assert_eq!(combos.len(), 200_000);
        let products = generate_hard(1000, 3);
        assert_eq!(products.len(), 1000);
        let noise = products
            .iter()
            .filter(|p| p.product_key.as_str().starts_with("nse"))
            .count();
        assert_eq!(noise, 300);
    }
}
