//! The source-key index in memory: source key → the sections stored under it. It is derived
//! from the `source_key` of the section records (migration 0011 dropped the `source_keys`
//! table: a table written under a random key costs a B-tree leaf and its branch path in every
//! commit, and a title learned thousands of times made that key a subtree of its own), loaded
//! with the band index and kept in step with committed writes (src/index/memory.rs).

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A change to the source-key index made by a write transaction, applied once it commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceKeyChange {
    Add { key: String, kbid: String },
    Remove { key: String, kbid: String },
}

/// Source key → kbids, both in order (a prefix read lists keys in order; the kbids of one key
/// come in kbid order, as the table's values did). Held for every titled section, so its
/// size is what it costs per section: most entries sit in a packed, front-coded run (`Packed`,
/// ~35–65 bytes an entry where a tree of boxed strings took ~150; docs/performance.md); entries
/// added since the run was built wait in a small tree, and entries removed from the run are
/// marked in a bitmap, until the next repacking merges them in.
#[derive(Debug, Default)]
pub struct SourceKeyIndex {
    packed: Packed,
    /// One bit per packed entry: set when it was removed since the run was built.
    removed: Vec<u64>,
    removed_count: usize,
    /// (key, kbid) pairs added since the run was built and not in it.
    fresh: BTreeSet<(Box<str>, Box<str>)>,
    entries: usize,
}

/// Whether entry `i` is marked in a bitmap of removed entries (one bit each; an empty bitmap
/// marks none).
fn marked(bits: &[u64], i: usize) -> bool {
    bits.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
}

/// Entries per block of the packed run: the first key of a block is stored whole (a binary
/// search over blocks finds a key), the others only as what differs from the key before them.
const BLOCK: usize = 16;

/// Fresh entries that trigger repacking: an eighth of the run, within these bounds (a repack
/// re-encodes the whole run, so the share keeps its cost per entry constant; the upper bound
/// keeps the boxed entries' memory small at millions of sections).
fn fresh_limit(packed: usize) -> usize {
    let (low, high) = if cfg!(test) { (8, 64) } else { (4096, 65536) };
    (packed / 8).clamp(low, high)
}

impl SourceKeyIndex {
    pub fn add(&mut self, key: &str, kbid: &str) {
        if let Some(i) = self.packed.find(key.as_bytes(), kbid) {
            if self.is_removed(i) {
                self.removed[i / 64] &= !(1 << (i % 64));
                self.removed_count -= 1;
                self.entries += 1;
            }
            return;
        }
        self.insert_fresh(key, kbid);
    }

    /// Add an entry while loading the index from the section records: each record has one
    /// source key, so the pair is not in the index yet and the packed run is not searched.
    pub fn load(&mut self, key: &str, kbid: &str) {
        self.insert_fresh(key, kbid);
    }

    fn insert_fresh(&mut self, key: &str, kbid: &str) {
        if self.fresh.insert((key.into(), kbid.into())) {
            self.entries += 1;
            if self.fresh.len() >= fresh_limit(self.packed.len) {
                self.repack();
            }
        }
    }

    pub fn remove(&mut self, key: &str, kbid: &str) {
        if self.fresh.remove(&(Box::from(key), Box::from(kbid))) {
            self.entries -= 1;
            return;
        }
        let Some(i) = self.packed.find(key.as_bytes(), kbid) else {
            return;
        };
        if self.is_removed(i) {
            return;
        }
        if self.removed.is_empty() {
            self.removed = vec![0; self.packed.len.div_ceil(64)];
        }
        self.removed[i / 64] |= 1 << (i % 64);
        self.removed_count += 1;
        self.entries -= 1;
        if self.removed_count >= fresh_limit(self.packed.len).max(self.packed.len / 4) {
            self.repack();
        }
    }

    fn is_removed(&self, i: usize) -> bool {
        marked(&self.removed, i)
    }

