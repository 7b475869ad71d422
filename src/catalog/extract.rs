//! Rule-based attribute extraction from product text: colour, material, clothing size,
//! volume (ml), weight (g), dimensions (cm) and pack count, with units normalised.
//!
//! Text is lexed into words, numbers and symbols (remembering which touch each other, so
//! "500ml" is a quantity but "M8" is not a size); patterns then consume tokens. What the
//! patterns consumed is also what `identity_tokens` leaves out, so that pairing sees "the
//! same shirt" across colours and sizes.

use std::collections::HashMap;
use std::sync::LazyLock;

use serde_json::{json, Map, Value};

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Word(String),
    Num(f64),
    Sym(char),
}

#[derive(Clone, Debug)]
struct Tok {
    kind: Kind,
    /// The word was written in capitals (`M`, `XL`), which a size in a title usually is.
    upper: bool,
    /// No space between this token and the next one.
    glued_next: bool,
}

fn lex(text: &str) -> Vec<Tok> {
    let chars: Vec<char> = text.chars().collect();
    let mut toks: Vec<Tok> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        if c.is_whitespace() {
            if let Some(last) = toks.last_mut() {
                last.glued_next = false;
            }
            i += 1;
            continue;
        }
        let kind = if c.is_ascii_digit() {
            let mut int = String::new();
            while i < chars.len() && chars[i].is_ascii_digit() {
                int.push(chars[i]);
                i += 1;
            }
            let mut value: f64 = int.parse().unwrap_or(0.0);
            if i + 1 < chars.len()
                && (chars[i] == '.' || chars[i] == ',')
                && chars[i + 1].is_ascii_digit()
            {
                let sep = chars[i];
                let mut j = i + 1;
                let mut frac = String::new();
                while j < chars.len() && chars[j].is_ascii_digit() {
                    frac.push(chars[j]);
                    j += 1;
                }
                if sep == ',' && frac.len() == 3 {
                    // 1,000 g: a thousands separator.
                    value = format!("{int}{frac}").parse().unwrap_or(value);
                } else {
                    value = format!("{int}.{frac}").parse().unwrap_or(value);
                }
                i = j;
            }
            Kind::Num(value)
        } else if c.is_alphabetic() {
            let mut w = String::new();
            let mut upper = true;
            while i < chars.len() && (chars[i].is_alphabetic() || chars[i] == '\'') {
                if chars[i] != '\'' {
                    upper &= !chars[i].is_lowercase();
                    w.extend(chars[i].to_lowercase());
                }
                i += 1;
            }
            toks.push(Tok {
                kind: Kind::Word(w),
                upper,
                glued_next: true,
            });
            continue;
        } else {
            i += 1;
            match c {
                '×' => Kind::Word("x".into()),
                '”' | '″' => Kind::Sym('"'),
                _ => Kind::Sym(c),
            }
        };
        debug_assert!(i > start);
        toks.push(Tok {
            kind,
            upper: false,
            glued_next: true,
        });
    }
    if let Some(last) = toks.last_mut() {
        last.glued_next = false;
    }
    toks
}

#[derive(Clone, Copy, PartialEq)]
enum Dim {
    Volume,
    Weight,
    Length,
}

