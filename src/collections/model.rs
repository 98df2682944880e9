//! Models: the types of collection documents. A [`ModelSet`] is read from a TOML file
//! ([`ModelSet::from_toml`]): each model has a name, the docids it claims (a prefix or a glob
//! pattern), typed metadata fields, expected sections and relationships to other models. A
//! built-in `Base` model (no fields, no sections) takes every document no other model claims.
//!
//! This module is pure: it never reads the store. Callers hand it a document as a
//! [`DocInput`] and answer "does this docid exist?" with a closure. It gives the model of a
//! document ([`ModelSet::model_for`]), validates a document against it ([`validate`]), resolves
//! its relationships ([`relationships_of`]), scaffolds new documents ([`scaffold`]) and
//! describes the models for agents ([`schema_json`], [`summary_markdown`], [`create_prompt`],
//! [`query_guide`]). The format and the rules are written down in docs/collections.md.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::text::markdown::MdSection;
use crate::text::markers::{self, Target};

/// The name of the built-in model.
pub const BASE_MODEL: &str = "Base";
/// The metadata key that names a document's model explicitly (overriding its docid).
pub const MODEL_KEY: &str = "_model";

// ---------------------------------------------------------------------------------------------
// Definitions
// ---------------------------------------------------------------------------------------------

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
    const NAMES: &'static str = "string, number, boolean, date, enum or array";

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
    glob: Option<Glob>,
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
    fn relationship_fields(&self) -> impl Iterator<Item = &str> {
        self.relationships.iter().filter_map(|r| r.field.as_deref())
    }
}

/// The models of a database, in declaration order, plus the built-in `Base`.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSet {
    models: Vec<ModelDef>,
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

    /// Load a models file. Strict: unknown keys, unknown types, bad defaults, duplicate or
    /// unknown model names and the like are errors naming the model and the key.
    pub fn from_toml(text: &str) -> Result<ModelSet, ModelError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| ModelError::Parse(e.to_string()))?;
        let mut models: Vec<ModelDef> = Vec::with_capacity(raw.model.len());
        for (i, rm) in raw.model.iter().enumerate() {
            models.push(build_model(i, rm, &models)?);
        }
        // Relationships may name models declared later: check them once all are known.
        let names: Vec<String> = models.iter().map(|m| m.name.clone()).collect();
        for (i, rm) in raw.model.iter().enumerate() {
            let rels = sorted_by_span(&rm.relationships);
            for (name, rr) in rels {
                let err = |key: &str, message: String| ModelError::Invalid {
                    model: models[i].name.clone(),
                    key: format!("relationships.{}.{key}", name),
                    message,
                };
                let target = names
                    .iter()
                    .chain(std::iter::once(&BASE_MODEL.to_string()))
                    .find(|n| n.eq_ignore_ascii_case(rr.model.trim()))
                    .cloned()
                    .ok_or_else(|| {
                        let mut known: Vec<&str> = names.iter().map(String::as_str).collect();
                        known.push(BASE_MODEL);
                        err(
                            "model",
                            format!(
                                "no model named {} (models: {})",
                                quote(&rr.model),
                                known.join(", ")
                            ),
                        )
                    })?;
                let rel = models[i]
                    .relationships
                    .iter_mut()
                    .find(|r| r.name == *name)
                    .expect("built above");
                rel.model = target;
            }
        }
        Ok(ModelSet {
            models,
            base: ModelDef::base(),
        })
    }

    /// The models as a TOML file [`ModelSet::from_toml`] reads back to an equal set (`Base` is
    /// built in and not written).
    pub fn to_toml(&self) -> String {
        let mut out = String::new();
        for (i, m) in self.models.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push_str("[[model]]\n");
            kv(&mut out, "name", &tstr(&m.name));
            if let Some(d) = &m.description {
                kv(&mut out, "description", &tstr(d));
            }
            if let Some(p) = &m.prefix {
                kv(&mut out, "prefix", &tstr(p));
            }
            if let Some(p) = &m.pattern {
                kv(&mut out, "pattern", &tstr(p));
            }
            for f in &m.fields {
                let _ = writeln!(out, "\n[model.fields.{}]", toml_key(&f.name));
                kv(&mut out, "type", &tstr(f.field_type.as_str()));
                if let Some(t) = f.items {
                    kv(&mut out, "items", &tstr(t.as_str()));
                }
                if !f.values.is_empty() {
                    kv(&mut out, "values", &tlist(&f.values));
                }
                if let Some(d) = &f.default {
                    kv(&mut out, "default", &json_to_toml(d).to_string());
                }
                if f.required {
                    kv(&mut out, "required", "true");
                }
                if let Some(d) = &f.description {
                    kv(&mut out, "description", &tstr(d));
                }
            }
            for s in &m.sections {
                out.push_str("\n[[model.sections]]\n");
                kv(&mut out, "heading", &tstr(&s.heading));
                if !s.alternatives.is_empty() {
                    kv(&mut out, "alternatives", &tlist(&s.alternatives));
                }
                if s.required {
                    kv(&mut out, "required", "true");
                }
                if let Some(d) = &s.description {
                    kv(&mut out, "description", &tstr(d));
                }
            }
            for r in &m.relationships {
                let _ = writeln!(out, "\n[model.relationships.{}]", toml_key(&r.name));
                kv(&mut out, "type", &tstr(r.kind.as_str()));
                kv(&mut out, "model", &tstr(&r.model));
                if let Some(f) = &r.field {
                    kv(&mut out, "field", &tstr(f));
                }
                if let Some(h) = &r.heading {
                    kv(&mut out, "heading", &tstr(h));
                }
                if let Some(d) = &r.description {
                    kv(&mut out, "description", &tstr(d));
                }
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    model: Vec<RawModel>,
}

type Spanned<T> = toml::Spanned<T>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    prefix: Option<String>,
    #[serde(default)]
    pattern: Option<String>,
    #[serde(default)]
    fields: BTreeMap<Spanned<String>, RawField>,
    #[serde(default)]
    sections: Vec<RawSection>,
    #[serde(default)]
    relationships: BTreeMap<Spanned<String>, RawRelationship>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawField {
    #[serde(rename = "type")]
    field_type: String,
    #[serde(default)]
    items: Option<String>,
    #[serde(default)]
    values: Option<Vec<String>>,
    #[serde(default)]
    default: Option<toml::Value>,
    #[serde(default)]
    required: bool,
    #[serde(default)]
    description: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSection {
    heading: String,
    #[serde(default)]
    alternatives: Vec<String>,
    #[serde(default)]
    required: bool,
    #[serde(default)]
    description: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRelationship {
    #[serde(rename = "type")]
    kind: String,
    model: String,
    #[serde(default)]
    field: Option<String>,
    #[serde(default)]
    heading: Option<String>,
    #[serde(default)]
    description: Option<String>,
}

/// Map entries in the order they are written in the file (TOML tables are unordered maps).
fn sorted_by_span<T>(map: &BTreeMap<Spanned<String>, T>) -> Vec<(&String, &T)> {
    let mut v: Vec<(&Spanned<String>, &T)> = map.iter().collect();
    v.sort_by_key(|(k, _)| k.span().start);
    v.into_iter().map(|(k, t)| (k.get_ref(), t)).collect()
}

fn build_model(i: usize, rm: &RawModel, before: &[ModelDef]) -> Result<ModelDef, ModelError> {
    let name = rm.name.trim().to_string();
    let label = if valid_model_name(&name) {
        name.clone()
    } else {
        format!("#{}", i + 1)
    };
    let err = |key: String, message: String| ModelError::Invalid {
        model: label.clone(),
        key,
        message,
    };
    if !valid_model_name(&name) {
        return Err(err(
            "name".into(),
            format!(
                "{} is not a model name (a letter, then letters, digits, _ or -)",
                quote(&rm.name)
            ),
        ));
    }
    if name.eq_ignore_ascii_case(BASE_MODEL) {
        return Err(err(
            "name".into(),
            "Base is the built-in model and cannot be redefined".into(),
        ));
    }
    if let Some((j, _)) = before
        .iter()
        .enumerate()
        .find(|(_, m)| m.name.eq_ignore_ascii_case(&name))
    {
        return Err(err(
            "name".into(),
            format!(
                "duplicate model name (model #{} is also {}; names are case-insensitive)",
                j + 1,
                quote(&before[j].name)
            ),
        ));
    }

    if rm.prefix.is_some() && rm.pattern.is_some() {
        return Err(err(
            "pattern".into(),
            "set prefix or pattern, not both".into(),
        ));
    }
    if let Some(p) = &rm.prefix {
        if p.is_empty() {
            return Err(err(
                "prefix".into(),
                "must not be empty (leave it out for a model chosen only by _model)".into(),
            ));
        }
        if p.starts_with('/') || p.chars().any(char::is_control) {
            return Err(err(
                "prefix".into(),
                format!(
                    "{} cannot start a docid (docids are relative and printable)",
                    quote(p)
                ),
            ));
        }
    }
    let glob = match &rm.pattern {
        Some(p) => Some(Glob::compile(p).map_err(|m| err("pattern".into(), m))?),
        None => None,
    };

    let mut fields = Vec::with_capacity(rm.fields.len());
    for (fname, rf) in sorted_by_span(&rm.fields) {
        fields.push(build_field(fname, rf).map_err(|(k, m)| err(k, m))?);
    }

    let mut sections: Vec<SectionDef> = Vec::with_capacity(rm.sections.len());
    for (n, rs) in rm.sections.iter().enumerate() {
        let key = |k: &str| format!("sections[{n}].{k}");
        let heading = rs.heading.trim().to_string();
        if heading.is_empty() {
            return Err(err(key("heading"), "must not be empty".into()));
        }
        let mut alternatives = Vec::with_capacity(rs.alternatives.len());
        for (a, alt) in rs.alternatives.iter().enumerate() {
            let alt = alt.trim().to_string();
            if alt.is_empty() {
                return Err(err(
                    format!("{}[{a}]", key("alternatives")),
                    "must not be empty".into(),
                ));
            }
            alternatives.push(alt);
        }
        for name in std::iter::once(&heading).chain(&alternatives) {
            if let Some(j) = sections.iter().position(|s| s.matches(name)) {
                return Err(err(
                    key("heading"),
                    format!(
                        "{} is already a heading or alternative of sections[{j}] ({})",
                        quote(name),
                        quote(&sections[j].heading)
                    ),
                ));
            }
        }
        sections.push(SectionDef {
            heading,
            alternatives,
            required: rs.required,
            description: rs.description.clone(),
        });
    }

    let mut relationships = Vec::with_capacity(rm.relationships.len());
    for (rname, rr) in sorted_by_span(&rm.relationships) {
        let key = |k: &str| format!("relationships.{rname}.{k}");
        if rname.trim().is_empty() {
            return Err(err(
                "relationships".into(),
                "a relationship name must not be empty".into(),
            ));
        }
        let kind = match rr.kind.as_str() {
            "belongsTo" => RelKind::BelongsTo,
            "hasMany" => RelKind::HasMany,
            other => {
                return Err(err(
                    key("type"),
                    format!(
                        "unknown relationship type {} (expected belongsTo or hasMany)",
                        quote(other)
                    ),
                ));
            }
        };
        let field = rr.field.as_ref().map(|f| f.trim().to_string());
        let heading = rr.heading.as_ref().map(|h| h.trim().to_string());
        match kind {
            RelKind::BelongsTo => {
                if heading.is_some() {
                    return Err(err(
                        key("heading"),
                        "a belongsTo relationship reads a metadata field, not a heading (use field)"
                            .into(),
                    ));
                }
                let Some(f) = field.as_deref().filter(|f| !f.is_empty()) else {
                    return Err(err(
                        key("field"),
                        "a belongsTo relationship needs the metadata field that holds the target's docid"
                            .into(),
                    ));
                };
                if f.starts_with('_') {
                    return Err(err(
                        key("field"),
                        "metadata keys starting with _ are reserved".into(),
                    ));
                }
                if let Some(fd) = fields.iter().find(|d: &&FieldDef| d.name == f) {
                    let ok = match fd.field_type {
                        FieldType::String => true,
                        FieldType::Array => matches!(fd.items, None | Some(FieldType::String)),
                        _ => false,
                    };
                    if !ok {
                        return Err(err(
                            key("field"),
                            format!(
                                "field {} is declared as {}; a belongsTo field holds docids (a string or an array of strings)",
                                quote(f),
                                fd.type_label()
                            ),
                        ));
                    }
                }
            }
            RelKind::HasMany => {
                if field.is_some() {
                    return Err(err(
                        key("field"),
                        "a hasMany relationship reads the items under a heading, not a field (use heading)"
                            .into(),
                    ));
                }
                if heading.as_deref().is_none_or(str::is_empty) {
                    return Err(err(
                        key("heading"),
                        "a hasMany relationship needs the heading whose items are the targets"
                            .into(),
                    ));
                }
            }
        }
        if rr.model.trim().is_empty() {
            return Err(err(key("model"), "must name the target model".into()));
        }
        relationships.push(RelationshipDef {
            name: rname.clone(),
            kind,
            // Resolved to the canonical spelling once every model is known.
            model: rr.model.trim().to_string(),
            field,
            heading,
            description: rr.description.clone(),
        });
    }

    Ok(ModelDef {
        name,
        description: rm.description.clone(),
        prefix: rm.prefix.clone(),
        pattern: rm.pattern.clone(),
        fields,
        sections,
        relationships,
        glob,
    })
}

/// A field from its TOML table; errors are (key, message).
fn build_field(name: &str, rf: &RawField) -> Result<FieldDef, (String, String)> {
    let key = |k: &str| format!("fields.{name}.{k}");
    if name.trim().is_empty() {
        return Err(("fields".into(), "a field name must not be empty".into()));
    }
    if name.starts_with('_') {
        return Err((
            format!("fields.{name}"),
            "metadata keys starting with _ are reserved".into(),
        ));
    }
    let field_type = FieldType::parse(&rf.field_type).ok_or_else(|| {
        (
            key("type"),
            format!(
                "unknown type {} (expected {})",
                quote(&rf.field_type),
                FieldType::NAMES
            ),
        )
    })?;
    let items = match &rf.items {
        None => None,
        Some(_) if field_type != FieldType::Array => {
            return Err((key("items"), "only array fields take items".into()));
        }
        Some(t) => match FieldType::parse(t) {
            Some(FieldType::Array) => {
                return Err((key("items"), "arrays of arrays are not supported".into()));
            }
            Some(t) => Some(t),
            None => {
                return Err((
                    key("items"),
                    format!(
                        "unknown type {} (expected string, number, boolean, date or enum)",
                        quote(t)
                    ),
                ));
            }
        },
    };
    let takes_values = field_type == FieldType::Enum || items == Some(FieldType::Enum);
    let values = match &rf.values {
        Some(_) if !takes_values => {
            return Err((
                key("values"),
                "only enum fields (and arrays with items = \"enum\") take values".into(),
            ));
        }
        Some(v) if v.is_empty() => {
            return Err((key("values"), "an enum needs at least one value".into()));
        }
        Some(v) => {
            for (i, a) in v.iter().enumerate() {
                if v[..i].contains(a) {
                    return Err((key("values"), format!("{} is listed twice", quote(a))));
                }
            }
            v.clone()
        }
        None if takes_values => {
            return Err((
                key("values"),
                "an enum needs its values (values = [\"a\", \"b\"])".into(),
            ));
        }
        None => Vec::new(),
    };
    let mut field = FieldDef {
        name: name.to_string(),
        field_type,
        items,
        values,
        required: rf.required,
        default: None,
        description: rf.description.clone(),
    };
    if let Some(d) = &rf.default {
        let value = toml_to_json(d).map_err(|m| (key("default"), m))?;
        let mut issues = Vec::new();
        check_field_value(&field, &value, "default", &mut issues);
        if let Some(i) = issues.into_iter().next() {
            let k = match i.path.strip_prefix("default") {
                Some(rest) => format!("{}{rest}", key("default")),
                None => key("default"),
            };
            return Err((k, i.message));
        }
        field.default = Some(value);
    }
    Ok(field)
}

fn valid_model_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn toml_to_json(v: &toml::Value) -> Result<Value, String> {
    Ok(match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .ok_or_else(|| format!("{f} is not a finite number"))?,
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => {
            Value::Array(a.iter().map(toml_to_json).collect::<Result<_, _>>()?)
        }
        toml::Value::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| Ok((k.clone(), toml_to_json(v)?)))
                .collect::<Result<_, String>>()?,
        ),
    })
}

