//! Front matter at the top of a markdown document: YAML between `---` fences or TOML between
//! `+++` fences, read into a JSON object and written back with the top-level keys in order.
//!
//! The opening fence must be the very first line (after an optional byte-order mark); the
//! closing fence is the next line that is the same fence. Trailing spaces and tabs on a fence
//! line, and CRLF line ends, are tolerated. Front matter is at most [`MAX_BYTES`] long and
//! nests at most [`MAX_DEPTH`] levels (the top-level mapping is level 1).

use std::collections::HashSet;

use serde_json::{Map, Number, Value};

/// The largest front matter accepted (the text between the fences), in bytes: 64 KiB.
pub const MAX_BYTES: usize = 64 * 1024;
/// The deepest nesting accepted; the top-level mapping is level 1.
pub const MAX_DEPTH: usize = 32;

/// The syntax of a front matter block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syntax {
    /// YAML between `---` lines.
    Yaml,
    /// TOML between `+++` lines.
    Toml,
}

impl Syntax {
    /// The fence line of this syntax: `---` or `+++`.
    pub fn fence(self) -> &'static str {
        match self {
            Syntax::Yaml => "---",
            Syntax::Toml => "+++",
        }
    }
}

impl std::fmt::Display for Syntax {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Syntax::Yaml => "YAML",
            Syntax::Toml => "TOML",
        })
    }
}

/// Front matter read from a document.
#[derive(Debug, Clone, PartialEq)]
pub struct FrontMatter {
    pub syntax: Syntax,
    /// The mapping, as JSON. Nested objects follow `serde_json::Map`'s own order.
    pub meta: Map<String, Value>,
    /// The top-level keys in the order the file lists them.
    pub key_order: Vec<String>,
}

/// Why front matter could not be read or written. Every message starts with "front matter: ".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrontMatterError {
    #[error(
        "front matter: the opening `{fence}` on line 1 is never closed (no later line is `{fence}`)"
    )]
    Unclosed { fence: &'static str },

    #[error(
        "front matter: {size} bytes between the fences, more than the limit of {MAX_BYTES} bytes (64 KiB)"
    )]
    TooLarge { size: usize },

    #[error("front matter: nested more than {MAX_DEPTH} levels deep{}", at_path(.path))]
    TooDeep { path: Option<String> },

    #[error(
        "front matter: the {syntax} front matter is {found}; front matter must be a mapping of keys to values"
    )]
    NotAMapping { syntax: Syntax, found: &'static str },

    #[error("front matter: invalid YAML: {message}")]
    InvalidYaml { message: String },

    #[error("front matter: invalid TOML at line {line}, column {column}: {message}")]
    InvalidToml {
        line: usize,
        column: usize,
        message: String,
    },

    #[error(
        "front matter: the key {key} {} is not a string; front matter keys must be strings",
        under(.parent)
    )]
    NonStringKey { parent: String, key: String },

    #[error("front matter: `{path}` is not a finite number (NaN and infinity are not supported)")]
    NonFiniteNumber { path: String },

    #[error(
        "front matter: `{path}` is null, which TOML cannot represent; remove the key or give it a value"
    )]
    NullInToml { path: String },

    #[error("front matter: `{path}` = {value} is outside TOML's integer range")]
    IntegerOutOfRange { path: String, value: String },

    #[error("front matter: could not write the {syntax} front matter: {message}")]
    Render { syntax: Syntax, message: String },
}

fn at_path(path: &Option<String>) -> String {
    match path {
        Some(p) if !p.is_empty() => format!(" (at `{p}`)"),
        _ => String::new(),
    }
}

fn under(parent: &str) -> String {
    if parent.is_empty() {
        "at the top level".to_string()
    } else {
        format!("under `{parent}`")
    }
}

fn child_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

