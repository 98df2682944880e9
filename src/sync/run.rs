//! `Kb::sync`: a folder of markdown files as documents (docs/sync.md).
//!
//! A sync reads the folder outside any transaction — listing it, and for each markdown file
//! comparing its size, times and inode with the file's record (the fast path), reading and
//! hashing it only when they differ — and turns what changed into `WriteOp::Sync` writes,
//! committed one transaction per batch through the caller's writer (the daemon's group-commit
//! writer, or `Kb::write_group`). Each write carries the record hash the scan saw, and applies
//! only if the record is still the same (an edit written back meanwhile wins), so concurrent
//! syncs and edits never undo each other.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use redb::ReadableTable;
use serde::{Deserialize, Serialize};

use super::records::{self, FileRecord, FileStat, SyncRoot};
use super::scan::{self, Entry, ReadError, Rules, Taken};
use super::{MAX_LISTED_CHANGES, SyncChange, SyncReport, SyncSkip};
use crate::config::Limits;
use crate::error::{KbError, Result};
use crate::model::DocumentLearnResult;
use crate::model::validate;
use crate::store::tables::{SYNC_FILES, SYNC_ROOTS};
use crate::store::txn::WriteTables;
use crate::text::frontmatter::{self, Syntax};
use crate::writes::{self, PreparedOp, WriteOp, WriteOutcome};

/// Files per write transaction of a sync (at most `limits.max_batch`).
pub const BATCH_FILES: usize = 1000;
/// File bytes per write transaction of a sync (a batch closes early past this).
pub const BATCH_BYTES: usize = 32 * 1024 * 1024;

/// One sync write (`WriteOp::Sync`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "sync", rename_all = "snake_case")]
pub enum SyncOp {
    /// Sync the folder `dir` (canonical path) under `prefix`: registers it, or moves it from
    /// another prefix (the documents of its files under the old prefix are removed; the files
    /// come back under the new one).
    Root { dir: String, prefix: String },
    /// A file whose content is new or changed: store `text` as the document `docid` and record
    /// the file. `expected` is the hash of the record the scan saw (None: no record); when the
    /// record has changed since, nothing is done (`stale`).
    File {
        docid: String,
        text: String,
        record: FileRecord,
        expected: Option<String>,
    },
    /// A file whose content is what its record says but whose size, times or inode changed:
    /// refresh the record.
    Touch { docid: String, record: FileRecord },
    /// A file that is gone (or no longer synced): remove its document and record, if the record
    /// still has the hash `expected`.
    Remove { docid: String, expected: String },
    /// Stop syncing `dir`: drop its records and registration; its documents stay.
    Forget { dir: String },
}

/// The result of one sync write.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SyncOutcome {
    /// `root`, `added`, `updated`, `touched`, `removed`, `forgotten`, `unchanged`, or `stale`
    /// (the record changed since the scan: nothing done).
    pub action: String,
    /// The docid (the folder for `root` and `forgotten`).
    pub id: String,
    /// Whether the store was written.
    pub changed: bool,
    /// Records dropped (`root` moved to another prefix, `forgotten`).
    #[serde(default)]
    pub records_dropped: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<DocumentLearnResult>,
    #[serde(default)]
    pub elapsed_ms: f64,
}

impl SyncOutcome {
    pub(crate) fn new(action: &str, id: &str, changed: bool) -> SyncOutcome {
        SyncOutcome {
            action: action.to_string(),
            id: id.to_string(),
            changed,
            records_dropped: 0,
            document: None,
            elapsed_ms: 0.0,
        }
    }
}

/// A sync write, checked and with its document split and hashed (outside the transaction).
pub(crate) enum PreparedSync {
    Root {
        dir: String,
        prefix: String,
    },
    File {
        docid: String,
        record: FileRecord,
        expected: Option<String>,
        doc: Box<PreparedOp>,
    },
    Touch {
        docid: String,
        record: FileRecord,
    },
    Remove {
        docid: String,
        expected: String,
    },
    Forget {
        dir: String,
    },
}

