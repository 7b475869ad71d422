//! Pairing quality on hard catalogues (families told apart only by combinations of common
//! words), exactness against brute force, the identity's folding of how names are written,
//! and the neighbour table's size.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use catalog_jobs::catalog::pair::PairParams;
use catalog_jobs::catalog::products::{
    CatalogStore, Enrichment, MemoryCatalog, PairingInput, Product, ProductKey, Stored,
};
use catalog_jobs::catalog::{
    demo, enrich, pair, run_unfenced, Catalog, CatalogSettings, Monotonic,
};
use catalog_jobs::jobs::fence::Unfenced;
use catalog_jobs::jobs::TenantId;
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use crate::helpers::{
    blocking, catalog_store, memory_usage, shared_redis, spawn_catalog_app, tenant, test_config,
    Backend,
};

const TOP_K: usize = 5;
const MIN_SCORE: f64 = 0.2;

fn never() -> CancellationToken {
    CancellationToken::new()
}

/// Enriches and pairs `products` in an embedded catalogue; returns each product's neighbours.
fn pair_catalogue(products: &[Product]) -> HashMap<ProductKey, Vec<ProductKey>> {
    let catalog = Catalog {
        store: Arc::new(MemoryCatalog::new()),
        settings: CatalogSettings::default(),
    };
    let t = tenant();
    catalog.store.upsert(&t, products, &Unfenced).unwrap();
    run_unfenced(
        &catalog,
        &t,
        &enrich::EnrichParams { force: false },
        &never(),
        None,
    )
    .unwrap();
    let report = run_unfenced(&catalog, &t, &PairParams::default(), &never(), None).unwrap();
    assert_eq!(report["products"], products.len());
    products
        .iter()
        .map(|p| {
            let row = catalog
                .store
                .neighbours(&t, &p.product_key)
                .unwrap()
                .unwrap_or_default();
            assert!(row.len() <= TOP_K);
            let keys = row.into_iter().map(|n| n.product_key).collect();
            (p.product_key.clone(), keys)
        })
        .collect()
}

/// Family recall@5 (of each product's siblings, at most 5, the share among its neighbours),
/// asserting on the way that no neighbour is in another top-level category.
fn recall_within_categories(n: usize, seed: u64) -> f64 {
    let products = demo::generate_hard(n, seed);
    let table = pair_catalogue(&products);
    let by_key: HashMap<&ProductKey, &Product> =
        products.iter().map(|p| (&p.product_key, p)).collect();
    let mut families: HashMap<&str, HashSet<&ProductKey>> = HashMap::new();
    for p in &products {
        families
            .entry(demo::family_of(&p.product_key))
            .or_default()
            .insert(&p.product_key);
    }
    let (mut found, mut expected) = (0, 0);
    for p in &products {
        let neighbours = &table[&p.product_key];
        for other in neighbours {
            assert_eq!(
                by_key[other].top_category(),
                p.top_category(),
                "{} paired across categories with {}",
                p.name,
                by_key[other].name
            );
        }
        let siblings = &families[demo::family_of(&p.product_key)];
        let wanted = (siblings.len() - 1).min(TOP_K);
        expected += wanted;
        found += neighbours
            .iter()
            .filter(|k| *k != &p.product_key && siblings.contains(k))
            .count()
            .min(wanted);
    }
    let recall = found as f64 / expected as f64;
    eprintln!("hard catalogue of {n}: family recall@5 {recall:.3} ({found} of {expected})");
    recall
}

#[test]
fn a_hard_catalogue_of_2000_products_pairs_its_families_within_their_categories() {
    let recall = recall_within_categories(2_000, 17);
    assert!(recall >= 0.9, "family recall@5 is {recall:.3}");
}

#[test]
fn a_hard_catalogue_of_20000_products_pairs_its_families_within_their_categories() {
    let recall = recall_within_categories(20_000, 18);
    assert!(recall >= 0.9, "family recall@5 is {recall:.3}");
}

/// Products as the store holds them, with an enrichment record for each (so that identity
/// leaves the variant words out, as after a real enrich).
fn stored_and_enriched(products: &[Product]) -> (Vec<Stored>, HashMap<ProductKey, Enrichment>) {
    let stored = products
        .iter()
        .map(|p| Stored {
            product: p.clone(),
            content_hash: String::new(),
        })
        .collect();
    let enriched = products
        .iter()
        .map(|p| {
            let e = Enrichment {
                content_hash: String::new(),
                attributes: Map::new(),
                unextractable: false,
            };
            (p.product_key.clone(), e)
        })
        .collect();
    (stored, enriched)
}

