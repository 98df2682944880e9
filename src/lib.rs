//! kbdb — a local knowledge base for AI agents and the people who work with them.
//!
//! [`Kb`] is the engine and the only way in: every capability of the CLI (and later the daemon
//! and the MCP server) is one method here. It is usable embedded, without daemon or async
//! runtime.

pub mod collections;
mod compose;
pub mod config;
pub mod daemon;
pub mod embedding;
pub mod error;
mod files;
pub mod index;
mod learn;
pub mod maintenance;
pub mod mcp;
pub mod model;
mod process;
mod recall;
mod references;
pub mod search;
pub mod skills;
pub mod store;
pub mod sync;
pub mod text;
mod unlearn;
pub mod vectors;
pub mod writes;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use redb::{Database, Durability, ReadableDatabase, ReadableTableMetadata};

pub use config::Config;
pub use error::{KbError, Result};
pub use maintenance::export::ExportOptions;
pub use maintenance::import::{ImportProblem, ImportResult};
pub use model::*;
pub use search::{SearchItem, SearchItems, SearchRequest, SearchResponse};
pub use writes::{WriteOp, WriteOutcome};

use index::lexical::LexicalIndex;
use store::txn::{ReadTables, WriteTables};

/// A write validated and pre-computed outside the transaction (`Kb::prepare_write`).
pub struct PreparedWrite(writes::PreparedOp);

/// A knowledge base: one database folder, opened by exactly one process.
pub struct Kb {
    /// The redb database, reopened by itself after an I/O failure (src/store/handle.rs).
    store: store::Store,
    dir: PathBuf,
    config: Config,
    /// The lexical index, derived from the store (one writer; searchers are cheap snapshots).
    lexical: Mutex<LexicalIndex>,
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
    /// Embedding provider, in-memory vectors and the embedder (src/vectors/engine.rs).
    vectors: vectors::engine::VectorEngine,
    /// Models and the document index of collections (src/collections/engine.rs).
    collection: collections::engine::CollectionState,
    /// The write journal of group commits (the daemon's; None: every write commits durably in
    /// redb). src/store/journal.rs.
    journal: Mutex<Option<JournalState>>,
}

/// Journal bytes after which a group commits durably in redb instead (a checkpoint, as every
/// `daemon.journal_checkpoint_ms`): bounds the journal, the commits held in redb's memory, and
/// the replay after a crash.
const JOURNAL_CHECKPOINT_BYTES: u64 = 64 << 20;

struct JournalState {
    journal: store::journal::Journal,
    last_durable: Instant,
    /// `daemon.journal_checkpoint_ms`.
    every: std::time::Duration,
    /// A record that may be in the journal although its transaction did not commit (the
    /// append or the commit failed): the next commit is durable and claims this number, so a
    /// replay skips it.
    skip_to: Option<u64>,
    /// The next durable commit claims the number after the one the database holds (a group
    /// failed by a panic may have appended a record with it).
    claim_next: bool,
    /// A durable commit must come before the next record (an append failed, and its torn
    /// record could hide the next ones from a replay; or the journal was just opened and holds
    /// records the next ones overwrite).
    durable_first: bool,
}

impl JournalState {
    fn checkpoint_due(&self) -> bool {
        self.durable_first
            || self.skip_to.is_some()
            || self.claim_next
            || self.last_durable.elapsed() >= self.every
            || self.journal.bytes() >= JOURNAL_CHECKPOINT_BYTES
    }

    /// Before a durable commit: claim a record that must not be replayed.
    fn before_durable(&mut self, txn: &redb::WriteTransaction) -> Result<()> {
        if let Some(seq) = self.skip_to {
            let held = store::journal::applied_seq(txn)?;
            store::journal::set_applied_seq(txn, held.max(seq))?;
        }
        if self.claim_next {
            let held = store::journal::applied_seq(txn)?;
            store::journal::set_applied_seq(txn, held + 1)?;
        }
        Ok(())
    }

