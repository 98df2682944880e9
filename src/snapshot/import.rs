//! `import`: read a plain-file layout, verify every entry (checksum, kbid, type, paths), report
//! and skip bad ones (or stop at the first with `strict`), and write the rest in one
//! transaction. The lexical index catches up from the change log like after any write.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::layout::{self, Catalog, DocumentManifest, SectionMeta};
use super::vectors_idx::{VectorsIdx, VectorsMeta};
use crate::error::{KbError, Result};
use crate::types::kbid;
use crate::types::records::SectionRecord;
use crate::types::validate;

/// One entry that was not imported, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ImportProblem {
    /// Path relative to the layout's root.
    pub path: String,
    pub reason: String,
}

/// Result of `import` / `migrate`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ImportResult {
    pub path: String,
    pub sections_imported: u64,
    /// Sections that were already in the database (same content, same kbid).
    pub sections_existing: u64,
    pub documents_imported: u64,
    /// Documents that existed in the database and were replaced by the imported manifest.
    pub documents_replaced: u64,
    pub synonyms_imported: u64,
    /// Vectors found in `indexes/vectors.idx` and valid.
    pub vectors_found: u64,
    /// Whether the layout's `models.toml` replaced the database's models.
    #[serde(default)]
    pub models_imported: bool,
    /// Of those, vectors stored for imported sections: their model is the configured provider's
    /// (docs/vectors.md); the others are embedded anew.
    pub vectors_reused: u64,
    pub problems: Vec<ImportProblem>,
    pub elapsed_ms: f64,
}

/// A section read and verified, ready to be written.
#[doc(hidden)] // public for the fuzz targets (fuzz/)
pub struct ReadySection {
    pub kbid: String,
    pub record: SectionRecord,
    pub bytes: Vec<u8>,
}

/// Everything read from a layout.
#[doc(hidden)] // public for the fuzz targets (fuzz/)
pub struct Plan {
    pub sections: Vec<ReadySection>,
    pub documents: Vec<DocumentManifest>,
    pub synonyms: BTreeMap<String, Vec<String>>,
    pub vectors_found: u64,
    /// The valid vectors of the layout with their metadata.
    pub vectors: Option<(VectorsMeta, VectorsIdx)>,
    /// The layout's `models.toml`, checked.
    pub models: Option<String>,
    pub problems: Vec<ImportProblem>,
}

struct Reader<'a> {
    root: &'a Path,
    strict: bool,
    problems: Vec<ImportProblem>,
}

impl Reader<'_> {
    fn rel(&self, p: &Path) -> String {
        p.strip_prefix(self.root)
            .unwrap_or(p)
            .to_string_lossy()
            .into_owned()
    }

    /// Record a bad entry; in strict mode it is the error that stops the import.
    fn problem(&mut self, path: &Path, reason: impl Into<String>) -> Result<()> {
        let p = ImportProblem {
            path: self.rel(path),
            reason: reason.into(),
        };
        if self.strict {
            return Err(KbError::BadImport {
                path: p.path,
                reason: p.reason,
            });
        }
        self.problems.push(p);
        Ok(())
    }
}

/// Bound on `catalog.toml`, a section's metadata and `vectors-meta.toml`: a few KiB each in any
/// real export (docs/file-layout.md, "Bounds").
pub const MAX_TOML_BYTES: u64 = 1024 * 1024;
/// Bound on a document manifest, `synonyms.toml` and `models.toml`: they grow with a document's
/// sections and the synonyms, still far below this.
pub const MAX_LIST_BYTES: u64 = 64 * 1024 * 1024;

/// The most bytes a section's content file may have: `limits.max_content_bytes` and an eighth
/// more, as learning checks the size before the text is normalised (NFC may lengthen it a little).
pub fn max_section_bytes(limits: &crate::config::Limits) -> u64 {
    limits
        .max_content_bytes
        .saturating_add(limits.max_content_bytes / 8)
}

/// Why a file of the layout could not be opened or read, as an import reports it.
fn layout_file_error(e: std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "is missing".to_string(),
        _ if e.raw_os_error() == Some(libc::ELOOP) => {
            "is a symbolic link (not followed)".to_string()
        }
        _ if crate::files::is_not_regular(&e) => "is not a regular file".to_string(),
        _ => match crate::files::too_large(&e) {
            Some(t) => format!("is {} bytes; the limit for this file is {}", t.len, t.max),
            None => format!("cannot be read: {e}"),
        },
    }
}

