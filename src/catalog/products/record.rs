//! The product record: its key, its checking from one row's JSON object (rows are framed
//! by `feed`), its field limits and content hash, and the shapes the store keeps beside it
//! (enrichment, neighbour rows).
//!
//! A product is valid by construction: `Product::from_json` checks every field against
//! `limits`, so one bad row is reported with its line and never stops the rows around it.

use std::borrow::Cow;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::catalog::currency::{is_currency, CURRENCY_RULE};
use crate::jobs::DOT_SEGMENTS;

/// A product's key: 1–128 characters of `A-Z a-z 0-9 _ . : -`, not `.` or `..` (no URL names
/// those). Shared, not copied, when cloned: a pair keeps every key of a catalogue in each
/// state and listing it makes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ToSchema)]
#[schema(value_type = String)]
pub struct ProductKey(Arc<str>);

impl Serialize for ProductKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ProductKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(|k| Self(k.into()))
    }
}

impl ProductKey {
    pub fn parse(raw: &str) -> Result<Self, String> {
        let ok = (1..=limits::KEY).contains(&raw.len())
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'));
        if !ok {
            return Err("product_key must be 1–128 characters of A-Z a-z 0-9 _ . : -".into());
        }
        if DOT_SEGMENTS.contains(&raw) {
            return Err(format!(
                "product_key `{raw}` cannot be named in a URL (browsers and URL libraries \
                 resolve a `.` or `..` path segment away, escaped or not)"
            ));
        }
        Ok(Self(raw.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A product as a feed or an import gives it (a row with fields beyond these is refused).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Product {
    pub product_key: ProductKey,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brand: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_cents: Option<i64>,
    /// The currency `price_cents` is in (an active ISO 4217 code); without one, the
    /// service's `PRICE_CURRENCY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    /// Category path from the root; in CSV, `A > B > C`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taxonomy_path: Vec<String>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    #[schema(value_type = Object)]
    pub attributes: Map<String, Value>,
}

/// Field limits, checked at parse time for every entry point (sync, import). Counted in
/// characters, so a limit means the same in any script. Each is far above what a real
/// catalogue writes and far below what would let one row crowd out the rest.
pub mod limits {
    /// `product_key`: the longest key a URL path and a Redis field name carry comfortably.
    pub const KEY: usize = 128;
    /// `name`: a product title; a page shows a few hundred characters at most.
    pub const NAME: usize = 1_000;
    /// `brand`: a brand or maker's name.
    pub const BRAND: usize = 200;
    /// `description`: a product page's text.
    pub const DESCRIPTION: usize = 10_000;
    /// `taxonomy_path`: levels in a category tree (Google's has 7).
    pub const TAXONOMY_DEPTH: usize = 10;
    /// One `taxonomy_path` level's name.
    pub const TAXONOMY_SEGMENT: usize = 200;
    /// `attributes`: how many.
    pub const ATTRIBUTES: usize = 100;
    /// One attribute's name.
    pub const ATTRIBUTE_NAME: usize = 100;
    /// All attributes together, as JSON text, in bytes.
    pub const ATTRIBUTES_BYTES: usize = 16 * 1024;
}

/// A text field: trimmed of white space and control characters (NUL among them), absent when
/// nothing else is left, at most `max` characters.
fn text_field(field: &str, v: Option<Value>, max: usize) -> Result<Option<String>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => {
            let s = s.trim_matches(|c: char| c.is_whitespace() || c.is_control());
            if s.is_empty() {
                Ok(None)
            } else if s.chars().count() > max {
                Err(format!("{field} is longer than {max} characters"))
            } else {
                Ok(Some(s.to_owned()))
            }
        }
        Some(_) => Err(format!("{field} must be a string")),
    }
}

/// A currency: an active ISO 4217 code, as the standard writes it; `eur` is refused saying
/// what was meant, never guessed.
fn currency_field(v: Option<Value>) -> Result<Option<String>, String> {
    let Some(code) = text_field("currency", v, CURRENCY_MAX_CHARS)? else {
        return Ok(None);
    };
    if is_currency(&code) {
        return Ok(Some(code));
    }
    let meant = code.to_ascii_uppercase();
    let hint = if is_currency(&meant) {
        format!(" (did you mean {meant}?)")
    } else {
        String::new()
    };
    Err(format!("currency `{code}` is not {CURRENCY_RULE}{hint}"))
}

/// A currency text longer than this is refused without being echoed (a code has 3).
const CURRENCY_MAX_CHARS: usize = 16;

/// Why a key written as a number with a fraction or an exponent is refused.
const KEY_NOT_WHOLE: &str =
    "product_key must be a string or a whole number (write a key like 1e2 or 0.1 in quotes)";

fn key_field(v: Option<Value>) -> Result<ProductKey, String> {
    match v {
        Some(Value::String(s)) => ProductKey::parse(s.trim()),
        // A whole number is a key as its digits (feeds number their SKUs); a fraction or an
        // exponent has no one spelling (`1e2` would become `100.0`), so it is refused.
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => ProductKey::parse(&n.to_string()),
        Some(Value::Number(_)) => Err(KEY_NOT_WHOLE.into()),
        Some(_) => Err("product_key must be a string".into()),
        None => Err("product_key is required".into()),
    }
}

fn name_field(v: Option<Value>) -> Result<String, String> {
    match text_field("name", v, limits::NAME)? {
        Some(name) => Ok(name),
        None => Err("name is required and must not be empty".into()),
    }
}

const PRICE_RULE: &str =
    "price_cents must be a whole number of cents from 0 to 9223372036854775807";

/// A price in cents: a JSON whole number or its text. Anything that does not fit an i64
/// (1e400, 2^63) is an invalid value, never rounded and never dropped to null.
fn price_field(v: Option<Value>) -> Result<Option<i64>, String> {
    let cents = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => return Ok(None),
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) => price_text(s.trim()),
        Some(_) => return Err("price_cents must be a number".into()),
    };
    match cents {
        Some(c) if c >= 0 => Ok(Some(c)),
        _ => Err(PRICE_RULE.into()),
    }
}