/// The unit at `i` (one or two tokens), as its dimension, factor to ml/g/cm and length.
fn unit_at(toks: &[Tok], i: usize) -> Option<(Dim, f64, usize)> {
    let word = |k: usize| match toks.get(k).map(|t| &t.kind) {
        Some(Kind::Word(w)) => Some(w.as_str()),
        _ => None,
    };
    let sym = |k: usize| match toks.get(k).map(|t| &t.kind) {
        Some(Kind::Sym(c)) => Some(*c),
        _ => None,
    };
    if word(i) == Some("fl") {
        let skip = if sym(i + 1) == Some('.') { 2 } else { 1 };
        if word(i + skip) == Some("oz") {
            return Some((Dim::Volume, 29.5735, skip + 1));
        }
    }
    if sym(i) == Some('"') {
        return Some((Dim::Length, 2.54, 1));
    }
    let (dim, factor) = match word(i)? {
        "ml" | "millilitre" | "millilitres" | "milliliter" | "milliliters" => (Dim::Volume, 1.0),
        "cl" => (Dim::Volume, 10.0),
        "dl" => (Dim::Volume, 100.0),
        "l" | "lt" | "ltr" | "litre" | "litres" | "liter" | "liters" => (Dim::Volume, 1000.0),
        "floz" => (Dim::Volume, 29.5735),
        "gal" | "gallon" | "gallons" => (Dim::Volume, 3785.41),
        "mg" => (Dim::Weight, 0.001),
        "g" | "gr" | "gram" | "grams" | "gramme" | "grammes" => (Dim::Weight, 1.0),
        "kg" | "kgs" | "kilo" | "kilos" | "kilogram" | "kilograms" => (Dim::Weight, 1000.0),
        "lb" | "lbs" | "pound" | "pounds" => (Dim::Weight, 453.592),
        "oz" | "ounce" | "ounces" => (Dim::Weight, 28.3495),
        "mm" => (Dim::Length, 0.1),
        "cm" => (Dim::Length, 1.0),
        "m" | "metre" | "metres" | "meter" | "meters" => (Dim::Length, 100.0),
        "in" | "inch" | "inches" => (Dim::Length, 2.54),
        "ft" | "foot" | "feet" => (Dim::Length, 30.48),
        _ => return None,
    };
    Some((dim, factor, 1))
}

const COLOURS: &[&str] = &[
    "navy blue",
    "light blue",
    "dark blue",
    "sky blue",
    "royal blue",
    "baby blue",
    "powder blue",
    "dark green",
    "light green",
    "olive green",
    "forest green",
    "bottle green",
    "mint green",
    "light grey",
    "dark grey",
    "charcoal grey",
    "heather grey",
    "off white",
    "rose gold",
    "dark red",
    "wine red",
    "hot pink",
    "pale pink",
    "dusty pink",
    "sand beige",
    "jet black",
    "black",
    "white",
    "grey",
    "red",
    "blue",
    "green",
    "yellow",
    "orange",
    "purple",
    "pink",
    "brown",
    "navy",
    "beige",
    "silver",
    "gold",
    "cream",
    "ivory",
    "charcoal",
    "khaki",
    "teal",
    "turquoise",
    "maroon",
    "burgundy",
    "tan",
    "mint",
    "lavender",
    "coral",
    "olive",
    "mustard",
    "lilac",
    "magenta",
    "cyan",
    "indigo",
    "taupe",
    "ecru",
    "anthracite",
    "multicolour",
];

/// Words after which a colour word names a thing, not a colour ("orange juice").
const NOT_A_COLOUR_BEFORE: &[&str] = &[
    "juice",
    "tea",
    "pepper",
    "peppers",
    "wine",
    "rice",
    "beans",
    "bean",
    "sugar",
    "bread",
    "onion",
    "onions",
    "cabbage",
    "currant",
    "currants",
    "lentils",
    "olives",
    "chocolate",
    "label",
    "belt",
    "card",
    "cards",
    "mustard",
    "grapes",
    "apple",
    "apples",
    "vinegar",
    "salt",
    "bull",
    "zest",
    "marmalade",
    "sauce",
    "curry",
    "lentil",
    "chilli",
    "chili",
    "leaf",
    "oil",
];

const MATERIALS: &[&str] = &[
    "organic cotton",
    "recycled cotton",
    "egyptian cotton",
    "recycled polyester",
    "merino wool",
    "lambswool",
    "stainless steel",
    "carbon steel",
    "cast iron",
    "faux leather",
    "vegan leather",
    "genuine leather",
    "full grain leather",
    "solid oak",
    "solid wood",
    "tempered glass",
    "borosilicate glass",
    "bone china",
    "faux fur",
    "memory foam",
    "cotton",
    "linen",
    "wool",
    "cashmere",
    "silk",
    "polyester",
    "nylon",
    "leather",
    "denim",
    "bamboo",
    "oak",
    "walnut",
    "pine",
    "beech",
    "teak",
    "acacia",
    "glass",
    "ceramic",
    "porcelain",
    "stoneware",
    "earthenware",
    "aluminium",
    "steel",
    "copper",
    "brass",
    "plastic",
    "rubber",
    "silicone",
    "suede",
    "velvet",
    "marble",
    "granite",
    "viscose",
    "elastane",
    "spandex",
    "acrylic",
    "fleece",
    "corduroy",
    "canvas",
    "jute",
    "rattan",
    "wicker",
    "cork",
    "concrete",
    "slate",
    "titanium",
    "polypropylene",
    "melamine",
    "enamel",
    "felt",
    "hemp",
    "modal",
    "lyocell",
];