/// Open a file of the layout for reading: never through a symbolic link (`O_NOFOLLOW`), never
/// blocking on a FIFO or device (`O_NONBLOCK`), and only a regular file. Returns it with its
/// size.
fn open_regular(path: &Path) -> std::result::Result<(fs::File, u64), String> {
    let file =
        crate::files::open_regular(path, false, libc::O_NOFOLLOW).map_err(layout_file_error)?;
    let meta = file.metadata().map_err(layout_file_error)?;
    Ok((file, meta.len()))
}

/// A regular file's bytes, at most `max` of them (`files::read_bounded`: the size is checked
/// before anything is read, so a sparse 50 GB file is refused, not read). Symbolic links, FIFOs
/// and devices are refused.
#[doc(hidden)] // public for the fuzz targets (fuzz/)
pub fn read_bounded(path: &Path, max: u64) -> std::result::Result<Vec<u8>, String> {
    crate::files::read_bounded(path, max, libc::O_NOFOLLOW).map_err(layout_file_error)
}

fn read_toml<T: serde::de::DeserializeOwned>(
    path: &Path,
    max: u64,
) -> std::result::Result<T, String> {
    let bytes = read_bounded(path, max)?;
    let text = String::from_utf8(bytes).map_err(|_| "is not UTF-8".to_string())?;
    toml::from_str(&text).map_err(|e| format!("is not valid: {}", e.message()))
}

/// Entries of a folder, sorted by name (deterministic reports); symlinks are reported.
fn entries(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = match fs::read_dir(dir) {
        Ok(rd) => rd.flatten().map(|e| e.path()).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(KbError::io(format!("cannot read {}", dir.display()), e)),
    };
    out.sort();
    Ok(out)
}

