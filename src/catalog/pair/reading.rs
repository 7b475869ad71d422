//! Reading a catalogue for a pair: each product's traits (category and material named by
//! id) and its identity (`catalog::tokens`) as word ids of one vocabulary, with the word
//! weights counted on it — what `embed` makes vectors and groups of.
//!
//! Names are tokenised on every core in chunks; words are interned in the order they first
//! appear in the catalogue whatever the number of cores, so a word's id is the same on any
//! machine. Scores do not depend on the ids at all: weights sit on a grid on which `dot`
//! sums exactly, so two catalogues that weigh the same words alike score them alike to the
//! bit, whatever order their words were numbered in (a full pair after an incremental one).

use std::collections::HashMap;

use tokio_util::sync::CancellationToken;

use super::embed::{Embedding, STOP_STRIDE};
use super::{Weights, CORES};
use crate::catalog::extract::{identity_tokens, name_words};
use crate::catalog::products::{PairingInput, ProductKey, Traits, NO_CATEGORY};
use crate::catalog::rows::Rows;
use crate::catalog::tokens::{frozen_identity, identity, Vocabulary};
use crate::catalog::{check, CatalogError};

/// From how many products a chunk is tokenised on several threads.
const PARALLEL_FROM: usize = 2048;

/// Categories and materials by name, in order of first appearance.
#[derive(Clone, Debug, Default)]
pub struct Names {
    ids: HashMap<String, u32>,
    names: Vec<String>,
}

impl Names {
    pub fn id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.ids.insert(name.to_owned(), id);
        self.names.push(name.to_owned());
        id
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn from_names(names: Vec<String>) -> Self {
        let ids = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i as u32))
            .collect();
        Self { ids, names }
    }
}

/// The traits of one product, naming its category (lowercased) and material.
pub fn traits_of(input: &PairingInput, categories: &mut Names, materials: &mut Names) -> Traits {
    Traits {
        category: input
            .category
            .as_deref()
            .map_or(NO_CATEGORY, |c| categories.id(&c.to_lowercase())),
        price: input.price_cents,
        material: input.material.as_deref().map(|m| materials.id(m)),
    }
}

/// One product's words as text: its name's identity words (variants out where enrichment
/// ran; every word where it has not) and its brand's words.
pub fn words_of(input: &PairingInput) -> (Vec<String>, Vec<String>) {
    let name = if input.enriched {
        identity_tokens(&input.name)
    } else {
        name_words(&input.name)
    };
    let brand = input.brand.as_deref().map(name_words).unwrap_or_default();
    (name, brand)
}

/// A catalogue read for a full pair: keys, traits and each product's words as ids of one
/// vocabulary, before folding. Chunks are added in key order.
#[derive(Default)]
pub struct Reading {
    pub keys: Vec<ProductKey>,
    pub versions: Vec<u64>,
    pub traits: Vec<Traits>,
    pub categories: Names,
    pub materials: Names,
    vocabulary: Vocabulary,
    /// Per product two rows: its name's words, then its brand's.
    words: Rows<u32>,
}

/// One thread's share of a chunk: its words interned locally, in order of first appearance.
struct LocalWords {
    texts: Vec<String>,
    rows: Rows<u32>,
}

fn tokenise(inputs: &[PairingInput]) -> LocalWords {
    let mut ids: HashMap<String, u32> = HashMap::new();
    let mut texts = Vec::new();
    let mut rows = Rows::with_capacity(inputs.len() * 2, inputs.len() * 8);
    let mut row = Vec::new();
    for input in inputs {
        let (name, brand) = words_of(input);
        for words in [name, brand] {
            row.clear();
            for w in words {
                let next = texts.len() as u32;
                let id = *ids.entry(w).or_insert_with_key(|w| {
                    texts.push(w.clone());
                    next
                });
                row.push(id);
            }
            rows.push(&row);
        }
    }
    LocalWords { texts, rows }
}

