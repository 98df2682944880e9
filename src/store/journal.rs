//! The write journal: a redo log in front of redb for the daemon's group commits
//! (docs/storage.md, "The write journal").
//!
//! A group commit of the daemon writes the table changes of its transaction (every insert and
//! removal, as the bytes redb stores) to `kbdb.journal` and fsyncs that file — one sequential
//! append — before it commits the transaction in redb without an fsync of its own
//! (`Durability::None`) and acknowledges the writes. Every few milliseconds a group commits
//! durably in redb instead (a checkpoint), which makes every earlier commit durable, and the
//! journal starts over. Each journaled transaction also records its number in `meta`
//! (`journal_seq`), so the durable state names the last journal record it holds.
//!
//! Opening the database replays what redb lost: the records after the durable `journal_seq`,
//! in order, each on exactly the state it was made on. A record is `[payload length: u32 LE]
//! [seq: u64 LE][check: 8 bytes of SHA-256 over seq and payload][payload: postcard]`; the replay
//! stops at the first record that is torn, fails its check or does not follow the previous
//! one's number (bytes left from before the journal started over).

use std::borrow::Borrow;
use std::fs::File;
use std::path::{Path, PathBuf};

use redb::{
    Database, Key, MultimapTable, MultimapTableDefinition, ReadableTable, Table, TableDefinition,
    Value, WriteTransaction,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::faults::{FaultPlan, Op as IoOp, Target};
use super::tables::*;
use crate::error::{KbError, Result};

/// File name of the journal inside the database folder.
pub const JOURNAL_FILE: &str = "kbdb.journal";
/// `meta` key of the number of the last journal record the database holds (u64 LE).
pub const META_JOURNAL_SEQ: &str = "journal_seq";

const HEADER: usize = 4 + 8 + 8;
/// A record larger than this is not one of ours (a group holds at most `max_batch` writes).
const MAX_RECORD: usize = 1 << 30;

/// One change to one table, as the bytes redb stores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Op {
    Insert(Vec<u8>, Vec<u8>),
    Remove(Vec<u8>),
    /// Multimap tables: add or remove one value under a key.
    MultiInsert(Vec<u8>, Vec<u8>),
    MultiRemove(Vec<u8>, Vec<u8>),
}

/// The tables a group commit writes, by number in a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TableId {
    Sections,
    Content,
    Documents,
    /// `doc_sections`, in journals of schema 18 and before (replayed before migration 0019
    /// drops the table; never written since).
    DocSections,
    SectionDocs,
    Tags,
    Changes,
    RefsOut,
    RefsIn,
}

/// The changes of one transaction: per table, in the order they were made (tables are
/// independent, so only the order within a table matters).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The schema the changes were made under: replaying them on another one is refused.
    pub schema: u32,
    pub tables: Vec<(TableId, Vec<Op>)>,
}

impl Record {
    pub fn is_empty(&self) -> bool {
        self.tables.iter().all(|(_, ops)| ops.is_empty())
    }
}

/// A table of a write transaction that records its changes when asked to (`log` is Some).
/// Reads go through `Deref`; changes only through the methods below, so none escapes the log.
pub struct Logged<'t, K: Key + 'static, V: Value + 'static> {
    table: Table<'t, K, V>,
    log: Option<Vec<Op>>,
}

impl<'t, K: Key + 'static, V: Value + 'static> Logged<'t, K, V> {
    pub fn new(table: Table<'t, K, V>, logging: bool) -> Self {
        Logged {
            table,
            log: logging.then(Vec::new),
        }
    }

    pub fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> std::result::Result<(), redb::StorageError> {
        if let Some(log) = &mut self.log {
            log.push(Op::Insert(
                K::as_bytes(key.borrow()).as_ref().to_vec(),
                V::as_bytes(value.borrow()).as_ref().to_vec(),
            ));
        }
        self.table.insert(key, value)?;
        Ok(())
    }

    pub fn remove<'k>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
    ) -> std::result::Result<(), redb::StorageError> {
        if let Some(log) = &mut self.log {
            log.push(Op::Remove(K::as_bytes(key.borrow()).as_ref().to_vec()));
        }
        self.table.remove(key)?;
        Ok(())
    }

    pub fn take_log(&mut self) -> Vec<Op> {
        self.log.as_mut().map(std::mem::take).unwrap_or_default()
    }
}

