//! The easy demo catalogue: families of 2–6 variants, each family named by a made-up model
//! word of its own, so that any word-overlap method finds it.

use serde_json::Map;

use super::hard_words::HARD;
use super::{Rng, COLOURS, SIZES};
use crate::catalog::products::{Product, ProductKey};

const SYLLABLES: &[&str] = &[
    "ka", "lo", "mi", "ra", "ve", "to", "zen", "bri", "qua", "sol", "dor", "fin", "gal", "har",
    "jun", "kel", "lum", "mar", "nor", "pel", "ros", "sav", "tur", "vix", "wen", "yor", "zul",
    "cap", "dex", "fal",
];

/// A made-up model word unique to the family index (a bijection onto syllable strings).
fn model_word(mut index: usize) -> String {
    let mut word = String::new();
    for _ in 0..3 {
        word.push_str(SYLLABLES[index % SYLLABLES.len()]);
        index /= SYLLABLES.len();
    }
    while index > 0 {
        word.push_str(SYLLABLES[index % SYLLABLES.len()]);
        index /= SYLLABLES.len();
    }
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => word,
    }
}

/// The easy catalogue's brands: the first 16 of the hard one's (the demo feed is made of them).
const EASY_BRANDS: usize = 16;

struct Template {
    category: &'static [&'static str],
    noun: &'static str,
    material: &'static str,
    price: i64,
    /// How a variant differs: 0 colour, 1 colour and size, 2 volume, 3 weight / pack, 4 length.
    axis: u8,
}

const TEMPLATES: &[Template] = &[
    Template {
        category: &["Apparel", "T-Shirts"],
        noun: "Crew Tee",
        material: "Organic Cotton",
        price: 2500,
        axis: 1,
    },
    Template {
        category: &["Apparel", "Hoodies"],
        noun: "Zip Hoodie",
        material: "Merino Wool",
        price: 6900,
        axis: 1,
    },
    Template {
        category: &["Apparel", "Socks"],
        noun: "Trail Socks",
        material: "Wool",
        price: 1200,
        axis: 0,
    },
    Template {
        category: &["Home", "Kitchen", "Mugs"],
        noun: "Mug",
        material: "Ceramic",
        price: 1400,
        axis: 2,
    },
    Template {
        category: &["Home", "Kitchen", "Bottles"],
        noun: "Water Bottle",
        material: "Stainless Steel",
        price: 2200,
        axis: 2,
    },
    Template {
        category: &["Home", "Textiles"],
        noun: "Cushion Cover",
        material: "Linen",
        price: 1900,
        axis: 0,
    },
    Template {
        category: &["Grocery", "Coffee"],
        noun: "Coffee Beans",
        material: "",
        price: 1100,
        axis: 3,
    },
    Template {
        category: &["Grocery", "Tea"],
        noun: "Loose Leaf Tea",
        material: "",
        price: 800,
        axis: 3,
    },
    Template {
        category: &["Beauty", "Skin Care"],
        noun: "Face Cream",
        material: "",
        price: 2900,
        axis: 2,
    },
    Template {
        category: &["Electronics", "Cables"],
        noun: "USB-C Cable",
        material: "Nylon",
        price: 1500,
        axis: 4,
    },
];

/// `n` products in families of 2–6 variants, deterministic for a seed.
pub fn generate(n: usize, seed: u64) -> Vec<Product> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(n);
    let mut family = 0usize;
    while out.len() < n {
        let t = rng.pick(TEMPLATES);
        let brand = *rng.pick(&HARD.brands[..EASY_BRANDS]);
        let model = model_word(family);
        let members = 2 + rng.below(5);
        let base_price = t.price + (rng.below(40) as i64 - 20) * t.price / 100;
        for v in 0..members {
            if out.len() >= n {
                break;
            }
            let colour = COLOURS[(family + v) % COLOURS.len()];
            let (variant, price) = match t.axis {
                0 => (colour.to_owned(), base_price),
                1 => (format!("{colour} - {}", SIZES[v % SIZES.len()]), base_price),
                2 => {
                    let ml = [250, 350, 500, 750, 1000, 1500][v % 6];
                    (format!("{ml} ml {colour}"), base_price * (1 + v as i64 / 3))
                }
                3 => {
                    let (label, factor) = [
                        ("250 g", 1),
                        ("500 g", 2),
                        ("1 kg", 3),
                        ("2 x 250 g", 2),
                        ("Pack of 3", 2),
                        ("100 g", 1),
                    ][v % 6];
                    (label.to_owned(), base_price * factor)
                }
                _ => {
                    let m = ["1 m", "2 m", "0.5 m", "3 m", "1.5 m", "5 m"][v % 6];
                    (format!("{m} {colour}"), base_price)
                }
            };
            let name = if t.material.is_empty() {
                format!("{brand} {model} {} {variant}", t.noun)
            } else {
                format!("{brand} {model} {} {} {variant}", t.material, t.noun)
            };
            out.push(Product {
                product_key: ProductKey::parse(&format!("fam{family:06}-v{v}"))
                    .expect("generated keys are valid"),
                description: Some(format!("{} by {brand}. Part of the {model} range.", t.noun)),
                brand: Some(brand.to_owned()),
                price_cents: Some(price),
                currency: None,
                taxonomy_path: t.category.iter().map(|s| (*s).to_owned()).collect(),
                attributes: Map::new(),
                name,
            });
        }
        family += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_deterministic_and_families_are_unique() {
        assert_eq!(generate(300, 7), generate(300, 7));
        assert_ne!(generate(300, 7), generate(300, 8));
        let words: std::collections::HashSet<String> = (0..30_000).map(model_word).collect();
        assert_eq!(words.len(), 30_000);
    }
}
