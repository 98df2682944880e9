//! The parameters of the operations (`operations.rs`), as the daemon's methods and the MCP tools
//! receive them. Each type is parsed once at the boundary (serde) and describes itself
//! (schemars): the `inputSchema` of every MCP tool is generated from these types, so a
//! parameter's name, type, bounds and description are written once.
//!
//! Descriptions are the doc comments of the fields (their lines joined by a space). Where the
//! engine has a request type of its own that can carry the wire form, that type is the
//! parameters and is re-exported here (`SearchRequest`, `LearnRequest`, `TextSearch`,
//! `CreateDocument`, `AgentInput`, `SkillArgument`). The types defined here are the others: no
//! engine type to mirror (the engine takes plain arguments), or one that cannot take the wire
//! form as it is (ARCHITECTURE.md lists them and why); those build the engine's input field by
//! field, so a field added there and not here fails to compile.

use std::path::PathBuf;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use crate::collections::state::{CreateDocument, TextSearch};
pub use crate::search::SearchRequest;
pub use crate::skills::{AgentInput, SkillArgument};
pub use crate::types::LearnRequest;
use crate::types::requests::any_object;

/// The `inputSchema` of a tool taking `T`: a closed object schema (`additionalProperties:
/// false` from `deny_unknown_fields`), without the generator's `$schema`, `title`, integer
/// `format`s or `$defs` (nested types are written in place), with `required` always present.
pub fn input_schema<T: JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Some(root) = schema.as_object_mut() {
        // The tool's description says what it is for.
        root.remove("title");
        root.remove("description");
        root.entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        root.entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
    }
    tidy(&mut schema);
    schema
}

/// Make a generated schema say what the tools say: an optional parameter (`Option<T>`) is one
/// that may be left out, not one whose type includes null (the argument check takes a null
/// optional argument as absent anyway); no Rust-specific integer `format`s; a description's
/// doc-comment lines joined by a space.
fn tidy(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if let Some(Value::Array(types)) = o.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let only = types.remove(0);
                    o.insert("type".into(), only);
                }
            }
            if let Some(Value::Array(values)) = o.get_mut("enum") {
                values.retain(|v| !v.is_null());
            }
            if o.get("default").is_some_and(Value::is_null) {
                o.remove("default");
            }
            if let Some(Value::Array(any)) = o.get_mut("anyOf") {
                any.retain(|s| s.get("type").and_then(Value::as_str) != Some("null"));
                if any.len() == 1
                    && let Some(Value::Object(only)) = any.pop()
                {
                    o.remove("anyOf");
                    for (k, v) in only {
                        o.entry(k).or_insert(v);
                    }
                }
            }
            if matches!(
                o.get("type").and_then(Value::as_str),
                Some("integer" | "number")
            ) {
                o.remove("format");
            }
            if let Some(Value::String(d)) = o.get_mut("description") {
                *d = d.split('\n').map(str::trim).collect::<Vec<_>>().join(" ");
            }
            o.values_mut().for_each(tidy);
        }
        Value::Array(a) => a.iter_mut().for_each(tidy),
        _ => {}
    }
}

/// An operation without parameters (any given are ignored).
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

// ---- search ------------------------------------------------------------------------------

pub use crate::search::mode::{Retrieval, SearchMode, invalid_choice};

// ---- sections ----------------------------------------------------------------------------

/// `unlearn`.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnlearnParams {
    /// The section to remove: a 26-character kbid, as returned by search, recall or learn.
    pub kbid: String,
}

/// `retrieve`.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetrieveParams {
    /// Section to fetch: a 26-character kbid, as returned by search, recall or learn.
    pub kbid: Option<String>,
    /// Document whose record to fetch.
    pub docid: Option<String>,
}

/// `recall`.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecallParams {
    /// One section: a 26-character kbid, as returned by search, recall or learn. The result is
    /// a single object (an array when `kbids` is also given; `kbid` is then appended).
    pub kbid: Option<String>,
    /// Several sections; the result is an array in this order (repeats dropped).
    pub kbids: Option<Vec<String>>,
    /// Context to add, 0-3: 0 the sections only (default); 1 + documents and back-references;
    /// 2 + forward references and siblings' text; 3 + referenced sections' text. Values above 3
    /// are treated as 3.
    #[schemars(range(min = 0), extend("default" = 0))]
    pub depth: Option<i64>,
    /// Budget, in characters of compact JSON, for the context added by `depth` (kbdb
    /// extension). Context is added in a fixed order and stops at the first piece that does not
    /// fit. Omit for no limit.
    #[schemars(range(min = 0))]
    pub max_chars: Option<i64>,
}

