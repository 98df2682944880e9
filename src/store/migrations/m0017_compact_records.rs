//! 0017 compact_records: section, document and change records are written as record version 3,
//! whose layouts store kbdb's own values compactly (src/types/stored_forms.rs): timestamps as
//! milliseconds, checksums as 32 bytes, a source key made of the docid and the title as the
//! docid, the default section type as one byte, and band keys as 32-bit keys in 64 fixed bytes
//! (they were 64-bit varints: ~150 bytes). A section record takes ~200 bytes less.
//!
//! Each of the three tables is copied, in key order, into a new table with every older record
//! rewritten, and the copy then back under the table's name: rewriting the rows in place would
//! leave each B-tree page as it was, half empty (at 300k sections the `sections` table kept its
//! 22,717 leaves for half the bytes), while rows inserted in key order fill their pages. A
//! record of version 1 or 2 would still read (`Record::Before0017`).

use redb::{Key, ReadableTable, TableDefinition, WriteTransaction};

use crate::error::Result;
use crate::store::tables::{CHANGES, DOCUMENTS, SECTIONS};
use crate::types::records::{
    ChangeRecord, DocumentRecord, Record, SectionRecord, decode, encode, is_before_0017,
};

const SECTIONS_COPY: TableDefinition<&str, &[u8]> = TableDefinition::new("sections_0017");
const DOCUMENTS_COPY: TableDefinition<&str, &[u8]> = TableDefinition::new("documents_0017");
const CHANGES_COPY: TableDefinition<u64, &[u8]> = TableDefinition::new("changes_0017");

pub fn apply(txn: &WriteTransaction) -> Result<()> {
    rebuild::<&str, SectionRecord>(txn, SECTIONS, SECTIONS_COPY, "sections")?;
    rebuild::<&str, DocumentRecord>(txn, DOCUMENTS, DOCUMENTS_COPY, "documents")?;
    rebuild::<u64, ChangeRecord>(txn, CHANGES, CHANGES_COPY, "changes")?;
    Ok(())
}

/// Rewrite `table` densely, its records of version 1 and 2 as version 3, through `copy`.
fn rebuild<K, T>(
    txn: &WriteTransaction,
    table: TableDefinition<K, &[u8]>,
    copy: TableDefinition<K, &[u8]>,
    name: &'static str,
) -> Result<()>
where
    K: Key + 'static,
    for<'a> K::SelfType<'a>: std::fmt::Display,
    T: Record,
{
    copy_rows::<K, T>(txn, table, copy, name)?;
    txn.delete_table(table)?;
    copy_rows::<K, T>(txn, copy, table, name)?;
    txn.delete_table(copy)?;
    Ok(())
}

/// Insert every row of `from` into `to`, in key order, a record written before 0017 rewritten.
fn copy_rows<K, T>(
    txn: &WriteTransaction,
    from: TableDefinition<K, &[u8]>,
    to: TableDefinition<K, &[u8]>,
    name: &'static str,
) -> Result<()>
where
    K: Key + 'static,
    for<'a> K::SelfType<'a>: std::fmt::Display,
    T: Record,
{
    let source = txn.open_table(from)?;
    let mut target = txn.open_table(to)?;
    for row in source.iter()? {
        let (k, v) = row?;
        let key = k.value();
        if is_before_0017(v.value()) {
            let rec: T = decode(name, &key.to_string(), v.value())?;
            target.insert(key, encode(&rec).as_slice())?;
        } else {
            target.insert(key, v.value())?;
        }
    }
    Ok(())
}