impl<'t, K: Key + 'static, V: Value + 'static> std::ops::Deref for Logged<'t, K, V> {
    type Target = Table<'t, K, V>;
    fn deref(&self) -> &Self::Target {
        &self.table
    }
}

/// A multimap table of a write transaction that records its changes when asked to.
pub struct LoggedMultimap<'t, K: Key + 'static, V: Key + 'static> {
    table: MultimapTable<'t, K, V>,
    log: Option<Vec<Op>>,
}

impl<'t, K: Key + 'static, V: Key + 'static> LoggedMultimap<'t, K, V> {
    pub fn new(table: MultimapTable<'t, K, V>, logging: bool) -> Self {
        LoggedMultimap {
            table,
            log: logging.then(Vec::new),
        }
    }

    pub fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> std::result::Result<(), redb::StorageError> {
        if let Some(log) = &mut self.log {
            log.push(Op::MultiInsert(
                K::as_bytes(key.borrow()).as_ref().to_vec(),
                V::as_bytes(value.borrow()).as_ref().to_vec(),
            ));
        }
        self.table.insert(key, value)?;
        Ok(())
    }

    pub fn remove<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> std::result::Result<(), redb::StorageError> {
        if let Some(log) = &mut self.log {
            log.push(Op::MultiRemove(
                K::as_bytes(key.borrow()).as_ref().to_vec(),
                V::as_bytes(value.borrow()).as_ref().to_vec(),
            ));
        }
        self.table.remove(key, value)?;
        Ok(())
    }

    pub fn take_log(&mut self) -> Vec<Op> {
        self.log.as_mut().map(std::mem::take).unwrap_or_default()
    }
}

impl<'t, K: Key + 'static, V: Key + 'static> std::ops::Deref for LoggedMultimap<'t, K, V> {
    type Target = MultimapTable<'t, K, V>;
    fn deref(&self) -> &Self::Target {
        &self.table
    }
}

fn corrupt(what: impl std::fmt::Display) -> KbError {
    KbError::Storage(format!("cannot replay the write journal: {what}"))
}

fn apply_table<K: Key + 'static, V: Value + 'static>(
    txn: &WriteTransaction,
    def: TableDefinition<K, V>,
    ops: &[Op],
) -> Result<()> {
    let mut t = txn.open_table(def)?;
    for op in ops {
        match op {
            Op::Insert(k, v) => {
                t.insert(K::from_bytes(k), V::from_bytes(v))?;
            }
            Op::Remove(k) => {
                t.remove(K::from_bytes(k))?;
            }
            _ => return Err(corrupt("a multimap change to a table")),
        }
    }
    Ok(())
}

fn apply_multimap<K: Key + 'static, V: Key + 'static>(
    txn: &WriteTransaction,
    def: MultimapTableDefinition<K, V>,
    ops: &[Op],
) -> Result<()> {
    let mut t = txn.open_multimap_table(def)?;
    for op in ops {
        match op {
            Op::MultiInsert(k, v) => {
                t.insert(K::from_bytes(k), V::from_bytes(v))?;
            }
            Op::MultiRemove(k, v) => {
                t.remove(K::from_bytes(k), V::from_bytes(v))?;
            }
            _ => return Err(corrupt("a table change to a multimap")),
        }
    }
    Ok(())
}

/// Apply a record's changes inside `txn`.
pub fn apply(txn: &WriteTransaction, record: &Record) -> Result<()> {
    for (table, ops) in &record.tables {
        match table {
            TableId::Sections => apply_table(txn, SECTIONS, ops)?,
            TableId::Content => apply_table(txn, CONTENT, ops)?,
            TableId::Documents => apply_table(txn, DOCUMENTS, ops)?,
            TableId::Changes => apply_table(txn, CHANGES, ops)?,
            TableId::RefsOut => apply_table(txn, REFS_OUT, ops)?,
            TableId::DocSections => apply_multimap(txn, DOC_SECTIONS, ops)?,
            TableId::SectionDocs => apply_multimap(txn, SECTION_DOCS, ops)?,
            TableId::Tags => apply_multimap(txn, TAGS, ops)?,
            TableId::RefsIn => apply_multimap(txn, REFS_IN, ops)?,
        }
    }
    Ok(())
}

