//! `recall`: a section with its context, by depth (docs/references.md).
//!
//! 0 — content, heading, type, docids; 1 — + parent document manifests + back-references;
//! 2 — + forward references + sibling sections' full text; 3 — + the full text of each
//! referenced section (or document) and its back-references. Expansion is one level deep and
//! never recursive, so reference cycles cannot loop. A `max_chars` budget adds expansion pieces
//! level by level (all requested sections at level 1, then level 2, then 3) and stops at the
//! first piece that does not fit; the sections asked for are always returned whole.

use std::collections::HashSet;

use serde::Serialize;

use crate::error::{KbError, Result};
use crate::references;
use crate::store::txn::ReadTables;
use crate::text::markers::{self, Marker, Target};
use crate::types::records::SectionRecord;
use crate::types::{
    ManifestSection, RecallDocument, RecallItem, RecallRequest, Recalled, Reference, Sibling,
};

pub(crate) fn recall(t: &ReadTables, req: &RecallRequest) -> Result<Recalled> {
    let mut items = Vec::with_capacity(req.kbids.len());
    let mut unknown = Vec::new();
    for kbid in &req.kbids {
        match t.section(kbid)? {
            Some(rec) => items.push(core(t, kbid, rec)?),
            None => unknown.push(kbid.as_str()),
        }
    }
    if !unknown.is_empty() {
        return Err(KbError::NotFound(format!(
            "Section not found: {}",
            unknown.join(", ")
        )));
    }
    let mut budget = Budget {
        remaining: req.max_chars,
    };
    if req.depth >= 1 {
        for item in &mut items {
            level1(t, item, &mut budget)?;
        }
    }
    if req.depth >= 2 {
        for item in &mut items {
            level2(t, item, &mut budget)?;
        }
    }
    if req.depth >= 3 {
        for item in &mut items {
            level3(t, item, &mut budget)?;
        }
    }
    Ok(if req.batch {
        Recalled::Many(items)
    } else {
        Recalled::One(Box::new(items.remove(0)))
    })
}

/// The expansion budget in characters of compact JSON; once a piece does not fit, nothing
/// more is added.
struct Budget {
    remaining: Option<usize>,
}

impl Budget {
    /// Whether `piece` fits; takes its cost when it does. Marks `item` truncated when not.
    fn take(&mut self, piece: &impl Serialize, truncated: &mut bool) -> bool {
        let Some(remaining) = self.remaining.as_mut() else {
            return true;
        };
        let cost = serde_json::to_string(piece)
            .map(|s| s.chars().count() + 1)
            .unwrap_or(usize::MAX);
        if cost <= *remaining {
            *remaining -= cost;
            true
        } else {
            *remaining = 0;
            *truncated = true;
            false
        }
    }
}

fn text_of(t: &ReadTables, kbid: &str, rec: &SectionRecord) -> Result<String> {
    let bytes = t.content_of(rec)?.ok_or_else(|| KbError::Corrupt {
        table: "content",
        key: kbid.to_string(),
        detail: "section has no content".into(),
    })?;
    Ok(crate::learn::content_as_text(&rec.section_type, &bytes))
}

fn core(t: &ReadTables, kbid: &str, rec: SectionRecord) -> Result<RecallItem> {
    Ok(RecallItem {
        kbid: kbid.to_string(),
        content: text_of(t, kbid, &rec)?,
        docids: t.docs_of_section(kbid, &rec)?,
        heading: rec.title,
        section_type: rec.section_type,
        documents: None,
        back_references: None,
        siblings: None,
        references: None,
        truncated: false,
    })
}

fn level1(t: &ReadTables, item: &mut RecallItem, budget: &mut Budget) -> Result<()> {
    let mut documents = Vec::new();
    for docid in &item.docids {
        let Some(doc) = t.document(docid)? else {
            continue;
        };
        let mut sections = Vec::with_capacity(doc.kbids.len());
        for kbid in &doc.kbids {
            if let Some(rec) = t.section(kbid)? {
                sections.push(ManifestSection {
                    kbid: kbid.clone(),
                    heading: rec.title,
                    section_type: rec.section_type,
                });
            }
        }
        let target = Target::Document {
            docid: docid.clone(),
            anchor: None,
        };
        let manifest = RecallDocument {
            docid: docid.clone(),
            metadata: doc.metadata_value(),
            title: doc.title,
            sections,
            back_references: Vec::new(),
        };
        if !budget.take(&manifest, &mut item.truncated) {
            break;
        }
        documents.push(manifest);
        let doc_refs = back_references(t, &[target], None)?;
        let last = documents.last_mut().expect("pushed above");
        for r in doc_refs {
            if !budget.take(&r, &mut item.truncated) {
                break;
            }
            last.back_references.push(r);
        }
    }
    item.documents = Some(documents);
    let mut refs = Vec::new();
    for r in section_back_references(t, &item.kbid, item.heading.as_deref(), &item.docids)? {
        if !budget.take(&r, &mut item.truncated) {
            break;
        }
        refs.push(r);
    }
    item.back_references = Some(refs);
    Ok(())
}

