//! Typed access to all tables inside one write transaction (opened once per transaction, so
//! a batch of thousands of sections does not reopen tables per row) and read helpers.

use redb::{
    ReadOnlyMultimapTable, ReadOnlyTable, ReadTransaction, ReadableMultimapTable, ReadableTable,
    WriteTransaction,
};

use super::journal::{Logged, LoggedMultimap, Record, TableId};
use super::tables::*;
use crate::error::{KbError, Result};
use crate::types::records::{self, ChangeKind, ChangeRecord, DocumentRecord, SectionRecord};

/// Up to this many documents, `WriteTables::holds` looks for the document among the section's;
/// past it, for the section in the document's manifest.
pub(crate) const HOLDS_SCAN_DOCS: u64 = 64;

pub struct WriteTables<'t> {
    pub sections: Logged<'t, &'static str, &'static [u8]>,
    content: Logged<'t, u64, &'static [u8]>,
    /// The sequence the next stored content takes (read from the table's last key when first
    /// needed).
    next_content_seq: Option<u64>,
    pub documents: Logged<'t, &'static str, &'static [u8]>,
    pub section_docs: LoggedMultimap<'t, &'static str, &'static str>,
    pub tags: LoggedMultimap<'t, &'static str, &'static str>,
    pub changes: Logged<'t, u64, &'static [u8]>,
    /// The committed in-memory indexes (bands, source keys), for lookups during the write
    /// (None: not loaded for this write, which then looks nothing up in them).
    pub indexes: Option<&'t crate::index::memory::SectionIndexes>,
    /// Source-key changes of this transaction, applied to the index once it commits.
    source_keys: crate::index::source_keys::PendingSourceKeys,
    /// Shingle sets of recent sections, for the exact check of near-duplicate candidates.
    pub shingle_cache: Option<&'t crate::index::near_dup::ShingleCache>,
    /// The database's content dictionary, which new content is compressed with (None: it has
    /// none yet; src/kb/dictionary.rs).
    pub dictionary: Option<&'static super::content_codec::Dictionary>,
    /// Band index changes of this transaction, applied to the index once it commits (pushed by
    /// `band_add` / `band_remove`).
    pub band_changes: Vec<crate::index::near_dup::BandChange>,
    /// The sections whose last band change in this transaction is a removal (so that asking
    /// stays O(1) in a batch of thousands of writes).
    bands_removed: std::collections::HashSet<String>,
    /// The sections added by this transaction, by band (lookups within a batch).
    pub pending_bands: crate::index::near_dup::BandIndex,
    pub refs_out: Logged<'t, (&'static str, u32), &'static [u8]>,
    pub refs_in: LoggedMultimap<'t, &'static str, &'static str>,
    next_seq: u64,
    /// The last change logged in this transaction for each section and each document, so that
    /// a batch logs one entry where the final state is all a reader needs.
    logged_sections: std::collections::HashMap<String, ChangeKind>,
    logged_documents: std::collections::HashMap<String, ChangeKind>,
    now: String,
    /// Document manifests changed in this transaction, written once by `flush` (a batch that
    /// appends many sections to one document must not rewrite its manifest per section).
    /// `None` = removed.
    dirty_documents: std::collections::HashMap<String, Option<DocumentRecord>>,
    /// Sections that lost a document in this transaction: `flush` collects those that no
    /// document holds any more and that were never learned on their own, so detached text
    /// leaves search in the transaction that detached it (docs/decisions.md).
    maybe_detached: std::collections::BTreeSet<String>,
    /// The sections of committed manifests `holds` read in this transaction, by docid: a batch
    /// that learns a large document's sections again asks about the same manifest once per
    /// section, and decoding it each time made that quadratic. Only consulted for documents
    /// this transaction has not changed (those are in `dirty_documents`), and emptied when
    /// `flush` writes the changed ones.
    held_by: std::cell::RefCell<
        std::collections::HashMap<String, std::rc::Rc<std::collections::HashSet<String>>>,
    >,
    /// The transaction, for tables only some writes use (folder sync records).
    txn: &'t WriteTransaction,
    /// Whether the transaction was handed out (`txn`): its changes then escape the log, and
    /// the write must commit durably instead of through the journal.
    unlogged: std::cell::Cell<bool>,
}

