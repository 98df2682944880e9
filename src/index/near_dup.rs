//! Near-duplicate detection without scanning the corpus: one-permutation MinHash over word
//! 3-shingles, banded for locality-sensitive hashing. Sections that share a band are candidates;
//! their exact Jaccard similarity decides. With 16 bands of 4 rows, a pair at Jaccard 0.85
//! shares at least one band with probability 1 - (1 - 0.85^4)^16 ≈ 0.99998, and the
//! `MIN_SHARED_BANDS` a candidate needs with probability 0.9988.

// foldhash: these maps are looked up on every learn (kbids, band keys); SipHash was a visible
// share of a learn's CPU, and their keys are SHA-256 or MinHash outputs.
use foldhash::{HashMap, HashMapExt};

use super::band_map::{BandLists, BandMap};
use crate::text::shingles::{ShingleSet, mix64};

pub const HASHES: usize = 64;
pub const BANDS: usize = 16;
pub const ROWS: usize = HASHES / BANDS;
/// Similarity at or above which a section is reported as a near duplicate.
pub const THRESHOLD: f64 = 0.85;
/// At most this many candidates (those sharing the most bands) are checked exactly per learn.
pub const MAX_CANDIDATES: usize = 16;
/// At most this many entries of one band are read (thousands of sections can share a band): the
/// most recently added ones.
pub const PER_BAND: usize = 32;
/// A candidate must share at least this many bands. A pair at Jaccard J shares each band with
/// probability J^4; 3 or more of 16: 0.9988 at J = 0.85, 0.99998 at 0.9, but 0.074 at 0.5
/// (0.26 for 2 or more). Chance matches of common phrases were most of the exact comparisons a
/// learn made; with 3 the near duplicates reported on the bench corpora are the same pairs with
/// 2, and a 100k load is 2–7 % faster (docs/decisions.md, docs/performance.md).
pub const MIN_SHARED_BANDS: u32 = 3;

/// Shingle sets of recently seen sections, so the exact Jaccard check of a candidate does not
/// re-read and re-shingle its content (on templated notes most learns have candidates, and that
/// work was a quarter of a write's instructions). A kbid names its content, so an entry never
/// goes stale. Two generations bound the memory: when the young one holds `CACHE_HASHES`
/// hashes it becomes the old one and the previous old one is dropped; a hit in the old one moves
/// the entry back to the young one.
#[derive(Default)]
pub struct ShingleCache {
    inner: std::sync::Mutex<Generations>,
}

#[derive(Default)]
struct Generations {
    young: HashMap<String, std::sync::Arc<ShingleSet>>,
    old: HashMap<String, std::sync::Arc<ShingleSet>>,
    young_hashes: usize,
}

/// Shingle hashes (8 bytes each) one generation of the cache holds: 16 MiB, ~20,000 sections
/// of ~100 words. Candidates are not only the latest sections: on notes written from common
/// phrases each learn checks ~10 sections sharing bands with it, spread over the whole recent
/// corpus, and at 4 MiB a quarter of them missed (a content read and re-shingling each;
/// docs/performance.md).
const CACHE_HASHES: usize = 2 * 1024 * 1024;

impl ShingleCache {
    pub fn get(&self, kbid: &str) -> Option<std::sync::Arc<ShingleSet>> {
        let mut g = self.inner.lock().ok()?;
        if let Some(s) = g.young.get(kbid) {
            return Some(s.clone());
        }
        let s = g.old.remove(kbid)?;
        g.put(kbid.to_string(), s.clone());
        Some(s)
    }

    pub fn insert(&self, kbid: &str, set: std::sync::Arc<ShingleSet>) {
        if let Ok(mut g) = self.inner.lock() {
            g.put(kbid.to_string(), set);
        }
    }
}

