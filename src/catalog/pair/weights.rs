//! Word weights: each identity word weighs its inverse document frequency
//! `ln((n + 1) / (df + 1)) + 1`, over the vocabulary they were counted on.
//!
//! A full pair counts them on the catalogue it pairs. An incremental pair keeps the ones of
//! the last full pair (its vocabulary, `df` and `n`), so that every unchanged product keeps
//! its vector and its scores; a word that pair never counted weighs as if seen once.

use crate::catalog::products::WeightParts;
use crate::catalog::rows::Rows;
use crate::catalog::tokens::Vocabulary;

/// A vocabulary with each word's document frequency and the catalogue size they were
/// counted on.
pub struct Weights {
    pub(super) vocabulary: Vocabulary,
    /// Products whose identity holds each word (by folded id); words after its end were
    /// never counted.
    df: Vec<u32>,
    n: u32,
}

impl Weights {
    /// The weights of a catalogue: `vocabulary` (folded) and its products' `identities`.
    pub fn counted(vocabulary: Vocabulary, identities: &Rows<u32>) -> Self {
        let mut df = vec![0u32; vocabulary.len()];
        for &t in identities.items() {
            df[t as usize] += 1;
        }
        Self {
            vocabulary,
            df,
            n: u32::try_from(identities.len()).expect("fewer than 2^32 products"),
        }
    }

    /// Weights kept by an earlier run; `None` when the parts do not fit together.
    pub fn from_parts(parts: WeightParts) -> Option<Self> {
        let vocabulary = Vocabulary::from_parts(parts.words, parts.canonical, parts.base as usize)?;
        (parts.df.len() <= vocabulary.len()).then_some(Self {
            vocabulary,
            df: parts.df,
            n: parts.counted,
        })
    }

    /// The weights as a pairing state keeps them.
    pub fn parts(&self) -> WeightParts {
        let (words, canonical, base) = self.vocabulary.parts();
        WeightParts {
            words: words.to_vec(),
            canonical: canonical.to_vec(),
            base: base as u32,
            df: self.df.clone(),
            counted: self.n,
        }
    }

    pub fn vocabulary(&self) -> &Vocabulary {
        &self.vocabulary
    }

    /// Every word's weight, by id: a word never counted (or counted nowhere) weighs as if
    /// seen once.
    pub fn idf(&self) -> Vec<f32> {
        (0..self.vocabulary.len() as u32)
            .map(|t| self.idf_of(t))
            .collect()
    }

    /// Word `t`'s weight (`idf`'s, computed alone for the few words an incremental pair
    /// weighs).
    pub fn idf_of(&self, t: u32) -> f32 {
        let n = self.n as f32;
        let df = self.df.get(t as usize).copied().unwrap_or(0).max(1);
        ((n + 1.0) / (df as f32 + 1.0)).ln() + 1.0
    }

    pub fn len(&self) -> usize {
        self.vocabulary.len()
    }

    pub fn is_empty(&self) -> bool {
        self.vocabulary.is_empty()
    }
}
