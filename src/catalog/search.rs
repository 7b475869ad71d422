//! Product search (`GET /catalog/products?q=…`): a product matches when its key starts with
//! the query (case-insensitively), or when every word of the query is a word of its name —
//! words read by the catalogue's own tokenizer (`extract::name_words`: lowercased, hyphenated
//! words joined, stop words out) and folded to the singular (`tokens::fold`), with adjacent
//! name words also read joined, so "t-shirts" finds "T Shirt" and "T-Shirt".
//!
//! Cost: there is no index; a search walks the tenant's products through the store's own
//! paging, in chunks, and stops when the page is full or after [`SCAN_BUDGET`] products,
//! answering what it found and a cursor to go on. On 100k products a search that finds
//! nothing reads them all once (one chunk per round trip, about a second on Redis); a page
//! of common words stops early. Its cursor names the last product examined, so following it
//! finds a product at most once, and every match there throughout exactly once, however
//! writes change the catalogue between pages.

use super::extract::name_words;
use super::products::{CatalogStore, CatalogStoreError, Product, ProductKey, Stored};
use super::tokens::fold;
use crate::jobs::TenantId;

/// The longest query: longer than any product name worth typing, short enough that a
/// query never costs more than the products it is compared with.
pub const MAX_QUERY_CHARS: usize = 200;
/// Products read from the store per round trip while searching.
const SEARCH_CHUNK: usize = 500;
/// Products one request examines at most: a search that found less than a page by then
/// answers it with a cursor, so no request reads an unbounded catalogue.
pub const SCAN_BUDGET: usize = 100_000;
/// Joins a cursor's two parts: the store's cursor of the chunk to read again, and the key
/// of the last product examined in it (a key never contains it).
const CURSOR_SEPARATOR: char = '~';

/// A parsed search query.
#[derive(Debug)]
pub struct ProductQuery {
    lower: String,
    words: Vec<String>,
}

impl ProductQuery {
    /// The query, or why it cannot be one (empty, or longer than [`MAX_QUERY_CHARS`]).
    pub fn parse(raw: &str) -> Result<Self, String> {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Err("q must not be empty".to_owned());
        }
        if trimmed.chars().count() > MAX_QUERY_CHARS {
            return Err(format!("q is at most {MAX_QUERY_CHARS} characters"));
        }
        Ok(Self {
            lower: trimmed.to_lowercase(),
            words: name_words(trimmed).iter().map(|w| fold(w)).collect(),
        })
    }

    /// Whether `product` is one this query finds.
    pub fn matches(&self, product: &Product) -> bool {
        if product
            .product_key
            .as_str()
            .to_lowercase()
            .starts_with(&self.lower)
        {
            return true;
        }
        if self.words.is_empty() {
            return false;
        }
        let terms = name_terms(&product.name);
        self.words.iter().all(|w| terms.contains(w))
    }
}

/// A name's words, folded, and each pair of adjacent words joined ("T Shirt" → `t`,
/// `shirt`, `tshirt`).
fn name_terms(name: &str) -> Vec<String> {
    let words: Vec<String> = name_words(name).iter().map(|w| fold(w)).collect();
    let joined: Vec<String> = words
        .windows(2)
        .map(|pair| fold(&format!("{}{}", pair[0], pair[1])))
        .collect();
    words.into_iter().chain(joined).collect()
}

/// A page of at most `limit` of the tenant's products the query finds, in key order (the
/// store's page order), and the cursor of the next (None once every product was examined).
///
/// A page that ends inside a chunk resumes by reading that chunk again and passing over the
/// keys up to the last one examined, not a count of them: a count points elsewhere once a
/// write adds or removes a key of the chunk before it (the next page then showed a product
/// again, or skipped one). The store's pages come in key order, so a key at or before the
/// last examined one was examined already, or was written since.
pub fn search(
    store: &dyn CatalogStore,
    tenant: &TenantId,
    query: &ProductQuery,
    limit: usize,
    cursor: Option<&str>,
) -> Result<(Vec<Stored>, Option<String>), CatalogStoreError> {
    let (mut inner, after) = decode(cursor)?;
    let examined_already = |s: &Stored| after.as_ref().is_some_and(|k| s.product.product_key <= *k);
    let mut found = Vec::new();
    let mut examined = 0;
    loop {
        let (chunk, next) = store.page(tenant, SEARCH_CHUNK, inner.as_deref())?;
        let len = chunk.len();
        for (i, stored) in chunk.into_iter().enumerate() {
            if examined_already(&stored) {
                continue;
            }
            examined += 1;
            if !query.matches(&stored.product) {
                continue;
            }
            let key = stored.product.product_key.clone();
            found.push(stored);
            if found.len() == limit {
                let resume = match i + 1 < len {
                    true => Some(encode(inner.as_deref(), Some(&key))),
                    false => next.as_deref().map(|n| encode(Some(n), None)),
                };
                return Ok((found, resume));
            }
        }
        let Some(next) = next else {
            return Ok((found, None));
        };
        if examined >= SCAN_BUDGET {
            return Ok((found, Some(encode(Some(&next), None))));
        }
        inner = Some(next);
    }
}