/// The number of the last journal record the state of `txn` holds (0: none).
pub fn applied_seq(txn: &WriteTransaction) -> Result<u64> {
    let meta = txn.open_table(META)?;
    Ok(read_seq(
        meta.get(META_JOURNAL_SEQ)?.map(|v| v.value().to_vec()),
    ))
}

/// Record in `txn` that its state holds the journal up to record `seq`.
pub fn set_applied_seq(txn: &WriteTransaction, seq: u64) -> Result<()> {
    let mut meta = txn.open_table(META)?;
    meta.insert(META_JOURNAL_SEQ, seq.to_le_bytes().as_slice())?;
    Ok(())
}

fn read_seq(v: Option<Vec<u8>>) -> u64 {
    v.and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
        .map_or(0, u64::from_le_bytes)
}

fn check_of(seq: u64, payload: &[u8]) -> [u8; 8] {
    let mut h = Sha256::new();
    h.update(seq.to_le_bytes());
    h.update(payload);
    let d = h.finalize();
    d[..8].try_into().expect("a SHA-256 digest has 32 bytes")
}

/// The bytes of one journal record, or None when its payload is larger than a replay accepts
/// (`MAX_RECORD`: a group of many large writes); such a group must commit durably instead.
pub fn encode_record(seq: u64, record: &Record) -> Option<Vec<u8>> {
    encode_record_within(seq, record, MAX_RECORD)
}

fn encode_record_within(seq: u64, record: &Record, max: usize) -> Option<Vec<u8>> {
    // The payload goes straight after room for the header, which is filled in afterwards.
    let out = postcard::to_extend(record, vec![0u8; HEADER]).expect("a record always encodes");
    let len = out.len() - HEADER;
    if len > max {
        return None;
    }
    let mut out = out;
    let check = check_of(seq, &out[HEADER..]);
    out[..4].copy_from_slice(&(len as u32).to_le_bytes());
    out[4..12].copy_from_slice(&seq.to_le_bytes());
    out[12..HEADER].copy_from_slice(&check);
    Some(out)
}

/// The record at `at` when it is whole and passes its check: its number, its payload, and where
/// the next one starts.
fn record_at(bytes: &[u8], at: usize) -> Option<(u64, &[u8], usize)> {
    if bytes.len().checked_sub(at)? < HEADER {
        return None;
    }
    let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
    let seq = u64::from_le_bytes(bytes[at + 4..at + 12].try_into().expect("8 bytes"));
    if len > MAX_RECORD || bytes.len() - at - HEADER < len {
        return None;
    }
    let payload = &bytes[at + HEADER..at + HEADER + len];
    (bytes[at + 12..at + HEADER] == check_of(seq, payload)).then_some((
        seq,
        payload,
        at + HEADER + len,
    ))
}

/// The records of a journal's bytes from its start, in order, up to the first that is torn or
/// fails its check (each with its offset), and the offset where that one starts (the length
/// when none).
fn chain(bytes: &[u8]) -> (Vec<(usize, u64, Record)>, usize) {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some((seq, payload, next)) = record_at(bytes, at) {
        match postcard::from_bytes::<Record>(payload) {
            Ok(r) => out.push((at, seq, r)),
            Err(_) => break,
        }
        at = next;
    }
    (out, at)
}

/// The records of a journal's bytes, in order, up to the first that is torn or fails its check.
pub fn decode_records(bytes: &[u8]) -> Vec<(u64, Record)> {
    chain(bytes).0.into_iter().map(|(_, s, r)| (s, r)).collect()
}

/// How far past the last replayed number a later record's number may be and still be taken for
/// one of this journal's (a record is at least `HEADER` bytes, and a journal starts over at
/// 64 MiB: far fewer records than this).
const LATER_WINDOW: u64 = 1 << 24;