const SIZES: &[&str] = &[
    "xxxs", "xxs", "xs", "s", "m", "l", "xl", "xxl", "xxxl", "xxxxl",
];

fn normalise_word(w: &str) -> &str {
    match w {
        "gray" => "grey",
        "colour" | "color" => "colour",
        "aluminum" => "aluminium",
        "multicolor" | "multicoloured" | "multicolored" => "multicolour",
        other => other,
    }
}

/// A phrase list indexed by first word, so matching costs one lookup per word.
type PhraseIndex = HashMap<&'static str, Vec<(&'static str, Vec<&'static str>)>>;

fn index(list: &[&'static str]) -> PhraseIndex {
    let mut idx: PhraseIndex = HashMap::new();
    for phrase in list {
        let parts: Vec<&'static str> = phrase.split(' ').collect();
        idx.entry(parts[0]).or_default().push((phrase, parts));
    }
    idx
}

static COLOUR_INDEX: LazyLock<PhraseIndex> = LazyLock::new(|| index(COLOURS));
static MATERIAL_INDEX: LazyLock<PhraseIndex> = LazyLock::new(|| index(MATERIALS));

/// Matches a phrase from `index` starting at token `i` (words, optionally joined by `-`),
/// longest first. Returns the phrase and how many tokens it spans.
fn phrase_at(toks: &[Tok], i: usize, index: &PhraseIndex) -> Option<(&'static str, usize)> {
    let Some(Kind::Word(first)) = toks.get(i).map(|t| &t.kind) else {
        return None;
    };
    let candidates = index.get(normalise_word(first))?;
    let mut best: Option<(&'static str, usize)> = None;
    for (phrase, parts) in candidates {
        let mut k = i;
        let mut ok = true;
        for (n, part) in parts.iter().enumerate() {
            if n > 0 && matches!(toks.get(k).map(|t| &t.kind), Some(Kind::Sym('-'))) {
                k += 1;
            }
            match toks.get(k).map(|t| &t.kind) {
                Some(Kind::Word(w)) if normalise_word(w) == *part => k += 1,
                _ => {
                    ok = false;
                    break;
                }
            }
        }
        if ok && best.is_none_or(|(b, _)| phrase.len() > b.len()) {
            best = Some((phrase, k - i));
        }
    }
    best
}

/// What was found in one text, with the tokens the patterns used.
#[derive(Default)]
struct Found {
    attrs: Map<String, Value>,
    used: Vec<bool>,
}

fn number(v: f64) -> Value {
    let rounded = (v * 100.0).round() / 100.0;
    if rounded.fract() == 0.0 && rounded.abs() < 1e15 {
        json!(rounded as i64)
    } else {
        json!(rounded)
    }
}

fn dimension(v: f64) -> Value {
    let rounded = (v * 10.0).round() / 10.0;
    if rounded.fract() == 0.0 {
        json!(rounded as i64)
    } else {
        json!(rounded)
    }
}

fn scan(text: &str) -> (Vec<Tok>, Found) {
    let toks = lex(text);
    let mut found = Found {
        attrs: Map::new(),
        used: vec![false; toks.len()],
    };
    let n = toks.len();
    let word = |k: usize| match toks.get(k).map(|t| &t.kind) {
        Some(Kind::Word(w)) => Some(w.as_str()),
        _ => None,
    };
    let num = |k: usize| match toks.get(k).map(|t| &t.kind) {
        Some(Kind::Num(v)) => Some(*v),
        _ => None,
    };
    let is_times = |k: usize| {
        word(k) == Some("x") || matches!(toks.get(k).map(|t| &t.kind), Some(Kind::Sym('*')))
    };
    let set = |found: &mut Found, key: &str, value: Value, from: usize, len: usize| {
        if !found.attrs.contains_key(key) {
            found.attrs.insert(key.to_owned(), value);
        }
        // Material is part of what a product is; the others are what its variants differ in.
        if key != "material" {
            for u in &mut found.used[from..(from + len).min(n)] {
                *u = true;
            }
        }
    };

    let mut i = 0;
    while i < n {
        // Quantities: "30 x 40 x 10 cm", "2 x 250 g", "500ml", "1.5 L", "12\"". A number
        // that touches a word before it is part of a code ("W32", "E27", "V15"), not a quantity.
        let in_code = i > 0 && toks[i - 1].glued_next && matches!(toks[i - 1].kind, Kind::Word(_));
        if let Some(first) = num(i).filter(|_| !in_code) {
            let mut values = vec![first];
            let mut k = i + 1;
            while is_times(k) && num(k + 1).is_some() {
                values.push(num(k + 1).expect("checked just above"));
                k += 2;
            }
            if let Some((dim, factor, ulen)) = unit_at(&toks, k) {
                // A bare "in"/"m" after a number only counts as a unit when it touches the
                // number or ends the phrase ("2 in 1 shampoo" is not two inches).
                let unit_word = word(k);
                let ambiguous = matches!(unit_word, Some("in" | "m")) && !toks[k - 1].glued_next;
                let next_is_num = num(k + ulen).is_some();
                // A unit letter that touches a number after it is a code too ("L34", "M8").
                let unit_in_code =
                    unit_word.is_some() && toks[k + ulen - 1].glued_next && next_is_num;
                if !(unit_in_code || ambiguous && next_is_num) {
                    match (dim, values.len()) {
                        (Dim::Length, _) => {
                            let dims: Vec<Value> =
                                values.iter().map(|v| dimension(v * factor)).collect();
                            set(
                                &mut found,
                                "dimensions_cm",
                                Value::Array(dims),
                                i,
                                k + ulen - i,
                            );
                        }
                        (_, 1) | (_, 2) => {
                            let key = if dim == Dim::Volume {
                                "volume_ml"
                            } else {
                                "weight_g"
                            };
                            let each = *values.last().expect("at least one value");
                            set(&mut found, key, number(each * factor), i, k + ulen - i);
                            if values.len() == 2 && values[0].fract() == 0.0 && values[0] >= 1.0 {
                                set(&mut found, "pack_count", json!(values[0] as i64), i, 2);
                            }
                        }
                        _ => {}
                    }
                    i = k + ulen;
                    continue;
                }
            }
            // "6-pack", "6 pack", "6 pcs", "12 count", "4-piece".
            let k = if matches!(toks.get(i + 1).map(|t| &t.kind), Some(Kind::Sym('-'))) {
                i + 2
            } else {
                i + 1
            };
            if matches!(
                word(k),
                Some(
                    "pack"
                        | "pk"
                        | "packs"
                        | "pcs"
                        | "pc"
                        | "pieces"
                        | "piece"
                        | "count"
                        | "ct"
                        | "pairs"
                        | "rolls"
                        | "bottles"
                        | "cans"
                        | "bars"
                        | "capsules"
                        | "pods"
                        | "sachets"
                )
            ) && first.fract() == 0.0
                && first >= 1.0
            {
                set(&mut found, "pack_count", json!(first as i64), i, k + 1 - i);
                i = k + 1;
                continue;
            }
        }
        // "pack of 6", "set of 4", "box of 12", "case of 24", "multipack of 3".
        if matches!(
            word(i),
            Some("pack" | "set" | "box" | "case" | "multipack" | "bundle" | "pk")
        ) && word(i + 1) == Some("of")
        {
            if let Some(count) = num(i + 2).filter(|c| c.fract() == 0.0 && *c >= 1.0) {
                set(&mut found, "pack_count", json!(count as i64), i, 3);
                i += 3;
                continue;
            }
        }
        // "Size M", "size: XL", "Sz 42", "one size".
        if matches!(word(i), Some("size" | "sz")) {
            let k = if matches!(toks.get(i + 1).map(|t| &t.kind), Some(Kind::Sym(':'))) {
                i + 2
            } else {
                i + 1
            };
            if let Some(w) = word(k).filter(|w| SIZES.contains(w)) {
                set(&mut found, "size", json!(w.to_uppercase()), i, k + 1 - i);
                i = k + 1;
                continue;
            }
            // "Size Large" names a letter size in words; only after "size", where it cannot
            // be an adjective ("Large Mug").
            let spelled = match word(k) {
                Some("small") => Some("S"),
                Some("medium") => Some("M"),
                Some("large") => Some("L"),
                _ => None,
            };
            if let Some(s) = spelled {
                set(&mut found, "size", json!(s), i, k + 1 - i);
                i = k + 1;
                continue;
            }
            if let (Some(v), Some(w)) = (num(k), word(k + 1)) {
                if toks[k].glued_next && matches!(w, "xl" | "xs") {
                    set(
                        &mut found,
                        "size",
                        json!(format!("{}{}", v as i64, w.to_uppercase())),
                        i,
                        k + 2 - i,
                    );
                    i = k + 2;
                    continue;
                }
            }
            if let Some(v) = num(k) {
                let shown = if v.fract() == 0.0 {
                    format!("{}", v as i64)
                } else {
                    format!("{v}")
                };
                set(&mut found, "size", json!(shown), i, k + 1 - i);
                i = k + 1;
                continue;
            }
        }
        if word(i) == Some("one") && word(i + 1) == Some("size") {
            set(&mut found, "size", json!("One Size"), i, 2);
            i += 2;
            continue;
        }
        // A bare size in a size position: capitals, standing alone, after a separator or at
        // the end ("Tee - M", "Tee, XL", "Tee (L)", "Tee Navy XL"). "M" in "M8 bolt" touches
        // its number and is not a size.
        if let Some(w) = word(i).filter(|w| SIZES.contains(w)) {
            let sym = |k: usize| matches!(toks.get(k).map(|t| &t.kind), Some(Kind::Sym(_)));
            let free_before = i == 0 || !toks[i - 1].glued_next || sym(i - 1);
            let free_after = !toks[i].glued_next || sym(i + 1);
            let after_sep = i > 0
                && matches!(
                    toks[i - 1].kind,
                    Kind::Sym('-' | ',' | '/' | '|' | '(' | '–')
                );
            let at_end = i + 1 == n || matches!(toks[i + 1].kind, Kind::Sym(')'));
            // One letter is a size only where a size goes; XS/XL/XXL anywhere they stand alone.
            let position_ok = if w.len() == 1 {
                i > 0 && (after_sep || at_end)
            } else {
                true
            };
            let after_number = i > 0 && num(i - 1).is_some();
            if toks[i].upper && free_before && free_after && position_ok && !after_number {
                set(&mut found, "size", json!(w.to_uppercase()), i, 1);
                i += 1;
                continue;
            }
        }
        // "2XL", "3XL".
        if let (Some(v), Some(w)) = (num(i), word(i + 1)) {
            if toks[i].glued_next
                && matches!(w, "xl" | "xs")
                && toks[i + 1].upper
                && v.fract() == 0.0
                && (2.0..=5.0).contains(&v)
            {
                set(
                    &mut found,
                    "size",
                    json!(format!("{}{}", v as i64, w.to_uppercase())),
                    i,
                    2,
                );
                i += 2;
                continue;
            }
        }
        if word(i).is_some() {
            if let Some((colour, len)) = phrase_at(&toks, i, &COLOUR_INDEX) {
                let next = word(i + len);
                if !next.is_some_and(|w| NOT_A_COLOUR_BEFORE.contains(&w)) {
                    set(&mut found, "color", json!(colour), i, len);
                    i += len;
                    continue;
                }
            }
            if let Some((material, len)) = phrase_at(&toks, i, &MATERIAL_INDEX) {
                set(&mut found, "material", json!(material), i, len);
                i += len;
                continue;
            }
        }
        i += 1;
    }
    (toks, found)
}

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
