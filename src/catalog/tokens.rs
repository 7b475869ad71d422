//! Identity tokens: the set of words that says *what* a product is, folded the way
//! catalogues are written, so that pairing compares like with like.
//!
//! A product's identity is the set (order and repetition ignored) of
//! - its name's identity words (`extract::identity_tokens`: variants out, hyphenated words
//!   joined) — or every word of the name when enrichment has not seen the product — and
//! - the words of its brand field, whether or not the name repeats them (a set counts a
//!   word once, so a brand written in both places is not counted twice, and a brand given
//!   only in the name or only in the field makes the same identity),
//!
//! each word folded to its singular (`plural`), then adjacent words joined where their
//! concatenation is itself a word of the catalogue's vocabulary ("T Shirt" → `tshirt` when
//! someone wrote "T-Shirt" or "tshirt"; "Ear Buds" → `earbud`). Single letters left over
//! after joining say nothing and are dropped.

use std::collections::HashMap;

/// The shortest word whose trailing `s` is folded away ("bus", "gas" stay).
const MIN_PLURAL_LEN: usize = 4;

/// The singulars a word may be the plural of, most likely first: `hoodies` → `hoodie`,
/// `hoody`; `boxes` → `box`, `boxe`; `shoes` → `shoe`. Empty for words that are not plurals
/// (too short, or in `ss`, `us`, `is`).
fn singulars(word: &str) -> Vec<String> {
    let len = word.len();
    if len < MIN_PLURAL_LEN
        || !word.ends_with('s')
        || ["ss", "us", "is"].iter().any(|e| word.ends_with(e))
    {
        return Vec::new();
    }
    let drop = |n: usize| word[..len - n].to_owned();
    if word.ends_with("ies") && len > MIN_PLURAL_LEN {
        return vec![drop(1), format!("{}y", &word[..len - 3])];
    }
    if ["sses", "ches", "shes", "xes", "zes"]
        .iter()
        .any(|e| word.ends_with(e))
    {
        return vec![drop(2), drop(1)];
    }
    vec![drop(1)]
}

/// A word folded to its singular without a vocabulary to consult: the likeliest reading
/// ("berries" → `berry`, "boxes" → `box`, "shoes" → `shoe`).
pub fn fold(word: &str) -> String {
    if word.ends_with("ies") && word.len() > MIN_PLURAL_LEN {
        return format!("{}y", &word[..word.len() - 3]);
    }
    singulars(word)
        .into_iter()
        .next()
        .unwrap_or_else(|| word.to_owned())
}

/// The words of a catalogue, interned as ids, with each word's folded (singular) form.
///
/// Once `fold_plurals` has run, the vocabulary is *frozen*: its words (the base) are the
/// ones folding and joining consult from then on. A word met later (`resolve`) is folded and
/// joined against the base alone and, if the base lacks its folded form, added as an extra
/// word that no other word folds or joins into — so a word's identity never depends on
/// which other words arrived after the freeze.
#[derive(Default)]
pub struct Vocabulary {
    ids: HashMap<String, u32>,
    texts: Vec<String>,
    /// id → the id of its singular (itself for a singular); filled by `fold_plurals`.
    canonical: Vec<u32>,
    /// How many words (ids `0..base`) folding and joining consult: all of them until the
    /// freeze, the words the catalogue had at the freeze after it.
    base: u32,
    frozen: bool,
}

impl Vocabulary {
    /// The id of a word, adding it if new.
    pub fn intern(&mut self, word: &str) -> u32 {
        if let Some(id) = self.ids.get(word) {
            return *id;
        }
        let id = self.texts.len() as u32;
        self.ids.insert(word.to_owned(), id);
        self.texts.push(word.to_owned());
        self.canonical.push(id);
        if self.base == id && !self.frozen {
            self.base = id + 1;
        }
        id
    }

    /// The words of one text, interned in order.
    pub fn words(&mut self, words: &[String]) -> Vec<u32> {
        words.iter().map(|w| self.intern(w)).collect()
    }

