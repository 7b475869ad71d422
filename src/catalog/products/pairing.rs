//! The pairing state: what pair keeps between runs so that the next one re-scores only what
//! changed — the word weights of the last full run, and per product (in key order) the
//! version it was paired at, its identity, its traits and its exact best neighbours: the top
//! k and a few more (`pair::score::KEPT_BEYOND_TOP_K`), with how far that list is known
//! complete (`Known`). It *is* the neighbour table: a row is a product's top k (the first k
//! of its list), its scores rounded to four decimals.
//!
//! Bounded: about `44 + 12·(identity words) + 8·(top_k + 2)` bytes a product plus the
//! vocabulary (about 160 bytes a product for a catalogue of five-word identities at `top_k`
//! 5). Redis keeps it as one binary string next to the table (`encode`, versioned); the
//! embedded store keeps it as it is.

use super::record::{Neighbour, ProductKey};
use crate::catalog::rows::Rows;

/// What a product brings to pairing besides its identity, in ids of the state's names.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Traits {
    /// An index into `Pairing::categories`, or `NO_CATEGORY`.
    pub category: u32,
    pub price: Option<i64>,
    /// An index into `Pairing::materials`.
    pub material: Option<u32>,
}

/// The category of a product that has none: comparable to every category.
pub const NO_CATEGORY: u32 = u32::MAX;

/// The word weights a pairing was made with: the vocabulary (every word's text and folded
/// id, the first `base` of them the ones folding and joining consult), each word's document
/// frequency and the catalogue size they were counted on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WeightParts {
    pub words: Vec<String>,
    pub canonical: Vec<u32>,
    pub base: u32,
    pub df: Vec<u32>,
    pub counted: u32,
}

/// The state of a tenant's last pair (see the module doc).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pairing {
    /// Names this state among all a pair saved (minted at each save, never 0 once saved):
    /// what finds the index a pair kept in memory for it (`pair::kept`).
    pub token: u64,
    pub top_k: u32,
    pub min_score: f32,
    /// Products changed, added or removed by incremental runs since the last full one.
    pub changed_since_full: u64,
    pub weights: WeightParts,
    pub categories: Vec<String>,
    pub materials: Vec<String>,
    /// Every product paired, in key order; the rows below are by index into it.
    pub keys: Vec<ProductKey>,
    /// The version (`CatalogStore::versions`) each product was paired at.
    pub versions: Vec<u64>,
    pub traits: Vec<Traits>,
    /// Each product's identity: folded word ids, sorted.
    pub identities: Rows<u32>,
    /// Each product's best neighbours, best first: (product index, exact score); the first
    /// `top_k` are its row of the table.
    pub best: Rows<(u32, f32)>,
    /// Per product, how far its list is known complete.
    pub known: Vec<Known>,
}

/// How far a product's kept list holds every comparable product scoring at least
/// `min_score`, in the order neighbours rank (score, then same material, then key).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Known {
    /// It holds them all.
    All,
    /// It holds every one ranking before its last (a query kept that many and no more).
    ToLast,
    /// It holds every one scoring above this (its last has left since).
    Above(f32),
}

impl Known {
    /// Whether `list`, known this far, holds its first `top_k` for certain.
    pub fn proves(self, list: &[(u32, f32)], top_k: usize) -> bool {
        match self {
            Known::All => true,
            Known::ToLast => list.len() >= top_k,
            Known::Above(floor) => list.iter().filter(|&&(_, s)| s > floor).count() >= top_k,
        }
    }

    /// As 32 bits: a score for `Above`, the infinities for the others.
    fn to_bits(self) -> u32 {
        match self {
            Known::All => f32::NEG_INFINITY.to_bits(),
            Known::ToLast => f32::INFINITY.to_bits(),
            Known::Above(floor) => floor.to_bits(),
        }
    }

    fn from_bits(bits: u32) -> Self {
        match f32::from_bits(bits) {
            f if f == f32::NEG_INFINITY => Known::All,
            f if f == f32::INFINITY => Known::ToLast,
            f => Known::Above(f),
        }
    }
}

/// A score as the table holds it: four decimals.
pub fn rounded(score: f32) -> f64 {
    (f64::from(score) * 10_000.0).round() / 10_000.0
}

impl Pairing {
    /// The index of `key`, if it was paired.
    pub fn find(&self, key: &ProductKey) -> Option<usize> {
        self.keys.binary_search(key).ok()
    }

    /// Product `i`'s top k: (product index, exact score), best first.
    pub fn top(&self, i: usize) -> &[(u32, f32)] {
        let best = self.best.row(i);
        &best[..best.len().min(self.top_k as usize)]
    }

    /// The neighbour table's pairs: every product's top k, counted.
    pub fn pairs(&self) -> usize {
        (0..self.keys.len()).map(|i| self.top(i).len()).sum()
    }

