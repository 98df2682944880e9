//! Text analysis shared by indexing and querying: an identifier-aware tokenizer (so
//! `parseConfigFile`, `parse_config_file`, `std::fs::read`, `user-id-42`, `v1.2.3` and paths are
//! found whole and by their parts), lowercasing and English stemming.

use tantivy::tokenizer::{
    Language, LowerCaser, RawTokenizer, Stemmer, TextAnalyzer, Token, TokenStream, Tokenizer,
};

/// Name under which the analyzer is registered in the tantivy index.
pub const ANALYZER: &str = "kbdb";
/// Longest token kept (longer "words" are noise such as base64 or hashes).
const MAX_TOKEN_BYTES: usize = 80;

/// One whitespace/punctuation-delimited chunk: the whole identifier and its parts.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    pub whole: String,
    /// Parts when the chunk is compound (two or more), else empty.
    pub parts: Vec<String>,
    pub start: usize,
    pub end: usize,
}

/// Characters that may appear inside an identifier-like chunk besides alphanumerics.
fn is_joiner(c: char) -> bool {
    matches!(c, '_' | '.' | ':' | '-' | '/' | '\\' | '@' | '\'')
}

/// Split text into chunks. Joiners at a chunk's edges are trimmed (sentence-final dots, leading
/// slashes of paths, quotes).
pub fn chunks(text: &str) -> Vec<Chunk> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let flush = |out: &mut Vec<Chunk>, s: usize, e: usize| {
        let raw = &text[s..e];
        let trimmed_start = raw.len() - raw.trim_start_matches(is_joiner).len();
        let inner = raw.trim_matches(is_joiner);
        if inner.is_empty() {
            return;
        }
        let s2 = s + trimmed_start;
        let parts = split_parts(inner);
        let whole = inner.to_string();
        out.push(Chunk {
            parts: if parts.len() > 1 { parts } else { Vec::new() },
            whole,
            start: s2,
            end: s2 + inner.len(),
        });
    };
    for (i, c) in text.char_indices() {
        if c.is_alphanumeric() || is_joiner(c) {
            if start.is_none() {
                start = Some(i);
            }
        } else if let Some(s) = start.take() {
            flush(&mut out, s, i);
        }
    }
    if let Some(s) = start {
        flush(&mut out, s, text.len());
    }
    out
}

/// Parts of an identifier: split at joiners and at camelCase boundaries (`HTTPServer` →
/// `HTTP`, `Server`); letters and digits stay together (`v1`, `utf8`).
fn split_parts(s: &str) -> Vec<String> {
    let mut parts = Vec::new();
    for piece in s.split(is_joiner).filter(|p| !p.is_empty()) {
        let chars: Vec<char> = piece.chars().collect();
        let mut cur = String::new();
        for i in 0..chars.len() {
            let c = chars[i];
            if i > 0 && !cur.is_empty() {
                let prev = chars[i - 1];
                let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
                let boundary = (prev.is_lowercase() && c.is_uppercase())
                    || (prev.is_uppercase() && c.is_uppercase() && next_lower)
                    || (prev.is_numeric() && c.is_uppercase());
                if boundary {
                    parts.push(std::mem::take(&mut cur));
                }
            }
            cur.push(c);
        }
        if !cur.is_empty() {
            parts.push(cur);
        }
    }
    parts
}

/// The tantivy tokenizer: emits each chunk whole, then its parts, with increasing positions.
#[derive(Clone, Default)]
pub struct IdentifierTokenizer {
    tokens: Vec<Token>,
}

pub struct VecTokenStream<'a> {
    tokens: &'a mut [Token],
    index: usize,
}

impl TokenStream for VecTokenStream<'_> {
    fn advance(&mut self) -> bool {
        if self.index < self.tokens.len() {
            self.index += 1;
            true
        } else {
            false
        }
    }
    fn token(&self) -> &Token {
        &self.tokens[self.index - 1]
    }
    fn token_mut(&mut self) -> &mut Token {
        &mut self.tokens[self.index - 1]
    }
}

