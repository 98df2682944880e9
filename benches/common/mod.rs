//! Corpus readers shared by the benches (`mod common;`): the section dump of the shared bench
//! kit's `sections.py` (or an eval set's `docs.jsonl`), latency query sets, and the
//! `LearnRequest` a section is learned with, and the benches' numeric arguments.

// Each bench uses a part of this module.
#![allow(dead_code)]

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;

use kbdb::LearnRequest;
use serde::Deserialize;
use serde_json::Value;

pub type BoxError = Box<dyn std::error::Error>;

/// The number after `name` on the bench's command line, or `default`.
pub fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One section as dumped by `sections.py` (or a line of an eval set's `docs.jsonl`).
#[derive(Deserialize)]
pub struct SectionLine {
    pub id: String,
    #[serde(default)]
    pub doc: Option<String>,
    #[serde(default)]
    pub level: Option<u32>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub body: Option<String>,
}

pub struct Section {
    pub id: String,
    pub doc: String,
    pub title: String,
    pub text: String,
}

/// Section text per the section rule: heading line + body (a level-0 preamble is its body).
pub fn section_text(level: Option<u32>, title: &str, body: &str) -> String {
    let level = level.unwrap_or(if title.is_empty() { 0 } else { 1 }) as usize;
    if level == 0 {
        return if body.is_empty() {
            "#".to_string() // an untitled heading-only section of an eval set without levels
        } else {
            body.to_string()
        };
    }
    let mut s = "#".repeat(level.min(6));
    if !title.is_empty() {
        s.push(' ');
        s.push_str(title);
    }
    if !body.is_empty() {
        s.push_str("\n\n");
        s.push_str(body);
    }
    s
}

/// Every section of `path`, in file order.
pub fn read_sections(path: &Path) -> Result<Vec<Section>, BoxError> {
    let f = fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in BufReader::new(f).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let s: SectionLine = serde_json::from_str(&line)
            .map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))?;
        let title = s.title.unwrap_or_default();
        let body = s.body.unwrap_or_default();
        let doc = s.doc.unwrap_or_else(|| {
            s.id.rsplit_once('#')
                .map_or(s.id.as_str(), |(d, _)| d)
                .to_string()
        });
        out.push(Section {
            text: section_text(s.level, &title, &body),
            id: s.id,
            doc,
            title,
        });
    }
    Ok(out)
}

/// One latency query: a JSON line `{"id","text","src"}` or a plain text line.
pub struct Query {
    pub id: String,
    pub text: String,
    pub src: Option<String>,
}

pub fn read_queries(path: &Path) -> Result<Vec<Query>, BoxError> {
    let f = fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in BufReader::new(f).lines().enumerate() {
        let line = line?;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line.starts_with('{') {
            let v: Value = serde_json::from_str(line)
                .map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))?;
            let text = v["text"]
                .as_str()
                .ok_or_else(|| format!("{}:{}: no \"text\"", path.display(), i + 1))?;
            out.push(Query {
                id: v["id"]
                    .as_str()
                    .map_or_else(|| i.to_string(), str::to_string),
                text: text.to_string(),
                src: v["src"].as_str().map(str::to_string),
            });
        } else {
            out.push(Query {
                id: i.to_string(),
                text: line.to_string(),
                src: None,
            });
        }
    }
    Ok(out)
}

/// The request a section is learned with: its text, title (if any) and document id.
pub fn request(s: &Section) -> LearnRequest {
    LearnRequest {
        content: s.text.clone(),
        title: (!s.title.is_empty()).then(|| s.title.clone()),
        docid: Some(s.doc.clone()),
        ..Default::default()
    }
}
