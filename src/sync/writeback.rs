//! Write-back: an edit of a document that came from a file (`update_document`,
//! `update_section`, `delete_document`, and `create_document` under a synced folder's prefix)
//! changes the file too, inside the edit's write transaction.
//!
//! The file is read first; when its bytes are not those kbdb last read or wrote (the record's
//! hash), or it is gone, the edit is refused with a conflict error and nothing is written on
//! either side. Otherwise the edit is applied to the file's own text — a section edit to its
//! body, so everything else stays byte for byte; the front matter block is kept as written
//! when the metadata does not change, and rendered in its own syntax (YAML or TOML) with its
//! key order when it does — the result is checked (it must read back as a document), written
//! to a temporary file beside the original, synced, and renamed over it; then the document and
//! the record are stored from that text exactly as a sync of the file would store them.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value};

use super::ops::{prepare_text, syntax_name};
use super::records::{self, FileRecord, FileStat, RecordTable, SyncRoot};
use super::scan;
use crate::collections::edit::{DocEdit, EditResult};
use crate::config::Limits;
use crate::error::{KbError, Result};
use crate::store::tables::{SYNC_FILES, SYNC_ROOTS};
use crate::store::txn::WriteTables;
use crate::text::frontmatter::{self, Syntax};
use crate::text::section_edit::{self, Action};
use crate::writes::document::{self, delete_document, merge};

/// The edit applied to the document's file and store when `docid` is a synced document (or
/// a new one under a synced folder's prefix): `Some(result)`. `None`: not synced, edit the
/// store only. The outer error is a storage failure; the inner one the edit's (nothing
/// written, file untouched).
pub(crate) fn apply_edit(
    t: &mut WriteTables<'_>,
    docid: &str,
    edit: &DocEdit,
    limits: &Limits,
    pre_read: Option<PreRead>,
) -> Result<Option<Result<EditResult>>> {
    let txn = t.txn();
    let mut files = txn.open_table(SYNC_FILES)?;
    let Some(rec) = records::get_file(&files, docid)? else {
        let DocEdit::Create { metadata, body, .. } = edit else {
            return Ok(None);
        };
        if t.document(docid)?.is_some() {
            return Ok(None); // the edit fails as it always does: the docid exists
        }
        let root = records::root_of_docid(&txn.open_table(SYNC_ROOTS)?, docid)?;
        return match root {
            Some((dir, root)) => {
                create(t, &mut files, docid, &dir, &root, metadata, body, limits).map(Some)
            }
            None => Ok(None),
        };
    };
    let path = Path::new(&rec.root).join(&rec.path);
    if let Some(link) = symlink_on_the_way(Path::new(&rec.root), &rec.path) {
        return Ok(Some(Err(KbError::invalid(
            "docid",
            format!(
                "{docid}: its file's folder {} is now a symbolic link; kbdb does not write through links",
                link.display()
            ),
        ))));
    }
    // Read before the transaction when it can be (`pre_read`): the writer only compares the
    // file's identity with what was read then. Otherwise (or when it changed since) it is read
    // here — opened without following a link or waiting on a FIFO, within the size limit: no
    // file of the user's folder can block the writer or make it allocate without bound.
    let current = match still_current(pre_read, &path) {
        Some(c) => Ok(Some(c)),
        None => read_current(&path, limits.max_content_bytes),
    };
    let current = match current {
        Ok(c) => c,
        Err(Unreadable::Refused(why)) => {
            return Ok(Some(Err(conflict(docid, &path, &rec, &why))));
        }
        Err(Unreadable::Io(e)) => {
            return Ok(Some(Err(KbError::io(
                format!("cannot read {}", path.display()),
                e,
            ))));
        }
    };
    let action = match edit {
        DocEdit::Create { .. } => return Ok(None), // exists: the edit fails as usual
        DocEdit::Update { .. } => "update",
        DocEdit::Section { .. } => "update_section",
        DocEdit::Delete => "delete",
    };
    let old = match (current, edit) {
        (None, DocEdit::Delete) => {
            // Deleted on disk and through kbdb: both agree.
            delete_document(t, docid)?;
            files.remove(docid)?;
            return Ok(Some(Ok(edited(docid, action, None, &path))));
        }
        (None, _) => {
            return Ok(Some(Err(conflict(
                docid,
                &path,
                &rec,
                "was deleted on disk",
            ))));
        }
        (Some(c), _) if c.seen.hash != rec.hash => {
            return Ok(Some(Err(conflict(docid, &path, &rec, "changed on disk"))));
        }
        (Some(c), _) => match String::from_utf8(c.bytes) {
            Ok(s) => (s, c.seen),
            Err(_) => return Ok(Some(Err(conflict(docid, &path, &rec, "changed on disk")))),
        },
    };
    let (old, mut seen) = old;
    if let DocEdit::Delete = edit {
        match remove_checked(&path, &mut seen) {
            Ok(Replaced::Done(_)) => {}
            Ok(Replaced::Raced(what)) => {
                return Ok(Some(Err(conflict(docid, &path, &rec, &what))));
            }
            Ok(Replaced::Copied(copy)) => {
                let what = format!(
                    "was saved on disk while kbdb was deleting it (kept as {})",
                    copy.display()
                );
                return Ok(Some(Err(conflict(docid, &path, &rec, &what))));
            }
            Err(e) => {
                return Ok(Some(Err(KbError::io(
                    format!("cannot delete {}", path.display()),
                    e,
                ))));
            }
        }
        delete_document(t, docid)?;
        files.remove(docid)?;
        return Ok(Some(Ok(edited(docid, action, None, &path))));
    }
    let text = match edited_text(&old, edit) {
        Ok(s) => s,
        Err(e) => return Ok(Some(Err(e))),
    };
    let (doc, syntax) = match prepare_text(docid, &text, limits) {
        Ok(x) => x,
        Err(e) => return Ok(Some(Err(e))),
    };
    let recorded_at_ns = records::now_ns();
    // The status the record gets: of the file kbdb wrote (taken from its own handle, whatever
    // is at the path by now), or of the file as read when the text did not change.
    let written = if text != old {
        match replace_checked(&path, text.as_bytes(), &mut seen, &mut |_| {}) {
            Ok(Replaced::Done(m)) => m,
            Ok(Replaced::Raced(what)) => {
                return Ok(Some(Err(conflict(docid, &path, &rec, &what))));
            }
            Ok(Replaced::Copied(copy)) => {
                return Ok(Some(Err(KbError::Conflict {
                    message: format!(
                        "{docid}: its file {} was saved on disk while kbdb was writing it, twice; the save could not be put back at its path and is kept beside it as {}. The edit was refused (the document is unchanged), but the file may hold kbdb's text or the later save: sync the folder (`kbdb sync {}`) and merge the copy by hand",
                        path.display(),
                        copy.display(),
                        rec.root
                    ),
                    path: path.clone(),
                })));
            }
            Err(e) => {
                return Ok(Some(Err(KbError::io(
                    format!("cannot write {}", path.display()),
                    e,
                ))));
            }
        }
    } else {
        seen.meta.clone()
    };
    let record = record_from(
        &rec.root,
        &rec.path,
        &written,
        &text,
        recorded_at_ns,
        syntax,
    );
    let d = document::apply_document(t, doc)?;
    records::put_file(&mut files, docid, &record)?;
    let mut r = edited(docid, action, Some(d), &path);
    r.changed = r.changed || text != old;
    Ok(Some(Ok(r)))
}

