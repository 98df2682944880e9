//! The engine: [`Kb`], one database folder opened by one process. Every capability of the
//! CLI, the daemon and the MCP server is a method of `Kb`, in one file per face:
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | the type, open and close, the store and index handles |
//! | `write.rs` | the one door for writes: prepare, apply in a group, commit (journal or redb) |
//! | `read.rs` | retrieve, recall, content, documents, changes, status |
//! | `search.rs` | lexical, vector and hybrid search |
//! | `maintain.rs` | check, rebuild, export, import, migrate, gc |
//! | `vectors.rs` | the embedding provider, the embedder rounds, vector status |
//! | `collections.rs` | models, typed documents, queries, validation, section edits |
//! | `sync.rs` | folder sync |
//! | `skills.rs` | skills and agents |

mod collections;
mod dictionary;
mod group_commit;
mod index_follower;
mod maintain;
mod read;
mod search;
mod skills;
mod sync;
mod vectors;
mod write;

pub(crate) use write::WRITTEN_WHERE_READ;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use redb::{Database, Durability, ReadableDatabase};

use crate::index::lexical::LexicalIndex;
use crate::store::durability::JournalState;
use crate::{Config, KbError, Result, index, store, types, writes};

/// A write validated and pre-computed outside the transaction (`Kb::prepare_write`).
pub struct PreparedWrite(writes::PreparedOp);

/// A knowledge base: one database folder, opened by exactly one process.
pub struct Kb {
    /// The redb database, reopened by itself after an I/O failure (src/store/handle.rs).
    pub(crate) store: Arc<store::Store>,
    dir: PathBuf,
    config: Config,
    /// The lexical index, derived from the store (one writer; searchers are cheap snapshots).
    lexical: Arc<Mutex<LexicalIndex>>,
    /// The thread that catches the lexical index up after `write_group`'s writes
    /// (src/kb/index_follower.rs).
    index_follower: index_follower::IndexFollower,
    /// The fault plan of a test (docs/io-faults.md), for a rebuild of the lexical index.
    plan: Option<store::faults::FaultPlan>,
    /// The near-duplicate band index and the source-key index, derived from the section
    /// records and loaded on first use (src/index/memory.rs). Write paths that change them take
    /// their turn before starting their transaction (never the other way round) and apply their
    /// changes after the commit; near-duplicate scans made before a transaction
    /// (`prepare_write`) read them in between.
    indexes: index::memory::SharedIndexes,
    /// Shingle sets of recent sections (near-duplicate checks; never stale: kbids name content).
    shingles: index::near_dup::ShingleCache,
    /// The store generation the in-memory indexes were loaded at (a reopen may make them stale).
    indexes_generation: AtomicU64,
    /// Embedding provider, in-memory vectors and the embedder (src/vectors/state.rs, src/kb/vectors.rs).
    vectors: crate::vectors::state::VectorEngine,
    /// Models and the document index of collections (src/collections/state.rs, src/kb/collections.rs).
    collection: crate::collections::state::CollectionState,
    /// The write journal of group commits, started by the first write (None: not yet, or
    /// `daemon.journal = false`: every write commits durably in redb). src/store/journal.rs.
    journal: Mutex<Option<JournalState>>,
    /// The database's content dictionary, once it has one (src/kb/dictionary.rs).
    content_dictionary: std::sync::OnceLock<&'static store::content_codec::Dictionary>,
    /// The number of stored contents at the last training that found nothing to train on (the
    /// next try waits until there are twice as many).
    dictionary_tried_at: AtomicU64,
    /// The contents the database held after the last write group of this process: whether
    /// the dictionary is due (`Kb::train_content_dictionary_when_due`).
    contents_stored: AtomicU64,
    /// Writes of other threads waiting to join the group being committed (src/kb/group_commit.rs).
    commit_queue: group_commit::CommitQueue,
}

