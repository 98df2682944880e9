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

use super::engine::{prepare_text, syntax_name};
use super::records::{self, FileRecord, FileStat, RecordTable, SyncRoot};
use super::scan;
use crate::collections::edit::{DocEdit, EditResult, delete_document, merge};
use crate::config::Limits;
use crate::error::{KbError, Result};
use crate::store::tables::{SYNC_FILES, SYNC_ROOTS};
use crate::store::txn::WriteTables;
use crate::text::frontmatter::{self, Syntax};
use crate::text::section_edit::{self, Action};
use crate::writes::{self, WriteOutcome};

/// The edit applied to the document's file and store when `docid` is a synced document (or
/// a new one under a synced folder's prefix): `Some(result)`. `None`: not synced, edit the
/// store only. The outer error is a storage failure; the inner one the edit's (nothing
/// written, file untouched).
pub(crate) fn apply_edit(
    t: &mut WriteTables<'_>,
    docid: &str,
    edit: &DocEdit,
    limits: &Limits,
) -> Result<Option<Result<WriteOutcome>>> {
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
    let current = match std::fs::read(&path) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
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
            return Ok(Some(Ok(WriteOutcome::Edited(edited(
                docid, action, None, &path,
            )))));
        }
        (None, _) => return Ok(Some(Err(conflict(docid, &path, &rec, "was deleted")))),
        (Some(b), _) if scan::hash(&b) != rec.hash => {
            return Ok(Some(Err(conflict(docid, &path, &rec, "changed"))));
        }
        (Some(b), _) => match String::from_utf8(b) {
            Ok(s) => s,
            Err(_) => return Ok(Some(Err(conflict(docid, &path, &rec, "changed")))),
        },
    };
    if let DocEdit::Delete = edit {
        if let Err(e) = std::fs::remove_file(&path) {
            return Ok(Some(Err(KbError::io(
                format!("cannot delete {}", path.display()),
                e,
            ))));
        }
        sync_dir(&path);
        delete_document(t, docid)?;
        files.remove(docid)?;
        return Ok(Some(Ok(WriteOutcome::Edited(edited(
            docid, action, None, &path,
        )))));
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
    if text != old
        && let Err(e) = atomic_write(&path, text.as_bytes(), false)
    {
        return Ok(Some(Err(KbError::io(
            format!("cannot write {}", path.display()),
            e,
        ))));
    }
    let record = match record_of(&rec.root, &rec.path, &path, &text, recorded_at_ns, syntax) {
        Ok(r) => r,
        Err(e) => return Ok(Some(Err(e))),
    };
    let WriteOutcome::Document(d) = writes::apply_prepared(t, doc)? else {
        return Err(KbError::Storage("unexpected write outcome".into()));
    };
    records::put_file(&mut files, docid, &record)?;
    let mut r = edited(docid, action, Some(d), &path);
    r.changed = r.changed || text != old;
    Ok(Some(Ok(WriteOutcome::Edited(r))))
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
) -> Result<Result<WriteOutcome>> {
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
    let WriteOutcome::Document(d) = writes::apply_prepared(t, doc)? else {
        return Err(KbError::Storage("unexpected write outcome".into()));
    };
    records::put_file(files, docid, &record)?;
    let mut r = edited(docid, "create", Some(d), &path);
    r.changed = true;
    Ok(Ok(WriteOutcome::Edited(r)))
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
    document: Option<crate::model::DocumentLearnResult>,
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
            "{docid}: its file {} {what} on disk since kbdb last read it; the edit was refused and nothing was written (neither the file nor the document). Sync the folder (`kbdb sync {}`, or a running `kbdb watch`) to take in the file's version, then edit again",
            path.display(),
            rec.root
        ),
        path: path.to_path_buf(),
    }
}

/// The record of a file kbdb just wrote.
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
    let st = FileStat::of(&m);
    Ok(FileRecord {
        root: root.to_string(),
        path: rel.to_string(),
        hash: scan::hash(text.as_bytes()),
        size: st.size,
        mtime_ns: st.mtime_ns,
        ctime_ns: st.ctime_ns,
        ino: st.ino,
        recorded_at_ns,
        front_matter: syntax_name(syntax),
    })
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

/// Write `bytes` to `path` atomically: a hidden temporary file beside it (so watchers and
/// syncs ignore it), flushed to disk, then renamed over `path` — or, with `create_new`, linked
/// to `path` only if nothing is there (`AlreadyExists` otherwise). The permissions of the file
/// replaced are kept; the folder is synced so the rename survives a crash.
pub(crate) fn atomic_write(path: &Path, bytes: &[u8], create_new: bool) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("the file has no folder"))?;
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("the path has no file name"))?;
    let tmp = dir.join(format!(
        ".{}.kbdb-{}-{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        if !create_new && let Ok(m) = std::fs::metadata(path) {
            f.set_permissions(m.permissions())?;
        }
        f.sync_all()?;
        drop(f);
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
}