    pub fn len(&self) -> usize {
        self.texts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    /// Maps every plural to its singular, once all words are in: a singular the catalogue
    /// uses wins (`hoodies` → `hoodie` when someone wrote "hoodie", `berries` → `berry`
    /// when someone wrote "berry"); otherwise the likeliest reading (`fold`).
    pub fn fold_plurals(&mut self) {
        for id in 0..self.texts.len() {
            let word = self.texts[id].clone();
            let options = singulars(&word);
            if options.is_empty() {
                continue;
            }
            let used = options.iter().find(|s| self.ids.contains_key(s.as_str()));
            let singular = match used {
                Some(s) => s.clone(),
                None => fold(&word),
            };
            let target = self.intern(&singular);
            self.canonical[id] = self.canonical[target as usize];
        }
        self.frozen = true;
    }

    /// The folded id of `word` under the frozen vocabulary (after `fold_plurals`): a base
    /// word's own; otherwise the base singular it is the plural of, else its likeliest
    /// singular (`fold`) — a base word's id when the base has it, an extra word's if not.
    pub fn resolve(&mut self, word: &str) -> u32 {
        if let Some(&id) = self.ids.get(word) {
            if id < self.base {
                return self.canonical[id as usize];
            }
        }
        let used = singulars(word)
            .into_iter()
            .find_map(|s| self.ids.get(&s).copied().filter(|&id| id < self.base));
        if let Some(id) = used {
            return self.canonical[id as usize];
        }
        let folded = fold(word);
        match self.ids.get(&folded) {
            Some(&id) => self.canonical[id as usize],
            None => self.intern(&folded),
        }
    }

    /// How many words folding and joining consult (the base): every word a later
    /// `resolve` adds has an id from here on.
    pub fn base_len(&self) -> usize {
        self.base as usize
    }

    /// Every word's text and folded id, by id, and the base's size: what `from_parts`
    /// rebuilds the same vocabulary from.
    pub fn parts(&self) -> (&[String], &[u32], usize) {
        (&self.texts, &self.canonical, self.base as usize)
    }

    /// A frozen vocabulary from its `parts`; `None` when they do not fit together.
    pub fn from_parts(texts: Vec<String>, canonical: Vec<u32>, base: usize) -> Option<Self> {
        let fits = texts.len() == canonical.len()
            && base <= texts.len()
            && canonical.iter().all(|&c| (c as usize) < texts.len());
        if !fits {
            return None;
        }
        let ids = texts
            .iter()
            .enumerate()
            .map(|(id, t)| (t.clone(), id as u32))
            .collect();
        Some(Self {
            ids,
            texts,
            canonical,
            base: base as u32,
            frozen: true,
        })
    }

    /// The folded id of a base word: what joining consults.
    fn get(&self, word: &str) -> Option<u32> {
        self.ids
            .get(word)
            .filter(|&&id| id < self.base)
            .map(|&id| self.canonical[id as usize])
    }
}

/// Folds plurals, then joins adjacent words whose concatenation is a word of the vocabulary,
/// left to right, then drops the single letters left over. Needs `fold_plurals` first.
pub fn join_compounds(seq: &[u32], vocabulary: &Vocabulary) -> Vec<u32> {
    let seq: Vec<u32> = seq
        .iter()
        .map(|&id| vocabulary.canonical[id as usize])
        .collect();
    join_folded(&seq, vocabulary)
}

/// Joins adjacent folded ids whose concatenation is a base word, left to right, then drops
/// the single letters left over.
fn join_folded(seq: &[u32], vocabulary: &Vocabulary) -> Vec<u32> {
    let text = |id: u32| vocabulary.texts[id as usize].as_str();
    let mut out = Vec::with_capacity(seq.len());
    let mut i = 0;
    let mut joined = String::new();
    while i < seq.len() {
        if let Some(&next) = seq.get(i + 1) {
            joined.clear();
            joined.push_str(text(seq[i]));
            joined.push_str(text(next));
            if let Some(id) = vocabulary.get(&joined) {
                out.push(id);
                i += 2;
                continue;
            }
        }
        if text(seq[i]).chars().count() > 1 {
            out.push(seq[i]);
        }
        i += 1;
    }
    out
}

/// A product's identity as a sorted set of ids: name words and brand words, each joined
/// against the vocabulary, together. Needs `fold_plurals` first.
pub fn identity(name: &[u32], brand: &[u32], vocabulary: &Vocabulary) -> Vec<u32> {
    let mut set = join_compounds(name, vocabulary);
    set.extend(join_compounds(brand, vocabulary));
    set.sort_unstable();
    set.dedup();
    set
}

/// A product's identity under a frozen vocabulary, from its words as text: each word
/// resolved (`Vocabulary::resolve`), then joined against the base. The same as `identity`
/// for words the base has.
pub fn frozen_identity(name: &[String], brand: &[String], vocabulary: &mut Vocabulary) -> Vec<u32> {
    let name: Vec<u32> = name.iter().map(|w| vocabulary.resolve(w)).collect();
    let brand: Vec<u32> = brand.iter().map(|w| vocabulary.resolve(w)).collect();
    let mut set = join_folded(&name, vocabulary);
    set.extend(join_folded(&brand, vocabulary));
    set.sort_unstable();
    set.dedup();
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_fold_to_the_singular_and_other_words_stay() {
        for (plural, single) in [
            ("shirts", "shirt"),
            ("shoes", "shoe"),
            ("boxes", "box"),
            ("lunchboxes", "lunchbox"),
            ("glasses", "glass"),
            ("brushes", "brush"),
            ("berries", "berry"),
            ("hoodies", "hoody"),
            ("earbuds", "earbud"),
            ("glass", "glass"),
            ("bus", "bus"),
            ("cactus", "cactus"),
            ("shirt", "shirt"),
        ] {
            assert_eq!(fold(plural), single, "{plural}");
            assert_eq!(fold(&fold(plural)), single, "folding {plural} twice");
        }
    }

    #[test]
    fn a_singular_the_catalogue_uses_wins_over_the_likeliest_reading() {
        let mut v = Vocabulary::default();
        let plural = v.words(&["hoodies".into(), "berries".into()]);
        let single = v.words(&["hoodie".into()]);
        v.fold_plurals();
        assert_eq!(
            join_compounds(&plural[..1], &v),
            join_compounds(&single, &v)
        );
        assert_eq!(
            v.texts[join_compounds(&plural[1..], &v)[0] as usize],
            "berry"
        );
    }

    #[test]
    fn adjacent_words_join_when_the_catalogue_writes_them_as_one() {
        let mut v = Vocabulary::default();
        let spaced = v.words(&["acme".into(), "t".into(), "shirts".into()]);
        let joined = v.words(&["tshirt".into(), "acme".into()]);
        let lone = v.words(&["usb".into(), "c".into()]);
        v.fold_plurals();
        assert_eq!(identity(&spaced, &[], &v), identity(&joined, &[], &v));
        assert_eq!(
            join_compounds(&lone, &v).len(),
            1,
            "the lone letter is dropped"
        );
    }
}