fn json_to_toml(v: &Value) -> toml::Value {
    match v {
        // TOML has no null; defaults never hold one (no field type accepts it).
        Value::Null => toml::Value::String(String::new()),
        Value::Bool(b) => toml::Value::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            None => toml::Value::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Array(a) => toml::Value::Array(a.iter().map(json_to_toml).collect()),
        Value::Object(o) => toml::Value::Table(
            o.iter()
                .map(|(k, v)| (k.clone(), json_to_toml(v)))
                .collect(),
        ),
    }
}

fn kv(out: &mut String, key: &str, value: &str) {
    let _ = writeln!(out, "{key} = {value}");
}

fn tstr(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn tlist(items: &[String]) -> String {
    let parts: Vec<String> = items.iter().map(|s| tstr(s)).collect();
    format!("[{}]", parts.join(", "))
}

fn toml_key(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_string()
    } else {
        tstr(k)
    }
}

// ---------------------------------------------------------------------------------------------
// Docid globs
// ---------------------------------------------------------------------------------------------

/// A docid glob: `/`-separated segments; `*` matches within one segment, `?` one character,
/// a `**` segment any number of segments (at least one when it ends the pattern).
#[derive(Debug, Clone, PartialEq)]
struct Glob {
    segs: Vec<Seg>,
    literal_chars: usize,
}

#[derive(Debug, Clone, PartialEq)]
enum Seg {
    AnyDepth,
    Part(Vec<char>),
}

impl Glob {
    fn compile(p: &str) -> Result<Glob, String> {
        if p.is_empty() {
            return Err(
                "must not be empty (leave it out for a model chosen only by _model)".into(),
            );
        }
        if p.starts_with('/') {
            return Err(format!(
                "bad glob {}: docids are relative, it must not start with /",
                quote(p)
            ));
        }
        if let Some(c) = p
            .chars()
            .find(|c| c.is_control() || matches!(c, '[' | ']' | '{' | '}' | '\\'))
        {
            return Err(format!(
                "bad glob {}: {:?} is not supported (use * for one segment, ** for any, ? for one character)",
                quote(p),
                c
            ));
        }
        let mut segs = Vec::new();
        for seg in p.split('/') {
            if seg.is_empty() {
                return Err(format!(
                    "bad glob {}: empty path segment{}",
                    quote(p),
                    if p.ends_with('/') {
                        " (a folder is matched by prefix, or by pattern \"folder/**\")"
                    } else {
                        ""
                    }
                ));
            }
            if seg == "**" {
                if segs.last() == Some(&Seg::AnyDepth) {
                    return Err(format!("bad glob {}: ** follows **", quote(p)));
                }
                segs.push(Seg::AnyDepth);
            } else if seg.contains("**") {
                return Err(format!(
                    "bad glob {}: ** must be a whole segment (as in a/**/b)",
                    quote(p)
                ));
            } else {
                segs.push(Seg::Part(seg.chars().collect()));
            }
        }
        let literal_chars = p.chars().filter(|c| !matches!(c, '*' | '?')).count();
        Ok(Glob {
            segs,
            literal_chars,
        })
    }

    fn matches(&self, docid: &str) -> bool {
        let parts: Vec<&str> = docid.split('/').collect();
        let (n, m) = (self.segs.len(), parts.len());
        // ok[i][j]: segs[i..] match parts[j..].
        let mut ok = vec![vec![false; m + 1]; n + 1];
        ok[n][m] = true;
        for i in (0..n).rev() {
            for j in (0..=m).rev() {
                ok[i][j] = match &self.segs[i] {
                    Seg::AnyDepth if i == n - 1 => j < m,
                    Seg::AnyDepth => ok[i + 1][j] || (j < m && ok[i][j + 1]),
                    Seg::Part(p) => j < m && ok[i + 1][j + 1] && wild(p, parts[j]),
                };
            }
        }
        ok[0][0]
    }
}

/// `*` (any run) and `?` (one character) within one segment.
fn wild(p: &[char], s: &str) -> bool {
    let s: Vec<char> = s.chars().collect();
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

/// One section of a document as validation sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DocSection<'a> {
    /// 1-6 for a heading section, 0 for the text before the first heading.
    pub level: u8,
    /// The heading text ("" for the preamble).
    pub heading: &'a str,
    /// The section's text (its heading line may be included; it is ignored).
    pub text: &'a str,
}

impl<'a> From<&'a MdSection> for DocSection<'a> {
    fn from(s: &'a MdSection) -> Self {
        DocSection {
            level: s.level,
            heading: &s.title,
            text: &s.text,
        }
    }
}

/// A document as the model layer sees it.
#[derive(Debug, Clone, Copy)]
pub struct DocInput<'a> {
    pub docid: &'a str,
    pub title: Option<&'a str>,
    pub meta: &'a Map<String, Value>,
    /// The document's sections, in order.
    pub sections: &'a [DocSection<'a>],
}

/// One problem found by validation: where (`meta.status`, `meta.labels[2]`,
/// `sections.Acceptance Criteria`) and what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Issue {
    pub path: String,
    pub message: String,
}

