//! 0017 compact_records: section, document and change records are written as record version 3,
//! whose layouts store kbdb's own values compactly (src/types/stored_forms.rs): timestamps as
//! milliseconds, checksums as 32 bytes, a source key made of the docid and the title as the
//! docid, the default section type as one byte, and band keys as 32-bit keys in 64 fixed bytes
//! (they were 64-bit varints: ~150 bytes). A section record takes ~200 bytes less. Every older
//! record of these tables is rewritten here, so an existing database gets the space back; a
//! record of version 1 or 2 would still read (`Record::Before0017`).

use std::ops::Bound;

use redb::{ReadableTable, TableDefinition, WriteTransaction};

use crate::error::Result;
use crate::store::tables::{CHANGES, DOCUMENTS, SECTIONS};
use crate::types::records::{
    ChangeRecord, DocumentRecord, Record, SectionRecord, decode, encode, is_before_0017,
};

/// Rows read per pass (a pass reads, then writes: a table cannot be changed while a value read
/// from it is held). Few in unit tests, so their few rows take several passes.
const PASS: usize = if cfg!(test) { 2 } else { 4096 };

pub fn apply(txn: &WriteTransaction) -> Result<()> {
    rewrite_by_name::<SectionRecord>(txn, SECTIONS, "sections")?;
    rewrite_by_name::<DocumentRecord>(txn, DOCUMENTS, "documents")?;
    let mut changes = txn.open_table(CHANGES)?;
    let mut after = None;
    loop {
        let mut pass: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut read = 0;
        let range = match after {
            Some(seq) => changes.range((Bound::Excluded(seq), Bound::Unbounded))?,
            None => changes.range::<u64>(..)?,
        };
        for row in range.take(PASS) {
            let (k, v) = row?;
            let seq = k.value();
            read += 1;
            after = Some(seq);
            if is_before_0017(v.value()) {
                let rec: ChangeRecord = decode("changes", &seq.to_string(), v.value())?;
                pass.push((seq, encode(&rec)));
            }
        }
        for (seq, bytes) in &pass {
            changes.insert(*seq, bytes.as_slice())?;
        }
        if read < PASS {
            return Ok(());
        }
    }
}

/// Rewrite the records of version 1 and 2 of a table keyed by name.
fn rewrite_by_name<T: Record>(
    txn: &WriteTransaction,
    def: TableDefinition<&str, &[u8]>,
    name: &'static str,
) -> Result<()> {
    let mut table = txn.open_table(def)?;
    let mut after: Option<String> = None;
    loop {
        let mut pass: Vec<(String, Vec<u8>)> = Vec::new();
        let mut read = 0;
        let range = match &after {
            Some(key) => table.range::<&str>((Bound::Excluded(key.as_str()), Bound::Unbounded))?,
            None => table.range::<&str>(..)?,
        };
        for row in range.take(PASS) {
            let (k, v) = row?;
            read += 1;
            after = Some(k.value().to_string());
            if is_before_0017(v.value()) {
                let rec: T = decode(name, k.value(), v.value())?;
                pass.push((k.value().to_string(), encode(&rec)));
            }
        }
        for (key, bytes) in &pass {
            table.insert(key.as_str(), bytes.as_slice())?;
        }
        if read < PASS {
            return Ok(());
        }
    }
}
