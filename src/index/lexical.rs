//! The lexical index: tantivy, derived from the store and replayable.
//!
//! The store's change sequence is the clock. Each tantivy commit carries, as its payload, the
//! last change sequence it contains; on open the index replays the change log after that point
//! (or rebuilds from the store when the index is missing, unreadable or ahead of the store). So
//! a crash between a store commit and an index commit never loses an acknowledged write.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable};
use tantivy::schema::{
    FAST, Field, IndexRecordOption, NumericOptions, STORED, STRING, Schema, TextFieldIndexing,
    TextOptions,
};
use tantivy::{
    Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, TantivyDocument, Term, doc,
    indexer::UserOperation,
};

use super::analyzer::{ANALYZER, analyzer};
use crate::error::{KbError, Result};
use crate::store::faults::{FaultPlan, FaultyDirectory};
use crate::store::tables::{CHANGES, CONTENT, SECTIONS};
use crate::types::records::{ChangeKind, ChangeRecord, SectionRecord, decode};

/// Folder of the index inside the database folder.
pub const INDEX_DIR: &str = "index/lexical";
/// The commit payload: the text analysis the index was built with, then the last change it
/// holds. An index of another analysis (`kbdb-lexical-v1 seq=N` before analysis 2) is rebuilt
/// at open, so an upgraded kbdb finds `cafe` in `café` in an existing database too.
const PAYLOAD_PREFIX: &str = concat!("kbdb-lexical-v1 analysis=", "2", " seq=");
/// The payload of a commit made part-way through a rebuild (to bound what the writer holds): an
/// index that carries it is rebuilt, never replayed onto.
const REBUILDING_PAYLOAD: &str = "kbdb-lexical-v1 rebuilding";
const _: () = assert!(
    super::analyzer::ANALYSIS_VERSION == 2,
    "update PAYLOAD_PREFIX"
);
/// Memory budget of the index writer. Its arena is held for as long as the writer lives, so it
/// is a floor of every writing process's memory: 128 MiB over two threads made it the largest
/// part of a bulk load's peak; one thread with 32 MiB keeps up with the store's one writer (the
/// writer thread, not indexing, bounds a bulk load) and took the 100k ingest from 382 to 269 MB
/// with the redb cache at 32 MiB, no slower (docs/performance.md, *Memory*).
const WRITER_MEMORY: usize = 32 * 1024 * 1024;
/// Indexing threads of the index writer.
const WRITER_THREADS: usize = 1;
/// Sections handed to the index writer in one message at most (bounds what a replay of many
/// changes holds in memory at once): a rebuild sends one add per section, a catch-up a delete
/// and, unless the section was removed, an add — at most `2 * BATCH` operations.
const BATCH: usize = 256;
/// A catch-up reads at most this many change rows at a time, and commits between two such
/// steps once the operations handed to the writer since the last commit hold
/// `MAX_UNCOMMITTED_BYTES`. The writer queues the documents it is given (up to 10,000
/// messages) until its one indexing thread takes them, and keeps every delete (with a 1 KiB
/// scoring cache) until the next commit: during a bulk load, whose store writer runs ahead of
/// the index, these held ~250 MB at 300k sections. A commit waits for the queue to drain. It
/// commits only between steps, where `applied_seq` names exactly what the writer holds.
/// (Smaller in unit tests, so that their few sections cross both.)
const CHANGES_PER_STEP: usize = if cfg!(test) { 128 } else { 4096 };
const MAX_UNCOMMITTED_BYTES: usize = if cfg!(test) {
    16 * 1024
} else {
    8 * 1024 * 1024
};
/// What tantivy keeps per delete until the next commit (its term query's BM25 weight).
const DELETE_BYTES: usize = 1024;

#[derive(Clone, Copy)]
pub struct Fields {
    pub kbid: Field,
    /// A hash of the kbid, the deterministic tie-breaker of equal scores.
    pub kbid_key: Field,
    pub heading: Field,
    pub body: Field,
    pub code: Field,
    pub description: Field,
    pub tags_text: Field,
    pub tags: Field,
    pub section_type: Field,
    pub created_at: Field,
}

/// Per-field boosts of BM25F-style scoring (the heading counts double).
pub const BOOST_HEADING: f32 = 2.0;
pub const BOOST_BODY: f32 = 1.0;
pub const BOOST_CODE: f32 = 1.0;
pub const BOOST_DESCRIPTION: f32 = 1.0;
pub const BOOST_TAGS: f32 = 1.5;

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(ANALYZER)
            .set_index_option(IndexRecordOption::WithFreqsAndPositions),
    );
    let fields = Fields {
        kbid: b.add_text_field("kbid", STRING | STORED),
        kbid_key: b.add_u64_field(KBID_KEY_FIELD, FAST),
        heading: b.add_text_field("heading", text.clone()),
        body: b.add_text_field("body", text.clone()),
        code: b.add_text_field("code", text.clone()),
        description: b.add_text_field("description", text.clone()),
        tags_text: b.add_text_field("tags_text", text),
        tags: b.add_text_field("tags", STRING),
        section_type: b.add_text_field("type", STRING),
        created_at: b.add_i64_field(
            "created_at",
            NumericOptions::default().set_fast().set_indexed(),
        ),
    };
    (b.build(), fields)
}

pub struct LexicalIndex {
    path: PathBuf,
    index: Index,
    writer: IndexWriter,
    reader: IndexReader,
    pub fields: Fields,
    /// Last change sequence applied to the writer.
    applied_seq: u64,
    /// Changes applied but not yet committed.
    dirty: bool,
    /// What the operations handed to the writer since the last commit hold in memory until
    /// then, roughly: their section text, and 1 KiB per delete (see `MAX_UNCOMMITTED_BYTES`).
    uncommitted_bytes: usize,
    /// The writer lost its directory lock in a failed rollback: make a new one.
    writer_lost: bool,
    /// The last commit is part of a rebuild that did not finish: the next catch-up rebuilds,
    /// and nothing commits before it.
    rebuild_pending: bool,
    /// Sections indexed ahead of `applied_seq`, with the last change of the snapshot they were
    /// read from: a catch-up step reads at most `CHANGES_PER_STEP` change rows but the sections
    /// from the newest snapshot, so a section changed again past the step's last row is indexed
    /// as it stands then. Until `applied_seq` reaches that change, a step touching the section
    /// deletes it before adding it, even when its first change there is its addition (a
    /// section removed before the cut and learned again after it was indexed twice).
    ahead: foldhash::HashMap<String, u64>,
    /// Up to this change, every section a step touches is deleted before it is added: what
    /// `ahead` held is lost with the process, and the commit the index was opened on may hold
    /// sections indexed ahead of its `applied_seq`. Set by the first step after opening to the
    /// store's last change.
    delete_all_until: u64,
    /// No step has run since the index was opened.
    just_opened: bool,
}

