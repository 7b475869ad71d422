//! The extraction patterns: each looks at one token, and when it matches records its
//! attribute and the tokens it consumed (variant attributes' tokens are what identity leaves
//! out). `scan` tries them in order at every token; the first attribute of a kind wins.

use std::collections::HashMap;
use std::sync::LazyLock;

use serde_json::{json, Map, Value};

use super::lex::{lex, unit_at, Dim, Kind, Tok};
use super::lists::{normalise_word, COLOURS, MATERIALS, NOT_A_COLOUR_BEFORE, SIZES};

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
pub(super) struct Found {
    pub(super) attrs: Map<String, Value>,
    pub(super) used: Vec<bool>,
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

/// The largest number read as a quantity or count. A longer number in a title is a code,
/// a serial or noise, and beyond it an f64 stops holding whole numbers exactly (and far
/// beyond, overflows to infinity, which JSON cannot carry): it is never extracted.
const MAX_QUANTITY: f64 = 1e9;

/// Words after a count that make it a pack count ("6 pcs", "12-count", "4 rolls").
const COUNT_WORDS: &[&str] = &[
    "pack", "pk", "packs", "pcs", "pc", "pieces", "piece", "count", "ct", "pairs", "rolls",
    "bottles", "cans", "bars", "capsules", "pods", "sachets",
];
/// Words before "of" that make the number after it a pack count ("pack of 6", "set of 4").
const PACK_OF_WORDS: &[&str] = &["pack", "set", "box", "case", "multipack", "bundle", "pk"];

/// The tokens of one text and what the patterns found in them so far. Each pattern looks at
/// the token at `i` and, when it matches, records its attribute and answers where the next
/// pattern should look; the first attribute of a kind wins.
struct Cursor<'a> {
    toks: &'a [Tok],
    found: Found,
}

/// One extraction rule at token `i`: the index after what it consumed, or `None`.
type Pattern = fn(&mut Cursor<'_>, usize) -> Option<usize>;

/// The rules in the order they are tried at each token.
const PATTERNS: &[Pattern] = &[
    quantity,
    count_word,
    pack_of,
    labelled_size,
    one_size,
    bare_size,
    numbered_size,
    colour,
    material,
];

impl<'a> Cursor<'a> {
    fn kind(&self, k: usize) -> Option<&'a Kind> {
        self.toks.get(k).map(|t| &t.kind)
    }

    fn word(&self, k: usize) -> Option<&'a str> {
        match self.kind(k) {
            Some(Kind::Word(w)) => Some(w.as_str()),
            _ => None,
        }
    }

    /// A number small enough to be a quantity (see `MAX_QUANTITY`).
    fn num(&self, k: usize) -> Option<f64> {
        match self.kind(k) {
            Some(Kind::Num(v)) if v.is_finite() && *v <= MAX_QUANTITY => Some(*v),
            _ => None,
        }
    }

    fn sym(&self, k: usize) -> Option<char> {
        match self.kind(k) {
            Some(Kind::Sym(c)) => Some(*c),
            _ => None,
        }
    }

    /// A whole number of at least one, as a count.
    fn count(&self, k: usize) -> Option<i64> {
        self.num(k)
            .filter(|v| v.fract() == 0.0 && *v >= 1.0)
            .map(|v| v as i64)
    }

    fn is_times(&self, k: usize) -> bool {
        self.word(k) == Some("x") || self.sym(k) == Some('*')
    }

    /// Token `k` is glued to the one after it.
    fn glued(&self, k: usize) -> bool {
        self.toks[k].glued_next
    }

    /// The token after `i`, skipping one `sep` symbol if there is one ("6-pack", "size: M").
    fn after(&self, i: usize, sep: char) -> usize {
        if self.sym(i + 1) == Some(sep) {
            i + 2
        } else {
            i + 1
        }
    }

    /// Records `key` (unless found already) from tokens `from..from + len`.
    fn set(&mut self, key: &str, value: Value, from: usize, len: usize) {
        if !self.found.attrs.contains_key(key) {
            self.found.attrs.insert(key.to_owned(), value);
        }
        // Material is part of what a product is; the others are what its variants differ in.
        if key != "material" {
            let end = (from + len).min(self.toks.len());
            for u in &mut self.found.used[from..end] {
                *u = true;
            }
        }
    }

    /// A number at `i` that is not part of a code: one that touches a word before it is
    /// ("W32", "E27", "V15").
    fn free_num(&self, i: usize) -> Option<f64> {
        let in_code = i > 0 && self.glued(i - 1) && matches!(self.toks[i - 1].kind, Kind::Word(_));
        self.num(i).filter(|_| !in_code)
    }
}

