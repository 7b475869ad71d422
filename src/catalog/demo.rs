//! A deterministic demo catalogue with planted families: one product in several colours,
//! sizes or pack sizes. Used by `catalog-jobs gen-feed` (the committed demo feed), the
//! pairing quality test and the benchmark. Keys are `fam<family>-v<variant>`, so a test can
//! tell which products are one family.

use serde_json::Map;

use super::products::{Product, ProductKey};

/// A small, fast, deterministic generator (SplitMix64): the same seed gives the same feed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

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

const BRANDS: &[&str] = &[
    "Acme",
    "Northwind",
    "Bluefin",
    "Oakridge",
    "Lumen",
    "Kestrel",
    "Harbor",
    "Fjord",
    "Tandem",
    "Pioneer",
    "Solace",
    "Meridian",
    "Cobalt",
    "Juniper",
    "Sable",
    "Tidewater",
];
const COLOURS: &[&str] = &[
    "Black",
    "White",
    "Navy Blue",
    "Grey",
    "Olive Green",
    "Burgundy",
    "Off-White",
    "Mustard",
    "Teal",
    "Charcoal",
    "Sky Blue",
    "Rose Gold",
];
const SIZES: &[&str] = &["XS", "S", "M", "L", "XL", "XXL"];

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
        let brand = *rng.pick(BRANDS);
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
                taxonomy_path: t.category.iter().map(|s| (*s).to_owned()).collect(),
                attributes: Map::new(),
                name,
            });
        }
        family += 1;
    }
    out
}

/// The family a generated product belongs to (`fam000123-v2` → `fam000123`).
pub fn family_of(key: &ProductKey) -> &str {
    key.as_str().split('-').next().unwrap_or(key.as_str())
}

// ---------------------------------------------------------------------------------------
// The hard catalogue

/// Brands: each is carried by thousands of products across every category.
const HARD_BRANDS: &[&str] = &[
    "Acme",
    "Northwind",
    "Bluefin",
    "Oakridge",
    "Lumen",
    "Kestrel",
    "Harbor",
    "Fjord",
    "Tandem",
    "Pioneer",
    "Solace",
    "Meridian",
    "Cobalt",
    "Juniper",
    "Sable",
    "Tidewater",
    "Vantage",
    "Aurora",
    "Granite Peak",
    "Hollow",
    "Evergreen",
    "Redwood",
    "Stellar",
    "Nimbus",
    "Atlas",
    "Summit",
    "Polaris",
    "Cascade",
    "Falcon",
    "Orion",
    "Zephyr",
    "Boreal",
    "Halcyon",
    "Ironbark",
    "Larkspur",
    "Mistral",
    "Nomad",
    "Quarry",
    "Sierra",
    "Willow",
];

/// Product lines: a line word is shared by every brand and category.
const HARD_LINES: &[&str] = &[
    "Classic",
    "Sport",
    "Pro",
    "Urban",
    "Trail",
    "Essential",
    "Active",
    "Comfort",
    "Heritage",
    "Studio",
    "Motion",
    "Core",
    "Prime",
    "Elite",
    "Basic",
    "Signature",
    "Vintage",
    "Modern",
    "Outdoor",
    "Travel",
    "Daily",
    "Premium",
    "Select",
    "Original",
    "Performance",
    "Lite",
    "Max",
    "Plus",
    "Ultra",
    "Air",
    "Flex",
    "Soft",
    "Pure",
    "Natural",
    "Fresh",
    "Bold",
    "Smart",
    "Eco",
    "Street",
    "Coast",
    "Alpine",
    "Ridge",
    "Harvest",
    "Nordic",
    "Metro",
    "Pacific",
    "Atlantic",
    "Highland",
    "Canyon",
    "Prairie",
    "Tundra",
    "Delta",
    "Vista",
    "Horizon",
    "Pulse",
    "Echo",
    "Fusion",
    "Zen",
    "Spark",
    "Glide",
    "Rally",
    "Venture",
    "Quest",
    "Legacy",
    "Crest",
    "Apex",
    "Nova",
    "Terra",
    "Aqua",
    "Solar",
    "Lunar",
    "Breeze",
    "Drift",
    "Ember",
    "Frost",
    "Grove",
    "Haven",
    "Isle",
    "Jet",
    "Keystone",
];

/// Modifiers, one slot of the family identity; the first, empty, means "none".
const HARD_MODIFIERS: &[&str] = &[
    "",
    "Slim",
    "Relaxed",
    "Hooded",
    "Insulated",
    "Lightweight",
    "Heavy Duty",
    "Compact",
    "Deluxe",
    "Mini",
    "Grand",
    "Double",
    "Twin",
    "Thermal",
    "Waterproof",
    "Quick Dry",
    "Breathable",
    "Stretch",
    "Ribbed",
    "Padded",
    "Quilted",
    "Extra Long",
    "Wide",
    "Tall",
    "Foldable",
];

