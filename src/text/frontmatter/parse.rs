//! Reading front matter: the fences, the YAML expansion guard, YAML and TOML parsed into a
//! JSON map with the top-level keys in file order.

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::{FrontMatter, FrontMatterError, MAX_BYTES, MAX_DEPTH, Syntax};
use crate::text::values::{toml_to_json, yaml_to_json};

/// The fence a line is, if any: `---` or `+++` with optional trailing spaces/tabs/CR.
pub(super) fn fence_of(line: &str) -> Option<Syntax> {
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

pub(super) fn parse_yaml(src: &str) -> Result<Parsed, FrontMatterError> {
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

pub(super) fn parse_toml(src: &str) -> Result<Parsed, FrontMatterError> {
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

/// The top-level keys in writing order: `key_order` first (those present, once each), then the
/// others in the map's order.
pub(super) fn ordered_keys<'a>(meta: &'a Map<String, Value>, key_order: &[String]) -> Vec<&'a str> {
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