/// `content`.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdsParams {
    /// kbids and/or docids, in the order to render them.
    #[schemars(length(min = 1))]
    pub ids: Vec<String>,
}

/// `export`.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExportParams {
    /// Destination folder (default `./kbdb-export/`). A relative path is taken from the folder
    /// that holds the database folder; a destination outside that folder is refused, as is a
    /// symbolic link or the database folder itself.
    #[serde(default)]
    #[schemars(extend("default" = "./kbdb-export/"))]
    pub path: Option<PathBuf>,
    /// Also write `indexes/` (the index files other programs can read; derived data) (kbdb
    /// extension).
    #[serde(default)]
    pub with_indexes: bool,
    /// Replace the destination when it is an earlier kbdb export (recognised by its
    /// catalog.toml); any other non-empty folder is refused (kbdb extension).
    #[serde(default)]
    pub force: bool,
    /// The folder the destination must be inside (set by the MCP server, not a tool argument).
    #[serde(default)]
    #[schemars(skip)]
    pub confine_to: Option<PathBuf>,
}

// ---- skills and agents -------------------------------------------------------------------

/// `skill-learn`.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillLearnParams {
    /// Skill name, kebab-case (lowercase letters and digits, words joined by `-`), e.g.
    /// `summarize-document`; it is also the prompt name.
    pub name: String,
    /// What the skill does; shown in prompt lists.
    pub description: String,
    /// Template arguments, in order. Optional: placeholders of `body` not listed here are added
    /// as required arguments.
    #[serde(default)]
    pub arguments: Option<Vec<SkillArgument>>,
    /// Template text with `{{argName}}` placeholders; must not be empty. Omit it only when your
    /// client supports sampling: kbdb then asks your model to draft the body from the
    /// description.
    pub body: Option<String>,
}

impl TryFrom<SkillLearnParams> for crate::skills::SkillInput {
    type Error = String;

    /// The body is optional for the tool (sampling drafts it) but required by the engine.
    fn try_from(p: SkillLearnParams) -> Result<Self, String> {
        Ok(crate::skills::SkillInput {
            name: p.name,
            description: p.description,
            arguments: p.arguments,
            body: p.body.ok_or("missing field `body`")?,
        })
    }
}

/// `skill-get`.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillGetParams {
    /// Skill name to look up.
    pub name: Option<String>,
    /// Skill kbid to look up.
    pub kbid: Option<String>,
}

/// `skill-delete`.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillDeleteParams {
    /// Kbid of the skill to remove (see `skill-list`).
    pub kbid: String,
}

/// `agent-get`, `agent-delete`.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentParams {
    /// Agent document ID, `agent-<name>` (see `agent-list`).
    #[serde(alias = "pathId")]
    pub docid: String,
}

// ---- collections -------------------------------------------------------------------------

/// `get_model_info`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelParams {
    /// Model name, e.g. `Story`.
    pub model: String,
}

/// `list_documents`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDocumentsParams {
    /// Only documents of this model.
    #[serde(default)]
    pub model: Option<String>,
    /// Only path IDs starting with this, e.g. `stories/`.
    #[serde(default)]
    pub prefix: Option<String>,
}

/// `query`: described here, parsed by the engine's query parser (which takes `limit`, `offset`
/// and `sort` more loosely than this schema says, and names the field in its errors).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QueryParams {
    /// Model name (e.g. 'Epic', 'Story').
    pub model: Option<String>,
    /// Filter conditions (AND): an object `{"meta.status": "ready", "points": {"$gte": 3}}` or
    /// an array of `{path, operator, value}`. Paths: `id`, `title`, `model`, `meta.a.b`; a bare
    /// name means `meta.<name>`.
    #[serde(rename = "where", default)]
    #[schemars(schema_with = "query_where")]
    pub where_: Option<Value>,
    /// `meta.points` or `-meta.points` (descending), or an array of them.
    #[serde(default)]
    #[schemars(schema_with = "string_or_strings")]
    pub sort: Option<Value>,
    /// Most results (default 100 for fetchAll).
    pub limit: Option<u64>,
    /// Results to skip.
    pub offset: Option<u64>,
    /// fetchAll (a page of results; 100 unless `limit` says), first, last, or count.
    #[schemars(extend("enum" = ["fetchAll", "first", "last", "count"], "default" = "fetchAll"))]
    pub method: Option<String>,
    /// Which optional fields to include in results.
    pub select: Option<QuerySelect>,
}