impl Issue {
    fn new(path: impl Into<String>, message: impl Into<String>) -> Issue {
        Issue {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// The result of validating one document. `valid` is true when there are no errors (warnings
/// do not count). Validation reports; it never refuses a write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Validation {
    pub docid: String,
    pub model: String,
    pub valid: bool,
    pub errors: Vec<Issue>,
    pub warnings: Vec<Issue>,
}

/// Validate a document against its model (see [`ModelSet::model_for`]). `exists` says whether
/// a docid names a stored document (for relationships).
pub fn validate(set: &ModelSet, doc: &DocInput<'_>, exists: &dyn Fn(&str) -> bool) -> Validation {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();

    match doc.meta.get(MODEL_KEY) {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            if set.get(s).is_none() {
                let known: Vec<&str> = set.all().map(|m| m.name.as_str()).collect();
                errors.push(Issue::new(
                    format!("meta.{MODEL_KEY}"),
                    format!("no model named {} (models: {})", quote(s), known.join(", ")),
                ));
            }
        }
        Some(other) => errors.push(Issue::new(
            format!("meta.{MODEL_KEY}"),
            format!("expected a model name (a string), got {}", describe(other)),
        )),
    }

    let model = set.model_for(doc.docid, doc.meta);

    for f in &model.fields {
        let path = format!("meta.{}", f.name);
        match doc.meta.get(&f.name) {
            None | Some(Value::Null) => {
                if f.required {
                    errors.push(Issue::new(path, "required"));
                }
            }
            Some(v) => check_field_value(f, v, &path, &mut errors),
        }
    }

    if !model.is_base() {
        for key in doc.meta.keys() {
            // `title` is the document's title where a file keeps it (docs/collections.md).
            if key.starts_with('_')
                || key == "title"
                || model.field(key).is_some()
                || model.relationship_fields().any(|f| f == key)
            {
                continue;
            }
            let mut known: Vec<&str> = model.fields.iter().map(|f| f.name.as_str()).collect();
            for f in model.relationship_fields() {
                if !known.contains(&f) {
                    known.push(f);
                }
            }
            let message = if known.is_empty() {
                format!("unknown field ({} declares no fields)", model.name)
            } else {
                format!(
                    "unknown field ({} declares {})",
                    model.name,
                    known.join(", ")
                )
            };
            warnings.push(Issue::new(format!("meta.{key}"), message));
        }
    }

    for s in &model.sections {
        if s.required
            && !doc
                .sections
                .iter()
                .any(|d| d.level > 0 && s.matches(d.heading))
        {
            errors.push(Issue::new(
                format!("sections.{}", s.heading),
                "required section missing",
            ));
        }
    }

    for r in &model.relationships {
        if let Some(field) = &r.field
            && model.field(field).is_none()
            && let Some(v) = doc.meta.get(field)
            && !is_docid_value(v)
        {
            errors.push(Issue::new(
                format!("meta.{field}"),
                format!(
                    "expected a docid (a string, or an array of them), got {} (belongsTo {})",
                    describe(v),
                    r.model
                ),
            ));
        }
    }
    for rel in related_with(set, model, doc, exists) {
        for item in rel.items.iter().filter(|i| !i.exists) {
            let issue = match rel.kind {
                RelKind::BelongsTo => Issue::new(
                    format!("meta.{}", rel.field.as_deref().unwrap_or_default()),
                    format!("no document {} (belongsTo {})", item.docid, rel.model),
                ),
                RelKind::HasMany => Issue::new(
                    format!("sections.{}", rel.heading.as_deref().unwrap_or_default()),
                    format!("item {} does not exist", item.docid),
                ),
            };
            errors.push(issue);
        }
    }

    Validation {
        docid: doc.docid.to_string(),
        model: model.name.clone(),
        valid: errors.is_empty(),
        errors,
        warnings,
    }
}

fn is_docid_value(v: &Value) -> bool {
    match v {
        Value::Null | Value::String(_) => true,
        Value::Array(a) => a.iter().all(Value::is_string),
        _ => false,
    }
}

/// Type-check a present (non-null) value of a field; issues go under `path`.
fn check_field_value(f: &FieldDef, v: &Value, path: &str, out: &mut Vec<Issue>) {
    if f.field_type == FieldType::Array {
        let Value::Array(items) = v else {
            out.push(Issue::new(
                path,
                format!("expected an array, got {}", describe(v)),
            ));
            return;
        };
        if let Some(t) = f.items {
            for (i, item) in items.iter().enumerate() {
                if let Err(m) = check_scalar(t, &f.values, item) {
                    out.push(Issue::new(format!("{path}[{i}]"), m));
                }
            }
        }
        return;
    }
    if let Err(m) = check_scalar(f.field_type, &f.values, v) {
        out.push(Issue::new(path, m));
    }
}

fn check_scalar(t: FieldType, values: &[String], v: &Value) -> Result<(), String> {
    let ok = match t {
        FieldType::String => v.is_string(),
        FieldType::Number => v.is_number(),
        FieldType::Boolean => v.is_boolean(),
        FieldType::Date => v.as_str().is_some_and(is_date),
        FieldType::Enum => {
            let text = match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                Value::Bool(b) => Some(b.to_string()),
                _ => None,
            };
            text.is_some_and(|s| values.contains(&s))
        }
        FieldType::Array => v.is_array(),
    };
    if ok {
        return Ok(());
    }
    let expected = match t {
        FieldType::String => "a string".to_string(),
        FieldType::Number => "a number".to_string(),
        FieldType::Boolean => "a boolean (true or false)".to_string(),
        FieldType::Date => "a date (YYYY-MM-DD or RFC 3339)".to_string(),
        FieldType::Enum => format!(
            "one of {}",
            values
                .iter()
                .map(|s| quote(s))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        FieldType::Array => "an array".to_string(),
    };
    Err(format!("expected {expected}, got {}", describe(v)))
}

/// `YYYY-MM-DD`, or an RFC 3339 date-time (`T` or space; the offset may be left out, as in a
/// TOML local date-time).
pub fn is_date(s: &str) -> bool {
    let s = s.trim();
    let b = s.as_bytes();
    let date_shape = b.len() >= 10
        && b[..10].iter().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                *c == b'-'
            } else {
                c.is_ascii_digit()
            }
        });
    if !date_shape {
        return false;
    }
    if b.len() == 10 {
        return chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok();
    }
    if !matches!(b[10], b'T' | b't' | b' ') {
        return false;
    }
    chrono::DateTime::parse_from_rfc3339(s).is_ok()
        || chrono::NaiveDateTime::parse_from_str(
            &s.replace(['t', ' '], "T"),
            "%Y-%m-%dT%H:%M:%S%.f",
        )
        .is_ok()
        || chrono::NaiveDateTime::parse_from_str(&s.replace(['t', ' '], "T"), "%Y-%m-%dT%H:%M")
            .is_ok()
}

/// A value as an error message shows it: `the string "three"`, `the number 3`, `an array`.
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {}", quote(&crate::text::preview(s, 80))),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

fn norm_heading(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

// ---------------------------------------------------------------------------------------------
// Relationships
// ---------------------------------------------------------------------------------------------

/// One target of a relationship.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RelatedItem {
    pub docid: String,
    pub exists: bool,
}

/// A relationship of one document, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Related {
    /// The relationship's name.
    pub name: String,
    #[serde(rename = "type")]
    pub kind: RelKind,
    /// The target model.
    pub model: String,
    /// belongsTo: the metadata field read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// hasMany: the heading read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heading: Option<String>,
    /// The targets, in order, without repeats; dangling ones have `exists: false`.
    pub items: Vec<RelatedItem>,
}

/// The relationships of a document under its model ([`ModelSet::model_for`]), each with its
/// target docids. A belongsTo reads its metadata field (a string or an array of strings; a
/// link `[[x]]`, `[t](x)` or `kbdb://document/x` is read as the docid it names). A hasMany
/// reads the section(s) whose heading matches: each list item's first document link, and each
/// direct sub-heading (a link in it, else its slug). A docid without `/` (a slug) is looked up
/// under the target model's folder first, then as is; the first that exists is taken, else
/// the first candidate.
pub fn relationships_of(
    set: &ModelSet,
    doc: &DocInput<'_>,
    exists: &dyn Fn(&str) -> bool,
) -> Vec<Related> {
    related_with(set, set.model_for(doc.docid, doc.meta), doc, exists)
}

fn related_with(
    set: &ModelSet,
    model: &ModelDef,
    doc: &DocInput<'_>,
    exists: &dyn Fn(&str) -> bool,
) -> Vec<Related> {
    let mut out = Vec::with_capacity(model.relationships.len());
    for r in &model.relationships {
        let folder = set
            .get(&r.model)
            .map(ModelDef::docid_prefix)
            .unwrap_or_default();
        let mut items: Vec<RelatedItem> = Vec::new();
        let mut push = |raw: &str| {
            if let Some(item) = resolve(raw, &folder, exists)
                && !items.iter().any(|i| i.docid == item.docid)
            {
                items.push(item);
            }
        };
        match r.kind {
            RelKind::BelongsTo => {
                let field = r.field.as_deref().unwrap_or_default();
                match doc.meta.get(field) {
                    Some(Value::String(s)) => {
                        push(&link_or_text(s, doc.docid));
                    }
                    Some(Value::Array(a)) => {
                        for s in a.iter().filter_map(Value::as_str) {
                            push(&link_or_text(s, doc.docid));
                        }
                    }
                    _ => {}
                }
            }
            RelKind::HasMany => {
                let heading = r.heading.as_deref().unwrap_or_default();
                // A declared section with the same heading lends its alternatives.
                let names: SectionDef = model
                    .sections
                    .iter()
                    .find(|s| s.matches(heading))
                    .cloned()
                    .unwrap_or_else(|| SectionDef {
                        heading: heading.to_string(),
                        alternatives: Vec::new(),
                        required: false,
                        description: None,
                    });
                for raw in heading_items(doc, &names) {
                    push(&raw);
                }
            }
        }
        out.push(Related {
            name: r.name.clone(),
            kind: r.kind,
            model: r.model.clone(),
            field: r.field.clone(),
            heading: r.heading.clone(),
            items,
        });
    }
    out
}

/// A relationship value: the docid a link in it names, else the text itself.
fn link_or_text(s: &str, base: &str) -> String {
    first_link(s, base).unwrap_or_else(|| s.trim().to_string())
}

/// Resolve a docid or slug against the target model's folder.
fn resolve(raw: &str, folder: &str, exists: &dyn Fn(&str) -> bool) -> Option<RelatedItem> {
    let v = raw.trim().trim_start_matches('/');
    if v.is_empty() {
        return None;
    }
    let candidates: Vec<String> = if folder.is_empty() || v.starts_with(folder) {
        vec![v.to_string()]
    } else if v.contains('/') {
        vec![v.to_string(), format!("{folder}{v}")]
    } else {
        vec![format!("{folder}{v}"), v.to_string()]
    };
    let found = candidates.iter().find(|c| exists(c));
    Some(match found {
        Some(d) => RelatedItem {
            docid: d.clone(),
            exists: true,
        },
        None => RelatedItem {
            docid: candidates[0].clone(),
            exists: false,
        },
    })
}

/// The raw targets under the sections named by `names`: list items' first links, then the
/// direct sub-headings (their link, else their slug).
fn heading_items(doc: &DocInput<'_>, names: &SectionDef) -> Vec<String> {
    let mut out = Vec::new();
    let secs = doc.sections;
    for (i, s) in secs.iter().enumerate() {
        if s.level == 0 || !names.matches(s.heading) {
            continue;
        }
        out.extend(list_item_links(s.text, doc.docid));
        let children: Vec<&DocSection<'_>> = secs[i + 1..]
            .iter()
            .take_while(|c| c.level > s.level)
            .collect();
        let Some(child_level) = children.iter().map(|c| c.level).min() else {
            continue;
        };
        for c in children.iter().filter(|c| c.level == child_level) {
            match first_link(c.heading, doc.docid) {
                Some(d) => out.push(d),
                None => {
                    let slug = markers::slug(c.heading);
                    if !slug.is_empty() {
                        out.push(slug);
                    }
                }
            }
        }
    }
    out
}

/// The first document link of each list item of `text` (fenced code skipped).
fn list_item_links(text: &str, base: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fence: Option<(char, usize)> = None;
    for line in text.lines() {
        if let Some((c, n)) = crate::text::markdown::fence(line) {
            match fence {
                None => fence = Some((c, n)),
                Some((fc, fnum)) if fc == c && n >= fnum && line.trim().chars().all(|x| x == c) => {
                    fence = None
                }
                Some(_) => {}
            }
            continue;
        }
        if fence.is_some() {
            continue;
        }
        if let Some(item) = list_item(line)
            && let Some(d) = first_link(item, base)
        {
            out.push(d);
        }
    }
    out
}

/// The text of a list item line (`- x`, `* x`, `+ x`, `1. x`, `1) x`), else None.
fn list_item(line: &str) -> Option<&str> {
    let t = line.trim_start();
    for bullet in ["- ", "* ", "+ "] {
        if let Some(rest) = t.strip_prefix(bullet) {
            return Some(rest);
        }
    }
    let digits = t.len() - t.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if (1..=9).contains(&digits) {
        let rest = &t[digits..];
        return rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") "));
    }
    None
}

