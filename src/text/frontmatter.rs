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

/// Most nodes (scalars, sequences, mappings) front matter may expand to, aliases followed.
pub const MAX_EXPANDED_NODES: usize = 100_000;
/// Most bytes of scalars front matter may expand to, aliases followed.
pub const MAX_EXPANDED_BYTES: usize = 1024 * 1024;

/// Walk the YAML as a deserializer expands it (aliases included) and stop as soon as it grows
/// past `MAX_EXPANDED_NODES` nodes or `MAX_EXPANDED_BYTES` bytes: an alias bomb (`&a [*b, *b]`
/// nested) is refused after reading at most that much, before any value is built.
fn check_expansion(src: &str) -> Result<(), FrontMatterError> {
    use serde::de::DeserializeSeed;
    let budget = Budget {
        nodes: std::cell::Cell::new(0),
        bytes: std::cell::Cell::new(0),
    };
    match (&budget).deserialize(yaml_serde::Deserializer::from_str(src)) {
        Ok(()) => Ok(()),
        Err(e) if budget.exceeded() => {
            let _ = e;
            Err(FrontMatterError::InvalidYaml {
                message: format!(
                    "its aliases expand to more than {MAX_EXPANDED_NODES} values or {MAX_EXPANDED_BYTES} bytes"
                ),
            })
        }
        // Other errors are reported by the real parse, with their usual words.
        Err(_) => Ok(()),
    }
}

struct Budget {
    nodes: std::cell::Cell<usize>,
    bytes: std::cell::Cell<usize>,
}

impl Budget {
    fn exceeded(&self) -> bool {
        self.nodes.get() > MAX_EXPANDED_NODES || self.bytes.get() > MAX_EXPANDED_BYTES
    }