fn index_path(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

fn too_deep(path: &str) -> FrontMatterError {
    FrontMatterError::TooDeep {
        path: Some(path.to_string()),
    }
}

/// The fence a line is, if any: `---` or `+++` with optional trailing spaces/tabs/CR.
fn fence_of(line: &str) -> Option<Syntax> {
    match line.trim_end_matches([' ', '\t', '\r']) {
        "---" => Some(Syntax::Yaml),
        "+++" => Some(Syntax::Toml),
        _ => None,
    }
}

/// Split a markdown text into its front matter (if it starts with one) and the body after the
/// closing fence line. A text without front matter gives `None` and the whole text.
pub fn split(text: &str) -> Result<(Option<FrontMatter>, &str), FrontMatterError> {
    let start = if text.starts_with('\u{feff}') {
        '\u{feff}'.len_utf8()
    } else {
        0
    };
    let first_end = text[start..].find('\n').map(|i| start + i);
    let first_line = &text[start..first_end.unwrap_or(text.len())];
    let Some(syntax) = fence_of(first_line) else {
        return Ok((None, text));
    };
    let Some(first_end) = first_end else {
        return Err(FrontMatterError::Unclosed {
            fence: syntax.fence(),
        });
    };
    let content_start = first_end + 1;
    let mut pos = content_start;
    let (content_end, body_start) = loop {
        if pos >= text.len() {
            return Err(FrontMatterError::Unclosed {
                fence: syntax.fence(),
            });
        }
        let line_end = text[pos..].find('\n').map(|i| pos + i);
        let line = &text[pos..line_end.unwrap_or(text.len())];
        if fence_of(line) == Some(syntax) {
            break (pos, line_end.map_or(text.len(), |e| e + 1));
        }
        match line_end {
            Some(e) => pos = e + 1,
            None => {
                return Err(FrontMatterError::Unclosed {
                    fence: syntax.fence(),
                });
            }
        }
    };
    let content = &text[content_start..content_end];
    if content.len() > MAX_BYTES {
        return Err(FrontMatterError::TooLarge {
            size: content.len(),
        });
    }
    // One leading newline stands for the opening fence, so parser errors name file lines.
    let padded = format!("\n{content}");
    let (meta, key_order) = match syntax {
        Syntax::Yaml => parse_yaml(&padded)?,
        Syntax::Toml => parse_toml(&padded)?,
    };
    Ok((
        Some(FrontMatter {
            syntax,
            meta,
            key_order,
        }),
        &text[body_start..],
    ))
}

/// Unclosed `[`/`{` beyond which YAML is refused before parsing.
const FLOW_GUARD: usize = 8 * MAX_DEPTH;

type Parsed = (Map<String, Value>, Vec<String>);

fn parse_yaml(src: &str) -> Result<Parsed, FrontMatterError> {
    let yaml_error = |e: yaml_serde::Error| {
        let message = e.to_string();
        if message.contains("recursion limit exceeded") {
            FrontMatterError::TooDeep { path: None }
        } else {
            FrontMatterError::InvalidYaml { message }
        }
    };
    // The YAML parser slows down quadratically with flow nesting (`[[[[…`), and would only
    // reject it after reading it all: a cheap bracket count turns deep nesting away first. It
    // counts brackets inside strings too, hence the margin over MAX_DEPTH.
    let mut flow_depth = 0usize;
    for b in src.bytes() {
        match b {
            b'[' | b'{' => flow_depth += 1,
            b']' | b'}' => flow_depth = flow_depth.saturating_sub(1),
            _ => {}
        }
        if flow_depth > FLOW_GUARD {
            return Err(FrontMatterError::TooDeep { path: None });
        }
    }
    let mut value: yaml_serde::Value = yaml_serde::from_str(src).map_err(yaml_error)?;
    while let yaml_serde::Value::Tagged(tagged) = value {
        value = tagged.value;
    }
    let found = match &value {
        yaml_serde::Value::Null => return Ok((Map::new(), Vec::new())),
        yaml_serde::Value::Mapping(_) => "",
        yaml_serde::Value::Sequence(_) => "a list",
        yaml_serde::Value::String(_) => "a string",
        yaml_serde::Value::Number(_) => "a number",
        yaml_serde::Value::Bool(_) => "a boolean",
        yaml_serde::Value::Tagged(_) => "a tagged value",
    };
    if !found.is_empty() {
        return Err(FrontMatterError::NotAMapping {
            syntax: Syntax::Yaml,
            found,
        });
    }
    // The file order of the top-level keys, taken before merge keys (`<<`) are applied,
    // since merging reorders the mapping; merged-in keys follow.
    let file_order: Vec<String> = match &value {
        yaml_serde::Value::Mapping(m) => m
            .keys()
            .filter_map(|k| k.as_str())
            .filter(|k| *k != "<<")
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    };
    value.apply_merge().map_err(yaml_error)?;
    let meta = match yaml_to_json(value, 1, "")? {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    let key_order = keys_in_order(&meta, file_order.iter().map(String::as_str))
        .into_iter()
        .map(str::to_string)
        .collect();
    Ok((meta, key_order))
}

/// YAML → JSON; `depth` is the nesting level `v` would have if it is a container.
fn yaml_to_json(v: yaml_serde::Value, depth: usize, path: &str) -> Result<Value, FrontMatterError> {
    use yaml_serde::Value as Y;
    Ok(match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => {
            if let Some(u) = n.as_u64() {
                Value::from(u)
            } else if let Some(i) = n.as_i64() {
                Value::from(i)
            } else {
                n.as_f64()
                    .and_then(Number::from_f64)
                    .map(Value::Number)
                    .ok_or_else(|| FrontMatterError::NonFiniteNumber {
                        path: path.to_string(),
                    })?
            }
        }
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => {
            if depth > MAX_DEPTH {
                return Err(too_deep(path));
            }
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                out.push(yaml_to_json(item, depth + 1, &index_path(path, i))?);
            }
            Value::Array(out)
        }
        Y::Mapping(m) => {
            if depth > MAX_DEPTH {
                return Err(too_deep(path));
            }
            let mut out = Map::new();
            for (k, val) in m {
                let key = match k {
                    Y::String(s) => s,
                    other => {
                        let shown =
                            yaml_serde::to_string(&other).unwrap_or_else(|_| format!("{other:?}"));
                        return Err(FrontMatterError::NonStringKey {
                            parent: path.to_string(),
                            key: super::preview(shown.trim(), 40),
                        });
                    }
                };
                let converted = yaml_to_json(val, depth + 1, &child_path(path, &key))?;
                out.insert(key, converted);
            }
            Value::Object(out)
        }
        Y::Tagged(t) => yaml_to_json(t.value, depth, path)?,
    })
}