/// The docid named by the first document link in `text`: `[[docid]]`, `[text](dest)` (a `.md`
/// path resolves relative to `base` like any reference; an extensionless path is a docid,
/// `./`/`../` relative to `base`), or `kbdb://document/docid`. Inline code is skipped.
fn first_link(text: &str, base: &str) -> Option<String> {
    let b = text.as_bytes();
    let mut links = crate::text::markers::LinkScan::new(text);
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'`' => {
                let run = b[i..].iter().take_while(|&&c| c == b'`').count();
                let fence = &text[i..i + run];
                i += match text[i + run..].find(fence) {
                    Some(end) => run + end + run,
                    None => run,
                };
            }
            b'[' if b.get(i + 1) == Some(&b'[') => match links.wiki_close(i) {
                Some(end) => {
                    if let Some(d) = document_of(&text[i..i + 4 + end], base) {
                        return Some(d);
                    }
                    i += 4 + end;
                }
                None => i += 2,
            },
            b'[' => match links.inline_link(i) {
                Some((dest, len)) => {
                    if let Some(d) =
                        document_of(&text[i..i + len], base).or_else(|| bare_dest(dest, base))
                    {
                        return Some(d);
                    }
                    i += len;
                }
                None => i += 1,
            },
            b'k' if text[i..].starts_with("kbdb://") => {
                let len = text[i..]
                    .find(|c: char| {
                        c.is_whitespace() || matches!(c, ')' | ']' | '>' | '<' | '"' | '\'' | '`')
                    })
                    .unwrap_or(text.len() - i);
                if let Some(d) = document_of(&text[i..i + len], base) {
                    return Some(d);
                }
                i += len.max(1);
            }
            _ => i += 1,
        }
    }
    None
}

/// The document a single marker text references (by the shared reference rules).
fn document_of(marker: &str, base: &str) -> Option<String> {
    markers::extract(marker, Some(base))
        .into_iter()
        .find_map(|m| match m.target {
            Target::Document { docid, .. } => Some(docid),
            Target::Section(_) => None,
        })
}

/// An extensionless link destination as a docid: `stories/a` (from the root), `./a` or `../a`
/// (from `base`'s folder). Web links and anchors are not documents.
fn bare_dest(dest: &str, base: &str) -> Option<String> {
    let dest = dest.trim();
    let path = dest.split(['#', '?']).next().unwrap_or("");
    let has_scheme = path
        .split_once(':')
        .is_some_and(|(s, _)| !s.is_empty() && !s.contains('/'));
    if path.is_empty() || has_scheme || path.starts_with("//") {
        return None;
    }
    if path.starts_with("./") || path.starts_with("../") {
        return document_of(&format!("[x]({path}.md)"), base);
    }
    let docid = path.trim_start_matches('/');
    crate::model::validate::validate_docid(docid).ok()?;
    Some(docid.to_string())
}

// ---------------------------------------------------------------------------------------------
// Scaffolding
// ---------------------------------------------------------------------------------------------

/// A new document of `model`: its metadata (the model's defaults, overridden by `meta`) and a
/// markdown body: `# {title}` (left out when the title is blank), then `## {heading}` for each
/// declared section and each hasMany heading not already among them, each followed by a blank
/// line. Callers append their own content and set `_model` when the docid alone would not
/// choose this model.
pub fn scaffold(
    model: &ModelDef,
    title: &str,
    meta: &Map<String, Value>,
) -> (Map<String, Value>, String) {
    let mut merged = model.defaults();
    for (k, v) in meta {
        merged.insert(k.clone(), v.clone());
    }
    let mut body = String::new();
    if !title.trim().is_empty() {
        let _ = write!(body, "# {}\n\n", title.trim());
    }
    for h in scaffold_headings(model) {
        let _ = write!(body, "## {h}\n\n");
    }
    (merged, body)
}

