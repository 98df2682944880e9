//! The `Kb` side of collections: models kept in the store, the document index, and every
//! collection operation the CLI and the MCP server expose (docs/collections.md).

use std::sync::{Arc, Mutex, RwLock};

use serde_json::{Map, Value};

use super::doc_index::DocIndex;
use super::schema::{DocInput, DocSection, ModelSet};
use crate::error::{KbError, Result};
use crate::types::records::DocumentRecord;

/// The key of the models' TOML text in the `collection` table.
pub(crate) const MODELS_KEY: &str = "models";
/// Most documents `validate all` / a model reports on in one call.
pub const MAX_VALIDATE: usize = 10_000;
/// Results of a `fetchAll` query without `limit` (lean answers for agents; `total` and
/// `has_more` say when there are more, `offset` pages).
pub const DEFAULT_QUERY_LIMIT: usize = 100;
/// Most matches `search_content` / `text_search` return.
pub const MAX_TEXT_MATCHES: usize = 1_000;

/// Collection state a `Kb` keeps in memory.
#[derive(Default)]
pub struct CollectionState {
    pub(crate) models: RwLock<Option<Arc<ModelSet>>>,
    pub(crate) index: Mutex<Option<DocIndex>>,
    pub(crate) generation: std::sync::atomic::AtomicU64,
}

pub(crate) fn poisoned<T>(_: T) -> KbError {
    KbError::Storage("collection state lock poisoned by an earlier panic".into())
}

impl CollectionState {
    /// After a panic was caught (a damaged page): the locks work again, and the document
    /// index is built anew at its next use.
    pub(crate) fn recover(&self) {
        self.models.clear_poison();
        self.index.clear_poison();
        if let Ok(mut i) = self.index.lock() {
            *i = None;
        }
    }
}

/// A document read for validation or display: record, sections (level, heading, text).
pub(crate) struct StoredDoc {
    pub(crate) rec: DocumentRecord,
    pub(crate) meta: Map<String, Value>,
    pub(crate) sections: Vec<(u8, String, String)>,
}

impl StoredDoc {
    pub(crate) fn inputs(&self) -> Vec<DocSection<'_>> {
        self.sections
            .iter()
            .map(|(level, heading, text)| DocSection {
                level: *level,
                heading,
                text,
            })
            .collect()
    }

    /// The document as the model layer sees it (`sections` from [`StoredDoc::inputs`]).
    pub(crate) fn input<'a>(
        &'a self,
        docid: &'a str,
        sections: &'a [DocSection<'a>],
    ) -> DocInput<'a> {
        DocInput {
            docid,
            title: self.rec.title.as_deref(),
            meta: &self.meta,
            sections,
        }
    }

    /// The text of the section at `i` with its sub-sections: it runs up to the next section
    /// of the same or a higher level (a lower number), as `update_section` counts it.
    pub(crate) fn section_with_children(&self, i: usize) -> String {
        let level = self.sections[i].0;
        let mut parts = vec![self.sections[i].2.trim_end()];
        if level > 0 {
            parts.extend(
                self.sections[i + 1..]
                    .iter()
                    // A section without a heading (attached text) reads as part of the one before.
                    .take_while(|(l, _, _)| *l == 0 || *l > level)
                    .map(|(_, _, t)| t.trim_end()),
            );
        }
        parts.join("\n\n")
    }

    /// The first heading section whose heading matches `heading` (case-insensitive, runs of
    /// spaces collapsed, a leading `#…` marker ignored), by its index.
    pub(crate) fn find_heading(&self, heading: &str) -> Option<usize> {
        let wanted = crate::text::section_edit::wanted(heading);
        wanted.iter().find_map(|w| {
            self.sections
                .iter()
                .position(|(l, h, _)| *l > 0 && crate::text::section_edit::normalized(h) == *w)
        })
    }

    pub(crate) fn markdown(&self) -> String {
        let mut s = self
            .sections
            .iter()
            .map(|(_, _, t)| t.trim_end())
            .collect::<Vec<_>>()
            .join("\n\n");
        s.push('\n');
        s
    }

    /// The document as a file: its metadata as YAML front matter (as sync writes a new file),
    /// then the body. What `text_search` searches, so that metadata is found and line numbers
    /// count from the file's first line.
    pub(crate) fn file_text(&self) -> String {
        if self.meta.is_empty() {
            return self.markdown();
        }
        match crate::text::frontmatter::render(
            crate::text::frontmatter::Syntax::Yaml,
            &self.meta,
            &[],
        ) {
            Ok(front) => front + &self.markdown(),
            // Metadata that reads back from no front matter (never stored): the body alone.
            Err(_) => self.markdown(),
        }
    }
}

