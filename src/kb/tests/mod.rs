//! Unit tests of the engine that need its private parts (transactions, indexes), by topic;
//! the helpers here serve more than one of them.

mod browse;
mod dictionary;
mod durability;
mod migrations;
mod reads;
mod write_path;

use base64::Engine;
use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata};

use super::*;
use crate::store::tables::*;
use crate::store::txn::{ReadTables, WriteTables};
use crate::types::*;
use crate::{SearchRequest, WriteOp, WriteOutcome, now};

/// A learn of `text` into the document `docid`.
fn in_document(text: &str, docid: &str) -> LearnRequest {
    LearnRequest {
        docid: Some(docid.into()),
        ..LearnRequest::text(text)
    }
}

fn rows(kb: &Kb) -> [u64; 5] {
    let txn = kb.db().unwrap().begin_read().unwrap();
    let mm = |d| txn.open_multimap_table(d).unwrap().len().unwrap();
    [
        mm(TAGS),
        // Entries of the in-memory source-key index (migration 0011).
        kb.loaded_index_turn()
            .unwrap()
            .get()
            .map_or(0, |i| i.source_keys.len() as u64),
        // Sections whose record holds band keys (migration 0009).
        txn.open_table(SECTIONS)
            .unwrap()
            .iter()
            .unwrap()
            .filter(|row| {
                let (k, v) = row.as_ref().unwrap();
                let rec: types::records::SectionRecord =
                    types::records::decode("sections", k.value(), v.value()).unwrap();
                rec.bands.is_some()
            })
            .count() as u64,
        mm(SECTION_DOCS),
        txn.open_table(SECTIONS).unwrap().len().unwrap(),
    ]
}
