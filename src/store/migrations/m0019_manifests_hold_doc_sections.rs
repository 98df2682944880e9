//! 0019 manifests_hold_doc_sections: drops `doc_sections` (docid → kbid). A document's record
//! lists its sections in order (its manifest), so the table said again what the manifests say:
//! 16 % of a 100k load's pages and two B-tree inserts per membership, one of them under a random
//! key. Which documents hold a section stays in `section_docs`; whether a document holds a
//! section is read from the shorter of the two (`WriteTables::holds`).

use redb::WriteTransaction;

use crate::error::Result;
use crate::store::tables::DOC_SECTIONS;

pub fn apply(txn: &WriteTransaction) -> Result<()> {
    txn.delete_multimap_table(DOC_SECTIONS)?;
    Ok(())
}