impl Generations {
    fn put(&mut self, kbid: String, set: std::sync::Arc<ShingleSet>) {
        if set.len() > CACHE_HASHES / 4 {
            return; // a huge section would evict everything else
        }
        if self.young_hashes + set.len() > CACHE_HASHES {
            // The young generation becomes the old one; the old one's table, emptied, is reused
            // (a new table would grow again from nothing, on freshly faulted pages).
            std::mem::swap(&mut self.old, &mut self.young);
            self.young.clear();
            self.young_hashes = 0;
        }
        self.young_hashes += set.len();
        if let Some(prev) = self.young.insert(kbid, set) {
            self.young_hashes -= prev.len();
        }
    }
}

/// One-permutation MinHash: one hash per shingle, its top 6 bits pick one of 64 bins, each bin
/// keeps its minimum; empty bins borrow the next non-empty bin's value (rotation densification),
/// so the signature stays comparable for short texts.
pub fn signature(shingles: &ShingleSet) -> [u64; HASHES] {
    const EMPTY: u64 = u64::MAX;
    let mut sig = [EMPTY; HASHES];
    for &s in &shingles.0 {
        let h = mix64(s ^ SEEDS[0]);
        let bin = (h >> 58) as usize;
        let v = h & ((1 << 58) - 1);
        if v < sig[bin] {
            sig[bin] = v;
        }
    }
    if sig.iter().all(|&v| v == EMPTY) {
        return sig;
    }
    let raw = sig;
    for (i, slot) in sig.iter_mut().enumerate() {
        if raw[i] == EMPTY {
            let mut d = 1;
            while raw[(i + d) % HASHES] == EMPTY {
                d += 1;
            }
            *slot = mix64(raw[(i + d) % HASHES] ^ SEEDS[d % HASHES]);
        }
    }
    sig
}

/// A section's band keys: one 32-bit key per band.
///
/// 32 bits are enough: two bands whose keys collide only add a candidate, which the exact
/// similarity check then drops (at a million sections, one in ~270 learns meets such a
/// stranger). They are half what a 64-bit key takes in the index in memory, and 64 bytes in a
/// stored section record where 16 varint-encoded 64-bit keys took ~150 (migration 0017).
pub type BandKeys = [u32; BANDS];

/// One key per band; the band index is mixed in so equal rows in different bands differ.
pub fn band_keys(sig: &[u64; HASHES]) -> BandKeys {
    let mut keys = [0u32; BANDS];
    for (b, key) in keys.iter_mut().enumerate() {
        let mut h = mix64(b as u64 + 0x5eed);
        for r in 0..ROWS {
            h = mix64(h ^ sig[b * ROWS + r]);
        }
        *key = fold_key(h);
    }
    keys
}

/// A 64-bit band key folded to the 32 bits kept (band keys are already mixed hashes). Band
/// keys stored before migration 0017 were 64-bit; folding them gives the keys computed since.
pub fn fold_key(key: u64) -> u32 {
    (key ^ (key >> 32)) as u32
}

