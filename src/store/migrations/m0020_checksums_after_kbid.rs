//! 0020 checksums_after_kbid: a section record stores its checksum's second half alone when
//! its first half is the kbid it is stored under, as it is for every section kbdb makes (a
//! kbid is the first 16 bytes of its content's SHA-256; `Checksum::AfterKbid` in
//! src/types/stored_forms.rs): 16 bytes less a record, ~7 % of one. An older kbdb could not read
//! such a record. Every record is rewritten, through a copy in key order so that the pages are
//! filled (as 0017 does).

use redb::{ReadableTable, TableDefinition, WriteTransaction};

use crate::error::Result;
use crate::store::tables::SECTIONS;
use crate::types::records::{SectionRecord, decode, encode_section};

const SECTIONS_COPY: TableDefinition<&str, &[u8]> = TableDefinition::new("sections_0020");

pub fn apply(txn: &WriteTransaction) -> Result<()> {
    {
        let source = txn.open_table(SECTIONS)?;
        let mut copy = txn.open_table(SECTIONS_COPY)?;
        for row in source.iter()? {
            let (k, v) = row?;
            let rec: SectionRecord = decode("sections", k.value(), v.value())?;
            copy.insert(k.value(), encode_section(k.value(), &rec).as_slice())?;
        }
    }
    txn.delete_table(SECTIONS)?;
    {
        let copy = txn.open_table(SECTIONS_COPY)?;
        let mut sections = txn.open_table(SECTIONS)?;
        for row in copy.iter()? {
            let (k, v) = row?;
            sections.insert(k.value(), v.value())?;
        }
    }
    txn.delete_table(SECTIONS_COPY)?;
    Ok(())
}