/// The title of a synced document: its front matter's `title` when that is one line of text,
/// else (None) the first heading.
pub(crate) fn title_of(meta: &serde_json::Map<String, serde_json::Value>) -> Option<String> {
    let t = meta.get("title")?.as_str()?;
    validate::validate_line("title", Some(t), validate::MAX_TITLE_CHARS)
        .ok()
        .flatten()
}

/// A file's text as the document `docid`: front matter → metadata (none: empty metadata), the
/// body split into heading sections by the shared rule, the title from [`title_of`].
pub(crate) fn prepare_text(
    docid: &str,
    text: &str,
    limits: &Limits,
) -> Result<(PreparedOp, Option<Syntax>)> {
    validate::validate_docid(docid)?;
    let (front, body) = frontmatter::split(text).map_err(|e| KbError::invalid("content", e))?;
    let syntax = front.as_ref().map(|f| f.syntax);
    let meta = front.map(|f| f.meta).unwrap_or_default();
    let metadata = validate::validate_metadata(&meta)?;
    let op = writes::prepare_document(
        docid.to_string(),
        body,
        title_of(&meta),
        Some(metadata),
        limits,
    )?;
    Ok((op, syntax))
}

pub(crate) fn syntax_name(s: Option<Syntax>) -> Option<String> {
    s.map(|s| match s {
        Syntax::Yaml => "yaml".to_string(),
        Syntax::Toml => "toml".to_string(),
    })
}

/// Check a sync write without touching the store.
pub(crate) fn prepare(op: SyncOp, limits: &Limits) -> Result<PreparedSync> {
    Ok(match op {
        SyncOp::Root { dir, prefix } => PreparedSync::Root {
            dir,
            prefix: normalize_prefix(&prefix)?,
        },
        SyncOp::File {
            docid,
            text,
            mut record,
            expected,
        } => {
            let (doc, syntax) = prepare_text(&docid, &text, limits)?;
            record.front_matter = syntax_name(syntax);
            PreparedSync::File {
                docid,
                record,
                expected,
                doc: Box::new(doc),
            }
        }
        SyncOp::Touch { docid, record } => {
            validate::validate_docid(&docid)?;
            PreparedSync::Touch { docid, record }
        }
        SyncOp::Remove { docid, expected } => {
            validate::validate_docid(&docid)?;
            PreparedSync::Remove { docid, expected }
        }
        SyncOp::Forget { dir } => PreparedSync::Forget { dir },
    })
}

