//! `export`: a consistent snapshot (one read transaction) of the store written as the
//! plain-file layout into a temporary sibling folder, then renamed into place.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use redb::{ReadTransaction, ReadableTable};

use super::layout::{self, Catalog, CatalogInfo, DocumentManifest, SectionMeta};
use crate::error::{KbError, Result};
use crate::store::txn::ReadTables;
use crate::types::records::{DocumentRecord, SectionRecord, decode};

/// What to export and where.
#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    /// Destination folder (created; must be absent or empty unless `force`).
    pub path: PathBuf,
    /// Also write `indexes/` (derived data another program can read).
    pub with_indexes: bool,
    /// Replace a non-empty destination.
    pub force: bool,
    /// Refuse destinations outside this folder (the MCP rule: the folder that holds the
    /// database, unless configured otherwise).
    pub confine_to: Option<PathBuf>,
}

/// Counts written, for the result.
pub(crate) struct Written {
    pub path: PathBuf,
    pub sections: u64,
    pub documents: u64,
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> KbError {
    move |e| KbError::io(what, e)
}

/// Where the export goes, checked before anything is written: the absolute destination. It
/// may be neither the database folder `db_dir` (canonical), nor hold it, nor be inside it (a
/// forced export there would replace the lexical index under the daemon).
pub(crate) fn resolve_target(opts: &ExportOptions, db_dir: &Path) -> Result<PathBuf> {
    let invalid = |m: String| KbError::invalid("path", m);
    let path = &opts.path;
    let name = path
        .file_name()
        .filter(|n| *n != "." && *n != "..")
        .ok_or_else(|| invalid(format!("{} does not name a folder", path.display())))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // Where it is allowed to go is checked before any folder is created (a refused export
    // creates nothing), then again on the created, resolved path.
    let root = match &opts.confine_to {
        Some(root) => Some(
            root.canonicalize()
                .map_err(io(format!("cannot resolve {}", root.display())))?,
        ),
        None => None,
    };
    let allowed = |target: &Path| -> Result<()> {
        if let Some(root) = &root
            && !target.starts_with(root)
        {
            return Err(invalid(format!(
                "{} is outside {}; exports are confined to the folder that holds the database",
                target.display(),
                root.display()
            )));
        }
        if db_dir.starts_with(target) {
            return Err(invalid(format!(
                "{} would replace the database folder itself",
                target.display()
            )));
        }
        if target.starts_with(db_dir) {
            return Err(invalid(format!(
                "{} is inside the database folder {}; export somewhere else",
                target.display(),
                db_dir.display()
            )));
        }
        Ok(())
    };
    allowed(&resolve_uncreated(&parent)?.join(name))?;
    fs::create_dir_all(&parent).map_err(io(format!("cannot create {}", parent.display())))?;
    let parent = parent
        .canonicalize()
        .map_err(io(format!("cannot resolve {}", parent.display())))?;
    let target = parent.join(name);
    allowed(&target)?;
    match fs::symlink_metadata(&target) {
        Ok(m) if m.file_type().is_symlink() => Err(invalid(format!(
            "{} is a symbolic link; export writes a real folder (remove the link or choose another path)",
            target.display()
        ))),
        Ok(m) if !m.is_dir() => Err(invalid(format!(
            "{} exists and is not a folder",
            target.display()
        ))),
        Ok(_) => {
            check_replaceable(&target, opts)?;
            Ok(target)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(target),
        Err(e) => Err(KbError::io(
            format!("cannot access {}", target.display()),
            e,
        )),
    }
}

/// Where `path` is, without creating anything: each existing step resolved (links followed),
/// the steps that do not exist yet taken literally (`..` goes up).
fn resolve_uncreated(path: &Path) -> Result<PathBuf> {
    use std::path::Component;
    let abs =
        std::path::absolute(path).map_err(io(format!("cannot resolve {}", path.display())))?;
    let mut resolved = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::ParentDir => {
                resolved.pop();
            }
            Component::CurDir => {}
            other => {
                resolved.push(other);
                if let Ok(p) = resolved.canonicalize() {
                    resolved = p;
                }
            }
        }
    }
    Ok(resolved)
}

/// How the caller spells "replace": the MCP tool (the confined export) takes `force: true`,
/// the CLI `--force`.
fn force_word(opts: &ExportOptions) -> &'static str {
    if opts.confine_to.is_some() {
        "`force: true`"
    } else {
        "--force"
    }
}

