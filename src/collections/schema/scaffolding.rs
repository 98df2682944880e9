//! Scaffolding: the metadata and body of a new document of a model.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::definitions::ModelDef;
use super::validation::norm_heading;

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
pub(super) fn scaffold_headings(model: &ModelDef) -> Vec<&str> {
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