/// Whether two docid prefixes overlap (one starts with the other: a docid could be under both).
pub(crate) fn overlap(a: &str, b: &str) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Apply a sync write inside `t`. The outer error fails the whole transaction; the inner one
/// this write alone (nothing of it written).
pub(crate) fn apply(t: &mut WriteTables<'_>, p: PreparedSync) -> Result<Result<WriteOutcome>> {
    let txn = t.txn();
    let mut files = txn.open_table(SYNC_FILES)?;
    let out = match p {
        PreparedSync::Root { dir, prefix } => {
            let mut roots_t = txn.open_table(SYNC_ROOTS)?;
            let all = records::roots(&roots_t)?;
            if let Err(e) = check_prefix(&all, &dir, &prefix) {
                return Ok(Err(e));
            }
            let old = all.iter().find(|(d, _)| *d == dir).map(|(_, r)| r.clone());
            match old {
                Some(r) if r.prefix == prefix => SyncOutcome::new("unchanged", &dir, false),
                old => {
                    let mut o = SyncOutcome::new("root", &dir, true);
                    if let Some(old) = old {
                        for (docid, _) in records::files_under(&files, &old.prefix, Some(&dir))? {
                            crate::collections::edit::delete_document(t, &docid)?;
                            files.remove(docid.as_str())?;
                            o.records_dropped += 1;
                        }
                    }
                    let rec = SyncRoot {
                        prefix,
                        created_at: t.now().to_string(),
                    };
                    roots_t.insert(dir.as_str(), crate::model::records::encode(&rec).as_slice())?;
                    o
                }
            }
        }
        PreparedSync::File {
            docid,
            record,
            expected,
            doc,
        } => {
            let current = records::get_file(&files, &docid)?;
            if current.as_ref().map(|r| &r.hash) != expected.as_ref() {
                SyncOutcome::new("stale", &docid, false)
            } else {
                let document = match writes::apply_prepared(t, *doc)? {
                    WriteOutcome::Document(d) => d,
                    _ => return Err(KbError::Storage("unexpected write outcome".into())),
                };
                records::put_file(&mut files, &docid, &record)?;
                let action = if current.is_some() {
                    "updated"
                } else {
                    "added"
                };
                let mut o = SyncOutcome::new(action, &docid, true);
                o.document = Some(document);
                o
            }
        }
        PreparedSync::Touch { docid, record } => match records::get_file(&files, &docid)? {
            Some(cur) if cur.hash == record.hash && cur.path == record.path => {
                records::put_file(&mut files, &docid, &record)?;
                SyncOutcome::new("touched", &docid, true)
            }
            _ => SyncOutcome::new("stale", &docid, false),
        },
        PreparedSync::Remove { docid, expected } => match records::get_file(&files, &docid)? {
            Some(cur) if cur.hash == expected => {
                crate::collections::edit::delete_document(t, &docid)?;
                files.remove(docid.as_str())?;
                SyncOutcome::new("removed", &docid, true)
            }
            _ => SyncOutcome::new("stale", &docid, false),
        },
        PreparedSync::Forget { dir } => {
            let mut roots_t = txn.open_table(SYNC_ROOTS)?;
            let root = roots_t
                .get(dir.as_str())?
                .map(|v| crate::model::records::decode::<SyncRoot>("sync_roots", &dir, v.value()))
                .transpose()?;
            match root {
                None => SyncOutcome::new("unchanged", &dir, false),
                Some(r) => {
                    let mut o = SyncOutcome::new("forgotten", &dir, true);
                    for (docid, _) in records::files_under(&files, &r.prefix, Some(&dir))? {
                        files.remove(docid.as_str())?;
                        o.records_dropped += 1;
                    }
                    roots_t.remove(dir.as_str())?;
                    o
                }
            }
        }
    };
    Ok(Ok(WriteOutcome::Synced(out)))
}

/// `prefix` may be used for `dir`: no other folder's prefix overlaps it.
pub(crate) fn check_prefix(all: &[(String, SyncRoot)], dir: &str, prefix: &str) -> Result<()> {
    for (d, r) in all {
        if d != dir && overlap(&r.prefix, prefix) {
            let shown = |p: &str| {
                if p.is_empty() {
                    "(no prefix)".to_string()
                } else {
                    format!("{p:?}")
                }
            };
            return Err(KbError::invalid(
                "prefix",
                format!(
                    "{} overlaps the prefix {} of the synced folder {d}; each synced folder needs a prefix of its own (e.g. --prefix notes/)",
                    shown(prefix),
                    shown(&r.prefix)
                ),
            ));
        }
    }
    Ok(())
}

/// A docid prefix as given (`notes`, `notes/`, ``) in its stored form (`notes/`, ``).
pub fn normalize_prefix(p: &str) -> Result<String> {
    let p = scan::nfc(p.trim());
    let p = p.as_str();
    if p.is_empty() {
        return Ok(String::new());
    }
    let p = if p.ends_with('/') {
        p.to_string()
    } else {
        format!("{p}/")
    };
    validate::validate_docid(&format!("{p}x")).map_err(|e| {
        let msg = e.to_string();
        let rule = msg.strip_prefix("docid: ").unwrap_or(&msg);
        KbError::invalid("prefix", format!("{p:?} cannot start docids: {rule}"))
    })?;
    Ok(p)
}

/// The callback a sync commits its batches through: one transaction per call.
pub type Writer<'a> = &'a dyn Fn(Vec<WriteOp>) -> Result<Vec<Result<WriteOutcome>>>;

