//! 0001 initial: creates every table of schema version 1 (records at version byte 1).

use redb::WriteTransaction;

use crate::error::Result;
use crate::store::tables::*;

pub fn apply(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(META)?;
    txn.open_table(SECTIONS)?;
    txn.open_table(CONTENT_BY_KBID)?;
    txn.open_table(DOCUMENTS)?;
    txn.open_multimap_table(DOC_SECTIONS)?;
    txn.open_multimap_table(SECTION_DOCS)?;
    txn.open_multimap_table(TAGS)?;
    txn.open_multimap_table(SOURCE_KEYS)?;
    txn.open_table(CHANGES)?;
    txn.open_multimap_table(MINHASH_BANDS)?;
    Ok(())
}
