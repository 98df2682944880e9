//! 0010 content_seq: section content moves from `content` (keyed by kbid) to `section_content`
//! (keyed by a sequence held in the section record). A kbid is a hash, so every new section's
//! content landed in a random leaf of the content B-tree: a group commit of G writes rewrote
//! ~2G content pages (leaves and their branches). Under sequential keys a group's contents
//! share the last leaf. Every section record is rewritten (the layout gains `content_seq`);
//! contents are numbered in kbid order from 1 (0 names no content); `content` is deleted.

use std::ops::Bound;

use redb::{ReadableTable, WriteTransaction};

use crate::error::Result;
use crate::model::records::{SectionRecord, SectionRecordV2, decode, encode};
use crate::store::tables::{CONTENT, CONTENT_BY_KBID, SECTIONS};

/// Records rewritten per pass (a pass reads, then writes: a table cannot be changed while it
/// is being iterated). One in unit tests, so their few sections take several passes.
const PASS: usize = if cfg!(test) { 1 } else { 4096 };

pub fn apply(txn: &WriteTransaction) -> Result<()> {
    {
        let old_content = txn.open_table(CONTENT_BY_KBID)?;
        let mut content = txn.open_table(CONTENT)?;
        let mut sections = txn.open_table(SECTIONS)?;
        let mut seq = 0u64;
        let mut after: Option<String> = None;
        loop {
            let mut pass: Vec<(String, Vec<u8>)> = Vec::with_capacity(PASS);
            let bounds = match &after {
                None => (Bound::Unbounded, Bound::Unbounded),
                Some(k) => (Bound::Excluded(k.as_str()), Bound::Unbounded),
            };
            for row in sections.range::<&str>(bounds)?.take(PASS) {
                let (k, v) = row?;
                let kbid = k.value();
                let old: SectionRecordV2 = decode("sections", kbid, v.value())?;
                // A section whose content was already missing keeps sequence 0, which names no
                // row: `check` reports it as before, and the database still opens.
                let content_seq = match old_content.get(kbid)? {
                    Some(bytes) => {
                        seq += 1;
                        content.insert(seq, bytes.value())?;
                        seq
                    }
                    None => 0,
                };
                let rec = SectionRecord {
                    section_type: old.section_type,
                    title: old.title,
                    description: old.description,
                    tags: old.tags,
                    source_key: old.source_key,
                    created_at: old.created_at,
                    updated_at: old.updated_at,
                    checksum: old.checksum,
                    size: old.size,
                    standalone: old.standalone,
                    terms_count: old.terms_count,
                    bands: old.bands,
                    content_seq,
                };
                pass.push((kbid.to_string(), encode(&rec)));
            }
            let Some((last, _)) = pass.last() else {
                break;
            };
            after = Some(last.clone());
            for (kbid, bytes) in &pass {
                sections.insert(kbid.as_str(), bytes.as_slice())?;
            }
        }
    }
    txn.delete_table(CONTENT_BY_KBID)?;
    Ok(())
}