fn level2(t: &ReadTables, item: &mut RecallItem, budget: &mut Budget) -> Result<()> {
    let mut refs = Vec::new();
    let mut seen = HashSet::new();
    for m in references::forward(&t.refs_out, &item.kbid)? {
        if !seen.insert(m.target.clone()) {
            continue;
        }
        let r = forward_reference(t, &m)?;
        if !budget.take(&r, &mut item.truncated) {
            break;
        }
        refs.push(r);
    }
    item.references = Some(refs);

    let mut siblings = Vec::new();
    let mut seen: HashSet<String> = HashSet::from([item.kbid.clone()]);
    'docs: for docid in &item.docids {
        let Some(doc) = t.document(docid)? else {
            continue;
        };
        for kbid in &doc.kbids {
            if !seen.insert(kbid.clone()) {
                continue;
            }
            let Some(rec) = t.section(kbid)? else {
                continue;
            };
            let s = Sibling {
                kbid: kbid.clone(),
                content: text_of(t, kbid, &rec)?,
                heading: rec.title,
                section_type: rec.section_type,
                docid: docid.clone(),
            };
            if !budget.take(&s, &mut item.truncated) {
                break 'docs;
            }
            siblings.push(s);
        }
    }
    item.siblings = Some(siblings);
    Ok(())
}

fn level3(t: &ReadTables, item: &mut RecallItem, budget: &mut Budget) -> Result<()> {
    let Some(refs) = item.references.as_mut() else {
        return Ok(());
    };
    for r in refs.iter_mut() {
        if r.resolved != Some(true) {
            continue;
        }
        let (content, back) = match (&r.kbid, &r.docid) {
            (Some(kbid), _) => {
                let Some(rec) = t.section(kbid)? else {
                    continue;
                };
                let docids = t.docs_of_section(kbid, &rec)?;
                let back = section_back_references(t, kbid, rec.title.as_deref(), &docids)?;
                (text_of(t, kbid, &rec)?, back)
            }
            (None, Some(docid)) => {
                let content = crate::compose::compose(t, std::slice::from_ref(docid))?;
                let target = Target::Document {
                    docid: docid.clone(),
                    anchor: None,
                };
                (content, back_references(t, &[target], None)?)
            }
            (None, None) => continue,
        };
        if !budget.take(&content, &mut item.truncated) {
            return Ok(());
        }
        r.content = Some(content);
        let mut kept = Vec::new();
        let mut stop = false;
        for b in back {
            if !budget.take(&b, &mut item.truncated) {
                stop = true;
                break;
            }
            kept.push(b);
        }
        r.back_references = Some(kept);
        if stop {
            return Ok(());
        }
    }
    Ok(())
}

/// The sections referencing section `kbid`: by kbid, or by the slug of its heading in one of
/// its documents. Each source once; the section itself excluded.
fn section_back_references(
    t: &ReadTables,
    kbid: &str,
    heading: Option<&str>,
    docids: &[String],
) -> Result<Vec<Reference>> {
    let mut targets = vec![Target::Section(kbid.to_string())];
    if let Some(h) = heading {
        let anchor = markers::slug(h);
        if !anchor.is_empty() {
            for d in docids {
                targets.push(Target::Document {
                    docid: d.clone(),
                    anchor: Some(anchor.clone()),
                });
            }
        }
    }
    back_references(t, &targets, Some(kbid))
}

/// Back-references to any of `targets`, one per source section, ordered by kbid.
fn back_references(
    t: &ReadTables,
    targets: &[Target],
    exclude: Option<&str>,
) -> Result<Vec<Reference>> {
    let mut sources: Vec<(String, &Target)> = Vec::new();
    let mut seen = HashSet::new();
    for target in targets {
        for s in references::sources(&t.refs_in, target)? {
            if Some(s.as_str()) != exclude && seen.insert(s.clone()) {
                sources.push((s, target));
            }
        }
    }
    sources.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = Vec::with_capacity(sources.len());
    for (source, target) in sources {
        let Some(rec) = t.section(&source)? else {
            continue;
        };
        let markers = references::forward(&t.refs_out, &source)?;
        let Some(m) = markers.iter().find(|m| &m.target == target) else {
            continue;
        };
        out.push(Reference {
            kbid: Some(source),
            docid: None,
            heading: rec.title,
            section_type: Some(rec.section_type),
            marker_type: m.marker_type.as_str().to_string(),
            context_snippet: m.context_snippet.clone(),
            direction: "back".to_string(),
            target: None,
            resolved: None,
            content: None,
            back_references: None,
        });
    }
    Ok(out)
}

/// A marker of the recalled section, resolved against what exists now.
fn forward_reference(t: &ReadTables, m: &Marker) -> Result<Reference> {
    let mut r = Reference {
        kbid: None,
        docid: None,
        heading: None,
        section_type: None,
        marker_type: m.marker_type.as_str().to_string(),
        context_snippet: m.context_snippet.clone(),
        direction: "forward".to_string(),
        target: Some(m.target.uri()),
        resolved: Some(false),
        content: None,
        back_references: None,
    };
    match &m.target {
        Target::Section(kbid) => {
            r.kbid = Some(kbid.clone());
            if let Some(rec) = t.section(kbid)? {
                r.heading = rec.title;
                r.section_type = Some(rec.section_type);
                r.resolved = Some(true);
            }
        }
        Target::Document { docid, anchor } => {
            r.docid = Some(docid.clone());
            if let Some(doc) = t.document(docid)? {
                match anchor {
                    None => {
                        r.heading = doc.title.clone();
                        r.section_type = Some(doc.doc_type.clone());
                        r.resolved = Some(true);
                    }
                    Some(a) => {
                        let found = references::section_for_anchor(&doc, a, |k| {
                            Ok(t.section(k)?.and_then(|rec| rec.title))
                        })?;
                        if let Some(kbid) = found
                            && let Some(rec) = t.section(&kbid)?
                        {
                            r.kbid = Some(kbid);
                            r.heading = rec.title;
                            r.section_type = Some(rec.section_type);
                            r.resolved = Some(true);
                        }
                    }
                }
            }
        }
    }
    Ok(r)
}
