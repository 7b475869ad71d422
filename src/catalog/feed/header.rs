//! The names a feed gives its fields — a CSV header, or the keys of a JSON feed's first row —
//! checked once, before any row is read as a product. A header that lacks a required field
//! or misnames one (`price` for `price_cents`) would make every row invalid; it is one
//! feed-level error naming the columns and what they may have meant, not a row error a line.

use crate::nearest::near_miss;

/// Every field a product row may give: `Product::from_json` reads exactly these (a unit test
/// holds the two together).
pub const PRODUCT_FIELDS: [&str; 8] = [
    "product_key",
    "name",
    "brand",
    "description",
    "price_cents",
    "currency",
    "taxonomy_path",
    "attributes",
];
/// The fields every product must give.
pub const REQUIRED_FIELDS: [&str; 2] = ["product_key", "name"];

/// Where a feed's names come from, which decides how much of them is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Names {
    /// A CSV header names every row's fields: it must name each required field.
    CsvHeader,
    /// A JSON feed's first row: other rows may differ, so only a row that names no required
    /// field at all, or misnames one, speaks for the feed.
    FirstJsonRow,
}

/// Why `names` cannot be a product's fields, in one sentence; `None` when they can.
/// Names other than near misses are left to the rows (an unknown field with a value makes
/// its row invalid; an empty CSV cell is no field at all).
pub(super) fn refusal(names: &[String], source: Names) -> Option<String> {
    let named = |field: &str| names.iter().any(|n| n == field);
    let unnamed: Vec<&str> = PRODUCT_FIELDS.into_iter().filter(|f| !named(f)).collect();
    let misnamed: Vec<(&str, &str)> = names
        .iter()
        .filter(|n| !n.is_empty() && !PRODUCT_FIELDS.contains(&n.as_str()))
        .filter_map(|n| near_miss(n, &unnamed).map(|meant| (n.as_str(), meant)))
        .collect();
    let missing: Vec<&str> = REQUIRED_FIELDS
        .into_iter()
        .filter(|f| !named(f) && !misnamed.iter().any(|(_, meant)| meant == f))
        .collect();
    let lacks_required = match source {
        Names::CsvHeader => !missing.is_empty(),
        Names::FirstJsonRow => REQUIRED_FIELDS.iter().all(|f| !named(f)),
    };
    if misnamed.is_empty() && !lacks_required {
        return None;
    }
    let mut faults: Vec<String> = misnamed
        .iter()
        .map(|(name, meant)| format!("`{name}` is not a product field (did you mean `{meant}`?)"))
        .collect();
    faults.extend(missing.iter().map(|f| format!("`{f}` is required")));
    let (what, listed) = match source {
        Names::CsvHeader => ("the CSV header", "it names"),
        Names::FirstJsonRow => ("the first row", "its keys are"),
    };
    Some(format!(
        "{what} does not name a product's fields: {}; {listed} {}; a product's fields are {} (required: {})",
        faults.join(", "),
        quoted(names.iter().map(String::as_str)),
        quoted(PRODUCT_FIELDS.into_iter()),
        quoted(REQUIRED_FIELDS.into_iter()),
    ))
}

fn quoted<'a>(names: impl Iterator<Item = &'a str>) -> String {
    names
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::catalog::products::Product;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_product_fields_are_the_ones_a_product_row_is_read_with() {
        let row = json!({
            "product_key": "k1", "name": "A Mug", "brand": "Fjord", "description": "Stoneware",
            "price_cents": 1300, "currency": "NOK", "taxonomy_path": ["Home"], "attributes": {"colour": "cream"},
        });
        let Value::Object(row) = row else {
            unreachable!("a JSON object")
        };
        let keys: Vec<&str> = row.keys().map(String::as_str).collect();
        assert_eq!(keys, PRODUCT_FIELDS, "one field of each");
        assert!(Product::from_json(Value::Object(row.clone())).is_ok());
        for required in REQUIRED_FIELDS {
            let mut without = row.clone();
            without.remove(required);
            assert!(
                Product::from_json(Value::Object(without)).is_err(),
                "{required}"
            );
        }
        let mut extra = row;
        extra.insert("colour".into(), "red".into());
        assert!(Product::from_json(Value::Object(extra)).is_err());
    }

    #[test]
    fn near_misses_of_product_fields_find_the_field_they_meant_and_other_names_find_none() {
        let meant: [(&str, &[&str]); 6] = [
            ("price_cents", &["price", "Price-Cents"]),
            ("product_key", &["productKey", "key", "prodcut_key"]),
            ("description", &["desc"]),
            ("name", &["nmae", "product_name"]),
            ("brand", &["brands"]),
            ("taxonomy_path", &["taxonomy"]),
        ];
        for (field, typed) in meant {
            for t in typed {
                assert_eq!(near_miss(t, &PRODUCT_FIELDS), Some(field), "{t:?}");
            }
        }
        for typed in ["attrs", "sku", "color", "image", "id"] {
            assert_eq!(near_miss(typed, &PRODUCT_FIELDS), None, "{typed:?}");
        }
    }

    /// The names a feed gives, where they come from, and the parts its refusal must say
    /// (`None`: accepted).
    type Case = (
        &'static [&'static str],
        Names,
        Option<&'static [&'static str]>,
    );

    #[test]
    fn a_header_is_refused_for_a_near_miss_or_a_missing_required_field_and_says_what_it_meant() {
        let cases: [Case; 9] = [
            (
                &["product_key", "name", "price_cents"],
                Names::CsvHeader,
                None,
            ),
            (
                &["product_key", "name", "colour", ""],
                Names::CsvHeader,
                None,
            ),
            (
                &["product_key", "name", "price"],
                Names::CsvHeader,
                Some(&["`price` is not a product field (did you mean `price_cents`?)"]),
            ),
            (
                &["sku", "name"],
                Names::CsvHeader,
                Some(&["`product_key` is required", "it names `sku`, `name`"]),
            ),
            (
                &["key", "title"],
                Names::CsvHeader,
                Some(&["did you mean `product_key`?", "`name` is required"]),
            ),
            (
                &["product_key"],
                Names::CsvHeader,
                Some(&["`name` is required"]),
            ),
            (&["product_key"], Names::FirstJsonRow, None),
            (
                &["sku", "title"],
                Names::FirstJsonRow,
                Some(&[
                    "the first row",
                    "`product_key` is required",
                    "`name` is required",
                ]),
            ),
            (
                &["product_key", "name", "Price"],
                Names::FirstJsonRow,
                Some(&["`Price` is not a product field (did you mean `price_cents`?)"]),
            ),
        ];
        for (given, source, says) in cases {
            let refusal = refusal(&names(given), source);
            match (says, &refusal) {
                (None, None) => {}
                (Some(parts), Some(message)) => {
                    for part in parts {
                        assert!(message.contains(part), "{given:?}: {message}");
                    }
                }
                _ => panic!("{given:?} ({source:?}): {refusal:?}"),
            }
        }
    }
}