const SEEDS: [u64; HASHES] = {
    let mut s = [0u64; HASHES];
    let mut i = 0;
    let mut z: u64 = 0x243f_6a88_85a3_08d3;
    while i < HASHES {
        // SplitMix64 sequence (const-evaluable).
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = z;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        s[i] = x ^ (x >> 31);
        i += 1;
    }
    s
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shingle_cache_keeps_recent_sets_within_its_bound() {
        let cache = ShingleCache::default();
        let set = |n: u64| std::sync::Arc::new(ShingleSet((0..1000).map(|i| i * n).collect()));
        cache.insert("a", set(1));
        assert_eq!(cache.get("a").unwrap().0[1], 1);
        assert!(cache.get("b").is_none());
        // Fill well past two generations: memory stays bounded, the newest stay.
        let each = 1000;
        let many = 3 * CACHE_HASHES / each;
        for n in 0..many {
            cache.insert(&format!("k{n}"), set(n as u64 + 2));
        }
        let g = cache.inner.lock().unwrap();
        let held: usize = g
            .young
            .values()
            .chain(g.old.values())
            .map(|s| s.len())
            .sum();
        assert!(held <= 2 * CACHE_HASHES, "{held} hashes held");
        drop(g);
        assert!(cache.get(&format!("k{}", many - 1)).is_some());
        assert!(cache.get("a").is_none(), "the oldest entry was dropped");
        // A huge set is not cached at all (it would evict everything else).
        cache.insert(
            "huge",
            std::sync::Arc::new(ShingleSet(vec![0; CACHE_HASHES])),
        );
        assert!(cache.get("huge").is_none());
    }
    use crate::text::shingles::shingle_hashes;

    #[test]
    fn similar_texts_share_a_band_and_different_ones_do_not() {
        let base: String = (0..200).map(|i| format!("word{i} ")).collect();
        let near = base.replace("word100 ", "changed ");
        let other: String = (0..200).map(|i| format!("other{i} ")).collect();
        let kb = band_keys(&signature(&shingle_hashes(&base)));
        let kn = band_keys(&signature(&shingle_hashes(&near)));
        let ko = band_keys(&signature(&shingle_hashes(&other)));
        assert!(kb.iter().zip(kn.iter()).any(|(a, b)| a == b));
        assert!(!kb.iter().zip(ko.iter()).any(|(a, b)| a == b));
    }

    #[test]
    fn band_index_lists_a_section_once_per_band_and_forgets_it() {
        let mut index = BandIndex::default();
        let mut keys = [7u32; BANDS];
        keys[1] = 8;
        index.add("a", &keys);
        index.add("b", &[7; BANDS]);
        let band = |index: &BandIndex, k| index.band(k).map(str::to_string).collect::<Vec<_>>();
        assert_eq!(band(&index, 7), ["a", "b"]);
        assert_eq!(band(&index, 8), ["a"]);
        let mut sharing = index.sharing(&keys, 1);
        sharing.sort();
        // keys holds 7 fifteen times and 8 once: "a" is in both bands, "b" in band 7.
        assert_eq!(sharing, [("a", 16), ("b", 15)]);
        assert_eq!(index.sharing(&keys, 16), [("a", 16)]);
        index.remove("a", &keys);
        assert_eq!(band(&index, 7), ["b"]);
        assert_eq!(index.band(8).count(), 0);
        assert!(index.sharing(&keys, 16).is_empty());
        // A freed number is reused for the next section.
        index.add("c", &keys);
        assert_eq!(band(&index, 7), ["b", "c"]);
        assert_eq!(index.names.len(), 2);
        for i in 0..PER_BAND + 5 {
            index.add(&format!("s{i}"), &[9; BANDS]);
        }
        let crowded = band(&index, 9);
        assert_eq!(crowded.len(), PER_BAND);
        assert_eq!(crowded[0], "s5", "the oldest five are not read");
        assert_eq!(crowded[PER_BAND - 1], format!("s{}", PER_BAND + 4));
        assert_eq!(index.sharing(&[9; BANDS], 2).len(), PER_BAND);
        assert!(
            index
                .sharing(&[9; BANDS], 2)
                .iter()
                .all(|(k, _)| *k != "s0")
        );
    }

    #[test]
    fn a_loaded_index_reads_crowded_bands_newest_first_whatever_the_load_order() {
        let mut added = BandIndex::default();
        let mut loaded = BandIndex::default();
        let names: Vec<String> = (0..PER_BAND + 8).map(|i| format!("s{i:02}")).collect();
        for name in &names {
            added.add(name, &[9; BANDS]);
        }
        // Loading reads the records in kbid order; their ages are their content sequences.
        for (age, name) in names.iter().enumerate().rev() {
            loaded.load(name, &[9; BANDS], age as u64 * 10);
        }
        loaded.finish_load();
        let band = |index: &BandIndex| index.band(9).map(str::to_string).collect::<Vec<_>>();
        assert_eq!(band(&loaded), band(&added));
        assert_eq!(band(&loaded)[0], "s08", "the oldest eight are not read");
        // A section added after the load is newer than every loaded one.
        loaded.add("later", &[9; BANDS]);
        assert_eq!(band(&loaded).last().map(String::as_str), Some("later"));
        assert!(loaded.recency("later") > loaded.recency(&names[PER_BAND + 7]));
        // Removing down to one section and to none leaves the band consistent.
        for name in names.iter().chain([&"later".to_string()]) {
            loaded.remove(name, &[9; BANDS]);
        }
        assert_eq!(loaded.band(9).count(), 0);
        assert!(loaded.is_empty());
        loaded.add("again", &[9; BANDS]);
        assert_eq!(band(&loaded), ["again"]);
    }

    #[test]
    fn a_name_longer_than_a_kbid_is_kept_whole() {
        let mut index = BandIndex::default();
        let long = "a-name-longer-than-twenty-six-bytes";
        index.add(long, &[1; BANDS]);
        index.add("short", &[1; BANDS]);
        assert!(index.contains(long));
        assert_eq!(index.band(1).collect::<Vec<_>>(), [long, "short"]);
        index.remove(long, &[1; BANDS]);
        assert!(!index.contains(long));
        index.add("reuses-the-number", &[2; BANDS]);
        assert_eq!(index.band(2).collect::<Vec<_>>(), ["reuses-the-number"]);
    }

    #[test]
    fn top_sharing_ranks_by_shared_bands_then_the_most_recent() {
        let mut index = BandIndex::default();
        let keys = |x: u32| -> BandKeys { std::array::from_fn(|i| x * 100 + i as u32) };
        let sharing_first = |n: usize| -> BandKeys {
            let mut k = keys(2);
            k[..n].copy_from_slice(&keys(1)[..n]);
            k
        };
        // Named against their order, so that a kbid order would give another answer.
        index.add("a-old-8", &sharing_first(8));
        index.add("m-4", &sharing_first(4));
        index.add("z-new-8", &sharing_first(8));
        index.add("b-12", &sharing_first(12));
        index.add("self", &keys(1));
        index.add("y-1", &sharing_first(1));
        let top = |index: &BandIndex, limit| -> Vec<String> {
            let got = index.top_sharing(&keys(1), 2, limit, |k| k == "self");
            got.iter().map(|(k, n)| format!("{k}:{n}")).collect()
        };
        assert_eq!(
            top(&index, 10),
            ["b-12:12", "z-new-8:8", "a-old-8:8", "m-4:4"],
            "most shared first, ties to the newest; not `self`, not below 2 bands"
        );
        assert_eq!(top(&index, 2), ["b-12:12", "z-new-8:8"]);
        // A number given again takes its new section's place in time.
        index.remove("a-old-8", &sharing_first(8));
        index.add("x-newest-8", &sharing_first(8));
        assert_eq!(top(&index, 2), ["b-12:12", "x-newest-8:8"]);
    }

    #[test]
    fn sharing_since_lists_the_sections_added_after_a_scan_point() {
        let mut index = BandIndex::default();
        let keys = |x: u32| -> BandKeys { std::array::from_fn(|i| x * 100 + i as u32) };
        let mut near = keys(1);
        near[..4].copy_from_slice(&[7, 8, 9, 10]);
        index.add("old", &keys(1));
        let point = index.scan_point();
        assert_eq!(index.sharing_since(point, &keys(1), 2), Some(vec![]));
        index.add("far", &keys(2));
        index.add("near", &near);
        index.add("same", &keys(1));
        let mut got = index.sharing_since(point, &keys(1), 2).unwrap();
        got.sort();
        assert_eq!(
            got,
            [("near", 12), ("same", 16)],
            "not `old` (before), not `far`"
        );
        // Removed since: gone; its number given to another: listed once, with its own keys.
        index.remove("same", &keys(1));
        index.add("reuse", &keys(3));
        assert_eq!(
            index.sharing_since(point, &keys(1), 2).unwrap(),
            [("near", 12)]
        );
        assert_eq!(
            index.sharing_since(point, &keys(3), 2).unwrap(),
            [("reuse", 16)]
        );
        // More additions since than are worth comparing one by one: a scan from scratch.
        let point = index.scan_point();
        for i in 0..SINCE_LINEAR as u32 {
            index.add(&format!("t{i}"), &keys(1000 + i));
        }
        assert!(index.sharing_since(point, &keys(1), 2).is_some());
        index.add("one-more", &keys(2000));
        assert_eq!(index.sharing_since(point, &keys(1), 2), None);
        // Another index (loaded again) or more additions than remembered: cannot complete.
        assert_eq!(BandIndex::default().sharing_since(point, &keys(1), 2), None);
        for i in 0..RECENT as u32 {
            index.add(&format!("s{i}"), &keys(10 + i));
        }
        assert_eq!(index.sharing_since(point, &keys(1), 2), None);
        assert!(
            index
                .sharing_since(index.scan_point(), &keys(1), 2)
                .is_some()
        );
    }
}

