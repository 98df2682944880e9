//! Result shapes of the spec (`kbdb-mcp.md`), serialised exactly as the MCP tools return them.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NearDuplicate {
    pub kbid: String,
    /// Jaccard similarity over word 3-shingles, rounded to 3 decimals.
    pub similarity: f64,
}

/// `AddSectionResult`: the result of one `learn`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LearnResult {
    pub kbid: String,
    #[serde(rename = "type")]
    pub section_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docid: Option<String>,
    pub indexed_terms_count: u64,
    pub elapsed_ms: f64,
    /// The docid was newly attached to content that already existed.
    pub attached: bool,
    /// The content already existed and nothing new was stored.
    pub skipped: bool,
    /// kbids of the sections this one replaced (`replace: true`): null when none, the kbid
    /// when one (the spec's shape), an array of them all when several were.
    #[serde(default)]
    pub superseded: Superseded,
    pub warnings: Vec<String>,
    pub near_duplicates: Vec<NearDuplicate>,
    pub created_at: String,
    /// The embedding provider failed (or is failing) for this section: it is searchable
    /// lexically and waits for its embedding (hybrid-search spec). Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub vector_embedding_failed: bool,
}

/// The sections a write superseded. On the wire, the spec's `superseded` (a kbid or null) as
/// long as it is one or none; when a `replace` supersedes several sections (all those under
/// its source key), they are all given, as an array, rather than all but the first lost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Superseded(pub Vec<String>);

impl Superseded {
    /// Every superseded kbid, in the order they were replaced.
    pub fn kbids(&self) -> &[String] {
        &self.0
    }

    pub fn first(&self) -> Option<&String> {
        self.0.first()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for Superseded {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [] => s.serialize_none(),
            [one] => s.serialize_str(one),
            all => all.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Superseded {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Wire {
            One(String),
            All(Vec<String>),
        }
        Ok(Superseded(match Option::<Wire>::deserialize(d)? {
            None => Vec::new(),
            Some(Wire::One(k)) => vec![k],
            Some(Wire::All(v)) => v,
        }))
    }
}

/// `{ removed, elapsed_ms }` of `unlearn`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UnlearnResult {
    pub removed: bool,
    pub elapsed_ms: f64,
}

/// One entry of `retrieve` by kbid: `[{kbid, sectionType, content, size}]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RetrievedSection {
    pub kbid: String,
    #[serde(rename = "sectionType")]
    pub section_type: String,
    /// Text, or base64 for images.
    pub content: String,
    /// Stored size in bytes (decoded bytes for images).
    pub size: u64,
}

/// A section as listed inside a document record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DocumentSection {
    pub kbid: String,
    pub heading: Option<String>,
    #[serde(rename = "type")]
    pub section_type: String,
    pub size: u64,
}

/// The document record returned by `retrieve` by docid.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DocumentView {
    pub docid: String,
    pub title: Option<String>,
    #[serde(rename = "type")]
    pub doc_type: String,
    /// The document's metadata (front matter), absent when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Value>,
    /// Ordered section kbids.
    pub kbids: Vec<String>,
    pub sections: Vec<DocumentSection>,
    pub created_at: String,
    pub updated_at: String,
}

/// What `retrieve` returns: sections by kbid or a document by docid.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Retrieved {
    Sections(Vec<RetrievedSection>),
    Document(DocumentView),
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CacheStats {
    #[serde(rename = "contentCount")]
    pub content_count: u64,
    #[serde(rename = "indexCount")]
    pub index_count: u64,
}