/// `create_document` under the prefix of the synced folder `dir`: a new file
/// `<dir>/<docid without the prefix>.md`, never replacing an existing one.
#[allow(clippy::too_many_arguments)]
fn create(
    t: &mut WriteTables<'_>,
    files: &mut RecordTable<'_>,
    docid: &str,
    dir: &str,
    root: &SyncRoot,
    metadata: &Map<String, Value>,
    body: &str,
    limits: &Limits,
) -> Result<Result<EditResult>> {
    let rel = format!("{}.md", &docid[root.prefix.len()..]);
    let path = Path::new(dir).join(&rel);
    if !Path::new(dir).is_dir() {
        return Ok(Err(KbError::invalid(
            "docid",
            format!(
                "{docid} would be written to {}, but the synced folder {dir} is gone (`kbdb sync --forget {dir}` stops syncing it)",
                path.display()
            ),
        )));
    }
    if let Some(link) = symlink_on_the_way(Path::new(dir), &rel) {
        return Ok(Err(KbError::invalid(
            "docid",
            format!(
                "{docid} would be written to {rel}, through the symbolic link {}; kbdb does not write through links",
                link.display()
            ),
        )));
    }
    let mut rules = scan::Rules::new(Path::new(dir), vec![]);
    if rules.excluded(&path, false) {
        return Ok(Err(KbError::invalid(
            "docid",
            format!(
                "{docid} would be written to {rel}, which is hidden or excluded by the folder's ignore files, so it would not be synced; choose another docid"
            ),
        )));
    }
    let front = if metadata.is_empty() {
        String::new()
    } else {
        match frontmatter::render(Syntax::Yaml, metadata, &[]) {
            Ok(f) => f,
            Err(e) => return Ok(Err(KbError::invalid("meta", e))),
        }
    };
    let text = format!("{front}{}", with_final_newline(body));
    let (doc, syntax) = match prepare_text(docid, &text, limits) {
        Ok(x) => x,
        Err(e) => return Ok(Err(e)),
    };
    if let Some(parent) = path.parent()
        && let Err(e) = std::fs::create_dir_all(parent)
    {
        return Ok(Err(KbError::io(
            format!("cannot create {}", parent.display()),
            e,
        )));
    }
    let recorded_at_ns = records::now_ns();
    match atomic_write(&path, text.as_bytes(), true) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Ok(Err(KbError::Conflict {
                message: format!(
                    "{docid}: the file {} already exists on disk but is not a synced document (sync the folder to take it in, or choose another docid); nothing was written",
                    path.display()
                ),
                path,
            }));
        }
        Err(e) => {
            return Ok(Err(KbError::io(
                format!("cannot write {}", path.display()),
                e,
            )));
        }
    }
    let record = match record_of(dir, &rel, &path, &text, recorded_at_ns, syntax) {
        Ok(r) => r,
        Err(e) => return Ok(Err(e)),
    };
    let d = document::apply_document(t, doc)?;
    records::put_file(files, docid, &record)?;
    let mut r = edited(docid, "create", Some(d), &path);
    r.changed = true;
    Ok(Ok(r))
}

