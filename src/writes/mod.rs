//! Write operations as values, so that many of them — from one caller or from many clients of
//! the daemon — can be applied in one transaction (group commit: one fsync for all). Each
//! operation is validated on its own first: a bad one fails alone and changes nothing.

use serde::{Deserialize, Serialize};

pub(crate) mod document;

use crate::config::Limits;
use crate::error::{KbError, Result};
use crate::learn::{self, Prepared};
use crate::store::txn::WriteTables;
use crate::text;
use crate::types::{DocumentLearnResult, LearnRequest, LearnResult, UnlearnResult, validate};
use document::PreparedDocument;

/// A callback that queues a prepared batch (`Kb::prepare_group`) for a writer, which commits
/// it in one transaction, in the order queued (the daemon's group-commit writer, or the writer
/// thread of `Kb::with_index_behind`): how a long operation such as a sync commits its batches
/// while it reads and prepares the next one.
pub type Writer<'a> = &'a dyn Fn(Vec<Result<crate::PreparedWrite>>) -> Result<WriteAnswer>;

/// A batch's results, once a writer has committed it (or failed to).
pub struct WriteAnswer {
    answer: std::sync::mpsc::Receiver<BatchOutcome>,
    /// The error when the writer stopped without answering (it shut down, or panicked).
    stopped: fn() -> KbError,
}

/// What a writer answers a batch with: each write's outcome, or the error that failed the
/// group (each of a group's batches gets a copy of its own, `KbError::shared_copy`).
pub(crate) type BatchOutcome = Result<Vec<Result<WriteOutcome>>>;

impl WriteAnswer {
    /// A batch's answer and the end its writer answers through.
    pub(crate) fn channel(
        stopped: fn() -> KbError,
    ) -> (std::sync::mpsc::Sender<BatchOutcome>, WriteAnswer) {
        let (tx, answer) = std::sync::mpsc::channel();
        (tx, WriteAnswer { answer, stopped })
    }

    /// Wait for the batch's results.
    pub fn wait(self) -> Result<Vec<Result<WriteOutcome>>> {
        self.answer.recv().unwrap_or_else(|_| Err((self.stopped)()))
    }
}

/// One write.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum WriteOp {
    Learn(LearnRequest),
    LearnDocument {
        docid: String,
        markdown: String,
        #[serde(default)]
        title: Option<String>,
        /// The document's metadata (a JSON object), overriding front matter. None: the
        /// markdown's front matter when it has one, else the metadata the document had.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<serde_json::Value>,
        /// Tags given to every section of the document (added to those a section has).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tags: Vec<String>,
    },
    Unlearn {
        kbid: String,
    },
    /// Create, update, edit a section of, or delete a document (collections).
    EditDocument {
        docid: String,
        #[serde(flatten)]
        edit: crate::collections::edit::DocEdit,
    },
    /// A folder-sync write: a file's document and record (src/sync/ops.rs).
    Sync(crate::sync::SyncOp),
}

/// The result of one write.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum WriteOutcome {
    Learned(LearnResult),
    Document(DocumentLearnResult),
    Unlearned(UnlearnResult),
    Edited(crate::collections::edit::EditResult),
    Synced(crate::sync::SyncOutcome),
    /// A write only the engine makes; never sent on the wire.
    #[serde(skip)]
    Engine(EngineOutcome),
}

pub(crate) enum PreparedOp {
    Learn(Box<Prepared>),
    Document(Box<PreparedDocument>),
    Unlearn(String),
    Edit {
        docid: String,
        edit: crate::collections::edit::DocEdit,
        limits: Limits,
        /// A synced document's file, read before the transaction.
        pre_read: Option<Box<crate::sync::writeback::PreRead>>,
    },
    Sync(crate::sync::ops::PreparedSync),
    /// A write only the engine makes (no wire form).
    Engine(EngineOp),
}

/// Writes only the engine makes, for the operations that are not learn, edit or sync: they go
/// through the same door (one transaction per group, the same durability policy, detached
/// sections collected) but have no wire form.
pub(crate) enum EngineOp {
    /// Make `docid` hold exactly `kbids` (which must exist), with these fields (agents).
    SetDocument {
        docid: String,
        kbids: Vec<String>,
        title: Option<String>,
        doc_type: String,
        metadata: Option<String>,
    },
    /// Remove a section like `unlearn`, except that documents of type `keep_doc_type` go on
    /// listing it (a dangling entry, as agents keep a deleted skill).
    RemoveSectionKeeping {
        kbid: String,
        keep_doc_type: String,
    },
    /// Remove a document (manifest and memberships; sections nothing else holds go with it).
    RemoveDocument(String),
    AddSynonyms {
        term: String,
        synonyms: Vec<String>,
    },
    RemoveSynonyms {
        term: String,
        synonyms: Vec<String>,
    },
    /// Remove the sections no document holds that were not learned on their own.
    Gc,
    /// Store what an import read (src/snapshot/import.rs).
    Import(Box<crate::snapshot::import::ImportWrites>),
    /// Replace the collection models with this (checked) TOML text.
    SetModels(String),
}

