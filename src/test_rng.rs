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