/// The first entry of the index folder that is not a regular file (a FIFO, a link, a folder,
/// a device), by its type as listed: nothing is opened or followed.
fn first_not_regular(dir: &Path) -> Result<Option<std::path::PathBuf>> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| KbError::io(format!("cannot list {}", dir.display()), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| KbError::io(format!("cannot list {}", dir.display()), e))?;
        let regular = entry.file_type().is_ok_and(|t| t.is_file());
        if !regular {
            return Ok(Some(entry.path()));
        }
    }
    Ok(None)
}

fn tantivy_err(context: &str, e: impl std::fmt::Display) -> KbError {
    KbError::Storage(format!("lexical index: {context}: {e}"))
}

fn commit_err(e: tantivy::TantivyError) -> KbError {
    io_err("commit", e)
}

/// A failed `context`, naming the I/O failure plainly when there is one (the disk is full…).
fn io_err(context: &str, e: tantivy::TantivyError) -> KbError {
    use tantivy::TantivyError as T;
    use tantivy::directory::error::OpenWriteError;
    let io = match &e {
        T::IoError(io) | T::OpenWriteError(OpenWriteError::IoError { io_error: io, .. }) => io,
        _ => return tantivy_err(context, e),
    };
    let what = if crate::error::is_disk_full(io) {
        "the disk is full"
    } else {
        "I/O error"
    };
    tantivy_err(context, format!("{what}: {io}"))
}

impl LexicalIndex {
    /// Open the index of the database in `db_dir`, rebuilding it when missing or unreadable, and
    /// replay the store's change log after its last commit.
    pub fn open(db_dir: &Path, db: &Database) -> Result<LexicalIndex> {
        Self::open_with(db_dir, db, None)
    }

    /// `open`, with the I/O of a test's fault plan (docs/io-faults.md).
    pub fn open_with(
        db_dir: &Path,
        db: &Database,
        plan: Option<&FaultPlan>,
    ) -> Result<LexicalIndex> {
        let path = db_dir.join(INDEX_DIR);
        let store_seq = last_seq(db)?;
        let mut idx = match Self::open_existing(&path, plan) {
            Ok(Some((idx, seq))) if seq <= store_seq => {
                let mut idx = idx;
                idx.applied_seq = seq;
                idx
            }
            Ok(found) => {
                if found.is_some() {
                    tracing::warn!("lexical index is ahead of the store; rebuilding it");
                }
                drop(found);
                Self::rebuild_at(&path, db, plan)?
            }
            Err(e) => {
                tracing::warn!("lexical index unreadable ({e}); rebuilding it from the store");
                Self::rebuild_at(&path, db, plan)?
            }
        };
        // Catching up is not needed to open: searches catch up by themselves. On a full disk
        // it fails, and must neither refuse the open nor leave the segments it wrote.
        if let Err(e) = idx.catch_up(db).and_then(|()| idx.commit()) {
            tracing::warn!("the lexical index cannot catch up now ({e}); searches catch up later");
            idx.roll_back();
        }
        Ok(idx)
    }

    /// Ok(None) when there is no index yet.
    fn open_existing(path: &Path, plan: Option<&FaultPlan>) -> Result<Option<(LexicalIndex, u64)>> {
        if !path.join("meta.json").exists() {
            return Ok(None);
        }
        // tantivy writes regular files only; it would wait forever on a FIFO (opening one to
        // read waits for a writer). Anything else there makes the index unreadable: rebuilt.
        if let Some(odd) = first_not_regular(path)? {
            return Err(KbError::Storage(format!(
                "{} is not a regular file",
                odd.display()
            )));
        }
        let index = match plan {
            None => Index::open_in_dir(path),
            Some(plan) => FaultyDirectory::open(path, plan.clone()).and_then(Index::open),
        }
        .map_err(|e| tantivy_err("open", e))?;
        let (expected, _) = schema();
        let metas = index
            .load_metas()
            .map_err(|e| tantivy_err("read metas", e))?;
        let payload = metas.payload.as_deref();
        // An index of ours (by its payload) that this kbdb would not build as it is: rebuilt.
        let ours = payload.is_some_and(|p| p.starts_with("kbdb-lexical-v1 "));
        if index.schema() != expected {
            if ours {
                // The fields of an earlier kbdb (a `docids` field before the document filters
                // read the store).
                tracing::info!("the lexical index has the fields of an earlier kbdb");
                return Ok(None);
            }
            return Err(tantivy_err("open", "schema differs from this kbdb's"));
        }
        let seq = payload
            .and_then(|p| p.strip_prefix(PAYLOAD_PREFIX))
            .and_then(|s| s.parse::<u64>().ok());
        let Some(seq) = seq else {
            if payload == Some(REBUILDING_PAYLOAD) {
                tracing::info!("the last rebuild of the lexical index did not finish");
                return Ok(None);
            }
            if ours {
                tracing::info!("the lexical index was built with an older text analysis");
                return Ok(None);
            }
            return Err(tantivy_err("open", "commit payload missing or not kbdb's"));
        };
        Ok(Some((Self::with_index(path.to_path_buf(), index)?, seq)))
    }

    fn with_index(path: PathBuf, index: Index) -> Result<LexicalIndex> {
        index.tokenizers().register(ANALYZER, analyzer());
        let (_, fields) = schema();
        let writer = new_writer(&index)?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(|e| tantivy_err("open reader", e))?;
        Ok(LexicalIndex {
            path,
            index,
            writer,
            reader,
            fields,
            applied_seq: 0,
            dirty: false,
            uncommitted_bytes: 0,
            writer_lost: false,
            rebuild_pending: false,
            ahead: Default::default(),
            delete_all_until: 0,
            just_opened: true,
        })
    }

