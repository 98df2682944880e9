//! What a search returns and how it finds it, parsed once where a request comes in (the
//! daemon's parameters, the CLI's arguments) and carried as enums into the engine.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use crate::error::KbError;

/// What `mode` takes: a result shape (kbdb-mcp.md) or a retrieval path (kbdb-hybrid-search.md);
/// the two sets are disjoint. A retrieval path here implies `sections` results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    Sections,
    Documents,
    Stats,
    Lexical,
    Vector,
    Hybrid,
}

/// The retrieval path (`search_mode`): which ranked lists a search uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Retrieval {
    Lexical,
    Vector,
    Hybrid,
}

/// The result shape: one item per section, sections grouped by document, or only counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Sections,
    Documents,
    Stats,
}

impl SearchMode {
    /// Every value, as the wire spells it (also the CLI's `--mode` choices).
    pub const NAMES: [&'static str; 6] = [
        "sections",
        "documents",
        "stats",
        "lexical",
        "vector",
        "hybrid",
    ];
    const ALL: [SearchMode; 6] = [
        SearchMode::Sections,
        SearchMode::Documents,
        SearchMode::Stats,
        SearchMode::Lexical,
        SearchMode::Vector,
        SearchMode::Hybrid,
    ];

    pub fn as_str(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// The value `s` names (surrounding white space ignored; empty: none).
    pub fn parse(s: &str) -> Result<Option<SearchMode>, KbError> {
        parse_choice(s, "mode", &Self::NAMES, &Self::ALL)
    }

    /// The result shape it asks for (a retrieval path lists sections).
    pub fn shape(self) -> Shape {
        match self {
            SearchMode::Documents => Shape::Documents,
            SearchMode::Stats => Shape::Stats,
            _ => Shape::Sections,
        }
    }

    /// The retrieval path it names, if it names one.
    pub fn retrieval(self) -> Option<Retrieval> {
        match self {
            SearchMode::Lexical => Some(Retrieval::Lexical),
            SearchMode::Vector => Some(Retrieval::Vector),
            SearchMode::Hybrid => Some(Retrieval::Hybrid),
            _ => None,
        }
    }
}

impl Retrieval {
    /// Every value, as the wire spells it (also the CLI's `--search-mode` choices).
    pub const NAMES: [&'static str; 3] = ["lexical", "vector", "hybrid"];
    const ALL: [Retrieval; 3] = [Retrieval::Lexical, Retrieval::Vector, Retrieval::Hybrid];

    pub fn as_str(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// The value `s` names (surrounding white space ignored; empty: none).
    pub fn parse(s: &str) -> Result<Option<Retrieval>, KbError> {
        parse_choice(s, "search_mode", &Self::NAMES, &Self::ALL)
    }
}

impl Shape {
    pub fn as_str(self) -> &'static str {
        match self {
            Shape::Sections => "sections",
            Shape::Documents => "documents",
            Shape::Stats => "stats",
        }
    }
}

/// One of `names` (the spec's error text otherwise: `'x' is not one of a, b, c`).
fn parse_choice<T: Copy>(
    s: &str,
    field: &str,
    names: &[&str],
    all: &[T],
) -> Result<Option<T>, KbError> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    match names.iter().position(|n| *n == s) {
        Some(i) => Ok(Some(all[i])),
        None => Err(KbError::invalid(
            field,
            format!(
                "'{}' is not one of {}",
                crate::text::preview(s, 30),
                names.join(", ")
            ),
        )),
    }
}

/// A choice field: absent, null or empty is none; a bad value an error naming the field
/// (carried through serde; [`invalid_choice`] turns it back into the field's error).
fn choice<'de, D, T>(
    d: D,
    parse: fn(&str) -> Result<Option<T>, KbError>,
) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
{
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) => parse(&s).map_err(|e| serde::de::Error::custom(format!("{CHOICE}{e}"))),
    }
}

/// `mode` as the wire spells it (serde `deserialize_with`).
pub fn search_mode<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SearchMode>, D::Error> {
    choice(d, SearchMode::parse)
}

/// `search_mode` as the wire spells it (serde `deserialize_with`).
pub fn retrieval<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Retrieval>, D::Error> {
    choice(d, Retrieval::parse)
}

/// Marks a choice field's error inside a deserialiser's message.
const CHOICE: &str = "\u{1}choice:";

/// A choice field's error (`mode: 'x' is not one of ...`) as the invalid-input error it is,
/// with its field, like every other rule of the engine; other messages are left alone.
pub fn invalid_choice(message: &str) -> Option<KbError> {
    let rest = &message[message.find(CHOICE)? + CHOICE.len()..];
    let (field, rule) = rest.split_once(": ")?;
    // serde_json appends no position to an error of `from_value`; be safe anyway.
    let rule = rule.split(" at line ").next().unwrap_or(rule);
    Some(KbError::invalid(field, rule))
}