/// The first folder between `root` and the file `rel` that is a symbolic link, if any (a sync
/// never follows links, so neither does a write).
fn symlink_on_the_way(root: &Path, rel: &str) -> Option<std::path::PathBuf> {
    let mut p = root.to_path_buf();
    let parts: Vec<&str> = rel.split('/').collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        p.push(part);
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => return Some(p),
            Ok(_) => {}
            Err(_) => return None, // missing from here on: created as real folders
        }
    }
    None
}

fn edited(
    docid: &str,
    action: &str,
    document: Option<crate::types::DocumentLearnResult>,
    path: &Path,
) -> EditResult {
    EditResult {
        docid: docid.to_string(),
        action: action.to_string(),
        changed: document.as_ref().is_none_or(|d| d.changed || d.added > 0),
        document,
        elapsed_ms: 0.0,
        file: Some(path.display().to_string()),
    }
}

fn conflict(docid: &str, path: &Path, rec: &FileRecord, what: &str) -> KbError {
    KbError::Conflict {
        message: format!(
            "{docid}: its file {} {what} since kbdb last read it; the edit was refused and nothing was written (neither the file nor the document). Sync the folder (`kbdb sync {}`, or a running `kbdb watch`) to take in the file's version, then edit again",
            path.display(),
            rec.root
        ),
        path: path.to_path_buf(),
    }
}

/// The record of a file kbdb just wrote, from its status `m`.
fn record_from(
    root: &str,
    rel: &str,
    m: &std::fs::Metadata,
    text: &str,
    recorded_at_ns: i64,
    syntax: Option<Syntax>,
) -> FileRecord {
    let st = FileStat::of(m);
    FileRecord {
        root: root.to_string(),
        path: rel.to_string(),
        hash: scan::hash(text.as_bytes()),
        size: st.size,
        mtime_ns: st.mtime_ns,
        ctime_ns: st.ctime_ns,
        ino: st.ino,
        recorded_at_ns,
        front_matter: syntax_name(syntax),
    }
}

/// The record of a file kbdb just created.
fn record_of(
    root: &str,
    rel: &str,
    path: &Path,
    text: &str,
    recorded_at_ns: i64,
    syntax: Option<Syntax>,
) -> Result<FileRecord> {
    let m = std::fs::symlink_metadata(path)
        .map_err(|e| KbError::io(format!("cannot read {}", path.display()), e))?;
    Ok(record_from(root, rel, &m, text, recorded_at_ns, syntax))
}

fn with_final_newline(s: &str) -> String {
    if s.is_empty() || s.ends_with('\n') {
        s.to_string()
    } else {
        format!("{s}\n")
    }
}

/// The file's new text after `edit` (an update or a section edit).
pub(crate) fn edited_text(old: &str, edit: &DocEdit) -> Result<String> {
    let (bom, rest) = match old.strip_prefix('\u{feff}') {
        Some(r) => ("\u{feff}", r),
        None => ("", old),
    };
    // Edited as written: the lines the edit does not touch keep their line ends (a file with
    // mixed ones too); new text takes CRLF when the file has any.
    let crlf = rest.contains("\r\n");
    let ends = |s: String| {
        if crlf {
            s.replace("\r\n", "\n").replace('\n', "\r\n")
        } else {
            s
        }
    };
    let (front, body) = frontmatter::split(rest).map_err(|e| KbError::invalid("content", e))?;
    let block = &rest[..rest.len() - body.len()];
    let old_meta = front.as_ref().map(|f| f.meta.clone()).unwrap_or_default();
    let mut meta = old_meta.clone();
    let new_body = match edit {
        DocEdit::Update {
            metadata,
            body: new,
            title,
        } => {
            let b = match new {
                Some(b) => {
                    let (f, r) =
                        frontmatter::split(b).map_err(|e| KbError::invalid("content", e))?;
                    if let Some(f) = f {
                        merge(&mut meta, f.meta);
                    }
                    ends(with_final_newline(r))
                }
                None => body.to_string(),
            };
            if let Some(m) = metadata {
                merge(&mut meta, m.clone());
            }
            // The title lives where the file keeps it: its front matter's `title` when it has
            // one (the synced title rule), else its H1 (added when there is none); no `title`
            // key is added (docs/collections.md).
            match title {
                Some(t) if old_meta.contains_key("title") => {
                    meta.insert("title".into(), Value::String(t.trim().to_string()));
                    b
                }
                Some(t) => section_edit::set_title(&b, t),
                None => b,
            }
        }
        DocEdit::Section {
            heading,
            action,
            content,
            occurrence,
        } => {
            let action: Action = action.parse().map_err(|e| KbError::invalid("action", e))?;
            section_edit::edit(body, heading, action, content.as_deref(), *occurrence).map_err(
                |e| {
                    let field = match e {
                        section_edit::EditError::MissingContent { .. } => "content",
                        _ => "heading",
                    };
                    KbError::invalid(field, e)
                },
            )?
        }
        DocEdit::Create { .. } | DocEdit::Delete => {
            return Err(KbError::Storage("not a text edit".into()));
        }
    };
    // Only the lines of the keys that changed move (frontmatter::rewrite).
    let front_text = match &front {
        Some(_) if meta == old_meta => block.to_string(),
        Some(f) => {
            frontmatter::rewrite(block, f, &meta).map_err(|e| KbError::invalid("meta", e))?
        }
        None if meta.is_empty() => String::new(),
        None => ends(
            frontmatter::render(Syntax::Yaml, &meta, &[])
                .map_err(|e| KbError::invalid("meta", e))?,
        ),
    };
    Ok(format!("{bom}{front_text}{new_body}"))
}

