//! Writing front matter anew: YAML (block style, or flow when block style cannot hold a
//! string) and TOML (plain keys first, trailing tables as sections), checked by reading back.

use serde_json::{Map, Value};

use super::parse::{ordered_keys, split};
use super::{FrontMatterError, Syntax};
use crate::text::values::{json_to_toml, json_to_yaml};

/// Write front matter: the block with its fences and a trailing newline. The top-level keys
/// come in `key_order` (the keys still present), then the remaining keys in the map's order.
/// The result always reads back ([`split`]) to the same map and key order, or this fails.
pub fn render(
    syntax: Syntax,
    meta: &Map<String, Value>,
    key_order: &[String],
) -> Result<String, FrontMatterError> {
    let order = ordered_keys(meta, key_order);
    match syntax {
        Syntax::Yaml => {
            let text = render_yaml(meta, &order)?;
            // Raw U+0085/U+2028/U+2029 are line breaks to YAML but not to other tools.
            let checked = if text.contains(['\u{85}', '\u{2028}', '\u{2029}']) {
                Err(FrontMatterError::Render {
                    syntax,
                    message: "raw line separators".into(),
                })
            } else {
                verify(syntax, &text, meta, &order)
            };
            match checked {
                Ok(()) => Ok(text),
                Err(e @ (FrontMatterError::TooLarge { .. } | FrontMatterError::TooDeep { .. })) => {
                    Err(e)
                }
                Err(_) => {
                    // Some characters (U+2028 and kin) do not survive YAML's block styles: fall
                    // back to JSON-like flow values with escaped strings.
                    let text = render_yaml_flow(meta, &order)?;
                    verify(syntax, &text, meta, &order)?;
                    Ok(text)
                }
            }
        }
        Syntax::Toml => {
            let entries = toml_entries(meta, &order)?;
            let text = render_toml(&entries)?;
            match verify(syntax, &text, meta, &order) {
                Ok(()) => Ok(text),
                Err(e @ (FrontMatterError::TooLarge { .. } | FrontMatterError::TooDeep { .. })) => {
                    Err(e)
                }
                Err(_) => {
                    // A multi-line string holding a `+++` line would close the block early:
                    // fall back to single-line values throughout.
                    let text = render_toml_inline(&entries);
                    verify(syntax, &text, meta, &order)?;
                    Ok(text)
                }
            }
        }
    }
}

fn verify(
    syntax: Syntax,
    text: &str,
    meta: &Map<String, Value>,
    order: &[&str],
) -> Result<(), FrontMatterError> {
    let failed = |message: String| FrontMatterError::Render { syntax, message };
    match split(text) {
        Ok((Some(fm), "")) if fm.syntax == syntax => {
            if fm.meta != *meta {
                return Err(failed(
                    "the written text does not read back to the same values".into(),
                ));
            }
            if fm
                .key_order
                .iter()
                .map(String::as_str)
                .ne(order.iter().copied())
            {
                return Err(failed(
                    "the written text does not keep the key order".into(),
                ));
            }
            Ok(())
        }
        Ok(_) => Err(failed(
            "the written text does not read back as one block".into(),
        )),
        Err(e @ (FrontMatterError::TooLarge { .. } | FrontMatterError::TooDeep { .. })) => Err(e),
        Err(e) => Err(failed(format!("the written text does not read back ({e})"))),
    }
}

fn render_yaml(meta: &Map<String, Value>, order: &[&str]) -> Result<String, FrontMatterError> {
    let mut out = String::from("---\n");
    for &k in order {
        // Checks the depth and the numbers first.
        json_to_yaml(&meta[k], 2, k)?;
        yaml_entry(k, &meta[k], 0, &mut out)?;
    }
    out.push_str("---\n");
    Ok(out)
}

/// `key: value` at `indent` spaces, nested mappings and sequences in block style.
pub(super) fn yaml_entry(
    key: &str,
    v: &Value,
    indent: usize,
    out: &mut String,
) -> Result<(), FrontMatterError> {
    out.push_str(&" ".repeat(indent));
    yaml_key(key, out);
    out.push(':');
    yaml_value_after(v, indent, out)
}

/// A value after `key:` or `- `: nested collections on the next lines, scalars on this one.
fn yaml_value_after(v: &Value, indent: usize, out: &mut String) -> Result<(), FrontMatterError> {
    match v {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            for (k, item) in m {
                yaml_entry(k, item, indent + 2, out)?;
            }
        }
        // A sequence under a key sits at the key's own indentation (`tags:\n- a`).
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            for item in items {
                yaml_item(item, indent, out)?;
            }
        }
        _ => {
            out.push(' ');
            yaml_inline(v, indent, out)?;
            out.push('\n');
        }
    }
    Ok(())
}

