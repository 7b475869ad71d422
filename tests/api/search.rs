//! Product search (`GET /catalog/products?tenant_id=T&q=…`) on both catalogue stores: key
//! prefixes and name words read by the catalogue's tokenizer, hostile names returned as the
//! data they are, bounded queries, and paging that finds every match once.

use std::collections::BTreeSet;

use catalog_jobs::catalog::products::{Product, ProductKey};
use catalog_jobs::catalog::search::{search, ProductQuery, MAX_QUERY_CHARS};
use catalog_jobs::jobs::fence::Unfenced;
use catalog_jobs::jobs::TenantId;
use serde_json::{json, Value};

use crate::both_stores;
use crate::helpers::{demo_catalog, spawn_catalog_app, store_pages, tenant, test_config};
use crate::helpers::{Backend, TestApp};

both_stores!(
    search_finds_key_prefixes_and_every_name_word_and_returns_hostile_names_verbatim,
    search_pages_find_every_match_once_and_nothing_else,
    search_pages_find_a_match_at_most_once_while_writes_land_between_them,
    a_blank_or_overlong_query_or_a_cursor_it_did_not_hand_out_is_422,
);

const HOSTILE: &str = "<img src=x onerror=alert(1)> Mug";

/// The catalogue app with five products, one with a hostile name, for a new tenant.
async fn five_products(b: Backend) -> (TestApp, TenantId) {
    let app = spawn_catalog_app(b, test_config()).await;
    let t = tenant();
    let rows = json!([
        {"product_key": "sku-100", "name": "T Shirt Blue"},
        {"product_key": "sku-200", "name": "Organic T-Shirts"},
        {"product_key": "mug-1", "name": HOSTILE},
        {"product_key": "creme-1", "name": "Crème Brûlée Torch \"pro\" & co"},
        {"product_key": "lamp-1", "name": "Лампа настольная ✓ Lamp"},
    ]);
    let r = app
        .import(t.as_str(), "application/json", rows.to_string())
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    (app, t)
}

/// Searches the tenant's products for `q` (with more parameters, if any), as a client
/// would: the answer.
async fn search_for(app: &TestApp, t: &TenantId, query: &[(&str, &str)]) -> reqwest::Response {
    app.client
        .get(app.url(&format!("/catalog/products?tenant_id={t}")))
        .query(query)
        .send()
        .await
        .unwrap()
}