fn parse_toml(src: &str) -> Result<Parsed, FrontMatterError> {
    let toml_error = |e: toml::de::Error| {
        let message = e.message().trim().to_string();
        if message.contains("recursion") {
            return FrontMatterError::TooDeep { path: None };
        }
        let (mut line, mut column) = (0, 0);
        if let Some(before) = e.span().and_then(|s| src.get(..s.start)) {
            line = before.matches('\n').count() + 1;
            column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        }
        FrontMatterError::InvalidToml {
            line,
            column,
            message,
        }
    };
    let doc = toml::de::DeTable::parse(src).map_err(toml_error)?;
    let mut spans: Vec<(usize, String)> = doc
        .get_ref()
        .iter()
        .map(|(k, _)| (k.span().start, k.get_ref().to_string()))
        .collect();
    spans.sort();
    drop(doc);
    let table: toml::Table = toml::from_str(src).map_err(toml_error)?;
    let mut meta = Map::new();
    for (k, v) in table {
        let converted = toml_to_json(v, 2, &k)?;
        meta.insert(k, converted);
    }
    let key_order = keys_in_order(&meta, spans.iter().map(|(_, k)| k.as_str()))
        .into_iter()
        .map(str::to_string)
        .collect();
    Ok((meta, key_order))
}

/// TOML → JSON; datetimes become RFC 3339 strings (a bare date: `YYYY-MM-DD`).
fn toml_to_json(v: toml::Value, depth: usize, path: &str) -> Result<Value, FrontMatterError> {
    use toml::Value as T;
    Ok(match v {
        T::String(s) => Value::String(s),
        T::Integer(i) => Value::from(i),
        T::Float(f) => Number::from_f64(f).map(Value::Number).ok_or_else(|| {
            FrontMatterError::NonFiniteNumber {
                path: path.to_string(),
            }
        })?,
        T::Boolean(b) => Value::Bool(b),
        T::Datetime(d) => Value::String(d.to_string()),
        T::Array(items) => {
            if depth > MAX_DEPTH {
                return Err(too_deep(path));
            }
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                out.push(toml_to_json(item, depth + 1, &index_path(path, i))?);
            }
            Value::Array(out)
        }
        T::Table(t) => {
            if depth > MAX_DEPTH {
                return Err(too_deep(path));
            }
            let mut out = Map::new();
            for (k, val) in t {
                let converted = toml_to_json(val, depth + 1, &child_path(path, &k))?;
                out.insert(k, converted);
            }
            Value::Object(out)
        }
    })
}

/// The top-level keys in writing order: `key_order` first (those present, once each), then the
/// others in the map's order.
fn ordered_keys<'a>(meta: &'a Map<String, Value>, key_order: &[String]) -> Vec<&'a str> {
    keys_in_order(meta, key_order.iter().map(String::as_str))
}

