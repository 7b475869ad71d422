//! Rule-based attribute extraction from product text: colour, material, clothing size,
//! volume (ml), weight (g), dimensions (cm) and pack count, with units normalised.
//!
//! Text is lexed into words, numbers and symbols (`lex`); patterns then consume tokens
//! (`patterns`, matching the word lists of `lists`). What the patterns consumed is also what
//! `identity_tokens` leaves out, so that pairing sees "the same shirt" across colours and sizes.

mod lex;
mod lists;
mod patterns;

use serde_json::{json, Map, Value};

use lex::{lex, Kind, Tok};
use lists::normalise_word;
use patterns::scan;

/// Extracts attributes from a product's name, description and given attributes. Earlier
/// sources win: the name over the description over the given attributes' text.
pub fn extract(
    name: &str,
    description: Option<&str>,
    given: &Map<String, Value>,
) -> Map<String, Value> {
    fn merge(out: &mut Map<String, Value>, attrs: Map<String, Value>) {
        for (k, v) in attrs {
            out.entry(k).or_insert(v);
        }
    }
    let mut out = scan(name).1.attrs;
    if let Some(d) = description {
        merge(&mut out, scan(d).1.attrs);
    }
    for (key, value) in given {
        let Some(text) = value.as_str() else {
            continue;
        };
        let key = key.to_ascii_lowercase();
        // A given colour/material/size names itself even when it is not in our lists.
        let direct = match key.as_str() {
            "color" | "colour" => Some(("color", normalise_phrase(text))),
            "material" => Some(("material", normalise_phrase(text))),
            "size" => Some(("size", text.trim().to_uppercase())),
            _ => None,
        };
        match direct {
            Some((k, v)) if !v.is_empty() => {
                out.entry(k.to_owned()).or_insert(json!(v));
            }
            _ => merge(&mut out, scan(text).1.attrs),
        }
    }
    out
}

fn normalise_phrase(text: &str) -> String {
    text.split(|c: char| c.is_whitespace() || c == '-')
        .filter(|w| !w.is_empty())
        .map(|w| normalise_word(&w.to_lowercase()).to_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

const STOP_WORDS: &[&str] = &[
    "the", "a", "an", "and", "or", "of", "for", "with", "in", "on", "by", "to", "new", "x", "size",
    "colour", "color", "pack", "set", "edition", "version",
];

/// The words that say *what* a product is: its name without the variant attributes that
/// extraction found (colour, size, quantities, pack count) and without stop words. Material
/// stays: a cotton tee and a wool tee are different products. Words joined by a hyphen are
/// one word ("T-Shirt" → `tshirt`); single letters are kept, so that pairing can join them
/// to a neighbour ("T Shirt") against its vocabulary (`catalog::tokens`).
pub fn identity_tokens(name: &str) -> Vec<String> {
    let (toks, found) = scan(name);
    words(&toks, &found.used)
}

/// Every word of `text` (a brand, or a name enrichment has not seen), folded as
/// `identity_tokens` folds them but with nothing taken out as a variant.
pub fn name_words(text: &str) -> Vec<String> {
    let toks = lex(text);
    words(&toks, &vec![false; toks.len()])
}

/// The unused words of a lexed text, lowercased and normalised, stop words out, words around
/// a hyphen that touches both joined into one, numbers kept only when glued to a word.
fn words(toks: &[Tok], used: &[bool]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    // The last word pushed is continued by the next word (a hyphen glued both sides).
    let mut glue = false;
    let mut last_word_at: Option<usize> = None;
    for (i, (t, &u)) in toks.iter().zip(used).enumerate() {
        if u {
            glue = false;
            continue;
        }
        match &t.kind {
            Kind::Word(w) => {
                let w = normalise_word(w);
                match out.last_mut() {
                    Some(last) if glue => last.push_str(w),
                    _ if STOP_WORDS.contains(&w) => {
                        last_word_at = None;
                        continue;
                    }
                    _ => out.push(w.to_owned()),
                }
                glue = false;
                last_word_at = Some(i);
            }
            Kind::Num(v) => {
                // A number glued to a word is part of a model code ("XM4", "Thing0"); a
                // number on its own says nothing about what the product is.
                let text = if v.fract() == 0.0 && v.abs() < 1e15 {
                    format!("{}", *v as i64)
                } else {
                    v.to_string()
                };
                let after_word = i > 0 && last_word_at == Some(i - 1) && toks[i - 1].glued_next;
                let before_word = t.glued_next
                    && matches!(toks.get(i + 1).map(|n| &n.kind), Some(Kind::Word(_)))
                    && !used.get(i + 1).copied().unwrap_or(true);
                match out.last_mut() {
                    Some(last) if after_word || glue => last.push_str(&text),
                    _ if before_word => out.push(text),
                    _ => {
                        glue = false;
                        last_word_at = None;
                        continue;
                    }
                }
                glue = before_word;
                last_word_at = Some(i);
            }
            Kind::Sym('-') => {
                let after_word = i > 0 && last_word_at == Some(i - 1) && toks[i - 1].glued_next;
                let before_word = t.glued_next
                    && matches!(
                        toks.get(i + 1).map(|n| &n.kind),
                        Some(Kind::Word(_) | Kind::Num(_))
                    )
                    && !used.get(i + 1).copied().unwrap_or(true);
                glue = after_word && before_word;
            }
            _ => {
                glue = false;
                last_word_at = None;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_too_large_to_be_a_quantity_is_never_extracted() {
        let huge = "9".repeat(400);
        for title in [
            format!("Sand {huge} kg"),
            format!("Crate pack of {huge}"),
            format!("Tape {huge} x {huge} cm"),
            "Bolt 99999999999999999999 g".to_owned(),
            "Box 12 x 5000000000 ml".to_owned(),
        ] {
            let got = extract(&title, None, &Map::new());
            assert!(got.is_empty(), "{title}: {got:?}");
        }
        // The bound is far above any real quantity.
        let got = extract("Gravel 1000 kg", None, &Map::new());
        assert_eq!(got.get("weight_g"), Some(&json!(1_000_000)));
    }

    #[test]
    fn identity_leaves_out_the_variant() {
        assert_eq!(
            identity_tokens("Acme Crew Tee Navy Blue - XL"),
            ["acme", "crew", "tee"]
        );
        assert_eq!(
            identity_tokens("Roast Co Arabica Beans 2 x 250 g"),
            ["roast", "co", "arabica", "beans"]
        );
        assert_eq!(
            identity_tokens("Brewmaster Mug, Off-White, 350 ml"),
            ["brewmaster", "mug"]
        );
    }

    #[test]
    fn hyphenated_words_are_one_word_and_single_letters_stay_for_pairing_to_join() {
        assert_eq!(
            identity_tokens("Acme T-Shirt, Black - M"),
            ["acme", "tshirt"]
        );
        assert_eq!(identity_tokens("Acme T Shirt - M"), ["acme", "t", "shirt"]);
        assert_eq!(identity_tokens("USB-C Cable 2 m"), ["usbc", "cable"]);
        assert_eq!(name_words("Acme T-Shirt - M"), ["acme", "tshirt", "m"]);
        assert_eq!(name_words("Blue-Fin Co."), ["bluefin", "co"]);
        assert_eq!(name_words("Sony WH-1000XM4 2 pack"), ["sony", "wh1000xm4"]);
    }
}
