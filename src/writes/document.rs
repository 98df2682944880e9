//! Document-level write primitives, below every feature that writes documents (learn, the
//! collection edits, folder sync and its write-back): a markdown body prepared as a document's
//! sections, a prepared document stored, a document deleted, metadata merged, and the sections
//! a transaction detached collected.

use serde_json::{Map, Value};

use crate::config::Limits;
use crate::error::{KbError, Result};
use crate::learn::{self, Prepared};
use crate::store::txn::WriteTables;
use crate::text;
use crate::types::{DocumentLearnResult, DocumentLearnSection, LearnRequest};

/// A document's sections, checked, split and hashed outside the transaction.
pub(crate) struct PreparedDocument {
    pub docid: String,
    pub title: Option<String>,
    /// New metadata (JSON object text); None keeps what the document has.
    pub metadata: Option<String>,
    pub sections: Vec<Prepared>,
}

/// Split a markdown body into its sections and prepare each as a member of `docid`.
/// `title` defaults to the first heading.
pub(crate) fn prepare_document(
    docid: String,
    body: &str,
    title: Option<String>,
    metadata: Option<String>,
    limits: &Limits,
) -> Result<PreparedDocument> {
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
    Ok(PreparedDocument {
        docid,
        title,
        metadata,
        sections: prepared,
    })
}

/// Store a prepared document: its sections in order, then its manifest (unchanged sections keep
/// their kbid; vanished ones are detached).
pub(crate) fn apply_document(
    t: &mut WriteTables<'_>,
    doc: PreparedDocument,
) -> Result<DocumentLearnResult> {
    let PreparedDocument {
        docid,
        title,
        metadata,
        sections,
    } = doc;
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
    Ok(DocumentLearnResult {
        docid,
        title,
        added: out.iter().filter(|s| s.new).count(),
        unchanged: out.iter().filter(|s| !s.new).count(),
        sections: out,
        changed: change.is_some(),
        detached: change.unwrap_or_default(),
        elapsed_ms: 0.0,
        vector_embedding_failed: false,
    })
}

/// Remove `docid` (manifest and memberships; its sections that nothing else holds are collected
/// when the transaction is finished). Returns whether it existed.
pub(crate) fn delete_document(t: &mut WriteTables<'_>, docid: &str) -> Result<bool> {
    let Some(doc) = t.document(docid)? else {
        return Ok(false);
    };
    let mut seen = std::collections::HashSet::new();
    for k in &doc.kbids {
        if seen.insert(k.clone()) {
            t.remove_membership(docid, k)?;
        }
    }
    t.remove_document(docid)?;
    t.log(crate::types::records::ChangeKind::DocumentRemoved, docid)?;
    Ok(true)
}

/// Merge metadata: a null value removes the key.
pub(crate) fn merge(into: &mut Map<String, Value>, from: Map<String, Value>) {
    for (k, v) in from {
        if v.is_null() {
            into.remove(&k);
        } else {
            into.insert(k, v);
        }
    }
}

/// Remove every section that lost a document in this transaction, is held by no document
/// now and was never learned on its own (the user's memory is never collected). Returns
/// the kbids removed.
pub(crate) fn collect_detached(t: &mut WriteTables<'_>) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    for kbid in t.take_maybe_detached() {
        let Some(rec) = t.section(&kbid)? else {
            continue;
        };
        if rec.standalone || t.section_held(&kbid, &rec)? {
            continue;
        }
        crate::unlearn::remove_section(t, &kbid)?;
        removed.push(kbid);
    }
    Ok(removed)
}

/// Remove a section like `unlearn`, except that the documents `keep` selects go on listing it
/// (a dangling entry, as agents keep a deleted skill). Returns whether it existed.
pub(crate) fn remove_section_keeping(
    t: &mut WriteTables<'_>,
    kbid: &str,
    keep: impl Fn(&crate::types::records::DocumentRecord) -> bool,
) -> Result<bool> {
    let mut kept = Vec::new();
    for docid in t.docs_of(kbid)? {
        if let Some(doc) = t.document(&docid)?
            && keep(&doc)
        {
            kept.push((docid, doc));
        }
    }
    let removed = crate::unlearn::remove_section(t, kbid)?;
    for (docid, doc) in kept {
        let kbids = doc.kbids.clone();
        learn::set_manifest(t, &docid, kbids, |d| *d = doc)?;
    }
    Ok(removed)
}