/// The synced file as the edit read it: the open file, its status after the read, the hash of
/// the bytes read.
pub(crate) struct Seen {
    file: std::fs::File,
    meta: std::fs::Metadata,
    hash: String,
}

impl Seen {
    /// Whether `m` (of whatever is at the path now) is still the file read: the same device,
    /// inode, size and modification time. (Not the change time: a rename moves it.)
    fn is(&self, m: &std::fs::Metadata) -> bool {
        let (a, b) = (FileStat::of(&self.meta), FileStat::of(m));
        m.file_type().is_file()
            && scan::identity(&self.meta) == scan::identity(m)
            && (a.size, a.mtime_ns) == (b.size, b.mtime_ns)
    }

    /// Whether the file read still holds the bytes read (read again through the handle).
    fn same_bytes(&mut self) -> bool {
        use std::io::{Seek, SeekFrom};
        if self.file.seek(SeekFrom::Start(0)).is_err() {
            return false;
        }
        match scan::read_bounded(&mut self.file, self.meta.len()) {
            Ok(Some(b)) => scan::hash(&b) == self.hash,
            _ => false,
        }
    }
}

/// A synced document's file read before its edit's transaction (`collections::edit::prepare`
/// calls [`pre_read`] on the client's thread): the path the record named, and what was read.
pub(crate) struct PreRead {
    path: std::path::PathBuf,
    current: Current,
}

/// Read the file of the synced document `docid` for `edit` ahead of the transaction, by the
/// same rules as the read inside it (no link followed, no FIFO waited on, at most
/// `limits.max_content_bytes`): a large file then costs its own client, not every writer.
/// None when the document is not synced, or when the read gave no file to compare with (it is
/// gone, refused or failed): the transaction reads it again and says why.
pub(crate) fn pre_read(
    db: &redb::Database,
    docid: &str,
    edit: &DocEdit,
    limits: &Limits,
) -> Option<PreRead> {
    if matches!(edit, DocEdit::Create { .. }) {
        return None;
    }
    let txn = redb::ReadableDatabase::begin_read(db).ok()?;
    let rec = records::get_file(&txn.open_table(SYNC_FILES).ok()?, docid).ok()??;
    if symlink_on_the_way(Path::new(&rec.root), &rec.path).is_some() {
        return None;
    }
    let path = Path::new(&rec.root).join(&rec.path);
    let current = read_current(&path, limits.max_content_bytes).ok()??;
    Some(PreRead { path, current })
}

/// What was read before the transaction, if the file at `path` is still that file: the same
/// path, and `lstat` (no open, so nothing can block) gives the same device, inode, size and
/// modification time. A write that keeps all four is caught by the re-read of the bytes right
/// before the rename ([`replace_checked`], [`remove_checked`]).
fn still_current(pre: Option<PreRead>, path: &Path) -> Option<Current> {
    let pre = pre.filter(|p| p.path == path)?;
    let m = std::fs::symlink_metadata(path).ok()?;
    pre.current.seen.is(&m).then_some(pre.current)
}

/// The synced file's bytes and what was seen of it.
struct Current {
    bytes: Vec<u8>,
    seen: Seen,
}

/// Why the synced file was not read for an edit.
#[derive(Debug)]
enum Unreadable {
    /// Not a regular file, or too large (why, for a conflict error).
    Refused(String),
    Io(std::io::Error),
}

/// Read the synced file `path` for an edit: None when it is gone. Only a regular file of at
/// most `max_bytes` is read; anything else is refused.
fn read_current(path: &Path, max_bytes: u64) -> std::result::Result<Option<Current>, Unreadable> {
    #[cfg(test)]
    tests::READS.with(|n| n.set(n.get() + 1));
    let (mut file, _) = match scan::open_regular(path) {
        Ok(x) => x,
        Err(scan::OpenError::Missing) => return Ok(None),
        Err(scan::OpenError::NotRegular(what)) => {
            return Err(Unreadable::Refused(format!(
                "is now {what}, not a regular file (kbdb reads and writes regular files only; nothing was read from it), and so changed on disk"
            )));
        }
        Err(scan::OpenError::Io(e)) => return Err(Unreadable::Io(e)),
    };
    let bytes = match scan::read_bounded(&mut file, max_bytes) {
        Ok(Some(b)) => b,
        Ok(None) => {
            return Err(Unreadable::Refused(format!(
                "is now larger than {max_bytes} bytes (limits.max_content_bytes), so it changed on disk"
            )));
        }
        Err(e) => return Err(Unreadable::Io(e)),
    };
    // The status after the read: a change after it moves the times (or the bytes, which the
    // re-check before the rename reads again).
    let meta = file.metadata().map_err(Unreadable::Io)?;
    let hash = scan::hash(&bytes);
    Ok(Some(Current {
        bytes,
        seen: Seen { file, meta, hash },
    }))
}