/// The band keys of a section as the `minhash_sigs` table of migrations 0005–0008 held them:
/// 16 little-endian u64.
pub fn encode_keys(keys: &BandKeys) -> Vec<u8> {
    keys.iter()
        .flat_map(|&k| u64::from(k).to_le_bytes())
        .collect()
}

pub fn decode_keys(bytes: &[u8]) -> Option<[u64; BANDS]> {
    if bytes.len() != BANDS * 8 {
        return None;
    }
    let mut out = [0u64; BANDS];
    for (i, chunk) in bytes.chunks_exact(8).enumerate() {
        out[i] = u64::from_le_bytes(chunk.try_into().ok()?);
    }
    Some(out)
}

/// A change to the band index made by a write transaction, applied once it commits.
#[derive(Debug, Clone)]
pub enum BandChange {
    Add(String, BandKeys),
    Remove(String, BandKeys),
}

/// The LSH band index in memory: band key → sections. Derived from the band keys in the
/// section records (migration 0009; never sixteen scattered B-tree rows per section, which
/// dominated the cost of a write), loaded on first use and kept in step with committed writes.
/// Sections are held by a small number in the bands, so counting a new section's shared bands
/// (up to 16 × `PER_BAND` entries per write) sorts integers instead of hashing and comparing
/// 26-character kbids.
///
/// It is held for every stored section, so it is packed (docs/performance.md, *Memory*): a band
/// is known by its 32-bit key (`BandKeys`), a band with one section holds its number
/// inline, and a kbid is 26 bytes inline. About 16 × 12 bytes of band entries, 26 of name,
/// 8 of age and ~6 of lookup per section: ~240 bytes, where a map of vectors and strings took
/// over 1 KB.
#[derive(Debug)]
pub struct BandIndex {
    /// Band key → the one section number in it, or `LIST | start` for the list at `start` in
    /// `lists`.
    bands: BandMap,
    /// The sections of the bands holding several, oldest first.
    lists: BandLists,
    /// Number → kbid (`Name::FREE` for a free number).
    names: Vec<Name>,
    /// Names longer than a kbid (only names made up in tests are), by number.
    long_names: HashMap<u32, Box<str>>,
    /// Number → its age: larger is newer (a loaded section's content sequence; then counting on).
    added_at: Vec<u64>,
    /// The numbers in use, found by their name.
    numbers: hashbrown::HashTable<u32>,
    free: Vec<u32>,
    /// The age the next section gets.
    next_age: u64,
    /// Tells this index from one loaded again (a scan made against another is not continued).
    id: u64,
    /// How many sections were ever added to this index.
    adds: u64,
    /// The latest additions (at most `RECENT`), oldest first: number, band keys. A scan made
    /// before a transaction (`ScanPoint`) is completed with the sections added since.
    recent: std::collections::VecDeque<(u32, BandKeys)>,
}