/// What an `EngineOp` did.
#[derive(Debug, Clone, PartialEq)]
pub enum EngineOutcome {
    /// Whether something was removed.
    Removed(bool),
    /// How many entries changed.
    Count(u64),
    Collected {
        sections: u64,
        bytes: u64,
    },
    Imported(crate::snapshot::import::ImportCounts),
    Done,
}

/// An engine write with the type of its result: `Kb::write_engine` returns a `T`, so its
/// callers match no outcome variants. Built only by the constructors below, each next to the
/// variant `apply_engine` answers it with.
pub(crate) struct Engine<T> {
    pub(crate) op: EngineOp,
    pub(crate) output: fn(EngineOutcome) -> Option<T>,
}

fn done(o: EngineOutcome) -> Option<()> {
    matches!(o, EngineOutcome::Done).then_some(())
}

fn removed(o: EngineOutcome) -> Option<bool> {
    match o {
        EngineOutcome::Removed(r) => Some(r),
        _ => None,
    }
}

impl EngineOp {
    pub(crate) fn set_document(
        docid: String,
        kbids: Vec<String>,
        title: Option<String>,
        doc_type: String,
        metadata: Option<String>,
    ) -> Engine<()> {
        let op = EngineOp::SetDocument {
            docid,
            kbids,
            title,
            doc_type,
            metadata,
        };
        Engine { op, output: done }
    }

    pub(crate) fn remove_section_keeping(kbid: String, keep_doc_type: String) -> Engine<bool> {
        let op = EngineOp::RemoveSectionKeeping {
            kbid,
            keep_doc_type,
        };
        Engine {
            op,
            output: removed,
        }
    }

    pub(crate) fn remove_document(docid: String) -> Engine<bool> {
        Engine {
            op: EngineOp::RemoveDocument(docid),
            output: removed,
        }
    }

    pub(crate) fn add_synonyms(term: String, synonyms: Vec<String>) -> Engine<()> {
        let op = EngineOp::AddSynonyms { term, synonyms };
        Engine { op, output: done }
    }

    /// How many synonyms were removed.
    pub(crate) fn remove_synonyms(term: String, synonyms: Vec<String>) -> Engine<u64> {
        Engine {
            op: EngineOp::RemoveSynonyms { term, synonyms },
            output: |o| match o {
                EngineOutcome::Count(n) => Some(n),
                _ => None,
            },
        }
    }

    /// The sections removed and their bytes.
    pub(crate) fn gc() -> Engine<(u64, u64)> {
        Engine {
            op: EngineOp::Gc,
            output: |o| match o {
                EngineOutcome::Collected { sections, bytes } => Some((sections, bytes)),
                _ => None,
            },
        }
    }

    pub(crate) fn import(
        w: crate::snapshot::import::ImportWrites,
    ) -> Engine<crate::snapshot::import::ImportCounts> {
        Engine {
            op: EngineOp::Import(Box::new(w)),
            output: |o| match o {
                EngineOutcome::Imported(c) => Some(c),
                _ => None,
            },
        }
    }

    pub(crate) fn set_models(toml_text: String) -> Engine<()> {
        Engine {
            op: EngineOp::SetModels(toml_text),
            output: done,
        }
    }
}

/// The outcome type of a kind of write: the engine's callers ask for the type they expect
/// (`outcome::<LearnResult>`) instead of matching variants.
pub(crate) trait Outcome: Sized {
    fn take(o: WriteOutcome) -> Option<Self>;
}

macro_rules! outcome_of {
    ($($variant:ident => $t:ty),*) => {$(
        impl Outcome for $t {
            fn take(o: WriteOutcome) -> Option<Self> {
                match o {
                    WriteOutcome::$variant(r) => Some(r),
                    _ => None,
                }
            }
        }
    )*};
}

outcome_of!(
    Learned => LearnResult,
    Document => DocumentLearnResult,
    Unlearned => UnlearnResult,
    Edited => crate::collections::edit::EditResult,
    Synced => crate::sync::SyncOutcome
);

