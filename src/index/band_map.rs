//! The band index's map from a band key to its members (`u32` → `u32`), held compact: a hash
//! map of millions of keys costs 9 bytes a bucket at a load of 44–88 %, and while it doubles
//! the old and the new table are both in memory (~110 MB at a million sections). Here most keys
//! sit in a sorted run of (key, value) pairs, 8 bytes each, found through a radix table of
//! their top bits and a short binary search; keys added since the run was merged wait in a
//! small hash map. The run is stored in chunks of 512 KiB, so growing it adds chunks and never
//! copies it: a merge holds no second copy of the run.
//!
//! A band several sections share lists them in `BandLists`: blocks in chunks of one buffer, each
//! a header and a power-of-two room for members, instead of a vector each (24 bytes of header
//! and an allocation of its own for the 2–5 members most such bands have).

use foldhash::{HashMap, HashMapExt};

/// A removed key's value in the run (until the next merge drops it). The band index's values
/// are section numbers and list indexes below 2^31 with a marker bit: never this one.
const GONE: u32 = u32::MAX;

#[derive(Debug)]
pub struct BandMap {
    /// The run: (key, value) in ascending key order (a key and its value share a cache line).
    run: Run,
    /// `starts[p]`: where the keys whose top `radix_bits` bits are `p` begin in the run.
    starts: Vec<u32>,
    radix_bits: u32,
    /// Keys not in the run, or in it only as removed; a fresh key shadows the run.
    fresh: HashMap<u32, u32>,
    /// Keys of the run marked `GONE`.
    gone: usize,
}

impl Default for BandMap {
    fn default() -> Self {
        BandMap {
            run: Run::default(),
            starts: vec![0, 0],
            radix_bits: 0,
            fresh: HashMap::new(),
            gone: 0,
        }
    }
}

/// Fresh keys that trigger a merge: an eighth of the run, within bounds (a merge moves the
/// whole run, so the share keeps its cost per key constant; the upper bound keeps the fresh
/// map itself small).
fn merge_at(run: usize) -> usize {
    let low = if cfg!(test) { 4 } else { 4096 };
    (run / 8).clamp(low, 1 << 18)
}

impl BandMap {
    /// The radix table's slot of `key`.
    fn slot(&self, key: u32) -> usize {
        if self.radix_bits == 0 {
            0
        } else {
            (key >> (32 - self.radix_bits)) as usize
        }
    }

    /// Start bringing into the cache what looking up `keys` will read. A lookup is two
    /// dependent cache misses (the radix table, then the run), and a section's 16 band keys were
    /// looked up one after the other: the writer spent ~9 % of its time waiting on them.
    /// Asked for all at once, in two waves, the misses overlap.
    pub fn prefetch(&self, keys: &[u32]) {
        for &key in keys {
            prefetch(&self.starts[self.slot(key)]);
        }
        for &key in keys {
            let p = self.slot(key);
            let (lo, hi) = (self.starts[p] as usize, self.starts[p + 1] as usize);
            if lo < hi {
                // The few pairs of a slot span one or two cache lines.
                prefetch(self.run.pair(lo));
                prefetch(self.run.pair(hi - 1));
            }
        }
    }

