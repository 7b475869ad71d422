//! A product's identity as a vector, and the score of two: each word weighing its idf,
//! L2-normalised, every weight on a grid on which a dot product sums exactly — so a score
//! does not depend on the order of its words, nor on their ids (a full pair numbers words by
//! first appearance, an incremental one keeps the last full pair's numbers).

/// The grid every vector weight is rounded to (`weigh`): 2^-24. Weights of at most 1 on it
/// multiply to multiples of 2^-48 that an f64 holds exactly, and so are their sums below
/// 2^5 (a cosine is at most 1): `dot` sums exactly, so a score does not depend on the order
/// of its words — on their ids, which a full pair numbers by first appearance.
const WEIGHT_GRID: f64 = (1u64 << 24) as f64;

/// An identity's vector: each word weighing `idf(word)`, L2-normalised, each weight on
/// `WEIGHT_GRID`. One function for every vector a pair makes, so a vector made again is the
/// same to the last bit; and the same whatever the words' ids: the squares are summed in
/// the order of their values, not of the ids.
pub fn weigh(set: &[u32], idf: impl Fn(u32) -> f32, out: &mut Vec<(u32, f32)>) {
    out.clear();
    out.extend(set.iter().map(|&t| (t, idf(t))));
    // Positive floats order as their bits do; equal weights add the same in any order.
    out.sort_unstable_by_key(|&(_, w)| w.to_bits());
    let norm = out
        .iter()
        .map(|&(_, w)| f64::from(w) * f64::from(w))
        .sum::<f64>()
        .sqrt();
    for (_, w) in out.iter_mut() {
        *w = ((f64::from(*w) / norm * WEIGHT_GRID).round() / WEIGHT_GRID) as f32;
    }
    out.sort_unstable_by_key(|&(t, _)| t);
}

/// The dot product of two sparse vectors sorted by word (`weigh`'s): summed exactly in an
/// f64, so the same whatever order the words come in, then rounded once.
pub fn dot(a: &[(u32, f32)], b: &[(u32, f32)]) -> f32 {
    let (mut x, mut y, mut sum) = (0, 0, 0.0f64);
    while x < a.len() && y < b.len() {
        let (ta, tb) = (a[x].0, b[y].0);
        if ta == tb {
            sum += f64::from(a[x].1) * f64::from(b[y].1);
            x += 1;
            y += 1;
        } else if ta < tb {
            x += 1;
        } else {
            y += 1;
        }
    }
    sum as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Idfs of ten words, irregular enough that float sums depend on their order.
    const IDF: [f32; 10] = [
        1.0, 7.318_273, 3.141_3, 11.002_3, 1.000_001, 5.5, 2.718_9, 9.87, 4.2, 13.3,
    ];

    /// `word`'s id under numbering `n`: the identity, or the reverse.
    fn id(word: u32, n: u32) -> u32 {
        if n == 0 {
            word
        } else {
            9 - word
        }
    }

    fn vector(words: &[u32], n: u32) -> Vec<(u32, f32)> {
        let mut set: Vec<u32> = words.iter().map(|&w| id(w, n)).collect();
        set.sort_unstable();
        let mut out = Vec::new();
        weigh(&set, |t| IDF[id(t, n) as usize], &mut out);
        out
    }

    #[test]
    fn a_score_is_the_same_to_the_bit_whatever_order_the_words_are_numbered_in() {
        let sets: [&[u32]; 5] = [
            &[0, 1, 2, 3, 4, 5, 6],
            &[1, 2, 3, 4, 5, 6, 7, 8, 9],
            &[0, 3, 5, 7, 9],
            &[2, 4, 6, 8, 1, 3],
            &[9, 8, 7, 0],
        ];
        for a in sets {
            for b in sets {
                let (a0, b0) = (vector(a, 0), vector(b, 0));
                let (a1, b1) = (vector(a, 1), vector(b, 1));
                let weight = |v: &[(u32, f32)], w: u32, n: u32| {
                    v.iter()
                        .find(|&&(t, _)| t == id(w, n))
                        .map(|&(_, x)| x.to_bits())
                };
                for w in 0..10 {
                    assert_eq!(weight(&a0, w, 0), weight(&a1, w, 1), "{a:?}: word {w}");
                }
                assert_eq!(
                    dot(&a0, &b0).to_bits(),
                    dot(&a1, &b1).to_bits(),
                    "{a:?}·{b:?}"
                );
            }
            let own = dot(&vector(a, 0), &vector(a, 0));
            assert!((own - 1.0).abs() < 1e-6, "{a:?}: {own}");
        }
    }
}