/// `o` as the outcome type of its write. Another type is a bug of the door (each write gets
/// the outcome of its kind), reported as an internal error rather than a panic.
pub(crate) fn outcome<T: Outcome>(o: WriteOutcome) -> Result<T> {
    T::take(o).ok_or_else(unexpected_outcome)
}

pub(crate) fn unexpected_outcome() -> KbError {
    KbError::Storage("unexpected write outcome".into())
}

impl PreparedOp {
    /// Whether the write may go through the daemon's journal (every write but the engine's
    /// own, which commit durably in redb).
    pub(crate) fn journaled(&self) -> bool {
        !matches!(self, PreparedOp::Engine(_))
    }
}

/// Validate a write without touching the store.
pub(crate) fn prepare(op: WriteOp, limits: &Limits) -> Result<PreparedOp> {
    match op {
        WriteOp::Learn(req) => Ok(PreparedOp::Learn(Box::new(learn::prepare(req, limits)?))),
        WriteOp::Unlearn { kbid } => {
            crate::types::kbid::validate_kbid("kbid", &kbid)?;
            Ok(PreparedOp::Unlearn(kbid))
        }
        WriteOp::EditDocument { docid, edit } => {
            let docid = crate::collections::edit::prepare(&docid, &edit)?;
            Ok(PreparedOp::Edit {
                docid,
                edit,
                limits: limits.clone(),
                pre_read: None,
            })
        }
        WriteOp::Sync(op) => crate::sync::ops::prepare(op, limits).map(PreparedOp::Sync),
        WriteOp::LearnDocument {
            docid,
            markdown,
            title,
            metadata,
            tags,
        } => {
            let docid = validate::docid(&docid)?.into_owned();
            let tags = validate::validate_tags(&tags)?;
            let title =
                validate::validate_line("title", title.as_deref(), validate::MAX_TITLE_CHARS)?;
            let (front, body) =
                text::frontmatter::split(&markdown).map_err(|e| KbError::invalid("content", e))?;
            let metadata = match metadata {
                Some(serde_json::Value::Object(m)) => Some(m),
                Some(serde_json::Value::Null) => Some(serde_json::Map::new()),
                Some(_) => return Err(KbError::invalid("metadata", "must be a JSON object")),
                None => front.map(|f| f.meta),
            };
            let metadata = metadata
                .map(|m| validate::validate_metadata(&m))
                .transpose()?;
            let mut doc = document::prepare_document(docid, body, title, metadata, limits)?;
            for s in &mut doc.sections {
                s.tags.clone_from(&tags);
            }
            Ok(PreparedOp::Document(Box::new(doc)))
        }
    }
}

/// Apply a validated write inside `t`. The outer error is a storage failure (it fails the
/// group); the inner one fails this write alone (edits find some errors only in the store,
/// before writing anything).
pub(crate) fn apply(t: &mut WriteTables<'_>, op: PreparedOp) -> Result<Result<WriteOutcome>> {
    Ok(Ok(match op {
        PreparedOp::Edit {
            docid,
            edit,
            limits,
            pre_read,
        } => {
            // A document that came from a file of a synced folder is edited in its file too.
            let pre_read = pre_read.map(|p| *p);
            let edited =
                match crate::sync::writeback::apply_edit(t, &docid, &edit, &limits, pre_read)? {
                    Some(r) => r,
                    None => crate::collections::edit::apply(t, docid, edit, &limits)?,
                };
            match edited {
                Ok(r) => WriteOutcome::Edited(r),
                Err(e) => return Ok(Err(e)),
            }
        }
        PreparedOp::Sync(p) => match crate::sync::ops::apply(t, p)? {
            Ok(r) => WriteOutcome::Synced(r),
            Err(e) => return Ok(Err(e)),
        },
        PreparedOp::Learn(p) => WriteOutcome::Learned(learn::apply(t, *p)?),
        PreparedOp::Unlearn(kbid) => WriteOutcome::Unlearned(UnlearnResult {
            removed: crate::unlearn::remove_section(t, &kbid)?,
            elapsed_ms: 0.0,
        }),
        PreparedOp::Document(doc) => WriteOutcome::Document(document::apply_document(t, *doc)?),
        PreparedOp::Engine(op) => match apply_engine(t, op)? {
            Ok(o) => WriteOutcome::Engine(o),
            Err(e) => return Ok(Err(e)),
        },
    }))
}