/// `<the chunk's store cursor>~<the last key examined>`, either part empty when there is
/// none (the first chunk; a chunk not yet begun).
fn encode(inner: Option<&str>, last: Option<&ProductKey>) -> String {
    format!(
        "{}{CURSOR_SEPARATOR}{}",
        inner.unwrap_or(""),
        last.map_or("", |k| k.as_str())
    )
}

/// The store's cursor of the chunk and the last key examined. The store checks its own part:
/// a cursor of the count-based form before (`<count>~<store cursor>`) names a count where
/// the store's cursor goes, which neither store hands out.
fn decode(cursor: Option<&str>) -> Result<(Option<String>, Option<ProductKey>), CatalogStoreError> {
    let Some(raw) = cursor else {
        return Ok((None, None));
    };
    let (inner, last) = raw
        .rsplit_once(CURSOR_SEPARATOR)
        .ok_or(CatalogStoreError::BadCursor)?;
    let last = match last {
        "" => None,
        key => Some(ProductKey::parse(key).map_err(|_| CatalogStoreError::BadCursor)?),
    };
    Ok(((!inner.is_empty()).then(|| inner.to_owned()), last))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn product(key: &str, name: &str) -> Product {
        Product::from_json(serde_json::json!({"product_key": key, "name": name})).unwrap()
    }

    #[test]
    fn every_query_word_must_be_a_word_of_the_name_read_as_the_catalogue_reads_it() {
        let q = ProductQuery::parse("t-shirts").unwrap();
        assert!(q.matches(&product("p1", "T Shirt Blue")));
        assert!(q.matches(&product("p2", "Organic T-Shirt")));
        assert!(!q.matches(&product("p3", "Shirt")));
        let q = ProductQuery::parse("BLUE shirt").unwrap();
        assert!(q.matches(&product("p1", "T Shirt Blue")));
        assert!(!q.matches(&product("p4", "Blue Jeans")));
    }

    #[test]
    fn a_key_prefix_matches_case_insensitively() {
        let q = ProductQuery::parse("SKU-12").unwrap();
        assert!(q.matches(&product("sku-123", "Anything")));
        assert!(!q.matches(&product("xsku-123", "Anything")));
        assert_eq!(ProductKey::parse("sku-123").unwrap().as_str(), "sku-123");
    }

    #[test]
    fn empty_and_overlong_queries_are_refused() {
        assert!(ProductQuery::parse("   ").is_err());
        assert!(ProductQuery::parse(&"é".repeat(MAX_QUERY_CHARS)).is_ok());
        assert!(ProductQuery::parse(&"é".repeat(MAX_QUERY_CHARS + 1)).is_err());
    }

    #[test]
    fn cursors_this_search_did_not_hand_out_are_refused() {
        for bad in ["", "x", "key:a", "key:a~a b", "key:a~.."] {
            assert!(decode(Some(bad)).is_err(), "{bad}");
        }
        let key = |k: &str| Some(ProductKey::parse(k).unwrap());
        assert_eq!(
            decode(Some("key:a~b-1")).unwrap(),
            (Some("key:a".to_owned()), key("b-1"))
        );
        assert_eq!(decode(Some("~b-1")).unwrap(), (None, key("b-1")));
        assert_eq!(
            decode(Some("key:a~")).unwrap(),
            (Some("key:a".to_owned()), None)
        );
        let handed_out = encode(Some("1f2e3d4c:a~b"), key("c").as_ref());
        assert_eq!(
            decode(Some(&handed_out)).unwrap(),
            (Some("1f2e3d4c:a~b".to_owned()), key("c")),
            "a store cursor holding the separator is kept whole"
        );
    }
}
