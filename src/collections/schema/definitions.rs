//! The definitions of models: fields and their types, expected sections, relationships, a
//! model and the set of models (with its TOML writer).

use std::fmt;

use serde::Serialize;
use serde_json::{Map, Value};

use super::docid_glob::Glob;
use super::validation::norm_heading;
use super::{BASE_MODEL, MODEL_KEY};

/// A models file that cannot be loaded. The message names the model and the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// Not TOML, or a key the format does not have (the message shows the line).
    #[error("invalid models file: {0}")]
    Parse(String),
    /// A rule of the format is broken. `model` is the model's name (or `#n`, its 1-based
    /// position, when it has no usable name); `key` is the path inside the model.
    #[error("model {model}: {key}: {message}")]
    Invalid {
        model: String,
        key: String,
        message: String,
    },
}

/// The type of a metadata field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    String,
    Number,
    Boolean,
    /// `YYYY-MM-DD` or an RFC 3339 date-time (the offset may be left out), as a string.
    Date,
    /// A string out of `values` (numbers and booleans match their text).
    Enum,
    /// A list; `items` types its elements.
    Array,
}

impl FieldType {
    pub(super) const NAMES: &'static str = "string, number, boolean, date, enum or array";

    pub fn as_str(self) -> &'static str {
        match self {
            FieldType::String => "string",
            FieldType::Number => "number",
            FieldType::Boolean => "boolean",
            FieldType::Date => "date",
            FieldType::Enum => "enum",
            FieldType::Array => "array",
        }
    }

    pub fn parse(s: &str) -> Option<FieldType> {
        Some(match s {
            "string" => FieldType::String,
            "number" => FieldType::Number,
            "boolean" => FieldType::Boolean,
            "date" => FieldType::Date,
            "enum" => FieldType::Enum,
            "array" => FieldType::Array,
            _ => return None,
        })
    }
}

impl fmt::Display for FieldType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A metadata field of a model.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldDef {
    pub name: String,
    pub field_type: FieldType,
    /// For arrays: the type of the elements (never `Array`); None = anything.
    pub items: Option<FieldType>,
    /// For enums (and arrays of enums): the allowed values, in declaration order.
    pub values: Vec<String>,
    pub required: bool,
    /// Checked against the field's type when loaded; a JSON value (TOML dates become strings).
    pub default: Option<Value>,
    pub description: Option<String>,
}

impl FieldDef {
    /// The type as people read it: `enum (draft, ready, done)`, `array of string`, `number`.
    pub fn type_label(&self) -> String {
        match (self.field_type, self.items) {
            (FieldType::Enum, _) => format!("enum ({})", self.values.join(", ")),
            (FieldType::Array, Some(FieldType::Enum)) => {
                format!("array of enum ({})", self.values.join(", "))
            }
            (FieldType::Array, Some(t)) => format!("array of {t}"),
            (t, _) => t.to_string(),
        }
    }
}

/// A section a model expects: a heading (matched case-insensitively at any level) or one of
/// its alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct SectionDef {
    pub heading: String,
    pub alternatives: Vec<String>,
    pub required: bool,
    pub description: Option<String>,
}

impl SectionDef {
    /// Whether a heading text names this section (case and spacing ignored).
    pub fn matches(&self, heading: &str) -> bool {
        let h = norm_heading(heading);
        std::iter::once(&self.heading)
            .chain(&self.alternatives)
            .any(|n| norm_heading(n) == h)
    }
}

/// The kind of a relationship.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RelKind {
    /// The document points at one target (or a list of them) through a metadata field.
    #[serde(rename = "belongsTo")]
    BelongsTo,
    /// The items under one heading of the document are the targets.
    #[serde(rename = "hasMany")]
    HasMany,
}

impl RelKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RelKind::BelongsTo => "belongsTo",
            RelKind::HasMany => "hasMany",
        }
    }
}

impl fmt::Display for RelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A relationship from documents of one model to documents of another (or the same) model.
#[derive(Debug, Clone, PartialEq)]
pub struct RelationshipDef {
    pub name: String,
    pub kind: RelKind,
    /// The target model, as it is declared (canonical spelling).
    pub model: String,
    /// belongsTo: the metadata field holding the target's docid (or slug).
    pub field: Option<String>,
    /// hasMany: the heading whose items are the targets.
    pub heading: Option<String>,
    pub description: Option<String>,
}

