//! `kbdb models`, `kbdb query`, `kbdb validate`, `kbdb doc`: collections from the terminal.
//! Each builds the method's parameters, calls it, and prints JSON or a short text.

use kbdb::KbError;
use kbdb::daemon::operations::op;
use kbdb::daemon::params::{
    CreateDocument, DeleteDocumentParams, DocidParam, ModelsLoadParams, NoParams,
    UpdateDocumentParams, UpdateSectionParams, ValidateParams,
};
use serde_json::{Map, Value, json};

use super::args::{DocAction, Format, ModelsAction, QueryArgs};
use super::backend::Backend;
use super::output::{EXIT_CHECK_FAILED, EXIT_OK, print_json, print_text};

fn parse_json(field: &str, text: &str) -> Result<Value, KbError> {
    serde_json::from_str(text)
        .map_err(|e| KbError::invalid(field, format!("is not valid JSON: {e}")))
}

/// A JSON object argument (`--meta`).
fn parse_object(field: &str, text: &str) -> Result<Map<String, Value>, KbError> {
    match parse_json(field, text)? {
        Value::Object(o) => Ok(o),
        _ => Err(KbError::invalid(
            field,
            "must be a JSON object, e.g. '{\"status\": \"ready\"}'",
        )),
    }
}

fn body(
    content: Option<String>,
    file: Option<std::path::PathBuf>,
) -> Result<Option<String>, KbError> {
    match (content, file) {
        (Some(c), _) => Ok(Some(c)),
        (None, Some(f)) => std::fs::read_to_string(&f)
            .map(Some)
            .map_err(|e| KbError::io(format!("cannot read {}", f.display()), e)),
        (None, None) => Ok(None),
    }
}

pub fn models(kb: &Backend, format: Format, action: ModelsAction) -> Result<i32, KbError> {
    match action {
        ModelsAction::Load { file } => {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| KbError::io(format!("cannot read {}", file.display()), e))?;
            let r = kb.run(op::MODELS_LOAD, &ModelsLoadParams { toml: text })?;
            match format {
                Format::Json => print_json(&r, true),
                Format::Text => {
                    let mut out = String::from("models loaded:\n");
                    for m in r["models"].as_array().into_iter().flatten() {
                        out.push_str(&format!(
                            "  {:<16} {} document(s)\n",
                            m["name"].as_str().unwrap_or(""),
                            m["documents"]
                        ));
                    }
                    print_text(out.trim_end());
                }
            }
        }
        ModelsAction::Show => {
            let r = kb.run(op::MODELS_SHOW, &NoParams {})?;
            match format {
                Format::Json => print_json(&r, true),
                Format::Text => print_text(
                    r["toml"]
                        .as_str()
                        .unwrap_or("# no models loaded: every document is of the Base model"),
                ),
            }
        }
    }
    Ok(EXIT_OK)
}

pub fn query(kb: &Backend, format: Format, a: QueryArgs) -> Result<i32, KbError> {
    let mut q = match &a.json {
        Some(j) => parse_json("json", j)?,
        None => json!({}),
    };
    if !q.is_object() {
        return Err(KbError::invalid("json", "must be a JSON object"));
    }
    if let Some(m) = a.model {
        q["model"] = json!(m);
    }
    if let Some(w) = &a.where_ {
        q["where"] = parse_json("where", w)?;
    }
    if !a.sort.is_empty() {
        q["sort"] = json!(a.sort);
    }
    if let Some(l) = a.limit {
        q["limit"] = json!(l);
    }
    if let Some(o) = a.offset {
        q["offset"] = json!(o);
    }
    if let Some(m) = a.method {
        q["method"] = json!(m);
    }
    if let Some(s) = &a.select {
        q["select"] = parse_json("select", s)?;
    }
    let r = kb.run(op::QUERY, &q)?;
    if format == Format::Json {
        print_json(&r, true);
        return Ok(EXIT_OK);
    }
    let line = |d: &Value| {
        format!(
            "{}  {}  [{}]",
            d["id"].as_str().unwrap_or(""),
            d["title"].as_str().unwrap_or("(untitled)"),
            d["model"].as_str().unwrap_or("")
        )
    };
    let text = if let Some(n) = r.get("count") {
        format!("{n} document(s)")
    } else if let Some(one) = r.get("result") {
        if one.is_null() {
            "no document matches".to_string()
        } else {
            line(one)
        }
    } else {
        let items: Vec<String> = r["results"]
            .as_array()
            .into_iter()
            .flatten()
            .map(line)
            .collect();
        format!(
            "{}\n{} of {} matching",
            items.join("\n"),
            items.len(),
            r["total"]
        )
    };
    print_text(text.trim());
    Ok(EXIT_OK)
}