impl<'t> WriteTables<'t> {
    /// Record that this transaction adds `kbid` with band `keys` to the band index.
    pub fn band_add(&mut self, kbid: &str, keys: crate::index::near_dup::BandKeys) {
        self.bands_removed.remove(kbid);
        self.band_changes
            .push(crate::index::near_dup::BandChange::Add(
                kbid.to_string(),
                keys,
            ));
    }

    /// Record that this transaction removes `kbid` (band `keys`) from the band index.
    pub fn band_remove(&mut self, kbid: &str, keys: crate::index::near_dup::BandKeys) {
        self.bands_removed.insert(kbid.to_string());
        self.band_changes
            .push(crate::index::near_dup::BandChange::Remove(
                kbid.to_string(),
                keys,
            ));
    }

    /// Whether this transaction removed `kbid` from the band index (and did not add it again).
    pub fn band_removed(&self, kbid: &str) -> bool {
        self.bands_removed.contains(kbid)
    }

    /// The transaction these tables belong to (to open a table only some writes need).
    pub fn txn(&self) -> &'t WriteTransaction {
        self.unlogged.set(true);
        self.txn
    }

    pub fn open(txn: &'t WriteTransaction, now: String) -> Result<Self> {
        Self::open_logging(txn, now, false)
    }

    /// `open`, recording every change for the write journal when `logging` (`take_record`).
    pub fn open_logging(txn: &'t WriteTransaction, now: String, logging: bool) -> Result<Self> {
        let changes = Logged::new(txn.open_table(CHANGES)?, logging);
        let next_seq = changes.last()?.map(|(k, _)| k.value() + 1).unwrap_or(1);
        Ok(WriteTables {
            sections: Logged::new(txn.open_table(SECTIONS)?, logging),
            content: Logged::new(txn.open_table(CONTENT)?, logging),
            next_content_seq: None,
            documents: Logged::new(txn.open_table(DOCUMENTS)?, logging),
            section_docs: LoggedMultimap::new(txn.open_multimap_table(SECTION_DOCS)?, logging),
            tags: LoggedMultimap::new(txn.open_multimap_table(TAGS)?, logging),
            changes,
            indexes: None,
            source_keys: Default::default(),
            shingle_cache: None,
            dictionary: None,
            band_changes: Vec::new(),
            bands_removed: Default::default(),
            pending_bands: Default::default(),
            refs_out: Logged::new(txn.open_table(REFS_OUT)?, logging),
            refs_in: LoggedMultimap::new(txn.open_multimap_table(REFS_IN)?, logging),
            next_seq,
            logged_sections: Default::default(),
            logged_documents: Default::default(),
            now,
            dirty_documents: std::collections::HashMap::new(),
            maybe_detached: Default::default(),
            held_by: Default::default(),
            txn,
            unlogged: std::cell::Cell::new(false),
        })
    }

    /// The changes recorded since `open_logging` (call after `flush`), or None when some
    /// escaped the log (the transaction was handed out): such a write must commit durably.
    pub fn take_record(&mut self, schema: u32) -> Option<Record> {
        if self.unlogged.get() {
            return None;
        }
        let tables = vec![
            (TableId::Sections, self.sections.take_log()),
            (TableId::Content, self.content.take_log()),
            (TableId::Documents, self.documents.take_log()),
            (TableId::SectionDocs, self.section_docs.take_log()),
            (TableId::Tags, self.tags.take_log()),
            (TableId::Changes, self.changes.take_log()),
            (TableId::RefsOut, self.refs_out.take_log()),
            (TableId::RefsIn, self.refs_in.take_log()),
        ]
        .into_iter()
        .filter(|(_, ops)| !ops.is_empty())
        .collect();
        Some(Record { schema, tables })
    }

    /// The timestamp of this transaction (RFC 3339 UTC).
    pub fn now(&self) -> &str {
        &self.now
    }

    pub fn section(&self, kbid: &str) -> Result<Option<SectionRecord>> {
        get_record(&*self.sections, "sections", kbid)
    }

    pub fn put_section(&mut self, kbid: &str, rec: &SectionRecord) -> Result<()> {
        self.sections
            .insert(kbid, records::encode_section(kbid, rec).as_slice())?;
        Ok(())
    }

    pub fn document(&self, docid: &str) -> Result<Option<DocumentRecord>> {
        match self.dirty_documents.get(docid) {
            Some(cached) => Ok(cached.clone()),
            None => get_record(&*self.documents, "documents", docid),
        }
    }

    pub fn put_document(&mut self, docid: &str, rec: &DocumentRecord) -> Result<()> {
        self.dirty_documents
            .insert(docid.to_string(), Some(rec.clone()));
        Ok(())
    }

    /// The manifest of `docid` (None when it does not exist), cached for in-place changes that
    /// `flush` writes.
    pub fn document_mut(&mut self, docid: &str) -> Result<&mut Option<DocumentRecord>> {
        if !self.dirty_documents.contains_key(docid) {
            let rec = get_record(&*self.documents, "documents", docid)?;
            self.dirty_documents.insert(docid.to_string(), rec);
        }
        Ok(self.dirty_documents.get_mut(docid).expect("inserted above"))
    }

    pub fn remove_document(&mut self, docid: &str) -> Result<()> {
        self.dirty_documents.insert(docid.to_string(), None);
        Ok(())
    }

    /// Write the changed document manifests. Call before the transaction commits (through
    /// `writes::finish`, which first collects the sections the transaction detached).
    pub fn flush(&mut self) -> Result<()> {
        self.held_by.get_mut().clear();
        for (docid, rec) in std::mem::take(&mut self.dirty_documents) {
            match rec {
                Some(rec) => {
                    self.documents
                        .insert(docid.as_str(), records::encode(&rec).as_slice())?;
                }
                None => {
                    self.documents.remove(docid.as_str())?;
                }
            }
        }
        Ok(())
    }

    /// The content of section `kbid` (None: no such section, or its content is missing), not
    /// verified against its kbid (near-duplicate comparisons: a damaged candidate must not fail
    /// an unrelated write).
    pub fn content_unverified(&self, kbid: &str) -> Result<Option<Vec<u8>>> {
        match self.section(kbid)? {
            Some(rec) => record_content_unverified(&*self.content, &rec),
            None => Ok(None),
        }
    }

    /// The content a section record names (None: missing), verified (`record_content`).
    pub fn content_of(&self, rec: &SectionRecord) -> Result<Option<Vec<u8>>> {
        record_content(&*self.content, rec)
    }

    /// Store content of `section_type` under the next content sequence, which it returns (for
    /// the record's `content_seq`; the record's `size` must be `content.len()`, which tells how
    /// the row reads): compressed with the database's dictionary when that is shorter
    /// (src/store/content_codec.rs).
    pub fn put_content(&mut self, section_type: &str, content: &[u8]) -> Result<u64> {
        let row = super::content_codec::compress(section_type, content, self.dictionary);
        self.insert_content(row.as_deref().unwrap_or(content))
    }

    /// `put_content` with the row its preparation compressed (`compressed`, None: as is) with
    /// the dictionary `compressed_with` (None: none), which is stored unless the database has
    /// got another dictionary since.
    pub fn put_prepared_content(
        &mut self,
        section_type: &str,
        content: &[u8],
        compressed: Option<&[u8]>,
        compressed_with: Option<u32>,
    ) -> Result<u64> {
        if compressed_with == self.dictionary.map(|d| d.id) {
            self.insert_content(compressed.unwrap_or(content))
        } else {
            self.put_content(section_type, content)
        }
    }

    fn insert_content(&mut self, row: &[u8]) -> Result<u64> {
        let seq = match self.next_content_seq {
            Some(seq) => seq,
            None => self.content.last()?.map_or(1, |(k, _)| k.value() + 1),
        };
        self.content.insert(seq, row)?;
        self.next_content_seq = Some(seq + 1);
        Ok(seq)
    }

    /// The sequence of the last content this transaction stored (None: it stored none).
    pub fn last_content_seq(&self) -> Option<u64> {
        self.next_content_seq.map(|next| next - 1)
    }

    /// Remove the content a section record names.
    pub fn remove_content(&mut self, rec: &SectionRecord) -> Result<()> {
        self.content.remove(rec.content_seq)?;
        Ok(())
    }

    /// The documents that hold section `kbid`: its record's first document
    /// (`SectionRecord::doc`), then those of `section_docs`.
    pub fn docs_of(&self, kbid: &str) -> Result<Vec<String>> {
        let first = self.section(kbid)?.and_then(|r| r.doc);
        Ok(with_first_doc(
            first,
            multimap_values(&*self.section_docs, kbid)?,
        ))
    }

    /// Whether document `docid` holds section `kbid`, whose record is `rec`: its record's
    /// first document, then the section's other documents when they are few, else the
    /// document's manifest. A boilerplate section (a "Contents" heading) is in thousands of
    /// documents, and listing all of them for each new one made a bulk load quadratic in the
    /// repeats; a manifest is as long as its document.
    pub fn holds(&self, docid: &str, kbid: &str, rec: &SectionRecord) -> Result<bool> {
        if rec.doc.as_deref() == Some(docid) {
            return Ok(true);
        }
        let docs = self.section_docs.get(kbid)?;
        if docs.len() <= HOLDS_SCAN_DOCS {
            for d in docs {
                if d?.value() == docid {
                    return Ok(true);
                }
            }
            return Ok(false);
        }
        if let Some(changed) = self.dirty_documents.get(docid) {
            return Ok(changed.as_ref().is_some_and(|d| d.lists(kbid)));
        }
        let known = self.held_by.borrow().get(docid).cloned();
        let sections = match known {
            Some(sections) => sections,
            None => {
                let doc = get_record::<DocumentRecord>(&*self.documents, "documents", docid)?;
                let sections = std::rc::Rc::new(
                    doc.map(|d| d.kbids)
                        .unwrap_or_default()
                        .into_iter()
                        .collect(),
                );
                self.held_by
                    .borrow_mut()
                    .insert(docid.to_string(), std::rc::Rc::clone(&sections));
                sections
            }
        };
        Ok(sections.contains(kbid))
    }

    /// Record that document `docid` holds section `kbid` (its manifest, the document side,
    /// is the caller's to change).
    pub fn add_membership(&mut self, docid: &str, kbid: &str) -> Result<()> {
        self.section_docs.insert(kbid, docid)?;
        self.log(ChangeKind::SectionDocsChanged, kbid)?;
        Ok(())
    }

    /// Record that document `docid` no longer holds section `kbid` (see `add_membership`):
    /// in the section's record when it is its first document, else in `section_docs`.
    pub fn remove_membership(&mut self, docid: &str, kbid: &str) -> Result<()> {
        match self.section(kbid)? {
            Some(mut rec) if rec.doc.as_deref() == Some(docid) => {
                rec.doc = None;
                self.put_section(kbid, &rec)?;
            }
            _ => {
                self.section_docs.remove(kbid, docid)?;
            }
        }
        self.log(ChangeKind::SectionDocsChanged, kbid)?;
        self.maybe_detached.insert(kbid.to_string());
        Ok(())
    }

    /// The sections that lost a document in this transaction so far
    /// (`writes::document::collect_detached` removes those nothing holds any more).
    pub fn take_maybe_detached(&mut self) -> std::collections::BTreeSet<String> {
        std::mem::take(&mut self.maybe_detached)
    }

    /// Whether some document holds `kbid`, whose record is `rec`.
    pub fn section_held(&self, kbid: &str, rec: &SectionRecord) -> Result<bool> {
        Ok(rec.doc.is_some() || self.section_docs.get(kbid)?.next().is_some())
    }

    /// Record that this transaction stores `kbid` under the source key `key`.
    pub fn source_key_add(&mut self, key: &str, kbid: &str) {
        self.source_keys.add(key, kbid);
    }

    /// Record that this transaction removes `kbid` from under the source key `key`.
    pub fn source_key_remove(&mut self, key: &str, kbid: &str) {
        self.source_keys.remove(key, kbid);
    }

    /// The committed band index (None: not loaded for this write).
    pub fn band_index(&self) -> Option<&'t crate::index::near_dup::BandIndex> {
        self.indexes.map(|i| &i.bands)
    }

    /// The committed source-key index. A write path that looks up source keys takes a loaded
    /// turn (`Kb::loaded_index_turn`); one that did not cannot answer.
    fn source_key_index(&self) -> Result<&'t crate::index::source_keys::SourceKeyIndex> {
        self.indexes.map(|i| &i.source_keys).ok_or_else(|| {
            crate::error::KbError::Storage(
                "a source-key lookup in a write that did not load the in-memory indexes".into(),
            )
        })
    }

    /// The sections under the source key `key` (in kbid order), this transaction's changes
    /// included.
    pub fn kbids_with_source_key(&self, key: &str) -> Result<Vec<String>> {
        let index = self.source_key_index()?;
        Ok(self.source_keys.kbids(key, index.kbids(key)))
    }

    /// Whether a section other than `kbid` has the source key `key`, this transaction's
    /// changes included (stops at the first: a title learned thousands of times has as many).
    pub fn source_key_taken(&self, key: &str, kbid: &str) -> Result<bool> {
        let index = self.source_key_index()?;
        Ok(self.source_keys.taken_by_other(key, kbid, index.kbids(key)))
    }

    /// The changes this transaction made to the in-memory indexes, to apply once it commits.
    pub fn take_index_changes(&mut self) -> crate::index::memory::IndexChanges {
        crate::index::memory::IndexChanges {
            bands: std::mem::take(&mut self.band_changes),
            source_keys: self.source_keys.take_changes(),
        }
    }

    /// Append a change to the log, unless this transaction already logged one that says as
    /// much: every reader of the log (the lexical index, the document index, validations,
    /// embeddings, subscribers) reads the committed state an entry names, so a section added
    /// and then attached to a document, or a document appended to a thousand times in one
    /// batch, needs one entry, not one per step. A removal is always logged.
    pub fn log(&mut self, kind: ChangeKind, id: &str) -> Result<()> {
        use ChangeKind::*;
        let logged = if matches!(
            kind,
            SectionAdded | SectionChanged | SectionRemoved | SectionDocsChanged
        ) {
            &mut self.logged_sections
        } else {
            &mut self.logged_documents
        };
        // What an entry already logged in this transaction says for this one: an addition or a
        // change covers a later change (readers read the committed state), and any of the three
        // covers a change of the section's documents; a change after a change of documents is
        // logged (the lexical index skips the latter).
        let said = matches!(
            (logged.get(id), kind),
            (Some(SectionAdded | SectionChanged), SectionChanged)
                | (
                    Some(SectionAdded | SectionChanged | SectionDocsChanged),
                    SectionDocsChanged
                )
                | (Some(DocumentChanged), DocumentChanged)
        );
        if said {
            return Ok(());
        }
        logged.insert(id.to_string(), kind);
        let seq = self.next_seq;
        let rec = ChangeRecord {
            kind,
            id: id.to_string(),
            at: self.now.clone(),
        };
        self.changes.insert(seq, records::encode(&rec).as_slice())?;
        self.next_seq += 1;
        Ok(())
    }
}

