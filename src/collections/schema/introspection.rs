//! Introspection: the models described for agents (JSON schema, markdown summary, the
//! prompt to create a document, the query guide).

use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use crate::text::markers;

use super::definitions::{FieldDef, FieldType, ModelDef, ModelSet, RelKind};
use super::scaffolding::scaffold_headings;
use super::validation::quote;
use super::{BASE_MODEL, MODEL_KEY};

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