    /// Product `i`'s row of the neighbour table; `None` when it has no neighbour.
    pub fn row(&self, i: usize) -> Option<Vec<Neighbour>> {
        let best = self.top(i);
        (!best.is_empty()).then(|| {
            best.iter()
                .map(|&(j, s)| Neighbour {
                    product_key: self.keys[j as usize].clone(),
                    score: rounded(s),
                })
                .collect()
        })
    }

    /// `key`'s row of the neighbour table.
    pub fn neighbours(&self, key: &ProductKey) -> Option<Vec<Neighbour>> {
        self.find(key).and_then(|i| self.row(i))
    }

    /// Products with at least one neighbour: the table's rows.
    pub fn paired(&self) -> usize {
        (0..self.keys.len())
            .filter(|&i| !self.best.row(i).is_empty())
            .count()
    }

    /// Bytes held, about.
    pub fn bytes(&self) -> usize {
        let words: usize = self.weights.words.iter().map(|w| w.len() + 24).sum();
        let keys: usize = self.keys.iter().map(|k| k.as_str().len() + 24).sum();
        words
            + keys
            + self.weights.canonical.len() * 4
            + self.weights.df.len() * 4
            + self.versions.len() * 8
            + self.traits.len() * std::mem::size_of::<Traits>()
            + self.identities.bytes()
            + self.best.bytes()
            + self.known.len() * std::mem::size_of::<Known>()
    }