    /// Merge the fresh entries into the run and drop the removed ones from it. The old run is
    /// read a segment at a time and each segment is freed once read, so repacking holds about
    /// one run, not two.
    fn repack(&mut self) {
        let old = std::mem::take(&mut self.packed);
        let removed = std::mem::take(&mut self.removed);
        self.removed_count = 0;
        let mut out = Builder::default();
        let mut fresh = self.fresh.iter().peekable();
        let mut index = 0usize;
        let mut key = Vec::new();
        for segment in old.segments {
            let mut at = 0;
            while at < segment.len() {
                let kbid = decode(&segment, &mut at, &mut key);
                let gone = marked(&removed, index);
                index += 1;
                if gone {
                    continue;
                }
                while let Some((k, v)) = fresh
                    .next_if(|(k, v)| (k.as_bytes(), v.as_bytes()) < (&key[..], kbid.as_bytes()))
                {
                    out.push(k.as_bytes(), v);
                }
                out.push(&key, kbid);
            }
        }
        for (k, v) in fresh {
            out.push(k.as_bytes(), v);
        }
        self.packed = out.finish();
        self.fresh.clear();
    }

    pub fn apply(&mut self, changes: &[SourceKeyChange]) {
        for c in changes {
            match c {
                SourceKeyChange::Add { key, kbid } => self.add(key, kbid),
                SourceKeyChange::Remove { key, kbid } => self.remove(key, kbid),
            }
        }
    }

    /// The sections under `key`, in kbid order.
    pub fn kbids<'a>(&'a self, key: &'a str) -> Entries<'a> {
        self.entries(key, true)
    }

    /// The sections under every key starting with `prefix`: keys in order, each key's kbids in
    /// kbid order.
    pub fn with_prefix<'a>(&'a self, prefix: &'a str) -> Entries<'a> {
        self.entries(prefix, false)
    }

    fn entries<'a>(&'a self, key: &'a str, exact: bool) -> Entries<'a> {
        let from = (Box::<str>::from(key), Box::<str>::from(""));
        Entries {
            run: Cursor::seek(&self.packed, &self.removed, key.as_bytes(), true),
            fresh: self
                .fresh
                .range((std::ops::Bound::Included(from), std::ops::Bound::Unbounded))
                .peekable(),
            key: key.as_bytes(),
            exact,
        }
    }

    /// How many (key, section) entries the index holds.
    pub fn len(&self) -> usize {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Bytes the index holds on the heap, roughly (the fresh tree's nodes are estimated).
    pub fn heap_bytes(&self) -> usize {
        let fresh: usize = self
            .fresh
            .iter()
            .map(|(k, v)| k.len() + v.len() + 2 * std::mem::size_of::<Box<str>>() + 16)
            .sum();
        self.packed
            .segments
            .iter()
            .map(Vec::capacity)
            .sum::<usize>()
            + self.packed.segments.capacity() * std::mem::size_of::<Vec<u8>>()
            + self.packed.blocks.capacity() * std::mem::size_of::<BlockAt>()
            + self.removed.capacity() * 8
            + fresh
    }
}

/// The sections under a key, or under the keys with a prefix: the packed run's and the fresh
/// ones merged in (key, kbid) order.
pub struct Entries<'a> {
    run: Cursor<'a>,
    fresh: std::iter::Peekable<std::collections::btree_set::Range<'a, (Box<str>, Box<str>)>>,
    key: &'a [u8],
    exact: bool,
}

impl<'a> Entries<'a> {
    fn matches(&self, key: &[u8]) -> bool {
        match self.exact {
            true => key == self.key,
            false => key.starts_with(self.key),
        }
    }
}

impl<'a> Iterator for Entries<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let run = self.run.valid && self.matches(&self.run.key);
        let fresh = self
            .fresh
            .peek()
            .copied()
            .filter(|(k, _)| self.matches(k.as_bytes()));
        let take_fresh = match (run, fresh) {
            (false, None) => return None,
            (true, None) => false,
            (false, Some(_)) => true,
            (true, Some((k, v))) => {
                (k.as_bytes(), v.as_bytes()) < (&self.run.key[..], self.run.kbid.as_bytes())
            }
        };
        if take_fresh {
            return self.fresh.next().map(|(_, v)| &**v);
        }
        let kbid = self.run.kbid;
        self.run.advance();
        Some(kbid)
    }
}

/// A sorted run of (key, kbid) entries in segments of about `SEGMENT_BYTES`, each a whole
/// number of blocks. Each entry: the length of the prefix it shares with the key before it (0
/// at a block's start), the length and bytes of the rest of its key, the length and bytes of
/// its kbid; lengths as LEB128 varints.
#[derive(Debug, Default)]
struct Packed {
    segments: Vec<Vec<u8>>,
    /// Where each block's first entry is.
    blocks: Vec<BlockAt>,
    len: usize,
}

#[derive(Debug, Clone, Copy)]
struct BlockAt {
    segment: u32,
    at: u32,
}

