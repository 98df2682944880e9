//! Text analysis shared by indexing and querying: an identifier-aware tokenizer (so
//! `parseConfigFile`, `parse_config_file`, `std::fs::read`, `user-id-42`, `v1.2.3` and paths are
//! found whole and by their parts; Chinese, Japanese and Korean runs by overlapping character
//! pairs), lowercasing, folding of accents and diacritics (`café` is `cafe`) and English stemming.
//! `ANALYSIS_VERSION` names this analysis: an index built with another is rebuilt at open.

use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RawTokenizer, Stemmer, TextAnalyzer, Token,
    TokenStream, Tokenizer,
};

/// The version of the analysis below. Change it with anything that changes the terms of a text:
/// an index built with another version is rebuilt when it is opened (src/index/lexical.rs).
/// 1: identifiers, lowercase, English stem. 2: + accent folding, CJK bigrams.
pub const ANALYSIS_VERSION: u32 = 2;

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
        // Only a joiner, an upper-case letter or a CJK character can split a chunk: most words
        // need no parts.
        let parts = if inner
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        {
            Vec::new()
        } else if inner.chars().any(is_cjk) {
            cjk_parts(inner)
        } else {
            split_parts(inner)
        };
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

/// Whether `c` is of a script written without spaces between words (Han, Hiragana, Katakana)
/// or in syllable blocks that a word search must find inside longer runs (Hangul).
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF       // Hiragana, Katakana
        | 0x3400..=0x4DBF     // CJK Extension A
        | 0x4E00..=0x9FFF     // CJK Unified Ideographs
        | 0xAC00..=0xD7AF     // Hangul syllables
        | 0xF900..=0xFAFF     // CJK Compatibility Ideographs
        | 0xFF66..=0xFF9F     // half-width Katakana
        | 0x20000..=0x2FA1F) // CJK Extensions B–F, Compatibility Supplement
}

/// Parts of a chunk with CJK characters: each CJK run as its overlapping character pairs (a run
/// of one character is itself), the rest as identifier parts. `我们选择了数据库` gives `我们`,
/// `们选`, … `据库`, so a query `数据库` (`数据` and `据库`) finds it without a dictionary.
fn cjk_parts(s: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut rest = String::new();
    let mut run: Vec<char> = Vec::new();
    let flush_run = |run: &mut Vec<char>, parts: &mut Vec<String>| {
        match run.len() {
            0 => {}
            1 => parts.push(run[0].to_string()),
            _ => parts.extend(run.windows(2).map(|w| w.iter().collect::<String>())),
        }
        run.clear();
    };
    for c in s.chars() {
        if is_cjk(c) {
            if !rest.is_empty() {
                parts.extend(split_parts(&std::mem::take(&mut rest)));
            }
            run.push(c);
        } else {
            flush_run(&mut run, &mut parts);
            rest.push(c);
        }
    }
    flush_run(&mut run, &mut parts);
    if !rest.is_empty() {
        parts.extend(split_parts(&rest));
    }
    parts
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
        self.fill(text);
        VecTokenStream {
            tokens: &mut self.tokens,
            index: 0,
        }
    }
}

impl IdentifierTokenizer {
    /// The tokens of `text`, in `self.tokens`.
    fn fill(&mut self, text: &str) {
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
    }
}

/// The index-time analyzer: identifier tokenizer → lowercase → English stemmer, the last two
/// through each indexing thread's cache of the terms it has normalised (`IndexTokenizer`).
pub fn analyzer() -> TextAnalyzer {
    TextAnalyzer::from(IndexTokenizer::default())
}

/// Most terms an indexing thread remembers before it starts over (~4 MiB).
const TERM_CACHE_LIMIT: usize = 50_000;

/// The terms an indexing thread has normalised: raw token → lowercased, stemmed term. Per thread,
/// not per tokenizer: tantivy clones the analyzer for every field of every new segment, and a
/// cache in the clone would start empty each time.
#[derive(Default)]
struct TermCache {
    norm: Normalizer,
    terms: std::collections::HashMap<Box<str>, Box<str>>,
}

thread_local! {
    static TERM_CACHE: std::cell::RefCell<TermCache> = Default::default();
}

/// The identifier tokenizer with lowercasing and stemming folded in. Prose repeats its words,
/// and lowercasing plus stemming a word (allocations included) cost about as much as all the
/// rest of indexing it, so each distinct token is normalised once per thread — by the same
/// `Normalizer` queries use, so the terms are exactly those of the
/// `IdentifierTokenizer → LowerCaser → Stemmer` chain — and looked up afterwards.
#[derive(Clone, Default)]
pub struct IndexTokenizer {
    inner: IdentifierTokenizer,
}