/// Read-only views of the tables, for snapshot reads.
pub struct ReadTables {
    pub sections: ReadOnlyTable<&'static str, &'static [u8]>,
    pub content: ReadOnlyTable<u64, &'static [u8]>,
    pub documents: ReadOnlyTable<&'static str, &'static [u8]>,
    pub section_docs: ReadOnlyMultimapTable<&'static str, &'static str>,
    pub changes: ReadOnlyTable<u64, &'static [u8]>,
    pub refs_out: ReadOnlyTable<(&'static str, u32), &'static [u8]>,
    pub refs_in: ReadOnlyMultimapTable<&'static str, &'static str>,
}

impl ReadTables {
    pub fn open(txn: &ReadTransaction) -> Result<Self> {
        Ok(ReadTables {
            sections: txn.open_table(SECTIONS)?,
            content: txn.open_table(CONTENT)?,
            documents: txn.open_table(DOCUMENTS)?,
            section_docs: txn.open_multimap_table(SECTION_DOCS)?,
            changes: txn.open_table(CHANGES)?,
            refs_out: txn.open_table(REFS_OUT)?,
            refs_in: txn.open_multimap_table(REFS_IN)?,
        })
    }

    pub fn section(&self, kbid: &str) -> Result<Option<SectionRecord>> {
        get_record(&self.sections, "sections", kbid)
    }