/// The headings a new document of `model` starts with.
fn scaffold_headings(model: &ModelDef) -> Vec<&str> {
    let mut out: Vec<&str> = model.sections.iter().map(|s| s.heading.as_str()).collect();
    for r in &model.relationships {
        if let Some(h) = r.heading.as_deref()
            && !model.sections.iter().any(|s| s.matches(h))
            && !out.iter().any(|o| norm_heading(o) == norm_heading(h))
        {
            out.push(h);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Introspection
// ---------------------------------------------------------------------------------------------

/// The models as JSON for agents (the schema resource):
/// `{"models": [{name, prefix|pattern, description, meta: [{name, type, items?, values?,
/// required, default?, description?}], sections: [{heading, alternatives, required,
/// description?}], relationships: {name: {type, target, field|heading}}, defaults,
/// documentCount}], "totalDocuments"}`. `counts` gives the number of documents of a model (by
/// name); `Base` comes last.
pub fn schema_json(set: &ModelSet, counts: &dyn Fn(&str) -> usize) -> Value {
    let mut total = 0usize;
    let mut models = Vec::new();
    for m in set.all() {
        let count = counts(&m.name);
        total += count;
        let mut o = Map::new();
        o.insert("name".into(), json!(m.name));
        if let Some(p) = &m.prefix {
            o.insert("prefix".into(), json!(p));
        }
        if let Some(p) = &m.pattern {
            o.insert("pattern".into(), json!(p));
        }
        o.insert("description".into(), json!(m.description));
        let meta: Vec<Value> = m
            .fields
            .iter()
            .map(|f| {
                let mut e = Map::new();
                e.insert("name".into(), json!(f.name));
                e.insert("type".into(), json!(f.field_type));
                if let Some(t) = f.items {
                    e.insert("items".into(), json!(t));
                }
                if !f.values.is_empty() {
                    e.insert("values".into(), json!(f.values));
                }
                e.insert("required".into(), json!(f.required));
                if let Some(d) = &f.default {
                    e.insert("default".into(), d.clone());
                }
                if let Some(d) = &f.description {
                    e.insert("description".into(), json!(d));
                }
                Value::Object(e)
            })
            .collect();
        o.insert("meta".into(), Value::Array(meta));
        let sections: Vec<Value> = m
            .sections
            .iter()
            .map(|s| {
                let mut e = Map::new();
                e.insert("heading".into(), json!(s.heading));
                e.insert("alternatives".into(), json!(s.alternatives));
                e.insert("required".into(), json!(s.required));
                if let Some(d) = &s.description {
                    e.insert("description".into(), json!(d));
                }
                Value::Object(e)
            })
            .collect();
        o.insert("sections".into(), Value::Array(sections));
        let mut rels = Map::new();
        for r in &m.relationships {
            let mut e = Map::new();
            e.insert("type".into(), json!(r.kind));
            e.insert("target".into(), json!(r.model));
            if let Some(f) = &r.field {
                e.insert("field".into(), json!(f));
            }
            if let Some(h) = &r.heading {
                e.insert("heading".into(), json!(h));
            }
            if let Some(d) = &r.description {
                e.insert("description".into(), json!(d));
            }
            rels.insert(r.name.clone(), Value::Object(e));
        }
        o.insert("relationships".into(), Value::Object(rels));
        o.insert("defaults".into(), Value::Object(m.defaults()));
        o.insert("documentCount".into(), json!(count));
        models.push(Value::Object(o));
    }
    json!({ "models": models, "totalDocuments": total })
}

/// Where a model's documents live, in words.
fn placement(m: &ModelDef) -> String {
    match (&m.prefix, &m.pattern) {
        (Some(p), _) => format!("docids starting with `{p}`"),
        (_, Some(p)) => format!("docids matching `{p}`"),
        _ if m.is_base() => "any document no other model claims".to_string(),
        _ => format!(
            "only documents whose metadata says `{MODEL_KEY}: {}`",
            m.name
        ),
    }
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn inline_json(v: &Value) -> String {
    format!("`{}`", v.to_string().replace('`', "'"))
}

/// The models as a MODELS.md: one `## Model` per model with its placement, a fields table,
/// its sections and its relationships.
pub fn summary_markdown(set: &ModelSet) -> String {
    let mut out = String::from("# Models\n\n");
    let _ = writeln!(
        out,
        "A document's model comes from its `{MODEL_KEY}` metadata (a model name), else from the model whose docid prefix or pattern matches it most specifically, else `{BASE_MODEL}`.\n"
    );
    for m in set.all() {
        let _ = write!(out, "## {}\n\n", m.name);
        if let Some(d) = &m.description {
            let _ = write!(out, "{}\n\n", d.trim());
        }
        if !m.is_base() {
            let _ = write!(out, "Documents: {}.\n\n", placement(m));
        }
        if m.fields.is_empty() {
            out.push_str("Fields: none declared");
            out.push_str(if m.is_base() {
                " (any metadata is accepted).\n\n"
            } else {
                ".\n\n"
            });
        } else {
            out.push_str("| Field | Type | Required | Default | Description |\n");
            out.push_str("|---|---|---|---|---|\n");
            for f in &m.fields {
                let _ = writeln!(
                    out,
                    "| `{}` | {} | {} | {} | {} |",
                    cell(&f.name),
                    cell(&f.type_label()),
                    if f.required { "yes" } else { "no" },
                    f.default
                        .as_ref()
                        .map(|d| cell(&inline_json(d)))
                        .unwrap_or_default(),
                    cell(f.description.as_deref().unwrap_or_default()),
                );
            }
            out.push('\n');
        }
        if !m.sections.is_empty() {
            out.push_str("Sections:\n\n");
            for s in &m.sections {
                let _ = write!(
                    out,
                    "- **{}** ({})",
                    s.heading,
                    if s.required { "required" } else { "optional" }
                );
                if !s.alternatives.is_empty() {
                    let _ = write!(out, "; also accepted: {}", s.alternatives.join(", "));
                }
                if let Some(d) = &s.description {
                    let _ = write!(out, " — {}", d.trim());
                }
                out.push('\n');
            }
            out.push('\n');
        }
        if !m.relationships.is_empty() {
            out.push_str("Relationships:\n\n");
            for r in &m.relationships {
                let _ = write!(out, "- `{}`: {} **{}**", r.name, r.kind, r.model);
                match r.kind {
                    RelKind::BelongsTo => {
                        let _ = write!(
                            out,
                            " via metadata field `{}` (a docid or slug)",
                            r.field.as_deref().unwrap_or_default()
                        );
                    }
                    RelKind::HasMany => {
                        let _ = write!(
                            out,
                            " from the items under the heading \"{}\"",
                            r.heading.as_deref().unwrap_or_default()
                        );
                    }
                }
                if let Some(d) = &r.description {
                    let _ = write!(out, " — {}", d.trim());
                }
                out.push('\n');
            }
            out.push('\n');
        }
    }
    let len = out.trim_end().len();
    out.truncate(len);
    out.push('\n');
    out
}

/// A prompt asking an agent to draft a new document of `model` titled `title`.
pub fn create_prompt(model: &ModelDef, title: &str) -> String {
    let mut out = format!(
        "You are creating a new {} document titled \"{}\".\n\n",
        model.name,
        title.trim()
    );
    if let Some(d) = &model.description {
        let _ = write!(out, "{}: {}\n\n", model.name, d.trim());
    }
    let folder = model.docid_prefix();
    if !folder.is_empty() {
        let _ = write!(
            out,
            "Give it a docid under `{folder}` (for example `{folder}{}`).\n\n",
            markers::slug(title)
        );
    } else if !model.is_base() && model.prefix.is_none() && model.pattern.is_none() {
        let _ = write!(
            out,
            "Set `{MODEL_KEY}: {}` in its metadata so it is typed as a {}.\n\n",
            model.name, model.name
        );
    }
    let field_line = |f: &FieldDef| {
        let mut s = format!("- `{}`: {}", f.name, f.type_label());
        if let Some(d) = &f.default {
            let _ = write!(s, ", default {}", inline_json(d));
        }
        if let Some(d) = &f.description {
            let _ = write!(s, " — {}", d.trim());
        }
        s.push('\n');
        s
    };
    out.push_str("## Required Frontmatter\n\n");
    let required: Vec<&FieldDef> = model.fields.iter().filter(|f| f.required).collect();
    if required.is_empty() {
        out.push_str("None.\n");
    }
    for f in &required {
        out.push_str(&field_line(f));
    }
    let optional: Vec<&FieldDef> = model.fields.iter().filter(|f| !f.required).collect();
    if !optional.is_empty() {
        out.push_str("\n## Optional Frontmatter\n\n");
        for f in optional {
            out.push_str(&field_line(f));
        }
    }
    out.push_str("\n## Sections to Include\n\n");
    let headings = scaffold_headings(model);
    if headings.is_empty() {
        out.push_str("No particular sections; organize the content under headings as it needs.\n");
    }
    for h in headings {
        let _ = write!(out, "- ## {h}");
        match model.sections.iter().find(|s| s.matches(h)) {
            Some(s) => {
                out.push_str(if s.required {
                    " (required)"
                } else {
                    " (optional)"
                });
                if let Some(d) = &s.description {
                    let _ = write!(out, ": {}", d.trim());
                }
            }
            None => out.push_str(" (optional)"),
        }
        out.push('\n');
    }
    if !model.relationships.is_empty() {
        out.push_str("\n## Relationships\n\n");
        for r in &model.relationships {
            match r.kind {
                RelKind::BelongsTo => {
                    let _ = writeln!(
                        out,
                        "- `{}`: put the docid of the {} it belongs to in the `{}` metadata field.",
                        r.name,
                        r.model,
                        r.field.as_deref().unwrap_or_default()
                    );
                }
                RelKind::HasMany => {
                    let _ = writeln!(
                        out,
                        "- `{}`: under \"## {}\", list the {} documents as links, one per item (`- [[docid]]`).",
                        r.name,
                        r.heading.as_deref().unwrap_or_default(),
                        r.model
                    );
                }
            }
        }
    }
    out.push_str(
        "\nPlease draft the document content, then create it with the create_document tool.\n",
    );
    out
}

/// The query operators: (operator, what it matches, example condition in the object form).
pub const QUERY_OPERATORS: &[(&str, &str, &str)] = &[
    (
        "$eq",
        "equal (a plain value means `$eq`); on an array field, an element is equal",
        r#"{"status": {"$eq": "done"}}"#,
    ),
    ("$neq", "not `$eq`", r#"{"status": {"$neq": "done"}}"#),
    (
        "$in",
        "equal to an item of the list (a list value means `$in`)",
        r#"{"status": {"$in": ["ready", "done"]}}"#,
    ),
    (
        "$notIn",
        "not `$in`",
        r#"{"status": {"$notIn": ["draft"]}}"#,
    ),
    (
        "$gt",
        "greater than: numbers by value, strings by text (so ISO dates compare correctly), false < true; on an array field, any element",
        r#"{"points": {"$gt": 3}}"#,
    ),
    (
        "$gte",
        "greater than or equal",
        r#"{"points": {"$gte": 5}}"#,
    ),
    ("$lt", "less than", r#"{"due": {"$lt": "2025-01-01"}}"#),
    ("$lte", "less than or equal", r#"{"points": {"$lte": 8}}"#),
    (
        "$contains",
        "a string field contains the text, or an array field has the element",
        r#"{"labels": {"$contains": "ux"}}"#,
    ),
    (
        "$startsWith",
        "a string starts with the text",
        r#"{"title": {"$startsWith": "Login"}}"#,
    ),
    (
        "$endsWith",
        "a string ends with the text",
        r#"{"id": {"$endsWith": "-draft"}}"#,
    ),
    (
        "$regex",
        "a string matches the regular expression (searched, not anchored; `(?i)` ignores case)",
        r#"{"title": {"$regex": "^(Log|Sign)"}}"#,
    ),
    (
        "$exists",
        "`true`: the field is present; `false`: it is missing",
        r#"{"due": {"$exists": true}}"#,
    ),
    (
        "$notExists",
        "`true`: the field is missing (same as `$exists: false`)",
        r#"{"due": {"$notExists": true}}"#,
    ),
];

/// A guide to querying the models' documents: each model with its filterable fields (types,
/// enum values), the operators and both forms of `where`, with examples.
pub fn query_guide(set: &ModelSet) -> String {
    let mut out = String::from("# Querying documents\n\n");
    out.push_str(
        "A query filters documents by their metadata (front matter): `{\"model\": \"<Model>\", \"where\": …}`; `model` keeps only that model's documents (any case). A path is `id`, `title`, `model`, or a metadata field: `meta.status`, or just `status`.\n\n",
    );
    out.push_str("## Models and their fields\n\n");
    for m in set.all() {
        let _ = writeln!(out, "### {} ({})\n", m.name, placement(m));
        if m.fields.is_empty() && m.relationships.iter().all(|r| r.field.is_none()) {
            out.push_str("No declared fields; any metadata key can still be filtered on.\n\n");
            continue;
        }
        for f in &m.fields {
            let _ = write!(out, "- `{}`: {}", f.name, f.type_label());
            if f.required {
                out.push_str(", required");
            }
            if let Some(d) = &f.default {
                let _ = write!(out, ", default {}", inline_json(d));
            }
            out.push('\n');
        }
        for r in m.relationships.iter().filter(|r| r.field.is_some()) {
            if m.field(r.field.as_deref().unwrap_or_default()).is_none() {
                let _ = writeln!(
                    out,
                    "- `{}`: docid of the {} it belongs to (belongsTo `{}`)",
                    r.field.as_deref().unwrap_or_default(),
                    r.model,
                    r.name
                );
            }
        }
        out.push('\n');
    }
    out.push_str("## Operators\n\n| Operator | Matches | Example |\n|---|---|---|\n");
    for (op, what, example) in QUERY_OPERATORS {
        let _ = writeln!(out, "| `{op}` | {} | `{}` |", cell(what), cell(example));
    }
    out.push_str(
        "\nA field is missing when it is absent or `null`. On a missing field every operator is false except `$neq`, `$notIn`, `$exists: false` and `$notExists: true`. Comparisons are case-sensitive. Dates are strings (`YYYY-MM-DD` or RFC 3339), so they compare as text.\n",
    );
    let ex = Examples::of(set);
    out.push_str("\n## Two forms of `where`\n\n");
    out.push_str(
        "Both mean: every condition holds.\n\n**Object form**: one key per path. A plain value means `$eq`, a list means `$in`, an object of operators applies each of them.\n\n",
    );
    let _ = write!(
        out,
        "```json\n{{\"where\": {{{e}: {v}, {n}: {{\"$gte\": 3, \"$lt\": 8}}, {d}: {{\"$exists\": true}}}}}}\n```\n\n",
        e = ex.enum_field,
        v = ex.enum_value,
        n = ex.number_field,
        d = ex.date_field,
    );
    out.push_str(
        "**List form**: a list of `{\"path\", \"operator\", \"value\"}` conditions. The operator may be written with or without `$` and defaults to `eq`; `exists` and `notExists` without a value mean `true`.\n\n",
    );
    let _ = write!(
        out,
        "```json\n{{\"where\": [{{\"path\": {e}, \"operator\": \"eq\", \"value\": {v}}}, {{\"path\": {n}, \"operator\": \"$gte\", \"value\": 3}}, {{\"path\": {d}, \"operator\": \"notExists\"}}]}}\n```\n",
        e = ex.enum_field,
        v = ex.enum_value,
        n = ex.number_field,
        d = ex.date_field,
    );
    out
}

/// Field names and a value for the query examples, taken from the models when they have
/// such fields (JSON-quoted).
struct Examples {
    enum_field: String,
    enum_value: String,
    number_field: String,
    date_field: String,
}

impl Examples {
    fn of(set: &ModelSet) -> Examples {
        let find = |t: FieldType| {
            set.models
                .iter()
                .flat_map(|m| &m.fields)
                .find(|f| f.field_type == t)
        };
        let (enum_field, enum_value) = find(FieldType::Enum)
            .map(|f| (quote(&f.name), quote(&f.values[0])))
            .unwrap_or_else(|| (quote("status"), quote("done")));
        Examples {
            enum_field,
            enum_value,
            number_field: quote(find(FieldType::Number).map_or("priority", |f| &f.name)),
            date_field: quote(find(FieldType::Date).map_or("due", |f| &f.name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STORIES: &str = r#"
[[model]]
name = "Story"
prefix = "stories/"
description = "A user story"

[model.fields.status]
type = "enum"
values = ["draft", "ready", "done"]
default = "draft"
required = true
description = "Workflow state"

[model.fields.points]
type = "number"

[model.fields.due]
type = "date"

[model.fields.labels]
type = "array"
items = "string"

[model.fields.flag]
type = "boolean"

[model.fields.owner]
type = "string"

[[model.sections]]
heading = "Acceptance Criteria"
alternatives = ["Criteria", "AC"]
required = true

[[model.sections]]
heading = "Notes"

[model.relationships.epic]
type = "belongsTo"
model = "epic"
field = "epic"

[[model]]
name = "Epic"
pattern = "epics/*"

[model.fields.owner]
type = "string"
required = true

[model.relationships.stories]
type = "hasMany"
model = "Story"
heading = "Stories"
"#;

    fn set() -> ModelSet {
        ModelSet::from_toml(STORIES).unwrap()
    }

    fn meta(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn err(toml: &str) -> String {
        ModelSet::from_toml(toml).unwrap_err().to_string()
    }

    fn one(fields: &str) -> String {
        format!("[[model]]\nname = \"M\"\nprefix = \"m/\"\n{fields}")
    }

    // ---- loading -------------------------------------------------------------------------

    #[test]
    fn loads_models_in_order_with_fields_in_declaration_order() {
        let s = set();
        let names: Vec<&str> = s.all().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["Story", "Epic", "Base"]);
        let story = s.get("story").unwrap();
        let fields: Vec<&str> = story.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            fields,
            ["status", "points", "due", "labels", "flag", "owner"]
        );
        let status = story.field("status").unwrap();
        assert_eq!(status.field_type, FieldType::Enum);
        assert_eq!(status.default, Some(json!("draft")));
        assert!(status.required);
        assert_eq!(
            story.field("labels").unwrap().items,
            Some(FieldType::String)
        );
        assert_eq!(story.sections[0].alternatives, ["Criteria", "AC"]);
        // The target model's spelling is canonicalized.
        assert_eq!(story.relationship("epic").unwrap().model, "Epic");
        assert_eq!(s.get("EPIC").unwrap().name, "Epic");
        assert_eq!(s.get("base").unwrap().name, "Base");
        assert!(s.get("nope").is_none());
    }

    #[test]
    fn empty_file_has_only_base() {
        let s = ModelSet::from_toml("").unwrap();
        assert!(s.is_empty());
        assert_eq!(s.all().count(), 1);
        assert_eq!(s.model_for("x", &Map::new()).name, "Base");
        assert_eq!(s, ModelSet::new());
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_line() {
        let e = err("[[model]]\nname = \"A\"\nprefx = \"a/\"\n");
        assert!(e.contains("prefx") && e.contains("line 3"), "{e}");
        let e = err(&one(
            "[model.fields.x]\ntype = \"string\"\nrequird = true\n",
        ));
        assert!(e.contains("requird"), "{e}");
        let e = err(&one("[[model.sections]]\nheading = \"A\"\nalt = []\n"));
        assert!(e.contains("alt"), "{e}");
        let e = err(&one(
            "[model.relationships.r]\ntype = \"hasMany\"\nmodel = \"M\"\nheading = \"H\"\nextra = 1\n",
        ));
        assert!(e.contains("extra"), "{e}");
        let e = err("models = []\n");
        assert!(e.contains("models"), "{e}");
        let e = err("[[model]]\nprefix = \"a/\"\n");
        assert!(e.contains("name"), "{e}");
        assert!(err("[[model]\n").starts_with("invalid models file"));
    }

    #[test]
    fn model_name_rules() {
        let e = err("[[model]]\nname = \"A\"\n[[model]]\nname = \"a\"\n");
        assert!(e.starts_with("model a: name: duplicate model name"), "{e}");
        let e = err("[[model]]\nname = \"Base\"\n");
        assert!(
            e.contains("model Base: name:") && e.contains("built-in"),
            "{e}"
        );
        let e = err("[[model]]\nname = \"base\"\n");
        assert!(e.contains("cannot be redefined"), "{e}");
        let e = err("[[model]]\nname = \"A\"\n[[model]]\nname = \"my model\"\n");
        assert!(
            e.starts_with("model #2: name:") && e.contains("\"my model\""),
            "{e}"
        );
        let e = err("[[model]]\nname = \"\"\n");
        assert!(e.starts_with("model #1: name:"), "{e}");
    }

    #[test]
    fn prefix_and_pattern_rules() {
        let e = err("[[model]]\nname = \"A\"\nprefix = \"a/\"\npattern = \"a/*\"\n");
        assert_eq!(e, "model A: pattern: set prefix or pattern, not both");
        let e = err("[[model]]\nname = \"A\"\nprefix = \"\"\n");
        assert!(e.starts_with("model A: prefix: must not be empty"), "{e}");
        let e = err("[[model]]\nname = \"A\"\nprefix = \"/a\"\n");
        assert!(e.starts_with("model A: prefix:"), "{e}");
        for bad in [
            "", "/a/*", "a//b", "a/", "a/[ab]", "a/b**", "a/**/**", "a/{x,y}",
        ] {
            let e = err(&format!(
                "[[model]]\nname = \"A\"\npattern = {}\n",
                quote(bad)
            ));
            assert!(e.starts_with("model A: pattern:"), "{bad}: {e}");
        }
        let e = err("[[model]]\nname = \"A\"\npattern = \"a/b**\"\n");
        assert!(e.contains("bad glob") && e.contains("whole segment"), "{e}");
    }

    #[test]
    fn field_rules() {
        let cases = [
            (
                "[model.fields.x]\ntype = \"strng\"\n",
                "fields.x.type: unknown type \"strng\"",
            ),
            (
                "[model.fields.x]\ntype = \"enum\"\n",
                "fields.x.values: an enum needs its values",
            ),
            (
                "[model.fields.x]\ntype = \"enum\"\nvalues = []\n",
                "fields.x.values: an enum needs at least one value",
            ),
            (
                "[model.fields.x]\ntype = \"enum\"\nvalues = [\"a\", \"a\"]\n",
                "fields.x.values: \"a\" is listed twice",
            ),
            (
                "[model.fields.x]\ntype = \"string\"\nvalues = [\"a\"]\n",
                "fields.x.values: only enum fields",
            ),
            (
                "[model.fields.x]\ntype = \"string\"\nitems = \"string\"\n",
                "fields.x.items: only array fields take items",
            ),
            (
                "[model.fields.x]\ntype = \"array\"\nitems = \"array\"\n",
                "fields.x.items: arrays of arrays",
            ),
            (
                "[model.fields.x]\ntype = \"array\"\nitems = \"thing\"\n",
                "fields.x.items: unknown type \"thing\"",
            ),
            (
                "[model.fields.x]\ntype = \"array\"\nitems = \"enum\"\n",
                "fields.x.values: an enum needs its values",
            ),
            (
                "[model.fields._x]\ntype = \"string\"\n",
                "fields._x: metadata keys starting with _ are reserved",
            ),
            (
                "[model.fields.x]\ntype = \"number\"\ndefault = \"three\"\n",
                "fields.x.default: expected a number, got the string \"three\"",
            ),
            (
                "[model.fields.x]\ntype = \"enum\"\nvalues = [\"a\", \"b\"]\ndefault = \"c\"\n",
                "fields.x.default: expected one of \"a\", \"b\", got the string \"c\"",
            ),
            (
                "[model.fields.x]\ntype = \"date\"\ndefault = \"soon\"\n",
                "fields.x.default: expected a date",
            ),
            (
                "[model.fields.x]\ntype = \"boolean\"\ndefault = 1\n",
                "fields.x.default: expected a boolean",
            ),
            (
                "[model.fields.x]\ntype = \"array\"\nitems = \"number\"\ndefault = [1, \"b\"]\n",
                "fields.x.default[1]: expected a number, got the string \"b\"",
            ),
            (
                "[model.fields.x]\ntype = \"array\"\ndefault = \"a\"\n",
                "fields.x.default: expected an array",
            ),
            (
                "[model.fields.x]\ntype = \"string\"\ndefault = { a = 1 }\n",
                "fields.x.default: expected a string, got an object",
            ),
        ];
        for (toml, want) in cases {
            let e = err(&one(toml));
            assert!(e.starts_with(&format!("model M: {want}")), "{toml}\n→ {e}");
        }
    }

    #[test]
    fn valid_defaults_load_and_toml_dates_become_strings() {
        let s = ModelSet::from_toml(&one(
            "[model.fields.d]\ntype = \"date\"\ndefault = 2024-03-01\n\
             [model.fields.t]\ntype = \"date\"\ndefault = 2024-03-01T10:00:00Z\n\
             [model.fields.n]\ntype = \"number\"\ndefault = 1.5\n\
             [model.fields.l]\ntype = \"array\"\nitems = \"enum\"\nvalues = [\"x\", \"y\"]\ndefault = [\"y\"]\n",
        ))
        .unwrap();
        let m = s.get("M").unwrap();
        assert_eq!(m.field("d").unwrap().default, Some(json!("2024-03-01")));
        assert_eq!(
            m.field("t").unwrap().default,
            Some(json!("2024-03-01T10:00:00Z"))
        );
        assert_eq!(m.field("n").unwrap().default, Some(json!(1.5)));
        assert_eq!(m.defaults().len(), 4);
    }

    #[test]
    fn section_rules() {
        let e = err(&one("[[model.sections]]\nheading = \" \"\n"));
        assert_eq!(e, "model M: sections[0].heading: must not be empty");
        let e = err(&one(
            "[[model.sections]]\nheading = \"Notes\"\n[[model.sections]]\nheading = \"Other\"\nalternatives = [\"notes\"]\n",
        ));
        assert!(
            e.starts_with("model M: sections[1].heading: \"notes\" is already"),
            "{e}"
        );
        let e = err(&one(
            "[[model.sections]]\nheading = \"A\"\nalternatives = [\"\"]\n",
        ));
        assert!(
            e.starts_with("model M: sections[0].alternatives[0]: must not be empty"),
            "{e}"
        );
    }

    #[test]
    fn relationship_rules() {
        let cases = [
            (
                "type = \"belongs_to\"\nmodel = \"M\"\nfield = \"f\"\n",
                "relationships.r.type: unknown relationship type \"belongs_to\"",
            ),
            (
                "type = \"belongsTo\"\nmodel = \"Nope\"\nfield = \"f\"\n",
                "relationships.r.model: no model named \"Nope\" (models: M, Base)",
            ),
            (
                "type = \"belongsTo\"\nmodel = \"M\"\n",
                "relationships.r.field: a belongsTo relationship needs",
            ),
            (
                "type = \"belongsTo\"\nmodel = \"M\"\nfield = \"f\"\nheading = \"H\"\n",
                "relationships.r.heading: a belongsTo",
            ),
            (
                "type = \"belongsTo\"\nmodel = \"M\"\nfield = \"_f\"\n",
                "relationships.r.field: metadata keys starting with _",
            ),
            (
                "type = \"hasMany\"\nmodel = \"M\"\n",
                "relationships.r.heading: a hasMany relationship needs",
            ),
            (
                "type = \"hasMany\"\nmodel = \"M\"\nheading = \"H\"\nfield = \"f\"\n",
                "relationships.r.field: a hasMany",
            ),
            (
                "type = \"hasMany\"\nmodel = \" \"\nheading = \"H\"\n",
                "relationships.r.model: must name the target model",
            ),
        ];
        for (body, want) in cases {
            let e = err(&one(&format!("[model.relationships.r]\n{body}")));
            assert!(e.starts_with(&format!("model M: {want}")), "{body}\n→ {e}");
        }
        let e = err(&one(
            "[model.fields.f]\ntype = \"number\"\n[model.relationships.r]\ntype = \"belongsTo\"\nmodel = \"M\"\nfield = \"f\"\n",
        ));
        assert!(
            e.contains("relationships.r.field: field \"f\" is declared as number"),
            "{e}"
        );
        // A later model and Base are valid targets.
        ModelSet::from_toml(
            "[[model]]\nname = \"A\"\n[model.relationships.b]\ntype = \"hasMany\"\nmodel = \"B\"\nheading = \"Bs\"\n\
             [model.relationships.any]\ntype = \"belongsTo\"\nmodel = \"base\"\nfield = \"parent\"\n\
             [[model]]\nname = \"B\"\n",
        )
        .unwrap();
    }

    #[test]
    fn to_toml_round_trips() {
        let s = set();
        let text = s.to_toml();
        let back = ModelSet::from_toml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(back, s);
        assert!(text.starts_with("[[model]]\nname = \"Story\"\n"), "{text}");
        assert!(
            text.contains("[model.fields.status]\ntype = \"enum\""),
            "{text}"
        );
        // Odd keys, escapes, every optional attribute.
        let tricky = ModelSet::from_toml(
            "[[model]]\nname = \"X\"\ndescription = \"multi\\nline \\\"quoted\\\"\"\npattern = \"docs/**/adr-*\"\n\
             [model.fields.\"due date\"]\ntype = \"date\"\ndefault = 2024-01-02\ndescription = \"d\"\n\
             [model.fields.n]\ntype = \"number\"\ndefault = 3\nrequired = true\n\
             [model.fields.f]\ntype = \"number\"\ndefault = 3.0\n\
             [model.fields.tags]\ntype = \"array\"\nitems = \"enum\"\nvalues = [\"a\", \"b\"]\ndefault = []\n\
             [[model.sections]]\nheading = \"H\"\nalternatives = [\"h2\"]\nrequired = true\ndescription = \"s\"\n\
             [model.relationships.\"the parent\"]\ntype = \"belongsTo\"\nmodel = \"X\"\nfield = \"parent\"\ndescription = \"r\"\n\
             [[model]]\nname = \"Y\"\n",
        )
        .unwrap();
        let text = tricky.to_toml();
        assert_eq!(ModelSet::from_toml(&text).unwrap(), tricky, "{text}");
        assert_eq!(ModelSet::new().to_toml(), "");
    }

    // ---- model_for -----------------------------------------------------------------------

    #[test]
    fn model_for_precedence() {
        let s = ModelSet::from_toml(
            "[[model]]\nname = \"Doc\"\nprefix = \"docs/\"\n\
             [[model]]\nname = \"Adr\"\npattern = \"docs/adr/*\"\n\
             [[model]]\nname = \"Deep\"\npattern = \"docs/**/deep\"\n\
             [[model]]\nname = \"Manual\"\n\
             [[model]]\nname = \"Same\"\nprefix = \"docs/adr/\"\n",
        )
        .unwrap();
        let none = Map::new();
        let name = |d: &str, m: &Map<String, Value>| s.model_for(d, m).name.clone();
        assert_eq!(name("docs/intro", &none), "Doc");
        // The longest literal part wins; on a tie the earlier model.
        assert_eq!(name("docs/adr/one", &none), "Adr");
        assert_eq!(name("docs/adr/one/two", &none), "Same");
        assert_eq!(name("docs/a/b/deep", &none), "Deep");
        assert_eq!(name("docs/deep", &none), "Deep");
        assert_eq!(name("notes/x", &none), "Base");
        // `_model` wins, case-insensitively; an unknown name falls back to the docid.
        assert_eq!(
            name("notes/x", &meta(json!({"_model": "manual"}))),
            "Manual"
        );
        assert_eq!(name("docs/adr/1", &meta(json!({"_model": "DOC"}))), "Doc");
        assert_eq!(name("docs/adr/1", &meta(json!({"_model": "base"}))), "Base");
        assert_eq!(name("docs/x", &meta(json!({"_model": "Nope"}))), "Doc");
        assert_eq!(name("docs/x", &meta(json!({"_model": 3}))), "Doc");
    }

    #[test]
    fn globs() {
        let g = |p: &str| Glob::compile(p).unwrap();
        assert!(g("stories/*").matches("stories/a"));
        assert!(!g("stories/*").matches("stories/a/b"));
        assert!(!g("stories/*").matches("stories"));
        assert!(g("stories/**").matches("stories/a/b"));
        assert!(!g("stories/**").matches("stories"));
        assert!(g("**/readme").matches("readme"));
        assert!(g("**/readme").matches("a/b/readme"));
        assert!(g("a/**/b").matches("a/b"));
        assert!(g("a/**/b").matches("a/x/y/b"));
        assert!(!g("a/**/b").matches("a/x/c"));
        assert!(g("adr-*").matches("adr-001"));
        assert!(g("adr-??1").matches("adr-001"));
        assert!(!g("adr-?").matches("adr-01"));
        assert!(g("*").matches("x"));
        assert!(!g("*").matches("x/y"));
        assert_eq!(g("docs/adr/*").literal_chars, 9);
    }

    #[test]
    fn docid_prefixes() {
        let s = set();
        assert_eq!(s.get("Story").unwrap().docid_prefix(), "stories/");
        assert_eq!(s.get("Epic").unwrap().docid_prefix(), "epics/");
        assert_eq!(s.base().docid_prefix(), "");
        let p = ModelSet::from_toml(
            "[[model]]\nname = \"A\"\npattern = \"docs/**/adr-*\"\n[[model]]\nname = \"B\"\npattern = \"exact/name\"\n",
        )
        .unwrap();
        assert_eq!(p.get("A").unwrap().docid_prefix(), "docs/");
        assert_eq!(p.get("B").unwrap().docid_prefix(), "");
    }

    // ---- validation ----------------------------------------------------------------------

    fn secs<'a>(list: &'a [(u8, &'a str, &'a str)]) -> Vec<DocSection<'a>> {
        list.iter()
            .map(|&(level, heading, text)| DocSection {
                level,
                heading,
                text,
            })
            .collect()
    }

    const AC: &[(u8, &str, &str)] = &[
        (1, "Login", "# Login"),
        (2, "Acceptance Criteria", "## Acceptance Criteria\n- works"),
    ];

    fn check(
        docid: &str,
        m: Value,
        sections: &[(u8, &str, &str)],
        existing: &[&str],
    ) -> Validation {
        let s = set();
        let m = meta(m);
        let sections = secs(sections);
        let doc = DocInput {
            docid,
            title: Some("T"),
            meta: &m,
            sections: &sections,
        };
        validate(&s, &doc, &|d| existing.contains(&d))
    }

    fn errors(v: &Validation) -> Vec<String> {
        v.errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_good_document_is_valid() {
        let v = check(
            "stories/login",
            json!({"status": "ready", "points": 3, "due": "2024-05-01", "labels": ["a"], "flag": false, "owner": "ann", "_x": 1}),
            AC,
            &[],
        );
        assert!(v.valid, "{v:?}");
        assert!(v.errors.is_empty() && v.warnings.is_empty(), "{v:?}");
        assert_eq!(v.model, "Story");
        assert_eq!(v.docid, "stories/login");
    }

    #[test]
    fn required_field_missing_or_null() {
        let v = check("stories/a", json!({}), AC, &[]);
        assert_eq!(errors(&v), ["meta.status: required"]);
        assert!(!v.valid);
        let v = check("stories/a", json!({"status": null}), AC, &[]);
        assert_eq!(errors(&v), ["meta.status: required"]);
        // Optional fields may be null or absent.
        let v = check(
            "stories/a",
            json!({"status": "done", "points": null}),
            AC,
            &[],
        );
        assert!(v.valid, "{v:?}");
    }

    #[test]
    fn wrong_types() {
        let v = check(
            "stories/a",
            json!({"status": "draft", "points": "three", "flag": "yes", "owner": 5, "labels": "a"}),
            AC,
            &[],
        );
        assert_eq!(
            errors(&v),
            [
                "meta.points: expected a number, got the string \"three\"",
                "meta.labels: expected an array, got the string \"a\"",
                "meta.flag: expected a boolean (true or false), got the string \"yes\"",
                "meta.owner: expected a string, got the number 5",
            ]
        );
    }

    #[test]
    fn enum_values() {
        let v = check("stories/a", json!({"status": "wip"}), AC, &[]);
        assert_eq!(
            errors(&v),
            ["meta.status: expected one of \"draft\", \"ready\", \"done\", got the string \"wip\""]
        );
        let s = ModelSet::from_toml(&one(
            "[model.fields.p]\ntype = \"enum\"\nvalues = [\"1\", \"2\", \"true\"]\n",
        ))
        .unwrap();
        let ok = |v: Value| {
            let m = meta(json!({ "p": v }));
            let doc = DocInput {
                docid: "m/x",
                title: None,
                meta: &m,
                sections: &[],
            };
            validate(&s, &doc, &|_| true).valid
        };
        assert!(ok(json!(1)) && ok(json!("2")) && ok(json!(true)));
        assert!(!ok(json!(3)) && !ok(json!(["1"])));
    }

    #[test]
    fn dates() {
        for good in [
            "2024-02-29",
            "2024-02-29T10:00:00Z",
            "2024-02-29T10:00:00+02:00",
            "2024-02-29 10:00:00",
            "2024-02-29T10:00:00.5",
            "2024-02-29T10:00",
        ] {
            assert!(is_date(good), "{good}");
        }
        for bad in [
            "2023-02-29",
            "2024-2-9",
            "24-02-01",
            "tomorrow",
            "2024-02-29X",
            "2024-02-29T25:00:00Z",
            "",
        ] {
            assert!(!is_date(bad), "{bad}");
        }
        let v = check(
            "stories/a",
            json!({"status": "draft", "due": "next week"}),
            AC,
            &[],
        );
        assert_eq!(
            errors(&v),
            ["meta.due: expected a date (YYYY-MM-DD or RFC 3339), got the string \"next week\""]
        );
        let v = check(
            "stories/a",
            json!({"status": "draft", "due": 20240101}),
            AC,
            &[],
        );
        assert!(
            errors(&v)[0].starts_with("meta.due: expected a date"),
            "{v:?}"
        );
    }

    #[test]
    fn array_elements() {
        let v = check(
            "stories/a",
            json!({"status": "draft", "labels": ["a", 2, null]}),
            AC,
            &[],
        );
        assert_eq!(
            errors(&v),
            [
                "meta.labels[1]: expected a string, got the number 2",
                "meta.labels[2]: expected a string, got null",
            ]
        );
        let s = ModelSet::from_toml(&one(
            "[model.fields.any]\ntype = \"array\"\n[model.fields.e]\ntype = \"array\"\nitems = \"enum\"\nvalues = [\"x\"]\n",
        ))
        .unwrap();
        let m = meta(json!({"any": [1, "a", true], "e": ["x", "y"]}));
        let doc = DocInput {
            docid: "m/1",
            title: None,
            meta: &m,
            sections: &[],
        };
        let v = validate(&s, &doc, &|_| true);
        assert_eq!(
            errors(&v),
            ["meta.e[1]: expected one of \"x\", got the string \"y\""]
        );
    }

    #[test]
    fn unknown_fields_warn_but_stay_valid() {
        let v = check(
            "stories/a",
            json!({"status": "draft", "colour": "red", "_private": 1, "epic": null}),
            AC,
            &[],
        );
        assert!(v.valid);
        assert_eq!(v.warnings.len(), 1, "{v:?}");
        assert_eq!(v.warnings[0].path, "meta.colour");
        assert!(
            v.warnings[0]
                .message
                .starts_with("unknown field (Story declares status, points"),
            "{v:?}"
        );
        assert!(v.warnings[0].message.contains("epic"), "{v:?}");
        // Base accepts any metadata.
        let v = check("notes/a", json!({"colour": "red", "status": 3}), &[], &[]);
        assert_eq!(v.model, "Base");
        assert!(v.valid && v.warnings.is_empty(), "{v:?}");
    }

    #[test]
    fn required_sections() {
        let v = check(
            "stories/a",
            json!({"status": "draft"}),
            &[(1, "Login", "# Login")],
            &[],
        );
        assert_eq!(
            errors(&v),
            ["sections.Acceptance Criteria: required section missing"]
        );
        // An alternative, any level, any case and spacing.
        for h in ["criteria", "AC", "acceptance   CRITERIA"] {
            let text = format!("#### {h}");
            let v = check(
                "stories/a",
                json!({"status": "draft"}),
                &[(4, h, &text)],
                &[],
            );
            assert!(v.valid, "{h}: {v:?}");
        }
        // The preamble is not a heading.
        let v = check(
            "stories/a",
            json!({"status": "draft"}),
            &[(0, "AC", "AC")],
            &[],
        );
        assert!(!v.valid);
    }

    #[test]
    fn model_override_errors() {
        let v = check("notes/a", json!({"_model": "Stroy"}), &[], &[]);
        assert_eq!(
            errors(&v),
            ["meta._model: no model named \"Stroy\" (models: Story, Epic, Base)"]
        );
        assert_eq!(v.model, "Base");
        let v = check("notes/a", json!({"_model": ["Story"]}), &[], &[]);
        assert_eq!(
            errors(&v),
            ["meta._model: expected a model name (a string), got an array"]
        );
        let v = check("notes/a", json!({"_model": "story"}), &[], &[]);
        assert_eq!(v.model, "Story");
        assert_eq!(
            errors(&v),
            [
                "meta.status: required",
                "sections.Acceptance Criteria: required section missing"
            ]
        );
    }

    #[test]
    fn belongs_to() {
        let base = json!({"status": "draft"});
        let with = |epic: Value| {
            let mut m = base.clone();
            m["epic"] = epic;
            m
        };
        // A docid, a slug under the target's folder, a link.
        for v in [
            json!("epics/auth"),
            json!("auth"),
            json!("[[epics/auth]]"),
            json!("kbdb://document/epics/auth"),
            json!("[Auth](epics/auth)"),
        ] {
            let r = check("stories/a", with(v.clone()), AC, &["epics/auth"]);
            assert!(r.valid, "{v}: {r:?}");
        }
        let r = check("stories/a", with(json!("auth")), AC, &[]);
        assert_eq!(
            errors(&r),
            ["meta.epic: no document epics/auth (belongsTo Epic)"]
        );
        let r = check("stories/a", with(json!("other/auth")), AC, &[]);
        assert_eq!(
            errors(&r),
            ["meta.epic: no document other/auth (belongsTo Epic)"]
        );
        // A slug that exists only at the root resolves there.
        let r = check("stories/a", with(json!("auth")), AC, &["auth"]);
        assert!(r.valid, "{r:?}");
        // Arrays of docids; empty values are not links.
        let r = check(
            "stories/a",
            with(json!(["epics/x", "y", ""])),
            AC,
            &["epics/x"],
        );
        assert_eq!(
            errors(&r),
            ["meta.epic: no document epics/y (belongsTo Epic)"]
        );
        // Not a docid.
        let r = check("stories/a", with(json!(7)), AC, &[]);
        assert_eq!(
            errors(&r),
            [
                "meta.epic: expected a docid (a string, or an array of them), got the number 7 (belongsTo Epic)"
            ]
        );
    }

    fn epic(sections: &[(u8, &str, &str)], existing: &[&str]) -> Validation {
        check("epics/auth", json!({"owner": "ann"}), sections, existing)
    }

    #[test]
    fn has_many_list_items() {
        let text = "## Stories\n\
            - [[stories/login]]\n\
            - [Logout](stories/logout) — soon\n\
            * kbdb://document/stories/reset\n\
            1. [Signup](../stories/signup.md)\n\
            2) [[signin|Sign in]] then [[stories/ignored]]\n\
            - [ ] [[stories/todo]]\n\
            - no link here, [web](https://example.com)\n\
            - `[[stories/code]]`\n\
            ```\n- [[stories/fenced]]\n```\n\
            Not an item [[stories/prose]]\n\
            - [[stories/login]] again";
        let sections = [(1, "Auth", "# Auth"), (2, "Stories", text)];
        let existing = [
            "stories/login",
            "stories/logout",
            "stories/reset",
            "stories/signup",
            "stories/signin",
            "stories/todo",
        ];
        let v = epic(&sections, &existing);
        assert!(v.valid, "{v:?}");
        let v = epic(&sections, &existing[1..]);
        assert_eq!(
            errors(&v),
            ["sections.Stories: item stories/login does not exist"]
        );
        let s = set();
        let m = meta(json!({"owner": "ann"}));
        let ds = secs(&sections);
        let doc = DocInput {
            docid: "epics/auth",
            title: None,
            meta: &m,
            sections: &ds,
        };
        let rel = relationships_of(&s, &doc, &|d| existing.contains(&d));
        assert_eq!(rel.len(), 1);
        assert_eq!(rel[0].name, "stories");
        assert_eq!(rel[0].kind, RelKind::HasMany);
        assert_eq!(rel[0].model, "Story");
        let ids: Vec<&str> = rel[0].items.iter().map(|i| i.docid.as_str()).collect();
        assert_eq!(ids, existing);
    }

    #[test]
    fn has_many_sub_headings() {
        let sections = [
            (1, "Auth", "# Auth"),
            (2, "stories", "## stories\nIntro."),
            (3, "Login Flow", "### Login Flow\n- [[stories/not-an-item]]"),
            (4, "Detail", "#### Detail"),
            (3, "[[stories/reset]]", "### [[stories/reset]]"),
            (2, "Notes", "## Notes\n- [[stories/after]]"),
        ];
        let v = epic(&sections, &["stories/login-flow", "stories/reset"]);
        assert!(v.valid, "{v:?}");
        let v = epic(&sections, &["stories/reset"]);
        assert_eq!(
            errors(&v),
            ["sections.Stories: item stories/login-flow does not exist"]
        );
        // No Stories heading: nothing to check.
        let v = epic(&[(1, "Auth", "# Auth")], &[]);
        assert!(v.valid, "{v:?}");
    }

    #[test]
    fn relationships_of_belongs_to_resolves_slugs() {
        let s = set();
        let m = meta(json!({"status": "draft", "epic": "auth"}));
        let doc = DocInput {
            docid: "stories/a",
            title: None,
            meta: &m,
            sections: &[],
        };
        let rel = relationships_of(&s, &doc, &|d| d == "epics/auth");
        assert_eq!(
            rel,
            [Related {
                name: "epic".into(),
                kind: RelKind::BelongsTo,
                model: "Epic".into(),
                field: Some("epic".into()),
                heading: None,
                items: vec![RelatedItem {
                    docid: "epics/auth".into(),
                    exists: true
                }],
            }]
        );
        let j = serde_json::to_value(&rel[0]).unwrap();
        assert_eq!(j["type"], "belongsTo");
        assert!(j.get("heading").is_none());
    }

    #[test]
    fn validation_serializes_with_the_documented_names() {
        let v = check("stories/a", json!({"colour": 1}), AC, &[]);
        let j = serde_json::to_value(&v).unwrap();
        assert_eq!(j["docid"], "stories/a");
        assert_eq!(j["model"], "Story");
        assert_eq!(j["valid"], false);
        assert_eq!(
            j["errors"][0],
            json!({"path": "meta.status", "message": "required"})
        );
        assert_eq!(j["warnings"][0]["path"], "meta.colour");
    }

    #[test]
    fn doc_sections_come_from_split_markdown() {
        let md = crate::text::markdown::split_sections("# T\n\n## AC\n- x\n");
        let ds: Vec<DocSection<'_>> = md.iter().map(DocSection::from).collect();
        assert_eq!(ds[1].level, 2);
        assert_eq!(ds[1].heading, "AC");
        assert!(ds[1].text.contains("- x"));
    }

    // ---- scaffold & introspection -------------------------------------------------------

    #[test]
    fn scaffold_merges_defaults_and_lists_headings() {
        let s = set();
        let (m, body) = scaffold(
            s.get("Story").unwrap(),
            "Login",
            &meta(json!({"points": 2})),
        );
        assert_eq!(Value::Object(m), json!({"status": "draft", "points": 2}));
        assert_eq!(body, "# Login\n\n## Acceptance Criteria\n\n## Notes\n\n");
        let (m, _) = scaffold(
            s.get("Story").unwrap(),
            "x",
            &meta(json!({"status": "done"})),
        );
        assert_eq!(m["status"], "done");
        let (m, body) = scaffold(s.get("Epic").unwrap(), "Auth", &Map::new());
        assert!(m.is_empty());
        assert_eq!(body, "# Auth\n\n## Stories\n\n");
        let (_, body) = scaffold(s.base(), " ", &Map::new());
        assert_eq!(body, "");
        // A hasMany heading that is also a declared section appears once.
        let d = ModelSet::from_toml(&one(
            "[[model.sections]]\nheading = \"Items\"\n[model.relationships.r]\ntype = \"hasMany\"\nmodel = \"M\"\nheading = \"items\"\n",
        ))
        .unwrap();
        let (_, body) = scaffold(d.get("M").unwrap(), "T", &Map::new());
        assert_eq!(body, "# T\n\n## Items\n\n");
    }

    #[test]
    fn schema_json_shape() {
        let s = set();
        let j = schema_json(&s, &|name| match name {
            "Story" => 4,
            "Epic" => 1,
            _ => 2,
        });
        assert_eq!(j["totalDocuments"], 7);
        let models = j["models"].as_array().unwrap();
        assert_eq!(models.len(), 3);
        let story = &models[0];
        assert_eq!(story["name"], "Story");
        assert_eq!(story["prefix"], "stories/");
        assert!(story.get("pattern").is_none());
        assert_eq!(story["description"], "A user story");
        assert_eq!(story["documentCount"], 4);
        assert_eq!(
            story["meta"][0],
            json!({"name": "status", "type": "enum", "values": ["draft", "ready", "done"], "required": true, "default": "draft", "description": "Workflow state"})
        );
        assert_eq!(
            story["meta"][1],
            json!({"name": "points", "type": "number", "required": false})
        );
        assert_eq!(story["meta"][3]["items"], "string");
        assert_eq!(
            story["sections"][0],
            json!({"heading": "Acceptance Criteria", "alternatives": ["Criteria", "AC"], "required": true})
        );
        assert_eq!(
            story["relationships"],
            json!({"epic": {"type": "belongsTo", "target": "Epic", "field": "epic"}})
        );
        assert_eq!(story["defaults"], json!({"status": "draft"}));
        assert_eq!(models[1]["pattern"], "epics/*");
        assert_eq!(
            models[1]["relationships"]["stories"],
            json!({"type": "hasMany", "target": "Story", "heading": "Stories"})
        );
        assert_eq!(models[2]["name"], "Base");
        assert_eq!(models[2]["meta"], json!([]));
    }

    #[test]
    fn summary_lists_every_model_field_section_and_relationship() {
        let s = set();
        let md = summary_markdown(&s);
        for m in s.all() {
            assert!(md.contains(&format!("## {}\n", m.name)), "{md}");
            for f in &m.fields {
                assert!(
                    md.contains(&format!("| `{}` |", f.name)),
                    "{}: {md}",
                    f.name
                );
            }
            for sec in &m.sections {
                assert!(md.contains(&format!("**{}**", sec.heading)), "{md}");
            }
            for r in &m.relationships {
                assert!(md.contains(&format!("`{}`: {}", r.name, r.kind)), "{md}");
            }
        }
        assert!(
            md.contains(
                "| `status` | enum (draft, ready, done) | yes | `\"draft\"` | Workflow state |"
            ),
            "{md}"
        );
        assert!(md.contains("| `labels` | array of string | no |"), "{md}");
        assert!(
            md.contains("Documents: docids starting with `stories/`."),
            "{md}"
        );
        assert!(md.contains("Documents: docids matching `epics/*`."), "{md}");
        assert!(md.contains("also accepted: Criteria, AC"), "{md}");
        assert!(md.ends_with("(any metadata is accepted).\n"), "{md}");
        assert!(!md.contains("Documents: any document"), "{md}");
        let piped = ModelSet::from_toml(&one(
            "[model.fields.x]\ntype = \"string\"\ndescription = \"a | b\"\n",
        ))
        .unwrap();
        assert!(summary_markdown(&piped).contains("| a \\| b |"));
    }

    #[test]
    fn create_prompt_text() {
        let s = set();
        let p = create_prompt(s.get("Story").unwrap(), "Login");
        assert!(
            p.starts_with("You are creating a new Story document titled \"Login\".\n"),
            "{p}"
        );
        assert!(p.contains("stories/login"), "{p}");
        assert!(p.contains("## Required Frontmatter\n\n- `status`: enum (draft, ready, done), default `\"draft\"` — Workflow state\n"), "{p}");
        assert!(
            p.contains("## Optional Frontmatter\n\n- `points`: number\n"),
            "{p}"
        );
        assert!(p.contains("## Sections to Include\n\n- ## Acceptance Criteria (required)\n- ## Notes (optional)\n"), "{p}");
        assert!(p.contains("`epic` metadata field"), "{p}");
        assert!(
            p.ends_with(
                "Please draft the document content, then create it with the create_document tool.\n"
            ),
            "{p}"
        );
        let p = create_prompt(s.get("Epic").unwrap(), "Auth");
        assert!(p.contains("- ## Stories (optional)"), "{p}");
        assert!(p.contains("`- [[docid]]`"), "{p}");
        let p = create_prompt(s.base(), "Anything");
        assert!(p.contains("## Required Frontmatter\n\nNone.\n"), "{p}");
        let only = ModelSet::from_toml("[[model]]\nname = \"Memo\"\n").unwrap();
        let p = create_prompt(only.get("memo").unwrap(), "M");
        assert!(p.contains("`_model: Memo`"), "{p}");
    }

    #[test]
    fn query_guide_text() {
        let g = query_guide(&set());
        for (op, _, _) in QUERY_OPERATORS {
            assert!(g.contains(&format!("`{op}`")), "{op}");
        }
        assert!(
            g.contains("### Story (docids starting with `stories/`)"),
            "{g}"
        );
        assert!(
            g.contains("- `status`: enum (draft, ready, done), required, default `\"draft\"`"),
            "{g}"
        );
        assert!(
            g.contains("- `epic`: docid of the Epic it belongs to (belongsTo `epic`)"),
            "{g}"
        );
        assert!(
            g.contains(r#"{"where": {"status": "draft", "points": {"$gte": 3, "$lt": 8}, "due": {"$exists": true}}}"#),
            "{g}"
        );
        assert!(
            g.contains(r#"{"where": [{"path": "status", "operator": "eq", "value": "draft"}, {"path": "points", "operator": "$gte", "value": 3}, {"path": "due", "operator": "notExists"}]}"#),
            "{g}"
        );
        assert!(
            g.contains(r#"`{"title": {"$regex": "^(Log\|Sign)"}}`"#),
            "{g}"
        );
        let bare = query_guide(&ModelSet::new());
        assert!(
            bare.contains(r#"{"where": {"status": "done", "priority": {"$gte": 3"#),
            "{bare}"
        );
    }
}