/// `- item` at `indent` spaces; a mapping or sequence item starts on the dash's line.
fn yaml_item(v: &Value, indent: usize, out: &mut String) -> Result<(), FrontMatterError> {
    out.push_str(&" ".repeat(indent));
    out.push('-');
    match v {
        Value::Object(m) if !m.is_empty() => {
            let mut inner = String::new();
            for (k, item) in m {
                yaml_entry(k, item, indent + 2, &mut inner)?;
            }
            out.push(' ');
            out.push_str(&inner[indent + 2..]);
        }
        Value::Array(items) if !items.is_empty() => {
            let mut inner = String::new();
            for item in items {
                yaml_item(item, indent + 2, &mut inner)?;
            }
            out.push(' ');
            out.push_str(&inner[indent + 2..]);
        }
        _ => {
            out.push(' ');
            yaml_inline(v, indent, out)?;
            out.push('\n');
        }
    }
    Ok(())
}

/// A scalar (or an empty collection) written on the current line.
fn yaml_inline(v: &Value, indent: usize, out: &mut String) -> Result<(), FrontMatterError> {
    match v {
        Value::String(s) => yaml_scalar_string(s, indent, out),
        Value::Array(_) => out.push_str("[]"),
        Value::Object(_) => out.push_str("{}"),
        scalar => yaml_flow(scalar, out)?,
    }
    Ok(())
}

/// A character YAML takes as printable and no reader takes as a line break.
pub(super) fn yaml_printable(c: char) -> bool {
    matches!(c, '\t' | ' '..='~' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fefe}' | '\u{ff00}'..='\u{fffd}')
        || c >= '\u{10000}'
}

/// Whether `s` may be written as a plain (unquoted) scalar and read back as this very string
/// by every YAML reader — YAML 1.2 and 1.1 (PyYAML, js-yaml), which read `yes`, `on`, `~`,
/// `2024-01-31`, `0x1F`, `1_000` or `12:30` as booleans, nulls, dates and numbers. Strings
/// that start like a number, or are one of those words, are quoted, as is anything with an
/// indicator character where YAML would read one.
fn yaml_plain_ok(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    if s.trim() != s || !s.chars().all(|c| yaml_printable(c) && c != '\t') {
        return false;
    }
    if "-?:,[]{}#&*!|>'\"%@`+.=<~".contains(first) || first.is_ascii_digit() {
        return false;
    }
    if s.contains(": ") || s.contains(" #") || s.ends_with(':') {
        return false;
    }
    const WORDS: &[&str] = &[
        "y", "yes", "n", "no", "true", "false", "on", "off", "null", "nan", "inf",
    ];
    !WORDS.contains(&s.to_ascii_lowercase().as_str())
}

/// A mapping key: plain when that is safe, else quoted on one line (never a block scalar).
pub(super) fn yaml_key(s: &str, out: &mut String) {
    if s.contains('\n') {
        yaml_quoted(s, out);
    } else {
        yaml_scalar_string(s, 0, out);
    }
}

/// A string as a scalar: plain when that is safe, a literal block (`|`) for printable
/// multi-line text, single-quoted when no escape is needed, else double-quoted with escapes.
fn yaml_scalar_string(s: &str, indent: usize, out: &mut String) {
    if yaml_plain_ok(s) {
        out.push_str(s);
    } else if s.contains('\n') && s.chars().all(|c| c == '\n' || yaml_printable(c)) {
        let trailing = s.len() - s.trim_end_matches('\n').len();
        out.push('|');
        let first_text = s.split('\n').find(|l| !l.is_empty()).unwrap_or("");
        if first_text.starts_with(' ') {
            out.push('2');
        }
        out.push_str(match trailing {
            0 => "-",
            1 => "",
            _ => "+",
        });
        let pad = " ".repeat(indent + 2);
        let text = &s[..s.len() - trailing.min(1)];
        for line in text.split('\n') {
            out.push('\n');
            if !line.is_empty() {
                out.push_str(&pad);
                out.push_str(line);
            }
        }
    } else if s.chars().all(|c| yaml_printable(c) && c != '\t') {
        out.push('\'');
        out.push_str(&s.replace('\'', "''"));
        out.push('\'');
    } else {
        yaml_quoted(s, out);
    }
}

/// The fallback: one `"key": value` line per top-level key, values in flow style, strings
/// double-quoted with everything outside YAML's printable set (and line-break-like characters)
/// escaped.
fn render_yaml_flow(meta: &Map<String, Value>, order: &[&str]) -> Result<String, FrontMatterError> {
    let mut out = String::from("---\n");
    for &k in order {
        yaml_quoted(k, &mut out);
        out.push_str(": ");
        yaml_flow(&meta[k], &mut out)?;
        out.push('\n');
    }
    out.push_str("---\n");
    Ok(out)
}