/// A whole record with a valid check and a number in `(after, after + LATER_WINDOW]`, at or
/// after byte `from`: its offset and number. The first cheap test is the number (eight bytes
/// of data rarely fall in the window), then the length, then the check.
/// The checks it hashes are bounded (twice the file and 64 MiB): bytes crafted to look like
/// many candidates (an image's) cannot make an open after a crash take hours.
fn later_record(bytes: &[u8], from: usize, after: u64) -> Option<(usize, u64)> {
    later_record_within(bytes, from, after, 2 * bytes.len() + (64 << 20))
}

fn later_record_within(
    bytes: &[u8],
    from: usize,
    after: u64,
    mut budget: usize,
) -> Option<(usize, u64)> {
    let last = bytes.len().checked_sub(HEADER)?;
    for at in from..=last {
        let seq = u64::from_le_bytes(bytes[at + 4..at + 12].try_into().expect("8 bytes"));
        if seq <= after || seq - after > LATER_WINDOW {
            continue;
        }
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        if len > bytes.len() - at - HEADER {
            continue;
        }
        let Some(left) = budget.checked_sub(len) else {
            tracing::warn!("the journal's scan for records past its end stopped at byte {at}");
            return None;
        };
        budget = left;
        if let Some((seq, _, _)) = record_at(bytes, at) {
            return Some((at, seq));
        }
    }
    None
}

/// What is wrong with a journal whose replay must not go on: its records stop (a record torn
/// or failing its check, or a number missing) before a later record that is valid — acknowledged
/// writes that a replay would silently drop.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalDamage {
    /// The number of the last record replayed (or held by the database).
    pub last_good: u64,
    /// Where the bad record (or the record after the gap) starts.
    pub bad_at: usize,
    /// The later valid record: its offset and number.
    pub later_at: usize,
    pub later_seq: u64,
}

impl JournalDamage {
    fn describe(&self, path: &Path) -> String {
        format!(
            "the write journal {} is damaged: its records stop at byte {} after record {}, \
             but a later record ({} at byte {}) is valid, so writes acknowledged after the \
             damage cannot be replayed",
            path.display(),
            self.bad_at,
            self.last_good,
            self.later_seq,
            self.later_at
        )
    }
}

/// Which records of a journal's bytes a replay applies on a database that holds them up to
/// `held`: the records after `held`, in order. A torn or failing record ends them — the normal
/// end of a journal after a crash — unless a later record with a valid check and a higher number
/// follows it (the damage is not at the tail: `JournalDamage`); so does a number missing
/// between two records.
pub fn plan_replay(
    bytes: &[u8],
    held: u64,
) -> std::result::Result<Vec<(u64, Record)>, JournalDamage> {
    let (records, end) = chain(bytes);
    let mut seq = held;
    let mut out = Vec::new();
    for (at, s, record) in records {
        if s <= seq {
            // In the database already, or left from before the journal started over.
            continue;
        }
        if s != seq + 1 {
            return Err(JournalDamage {
                last_good: seq,
                bad_at: at,
                later_at: at,
                later_seq: s,
            });
        }
        out.push((s, record));
        seq = s;
    }
    match later_record(bytes, end, seq) {
        Some((later_at, later_seq)) => Err(JournalDamage {
            last_good: seq,
            bad_at: end,
            later_at,
            later_seq,
        }),
        None => Ok(out),
    }
}

