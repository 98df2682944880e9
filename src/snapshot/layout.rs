//! The plain-file layout (docs/file-layout.md): file names and the TOML records of the
//! catalog, section metadata and document manifests.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Version of the layout written by this kbdb.
pub const FORMAT_VERSION: u32 = 1;
pub const CATALOG: &str = "catalog.toml";
pub const SECTIONS_DIR: &str = "sections";
pub const DOCUMENTS_DIR: &str = "documents";
pub const INDEXES_DIR: &str = "indexes";
pub const SYNONYMS: &str = "synonyms.toml";
/// The collection's models (docs/collections.md), when loaded.
pub const MODELS: &str = "models.toml";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    pub catalog: CatalogInfo,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CatalogInfo {
    pub format_version: u32,
    pub kbdb_version: String,
    pub schema_version: u32,
    pub exported_at: String,
    pub sections: u64,
    pub documents: u64,
    #[serde(default)]
    pub synonyms: u64,
    #[serde(default)]
    pub with_indexes: bool,
}

/// `sections/<kbid[..2]>/<kbid>.toml`: everything about a section but its bytes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SectionMeta {
    pub kbid: String,
    #[serde(rename = "type")]
    pub section_type: String,
    /// The content file's name, beside this file: `<kbid>.<ext>`.
    pub file: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_key: Option<String>,
    /// Learned on its own at least once: never collected by gc.
    #[serde(default)]
    pub standalone: bool,
    pub created_at: String,
    pub updated_at: String,
    pub size: u64,
    /// Lowercase hex SHA-256 of the content file's bytes.
    pub checksum: String,
}

/// `documents/<docid>.toml`: a document manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DocumentManifest {
    pub docid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(rename = "type")]
    pub doc_type: String,
    /// The metadata object as JSON text (TOML has no null; JSON keeps it exact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub kbids: Vec<String>,
}

/// The fan-out folder of a section: the first two characters of its kbid.
pub fn section_dir(root: &Path, kbid: &str) -> PathBuf {
    root.join(SECTIONS_DIR).join(&kbid[..2])
}

/// The file extension of a content file, from the section type.
pub fn extension(section_type: &str) -> &'static str {
    match section_type {
        "text/markdown" => "md",
        "text/plain" => "txt",
        "application/json" => "json",
        "text/html" => "html",
        "text/css" => "css",
        "text/csv" => "csv",
        "text/xml" => "xml",
        "text/x-rust" => "rs",
        "text/x-python" => "py",
        "text/javascript" | "text/x-javascript" => "js",
        "text/x-typescript" => "ts",
        "text/x-go" => "go",
        "text/x-c" => "c",
        "text/x-c++" | "text/x-cpp" => "cpp",
        "text/x-java" => "java",
        "text/x-shellscript" | "text/x-sh" => "sh",
        "text/x-toml" => "toml",
        "text/x-yaml" | "text/yaml" => "yaml",
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/bmp" => "bmp",
        "image/svg+xml" => "svg",
        t if t.starts_with("image/") => "bin",
        _ => "txt",
    }
}

/// The manifest path of `docid` under `root` (a valid docid has no `..`, no leading `/`, no
/// backslash and no empty segment, so it stays inside `documents/`).
pub fn document_path(root: &Path, docid: &str) -> PathBuf {
    let mut p = root.join(DOCUMENTS_DIR);
    for seg in docid.split('/') {
        p.push(seg);
    }
    p.set_file_name(format!(
        "{}.toml",
        docid.rsplit('/').next().unwrap_or(docid)
    ));
    p
}

/// Whether `dir` looks like the plain-file layout (a catalog and a sections folder).
pub fn is_plain_layout(dir: &Path) -> bool {
    dir.join(CATALOG).is_file() && dir.join(SECTIONS_DIR).is_dir()
}