/// How a checked replacement (or removal) of a synced file ended.
pub(crate) enum Replaced {
    /// Done; the status of the file kbdb wrote (for a removal: of the file removed).
    Done(std::fs::Metadata),
    /// The file changed under the write (why, for the conflict error); the user's file is at
    /// its path (for a removal: or kept as a conflict copy named in the message), kbdb's text
    /// was not kept.
    Raced(String),
    /// A save raced the write and could not be put back (its path was raced again): it is kept
    /// beside the file as this conflict copy, and the path may hold kbdb's text.
    Copied(std::path::PathBuf),
}

/// Where a test can inject a save into [`replace_checked`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// The new text is on disk in the temporary file; the file is about to be checked again.
    BeforeRecheck,
    /// Checked again; about to be exchanged with the temporary file.
    BeforeSwap,
    /// Exchanged; what it displaced is about to be checked.
    AfterSwap,
}

/// Replace the synced file `path` — the one `seen` describes — with `bytes`, without ever
/// replacing a save that lands meanwhile (docs/sync.md, "Conflicts"):
///
/// 1. the new text is written to a hidden temporary file beside it and flushed to disk;
/// 2. right before the rename, the file at `path` must still be the one read (device, inode,
///    size, modification time) holding the bytes read (re-read and hashed), else nothing is
///    replaced;
/// 3. the temporary file is exchanged with the file at `path` (`renameat2(RENAME_EXCHANGE)`,
///    one atomic step), so what was at `path` is still there under the temporary name. If it
///    is not the file checked — a save landed between the check and the exchange — it is put
///    back (exchanged again); should that too be raced, it stays beside the file as a conflict
///    copy. Where the file system cannot exchange, a plain rename follows the check (the
///    window is then the few instructions between them).
pub(crate) fn replace_checked(
    path: &Path,
    bytes: &[u8],
    seen: &mut Seen,
    hook: &mut dyn FnMut(Stage),
) -> std::io::Result<Replaced> {
    let (tmp, tmp_file) = write_temp(path, bytes, Some(seen.meta.permissions()))?;
    let discard = |why: String| {
        let _ = std::fs::remove_file(&tmp);
        Ok(Replaced::Raced(why))
    };
    hook(Stage::BeforeRecheck);
    match std::fs::symlink_metadata(path) {
        Ok(m) if seen.is(&m) => {}
        Ok(_) => return discard("changed on disk while kbdb was writing it".into()),
        Err(_) => return discard("was deleted on disk while kbdb was writing it".into()),
    }
    if !seen.same_bytes() {
        return discard("changed on disk while kbdb was writing it".into());
    }
    hook(Stage::BeforeSwap);
    match crate::files::exchange(&tmp, path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return discard("was deleted on disk while kbdb was writing it".into());
        }
        Err(e) if crate::files::exchange_unsupported(&e) => {
            if let Err(e) = std::fs::rename(&tmp, path) {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
            sync_dir(path);
            return tmp_file.metadata().map(Replaced::Done);
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    }
    hook(Stage::AfterSwap);
    // `tmp` now names what was at `path` an instant ago.
    let displaced = std::fs::symlink_metadata(&tmp);
    if displaced.as_ref().is_ok_and(|m| seen.is(m)) {
        std::fs::remove_file(&tmp)?;
        sync_dir(path);
        return tmp_file.metadata().map(Replaced::Done);
    }
    // A save landed between the check and the exchange: it is the user's, put it back.
    let what = "was saved on disk while kbdb was writing it (the save is kept)";
    let ours = scan::identity(&tmp_file.metadata()?);
    if crate::files::exchange(&tmp, path).is_ok() {
        let back = std::fs::symlink_metadata(&tmp);
        if back.as_ref().is_ok_and(|m| scan::identity(m) == ours) {
            std::fs::remove_file(&tmp)?;
            sync_dir(path);
            return Ok(Replaced::Raced(what.into()));
        }
    }
    // Raced again (or the swap back failed): never delete it, keep it as a conflict copy.
    let copy = keep_as_conflict_copy(&tmp, path)?;
    sync_dir(path);
    Ok(Replaced::Copied(copy))
}

/// Remove the synced file `path` — the one `seen` describes — unless it changed: it is first
/// renamed away (one atomic step that takes whatever is there), then checked; a file that is not
/// the one read is put back (or, when something took its place meanwhile, kept as a conflict
/// copy).
pub(crate) fn remove_checked(path: &Path, seen: &mut Seen) -> std::io::Result<Replaced> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if seen.is(&m) && seen.same_bytes() => {}
        Ok(_) => return Ok(Replaced::Raced("changed on disk".into())),
        Err(_) => return Ok(Replaced::Raced("was deleted on disk".into())),
    }
    let aside = temp_name(path)?;
    std::fs::rename(path, &aside)?;
    let m = std::fs::symlink_metadata(&aside)?;
    if seen.is(&m) {
        std::fs::remove_file(&aside)?;
        sync_dir(path);
        return Ok(Replaced::Done(m));
    }
    // A save landed in between: put it back, never over something new.
    let copy = match std::fs::hard_link(&aside, path) {
        Ok(()) => {
            std::fs::remove_file(&aside)?;
            None
        }
        Err(_) => Some(keep_as_conflict_copy(&aside, path)?),
    };
    sync_dir(path);
    Ok(Replaced::Raced(match copy {
        None => "was saved on disk while kbdb was deleting it (the save is kept)".into(),
        Some(c) => format!(
            "was saved on disk while kbdb was deleting it; that save is kept as {}",
            c.display()
        ),
    }))
}

