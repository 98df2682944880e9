//! Document edits applied inside the write transaction (so concurrent edits of one document
//! never lose each other's changes): create, update (metadata merge and/or a new body), a
//! section edit, delete. Each reads the document as stored, computes its new markdown and
//! metadata, then stores it like `learn_document`: unchanged sections keep their kbid, changed
//! ones get new kbids, the manifest changes in the same transaction and references re-resolve.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::config::Limits;
use crate::error::{KbError, Result};
use crate::store::txn::WriteTables;
use crate::text::section_edit::{self, Action};
use crate::types::validate;
use crate::writes::document::{self, merge};

/// What to do to a document.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "edit", rename_all = "snake_case")]
pub enum DocEdit {
    /// A new document (fails when the docid exists). `body` is the full markdown.
    Create {
        title: String,
        metadata: Map<String, Value>,
        body: String,
    },
    /// Merge `metadata` into the document's (a null value removes the key) and/or replace its
    /// body (front matter in the new body is merged as metadata too) and/or its title.
    Update {
        #[serde(default)]
        metadata: Option<Map<String, Value>>,
        #[serde(default)]
        body: Option<String>,
        #[serde(default)]
        title: Option<String>,
    },
    /// Edit one section by its heading (docs/collections.md).
    Section {
        heading: String,
        action: String,
        #[serde(default)]
        content: Option<String>,
        #[serde(default)]
        occurrence: Option<usize>,
    },
    Delete,
}

/// The result of an edit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EditResult {
    pub docid: String,
    /// `create`, `update`, `update_section`, `delete`.
    pub action: String,
    /// Whether the store changed.
    pub changed: bool,
    /// The document after the edit (absent after delete).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<crate::types::DocumentLearnResult>,
    #[serde(default)]
    pub elapsed_ms: f64,
    /// The file the edit was written back to (a synced document, docs/sync.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

impl DocEdit {
    fn name(&self) -> &'static str {
        match self {
            DocEdit::Create { .. } => "create",
            DocEdit::Update { .. } => "update",
            DocEdit::Section { .. } => "update_section",
            DocEdit::Delete => "delete",
        }
    }

    /// Checks that need no store.
    pub fn validate(&self) -> Result<()> {
        match self {
            DocEdit::Create { title, .. } => {
                validate::validate_line("title", Some(title), validate::MAX_TITLE_CHARS)?;
            }
            DocEdit::Update {
                metadata,
                body,
                title,
            } => {
                if metadata.is_none() && body.is_none() && title.is_none() {
                    return Err(KbError::invalid(
                        "meta",
                        "give meta, content or title (nothing to update)",
                    ));
                }
                validate::validate_line("title", title.as_deref(), validate::MAX_TITLE_CHARS)?;
            }
            DocEdit::Section {
                heading, action, ..
            } => {
                if heading.trim().is_empty() {
                    return Err(KbError::invalid("heading", "must not be empty"));
                }
                action
                    .parse::<Action>()
                    .map_err(|e| KbError::invalid("action", e))?;
            }
            DocEdit::Delete => {}
        }
        Ok(())
    }
}

/// The stored markdown body of a document: its sections' texts in order.
fn stored_body(t: &WriteTables<'_>, docid: &str, kbids: &[String]) -> Result<String> {
    let mut parts = Vec::with_capacity(kbids.len());
    for kbid in kbids {
        let Some(rec) = t.section(kbid)? else {
            continue;
        };
        if rec.section_type.starts_with("image/") {
            return Err(KbError::invalid(
                "docid",
                format!(
                    "{docid} holds an image section ({kbid}); documents are edited as markdown text, so edit its text sections by learning the document again"
                ),
            ));
        }
        let bytes = t.content_of(&rec)?.unwrap_or_default();
        parts.push(String::from_utf8_lossy(&bytes).trim_end().to_string());
    }
    let mut body = parts.join("\n\n");
    body.push('\n');
    Ok(body)
}