/// One model. Built by [`ModelSet::from_toml`] (or [`ModelSet::base`] for the built-in one).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelDef {
    pub name: String,
    pub description: Option<String>,
    /// Docids starting with this string belong to the model (as written: `stories/`).
    pub prefix: Option<String>,
    /// Docids matching this glob belong to the model (`*` one segment, `**` any).
    pub pattern: Option<String>,
    pub fields: Vec<FieldDef>,
    pub sections: Vec<SectionDef>,
    pub relationships: Vec<RelationshipDef>,
    pub(super) glob: Option<Glob>,
}

impl ModelDef {
    fn base() -> ModelDef {
        ModelDef {
            name: BASE_MODEL.to_string(),
            description: Some("Any document no other model claims.".to_string()),
            prefix: None,
            pattern: None,
            fields: Vec::new(),
            sections: Vec::new(),
            relationships: Vec::new(),
            glob: None,
        }
    }

    /// Whether this is the built-in `Base` model.
    pub fn is_base(&self) -> bool {
        self.name == BASE_MODEL
    }

    /// A declared field by name (exact).
    pub fn field(&self, name: &str) -> Option<&FieldDef> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// A relationship by name (exact).
    pub fn relationship(&self, name: &str) -> Option<&RelationshipDef> {
        self.relationships.iter().find(|r| r.name == name)
    }

    /// The defaults of the fields that have one.
    pub fn defaults(&self) -> Map<String, Value> {
        self.fields
            .iter()
            .filter_map(|f| Some((f.name.clone(), f.default.clone()?)))
            .collect()
    }

    /// The docid folder new documents of this model go in and slugs resolve under: the prefix,
    /// or the literal leading segments of the pattern (`stories/*` → `stories/`), or "".
    pub fn docid_prefix(&self) -> String {
        crate::types::validate::nfc(&self.docid_prefix_as_written()).into_owned()
    }

    fn docid_prefix_as_written(&self) -> String {
        if let Some(p) = &self.prefix {
            return p.clone();
        }
        let Some(pattern) = &self.pattern else {
            return String::new();
        };
        let mut out = String::new();
        for seg in pattern.split('/') {
            if seg.contains(['*', '?']) {
                break;
            }
            out.push_str(seg);
            out.push('/');
        }
        if out.len() > pattern.len() {
            // The whole pattern is literal: it names a single docid, not a folder.
            out.clear();
        }
        out
    }

    /// How specifically this model claims `docid`: None when it does not, else the number of
    /// literal characters of its prefix or pattern (longer wins).
    pub fn claims(&self, docid: &str) -> Option<usize> {
        if let Some(p) = &self.prefix {
            return docid.starts_with(p.as_str()).then(|| p.chars().count());
        }
        let g = self.glob.as_ref()?;
        g.matches(docid).then_some(g.literal_chars)
    }

    /// The metadata fields that hold belongsTo targets.
    pub(super) fn relationship_fields(&self) -> impl Iterator<Item = &str> {
        self.relationships.iter().filter_map(|r| r.field.as_deref())
    }
}

/// The models of a database, in declaration order, plus the built-in `Base`.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSet {
    pub(super) models: Vec<ModelDef>,
    base: ModelDef,
}

impl Default for ModelSet {
    fn default() -> Self {
        ModelSet {
            models: Vec::new(),
            base: ModelDef::base(),
        }
    }
}

impl ModelSet {
    /// No declared models: every document is `Base`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The declared models, in file order (`Base` not included).
    pub fn models(&self) -> &[ModelDef] {
        &self.models
    }

    /// The declared models then `Base`.
    pub fn all(&self) -> impl Iterator<Item = &ModelDef> {
        self.models.iter().chain(std::iter::once(&self.base))
    }

    /// The built-in `Base` model.
    pub fn base(&self) -> &ModelDef {
        &self.base
    }

    /// Whether no model is declared.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }

    /// A model by name, case-insensitively (`Base` included).
    pub fn get(&self, name: &str) -> Option<&ModelDef> {
        let name = name.trim();
        self.all().find(|m| m.name.eq_ignore_ascii_case(name))
    }

    /// The model of a document: the model named by its `_model` metadata string when there is
    /// one (case-insensitive), else the model whose prefix or pattern claims the docid most
    /// specifically (longest literal part; the earlier model on a tie), else `Base`.
    pub fn model_for(&self, docid: &str, meta: &Map<String, Value>) -> &ModelDef {
        if let Some(m) = meta
            .get(MODEL_KEY)
            .and_then(Value::as_str)
            .and_then(|n| self.get(n))
        {
            return m;
        }
        let mut best: Option<(usize, &ModelDef)> = None;
        for m in &self.models {
            if let Some(score) = m.claims(docid)
                && best.is_none_or(|(b, _)| score > b)
            {
                best = Some((score, m));
            }
        }
        best.map_or(&self.base, |(_, m)| m)
    }
}