/// One item as the catalogue's writers spell it: every spelling is the same item.
struct Item {
    spellings: &'static [&'static str],
    /// The plural, written instead of the singular in some names.
    plural: &'static str,
}

struct HardCategory {
    path: &'static [&'static str],
    items: &'static [Item],
    price: i64,
    /// How a variant differs: 0 colour and size, 1 colour, 2 volume, 3 weight / pack, 4 length.
    axis: u8,
}

const HARD_CATEGORIES: &[HardCategory] = &[
    HardCategory {
        path: &["Apparel", "Tops"],
        items: &[
            Item {
                spellings: &["T-Shirt", "Tshirt", "T Shirt", "T-SHIRT", "t-shirt"],
                plural: "T-Shirts",
            },
            Item {
                spellings: &["Hoodie", "HOODIE", "hoodie"],
                plural: "Hoodies",
            },
            Item {
                spellings: &["Jacket", "JACKET"],
                plural: "Jackets",
            },
            Item {
                spellings: &["Sweater", "sweater"],
                plural: "Sweaters",
            },
            Item {
                spellings: &["Polo Shirt", "Polo-Shirt", "Poloshirt"],
                plural: "Polo Shirts",
            },
            Item {
                spellings: &["Jogger", "Jogger"],
                plural: "Joggers",
            },
        ],
        price: 3500,
        axis: 0,
    },
    HardCategory {
        path: &["Footwear"],
        items: &[
            Item {
                spellings: &["Running Shoe", "running shoe"],
                plural: "Running Shoes",
            },
            Item {
                spellings: &["Sneaker", "SNEAKER"],
                plural: "Sneakers",
            },
            Item {
                spellings: &["Boot", "boot"],
                plural: "Boots",
            },
            Item {
                spellings: &["Sandal", "Sandal"],
                plural: "Sandals",
            },
            Item {
                spellings: &["Slipper", "Slipper"],
                plural: "Slippers",
            },
            Item {
                spellings: &["Flip-Flop", "Flip Flop", "Flipflop"],
                plural: "Flip-Flops",
            },
        ],
        price: 7000,
        axis: 1,
    },
    HardCategory {
        path: &["Home", "Kitchen"],
        items: &[
            Item {
                spellings: &["Water Bottle", "Water-Bottle", "Waterbottle"],
                plural: "Water Bottles",
            },
            Item {
                spellings: &["Travel Mug", "Travel-Mug"],
                plural: "Travel Mugs",
            },
            Item {
                spellings: &["Lunch Box", "Lunchbox", "Lunch-Box"],
                plural: "Lunch Boxes",
            },
            Item {
                spellings: &["Food Container", "food container"],
                plural: "Food Containers",
            },
            Item {
                spellings: &["Flask", "FLASK"],
                plural: "Flasks",
            },
            Item {
                spellings: &["Tumbler", "tumbler"],
                plural: "Tumblers",
            },
        ],
        price: 2200,
        axis: 2,
    },
    HardCategory {
        path: &["Grocery"],
        items: &[
            Item {
                spellings: &["Coffee Bean", "coffee bean"],
                plural: "Coffee Beans",
            },
            Item {
                spellings: &["Herbal Tea", "Herbal-Tea"],
                plural: "Herbal Teas",
            },
            Item {
                spellings: &["Granola", "GRANOLA"],
                plural: "Granolas",
            },
            Item {
                spellings: &["Peanut Butter", "Peanut-Butter"],
                plural: "Peanut Butters",
            },
            Item {
                spellings: &["Oat Cereal", "oat cereal"],
                plural: "Oat Cereals",
            },
            Item {
                spellings: &["Protein Bar", "Protein-Bar"],
                plural: "Protein Bars",
            },
        ],
        price: 900,
        axis: 3,
    },
    HardCategory {
        path: &["Beauty", "Care"],
        items: &[
            Item {
                spellings: &["Face Cream", "Face-Cream", "Facecream"],
                plural: "Face Creams",
            },
            Item {
                spellings: &["Body Lotion", "body lotion"],
                plural: "Body Lotions",
            },
            Item {
                spellings: &["Shampoo", "SHAMPOO"],
                plural: "Shampoos",
            },
            Item {
                spellings: &["Conditioner", "conditioner"],
                plural: "Conditioners",
            },
            Item {
                spellings: &["Hand Soap", "Handsoap", "Hand-Soap"],
                plural: "Hand Soaps",
            },
            Item {
                spellings: &["Shower Gel", "Shower-Gel"],
                plural: "Shower Gels",
            },
        ],
        price: 1500,
        axis: 2,
    },
    HardCategory {
        path: &["Electronics", "Accessories"],
        items: &[
            Item {
                spellings: &["USB-C Cable", "USB C Cable", "usbc cable"],
                plural: "USB-C Cables",
            },
            Item {
                spellings: &["Phone Case", "Phone-Case", "Phonecase"],
                plural: "Phone Cases",
            },
            Item {
                spellings: &["Wireless Charger", "wireless charger"],
                plural: "Wireless Chargers",
            },
            Item {
                spellings: &["Power Bank", "Powerbank", "Power-Bank"],
                plural: "Power Banks",
            },
            Item {
                spellings: &["Earbud", "Ear Bud", "Ear-Bud"],
                plural: "Earbuds",
            },
            Item {
                spellings: &["Screen Protector", "Screen-Protector"],
                plural: "Screen Protectors",
            },
        ],
        price: 2500,
        axis: 4,
    },
];