/// Keep the file at `from` (the user's, displaced by a race) beside `path` as
/// `<name>.conflict-<UTC time>[-n].<ext>` — a visible file the next sync takes in as a
/// document of its own — never over an existing file.
fn keep_as_conflict_copy(from: &Path, path: &Path) -> std::io::Result<std::path::PathBuf> {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_else(|| "md".into());
    let when = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    for n in 0..100 {
        let suffix = if n == 0 {
            String::new()
        } else {
            format!("-{n}")
        };
        let copy = path.with_file_name(format!("{stem}.conflict-{when}{suffix}.{ext}"));
        match std::fs::hard_link(from, &copy) {
            Ok(()) => {
                std::fs::remove_file(from)?;
                return Ok(copy);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    // Leave it under its hidden temporary name rather than lose it.
    Ok(from.to_path_buf())
}

/// A hidden temporary name beside `path` (`.<name>.kbdb-<pid>-<n>.tmp`): syncs and watchers
/// ignore it.
fn temp_name(path: &Path) -> std::io::Result<std::path::PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("the file has no folder"))?;
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("the path has no file name"))?;
    Ok(dir.join(format!(
        ".{}.kbdb-{}-{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )))
}

/// `bytes` in a new temporary file beside `path`, with `permissions`, flushed to disk: its
/// name and its (still open) handle.
fn write_temp(
    path: &Path,
    bytes: &[u8],
    permissions: Option<std::fs::Permissions>,
) -> std::io::Result<(std::path::PathBuf, std::fs::File)> {
    let tmp = temp_name(path)?;
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        if let Some(p) = permissions {
            f.set_permissions(p)?;
        }
        f.sync_all()?;
        Ok(f)
    })();
    match result {
        Ok(f) => Ok((tmp, f)),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Write `bytes` to `path` atomically: a hidden temporary file beside it (so watchers and
/// syncs ignore it), flushed to disk, then renamed over `path` — or, with `create_new`, linked
/// to `path` only if nothing is there (`AlreadyExists` otherwise). The permissions of the file
/// replaced are kept; the folder is synced so the rename survives a crash.
pub(crate) fn atomic_write(path: &Path, bytes: &[u8], create_new: bool) -> std::io::Result<()> {
    let permissions = match create_new {
        false => std::fs::metadata(path).ok().map(|m| m.permissions()),
        true => None,
    };
    let (tmp, f) = write_temp(path, bytes, permissions)?;
    drop(f);
    let result = (|| {
        if create_new {
            match std::fs::hard_link(&tmp, path) {
                Ok(()) => std::fs::remove_file(&tmp)?,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(e),
                // A file system without hard links: check, then rename (a narrow race).
                Err(_) if std::fs::symlink_metadata(path).is_ok() => {
                    return Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists));
                }
                Err(_) => std::fs::rename(&tmp, path)?,
            }
        } else {
            std::fs::rename(&tmp, path)?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    } else {
        sync_dir(path);
    }
    result
}

/// Make a rename or removal in `path`'s folder durable (best effort).
fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent()
        && let Ok(d) = std::fs::File::open(dir)
    {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Reads of a synced file ([`read_current`]) made on this thread.
        pub(super) static READS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    fn reads() -> u64 {
        READS.with(|n| n.get())
    }

    fn update(meta: Value, body: Option<&str>, title: Option<&str>) -> DocEdit {
        DocEdit::Update {
            metadata: meta.as_object().cloned(),
            body: body.map(str::to_string),
            title: title.map(str::to_string),
        }
    }

    fn section(heading: &str, action: &str, content: &str) -> DocEdit {
        DocEdit::Section {
            heading: heading.into(),
            action: action.into(),
            content: Some(content.into()),
            occurrence: None,
        }
    }

    const DOC: &str = "---\nstatus: draft   # comment kept while untouched\npoints: 3\n---\n# Login\n\nIntro.\n\n\n## Notes\n\nold note\n\n## Done\n\nyes\n";

    #[test]
    fn a_section_edit_keeps_everything_else_byte_for_byte() {
        let out = edited_text(DOC, &section("Notes", "replace", "new note")).unwrap();
        assert_eq!(
            out,
            "---\nstatus: draft   # comment kept while untouched\npoints: 3\n---\n# Login\n\nIntro.\n\n\n## Notes\n\nnew note\n\n## Done\n\nyes\n"
        );
    }

    #[test]
    fn a_metadata_change_renders_the_front_matter_in_its_syntax_and_order() {
        let out = edited_text(
            DOC,
            &update(
                serde_json::json!({"status": "ready", "owner": "ann"}),
                None,
                None,
            ),
        )
        .unwrap();
        assert_eq!(
            out,
            "---\nstatus: ready\npoints: 3\nowner: ann\n---\n# Login\n\nIntro.\n\n\n## Notes\n\nold note\n\n## Done\n\nyes\n"
        );
        let toml = "+++\nzeta = 1\nalpha = \"a\"\n+++\n# T\n";
        let out =
            edited_text(toml, &update(serde_json::json!({"alpha": "b"}), None, None)).unwrap();
        assert_eq!(out, "+++\nzeta = 1\nalpha = \"b\"\n+++\n# T\n");
        // All keys removed: no front matter left; a new key on a file without: YAML.
        let out = edited_text(
            toml,
            &update(serde_json::json!({"alpha": null, "zeta": null}), None, None),
        )
        .unwrap();
        assert_eq!(out, "# T\n");
        let out = edited_text("# T\n", &update(Value::Null, None, Some("New"))).unwrap();
        assert_eq!(out, "# New\n");
    }

    #[test]
    fn a_new_body_merges_its_front_matter_and_crlf_files_stay_crlf() {
        let out = edited_text(
            DOC,
            &update(Value::Null, Some("---\npoints: 5\n---\n# New"), None),
        )
        .unwrap();
        assert_eq!(
            out,
            "---\nstatus: draft   # comment kept while untouched\npoints: 5\n---\n# New\n"
        );
        let crlf = "\u{feff}# A\r\n\r\none\r\n\r\n## B\r\n\r\ntwo\r\n";
        let out = edited_text(crlf, &section("B", "append", "three")).unwrap();
        assert_eq!(
            out,
            "\u{feff}# A\r\n\r\none\r\n\r\n## B\r\n\r\ntwo\r\n\r\nthree\r\n"
        );
    }

    #[test]
    fn a_bad_section_edit_names_the_field() {
        let e = edited_text(DOC, &section("Nope", "replace", "x")).unwrap_err();
        assert_eq!(e.field(), Some("heading"));
    }

    #[test]
    fn atomic_writes_replace_or_refuse_to_clobber() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("a.md");
        atomic_write(&p, b"one", true).unwrap();
        let e = atomic_write(&p, b"two", true).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        atomic_write(&p, b"three", false).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"three");
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
    }

    /// Save as an editor does: a new file renamed over the old one.
    fn editor_save(p: &Path, text: &str) {
        let tmp = p.with_file_name("editor.swp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, p).unwrap();
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// Write "kbdb" over a file holding "old", with `save` run at `stage`.
    fn replace_with_a_save_at(stage: Stage, save: &dyn Fn(&Path)) -> (String, Vec<String>, bool) {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("a.md");
        std::fs::write(&p, "old").unwrap();
        let mut seen = read_current(&p, 100).unwrap().unwrap().seen;
        let r = replace_checked(&p, b"kbdb", &mut seen, &mut |s| {
            if s == stage {
                save(&p)
            }
        })
        .unwrap();
        let raced = matches!(r, Replaced::Raced(_));
        (
            std::fs::read_to_string(&p).unwrap(),
            names(tmp.path()),
            raced,
        )
    }

    #[test]
    fn a_save_landing_while_kbdb_writes_is_never_replaced() {
        // Nothing in between: replaced, no temporary file left.
        let (text, files, raced) = replace_with_a_save_at(Stage::BeforeSwap, &|_| {});
        assert_eq!(
            (text.as_str(), files, raced),
            ("kbdb", vec!["a.md".into()], false)
        );
        // A save before the re-check: seen by it, nothing replaced.
        for stage in [Stage::BeforeRecheck, Stage::BeforeSwap] {
            let (text, files, raced) =
                replace_with_a_save_at(stage, &|p| editor_save(p, "their save"));
            assert_eq!(
                (text.as_str(), files, raced),
                ("their save", vec!["a.md".into()], true),
                "a save at {stage:?} is kept at its path"
            );
        }
        // Written in place (same inode), even at the same size: the bytes are checked again.
        let (text, _, raced) = replace_with_a_save_at(Stage::BeforeRecheck, &|p| {
            let m = std::fs::metadata(p).unwrap();
            std::fs::write(p, "new").unwrap();
            let f = std::fs::File::options().write(true).open(p).unwrap();
            f.set_modified(m.modified().unwrap()).unwrap();
        });
        assert_eq!((text.as_str(), raced), ("new", true));
        // Deleted meanwhile: not recreated.
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("a.md");
        std::fs::write(&p, "old").unwrap();
        let mut seen = read_current(&p, 100).unwrap().unwrap().seen;
        let r = replace_checked(&p, b"kbdb", &mut seen, &mut |s| {
            if s == Stage::BeforeSwap {
                std::fs::remove_file(&p).unwrap();
            }
        })
        .unwrap();
        assert!(matches!(r, Replaced::Raced(m) if m.contains("deleted")));
        assert!(names(tmp.path()).is_empty());
    }

    #[test]
    fn a_save_raced_twice_is_kept_as_a_conflict_copy() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("a.md");
        std::fs::write(&p, "old").unwrap();
        let mut seen = read_current(&p, 100).unwrap().unwrap().seen;
        let r = replace_checked(&p, b"kbdb", &mut seen, &mut |s| match s {
            Stage::BeforeSwap => editor_save(&p, "first save"),
            Stage::AfterSwap => editor_save(&p, "second save"),
            Stage::BeforeRecheck => {}
        })
        .unwrap();
        let Replaced::Copied(copy) = r else {
            panic!("not kept as a copy")
        };
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "first save");
        assert_eq!(std::fs::read_to_string(&copy).unwrap(), "second save");
        let name = copy.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("a.conflict-") && name.ends_with(".md"),
            "{name}"
        );
        assert_eq!(names(tmp.path()).len(), 2, "{:?}", names(tmp.path()));
    }

    #[test]
    fn a_removal_takes_only_the_file_read() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("a.md");
        std::fs::write(&p, "old").unwrap();
        let mut seen = read_current(&p, 100).unwrap().unwrap().seen;
        editor_save(&p, "their save");
        assert!(matches!(
            remove_checked(&p, &mut seen).unwrap(),
            Replaced::Raced(_)
        ));
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "their save");
        let mut seen = read_current(&p, 100).unwrap().unwrap().seen;
        assert!(matches!(
            remove_checked(&p, &mut seen).unwrap(),
            Replaced::Done(_)
        ));
        assert!(names(tmp.path()).is_empty());
    }

    #[test]
    fn only_a_regular_file_within_the_limit_is_read() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("a.md");
        std::fs::write(&p, "12345").unwrap();
        assert!(read_current(&p, 5).unwrap().is_some());
        let e = format!("{:?}", read_current(&p, 4).err().unwrap());
        assert!(e.contains("limits.max_content_bytes"), "{e}");
        std::fs::remove_file(&p).unwrap();
        assert!(read_current(&p, 4).unwrap().is_none());
        // A link to an endless device is refused without reading it.
        std::os::unix::fs::symlink("/dev/zero", &p).unwrap();
        let e = format!("{:?}", read_current(&p, 4).err().unwrap());
        assert!(e.contains("symbolic link"), "{e}");
    }

    /// A synced document's edit reads its file before the transaction (`prepare_write`, the
    /// client's thread in the daemon); the writer only compares the file's identity, and reads
    /// it again only when it changed — then the edit is a conflict, as before.
    #[test]
    fn a_synced_file_is_read_before_the_transaction_and_only_compared_inside_it() {
        use crate::{Kb, WriteOp};
        let tmp = tempfile::tempdir().unwrap();
        let (kb, _) = Kb::open_or_create(tmp.path().join("db")).unwrap();
        let dir = tmp.path().join("notes");
        std::fs::create_dir(&dir).unwrap();
        let p = dir.join("a.md");
        std::fs::write(&p, "# A\n\n## Notes\n\nold\n").unwrap();
        let sync = || {
            kb.sync(&crate::sync::SyncRequest {
                dir: dir.clone(),
                prefix: Some("n/".into()),
                paths: None,
            })
            .unwrap()
        };
        sync();
        let edit = |content: &str| {
            kb.prepare_write(WriteOp::EditDocument {
                docid: "n/a".into(),
                edit: section("Notes", "append", content),
            })
            .unwrap()
        };
        let apply = |w| kb.write_prepared_unindexed(vec![Ok(w)]).unwrap().remove(0);
        let text = || std::fs::read_to_string(&p).unwrap();

        // Unchanged in between: read once, when prepared; written back.
        let before = reads();
        let w = edit("one");
        assert_eq!(reads() - before, 1, "read when prepared");
        apply(w).unwrap();
        assert_eq!(reads() - before, 1, "not read again in the transaction");
        assert_eq!(text(), "# A\n\n## Notes\n\nold\n\none\n");

        // Saved between the read and the transaction: read again there, and refused.
        let before = reads();
        let w = edit("two");
        editor_save(&p, "# A\n\n## Notes\n\ntheirs\n");
        let e = apply(w).unwrap_err();
        assert!(
            matches!(&e, KbError::Conflict { message, .. } if message.contains("changed on disk")),
            "{e:?}"
        );
        assert_eq!(reads() - before, 2, "read again in the transaction");
        assert_eq!(text(), "# A\n\n## Notes\n\ntheirs\n", "their save is kept");

        // Written in place with its size and modification time kept: the identity still
        // matches, and the bytes read again before the rename do not. Refused, their bytes kept.
        sync();
        let w = edit("three");
        let m = std::fs::metadata(&p).unwrap();
        std::fs::write(&p, "# A\n\n## Notes\n\nTHEIRS\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(m.modified().unwrap())
            .unwrap();
        let e = apply(w).unwrap_err();
        assert!(matches!(e, KbError::Conflict { .. }), "{e:?}");
        assert_eq!(text(), "# A\n\n## Notes\n\nTHEIRS\n");

        // Not synced: nothing is read.
        kb.write_group(vec![WriteOp::LearnDocument {
            docid: "plain".into(),
            markdown: "# P\n\n## Notes\n\nx\n".into(),
            title: None,
            metadata: None,
            tags: Vec::new(),
        }])
        .unwrap();
        let before = reads();
        let w = kb
            .prepare_write(WriteOp::EditDocument {
                docid: "plain".into(),
                edit: section("Notes", "append", "y"),
            })
            .unwrap();
        apply(w).unwrap();
        assert_eq!(reads(), before);
    }
}
