//! The lexer: text into words, numbers and symbols, remembering which touch the next one
//! ("500ml" is a quantity, "M8" is not a size), and the units a quantity may carry.

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Kind {
    Word(String),
    Num(f64),
    Sym(char),
}

#[derive(Clone, Debug)]
pub(super) struct Tok {
    pub(super) kind: Kind,
    /// The word was written in capitals (`M`, `XL`), which a size in a title usually is.
    pub(super) upper: bool,
    /// No space between this token and the next one.
    pub(super) glued_next: bool,
}

pub(super) fn lex(text: &str) -> Vec<Tok> {
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
            // 1,000 g and 1,000,000 g: every `,ddd` group is a thousands separator.
            let grouped = thousands_group_at(&chars, i);
            while thousands_group_at(&chars, i) {
                int.extend(&chars[i + 1..i + 4]);
                i += 4;
            }
            let mut value: f64 = int.parse().unwrap_or(0.0);
            // After thousands groups only `.` can start a fraction; otherwise `,` can too.
            if i + 1 < chars.len()
                && (chars[i] == '.' || (chars[i] == ',' && !grouped))
                && chars[i + 1].is_ascii_digit()
            {
                let mut j = i + 1;
                let mut frac = String::new();
                while j < chars.len() && chars[j].is_ascii_digit() {
                    frac.push(chars[j]);
                    j += 1;
                }
                value = format!("{int}.{frac}").parse().unwrap_or(value);
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

/// A thousands group at `i`: a `,` and exactly three digits, no fourth.
fn thousands_group_at(chars: &[char], i: usize) -> bool {
    chars.get(i) == Some(&',')
        && chars.len() >= i + 4
        && chars[i + 1..i + 4].iter().all(char::is_ascii_digit)
        && !chars.get(i + 4).is_some_and(char::is_ascii_digit)
}

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Dim {
    Volume,
    Weight,
    Length,
}

/// The unit at `i` (one or two tokens), as its dimension, factor to ml/g/cm and length.
pub(super) fn unit_at(toks: &[Tok], i: usize) -> Option<(Dim, f64, usize)> {
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