/// Marks a band value that is where a list starts in `BandIndex::lists`.
const LIST: u32 = 1 << 31;

/// Length of a kbid, the name every stored section has.
const NAME_BYTES: usize = 26;

/// A name held inline: its length and bytes (`LONG`: held in `long_names`).
#[derive(Debug, Clone, Copy)]
struct Name {
    len: u8,
    bytes: [u8; NAME_BYTES],
}

impl Name {
    const FREE: Name = Name {
        len: 0,
        bytes: [0; NAME_BYTES],
    };
    const LONG: u8 = u8::MAX;
}

fn name_hash(name: &str) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x6b62_6462).hash_one(name)
}

/// Additions `BandIndex` remembers for completing scans made before them (fewer in unit tests,
/// so that running past them is cheap to test).
const RECENT: usize = if cfg!(test) { 64 } else { 4096 };
/// Most additions since a scan point that `sharing_since` compares one by one.
const SINCE_LINEAR: usize = if cfg!(test) { 16 } else { 32 };

impl Default for BandIndex {
    fn default() -> Self {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        BandIndex {
            bands: BandMap::default(),
            lists: BandLists::default(),
            names: Vec::new(),
            long_names: HashMap::new(),
            added_at: Vec::new(),
            numbers: hashbrown::HashTable::new(),
            free: Vec::new(),
            next_age: 0,
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            adds: 0,
            recent: std::collections::VecDeque::new(),
        }
    }
}