/// A file found by a scan.
pub(crate) struct Candidate {
    pub(crate) abs: PathBuf,
    pub(crate) rel: String,
    pub(crate) stat: FileStat,
    /// (device, inode) when listed: the file read must be this one.
    pub(crate) ident: (u64, u64),
}

/// What a scan found: files to look at, files left alone (with why), unreadable folders.
pub(crate) struct Found<'a> {
    pub(crate) root: &'a Path,
    pub(crate) candidates: &'a mut Vec<Candidate>,
    pub(crate) skipped: &'a mut Vec<(String, String)>,
    pub(crate) unreadable: &'a mut Vec<String>,
}

impl Found<'_> {
    /// Everything synced at and below the folder `dir`.
    pub(crate) fn walk(&mut self, rules: &mut Rules, dir: &Path) {
        let root = self.root;
        let rel_or_shown =
            |p: &Path| scan::relative(root, p).unwrap_or_else(|_| p.display().to_string());
        scan::walk(rules, dir, &mut |e| match e {
            Entry::File(p, stat, ident) => match scan::relative(root, p) {
                Ok(rel) => self.candidates.push(Candidate {
                    abs: p.to_path_buf(),
                    rel,
                    stat,
                    ident,
                }),
                Err(reason) => self.skipped.push((p.display().to_string(), reason)),
            },
            Entry::Skipped(p, reason) => self.skipped.push((rel_or_shown(p), reason)),
            Entry::Unreadable(p, reason) => {
                let rel = scan::relative(root, p).unwrap_or_default();
                self.skipped
                    .push((rel.clone(), format!("folder cannot be read: {reason}")));
                self.unreadable.push(rel);
            }
            Entry::Dir(_) => {}
        })
    }
}

/// The state of one sync.
pub(crate) struct Run<'a> {
    pub(crate) limits: &'a Limits,
    pub(crate) root: PathBuf,
    pub(crate) root_str: String,
    pub(crate) prefix: String,
    /// The records of this folder when the scan started, by relative path: (docid, record).
    pub(crate) by_path: HashMap<String, (String, FileRecord)>,
    /// The same records' relative paths by docid.
    pub(crate) by_docid: HashMap<String, String>,
    /// Relative paths of the files that exist and were looked at (their records stay).
    pub(crate) seen: HashSet<String>,
    /// Folders that could not be read: the records below them stay.
    pub(crate) unreadable: Vec<String>,
    pub(crate) taken: Taken,
    pub(crate) report: SyncReport,
    pub(crate) batch: Vec<WriteOp>,
    /// The relative path of each write of `batch`.
    pub(crate) batch_paths: Vec<String>,
    pub(crate) batch_bytes: usize,
    pub(crate) batch_limit: usize,
    pub(crate) write: Writer<'a>,
}

