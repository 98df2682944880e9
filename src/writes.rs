//! Write operations as values, so that many of them — from one caller or from many clients of
//! the daemon — can be applied in one transaction (group commit: one fsync for all). Each
//! operation is validated on its own first: a bad one fails alone and changes nothing.

use serde::{Deserialize, Serialize};

use crate::config::Limits;
use crate::error::{KbError, Result};
use crate::learn::{self, Prepared};
use crate::model::{
    DocumentLearnResult, DocumentLearnSection, LearnRequest, LearnResult, UnlearnResult, validate,
};
use crate::store::txn::WriteTables;
use crate::text;

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
    /// A folder-sync write: a file's document and record (src/sync/engine.rs).
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
}

pub(crate) enum PreparedOp {
    Learn(Box<Prepared>),
    Document {
        docid: String,
        title: Option<String>,
        /// New metadata (JSON object text); None keeps what the document has.
        metadata: Option<String>,
        sections: Vec<Prepared>,
    },
    Unlearn(String),
    Edit {
        docid: String,
        edit: crate::collections::edit::DocEdit,
        limits: Limits,
        /// A synced document's file, read before the transaction.
        pre_read: Option<Box<crate::sync::writeback::PreRead>>,
    },
    Sync(crate::sync::engine::PreparedSync),
}

/// Validate a write without touching the store.
pub(crate) fn prepare(op: WriteOp, limits: &Limits) -> Result<PreparedOp> {
    match op {
        WriteOp::Learn(req) => Ok(PreparedOp::Learn(Box::new(learn::prepare(req, limits)?))),
        WriteOp::Unlearn { kbid } => {
            crate::model::kbid::validate_kbid("kbid", &kbid)?;
            Ok(PreparedOp::Unlearn(kbid))
        }
        WriteOp::EditDocument { docid, edit } => {
            crate::collections::edit::prepare(docid, edit, limits)
        }
        WriteOp::Sync(op) => crate::sync::engine::prepare(op, limits).map(PreparedOp::Sync),
        WriteOp::LearnDocument {
            docid,
            markdown,
            title,
            metadata,
            tags,
        } => {
            validate::validate_docid(&docid)?;
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
            let mut op = prepare_document(docid, body, title, metadata, limits)?;
            if let PreparedOp::Document { sections, .. } = &mut op {
                for s in sections {
                    s.tags.clone_from(&tags);
                }
            }
            Ok(op)
        }
    }
}

/// Split a markdown body into its sections and prepare each as a member of `docid`.
/// `title` defaults to the first heading.
pub(crate) fn prepare_document(
    docid: String,
    body: &str,
    title: Option<String>,
    metadata: Option<String>,
    limits: &Limits,
) -> Result<PreparedOp> {
    let sections = text::markdown::split_sections(body);
    if sections.is_empty() {
        return Err(KbError::invalid(
            "content",
            "has no sections (the document is empty)",
        ));
    }
    // A document is written in one transaction: at most a batch of sections.
    if sections.len() > limits.max_batch {
        return Err(KbError::invalid(
            "content",
            format!(
                "splits into {} sections; the limit is {} (limits.max_batch)",
                sections.len(),
                limits.max_batch
            ),
        ));
    }
    let mut prepared = Vec::with_capacity(sections.len());
    for (n, s) in sections.iter().enumerate() {
        let req = LearnRequest {
            content: s.text.clone(),
            title: (!s.title.is_empty()).then(|| s.title.clone()),
            docid: Some(docid.clone()),
            ..Default::default()
        };
        let mut p = learn::prepare(req, limits).map_err(|e| match e {
            KbError::InvalidInput { field, message } => KbError::InvalidInput {
                message: format!(
                    "section {n} (\"{}\"): {message}",
                    text::preview(&s.title, 60)
                ),
                field,
            },
            other => other,
        })?;
        p.attach = false;
        prepared.push(p);
    }
    let title = title.or_else(|| {
        sections
            .iter()
            .find(|s| s.level > 0 && !s.title.is_empty())
            .map(|s| s.title.clone())
    });
    Ok(PreparedOp::Document {
        docid,
        title,
        metadata,
        sections: prepared,
    })
}

/// Apply a validated write inside `t`. The outer error is a storage failure (it fails the
/// group); the inner one fails this write alone (edits find some errors only in the store,
/// before writing anything).
pub(crate) fn apply(t: &mut WriteTables<'_>, op: PreparedOp) -> Result<Result<WriteOutcome>> {
    match op {
        PreparedOp::Edit {
            docid,
            edit,
            limits,
            pre_read,
        } => crate::collections::edit::apply(t, docid, edit, &limits, pre_read.map(|p| *p)),
        PreparedOp::Sync(p) => crate::sync::engine::apply(t, p),
        other => apply_prepared(t, other).map(Ok),
    }
}

/// Apply a write that cannot fail on its own once prepared.
pub(crate) fn apply_prepared(t: &mut WriteTables<'_>, op: PreparedOp) -> Result<WriteOutcome> {
    match op {
        PreparedOp::Edit { .. } | PreparedOp::Sync(_) => {
            Err(KbError::Storage("edits go through writes::apply".into()))
        }
        PreparedOp::Learn(p) => Ok(WriteOutcome::Learned(learn::apply(t, *p)?)),
        PreparedOp::Unlearn(kbid) => Ok(WriteOutcome::Unlearned(UnlearnResult {
            removed: crate::unlearn::remove_section(t, &kbid)?,
            elapsed_ms: 0.0,
        })),
        PreparedOp::Document {
            docid,
            title,
            metadata,
            sections,
        } => {
            let mut out = Vec::with_capacity(sections.len());
            for p in sections {
                let r = learn::apply(t, p)?;
                out.push(DocumentLearnSection {
                    new: !r.skipped,
                    kbid: r.kbid,
                    heading: r.title,
                });
            }
            let kbids: Vec<String> = out.iter().map(|s| s.kbid.clone()).collect();
            let now = t.now().to_string();
            let change = learn::set_manifest(t, &docid, kbids, |doc| {
                doc.title = title.clone();
                if let Some(m) = metadata {
                    doc.metadata = (m != "{}").then_some(m);
                }
                doc.updated_at = now;
            })?;
            Ok(WriteOutcome::Document(DocumentLearnResult {
                docid,
                title,
                added: out.iter().filter(|s| s.new).count(),
                unchanged: out.iter().filter(|s| !s.new).count(),
                sections: out,
                changed: change.is_some(),
                detached: change.unwrap_or_default(),
                elapsed_ms: 0.0,
                vector_embedding_failed: false,
            }))
        }
    }
}

impl WriteOutcome {
    /// Whether applying it may have changed the store (an unlearn of an unknown kbid did not).
    pub(crate) fn changed_something(&self) -> bool {
        !matches!(
            self,
            WriteOutcome::Unlearned(UnlearnResult { removed: false, .. })
                | WriteOutcome::Edited(crate::collections::edit::EditResult { changed: false, .. })
                | WriteOutcome::Synced(crate::sync::SyncOutcome { changed: false, .. })
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
        }
    }
}