/// The last `PER_BAND` entries of a band: a band lists its sections in the order they were added
/// (loading adds them in the order they were stored), and a new section is most likely a near
/// copy of a recent one, whose shingles the cache also still holds.
fn newest(band: &[u32]) -> &[u32] {
    &band[band.len().saturating_sub(PER_BAND)..]
}

/// Where a near-duplicate scan of the band index stood: the index it read and how many sections
/// had been added to it. The writer completes the scan with the sections added since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanPoint {
    id: u64,
    adds: u64,
}

impl BandIndex {
    /// The name of number `n` ("" for a free number).
    fn name(&self, n: u32) -> &str {
        let name = &self.names[n as usize];
        if name.len == Name::LONG {
            return self.long_names.get(&n).map_or("", |s| s);
        }
        std::str::from_utf8(&name.bytes[..name.len as usize]).unwrap_or("")
    }

    fn number(&self, kbid: &str) -> Option<u32> {
        self.numbers
            .find(name_hash(kbid), |&n| self.name(n) == kbid)
            .copied()
    }

    /// The number of `kbid`, given a free one or a new one if it has none.
    fn number_for(&mut self, kbid: &str, age: u64) -> u32 {
        if let Some(n) = self.number(kbid) {
            return n;
        }
        let n = self.free.pop().unwrap_or_else(|| {
            self.names.push(Name::FREE);
            self.added_at.push(0);
            (self.names.len() - 1) as u32
        });
        let mut name = Name::FREE;
        if kbid.len() <= NAME_BYTES {
            name.len = kbid.len() as u8;
            name.bytes[..kbid.len()].copy_from_slice(kbid.as_bytes());
            self.long_names.remove(&n);
        } else {
            name.len = Name::LONG;
            self.long_names.insert(n, kbid.into());
        }
        self.names[n as usize] = name;
        self.added_at[n as usize] = age;
        let names = &self.names;
        let long_names = &self.long_names;
        let rehash = |&m: &u32| {
            let name = &names[m as usize];
            if name.len == Name::LONG {
                name_hash(long_names.get(&m).map_or("", |s| s))
            } else {
                name_hash(std::str::from_utf8(&name.bytes[..name.len as usize]).unwrap_or(""))
            }
        };
        self.numbers.insert_unique(name_hash(kbid), n, rehash);
        n
    }

    /// Add a section that is not in the index yet (every caller adds a new section or loads
    /// the table, whose keys are unique). Scanning a band for the kbid first made loading
    /// quadratic in the size of a band: thousands of near-identical sections share one.
    pub fn add(&mut self, kbid: &str, keys: &BandKeys) {
        let age = self.next_age;
        self.next_age += 1;
        let n = self.number_for(kbid, age);
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back((n, *keys));
        self.adds += 1;
        self.enter_bands(n, keys);
    }