/// `first` (the keys present in `meta`, once each), then the other keys of `meta` in its order.
fn keys_in_order<'a, 'k>(
    meta: &'a Map<String, Value>,
    first: impl Iterator<Item = &'k str>,
) -> Vec<&'a str> {
    let mut seen: HashSet<&'a str> = HashSet::with_capacity(meta.len());
    let mut out: Vec<&'a str> = Vec::with_capacity(meta.len());
    for k in first {
        if let Some((key, _)) = meta.get_key_value(k)
            && seen.insert(key.as_str())
        {
            out.push(key.as_str());
        }
    }
    for k in meta.keys() {
        if seen.insert(k.as_str()) {
            out.push(k.as_str());
        }
    }
    out
}

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
    let mut mapping = yaml_serde::Mapping::new();
    for &k in order {
        let v = json_to_yaml(&meta[k], 2, k)?;
        mapping.insert(yaml_serde::Value::String(k.to_string()), v);
    }
    let mut out = String::from("---\n");
    if !mapping.is_empty() {
        let inner = yaml_serde::to_string(&yaml_serde::Value::Mapping(mapping)).map_err(|e| {
            FrontMatterError::Render {
                syntax: Syntax::Yaml,
                message: e.to_string(),
            }
        })?;
        out.push_str(&inner);
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    out.push_str("---\n");
    Ok(out)
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

fn yaml_flow(v: &Value, out: &mut String) -> Result<(), FrontMatterError> {
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

fn yaml_quoted(s: &str, out: &mut String) {
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

fn json_to_yaml(
    v: &Value,
    depth: usize,
    path: &str,
) -> Result<yaml_serde::Value, FrontMatterError> {
    use yaml_serde::Value as Y;
    Ok(match v {
        Value::Null => Y::Null,
        Value::Bool(b) => Y::Bool(*b),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Y::Number(u.into())
            } else if let Some(i) = n.as_i64() {
                Y::Number(i.into())
            } else {
                match n.as_f64() {
                    Some(f) if f.is_finite() => Y::Number(f.into()),
                    _ => {
                        return Err(FrontMatterError::NonFiniteNumber {
                            path: path.to_string(),
                        });
                    }
                }
            }
        }
        Value::String(s) => Y::String(s.clone()),
        Value::Array(items) => {
            if depth > MAX_DEPTH {
                return Err(too_deep(path));
            }
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(json_to_yaml(item, depth + 1, &index_path(path, i))?);
            }
            Y::Sequence(out)
        }
        Value::Object(m) => {
            if depth > MAX_DEPTH {
                return Err(too_deep(path));
            }
            let mut out = yaml_serde::Mapping::new();
            for (k, item) in m {
                out.insert(
                    Y::String(k.clone()),
                    json_to_yaml(item, depth + 1, &child_path(path, k))?,
                );
            }
            Y::Mapping(out)
        }
    })
}

fn json_to_toml(v: &Value, depth: usize, path: &str) -> Result<toml::Value, FrontMatterError> {
    use toml::Value as T;
    Ok(match v {
        Value::Null => {
            return Err(FrontMatterError::NullInToml {
                path: path.to_string(),
            });
        }
        Value::Bool(b) => T::Boolean(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                T::Integer(i)
            } else if n.is_u64() {
                return Err(FrontMatterError::IntegerOutOfRange {
                    path: path.to_string(),
                    value: n.to_string(),
                });
            } else {
                match n.as_f64() {
                    Some(f) if f.is_finite() => T::Float(f),
                    _ => {
                        return Err(FrontMatterError::NonFiniteNumber {
                            path: path.to_string(),
                        });
                    }
                }
            }
        }
        Value::String(s) => T::String(s.clone()),
        Value::Array(items) => {
            if depth > MAX_DEPTH {
                return Err(too_deep(path));
            }
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(json_to_toml(item, depth + 1, &index_path(path, i))?);
            }
            T::Array(out)
        }
        Value::Object(m) => {
            if depth > MAX_DEPTH {
                return Err(too_deep(path));
            }
            let mut out = toml::Table::new();
            for (k, item) in m {
                out.insert(
                    k.clone(),
                    json_to_toml(item, depth + 1, &child_path(path, k))?,
                );
            }
            T::Table(out)
        }
    })
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

