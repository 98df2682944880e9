//! Inputs of the engine's write operations (also the JSON accepted by `kbdb learn --jsonl`).
//!
//! The request types the daemon's methods and the MCP tools take as they are derive their
//! `inputSchema` here too (schemars, `daemon::params::input_schema`): the field doc comments are
//! the tools' parameter descriptions.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize};

/// A field that may be left out or given as null: both are its default (an optional list or
/// object on the wire, an empty one in the engine).
pub(crate) fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The schema of any JSON object (metadata, front matter).
pub(crate) fn any_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object"})
}

/// One section to learn. Field names follow the MCP `learn` tool, whose parameters this is.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LearnRequest {
    /// The text (markdown by default; source code or JSON for those types), or base64-encoded
    /// image bytes for `image/*` types. At most 10 MiB by default (`limits.max_content_bytes`).
    pub content: String,
    /// MIME type: `text/markdown` (default), any other `text/*` type (e.g. `text/plain`,
    /// `text/x-rust`, `text/x-python`), `application/json` (must be valid JSON), or `image/*`
    /// (e.g. `image/png`; `content` is base64 and `title` is required).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "text/markdown"))]
    pub section_type: Option<String>,
    /// Section title (heading), at most 1,024 characters. Required for `image/*` types. For
    /// markdown without a title, a first line `# Heading` is taken as the title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Optional summary of the section, at most 4,096 characters; searchable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Add the section to this document (created when missing), e.g. `decisions/storage`. At
    /// most 256 bytes; `/` separates folders; no leading `/`, `..`, backslashes or control
    /// characters. If the same content already exists, it is attached to this document instead
    /// of being duplicated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docid: Option<String>,
    /// Tags for scoping and filtering (search `tags`); at most 64, each at most 128 characters.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tags: Vec<String>,
    /// Supersede the section(s) with the same source key: the new section takes the old one's
    /// place in its documents and the old one is removed. The source key is `source` when
    /// given, else `docid#title` (`#title` without a docid).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[schemars(extend("default" = false))]
    pub replace: bool,
    /// Explicit source key for `replace` (kbdb extension), e.g. a file path or URL the content
    /// came from; at most 1,024 characters. Defaults to `docid#title`.
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