fn apply_engine(t: &mut WriteTables<'_>, op: EngineOp) -> Result<Result<EngineOutcome>> {
    Ok(Ok(match op {
        EngineOp::SetDocument {
            docid,
            kbids,
            title,
            doc_type,
            metadata,
        } => {
            let now = t.now().to_string();
            learn::set_manifest(t, &docid, kbids, |doc| {
                doc.title = title;
                doc.doc_type = doc_type;
                doc.metadata = metadata;
                doc.updated_at = now;
            })?;
            EngineOutcome::Done
        }
        EngineOp::RemoveSectionKeeping {
            kbid,
            keep_doc_type,
        } => EngineOutcome::Removed(document::remove_section_keeping(t, &kbid, |doc| {
            doc.doc_type == keep_doc_type
        })?),
        EngineOp::RemoveDocument(docid) => {
            EngineOutcome::Removed(document::delete_document(t, &docid)?)
        }
        EngineOp::AddSynonyms { term, synonyms } => {
            crate::store::synonyms::add(t.txn(), &term, &synonyms)?;
            EngineOutcome::Done
        }
        EngineOp::RemoveSynonyms { term, synonyms } => {
            EngineOutcome::Count(crate::store::synonyms::remove(t.txn(), &term, &synonyms)?)
        }
        EngineOp::Gc => {
            let (sections, bytes) = crate::maintenance::gc::collect(t)?;
            EngineOutcome::Collected { sections, bytes }
        }
        EngineOp::Import(w) => EngineOutcome::Imported(crate::snapshot::import::apply(t, *w)?),
        EngineOp::SetModels(toml_text) => {
            crate::collections::state::store_models(t, &toml_text)?;
            EngineOutcome::Done
        }
    }))
}

/// The step of preparing an edit that reads the store, outside the transaction: the file of a
/// synced document is read and hashed now, on the caller's thread, so the writer only compares
/// its identity (src/sync/writeback.rs). `db` is asked for only for an edit.
pub(crate) fn pre_read(
    op: &mut PreparedOp,
    db: impl FnOnce() -> Result<std::sync::Arc<redb::Database>>,
) {
    if let PreparedOp::Edit {
        docid,
        edit,
        limits,
        pre_read,
    } = op
        && let Ok(db) = db()
    {
        *pre_read = crate::sync::writeback::pre_read(&db, docid, edit, limits).map(Box::new);
    }
}

/// Finish a write transaction's changes before it commits: collect the sections it detached,
/// then write the changed document manifests.
pub(crate) fn finish(t: &mut WriteTables<'_>) -> Result<()> {
    document::collect_detached(t)?;
    t.flush()
}

impl WriteOutcome {
    /// Whether applying it may have changed the store (an unlearn of an unknown kbid did not).
    pub(crate) fn changed_something(&self) -> bool {
        !matches!(
            self,
            WriteOutcome::Unlearned(UnlearnResult { removed: false, .. })
                | WriteOutcome::Edited(crate::collections::edit::EditResult { changed: false, .. })
                | WriteOutcome::Synced(crate::sync::SyncOutcome { changed: false, .. })
                | WriteOutcome::Engine(
                    EngineOutcome::Removed(false)
                        | EngineOutcome::Count(0)
                        | EngineOutcome::Collected { sections: 0, .. }
                )
        )
    }

    /// Mark (or unmark) learned sections as waiting for an embedding that failed.
    pub(crate) fn set_embedding_failed(&mut self, failed: bool) {
        match self {
            WriteOutcome::Learned(r) if !r.skipped => r.vector_embedding_failed = failed,
            WriteOutcome::Document(r) if r.added > 0 => r.vector_embedding_failed = failed,
            WriteOutcome::Edited(r) => {
                if let Some(d) = r.document.as_mut().filter(|d| d.added > 0) {
                    d.vector_embedding_failed = failed;
                }
            }
            WriteOutcome::Synced(r) => {
                if let Some(d) = r.document.as_mut().filter(|d| d.added > 0) {
                    d.vector_embedding_failed = failed;
                }
            }
            _ => {}
        }
    }

    pub(crate) fn set_elapsed(&mut self, ms: f64) {
        match self {
            WriteOutcome::Learned(r) => r.elapsed_ms = ms,
            WriteOutcome::Document(r) => r.elapsed_ms = ms,
            WriteOutcome::Unlearned(r) => r.elapsed_ms = ms,
            WriteOutcome::Edited(r) => r.elapsed_ms = ms,
            WriteOutcome::Synced(r) => r.elapsed_ms = ms,
            WriteOutcome::Engine(_) => {}
        }
    }
}