    /// Whether the index's folder is gone (its `meta.json` surely absent, not merely unreadable;
    /// tantivy replaces it by a rename, so it never is while the folder is there).
    pub fn folder_missing(&self) -> bool {
        matches!(self.path.join("meta.json").try_exists(), Ok(false))
    }

    /// Delete the index folder and index every section of the store.
    fn rebuild_at(path: &Path, db: &Database, plan: Option<&FaultPlan>) -> Result<LexicalIndex> {
        // `remove_dir_all` removes links and FIFOs without following or opening them.
        if path.exists() {
            std::fs::remove_dir_all(path)
                .map_err(|e| KbError::io(format!("cannot remove {}", path.display()), e))?;
        }
        std::fs::create_dir_all(path)
            .map_err(|e| KbError::io(format!("cannot create {}", path.display()), e))?;
        let (schema, _) = schema();
        let index = match plan {
            None => Index::create_in_dir(path, schema),
            Some(plan) => FaultyDirectory::open(path, plan.clone())
                .and_then(|d| Index::create(d, schema, Default::default())),
        }
        .map_err(|e| tantivy_err("create", e))?;
        let mut idx = Self::with_index(path.to_path_buf(), index)?;
        idx.reindex_all(db, &|_, _| {})?;
        Ok(idx)
    }

    /// Rebuild in place from the store (the `rebuild` operation). Returns (sections indexed,
    /// the sum of their distinct-term counts).
    pub fn rebuild(&mut self, db: &Database, progress: &dyn Fn(u64, u64)) -> Result<(u64, u64)> {
        // tantivy's delete-all drops the committed segments but not the operations still in the
        // writer's pipeline (documents fed by `catch_up`, not yet committed): they would come
        // back at the next commit as second copies. Discard them first; the reindex covers them.
        self.roll_back();
        if self.writer_lost {
            self.writer = new_writer(&self.index)?;
            self.writer_lost = false;
        }
        self.writer
            .delete_all_documents()
            .map_err(|e| tantivy_err("clear", e))?;
        let reindexed = self.reindex_all(db, progress).and_then(|n| {
            self.rebuild_pending = false;
            self.commit()?;
            Ok(n)
        });
        if reindexed.is_err() {
            // Leave the writer as the last commit left it, so a later commit cannot publish a
            // half-cleared index.
            self.roll_back();
        }
        reindexed
    }

    fn reindex_all(&mut self, db: &Database, progress: &dyn Fn(u64, u64)) -> Result<(u64, u64)> {
        let txn = db.begin_read()?;
        let sections = txn.open_table(SECTIONS)?;
        let content = txn.open_table(CONTENT)?;
        let changes = txn.open_table(CHANGES)?;
        let total = redb::ReadableTableMetadata::len(&sections)?;
        let mut n = 0;
        let mut terms = 0;
        let mut ops = Vec::with_capacity(BATCH);
        for row in sections.iter()? {
            let (k, v) = row?;
            let kbid = k.value();
            let rec: SectionRecord = decode("sections", kbid, v.value())?;
            let bytes =
                crate::store::txn::record_content_unverified(&content, &rec)?.unwrap_or_default();
            self.uncommitted_bytes += bytes.len();
            ops.push(UserOperation::Add(self.document(kbid, &rec, &bytes)));
            if ops.len() == BATCH {
                self.send(std::mem::take(&mut ops))?;
                if self.uncommitted_bytes >= MAX_UNCOMMITTED_BYTES {
                    self.commit_part_of_rebuild()?;
                }
            }
            n += 1;
            terms += rec.terms_count;
            if n % 1024 == 0 {
                progress(n, total);
            }
        }
        self.send(ops)?;
        progress(n, total);
        self.applied_seq = changes.last()?.map(|(k, _)| k.value()).unwrap_or(0);
        self.dirty = true;
        Ok((n, terms))
    }

    /// Commit what a rebuild handed the writer so far, under a payload that makes the index be
    /// rebuilt if this rebuild does not finish: the writer's queue and deletes stay bounded
    /// (`MAX_UNCOMMITTED_BYTES`) however large the store.
    fn commit_part_of_rebuild(&mut self) -> Result<()> {
        self.commit_with_payload(REBUILDING_PAYLOAD)?;
        self.uncommitted_bytes = 0;
        Ok(())
    }

    /// Apply every change after the last applied sequence (read-only on the store).
    pub fn catch_up(&mut self, db: &Database) -> Result<()> {
        if self.rebuild_pending {
            self.rebuild(db, &|_, _| {})?;
        }
        // A writer that stopped on an I/O error was rolled back by `add`: replay from the last
        // commit with the new writer, once.
        self.apply_changes(db).or_else(|_| self.apply_changes(db))
    }

    fn apply_changes(&mut self, db: &Database) -> Result<()> {
        loop {
            // A step that fails part-way may have handed the writer some of its sections
            // without `applied_seq` saying so; replayed, those with no delete would be indexed
            // twice. Go back to the last commit, which `applied_seq` then names.
            let done = self
                .apply_some_changes(db)
                .inspect_err(|_| self.roll_back())?;
            if self.uncommitted_bytes >= MAX_UNCOMMITTED_BYTES {
                self.commit()?;
            }
            if done {
                return Ok(());
            }
        }
    }