fn validation_text(v: &Value) -> String {
    let mut out = format!(
        "{} {} ({})",
        if v["valid"] == json!(true) {
            "ok     "
        } else {
            "INVALID"
        },
        v["docid"].as_str().unwrap_or(""),
        v["model"].as_str().unwrap_or("")
    );
    for e in v["errors"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "\n  error   {}: {}",
            e["path"].as_str().unwrap_or(""),
            e["message"].as_str().unwrap_or("")
        ));
    }
    for w in v["warnings"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "\n  warning {}: {}",
            w["path"].as_str().unwrap_or(""),
            w["message"].as_str().unwrap_or("")
        ));
    }
    out
}

pub fn validate(kb: &Backend, format: Format, target: Option<String>) -> Result<i32, KbError> {
    let r = kb.run(
        op::VALIDATE,
        &ValidateParams {
            target,
            path_id: None,
        },
    )?;
    let all_valid = match r.get("results") {
        Some(list) => r["invalid"] == json!(0) && list.is_array(),
        None => r["valid"] == json!(true),
    };
    match format {
        Format::Json => print_json(&r, true),
        Format::Text => {
            let text = match r.get("results") {
                Some(list) => {
                    let mut parts: Vec<String> = list
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(validation_text)
                        .collect();
                    parts.push(format!(
                        "{} checked, {} valid, {} invalid",
                        r["checked"], r["valid"], r["invalid"]
                    ));
                    parts.join("\n")
                }
                None => validation_text(&r),
            };
            print_text(&text);
        }
    }
    Ok(if all_valid {
        EXIT_OK
    } else {
        EXIT_CHECK_FAILED
    })
}

pub fn doc(kb: &Backend, format: Format, action: DocAction) -> Result<i32, KbError> {
    let r = match action {
        DocAction::Create {
            model,
            title,
            meta,
            content,
            file,
            docid,
        } => {
            let p = CreateDocument {
                model,
                title,
                meta: meta
                    .map(|m| parse_object("meta", &m))
                    .transpose()?
                    .unwrap_or_default(),
                content: body(content, file)?,
                docid,
            };
            kb.run(op::CREATE_DOCUMENT, &p)?
        }
        DocAction::Update {
            docid,
            meta,
            content,
            file,
            title,
        } => {
            let p = UpdateDocumentParams {
                docid,
                meta: meta.map(|m| parse_object("meta", &m)).transpose()?,
                content: body(content, file)?,
                title,
            };
            kb.run(op::UPDATE_DOCUMENT, &p)?
        }
        DocAction::Section {
            docid,
            heading,
            action,
            content,
            file,
            occurrence,
        } => {
            let p = UpdateSectionParams {
                docid,
                heading,
                action,
                content: body(content, file)?,
                occurrence,
            };
            kb.run(op::UPDATE_SECTION, &p)?
        }
        DocAction::Show { docid } => {
            let r = kb.run(op::DOCUMENT_JSON, &DocidParam { docid })?;
            match format {
                Format::Json => print_json(&r, true),
                Format::Text => print_text(&format!(
                    "{} ({})\nmeta: {}\n\n{}",
                    r["id"].as_str().unwrap_or(""),
                    r["model"].as_str().unwrap_or(""),
                    r["meta"],
                    r["content"].as_str().unwrap_or("").trim_end()
                )),
            }
            return Ok(EXIT_OK);
        }
        DocAction::Delete { docid } => {
            kb.run(op::DELETE_DOCUMENT, &DeleteDocumentParams { docid })?
        }
    };
    match format {
        Format::Json => print_json(&r, true),
        Format::Text => {
            let mut out = format!(
                "{} {}{}",
                r["action"].as_str().unwrap_or(""),
                r["docid"].as_str().unwrap_or(""),
                if r["changed"] == json!(false) {
                    " (nothing changed)"
                } else {
                    ""
                }
            );
            if let Some(f) = r["file"].as_str() {
                // A synced document: the edit went to its file too (docs/sync.md).
                out.push_str(&format!("\nfile: {f}"));
            }
            if let Some(v) = r.get("validation") {
                out.push('\n');
                out.push_str(&validation_text(v));
            }
            print_text(&out);
        }
    }
    Ok(EXIT_OK)
}