/// `select` of `query`.
#[derive(Deserialize, JsonSchema)]
pub struct QuerySelect {
    /// Headings whose text to include.
    pub sections: Option<Vec<String>>,
    /// Relationships whose documents to include.
    pub related: Option<Vec<String>>,
}

fn query_where(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"anyOf": [
        {"type": "object"},
        {"type": "array", "items": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "operator": {"type": "string"},
                "value": {}
            },
            "required": ["path"]
        }}
    ]})
}

fn string_or_strings(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"anyOf": [
        {"type": "string"},
        {"type": "array", "items": {"type": "string"}}
    ]})
}

/// `search_content`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchContentParams {
    /// Text or regex pattern to search for.
    pub pattern: String,
    /// Optional: limit to a specific model type.
    #[serde(default)]
    pub model: Option<String>,
}

/// `validate`: `target`, or `pathId` (or `docid`) for one document; giving two is refused as
/// before (they were one field with aliases).
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ValidateParams {
    /// A pathId ('stories/login'), a model name ('Story'), or 'all' (default).
    #[serde(default)]
    pub target: Option<String>,
    /// Same as target, for one document.
    #[serde(default, rename = "pathId", alias = "docid")]
    pub path_id: Option<String>,
}

impl ValidateParams {
    pub fn target(self) -> Result<Option<String>, String> {
        match (self.target, self.path_id) {
            (Some(_), Some(_)) => Err("duplicate field `target`".into()),
            (a, b) => Ok(a.or(b)),
        }
    }
}

/// `update_document`.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateDocumentParams {
    /// The document's id (kbdb docid), e.g. `stories/login`.
    #[serde(rename = "pathId", alias = "docid")]
    pub docid: String,
    /// Fields to merge into frontmatter.
    #[serde(default)]
    #[schemars(schema_with = "any_object")]
    pub meta: Option<Map<String, Value>>,
    /// Replace the entire markdown body.
    #[serde(default)]
    pub content: Option<String>,
    /// A new title.
    #[serde(default)]
    pub title: Option<String>,
}

/// `update_section`.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateSectionParams {
    /// The document's id (kbdb docid), e.g. `stories/login`.
    #[serde(rename = "pathId", alias = "docid")]
    pub docid: String,
    /// Section heading text.
    pub heading: String,
    /// replace the section's body, append to it, remove the section, or insert a new block
    /// before or after it.
    #[schemars(extend("enum" = ["replace", "append", "remove", "insert_before", "insert_after"]))]
    pub action: String,
    /// Markdown content (required for all but remove).
    #[serde(default)]
    pub content: Option<String>,
    /// Which of several sections with this heading (1-based).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub occurrence: Option<usize>,
}

/// `delete_document`.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteDocumentParams {
    /// The document's id (kbdb docid), e.g. `stories/login`.
    #[serde(rename = "pathId", alias = "docid")]
    pub docid: String,
}

// ---- methods without a tool --------------------------------------------------------------

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirParam {
    pub dir: PathBuf,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocidParam {
    #[serde(alias = "pathId")]
    pub docid: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LearnManyParams {
    pub requests: Vec<crate::LearnRequest>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LearnDocumentParams {
    pub docid: String,
    pub markdown: String,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub metadata: Option<Value>,
    /// Tags for every section of the document.
    #[serde(default)]
    pub tags: Vec<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SynonymsParams {
    pub term: String,
    #[serde(default)]
    pub synonyms: Vec<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportParams {
    pub path: PathBuf,
    #[serde(default)]
    pub strict: bool,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelsLoadParams {
    pub toml: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelInstanceParams {
    pub model: String,
    #[serde(alias = "pathId")]
    pub docid: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SectionByHeadingParams {
    #[serde(alias = "pathId")]
    pub docid: String,
    pub heading: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreatePromptParams {
    pub model: String,
    pub title: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KbidsParam {
    pub kbids: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefixParams {
    pub prefix: String,
    pub limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeqParam {
    pub seq: u64,
}

/// An optional bound on a list (`tag_counts`).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct LimitParam {
    pub limit: Option<usize>,
}

/// A page of a list (`documents_page`).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PageParams {
    pub offset: Option<usize>,
    pub limit: Option<usize>,
}