    /// Where `key` is in the run.
    fn position(&self, key: u32) -> Option<usize> {
        let p = self.slot(key);
        let (mut lo, mut hi) = (self.starts[p] as usize, self.starts[p + 1] as usize);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.run.get(mid).0.cmp(&key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    /// Where `key` is live in the run. A key live in the run is never in the fresh map (a fresh
    /// key only shadows one removed from the run), so the run is asked first and the map only
    /// when the run does not have it: one lookup of each at most.
    fn live(&self, key: u32) -> Option<usize> {
        self.position(key).filter(|&i| *self.run.value(i) != GONE)
    }

    pub fn get(&self, key: &u32) -> Option<&u32> {
        match self.live(*key) {
            Some(i) => Some(self.run.value(i)),
            None => self.fresh.get(key),
        }
    }

    pub fn get_mut(&mut self, key: &u32) -> Option<&mut u32> {
        match self.live(*key) {
            Some(i) => Some(self.run.value_mut(i)),
            None => self.fresh.get_mut(key),
        }
    }

    /// Add `key`, which `get` just did not find (one lookup less than `insert`).
    pub fn insert_new(&mut self, key: u32, value: u32) {
        debug_assert_ne!(value, GONE);
        debug_assert!(self.live(key).is_none(), "a key live in the run");
        self.fresh.insert(key, value);
        if self.fresh.len() >= merge_at(self.run.len()) {
            self.merge();
        }
    }

    pub fn insert(&mut self, key: u32, value: u32) {
        match self.get_mut(&key) {
            Some(v) => *v = value,
            None => self.insert_new(key, value),
        }
    }

    pub fn remove(&mut self, key: &u32) {
        if self.fresh.remove(key).is_some() {
            return;
        }
        if let Some(i) = self.live(*key) {
            *self.run.value_mut(i) = GONE;
            self.gone += 1;
            if self.gone >= merge_at(self.run.len()).max(self.run.len() / 4) {
                self.merge();
            }
        }
    }

    /// How many keys the map holds.
    pub fn len(&self) -> usize {
        self.run.len() - self.gone + self.fresh.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held on the heap, roughly (the fresh map's buckets at 9 bytes each).
    pub fn heap_bytes(&self) -> usize {
        self.run.heap_bytes() + self.starts.capacity() * 4 + self.fresh.capacity() * 9
    }

    /// Merge the fresh keys into the run and drop the removed ones, in place.
    fn merge(&mut self) {
        if self.gone > 0 {
            let mut kept = 0;
            for i in 0..self.run.len() {
                let pair = self.run.get(i);
                if pair.1 != GONE {
                    self.run.set(kept, pair);
                    kept += 1;
                }
            }
            self.run.resize(kept);
            self.gone = 0;
        }
        let mut fresh: Vec<(u32, u32)> = self.fresh.drain().collect();
        fresh.sort_unstable();
        // Merge from the back: the run grows by the fresh keys and each key moves at most once.
        let old = self.run.len();
        let total = old + fresh.len();
        self.run.resize(total);
        let (mut i, mut j) = (old, fresh.len());
        for out in (0..total).rev() {
            let from_run = j == 0 || (i > 0 && self.run.get(i - 1).0 > fresh[j - 1].0);
            if from_run {
                i -= 1;
                let pair = self.run.get(i);
                self.run.set(out, pair);
            } else {
                j -= 1;
                self.run.set(out, fresh[j]);
            }
        }
        if self.fresh.capacity() > 4 * merge_at(total) {
            self.fresh = HashMap::new();
        }
        self.index();
    }

    /// Rebuild the radix table: about eight keys a slot.
    fn index(&mut self) {
        let n = self.run.len();
        let bits = (usize::BITS - (n / 8).leading_zeros()).min(24);
        self.radix_bits = bits;
        let slots = 1usize << bits;
        let mut starts = std::mem::take(&mut self.starts);
        starts.clear();
        starts.reserve_exact(slots + 1);
        let mut i = 0usize;
        for p in 0..slots {
            while i < n && bits > 0 && ((self.run.get(i).0 >> (32 - bits)) as usize) < p {
                i += 1;
            }
            starts.push(if bits == 0 { 0 } else { i as u32 });
        }
        starts.push(n as u32);
        self.starts = starts;
    }

    /// The values, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.run.len())
            .map(|i| self.run.get(i).1)
            .filter(|&v| v != GONE)
            .chain(self.fresh.values().copied())
    }
}

/// The band map's run, in chunks of `RUN_CHUNK` pairs: it grows by a chunk, never by copying
/// itself into a larger buffer.
#[derive(Debug, Default)]
struct Run {
    chunks: Vec<Box<[(u32, u32)]>>,
    len: usize,
}

const RUN_CHUNK: usize = if cfg!(test) { 64 } else { 1 << 16 };

impl Run {
    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, i: usize) -> (u32, u32) {
        *self.pair(i)
    }

    fn set(&mut self, i: usize, pair: (u32, u32)) {
        self.chunks[i / RUN_CHUNK][i % RUN_CHUNK] = pair;
    }

    fn value(&self, i: usize) -> &u32 {
        &self.pair(i).1
    }

    fn pair(&self, i: usize) -> &(u32, u32) {
        &self.chunks[i / RUN_CHUNK][i % RUN_CHUNK]
    }

    fn value_mut(&mut self, i: usize) -> &mut u32 {
        &mut self.chunks[i / RUN_CHUNK][i % RUN_CHUNK].1
    }

    /// Grow (with zero pairs) or shrink to `len` pairs; chunks no longer needed are freed.
    fn resize(&mut self, len: usize) {
        let chunks = len.div_ceil(RUN_CHUNK);
        self.chunks.truncate(chunks);
        while self.chunks.len() < chunks {
            self.chunks.push(vec![(0, 0); RUN_CHUNK].into_boxed_slice());
        }
        self.len = len;
    }

    fn heap_bytes(&self) -> usize {
        self.chunks.len() * RUN_CHUNK * 8 + self.chunks.capacity() * 16
    }
}

/// The member lists of crowded bands, as blocks in chunks of one buffer. A block starts with a
/// header (its size class in the top 5 bits, its length in the other 27) followed by room for
/// `(4 << class) - 1` members; a list is named by where its block starts. A full list moves to
/// a block of the next class; blocks given up are reused by lists of their class. No block
/// spans two chunks, so the buffer grows by a chunk and is never copied.
#[derive(Debug, Default)]
pub struct BandLists {
    /// Each chunk reserves `LIST_CHUNK` slots and holds the ones handed out so far: memory
    /// reserved and not yet used is not touched, so a small index does not pay a whole chunk.
    chunks: Vec<Vec<u32>>,
    /// Slots used in the last chunk.
    used: usize,
    /// Starts of the free blocks, by class.
    free: Vec<Vec<u32>>,
}

/// Slots in a chunk of the lists' buffer (4 MiB; fewer in unit tests, so that they cross
/// chunks and fill the largest block).
const LIST_CHUNK: usize = if cfg!(test) { 1 << 8 } else { 1 << 20 };
/// The largest class: a block of a whole chunk.
const MAX_CLASS: u32 = LIST_CHUNK.trailing_zeros() - 2;
const LEN_BITS: u32 = 27;
const LEN_MASK: u32 = (1 << LEN_BITS) - 1;

fn room(class: u32) -> usize {
    (4usize << class) - 1
}

impl BandLists {
    /// The chunk holding the block at `start`, and where the block starts in it.
    fn locate(&self, start: u32) -> (usize, usize) {
        (start as usize / LIST_CHUNK, start as usize % LIST_CHUNK)
    }

    fn header(&self, start: u32) -> (u32, usize) {
        let (c, o) = self.locate(start);
        let h = self.chunks[c][o];
        (h >> LEN_BITS, (h & LEN_MASK) as usize)
    }

    fn set_header(&mut self, start: u32, class: u32, len: usize) {
        let (c, o) = self.locate(start);
        self.chunks[c][o] = (class << LEN_BITS) | len as u32;
    }

    /// The slots of the block at `start`: its header and its room.
    fn block_mut(&mut self, start: u32, class: u32) -> &mut [u32] {
        let (c, o) = self.locate(start);
        &mut self.chunks[c][o..o + 1 + room(class)]
    }

    /// A block of `class`, its header not yet set.
    fn allocate(&mut self, class: u32) -> u32 {
        if let Some(start) = self.free.get_mut(class as usize).and_then(Vec::pop) {
            return start;
        }
        let size = 4usize << class;
        if self.chunks.is_empty() || self.used + size > LIST_CHUNK {
            // The rest of the last chunk becomes free blocks, the largest that fit first.
            if let Some(last) = self.chunks.last_mut() {
                last.resize(LIST_CHUNK, 0);
                let base = (self.chunks.len() - 1) * LIST_CHUNK;
                let mut at = self.used;
                for c in (0..=MAX_CLASS).rev() {
                    while at + (4 << c) <= LIST_CHUNK {
                        self.release((base + at) as u32, c);
                        at += 4 << c;
                    }
                }
            }
            self.chunks.push(Vec::with_capacity(LIST_CHUNK));
            self.used = 0;
        }
        let start = (self.chunks.len() - 1) * LIST_CHUNK + self.used;
        self.used += size;
        if let Some(last) = self.chunks.last_mut() {
            last.resize(self.used, 0);
        }
        // A list is named by its start below the band index's marker bit: 2^31 slots (8 GiB of
        // lists, hundreds of millions of sections) before a start would collide with it.
        debug_assert!(start < 1 << 31, "band lists past 2^31 slots");
        start as u32
    }

    fn release(&mut self, start: u32, class: u32) {
        if self.free.len() <= class as usize {
            self.free.resize_with(class as usize + 1, Vec::new);
        }
        self.free[class as usize].push(start);
    }

    /// A new list of two members; where it starts.
    pub fn create(&mut self, first: u32, second: u32) -> u32 {
        let start = self.allocate(0);
        self.set_header(start, 0, 2);
        let block = self.block_mut(start, 0);
        block[1] = first;
        block[2] = second;
        start
    }

    /// Append `member` to the list at `start`; where the list starts now. A list filling the
    /// largest block (1,048,575 members) keeps its newer half and goes on from there: a band
    /// is read for its newest members only.
    pub fn push(&mut self, start: u32, member: u32) -> u32 {
        let (class, len) = self.header(start);
        if len < room(class) {
            self.block_mut(start, class)[1 + len] = member;
            self.set_header(start, class, len + 1);
            return start;
        }
        if class == MAX_CLASS {
            let keep = len / 2;
            let block = self.block_mut(start, class);
            block.copy_within(1 + len - keep..1 + len, 1);
            block[1 + keep] = member;
            self.set_header(start, class, keep + 1);
            return start;
        }
        let moved = self.allocate(class + 1);
        let (c, o) = self.locate(start);
        let (mc, mo) = self.locate(moved);
        if c == mc {
            self.chunks[c].copy_within(o + 1..o + 1 + len, mo + 1);
        } else {
            let (from, to) = if c < mc {
                let (a, b) = self.chunks.split_at_mut(mc);
                (&a[c], &mut b[0])
            } else {
                let (a, b) = self.chunks.split_at_mut(c);
                (&b[0], &mut a[mc])
            };
            to[mo + 1..mo + 1 + len].copy_from_slice(&from[o + 1..o + 1 + len]);
        }
        self.block_mut(moved, class + 1)[1 + len] = member;
        self.set_header(moved, class + 1, len + 1);
        self.release(start, class);
        moved
    }

    /// Start bringing the list at `start` into the cache (its header and first members).
    pub fn prefetch(&self, start: u32) {
        let (c, o) = self.locate(start);
        prefetch(&self.chunks[c][o]);
    }

    /// The members of the list at `start`, in the order they were added.
    pub fn members(&self, start: u32) -> &[u32] {
        let (_, len) = self.header(start);
        let (c, o) = self.locate(start);
        &self.chunks[c][o + 1..o + 1 + len]
    }

    pub fn members_mut(&mut self, start: u32) -> &mut [u32] {
        let (_, len) = self.header(start);
        let (c, o) = self.locate(start);
        &mut self.chunks[c][o + 1..o + 1 + len]
    }

    /// Take `member` out of the list at `start`, keeping the others in order; what is left.
    pub fn remove(&mut self, start: u32, member: u32) -> &[u32] {
        let (class, len) = self.header(start);
        let block = self.block_mut(start, class);
        if let Some(i) = block[1..1 + len].iter().position(|&m| m == member) {
            block.copy_within(2 + i..1 + len, 1 + i);
            self.set_header(start, class, len - 1);
        }
        self.members(start)
    }

    /// Give up the list at `start`.
    pub fn free(&mut self, start: u32) {
        let (class, _) = self.header(start);
        self.set_header(start, class, 0);
        self.release(start, class);
    }

    /// Bytes held on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum::<usize>() * 4
            + self
                .free
                .iter()
                .map(|f| f.capacity() * 4 + 24)
                .sum::<usize>()
    }
}

/// Ask the processor to bring the cache line holding `*item` closer: a hint that reads nothing
/// (a no-op where no prefetch instruction is available).
#[inline(always)]
fn prefetch<T>(item: &T) {
    // SAFETY: SSE is part of every x86_64 processor, and a prefetch neither reads nor writes
    // memory nor faults, whatever the address.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
            (item as *const T).cast(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = item;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Lists grown, shrunk and given up at random against plain vectors: each answers the same,
    /// and blocks given up are used again.
    #[test]
    fn lists_answer_as_vectors_would_and_reuse_their_blocks() {
        let mut lists = BandLists::default();
        let mut model: Vec<(u32, Vec<u32>)> = Vec::new();
        let mut rng = crate::test_rng::XorShift::new(0x2545_f491_4f6c_dd1d);
        let mut draw = |n: u64| rng.below(n);
        // Members are distinct, as a band's are.
        let mut next = 0u32;
        for step in 0..50_000u32 {
            match draw(10) {
                0..=1 => {
                    let start = lists.create(next, next + 1);
                    model.push((start, vec![next, next + 1]));
                    next += 2;
                }
                2..=6 if !model.is_empty() => {
                    let i = draw(model.len() as u64) as usize;
                    model[i].0 = lists.push(model[i].0, next);
                    let want = &mut model[i].1;
                    if want.len() == room(MAX_CLASS) {
                        // A full largest block keeps its newer half.
                        want.drain(..want.len() - want.len() / 2);
                    }
                    want.push(next);
                    next += 1;
                }
                7..=8 if !model.is_empty() => {
                    let i = draw(model.len() as u64) as usize;
                    let (start, want) = &mut model[i];
                    let member = want[draw(want.len() as u64) as usize];
                    want.retain(|&m| m != member);
                    assert_eq!(lists.remove(*start, member), &want[..]);
                    if want.len() < 2 {
                        lists.free(*start);
                        model.swap_remove(i);
                    }
                }
                _ if !model.is_empty() => {
                    let i = draw(model.len() as u64) as usize;
                    lists.free(model[i].0);
                    model.swap_remove(i);
                }
                _ => {}
            }
            if step % 1000 == 0 {
                for (start, want) in &model {
                    assert_eq!(lists.members(*start), &want[..], "step {step}");
                }
            }
        }
        let live: usize = model.iter().map(|(_, m)| m.len() + 1).sum();
        let slots: usize = lists.chunks.iter().map(Vec::len).sum();
        assert!(
            slots < 4 * live,
            "{slots} slots for {live} members and headers"
        );
        assert!(lists.chunks.len() > 1, "the lists span chunks");
    }

    #[test]
    fn a_list_filling_the_largest_block_keeps_its_newer_half() {
        let mut lists = BandLists::default();
        let other = lists.create(7, 8);
        let mut start = lists.create(0, 1);
        let mut want = vec![0, 1];
        for member in 2..(3 * room(MAX_CLASS) as u32) {
            start = lists.push(start, member);
            if want.len() == room(MAX_CLASS) {
                want.drain(..want.len() - want.len() / 2);
            }
            want.push(member);
            assert_eq!(lists.members(start), &want[..], "after {member}");
        }
        assert!(want.len() > room(MAX_CLASS) / 2);
        assert_eq!(lists.members(other), [7, 8], "another list is untouched");
    }

    /// Inserts, overwrites and removes drawn at random, across many merges, against a plain
    /// map: every key answers the same after each step.
    #[test]
    fn the_map_answers_as_a_plain_map_would() {
        let mut map = BandMap::default();
        let mut model: BTreeMap<u32, u32> = BTreeMap::new();
        let mut rng = crate::test_rng::XorShift::new(0x9e37_79b9_7f4a_7c15);
        let mut draw = |n: u64| rng.below(n);
        // Keys spread over the whole range, with a few at its ends.
        let keys: Vec<u32> = (0..400)
            .map(|i: u32| i.wrapping_mul(0x9e37_79b9))
            .chain([0, 1, u32::MAX, u32::MAX - 1])
            .collect();
        for step in 0..20_000 {
            let key = keys[draw(keys.len() as u64) as usize];
            match draw(3) {
                0 => {
                    map.remove(&key);
                    model.remove(&key);
                }
                _ => {
                    let value = draw(1 << 31) as u32;
                    map.insert(key, value);
                    model.insert(key, value);
                }
            }
            assert_eq!(map.len(), model.len(), "step {step}");
            if step % 97 == 0 {
                for k in &keys {
                    assert_eq!(map.get(k), model.get(k), "key {k} at step {step}");
                }
            }
        }
        assert!(map.run.len() > 100, "the run was merged into");
        assert!(map.run.chunks.len() > 1, "the run spans chunks");
    }

    #[test]
    fn a_key_costs_about_eight_bytes() {
        let mut map = BandMap::default();
        let n = 1_000_000u32;
        for i in 0..n {
            map.insert(i.wrapping_mul(0x9e37_79b9), i);
        }
        assert_eq!(map.len(), n as usize);
        assert_eq!(map.get(&7u32.wrapping_mul(0x9e37_79b9)), Some(&7));
        let per_key = map.heap_bytes() as f64 / n as f64;
        assert!(per_key < 10.0, "{per_key} bytes a key");
    }
}
