//! Word tokens and word shingles, used for term counts and near-duplicate detection.

use std::collections::HashSet;

/// Lowercased alphanumeric word tokens.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| w.to_lowercase())
}

/// Number of distinct word tokens.
pub fn distinct_terms(text: &str) -> usize {
    words(text).collect::<HashSet<_>>().len()
}

/// Shingle width in words.
pub const SHINGLE_WORDS: usize = 3;

/// Hashes of the word 3-shingles of `text` (one shingle of all words when there are fewer).
pub fn shingle_hashes(text: &str) -> HashSet<u64> {
    let ws: Vec<u64> = words(text).map(|w| fnv1a(w.as_bytes())).collect();
    let k = SHINGLE_WORDS.min(ws.len());
    if k == 0 {
        return HashSet::new();
    }
    ws.windows(k)
        .map(|win| {
            win.iter()
                .fold(0xcbf2_9ce4_8422_2325u64, |h, w| mix64(h ^ w))
        })
        .collect()
}

/// Jaccard similarity of two sets.
pub fn jaccard(a: &HashSet<u64>, b: &HashSet<u64>) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let (small, large) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    let inter = small.iter().filter(|x| large.contains(x)).count();
    inter as f64 / (a.len() + b.len() - inter) as f64
}

pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// SplitMix64 finaliser: a fast, well-mixed 64-bit permutation.
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_distinct_lowercased_terms() {
        assert_eq!(distinct_terms("The cat, the HAT; the café!"), 4);
    }

    #[test]
    fn jaccard_of_shingles() {
        let a = shingle_hashes("one two three four five");
        let b = shingle_hashes("one two three four six");
        // shingles: {123,234,345} vs {123,234,346}: 2 shared of 4
        assert!((jaccard(&a, &b) - 0.5).abs() < 1e-9);
        assert_eq!(jaccard(&a, &a), 1.0);
        assert_eq!(shingle_hashes("two words").len(), 1);
    }
}