pub(super) fn scan(text: &str) -> (Vec<Tok>, Found) {
    let toks = lex(text);
    let mut cursor = Cursor {
        toks: &toks,
        found: Found {
            attrs: Map::new(),
            used: vec![false; toks.len()],
        },
    };
    let mut i = 0;
    while i < toks.len() {
        i = PATTERNS
            .iter()
            .find_map(|pattern| pattern(&mut cursor, i))
            .unwrap_or(i + 1);
    }
    let found = cursor.found;
    (toks, found)
}

/// Numbers and a unit: "30 x 40 x 10 cm", "2 x 250 g", "500ml", "1.5 L", "12\"".
struct Measure {
    values: Vec<f64>,
    dim: Dim,
    factor: f64,
    /// The index after the unit.
    end: usize,
}

/// A measure at `i`, unless its unit is really part of a code or a phrase.
fn measure_at(c: &Cursor<'_>, i: usize) -> Option<Measure> {
    let mut values = vec![c.free_num(i)?];
    let mut k = i + 1;
    while c.is_times(k) && c.num(k + 1).is_some() {
        values.push(c.num(k + 1).expect("checked just above"));
        k += 2;
    }
    let (dim, factor, ulen) = unit_at(c.toks, k)?;
    // A bare "in"/"m" after a number only counts as a unit when it touches the number or
    // ends the phrase ("2 in 1 shampoo" is not two inches).
    let unit_word = c.word(k);
    let ambiguous = matches!(unit_word, Some("in" | "m")) && !c.glued(k - 1);
    let next_is_num = c.num(k + ulen).is_some();
    // A unit letter that touches a number after it is a code too ("L34", "M8").
    let unit_in_code = unit_word.is_some() && c.glued(k + ulen - 1) && next_is_num;
    if unit_in_code || ambiguous && next_is_num {
        return None;
    }
    Some(Measure {
        values,
        dim,
        factor,
        end: k + ulen,
    })
}

/// Dimensions, volume or weight, by the measure's unit.
fn quantity(c: &mut Cursor<'_>, i: usize) -> Option<usize> {
    let m = measure_at(c, i)?;
    match (m.dim, m.values.len()) {
        (Dim::Length, _) => dimensions(c, i, &m),
        (Dim::Volume, 1 | 2) => amount(c, i, &m, "volume_ml"),
        (Dim::Weight, 1 | 2) => amount(c, i, &m, "weight_g"),
        // "2 x 3 x 250 g" says too much to be one amount; it is consumed, not guessed at.
        _ => {}
    }
    Some(m.end)
}

/// "30 x 40 x 10 cm", "12\"": every value in centimetres.
fn dimensions(c: &mut Cursor<'_>, i: usize, m: &Measure) {
    let dims = m.values.iter().map(|v| dimension(v * m.factor)).collect();
    c.set("dimensions_cm", Value::Array(dims), i, m.end - i);
}

/// "500 ml", "1.5 kg", and "2 x 250 g" (a pack of two, 250 g each).
fn amount(c: &mut Cursor<'_>, i: usize, m: &Measure, key: &str) {
    let each = *m.values.last().expect("a measure has at least one value");
    c.set(key, number(each * m.factor), i, m.end - i);
    if m.values.len() == 2 && m.values[0].fract() == 0.0 && m.values[0] >= 1.0 {
        c.set("pack_count", json!(m.values[0] as i64), i, 2);
    }
}

/// "6-pack", "6 pack", "6 pcs", "12 count", "4-piece".
fn count_word(c: &mut Cursor<'_>, i: usize) -> Option<usize> {
    c.free_num(i)?;
    let count = c.count(i)?;
    let k = c.after(i, '-');
    if !COUNT_WORDS.contains(&c.word(k)?) {
        return None;
    }
    c.set("pack_count", json!(count), i, k + 1 - i);
    Some(k + 1)
}

/// "pack of 6", "set of 4", "box of 12", "case of 24", "multipack of 3".
fn pack_of(c: &mut Cursor<'_>, i: usize) -> Option<usize> {
    if !PACK_OF_WORDS.contains(&c.word(i)?) || c.word(i + 1) != Some("of") {
        return None;
    }
    let count = c.count(i + 2)?;
    c.set("pack_count", json!(count), i, 3);
    Some(i + 3)
}