/// Keep a copy of a damaged journal next to it (`kbdb.journal.damaged-<unix time>`), unless one
/// with the same bytes is there already (each refused open would otherwise add one). Returns
/// the copy's path.
fn keep_damaged_copy(path: &Path, bytes: &[u8]) -> Result<PathBuf> {
    let dir = path.parent().unwrap_or(Path::new("."));
    for copy in damaged_copies(dir) {
        if std::fs::metadata(&copy).is_ok_and(|m| m.len() == bytes.len() as u64)
            && std::fs::read(&copy).is_ok_and(|b| b == bytes)
        {
            return Ok(copy);
        }
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let copy = dir.join(format!("{JOURNAL_FILE}.{DAMAGED_SUFFIX}{secs}"));
    super::create_new(&copy)
        .and_then(|mut f| std::io::Write::write_all(&mut f, bytes))
        .map_err(|e| {
            KbError::io(
                format!(
                    "cannot keep a copy of the damaged journal in {}",
                    copy.display()
                ),
                e,
            )
        })?;
    Ok(copy)
}

const DAMAGED_SUFFIX: &str = "damaged-";

/// The copies of damaged journals kept in the database folder `dir` (for `check`).
pub fn damaged_copies(dir: &Path) -> Vec<PathBuf> {
    let prefix = format!("{JOURNAL_FILE}.{DAMAGED_SUFFIX}");
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// Check the journal of `dir` against the number the database holds (`held`) as a replay
/// would, without applying anything: None when a replay would apply all it holds.
pub fn inspect(dir: &Path, held: u64) -> Result<Option<String>> {
    let path = dir.join(JOURNAL_FILE);
    let bytes = match read_journal(&path)? {
        Some(b) => b,
        None => return Ok(None),
    };
    Ok(plan_replay(&bytes, held).err().map(|d| d.describe(&path)))
}

/// The most bytes a journal kbdb wrote can hold: records until the journal reaches the
/// checkpoint size, one more record of at most `MAX_RECORD`, and the zeros the file grew by.
/// A larger file is not one of ours (and reading it whole could exhaust memory: a sparse file
/// takes no disk for its size).
pub const MAX_JOURNAL_BYTES: u64 =
    super::durability::JOURNAL_CHECKPOINT_BYTES + (HEADER + MAX_RECORD) as u64 + GROW;

/// The bytes of the journal file (None: there is none), refusing one larger than any journal
/// kbdb writes (`MAX_JOURNAL_BYTES`) unread.
fn read_journal(path: &Path) -> Result<Option<Vec<u8>>> {
    match crate::files::read_bounded(path, MAX_JOURNAL_BYTES, libc::O_NOFOLLOW) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(match crate::files::too_large(&e) {
            Some(t) => KbError::damaged(format!(
                "the write journal {} is {} bytes, more than any journal kbdb writes (at most \
                 {MAX_JOURNAL_BYTES}): it is not one of kbdb's, and it is not read. To open the \
                 database without it, move it aside",
                path.display(),
                t.len
            )),
            None => super::open_error("read", path, e),
        }),
    }
}

/// Replay the journal of `dir` into `db`: the records after the durable `journal_seq`, in one
/// durable transaction. Once that commit holds them, every record in the file is in the
/// database: with `empty`, the file is then emptied, so that the next opens have nothing to
/// read; without (a read-only open, whose replay stays in memory), it is left as it is, and a
/// later replay skips what the database holds. Returns how many records were applied. A
/// journal damaged before its tail (`plan_replay`) is refused with a `damaged` error, and a
/// copy of it is kept.
pub fn replay(
    dir: &Path,
    db: &Database,
    schema: u32,
    empty: bool,
    refused: Option<u64>,
) -> Result<u64> {
    let path = dir.join(JOURNAL_FILE);
    let bytes = match read_journal(&path)? {
        Some(b) if !b.is_empty() => b,
        _ => return Ok(0),
    };
    let txn = db.begin_write()?;
    let held = applied_seq(&txn)?;
    // A failed group's record (`refused`, see `Store::refuse_replay`) is not applied, and its
    // number is claimed by this commit, so no later replay applies it either.
    let claim = refused.filter(|&r| r > held);
    let records = match plan_replay(&bytes, held) {
        Ok(r) if claim.is_some() => r.into_iter().filter(|(s, _)| Some(*s) < claim).collect(),
        Ok(r) => r,
        Err(damage) => {
            txn.abort()?;
            let what = damage.describe(&path);
            tracing::error!("{what}");
            let copy = keep_damaged_copy(&path, &bytes)?;
            return Err(KbError::damaged(format!(
                "{what}. A copy is kept in {}. To open the database without the journal's \
                 writes (those since its last checkpoint), move {} aside",
                copy.display(),
                path.display()
            )));
        }
    };
    let mut seq = held;
    let mut applied = 0;
    for (s, record) in &records {
        if record.schema != schema {
            return Err(corrupt(format!(
                "{} holds writes of schema {} and the database is at schema {schema}; \
                 open it with the kbdb that wrote them",
                path.display(),
                record.schema
            )));
        }
        apply(&txn, record)?;
        seq = *s;
        applied += 1;
    }
    if applied > 0 || claim.is_some() {
        set_applied_seq(&txn, claim.map_or(seq, |r| r.max(seq)))?;
        txn.commit()?;
        tracing::info!(
            records = applied,
            refused = claim,
            "replayed the write journal"
        );
    } else {
        txn.abort()?;
    }
    if empty && let Err(e) = super::open_nofollow(&path, true).and_then(|f| f.set_len(0)) {
        // Harmless: the next open reads the file again and skips every record.
        tracing::warn!("cannot empty {} after its replay: {e}", path.display());
    }
    Ok(applied)
}

/// The file grows by this much at a time, written with zeros, so that an append's fsync has no
/// file size or block allocation to write besides the record (ext4 writes the inode otherwise).
const GROW: u64 = 1 << 20;

/// The journal file the daemon's writer appends to. Records are written from the start of the
/// file again after each checkpoint, over older ones (which a replay skips by their number);
/// the file is emptied when the database closes cleanly.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    /// Where the next record goes: the bytes written since the journal last started over.
    offset: u64,
    /// Where the last record appended (or being appended) starts, and its length.
    last: (u64, u64),
    /// The file's length (zeros past the records written).
    len: u64,
    /// The fault plan of a test (None on the normal path).
    plan: Option<FaultPlan>,
}