#[test]
fn pair_neighbours_equal_an_exhaustive_top_k() {
    exhaustive_top_k(demo::generate_hard(5_000, 23));
}

/// With one product in 25 priced a thousand times higher or lower: few products are
/// comparable with it, so its query reads long, passing over the groups no price of its
/// meets.
#[test]
fn pair_neighbours_equal_an_exhaustive_top_k_with_products_priced_apart() {
    let mut products = demo::generate_hard(5_000, 29);
    for (i, p) in products.iter_mut().enumerate() {
        p.price_cents = p.price_cents.map(|c| match i % 50 {
            0 | 1 => c * 1_000,
            25 | 26 => (c / 1_000).max(1),
            _ => c,
        });
    }
    exhaustive_top_k(products);
}

/// A shop with few distinct words: 3,000 names of 6 words drawn from 24, one brand, one
/// category, one price band. Every product shares words with nearly every other, each
/// word's list holds a quarter of the catalogue, and dozens tie at each product's k-th
/// score: the searches pass over most of what they read by the groups' signatures, which
/// must never drop a neighbour, not even one tied at the bar.
#[test]
fn pair_neighbours_equal_an_exhaustive_top_k_on_a_catalogue_of_few_words() {
    let mut rng = demo::Rng::new(31);
    let word = |i: usize| {
        let (c, v) = (b"bdfgklmnprtvz", b"aeiou");
        let syllable = |k: usize| format!("{}{}", c[k % 13] as char, v[k / 13 % 5] as char);
        syllable(i) + &syllable(i / 65 + 7)
    };
    let products = (0..3_000)
        .map(|i| {
            let mut words: Vec<usize> = Vec::new();
            while words.len() < 6 {
                let w = rng.below(24);
                if !words.contains(&w) {
                    words.push(w);
                }
            }
            let name: Vec<String> = words.into_iter().map(word).collect();
            let mut p = product(&format!("few{i:05}"), &name.join(" "), Some("Same"));
            p.price_cents = Some(1_000 + rng.below(100) as i64);
            p
        })
        .collect();
    exhaustive_top_k_to_the_key(products);
}

/// Pair's table of `products` (none with a material) against brute force, neighbour by
/// neighbour: every comparable pair scored, each product's k best by score, then key (the
/// documented tie-break), so that a neighbour tied at the k-th score and passed over fails.
fn exhaustive_top_k_to_the_key(products: Vec<Product>) {
    let (stored, enriched) = stored_and_enriched(&products);
    let progress = Monotonic::new(None);
    let ask = pair::Ask {
        top_k: TOP_K,
        min_score: MIN_SCORE as f32,
    };
    let inputs = pair::inputs_of(&stored, &enriched);
    let table = pair::neighbours(inputs.clone(), &ask, &never(), &progress).unwrap();
    let e = pair::embed(inputs, &never(), &progress).unwrap();
    for (i, (key, row)) in table.iter().enumerate() {
        assert_eq!(key, &products[i].product_key);
        let mut all: Vec<(f32, &ProductKey)> = (0..e.len())
            .filter(|&j| j != i && e.comparable(i, j))
            .map(|j| (e.score(i, j), &products[j].product_key))
            .filter(|&(s, _)| f64::from(s) >= MIN_SCORE)
            .collect();
        all.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
        all.truncate(TOP_K);
        let want: Vec<&ProductKey> = all.into_iter().map(|(_, k)| k).collect();
        let got: Vec<&ProductKey> = row.iter().map(|n| &n.product_key).collect();
        assert_eq!(got, want, "{}", products[i].name);
    }
}