/// A price's text: ASCII digits only, as a JSON number spells a price (leading zeros read as
/// usual: `"007"` is 7). `i64::from_str` alone would take a sign, so `"+5"` and `"-0"` — which
/// as JSON numbers are not a price (`+5` is no JSON, `-0` is refused) — would be stored 5 and 0.
fn price_text(s: &str) -> Option<i64> {
    match !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        true => s.parse().ok(),
        false => None,
    }
}

/// Refuses a field of more than `max` parts (`"taxonomy_path has more than 10 levels"`).
fn at_most(count: usize, max: usize, field: &str, parts: &str) -> Result<(), String> {
    match count > max {
        true => Err(format!("{field} has more than {max} {parts}")),
        false => Ok(()),
    }
}

fn taxonomy_field(v: Option<Value>) -> Result<Vec<String>, String> {
    let levels = match v {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => split_taxonomy(&s),
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
                _ => Err("taxonomy_path must be a list of non-empty strings".to_owned()),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("taxonomy_path must be a list of strings or \"A > B > C\"".into()),
    };
    at_most(
        levels.len(),
        limits::TAXONOMY_DEPTH,
        "taxonomy_path",
        "levels",
    )?;
    if levels
        .iter()
        .any(|l| l.chars().count() > limits::TAXONOMY_SEGMENT)
    {
        return Err(format!(
            "a taxonomy_path level is longer than {} characters",
            limits::TAXONOMY_SEGMENT
        ));
    }
    Ok(levels)
}

