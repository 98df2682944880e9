//! A small deterministic random sequence for tests that draw operations at random
//! (xorshift64: reproducible from its seed, no dependency).

pub struct XorShift(u64);

impl XorShift {
    /// A sequence from `seed` (not 0: xorshift would stay at 0).
    pub fn new(seed: u64) -> Self {
        XorShift(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number below `n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// `n` distinct sections of prose (`words` words each after a numbered heading) drawn from one
/// small vocabulary, as a database's sections share theirs: for tests of what compression or
/// near-duplicate detection makes of many similar sections.
pub fn prose(n: usize, seed: u64, words: usize) -> Vec<String> {
    const WORDS: &[&str] = &[
        "pages",
        "checksums",
        "replay",
        "the",
        "change",
        "log",
        "after",
        "a",
        "crash",
        "rebuilds",
        "lexical",
        "index",
        "from",
        "store",
        "when",
        "missing",
        "or",
        "behind",
        "group",
        "commit",
        "journal",
        "writer",
        "dictionary",
        "trained",
        "once",
        "content",
        "under",
        "its",
        "kbid",
    ];
    let mut rng = XorShift::new(seed);
    (0..n)
        .map(|i| {
            let mut text = format!("## Entry {i}\n\n");
            for w in 0..words {
                text.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
                text.push(if w % 10 == 9 { '\n' } else { ' ' });
            }
            text.trim_end().to_string()
        })
        .collect()
}
