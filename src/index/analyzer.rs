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
    let mut parts = Vec::new();
    each_chunk(text, &mut parts, |whole, start, parts| {
        out.push(Chunk {
            whole: whole.to_string(),
            parts: parts.iter().map(|p| p.to_string()).collect(),
            start,
            end: start + whole.len(),
        })
    });
    out
}

/// The chunks of `text` without copying them (what `chunks` returns, as slices of `text`):
/// `f(whole, start, parts)` for each, `parts` empty unless the chunk is compound. Indexing
/// tokenizes every section through this: its only allocation is `parts` growing.
fn each_chunk<'a>(
    text: &'a str,
    parts: &mut Vec<&'a str>,
    mut f: impl FnMut(&'a str, usize, &[&'a str]),
) {
    let mut flush = |s: usize, e: usize| {
        let raw = &text[s..e];
        let trimmed_start = raw.len() - raw.trim_start_matches(is_joiner).len();
        let inner = raw.trim_matches(is_joiner);
        if inner.is_empty() {
            return;
        }
        parts.clear();
        // Only a joiner, an upper-case letter or a CJK character can split a chunk: most words
        // need no parts.
        if !inner
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        {
            if inner.chars().any(is_cjk) {
                cjk_parts(inner, parts);
            } else {
                split_parts(inner, parts);
            }
            if parts.len() < 2 {
                parts.clear();
            }
        }
        f(inner, s + trimmed_start, parts);
    };
    let mut start: Option<usize> = None;
    for (i, c) in text.char_indices() {
        if c.is_alphanumeric() || is_joiner(c) {
            if start.is_none() {
                start = Some(i);
            }
        } else if let Some(s) = start.take() {
            flush(s, i);
        }
    }
    if let Some(s) = start {
        flush(s, text.len());
    }
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

/// Parts of a chunk with CJK characters, appended to `parts`: each CJK run as its overlapping
/// character pairs (a run of one character is itself), the rest as identifier parts.
/// `我们选择了数据库` gives `我们`, `们选`, … `据库`, so a query `数据库` (`数据` and `据库`) finds it
/// without a dictionary.
fn cjk_parts<'a>(s: &'a str, parts: &mut Vec<&'a str>) {
    // Byte ranges of the current CJK run and of the text before it.
    let mut run: Option<usize> = None;
    let mut rest: Option<usize> = None;
    let flush_run = |run_start: usize, end: usize, parts: &mut Vec<&'a str>| {
        let run = &s[run_start..end];
        if run.chars().nth(1).is_none() {
            parts.push(run);
            return;
        }
        let mut chars = run.char_indices().peekable();
        while let Some((i, _)) = chars.next() {
            let Some(&(j, c)) = chars.peek() else { break };
            parts.push(&run[i..j + c.len_utf8()]);
        }
    };
    for (i, c) in s.char_indices() {
        if is_cjk(c) {
            if let Some(r) = rest.take() {
                split_parts(&s[r..i], parts);
            }
            run.get_or_insert(i);
        } else {
            if let Some(r) = run.take() {
                flush_run(r, i, parts);
            }
            rest.get_or_insert(i);
        }
    }
    if let Some(r) = run {
        flush_run(r, s.len(), parts);
    }
    if let Some(r) = rest {
        split_parts(&s[r..], parts);
    }
}

/// Parts of an identifier, appended to `parts`: split at joiners and at camelCase boundaries
/// (`HTTPServer` → `HTTP`, `Server`); letters and digits stay together (`v1`, `utf8`).
fn split_parts<'a>(s: &'a str, parts: &mut Vec<&'a str>) {
    for piece in s.split(is_joiner).filter(|p| !p.is_empty()) {
        let mut part_start = 0;
        let mut prev: Option<char> = None;
        let mut chars = piece.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if let Some(prev) = prev {
                let next_lower = chars.peek().is_some_and(|&(_, n)| n.is_lowercase());
                let boundary = (prev.is_lowercase() && c.is_uppercase())
                    || (prev.is_uppercase() && c.is_uppercase() && next_lower)
                    || (prev.is_numeric() && c.is_uppercase());
                if boundary {
                    parts.push(&piece[part_start..i]);
                    part_start = i;
                }
            }
            prev = Some(c);
        }
        parts.push(&piece[part_start..]);
    }
}