fn attributes_field(v: Option<Value>) -> Result<Map<String, Value>, String> {
    let not_object = || "attributes must be a JSON object".to_owned();
    let attributes = match v {
        None | Some(Value::Null) => return Ok(Map::new()),
        Some(Value::Object(m)) => m,
        Some(Value::String(s)) if s.trim().is_empty() => return Ok(Map::new()),
        Some(Value::String(s)) => match crate::strict_json::parse(s.as_bytes()) {
            Ok(Value::Object(m)) => m,
            Err(e @ crate::strict_json::StrictJsonError::DuplicateKey(_)) => {
                return Err(format!("attributes: {e}"))
            }
            _ => return Err(not_object()),
        },
        Some(_) => return Err(not_object()),
    };
    at_most(
        attributes.len(),
        limits::ATTRIBUTES,
        "attributes",
        "entries",
    )?;
    if attributes
        .keys()
        .any(|k| k.trim().is_empty() || k.chars().count() > limits::ATTRIBUTE_NAME)
    {
        return Err(format!(
            "an attribute name is empty or longer than {} characters",
            limits::ATTRIBUTE_NAME
        ));
    }
    let size = serde_json::to_string(&attributes)
        .expect("a JSON map always serialises")
        .len();
    if size > limits::ATTRIBUTES_BYTES {
        return Err(format!(
            "attributes take more than {} KiB as JSON",
            limits::ATTRIBUTES_BYTES / 1024
        ));
    }
    Ok(attributes)
}

impl Product {
    /// Checks and builds a product from a JSON object (a JSON Lines row, an array element,
    /// or a CSV row turned into an object). The message says what to fix.
    pub fn from_json(value: Value) -> Result<Self, String> {
        let Value::Object(mut obj) = value else {
            return Err("a product must be a JSON object".into());
        };
        let product = Self {
            product_key: key_field(obj.remove("product_key"))?,
            name: name_field(obj.remove("name"))?,
            description: text_field(
                "description",
                obj.remove("description"),
                limits::DESCRIPTION,
            )?,
            brand: text_field("brand", obj.remove("brand"), limits::BRAND)?,
            price_cents: price_field(obj.remove("price_cents"))?,
            currency: currency_field(obj.remove("currency"))?,
            taxonomy_path: taxonomy_field(obj.remove("taxonomy_path"))?,
            attributes: attributes_field(obj.remove("attributes"))?,
        };
        if let Some(other) = obj.keys().next() {
            return Err(format!("`{other}` is not a product field"));
        }
        Ok(product)
    }

    /// A stable hash of everything a product says (FNV-1a over its canonical JSON), so an
    /// unchanged product is recognised on re-import and skipped by enrichment.
    pub fn content_hash(&self) -> String {
        let canonical = serde_json::to_string(self).expect("a product always serialises");
        format!("{:016x}", fnv1a(FNV_OFFSET, canonical.as_bytes()))
    }

    pub fn top_category(&self) -> Option<&str> {
        self.taxonomy_path.first().map(String::as_str)
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a of `bytes`, continuing from `h`.
fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// FNV-1a of `bytes`: the stable fingerprint both stores take of a stored record.
pub fn fingerprint(bytes: &[u8]) -> u64 {
    fnv1a(FNV_OFFSET, bytes)
}

/// A product's version as both stores compute it: the fingerprints of its content hash and
/// of the encoded record of what enrichment found for it (as the store keeps it), mixed.
/// It changes whenever either does.
pub fn version(content_hash: u64, enrichment: Option<u64>) -> u64 {
    match enrichment {
        Some(e) => content_hash ^ e.rotate_left(29).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        None => content_hash,
    }
}

/// `"Apparel > T-Shirts"` → `["Apparel", "T-Shirts"]`.
pub fn split_taxonomy(raw: &str) -> Vec<String> {
    raw.split('>')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A product as stored: the imported fields and the hash of its content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = StoredProduct)]
pub struct Stored {
    #[serde(flatten)]
    pub product: Product,
    pub content_hash: String,
}

/// What enrichment found for a product, and for which version of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Enrichment {
    /// The content hash the attributes were extracted from.
    pub content_hash: String,
    pub attributes: Map<String, Value>,
    pub unextractable: bool,
}

/// One row of the neighbour table: a key and a score, nothing more. The product view joins
/// the neighbour's name when it is read, so the table stays as small as keys and scores
/// need. A row that carries more (a `name`) reads the same: extra fields are ignored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Neighbour {
    pub product_key: ProductKey,
    pub score: f64,
}

/// What pairing reads of a product: the text its identity is made of, what decides which
/// products it may be compared with (category, price), and its tie-break (material).
#[derive(Clone, Debug, PartialEq)]
pub struct PairingInput {
    pub product_key: ProductKey,
    pub name: String,
    pub brand: Option<String>,
    /// The top-level category, as written.
    pub category: Option<String>,
    pub price_cents: Option<i64>,
    /// Enrichment has seen the product: its name's variant words are not its identity.
    pub enriched: bool,
    /// The material enrichment found.
    pub material: Option<String>,
}