/// Read and verify the layout at `root`.
#[doc(hidden)] // public for the fuzz targets (fuzz/)
pub fn read_layout(
    root: &Path,
    strict: bool,
    limits: &crate::config::Limits,
    progress: &dyn Fn(u64, u64),
) -> Result<Plan> {
    let catalog_path = root.join(layout::CATALOG);
    let catalog: Catalog =
        read_toml(&catalog_path, MAX_TOML_BYTES).map_err(|reason| KbError::BadImport {
            path: layout::CATALOG.into(),
            reason: format!(
                "{reason} — {} is not a kbdb export (catalog.toml is required)",
                root.display()
            ),
        })?;
    if catalog.catalog.format_version != layout::FORMAT_VERSION {
        return Err(KbError::BadImport {
            path: layout::CATALOG.into(),
            reason: format!(
                "format_version {} is not known to this kbdb (it reads version {}); upgrade kbdb",
                catalog.catalog.format_version,
                layout::FORMAT_VERSION
            ),
        });
    }
    let mut r = Reader {
        root,
        strict,
        problems: Vec::new(),
    };
    let expected = catalog.catalog.sections + catalog.catalog.documents;

    // Sections: sections/<2 chars>/<kbid>.toml beside <kbid>.<ext>.
    let mut sections = Vec::new();
    let mut done = 0u64;
    // Entries found, good or bad, to compare with the catalog's counts.
    let mut section_files = 0u64;
    let mut document_files = 0u64;
    for fan in entries(&root.join(layout::SECTIONS_DIR))? {
        if !fan.is_dir() || fs::symlink_metadata(&fan).is_ok_and(|m| m.file_type().is_symlink()) {
            r.problem(&fan, "is not a fan-out folder of sections")?;
            continue;
        }
        for path in entries(&fan)? {
            if path.extension().is_none_or(|e| e != "toml") {
                continue; // content files are read through their metadata
            }
            done += 1;
            section_files += 1;
            if done.is_multiple_of(256) {
                progress(done, expected);
            }
            match read_section(&path, limits) {
                Ok(s) => sections.push(s),
                Err(reason) => r.problem(&path, reason)?,
            }
        }
    }
    // Content files without metadata are reported too (they would be silently lost).
    let known: HashSet<&str> = sections.iter().map(|s| s.kbid.as_str()).collect();
    for fan in entries(&root.join(layout::SECTIONS_DIR))? {
        if !fan.is_dir() {
            continue;
        }
        for path in entries(&fan)? {
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            if path.extension().is_some_and(|e| e != "toml")
                && !known.contains(stem)
                && !path.with_extension("toml").exists()
            {
                r.problem(&path, "content file without its metadata (.toml); skipped")?;
            }
        }
    }
    let imported: HashSet<String> = sections.iter().map(|s| s.kbid.clone()).collect();

    // Documents: documents/<docid>.toml, docid = the path below documents/.
    let mut documents = Vec::new();
    let docs_root = root.join(layout::DOCUMENTS_DIR);
    let mut stack = vec![docs_root.clone()];
    while let Some(dir) = stack.pop() {
        for path in entries(&dir)? {
            let meta = fs::symlink_metadata(&path);
            if meta.as_ref().is_ok_and(|m| m.file_type().is_symlink()) {
                r.problem(&path, "is a symbolic link (not followed)")?;
                continue;
            }
            if meta.is_ok_and(|m| m.is_dir()) {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "toml") {
                r.problem(&path, "is not a document manifest (.toml); skipped")?;
                continue;
            }
            done += 1;
            document_files += 1;
            if done.is_multiple_of(256) {
                progress(done, expected);
            }
            match read_document(&docs_root, &path, &imported) {
                Ok((doc, missing)) => {
                    for k in missing {
                        r.problem(
                            &path,
                            format!("lists section {k}, which is not in the layout (or was skipped); dropped from the manifest"),
                        )?;
                    }
                    if doc.kbids.is_empty() {
                        r.problem(&path, "has no importable section; skipped")?;
                    } else {
                        documents.push(doc);
                    }
                }
                Err(reason) => r.problem(&path, reason)?,
            }
        }
    }
    documents.sort_by(|a, b| a.docid.cmp(&b.docid));

    let synonyms_path = root.join(layout::SYNONYMS);
    let mut synonyms = BTreeMap::new();
    if synonyms_path.exists() {
        match read_toml::<BTreeMap<String, BTreeMap<String, Vec<String>>>>(
            &synonyms_path,
            MAX_LIST_BYTES,
        ) {
            Ok(mut t) => synonyms = t.remove("synonyms").unwrap_or_default(),
            Err(reason) => r.problem(&synonyms_path, reason)?,
        }
    }

    let models_path = root.join(layout::MODELS);
    let mut models = None;
    if models_path.exists() {
        match read_bounded(&models_path, MAX_LIST_BYTES) {
            Ok(b) => {
                let text = String::from_utf8_lossy(&b).into_owned();
                match crate::collections::schema::ModelSet::from_toml(&text) {
                    Ok(_) => models = Some(text),
                    Err(e) => r.problem(&models_path, e.to_string())?,
                }
            }
            Err(e) => r.problem(&models_path, e)?,
        }
    }
    // An export cut short or copied in part reads like a smaller one: only the catalog, written
    // last, says what should be there.
    let found = [
        ("section", catalog.catalog.sections, section_files),
        ("document", catalog.catalog.documents, document_files),
        (
            "synonym term",
            catalog.catalog.synonyms,
            synonyms.len() as u64,
        ),
    ];
    for (what, listed, found) in found {
        if listed != found {
            r.problem(
                &catalog_path,
                format!(
                    "lists {listed} {what}(s) but the layout holds {found}: the export is {} \
                     (import it with --strict to refuse it)",
                    if found < listed {
                        "incomplete (cut short or partly copied)"
                    } else {
                        "not the one the catalog describes (files were added)"
                    }
                ),
            )?;
        }
    }
    let vectors = read_vectors(&mut r, root, section_files)?;
    progress(expected, expected);
    Ok(Plan {
        sections,
        documents,
        synonyms,
        vectors_found: vectors
            .as_ref()
            .map(|(_, idx)| idx.records.len() as u64)
            .unwrap_or(0),
        vectors,
        models,
        problems: r.problems,
    })
}