/// Result of `status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Status {
    pub initialized: bool,
    #[serde(rename = "contextPath")]
    pub context_path: String,
    #[serde(rename = "cacheStats")]
    pub cache_stats: CacheStats,
    pub sections: u64,
    pub documents: u64,
    pub schema_version: u32,
    pub last_change_seq: u64,
    /// Size of the database file (`kbdb.redb`) in bytes.
    pub database_bytes: u64,
    /// Size of the lexical index folder in bytes.
    pub index_bytes: u64,
    /// The last change the lexical index has applied; changes after it are replayed on the
    /// next search (or open).
    pub index_applied_seq: u64,
    pub index_pending_changes: u64,
    /// The id of the dictionary content is compressed with (null: none trained yet; a
    /// database trains one once it holds a few thousand sections, docs/storage.md).
    #[serde(default)]
    pub content_dictionary: Option<u32>,
    /// Embeddings: provider, model, counts and freshness (docs/vectors.md).
    pub vectors: VectorStatus,
}

/// The vector side of `status`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct VectorStatus {
    /// `none`, `onnx` or `api`.
    pub provider: String,
    /// Configured model.
    pub model: String,
    /// Model and dimensions of the stored vectors (null: nothing embedded yet).
    pub stored_model: Option<String>,
    pub stored_dimensions: Option<usize>,
    /// Sections with a vector.
    pub count: u64,
    /// Section changes the embedder has not applied yet (embeddings pending).
    pub pending_changes: u64,
    /// Sections whose embedding failed (retried by `rebuild`).
    pub failures: u64,
    /// The stored vectors are of another model: vector and hybrid
    /// searches fall back to lexical until `kbdb rebuild`.
    pub stale: bool,
    /// When `rebuild` last embedded everything.
    pub built_at: Option<String>,
    /// Memory of the loaded vector matrix (0 until the first vector search).
    pub memory_bytes: u64,
    /// The last embedding error, while the provider keeps failing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// One section of a document learned from markdown.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DocumentLearnSection {
    pub kbid: String,
    pub heading: Option<String>,
    /// Stored by this call (false: the content already existed).
    pub new: bool,
}

/// Result of `learn_document` (`kbdb learn --split`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DocumentLearnResult {
    pub docid: String,
    pub title: Option<String>,
    /// Every section of the document, in order.
    pub sections: Vec<DocumentLearnSection>,
    pub added: usize,
    pub unchanged: usize,
    /// Sections that were in the document before and are not any more (removed with this
    /// write unless another document holds them or they were learned on their own).
    pub detached: Vec<String>,
    /// As in `LearnResult`: the embedding of new sections failed or is failing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub vector_embedding_failed: bool,
    /// Whether the document's manifest changed.
    pub changed: bool,
    pub elapsed_ms: f64,
}

/// Result of `content`: `{type: "text/markdown", data, total}`, `total` in characters.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ComposedContent {
    #[serde(rename = "type")]
    pub content_type: String,
    pub data: String,
    pub total: usize,
}

/// A tag and how many sections carry it (`Kb::tag_counts`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TagCount {
    pub tag: String,
    pub sections: u64,
}

/// One line of `kbdb docs`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DocumentSummary {
    pub docid: String,
    pub title: Option<String>,
    pub sections: usize,
    pub updated_at: String,
}

/// One page of the documents, most recently updated first (`Kb::documents_page`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DocumentPage {
    /// How many documents there are.
    pub total: usize,
    /// The position of the page's first document in the whole listing.
    pub offset: usize,
    pub documents: Vec<DocumentSummary>,
}

/// A section listed in a recalled document manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ManifestSection {
    pub kbid: String,
    pub heading: Option<String>,
    #[serde(rename = "type")]
    pub section_type: String,
}

/// A parent document of a recalled section (depth ≥ 1).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RecallDocument {
    pub docid: String,
    pub title: Option<String>,
    /// The document's metadata (front matter), absent when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Value>,
    pub sections: Vec<ManifestSection>,
    /// Sections that reference this document as a whole (not one of its headings).
    pub back_references: Vec<Reference>,
}

