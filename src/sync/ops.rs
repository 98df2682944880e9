//! The sync writes (`WriteOp::Sync`, docs/sync.md): a folder registered under a prefix, a
//! file's document stored with its record, a record refreshed, a gone file's document removed,
//! a folder forgotten — each checked outside the transaction (`prepare`) and applied inside it
//! (`apply`) only if the file's record is still the one the scan saw (an edit written back
//! meanwhile wins), so concurrent syncs and edits never undo each other. The scan that produces
//! them is `Kb::sync` (src/kb/sync.rs).

use redb::ReadableTable;
use serde::{Deserialize, Serialize};

use super::records::{self, FileRecord, SyncRoot};
use super::scan::{self};
use crate::config::Limits;
use crate::error::{KbError, Result};
use crate::store::tables::{SYNC_FILES, SYNC_ROOTS};
use crate::store::txn::WriteTables;
use crate::text::frontmatter::{self, Syntax};
use crate::types::DocumentLearnResult;
use crate::types::validate;
use crate::writes::document::{self, PreparedDocument};

/// Files per write transaction of a sync (at most `limits.max_batch`). A transaction holds its
/// prepared sections and the B-tree pages it changed until it commits, and the pipelined sync
/// reads and prepares the next batch meanwhile (two batches held): at 500 files (~5,500
/// sections of devdocs) a 300k-section sync peaked at 303–330 MB, at 250 at 283–291 MB, for
/// the same time within the noise (docs/performance.md, *A pipelined sync*).
pub const BATCH_FILES: usize = 250;
/// File bytes per write transaction of a sync (a batch closes early past this): two batches
/// are held at once.
pub const BATCH_BYTES: usize = 16 * 1024 * 1024;

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
        doc: Box<PreparedDocument>,
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
) -> Result<(PreparedDocument, Option<Syntax>)> {
    let docid = validate::docid(docid)?;
    let (front, body) = frontmatter::split(text).map_err(|e| KbError::invalid("content", e))?;
    let syntax = front.as_ref().map(|f| f.syntax);
    let meta = front.map(|f| f.meta).unwrap_or_default();
    let metadata = validate::validate_metadata(&meta)?;
    let op = document::prepare_document(
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
                docid: doc.docid.clone(),
                record,
                expected,
                doc: Box::new(doc),
            }
        }
        SyncOp::Touch { docid, record } => PreparedSync::Touch {
            docid: validate::docid(&docid)?.into_owned(),
            record,
        },
        SyncOp::Remove { docid, expected } => {
            let docid = validate::docid(&docid)?.into_owned();
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
pub(crate) fn apply(t: &mut WriteTables<'_>, p: PreparedSync) -> Result<Result<SyncOutcome>> {
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
                            document::delete_document(t, &docid)?;
                            files.remove(docid.as_str())?;
                            o.records_dropped += 1;
                        }
                    }
                    let rec = SyncRoot {
                        prefix,
                        created_at: t.now().to_string(),
                    };
                    roots_t.insert(dir.as_str(), crate::types::records::encode(&rec).as_slice())?;
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
                let document = document::apply_document(t, *doc)?;
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
                document::delete_document(t, &docid)?;
                files.remove(docid.as_str())?;
                SyncOutcome::new("removed", &docid, true)
            }
            _ => SyncOutcome::new("stale", &docid, false),
        },
        PreparedSync::Forget { dir } => {
            let mut roots_t = txn.open_table(SYNC_ROOTS)?;
            let root = roots_t
                .get(dir.as_str())?
                .map(|v| crate::types::records::decode::<SyncRoot>("sync_roots", &dir, v.value()))
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
    Ok(Ok(out))
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