/// An existing folder `target` may be replaced only when it is empty, or, with `force`, when it
/// is an earlier kbdb export and nothing else: replacing deletes it, and a folder that is not
/// ours (a project's `src/`, a thesis) must never be deleted. The error names the folder and a
/// few of its entries.
fn check_replaceable(target: &Path, opts: &ExportOptions) -> Result<()> {
    let names = entry_names(target)?;
    if names.is_empty() {
        return Ok(());
    }
    let holds = listing(&names);
    let foreign = foreign_entry(target)?;
    let force = force_word(opts);
    let message = match (&foreign, opts.force) {
        (None, true) => return Ok(()),
        (None, false) => format!(
            "{} is not empty (it holds {holds}); it is an earlier kbdb export: use {force} to replace it",
            target.display()
        ),
        (Some(_), false) => format!(
            "{} is not empty (it holds {holds}); export into a new or empty folder ({force} replaces only an earlier kbdb export)",
            target.display()
        ),
        (Some(why), true) => format!(
            "{} is not a kbdb export ({why}; it holds {holds}); {force} replaces only an empty folder or an earlier kbdb export, never other files: choose another folder",
            target.display()
        ),
    };
    Err(KbError::invalid("path", message))
}

/// The names in `dir`, sorted, folders marked with a trailing `/`.
fn entry_names(dir: &Path) -> Result<Vec<String>> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map_err(io(format!("cannot read {}", dir.display())))?
        .flatten()
        .map(|e| {
            let dir = e.file_type().is_ok_and(|t| t.is_dir());
            format!(
                "{}{}",
                e.file_name().to_string_lossy(),
                if dir { "/" } else { "" }
            )
        })
        .collect();
    names.sort();
    Ok(names)
}

