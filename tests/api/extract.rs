//! The attribute extractor, table-driven: every title states exactly what it should yield,
//! tricky negatives included (an empty object means "nothing to extract").

use catalog_jobs::catalog::extract::extract;
use serde_json::{json, Map, Value};

fn case(title: &str) -> Value {
    Value::Object(extract(title, None, &Map::new()))
}

/// Each title and exactly what it should yield, as JSON (`{}`: nothing to extract).
const TITLES: &[(&str, &str)] = &[
    // colours, single and multi-word, grey/gray as one
    ("Classic Crew Tee Black", r#"{"color": "black"}"#),
    ("Classic Crew Tee Navy Blue", r#"{"color": "navy blue"}"#),
    ("Slim Chinos Navy", r#"{"color": "navy"}"#),
    ("Hoodie Gray", r#"{"color": "grey"}"#),
    ("Hoodie Light Gray", r#"{"color": "light grey"}"#),
    (
        "Linen Shirt Off-White",
        r#"{"color": "off white", "material": "linen"}"#,
    ),
    (
        "Linen Shirt off white",
        r#"{"color": "off white", "material": "linen"}"#,
    ),
    ("Watch Strap Rose Gold", r#"{"color": "rose gold"}"#),
    ("Beanie Olive Green", r#"{"color": "olive green"}"#),
    ("Throw Pillow Mustard Yellow", r#"{"color": "mustard"}"#),
    ("Rain Jacket Burgundy", r#"{"color": "burgundy"}"#),
    ("Sneakers White/Red", r#"{"color": "white"}"#),
    (
        "Cushion Cover Teal 45 x 45 cm",
        r#"{"color": "teal", "dimensions_cm": [45, 45]}"#,
    ),
    // colour words that are not colours
    ("Fresh Orange Juice 1 L", r#"{"volume_ml": 1000}"#),
    ("Organic Green Tea 20 bags", r#"{}"#),
    ("Black Pepper Grinder 50 g", r#"{"weight_g": 50}"#),
    ("Red Wine Vinegar 500 ml", r#"{"volume_ml": 500}"#),
    ("Basmati White Rice 1 kg", r#"{"weight_g": 1000}"#),
    ("Red Bull Energy Drink 250 ml", r#"{"volume_ml": 250}"#),
    // materials
    (
        "Organic Cotton Tee White",
        r#"{"material": "organic cotton", "color": "white"}"#,
    ),
    (
        "Stainless Steel Water Bottle 750 ml",
        r#"{"material": "stainless steel", "volume_ml": 750}"#,
    ),
    (
        "Cast Iron Skillet 26 cm",
        r#"{"material": "cast iron", "dimensions_cm": [26]}"#,
    ),
    ("Merino Wool Socks", r#"{"material": "merino wool"}"#),
    (
        "Ceramic Mug 350 ml Cream",
        r#"{"material": "ceramic", "volume_ml": 350, "color": "cream"}"#,
    ),
    (
        "Bamboo Cutting Board 30 x 20 cm",
        r#"{"material": "bamboo", "dimensions_cm": [30, 20]}"#,
    ),
    ("Aluminum Laptop Stand", r#"{"material": "aluminium"}"#),
    (
        "Faux Leather Jacket Black",
        r#"{"material": "faux leather", "color": "black"}"#,
    ),
    (
        "Silk Pillowcase Ivory",
        r#"{"material": "silk", "color": "ivory"}"#,
    ),
    (
        "Glass Food Container Set of 4",
        r#"{"material": "glass", "pack_count": 4}"#,
    ),
    (
        "Recycled Polyester Backpack 20 L",
        r#"{"material": "recycled polyester", "volume_ml": 20000}"#,
    ),
    (
        "Solid Oak Dining Table 180 x 90 x 75 cm",
        r#"{"material": "solid oak", "dimensions_cm": [180, 90, 75]}"#,
    ),
    // clothing sizes, only in a size position
    (
        "Crew Tee Black Size M",
        r#"{"color": "black", "size": "M"}"#,
    ),
    ("Crew Tee Black - M", r#"{"color": "black", "size": "M"}"#),
    ("Crew Tee, Black, XL", r#"{"color": "black", "size": "XL"}"#),
    ("Crew Tee Black (L)", r#"{"color": "black", "size": "L"}"#),
    ("Crew Tee Black XXL", r#"{"color": "black", "size": "XXL"}"#),
    (
        "Crew Tee Black size: xs",
        r#"{"color": "black", "size": "XS"}"#,
    ),
    ("Running Shorts 2XL", r#"{"size": "2XL"}"#),
    (
        "Beanie One Size Grey",
        r#"{"size": "One Size", "color": "grey"}"#,
    ),
    ("Trail Shoes Size 42", r#"{"size": "42"}"#),
    (
        "Fleece Jacket Size Large Black",
        r#"{"size": "L", "color": "black", "material": "fleece"}"#,
    ),
    ("Large Serving Bowl", r#"{}"#),
    ("Trail Shoes Size 10.5", r#"{"size": "10.5"}"#),
    ("Crew Tee Black / S", r#"{"color": "black", "size": "S"}"#),
    ("M8 Hex Bolts Pack of 20", r#"{"pack_count": 20}"#),
    ("Sony WH-1000XM5 Headphones Black", r#"{"color": "black"}"#),
    ("Type M Connector", r#"{}"#),
    ("M&M's Peanut 200 g", r#"{"weight_g": 200}"#),
    ("L'Oreal Shampoo 400 ml", r#"{"volume_ml": 400}"#),
    ("Vitamin C Serum 30 ml", r#"{"volume_ml": 30}"#),
    // volume → ml
    ("Olive Oil 500ml", r#"{"volume_ml": 500}"#),
    ("Olive Oil 1.5L", r#"{"volume_ml": 1500}"#),
    ("Olive Oil 1,5 l", r#"{"volume_ml": 1500}"#),
    ("Sparkling Water 33 cl", r#"{"volume_ml": 330}"#),
    ("Face Toner 8 fl oz", r#"{"volume_ml": 236.59}"#),
    ("Face Toner 8 fl. oz", r#"{"volume_ml": 236.59}"#),
    (
        "Paint 2.5 litres White",
        r#"{"volume_ml": 2500, "color": "white"}"#,
    ),
    ("Milk 1 Liter", r#"{"volume_ml": 1000}"#),
    ("Cold Brew 25 dl", r#"{"volume_ml": 2500}"#),
    // weight → g
    ("Arabica Coffee Beans 250 g", r#"{"weight_g": 250}"#),
    ("Arabica Coffee Beans 1kg", r#"{"weight_g": 1000}"#),
    ("Oats 1,000 g", r#"{"weight_g": 1000}"#),
    ("Tea 1,000,000 g", r#"{"weight_g": 1000000}"#),
    ("Flour 1,000.5 g", r#"{"weight_g": 1000.5}"#),
    // Above MAX_QUANTITY (1e9): not extracted, never read as 0.
    ("Water 5,000,000,000 ml", r#"{}"#),
    ("Dog Food 2.5 kg", r#"{"weight_g": 2500}"#),
    ("Protein Powder 2 lb", r#"{"weight_g": 907.18}"#),
    ("Chocolate Bar 3.5 oz", r#"{"weight_g": 99.22}"#),
    ("Vitamin D 500 mg", r#"{"weight_g": 0.5}"#),
    ("Dumbbell 10 kgs", r#"{"weight_g": 10000}"#),
    // dimensions → cm
    ("Picture Frame 30 x 40 cm", r#"{"dimensions_cm": [30, 40]}"#),
    ("Picture Frame 30x40cm", r#"{"dimensions_cm": [30, 40]}"#),
    (
        "Rug 160 × 230 cm Beige",
        r#"{"dimensions_cm": [160, 230], "color": "beige"}"#,
    ),
    ("Shelf 600 x 200 mm", r#"{"dimensions_cm": [60, 20]}"#),
    ("Monitor 27\"", r#"{"dimensions_cm": [68.6]}"#),
    ("Skillet 12 in", r#"{"dimensions_cm": [30.5]}"#),
    ("Charging Cable 2m", r#"{"dimensions_cm": [200]}"#),
    (
        "Extension Lead 1.5 m White",
        r#"{"dimensions_cm": [150], "color": "white"}"#,
    ),
    ("Box 30 x 20 x 10 cm", r#"{"dimensions_cm": [30, 20, 10]}"#),
    ("2 in 1 Shampoo 250 ml", r#"{"volume_ml": 250}"#),
    // pack counts
    ("Sparkling Water Pack of 6", r#"{"pack_count": 6}"#),
    ("Sparkling Water 6-pack", r#"{"pack_count": 6}"#),
    (
        "Sparkling Water 6 pack 330 ml",
        r#"{"pack_count": 6, "volume_ml": 330}"#,
    ),
    ("Coffee Pods 10 pcs", r#"{"pack_count": 10}"#),
    (
        "Glass Tumblers Set of 4",
        r#"{"material": "glass", "pack_count": 4}"#,
    ),
    ("Tennis Balls 3 count", r#"{"pack_count": 3}"#),
    ("Yoghurt 2 x 250 g", r#"{"pack_count": 2, "weight_g": 250}"#),
    (
        "Tonic Water 4x200ml",
        r#"{"pack_count": 4, "volume_ml": 200}"#,
    ),
    ("Batteries AA Box of 24", r#"{"pack_count": 24}"#),
    (
        "Socks Black 3 pairs",
        r#"{"color": "black", "pack_count": 3}"#,
    ),
    // nothing to extract
    ("Gift Card", r#"{}"#),
    ("Mystery Box", r#"{}"#),
    ("iPhone 15 Case", r#"{}"#),
    ("Model 3 Floor Mats", r#"{}"#),
    ("Route 66 Poster", r#"{}"#),
    // model codes are not quantities
    (
        "Levi's 501 Jeans W32 L34 Dark Indigo",
        r#"{"color": "indigo"}"#,
    ),
    (
        "LED Bulb E27 Warm White 2-pack",
        r#"{"color": "white", "pack_count": 2}"#,
    ),
    (
        "Evian Mineral Water 6 x 1.5L",
        r#"{"pack_count": 6, "volume_ml": 1500}"#,
    ),
    ("Heinz Tomato Ketchup 2,5kg", r#"{"weight_g": 2500}"#),
    (
        "Bookcase 80x28x202 cm White",
        r#"{"dimensions_cm": [80, 28, 202], "color": "white"}"#,
    ),
];

#[test]
fn titles_yield_exactly_the_expected_attributes() {
    assert!(TITLES.len() >= 80, "at least 80 titles: {}", TITLES.len());
    let failures: Vec<String> = TITLES
        .iter()
        .filter_map(|(title, expected)| {
            let expected: Value =
                serde_json::from_str(expected).expect("the table's JSON is valid");
            let got = case(title);
            (got != expected)
                .then(|| format!("{title:?}\n    expected {expected}\n    got      {got}"))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} titles wrong:\n{}",
        failures.len(),
        TITLES.len(),
        failures.join("\n")
    );
}

#[test]
fn the_description_and_given_attributes_fill_what_the_name_lacks() {
    let given: Map<String, Value> =
        serde_json::from_value(json!({"colour": "Gray", "fabric": "100% cotton", "size": "m"}))
            .unwrap();
    let got = extract("Crew Tee", Some("A soft tee, 180 g."), &given);
    assert_eq!(
        Value::Object(got),
        json!({"weight_g": 180, "color": "grey", "material": "cotton", "size": "M"})
    );
    // The name wins over the description.
    let got = extract("Mug 350 ml", Some("Holds 400 ml"), &Map::new());
    assert_eq!(got["volume_ml"], json!(350));
}
