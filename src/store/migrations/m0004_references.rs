//! 0004 references: adds the reference graph — `refs_out` (a section's markers in order) and
//! `refs_in` (target ⇒ referencing sections) — and fills it from every text section already
//! stored, resolving relative links against the section's first document.

use redb::{ReadableTable, WriteTransaction};

use crate::error::Result;
use crate::store::tables::{CONTENT_BY_KBID, REFS_IN, REFS_OUT, SECTION_DOCS, SECTIONS};
use crate::types::records::{SectionRecordV1 as SectionRecord, decode};

pub fn apply(txn: &WriteTransaction) -> Result<()> {
    use crate::store::journal::{Logged, LoggedMultimap};
    let mut refs_out = Logged::new(txn.open_table(REFS_OUT)?, false);
    let mut refs_in = LoggedMultimap::new(txn.open_multimap_table(REFS_IN)?, false);
    let sections = txn.open_table(SECTIONS)?;
    let content = txn.open_table(CONTENT_BY_KBID)?;
    let section_docs = txn.open_multimap_table(SECTION_DOCS)?;
    for row in sections.iter()? {
        let (k, v) = row?;
        let kbid = k.value();
        let rec: SectionRecord = decode("sections", kbid, v.value())?;
        let Some(bytes) = content.get(kbid)? else {
            continue;
        };
        let base = crate::store::txn::multimap_values(&section_docs, kbid)?
            .into_iter()
            .next();
        let markers =
            crate::references::markers_of(&rec.section_type, bytes.value(), base.as_deref());
        crate::references::insert_edges(&mut refs_out, &mut refs_in, kbid, &markers)?;
    }
    Ok(())
}
