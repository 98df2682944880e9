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
    /// kbid of the section this one replaced (`replace: true`), else null.
    pub superseded: Option<String>,
    pub warnings: Vec<String>,
    pub near_duplicates: Vec<NearDuplicate>,
    pub created_at: String,
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
    /// Sections that were in the document before and are not any more (collectable by gc
    /// unless they belong elsewhere).
    pub detached: Vec<String>,
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

/// One line of `kbdb docs`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DocumentSummary {
    pub docid: String,
    pub title: Option<String>,
    pub sections: usize,
    pub updated_at: String,
}