    /// After a durable commit: every record is in the database; the journal starts over.
    fn after_durable(&mut self) {
        self.skip_to = None;
        self.claim_next = false;
        self.durable_first = false;
        self.last_durable = Instant::now();
        self.journal.reset();
    }
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
                // Not writable by others whatever the umask (`store::check_folder`).
                std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o755)
                    .recursive(true)
                    .create(dir)
                    .map_err(|e| KbError::io(format!("cannot create {}", dir.display()), e))?;
            }
            Err(e) => return Err(KbError::io(format!("cannot access {}", dir.display()), e)),
        }
        // An unreadable folder is an error, not a missing database.
        let existed = db_file
            .try_exists()
            .map_err(|e| KbError::io(format!("cannot access {}", db_file.display()), e))?;
        if !existed && !allow_plain && maintenance::layout::is_plain_layout(dir) {
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
        let store = store::Store::open(&dir, plan.clone())?;
        let lexical = Mutex::new(LexicalIndex::open_with(
            &dir,
            &*store.read()?,
            plan.as_ref(),
        )?);
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

    /// Learn one section (see `learn_many` for batches). One durable transaction.
    pub fn learn(&self, req: LearnRequest) -> Result<LearnResult> {
        let mut results = self.learn_many(vec![req])?;
        results.pop().expect("one result per request")
    }

    /// Learn many sections in one durable transaction. Each request gets its own result:
    /// invalid requests fail alone and change nothing; a storage failure fails the whole batch.
    pub fn learn_many(&self, reqs: Vec<LearnRequest>) -> Result<Vec<Result<LearnResult>>> {
        let ops = reqs.into_iter().map(WriteOp::Learn).collect();
        Ok(self
            .write_group(ops)?
            .into_iter()
            .map(|r| {
                r.and_then(|o| match o {
                    WriteOutcome::Learned(r) => Ok(r),
                    _ => Err(KbError::Storage("unexpected write outcome".into())),
                })
            })
            .collect())
    }

    /// Apply many writes in one durable transaction (group commit), in order. Each gets its
    /// own result: invalid ones fail alone and change nothing; a storage failure fails the
    /// whole group (nothing of it is written).
    pub fn write_group(&self, ops: Vec<WriteOp>) -> Result<Vec<Result<WriteOutcome>>> {
        let mut r = self.write_group_unindexed(ops);
        self.index_committed_changes();
        if let Ok(out) = r.as_mut() {
            self.embed_after_write(out);
        }
        r
    }

    /// `write_group` without feeding the lexical index: the caller calls `index_pending`
    /// later (the daemon does it on another thread, off the acknowledgement path). Searches
    /// catch up by themselves, so nothing is ever missed.
    pub fn write_group_unindexed(&self, ops: Vec<WriteOp>) -> Result<Vec<Result<WriteOutcome>>> {
        self.check_batch(ops.len())?;
        let prepared = ops.into_iter().map(|op| self.prepare_write(op)).collect();
        self.write_prepared_unindexed(prepared)
    }

    /// The batch limit of one write group (`limits.max_batch`).
    pub fn check_batch(&self, writes: usize) -> Result<()> {
        if writes > self.config.limits.max_batch {
            return Err(KbError::invalid(
                "batch",
                format!(
                    "has {writes} writes; the limit is {} (limits.max_batch)",
                    self.config.limits.max_batch
                ),
            ));
        }
        Ok(())
    }

    /// Validate a write and compute what does not need the store (hashes, shingles, reference
    /// markers), outside any transaction: the daemon does this on each client's thread, so the
    /// single writer only applies.
    pub fn prepare_write(&self, op: WriteOp) -> Result<PreparedWrite> {
        let mut op = writes::prepare(op, &self.config.limits)?;
        if let writes::PreparedOp::Learn(p) = &mut op {
            self.scan_near_duplicates(p);
        }
        collections::edit::pre_read(&mut op, || self.db());
        Ok(PreparedWrite(op))
    }

    /// Look for a learn's near duplicates before its transaction, so that the writer only
    /// completes the scan with what was committed since (the daemon runs this on each client's
    /// thread, in parallel, instead of on the one writer). A scan that cannot be made (the
    /// band index not loaded yet, a read failing) is left to the writer.
    fn scan_near_duplicates(&self, p: &mut learn::Prepared) {
        let Some((point, candidates)) = self
            .indexes
            .read()
            .and_then(|index| learn::scan_candidates(p, &index.as_ref()?.bands))
        else {
            return;
        };
        let mut tables = None;
        let load = |kbid: &str| -> Result<Option<Vec<u8>>> {
            if tables.is_none() {
                tables = Some(ReadTables::open(&self.db()?.begin_read()?)?);
            }
            tables
                .as_ref()
                .expect("opened above")
                .content_unverified(kbid)
        };
        if let Err(e) = learn::scan_near_duplicates(p, point, candidates, &self.shingles, load) {
            tracing::debug!("near-duplicate scan left to the writer: {e}");
        }
    }

    /// Apply prepared writes in one durable transaction (see `write_group`); the lexical index
    /// is left to `index_pending`.
    pub fn write_prepared_unindexed(
        &self,
        prepared: Vec<Result<PreparedWrite>>,
    ) -> Result<Vec<Result<WriteOutcome>>> {
        self.write_prepared_joining(prepared, |_| None)
    }

    /// Like `write_prepared_unindexed`, but writes that arrive while the transaction is being
    /// applied join it: after each batch, `more(room)` is asked for the next, of at most `room`
    /// writes (until it answers `None` or the group holds `limits.max_batch` writes), so writers
    /// who come back while a group is being applied share its commit instead of waiting for the
    /// next one. Results come in the order of the writes, the first batch's first.
    pub fn write_prepared_joining(
        &self,
        prepared: Vec<Result<PreparedWrite>>,
        mut more: impl FnMut(usize) -> Option<Vec<Result<PreparedWrite>>>,
    ) -> Result<Vec<Result<WriteOutcome>>> {
        let start = Instant::now();
        self.check_batch(prepared.len())?;
        let limit = self.config.limits.max_batch;
        // The next batch to join, while the group has room.
        let mut next_batch = |done: usize| {
            if done < limit {
                more(limit - done)
            } else {
                None
            }
        };
        let mut batch = prepared;
        let mut out: Vec<Result<WriteOutcome>> = Vec::with_capacity(batch.len());
        // Failed preparations only: nothing to open a transaction for.
        while batch.iter().all(|p| p.is_err()) {
            out.extend(batch.into_iter().filter_map(|p| p.err()).map(Err));
            match next_batch(out.len()) {
                Some(next) => batch = next,
                None => return Ok(out),
            }
        }
        let turn = self.loaded_index_turn()?;
        let mut journal = self.journal.lock().unwrap_or_else(PoisonError::into_inner);
        let journaled = journal.as_ref().is_some_and(|j| !j.checkpoint_due());
        let mut txn = self.begin_write()?;
        let (changes, record) = {
            let mut t = WriteTables::open_logging(&txn, now(), journaled)?;
            t.indexes = turn.get();
            t.shingle_cache = Some(&self.shingles);
            loop {
                for p in batch {
                    out.push(match p {
                        Ok(PreparedWrite(p)) => writes::apply(&mut t, p)?,
                        Err(e) => Err(e),
                    });
                }
                match next_batch(out.len()) {
                    Some(next) => batch = next,
                    None => break,
                }
            }
            t.flush()?;
            let record = if journaled {
                t.take_record(store::migrate::current_version())
            } else {
                None
            };
            (t.take_index_changes(), record)
        };
        if out.iter().flatten().any(|o| o.changed_something()) {
            // The record's bytes, unless the group commits durably in redb (a checkpoint, a
            // write the record does not cover, or a record too large for a replay).
            let encoded = match record {
                Some(record) => {
                    let seq = store::journal::applied_seq(&txn)? + 1;
                    store::journal::encode_record(seq, &record).map(|bytes| (seq, bytes))
                }
                None => None,
            };
            match (journal.as_mut(), encoded) {
                (Some(j), Some((seq, bytes))) => {
                    // Durable in the journal first, then visible: nothing is seen that a crash
                    // could take back.
                    store::journal::set_applied_seq(&txn, seq)?;
                    txn.set_durability(Durability::None)?;
                    if let Err(e) = j.journal.append(&bytes) {
                        j.durable_first = true;
                        j.skip_to = Some(seq);
                        return Err(e);
                    }
                    if let Err(e) = txn.commit() {
                        j.skip_to = Some(seq);
                        return Err(e.into());
                    }
                }
                (Some(j), None) => {
                    j.before_durable(&txn)?;
                    txn.commit()?;
                    j.after_durable();
                }
                (None, _) => txn.commit()?,
            }
            turn.apply(&changes);
        } else {
            txn.abort()?;
        }
        let elapsed = elapsed_ms(start);
        for r in out.iter_mut().flatten() {
            r.set_elapsed(elapsed);
        }
        self.flag_embedding_state(&mut out);
        Ok(out)
    }

    fn write_one(&self, op: WriteOp) -> Result<WriteOutcome> {
        self.write_group(vec![op])?
            .pop()
            .expect("one result per write")
    }

    /// Learn a markdown text as the document `docid`: its heading sections (the shared rule,
    /// `text::markdown`), in order, in one transaction. Learning the same text again changes
    /// nothing; an edited text replaces the document's membership: unchanged sections keep their
    /// kbid, vanished ones are detached. `title` defaults to the first heading.
    pub fn learn_document(
        &self,
        docid: &str,
        markdown: &str,
        title: Option<&str>,
    ) -> Result<DocumentLearnResult> {
        self.learn_document_tagged(docid, markdown, title, &[])
    }

    /// `learn_document`, giving every section of the document `tags` (added to the tags a
    /// section already has).
    pub fn learn_document_tagged(
        &self,
        docid: &str,
        markdown: &str,
        title: Option<&str>,
        tags: &[String],
    ) -> Result<DocumentLearnResult> {
        match self.write_one(WriteOp::LearnDocument {
            docid: docid.to_string(),
            markdown: markdown.to_string(),
            title: title.map(str::to_string),
            metadata: None,
            tags: tags.to_vec(),
        })? {
            WriteOutcome::Document(r) => Ok(r),
            _ => Err(KbError::Storage("unexpected write outcome".into())),
        }
    }

    /// Remove a section and everything that points at it. Unknown kbid → `removed: false`.
    pub fn unlearn(&self, kbid: &str) -> Result<UnlearnResult> {
        match self.write_one(WriteOp::Unlearn {
            kbid: kbid.to_string(),
        })? {
            WriteOutcome::Unlearned(r) => Ok(r),
            _ => Err(KbError::Storage("unexpected write outcome".into())),
        }
    }

    /// `retrieve`: sections by kbid, or the document record by docid.
    pub fn retrieve(&self, kbid: Option<&str>, docid: Option<&str>) -> Result<Retrieved> {
        match (kbid, docid) {
            (Some(k), _) => self.read_sections(&[k]).map(Retrieved::Sections),
            (None, Some(d)) => self.retrieve_document(d).map(Retrieved::Document),
            (None, None) => Err(KbError::InvalidInput {
                field: "kbid".into(),
                message: "Provide kbid or docid".into(),
            }),
        }
    }

    /// Read sections' content by kbid, in the order asked. An unknown kbid is an error.
    pub fn read_sections(&self, kbids: &[&str]) -> Result<Vec<RetrievedSection>> {
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        let mut out = Vec::with_capacity(kbids.len());
        for &kbid in kbids {
            model::kbid::validate_kbid("kbid", kbid)?;
            let rec = t
                .section(kbid)?
                .ok_or_else(|| KbError::NotFound(format!("Section not found: {kbid}")))?;
            let bytes = t.content_of(&rec)?.ok_or_else(|| KbError::Corrupt {
                table: "content",
                key: kbid.to_string(),
                detail: "section has no content".into(),
            })?;
            out.push(RetrievedSection {
                kbid: kbid.to_string(),
                content: learn::content_as_text(&rec.section_type, &bytes),
                size: bytes.len() as u64,
                section_type: rec.section_type,
            });
        }
        Ok(out)
    }

    /// The document record with its ordered sections.
    pub fn retrieve_document(&self, docid: &str) -> Result<DocumentView> {
        model::validate::validate_docid(docid)?;
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        let doc = t
            .document(docid)?
            .ok_or_else(|| KbError::NotFound(format!("Document not found: {docid}")))?;
        let mut sections = Vec::with_capacity(doc.kbids.len());
        for kbid in &doc.kbids {
            if let Some(rec) = t.section(kbid)? {
                sections.push(DocumentSection {
                    kbid: kbid.clone(),
                    heading: rec.title,
                    section_type: rec.section_type,
                    size: rec.size,
                });
            }
        }
        Ok(DocumentView {
            docid: docid.to_string(),
            metadata: doc.metadata_value(),
            title: doc.title,
            doc_type: doc.doc_type,
            kbids: doc.kbids,
            sections,
            created_at: doc.created_at,
            updated_at: doc.updated_at,
        })
    }

    /// `recall`: sections with their context to `depth` (docs/references.md). Unknown kbids
    /// are an error naming them.
    pub fn recall(&self, req: &RecallRequest) -> Result<Recalled> {
        if req.kbids.len() > self.config.limits.max_batch {
            return Err(KbError::invalid(
                "kbids",
                format!(
                    "has {} kbids; the limit is {} (limits.max_batch)",
                    req.kbids.len(),
                    self.config.limits.max_batch
                ),
            ));
        }
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        recall::recall(&t, req)
    }

    /// Compose rendered markdown from kbids and docids (`content`). Unknown ids are an error
    /// that names them.
    pub fn content(&self, ids: &[String]) -> Result<ComposedContent> {
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        let data = compose::compose(&t, ids)?;
        Ok(ComposedContent {
            content_type: "text/markdown".to_string(),
            total: data.chars().count(),
            data,
        })
    }

    /// Every document, by docid.
    pub fn list_documents(&self) -> Result<Vec<DocumentSummary>> {
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        let mut out = Vec::new();
        for row in redb::ReadableTable::iter(&t.documents)? {
            let (k, v) = row?;
            let docid = k.value().to_string();
            let doc: model::records::DocumentRecord =
                model::records::decode("documents", &docid, v.value())?;
            out.push(DocumentSummary {
                docid,
                title: doc.title,
                sections: doc.kbids.len(),
                updated_at: doc.updated_at,
            });
        }
        Ok(out)
    }

    /// The first `limit` kbids starting with `prefix`, in order (completion of `kbdb://`
    /// section URIs).
    pub fn kbids_with_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        let mut out = Vec::new();
        for row in redb::ReadableTable::range(&t.sections, prefix..)? {
            let (k, _) = row?;
            if !k.value().starts_with(prefix) || out.len() >= limit {
                break;
            }
            out.push(k.value().to_string());
        }
        Ok(out)
    }

    /// kbids under every source key starting with `prefix`, in key order, as of the last
    /// commit.
    pub(crate) fn source_key_range(&self, prefix: &str) -> Result<Vec<String>> {
        let collect = |index: &index::memory::SectionIndexes| -> Vec<String> {
            index
                .source_keys
                .with_prefix(prefix)
                .map(str::to_string)
                .collect()
        };
        // Loaded for the store as it is: read it without waiting for a write in progress.
        if self.indexes_generation.load(Ordering::Acquire) == self.store.generation()
            && let Some(guard) = self.indexes.read()
            && let Some(index) = guard.as_ref()
        {
            return Ok(collect(index));
        }
        // Not loaded yet, or the store was reopened since: load it, in the writers' turn.
        let turn = self.loaded_index_turn()?;
        Ok(turn.get().map(collect).unwrap_or_default())
    }

    /// A document's record and ordered kbids.
    pub(crate) fn document_record(
        &self,
        docid: &str,
    ) -> Result<(model::records::DocumentRecord, Vec<String>)> {
        model::validate::validate_docid(docid)?;
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        let doc = t
            .document(docid)?
            .ok_or_else(|| KbError::NotFound(format!("Document not found: {docid}")))?;
        let kbids = doc.kbids.clone();
        Ok((doc, kbids))
    }

    /// Make `docid` hold exactly `kbids` (which must exist), with these fields. One transaction.
    pub(crate) fn set_document(
        &self,
        docid: &str,
        kbids: Vec<String>,
        title: Option<String>,
        doc_type: &str,
        metadata: Option<String>,
    ) -> Result<()> {
        model::validate::validate_docid(docid)?;
        let txn = self.begin_write()?;
        {
            let mut t = WriteTables::open(&txn, now())?;
            let now = t.now().to_string();
            learn::set_manifest(&mut t, docid, kbids, |doc| {
                doc.title = title;
                doc.doc_type = doc_type.to_string();
                doc.metadata = metadata;
                doc.updated_at = now;
            })?;
            t.flush()?;
        }
        txn.commit()?;
        self.index_committed_changes();
        Ok(())
    }

    /// Remove a section like `unlearn`, except that the documents `keep` selects go on
    /// listing it (a dangling entry, as agents keep a deleted skill). One transaction.
    pub(crate) fn remove_section_keeping(
        &self,
        kbid: &str,
        keep: impl Fn(&model::records::DocumentRecord) -> bool,
    ) -> Result<bool> {
        model::kbid::validate_kbid("kbid", kbid)?;
        let turn = self.index_turn()?;
        let txn = self.begin_write()?;
        let (removed, changes) = {
            let mut t = WriteTables::open(&txn, now())?;
            let mut kept = Vec::new();
            for docid in t.docs_of(kbid)? {
                if let Some(doc) = t.document(&docid)?
                    && keep(&doc)
                {
                    kept.push((docid, doc));
                }
            }
            let removed = unlearn::remove_section(&mut t, kbid)?;
            for (docid, doc) in kept {
                let kbids = doc.kbids.clone();
                learn::set_manifest(&mut t, &docid, kbids, |d| *d = doc)?;
            }
            t.flush()?;
            (removed, t.take_index_changes())
        };
        if !removed {
            txn.abort()?;
            return Ok(false);
        }
        txn.commit()?;
        turn.apply(&changes);
        self.index_committed_changes();
        Ok(true)
    }

    /// Remove a document (its manifest and memberships); its sections that no other document
    /// holds and that were not learned on their own are removed with it.
    pub fn remove_document(&self, docid: &str) -> Result<bool> {
        model::validate::validate_docid(docid)?;
        let txn = self.begin_write()?;
        let removed = {
            let mut t = WriteTables::open(&txn, now())?;
            let removed = match t.document(docid)? {
                Some(doc) => {
                    let mut seen = std::collections::HashSet::new();
                    for k in &doc.kbids {
                        if seen.insert(k.clone()) {
                            t.remove_membership(docid, k)?;
                        }
                    }
                    t.remove_document(docid)?;
                    t.log(model::records::ChangeKind::DocumentRemoved, docid)?;
                    true
                }
                None => false,
            };
            t.flush()?;
            removed
        };
        if removed {
            txn.commit()?;
            self.index_committed_changes();
        } else {
            txn.abort()?;
        }
        Ok(removed)
    }

    /// Changes committed after `seq`, oldest first (at most 10 000): what subscribers are told.
    pub fn changes_since(&self, seq: u64) -> Result<Vec<ChangeEvent>> {
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        let mut out = Vec::new();
        for row in redb::ReadableTable::range(&t.changes, seq + 1..)?.take(10_000) {
            let (k, v) = row?;
            let seq = k.value();
            let c: model::records::ChangeRecord =
                model::records::decode("changes", &seq.to_string(), v.value())?;
            use model::records::ChangeKind::*;
            let kind = match c.kind {
                SectionAdded => "section_added",
                SectionChanged => "section_changed",
                SectionRemoved => "section_removed",
                DocumentChanged => "document_changed",
                DocumentRemoved => "document_removed",
                ModelsChanged => "models_changed",
            };
            let section_type = match c.kind {
                SectionAdded | SectionChanged => t.section(&c.id)?.map(|r| r.section_type),
                _ => None,
            };
            out.push(ChangeEvent {
                seq,
                kind: kind.to_string(),
                id: c.id,
                section_type,
            });
        }
        Ok(out)
    }

    /// Database status: counts, path and the change sequence.
    pub fn status(&self) -> Result<Status> {
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        let sections = t.sections.len()?;
        let last_change_seq = t.last_seq()?;
        let (index_count, index_applied_seq, index_path) = {
            let mut lex = self.lexical()?;
            // As a search does: commit what the index applied since its last commit, so that
            // its count is what a search sees (and agrees with the store).
            if let Err(e) = self.commit_lexical(&mut lex, &*self.db()?) {
                tracing::warn!("lexical index not updated, counting its last commit: {e}");
            }
            (
                lex.searcher().num_docs(),
                lex.applied_seq(),
                lex.path().to_path_buf(),
            )
        };
        Ok(Status {
            initialized: true,
            context_path: self.dir.display().to_string(),
            cache_stats: CacheStats {
                content_count: t.content.len()?,
                index_count,
            },
            sections,
            documents: t.documents.len()?,
            schema_version: store::migrate::read_version(&txn)?,
            last_change_seq,
            database_bytes: std::fs::metadata(self.dir.join(store::DB_FILE))
                .map(|m| m.len())
                .unwrap_or(0),
            index_bytes: folder_bytes(&index_path),
            index_applied_seq,
            index_pending_changes: last_change_seq.saturating_sub(index_applied_seq),
            vectors: self.vector_status()?,
        })
    }

    /// The lexical search, fused with `vector` hits when given; `retrieval` is what was asked.
    /// `documents`: what the request's `model`/`where` allow (`collection_filter`), computed
    /// once by the caller for both retrieval paths.
    fn search_lexical(
        &self,
        req: &SearchRequest,
        vector: Option<&search::VectorHits>,
        retrieval: search::Retrieval,
        documents: Option<&std::collections::HashSet<String>>,
    ) -> Result<SearchResponse> {
        let (searcher, fields) = {
            let mut lex = self.lexical()?;
            let db = self.db()?;
            // Read-your-writes: commit what learn added since the last search. The index is
            // derived: when it cannot commit (the disk is full…), search its last commit rather
            // than fail; the changes stay in the change log and the next commit holds them.
            if let Err(e) = self.commit_lexical(&mut lex, &db) {
                tracing::warn!("lexical index not updated, searching its last commit: {e}");
            }
            (lex.searcher(), lex.fields)
        };
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        let syn = store::synonyms::Reader::open(&txn)?;
        let mut r = search::run(
            req,
            &searcher,
            &fields,
            &t,
            &|w| syn.get(w),
            vector,
            documents,
        )?;
        r.search_mode = retrieval.as_str().to_string();
        r.retrieval_method = match vector {
            Some(v) if v.only => "vector",
            Some(_) => "hybrid",
            None => "lexical",
        }
        .to_string();
        Ok(r)
    }

    /// Commit the lexical index now (learn leaves index commits to the next search, so bulk
    /// learning does not commit per section). Durability does not depend on it.
    pub fn flush_index(&self) -> Result<()> {
        self.commit_lexical(&mut *self.lexical()?, &*self.db()?)
    }

    /// `rebuild`: reconstruct the lexical index from the store.
    pub fn rebuild(&self) -> Result<RebuildResult> {
        self.rebuild_with_progress(&|_, _| {})
    }

    pub fn rebuild_with_progress(&self, progress: &dyn Fn(u64, u64)) -> Result<RebuildResult> {
        let start = Instant::now();
        let (sections, terms) = self.lexical()?.rebuild(&*self.db()?, progress)?;
        let vectors = self.rebuild_vectors(progress)?;
        Ok(RebuildResult {
            sections_reindexed: sections,
            terms_indexed: terms,
            elapsed_ms: elapsed_ms(start),
            vectors_embedded: vectors.map(|v| v.0),
            vector_failures: vectors.map(|v| v.1),
        })
    }

    /// `check`: verify checksums and kbids, types, orphans, manifests, references, divergent
    /// source keys and the lexical index against the store (docs/maintenance.md).
    pub fn check(&self) -> Result<CheckResult> {
        self.check_with_progress(&|_, _| {})
    }

    /// `check`, reporting (sections done, total) as it goes.
    pub fn check_with_progress(&self, progress: &dyn Fn(u64, u64)) -> Result<CheckResult> {
        let start = Instant::now();
        // Compare the index as of this very snapshot: apply and commit pending changes first,
        // under the lock, and read the store inside it so no write slips in between.
        let (txn, index) = {
            let mut lex = self.lexical()?;
            let mut attempts = 0;
            loop {
                self.commit_lexical(&mut lex, &*self.db()?)?;
                let txn = self.db()?.begin_read()?;
                let seq = ReadTables::open(&txn)?.last_seq()?;
                attempts += 1;
                // A write that committed between the catch-up and this snapshot would look like
                // a missing index entry: catch up again.
                if seq == lex.applied_seq() || attempts == 5 {
                    break (txn, maintenance::check::IndexView::read(&lex));
                }
            }
        };
        let mut r = maintenance::check::check(&txn, Some(index), progress)?;
        // A write journal found damaged was kept aside when the open refused it: the writes it
        // held after the damage are not in the store (src/store/journal.rs).
        for copy in store::journal::damaged_copies(&self.dir) {
            r.errors.push(model::CheckFinding {
                kind: "journal_damaged".into(),
                entity: copy.display().to_string(),
                detail: "a damaged write journal was set aside: writes acknowledged after its \
                         last checkpoint may be missing; restore from an export, or delete \
                         this copy once dealt with"
                    .into(),
            });
            r.ok = false;
        }
        r.elapsed_ms = elapsed_ms(start);
        Ok(r)
    }

    /// `export`: write a consistent snapshot as the plain-file layout (docs/file-layout.md).
    pub fn export(&self, opts: &ExportOptions) -> Result<ExportResult> {
        self.export_with_progress(opts, &|_, _| {})
    }

    pub fn export_with_progress(
        &self,
        opts: &ExportOptions,
        progress: &dyn Fn(u64, u64),
    ) -> Result<ExportResult> {
        let start = Instant::now();
        let target = maintenance::export::resolve_target(opts, &self.dir)?;
        // One read transaction: the snapshot every file is written from.
        let txn = self.db()?.begin_read()?;
        let schema = store::migrate::read_version(&txn)?;
        let w = maintenance::export::export(&txn, &target, opts, schema, &now(), progress)?;
        Ok(ExportResult {
            path: w.path.display().to_string(),
            sections_exported: w.sections,
            documents_exported: w.documents,
            elapsed_ms: elapsed_ms(start),
        })
    }

    /// `import`: read a plain-file layout into this database (docs/file-layout.md). Bad entries
    /// are reported and skipped, or stop the import with `strict` (then nothing is written).
    pub fn import(&self, path: &Path, strict: bool) -> Result<ImportResult> {
        self.import_with_progress(path, strict, &|_, _| {})
    }

    pub fn import_with_progress(
        &self,
        path: &Path,
        strict: bool,
        progress: &dyn Fn(u64, u64),
    ) -> Result<ImportResult> {
        let start = Instant::now();
        let plan = maintenance::import::read_layout(path, strict, &self.config.limits, progress)?;
        self.apply_import(path, plan, start)
    }

    fn apply_import(
        &self,
        path: &Path,
        plan: maintenance::import::Plan,
        start: Instant,
    ) -> Result<ImportResult> {
        let bases = maintenance::import::reference_bases(&plan.documents);
        let turn = self.index_turn()?;
        // The embedder is held off before the write transaction begins: its rounds take the
        // embed lock and then a write transaction, so taking them the other way round (the
        // transaction, then the lock) deadlocked an import against a running embedder.
        let paused = match plan.vectors {
            Some(_) => Some(self.pause_embedder()?),
            None => None,
        };
        let txn = self.begin_write()?;
        let mut result = ImportResult {
            path: path.display().to_string(),
            sections_imported: 0,
            sections_existing: 0,
            documents_imported: 0,
            documents_replaced: 0,
            synonyms_imported: 0,
            vectors_found: plan.vectors_found,
            vectors_reused: 0,
            models_imported: false,
            problems: plan.problems,
            elapsed_ms: 0.0,
        };
        let imported_kbids: Vec<String> = plan.sections.iter().map(|s| s.kbid.clone()).collect();
        let changes = {
            let mut t = WriteTables::open(&txn, now())?;
            for s in plan.sections {
                let base = bases.get(s.kbid.as_str()).copied();
                if learn::insert_stored(&mut t, &s.kbid, s.record, &s.bytes, base)? {
                    result.sections_imported += 1;
                } else {
                    result.sections_existing += 1;
                }
            }
            for d in plan.documents {
                let existed = t.document(&d.docid)?.is_some();
                let change = learn::set_manifest(&mut t, &d.docid, d.kbids, |doc| {
                    doc.title = d.title;
                    doc.doc_type = d.doc_type;
                    doc.metadata = d.metadata;
                    doc.created_at = d.created_at;
                    doc.updated_at = d.updated_at;
                })?;
                result.documents_imported += 1;
                if existed && change.is_some() {
                    result.documents_replaced += 1;
                }
            }
            t.flush()?;
            t.take_index_changes()
        };
        for (term, synonyms) in &plan.synonyms {
            store::synonyms::add(&txn, term, synonyms)?;
            result.synonyms_imported += 1;
        }
        txn.commit()?;
        turn.apply(&changes);
        if let (Some((meta, idx)), Some(paused)) = (&plan.vectors, &paused) {
            result.vectors_reused =
                self.reuse_imported_vectors(meta, idx, &imported_kbids, paused)?;
        }
        drop(paused);
        self.index_committed_changes();
        if let Some(models) = &plan.models {
            self.models_load(models)?;
            result.models_imported = true;
        }
        if self.embedding_configured() {
            let _ = self.embed_pending(); // failures stay pending (status)
        }
        result.elapsed_ms = elapsed_ms(start);
        Ok(result)
    }

    /// `migrate`: turn a folder in the plain-file layout into a database. With `new_dir` the
    /// database is created there and the old folder is left untouched; without, it is created
    /// in place and the plain files move into `plain-layout-<time>/` inside the folder.
    pub fn migrate(old_dir: &Path, new_dir: Option<&Path>) -> Result<(Kb, ImportResult)> {
        Self::migrate_with_progress(old_dir, new_dir, &|_, _| {})
    }

    pub fn migrate_with_progress(
        old_dir: &Path,
        new_dir: Option<&Path>,
        progress: &dyn Fn(u64, u64),
    ) -> Result<(Kb, ImportResult)> {
        if !maintenance::layout::is_plain_layout(old_dir) {
            return Err(KbError::BadImport {
                path: old_dir.display().to_string(),
                reason: "is not a plain-file layout (catalog.toml and sections/ are required)"
                    .into(),
            });
        }
        let in_place = new_dir.is_none_or(|n| n == old_dir);
        let target = new_dir.unwrap_or(old_dir);
        if target.join(store::DB_FILE).exists() {
            return Err(KbError::invalid(
                "db",
                format!(
                    "{} already holds a database; use `kbdb import` to add to it",
                    target.display()
                ),
            ));
        }
        // Read and verify everything before creating anything: an unreadable layout leaves no
        // empty database behind.
        let start = Instant::now();
        let limits = Config::load(target).map(|c| c.limits).unwrap_or_default();
        let plan = maintenance::import::read_layout(old_dir, false, &limits, progress)?;
        let (kb, _) = Self::open_inner(target, true, in_place)?;
        let result = kb.apply_import(old_dir, plan, start)?;
        if in_place {
            let backup = old_dir.join(format!("plain-layout-{}", now().replace(':', "-")));
            std::fs::create_dir(&backup)
                .map_err(|e| KbError::io(format!("cannot create {}", backup.display()), e))?;
            for name in [
                maintenance::layout::CATALOG,
                maintenance::layout::SECTIONS_DIR,
                maintenance::layout::DOCUMENTS_DIR,
                maintenance::layout::INDEXES_DIR,
                maintenance::layout::SYNONYMS,
            ] {
                let from = old_dir.join(name);
                if from.exists() {
                    std::fs::rename(&from, backup.join(name)).map_err(|e| {
                        KbError::io(format!("cannot move {} aside", from.display()), e)
                    })?;
                }
            }
        }
        Ok((kb, result))
    }

    /// `gc`: remove sections no document holds that were not learned on their own.
    pub fn gc(&self) -> Result<GcResult> {
        let start = Instant::now();
        let turn = self.index_turn()?;
        let txn = self.begin_write()?;
        let (removed_sections, removed_bytes, changes) = {
            let mut t = WriteTables::open(&txn, now())?;
            let r = maintenance::gc::collect(&mut t)?;
            t.flush()?;
            (r.0, r.1, t.take_index_changes())
        };
        if removed_sections > 0 {
            txn.commit()?;
            turn.apply(&changes);
            self.index_committed_changes();
        } else {
            txn.abort()?;
        }
        Ok(GcResult {
            removed_sections,
            removed_bytes,
            elapsed_ms: elapsed_ms(start),
        })
    }

    /// Add user synonyms: `term` and each of `synonyms` match each other at query time.
    pub fn synonyms_add(
        &self,
        term: &str,
        synonyms: &[String],
    ) -> Result<Vec<store::synonyms::SynonymEntry>> {
        let txn = self.begin_write()?;
        store::synonyms::add(&txn, term, synonyms)?;
        txn.commit()?;
        self.synonyms_list()
    }

    /// Remove `synonyms` of `term` (all of them when empty).
    pub fn synonyms_remove(&self, term: &str, synonyms: &[String]) -> Result<u64> {
        let txn = self.begin_write()?;
        let n = store::synonyms::remove(&txn, term, synonyms)?;
        txn.commit()?;
        Ok(n)
    }

    /// Every user synonym, by term.
    pub fn synonyms_list(&self) -> Result<Vec<store::synonyms::SynonymEntry>> {
        let txn = self.db()?.begin_read()?;
        store::synonyms::list(&txn)
    }

    fn lexical(&self) -> Result<MutexGuard<'_, LexicalIndex>> {
        self.lexical
            .lock()
            .map_err(|_| KbError::Storage("lexical index lock poisoned by an earlier panic".into()))
    }

    /// Feed the store's new changes to the lexical index and commit it. When the commit fails
    /// because the index folder was deleted under this process (to force a rebuild, or by
    /// mistake), every later commit would fail too and searches would miss new writes until a
    /// restart: build the index again from the store instead (that catches up and commits).
    fn commit_lexical(&self, lex: &mut LexicalIndex, db: &redb::Database) -> Result<()> {
        match lex.catch_up(db).and_then(|()| lex.commit()) {
            Err(e) if lex.folder_missing() => {
                tracing::warn!(
                    "the lexical index folder {} is gone ({e}); rebuilding it from the store",
                    lex.path().display()
                );
                *lex = LexicalIndex::open_with(&self.dir, db, self.plan.as_ref())?;
                Ok(())
            }
            r => r,
        }
    }

    /// Feed committed store changes to the index writer. A failure here never fails the write
    /// (it is durable in the store); the next search or open replays the change log.
    /// Feed committed changes to the lexical index writer now (see `write_group_unindexed`).
    pub fn index_pending(&self) {
        self.index_committed_changes()
    }

    /// The sequence number of the last committed change.
    pub fn last_change_seq(&self) -> Result<u64> {
        let txn = self.db()?.begin_read()?;
        ReadTables::open(&txn)?.last_seq()
    }

    fn index_committed_changes(&self) {
        if let Err(e) = self.lexical().and_then(|mut l| l.catch_up(&*self.db()?)) {
            tracing::warn!("lexical index update deferred: {e}");
        }
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
            // Bands are added in the order the sections were stored (their content sequence),
            // so that a crowded band's newest entries, the ones read, are the most recent
            // sections.
            let mut stored = Vec::new();
            let mut index = index::memory::SectionIndexes::default();
            for row in redb::ReadableTable::iter(&sections)? {
                let (k, v) = row?;
                let rec: model::records::SectionRecord =
                    model::records::decode("sections", k.value(), v.value())?;
                if let Some(key) = &rec.source_key {
                    index.source_keys.add(key, k.value());
                }
                if let Some(keys) = rec.bands {
                    stored.push((rec.content_seq, k.value().to_string(), keys));
                }
            }
            stored.sort_unstable_by_key(|(seq, _, _)| *seq);
            for (_, kbid, keys) in &stored {
                index.bands.add(kbid, keys);
            }
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

    /// Commit the daemon's group writes through the write journal from now on (one sequential
    /// fsync per group; redb made durable every `daemon.journal_checkpoint_ms`).
    /// src/store/journal.rs.
    pub fn enable_journal(&self) -> Result<()> {
        let mut slot = self.journal.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(JournalState {
                journal: store::journal::Journal::open(&self.dir, self.plan.clone())?,
                last_durable: Instant::now(),
                every: std::time::Duration::from_millis(self.config.daemon.journal_checkpoint_ms),
                skip_to: None,
                claim_next: false,
                // Whatever the file holds is in the database (replayed when it opened).
                durable_first: true,
            });
        }
        Ok(())
    }

    /// After a panic while a write group was applied (a damaged page: the daemon's writer goes
    /// on): the database is closed and opened again at the next access (redb's state in memory
    /// may be half-changed), and the next group commits durably, claiming the journal number
    /// the failed group may have used, so that a replay never takes a record of it for one of
    /// a later group.
    pub fn recover_from_panic(&self) {
        self.store.mark_failed();
        self.journal.clear_poison();
        let mut slot = self.journal.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(j) = slot.as_mut() {
            j.durable_first = true;
            j.claim_next = true;
        }
        drop(slot);
        self.recover_locks();
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

    /// Make every journaled write durable in redb and empty the journal (a clean stop leaves
    /// nothing to replay).
    pub fn checkpoint_journal(&self) -> Result<()> {
        let mut slot = self.journal.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(j) = slot.as_mut() else {
            return Ok(());
        };
        let txn = self.begin_write()?;
        j.before_durable(&txn)?;
        txn.commit()?;
        j.after_durable();
        j.journal.truncate();
        Ok(())
    }

    fn begin_write(&self) -> Result<redb::WriteTransaction> {
        let mut txn = self.db_write()?.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        Ok(txn)
    }
}