    /// Add a section while loading the index from the store, `age` its content sequence
    /// (loading reads the records in kbid order; `finish_load` puts each band in age order).
    pub fn load(&mut self, kbid: &str, keys: &BandKeys, age: u64) {
        self.next_age = self.next_age.max(age + 1);
        let n = self.number_for(kbid, age);
        self.adds += 1;
        self.enter_bands(n, keys);
    }

    /// After the last `load`: each crowded band lists its sections oldest first again, as
    /// `newest` expects.
    pub fn finish_load(&mut self) {
        let added_at = &self.added_at;
        for v in self.bands.values().filter(|v| v & LIST != 0) {
            self.lists
                .members_mut(v & !LIST)
                .sort_unstable_by_key(|&n| added_at[n as usize]);
        }
    }

    fn enter_bands(&mut self, n: u32, keys: &BandKeys) {
        self.bands.prefetch(keys);
        let fps = keys;
        for (i, fp) in fps.iter().enumerate() {
            if fps[..i].contains(fp) {
                continue;
            }
            match self.bands.get_mut(fp) {
                None => self.bands.insert_new(*fp, n),
                Some(v) if *v & LIST != 0 => *v = LIST | self.lists.push(*v & !LIST, n),
                Some(v) => *v = LIST | self.lists.create(*v, n),
            }
        }
    }

    pub fn remove(&mut self, kbid: &str, keys: &BandKeys) {
        let Some(n) = self.number(kbid) else {
            return;
        };
        let fps = keys;
        for (i, fp) in fps.iter().enumerate() {
            if fps[..i].contains(fp) {
                continue;
            }
            match self.bands.get(fp).copied() {
                Some(v) if v & LIST != 0 => {
                    let start = v & !LIST;
                    let left = self.lists.remove(start, n);
                    if left.len() <= 1 {
                        match left.first() {
                            Some(&last) => self.bands.insert(*fp, last),
                            None => self.bands.remove(fp),
                        };
                        self.lists.free(start);
                    }
                }
                Some(one) if one == n => {
                    self.bands.remove(fp);
                }
                _ => {}
            }
        }
        let hash = name_hash(kbid);
        if let Ok(entry) = self.numbers.find_entry(hash, |&m| m == n) {
            entry.remove();
        }
        self.names[n as usize] = Name::FREE;
        self.long_names.remove(&n);
        self.free.push(n);
    }

    /// The section numbers of the band with key `key`, oldest first.
    fn members(&self, key: u32) -> &[u32] {
        match self.bands.get(&key) {
            None => &[],
            Some(v) => self.band_members(v),
        }
    }

    /// The sections of a band whose value in `bands` is `v`.
    fn band_members<'a>(&'a self, v: &'a u32) -> &'a [u32] {
        if v & LIST != 0 {
            self.lists.members(v & !LIST)
        } else {
            std::slice::from_ref(v)
        }
    }