    /// The state as bytes (little-endian, behind a magic and a format number).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::with_capacity(self.bytes()));
        w.0.extend_from_slice(MAGIC);
        w.u32(FORMAT);
        w.u64(self.token);
        w.u32(self.top_k);
        w.u32(self.min_score.to_bits());
        w.u64(self.changed_since_full);
        let p = &self.weights;
        w.strings(&p.words);
        w.u32s(&p.canonical);
        w.u32(p.base);
        w.u32s(&p.df);
        w.u32(p.counted);
        w.strings(&self.categories);
        w.strings(&self.materials);
        w.u32(self.keys.len() as u32);
        for k in &self.keys {
            w.str(k.as_str());
        }
        for &v in &self.versions {
            w.u64(v);
        }
        for t in &self.traits {
            w.u32(t.category);
            w.u64(t.price.map_or(u64::MAX, |p| p as u64));
            w.u32(t.material.unwrap_or(u32::MAX));
        }
        let (offsets, words) = self.identities.parts();
        w.u32s(offsets);
        w.u32s(words);
        let (offsets, best) = self.best.parts();
        w.u32s(offsets);
        w.u32(best.len() as u32);
        for &(j, s) in best {
            w.u32(j);
            w.u32(s.to_bits());
        }
        for &k in &self.known {
            w.u32(k.to_bits());
        }
        w.0
    }

    /// A state from `encode`'s bytes; why not, when they are not one (another format, cut
    /// short, inconsistent).
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut r = Reader(bytes);
        if r.take(MAGIC.len())? != MAGIC || r.u32()? != FORMAT {
            return Err("not a pairing state of this format".into());
        }
        let token = r.u64()?;
        let (top_k, min_score, changed_since_full) = (r.u32()?, f32::from_bits(r.u32()?), r.u64()?);
        let weights = WeightParts {
            words: r.strings()?,
            canonical: r.u32s()?,
            base: r.u32()?,
            df: r.u32s()?,
            counted: r.u32()?,
        };
        let (categories, materials) = (r.strings()?, r.strings()?);
        let n = r.u32()? as usize;
        let keys = (0..n)
            .map(|_| ProductKey::parse(&r.string()?))
            .collect::<Result<Vec<_>, _>>()?;
        let versions = (0..n).map(|_| r.u64()).collect::<Result<Vec<_>, _>>()?;
        let traits = (0..n)
            .map(|_| {
                let category = r.u32()?;
                let price = r.u64()?;
                let material = r.u32()?;
                Ok(Traits {
                    category,
                    price: (price != u64::MAX).then_some(price as i64),
                    material: (material != u32::MAX).then_some(material),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let identities = Rows::from_parts(r.u32s()?, r.u32s()?).ok_or("identities")?;
        let offsets = r.u32s()?;
        let count = r.u32()? as usize;
        let best = (0..count)
            .map(|_| Ok((r.u32()?, f32::from_bits(r.u32()?))))
            .collect::<Result<Vec<_>, String>>()?;
        let best = Rows::from_parts(offsets, best).ok_or("neighbour rows")?;
        let known = (0..n)
            .map(|_| Ok(Known::from_bits(r.u32()?)))
            .collect::<Result<Vec<_>, String>>()?;
        let state = Self {
            token,
            top_k,
            min_score,
            changed_since_full,
            weights,
            categories,
            materials,
            keys,
            versions,
            traits,
            identities,
            best,
            known,
        };
        state.check()?;
        Ok(state)
    }

    /// Whether the parts fit together: every index in range, keys in order.
    fn check(&self) -> Result<(), String> {
        let n = self.keys.len();
        let words = self.weights.words.len();
        let fits = self.identities.len() == n
            && self.best.len() == n
            && self.known.len() == n
            && self.keys.windows(2).all(|k| k[0] < k[1])
            && self.weights.canonical.len() == words
            && self
                .identities
                .items()
                .iter()
                .all(|&t| (t as usize) < words)
            && self.best.items().iter().all(|&(j, _)| (j as usize) < n)
            && self.traits.iter().all(|t| {
                (t.category == NO_CATEGORY || (t.category as usize) < self.categories.len())
                    && t.material
                        .is_none_or(|m| (m as usize) < self.materials.len())
            });
        if fits {
            Ok(())
        } else {
            Err("the pairing state's parts do not fit together".into())
        }
    }
}

const MAGIC: &[u8] = b"catalog-jobs pairing\n";
/// Bumped whenever the encoding or what it means changes: a state of another format reads
/// as none, and the next pair is a full one (`first`). 4: scores summed exactly from weights
/// on a grid (`pair::vectors::weigh`); a state of 3 holds scores summed in f32, which an
/// incremental pair would mix with its own.
const FORMAT: u32 = 4;

struct Writer(Vec<u8>);

impl Writer {
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }

    fn strings(&mut self, items: &[String]) {
        self.u32(items.len() as u32);
        for s in items {
            self.str(s);
        }
    }

    fn u32s(&mut self, items: &[u32]) {
        self.u32(items.len() as u32);
        for &v in items {
            self.u32(v);
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err("the pairing state is cut short".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from(self.u32()?) | (u64::from(self.u32()?) << 32))
    }

    fn string(&mut self) -> Result<String, String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|e| e.to_string())
    }

    fn strings(&mut self) -> Result<Vec<String>, String> {
        let n = self.u32()? as usize;
        (0..n).map(|_| self.string()).collect()
    }

    fn u32s(&mut self) -> Result<Vec<u32>, String> {
        let n = self.u32()? as usize;
        if self.0.len() < n.saturating_mul(4) {
            return Err("the pairing state is cut short".into());
        }
        (0..n).map(|_| self.u32()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pairing_state_reads_back_as_it_was_written_and_a_cut_one_does_not_read() {
        let key = |k: &str| ProductKey::parse(k).unwrap();
        let mut identities = Rows::new();
        identities.push(&[0, 1]);
        identities.push(&[1]);
        let mut best = Rows::new();
        best.push(&[(1, 0.75), (1, 0.5)]);
        best.push(&[]);
        let state = Pairing {
            token: 11,
            top_k: 1,
            min_score: 0.2,
            changed_since_full: 3,
            weights: WeightParts {
                words: vec!["acme".into(), "tee".into()],
                canonical: vec![0, 1],
                base: 2,
                df: vec![1, 2],
                counted: 2,
            },
            categories: vec!["apparel".into()],
            materials: vec![],
            keys: vec![key("a"), key("b")],
            versions: vec![7, 9],
            traits: vec![
                Traits {
                    category: 0,
                    price: Some(100),
                    material: None,
                },
                Traits {
                    category: NO_CATEGORY,
                    price: None,
                    material: None,
                },
            ],
            identities,
            best,
            known: vec![Known::Above(0.5), Known::All],
        };
        let bytes = state.encode();
        assert_eq!(Pairing::decode(&bytes), Ok(state.clone()));
        assert!(Pairing::decode(&bytes[..bytes.len() - 1]).is_err());
        let mut older = bytes.clone();
        older[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&3u32.to_le_bytes());
        assert!(
            Pairing::decode(&older).is_err(),
            "the last version's state is not read"
        );
        assert_eq!(state.neighbours(&key("a")).unwrap().len(), 1, "its top 1");
        assert_eq!(state.neighbours(&key("a")).unwrap()[0].score, 0.75);
        assert_eq!(state.pairs(), 1);
        let list = [(1, 0.75), (2, 0.5)];
        assert!(Known::Above(0.5).proves(&list, 1) && !Known::Above(0.5).proves(&list, 2));
        assert!(Known::ToLast.proves(&list, 2) && Known::All.proves(&[], 5));
        for k in [Known::All, Known::ToLast, Known::Above(0.25)] {
            assert_eq!(Known::from_bits(k.to_bits()), k);
        }
        assert_eq!(state.neighbours(&key("b")), None);
        assert_eq!(state.paired(), 1);
    }
}
