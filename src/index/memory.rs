//! The indexes held in memory beside the store, both derived from the section records: the
//! near-duplicate band index (src/index/near_dup.rs) and the source-key index
//! (src/index/source_keys.rs). They are loaded from the records on first use and kept in step
//! with committed writes: write paths take turns, each holding its turn for a whole
//! transaction and changing the indexes only after its commit, while near-duplicate scans made
//! outside any transaction (the daemon's client threads) read them in between. Nothing in them
//! is trusted across a reopen: a reopened store loads them again (`Kb::index_turn`).

use super::near_dup::{BandChange, BandIndex};
use super::source_keys::{SourceKeyChange, SourceKeyIndex};

/// The in-memory indexes of one store.
#[derive(Debug, Default)]
pub struct SectionIndexes {
    pub bands: BandIndex,
    pub source_keys: SourceKeyIndex,
}

/// What a committed transaction changed in them.
#[derive(Debug, Default)]
pub struct IndexChanges {
    pub bands: Vec<BandChange>,
    pub source_keys: Vec<SourceKeyChange>,
}

impl SectionIndexes {
    pub fn apply(&mut self, changes: &IndexChanges) {
        self.bands.apply(&changes.bands);
        self.source_keys.apply(&changes.source_keys);
    }
}

/// The indexes as the knowledge base shares them.
#[derive(Default)]
pub struct SharedIndexes {
    turn: std::sync::Mutex<()>,
    index: std::sync::RwLock<Option<SectionIndexes>>,
}

fn poisoned<T>(_: T) -> crate::error::KbError {
    crate::error::KbError::Storage("in-memory index lock poisoned by an earlier panic".into())
}

impl SharedIndexes {
    /// A write path's turn (call before beginning the write transaction, never after).
    pub fn turn(&self) -> crate::error::Result<IndexTurn<'_>> {
        let turn = self.turn.lock().map_err(poisoned)?;
        let read = self.index.read().map_err(poisoned)?;
        Ok(IndexTurn {
            _turn: turn,
            shared: self,
            read: Some(read),
        })
    }

    /// After a panic was caught (a damaged page): the locks work again, and the indexes are
    /// loaded anew from the store at their next use (a write may have stopped half-way).
    pub fn recover(&self) {
        self.turn.clear_poison();
        self.index.clear_poison();
        if let Ok(mut index) = self.index.write() {
            *index = None;
        }
    }

    /// The indexes for a scan or a lookup (None: poisoned; the inner None: not loaded yet).
    pub fn read(&self) -> Option<std::sync::RwLockReadGuard<'_, Option<SectionIndexes>>> {
        self.index.read().ok()
    }
}

/// A write path's turn on the indexes: it reads them during its transaction and applies its
/// changes once committed.
pub struct IndexTurn<'a> {
    _turn: std::sync::MutexGuard<'a, ()>,
    shared: &'a SharedIndexes,
    read: Option<std::sync::RwLockReadGuard<'a, Option<SectionIndexes>>>,
}

impl IndexTurn<'_> {
    pub fn get(&self) -> Option<&SectionIndexes> {
        self.read.as_ref().and_then(|r| r.as_ref())
    }

    /// Replace the indexes (None: load them again on next use).
    pub fn set(&mut self, index: Option<SectionIndexes>) -> crate::error::Result<()> {
        self.read = None;
        *self.shared.index.write().map_err(poisoned)? = index;
        self.read = Some(self.shared.index.read().map_err(poisoned)?);
        Ok(())
    }

    /// Apply a committed transaction's changes and end the turn.
    pub fn apply(mut self, changes: &IndexChanges) {
        self.read = None;
        if let Ok(mut index) = self.shared.index.write()
            && let Some(index) = index.as_mut()
        {
            index.apply(changes);
        }
    }
}
