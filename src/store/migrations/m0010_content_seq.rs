//! 0010 content_seq: section content moves from `content` (keyed by kbid) to `section_content`
//! (keyed by a sequence held in the section record). A kbid is a hash, so every new section's
//! content landed in a random leaf of the content B-tree: a group commit of G writes rewrote
//! ~2G content pages (leaves and their branches). Under sequential keys a group's contents
//! share the last leaf. Every section record is rewritten (the layout gains `content_seq`);
//! contents are numbered from 1 in the order the sections were created, ties by kbid (0 names
//! no content); `content` is deleted.

use redb::{ReadableTable, WriteTransaction};

use crate::error::Result;
use crate::store::tables::{CONTENT, CONTENT_BY_KBID, SECTIONS};
use crate::types::records::{SectionRecordV2, decode, encode};

/// Records rewritten per pass (a pass reads, then writes: a table cannot be changed while a
/// value read from it is held). One in unit tests, so their few sections take several passes.
const PASS: usize = if cfg!(test) { 1 } else { 4096 };

pub fn apply(txn: &WriteTransaction) -> Result<()> {
    {
        let old_content = txn.open_table(CONTENT_BY_KBID)?;
        let mut content = txn.open_table(CONTENT)?;
        let mut sections = txn.open_table(SECTIONS)?;
        // Numbered in the order the sections were created (ties by kbid), as new content is.
        let mut order: Vec<(String, String)> = Vec::new();
        for row in sections.iter()? {
            let (k, v) = row?;
            let old: SectionRecordV2 = decode("sections", k.value(), v.value())?;
            order.push((old.created_at, k.value().to_string()));
        }
        order.sort_unstable();
        let mut seq = 0u64;
        for chunk in order.chunks(PASS) {
            let mut pass: Vec<(&str, Vec<u8>)> = Vec::with_capacity(chunk.len());
            for (_, kbid) in chunk {
                let Some(v) = sections.get(kbid.as_str())? else {
                    continue;
                };
                let old: SectionRecordV2 = decode("sections", kbid, v.value())?;
                // A section whose content was already missing keeps sequence 0, which names no
                // row: `check` reports it as before, and the database still opens.
                let content_seq = match old_content.get(kbid.as_str())? {
                    Some(bytes) => {
                        seq += 1;
                        content.insert(seq, bytes.value())?;
                        seq
                    }
                    None => 0,
                };
                let rec = old.with_content_seq(content_seq);
                pass.push((kbid.as_str(), encode(&rec)));
            }
            for (kbid, bytes) in &pass {
                sections.insert(*kbid, bytes.as_slice())?;
            }
        }
    }
    txn.delete_table(CONTENT_BY_KBID)?;
    Ok(())
}
