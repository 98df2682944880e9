//! Inputs of the engine's write operations (also the JSON accepted by `kbdb learn --jsonl`).

use serde::{Deserialize, Serialize};

/// One section to learn. Field names follow the MCP `learn` tool.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LearnRequest {
    /// Text content, or base64-encoded bytes for `image/*` types.
    pub content: String,
    /// MIME type; `text/markdown` when absent.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub section_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Group the section under this document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docid: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Supersede the section(s) that share this section's source key.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replace: bool,
    /// Explicit source key (see docs/decisions.md); derived from docid and title when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl LearnRequest {
    pub fn text(content: impl Into<String>) -> Self {
        LearnRequest {
            content: content.into(),
            ..Default::default()
        }
    }
}