impl Drop for Kb {
    fn drop(&mut self) {
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

pub(crate) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Total size of the files under `dir` (0 when unreadable).
fn folder_bytes(dir: &Path) -> u64 {
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

fn elapsed_ms(start: Instant) -> f64 {
    (start.elapsed().as_secs_f64() * 1e6).round() / 1e3
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata};

    use super::*;
    use crate::store::tables::*;

    fn rows(kb: &Kb) -> [u64; 6] {
        let txn = kb.db().unwrap().begin_read().unwrap();
        let mm = |d| txn.open_multimap_table(d).unwrap().len().unwrap();
        [
            mm(TAGS),
            // Entries of the in-memory source-key index (migration 0011).
            kb.loaded_index_turn()
                .unwrap()
                .get()
                .map_or(0, |i| i.source_keys.len() as u64),
            // Sections whose record holds band keys (migration 0009).
            txn.open_table(SECTIONS)
                .unwrap()
                .iter()
                .unwrap()
                .filter(|row| {
                    let (k, v) = row.as_ref().unwrap();
                    let rec: model::records::SectionRecord =
                        model::records::decode("sections", k.value(), v.value()).unwrap();
                    rec.bands.is_some()
                })
                .count() as u64,
            mm(DOC_SECTIONS),
            mm(SECTION_DOCS),
            txn.open_table(SECTIONS).unwrap().len().unwrap(),
        ]
    }

    /// Record `version` as the database's schema version (a test pretending the database
    /// predates the migrations after it).
    fn set_schema_version(txn: &redb::WriteTransaction, version: u32) {
        txn.open_table(META)
            .unwrap()
            .insert(META_SCHEMA_VERSION, version.to_le_bytes().as_slice())
            .unwrap();
    }

    /// Put the content back where schema 9 kept it (`content`, keyed by kbid; records without
    /// `content_seq`), so that a test can pretend the database predates migration 10.
    fn content_as_in_schema_9(txn: &redb::WriteTransaction) {
        let mut sections = txn.open_table(SECTIONS).unwrap();
        let rows: Vec<(String, model::records::SectionRecord)> = sections
            .iter()
            .unwrap()
            .map(|row| {
                let (k, v) = row.unwrap();
                let rec = model::records::decode("sections", k.value(), v.value()).unwrap();
                (k.value().to_string(), rec)
            })
            .collect();
        {
            let content = txn.open_table(CONTENT).unwrap();
            let mut old = txn.open_table(CONTENT_BY_KBID).unwrap();
            for (kbid, rec) in &rows {
                let bytes = content.get(rec.content_seq).unwrap().unwrap();
                old.insert(kbid.as_str(), bytes.value()).unwrap();
            }
        }
        for (kbid, rec) in rows {
            let v2 = model::records::SectionRecordV2 {
                section_type: rec.section_type,
                title: rec.title,
                description: rec.description,
                tags: rec.tags,
                source_key: rec.source_key,
                created_at: rec.created_at,
                updated_at: rec.updated_at,
                checksum: rec.checksum,
                size: rec.size,
                standalone: rec.standalone,
                terms_count: rec.terms_count,
                bands: rec.bands,
            };
            sections
                .insert(kbid.as_str(), model::records::encode(&v2).as_slice())
                .unwrap();
        }
        drop(sections);
        txn.delete_table(CONTENT).unwrap();
    }

    #[test]
    fn migration_10_keys_content_by_sequence() {
        let tmp = tempfile::tempdir().unwrap();
        let kb = Kb::open_or_create(tmp.path()).unwrap().0;
        let texts = [
            "first fact of three",
            "second fact of three",
            "third fact of three",
        ];
        let kbids: Vec<String> = texts
            .iter()
            .map(|t| kb.learn(LearnRequest::text(*t)).unwrap().kbid)
            .collect();
        let lost = kb
            .learn(LearnRequest::text("its content goes missing"))
            .unwrap()
            .kbid;
        drop(kb);
        {
            let db = redb::Database::create(tmp.path().join(store::DB_FILE)).unwrap();
            let txn = db.begin_write().unwrap();
            content_as_in_schema_9(&txn);
            txn.open_table(CONTENT_BY_KBID)
                .unwrap()
                .remove(lost.as_str())
                .unwrap();
            // Created in the reverse of kbid order, so that the numbering tells the two apart.
            let mut sections = txn.open_table(SECTIONS).unwrap();
            let mut by_kbid = kbids.clone();
            by_kbid.sort();
            for (day, kbid) in by_kbid.iter().rev().enumerate() {
                let mut rec: model::records::SectionRecordV2 = model::records::decode(
                    "sections",
                    kbid,
                    sections.get(kbid.as_str()).unwrap().unwrap().value(),
                )
                .unwrap();
                rec.created_at = format!("2026-01-0{}T00:00:00.000Z", day + 1);
                sections
                    .insert(kbid.as_str(), model::records::encode(&rec).as_slice())
                    .unwrap();
            }
            drop(sections);
            set_schema_version(&txn, 9);
            txn.commit().unwrap();
        }
        let kb = Kb::open(tmp.path()).unwrap();
        assert_eq!(
            kb.status().unwrap().schema_version,
            store::migrate::current_version()
        );
        let mut numbered = Vec::new();
        {
            let txn = kb.db().unwrap().begin_read().unwrap();
            assert!(
                txn.open_table(CONTENT_BY_KBID).is_err(),
                "the old table is gone"
            );
            let t = ReadTables::open(&txn).unwrap();
            for (kbid, text) in kbids.iter().zip(texts) {
                let rec = t.section(kbid).unwrap().unwrap();
                assert_eq!(t.content_of(&rec).unwrap().unwrap(), text.as_bytes());
                numbered.push((rec.created_at, kbid.clone(), rec.content_seq));
            }
            assert_eq!(t.section(&lost).unwrap().unwrap().content_seq, 0);
            assert_eq!(t.content(&lost).unwrap(), None);
        }
        // Numbered from 1 in creation order (ties by kbid); the missing content took no number.
        numbered.sort();
        assert_eq!(
            numbered.iter().map(|(_, _, s)| *s).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert!(
            numbered[0].1 > numbered[2].1,
            "the first created has the largest kbid"
        );
        let report = kb.check().unwrap();
        assert!(!report.ok, "the section without content is reported");
        kb.unlearn(&lost).unwrap();
        assert!(kb.check().unwrap().ok);
        // New content goes after the highest sequence, and reads back by kbid.
        let r = kb.learn(LearnRequest::text("a fourth fact")).unwrap();
        let txn = kb.db().unwrap().begin_read().unwrap();
        let t = ReadTables::open(&txn).unwrap();
        assert_eq!(t.section(&r.kbid).unwrap().unwrap().content_seq, 4);
        assert_eq!(t.content(&r.kbid).unwrap().unwrap(), b"a fourth fact");
        assert_eq!(kb.read_sections(&[&kbids[1]]).unwrap()[0].content, texts[1]);
    }

    /// `n` distinct texts of ~1 KB each.
    fn filler_texts(n: usize) -> Vec<String> {
        let filler = "a sentence of filler words for the content table. ".repeat(20);
        (0..n).map(|i| format!("{filler} number {i}")).collect()
    }

    /// A database in `dir` holding `texts` in the layout of schema 9 (before migration 0010);
    /// their kbids.
    fn schema_9_database(dir: &Path, texts: &[String]) -> Vec<String> {
        let kb = Kb::open_or_create(dir).unwrap().0;
        let kbids = kb
            .learn_many(
                texts
                    .iter()
                    .map(|t| LearnRequest::text(t.clone()))
                    .collect(),
            )
            .unwrap()
            .into_iter()
            .map(|r| r.unwrap().kbid)
            .collect();
        drop(kb);
        let db = redb::Database::create(dir.join(store::DB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        content_as_in_schema_9(&txn);
        set_schema_version(&txn, 9);
        txn.commit().unwrap();
        kbids
    }

    #[test]
    fn a_skills_listing_does_not_wait_for_a_write_in_progress() {
        let tmp = tempfile::tempdir().unwrap();
        let kb = Arc::new(Kb::open_or_create(tmp.path()).unwrap().0);
        kb.learn(LearnRequest {
            source: Some("skill:deploy".into()),
            ..LearnRequest::text("Run the deploy script, then check the health page.")
        })
        .unwrap();
        assert_eq!(kb.source_key_range("skill:").unwrap().len(), 1);
        // A write holds the writers' turn for its whole transaction.
        let turn = kb.loaded_index_turn().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = {
            let kb = kb.clone();
            std::thread::spawn(move || {
                let _ = tx.send(kb.source_key_range("skill:").unwrap());
            })
        };
        let listed = rx.recv_timeout(std::time::Duration::from_secs(5));
        drop(turn);
        reader.join().unwrap();
        assert_eq!(listed.expect("the listing waited for the write").len(), 1);
        // Opened again, the indexes are not loaded yet: the listing loads them.
        drop(kb);
        let kb = Kb::open(tmp.path()).unwrap();
        assert_eq!(kb.source_key_range("skill:").unwrap().len(), 1);
    }

    #[test]
    fn journaled_writes_come_back_from_the_journal_after_a_crash() {
        let tmp = tempfile::tempdir().unwrap();
        let (kb, _) = Kb::open_or_create(tmp.path()).unwrap();
        kb.enable_journal().unwrap();
        kb.journal.lock().unwrap().as_mut().unwrap().every = std::time::Duration::from_secs(3600);
        let mut kept = Vec::new();
        for i in 0..40 {
            let r = kb
                .learn(LearnRequest {
                    docid: Some(format!("notes/{}", i % 3)),
                    tags: vec![format!("t{}", i % 4)],
                    title: Some(format!("Note {i}")),
                    ..LearnRequest::text(format!(
                        "Fact {i}: the journal keeps writes; see [[notes/0]] and [[notes/{}]].",
                        (i + 1) % 3
                    ))
                })
                .unwrap();
            kept.push(r.kbid);
        }
        let gone = kept.remove(7);
        kb.unlearn(&gone).unwrap();
        let seq = kb.status().unwrap().last_change_seq;
        // The files as a kill -9 now would leave them (the writes after the first are only in
        // redb's memory and the journal).
        let journal = store::journal::read_file(&tmp.path().join(store::journal::JOURNAL_FILE));
        assert!(
            journal.unwrap().len() >= 40,
            "the writes went through the journal"
        );
        let copy = |with_journal: bool| {
            let d = tempfile::tempdir().unwrap();
            std::fs::copy(
                tmp.path().join(store::DB_FILE),
                d.path().join(store::DB_FILE),
            )
            .unwrap();
            if with_journal {
                let j = store::journal::JOURNAL_FILE;
                std::fs::copy(tmp.path().join(j), d.path().join(j)).unwrap();
            }
            d
        };
        // Without the journal the file alone has lost them: the journal is what keeps them.
        let bare = copy(false);
        assert!(Kb::open(bare.path()).unwrap().status().unwrap().sections < 39);
        let crashed = copy(true);
        let kb2 = Kb::open(crashed.path()).unwrap();
        let st = kb2.status().unwrap();
        assert_eq!((st.sections, st.last_change_seq), (39, seq));
        for kbid in &kept {
            kb2.retrieve(Some(kbid), None).unwrap();
        }
        assert!(kb2.retrieve(Some(&gone), None).is_err());
        assert_eq!(
            kb2.retrieve_document("notes/1").unwrap().sections.len(),
            12,
            "note 7 was unlearned"
        );
        let check = kb2.check().unwrap();
        assert!(check.ok, "{:?}", check.errors);
        assert_eq!(
            kb2.search(&SearchRequest::new("journal keeps"))
                .unwrap()
                .total,
            39
        );
        // The replay is in the database now: the next open skips every record of the file.
        drop(kb2);
        let st = Kb::open(crashed.path()).unwrap().status().unwrap();
        assert_eq!((st.sections, st.last_change_seq), (39, seq));
        // A clean close makes everything durable in redb and empties the journal.
        drop(kb);
        let after = store::journal::read_file(&tmp.path().join(store::journal::JOURNAL_FILE));
        assert!(after.unwrap().is_empty());
        let bare = copy(false);
        assert_eq!(
            Kb::open(bare.path()).unwrap().status().unwrap().sections,
            39
        );
    }

    #[test]
    fn a_full_disk_still_reads_the_writes_only_the_journal_holds() {
        use store::faults::FaultPlan;
        let tmp = tempfile::tempdir().unwrap();
        let plan = FaultPlan::new();
        let (kb, _) = Kb::open_with_io(tmp.path(), plan.clone()).unwrap();
        kb.enable_journal().unwrap();
        kb.journal.lock().unwrap().as_mut().unwrap().every = std::time::Duration::from_secs(3600);
        let kbids: Vec<String> = ["durable in redb", "journaled one", "journaled two"]
            .into_iter()
            .map(|text| kb.learn(LearnRequest::text(text)).unwrap().kbid)
            .collect();
        // The disk fills: the checkpoint fails, and the store reopens read-only. The view must
        // replay the journal, or it would show the first write only.
        plan.fill_disk();
        assert!(kb.checkpoint_journal().is_err());
        assert_eq!(kb.status().unwrap().sections, 3);
        for kbid in &kbids {
            kb.retrieve(Some(kbid), None).unwrap();
        }
        assert!(kb.learn(LearnRequest::text("refused")).is_err());
        // Space is back: the writable store replays them for good.
        plan.free_disk();
        kb.learn(LearnRequest::text("after the disk was full"))
            .unwrap();
        assert_eq!(kb.status().unwrap().sections, 4);
        assert!(kb.check().unwrap().ok);
    }

    #[test]
    fn a_journal_append_that_fails_fails_its_write_and_a_replay_skips_it() {
        use store::faults::{Errno, FaultPlan, Op, Target};
        let tmp = tempfile::tempdir().unwrap();
        let plan = FaultPlan::new();
        let (kb, _) = Kb::open_with_io(tmp.path(), plan.clone()).unwrap();
        kb.enable_journal().unwrap();
        kb.journal.lock().unwrap().as_mut().unwrap().every = std::time::Duration::from_secs(3600);
        let learn = |text: &str| kb.learn(LearnRequest::text(text));
        let journal = tmp.path().join(store::journal::JOURNAL_FILE);
        let records = || store::journal::read_file(&journal).unwrap();
        learn("first: the journal starts over, so this commits durably in redb").unwrap();
        learn("second: through the journal").unwrap();
        assert_eq!(records().len(), 1);
        // The third's fsync fails after its record was written whole.
        let next_sync = plan.count(Target::Journal, Op::Sync) + 1;
        plan.fail_nth(Target::Journal, Op::Sync, next_sync, Errno::Eio);
        let third = "third: its journal fsync fails";
        let err = learn(third).unwrap_err();
        assert!(err.to_string().contains("kbdb.journal"), "{err}");
        assert_eq!(records().len(), 2, "the failed record is in the file");
        assert_eq!(kb.status().unwrap().sections, 2);
        // The next write commits durably and claims the failed record's number; the one after
        // goes through the journal again, written over the older records from the start of the
        // file (numbers: the second 1, the failed third 2, the fifth 3).
        learn("fourth: durable in redb").unwrap();
        learn("fifth: through the journal again").unwrap();
        assert_eq!(records()[0].0, 3);
        let copy = tempfile::tempdir().unwrap();
        for f in [store::DB_FILE, store::journal::JOURNAL_FILE] {
            std::fs::copy(tmp.path().join(f), copy.path().join(f)).unwrap();
        }
        let kb2 = Kb::open(copy.path()).unwrap();
        assert_eq!(kb2.status().unwrap().sections, 4);
        assert_eq!(kb2.search(&SearchRequest::new("fsync")).unwrap().total, 0);
        assert_eq!(kb2.search(&SearchRequest::new("fifth")).unwrap().total, 1);
        assert!(kb2.check().unwrap().ok);
    }

    #[test]
    fn a_skills_listing_after_the_store_reopened_lists_what_the_store_holds() {
        use store::faults::{Errno, FaultPlan, Op, Target};
        let skill = |name: &str, text: &str| LearnRequest {
            source: Some(format!("skill:{name}")),
            ..LearnRequest::text(text)
        };
        // Fail each fsync of the second skill's commit in turn. Its write reports the failure
        // and the store reopens; when the failing fsync came after the commit's pages were
        // written, the reopened file holds the commit anyway.
        let mut applied = 0;
        for k in 1.. {
            let tmp = tempfile::tempdir().unwrap();
            let plan = FaultPlan::new();
            let (kb, _) = Kb::open_with_io(tmp.path(), plan.clone()).unwrap();
            kb.learn(skill(
                "deploy",
                "Run the deploy script, then check the health page.",
            ))
            .unwrap();
            // The listing loads the in-memory indexes.
            assert_eq!(kb.source_key_range("skill:").unwrap().len(), 1);
            let nth = plan.count(Target::Store, Op::Sync) + k;
            plan.fail_nth(Target::Store, Op::Sync, nth, Errno::Eio);
            let learned = kb.learn(skill("rollback", "Revert the release tag, then redeploy."));
            if plan.fired().is_empty() {
                assert!(k > 1, "the commit made no fsync");
                break;
            }
            assert!(
                learned.is_err(),
                "fsync {k} failed, yet the learn succeeded"
            );
            let stored = kb.status().unwrap().sections;
            applied += usize::from(stored == 2);
            // The indexes loaded before the reopen may not know the second skill: the listing
            // must not trust them, and reads the store as it is now.
            assert_eq!(
                kb.source_key_range("skill:").unwrap().len() as u64,
                stored,
                "fsync {k} failed"
            );
        }
        assert!(
            applied > 0,
            "no failed commit reached the file: the test proves nothing"
        );
    }

    #[test]
    fn upgrading_a_database_compacts_its_file() {
        let tmp = tempfile::tempdir().unwrap();
        schema_9_database(tmp.path(), &filler_texts(1500));
        let file = tmp.path().join(store::DB_FILE);
        let before = std::fs::metadata(&file).unwrap().len();
        let kb = Kb::open(tmp.path()).unwrap();
        assert_eq!(
            kb.status().unwrap().schema_version,
            store::migrate::current_version()
        );
        let after = std::fs::metadata(&file).unwrap().len();
        // The migration rewrote every record and every content; without compaction the file
        // keeps the pages both copies took.
        assert!(
            after < before * 3 / 4,
            "{before} bytes before, {after} after"
        );
        assert!(kb.check().unwrap().ok);
    }

    #[test]
    fn a_compaction_that_fails_after_an_upgrade_leaves_the_upgraded_database_working() {
        use store::faults::{Errno, FaultPlan, Op, Target};
        let tmp = tempfile::tempdir().unwrap();
        let texts = filler_texts(400);
        let kbids = schema_9_database(tmp.path(), &texts);
        let file = tmp.path().join(store::DB_FILE);
        let before = std::fs::metadata(&file).unwrap().len();
        // A failed fsync of a migration fails the open; the first fsync whose failure the open
        // survives is the compaction's, which runs last and whose failure is only logged.
        let mut n = 1;
        let (kb, dir, plan) = loop {
            let dir = tempfile::tempdir().unwrap();
            std::fs::copy(&file, dir.path().join(store::DB_FILE)).unwrap();
            let plan = FaultPlan::nth(Target::Store, Op::Sync, n, Errno::Eio);
            match Kb::open_with_io(dir.path(), plan.clone()) {
                Ok((kb, _)) => break (kb, dir, plan),
                Err(e) => assert!(n < 20, "every open failed, the last with {e}"),
            }
            n += 1;
        };
        assert!(n > 1, "the migrations made no fsync");
        assert_eq!(plan.fired().len(), 1, "{:?}", plan.fired());
        let file = dir.path().join(store::DB_FILE);
        assert_eq!(
            std::fs::metadata(&file).unwrap().len(),
            before,
            "the failed compaction left the file as it was"
        );
        // The migrations stand; the store reopens after the failure and serves everything.
        assert_eq!(
            kb.status().unwrap().schema_version,
            store::migrate::current_version()
        );
        let read = kb.read_sections(&[&kbids[0], &kbids[399]]).unwrap();
        assert_eq!(read[0].content, texts[0]);
        assert_eq!(read[1].content, texts[399]);
        let r = kb
            .learn(LearnRequest::text("learned after the failed compaction"))
            .unwrap();
        assert!(kb.check().unwrap().ok);
        drop(kb);
        let kb = Kb::open(dir.path()).unwrap();
        assert_eq!(kb.read_sections(&[&r.kbid]).unwrap().len(), 1);
        assert_eq!(kb.status().unwrap().sections, 401);
    }

    #[test]
    fn a_crowded_band_is_read_from_its_newest_sections_also_after_reopening() {
        let tmp = tempfile::tempdir().unwrap();
        let base = "the release notes describe how the storage engine writes its pages, keeps \
                    checksums, replays the change log after a crash and rebuilds the lexical \
                    index from the store when it is missing or behind";
        let learn = |kb: &Kb, i: usize| {
            kb.learn(LearnRequest::text(format!("{base} entry{i}")))
                .unwrap()
        };
        let kb = Kb::open_or_create(tmp.path()).unwrap().0;
        let first: Vec<String> = (0..40).map(|i| learn(&kb, i).kbid).collect();
        // 40 near copies crowd their bands past the 32 entries read: the oldest 8 are left out.
        let oldest = &first[..8];
        let r = learn(&kb, 40);
        assert_eq!(r.near_duplicates.len(), near_dup_max(), "{r:?}");
        assert!(
            r.near_duplicates.iter().all(|d| !oldest.contains(&d.kbid)),
            "{:?}",
            r.near_duplicates
        );
        drop(kb);
        // Loaded again from the store: in the order the sections were stored, not by kbid.
        let kb = Kb::open(tmp.path()).unwrap();
        let r = learn(&kb, 41);
        assert_eq!(r.near_duplicates.len(), near_dup_max());
        assert!(
            r.near_duplicates.iter().all(|d| !oldest.contains(&d.kbid)),
            "{:?}",
            r.near_duplicates
        );
    }

    #[test]
    fn near_duplicates_tied_on_their_bands_are_the_most_recent() {
        let tmp = tempfile::tempdir().unwrap();
        let base = "every copy has these very words and only these words so that all of them \
                    share each band of the signature";
        // The same words, other bytes: every copy shares all 16 bands with every other.
        let text = |i: usize| format!("{base}{}", ".".repeat(i + 1));
        let learn = |kb: &Kb, i: usize| kb.learn(LearnRequest::text(text(i))).unwrap();
        let reported = |r: &LearnResult| {
            let mut k: Vec<String> = r.near_duplicates.iter().map(|d| d.kbid.clone()).collect();
            k.sort();
            k
        };
        let newest = |kbids: &[String]| {
            let mut k = kbids[kbids.len() - near_dup_max()..].to_vec();
            k.sort();
            k
        };
        let kb = Kb::open_or_create(tmp.path()).unwrap().0;
        let mut kbids: Vec<String> = (0..40).map(|i| learn(&kb, i).kbid).collect();
        let r = learn(&kb, 40);
        assert_eq!(reported(&r), newest(&kbids), "the 16 learned last");
        kbids.push(r.kbid);
        drop(kb);
        let kb = Kb::open(tmp.path()).unwrap();
        let r = learn(&kb, 41);
        assert_eq!(
            reported(&r),
            newest(&kbids),
            "also after loading the index again"
        );
        // Within one transaction, those added earlier in it are the newest of all.
        let out = kb
            .learn_many((42..45).map(|i| LearnRequest::text(text(i))).collect())
            .unwrap();
        let last = out[2].as_ref().unwrap();
        for earlier in &out[..2] {
            let kbid = &earlier.as_ref().unwrap().kbid;
            assert!(
                last.near_duplicates.iter().any(|d| &d.kbid == kbid),
                "{kbid} not in {:?}",
                last.near_duplicates
            );
        }
    }

    fn near_dup_max() -> usize {
        index::near_dup::MAX_CANDIDATES
    }

    #[test]
    fn migration_11_drops_the_source_key_table_and_keys_come_from_the_records() {
        let tmp = tempfile::tempdir().unwrap();
        let kb = Kb::open_or_create(tmp.path()).unwrap().0;
        let fact = |content: &str, replace: bool| LearnRequest {
            content: content.into(),
            title: Some("Deploy".into()),
            replace,
            ..Default::default()
        };
        let first = kb.learn(fact("deploy with make all", false)).unwrap().kbid;
        let skill = kb
            .skill_learn(skills::SkillInput {
                name: "greet".into(),
                description: "Say hello".into(),
                arguments: None,
                body: "Hello".into(),
            })
            .unwrap()
            .kbid;
        drop(kb);
        {
            // Schema 10 kept the pairs in a table of their own as well.
            let db = redb::Database::create(tmp.path().join(store::DB_FILE)).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_multimap_table(SOURCE_KEYS)
                .unwrap()
                .insert("#Deploy", first.as_str())
                .unwrap();
            set_schema_version(&txn, 10);
            txn.commit().unwrap();
        }
        let kb = Kb::open(tmp.path()).unwrap();
        assert_eq!(
            kb.status().unwrap().schema_version,
            store::migrate::current_version()
        );
        assert!(
            kb.db()
                .unwrap()
                .begin_read()
                .unwrap()
                .open_multimap_table(SOURCE_KEYS)
                .is_err(),
            "the table is gone"
        );
        // The index is built from the records: the key is still known after the reopen.
        let second = kb.learn(fact("deploy with just all", false)).unwrap();
        assert_eq!(second.warnings, ["source_key_exists"]);
        let check = kb.check().unwrap();
        assert!(check.ok, "{check:?}");
        assert_eq!(
            check
                .warnings
                .iter()
                .map(|f| (f.kind.as_str(), f.entity.as_str()))
                .collect::<Vec<_>>(),
            [("divergent_content", "#Deploy")]
        );
        let third = kb.learn(fact("deploy with cargo xtask", true)).unwrap();
        let mut gone = vec![first.clone(), second.kbid.clone()];
        gone.sort();
        let mut superseded = third.superseded.kbids().to_vec();
        superseded.sort();
        assert_eq!(superseded, gone, "every replaced kbid is given");
        for kbid in &gone {
            assert!(matches!(
                kb.read_sections(&[kbid.as_str()]),
                Err(KbError::NotFound(_))
            ));
        }
        assert!(kb.check().unwrap().ok);
        assert_eq!(
            kb.skills()
                .unwrap()
                .iter()
                .map(|s| &s.kbid)
                .collect::<Vec<_>>(),
            [&skill],
            "skills are listed by their source-key prefix"
        );
    }

    #[test]
    fn a_group_sees_its_own_source_keys_and_the_index_follows_its_commits() {
        let tmp = tempfile::tempdir().unwrap();
        let (kb, _) = Kb::open_or_create(tmp.path().join("kb")).unwrap();
        let fact = |content: &str, replace: bool| LearnRequest {
            content: content.into(),
            title: Some("Deploy".into()),
            replace,
            ..Default::default()
        };
        let out: Vec<LearnResult> = kb
            .learn_many(vec![
                fact("deploy with make all", false),
                fact("deploy with just all", false),
                fact("deploy with cargo xtask", true),
            ])
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert!(out[0].warnings.is_empty(), "{:?}", out[0].warnings);
        assert_eq!(out[1].warnings, ["source_key_exists"]);
        assert!(!out[2].superseded.is_empty());
        assert_eq!(
            rows(&kb)[1],
            1,
            "only the replacing section is left under the key"
        );
        // Unlearned and learned again within one group: the key is free in between.
        let last = out[2].kbid.clone();
        let results = kb
            .write_group(vec![
                WriteOp::Unlearn { kbid: last.clone() },
                WriteOp::Learn(fact("deploy by hand", false)),
            ])
            .unwrap();
        let Ok(WriteOutcome::Learned(by_hand)) = &results[1] else {
            panic!("{results:?}")
        };
        assert!(by_hand.warnings.is_empty(), "{:?}", by_hand.warnings);
        assert_eq!(rows(&kb)[1], 1);
        assert!(kb.check().unwrap().ok);
    }

    #[test]
    fn a_write_that_did_not_load_the_indexes_cannot_look_up_source_keys() {
        let tmp = tempfile::tempdir().unwrap();
        let (kb, _) = Kb::open_or_create(tmp.path().join("kb")).unwrap();
        let txn = kb.begin_write().unwrap();
        let t = WriteTables::open(&txn, now()).unwrap();
        for e in [
            t.source_key_taken("#T", "k").unwrap_err(),
            t.kbids_with_source_key("#T").unwrap_err(),
        ] {
            assert!(
                e.to_string().contains("did not load the in-memory indexes"),
                "{e}"
            );
        }
        drop(t);
        txn.abort().unwrap();
        // A loaded turn answers.
        let turn = kb.loaded_index_turn().unwrap();
        let txn = kb.begin_write().unwrap();
        let mut t = WriteTables::open(&txn, now()).unwrap();
        t.indexes = turn.get();
        assert!(!t.source_key_taken("#T", "k").unwrap());
    }

    #[test]
    fn unlearn_removes_every_row_that_points_at_the_section() {
        let tmp = tempfile::tempdir().unwrap();
        let (kb, created) = Kb::open_or_create(tmp.path().join("kb")).unwrap();
        assert!(created);
        let r = kb
            .learn(LearnRequest {
                content: "a fact with several words in it".into(),
                title: Some("T".into()),
                docid: Some("d".into()),
                tags: vec!["x".into(), "y".into()],
                ..Default::default()
            })
            .unwrap();
        assert_eq!(rows(&kb), [2, 1, 1, 1, 1, 1]);
        let seq = kb.status().unwrap().last_change_seq;
        assert!(kb.unlearn(&r.kbid).unwrap().removed);
        assert_eq!(rows(&kb), [0, 0, 0, 0, 0, 0]);
        assert!(
            kb.status().unwrap().last_change_seq > seq,
            "the change log records the removal"
        );
        let txn = kb.db().unwrap().begin_read().unwrap();
        let tags = txn.open_multimap_table(TAGS).unwrap();
        assert!(tags.get("x").unwrap().next().is_none());
    }

    #[test]
    fn learn_many_is_one_transaction_with_per_item_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let (kb, _) = Kb::open_or_create(tmp.path()).unwrap();
        let out = kb
            .learn_many(vec![
                LearnRequest::text("first"),
                LearnRequest::text(""),
                LearnRequest::text("first"),
            ])
            .unwrap();
        assert!(out[0].is_ok());
        assert_eq!(out[1].as_ref().unwrap_err().field(), Some("content"));
        assert!(
            out[2].as_ref().unwrap().skipped,
            "dedup sees earlier items of the same batch"
        );
        assert_eq!(kb.status().unwrap().sections, 1);
    }

    #[test]
    fn search_accepts_nul_and_control_characters() {
        let tmp = tempfile::tempdir().unwrap();
        let (kb, _) = Kb::open_or_create(tmp.path()).unwrap();
        kb.learn(LearnRequest::text("null terminated strings"))
            .unwrap();
        for q in [
            "\u{0}",
            "null\u{0}terminated",
            "\u{1b}[31m",
            "\u{feff}strings",
        ] {
            let r = kb.search(&SearchRequest::new(q)).unwrap();
            assert!(r.total <= 1, "{q:?}");
        }
        assert_eq!(
            kb.search(&SearchRequest::new("null\u{0}terminated"))
                .unwrap()
                .total,
            1
        );
    }

    #[test]
    fn migrations_3_and_5_rebuild_near_duplicate_bands() {
        let tmp = tempfile::tempdir().unwrap();
        let kb = Kb::open_or_create(tmp.path()).unwrap().0;
        let text = "one two three four five six seven";
        let original = kb.learn(LearnRequest::text(text)).unwrap().kbid;
        drop(kb);
        {
            // Pretend the database predates migration 3 and holds stale band keys (and no
            // signatures table yet).
            let db = redb::Database::create(tmp.path().join(store::DB_FILE)).unwrap();
            let txn = db.begin_write().unwrap();
            content_as_in_schema_9(&txn);
            txn.delete_table(MINHASH_SIGS).unwrap();
            {
                set_schema_version(&txn, 2);
                let mut bands = txn.open_multimap_table(MINHASH_BANDS).unwrap();
                bands.insert(42u64, "stale").unwrap();
            }
            txn.commit().unwrap();
        }
        let kb = Kb::open(tmp.path()).unwrap();
        assert_eq!(
            kb.status().unwrap().schema_version,
            store::migrate::current_version()
        );
        assert_eq!(
            rows(&kb)[2],
            1,
            "band keys in the record of the text section"
        );
        {
            let txn = kb.db().unwrap().begin_read().unwrap();
            assert!(
                txn.open_multimap_table(MINHASH_BANDS).is_err(),
                "migration 5 drops the band rows"
            );
        }
        // Learning a near copy finds the original through the rebuilt bands.
        let r = kb
            .learn(LearnRequest::text(format!("{text} eight")))
            .unwrap();
        assert!(r.near_duplicates.is_empty(), "4/6 shingles shared < 0.85");
        let r = kb.learn(LearnRequest::text(format!("{text} ."))).unwrap();
        assert_eq!(
            r.near_duplicates[0].kbid, original,
            "same words, other bytes: found via the bands"
        );
        assert_eq!(r.near_duplicates[0].similarity, 1.0);
    }

    #[test]
    fn migration_9_moves_band_keys_into_the_section_records() {
        let tmp = tempfile::tempdir().unwrap();
        let kb = Kb::open_or_create(tmp.path()).unwrap().0;
        let base = "the quick brown fox jumps over the lazy dog near the river bank today";
        let text = kb.learn(LearnRequest::text(base)).unwrap().kbid;
        let image = kb
            .learn(LearnRequest {
                section_type: Some("image/png".into()),
                title: Some("pixel".into()),
                ..LearnRequest::text(base64::engine::general_purpose::STANDARD.encode(
                    b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89",
                ))
            })
            .unwrap()
            .kbid;
        let sections: Vec<(String, model::records::SectionRecord)> = {
            let txn = kb.db().unwrap().begin_read().unwrap();
            let t = txn.open_table(SECTIONS).unwrap();
            [&text, &image]
                .iter()
                .map(|k| {
                    let v = t.get(k.as_str()).unwrap().unwrap();
                    let rec = model::records::decode("sections", k, v.value()).unwrap();
                    (k.to_string(), rec)
                })
                .collect()
        };
        let keys = sections[0].1.bands.expect("a text section has band keys");
        assert_eq!(sections[1].1.bands, None, "an image has none");
        drop(kb);
        {
            // Pretend the database predates migration 9: records without band keys, the keys
            // in `minhash_sigs`.
            let db = redb::Database::create(tmp.path().join(store::DB_FILE)).unwrap();
            let txn = db.begin_write().unwrap();
            content_as_in_schema_9(&txn);
            {
                set_schema_version(&txn, 8);
                let mut t = txn.open_table(SECTIONS).unwrap();
                for (kbid, rec) in &sections {
                    let old = model::records::SectionRecordV1 {
                        section_type: rec.section_type.clone(),
                        title: rec.title.clone(),
                        description: rec.description.clone(),
                        tags: rec.tags.clone(),
                        source_key: rec.source_key.clone(),
                        created_at: rec.created_at.clone(),
                        updated_at: rec.updated_at.clone(),
                        checksum: rec.checksum.clone(),
                        size: rec.size,
                        standalone: rec.standalone,
                        terms_count: rec.terms_count,
                    };
                    t.insert(kbid.as_str(), model::records::encode(&old).as_slice())
                        .unwrap();
                }
                let mut sigs = txn.open_table(MINHASH_SIGS).unwrap();
                sigs.insert(
                    text.as_str(),
                    index::near_dup::encode_keys(&keys).as_slice(),
                )
                .unwrap();
            }
            txn.commit().unwrap();
        }
        let kb = Kb::open(tmp.path()).unwrap();
        assert_eq!(
            kb.status().unwrap().schema_version,
            store::migrate::current_version()
        );
        {
            let txn = kb.db().unwrap().begin_read().unwrap();
            assert!(txn.open_table(MINHASH_SIGS).is_err(), "the table is gone");
            let t = txn.open_table(SECTIONS).unwrap();
            for (kbid, rec) in &sections {
                let v = t.get(kbid.as_str()).unwrap().unwrap();
                let mut now: model::records::SectionRecord =
                    model::records::decode("sections", kbid, v.value()).unwrap();
                assert_ne!(now.content_seq, 0, "content renumbered by migration 10");
                now.content_seq = rec.content_seq;
                assert_eq!(&now, rec, "every field kept, band keys moved in");
            }
        }
        assert!(kb.check().unwrap().ok);
        let r = kb.learn(LearnRequest::text(format!("{base}!"))).unwrap();
        assert_eq!(
            r.near_duplicates[0].kbid, text,
            "found through the moved keys"
        );
        kb.unlearn(&text).unwrap();
        let r = kb.learn(LearnRequest::text(format!("{base}?"))).unwrap();
        assert!(r.near_duplicates.iter().all(|n| n.kbid != text));
    }

    #[test]
    fn migration_4_builds_the_reference_graph_of_existing_sections() {
        let tmp = tempfile::tempdir().unwrap();
        let kb = Kb::open_or_create(tmp.path()).unwrap().0;
        let target = kb
            .learn(LearnRequest::text("# Target\n\nthe target"))
            .unwrap();
        let source = kb
            .learn(LearnRequest {
                docid: Some("notes/one".into()),
                ..LearnRequest::text(format!(
                    "# Source\n\nsee kbdb://section/{} and [two](two.md)",
                    target.kbid
                ))
            })
            .unwrap();
        drop(kb);
        {
            // Pretend the database predates migration 4: no reference tables.
            let db = redb::Database::create(tmp.path().join(store::DB_FILE)).unwrap();
            let txn = db.begin_write().unwrap();
            content_as_in_schema_9(&txn);
            {
                set_schema_version(&txn, 3);
            }
            txn.delete_table(store::tables::REFS_OUT).unwrap();
            txn.delete_multimap_table(store::tables::REFS_IN).unwrap();
            txn.commit().unwrap();
        }
        let kb = Kb::open(tmp.path()).unwrap();
        let req = RecallRequest::new(Some(source.kbid.clone()), None, Some(2), None).unwrap();
        let Recalled::One(item) = kb.recall(&req).unwrap() else {
            panic!("one kbid gives one object")
        };
        let targets: Vec<_> = item
            .references
            .unwrap()
            .into_iter()
            .map(|r| (r.target.unwrap(), r.resolved.unwrap()))
            .collect();
        assert_eq!(
            targets,
            vec![
                (format!("kbdb://section/{}", target.kbid), true),
                ("kbdb://document/notes/two".to_string(), false),
            ],
            "relative links resolve against the section's document"
        );
        let req = RecallRequest::new(Some(target.kbid), None, Some(1), None).unwrap();
        let Recalled::One(item) = kb.recall(&req).unwrap() else {
            panic!()
        };
        assert_eq!(item.back_references.unwrap()[0].kbid, Some(source.kbid));
    }

    #[test]
    fn near_duplicates_are_found_within_one_batch_and_across_batches() {
        let tmp = tempfile::tempdir().unwrap();
        let (kb, _) = Kb::open_or_create(tmp.path()).unwrap();
        let base = "the quick brown fox jumps over the lazy dog near the river bank today";
        let r = kb
            .learn_many(vec![
                LearnRequest::text(base),
                LearnRequest::text(format!("{base}!")),
            ])
            .unwrap();
        let first = r[0].as_ref().unwrap().kbid.clone();
        let second = r[1].as_ref().unwrap();
        assert_eq!(second.near_duplicates[0].kbid, first, "same batch");
        // A later batch sees both through the in-memory band index, and after a reopen.
        drop(kb);
        let kb = Kb::open(tmp.path()).unwrap();
        let r = kb.learn(LearnRequest::text(format!("{base}?"))).unwrap();
        assert_eq!(r.near_duplicates.len(), 2);
        kb.unlearn(&first).unwrap();
        let r = kb.learn(LearnRequest::text(format!("{base}."))).unwrap();
        assert!(
            r.near_duplicates.iter().all(|n| n.kbid != first),
            "an unlearned section is no longer a candidate"
        );
        // The shingle cache knows `second` by now; unlearned earlier in the same batch, it is no
        // candidate either.
        let second = second.kbid.clone();
        let out = kb
            .write_group(vec![
                WriteOp::Unlearn {
                    kbid: second.clone(),
                },
                WriteOp::Learn(LearnRequest::text(format!("{base};"))),
            ])
            .unwrap();
        let Ok(WriteOutcome::Learned(r)) = &out[1] else {
            panic!("{:?}", out[1].as_ref().err())
        };
        assert!(
            !r.near_duplicates.is_empty(),
            "the `?` and `.` versions remain"
        );
        assert!(r.near_duplicates.iter().all(|n| n.kbid != second));
    }

    /// Commit one prepared learn by itself and return its result.
    fn apply_learn(kb: &Kb, w: PreparedWrite) -> LearnResult {
        match kb.write_prepared_unindexed(vec![Ok(w)]).unwrap().remove(0) {
            Ok(WriteOutcome::Learned(r)) => r,
            other => panic!("not a learned section: {:?}", other.err()),
        }
    }

    /// Learning stored content again reports no near duplicates, so the scan before the
    /// transaction is skipped; unlearned before it is applied, the content is learned anew and
    /// the writer looks for its near duplicates itself.
    #[test]
    fn learning_stored_content_again_is_not_scanned_but_learned_anew_is() {
        let tmp = tempfile::tempdir().unwrap();
        let (kb, _) = Kb::open_or_create(tmp.path()).unwrap();
        let base = "the quick brown fox jumps over the lazy dog near the river bank today";
        let near = kb
            .learn(LearnRequest::text(format!("{base}!")))
            .unwrap()
            .kbid;
        let first = kb.learn(LearnRequest::text(base)).unwrap();
        assert_eq!(first.near_duplicates.len(), 1);
        let prepare = || {
            kb.prepare_write(WriteOp::Learn(LearnRequest::text(base)))
                .unwrap()
        };
        let scanned = |w: &PreparedWrite| match &w.0 {
            writes::PreparedOp::Learn(p) => p.scanned(),
            _ => panic!("a learn"),
        };
        let again = prepare();
        assert_eq!(scanned(&again), None, "stored content is not scanned");
        let r = &apply_learn(&kb, again);
        assert_eq!(r.kbid, first.kbid);
        assert!(r.near_duplicates.is_empty());

        let again = prepare();
        kb.unlearn(&first.kbid).unwrap();
        let r = &apply_learn(&kb, again);
        let found: Vec<&str> = r.near_duplicates.iter().map(|n| n.kbid.as_str()).collect();
        assert_eq!(found, [near.as_str()], "found by the writer");
    }

    /// The daemon looks for near duplicates on the client's thread before the write is queued;
    /// what the writer commits in between (or what this transaction unlearns) must still count.
    #[test]
    fn a_scan_made_before_the_transaction_is_completed_with_what_was_committed_since() {
        let tmp = tempfile::tempdir().unwrap();
        let (kb, _) = Kb::open_or_create(tmp.path()).unwrap();
        let base = "the quick brown fox jumps over the lazy dog near the river bank today";
        let old = kb.learn(LearnRequest::text(base)).unwrap().kbid;
        let learn = |text: String| WriteOp::Learn(LearnRequest::text(text));
        let kbids = |r: &LearnResult| -> Vec<String> {
            r.near_duplicates.iter().map(|n| n.kbid.clone()).collect()
        };

        // Prepared (scanned) first; a near duplicate is committed before it is applied.
        let waiting = kb.prepare_write(learn(format!("{base}!"))).unwrap();
        let writes::PreparedOp::Learn(p) = &waiting.0 else {
            panic!("a learn")
        };
        assert_eq!(
            p.scanned(),
            Some(vec![old.clone()]),
            "scanned when prepared"
        );
        let between = kb.learn(LearnRequest::text(format!("{base}?"))).unwrap();
        assert_eq!(kbids(&between), std::slice::from_ref(&old));
        let r = &apply_learn(&kb, waiting);
        let mut found = kbids(r);
        found.sort();
        let mut want = vec![old.clone(), between.kbid.clone()];
        want.sort();
        assert_eq!(
            found, want,
            "the scan's find and the section committed since"
        );

        // Found by the scan, then unlearned (committed, or earlier in the same transaction).
        let waiting = kb.prepare_write(learn(format!("{base}."))).unwrap();
        kb.unlearn(&old).unwrap();
        let r = &apply_learn(&kb, waiting);
        assert!(!kbids(r).contains(&old), "{:?}", kbids(r));
        assert!(kbids(r).contains(&between.kbid));
        let waiting = kb.prepare_write(learn(format!("{base};"))).unwrap();
        let unlearn = kb
            .prepare_write(WriteOp::Unlearn {
                kbid: between.kbid.clone(),
            })
            .unwrap();
        let out = kb
            .write_prepared_unindexed(vec![Ok(unlearn), Ok(waiting)])
            .unwrap();
        let Ok(WriteOutcome::Learned(r)) = &out[1] else {
            panic!("{:?}", out[1].as_ref().err())
        };
        assert!(!kbids(r).contains(&between.kbid), "{:?}", kbids(r));
        assert!(!kbids(r).is_empty(), "the `!` and `.` versions remain");

        // More sections committed in between than the band index remembers (64 in unit
        // tests): the writer looks again itself and still finds the one among them.
        let waiting = kb.prepare_write(learn(format!("{base} ok"))).unwrap();
        let mut many: Vec<LearnRequest> = (0..80)
            .map(|i| LearnRequest::text(format!("unrelated note {i} on subject {}", i * 7919)))
            .collect();
        many.push(LearnRequest::text(format!("{base} fine")));
        let last = kb.learn_many(many).unwrap().pop().unwrap().unwrap().kbid;
        let r = &apply_learn(&kb, waiting);
        assert!(kbids(r).contains(&last), "{:?}", kbids(r));
    }

    /// Writes handed over while a group is applied join its transaction, in order, up to the
    /// batch limit; failed preparations answer for themselves.
    #[test]
    fn writes_join_the_group_being_applied_up_to_the_batch_limit() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join(crate::config::CONFIG_FILE),
            "[limits]\nmax_batch = 4\n",
        )
        .unwrap();
        let (kb, _) = Kb::open_or_create(tmp.path()).unwrap();
        let prep = |text: &str| kb.prepare_write(WriteOp::Learn(LearnRequest::text(text)));
        let seq_before = kb.last_change_seq().unwrap();
        let mut offered = vec![
            vec![prep("second note about tea"), prep("")],
            vec![prep("third note about coffee")],
        ]
        .into_iter();
        let mut rooms = Vec::new();
        let out = kb
            .write_prepared_joining(vec![prep("first note about water")], |room| {
                rooms.push(room);
                offered.next()
            })
            .unwrap();
        // Asked after each batch, with the room left; the full group stops asking.
        assert_eq!(rooms, vec![3, 1]);
        let kinds: Vec<_> = out
            .iter()
            .map(|r| match r {
                Ok(WriteOutcome::Learned(l)) => {
                    kb.content(std::slice::from_ref(&l.kbid)).unwrap().data
                }
                Ok(_) => "other".to_string(),
                Err(e) => format!("error on {}", e.field().unwrap_or("?")),
            })
            .collect();
        assert_eq!(
            kinds,
            vec![
                "first note about water",
                "second note about tea",
                "error on content",
                "third note about coffee"
            ]
        );
        // One transaction: the three sections carry its timestamp and were logged together.
        let stamps: Vec<_> = out
            .iter()
            .flatten()
            .map(|r| match r {
                WriteOutcome::Learned(l) => l.created_at.clone(),
                _ => unreachable!("learned above"),
            })
            .collect();
        assert!(stamps.windows(2).all(|w| w[0] == w[1]), "{stamps:?}");
        assert_eq!(kb.changes_since(seq_before).unwrap().len(), 3);

        // A group that starts with failed preparations only still takes the writes that join.
        let mut offered = Some(vec![prep("fourth note about juice")]);
        let out = kb
            .write_prepared_joining(vec![prep("")], |_| offered.take())
            .unwrap();
        assert!(out[0].is_err(), "{:?}", out[0]);
        let Ok(WriteOutcome::Learned(l)) = &out[1] else {
            panic!("{:?}", out[1].as_ref().err())
        };
        assert_eq!(out.len(), 2);
        assert!(
            kb.content(std::slice::from_ref(&l.kbid))
                .unwrap()
                .data
                .contains("juice")
        );
    }

    #[test]
    fn search_rejects_an_unknown_mode_naming_the_field() {
        let tmp = tempfile::tempdir().unwrap();
        let (kb, _) = Kb::open_or_create(tmp.path()).unwrap();
        let mut req = SearchRequest::new("x");
        req.mode = Some("bogus".into());
        assert_eq!(kb.search(&req).unwrap_err().field(), Some("mode"));
        req.mode = Some("documents".into());
        req.limit = Some(0);
        assert_eq!(kb.search(&req).unwrap_err().field(), Some("limit"));
    }
}