/// The keys found for `q`, sorted, and the page they came on.
async fn found(app: &TestApp, t: &TenantId, q: &str) -> (Vec<String>, Value) {
    let r = search_for(app, t, &[("q", q)]).await;
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

/// (query, the keys it finds, why)
const QUERIES: &[(&str, &[&str], &str)] = &[
    (
        "t-shirts",
        &["sku-100", "sku-200"],
        "a word, written differently",
    ),
    ("BLUE shirt", &["sku-100"], "words in any case and order"),
    ("SKU-2", &["sku-200"], "a key prefix"),
    ("crème torch", &["creme-1"], "accented words"),
    ("ЛАМПА", &["lamp-1"], "unicode folds case"),
    ("mug", &["mug-1"], "a word of a hostile name"),
    (
        "<script>alert(1)</script>",
        &[],
        "markup is words like any other",
    ),
    ("shirt torch", &[], "every word must match"),
];

async fn search_finds_key_prefixes_and_every_name_word_and_returns_hostile_names_verbatim(
    b: Backend,
) {
    let (app, t) = five_products(b).await;
    for &(q, keys, why) in QUERIES {
        assert_eq!(found(&app, &t, q).await.0, keys, "{q}: {why}");
    }
    let (_, page) = found(&app, &t, "mug").await;
    assert_eq!(
        page["products"][0]["name"], HOSTILE,
        "a hostile name is data: returned as stored, in JSON"
    );
    let (_, page) = found(&app, &t, "<script>alert(1)</script>").await;
    assert_eq!(page["next_cursor"], Value::Null);
}

async fn a_blank_or_overlong_query_or_a_cursor_it_did_not_hand_out_is_422(b: Backend) {
    let (app, t) = five_products(b).await;
    for bad in [
        String::new(),
        "  ".to_owned(),
        "x".repeat(MAX_QUERY_CHARS + 1),
    ] {
        let r = search_for(&app, &t, &[("q", bad.as_str())]).await;
        assert_eq!(r.status(), 422, "q={bad:?}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "invalid_field");
        assert_eq!(body["field"], "q");
    }
    // Made up, and of the form before cursors named the last key examined (a count of the
    // chunk's products examined, then the store's cursor).
    for cursor in ["garbage", "0~", "3~0badc0de:sku-100", "3~key:sku-100"] {
        let r = search_for(&app, &t, &[("q", "mug"), ("cursor", cursor)]).await;
        assert_eq!(
            r.status(),
            422,
            "a cursor the search did not hand out: {cursor}"
        );
    }
}

/// More products than one chunk of the search, so paging crosses the store's pages.
const SEARCHED_PRODUCTS: usize = 1_300;

async fn search_pages_find_every_match_once_and_nothing_else(b: Backend) {
    let (store, t, products) = demo_catalog(b, SEARCHED_PRODUCTS, 11).await;
    tokio::task::spawn_blocking(move || {
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
            for page in store_pages(|cursor| search(&*store, &t, &query, limit, cursor)) {
                assert!(page.len() <= limit);
                for s in page {
                    let key = s.product.product_key.as_str().to_owned();
                    assert!(seen.insert(key.clone()), "limit {limit}: {key} twice");
                }
            }
            assert_eq!(seen, expected, "limit {limit}");
        }
    })
    .await
    .unwrap();
}

/// Paging a search with limit=5 through 1,300 products while writes land between every two
/// pages inside the key range just searched (what an import racing a client does): after
/// one page, two new matches are written between its first and last key; after the next,
/// its first two products are removed. No match is found twice, and every match there
/// throughout is found. Before the cursor named the last key examined, it counted the
/// products of its chunk already examined, so the next page showed a product again after
/// the writes, and skipped two after the removal.
async fn search_pages_find_a_match_at_most_once_while_writes_land_between_them(b: Backend) {
    let (store, t, products) = demo_catalog(b, SEARCHED_PRODUCTS, 11).await;
    tokio::task::spawn_blocking(move || {
        let word = products[0].name.split_whitespace().next().unwrap();
        let query = ProductQuery::parse(word).unwrap();
        let matches = |p: &&Product| query.matches(p);
        let mut expected: BTreeSet<String> = products
            .iter()
            .filter(matches)
            .map(|p| p.product_key.as_str().to_owned())
            .collect();
        assert!(expected.len() > 40, "{word}: {} matches", expected.len());
        let (mut seen, mut cursor, mut pages) = (BTreeSet::new(), None::<String>, 0);
        loop {
            let (page, next) = search(&*store, &t, &query, 5, cursor.as_deref()).unwrap();
            pages += 1;
            for s in &page {
                let key = s.product.product_key.as_str().to_owned();
                assert!(seen.insert(key.clone()), "page {pages}: {key} found again");
            }
            let keys: Vec<&ProductKey> = page.iter().map(|s| &s.product.product_key).collect();
            if keys.len() >= 2 && pages % 2 == 1 {
                let written: Vec<Product> = ["a", "b"]
                    .iter()
                    .map(|suffix| Product {
                        product_key: ProductKey::parse(&format!("{}.{suffix}", keys[0].as_str()))
                            .unwrap(),
                        ..page[0].product.clone()
                    })
                    .collect();
                store.upsert(&t, &written, &Unfenced).unwrap();
            } else if keys.len() >= 2 {
                let gone = [keys[0].clone(), keys[1].clone()];
                assert_eq!(store.remove(&t, &gone).unwrap(), 2);
                gone.iter()
                    .for_each(|k| assert!(expected.remove(k.as_str())));
            }
            match next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let missed: Vec<&String> = expected.difference(&seen).collect();
        assert!(
            missed.is_empty(),
            "{} matches there throughout not found over {pages} pages: {:?}",
            missed.len(),
            &missed[..missed.len().min(5)]
        );
        let written = seen.iter().filter(|k| k.contains('.')).count();
        assert_eq!(written, 0, "a match written before the cursor is not found");
    })
    .await
    .unwrap();
}