impl Run<'_> {
    pub(crate) fn skip(&mut self, rel: &str, reason: impl Into<String>) {
        let reason = reason.into();
        tracing::info!(path = rel, "not synced: {reason}");
        self.report.skipped.push(SyncSkip {
            path: rel.to_string(),
            reason,
        });
    }

    pub(crate) fn push(&mut self, rel: &str, op: WriteOp, bytes: usize) -> Result<()> {
        self.batch.push(op);
        self.batch_paths.push(rel.to_string());
        self.batch_bytes += bytes;
        if self.batch.len() >= self.batch_limit || self.batch_bytes >= BATCH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    pub(crate) fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let ops = std::mem::take(&mut self.batch);
        let paths = std::mem::take(&mut self.batch_paths);
        self.batch_bytes = 0;
        let results = (self.write)(ops)?;
        let mut committed = false;
        for (r, rel) in results.into_iter().zip(paths) {
            match r {
                Ok(WriteOutcome::Synced(o)) => {
                    committed |= o.changed;
                    let listed = match o.action.as_str() {
                        "added" => {
                            self.report.added += 1;
                            true
                        }
                        "updated" => {
                            self.report.updated += 1;
                            true
                        }
                        "removed" => {
                            self.report.removed += 1;
                            true
                        }
                        "touched" => {
                            self.report.touched += 1;
                            false
                        }
                        _ => false,
                    };
                    if listed {
                        if self.report.changes.len() < MAX_LISTED_CHANGES {
                            self.report.changes.push(SyncChange {
                                action: o.action.clone(),
                                docid: o.id.clone(),
                                path: rel,
                            });
                        } else {
                            self.report.changes_truncated = true;
                        }
                    }
                }
                Ok(_) => return Err(KbError::Storage("unexpected write outcome".into())),
                Err(e) if rel.is_empty() => return Err(e),
                Err(e) => self.skip(&rel, e.to_string()),
            }
        }
        if committed {
            self.report.transactions += 1;
        }
        Ok(())
    }

    /// Look at one file: unchanged, touched, or new/changed content to store.
    pub(crate) fn file(&mut self, c: Candidate) -> Result<()> {
        let docid = scan::docid_of(&self.prefix, &c.rel);
        if let Err(e) = validate::validate_docid(&docid) {
            self.seen.insert(c.rel.clone());
            let msg = e.to_string();
            let rule = msg.strip_prefix("docid: ").unwrap_or(&msg).to_string();
            self.skip(&c.rel, format!("cannot become a docid ({docid:?}: {rule})"));
            return Ok(());
        }
        if !self.taken.take(&docid) {
            self.seen.insert(c.rel.clone());
            self.skip(
                &c.rel,
                format!(
                    "has the same docid ({docid}) as another file of the folder; rename one of them"
                ),
            );
            return Ok(());
        }
        // Another file holds this docid already (`a.md` synced, `a.mdx` new).
        let holder = self.by_docid.get(&docid).filter(|p| **p != c.rel).cloned();
        if let Some(p) = holder
            && self.root.join(&p).is_file()
        {
            self.seen.insert(c.rel.clone());
            self.skip(
                &c.rel,
                format!("has the same docid ({docid}) as {p}, which is synced; rename one of them"),
            );
            return Ok(());
        }
        let rec = self.by_path.get(&c.rel).map(|(_, r)| r.clone());
        self.report.files += 1;
        if rec.as_ref().is_some_and(|r| r.proves_unchanged(&c.stat)) {
            self.seen.insert(c.rel);
            self.report.unchanged += 1;
            return Ok(());
        }
        let recorded_at_ns = records::now_ns();
        let read = match scan::read_file(&c.abs, self.limits.max_content_bytes, Some(c.ident)) {
            Ok(r) => r,
            Err(ReadError::Missing) => {
                self.report.files -= 1;
                return Ok(());
            }
            Err(ReadError::Other(reason)) => {
                self.seen.insert(c.rel.clone());
                self.skip(&c.rel, reason);
                return Ok(());
            }
        };
        self.seen.insert(c.rel.clone());
        let hash = scan::hash(&read.bytes);
        let record = FileRecord {
            root: self.root_str.clone(),
            path: c.rel.clone(),
            hash: hash.clone(),
            size: read.stat.size,
            mtime_ns: read.stat.mtime_ns,
            ctime_ns: read.stat.ctime_ns,
            ino: read.stat.ino,
            recorded_at_ns,
            front_matter: rec.as_ref().and_then(|r| r.front_matter.clone()),
        };
        match rec {
            Some(r) if r.hash == hash => {
                if r.stat() == read.stat {
                    self.report.unchanged += 1;
                } else {
                    // Same content, other times (touched, copied back): refresh the record so
                    // the next scan takes the fast path.
                    self.report.unchanged += 1;
                    self.push(&c.rel, WriteOp::Sync(SyncOp::Touch { docid, record }), 0)?;
                }
            }
            r => match String::from_utf8(read.bytes) {
                Ok(text) => {
                    let len = text.len();
                    let op = SyncOp::File {
                        docid,
                        text,
                        record,
                        expected: r.map(|r| r.hash),
                    };
                    self.push(&c.rel, WriteOp::Sync(op), len)?;
                }
                Err(_) => self.skip(&c.rel, "is not valid UTF-8 text"),
            },
        }
        Ok(())
    }
}