fn read_section(
    path: &Path,
    limits: &crate::config::Limits,
) -> std::result::Result<ReadySection, String> {
    let meta: SectionMeta = read_toml(path, MAX_TOML_BYTES)?;
    if !kbid::is_kbid(&meta.kbid) {
        return Err(format!("kbid {:?} is not a valid kbid", meta.kbid));
    }
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    if stem != meta.kbid {
        return Err(format!(
            "the file is named {stem} but describes {}",
            meta.kbid
        ));
    }
    let fan = path
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("");
    if fan != &meta.kbid[..2] {
        return Err(format!(
            "is in folder {fan}/ but belongs in {}/",
            &meta.kbid[..2]
        ));
    }
    let prefix = format!("{}.", meta.kbid);
    if !meta.file.starts_with(&prefix)
        || meta.file.contains(['/', '\\'])
        || meta.file.contains("..")
    {
        return Err(format!(
            "file {:?} must be {}<extension>, beside the metadata",
            meta.file, prefix
        ));
    }
    let content_path = path.with_file_name(&meta.file);
    let max = max_section_bytes(limits);
    let bytes = read_bounded(&content_path, max)
        .map_err(|e| format!("content file {e} (limits.max_content_bytes and an eighth more)"))?;
    let digest = kbid::sha256(&bytes);
    if kbid::hex(&digest) != meta.checksum {
        return Err(format!(
            "content checksum mismatch: the file hashes to {}, the metadata says {}",
            kbid::hex(&digest),
            meta.checksum
        ));
    }
    if kbid::encode_kbid(&digest) != meta.kbid {
        return Err(format!(
            "wrong kbid: the content's kbid is {}, not {}",
            kbid::encode_kbid(&digest),
            meta.kbid
        ));
    }
    if let Some(problem) = crate::maintenance::check::type_problem(&meta.section_type, &bytes) {
        return Err(problem);
    }
    if meta.size != bytes.len() as u64 {
        return Err(format!(
            "size says {} but the content is {} bytes",
            meta.size,
            bytes.len()
        ));
    }
    let title = validate::validate_line("title", meta.title.as_deref(), validate::MAX_TITLE_CHARS)
        .map_err(|e| e.to_string())?;
    let description =
        validate::validate_description(meta.description.as_deref()).map_err(|e| e.to_string())?;
    let tags = validate::validate_tags(&meta.tags).map_err(|e| e.to_string())?;
    let terms_count = if meta.section_type.starts_with("image/") {
        0
    } else {
        let text = String::from_utf8_lossy(&bytes);
        let mut all = String::new();
        for part in [title.as_deref(), description.as_deref(), Some(&text)]
            .into_iter()
            .flatten()
        {
            all.push_str(part);
            all.push('\n');
        }
        crate::text::shingles::distinct_terms(&all) as u64
    };
    for (field, value) in [
        ("created_at", &meta.created_at),
        ("updated_at", &meta.updated_at),
    ] {
        if chrono::DateTime::parse_from_rfc3339(value).is_err() {
            return Err(format!("{field} {value:?} is not an RFC 3339 time"));
        }
    }
    Ok(ReadySection {
        record: SectionRecord {
            section_type: meta.section_type,
            title,
            description,
            tags,
            source_key: meta.source_key,
            created_at: meta.created_at,
            updated_at: meta.updated_at,
            checksum: meta.checksum,
            size: meta.size,
            standalone: meta.standalone,
            terms_count,
            // Derived from the content when the section is stored (`learn::insert_stored`).
            bands: None,
            // Given when the content is stored (`learn::insert_stored`).
            content_seq: 0,
            // Its documents are added to it as the layout's manifests list it.
            doc: None,
        },
        kbid: meta.kbid,
        bytes,
    })
}

/// A manifest and the kbids it lists that are not importable.
fn read_document(
    docs_root: &Path,
    path: &Path,
    imported: &HashSet<String>,
) -> std::result::Result<(DocumentManifest, Vec<String>), String> {
    let mut doc: DocumentManifest = read_toml(path, MAX_LIST_BYTES)?;
    doc.docid = validate::docid(&doc.docid)
        .map_err(|e| e.to_string())?
        .into_owned();
    let rel = path
        .strip_prefix(docs_root)
        .map_err(|_| "is outside documents/".to_string())?
        .with_extension("");
    let rel = validate::nfc(&rel.to_string_lossy().replace('\\', "/")).into_owned();
    if rel != doc.docid {
        return Err(format!(
            "declares docid {:?} but its path says {rel:?}",
            doc.docid
        ));
    }
    if let Some(m) = &doc.metadata {
        match serde_json::from_str::<serde_json::Value>(m) {
            Ok(serde_json::Value::Object(_)) => {}
            _ => return Err("metadata is not a JSON object".into()),
        }
    }
    let mut missing = Vec::new();
    let mut seen = HashSet::new();
    doc.kbids.retain(|k| {
        if !imported.contains(k) {
            missing.push(k.clone());
            false
        } else {
            seen.insert(k.clone())
        }
    });
    Ok((doc, missing))
}

/// Validate `indexes/vectors.idx` (and its meta) when present.
/// `sections`: how many sections the layout holds; a vector belongs to one, so the header may not
/// announce more.
fn read_vectors(
    r: &mut Reader<'_>,
    root: &Path,
    sections: u64,
) -> Result<Option<(VectorsMeta, VectorsIdx)>> {
    let idx_path = root.join(layout::INDEXES_DIR).join("vectors.idx");
    let meta_path = root.join(layout::INDEXES_DIR).join("vectors-meta.toml");
    if !idx_path.exists() && !meta_path.exists() {
        return Ok(None);
    }
    let bytes = match read_vectors_file(&idx_path, sections) {
        Ok(b) => b,
        Err(e) => {
            r.problem(&idx_path, e)?;
            return Ok(None);
        }
    };
    let idx = match VectorsIdx::decode(&bytes) {
        Ok(idx) => idx,
        Err(e) => {
            r.problem(
                &idx_path,
                format!("{e}; vectors skipped (rebuild recomputes them)"),
            )?;
            return Ok(None);
        }
    };
    let meta_text = match read_bounded(&meta_path, MAX_TOML_BYTES) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => {
            r.problem(&meta_path, e)?;
            return Ok(None);
        }
    };
    match VectorsMeta::from_toml(&meta_text) {
        Ok(m) if m.dimensions != idx.dimensions => {
            r.problem(
                &meta_path,
                format!(
                    "says {} dimensions but vectors.idx has {}; vectors skipped",
                    m.dimensions, idx.dimensions
                ),
            )?;
            Ok(None)
        }
        Ok(m) => Ok(Some((m, idx))),
        Err(e) => {
            r.problem(&meta_path, e.to_string())?;
            Ok(None)
        }
    }
}