    /// Apply up to `CHANGES_PER_STEP` changes after the last applied one; true when none is
    /// left.
    fn apply_some_changes(&mut self, db: &Database) -> Result<bool> {
        let txn = db.begin_read()?;
        let changes = txn.open_table(CHANGES)?;
        let newest = changes.last()?.map_or(0, |(k, _)| k.value());
        if std::mem::take(&mut self.just_opened) {
            self.delete_all_until = newest;
        }
        let applied = self.applied_seq;
        self.ahead.retain(|_, until| *until > applied);
        // Each touched section, and whether the index may hold it: not when its first change
        // since the last applied one is its addition (the index holds the changes up to
        // `applied_seq`, and a section is added only when the store had no record of it),
        // unless it was indexed ahead (`ahead`, `delete_all_until`). A bulk load then sends no
        // deletes, each of which tantivy keeps (with a 1 KiB scoring cache) until the next
        // commit and looks up in every segment.
        let mut touched = BTreeMap::new();
        let mut last = self.applied_seq;
        let mut rows = 0;
        for row in changes.range(self.applied_seq + 1..)? {
            if rows == CHANGES_PER_STEP {
                break;
            }
            rows += 1;
            let (k, v) = row?;
            let seq = k.value();
            let c: ChangeRecord = decode("changes", &seq.to_string(), v.value())?;
            if matches!(
                c.kind,
                ChangeKind::SectionAdded | ChangeKind::SectionChanged | ChangeKind::SectionRemoved
            ) {
                let maybe_indexed =
                    c.kind != ChangeKind::SectionAdded || seq <= self.delete_all_until;
                touched.entry(c.id).or_insert(maybe_indexed);
            }
            last = seq;
        }
        if last == self.applied_seq {
            return Ok(true);
        }
        let sections = txn.open_table(SECTIONS)?;
        let content = txn.open_table(CONTENT)?;
        let mut ops = Vec::with_capacity(touched.len().min(BATCH) * 2);
        let mut sections_in_ops = 0;
        // Cut short with changes left in the snapshot: what it holds of a section may be
        // newer than the step's last row.
        let read_ahead = rows == CHANGES_PER_STEP && newest > last;
        let mut indexed_ahead = Vec::new();
        for (kbid, &maybe_indexed) in &touched {
            if maybe_indexed || self.ahead.contains_key(kbid) {
                self.uncommitted_bytes += DELETE_BYTES;
                ops.push(UserOperation::Delete(Term::from_field_text(
                    self.fields.kbid,
                    kbid,
                )));
            }
            if let Some(v) = sections.get(kbid.as_str())? {
                let rec: SectionRecord = decode("sections", kbid, v.value())?;
                let bytes = crate::store::txn::record_content_unverified(&content, &rec)?
                    .unwrap_or_default();
                self.uncommitted_bytes += bytes.len();
                ops.push(UserOperation::Add(self.document(kbid, &rec, &bytes)));
                if read_ahead {
                    indexed_ahead.push(kbid);
                }
            }
            sections_in_ops += 1;
            if sections_in_ops == BATCH {
                self.send(std::mem::take(&mut ops))?;
                sections_in_ops = 0;
            }
        }
        self.send(ops)?;
        for kbid in indexed_ahead {
            self.ahead.insert(kbid.clone(), newest);
        }
        self.applied_seq = last;
        self.dirty = true;
        Ok(rows < CHANGES_PER_STEP)
    }

    /// The index document of a section.
    fn document(&self, kbid: &str, rec: &SectionRecord, bytes: &[u8]) -> TantivyDocument {
        let f = self.fields;
        let created = chrono::DateTime::parse_from_rfc3339(&rec.created_at)
            .map(|d| d.timestamp_millis())
            .unwrap_or(0);
        let mut d: TantivyDocument = doc!(
            f.kbid => kbid,
            f.kbid_key => kbid_key(kbid),
            f.section_type => rec.section_type.as_str(),
            f.created_at => created,
        );
        if let Some(t) = &rec.title {
            d.add_text(f.heading, t);
        }
        if let Some(t) = &rec.description {
            d.add_text(f.description, t);
        }
        for t in &rec.tags {
            d.add_text(f.tags, t);
            d.add_text(f.tags_text, t);
        }
        if !rec.section_type.starts_with("image/") {
            let text = String::from_utf8_lossy(bytes);
            // The heading line is indexed once, in `heading`, not again in `body`.
            let text = strip_heading_line(&text, rec.title.as_deref());
            let (body, code) = split_body_and_code(&rec.section_type, text);
            if !body.is_empty() {
                d.add_text(f.body, &body);
            }
            if !code.is_empty() {
                d.add_text(f.code, &code);
            }
        }
        d
    }

    /// Hand operations to the index writer as one batch: one message to its indexing threads
    /// (a message per document woke them, and they spun waiting for the next, for every
    /// section).
    fn send(&mut self, ops: Vec<UserOperation<TantivyDocument>>) -> Result<()> {
        if let Err(e) = self.writer.run(ops) {
            // The writer stopped: a worker failed to write a segment (an I/O error). Its error
            // comes out of the join in `prepare_commit`; then go back to the last commit.
            let err = match self.writer.prepare_commit() {
                Err(cause) => io_err("add", cause),
                Ok(_) => tantivy_err("add", e),
            };
            self.roll_back();
            return Err(err);
        }
        Ok(())
    }

    /// Commit pending changes (with the applied sequence as payload) and reload the reader.
    pub fn commit(&mut self) -> Result<()> {
        if !self.dirty {
            return Ok(());
        }
        if let Err(e) = self.try_commit() {
            self.roll_back();
            return Err(e);
        }
        self.reader.reload().map_err(|e| tantivy_err("reload", e))?;
        self.dirty = false;
        self.uncommitted_bytes = 0;
        Ok(())
    }

    fn try_commit(&mut self) -> Result<()> {
        if self.rebuild_pending {
            return Err(tantivy_err(
                "commit",
                "a rebuild did not finish; the next catch-up rebuilds the index",
            ));
        }
        if self.writer_lost {
            self.writer = new_writer(&self.index)?;
            self.writer_lost = false;
        }
        self.commit_with_payload(&format!("{PAYLOAD_PREFIX}{}", self.applied_seq))
    }

    fn commit_with_payload(&mut self, payload: &str) -> Result<()> {
        let mut prepared = self.writer.prepare_commit().map_err(commit_err)?;
        prepared.set_payload(payload);
        prepared.commit().map_err(commit_err)?;
        Ok(())
    }

