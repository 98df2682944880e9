//! The models file in TOML: read ([`ModelSet::from_toml`]: the raw file as serde reads it, then
//! each model and field checked and built, with errors that name the model, the key and the
//! rule) and written back ([`ModelSet::to_toml`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Deserialize;

use super::BASE_MODEL;
use crate::text::values::{json_to_toml, toml_to_json};

use super::definitions::{
    FieldDef, FieldType, ModelDef, ModelError, ModelSet, RelKind, RelationshipDef, SectionDef,
};
use super::docid_glob::Glob;
use super::validation::{check_field_value, quote};

impl ModelSet {
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
        let mut set = ModelSet::default();
        set.models = models;
        Ok(set)
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
            kv_opt(&mut out, "description", m.description.as_deref());
            kv_opt(&mut out, "prefix", m.prefix.as_deref());
            kv_opt(&mut out, "pattern", m.pattern.as_deref());
            for f in &m.fields {
                let _ = writeln!(out, "\n[model.fields.{}]", toml_key(&f.name));
                kv(&mut out, "type", &tstr(f.field_type.as_str()));
                if let Some(t) = f.items {
                    kv(&mut out, "items", &tstr(t.as_str()));
                }
                if !f.values.is_empty() {
                    kv(&mut out, "values", &tlist(&f.values));
                }
                // Defaults come from TOML, so they always convert; one that does not (built
                // in code with a null or an integer beyond i64) is left out, never replaced.
                if let Some(d) = f
                    .default
                    .as_ref()
                    .and_then(|d| json_to_toml(d, 1, "default").ok())
                {
                    kv(&mut out, "default", &d.to_string());
                }
                if f.required {
                    kv(&mut out, "required", "true");
                }
                kv_opt(&mut out, "description", f.description.as_deref());
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
                kv_opt(&mut out, "description", s.description.as_deref());
            }
            for r in &m.relationships {
                let _ = writeln!(out, "\n[model.relationships.{}]", toml_key(&r.name));
                kv(&mut out, "type", &tstr(r.kind.as_str()));
                kv(&mut out, "model", &tstr(&r.model));
                kv_opt(&mut out, "field", r.field.as_deref());
                kv_opt(&mut out, "heading", r.heading.as_deref());
                kv_opt(&mut out, "description", r.description.as_deref());
            }
        }
        out
    }
}

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
        let value = toml_to_json(d.clone(), 1, "default").map_err(|e| {
            let rest = e.path().strip_prefix("default").unwrap_or_default();
            (format!("{}{rest}", key("default")), e.to_string())
        })?;
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

fn kv(out: &mut String, key: &str, value: &str) {
    let _ = writeln!(out, "{key} = {value}");
}

/// `key = "value"` when there is a value.
fn kv_opt(out: &mut String, key: &str, value: Option<&str>) {
    if let Some(v) = value {
        kv(out, key, &tstr(v));
    }
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
