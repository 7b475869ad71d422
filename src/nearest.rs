//! Did-you-mean: the known name a person most likely meant by one that is not known (a feed's
//! column `price` for `price_cents`), for messages that refuse a near miss instead of
//! silently ignoring it. Knows nothing of where the names come from.

/// The known name `typed` is a near miss of, if any; the closest (fewest edits) when several
/// are. A near miss is the same name written another way (case, `_`, `-` or spaces:
/// `Price-Cents`, `productKey`), one name the start or end of the other (`price` for
/// `price_cents`, `key` for `product_key`, `desc` for `description`), or a typo: at most two
/// edits, one for a name shorter than four letters.
pub fn near_miss<'a>(typed: &str, known: &[&'a str]) -> Option<&'a str> {
    let typed = typed.trim().to_lowercase();
    known
        .iter()
        .copied()
        .filter(|k| is_near(&typed, k))
        .min_by_key(|k| edit_distance(&typed, k))
}

fn is_near(typed: &str, known: &str) -> bool {
    let bare = |s: &str| -> String { s.chars().filter(|c| c.is_alphanumeric()).collect() };
    let (t, k) = (bare(typed), bare(known));
    if t.is_empty() || t == k {
        return !t.is_empty();
    }
    let part_of = t.len() >= 3 && (k.starts_with(&t) || k.ends_with(&t))
        || k.len() >= 3 && (t.starts_with(&k) || t.ends_with(&k));
    let typos = if t.len() < 4 { 1 } else { 2 };
    part_of || edit_distance(&t, &k) <= typos
}

/// Levenshtein distance, for did-you-mean suggestions among a handful of short names.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_count_insertions_deletions_and_substitutions() {
        let cases = [
            ("", "", 0),
            ("abc", "abc", 0),
            ("ab", "abc", 1),
            ("abc", "axc", 1),
            ("nmae", "name", 2),
            ("kitten", "sitting", 3),
        ];
        for (a, b, edits) in cases {
            assert_eq!(
                (edit_distance(a, b), edit_distance(b, a)),
                (edits, edits),
                "{a:?} {b:?}"
            );
        }
    }

    #[test]
    fn a_name_written_another_way_a_part_or_a_typo_is_near_and_the_closest_wins() {
        let known = ["max_items", "max_item_bytes", "timeout"];
        let cases = [
            ("MAX-ITEMS", Some("max_items")),
            ("items", Some("max_items")),
            ("timout", Some("timeout")),
            ("max_itme_bytes", Some("max_item_bytes")),
            ("colour", None),
            ("", None),
        ];
        for (typed, meant) in cases {
            assert_eq!(near_miss(typed, &known), meant, "{typed:?}");
        }
    }
}