impl Tokenizer for IdentifierTokenizer {
    type TokenStream<'a> = VecTokenStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> VecTokenStream<'a> {
        self.tokens.clear();
        let mut position = 0usize;
        for c in chunks(text) {
            let mut push = |t: &str, pos: usize| {
                if t.len() <= MAX_TOKEN_BYTES {
                    self.tokens.push(Token {
                        offset_from: c.start,
                        offset_to: c.end,
                        position: pos,
                        text: t.to_string(),
                        position_length: 1,
                    });
                }
            };
            push(&c.whole, position);
            for (i, p) in c.parts.iter().enumerate() {
                push(p, position + i);
            }
            position += c.parts.len().max(1);
        }
        VecTokenStream {
            tokens: &mut self.tokens,
            index: 0,
        }
    }
}

/// The index-time analyzer: identifier tokenizer → lowercase → English stemmer.
pub fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(IdentifierTokenizer::default())
        .filter(LowerCaser)
        .filter(Stemmer::new(Language::English))
        .build()
}

/// Normalises single tokens exactly as the analyzer does (lowercase + stem).
pub struct Normalizer(TextAnalyzer);

impl Default for Normalizer {
    fn default() -> Self {
        Normalizer(
            TextAnalyzer::builder(RawTokenizer::default())
                .filter(LowerCaser)
                .filter(Stemmer::new(Language::English))
                .build(),
        )
    }
}

impl Normalizer {
    pub fn norm(&mut self, token: &str) -> String {
        let mut s = self.0.token_stream(token);
        let mut out = String::new();
        if s.advance() {
            out = s.token().text.clone();
        }
        out
    }

    /// Every indexed term of `text` (as the index stores them).
    pub fn terms(&mut self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for c in chunks(text) {
            if c.whole.len() <= MAX_TOKEN_BYTES {
                out.push(self.norm(&c.whole));
            }
            for p in &c.parts {
                if p.len() <= MAX_TOKEN_BYTES {
                    out.push(self.norm(p));
                }
            }
        }
        out
    }
}

/// English stop words dropped from queries (never from the index) when other terms remain.
pub fn is_stopword(lower: &str) -> bool {
    const STOP: &[&str] = &[
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is",
        "it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there",
        "these", "they", "this", "to", "was", "will", "with", "how", "what", "do", "does", "i",
    ];
    STOP.contains(&lower)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_terms(text: &str) -> Vec<String> {
        Normalizer::default().terms(text)
    }

    #[test]
    fn identifiers_are_found_whole_and_by_parts() {
        let t = all_terms(
            "call parseConfigFile or parse_config_file, std::fs::read user-id-42 v1.2.3 /etc/nginx/nginx.conf",
        );
        for want in [
            "parseconfigfil",
            "pars",
            "config",
            "file",
            "parse_config_fil",
            "std::fs::read",
            "std",
            "fs",
            "read",
            "user-id-42",
            "user",
            "id",
            "42",
            "v1.2.3",
            "v1",
            "2",
            "3",
            "etc/nginx/nginx.conf",
            "nginx",
            "conf",
        ] {
            assert!(t.iter().any(|x| x == want), "{want} missing from {t:?}");
        }
    }

    #[test]
    fn camel_case_acronyms_and_trailing_punctuation() {
        assert_eq!(split_parts("HTTPServer"), vec!["HTTP", "Server"]);
        assert_eq!(split_parts("utf8Decode"), vec!["utf8", "Decode"]);
        let c = chunks("See the end. (foo.bar)");
        let wholes: Vec<&str> = c.iter().map(|c| c.whole.as_str()).collect();
        assert_eq!(wholes, vec!["See", "the", "end", "foo.bar"]);
    }

    #[test]
    fn stemming_makes_running_match_runs() {
        let mut n = Normalizer::default();
        assert_eq!(n.norm("running"), n.norm("runs"));
    }
}
