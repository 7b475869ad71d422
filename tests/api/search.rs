//! Product search (`GET /catalog/products?tenant_id=T&q=…`) on both catalogue stores: key
//! prefixes and name words read by the catalogue's tokenizer, hostile names returned as the
//! data they are, bounded queries, and paging that finds every match once.

use std::collections::BTreeSet;

use catalog_jobs::catalog::demo;
use catalog_jobs::catalog::search::{search, ProductQuery, MAX_QUERY_CHARS};
use serde_json::{json, Value};

use crate::both_stores;
use crate::helpers::{catalog_store, spawn_catalog_app, tenant, test_config, Backend};

both_stores!(
    search_finds_key_prefixes_and_every_name_word_and_returns_hostile_names_verbatim,
    search_pages_find_every_match_once_and_nothing_else,
);

const HOSTILE: &str = "<img src=x onerror=alert(1)> Mug";

async fn search_finds_key_prefixes_and_every_name_word_and_returns_hostile_names_verbatim(
    b: Backend,
) {
    let app = spawn_catalog_app(b, test_config()).await;
    let t = tenant();
    let url = app.url(&format!("/catalog/products?tenant_id={t}"));
    let rows = json!([
        {"product_key": "sku-100", "name": "T Shirt Blue"},
        {"product_key": "sku-200", "name": "Organic T-Shirts"},
        {"product_key": "mug-1", "name": HOSTILE},
        {"product_key": "creme-1", "name": "Crème Brûlée Torch \"pro\" & co"},
        {"product_key": "lamp-1", "name": "Лампа настольная ✓ Lamp"},
    ]);
    let r = app.client.post(&url).json(&rows).send().await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let found = |q: &str| {
        let c = app.client.clone();
        let url = url.clone();
        let q = q.to_owned();
        async move {
            let r = c
                .get(&url)
                .query(&[("q", q.as_str())])
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "q={q}");
            let page: Value = r.json().await.unwrap();
            let mut keys: Vec<String> = page["products"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["product_key"].as_str().unwrap().to_owned())
                .collect();
            keys.sort();
            (keys, page)
        }
    };
    assert_eq!(found("t-shirts").await.0, vec!["sku-100", "sku-200"]);
    assert_eq!(found("BLUE shirt").await.0, vec!["sku-100"]);
    assert_eq!(found("SKU-2").await.0, vec!["sku-200"], "a key prefix");
    assert_eq!(found("crème torch").await.0, vec!["creme-1"]);
    assert_eq!(found("ЛАМПА").await.0, vec!["lamp-1"], "unicode folds case");
    let (keys, page) = found("mug").await;
    assert_eq!(keys, vec!["mug-1"]);
    assert_eq!(
        page["products"][0]["name"], HOSTILE,
        "a hostile name is data: returned as stored, in JSON"
    );
    let (keys, page) = found("<script>alert(1)</script>").await;
    assert!(keys.is_empty());
    assert_eq!(page["next_cursor"], Value::Null);
    assert!(
        found("shirt torch").await.0.is_empty(),
        "every word must match"
    );

    for bad in [
        String::new(),
        "  ".to_owned(),
        "x".repeat(MAX_QUERY_CHARS + 1),
    ] {
        let r = app
            .client
            .get(&url)
            .query(&[("q", bad.as_str())])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 422, "q={bad:?}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "invalid_field");
        assert_eq!(body["field"], "q");
    }
    let r = app
        .client
        .get(&url)
        .query(&[("q", "mug"), ("cursor", "garbage")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422, "a cursor the search did not hand out");
}

/// More products than one chunk of the search, so paging crosses the store's pages.
const SEARCHED_PRODUCTS: usize = 1_300;

async fn search_pages_find_every_match_once_and_nothing_else(b: Backend) {
    let store = catalog_store(b);
    let t = tenant();
    let products = demo::generate(SEARCHED_PRODUCTS, 11);
    tokio::task::spawn_blocking(move || {
        store.upsert(&t, &products).unwrap();
        let word = products[0]
            .name
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned();
        let query = ProductQuery::parse(&word).unwrap();
        let expected: BTreeSet<String> = products
            .iter()
            .filter(|p| query.matches(p))
            .map(|p| p.product_key.as_str().to_owned())
            .collect();
        assert!(expected.len() > 20, "{word}: {} matches", expected.len());
        assert!(
            expected.len() < SEARCHED_PRODUCTS,
            "{word} matches something, not all"
        );
        for limit in [1, 7, 500] {
            let mut seen = BTreeSet::new();
            let mut cursor: Option<String> = None;
            loop {
                let (page, next) = search(&*store, &t, &query, limit, cursor.as_deref()).unwrap();
                assert!(page.len() <= limit);
                for s in page {
                    let key = s.product.product_key.as_str().to_owned();
                    assert!(seen.insert(key.clone()), "limit {limit}: {key} twice");
                }
                match next {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
            assert_eq!(seen, expected, "limit {limit}");
        }
    })
    .await
    .unwrap();
}