    pub fn document(&self, docid: &str) -> Result<Option<DocumentRecord>> {
        get_record(&self.documents, "documents", docid)
    }

    /// The content of section `kbid` (None: no such section, or its content is missing),
    /// verified (`record_content`).
    pub fn content(&self, kbid: &str) -> Result<Option<Vec<u8>>> {
        match self.section(kbid)? {
            Some(rec) => self.content_of(&rec),
            None => Ok(None),
        }
    }

    /// `content` without the verification (near-duplicate comparisons).
    pub fn content_unverified(&self, kbid: &str) -> Result<Option<Vec<u8>>> {
        match self.section(kbid)? {
            Some(rec) => record_content_unverified(&self.content, &rec),
            None => Ok(None),
        }
    }

    /// The content a section record names (None: missing), verified (`record_content`).
    pub fn content_of(&self, rec: &SectionRecord) -> Result<Option<Vec<u8>>> {
        record_content(&self.content, rec)
    }

    /// The content a section record names, as stored (`check` compares it itself).
    pub fn content_unverified_of(&self, rec: &SectionRecord) -> Result<Option<Vec<u8>>> {
        record_content_unverified(&self.content, rec)
    }

    /// The documents that hold section `kbid` (see `WriteTables::docs_of`).
    pub fn docs_of(&self, kbid: &str) -> Result<Vec<String>> {
        let first = match self.sections.get(kbid)? {
            Some(v) => records::decode::<SectionRecord>("sections", kbid, v.value())?.doc,
            None => None,
        };
        Ok(with_first_doc(
            first,
            multimap_values(&self.section_docs, kbid)?,
        ))
    }