impl PairingInput {
    pub fn of(stored: &Stored, enrichment: Option<&Enrichment>) -> Self {
        let p = &stored.product;
        Self {
            product_key: p.product_key.clone(),
            name: p.name.clone(),
            brand: p.brand.clone(),
            category: p.top_category().map(str::to_owned),
            price_cents: p.price_cents,
            enriched: enrichment.is_some(),
            material: enrichment
                .and_then(|e| e.attributes.get("material"))
                .and_then(Value::as_str)
                .map(str::to_owned),
        }
    }

    /// Product `key`'s pairing input from its stored record's JSON and its enrichment's:
    /// what `of` makes of them decoded whole, decoding only what it reads (both stores keep
    /// records as this JSON).
    pub fn from_json(
        key: &ProductKey,
        product: &[u8],
        enrichment: Option<&[u8]>,
    ) -> serde_json::Result<Self> {
        let p: PairingFields<'_> = serde_json::from_slice(product)?;
        let material = match enrichment {
            Some(e) => match serde_json::from_slice::<EnrichedFields>(e)?
                .attributes
                .material
            {
                Some(Value::String(m)) => Some(m),
                _ => None,
            },
            None => None,
        };
        Ok(Self {
            product_key: key.clone(),
            name: p.name.into_owned(),
            brand: p.brand.map(Cow::into_owned),
            category: p.taxonomy_path.into_iter().next().map(Cow::into_owned),
            price_cents: p.price_cents,
            enriched: enrichment.is_some(),
            material,
        })
    }
}

/// What pairing reads of a product's JSON, borrowed from it where no escape is undone:
/// the other fields are skipped, not made (`Stored`'s flattened decode makes every field and
/// attribute, a dozen allocations a product in a heap a full pair left fragmented).
#[derive(Deserialize)]
struct PairingFields<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow)]
    brand: Option<Cow<'a, str>>,
    #[serde(default)]
    price_cents: Option<i64>,
    #[serde(default, borrow)]
    taxonomy_path: Vec<Cow<'a, str>>,
}

/// What pairing reads of an enrichment's JSON: its material (any JSON value, as an
/// enrichment's attribute may be; only a string is a material).
#[derive(Deserialize)]
struct EnrichedFields {
    #[serde(default)]
    attributes: Material,
}

/// An enrichment's attributes as pairing reads them: the material alone.
#[derive(Default, Deserialize)]
struct Material {
    #[serde(default)]
    material: Option<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_name_of_only_white_space_or_control_characters_is_empty_and_edges_are_trimmed() {
        for blank in ["   ", "\u{0}\u{0}", "\t\u{7}\r\n", "\u{0} \u{1f}"] {
            let row = json!({"product_key": "k", "name": blank});
            assert_eq!(
                Product::from_json(row).unwrap_err(),
                "name is required and must not be empty",
                "{blank:?}"
            );
        }
        let row = json!({"product_key": "k", "name": "\u{0} Red\u{0}Mug \u{7}"});
        assert_eq!(Product::from_json(row).unwrap().name, "Red\u{0}Mug");
    }

    #[test]
    fn a_price_as_text_is_its_digits_alone_as_a_json_number_would_be() {
        let price = |v: Value| price_field(Some(v));
        for (text, cents) in [("250", 250), (" 250 ", 250), ("007", 7), ("0", 0)] {
            assert_eq!(price(json!(text)), Ok(Some(cents)), "{text:?}");
        }
        assert_eq!(price(json!("  ")), Ok(None));
        for text in ["-0", "+5", "-5", "+0", "2 5", "5.0", "1e2", "0x10", "٣"] {
            assert_eq!(price(json!(text)), Err(PRICE_RULE.into()), "{text:?}");
        }
        let negative_zero: Value = serde_json::from_str("-0").expect("-0 is JSON");
        assert_eq!(price(negative_zero), Err(PRICE_RULE.into()));
    }
}
