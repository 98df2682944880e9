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

/// The deepest `recall` expansion; larger depths are clamped to it.
pub const MAX_RECALL_DEPTH: u8 = 3;

/// A validated `recall` request (see `RecallRequest::new` for the rules of the MCP tool).
#[derive(Debug, Clone, PartialEq)]
pub struct RecallRequest {
    /// Sections to recall, in order, without repeats.
    pub kbids: Vec<String>,
    /// 0–3.
    pub depth: u8,
    /// Budget in characters of the expansion (see docs/references.md); None = unbounded.
    pub max_chars: Option<usize>,
    /// The caller asked with `kbids`: the result is an array even for one section.
    pub batch: bool,
}

impl RecallRequest {
    /// `kbids` first, `kbid` appended (repeats dropped); at least one is required. `depth`
    /// defaults to 0, is clamped to 3 and must not be negative; `max_chars` must not be
    /// negative.
    pub fn new(
        kbid: Option<String>,
        kbids: Option<Vec<String>>,
        depth: Option<i64>,
        max_chars: Option<i64>,
    ) -> crate::Result<Self> {
        use crate::KbError;
        let batch = kbids.is_some();
        let mut all = kbids.unwrap_or_default();
        all.extend(kbid);
        if all.is_empty() {
            return Err(KbError::invalid("kbid", "Provide kbid or kbids"));
        }
        let mut seen = std::collections::HashSet::new();
        let mut list = Vec::with_capacity(all.len());
        for (n, k) in all.into_iter().enumerate() {
            let field = if batch {
                format!("kbids[{n}]")
            } else {
                "kbid".into()
            };
            crate::types::kbid::validate_kbid(&field, &k)?;
            if seen.insert(k.clone()) {
                list.push(k);
            }
        }
        let depth = match depth.unwrap_or(0) {
            d if d < 0 => {
                return Err(KbError::invalid(
                    "depth",
                    format!("must be between 0 and 3 (got {d})"),
                ));
            }
            d => d.min(MAX_RECALL_DEPTH as i64) as u8,
        };
        let max_chars = match max_chars {
            Some(m) if m < 0 => {
                return Err(KbError::invalid(
                    "max_chars",
                    format!("must not be negative (got {m})"),
                ));
            }
            m => m.map(|m| m as usize),
        };
        Ok(RecallRequest {
            kbids: list,
            depth,
            max_chars,
            batch,
        })
    }
}
