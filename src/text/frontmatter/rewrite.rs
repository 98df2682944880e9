//! Editing front matter in place: only the lines of the keys that changed move.

use serde_json::{Map, Value};

use super::parse::{fence_of, parse_toml, parse_yaml, split};
use super::render::{
    render, toml_inline, toml_key, yaml_entry, yaml_flow, yaml_key, yaml_printable, yaml_quoted,
};
use super::{FrontMatter, FrontMatterError, Syntax};
use crate::text::values::{json_to_toml, json_to_yaml};

/// The front matter block `block` (fences included, as written, LF or CRLF line ends; it read
/// as `old`) rewritten for the metadata `meta`, touching only the lines of the keys that
/// changed: a key whose value is unchanged keeps its lines byte for byte, and so do comments,
/// blank lines, quoting and key order; a changed key's lines are replaced by the key written
/// anew (a flow `[…]`/`{…}` value stays in flow style, a quoted string keeps its quote kind);
/// a removed key's lines go; new keys come at the end of the block (in TOML, after the last
/// top-level key, before any `[table]`). When a block cannot be edited line by line — YAML
/// anchors or merge keys, a key kbdb cannot delimit — it is written anew as [`render`] does,
/// in its syntax and key order. Returns "" when no key and no comment is left.
pub fn rewrite(
    block: &str,
    old: &FrontMatter,
    meta: &Map<String, Value>,
) -> Result<String, FrontMatterError> {
    if let Some(text) = rewrite_lines(block, old, meta) {
        return Ok(text);
    }
    if meta.is_empty() {
        return Ok(String::new());
    }
    let text = render(old.syntax, meta, &old.key_order)?;
    Ok(if block.contains("\r\n") {
        text.replace('\n', "\r\n")
    } else {
        text
    })
}

/// The line-by-line rewrite, or None when the block cannot be edited so (checked: the result
/// must read back to `meta` with the old keys in their order, new keys last).
pub(super) fn rewrite_lines(
    block: &str,
    old: &FrontMatter,
    meta: &Map<String, Value>,
) -> Option<String> {
    let nl = if block.contains("\r\n") { "\r\n" } else { "\n" };
    // The block's lines with their line ends; the first and the last are the fences.
    let lines: Vec<&str> = block.split_inclusive('\n').collect();
    if lines.len() < 2
        || fence_of(lines[lines.len() - 1].trim_end_matches('\n')) != Some(old.syntax)
    {
        return None;
    }
    let content = &lines[1..lines.len() - 1];
    let (spans, tables) = match old.syntax {
        Syntax::Yaml => (yaml_spans(content)?, None),
        Syntax::Toml => toml_spans(content)?,
    };
    // TOML `[tables]` (from their first header line on) are kept as written; a change to one
    // writes the block anew.
    let (tables_at, table_keys) = tables.unwrap_or((content.len(), Vec::new()));
    if table_keys.iter().any(|k| meta.get(k) != old.meta.get(k))
        || spans.iter().any(|s| s.2 > tables_at)
    {
        return None;
    }
    // Every key is delimited, and each span alone reads as its key with its value.
    if spans.len() + table_keys.len() != old.meta.len() {
        return None;
    }
    for (key, a, b) in &spans {
        let alone: String = format!("\n{}", content[*a..*b].concat());
        let (m, _) = match old.syntax {
            Syntax::Yaml => parse_yaml(&alone).ok()?,
            Syntax::Toml => parse_toml(&alone).ok()?,
        };
        if m.len() != 1 || m.get(key) != old.meta.get(key) {
            return None;
        }
    }
    let new_key = |k: &str, v: &Value, like: Option<&str>| -> Option<String> {
        let text = match old.syntax {
            Syntax::Yaml => yaml_key_like(k, v, like)?,
            Syntax::Toml => toml_key_line(k, v)?,
        };
        Some(if nl == "\n" {
            text
        } else {
            text.replace('\n', nl)
        })
    };
    let mut out = String::with_capacity(block.len() + 64);
    out.push_str(lines[0]);
    let mut i = 0;
    // In TOML, new keys go after the last top-level key when a table follows.
    let new_keys_at = if tables_at < content.len() {
        spans.iter().map(|s| s.2).max().unwrap_or(tables_at)
    } else {
        content.len()
    };
    // The span starting at each line, if any.
    let mut starts: Vec<Option<usize>> = vec![None; content.len()];
    for (n, (_, a, _)) in spans.iter().enumerate() {
        starts[*a] = Some(n);
    }
    let mut appended = false;
    let append_new = |out: &mut String| -> Option<()> {
        if !out.ends_with('\n') {
            out.push_str(nl);
        }
        for (k, v) in meta.iter().filter(|(k, _)| !old.meta.contains_key(*k)) {
            out.push_str(&new_key(k, v, None)?);
        }
        Some(())
    };
    while i <= content.len() {
        if i == new_keys_at && !appended {
            append_new(&mut out)?;
            appended = true;
        }
        if i == content.len() {
            break;
        }
        match starts[i].map(|n| &spans[n]) {
            Some((key, a, b)) => {
                match meta.get(key) {
                    None => {}
                    Some(v) if Some(v) == old.meta.get(key) => {
                        out.push_str(&content[*a..*b].concat())
                    }
                    Some(v) => out.push_str(&new_key(key, v, Some(&content[*a..*b].concat()))?),
                }
                i = *b;
            }
            None => {
                out.push_str(content[i]);
                i += 1;
            }
        }
    }
    if !out.ends_with('\n') {
        out.push_str(nl);
    }
    out.push_str(lines[lines.len() - 1]);
    // Nothing left but blank lines: no front matter at all.
    if meta.is_empty()
        && out
            .split_inclusive('\n')
            .skip(1)
            .all(|l| fence_of(l.trim_end_matches('\n')).is_some() || l.trim().is_empty())
    {
        return Some(String::new());
    }
    // The order it must read back in: the keys kept, the new ones, then TOML's tables.
    let in_tables = |k: &str| table_keys.iter().any(|t| t == k);
    let mut order: Vec<&str> = old
        .key_order
        .iter()
        .map(String::as_str)
        .filter(|k| meta.contains_key(*k) && !in_tables(k))
        .collect();
    order.extend(
        meta.keys()
            .map(String::as_str)
            .filter(|k| !old.meta.contains_key(*k)),
    );
    order.extend(
        old.key_order
            .iter()
            .map(String::as_str)
            .filter(|k| in_tables(k)),
    );
    let check = format!("{out}{}", if out.ends_with('\n') { "" } else { "\n" });
    match split(&check) {
        Ok((Some(fm), ""))
            if fm.meta == *meta
                && fm
                    .key_order
                    .iter()
                    .map(String::as_str)
                    .eq(order.iter().copied()) =>
        {
            Some(out)
        }
        _ => None,
    }
}