/// A few names for a message: `a, b/, c and 12 more`.
fn listing(names: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut out = names[..names.len().min(SHOWN)].join(", ");
    if names.len() > SHOWN {
        out.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    out
}

/// Why `dir` is not exactly a kbdb export (None when it is): it must have a `catalog.toml` that
/// reads as one, and hold nothing an export does not write — the layout's files at the top,
/// `sections/<2 characters>/<kbid>.<ext>` files, `documents/` folders and `.toml` manifests, the
/// index files in `indexes/`; no symbolic link, nothing else. A name is not enough: a folder
/// with a catalog and foreign files is not ours to delete.
pub(crate) fn foreign_entry(dir: &Path) -> Result<Option<String>> {
    use super::{index_files as ix, vectors_idx as vx};
    let catalog = dir.join(layout::CATALOG);
    match fs::symlink_metadata(&catalog) {
        Ok(m) if m.is_file() => {}
        _ => return Ok(Some("it has no catalog.toml".into())),
    }
    let is_catalog = super::import::read_bounded(&catalog, super::import::MAX_TOML_BYTES)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .is_some_and(|t| toml::from_str::<Catalog>(&t).is_ok());
    if !is_catalog {
        return Ok(Some("its catalog.toml is not a kbdb catalog".into()));
    }
    let foreign = |p: &Path| {
        Ok(Some(format!(
            "{} is not part of an export",
            p.strip_prefix(dir).unwrap_or(p).display()
        )))
    };
    let kind = |p: &Path| -> Result<fs::FileType> {
        Ok(fs::symlink_metadata(p)
            .map_err(io(format!("cannot access {}", p.display())))?
            .file_type())
    };
    let children = |p: &Path| -> Result<Vec<(PathBuf, String, fs::FileType)>> {
        let mut out = Vec::new();
        for e in fs::read_dir(p).map_err(io(format!("cannot read {}", p.display())))? {
            let e = e.map_err(io(format!("cannot read {}", p.display())))?;
            let t = e
                .file_type()
                .map_err(io(format!("cannot access {}", e.path().display())))?;
            out.push((e.path(), e.file_name().to_string_lossy().into_owned(), t));
        }
        Ok(out)
    };
    for (path, name, t) in children(dir)? {
        let file = t.is_file();
        let folder = t.is_dir();
        let known = match name.as_str() {
            layout::CATALOG | layout::SYNONYMS | layout::MODELS => file,
            layout::SECTIONS_DIR | layout::DOCUMENTS_DIR | layout::INDEXES_DIR => folder,
            _ => false,
        };
        if !known {
            return foreign(&path);
        }
    }
    let sections = dir.join(layout::SECTIONS_DIR);
    if kind(&sections).is_ok_and(|t| t.is_dir()) {
        for (fan, fan_name, t) in children(&sections)? {
            if !t.is_dir() || fan_name.chars().count() != 2 {
                return foreign(&fan);
            }
            for (path, name, t) in children(&fan)? {
                let stem = name.split_once('.').map(|(s, _)| s).unwrap_or("");
                if !t.is_file()
                    || !crate::types::kbid::is_kbid(stem)
                    || !stem.starts_with(&fan_name)
                {
                    return foreign(&path);
                }
            }
        }
    }
    let mut stack = vec![dir.join(layout::DOCUMENTS_DIR)];
    while let Some(d) = stack.pop() {
        if !kind(&d).is_ok_and(|t| t.is_dir()) {
            continue;
        }
        for (path, name, t) in children(&d)? {
            if t.is_dir() {
                stack.push(path);
            } else if !t.is_file() || !name.ends_with(".toml") {
                return foreign(&path);
            }
        }
    }
    let indexes = dir.join(layout::INDEXES_DIR);
    if kind(&indexes).is_ok_and(|t| t.is_dir()) {
        for (path, name, t) in children(&indexes)? {
            let known = [
                ix::META_FILE,
                ix::TERMS_FILE,
                ix::POSITIONS_FILE,
                ix::CORPUS_FILE,
                ix::REFERENCES_FILE,
                vx::VECTORS_FILE,
                vx::META_FILE,
            ]
            .contains(&name.as_str());
            if !t.is_file() || !known {
                return foreign(&path);
            }
        }
    }
    Ok(None)
}

/// Write the snapshot of `txn` into `target` (via a temporary sibling).
pub(crate) fn export(
    txn: &ReadTransaction,
    target: &Path,
    opts: &ExportOptions,
    schema_version: u32,
    now: &str,
    progress: &dyn Fn(u64, u64),
) -> Result<Written> {
    let parent = target.parent().unwrap_or(Path::new("."));
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let unique = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let tmp = parent.join(format!(".{name}.export-{unique}"));
    fs::create_dir(&tmp).map_err(io(format!("cannot create {}", tmp.display())))?;
    let written = write_all(txn, &tmp, opts, schema_version, now, progress).inspect(|_| {
        sync_dir(&tmp);
    });
    let written = match written {
        Ok(w) => w,
        Err(e) => {
            let _ = fs::remove_dir_all(&tmp);
            return Err(e);
        }
    };
    if let Err(e) = put_in_place(&tmp, target, parent, &name, &unique, opts) {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    remove_stale_temporaries(parent, &name);
    sync_dir(parent);
    Ok(Written {
        path: target.to_path_buf(),
        ..written
    })
}

/// Move the finished export `tmp` to `target`. An absent or empty target is replaced by one
/// rename. An earlier export (checked again: the folder may have changed since) is exchanged
/// with `tmp` in one atomic step, so the previous export stays whole until the new one is in
/// place, then removed. Where the exchange is not available, the old export moves aside
/// first, and back when the new one cannot be renamed in.
fn put_in_place(
    tmp: &Path,
    target: &Path,
    parent: &Path,
    name: &str,
    unique: &str,
    opts: &ExportOptions,
) -> Result<()> {
    let renamed = |e| KbError::io(format!("cannot rename into {}", target.display()), e);
    let occupied = match fs::symlink_metadata(target) {
        Ok(_) => {
            check_replaceable(target, opts)?;
            !entry_names(target)?.is_empty()
        }
        Err(_) => false,
    };
    if !occupied {
        // rename(2) replaces an empty folder, and fails (changing nothing) on anything else.
        return fs::rename(tmp, target).map_err(renamed);
    }
    if crate::files::exchange(tmp, target).is_ok() {
        // `tmp` now holds the previous export. Delete it only if it is still nothing but an
        // export (a file dropped into it meanwhile keeps it, visible, beside the new one).
        if foreign_entry(tmp)?.is_none() {
            let _ = fs::remove_dir_all(tmp);
        } else {
            let kept = parent.join(format!("{name}.previous-{unique}"));
            tracing::warn!(
                "{} received other files while the export was written; kept as {}",
                target.display(),
                kept.display()
            );
            let _ = fs::rename(tmp, &kept);
        }
        return Ok(());
    }
    let old = parent.join(format!(".{name}.replaced-{unique}"));
    fs::rename(target, &old).map_err(io(format!("cannot move {} aside", target.display())))?;
    if let Err(e) = fs::rename(tmp, target) {
        let _ = fs::rename(&old, target);
        return Err(renamed(e));
    }
    let _ = fs::remove_dir_all(&old);
    Ok(())
}

/// Remove the temporary folders that interrupted exports left in `parent`, where an export to
/// `name` has just been put in place. A folder of a process still running is another export at
/// work and is left alone. Of processes that are gone:
/// - `.{x}.export-{pid}-…`, an export that never reached its target, goes whatever `x` is;
/// - `.{x}.replaced-{pid}-…`, a target moved aside, goes only once `x` exists again (for `name`,
///   the export just put in place): if the process died between moving it aside and renaming
///   its export in, it is the only copy of `x`, and stays.
fn remove_stale_temporaries(parent: &Path, name: &str) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(temporary) = file_name.to_str().and_then(parse_temporary) else {
            continue;
        };
        if crate::process::alive(temporary.pid) {
            continue;
        }
        let superseded = !temporary.moved_aside
            || temporary.target == name
            || parent.join(temporary.target).exists();
        if superseded {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// An export's temporary folder, by its name: `.{target}.export-{pid}-{nanos}` (being written)
/// or `.{target}.replaced-{pid}-{nanos}` (an earlier `target` moved aside).
#[derive(Debug, PartialEq)]
struct Temporary<'a> {
    target: &'a str,
    pid: u32,
    moved_aside: bool,
}

fn parse_temporary(file_name: &str) -> Option<Temporary<'_>> {
    const EXPORT: &str = ".export-";
    const REPLACED: &str = ".replaced-";
    let rest = file_name.strip_prefix('.')?;
    // The last marker counts: a target's own name may contain either.
    let (at, marker, moved_aside) = match (rest.rfind(EXPORT), rest.rfind(REPLACED)) {
        (Some(e), Some(r)) if r > e => (r, REPLACED, true),
        (Some(e), _) => (e, EXPORT, false),
        (None, Some(r)) => (r, REPLACED, true),
        (None, None) => return None,
    };
    let (target, tail) = (&rest[..at], &rest[at + marker.len()..]);
    let (pid, nanos) = tail.split_once('-')?;
    if target.is_empty() || nanos.is_empty() || !nanos.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(Temporary {
        target,
        pid: pid.parse().ok()?,
        moved_aside,
    })
}

fn sync_dir(dir: &Path) {
    if let Ok(f) = fs::File::open(dir) {
        let _ = f.sync_all();
    }
}

/// Create a new file (never following or replacing anything) and write `bytes`.
fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io(format!("cannot create {}", path.display())))?;
    f.write_all(bytes)
        .map_err(io(format!("cannot write {}", path.display())))?;
    Ok(())
}

