//! Front matter at the top of a markdown document: YAML between `---` fences or TOML between
//! `+++` fences, read into a JSON object and written back with the top-level keys in order.
//!
//! The opening fence must be the very first line (after an optional byte-order mark); the
//! closing fence is the next line that is the same fence. Trailing spaces and tabs on a fence
//! line, and CRLF line ends, are tolerated. Front matter is at most [`MAX_BYTES`] long and
//! nests at most [`MAX_DEPTH`] levels (the top-level mapping is level 1).
//!
//! One file per concern: `parse` (reading), `render` (writing anew) and `rewrite` (editing the
//! lines of the keys that changed); values are converted by [`crate::text::values`].

mod parse;
mod render;
mod rewrite;
#[cfg(test)]
mod tests;

pub use parse::{MAX_EXPANDED_BYTES, MAX_EXPANDED_NODES, split};
pub use render::render;
pub use rewrite::rewrite;

use serde_json::{Map, Value};

use crate::text::values::{self, ValueError};

/// The largest front matter accepted (the text between the fences), in bytes: 64 KiB.
pub const MAX_BYTES: usize = 64 * 1024;
/// The deepest nesting accepted; the top-level mapping is level 1.
pub const MAX_DEPTH: usize = values::MAX_DEPTH;

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

impl From<ValueError> for FrontMatterError {
    fn from(e: ValueError) -> Self {
        match e {
            ValueError::TooDeep { path } => FrontMatterError::TooDeep { path: Some(path) },
            ValueError::NonStringKey { parent, key } => {
                FrontMatterError::NonStringKey { parent, key }
            }
            ValueError::NonFiniteNumber { path } => FrontMatterError::NonFiniteNumber { path },
            ValueError::NullInToml { path } => FrontMatterError::NullInToml { path },
            ValueError::IntegerOutOfRange { path, value } => {
                FrontMatterError::IntegerOutOfRange { path, value }
            }
        }
    }
}
