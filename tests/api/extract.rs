//! The attribute extractor, table-driven: every title states exactly what it should yield,
//! tricky negatives included (an empty object means "nothing to extract").

use catalog_jobs::catalog::extract::extract;
use serde_json::{json, Map, Value};

fn case(title: &str) -> Value {
    Value::Object(extract(title, None, &Map::new()))
}

/// Each title and exactly what it should yield: `title<TAB>json` lines, `#` comments.
const TITLES: &str = include_str!("../data/extract_titles.tsv");

/// The table's cases: each title and the JSON it should yield.
fn titles() -> Vec<(&'static str, Value)> {
    TITLES
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let (title, expected) = line.split_once('\t').expect("a title, a tab, its JSON");
            let expected = serde_json::from_str(expected)
                .unwrap_or_else(|e| panic!("{title}: the table's JSON is invalid: {e}"));
            (title, expected)
        })
        .collect()
}

#[test]
fn titles_yield_exactly_the_expected_attributes() {
    let cases = titles();
    assert!(cases.len() >= 80, "at least 80 titles: {}", cases.len());
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|(title, expected)| {
            let got = case(title);
            (got != *expected)
                .then(|| format!("{title:?}\n    expected {expected}\n    got      {got}"))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} titles wrong:\n{}",
        failures.len(),
        cases.len(),
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