    /// `docs_of` for a caller that has read the section's record `rec` already.
    pub fn docs_of_section(&self, kbid: &str, rec: &SectionRecord) -> Result<Vec<String>> {
        Ok(with_first_doc(
            rec.doc.clone(),
            multimap_values(&self.section_docs, kbid)?,
        ))
    }

    pub fn last_seq(&self) -> Result<u64> {
        Ok(self.changes.last()?.map(|(k, _)| k.value()).unwrap_or(0))
    }
}

/// The content a section record names in `section_content` (None: missing), verified: its
/// SHA-256 must be the record's checksum (whose first 128 bits are the kbid). Every read that
/// answers a user (retrieve, content, recall, search snippets, edits) goes through here, so a
/// damaged section is an error naming it (`damaged`), never served as if it were its content.
/// The cost: one SHA-256 of the bytes read (docs/performance.md).
pub fn record_content(
    table: &impl ReadableTable<u64, &'static [u8]>,
    rec: &SectionRecord,
) -> Result<Option<Vec<u8>>> {
    let Some(bytes) = record_content_unverified(table, rec)? else {
        return Ok(None);
    };
    let digest = crate::types::kbid::sha256(&bytes);
    if crate::types::kbid::hex(&digest) != rec.checksum {
        return Err(content_damaged(rec, &digest, bytes.len()));
    }
    Ok(Some(bytes))
}

/// The content a section record names, as stored: for what is derived from it (the lexical
/// index, embeddings, collection indexes), which must not stop at one damaged section, and for
/// `check`, which reports it.
pub fn record_content_unverified(
    table: &impl ReadableTable<u64, &'static [u8]>,
    rec: &SectionRecord,
) -> Result<Option<Vec<u8>>> {
    Ok(table.get(rec.content_seq)?.map(|g| {
        let row = g.value();
        // A row that does not decode is given as stored: its length or checksum then tells the
        // caller it is damaged.
        super::content_codec::decode(row, rec.size).map_or_else(|| row.to_vec(), |c| c.into_owned())
    }))
}

/// The error for content that does not hash to its record's checksum, naming the section by
/// the kbid the checksum gives.
fn content_damaged(rec: &SectionRecord, digest: &[u8; 32], len: usize) -> KbError {
    let kbid = decode_hex(&rec.checksum)
        .map(|d| crate::types::kbid::encode_kbid(&d))
        .unwrap_or_else(|| format!("with checksum {}", rec.checksum));
    KbError::damaged(format!(
        "section {kbid}: its stored content ({len} bytes, row {}) hashes to {}, not to its kbid",
        rec.content_seq,
        crate::types::kbid::encode_kbid(digest)
    ))
}

fn decode_hex(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let nib = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = nib(b[2 * i])? << 4 | nib(b[2 * i + 1])?;
    }
    Some(out)
}

fn get_record<T: records::Record>(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    name: &'static str,
    key: &str,
) -> Result<Option<T>> {
    match table.get(key)? {
        Some(g) => Ok(Some(records::decode(name, key, g.value())?)),
        None => Ok(None),
    }
}

/// A section's documents: its record's first one, then the others, in order of their docids
/// (as `section_docs` lists them).
fn with_first_doc(first: Option<String>, mut others: Vec<String>) -> Vec<String> {
    if let Some(first) = first {
        let at = others.partition_point(|d| *d < first);
        others.insert(at, first);
    }
    others
}

pub(crate) fn multimap_values(
    table: &impl ReadableMultimapTable<&'static str, &'static str>,
    key: &str,
) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for v in table.get(key)? {
        out.push(v?.value().to_string());
    }
    Ok(out)
}
