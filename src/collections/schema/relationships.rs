//! Relationships: the documents a document points to through its model's relationships (a
//! field, or the links of a section).

use serde::Serialize;
use serde_json::Value;

use crate::text::markers::{self, Target};

use super::definitions::{ModelDef, ModelSet, RelKind, SectionDef};
use super::validation::{DocInput, DocSection};

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

pub(super) fn related_with(
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
    crate::types::validate::docid(docid)
        .ok()
        .map(|d| d.into_owned())
}