/// Pair's table of `products` against brute force: every comparable pair scored, each
/// product's k best.
fn exhaustive_top_k(products: Vec<Product>) {
    let (stored, enriched) = stored_and_enriched(&products);
    let progress = Monotonic::new(None);
    let ask = pair::Ask {
        top_k: TOP_K,
        min_score: MIN_SCORE as f32,
    };
    let inputs = pair::inputs_of(&stored, &enriched);
    let table = pair::neighbours(inputs.clone(), &ask, &never(), &progress).unwrap();
    let e = pair::embed(inputs, &never(), &progress).unwrap();
    let index: HashMap<&ProductKey, usize> = products
        .iter()
        .enumerate()
        .map(|(i, p)| (&p.product_key, i))
        .collect();
    // Brute force: every comparable pair scored, each product's k best kept.
    let (mut matched, mut total) = (0usize, 0usize);
    for (i, (key, row)) in table.iter().enumerate() {
        assert_eq!(key, &products[i].product_key);
        let mut all: Vec<f32> = (0..e.len())
            .filter(|&j| j != i && e.comparable(i, j))
            .map(|j| e.score(i, j))
            .filter(|&s| f64::from(s) >= MIN_SCORE)
            .collect();
        all.sort_unstable_by(|a, b| b.partial_cmp(a).unwrap());
        all.truncate(TOP_K);
        assert_eq!(
            row.len(),
            all.len(),
            "{}: pair found {} neighbours, brute force {}",
            products[i].name,
            row.len(),
            all.len()
        );
        // Same scores position by position (ties may pick different products of one score).
        for (n, want) in row.iter().zip(&all) {
            let j = index[&n.product_key];
            let got = e.score(i, j);
            assert!(e.comparable(i, j));
            total += 1;
            if (got - want).abs() < 1e-4 && (n.score - f64::from(got)).abs() < 1e-4 {
                matched += 1;
            }
        }
    }
    let overlap = matched as f64 / total as f64;
    let n = products.len();
    eprintln!(
        "exhaustive top-{TOP_K} overlap on {n} products: {overlap:.4} ({matched} of {total})"
    );
    assert!(overlap >= 0.99, "overlap with brute force is {overlap:.4}");
}

fn product(key: &str, name: &str, brand: Option<&str>) -> Product {
    Product {
        product_key: ProductKey::parse(key).unwrap(),
        name: name.to_owned(),
        brand: brand.map(str::to_owned),
        description: None,
        price_cents: Some(2_000),
        currency: None,
        taxonomy_path: vec!["Apparel".into()],
        attributes: Map::new(),
    }
}

#[test]
fn names_written_differently_have_one_identity_and_different_products_do_not() {
    // (name, brand field): every row within a group is the same product.
    let groups: &[&[(&str, Option<&str>)]] = &[
        &[
            ("Acme T-Shirt Navy Blue - XL", Some("Acme")),
            ("Acme tshirt, Black - S", None),
            ("ACME T Shirt (White, M)", Some("ACME")),
            ("T-Shirts Acme", Some("Acme")),
            ("t-shirt by acme - L", None),
            ("T Shirt, Grey", Some("Acme")),
        ],
        &[
            ("Northwind Coffee Beans 500 g", Some("Northwind")),
            ("Coffee Bean Northwind 1 kg", None),
            ("NORTHWIND coffee-beans, Pack of 3", Some("Northwind")),
        ],
        &[
            ("Lumen Ear Buds Wireless", Some("Lumen")),
            ("Lumen Earbuds wireless", None),
            ("Wireless Ear-Bud", Some("Lumen")),
        ],
        &[
            ("Acme Hoodie Black - M", Some("Acme")),
            ("Hoodies, Red - S", Some("Acme")),
        ],
    ];
    let mut products = Vec::new();
    let mut group_of = Vec::new();
    for (g, rows) in groups.iter().enumerate() {
        for (r, (name, brand)) in rows.iter().enumerate() {
            products.push(product(&format!("g{g}-r{r}"), name, *brand));
            group_of.push(g);
        }
    }
    let (stored, enriched) = stored_and_enriched(&products);
    let inputs = pair::inputs_of(&stored, &enriched);
    let e = pair::embed(inputs, &never(), &Monotonic::new(None)).unwrap();
    for i in 0..products.len() {
        for j in 0..products.len() {
            let s = e.score(i, j);
            if group_of[i] == group_of[j] {
                assert!(
                    (s - 1.0).abs() < 1e-4,
                    "`{}` and `{}` are one product, scored {s}",
                    products[i].name,
                    products[j].name
                );
            } else {
                assert!(
                    s < 0.9,
                    "`{}` and `{}` are different products, scored {s}",
                    products[i].name,
                    products[j].name
                );
            }
        }
    }
}

/// Words that make a product name about 900 characters long.
fn filler() -> String {
    "Extraordinarily Long Descriptive Wording ".repeat(20)
}