/// Size at which the builder starts a new segment (at the next block).
const SEGMENT_BYTES: usize = if cfg!(test) { 256 } else { 1 << 20 };

/// Decode the entry at `at` of a segment into `key` (holding the key before it); its kbid.
fn decode<'a>(bytes: &'a [u8], at: &mut usize, key: &mut Vec<u8>) -> &'a str {
    let shared = read_varint(bytes, at);
    let n = read_varint(bytes, at);
    key.truncate(shared);
    key.extend_from_slice(bytes.get(*at..*at + n).unwrap_or_default());
    *at += n;
    let k = read_varint(bytes, at);
    let kbid = bytes
        .get(*at..*at + k)
        .and_then(|b| std::str::from_utf8(b).ok())
        .unwrap_or_default();
    *at += k;
    kbid
}

impl Packed {
    /// The first key of block `b` (stored whole).
    fn first_key(&self, b: BlockAt) -> &[u8] {
        let bytes = &self.segments[b.segment as usize];
        let mut p = b.at as usize;
        let _shared = read_varint(bytes, &mut p);
        let n = read_varint(bytes, &mut p);
        bytes.get(p..p + n).unwrap_or_default()
    }

    /// The position of the entry (key, kbid), removed or not.
    fn find(&self, key: &[u8], kbid: &str) -> Option<usize> {
        let mut c = Cursor::seek(self, &[], key, false);
        while c.valid && c.key == key {
            match c.kbid.cmp(kbid) {
                std::cmp::Ordering::Less => c.advance(),
                std::cmp::Ordering::Equal => return Some(c.index),
                std::cmp::Ordering::Greater => return None,
            }
        }
        None
    }
}

/// Reads a packed run in order, one entry at a time (`valid` once past its end is false).
struct Cursor<'a> {
    packed: &'a Packed,
    /// Entries marked here are skipped (empty: none).
    removed: &'a [u64],
    /// Where the next entry starts, and its position.
    segment: usize,
    at: usize,
    next: usize,
    /// The current entry: its position, key and kbid.
    valid: bool,
    index: usize,
    key: Vec<u8>,
    kbid: &'a str,
}

impl<'a> Cursor<'a> {
    fn at_block(packed: &'a Packed, removed: &'a [u64], block: usize) -> Self {
        let (segment, at, next) = match packed.blocks.get(block) {
            Some(b) => (b.segment as usize, b.at as usize, block * BLOCK),
            None => (0, 0, packed.len),
        };
        let mut c = Cursor {
            packed,
            removed,
            segment,
            at,
            next,
            valid: false,
            index: 0,
            key: Vec::new(),
            kbid: "",
        };
        c.advance();
        c
    }

    /// At the first entry whose key is `key` or after it (skipping removed entries when
    /// `live`).
    fn seek(packed: &'a Packed, removed: &'a [u64], key: &[u8], live: bool) -> Self {
        let after = packed
            .blocks
            .partition_point(|&b| packed.first_key(b) < key);
        let removed = if live { removed } else { &[] };
        let mut c = Self::at_block(packed, removed, after.saturating_sub(1));
        while c.valid && &c.key[..] < key {
            c.advance();
        }
        c
    }

    /// To the next entry not removed.
    fn advance(&mut self) {
        loop {
            if !self.step() {
                self.valid = false;
                return;
            }
            if !marked(self.removed, self.index) {
                self.valid = true;
                return;
            }
        }
    }

    /// Decode the next entry, removed or not.
    fn step(&mut self) -> bool {
        if self.next >= self.packed.len {
            return false;
        }
        let segments = &self.packed.segments;
        if self.at >= segments[self.segment].len() {
            self.segment += 1;
            self.at = 0;
        }
        let Some(bytes) = segments.get(self.segment) else {
            return false;
        };
        self.kbid = decode(bytes, &mut self.at, &mut self.key);
        self.index = self.next;
        self.next += 1;
        true
    }
}

/// Builds a packed run from entries given in order.
#[derive(Default)]
struct Builder {
    packed: Packed,
    current: Vec<u8>,
    last_key: Vec<u8>,
}