impl Journal {
    /// Open the journal of `dir`. Its records must all be in the database (the open replayed
    /// them) before the first `append`, which overwrites them: the caller commits durably first.
    pub fn open(dir: &Path, plan: Option<FaultPlan>) -> Result<Journal> {
        let path = dir.join(JOURNAL_FILE);
        let file =
            super::open_nofollow(&path, true).map_err(|e| super::open_error("open", &path, e))?;
        let len = file
            .metadata()
            .map_err(|e| KbError::io(format!("cannot read {}", path.display()), e))?
            .len();
        Ok(Journal {
            path,
            file,
            offset: 0,
            last: (0, 0),
            len,
            plan,
        })
    }

    /// Append a record (`encode_record`) and wait until it is on the disk.
    pub fn append(&mut self, bytes: &[u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let end = self.offset + bytes.len() as u64;
        self.last = (self.offset, bytes.len() as u64);
        let fault = |op, call| match &self.plan {
            None => Ok(()),
            Some(plan) => plan.check(Target::Journal, op, call, true),
        };
        let grow = |len: u64| -> std::io::Result<u64> {
            if end <= len {
                return Ok(len);
            }
            let new_len = end.div_ceil(GROW) * GROW;
            fault(IoOp::Write, "write")?;
            // One page per call: the page cache keeps the folio size of the write that filled
            // it, and a record written into a 2 MiB folio would make its fsync write all 2 MiB.
            let page = [0u8; 4096];
            let mut at = len;
            while at < new_len {
                let n = (new_len - at).min(page.len() as u64) as usize;
                self.file.write_all_at(&page[..n], at)?;
                at += n as u64;
            }
            Ok(new_len)
        };
        let r = grow(self.len).and_then(|len| {
            self.len = len;
            fault(IoOp::Write, "write")?;
            self.file.write_all_at(bytes, self.offset)?;
            fault(IoOp::Sync, "sync_data")?;
            self.file.sync_data()
        });
        r.map_err(|e| {
            let full = crate::error::is_disk_full(&e);
            let why = if full {
                "the disk is full: the database cannot save changes (free some space; reads keep working): "
            } else {
                ""
            };
            KbError::io(format!("{why}cannot write {}", self.path.display()), e)
        })?;
        self.offset = end;
        Ok(())
    }

    /// Take back the last record appended, or being appended, whose group did not commit (it
    /// panicked on the way): its bytes are overwritten with zeros and made durable, so that no
    /// replay (the store's reopen after the panic, or the open after a crash) applies a group
    /// whose writers were told that it failed. A replay's chain of records ends where it began,
    /// and the next record is written there.
    pub fn take_back_last(&mut self) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let (at, len) = self.last;
        let end = (at + len).min(self.len);
        let zeros = [0u8; 4096];
        let mut pos = at;
        let fault = |op, call| match &self.plan {
            None => Ok(()),
            Some(plan) => plan.check(Target::Journal, op, call, true),
        };
        let r = (|| {
            while pos < end {
                let n = (end - pos).min(zeros.len() as u64) as usize;
                fault(IoOp::Write, "write")?;
                self.file.write_all_at(&zeros[..n], pos)?;
                pos += n as u64;
            }
            fault(IoOp::Sync, "sync_data")?;
            self.file.sync_data()
        })();
        r.map_err(|e| KbError::io(format!("cannot write {}", self.path.display()), e))?;
        self.offset = at;
        Ok(())
    }