impl Kb {
    /// Open an existing knowledge base in `dir`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Kb> {
        Self::open_inner(dir.as_ref(), false, false).map(|(kb, _)| kb)
    }

    /// Open the knowledge base in `dir`, creating the folder and database when missing.
    /// Returns whether it was created.
    pub fn open_or_create(dir: impl AsRef<Path>) -> Result<(Kb, bool)> {
        Self::open_inner(dir.as_ref(), true, false)
    }

    /// `open_or_create` with the store's and the lexical index's I/O going through a fault plan
    /// (tests: docs/io-faults.md).
    #[doc(hidden)]
    pub fn open_with_io(
        dir: impl AsRef<Path>,
        plan: store::faults::FaultPlan,
    ) -> Result<(Kb, bool)> {
        Self::open_io(dir.as_ref(), true, false, Some(plan))
    }

    /// `allow_plain`: create a database even in a folder that holds the plain-file layout
    /// (what `migrate` does in place).
    fn open_inner(dir: &Path, create: bool, allow_plain: bool) -> Result<(Kb, bool)> {
        Self::open_io(dir, create, allow_plain, None)
    }

    fn open_io(
        dir: &Path,
        create: bool,
        allow_plain: bool,
        plan: Option<store::faults::FaultPlan>,
    ) -> Result<(Kb, bool)> {
        let db_file = dir.join(store::DB_FILE);
        match std::fs::metadata(dir) {
            Ok(m) if !m.is_dir() => return Err(KbError::NotADirectory(dir.to_path_buf())),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if !create {
                    return Err(KbError::NotInitialized(dir.to_path_buf()));
                }
                store::create_folder(dir)?;
            }
            Err(e) => return Err(KbError::io(format!("cannot access {}", dir.display()), e)),
        }
        // An unreadable folder is an error, not a missing database.
        let existed = db_file
            .try_exists()
            .map_err(|e| KbError::io(format!("cannot access {}", db_file.display()), e))?;
        if !existed && !allow_plain && crate::snapshot::layout::is_plain_layout(dir) {
            return Err(KbError::PlainLayout(dir.to_path_buf()));
        }
        if !existed && !create {
            return Err(KbError::NotInitialized(dir.to_path_buf()));
        }
        let dir = dir
            .canonicalize()
            .map_err(|e| KbError::io(format!("cannot resolve {}", dir.display()), e))?;
        store::check_folder(&dir)?;
        let config = Config::load(&dir)?;
        let store = Arc::new(store::Store::open(&dir, plan.clone())?);
        let content_dictionary = std::sync::OnceLock::new();
        match dictionary::stored(&*store.read()?) {
            Ok(Some(d)) => {
                let _ = content_dictionary.set(d);
            }
            Ok(None) => {}
            // Degrade: content stored without it still reads, and what was compressed with it
            // is reported as damaged by the reads and by `check`, section by section.
            Err(e) => tracing::error!("the content dictionary is not used: {e}"),
        }
        let lexical = Arc::new(Mutex::new(LexicalIndex::open_with(
            &dir,
            &*store.read()?,
            plan.as_ref(),
        )?));
        Ok((
            Kb {
                store,
                dir,
                config,
                lexical,
                plan,
                indexes: Default::default(),
                shingles: Default::default(),
                indexes_generation: AtomicU64::new(0),
                vectors: Default::default(),
                collection: Default::default(),
                journal: Mutex::new(None),
                content_dictionary,
                dictionary_tried_at: AtomicU64::new(0),
                contents_stored: AtomicU64::new(0),
                commit_queue: Default::default(),
                index_follower: Default::default(),
            },
            !existed,
        ))
    }

    /// The database folder (canonical path).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn lexical(&self) -> Result<MutexGuard<'_, LexicalIndex>> {
        self.lexical
            .lock()
            .map_err(|_| KbError::Storage("lexical index lock poisoned by an earlier panic".into()))
    }

    /// A write path's turn on the in-memory indexes (src/index/memory.rs); they are not loaded
    /// by it (a write that needs them to look something up takes `loaded_index_turn`).
    fn index_turn(&self) -> Result<index::memory::IndexTurn<'_>> {
        let mut turn = self.indexes.turn()?;
        // After a reopen the store may hold a commit that reported a failure (its fsync failed
        // after its data was written): reload the indexes from the store.
        // Cleared before the generation is recorded: a reader that sees the store's generation
        // (`source_key_range`) then finds the indexes unloaded, never the stale ones. Only the
        // turn's holder writes the generation.
        let generation = self.store.generation();
        if self.indexes_generation.load(Ordering::Acquire) != generation {
            turn.set(None)?;
            self.indexes_generation.store(generation, Ordering::Release);
        }
        Ok(turn)
    }

    /// A turn on the in-memory indexes, loading them from the section records on first use
    /// (call before `begin_write`).
    fn loaded_index_turn(&self) -> Result<index::memory::IndexTurn<'_>> {
        let mut turn = self.index_turn()?;
        if turn.get().is_none() {
            let txn = self.db()?.begin_read()?;
            let sections = txn.open_table(store::tables::SECTIONS)?;
            // Each section's age in the band index is its content sequence, the order the
            // sections were stored, so that a crowded band's newest entries, the ones read, are
            // the most recent sections.
            let mut index = index::memory::SectionIndexes::default();
            for row in redb::ReadableTable::iter(&sections)? {
                let (k, v) = row?;
                let rec: types::records::SectionRecord =
                    types::records::decode("sections", k.value(), v.value())?;
                if let Some(key) = &rec.source_key {
                    index.source_keys.load(key, k.value());
                }
                if let Some(keys) = rec.bands {
                    index.bands.load(k.value(), &keys, rec.content_seq);
                }
            }
            index.bands.finish_load();
            tracing::debug!(
                sections = index.bands.len(),
                band_bytes = index.bands.heap_bytes(),
                source_keys = index.source_keys.len(),
                source_key_bytes = index.source_keys.heap_bytes(),
                "in-memory indexes loaded"
            );
            turn.set(Some(index))?;
        }
        Ok(turn)
    }

    /// The database for reading (reopened after an I/O failure: src/store/handle.rs).
    pub(crate) fn db(&self) -> Result<Arc<Database>> {
        self.store.read()
    }

    /// The database for writing: fails with the reason while it cannot be written (the disk is
    /// full…), and is writable again as soon as it can be.
    pub(crate) fn db_write(&self) -> Result<Arc<Database>> {
        self.store.write()
    }

    /// After a panic was caught in a read (a damaged page; the daemon goes on): the in-memory
    /// state's locks the panic poisoned work again (the derived state is loaded anew), so one
    /// damaged page does not fail every later call.
    pub fn recover_locks(&self) {
        self.lexical.clear_poison();
        self.indexes.recover();
        self.vectors.recover();
        self.collection.recover();
    }

    fn begin_write(&self) -> Result<redb::WriteTransaction> {
        let mut txn = self.db_write()?.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        Ok(txn)
    }
}

impl Drop for Kb {
    fn drop(&mut self) {
        self.index_follower.stop();
        if let Err(e) = self.checkpoint_journal() {
            tracing::warn!(
                "cannot make the journaled writes durable at close (they are replayed at the next open): {e}"
            );
        }
        // Best effort: a missing commit is replayed from the change log on the next open.
        if let Ok(mut l) = self.lexical.lock() {
            let _ = l.commit();
        }
    }
}

/// Total size of the files under `dir` (0 when unreadable).
pub(crate) fn folder_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => folder_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}