    fn take<E: serde::de::Error>(&self, bytes: usize) -> Result<(), E> {
        self.nodes.set(self.nodes.get() + 1);
        self.bytes.set(self.bytes.get().saturating_add(bytes));
        if self.exceeded() {
            return Err(E::custom("expansion budget exceeded"));
        }
        Ok(())
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for &Budget {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for &Budget {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.take(1)
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        self.take(8)
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        self.take(8)
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        self.take(8)
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        self.take(v.len())
    }
    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<(), E> {
        self.take(v.len())
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.take(1)
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        self.take(1)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.take(1)?;
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.take(1)?;
        while map.next_key_seed(self)?.is_some() {
            map.next_value_seed(self)?;
        }
        Ok(())
    }
    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        // A tagged value (`!tag value`): the tag, then the value.
        use serde::de::VariantAccess;
        let (_, variant) = data.variant_seed(self)?;
        variant.newtype_variant_seed(self)
    }
}

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
    check_expansion(src)?;
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
fn rewrite_lines(block: &str, old: &FrontMatter, meta: &Map<String, Value>) -> Option<String> {
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
fn yaml_entry(
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
fn yaml_printable(c: char) -> bool {
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
fn yaml_key(s: &str, out: &mut String) {
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
    fn alias_bombs_are_refused_before_they_expand() {
        // Nine levels of ten aliases each: 10^9 strings if expanded, in 300 bytes.
        let mut y = String::from(
            "---\na: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
        );
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
        for w in names.windows(2) {
            let refs = vec![format!("*{}", w[0]); 10].join(",");
            y.push_str(&format!("{}: &{} [{refs}]\n", w[1], w[1]));
        }
        y.push_str("---\nbody\n");
        // Refused after a walk of at most MAX_EXPANDED_NODES values (the expansion itself
        // would take minutes and gigabytes; yaml_serde's own limit stops it after tens of MB).
        let e = split(&y).unwrap_err();
        assert!(e.to_string().contains("aliases expand"), "{e}");
        // Ordinary aliases are fine.
        let ok = "---\nbase: &b {x: 1}\nother: *b\n---\nbody\n";
        let (fm, _) = split(ok).unwrap();
        assert_eq!(fm.unwrap().meta["other"]["x"], 1);
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

    fn edited(block: &str, change: Value) -> String {
        let (fm, _) = split(block).unwrap();
        let fm = fm.unwrap();
        let mut meta = fm.meta.clone();
        for (k, v) in obj(change) {
            if v.is_null() {
                meta.remove(&k);
            } else {
                meta.insert(k, v);
            }
        }
        let out = rewrite(block, &fm, &meta).unwrap();
        if !out.is_empty() {
            assert_eq!(split(&out).unwrap().0.unwrap().meta, meta, "{out}");
        }
        out
    }

    const HAND: &str = "---\n# Trip notes, kept by hand\ntitle: \"Yosemite, in May\"   # shown on the site\nstatus: draft # draft | ready\ntags: [hiking, 'camping']\n\n# dates are ISO\ndate: 2024-05-01\nplaces:\n  - name: Half Dome\n    permit: yes\n\n  - name: Glacier Point\nnotes: |\n  Bring water.\n\n  Lots.\nrating: 4\n---\n";

    #[test]
    fn rewrite_changes_only_the_lines_of_the_keys_that_changed() {
        // One key changed: its line only.
        assert_eq!(
            edited(HAND, json!({"status": "ready"})),
            HAND.replace("status: draft # draft | ready\n", "status: ready\n")
        );
        // Quoting and flow style are kept for the key changed.
        assert_eq!(
            edited(HAND, json!({"title": "Yosemite, in June"})),
            HAND.replace(
                "title: \"Yosemite, in May\"   # shown on the site\n",
                "title: \"Yosemite, in June\"\n"
            )
        );
        assert_eq!(
            edited(HAND, json!({"tags": ["hiking", "swimming"]})),
            HAND.replace(
                "tags: [hiking, 'camping']\n",
                "tags: [\"hiking\", \"swimming\"]\n"
            )
        );
        // A key over several lines (blank lines inside) is replaced whole.
        assert_eq!(
            edited(HAND, json!({"places": ["Half Dome"], "notes": "Water."})),
            HAND.replace(
                "places:\n  - name: Half Dome\n    permit: yes\n\n  - name: Glacier Point\nnotes: |\n  Bring water.\n\n  Lots.\n",
                "places:\n- Half Dome\nnotes: Water.\n"
            )
        );
        // Removed keys remove their lines; new keys come last, quoted where YAML 1.1 would
        // read another type.
        assert_eq!(
            edited(
                HAND,
                json!({"date": null, "rating": null, "owner": "ann", "due": "2024-06-01"})
            ),
            HAND.replace("date: 2024-05-01\n", "")
                .replace("rating: 4\n", "due: '2024-06-01'\nowner: ann\n")
        );
        // CRLF blocks stay CRLF.
        let crlf = HAND.replace('\n', "\r\n");
        assert_eq!(
            edited(&crlf, json!({"status": "ready"})),
            crlf.replace("status: draft # draft | ready\r\n", "status: ready\r\n")
        );
        // TOML: the same, comments and all.
        let toml = "+++\n# site\ntitle = 'T'  # kept\ndraft = true\nlist = [\n  1,\n  2,\n]\n+++\n";
        assert_eq!(
            edited(toml, json!({"draft": false})),
            toml.replace("draft = true\n", "draft = false\n")
        );
        assert_eq!(
            edited(toml, json!({"list": null, "new": {"a": 1}})),
            toml.replace("list = [\n  1,\n  2,\n]\n", "new = { a = 1 }\n")
        );
        // Every key removed: the comments stay; with none, the block goes.
        assert_eq!(
            edited(toml, json!({"title": null, "draft": null, "list": null})),
            "+++\n# site\n+++\n"
        );
        assert_eq!(edited("---\na: 1\n---\n", json!({"a": null})), "");
    }

    #[test]
    fn rewrite_falls_back_to_writing_the_block_anew() {
        // Anchors and merge keys cannot be edited line by line: the block is written anew.
        let block = "---\nbase: &b {x: 1}\nother: *b\nkeep: 1\n---\n";
        assert_eq!(
            edited(block, json!({"keep": 2})),
            "---\nbase:\n  x: 1\nother:\n  x: 1\nkeep: 2\n---\n"
        );
        // A change to a TOML table is written anew; the keys before the tables are edited in
        // place, new keys go before the first table, the tables stay as written.
        let toml = "+++\na = 1  # one\n# the table\n[t]\nb = 2  # two\n+++\n";
        assert_eq!(
            edited(toml, json!({"t": {"b": 3}})),
            "+++\na = 1\n\n[t]\nb = 3\n+++\n"
        );
        assert_eq!(
            edited(toml, json!({"a": 3, "new": "x"})),
            "+++\na = 3\nnew = \"x\"\n# the table\n[t]\nb = 2  # two\n+++\n"
        );
    }

    #[test]
    fn strings_that_read_as_other_types_are_quoted() {
        // What YAML 1.1 readers (PyYAML, js-yaml) read as booleans, nulls, numbers or dates.
        let tricky = [
            "yes",
            "No",
            "ON",
            "off",
            "y",
            "n",
            "true",
            "null",
            "Null",
            "~",
            "",
            "2024-06-01",
            "2024-06-01 10:00:00",
            "12:30",
            "0123",
            "1.10",
            "1e3",
            "0x1F",
            "1_000",
            "-5",
            "+5",
            ".5",
            ".inf",
            "-.inf",
            ".NaN",
            "<<",
            "=",
        ];
        for s in tricky {
            let text = render(Syntax::Yaml, &obj(json!({"k": s})), &[]).unwrap();
            let value = text
                .trim_start_matches("---\nk: ")
                .trim_end_matches("\n---\n");
            assert!(value.starts_with(['\'', '"']), "{s:?} written as {value}");
        }
        // Keys too (`n: 1` is `false: 1` to YAML 1.1), and not plain words.
        assert_eq!(
            render(
                Syntax::Yaml,
                &obj(json!({"n": "plain words", "ok": "it's"})),
                &[]
            )
            .unwrap(),
            "---\n'n': plain words\nok: it's\n---\n"
        );
    }

    #[test]
    fn random_rewrites_read_back_and_keep_unchanged_lines() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        // How many rewrites went line by line (YAML, TOML).
        let mut lined = [0usize; 2];
        for round in 0..1500 {
            let syntax = if round % 2 == 0 {
                Syntax::Yaml
            } else {
                Syntax::Toml
            };
            let old_meta = rng.map(1, syntax == Syntax::Yaml);
            let text = render(syntax, &old_meta, &[]).unwrap();
            // Comments between the keys, as people write them.
            let text = if syntax == Syntax::Yaml && rng.below(2) == 0 {
                text.replacen("---\n", "---\n# by hand\n\n", 1)
            } else {
                text
            };
            let (Some(old), "") = split(&text).unwrap() else {
                panic!("{text}")
            };
            let mut meta = old.meta.clone();
            let keys: Vec<String> = meta.keys().cloned().collect();
            let mut changed = Vec::new();
            for _ in 0..1 + rng.below(3) {
                let new = rng.map(2, syntax == Syntax::Yaml);
                match (rng.below(3), keys.is_empty()) {
                    (0, false) => {
                        let k = &keys[rng.below(keys.len())];
                        meta.remove(k);
                        changed.push(k.clone());
                    }
                    (1, false) => {
                        let k = &keys[rng.below(keys.len())];
                        if let Some(v) = new.values().next() {
                            meta.insert(k.clone(), v.clone());
                            changed.push(k.clone());
                        }
                    }
                    _ => {
                        for (k, v) in new {
                            if !meta.contains_key(&k) {
                                meta.insert(k, v);
                            }
                        }
                    }
                }
            }
            let out = rewrite(&text, &old, &meta).unwrap_or_else(|e| panic!("{text}: {e}"));
            lined[usize::from(syntax == Syntax::Toml)] +=
                usize::from(rewrite_lines(&text, &old, &meta).is_some());
            if meta.is_empty() && out.is_empty() {
                continue;
            }
            let (Some(fm), "") = split(&out).unwrap_or_else(|e| panic!("{out}: {e}")) else {
                panic!("{out}")
            };
            assert_eq!(fm.meta, meta, "{text}\n->\n{out}");
            // The keys kept stay in their order (new ones come after them, or in TOML before
            // the tables).
            let kept: Vec<&String> = old
                .key_order
                .iter()
                .filter(|k| meta.contains_key(*k))
                .collect();
            assert_eq!(
                fm.key_order
                    .iter()
                    .filter(|k| old.meta.contains_key(*k))
                    .collect::<Vec<_>>(),
                kept,
                "{out}"
            );
        }
        // Most go line by line (the others are written anew, and read back all the same).
        assert!(lined[0] > 400 && lined[1] > 400, "{lined:?} of 750 each");
    }

    #[test]
    fn a_large_block_is_edited_line_by_line() {
        // Near the 64 KiB limit: 4,500 keys, one changed.
        let mut block = String::from("---\n");
        for i in 0..4500 {
            block.push_str(&format!("k{i}: v  # c\n"));
        }
        block.push_str("---\n");
        assert!(block.len() < MAX_BYTES);
        // (About 0.4 s in a debug build: two small parses per key and one of the whole.)
        let out = edited(&block, json!({"k2999": "w"}));
        assert_eq!(out, block.replace("k2999: v  # c\n", "k2999: w\n"));
    }

    #[test]
    fn multi_line_keys_are_quoted_on_one_line() {
        let meta = obj(json!({"a\nb": "x\ny"}));
        assert_eq!(
            render(Syntax::Yaml, &meta, &[]).unwrap(),
            "---\n\"a\\nb\": |-\n  x\n  y\n---\n"
        );
        assert_eq!(
            edited("---\nk: 1  # c\n---\n", json!({"a\nb": "z"})),
            "---\nk: 1  # c\n\"a\\nb\": z\n---\n"
        );
    }
}