/// The top-level keys of YAML front matter lines: (key, first line, end line). A key starts at
/// a line at column 0 that is not a comment; it runs over the indented lines (and `- ` items)
/// after it, blank lines between them included, trailing blank lines not.
fn yaml_spans(content: &[&str]) -> Option<Vec<(String, usize, usize)>> {
    let mut spans = Vec::new();
    let mut i = 0;
    let continues =
        |l: &str| l.starts_with([' ', '\t']) || l.trim_end() == "-" || l.starts_with("- ");
    while i < content.len() {
        let l = content[i];
        if l.trim().is_empty() || l.starts_with('#') {
            i += 1;
            continue;
        }
        if continues(l) || l.starts_with(['&', '*', '?', '!', '<', '%']) || l.trim_end() == "..." {
            return None;
        }
        let start = i;
        let mut last = i;
        i += 1;
        while i < content.len() {
            let l = content[i];
            if l.trim().is_empty() {
                i += 1;
            } else if continues(l) {
                last = i;
                i += 1;
            } else {
                break;
            }
        }
        i = last + 1;
        let alone = format!("\n{}", content[start..i].concat());
        let (m, _) = parse_yaml(&alone).ok()?;
        let key = m.keys().next()?.clone();
        if key == "<<" {
            return None;
        }
        spans.push((key, start, i));
    }
    Some(spans)
}

/// The top-level `key = value` entries of TOML front matter lines, from the parser's spans:
/// (key, first line, end line), the caller checks each entry alone; and, when there are
/// `[table]` sections, the line of the first header and the keys they define.
type TomlSpans = (Vec<(String, usize, usize)>, Option<(usize, Vec<String>)>);

fn toml_spans(content: &[&str]) -> Option<TomlSpans> {
    let src = content.concat();
    let doc = toml::de::DeTable::parse(&src).ok()?;
    let line_of = |at: usize| src[..at.min(src.len())].matches('\n').count();
    let mut spans = Vec::new();
    let mut tables: Option<(usize, Vec<String>)> = None;
    for (k, v) in doc.get_ref().iter() {
        let (ks, ve) = (k.span().start, v.span().end);
        let a = line_of(ks);
        if content.get(a)?.trim_start().starts_with('[') {
            let t = tables.get_or_insert((a, Vec::new()));
            t.0 = t.0.min(a);
            t.1.push(k.get_ref().to_string());
            continue;
        }
        if ve <= ks {
            return None;
        }
        spans.push((k.get_ref().to_string(), a, line_of(ve - 1) + 1));
    }
    spans.sort_by_key(|s| s.1);
    if spans.windows(2).any(|w| w[0].2 > w[1].1) {
        return None;
    }
    Some((spans, tables))
}

/// A YAML `key: value` written anew, in the style of the lines it replaces (`like`): a flow
/// collection stays flow, a quoted string keeps its kind of quotes.
fn yaml_key_like(key: &str, v: &Value, like: Option<&str>) -> Option<String> {
    let style = like
        .and_then(|l| l.split_once(':'))
        .map(|(_, rest)| rest.trim_start().chars().next())
        .unwrap_or(None);
    let single_line = like.is_some_and(|l| l.trim_end().lines().count() == 1);
    let mut out = String::new();
    match (style, v) {
        (Some('[' | '{'), Value::Array(_) | Value::Object(_)) if single_line => {
            yaml_key(key, &mut out);
            out.push_str(": ");
            yaml_flow(v, &mut out).ok()?;
            out.push('\n');
        }
        (Some('"'), Value::String(s)) if single_line => {
            yaml_key(key, &mut out);
            out.push_str(": ");
            yaml_quoted(s, &mut out);
            out.push('\n');
        }
        (Some('\''), Value::String(s))
            if single_line && s.chars().all(|c| yaml_printable(c) && c != '\t') =>
        {
            yaml_key(key, &mut out);
            out.push_str(": '");
            out.push_str(&s.replace('\'', "''"));
            out.push_str("'\n");
        }
        _ => {
            json_to_yaml(v, 2, key).ok()?;
            yaml_entry(key, v, 0, &mut out).ok()?;
        }
    }
    Some(out)
}

/// A TOML `key = value` line (tables inline, strings on one line).
fn toml_key_line(key: &str, v: &Value) -> Option<String> {
    let t = json_to_toml(v, 2, key).ok()?;
    let mut out = toml_key(key);
    out.push_str(" = ");
    toml_inline(&t, &mut out);
    out.push('\n');
    Some(out)
}