/// One edge of the reference graph as `recall` shows it: a back-reference (a section whose
/// text references the recalled one, `direction: "back"`) or a forward reference (a marker in
/// the recalled section's text, `direction: "forward"`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Reference {
    /// The section at the other end (the source of a back-reference; the target section of a
    /// forward reference when it names a section or a heading).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kbid: Option<String>,
    /// The target document of a forward reference to a document or one of its headings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docid: Option<String>,
    /// Heading of the section at the other end (the document title for a document target).
    pub heading: Option<String>,
    /// Section type (`document` for a whole-document target); absent when unresolved.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub section_type: Option<String>,
    /// `link`, `uri` or `wikilink`.
    pub marker_type: String,
    pub context_snippet: String,
    /// `back` or `forward`.
    pub direction: String,
    /// Forward references: the target as a `kbdb://` URI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Forward references: whether the target exists (false = dangling for now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<bool>,
    /// Depth 3: the full text of the referenced section (a referenced document: its
    /// composed markdown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Depth 3: the back-references of the referenced section or document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub back_references: Option<Vec<Reference>>,
}

/// Another section of the same document (depth ≥ 2), with its full text.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Sibling {
    pub kbid: String,
    pub heading: Option<String>,
    #[serde(rename = "type")]
    pub section_type: String,
    pub content: String,
    /// The document through which it is a sibling (the first, when several).
    pub docid: String,
}

/// One recalled section. Fields beyond `docids` appear from their depth on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RecallItem {
    pub kbid: String,
    pub heading: Option<String>,
    #[serde(rename = "type")]
    pub section_type: String,
    /// Text, or base64 for images.
    pub content: String,
    pub docids: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documents: Option<Vec<RecallDocument>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub back_references: Option<Vec<Reference>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub siblings: Option<Vec<Sibling>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub references: Option<Vec<Reference>>,
    /// The `max_chars` budget stopped the expansion of this section.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// What `recall` returns: one object for `kbid`, an array for `kbids`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Recalled {
    One(Box<RecallItem>),
    Many(Vec<RecallItem>),
}

/// One finding of `check`: `{type, entity, detail}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CheckFinding {
    /// `checksum_mismatch`, `orphan_section`, `orphan_document`, `broken_reference`,
    /// `type_mismatch`, `circular_reference`, `divergent_content`, `manifest_mismatch`,
    /// `index_mismatch` (docs/maintenance.md).
    #[serde(rename = "type")]
    pub kind: String,
    /// The kbid, docid or source key concerned.
    pub entity: String,
    pub detail: String,
}

/// Result of `check`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CheckResult {
    /// No errors (warnings do not count).
    pub ok: bool,
    pub errors: Vec<CheckFinding>,
    /// Findings that are worth knowing but not damage (reference cycles).
    pub warnings: Vec<CheckFinding>,
    pub sections_checked: u64,
    pub documents_checked: u64,
    pub references_checked: u64,
    pub elapsed_ms: f64,
}

/// Result of `gc`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GcResult {
    pub removed_sections: u64,
    pub removed_bytes: u64,
    pub elapsed_ms: f64,
}

/// Result of `rebuild`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RebuildResult {
    pub sections_reindexed: u64,
    /// Terms of the reindexed text (the sum of each section's distinct terms).
    pub terms_indexed: u64,
    pub elapsed_ms: f64,
    /// Sections embedded again (absent without an embedding provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vectors_embedded: Option<u64>,
    /// Sections whose embedding failed during the rebuild (recorded; see `status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vector_failures: Option<u64>,
}

/// Result of `export` (compact JSON in the spec).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExportResult {
    pub path: String,
    pub sections_exported: u64,
    pub documents_exported: u64,
    pub elapsed_ms: f64,
}

/// One committed change, as sent to subscribers: `kind` is `section_added`,
/// `section_changed`, `section_removed`, `document_changed` or `document_removed`; `id` the
/// kbid or docid.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChangeEvent {
    pub seq: u64,
    pub kind: String,
    pub id: String,
    /// For `section_added` and `section_changed`: the section's type, when it still exists
    /// as the event is read (so the MCP server can tell a skill — a prompt — from any other
    /// section without asking). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_type: Option<String>,
}