    /// After a failed commit (an I/O error: the disk is full…) the writer has lost the changes
    /// applied since the last commit (a worker that failed drops its segment) and refuses new
    /// ones. Go back to the last commit and replay the change log from its sequence, so a later
    /// commit never records a sequence whose changes it does not hold (docs/io-faults.md).
    fn roll_back(&mut self) {
        if !self.writer_lost
            && let Err(e) = self.writer.rollback()
        {
            tracing::warn!("lexical index rollback failed: {e}");
            // The failed rollback released the writer's lock: a new writer takes it.
            match new_writer(&self.index) {
                Ok(w) => self.writer = w,
                Err(e) => {
                    tracing::warn!("lexical index writer cannot be reopened yet: {e}");
                    self.writer_lost = true;
                }
            }
        }
        // The segments written for the failed commit are referenced by no commit: delete them,
        // or each failed attempt on a full disk takes the space just freed for good.
        if !self.writer_lost
            && let Err(e) = self.writer.garbage_collect_files().wait()
        {
            tracing::warn!("lexical index: cannot delete the files of the failed commit: {e}");
        }
        let payload = self.index.load_metas().ok().and_then(|m| m.payload);
        self.rebuild_pending = payload.as_deref() == Some(REBUILDING_PAYLOAD);
        self.applied_seq = payload
            .as_deref()
            .and_then(|p| p.strip_prefix(PAYLOAD_PREFIX))
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
        self.dirty = true;
        self.uncommitted_bytes = 0;
    }

    pub fn searcher(&self) -> Searcher {
        self.reader.searcher()
    }

    /// The `kbid_key` of every live document in the committed index (one entry per document,
    /// so a section indexed twice appears twice).
    pub fn indexed_keys(&self) -> Result<Vec<u64>> {
        let searcher = self.searcher();
        let mut out = Vec::with_capacity(searcher.num_docs() as usize);
        for segment in searcher.segment_readers() {
            let column = segment
                .fast_fields()
                .u64("kbid_key")
                .map_err(|e| tantivy_err("read kbid_key", e))?;
            let alive = segment.alive_bitset();
            for doc in 0..segment.max_doc() {
                if alive.is_none_or(|a| a.is_alive(doc))
                    && let Some(k) = column.first(doc)
                {
                    out.push(k);
                }
            }
        }
        Ok(out)
    }

    pub fn applied_seq(&self) -> u64 {
        self.applied_seq
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn tantivy_index(&self) -> &Index {
        &self.index
    }
}

/// The index writer, starting from the last commit.
fn new_writer(index: &Index) -> Result<IndexWriter> {
    let writer = index
        .writer_with_num_threads(WRITER_THREADS, WRITER_MEMORY)
        .map_err(|e| tantivy_err("open writer", e))?;
    // A commit cut short (the process killed, or a failed commit) can leave files that no
    // published commit references. Replaying the same changes gives the next commit the same
    // opstamp and so the same file names, which tantivy refuses to overwrite: remove them first.
    // A file left behind fails that commit only; the replay after it comes back here.
    if let Err(e) = writer.garbage_collect_files().wait() {
        tracing::warn!("lexical index: cannot remove files of an unfinished commit: {e}");
    }
    Ok(writer)
}

/// Name of the `kbid_key` field (the document filters read its column by name).
pub const KBID_KEY_FIELD: &str = "kbid_key";

/// The key of a kbid in the index: the tie-breaker of equal scores, and what the document
/// filters look up.
pub fn kbid_key(kbid: &str) -> u64 {
    crate::text::shingles::fnv1a(kbid.as_bytes())
}

fn last_seq(db: &Database) -> Result<u64> {
    let txn = db.begin_read()?;
    let changes = txn.open_table(CHANGES)?;
    Ok(changes.last()?.map(|(k, _)| k.value()).unwrap_or(0))
}

/// `text` without its first line when that line is an ATX heading whose text is `title`.
pub fn strip_heading_line<'a>(text: &'a str, title: Option<&str>) -> &'a str {
    let Some(title) = title else { return text };
    let (first, rest) = text.split_once('\n').unwrap_or((text, ""));
    let line = first.trim_start();
    let hashes = line.bytes().take_while(|&b| b == b'#').count();
    if (1..=6).contains(&hashes) && line[hashes..].trim().trim_end_matches('#').trim() == title {
        rest
    } else {
        text
    }
}

/// Prose types whose fenced code blocks go to the `code` field; every other text type (source
/// code, JSON, …) is code as a whole.
pub fn is_prose_type(t: &str) -> bool {
    matches!(
        t,
        "text/markdown" | "text/plain" | "text/x-markdown" | "text/html" | "text/csv" | "skill"
    )
}

