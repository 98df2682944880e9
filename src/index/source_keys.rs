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
/// come in kbid order, as the table's values did). Held for every titled section, so a key
/// with one section (nearly all of them) holds it inline instead of in a one-element set:
/// ~150 bytes per entry where a set per key took ~400 (docs/performance.md, *Memory*).
#[derive(Debug, Default)]
pub struct SourceKeyIndex {
    keys: BTreeMap<Box<str>, Kbids>,
    entries: usize,
}

/// The sections under one key.
#[derive(Debug)]
enum Kbids {
    One(Box<str>),
    Many(BTreeSet<Box<str>>),
}

impl Kbids {
    fn iter(&self) -> impl Iterator<Item = &str> {
        let (one, many) = match self {
            Kbids::One(k) => (Some(&**k), None),
            Kbids::Many(set) => (None, Some(set.iter().map(|k| &**k))),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }
}

impl SourceKeyIndex {
    pub fn add(&mut self, key: &str, kbid: &str) {
        let added = match self.keys.get_mut(key) {
            None => {
                self.keys.insert(key.into(), Kbids::One(kbid.into()));
                true
            }
            Some(slot) => match slot {
                Kbids::One(k) if &**k == kbid => false,
                Kbids::One(k) => {
                    let first = std::mem::take(k);
                    *slot = Kbids::Many(BTreeSet::from([first, kbid.into()]));
                    true
                }
                Kbids::Many(set) => set.insert(kbid.into()),
            },
        };
        if added {
            self.entries += 1;
        }
    }

    pub fn remove(&mut self, key: &str, kbid: &str) {
        let Some(kbids) = self.keys.get_mut(key) else {
            return;
        };
        let (removed, empty) = match kbids {
            Kbids::One(k) => {
                let hit = &**k == kbid;
                (hit, hit)
            }
            Kbids::Many(set) => {
                let hit = set.remove(kbid);
                if set.len() == 1
                    && let Some(last) = set.pop_first()
                {
                    *kbids = Kbids::One(last);
                }
                (hit, false)
            }
        };
        if removed {
            self.entries -= 1;
        }
        if empty {
            self.keys.remove(key);
        }
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
    pub fn kbids(&self, key: &str) -> impl Iterator<Item = &str> {
        self.keys.get(key).into_iter().flat_map(Kbids::iter)
    }

    /// The sections under every key starting with `prefix`: keys in order, each key's kbids in
    /// kbid order.
    pub fn with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a str> {
        self.keys
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(move |(k, _)| k.starts_with(prefix))
            .flat_map(|(_, kbids)| kbids.iter())
    }

    /// How many (key, section) entries the index holds.
    pub fn len(&self) -> usize {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }
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
        assert!(!index.keys.contains_key("#b"), "an emptied key is dropped");
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