impl Builder {
    fn push(&mut self, key: &[u8], kbid: &str) {
        let p = &mut self.packed;
        let shared = if p.len.is_multiple_of(BLOCK) {
            if self.current.len() >= SEGMENT_BYTES {
                let mut full = std::mem::take(&mut self.current);
                full.shrink_to_fit();
                p.segments.push(full);
            }
            p.blocks.push(BlockAt {
                segment: p.segments.len() as u32,
                at: self.current.len() as u32,
            });
            0
        } else {
            key.iter()
                .zip(&self.last_key)
                .take_while(|(a, b)| a == b)
                .count()
        };
        let out = &mut self.current;
        write_varint(out, shared);
        write_varint(out, key.len() - shared);
        out.extend_from_slice(&key[shared..]);
        write_varint(out, kbid.len());
        out.extend_from_slice(kbid.as_bytes());
        p.len += 1;
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
    }

    fn finish(mut self) -> Packed {
        if !self.current.is_empty() {
            self.current.shrink_to_fit();
            self.packed.segments.push(self.current);
        }
        self.packed.segments.shrink_to_fit();
        self.packed.blocks.shrink_to_fit();
        self.packed
    }
}

fn write_varint(out: &mut Vec<u8>, mut v: usize) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn read_varint(bytes: &[u8], at: &mut usize) -> usize {
    let mut v = 0usize;
    let mut shift = 0;
    while let Some(&b) = bytes.get(*at) {
        *at += 1;
        v |= ((b & 0x7f) as usize) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift >= usize::BITS {
            break;
        }
    }
    v
}

/// What a write transaction changed, for lookups inside it before the index has the changes:
/// per key, each section added (true) or removed (false) by its last change. Each (key,
/// section) pair is independent, so its last change is all the index needs once the
/// transaction commits.
#[derive(Debug, Default)]
pub struct PendingSourceKeys {
    by_key: HashMap<String, BTreeMap<String, bool>>,
}

impl PendingSourceKeys {
    pub fn add(&mut self, key: &str, kbid: &str) {
        self.record(key, kbid, true);
    }

    pub fn remove(&mut self, key: &str, kbid: &str) {
        self.record(key, kbid, false);
    }

    fn record(&mut self, key: &str, kbid: &str, present: bool) {
        let kbids = match self.by_key.get_mut(key) {
            Some(k) => k,
            None => self.by_key.entry(key.to_string()).or_default(),
        };
        kbids.insert(kbid.to_string(), present);
    }