    pub fn apply(&mut self, changes: &[BandChange]) {
        for c in changes {
            match c {
                BandChange::Add(k, keys) => self.add(k, keys),
                BandChange::Remove(k, keys) => self.remove(k, keys),
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.numbers.is_empty()
    }

    /// How many sections the index holds.
    pub fn len(&self) -> usize {
        self.numbers.len()
    }

    /// Bytes the index holds on the heap, roughly (long names and the recent additions left
    /// out: tests make up the former, the latter are bounded).
    pub fn heap_bytes(&self) -> usize {
        self.bands.heap_bytes()
            + self.lists.heap_bytes()
            + self.names.capacity() * std::mem::size_of::<Name>()
            + self.added_at.capacity() * 8
            + self.numbers.capacity() * 5
            + self.free.capacity() * 4
    }

    /// Whether `kbid` is in the index (a committed section with band keys).
    pub fn contains(&self, kbid: &str) -> bool {
        self.number(kbid).is_some()
    }

    /// How recently `kbid` was added (larger is newer; None: not in the index).
    pub fn recency(&self, kbid: &str) -> Option<u64> {
        self.number(kbid).map(|n| self.added_at[n as usize])
    }

    /// Where a scan made now stands.
    pub fn scan_point(&self) -> ScanPoint {
        ScanPoint {
            id: self.id,
            adds: self.adds,
        }
    }

    /// The sections added after `point` that are still here, each with how many of the bands
    /// `keys` it shares (counted like `sharing`), those sharing at least `min`; None when `point`
    /// belongs to another index or the additions since are no longer all remembered.
    pub fn sharing_since(
        &self,
        point: ScanPoint,
        keys: &BandKeys,
        min: u32,
    ) -> Option<Vec<(&str, u32)>> {
        if point.id != self.id || point.adds > self.adds {
            return None;
        }
        let since = (self.adds - point.adds) as usize;
        // Each addition since costs BANDS² comparisons; past SINCE_LINEAR of them, a scan of
        // the index from scratch (BANDS lookups of at most PER_BAND entries) costs less.
        if since > self.recent.len() || since > SINCE_LINEAR {
            return None;
        }
        let mut out: Vec<(&str, u32)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        // Newest first: a number freed and given again names its latest section, whose keys
        // are those of its latest entry.
        for (n, theirs) in self.recent.iter().rev().take(since) {
            let name = self.name(*n);
            if !seen.insert(*n) || name.is_empty() {
                continue;
            }
            let shared = keys.iter().filter(|k| theirs.contains(k)).count() as u32;
            if shared >= min {
                out.push((name, shared));
            }
        }
        Some(out)
    }

    /// The sections of band `key` (the `PER_BAND` added last), oldest first.
    pub fn band(&self, key: u32) -> impl Iterator<Item = &str> {
        newest(self.members(key)).iter().map(|&n| self.name(n))
    }

    /// The sections sharing at least `min` of the bands `keys` (reading the `PER_BAND` entries
    /// of a band added last), with how many they share, in no particular order. A key that
    /// occurs twice in `keys` counts twice.
    pub fn sharing(&self, keys: &BandKeys, min: u32) -> Vec<(&str, u32)> {
        self.shared_counts(keys, min)
            .into_iter()
            .map(|(n, shared)| (self.name(n), shared))
            .collect()
    }

    /// The `limit` sections sharing the most of the bands `keys` (at least `min`, counted like
    /// `sharing`), leaving out those `skip` names: most shared bands first, among equals the
    /// most recently added. Ranked by section number, so no kbid is hashed or compared on the
    /// way (every learn does this, and a crowded band lists hundreds of sections).
    pub fn top_sharing(
        &self,
        keys: &BandKeys,
        min: u32,
        limit: usize,
        skip: impl Fn(&str) -> bool,
    ) -> Vec<(&str, u32)> {
        let mut counts = self.shared_counts(keys, min);
        counts.sort_unstable_by_key(|&(n, shared)| {
            (
                std::cmp::Reverse(shared),
                std::cmp::Reverse(self.added_at[n as usize]),
            )
        });
        counts
            .into_iter()
            .map(|(n, shared)| (self.name(n), shared))
            .filter(|(name, _)| !skip(name))
            .take(limit)
            .collect()
    }

    /// (section number, shared bands) of the sections sharing at least `min` of `keys`.
    fn shared_counts(&self, keys: &BandKeys, min: u32) -> Vec<(u32, u32)> {
        self.bands.prefetch(keys);
        let found: [Option<u32>; BANDS] =
            std::array::from_fn(|i| self.bands.get(&keys[i]).copied());
        for v in found.iter().flatten().filter(|&&v| v & LIST != 0) {
            self.lists.prefetch(v & !LIST);
        }
        let mut numbers: Vec<u32> = Vec::with_capacity(BANDS * PER_BAND);
        for v in found.into_iter().flatten() {
            numbers.extend_from_slice(newest(self.band_members(&v)));
        }
        numbers.sort_unstable();
        numbers
            .chunk_by(|a, b| a == b)
            .filter(|run| run.len() as u32 >= min)
            .map(|run| (run[0], run.len() as u32))
            .collect()
    }
}