/// The bytes of `vectors.idx`, read only when its size is the one its header announces and
/// the header announces no more vectors than the layout has sections.
fn read_vectors_file(path: &Path, sections: u64) -> std::result::Result<Vec<u8>, String> {
    use super::vectors_idx::{HEADER_LEN, KEY_LEN};
    use std::io::Read;
    let (mut file, len) = open_regular(path)?;
    let read = |file: &mut fs::File, n: u64, into: &mut Vec<u8>| {
        file.take(n)
            .read_to_end(into)
            .map_err(|e| format!("cannot be read: {e}"))
    };
    let mut bytes = Vec::with_capacity(HEADER_LEN);
    read(&mut file, HEADER_LEN as u64, &mut bytes)?;
    if bytes.len() < HEADER_LEN {
        return Ok(bytes); // too short for a header: decoding says so
    }
    let dims = u64::from(u16::from_le_bytes([bytes[5], bytes[6]]));
    let count = u64::from(u32::from_le_bytes([
        bytes[7], bytes[8], bytes[9], bytes[10],
    ]));
    let expected = HEADER_LEN as u64 + count * (KEY_LEN as u64 + dims * 4);
    if count > sections {
        return Err(format!(
            "announces {count} vectors but the layout has {sections} section(s); vectors skipped"
        ));
    }
    if len != expected {
        return Err(format!(
            "is {len} bytes but its header announces {count} vectors of {dims} dimensions \
             ({expected} bytes); vectors skipped"
        ));
    }
    read(&mut file, expected - HEADER_LEN as u64, &mut bytes)?;
    Ok(bytes)
}

/// The first document (by docid) listing each section: the base of its relative links.
pub(crate) fn reference_bases(documents: &[DocumentManifest]) -> HashMap<&str, &str> {
    let mut out = HashMap::new();
    for d in documents {
        for k in &d.kbids {
            out.entry(k.as_str()).or_insert(d.docid.as_str());
        }
    }
    out
}

/// What an import writes in its transaction (the part of a [`Plan`] that goes to the store).
pub(crate) struct ImportWrites {
    pub sections: Vec<ReadySection>,
    pub documents: Vec<DocumentManifest>,
    pub synonyms: BTreeMap<String, Vec<String>>,
}

/// What `apply` stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImportCounts {
    pub sections_imported: u64,
    pub sections_existing: u64,
    pub documents_imported: u64,
    pub documents_replaced: u64,
    pub synonyms_imported: u64,
}

/// Store an import's sections, documents and synonyms inside `t` (the write door's
/// transaction). References are resolved against the documents being imported.
pub(crate) fn apply(
    t: &mut crate::store::txn::WriteTables<'_>,
    w: ImportWrites,
) -> Result<ImportCounts> {
    let bases = reference_bases(&w.documents);
    let mut counts = ImportCounts::default();
    for s in w.sections {
        let base = bases.get(s.kbid.as_str()).copied();
        if crate::learn::insert_stored(t, &s.kbid, s.record, &s.bytes, base)? {
            counts.sections_imported += 1;
        } else {
            counts.sections_existing += 1;
        }
    }
    for d in w.documents {
        let existed = t.document(&d.docid)?.is_some();
        let change = crate::learn::set_manifest(t, &d.docid, d.kbids, |doc| {
            doc.title = d.title;
            doc.doc_type = d.doc_type;
            doc.metadata = d.metadata;
            doc.created_at = d.created_at;
            doc.updated_at = d.updated_at;
        })?;
        counts.documents_imported += 1;
        if existed && change.is_some() {
            counts.documents_replaced += 1;
        }
    }
    for (term, synonyms) in &w.synonyms {
        crate::store::synonyms::add(t.txn(), term, synonyms)?;
        counts.synonyms_imported += 1;
    }
    Ok(counts)
}