    /// The sections under `key` as this transaction sees them, given the committed ones.
    pub fn kbids<'a>(&self, key: &str, committed: impl Iterator<Item = &'a str>) -> Vec<String> {
        let mut out: BTreeSet<String> = committed.map(str::to_string).collect();
        for (kbid, &present) in self.by_key.get(key).into_iter().flatten() {
            if present {
                out.insert(kbid.clone());
            } else {
                out.remove(kbid);
            }
        }
        out.into_iter().collect()
    }

    /// Whether a section other than `kbid` is under `key` as this transaction sees it (reads
    /// the committed ones only until it finds one: a title learned thousands of times has as
    /// many).
    pub fn taken_by_other<'a>(
        &self,
        key: &str,
        kbid: &str,
        committed: impl Iterator<Item = &'a str>,
    ) -> bool {
        let mine = self.by_key.get(key);
        if mine.is_some_and(|m| m.iter().any(|(k, &present)| present && k != kbid)) {
            return true;
        }
        committed
            .filter(|k| *k != kbid)
            .any(|k| mine.and_then(|m| m.get(k)) != Some(&false))
    }

    /// The changes to apply once the transaction commits (the last one of each pair).
    pub fn take_changes(&mut self) -> Vec<SourceKeyChange> {
        let mut out = Vec::new();
        for (key, kbids) in std::mem::take(&mut self.by_key) {
            for (kbid, present) in kbids {
                let key = key.clone();
                out.push(match present {
                    true => SourceKeyChange::Add { key, kbid },
                    false => SourceKeyChange::Remove { key, kbid },
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_list_their_sections_in_order_and_forget_removed_ones() {
        let mut index = SourceKeyIndex::default();
        index.add("#b", "k2");
        index.add("#b", "k1");
        index.add("#a", "k3");
        index.add("skill:x", "k4");
        index.add("#b", "k1");
        index.add("#a", "k3");
        assert_eq!(index.len(), 4, "adding an entry twice counts it once");
        assert_eq!(index.kbids("#b").collect::<Vec<_>>(), ["k1", "k2"]);
        assert_eq!(
            index.with_prefix("#").collect::<Vec<_>>(),
            ["k3", "k1", "k2"]
        );
        assert_eq!(index.with_prefix("skill:").collect::<Vec<_>>(), ["k4"]);
        assert_eq!(index.with_prefix("z").count(), 0);
        index.remove("#b", "k1");
        index.remove("#b", "k9");
        index.remove("#c", "k1");
        assert_eq!(index.kbids("#b").collect::<Vec<_>>(), ["k2"]);
        index.remove("#b", "k2");
        assert_eq!(index.kbids("#b").count(), 0);
        assert_eq!(index.len(), 2);
    }

    /// Adds and removes drawn at random, across many repackings, against a plain set of the
    /// pairs: every key's sections, every prefix's and the count agree after each step.
    #[test]
    fn the_packed_index_answers_as_a_set_of_pairs_would() {
        let mut index = SourceKeyIndex::default();
        let mut model: BTreeSet<(String, String)> = BTreeSet::new();
        let mut rng = crate::test_rng::XorShift::new(0x2545_f491_4f6c_dd1d);
        let mut draw = |n: u64| rng.below(n);
        let keys: Vec<String> = (0..60)
            .map(|i| format!("docs/{}/page{}.md#Title {}", i % 3, i % 7, i))
            .chain(["".to_string(), "é#ü".to_string(), "docs".to_string()])
            .collect();
        for step in 0..6000 {
            let key = &keys[draw(keys.len() as u64) as usize];
            let kbid = format!("k{:02}", draw(12));
            if draw(3) == 0 {
                index.remove(key, &kbid);
                model.remove(&(key.clone(), kbid));
            } else {
                index.add(key, &kbid);
                model.insert((key.clone(), kbid));
            }
            assert_eq!(index.len(), model.len(), "step {step}");
            if step % 50 == 0 {
                for key in &keys {
                    let want: Vec<&str> = model
                        .iter()
                        .filter(|(k, _)| k == key)
                        .map(|(_, v)| v.as_str())
                        .collect();
                    assert_eq!(index.kbids(key).collect::<Vec<_>>(), want, "{key}");
                }
                for prefix in [
                    "",
                    "docs/",
                    "docs/1/page3",
                    "docs/2/page5.md#Title 1",
                    "é",
                    "z",
                ] {
                    let want: Vec<&str> = model
                        .iter()
                        .filter(|(k, _)| k.starts_with(prefix))
                        .map(|(_, v)| v.as_str())
                        .collect();
                    let got: Vec<&str> = index.with_prefix(prefix).collect();
                    assert_eq!(got, want, "prefix {prefix:?} at step {step}");
                }
            }
        }
        assert!(index.packed.len > 0, "the run was built");
    }

    /// What an entry costs: titled sections of documents in folders, as a corpus has them.
    #[test]
    fn an_entry_costs_a_few_dozen_bytes() {
        let mut index = SourceKeyIndex::default();
        let n = 100_000;
        for i in 0..n {
            let key = format!(
                "c0/jdk/api/java.base/java/util/Class{}.md#Method summary {}",
                i / 20,
                i % 20
            );
            let kbid = format!(
                "{:026x}",
                (i as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)
            );
            index.add(&key, &kbid[..26]);
        }
        assert_eq!(index.len(), n);
        let per_entry = index.heap_bytes() / n;
        assert!(per_entry <= 64, "{per_entry} bytes an entry");
    }

    #[test]
    fn a_transaction_sees_its_own_changes_over_the_committed_index() {
        let mut committed = SourceKeyIndex::default();
        committed.add("#t", "old1");
        committed.add("#t", "old2");
        let mut pending = PendingSourceKeys::default();
        pending.add("#t", "new");
        pending.remove("#t", "old1");
        assert_eq!(pending.kbids("#t", committed.kbids("#t")), ["new", "old2"]);
        assert!(pending.taken_by_other("#t", "new", committed.kbids("#t")));
        pending.remove("#t", "old2");
        assert!(
            !pending.taken_by_other("#t", "new", committed.kbids("#t")),
            "both committed sections were removed in the transaction"
        );
        assert!(pending.taken_by_other("#t", "other", committed.kbids("#t")));
        // Removed, then added again: present.
        pending.add("#t", "old1");
        assert_eq!(pending.kbids("#t", committed.kbids("#t")), ["new", "old1"]);

        committed.apply(&pending.take_changes());
        assert_eq!(committed.kbids("#t").collect::<Vec<_>>(), ["new", "old1"]);
        assert!(pending.take_changes().is_empty());
    }
}
