//! Validation: where a document departs from its model (missing or mistyped fields, missing
//! sections, broken relationships).

use std::fmt;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::text::markdown::MdSection;

use super::MODEL_KEY;
use super::definitions::{FieldDef, FieldType, ModelSet, RelKind};
use super::relationships::related_with;

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
pub(super) fn check_field_value(f: &FieldDef, v: &Value, path: &str, out: &mut Vec<Issue>) {
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

pub(super) fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

pub(super) fn norm_heading(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}