    /// Start over: every record is in a durable commit of the database now, so the next one
    /// may overwrite them.
    pub fn reset(&mut self) {
        self.offset = 0;
    }

    /// Empty the file (the database is closing and every record is in a durable commit).
    pub fn truncate(&mut self) {
        match self.file.set_len(0) {
            Ok(()) => {
                self.offset = 0;
                self.len = 0;
            }
            Err(e) => tracing::warn!("cannot empty {}: {e}", self.path.display()),
        }
    }

    /// Bytes of records since the journal last started over.
    pub fn bytes(&self) -> u64 {
        self.offset
    }
}

/// Read a journal file's records (for tests).
pub fn read_file(path: &Path) -> Result<Vec<(u64, Record)>> {
    Ok(decode_records(&read_journal(path)?.unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: u8) -> Record {
        Record {
            schema: 11,
            tables: vec![
                (TableId::Sections, vec![Op::Insert(vec![n; 3], vec![n; 40])]),
                (TableId::Tags, vec![Op::MultiInsert(b"t".to_vec(), vec![n])]),
            ],
        }
    }

    #[test]
    fn records_round_trip_and_a_torn_or_damaged_tail_ends_them() {
        let mut bytes = Vec::new();
        for s in 1..=3u64 {
            bytes.extend(encode_record(s, &record(s as u8)).unwrap());
        }
        let all = decode_records(&bytes);
        assert_eq!(all.len(), 3);
        assert_eq!(all[2], (3, record(3)));
        // Torn anywhere inside the last record: the first two remain.
        let last = encode_record(3, &record(3)).unwrap().len();
        for cut in 1..last {
            assert_eq!(
                decode_records(&bytes[..bytes.len() - cut]).len(),
                2,
                "cut {cut}"
            );
        }
        // A flipped byte in the second record's payload ends the records before it.
        let mut damaged = bytes.clone();
        let second = encode_record(1, &record(1)).unwrap().len() + HEADER + 2;
        damaged[second] ^= 1;
        assert_eq!(decode_records(&damaged).len(), 1);
    }

    /// A journal of records `seqs`, in order from the start, and each one's offset.
    fn journal(seqs: &[u64]) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = Vec::new();
        let mut at = Vec::new();
        for &s in seqs {
            at.push(bytes.len());
            bytes.extend(encode_record(s, &record(s as u8)).unwrap());
        }
        (bytes, at)
    }

    fn planned(bytes: &[u8], held: u64) -> std::result::Result<Vec<u64>, JournalDamage> {
        plan_replay(bytes, held).map(|r| r.into_iter().map(|(s, _)| s).collect())
    }

    #[test]
    fn a_torn_tail_ends_a_replay_and_a_bad_record_before_valid_ones_is_damage() {
        let (bytes, at) = journal(&[4, 5, 6, 7, 8]);
        // Whole, and grown with zeros as the file is: the records after the held number.
        let mut grown = bytes.clone();
        grown.resize(bytes.len() + 4096, 0);
        assert_eq!(planned(&grown, 3), Ok(vec![4, 5, 6, 7, 8]));
        assert_eq!(planned(&grown, 6), Ok(vec![7, 8]));
        // Torn anywhere in the last record (a crash mid-append): a normal end.
        for cut in at[4] + 1..bytes.len() {
            assert_eq!(planned(&bytes[..cut], 3), Ok(vec![4, 5, 6, 7]), "cut {cut}");
        }
        // One flipped bit anywhere in the second record (header or payload), records after
        // it: damage, naming where the records stop and the later valid one.
        for byte in at[1]..at[2] {
            let mut damaged = grown.clone();
            damaged[byte] ^= 0x10;
            let d = planned(&damaged, 3).unwrap_err();
            assert_eq!((d.last_good, d.bad_at), (4, at[1]), "byte {byte}");
            assert!(d.later_seq > 5 && d.later_at >= at[2], "byte {byte}: {d:?}");
        }
        // Damage in records the database holds already is no loss: the first valid one after
        // it that is not held is found by number, and none is.
        let mut held = grown.clone();
        held[at[1] + HEADER + 1] ^= 1;
        assert_eq!(planned(&held, 8), Ok(vec![]));
        // A number missing between two valid records.
        let (gap, at) = journal(&[4, 6]);
        let d = planned(&gap, 3).unwrap_err();
        assert_eq!((d.last_good, d.later_seq, d.later_at), (4, 6, at[1]));
    }

    #[test]
    fn older_records_left_after_the_journal_started_over_are_no_damage() {
        // Records 1..=6, then a checkpoint and records 7 and 8 written over the start.
        let (old, _) = journal(&[1, 2, 3, 4, 5, 6]);
        let (new, _) = journal(&[7, 8]);
        let mut bytes = old.clone();
        bytes[..new.len()].copy_from_slice(&new);
        bytes.resize(old.len() + 1000, 0);
        assert_eq!(planned(&bytes, 6), Ok(vec![7, 8]));
        // Torn in the middle of the new second record: the older records after it have lower
        // numbers, so still a torn tail.
        let (first, _) = journal(&[7]);
        let mut torn = bytes.clone();
        torn[first.len() + 5] ^= 1;
        assert_eq!(planned(&torn, 6), Ok(vec![7]));
    }

    #[test]
    fn the_scan_past_a_bad_record_hashes_a_bounded_amount() {
        // 1,000 headers numbered 2 whose checks fail, each claiming the 4 KiB after it, then a
        // valid record 3: found within a budget that covers them, not past a smaller one.
        let mut bytes = Vec::new();
        for _ in 0..1000 {
            bytes.extend((4096u32).to_le_bytes());
            bytes.extend(2u64.to_le_bytes());
            bytes.extend([0u8; 8]);
        }
        let at = bytes.len();
        bytes.extend(encode_record(3, &record(3)).unwrap());
        bytes.resize(bytes.len() + 4096, 0);
        assert_eq!(later_record_within(&bytes, 0, 1, usize::MAX), Some((at, 3)));
        assert_eq!(later_record_within(&bytes, 0, 1, 100 * 4096), None);
    }

    #[test]
    fn a_damaged_journal_is_refused_and_kept_once() {
        let tmp = tempfile::tempdir().unwrap();
        let db = redb::Database::create(tmp.path().join("db")).unwrap();
        let (mut bytes, at) = journal(&[1, 2, 3]);
        bytes[at[1] + HEADER] ^= 1;
        let path = tmp.path().join(JOURNAL_FILE);
        std::fs::write(&path, &bytes).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META).unwrap();
        txn.commit().unwrap();
        for _ in 0..2 {
            let e = replay(tmp.path(), &db, 11, false, None).unwrap_err();
            assert_eq!(e.code(), "damaged");
            let msg = e.to_string();
            assert!(msg.contains("kbdb.journal is damaged"), "{msg}");
            assert!(msg.contains("kbdb check"), "{msg}");
        }
        let copies = damaged_copies(tmp.path());
        assert_eq!(copies.len(), 1, "one copy for the same bytes");
        assert_eq!(std::fs::read(&copies[0]).unwrap(), bytes);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bytes,
            "the journal is left as it is"
        );
        assert!(inspect(tmp.path(), 0).unwrap().is_some());
        // Nothing was applied.
        let txn = db.begin_write().unwrap();
        assert_eq!(applied_seq(&txn).unwrap(), 0);
    }

    #[test]
    fn a_record_larger_than_a_replay_accepts_is_not_encoded() {
        let big = encode_record(1, &record(1)).unwrap().len() - HEADER;
        assert!(encode_record_within(1, &record(1), big).is_some());
        assert!(encode_record_within(1, &record(1), big - 1).is_none());
    }
}
