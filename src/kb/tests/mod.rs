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

/// A temporary database folder holding `worker.toml` with `config` (opened by the caller).
fn folder_with_config(config: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join(crate::config::CONFIG_FILE), config).unwrap();
    tmp
}

/// The database of `dir` as a kill -9 would leave it now: its store and journal files copied
/// as they are (what the process wrote is in the page cache), opened in a folder of their own,
/// which replays the journal.
fn opened_as_if_killed(dir: &std::path::Path) -> (tempfile::TempDir, Kb) {
    let copy = tempfile::tempdir().unwrap();
    for f in [store::DB_FILE, store::journal::JOURNAL_FILE] {
        std::fs::copy(dir.join(f), copy.path().join(f)).unwrap();
    }
    let kb = Kb::open(copy.path()).unwrap();
    (copy, kb)
}

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
    let records_where = |keep: fn(&types::records::SectionRecord) -> bool| {
        txn.open_table(SECTIONS)
            .unwrap()
            .iter()
            .unwrap()
            .filter(|row| {
                let (k, v) = row.as_ref().unwrap();
                keep(&types::records::decode("sections", k.value(), v.value()).unwrap())
            })
            .count() as u64
    };
    [
        mm(TAGS),
        // Entries of the in-memory source-key index (migration 0011).
        kb.loaded_index_turn()
            .unwrap()
            .get()
            .map_or(0, |i| i.source_keys.len() as u64),
        // Sections whose record holds band keys (migration 0009).
        records_where(|rec| rec.bands.is_some()),
        // Memberships: rows of `section_docs`, and records holding their first document
        // (migration 0022).
        mm(SECTION_DOCS) + records_where(|rec| rec.doc.is_some()),
        txn.open_table(SECTIONS).unwrap().len().unwrap(),
    ]
}