/// A family of 4 (`fam-0` … `fam-3`) and 40 others, each name about 900 characters.
fn long_named_products() -> Value {
    let filler = filler();
    (0..44)
        .map(|i| {
            let (key, name) = if i < 4 {
                (format!("fam-{i}"), format!("Acme Trail Jacket {filler} Size {i}"))
            } else {
                let word: String = [b'a' + (i % 26) as u8, b'a' + (i / 26) as u8, b'q']
                    .iter()
                    .map(|&c| char::from(c))
                    .collect();
                (format!("other-{i}"), format!("Brand{word} Thing{word} {filler}"))
            };
            json!({"product_key": key, "name": name, "price_cents": 5000, "taxonomy_path": ["Apparel"]})
        })
        .collect()
}

/// The tenant's neighbour table as Redis holds it: its key and its rows.
async fn neighbour_table(t: &TenantId) -> (String, HashMap<String, String>) {
    let mut conn = shared_redis().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*:{t}:neighbours"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let table: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(&keys[0])
        .query_async(&mut conn)
        .await
        .unwrap();
    (keys[0].clone(), table)
}

/// Checks each row holds 1 to `TOP_K` neighbours of a key and a score only; answers the
/// bytes of the rows and what keys and scores need: per neighbour its key, a score of at
/// most 6 digits, and the JSON punctuation and field names around them.
fn bytes_and_budget(table: &HashMap<String, String>) -> (usize, usize) {
    let (mut bytes, mut budget) = (0, 0);
    for (key, value) in table {
        let row: Vec<Value> = serde_json::from_str(value).unwrap();
        assert!(!row.is_empty() && row.len() <= TOP_K, "{key}: {value}");
        for n in &row {
            assert_eq!(
                n.as_object().unwrap().len(),
                2,
                "only a key and a score: {n}"
            );
            budget += n["product_key"].as_str().unwrap().len()
                + r#"{"product_key":"","score":0.1234},"#.len()
                + 2;
        }
        budget += 2;
        bytes += value.len();
    }
    (bytes, budget)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_neighbour_table_holds_keys_and_scores_and_the_product_view_joins_names() {
    let app = spawn_catalog_app(Backend::Redis, test_config()).await;
    let t = tenant();
    let r = app
        .import(
            t.as_str(),
            "application/json",
            long_named_products().to_string(),
        )
        .await;
    assert_eq!(r.status(), 200);
    let r = app
        .start("pair", &[("tenant_id", t.as_str()), ("wait", "true")])
        .await;
    assert_eq!(r.status(), 200);

    let (key, table) = neighbour_table(&t).await;
    for i in 0..4 {
        assert!(table.contains_key(&format!("fam-{i}")), "{table:?}");
    }
    let (bytes, budget) = bytes_and_budget(&table);
    let memory = memory_usage(&mut shared_redis().await, &key).await;
    eprintln!(
        "neighbour table of 44 products with ~900-character names: {bytes} bytes of values \
         (budget {budget}), MEMORY USAGE {memory} bytes"
    );
    assert!(
        bytes <= budget,
        "{bytes} bytes of values, keys and scores need {budget}"
    );

    // The product view joins the names at read.
    let p = app.product(t.as_str(), "fam-0").await;
    let neighbours = p["neighbours"].as_array().unwrap();
    assert_eq!(neighbours.len(), 3, "{p}");
    for n in neighbours {
        let key = n["product_key"].as_str().unwrap();
        assert!(key.starts_with("fam-"), "{p}");
        let suffix = &key["fam-".len()..];
        assert_eq!(
            n["name"],
            json!(format!("Acme Trail Jacket {} Size {suffix}", filler()))
        );
        assert!(n["score"].as_f64().unwrap() > 0.9);
    }
}

#[test]
fn a_group_of_one_name_ranks_its_members_by_material_then_key_within_the_price_band() {
    // 60 products of one name (one group: each scores the same against all the others),
    // listed in an order other than their keys', with prices over and beyond the price band
    // and some with a material. Scoring reads a group in key order and stops early: each
    // product's neighbours must still be the comparable others, its own material first, then
    // by key.
    let n = 60;
    let prices = [1_000, 2_500, 4_000, 9_000, 30_000];
    let materials = [None, Some("Wool"), Some("Nylon")];
    let products: Vec<Product> = (0..n)
        .map(|i| {
            let key = format!("sku-{:03}", (i * 37) % n);
            let mut p = product(&key, "Acme Trail Jacket", Some("Acme"));
            p.price_cents = Some(prices[i % prices.len()]);
            p
        })
        .collect();
    let (stored, mut enriched) = stored_and_enriched(&products);
    let material_of = |i: usize| materials[(i / 2) % materials.len()];
    for (i, p) in products.iter().enumerate() {
        if let Some(m) = material_of(i) {
            let e = enriched.get_mut(&p.product_key).unwrap();
            e.attributes.insert("material".into(), json!(m));
        }
    }
    let ask = pair::Ask {
        top_k: TOP_K,
        min_score: MIN_SCORE as f32,
    };
    let inputs = pair::inputs_of(&stored, &enriched);
    let table = pair::neighbours(inputs, &ask, &never(), &Monotonic::new(None)).unwrap();
    let band = |a: i64, b: i64| a.max(b) as f64 / a.min(b) as f64 <= 3.0;
    for (i, (key, row)) in table.iter().enumerate() {
        assert_eq!(key, &products[i].product_key);
        let mut want: Vec<usize> = (0..n)
            .filter(|&j| j != i)
            .filter(|&j| band(prices[i % 5], prices[j % 5]))
            .collect();
        let mine = material_of(i);
        want.sort_by_key(|&j| {
            let same = mine.is_some() && material_of(j) == mine;
            (!same, products[j].product_key.clone())
        });
        want.truncate(TOP_K);
        let want: Vec<&ProductKey> = want.iter().map(|&j| &products[j].product_key).collect();
        let got: Vec<&ProductKey> = row.iter().map(|n| &n.product_key).collect();
        assert_eq!(got, want, "the neighbours of {key:?} (material {mine:?})");
        assert!(row.iter().all(|n| (n.score - 1.0).abs() < 1e-4));
    }
}

#[test]
fn the_embedded_store_reads_for_pairing_what_the_whole_record_decoded_gives() {
    reads_for_pairing_what_the_whole_record_decoded_gives(&MemoryCatalog::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_reads_for_pairing_what_the_whole_record_decoded_gives() {
    let store = catalog_store(Backend::Redis);
    blocking(move || reads_for_pairing_what_the_whole_record_decoded_gives(&*store)).await
}

/// Pairing's read decodes only its fields: names with escapes, a deeper category path, no
/// brand, price or category, a material that is not a string, no enrichment, and a key not
/// there must read as `PairingInput::of` the whole record reads them.
fn reads_for_pairing_what_the_whole_record_decoded_gives(store: &dyn CatalogStore) {
    let t = tenant();
    let mut a = product(
        "sku-a",
        "Caf\u{e9} \"Noir\" Jacket \\ 2\ttall",
        Some("B\u{e4}r"),
    );
    a.taxonomy_path = vec!["Apparel".into(), "Jackets".into()];
    a.description = Some("A long description".into());
    a.currency = Some("EUR".into());
    a.attributes.insert("color".into(), json!("red"));
    let mut b = product("sku-b", "Plain Coat", None);
    b.price_cents = None;
    b.taxonomy_path = Vec::new();
    let c = product("sku-c", "Wool Coat", Some("Acme"));
    let d = product("sku-d", "Other Coat", None);
    store.upsert(&t, &[a, b, c, d], &Unfenced).unwrap();
    let enrichment = |attributes: Value| Enrichment {
        content_hash: "h".into(),
        attributes: attributes.as_object().cloned().unwrap(),
        unextractable: false,
    };
    let batch = [
        ("sku-a", json!({"material": "Wool", "color": "red"})),
        ("sku-b", json!({"material": 3})),
        ("sku-c", json!({"size": "M"})),
    ]
    .map(|(k, a)| (ProductKey::parse(k).unwrap(), enrichment(a)));
    store.save_enrichments(&t, &batch, &Unfenced).unwrap();
    let keys: Vec<ProductKey> = ["sku-a", "sku-b", "sku-c", "sku-d", "sku-z"]
        .into_iter()
        .map(|k| ProductKey::parse(k).unwrap())
        .collect();
    let got = store.pairing_inputs(&t, &keys).unwrap();
    let (all, enriched) = (store.all(&t).unwrap(), store.enrichments(&t).unwrap());
    let want: Vec<Option<PairingInput>> = keys
        .iter()
        .map(|k| {
            let s = all.iter().find(|s| &s.product.product_key == k)?;
            Some(PairingInput::of(s, enriched.get(k)))
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(got[0].as_ref().unwrap().material.as_deref(), Some("Wool"));
    assert!(got[1].as_ref().unwrap().enriched && got[1].as_ref().unwrap().material.is_none());
    assert!(!got[3].as_ref().unwrap().enriched);
}