fn toml_inline(v: &toml::Value, out: &mut String) {
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

fn toml_key(k: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    fn keys(k: &[&str]) -> Vec<String> {
        k.iter().map(|s| s.to_string()).collect()
    }

    fn roundtrip(syntax: Syntax, meta: &Map<String, Value>, order: &[String]) -> String {
        let text = render(syntax, meta, order).unwrap_or_else(|e| panic!("{syntax}: {e}"));
        let doc = format!("{text}# Body\n");
        let (fm, body) = split(&doc).unwrap_or_else(|e| panic!("{syntax}: {e}\n{text}"));
        let fm = fm.expect("front matter");
        assert_eq!(fm.syntax, syntax);
        assert_eq!(&fm.meta, meta, "{text}");
        assert_eq!(fm.key_order, ordered_keys(meta, order), "{text}");
        assert_eq!(body, "# Body\n");
        text
    }

    #[test]
    fn yaml_front_matter_is_split_off() {
        let doc = "---\ntitle: Hello\ntags: [a, b]\ncount: 3\nratio: 0.5\ndraft: false\nnothing: ~\ndate: 2024-05-01\nnested:\n  z: 1\n  a: {b: c}\n---\n# Heading\n\ntext\n";
        let (fm, body) = split(doc).unwrap();
        let fm = fm.unwrap();
        assert_eq!(fm.syntax, Syntax::Yaml);
        assert_eq!(body, "# Heading\n\ntext\n");
        assert_eq!(
            fm.key_order,
            keys(&[
                "title", "tags", "count", "ratio", "draft", "nothing", "date", "nested"
            ])
        );
        assert_eq!(
            Value::Object(fm.meta),
            json!({"title": "Hello", "tags": ["a", "b"], "count": 3, "ratio": 0.5,
                   "draft": false, "nothing": null, "date": "2024-05-01",
                   "nested": {"z": 1, "a": {"b": "c"}}})
        );
    }

    #[test]
    fn toml_front_matter_is_split_off() {
        let doc = "+++\r\ntitle = \"Hello\"\r\nwhen = 1979-05-27T07:32:00-08:00\r\nday = 1979-05-27\r\nlocal = 1979-05-27 07:32:00\r\nn = 0x10\r\nf = 1.5\r\n[zeta]\r\nx = 1\r\n[alpha.beta]\r\ny = [1, 2]\r\n+++\r\nbody\r\n";
        let (fm, body) = split(doc).unwrap();
        let fm = fm.unwrap();
        assert_eq!(fm.syntax, Syntax::Toml);
        assert_eq!(body, "body\r\n");
        assert_eq!(
            fm.key_order,
            keys(&["title", "when", "day", "local", "n", "f", "zeta", "alpha"])
        );
        assert_eq!(
            Value::Object(fm.meta),
            json!({"title": "Hello", "when": "1979-05-27T07:32:00-08:00", "day": "1979-05-27",
                   "local": "1979-05-27T07:32:00", "n": 16, "f": 1.5,
                   "zeta": {"x": 1}, "alpha": {"beta": {"y": [1, 2]}}})
        );
    }

    #[test]
    fn fences_bom_crlf_and_no_front_matter() {
        for text in [
            "# Title\n---\na: 1\n---\n",
            "",
            "text",
            "\n---\na: 1\n---\n",
            "----\n",
        ] {
            assert_eq!(split(text).unwrap(), (None, text));
        }
        let (fm, body) = split("\u{feff}---\r\na: 1\r\n---\r\nbody").unwrap();
        assert_eq!(fm.unwrap().meta, obj(json!({"a": 1})));
        assert_eq!(body, "body");
        // The closing fence may be the last line, with or without a newline, and trailing
        // blanks on fences are tolerated.
        let (fm, body) = split("--- \na: 1\n---").unwrap();
        assert_eq!(fm.unwrap().key_order, keys(&["a"]));
        assert_eq!(body, "");
        // Empty front matter (or only comments) is an empty map.
        for text in [
            "---\n---\nx",
            "---\n# just a comment\n---\nx",
            "+++\n+++\nx",
            "---\n~\n---\nx",
        ] {
            let (fm, body) = split(text).unwrap();
            let fm = fm.unwrap();
            assert!(fm.meta.is_empty() && fm.key_order.is_empty(), "{text:?}");
            assert_eq!(body, "x");
        }
        // A `+++` line does not close YAML front matter, nor `---` TOML.
        let (fm, body) = split("---\na: |\n  x\n  +++\n---\nbody").unwrap();
        assert_eq!(fm.unwrap().meta, obj(json!({"a": "x\n+++\n"})));
        assert_eq!(body, "body");
        let (fm, body) = split("+++\na = \"\"\"\n---\n\"\"\"\n+++\nbody").unwrap();
        assert_eq!(fm.unwrap().meta, obj(json!({"a": "---\n"})));
        assert_eq!(body, "body");
    }

    #[test]
    fn errors_name_the_problem() {
        let e = split("---\na: 1\nno end\n").unwrap_err();
        assert_eq!(e, FrontMatterError::Unclosed { fence: "---" });
        assert!(
            e.to_string()
                .starts_with("front matter: the opening `---` on line 1")
        );
        assert!(matches!(
            split("+++").unwrap_err(),
            FrontMatterError::Unclosed { fence: "+++" }
        ));

        let e = split("---\n- a\n- b\n---\n").unwrap_err().to_string();
        assert!(
            e.contains("front matter must be a mapping of keys to values"),
            "{e}"
        );
        assert!(e.contains("a list"), "{e}");
        let e = split("---\njust words\n---\n").unwrap_err().to_string();
        assert!(
            e.contains("front matter must be a mapping of keys to values"),
            "{e}"
        );

        let e = split("---\n1: one\n---\n").unwrap_err();
        assert!(matches!(e, FrontMatterError::NonStringKey { .. }), "{e}");
        let e = split("---\na:\n  [x]: one\n---\n").unwrap_err().to_string();
        assert!(e.contains("under `a`") && e.contains("not a string"), "{e}");

        for doc in [
            "---\nx: .nan\n---\n",
            "---\nx: [1, -.inf]\n---\n",
            "+++\nx = nan\n+++\n",
            "+++\nx = -inf\n+++\n",
        ] {
            let e = split(doc).unwrap_err();
            assert!(
                matches!(e, FrontMatterError::NonFiniteNumber { .. }),
                "{doc}: {e}"
            );
        }
        assert_eq!(
            split("---\nx: [1, .inf]\n---\n").unwrap_err().to_string(),
            "front matter: `x[1]` is not a finite number (NaN and infinity are not supported)"
        );

        let e = split("---\na: 1\nb: [\n---\n").unwrap_err().to_string();
        assert!(e.starts_with("front matter: invalid YAML: "), "{e}");
        let e = split("---\na: 1\na: 2\n---\n").unwrap_err().to_string();
        assert!(e.starts_with("front matter: invalid YAML: "), "{e}");
        let e = split("+++\na = 1\n\nb = = 2\n+++\n").unwrap_err();
        match &e {
            FrontMatterError::InvalidToml { line, .. } => assert_eq!(*line, 4, "{e}"),
            other => panic!("{other}"),
        }
        assert!(
            e.to_string()
                .starts_with("front matter: invalid TOML at line 4"),
            "{e}"
        );

        let big = format!("---\nx: \"{}\"\n---\n", "a".repeat(MAX_BYTES));
        let e = split(&big).unwrap_err();
        assert!(matches!(e, FrontMatterError::TooLarge { .. }));
        assert!(e.to_string().contains("64 KiB"));
    }

    #[test]
    fn nesting_is_limited() {
        // 32 levels in all (the top-level mapping is level 1) are fine, 33 are not.
        let nest = |n: usize| format!("---\nx: {}1{}\n---\n", "[".repeat(n), "]".repeat(n));
        assert!(split(&nest(31)).is_ok());
        let e = split(&nest(32)).unwrap_err();
        assert!(matches!(e, FrontMatterError::TooDeep { .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with("front matter: nested more than 32 levels deep")
        );
        for n in [200, 5_000, 10_000] {
            assert!(matches!(
                split(&nest(n)).unwrap_err(),
                FrontMatterError::TooDeep { .. }
            ));
            let toml = format!("+++\nx = {}1{}\n+++\n", "[".repeat(n), "]".repeat(n));
            assert!(matches!(
                split(&toml).unwrap_err(),
                FrontMatterError::TooDeep { .. }
            ));
            let toml = format!("+++\nx = {}1{}\n+++\n", "{a = ".repeat(n), "}".repeat(n));
            assert!(matches!(
                split(&toml).unwrap_err(),
                FrontMatterError::TooDeep { .. }
            ));
            let toml = format!("+++\n[{}]\n+++\n", vec!["k"; n].join("."));
            assert!(matches!(
                split(&toml).unwrap_err(),
                FrontMatterError::TooDeep { .. }
            ));
        }
        let toml = format!("+++\nx = {}1{}\n+++\n", "[".repeat(31), "]".repeat(31));
        assert!(split(&toml).is_ok());
        let toml = format!("+++\nx = {}1{}\n+++\n", "[".repeat(32), "]".repeat(32));
        assert!(matches!(
            split(&toml).unwrap_err(),
            FrontMatterError::TooDeep { .. }
        ));

        // Rendering refuses too-deep values as well.
        let mut v = json!(1);
        for _ in 0..40 {
            v = json!({ "k": v });
        }
        let meta = obj(json!({ "deep": v }));
        for syntax in [Syntax::Yaml, Syntax::Toml] {
            let e = render(syntax, &meta, &[]).unwrap_err();
            assert!(matches!(e, FrontMatterError::TooDeep { .. }), "{e}");
        }
    }

    #[test]
    fn garbage_never_panics() {
        let alphabet: Vec<char> =
            "-+:[]{}\"'#\n\n\n\r\t  &*!|>%@`,.=~?\\0123456789aeftnulxyz_é\u{0}\u{7f}\u{feff}"
                .chars()
                .collect();
        let prefixes = ["---\n", "+++\n", "\u{feff}---\r\n", "+++\r\n", ""];
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut parsed = 0;
        for round in 0..4000 {
            let mut doc = prefixes[round % prefixes.len()].to_string();
            let len = (next() % 120) as usize;
            for _ in 0..len {
                let r = next();
                if r % 23 == 0 {
                    doc.push_str(
                        ["\n---\n", "\n+++\n", "\n  - ", "\nk: ", "\n[t]\n"][(r >> 8) as usize % 5],
                    );
                } else {
                    doc.push(alphabet[(r >> 8) as usize % alphabet.len()]);
                }
            }
            if round % 3 == 0 {
                doc.push_str(["\n---\n", "\n+++\n"][round % 2]);
            }
            if let Ok((Some(fm), _)) = split(&doc) {
                parsed += 1;
                // Whatever reads must write back and read again the same.
                let text = render(fm.syntax, &fm.meta, &fm.key_order)
                    .unwrap_or_else(|e| panic!("{doc:?}: {e}"));
                let (again, body) = split(&text).unwrap();
                assert_eq!(again.as_ref(), Some(&fm), "{doc:?}\n{text}");
                assert_eq!(body, "");
            }
        }
        assert!(parsed > 20, "{parsed}");
    }

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn string(&mut self) -> String {
            const PIECES: &[&str] = &[
                "a",
                "Z",
                "0",
                "1.5",
                " ",
                "  ",
                ":",
                ": ",
                "- ",
                "#",
                "'",
                "\"",
                "\\",
                "\n",
                "\r\n",
                "\t",
                "---",
                "+++",
                "\n---\n",
                "\n+++\n",
                "[",
                "]",
                "{",
                "}",
                ",",
                "&",
                "*",
                "!",
                "|",
                ">",
                "%",
                "@",
                "`",
                "~",
                "?",
                "=",
                "true",
                "null",
                "é",
                "日本",
                "\u{0}",
                "\u{7f}",
                "\u{85}",
                "\u{2028}",
                "\u{feff}",
                "\u{1F600}",
            ];
            (0..self.below(6))
                .map(|_| PIECES[self.below(PIECES.len())])
                .collect()
        }
        fn value(&mut self, depth: usize, nulls: bool) -> Value {
            let kinds = if depth >= 4 { 6 } else { 8 };
            match self.below(kinds) {
                0 if nulls => Value::Null,
                0 | 1 => Value::Bool(self.next().is_multiple_of(2)),
                2 => Value::from(self.next() as i64 >> self.below(64)),
                3 => {
                    let f = f64::from_bits(self.next());
                    if f.is_finite() {
                        Value::from(f)
                    } else {
                        Value::from(self.below(1000) as f64 / 8.0)
                    }
                }
                4 | 5 => Value::String(self.string()),
                6 => Value::Array(
                    (0..self.below(4))
                        .map(|_| self.value(depth + 1, nulls))
                        .collect(),
                ),
                _ => Value::Object(self.map(depth + 1, nulls)),
            }
        }
        fn map(&mut self, depth: usize, nulls: bool) -> Map<String, Value> {
            (0..self.below(5))
                .map(|_| (self.string(), self.value(depth, nulls)))
                .collect()
        }
    }

    #[test]
    fn random_values_round_trip_and_mutations_never_panic() {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        for round in 0..1500 {
            let syntax = if round % 2 == 0 {
                Syntax::Yaml
            } else {
                Syntax::Toml
            };
            let meta = rng.map(1, syntax == Syntax::Yaml);
            let mut order: Vec<String> = meta.keys().cloned().collect();
            order.reverse();
            let text = roundtrip(syntax, &meta, &order);
            // Damage the text: whatever still reads must write back faithfully.
            let mut bytes = text.into_bytes();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(bytes.len() + 1);
                match rng.below(3) {
                    0 if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    _ => {
                        let pool = b"-+:[]{}\"'#\n\r &*|>,=a1 ";
                        bytes.insert(at, pool[rng.below(pool.len())]);
                    }
                }
            }
            let damaged = String::from_utf8_lossy(&bytes);
            if let Ok((Some(fm), _)) = split(&damaged) {
                let again = render(fm.syntax, &fm.meta, &fm.key_order)
                    .unwrap_or_else(|e| panic!("{damaged:?}: {e}"));
                assert_eq!(split(&again).unwrap().0, Some(fm), "{damaged:?}");
            }
        }
    }

    #[test]
    fn line_separators_fall_back_to_quoted_yaml() {
        // U+2028 breaks YAML's block scalars; the writer falls back to escaped flow values.
        let meta = obj(json!({"k": "---={\n\u{2028}", "b": ["x", {"y": "\u{85}"}], "n": 1.5}));
        let text = roundtrip(Syntax::Yaml, &meta, &keys(&["n", "k"]));
        assert_eq!(
            text,
            "---\n\"n\": 1.5\n\"k\": \"---={\\n\\u2028\"\n\"b\": [\"x\", {\"y\": \"\\u0085\"}]\n---\n"
        );
        roundtrip(Syntax::Toml, &meta, &[]);
    }

    #[test]
    fn render_round_trips_and_keeps_key_order() {
        let meta = obj(json!({
            "title": "A title: with colon",
            "tags": ["x", "y z", "#hash"],
            "count": 42,
            "neg": -7,
            "ratio": 0.25,
            "big": 1e300,
            "whole": 3.0,
            "draft": true,
            "empty": "",
            "list_empty": [],
            "table_empty": {},
            "author": {"name": "Ann", "links": [{"url": "https://x"}, {"url": "https://y"}]},
            "servers": [{"name": "a"}, {"name": "b"}],
            "tricky": ["true", "null", "~", "1", "0x10", "1e5", ".nan", "-.inf", "2024-01-01",
                       "2024-01-01T00:00:00Z", " lead", "trail ", "a: b", "- x", "#c", "---",
                       "+++", "yes", "off", "'q'", "\"dq\"", "\\", "tab\there", "\u{7f}\u{1}",
                       "multi\nline\n---\n+++\nend\n", "é ü 日本"],
            "key with spaces": 1,
            "---": "dashes",
            "+++": "pluses",
            "multi\nkey": "v",
            "": "empty key",
            "zeta": "last",
        }));
        let orders = [
            keys(&["zeta", "author", "title", "servers", "count"]),
            keys(&["servers", "author"]),
            Vec::new(),
            keys(&["missing", "title", "title"]),
        ];
        for syntax in [Syntax::Yaml, Syntax::Toml] {
            for order in &orders {
                roundtrip(syntax, &meta, order);
            }
        }
        // Without nulls for TOML; YAML keeps them.
        let with_null = obj(json!({"a": null, "b": [1, null]}));
        roundtrip(Syntax::Yaml, &with_null, &[]);
        let e = render(Syntax::Toml, &with_null, &[]).unwrap_err();
        assert_eq!(e, FrontMatterError::NullInToml { path: "a".into() });
        assert!(e.to_string().contains("`a` is null"), "{e}");
        let e = render(Syntax::Toml, &obj(json!({"b": [1, null]})), &[]).unwrap_err();
        assert!(e.to_string().contains("`b[1]`"), "{e}");
        let e = render(Syntax::Toml, &obj(json!({"n": u64::MAX})), &[]).unwrap_err();
        assert!(
            matches!(e, FrontMatterError::IntegerOutOfRange { .. }),
            "{e}"
        );
        roundtrip(Syntax::Yaml, &obj(json!({"n": u64::MAX})), &[]);

        // An empty map renders as bare fences.
        assert_eq!(
            render(Syntax::Yaml, &Map::new(), &[]).unwrap(),
            "---\n---\n"
        );
        assert_eq!(
            render(Syntax::Toml, &Map::new(), &[]).unwrap(),
            "+++\n+++\n"
        );
    }

    #[test]
    fn rendered_text_is_readable() {
        let meta = obj(json!({"title": "T", "tags": ["a"], "meta": {"x": 1}, "b": 2}));
        let order = keys(&["title", "meta", "tags", "b"]);
        assert_eq!(
            render(Syntax::Yaml, &meta, &order).unwrap(),
            "---\ntitle: T\nmeta:\n  x: 1\ntags:\n- a\nb: 2\n---\n"
        );
        // A table followed by plain keys is written inline so it cannot swallow them.
        assert_eq!(
            render(Syntax::Toml, &meta, &order).unwrap(),
            "+++\ntitle = \"T\"\nmeta = { x = 1 }\ntags = [\"a\"]\nb = 2\n+++\n"
        );
        // Trailing tables are written as sections.
        let order = keys(&["title", "b", "tags", "meta"]);
        assert_eq!(
            render(Syntax::Toml, &meta, &order).unwrap(),
            "+++\ntitle = \"T\"\nb = 2\ntags = [\"a\"]\n\n[meta]\nx = 1\n+++\n"
        );
    }

    #[test]
    fn split_of_a_rendered_document_from_split() {
        // split → render → split is stable for both syntaxes, and a document without front
        // matter has none.
        let docs = [
            "---\nb: 1\na: [x, {y: z}]\nc: 2024-01-01\n---\nbody\n",
            "+++\nb = 1\na = [\"x\", { y = \"z\" }]\nc = 2024-01-01\n[t]\nq = true\n+++\nbody\n",
        ];
        for doc in docs {
            let (fm, body) = split(doc).unwrap();
            let fm = fm.unwrap();
            assert_eq!(body, "body\n");
            let text = roundtrip(fm.syntax, &fm.meta, &fm.key_order);
            let (again, _) = split(&text).unwrap();
            assert_eq!(again.unwrap(), fm);
        }
        let plain = "# Just markdown\n\n---\n\nafter a rule\n";
        assert_eq!(split(plain).unwrap(), (None, plain));
    }
}