impl Reading {
    pub fn new() -> Self {
        Self {
            words: Rows::new(),
            ..Self::default()
        }
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Adds a chunk of products (with their versions): tokenised on every core, interned in
    /// catalogue order.
    pub fn add(&mut self, inputs: Vec<PairingInput>, versions: &[u64]) {
        self.versions.extend_from_slice(versions);
        let threads = if inputs.len() < PARALLEL_FROM {
            1
        } else {
            *CORES
        };
        let per = inputs.len().div_ceil(threads.max(1)).max(1);
        let locals: Vec<LocalWords> = std::thread::scope(|scope| {
            let handles: Vec<_> = inputs
                .chunks(per)
                .map(|part| scope.spawn(move || tokenise(part)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("tokenising does not panic: it reads text"))
                .collect()
        });
        for local in locals {
            let global: Vec<u32> = local
                .texts
                .iter()
                .map(|t| self.vocabulary.intern(t))
                .collect();
            for r in 0..local.rows.len() {
                let row: Vec<u32> = local
                    .rows
                    .row(r)
                    .iter()
                    .map(|&l| global[l as usize])
                    .collect();
                self.words.push(&row);
            }
        }
        for input in inputs {
            let traits = traits_of(&input, &mut self.categories, &mut self.materials);
            self.traits.push(traits);
            self.keys.push(input.product_key);
        }
    }

    /// Folds the vocabulary and makes every product's identity, then counts each word's
    /// products: the catalogue ready to weigh. `Cancelled` once `stop` is (looked at every
    /// `STOP_STRIDE` products on each thread).
    pub fn identities(mut self, stop: &CancellationToken) -> Result<Prepared, CatalogError> {
        self.vocabulary.fold_plurals();
        let n = self.keys.len();
        let vocabulary = &self.vocabulary;
        let words = &self.words;
        let threads = if n < PARALLEL_FROM { 1 } else { *CORES };
        let per = n.div_ceil(threads.max(1)).max(1);
        let parts: Vec<Rows<u32>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..n)
                .step_by(per)
                .map(|start| {
                    scope.spawn(move || {
                        let end = (start + per).min(n);
                        let mut out = Rows::with_capacity(end - start, (end - start) * 5);
                        for i in start..end {
                            if (i - start) % STOP_STRIDE == 0 && stop.is_cancelled() {
                                break;
                            }
                            out.push(&identity(
                                words.row(2 * i),
                                words.row(2 * i + 1),
                                vocabulary,
                            ));
                        }
                        out
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("making identities does not panic"))
                .collect()
        });
        check(stop)?;
        drop(self.words);
        let mut identities = Rows::with_capacity(n, parts.iter().map(|p| p.items().len()).sum());
        for part in &parts {
            for i in 0..part.len() {
                identities.push(part.row(i));
            }
        }
        drop(parts);
        let weights = Weights::counted(self.vocabulary, &identities);
        Ok(Prepared {
            keys: self.keys,
            versions: self.versions,
            traits: self.traits,
            categories: self.categories,
            materials: self.materials,
            identities,
            weights,
        })
    }
}

/// A catalogue ready to weigh and score: per product (in key order) its key, version,
/// traits and identity, with the weights and the names its ids refer to.
pub struct Prepared {
    pub keys: Vec<ProductKey>,
    pub versions: Vec<u64>,
    pub traits: Vec<Traits>,
    pub categories: Names,
    pub materials: Names,
    pub identities: Rows<u32>,
    pub weights: Weights,
}

impl Prepared {
    /// The products' embedding, each at its rank in `ranks` (its traits are taken);
    /// `Cancelled` once `stop` is (`Embedding::new`).
    pub fn embed(
        &mut self,
        ranks: Vec<u32>,
        stop: &CancellationToken,
    ) -> Result<Embedding, CatalogError> {
        Embedding::new(
            &self.identities,
            std::mem::take(&mut self.traits),
            (ranks, self.categories.len() as u32),
            &self.weights,
            stop,
        )
    }
}

/// A product's identity under frozen weights (an incremental run's changed products).
pub fn frozen_identity_of(input: &PairingInput, weights: &mut Weights) -> Vec<u32> {
    let (name, brand) = words_of(input);
    frozen_identity(&name, &brand, &mut weights.vocabulary)
}

/// A product's identity under frozen weights, from its words (`words_of`).
pub fn frozen_identity_of_words(words: &Words, weights: &mut Weights) -> Vec<u32> {
    frozen_identity(&words.0, &words.1, &mut weights.vocabulary)
}

/// A product's name words and brand words, as text (`words_of`).
pub type Words = (Vec<String>, Vec<String>);

/// Each product's words (`words_of`; `None` for none), found on every core from
/// `PARALLEL_FROM` products (tokenising is most of reading a product), in order.
pub fn words_on_every_core(inputs: &[Option<&PairingInput>]) -> Vec<Option<Words>> {
    let threads = if inputs.len() < PARALLEL_FROM {
        1
    } else {
        *CORES
    };
    let per = inputs.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = inputs
            .chunks(per)
            .map(|part| scope.spawn(move || part.iter().map(|i| i.map(words_of)).collect()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| -> Vec<Option<Words>> {
                h.join().expect("tokenising does not panic: it reads text")
            })
            .collect()
    })
}