/// Apply `edit` to `docid` inside `t`. The outer error is a storage failure (it fails the whole
/// group); the inner one is the edit's own (nothing written). (A document that came from a file
/// of a synced folder is edited by src/sync/writeback.rs instead: the write door asks it first.)
pub(crate) fn apply(
    t: &mut WriteTables<'_>,
    docid: String,
    edit: DocEdit,
    limits: &Limits,
) -> Result<Result<EditResult>> {
    let action = edit.name().to_string();
    let existing = t.document(&docid)?;
    let outcome = |changed: bool, document| {
        Ok(Ok(EditResult {
            docid: docid.clone(),
            action: action.clone(),
            changed,
            document,
            elapsed_ms: 0.0,
            file: None,
        }))
    };
    let (title, body, metadata) = match (edit, existing) {
        (DocEdit::Delete, None)
        | (DocEdit::Update { .. }, None)
        | (DocEdit::Section { .. }, None) => {
            return Ok(Err(KbError::NotFound(format!(
                "Document not found: {docid}"
            ))));
        }
        (DocEdit::Delete, Some(_)) => {
            document::delete_document(t, &docid)?;
            return outcome(true, None);
        }
        (DocEdit::Create { .. }, Some(_)) => {
            return Ok(Err(KbError::invalid(
                "docid",
                format!(
                    "{docid} already exists; use update_document or update_section to change it"
                ),
            )));
        }
        (
            DocEdit::Create {
                title,
                metadata,
                body,
            },
            None,
        ) => (Some(title), body, metadata),
        (
            DocEdit::Update {
                metadata,
                body,
                title,
            },
            Some(doc),
        ) => {
            let mut meta = match doc.metadata_value() {
                Some(Value::Object(m)) => m,
                _ => Map::new(),
            };
            let body = match body {
                Some(b) => {
                    let (front, rest) = match crate::text::frontmatter::split(&b) {
                        Ok(x) => x,
                        Err(e) => return Ok(Err(KbError::invalid("content", e))),
                    };
                    if let Some(f) = front {
                        merge(&mut meta, f.meta);
                    }
                    rest.to_string()
                }
                None => match stored_body(t, &docid, &doc.kbids) {
                    Ok(b) => b,
                    Err(e @ KbError::InvalidInput { .. }) => return Ok(Err(e)),
                    Err(e) => return Err(e),
                },
            };
            if let Some(m) = metadata {
                merge(&mut meta, m);
            }
            // The title is the document's H1: a body that opens with one says the new title.
            let opens_with_h1 = |b: &str| {
                section_edit::headings(b)
                    .first()
                    .is_some_and(|h| h.level == 1)
            };
            let body = match &title {
                Some(t) if opens_with_h1(&body) => section_edit::set_title(&body, t),
                _ => body,
            };
            (title.or(doc.title), body, meta)
        }
        (
            DocEdit::Section {
                heading,
                action,
                content,
                occurrence,
            },
            Some(doc),
        ) => {
            let current = match stored_body(t, &docid, &doc.kbids) {
                Ok(b) => b,
                Err(e @ KbError::InvalidInput { .. }) => return Ok(Err(e)),
                Err(e) => return Err(e),
            };
            let action: Action = match action.parse() {
                Ok(a) => a,
                Err(e) => return Ok(Err(KbError::invalid("action", e))),
            };
            let body = match section_edit::edit(
                &current,
                &heading,
                action,
                content.as_deref(),
                occurrence,
            ) {
                Ok(b) => b,
                Err(e) => {
                    let field = match e {
                        section_edit::EditError::MissingContent { .. } => "content",
                        _ => "heading",
                    };
                    return Ok(Err(KbError::invalid(field, e)));
                }
            };
            let meta = match doc.metadata_value() {
                Some(Value::Object(m)) => m,
                _ => Map::new(),
            };
            (doc.title, body, meta)
        }
    };
    let metadata = match validate::validate_metadata(&metadata) {
        Ok(m) => m,
        Err(e) => return Ok(Err(e)),
    };
    let prepared =
        match document::prepare_document(docid.clone(), &body, title, Some(metadata), limits) {
            Ok(p) => p,
            Err(e) => return Ok(Err(e)),
        };
    let d = document::apply_document(t, prepared)?;
    outcome(d.changed || d.added > 0, Some(d))
}

/// Check an edit before its transaction (what needs no store); returns the docid as stored.
pub(crate) fn prepare(docid: &str, edit: &DocEdit) -> Result<String> {
    let docid = validate::docid(docid)?.into_owned();
    edit.validate()?;
    Ok(docid)
}
