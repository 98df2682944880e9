//! Removing a section with every row that points at it, inside a write transaction.

use crate::error::Result;
use crate::store::txn::WriteTables;
use crate::types::records::ChangeKind;

/// Remove `kbid` and cascade: document manifests (a document left empty is removed),
/// memberships, tags, source key, near-duplicate bands, outgoing references, then log the change.
/// Returns false when the section does not exist.
pub(crate) fn remove_section(t: &mut WriteTables<'_>, kbid: &str) -> Result<bool> {
    let Some(rec) = t.section(kbid)? else {
        return Ok(false);
    };
    if let Some(keys) = rec.bands {
        t.band_remove(kbid, keys);
    }
    for docid in t.docs_of(kbid)? {
        t.remove_membership(&docid, kbid)?;
        if let Some(mut doc) = t.document(&docid)? {
            doc.kbids.retain(|k| k != kbid);
            if doc.kbids.is_empty() {
                t.remove_document(&docid)?;
                t.log(ChangeKind::DocumentRemoved, &docid)?;
            } else {
                doc.updated_at = t.now().to_string();
                t.put_document(&docid, &doc)?;
                t.log(ChangeKind::DocumentChanged, &docid)?;
            }
        }
    }
    for tag in &rec.tags {
        t.tags.remove(tag.as_str(), kbid)?;
    }
    if let Some(k) = &rec.source_key {
        t.source_key_remove(k, kbid);
    }
    crate::references::remove_edges(&mut t.refs_out, &mut t.refs_in, kbid)?;
    t.sections.remove(kbid)?;
    t.remove_content(&rec)?;
    t.log(ChangeKind::SectionRemoved, kbid)?;
    Ok(true)
}