/// The tantivy tokenizer: emits each chunk whole, then its parts, with increasing positions.
#[derive(Clone, Default)]
pub struct IdentifierTokenizer {
    /// The tokens of the last text: the first `len`. Those after keep their strings' memory for
    /// the next text, so a token costs no allocation once the vector has grown.
    tokens: Vec<Token>,
    len: usize,
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
        self.fill(text, |raw, term| term.push_str(raw));
        self.stream()
    }
}

impl IdentifierTokenizer {
    /// Tokenize `text` into `self.tokens`; `term(raw, text)` writes a token's text into the
    /// emptied `text`.
    fn fill(&mut self, text: &str, mut term: impl FnMut(&str, &mut String)) {
        self.len = 0;
        let mut position = 0usize;
        let mut parts = Vec::new();
        let (tokens, len) = (&mut self.tokens, &mut self.len);
        let mut push = |raw: &str, start: usize, end: usize, position: usize| {
            if raw.len() > MAX_TOKEN_BYTES {
                return;
            }
            if *len == tokens.len() {
                tokens.push(Token::default());
            }
            let t = &mut tokens[*len];
            *len += 1;
            t.offset_from = start;
            t.offset_to = end;
            t.position = position;
            t.position_length = 1;
            t.text.clear();
            term(raw, &mut t.text);
        };
        each_chunk(text, &mut parts, |whole, start, parts| {
            let end = start + whole.len();
            push(whole, start, end, position);
            for (i, p) in parts.iter().enumerate() {
                push(p, start, end, position + i);
            }
            position += parts.len().max(1);
        });
    }

    fn stream(&mut self) -> VecTokenStream<'_> {
        VecTokenStream {
            tokens: &mut self.tokens[..self.len],
            index: 0,
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
    /// foldhash: looked up once per token indexed, where SipHash took ~6 % of the indexing
    /// thread.
    terms: foldhash::HashMap<Box<str>, Box<str>>,
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
        TERM_CACHE.with_borrow_mut(|cache| {
            if cache.terms.len() > TERM_CACHE_LIMIT {
                cache.terms.clear();
            }
            self.inner
                .fill(text, |raw, term| match cache.terms.get(raw) {
                    Some(known) => term.push_str(known),
                    None => {
                        let normalised = cache.norm.norm(raw);
                        term.push_str(&normalised);
                        cache.terms.insert(raw.into(), normalised.into());
                    }
                });
        });
        self.inner.stream()
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
        let parts = |s| {
            let mut parts = Vec::new();
            split_parts(s, &mut parts);
            parts
        };
        assert_eq!(parts("HTTPServer"), vec!["HTTP", "Server"]);
        assert_eq!(parts("utf8Decode"), vec!["utf8", "Decode"]);
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

    /// The chunking as first written (a `String` per chunk and per part): `chunks`, which
    /// slices the text instead, must give exactly its chunks.
    mod as_first_written {
        use super::super::{Chunk, is_cjk, is_joiner};

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
                out.push(Chunk {
                    parts: if parts.len() > 1 { parts } else { Vec::new() },
                    whole: inner.to_string(),
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
    }

    #[test]
    fn chunks_are_those_of_the_first_chunking() {
        // Pieces that exercise every rule, strung together at random (a fixed seed).
        const PIECES: &[&str] = &[
            "parse",
            "Config",
            "HTTP",
            "Server",
            "utf8",
            "Decode",
            "x1Y2z3",
            "v1.2.3",
            "_",
            ".",
            "::",
            "-",
            "/",
            "\\",
            "@",
            "'",
            " ",
            "  ",
            ", ",
            "(",
            ")",
            "数据库",
            "東",
            "データ",
            "한국어",
            "Größe",
            "İstanbul",
            "ΣΊΣΥΦΟΣ",
            "naïve",
            "🚀",
            "\n",
            "42",
            "A",
            "b",
            "É",
            "\u{00A0}",
            "ß",
            "ǅ",
            "Ⅻ",
            "٣",
            "__init__",
            "O'Reilly's",
        ];
        let mut seed: u64 = 32;
        let mut next = |n: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as usize) % n
        };
        for _ in 0..5_000 {
            let len = 1 + next(12);
            let text: String = (0..len).map(|_| PIECES[next(PIECES.len())]).collect();
            assert_eq!(chunks(&text), as_first_written::chunks(&text), "{text:?}");
        }
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