/// The share of the hard catalogue that is noise: single products recombining the families'
/// vocabulary, in per mille.
const HARD_NOISE_PER_MILLE: usize = 300;

/// Families are spread over the combination space by this multiplier (prime, so coprime
/// with the space's size, so the map from family number to combination is one-to-one).
const COMBINATION_STRIDE: usize = 1_000_003;

/// A family's identity: brand, line, modifier, category and item, as indexes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Combination {
    brand: usize,
    line: usize,
    modifier: usize,
    category: usize,
    item: usize,
}

const ITEMS_PER_CATEGORY: usize = 6;

fn combination_space() -> usize {
    HARD_BRANDS.len()
        * HARD_LINES.len()
        * HARD_MODIFIERS.len()
        * HARD_CATEGORIES.len()
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
        brand: digit(HARD_BRANDS.len()),
        line: digit(HARD_LINES.len()),
        modifier: digit(HARD_MODIFIERS.len()),
        category: digit(HARD_CATEGORIES.len()),
        item: digit(ITEMS_PER_CATEGORY),
    }
}

/// The variant text (colour, size, volume, weight, pack, length) and its price factor in
/// percent. Enrichment extracts these words; identity leaves them out.
fn hard_variant(axis: u8, v: usize, rng: &mut Rng) -> (String, i64) {
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
fn hard_name(c: &Combination, variant: &str, rng: &mut Rng) -> (String, Option<String>) {
    let category = &HARD_CATEGORIES[c.category];
    let item = &category.items[c.item];
    let item_text = if rng.below(100) < 20 {
        item.plural
    } else {
        *rng.pick(item.spellings)
    };
    let mut brand = HARD_BRANDS[c.brand].to_owned();
    if rng.below(100) < 10 {
        brand = brand.to_uppercase();
    }
    let line = HARD_LINES[c.line];
    let modifier = HARD_MODIFIERS[c.modifier];
    // Brand placement: 15 % only in the name, 15 % only in the field, the rest both.
    let placement = rng.below(100);
    let (in_name, field) = match placement {
        0..=14 => (true, None),
        15..=29 => (false, Some(HARD_BRANDS[c.brand].to_owned())),
        _ => (true, Some(HARD_BRANDS[c.brand].to_owned())),
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
    let mut families = std::collections::HashSet::new();
    let mut family = 0usize;
    while out.len() < n - noise {
        let c = combination(family);
        families.insert(c);
        let category = &HARD_CATEGORIES[c.category];
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
        let c = Combination {
            brand: rng.below(HARD_BRANDS.len()),
            line: rng.below(HARD_LINES.len()),
            modifier: rng.below(HARD_MODIFIERS.len()),
            category: rng.below(HARD_CATEGORIES.len()),
            item: rng.below(ITEMS_PER_CATEGORY),
        };
        if families.contains(&c) {
            continue;
        }
        let category = &HARD_CATEGORIES[c.category];
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

fn hard_product(
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
        taxonomy_path: category.path.iter().map(|s| (*s).to_owned()).collect(),
        attributes: Map::new(),
        name,
    }
}

/// Family recall at k of a neighbour table over a generated catalogue: of each product's
/// family siblings (at most k of them), the share found among its neighbours.
/// Returns (found, expected).
pub fn family_recall<'a>(
    products: &'a [Product],
    neighbours_of: impl Fn(&ProductKey) -> Vec<ProductKey>,
    k: usize,
) -> (usize, usize) {
    let mut families: std::collections::HashMap<&'a str, Vec<&'a ProductKey>> =
        std::collections::HashMap::new();
    for p in products {
        families
            .entry(family_of(&p.product_key))
            .or_default()
            .push(&p.product_key);
    }
    let (mut found, mut expected) = (0, 0);
    for p in products {
        let siblings = &families[family_of(&p.product_key)];
        let wanted = (siblings.len() - 1).min(k);
        if wanted == 0 {
            continue;
        }
        let got = neighbours_of(&p.product_key);
        let hits = got
            .iter()
            .take(k)
            .filter(|g| **g != p.product_key && siblings.contains(g))
            .count();
        found += hits.min(wanted);
        expected += wanted;
    }
    (found, expected)
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