impl Tokenizer for IndexTokenizer {
    type TokenStream<'a> = VecTokenStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> VecTokenStream<'a> {
        self.inner.fill(text);
        TERM_CACHE.with_borrow_mut(|cache| {
            if cache.terms.len() > TERM_CACHE_LIMIT {
                cache.terms.clear();
            }
            for t in &mut self.inner.tokens {
                match cache.terms.get(t.text.as_str()) {
                    Some(term) => {
                        t.text.clear();
                        t.text.push_str(term);
                    }
                    None => {
                        let term = cache.norm.norm(&t.text);
                        let raw = std::mem::replace(&mut t.text, term);
                        cache.terms.insert(raw.into(), t.text.as_str().into());
                    }
                }
            }
        });
        VecTokenStream {
            tokens: &mut self.inner.tokens,
            index: 0,
        }
    }
}

/// Normalises single tokens exactly as the analyzer does (lowercase + stem).
pub struct Normalizer(TextAnalyzer);

impl Default for Normalizer {
    fn default() -> Self {
        Normalizer(
            TextAnalyzer::builder(RawTokenizer::default())
                .filter(LowerCaser)
                .filter(AsciiFoldingFilter)
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

    /// Every token (text, offsets, position) of `text` through `analyzer`.
    fn tokens_of(analyzer: &mut TextAnalyzer, text: &str) -> Vec<(String, usize, usize, usize)> {
        let mut out = Vec::new();
        let mut s = analyzer.token_stream(text);
        while s.advance() {
            let t = s.token();
            out.push((t.text.clone(), t.offset_from, t.offset_to, t.position));
        }
        out
    }

    #[test]
    fn the_cached_analyzer_gives_the_terms_of_the_filter_chain() {
        let mut chain = TextAnalyzer::builder(IdentifierTokenizer::default())
            .filter(LowerCaser)
            .filter(AsciiFoldingFilter)
            .filter(Stemmer::new(Language::English))
            .build();
        let mut cached = analyzer();
        let texts = [
            "Running runners ran; the RUNS were running. parseConfigFile, HTTPServer utf8Decode",
            "std::fs::read_to_string(\"/etc/nginx/nginx.conf\") user-id-42 v1.2.3 O'Reilly's",
            "Größe straße İstanbul ΣΊΣΥΦΟΣ naïve café — 東京 データベース emoji 🚀 x1Y2z3",
            &format!("{} short {}", "a".repeat(81), "B".repeat(80)),
            "Running runners ran; the RUNS were running again, and again.",
            "",
        ];
        // Twice over: the second pass is answered from the cache.
        for text in texts.iter().chain(texts.iter()) {
            assert_eq!(
                tokens_of(&mut cached, text),
                tokens_of(&mut chain, text),
                "{text}"
            );
        }
        // Starting over when the cache is full changes nothing either.
        let many: String = (0..TERM_CACHE_LIMIT + 10)
            .map(|i| format!("w{i} "))
            .collect();
        assert_eq!(tokens_of(&mut cached, &many).len(), TERM_CACHE_LIMIT + 10);
        assert_eq!(
            tokens_of(&mut cached, texts[0]),
            tokens_of(&mut chain, texts[0])
        );
    }

    #[test]
    fn accents_and_diacritics_fold() {
        let mut n = Normalizer::default();
        assert_eq!(n.norm("café"), n.norm("cafe"));
        assert_eq!(n.norm("Fermé"), n.norm("ferme"));
        assert_eq!(n.norm("naïve"), n.norm("naive"));
        assert_eq!(n.norm("Ångström"), n.norm("angstrom"));
    }

    #[test]
    fn cjk_runs_become_character_pairs() {
        let c = chunks("我们选择了数据库 because JSONB");
        assert_eq!(c[0].whole, "我们选择了数据库");
        assert_eq!(
            c[0].parts,
            vec!["我们", "们选", "选择", "择了", "了数", "数据", "据库"]
        );
        let mixed = chunks("数据库Postgres");
        assert_eq!(mixed[0].parts, vec!["数据", "据库", "Postgres"]);
        assert!(chunks("データ")[0].parts.contains(&"デー".to_string()));
        assert!(
            chunks("東")[0].parts.is_empty(),
            "one character is its own whole"
        );
    }

    #[test]
    fn stemming_makes_running_match_runs() {
        let mut n = Normalizer::default();
        assert_eq!(n.norm("running"), n.norm("runs"));
    }
}