/// Split a section's text into prose and code (fenced blocks of markdown; all of it for code types).
pub fn split_body_and_code(section_type: &str, text: &str) -> (String, String) {
    if !is_prose_type(section_type) {
        return (String::new(), text.to_string());
    }
    let mut body = String::with_capacity(text.len());
    let mut code = String::new();
    let mut fence: Option<(char, usize)> = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let t = line.trim_start_matches(' ');
        let run = |c: char| t.chars().take_while(|&x| x == c).count();
        match fence {
            None if indent <= 3 && (run('`') >= 3 || run('~') >= 3) => {
                let c = t.chars().next().unwrap_or('`');
                fence = Some((c, run(c)));
            }
            None => {
                body.push_str(line);
                body.push('\n');
            }
            Some((c, n)) => {
                if indent <= 3 && run(c) >= n && t.trim_end().chars().all(|x| x == c) {
                    fence = None;
                } else {
                    code.push_str(line);
                    code.push('\n');
                }
            }
        }
    }
    (body, code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Catch the index up, commit it, and give the key of each section it holds (sorted),
    /// failing when one is indexed twice.
    fn indexed_once(kb: &crate::Kb) -> Vec<u64> {
        kb.index_pending();
        let mut lexical = kb.lexical().unwrap();
        lexical.commit().unwrap();
        let mut keys = lexical.indexed_keys().unwrap();
        keys.sort_unstable();
        let distinct: BTreeSet<u64> = keys.iter().copied().collect();
        assert_eq!(keys.len(), distinct.len(), "a section is indexed twice");
        keys
    }

    #[test]
    fn the_heading_line_is_not_body_text() {
        assert_eq!(
            strip_heading_line("## Title ##\nbody", Some("Title")),
            "body"
        );
        assert_eq!(
            strip_heading_line("## Other\nbody", Some("Title")),
            "## Other\nbody"
        );
        assert_eq!(strip_heading_line("# Title", Some("Title")), "");
        assert_eq!(strip_heading_line("# Title\nbody", None), "# Title\nbody");
    }

    #[test]
    fn fenced_code_goes_to_the_code_field() {
        let (b, c) =
            split_body_and_code("text/markdown", "intro\n```rust\nfn main() {}\n```\noutro");
        assert_eq!(b, "intro\noutro\n");
        assert_eq!(c, "fn main() {}\n");
        let (b, c) = split_body_and_code("text/x-rust", "fn x() {}");
        assert_eq!((b.as_str(), c.as_str()), ("", "fn x() {}"));
    }

    /// Writes fed to the index writer but not yet committed (the daemon indexes after each
    /// acknowledged group and commits lazily) must not survive a rebuild as second copies.
    #[test]
    fn rebuild_with_uncommitted_index_changes_indexes_each_section_once() {
        let tmp = tempfile::tempdir().unwrap();
        let (kb, _) = crate::Kb::open_or_create(tmp.path()).unwrap();
        let mut kbids = Vec::new();
        for round in 0..3 {
            for i in 0..20 {
                let ops = vec![crate::writes::WriteOp::Learn(crate::LearnRequest::text(
                    format!("round {round} fact {i} about rebuilding twice"),
                ))];
                let out = kb.write_group_unindexed(ops).unwrap();
                for r in out {
                    if let crate::writes::WriteOutcome::Learned(l) = r.unwrap() {
                        kbids.push(l.kbid);
                    }
                }
                kb.index_pending();
            }
            kb.rebuild().unwrap();
        }
        let keys = kb.lexical().unwrap().indexed_keys().unwrap();
        let distinct: BTreeSet<u64> = keys.iter().copied().collect();
        assert_eq!(keys.len(), distinct.len(), "a section is indexed twice");
        assert_eq!(distinct.len(), kbids.len());
        let check = kb.check().unwrap();
        assert!(check.ok, "{:?}", check.errors);
    }

    /// A catch-up sends no delete for a section whose first change since the last one applied
    /// is its addition; a section removed and learned again, or changed, is still replaced,
    /// never indexed twice, whether the index saw it before or not.
    #[test]
    fn a_catch_up_indexes_each_touched_section_once() {
        use crate::writes::{WriteOp, WriteOutcome};
        let tmp = tempfile::tempdir().unwrap();
        let (kb, _) = crate::Kb::open_or_create(tmp.path()).unwrap();
        let write = |op: WriteOp| match kb.write_group_unindexed(vec![op]).unwrap().remove(0) {
            Ok(WriteOutcome::Learned(l)) => l.kbid,
            Ok(_) => String::new(),
            Err(e) => panic!("{e}"),
        };
        let learn = |text: &str, docid: &str| {
            write(WriteOp::Learn(crate::LearnRequest {
                docid: Some(docid.to_string()),
                ..crate::LearnRequest::text(text)
            }))
        };
        let unlearn = |kbid: &str| {
            write(WriteOp::Unlearn {
                kbid: kbid.to_string(),
            })
        };
        // Seen by the index, then removed and learned again in one catch-up.
        let a = learn("alpha facts about the catch-up", "d/a");
        assert_eq!(indexed_once(&kb), vec![kbid_key(&a)]);
        unlearn(&a);
        assert_eq!(learn("alpha facts about the catch-up", "d/a"), a);
        assert_eq!(indexed_once(&kb), vec![kbid_key(&a)]);
        // Added, removed and added again within one catch-up, never seen by the index.
        let b = learn("beta facts about the catch-up", "d/b");
        unlearn(&b);
        learn("beta facts about the catch-up", "d/b");
        // Added, then changed (attached to a second document) within one catch-up.
        let c = learn("gamma facts about the catch-up", "d/c");
        learn("gamma facts about the catch-up", "d/c2");
        // Seen by the index, then changed.
        learn("alpha facts about the catch-up", "d/a2");
        let mut want = vec![kbid_key(&a), kbid_key(&b), kbid_key(&c)];
        want.sort_unstable();
        assert_eq!(indexed_once(&kb), want);
        let hits = kb.search(&crate::SearchRequest::new("alpha")).unwrap();
        assert_eq!(hits.items.len(), 1);
        assert!(kb.check().unwrap().ok);
    }

    /// Learn a section and index it, unlearn it, learn more than a catch-up step's rows of
    /// other sections, then learn it again, none of it indexed yet: the kbid keys the index
    /// must then hold, each once.
    fn removed_then_learned_again_past_a_step(kb: &crate::Kb) -> Vec<u64> {
        use crate::writes::{WriteOp, WriteOutcome};
        let write = |op: WriteOp| match kb.write_group_unindexed(vec![op]).unwrap().remove(0) {
            Ok(WriteOutcome::Learned(l)) => l.kbid,
            Ok(_) => String::new(),
            Err(e) => panic!("{e}"),
        };
        let learn = |text: &str| write(WriteOp::Learn(crate::LearnRequest::text(text)));
        let a = learn("alpha facts learned, unlearned and learned again");
        assert_eq!(indexed_once(kb), vec![kbid_key(&a)]);
        write(WriteOp::Unlearn { kbid: a.clone() });
        let mut want = vec![kbid_key(&a)];
        for i in 0..CHANGES_PER_STEP + 16 {
            want.push(kbid_key(&learn(&format!(
                "filler fact number {i} between the two"
            ))));
        }
        assert_eq!(learn("alpha facts learned, unlearned and learned again"), a);
        want.sort_unstable();
        want
    }

    /// The index holds each of `want` once, and a search finds the section learned again once.
    fn assert_indexed_once(kb: &crate::Kb, want: &[u64]) {
        assert_eq!(indexed_once(kb), want);
        let hits = kb.search(&crate::SearchRequest::new("alpha")).unwrap();
        assert_eq!(hits.items.len(), 1);
        assert!(kb.check().unwrap().ok);
    }

    /// A catch-up step reads the sections it touched from the newest snapshot, which may hold
    /// changes after the step's last row (a step reads at most `CHANGES_PER_STEP` rows). A
    /// section removed before that row and learned again after it is indexed by the first step
    /// as it stands: the second step, whose first change of it is that addition, must not add
    /// it a second time.
    #[test]
    fn a_section_learned_again_past_a_steps_end_is_indexed_once() {
        let tmp = tempfile::tempdir().unwrap();
        let (kb, _) = crate::Kb::open_or_create(tmp.path()).unwrap();
        let want = removed_then_learned_again_past_a_step(&kb);
        assert_indexed_once(&kb, &want);
    }

    /// The same across a reopen: a step cut short indexed a section ahead and was committed,
    /// then the process ended. The commit says nothing of it, so the catch-up after opening
    /// deletes each section it touches up to the store's last change before adding it.
    #[test]
    fn a_section_indexed_ahead_before_a_reopen_is_indexed_once() {
        let tmp = tempfile::tempdir().unwrap();
        let (kb, _) = crate::Kb::open_or_create(tmp.path()).unwrap();
        let want = removed_then_learned_again_past_a_step(&kb);
        {
            let db = kb.db().unwrap();
            let mut lexical = kb.lexical().unwrap();
            assert!(
                !lexical.apply_some_changes(&db).unwrap(),
                "a step cut short"
            );
            lexical.commit().unwrap();
        }
        drop(kb);
        let kb = crate::Kb::open(tmp.path()).unwrap();
        assert_indexed_once(&kb, &want);
    }

    /// A document taking or giving up a section changes nothing in the index (it holds nothing
    /// of a section's documents: the docid filters read them from the store), while a change of
    /// the section itself re-indexes it.
    #[test]
    fn a_document_taking_a_section_does_not_reindex_it() {
        use crate::writes::{WriteOp, WriteOutcome};
        let tmp = tempfile::tempdir().unwrap();
        let (kb, _) = crate::Kb::open_or_create(tmp.path()).unwrap();
        let learn = |text: &str, docid: &str, tags: &[&str]| {
            let op = WriteOp::Learn(crate::LearnRequest {
                docid: Some(docid.to_string()),
                tags: tags.iter().map(|t| t.to_string()).collect(),
                ..crate::LearnRequest::text(text)
            });
            match kb.write_group_unindexed(vec![op]).unwrap().remove(0) {
                Ok(WriteOutcome::Learned(l)) => l.kbid,
                other => panic!("{other:?}"),
            }
        };
        // Documents ever added to the index, deleted ones included.
        let added = |kb: &crate::Kb| {
            indexed_once(kb);
            let lexical = kb.lexical().unwrap();
            lexical.reader.reload().unwrap();
            let searcher = lexical.reader.searcher();
            let max: u32 = searcher.segment_readers().iter().map(|r| r.max_doc()).sum();
            let deleted: u32 = searcher
                .segment_readers()
                .iter()
                .map(|r| r.num_deleted_docs())
                .sum();
            (max, deleted)
        };
        let found_in = |docid: &str| {
            let mut req = crate::SearchRequest::new("shared boilerplate");
            req.docid = Some(docid.to_string());
            kb.search(&req).unwrap().items.len()
        };
        // Two sections in the index's first segment: a re-indexed one leaves a deleted document
        // behind (a segment whose documents are all deleted is dropped, and would hide it).
        let a = learn("shared boilerplate of every page", "pages/one", &[]);
        learn("a filler section of its own", "pages/filler", &[]);
        assert_eq!(added(&kb), (2, 0));
        assert_eq!(
            learn("shared boilerplate of every page", "pages/two", &[]),
            a
        );
        assert_eq!(
            added(&kb),
            (2, 0),
            "taken by a second document: not re-indexed"
        );
        assert_eq!((found_in("pages/one"), found_in("pages/two")), (1, 1));
        assert_eq!(found_in("pages/three"), 0);
        // Subscribers are told as before: the section changed.
        let last = kb.changes_since(0).unwrap();
        assert!(
            last.iter()
                .any(|c| c.kind == "section_changed" && c.id == a && c.section_type.is_some()),
            "{last:?}"
        );
        // The first document is rewritten without it: it is no longer found under it.
        let op = WriteOp::LearnDocument {
            docid: "pages/one".into(),
            markdown: "# Other\n\nnothing in common here".into(),
            title: None,
            metadata: None,
            tags: Vec::new(),
        };
        kb.write_group_unindexed(vec![op])
            .unwrap()
            .remove(0)
            .unwrap();
        assert_eq!((found_in("pages/one"), found_in("pages/two")), (0, 1));
        assert_eq!(
            added(&kb),
            (3, 0),
            "giving it up did not re-index it either"
        );
        // A change of the section itself (a tag) does.
        learn("shared boilerplate of every page", "pages/two", &["tagged"]);
        assert_eq!(added(&kb), (4, 1));
        assert!(kb.check().unwrap().ok);
    }

    /// An index of this kbdb's making with the fields of an earlier one (a `docids` field) is
    /// rebuilt when the database opens, and searches find what the store holds.
    #[test]
    fn an_index_with_the_fields_of_an_earlier_kbdb_is_rebuilt() {
        let tmp = tempfile::tempdir().unwrap();
        {
            let (kb, _) = crate::Kb::open_or_create(tmp.path()).unwrap();
            kb.learn(crate::LearnRequest::text(
                "facts kept across an index layout change",
            ))
            .unwrap();
        }
        let path = tmp.path().join(INDEX_DIR);
        std::fs::remove_dir_all(&path).unwrap();
        std::fs::create_dir_all(&path).unwrap();
        let (current, _) = schema();
        let mut earlier = Schema::builder();
        for (_, entry) in current.fields() {
            earlier.add_field(entry.clone());
        }
        earlier.add_text_field("docids", STRING);
        let index = Index::create_in_dir(&path, earlier.build()).unwrap();
        let mut writer: IndexWriter = index.writer(15_000_000).unwrap();
        let mut commit = writer.prepare_commit().unwrap();
        commit.set_payload(&format!("{PAYLOAD_PREFIX}0"));
        commit.commit().unwrap();
        drop(writer);
        let (kb, _) = crate::Kb::open_or_create(tmp.path()).unwrap();
        let hits = kb.search(&crate::SearchRequest::new("layout")).unwrap();
        assert_eq!(hits.items.len(), 1);
        assert_eq!(kb.lexical().unwrap().index.schema(), current);
    }

    /// A catch-up that stops part-way (here at a record it cannot read) leaves none of its
    /// step's sections in the writer: once the record reads again, each section is indexed once
    /// (a section's first add has no delete before it).
    #[test]
    fn a_catch_up_stopped_part_way_indexes_each_section_once_when_resumed() {
        use crate::writes::{WriteOp, WriteOutcome};
        let tmp = tempfile::tempdir().unwrap();
        let (kb, _) = crate::Kb::open_or_create(tmp.path()).unwrap();
        let ops = (0..600)
            .map(|i| {
                WriteOp::Learn(crate::LearnRequest::text(format!(
                    "fact number {i} about a catch-up stopped part-way"
                )))
            })
            .collect();
        let kbids: Vec<String> = kb
            .write_group_unindexed(ops)
            .unwrap()
            .into_iter()
            .map(|r| match r.unwrap() {
                WriteOutcome::Learned(l) => l.kbid,
                other => panic!("{other:?}"),
            })
            .collect();
        // Read last (in kbid order), after two batches were handed to the writer.
        let last = kbids.iter().max().unwrap().clone();
        let db = kb.db().unwrap();
        let good = {
            let r = db.begin_read().unwrap();
            let t = r.open_table(SECTIONS).unwrap();
            t.get(last.as_str()).unwrap().unwrap().value().to_vec()
        };
        let put = |bytes: &[u8]| {
            let w = db.begin_write().unwrap();
            w.open_table(SECTIONS)
                .unwrap()
                .insert(last.as_str(), bytes)
                .unwrap();
            w.commit().unwrap();
        };
        let mut bad = good.clone();
        let n = bad.len();
        bad[n - 1] ^= 0xff;
        put(&bad);
        kb.index_pending();
        put(&good);
        assert_eq!(indexed_once(&kb).len(), kbids.len());
        // A rebuild of them commits part-way (over `MAX_UNCOMMITTED_BYTES` here) and ends with
        // a commit that names the last change: reopened, the index is neither rebuilt nor
        // replayed onto.
        drop(db);
        kb.rebuild().unwrap();
        assert_eq!(indexed_once(&kb).len(), kbids.len());
        let seq = kb.lexical().unwrap().applied_seq();
        drop(kb);
        let kb = crate::Kb::open(tmp.path()).unwrap();
        assert_eq!(kb.lexical().unwrap().applied_seq(), seq);
        assert_eq!(indexed_once(&kb).len(), kbids.len());
    }

    /// A rebuild commits part-way (to bound what its writer holds) under a payload that says so:
    /// an index left so, by a rebuild that failed or a process that died, is rebuilt, never
    /// replayed onto (its payload names no change) and never committed over.
    #[test]
    fn an_unfinished_rebuild_is_rebuilt_not_replayed_onto() {
        let tmp = tempfile::tempdir().unwrap();
        let (kb, _) = crate::Kb::open_or_create(tmp.path()).unwrap();
        let learn = |kb: &crate::Kb, i: usize| {
            kb.learn(crate::LearnRequest::text(format!(
                "fact {i} of an unfinished rebuild"
            )))
            .unwrap()
        };
        for i in 0..20 {
            learn(&kb, i);
        }
        let indexed = |kb: &crate::Kb| indexed_once(kb).len();
        assert_eq!(indexed(&kb), 20);
        // A rebuild's first part committed, then a step of it failed.
        {
            let mut l = kb.lexical().unwrap();
            l.writer.delete_all_documents().unwrap();
            l.commit_part_of_rebuild().unwrap();
            l.roll_back();
            assert!(l.rebuild_pending);
            assert!(l.commit().is_err(), "committed over an unfinished rebuild");
        }
        learn(&kb, 20);
        assert_eq!(indexed(&kb), 21);
        // The process died after a rebuild's first part: the next open rebuilds.
        {
            let mut l = kb.lexical().unwrap();
            l.writer.delete_all_documents().unwrap();
            l.commit_part_of_rebuild().unwrap();
            l.dirty = false;
        }
        drop(kb);
        let kb = crate::Kb::open(tmp.path()).unwrap();
        assert_eq!(indexed(&kb), 21);
        assert!(kb.check().unwrap().ok);
    }

    /// A process killed inside an index commit can leave a deletes file written but its
    /// `meta.json` unpublished. Replaying the same changes at the next open gives the commit the
    /// same opstamp, hence the same file name: the commit failed on it ("FileAlreadyExists") and
    /// no daemon could start any more. Found by the crash harness.
    #[test]
    fn files_of_a_commit_cut_short_do_not_block_the_replay() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("index").join("lexical");
        let files = |d: &Path| -> BTreeSet<String> {
            std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        };
        let (kb, _) = crate::Kb::open_or_create(tmp.path()).unwrap();
        let kbids: Vec<String> = (0..10)
            .map(|i| {
                let req = crate::LearnRequest::text(format!("fact {i} about commits cut short"));
                kb.learn(req).unwrap().kbid
            })
            .collect();
        kb.flush_index().unwrap();
        drop(kb);
        let before = files(&dir);
        let old_meta = std::fs::read(dir.join("meta.json")).unwrap();

        // Unlearning a section makes the next commit write a deletes file for its segment.
        let (kb, _) = crate::Kb::open_or_create(tmp.path()).unwrap();
        assert!(kb.unlearn(&kbids[3]).unwrap().removed);
        kb.flush_index().unwrap();
        drop(kb);
        let written: Vec<String> = files(&dir).difference(&before).cloned().collect();
        assert!(written.iter().any(|f| f.ends_with(".del")), "{written:?}");
        // Put back the previous meta.json: the commit's files are there, it was never published.
        std::fs::write(dir.join("meta.json"), old_meta).unwrap();

        let (kb, _) = crate::Kb::open_or_create(tmp.path()).unwrap();
        let hits = |q: &str| kb.search(&crate::SearchRequest::new(q)).unwrap().total;
        assert_eq!(hits("4"), 1);
        assert_eq!(hits("3"), 0, "the unlearned section is out of the index");
        assert_eq!(hits("commits"), 9);
        let check = kb.check().unwrap();
        assert!(check.ok, "{:?}", check.errors);
    }
}