/// `create_document`: the parameters of the method and MCP tool (their `inputSchema` is derived
/// from this type; the field doc comments are its descriptions).
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateDocument {
    /// Model name.
    pub model: String,
    /// Document title.
    pub title: String,
    /// Frontmatter values (merged over defaults).
    #[serde(
        default,
        deserialize_with = "crate::types::requests::null_as_default",
        skip_serializing_if = "Map::is_empty"
    )]
    #[schemars(schema_with = "crate::types::requests::any_object")]
    pub meta: Map<String, Value>,
    /// Optional: full markdown body (overrides scaffolding).
    #[serde(default)]
    pub content: Option<String>,
    /// Optional: the path ID (default: the model's folder and the title's slug).
    #[serde(default, rename = "pathId", alias = "docid")]
    pub docid: Option<String>,
}

/// `text_search`: the parameters of the method and MCP tool (their `inputSchema` is derived
/// from this type; the field doc comments are its descriptions).
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TextSearch {
    /// Text or regex pattern to search for.
    pub pattern: String,
    /// Return line-level matches instead of just path IDs.
    #[serde(default)]
    pub expanded: bool,
    /// Glob over path IDs (e.g. 'stories/*').
    #[serde(default)]
    pub include: Option<String>,
    /// Glob over path IDs to leave out.
    #[serde(default)]
    pub exclude: Option<String>,
    /// Case insensitive search.
    #[serde(default)]
    pub ignore_case: bool,
    /// Limit number of results (at most 1000).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_results: Option<usize>,
}

pub(crate) const PRIMER: &str = "# Working with this knowledge base's documents\n\n\
Documents have a docid (like `stories/login`), a title, metadata (front matter) and sections \
(one per heading). Models give documents a type: fields the metadata should have, sections the \
body should have, and relationships to other documents.\n\n\
Workflow: `inspect` for an overview, `get_model_info` before creating or editing documents of a \
model, `query` to find documents by metadata, `search_content`/`text_search` for text, \
`create_document` to add one (scaffolded from its model), `update_section` for surgical edits, \
`update_document` for metadata, and `validate` after every change. Validation reports problems; \
it never refuses a change.";

/// An error naming the models when `model` (if given) is not one of them.
pub(crate) fn known_model(models: &ModelSet, model: Option<&str>) -> Result<()> {
    match model {
        Some(m) if models.get(m).is_none() => Err(KbError::invalid(
            "model",
            format!("no model {m:?}; the models are: {}", model_names(models)),
        )),
        _ => Ok(()),
    }
}

pub(crate) fn model_names(set: &ModelSet) -> String {
    set.all()
        .map(|m| m.name.clone())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A section's text without its heading line.
pub(crate) fn section_body(text: &str) -> String {
    let mut lines = text.lines();
    match lines.next() {
        Some(first) if crate::text::markdown::atx_heading(first).is_some() => {
            lines.collect::<Vec<_>>().join("\n").trim().to_string()
        }
        _ => text.trim().to_string(),
    }
}

pub(crate) fn build_regex(field: &str, pattern: &str, ignore_case: bool) -> Result<regex::Regex> {
    if pattern.is_empty() {
        return Err(KbError::invalid(field, "must not be empty"));
    }
    regex::RegexBuilder::new(pattern)
        .case_insensitive(ignore_case)
        .size_limit(1 << 20)
        .build()
        .or_else(|_| {
            // Not a valid regex: search for the text as written.
            regex::RegexBuilder::new(&regex::escape(pattern))
                .case_insensitive(ignore_case)
                .build()
        })
        .map_err(|e| KbError::invalid(field, format!("is not a usable pattern: {e}")))
}

/// A glob over docids (`*` within a segment, `**` across, `?` one character) as a regex; a glob
/// without `/` also matches the last segment (`*.md`-style filters on names).
pub(crate) fn glob_regex(glob: &str) -> Result<regex::Regex> {
    let mut re = String::from("^");
    let mut chars = glob.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                re.push_str(".*");
            }
            '*' => re.push_str("[^/]*"),
            '?' => re.push_str("[^/]"),
            c => re.push_str(&regex::escape(&c.to_string())),
        }
    }
    re.push('$');
    let full = if glob.contains('/') {
        re
    } else {
        format!("(^|/){}", &re[1..])
    };
    regex::Regex::new(&full).map_err(|e| KbError::invalid("include", format!("bad glob: {e}")))
}

/// About 80 characters either side of a match, on char boundaries.
pub(crate) fn context_of(text: &str, start: usize, end: usize) -> String {
    let mut a = start.saturating_sub(80);
    while !text.is_char_boundary(a) {
        a -= 1;
    }
    let mut b = (end + 80).min(text.len());
    while !text.is_char_boundary(b) {
        b += 1;
    }
    text[a..b].replace('\n', " ").trim().to_string()
}

/// Store the collection models' TOML text (checked by the caller) and log the change.
pub(crate) fn store_models(
    t: &mut crate::store::txn::WriteTables<'_>,
    toml_text: &str,
) -> Result<()> {
    let mut table = t.txn().open_table(crate::store::tables::COLLECTION)?;
    table.insert(MODELS_KEY, toml_text)?;
    drop(table);
    t.log(crate::types::records::ChangeKind::ModelsChanged, MODELS_KEY)?;
    Ok(())
}