fn toml_text<T: serde::Serialize>(value: &T) -> Result<String> {
    toml::to_string(value).map_err(|e| KbError::Storage(format!("cannot write TOML: {e}")))
}

fn write_all(
    txn: &ReadTransaction,
    root: &Path,
    opts: &ExportOptions,
    schema_version: u32,
    now: &str,
    progress: &dyn Fn(u64, u64),
) -> Result<Written> {
    let t = ReadTables::open(txn)?;
    let total = redb::ReadableTableMetadata::len(&t.sections)?
        + redb::ReadableTableMetadata::len(&t.documents)?;
    let mut done = 0u64;
    let mut sections = 0u64;
    let mut index_input = Vec::new();
    for row in t.sections.iter()? {
        let (k, v) = row?;
        let kbid = k.value();
        let rec: SectionRecord = decode("sections", kbid, v.value())?;
        let bytes = t.content_of(&rec)?.ok_or_else(|| KbError::Corrupt {
            table: "content",
            key: kbid.to_string(),
            detail: "section has no content".into(),
        })?;
        let dir = layout::section_dir(root, kbid);
        fs::create_dir_all(&dir).map_err(io(format!("cannot create {}", dir.display())))?;
        let file = format!("{kbid}.{}", layout::extension(&rec.section_type));
        write_new(&dir.join(&file), &bytes)?;
        if opts.with_indexes {
            index_input.push((kbid.to_string(), rec.section_type.clone(), bytes.clone()));
        }
        let meta = SectionMeta {
            kbid: kbid.to_string(),
            section_type: rec.section_type,
            file,
            title: rec.title,
            description: rec.description,
            tags: rec.tags,
            source_key: rec.source_key,
            standalone: rec.standalone,
            created_at: rec.created_at,
            updated_at: rec.updated_at,
            size: rec.size,
            checksum: rec.checksum,
        };
        write_new(
            &dir.join(format!("{kbid}.toml")),
            toml_text(&meta)?.as_bytes(),
        )?;
        sections += 1;
        done += 1;
        if done.is_multiple_of(256) {
            progress(done, total);
        }
    }
    fs::create_dir_all(root.join(layout::DOCUMENTS_DIR))
        .map_err(io(format!("cannot create {}", root.display())))?;
    let mut documents = 0u64;
    for row in t.documents.iter()? {
        let (k, v) = row?;
        let docid = k.value();
        // Stored docids were validated when learned; check again so no path can escape.
        crate::types::validate::validate_docid(docid)?;
        let doc: DocumentRecord = decode("documents", docid, v.value())?;
        let path = layout::document_path(root, docid);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(io(format!("cannot create {}", dir.display())))?;
        }
        let manifest = DocumentManifest {
            docid: docid.to_string(),
            title: doc.title,
            doc_type: doc.doc_type,
            metadata: doc.metadata,
            created_at: doc.created_at,
            updated_at: doc.updated_at,
            kbids: doc.kbids,
        };
        write_new(&path, toml_text(&manifest)?.as_bytes())?;
        documents += 1;
        done += 1;
        if done.is_multiple_of(256) {
            progress(done, total);
        }
    }
    let synonyms = crate::store::synonyms::list(txn)?;
    if !synonyms.is_empty() {
        let table: std::collections::BTreeMap<String, Vec<String>> = synonyms
            .iter()
            .map(|e| (e.term.clone(), e.synonyms.clone()))
            .collect();
        let doc = std::collections::BTreeMap::from([("synonyms", table)]);
        write_new(&root.join(layout::SYNONYMS), toml_text(&doc)?.as_bytes())?;
    }
    if let Some(models) = txn
        .open_table(crate::store::tables::COLLECTION)?
        .get("models")?
    {
        write_new(&root.join(layout::MODELS), models.value().as_bytes())?;
    }
    if opts.with_indexes {
        super::write_export_indexes(&t, root, &index_input, now)?;
        super::write_export_vectors(txn, root, now)?;
    }
    let catalog = Catalog {
        catalog: CatalogInfo {
            format_version: layout::FORMAT_VERSION,
            kbdb_version: env!("CARGO_PKG_VERSION").to_string(),
            schema_version,
            exported_at: now.to_string(),
            sections,
            documents,
            synonyms: synonyms.len() as u64,
            with_indexes: opts.with_indexes,
        },
    };
    write_new(&root.join(layout::CATALOG), toml_text(&catalog)?.as_bytes())?;
    progress(total, total);
    Ok(Written {
        path: root.to_path_buf(),
        sections,
        documents,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_folder_names_are_recognised_by_their_last_marker() {
        let t = |target, pid, moved_aside| {
            Some(Temporary {
                target,
                pid,
                moved_aside,
            })
        };
        assert_eq!(
            parse_temporary(".full.export-42-1700"),
            t("full", 42, false)
        );
        assert_eq!(
            parse_temporary(".full.replaced-42-1700"),
            t("full", 42, true)
        );
        assert_eq!(
            parse_temporary(".x.export-y.replaced-7-8"),
            t("x.export-y", 7, true)
        );
        assert_eq!(
            parse_temporary(".a.replaced-1-2.export-3-4"),
            t("a.replaced-1-2", 3, false)
        );
        for not_ours in [
            "full",
            ".full",
            "full.export-42-1700",
            ".export-42-1700",
            ".full.export-42",
            ".full.export-x-1700",
            ".full.export-42-17a0",
        ] {
            assert_eq!(parse_temporary(not_ours), None, "{not_ours}");
        }
    }
}