/// "Size M", "size: XL", "Size Large", "Sz 42", "Size 2XL".
fn labelled_size(c: &mut Cursor<'_>, i: usize) -> Option<usize> {
    if !matches!(c.word(i), Some("size" | "sz")) {
        return None;
    }
    let k = c.after(i, ':');
    // "Size Large" names a letter size in words; only after "size", where it cannot be an
    // adjective ("Large Mug").
    let (size, end) = match (c.word(k), c.num(k)) {
        (Some(w), _) if SIZES.contains(&w) => (w.to_uppercase(), k + 1),
        (Some("small"), _) => ("S".to_owned(), k + 1),
        (Some("medium"), _) => ("M".to_owned(), k + 1),
        (Some("large"), _) => ("L".to_owned(), k + 1),
        (_, Some(v)) => match c.word(k + 1) {
            Some(w @ ("xl" | "xs")) if c.glued(k) => {
                (format!("{}{}", v as i64, w.to_uppercase()), k + 2)
            }
            _ if v.fract() == 0.0 => (format!("{}", v as i64), k + 1),
            _ => (format!("{v}"), k + 1),
        },
        _ => return None,
    };
    c.set("size", json!(size), i, end - i);
    Some(end)
}

/// "one size".
fn one_size(c: &mut Cursor<'_>, i: usize) -> Option<usize> {
    if c.word(i) != Some("one") || c.word(i + 1) != Some("size") {
        return None;
    }
    c.set("size", json!("One Size"), i, 2);
    Some(i + 2)
}

/// A bare size in a size position: capitals, standing alone, after a separator or at the
/// end ("Tee - M", "Tee, XL", "Tee (L)", "Tee Navy XL"). "M" in "M8 bolt" touches its
/// number and is not a size.
fn bare_size(c: &mut Cursor<'_>, i: usize) -> Option<usize> {
    let w = c.word(i).filter(|w| SIZES.contains(w))?;
    let n = c.toks.len();
    let free_before = i == 0 || !c.glued(i - 1) || c.sym(i - 1).is_some();
    let free_after = !c.glued(i) || c.sym(i + 1).is_some();
    let after_sep = i > 0 && matches!(c.sym(i - 1), Some('-' | ',' | '/' | '|' | '(' | '–'));
    let at_end = i + 1 == n || c.sym(i + 1) == Some(')');
    // One letter is a size only where a size goes; XS/XL/XXL anywhere they stand alone.
    let position_ok = w.len() > 1 || i > 0 && (after_sep || at_end);
    let after_number = i > 0 && c.num(i - 1).is_some();
    if !(c.toks[i].upper && free_before && free_after && position_ok && !after_number) {
        return None;
    }
    c.set("size", json!(w.to_uppercase()), i, 1);
    Some(i + 1)
}

/// "2XL", "3XL".
fn numbered_size(c: &mut Cursor<'_>, i: usize) -> Option<usize> {
    let v = c.num(i)?;
    let w = c.word(i + 1)?;
    let ok = c.glued(i)
        && matches!(w, "xl" | "xs")
        && c.toks[i + 1].upper
        && v.fract() == 0.0
        && (2.0..=5.0).contains(&v);
    if !ok {
        return None;
    }
    c.set(
        "size",
        json!(format!("{}{}", v as i64, w.to_uppercase())),
        i,
        2,
    );
    Some(i + 2)
}

/// A colour phrase, unless the word after it makes it something else ("Orange Juice").
fn colour(c: &mut Cursor<'_>, i: usize) -> Option<usize> {
    c.word(i)?;
    let (colour, len) = phrase_at(c.toks, i, &COLOUR_INDEX)?;
    if c.word(i + len)
        .is_some_and(|w| NOT_A_COLOUR_BEFORE.contains(&w))
    {
        return None;
    }
    c.set("color", json!(colour), i, len);
    Some(i + len)
}

/// A material phrase ("stainless steel", "cotton").
fn material(c: &mut Cursor<'_>, i: usize) -> Option<usize> {
    c.word(i)?;
    let (material, len) = phrase_at(c.toks, i, &MATERIAL_INDEX)?;
    c.set("material", json!(material), i, len);
    Some(i + len)
}
