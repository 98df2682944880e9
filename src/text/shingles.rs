//! Word tokens and word shingles, used for term counts and near-duplicate detection.

/// Lowercased alphanumeric word tokens.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| w.to_lowercase())
}

/// 64-bit hashes of the lowercased words of `text`, in order, without allocating per word.
pub fn word_hashes(text: &str) -> impl Iterator<Item = u64> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut h = 0xcbf2_9ce4_8422_2325u64;
            let mut eat = |b: u8| {
                h ^= b as u64;
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            };
            if w.is_ascii() {
                w.bytes().for_each(|b| eat(b.to_ascii_lowercase()));
            } else {
                let mut buf = [0u8; 4];
                for c in w.chars().flat_map(char::to_lowercase) {
                    c.encode_utf8(&mut buf).bytes().for_each(&mut eat);
                }
            }
            h
        })
}

/// Number of distinct word tokens.
pub fn distinct_terms(text: &str) -> usize {
    let mut hs: Vec<u64> = word_hashes(text).collect();
    hs.sort_unstable();
    hs.dedup();
    hs.len()
}

/// Shingle width in words.
pub const SHINGLE_WORDS: usize = 3;

/// A set of shingle hashes, sorted and de-duplicated.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShingleSet(pub Vec<u64>);

impl ShingleSet {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

/// Hashes of the word 3-shingles of `text` (one shingle of all words when there are fewer).
pub fn shingle_hashes(text: &str) -> ShingleSet {
    let ws: Vec<u64> = word_hashes(text).collect();
    let k = SHINGLE_WORDS.min(ws.len());
    if k == 0 {
        return ShingleSet::default();
    }
    let mut v: Vec<u64> = ws
        .windows(k)
        .map(|win| {
            win.iter()
                .fold(0xcbf2_9ce4_8422_2325u64, |h, w| mix64(h ^ w))
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    ShingleSet(v)
}

/// Jaccard similarity of two sets (a merge of the sorted hashes).
pub fn jaccard(a: &ShingleSet, b: &ShingleSet) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let (mut i, mut j, mut inter) = (0, 0, 0usize);
    while i < a.0.len() && j < b.0.len() {
        match a.0[i].cmp(&b.0[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                inter += 1;
                i += 1;
                j += 1;
            }
        }
    }
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

    #[test]
    fn jaccard_counts_what_two_sets_share() {
        // Sets drawn from a small range share many values, in every interleaving and length.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state = mix64(state);
            state % 64
        };
        for _ in 0..500 {
            let mut set = |n: u64| {
                let mut v: Vec<u64> = (0..next() % n).map(|_| next()).collect();
                v.sort_unstable();
                v.dedup();
                ShingleSet(v)
            };
            let (a, b) = (set(40), set(40));
            let shared = a.0.iter().filter(|x| b.0.contains(x)).count();
            let union = a.len() + b.len() - shared;
            let expected = if union == 0 {
                1.0
            } else {
                shared as f64 / union as f64
            };
            assert_eq!(jaccard(&a, &b), expected, "{a:?} {b:?}");
        }
    }
}