pub(super) fn yaml_flow(v: &Value, out: &mut String) -> Result<(), FrontMatterError> {
    match v {
        Value::String(s) => yaml_quoted(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                yaml_flow(item, out)?;
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, item)) in m.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                yaml_quoted(k, out);
                out.push_str(": ");
                yaml_flow(item, out)?;
            }
            out.push('}');
        }
        scalar => {
            let y = json_to_yaml(scalar, 1, "")?;
            let text = yaml_serde::to_string(&y).map_err(|e| FrontMatterError::Render {
                syntax: Syntax::Yaml,
                message: e.to_string(),
            })?;
            out.push_str(text.trim_end());
        }
    }
    Ok(())
}

pub(super) fn yaml_quoted(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04X}", c as u32)),
            ' '..='~' => out.push(c),
            '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fefe}' | '\u{ff00}'..='\u{fffd}' => {
                out.push(c)
            }
            c if c >= '\u{10000}' => out.push(c),
            c => out.push_str(&format!("\\u{:04X}", c as u32)),
        }
    }
    out.push('"');
}

fn toml_entries(
    meta: &Map<String, Value>,
    order: &[&str],
) -> Result<Vec<(String, toml::Value)>, FrontMatterError> {
    order
        .iter()
        .map(|&k| Ok((k.to_string(), json_to_toml(&meta[k], 2, k)?)))
        .collect()
}

/// A value TOML writes as a `[table]` or `[[array of tables]]` section.
fn is_section(v: &toml::Value) -> bool {
    match v {
        toml::Value::Table(_) => true,
        toml::Value::Array(items) => {
            !items.is_empty() && items.iter().all(|x| matches!(x, toml::Value::Table(_)))
        }
        _ => false,
    }
}

/// Keys before the last plain value are written `key = value` (tables inline), since a
/// `[section]` would swallow the keys after it; the trailing tables are written as sections.
fn render_toml(entries: &[(String, toml::Value)]) -> Result<String, FrontMatterError> {
    let failed = |e: toml::ser::Error| FrontMatterError::Render {
        syntax: Syntax::Toml,
        message: e.to_string(),
    };
    let first_section = entries
        .iter()
        .rposition(|(_, v)| !is_section(v))
        .map_or(0, |i| i + 1);
    let mut out = String::from("+++\n");
    for (k, v) in &entries[..first_section] {
        out.push_str(&toml_key(k));
        out.push_str(" = ");
        let mut value = String::new();
        serde::Serialize::serialize(v, toml::ser::ValueSerializer::new(&mut value))
            .map_err(failed)?;
        out.push_str(&value);
        out.push('\n');
    }
    for (k, v) in &entries[first_section..] {
        let mut single = toml::Table::new();
        single.insert(k.clone(), v.clone());
        let chunk = toml::to_string(&single).map_err(failed)?;
        if out.len() > "+++\n".len() {
            out.push('\n');
        }
        out.push_str(&chunk);
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    out.push_str("+++\n");
    Ok(out)
}

/// The fallback: every value on one line, strings as escaped basic strings.
fn render_toml_inline(entries: &[(String, toml::Value)]) -> String {
    let mut out = String::from("+++\n");
    for (k, v) in entries {
        out.push_str(&toml_key(k));
        out.push_str(" = ");
        toml_inline(v, &mut out);
        out.push('\n');
    }
    out.push_str("+++\n");
    out
}

pub(super) fn toml_inline(v: &toml::Value, out: &mut String) {
    match v {
        toml::Value::String(s) => out.push_str(&toml_basic_string(s)),
        toml::Value::Integer(i) => out.push_str(&i.to_string()),
        toml::Value::Float(f) => out.push_str(&format!("{f:?}")),
        toml::Value::Boolean(b) => out.push_str(if *b { "true" } else { "false" }),
        toml::Value::Datetime(d) => out.push_str(&d.to_string()),
        toml::Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                toml_inline(item, out);
            }
            out.push(']');
        }
        toml::Value::Table(t) => {
            if t.is_empty() {
                out.push_str("{}");
                return;
            }
            out.push_str("{ ");
            for (i, (k, item)) in t.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&toml_key(k));
                out.push_str(" = ");
                toml_inline(item, out);
            }
            out.push_str(" }");
        }
    }
}

pub(super) fn toml_key(k: &str) -> String {
    let bare = !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        k.to_string()
    } else {
        toml_basic_string(k)
    }
}

/// A single-line TOML basic string.
fn toml_basic_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04X}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
