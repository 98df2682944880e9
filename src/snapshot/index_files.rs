//! The derived index files of the plain-file export (`indexes/`, docs/index-files.md):
//! `corpus.dat` (the indexed sections), `terms.idx` (the term dictionary), `positions.idx`
//! (postings with token positions), `references.idx` (the reference graph) and `meta.toml`.
//!
//! They exist for other programs: kbdb never reads them back (an import rebuilds its own
//! index). Encoding is pure ([`encode_indexes`]); [`write_indexes`] writes the five files.
//! The readers validate everything and never panic on hostile bytes.
//!
//! Every binary file starts with a 9-byte header: 4 magic bytes, the version byte (1) and a
//! u32 record count; all integers are little-endian.

use std::collections::BTreeMap;
use std::path::Path;

use thiserror::Error;

use crate::index::analyzer::Normalizer;
use crate::text::markers::MarkerType;
use crate::types::kbid::{KBID_LEN, is_kbid};

/// The format version of every file (the version byte, and `format_version` of `meta.toml`).
pub const FORMAT_VERSION: u8 = 1;
/// Bytes of every binary file's header: magic, version, u32 count.
pub const HEADER_LEN: usize = 9;
pub const TERMS_MAGIC: [u8; 4] = *b"KBTI";
pub const POSITIONS_MAGIC: [u8; 4] = *b"KBPO";
pub const CORPUS_MAGIC: [u8; 4] = *b"KBCO";
pub const REFERENCES_MAGIC: [u8; 4] = *b"KBRF";
pub const META_FILE: &str = "meta.toml";
pub const TERMS_FILE: &str = "terms.idx";
pub const POSITIONS_FILE: &str = "positions.idx";
pub const CORPUS_FILE: &str = "corpus.dat";
pub const REFERENCES_FILE: &str = "references.idx";
/// The analyzer whose terms the files hold (`meta.toml` `analyzer`).
pub const ANALYZER_NAME: &str = "kbdb";
/// Longest term written, in UTF-8 bytes; longer terms (and empty ones) are skipped, their
/// positions left unused.
pub const MAX_TERM_BYTES: usize = 255;
/// Longest reference target, in UTF-8 bytes (its u16 length field); a longer one is an error.
pub const MAX_TARGET_BYTES: usize = u16::MAX as usize;
/// Longest context snippet, in UTF-8 bytes; longer ones are cut at the last char boundary
/// within the limit.
pub const MAX_SNIPPET_BYTES: usize = u16::MAX as usize;
/// `marker_type` codes of `references.idx`.
pub const MARKER_LINK: u8 = 0;
pub const MARKER_URI: u8 = 1;
pub const MARKER_WIKILINK: u8 = 2;

/// What is wrong with an index file (or with what was to be encoded into it).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{file}: {message}")]
pub struct IndexFileError {
    /// The file concerned (`terms.idx`, …).
    pub file: &'static str,
    pub message: String,
}

fn err(file: &'static str, message: impl Into<String>) -> IndexFileError {
    IndexFileError {
        file,
        message: message.into(),
    }
}

/// One section to index. `terms` are its analyzed terms in text order ([`analyze`]); a term's
/// position is its index in this list, and the list's length is the section's token count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedSection {
    pub kbid: String,
    pub section_type: String,
    pub terms: Vec<String>,
}

/// One reference marker (an edge of the reference graph).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferenceEntry {
    /// The kbid of the section holding the marker.
    pub source: String,
    /// The marker's ordinal among its section's markers (text order).
    pub ordinal: u32,
    /// [`MARKER_LINK`], [`MARKER_URI`] or [`MARKER_WIKILINK`].
    pub marker_type: u8,
    /// `kbdb://section/<kbid>` or `kbdb://document/<docid>[#anchor]`.
    pub target: String,
    pub snippet: String,
}

/// One row of `corpus.dat`; its index in the file is the section's ordinal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorpusEntry {
    pub kbid: String,
    pub token_count: u32,
    pub section_type: String,
}

/// One row of `terms.idx`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermEntry {
    pub term: String,
    /// Number of sections holding the term (postings in its list).
    pub doc_freq: u32,
    /// Byte offset of the term's postings list from the start of `positions.idx`.
    pub offset: u64,
}

/// The occurrences of a term in one section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posting {
    /// The section's ordinal (its index in `corpus.dat`).
    pub ordinal: u32,
    /// Token positions, strictly ascending, never empty.
    pub positions: Vec<u32>,
}

/// Counts of what was written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexStats {
    pub sections: u64,
    pub terms: u64,
    /// (term, section) pairs: the sum of all document frequencies.
    pub postings: u64,
    pub references: u64,
    /// Term occurrences not written: empty or longer than [`MAX_TERM_BYTES`].
    pub skipped_terms: u64,
    /// Snippets cut to [`MAX_SNIPPET_BYTES`].
    pub truncated_snippets: u64,
}

/// The five files, encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexFiles {
    pub meta: String,
    pub terms: Vec<u8>,
    pub positions: Vec<u8>,
    pub corpus: Vec<u8>,
    pub references: Vec<u8>,
    pub stats: IndexStats,
}

/// The analyzed terms of `text`, in text order, exactly as kbdb's own index analyzes it
/// (identifier-aware tokens, each whole identifier followed by its parts; lowercased; English
/// stemming). Empty terms are dropped.
pub fn analyze(text: &str) -> Vec<String> {
    let mut terms = Normalizer::default().terms(text);
    terms.retain(|t| !t.is_empty());
    terms
}

/// The `references.idx` code of a marker type.
pub fn marker_type_code(t: MarkerType) -> u8 {
    match t {
        MarkerType::Link => MARKER_LINK,
        MarkerType::Uri => MARKER_URI,
        MarkerType::Wikilink => MARKER_WIKILINK,
    }
}

/// `meta.toml`: the counts of the other files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexMeta {
    pub format_version: u32,
    pub analyzer: String,
    pub sections: u64,
    pub terms: u64,
    pub postings: u64,
    pub references: u64,
    /// RFC 3339.
    pub built_at: String,
}

use super::vectors_idx::toml_string;

impl IndexMeta {
    pub fn to_toml(&self) -> String {
        format!(
            "# Derived index files of a kbdb export (docs/index-files.md). Terms are the \"kbdb\"\n\
             # analyzer's terms: identifier-aware tokens, lowercased, English-stemmed.\n\
             [index]\n\
             format_version = {}\n\
             analyzer = {}\n\
             sections = {}\n\
             terms = {}\n\
             postings = {}\n\
             references = {}\n\
             built_at = {}\n",
            self.format_version,
            toml_string(&self.analyzer),
            self.sections,
            self.terms,
            self.postings,
            self.references,
            toml_string(&self.built_at)
        )
    }

    /// Parse `meta.toml`; every key is required with its type (errors name the key),
    /// `format_version` must be 1, `built_at` RFC 3339. Unknown keys are ignored.
    pub fn from_toml(text: &str) -> Result<Self, IndexFileError> {
        let e = |m: String| err(META_FILE, m);
        let doc: toml::Table =
            toml::from_str(text).map_err(|x| e(format!("not valid TOML: {x}")))?;
        let table = match doc.get("index") {
            Some(toml::Value::Table(t)) => t,
            Some(_) => return Err(e("`index` must be a table ([index])".into())),
            None => return Err(e("missing table [index]".into())),
        };
        let get = |key: &str| {
            table
                .get(key)
                .ok_or_else(|| e(format!("missing key `index.{key}`")))
        };
        let string = |key: &str| match get(key)? {
            toml::Value::String(s) => Ok(s.clone()),
            other => Err(e(format!(
                "`index.{key}` must be a string, found {}",
                other.type_str()
            ))),
        };
        let count = |key: &str| match get(key)? {
            toml::Value::Integer(i) if *i >= 0 => Ok(*i as u64),
            toml::Value::Integer(i) => Err(e(format!("`index.{key}` is {i}; it must be ≥ 0"))),
            other => Err(e(format!(
                "`index.{key}` must be an integer, found {}",
                other.type_str()
            ))),
        };
        let format_version = count("format_version")?;
        if format_version != u64::from(FORMAT_VERSION) {
            return Err(e(format!(
                "`index.format_version` is {format_version}; this kbdb reads version {FORMAT_VERSION}"
            )));
        }
        let analyzer = string("analyzer")?;
        let meta = IndexMeta {
            format_version: format_version as u32,
            analyzer,
            sections: count("sections")?,
            terms: count("terms")?,
            postings: count("postings")?,
            references: count("references")?,
            built_at: string("built_at")?,
        };
        if chrono::DateTime::parse_from_rfc3339(&meta.built_at).is_err() {
            return Err(e(format!(
                "`index.built_at` is {:?}, not an RFC 3339 time",
                meta.built_at
            )));
        }
        Ok(meta)
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding

struct Out(Vec<u8>);

impl Out {
    fn new(magic: [u8; 4], count: u32) -> Out {
        let mut v = Vec::with_capacity(HEADER_LEN);
        v.extend_from_slice(&magic);
        v.push(FORMAT_VERSION);
        v.extend_from_slice(&count.to_le_bytes());
        Out(v)
    }
    fn u8(&mut self, x: u8) {
        self.0.push(x);
    }
    fn u16(&mut self, x: u16) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn u32(&mut self, x: u32) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn u64(&mut self, x: u64) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
}

fn count_u32(file: &'static str, what: &str, n: usize) -> Result<u32, IndexFileError> {
    u32::try_from(n).map_err(|_| err(file, format!("{n} {what} do not fit a u32 count")))
}

/// `s` cut to at most `max` bytes at a char boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn valid_target(t: &str) -> bool {
    let rest = t
        .strip_prefix("kbdb://section/")
        .or_else(|| t.strip_prefix("kbdb://document/"));
    rest.is_some_and(|r| !r.is_empty())
}

/// Encode the five files. Errors (nothing is encoded) for a kbid that is not a kbid, a kbid
/// listed twice, a section with more than `u32::MAX` terms, a reference with an unknown marker
/// type, a target that is not a `kbdb://section/…` or `kbdb://document/…` URI or longer than
/// [`MAX_TARGET_BYTES`], two references with the same (source, ordinal), and a `built_at` that
/// is not RFC 3339. Terms that are empty or longer than [`MAX_TERM_BYTES`] are skipped and
/// snippets longer than [`MAX_SNIPPET_BYTES`] cut (both counted in the stats).
pub fn encode_indexes(
    sections: &[IndexedSection],
    refs: &[ReferenceEntry],
    built_at: &str,
) -> Result<IndexFiles, IndexFileError> {
    if chrono::DateTime::parse_from_rfc3339(built_at).is_err() {
        return Err(err(
            META_FILE,
            format!("built_at {built_at:?} is not an RFC 3339 time"),
        ));
    }
    let mut stats = IndexStats::default();

    // corpus.dat: sections by kbid; the ordinal is the index in this order.
    let mut order: Vec<&IndexedSection> = sections.iter().collect();
    order.sort_by(|a, b| a.kbid.cmp(&b.kbid));
    let mut corpus = Out::new(
        CORPUS_MAGIC,
        count_u32(CORPUS_FILE, "sections", order.len())?,
    );
    for (i, s) in order.iter().enumerate() {
        if !is_kbid(&s.kbid) {
            return Err(err(CORPUS_FILE, format!("{:?} is not a kbid", s.kbid)));
        }
        if i > 0 && order[i - 1].kbid == s.kbid {
            return Err(err(
                CORPUS_FILE,
                format!("section {} is listed twice", s.kbid),
            ));
        }
        corpus.bytes(s.kbid.as_bytes());
        corpus.u32(count_u32(CORPUS_FILE, "terms of a section", s.terms.len())?);
        corpus.u32(count_u32(
            CORPUS_FILE,
            "bytes of a section type",
            s.section_type.len(),
        )?);
        corpus.bytes(s.section_type.as_bytes());
    }
    stats.sections = order.len() as u64;

    // Postings: term → [(ordinal, positions)], built in ordinal order so lists are sorted.
    let mut postings: BTreeMap<&str, Vec<Posting>> = BTreeMap::new();
    for (ordinal, s) in order.iter().enumerate() {
        let ordinal = ordinal as u32; // fits: checked by the corpus count above
        for (position, term) in s.terms.iter().enumerate() {
            let position = position as u32; // fits: checked by the token count above
            if term.is_empty() || term.len() > MAX_TERM_BYTES {
                stats.skipped_terms += 1;
                continue;
            }
            let list = postings.entry(term.as_str()).or_default();
            match list.last_mut() {
                Some(p) if p.ordinal == ordinal => p.positions.push(position),
                _ => list.push(Posting {
                    ordinal,
                    positions: vec![position],
                }),
            }
        }
    }
    let term_count = count_u32(TERMS_FILE, "terms", postings.len())?;
    let mut terms = Out::new(TERMS_MAGIC, term_count);
    let mut positions = Out::new(POSITIONS_MAGIC, term_count);
    for (term, list) in &postings {
        terms.u16(term.len() as u16); // ≤ MAX_TERM_BYTES
        terms.bytes(term.as_bytes());
        terms.u32(list.len() as u32); // ≤ the section count
        terms.u64(positions.0.len() as u64);
        for p in list {
            positions.u32(p.ordinal);
            positions.u32(p.positions.len() as u32); // ≤ the section's token count
            for &x in &p.positions {
                positions.u32(x);
            }
        }
        stats.postings += list.len() as u64;
    }
    stats.terms = postings.len() as u64;

    // references.idx: by (source, ordinal).
    let mut edges: Vec<&ReferenceEntry> = refs.iter().collect();
    edges.sort_by(|a, b| (&a.source, a.ordinal).cmp(&(&b.source, b.ordinal)));
    let mut references = Out::new(
        REFERENCES_MAGIC,
        count_u32(REFERENCES_FILE, "references", edges.len())?,
    );
    for (i, r) in edges.iter().enumerate() {
        let e = |m: String| {
            err(
                REFERENCES_FILE,
                format!("reference {} #{}: {m}", r.source, r.ordinal),
            )
        };
        if !is_kbid(&r.source) {
            return Err(e("the source is not a kbid".into()));
        }
        if i > 0 && edges[i - 1].source == r.source && edges[i - 1].ordinal == r.ordinal {
            return Err(e("listed twice".into()));
        }
        if r.marker_type > MARKER_WIKILINK {
            return Err(e(format!(
                "unknown marker type {} (0 link, 1 uri, 2 wikilink)",
                r.marker_type
            )));
        }
        if !valid_target(&r.target) {
            return Err(e(format!(
                "target {:?} is not a kbdb://section/… or kbdb://document/… URI",
                r.target
            )));
        }
        if r.target.len() > MAX_TARGET_BYTES {
            return Err(e(format!(
                "target has {} bytes; the limit is {MAX_TARGET_BYTES}",
                r.target.len()
            )));
        }
        let snippet = cut(&r.snippet, MAX_SNIPPET_BYTES);
        if snippet.len() < r.snippet.len() {
            stats.truncated_snippets += 1;
        }
        references.bytes(r.source.as_bytes());
        references.u32(r.ordinal);
        references.u8(r.marker_type);
        references.u16(r.target.len() as u16);
        references.bytes(r.target.as_bytes());
        references.u16(snippet.len() as u16);
        references.bytes(snippet.as_bytes());
    }
    stats.references = edges.len() as u64;

    let meta = IndexMeta {
        format_version: u32::from(FORMAT_VERSION),
        analyzer: ANALYZER_NAME.to_string(),
        sections: stats.sections,
        terms: stats.terms,
        postings: stats.postings,
        references: stats.references,
        built_at: built_at.to_string(),
    };
    Ok(IndexFiles {
        meta: meta.to_toml(),
        terms: terms.0,
        positions: positions.0,
        corpus: corpus.0,
        references: references.0,
        stats,
    })
}

/// Encode ([`encode_indexes`]) and write the five files into `dir` (created when missing),
/// `meta.toml` last. Invalid input is an `InvalidInput` error and writes nothing.
pub fn write_indexes(
    dir: &Path,
    sections: &[IndexedSection],
    refs: &[ReferenceEntry],
    built_at: &str,
) -> std::io::Result<IndexStats> {
    let files = encode_indexes(sections, refs, built_at)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    std::fs::create_dir_all(dir)?;
    for (name, bytes) in [
        (CORPUS_FILE, &files.corpus),
        (TERMS_FILE, &files.terms),
        (POSITIONS_FILE, &files.positions),
        (REFERENCES_FILE, &files.references),
    ] {
        std::fs::write(dir.join(name), bytes)?;
    }
    std::fs::write(dir.join(META_FILE), &files.meta)?;
    Ok(files.stats)
}

// ---------------------------------------------------------------------------------------------
// Decoding

struct Cursor<'a> {
    file: &'static str,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// Check the header (magic, version) and return a cursor after it and the count.
    fn open(
        file: &'static str,
        bytes: &'a [u8],
        magic: [u8; 4],
    ) -> Result<(Cursor<'a>, u32), IndexFileError> {
        if bytes.len() >= 4 && bytes[..4] != magic {
            return Err(err(
                file,
                format!(
                    "bad magic {:?}, expected {:?}",
                    String::from_utf8_lossy(&bytes[..4]),
                    String::from_utf8_lossy(&magic)
                ),
            ));
        }
        if bytes.len() < HEADER_LEN {
            return Err(err(
                file,
                format!(
                    "truncated header: {} bytes, the header has {HEADER_LEN}",
                    bytes.len()
                ),
            ));
        }
        if bytes[4] != FORMAT_VERSION {
            return Err(err(
                file,
                format!(
                    "unsupported version {}; this kbdb reads version {FORMAT_VERSION}",
                    bytes[4]
                ),
            ));
        }
        let count = u32::from_le_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
        Ok((
            Cursor {
                file,
                bytes,
                pos: HEADER_LEN,
            },
            count,
        ))
    }

    fn err(&self, message: impl std::fmt::Display) -> IndexFileError {
        err(self.file, format!("at byte {}: {message}", self.pos))
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], IndexFileError> {
        if n > self.remaining() {
            return Err(self.err(format_args!(
                "truncated: {what} needs {n} bytes, {} left",
                self.remaining()
            )));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], IndexFileError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    fn u8(&mut self, what: &str) -> Result<u8, IndexFileError> {
        Ok(self.array::<1>(what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, IndexFileError> {
        self.array(what).map(u16::from_le_bytes)
    }
    fn u32(&mut self, what: &str) -> Result<u32, IndexFileError> {
        self.array(what).map(u32::from_le_bytes)
    }
    fn u64(&mut self, what: &str) -> Result<u64, IndexFileError> {
        self.array(what).map(u64::from_le_bytes)
    }

    fn str(&mut self, n: usize, what: &str) -> Result<&'a str, IndexFileError> {
        let start = self.pos;
        let b = self.take(n, what)?;
        std::str::from_utf8(b).map_err(|_| {
            err(
                self.file,
                format!("at byte {start}: {what} is not valid UTF-8"),
            )
        })
    }

    fn kbid(&mut self, what: &str) -> Result<&'a str, IndexFileError> {
        let start = self.pos;
        let b = self.take(KBID_LEN, what)?;
        match std::str::from_utf8(b) {
            Ok(s) if is_kbid(s) => Ok(s),
            _ => Err(err(
                self.file,
                format!(
                    "at byte {start}: {what} {:?} is not a kbid",
                    String::from_utf8_lossy(b)
                ),
            )),
        }
    }

    fn finish(&self) -> Result<(), IndexFileError> {
        if self.remaining() > 0 {
            return Err(self.err(format_args!(
                "{} trailing bytes after the last record",
                self.remaining()
            )));
        }
        Ok(())
    }
}

/// Capacity for `count` records of at least `min_len` bytes: never more than the bytes left
/// can hold (hostile counts allocate nothing).
fn capacity(count: u32, cur: &Cursor, min_len: usize) -> usize {
    (count as usize).min(cur.remaining() / min_len)
}

/// Read and validate `corpus.dat`: kbids strictly ascending, UTF-8 section types, no
/// trailing bytes.
pub fn read_corpus(bytes: &[u8]) -> Result<Vec<CorpusEntry>, IndexFileError> {
    let (mut cur, count) = Cursor::open(CORPUS_FILE, bytes, CORPUS_MAGIC)?;
    let mut out: Vec<CorpusEntry> = Vec::with_capacity(capacity(count, &cur, KBID_LEN + 8));
    for _ in 0..count {
        let kbid = cur.kbid("kbid")?;
        if let Some(prev) = out.last()
            && prev.kbid.as_str() >= kbid
        {
            return Err(cur.err(format_args!(
                "section {kbid} is not above the previous one ({}): sections must be sorted \
                 by kbid with no duplicates",
                prev.kbid
            )));
        }
        let token_count = cur.u32("token count")?;
        let len = cur.u32("section type length")? as usize;
        let section_type = cur.str(len, "section type")?;
        out.push(CorpusEntry {
            kbid: kbid.to_string(),
            token_count,
            section_type: section_type.to_string(),
        });
    }
    cur.finish()?;
    Ok(out)
}

/// Read and validate `terms.idx`: terms of 1..=255 UTF-8 bytes strictly ascending (bytewise),
/// document frequencies ≥ 1, postings offsets strictly ascending from the end of the
/// `positions.idx` header, no trailing bytes.
pub fn read_terms(bytes: &[u8]) -> Result<Vec<TermEntry>, IndexFileError> {
    let (mut cur, count) = Cursor::open(TERMS_FILE, bytes, TERMS_MAGIC)?;
    let mut out: Vec<TermEntry> = Vec::with_capacity(capacity(count, &cur, 2 + 1 + 4 + 8));
    for _ in 0..count {
        let len = cur.u16("term length")? as usize;
        if len == 0 || len > MAX_TERM_BYTES {
            return Err(cur.err(format_args!(
                "term length {len} is outside 1..={MAX_TERM_BYTES}"
            )));
        }
        let term = cur.str(len, "term")?;
        if let Some(prev) = out.last()
            && prev.term.as_str() >= term
        {
            return Err(cur.err(format_args!(
                "term {term:?} is not above the previous one ({:?}): terms must be sorted \
                 bytewise with no duplicates",
                prev.term
            )));
        }
        let doc_freq = cur.u32("document frequency")?;
        if doc_freq == 0 {
            return Err(cur.err(format_args!("term {term:?} has document frequency 0")));
        }
        let offset = cur.u64("postings offset")?;
        let ok = match out.last() {
            None => offset == HEADER_LEN as u64,
            Some(prev) => offset > prev.offset,
        };
        if !ok {
            return Err(cur.err(format_args!(
                "postings offset {offset} of term {term:?} is out of order (the first list \
                 starts at {HEADER_LEN}, each next one after the previous)"
            )));
        }
        out.push(TermEntry {
            term: term.to_string(),
            doc_freq,
            offset,
        });
    }
    cur.finish()?;
    Ok(out)
}

/// The entry of `term` in a dictionary read by [`read_terms`] (binary search).
pub fn find_term<'a>(terms: &'a [TermEntry], term: &str) -> Option<&'a TermEntry> {
    terms
        .binary_search_by(|t| t.term.as_str().cmp(term))
        .ok()
        .map(|i| &terms[i])
}

fn read_list(cur: &mut Cursor, doc_freq: u32) -> Result<Vec<Posting>, IndexFileError> {
    let mut out: Vec<Posting> = Vec::with_capacity(capacity(doc_freq, cur, 12));
    for _ in 0..doc_freq {
        let ordinal = cur.u32("section ordinal")?;
        if let Some(prev) = out.last()
            && prev.ordinal >= ordinal
        {
            return Err(cur.err(format_args!(
                "section ordinal {ordinal} is not above the previous one ({})",
                prev.ordinal
            )));
        }
        let n = cur.u32("position count")? as usize;
        if n == 0 {
            return Err(cur.err("position count 0"));
        }
        let raw = cur.take(n.saturating_mul(4), "positions")?;
        let positions: Vec<u32> = raw
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if positions.windows(2).any(|w| w[0] >= w[1]) {
            return Err(cur.err(format_args!(
                "the positions of section ordinal {ordinal} are not strictly ascending"
            )));
        }
        out.push(Posting { ordinal, positions });
    }
    Ok(out)
}

/// The postings of one term (an entry of [`read_terms`]) from `positions.idx`: checks the
/// header and the list itself (ordinals strictly ascending, position counts ≥ 1, positions
/// strictly ascending), not the rest of the file.
pub fn read_postings(positions: &[u8], entry: &TermEntry) -> Result<Vec<Posting>, IndexFileError> {
    let (mut cur, _) = Cursor::open(POSITIONS_FILE, positions, POSITIONS_MAGIC)?;
    if entry.offset < HEADER_LEN as u64 || entry.offset > positions.len() as u64 {
        return Err(err(
            POSITIONS_FILE,
            format!(
                "postings offset {} of term {:?} is outside the file ({} bytes)",
                entry.offset,
                entry.term,
                positions.len()
            ),
        ));
    }
    cur.pos = entry.offset as usize;
    read_list(&mut cur, entry.doc_freq)
}

/// Read and validate `terms.idx` and `positions.idx` together: the same term count, each list
/// exactly at its offset, contiguous, and nothing after the last one.
pub fn read_all_postings(
    terms: &[u8],
    positions: &[u8],
) -> Result<Vec<(TermEntry, Vec<Posting>)>, IndexFileError> {
    let entries = read_terms(terms)?;
    let (mut cur, count) = Cursor::open(POSITIONS_FILE, positions, POSITIONS_MAGIC)?;
    if count as usize != entries.len() {
        return Err(err(
            POSITIONS_FILE,
            format!(
                "holds {count} postings lists; terms.idx has {} terms",
                entries.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        if entry.offset != cur.pos as u64 {
            return Err(cur.err(format_args!(
                "the postings of term {:?} should start here, terms.idx says at {}",
                entry.term, entry.offset
            )));
        }
        let list = read_list(&mut cur, entry.doc_freq)?;
        out.push((entry, list));
    }
    cur.finish()?;
    Ok(out)
}

/// Read and validate `references.idx`: source kbids, (source, ordinal) strictly ascending,
/// marker types 0..=2, targets `kbdb://section/…` or `kbdb://document/…`, UTF-8 text, no
/// trailing bytes.
pub fn read_references(bytes: &[u8]) -> Result<Vec<ReferenceEntry>, IndexFileError> {
    let (mut cur, count) = Cursor::open(REFERENCES_FILE, bytes, REFERENCES_MAGIC)?;
    let mut out: Vec<ReferenceEntry> =
        Vec::with_capacity(capacity(count, &cur, KBID_LEN + 4 + 1 + 2 + 2));
    for _ in 0..count {
        let source = cur.kbid("source kbid")?;
        let ordinal = cur.u32("ordinal")?;
        if let Some(prev) = out.last()
            && (prev.source.as_str(), prev.ordinal) >= (source, ordinal)
        {
            return Err(cur.err(format_args!(
                "reference ({source}, {ordinal}) is not above the previous one ({}, {}): \
                 references must be sorted by (source, ordinal) with no duplicates",
                prev.source, prev.ordinal
            )));
        }
        let marker_type = cur.u8("marker type")?;
        if marker_type > MARKER_WIKILINK {
            return Err(cur.err(format_args!(
                "unknown marker type {marker_type} (0 link, 1 uri, 2 wikilink)"
            )));
        }
        let len = cur.u16("target length")? as usize;
        let target = cur.str(len, "target")?;
        if !valid_target(target) {
            return Err(cur.err(format_args!(
                "target {target:?} is not a kbdb://section/… or kbdb://document/… URI"
            )));
        }
        let len = cur.u16("snippet length")? as usize;
        let snippet = cur.str(len, "snippet")?;
        out.push(ReferenceEntry {
            source: source.to_string(),
            ordinal,
            marker_type,
            target: target.to_string(),
            snippet: snippet.to_string(),
        });
    }
    cur.finish()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Valid kbids (the last character carries two zero padding bits).
    const KA: &str = "aaaaaaaaaaaaaaaaaaaaaaaaa0";
    const KB: &str = "bbbbbbbbbbbbbbbbbbbbbbbbb0";
    const KC: &str = "ccccccccccccccccccccccccc0";
    const BUILT: &str = "2026-06-23T10:00:00Z";

    fn terms(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| s.to_string()).collect()
    }

    /// Three sections given out of order. Ordinals: A 0, B 1, C 2.
    fn corpus() -> Vec<IndexedSection> {
        let long = "x".repeat(MAX_TERM_BYTES + 1);
        vec![
            IndexedSection {
                kbid: KC.into(),
                section_type: "text/x-rust".into(),
                terms: terms(&["deploy", &long, "friday", ""]),
            },
            IndexedSection {
                kbid: KA.into(),
                section_type: "text/markdown".into(),
                terms: terms(&["deploy", "on", "tuesday"]),
            },
            IndexedSection {
                kbid: KB.into(),
                section_type: "text/markdown".into(),
                terms: terms(&["tuesday", "meet", "tuesday"]),
            },
        ]
    }

    fn refs() -> Vec<ReferenceEntry> {
        vec![
            ReferenceEntry {
                source: KB.into(),
                ordinal: 0,
                marker_type: MARKER_WIKILINK,
                target: "kbdb://document/adr/7#context".into(),
                snippet: "see [[adr/7#context]] for why".into(),
            },
            ReferenceEntry {
                source: KA.into(),
                ordinal: 1,
                marker_type: MARKER_URI,
                target: format!("kbdb://section/{KB}"),
                snippet: format!("details in kbdb://section/{KB} ☃"),
            },
            ReferenceEntry {
                source: KA.into(),
                ordinal: 0,
                marker_type: MARKER_LINK,
                target: "kbdb://document/notes/two".into(),
                snippet: "[two](two.md)".into(),
            },
        ]
    }

    fn files() -> IndexFiles {
        encode_indexes(&corpus(), &refs(), BUILT).unwrap()
    }

    fn p(ordinal: u32, positions: &[u32]) -> Posting {
        Posting {
            ordinal,
            positions: positions.to_vec(),
        }
    }

    #[test]
    fn write_and_read_back_a_small_corpus() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("indexes");
        let stats = write_indexes(&dir, &corpus(), &refs(), BUILT).unwrap();
        assert_eq!(
            stats,
            IndexStats {
                sections: 3,
                terms: 5,
                postings: 7,
                references: 3,
                skipped_terms: 2,
                truncated_snippets: 0,
            }
        );
        let read = |name| std::fs::read(dir.join(name)).unwrap();

        let c = read_corpus(&read(CORPUS_FILE)).unwrap();
        let rows: Vec<(&str, u32, &str)> = c
            .iter()
            .map(|e| (e.kbid.as_str(), e.token_count, e.section_type.as_str()))
            .collect();
        assert_eq!(
            rows,
            vec![
                (KA, 3, "text/markdown"),
                (KB, 3, "text/markdown"),
                (KC, 4, "text/x-rust"),
            ]
        );

        let (t, pos) = (read(TERMS_FILE), read(POSITIONS_FILE));
        let all = read_all_postings(&t, &pos).unwrap();
        let got: Vec<(&str, u32, Vec<Posting>)> = all
            .iter()
            .map(|(e, l)| (e.term.as_str(), e.doc_freq, l.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("deploy", 2, vec![p(0, &[0]), p(2, &[0])]),
                ("friday", 1, vec![p(2, &[2])]),
                ("meet", 1, vec![p(1, &[1])]),
                ("on", 1, vec![p(0, &[1])]),
                ("tuesday", 2, vec![p(0, &[2]), p(1, &[0, 2])]),
            ]
        );
        let dict = read_terms(&t).unwrap();
        let e = find_term(&dict, "tuesday").unwrap();
        assert_eq!(
            read_postings(&pos, e).unwrap(),
            vec![p(0, &[2]), p(1, &[0, 2])]
        );
        assert!(find_term(&dict, "monday").is_none());
        // Exact bytes of the dictionary's start and of the first postings list.
        assert_eq!(
            t[..HEADER_LEN + 2 + 6 + 4 + 8],
            [
                &b"KBTI"[..],
                &[1, 5, 0, 0, 0],
                &[6, 0],
                b"deploy",
                &[2, 0, 0, 0],
                &[9, 0, 0, 0, 0, 0, 0, 0],
            ]
            .concat()[..]
        );
        assert_eq!(
            pos[..HEADER_LEN + 24],
            [
                &b"KBPO"[..],
                &[1, 5, 0, 0, 0],
                &[0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0], // ordinal 0, 1 position: 0
                &[2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0], // ordinal 2, 1 position: 0
            ]
            .concat()[..]
        );

        let r = read_references(&read(REFERENCES_FILE)).unwrap();
        let mut want = refs();
        want.sort_by(|a, b| (&a.source, a.ordinal).cmp(&(&b.source, b.ordinal)));
        assert_eq!(r, want);

        let meta = std::fs::read_to_string(dir.join(META_FILE)).unwrap();
        assert_eq!(meta, files().meta);
        assert_eq!(
            IndexMeta::from_toml(&meta).unwrap(),
            IndexMeta {
                format_version: 1,
                analyzer: "kbdb".into(),
                sections: 3,
                terms: 5,
                postings: 7,
                references: 3,
                built_at: BUILT.into(),
            }
        );
    }

    #[test]
    fn meta_exact_text_and_rejections() {
        assert_eq!(
            files().meta,
            "# Derived index files of a kbdb export (docs/index-files.md). Terms are the \"kbdb\"
# analyzer's terms: identifier-aware tokens, lowercased, English-stemmed.
[index]
format_version = 1
analyzer = \"kbdb\"
sections = 3
terms = 5
postings = 7
references = 3
built_at = \"2026-06-23T10:00:00Z\"
"
        );
        let text = files().meta;
        for key in ["format_version", "analyzer", "sections", "built_at"] {
            let without: String = text
                .lines()
                .filter(|l| !l.starts_with(key))
                .map(|l| format!("{l}\n"))
                .collect();
            let e = IndexMeta::from_toml(&without).unwrap_err().to_string();
            assert_eq!(e, format!("meta.toml: missing key `index.{key}`"));
        }
        for (from, to, want) in [
            (
                "terms = 5",
                "terms = \"5\"",
                "`index.terms` must be an integer",
            ),
            ("terms = 5", "terms = -5", "`index.terms` is -5"),
            (
                "format_version = 1",
                "format_version = 2",
                "reads version 1",
            ),
            (
                "analyzer = \"kbdb\"",
                "analyzer = 1",
                "`index.analyzer` must be a string",
            ),
            (
                "built_at = \"2026-06-23T10:00:00Z\"",
                "built_at = \"soon\"",
                "not an RFC 3339",
            ),
        ] {
            let e = IndexMeta::from_toml(&text.replace(from, to))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{to}: {e}");
        }
    }

    #[test]
    fn empty_input_gives_valid_empty_files() {
        let f = encode_indexes(&[], &[], BUILT).unwrap();
        assert_eq!(f.corpus, [&b"KBCO"[..], &[1, 0, 0, 0, 0]].concat());
        assert_eq!(read_corpus(&f.corpus).unwrap(), vec![]);
        assert_eq!(read_all_postings(&f.terms, &f.positions).unwrap(), vec![]);
        assert_eq!(read_references(&f.references).unwrap(), vec![]);
    }

    #[test]
    fn analyze_uses_the_kbdb_analyzer() {
        let t = analyze("Running parseConfigFile twice");
        assert_eq!(t[0], "run");
        assert!(t.contains(&"parseconfigfil".to_string()), "{t:?}");
        assert!(t.contains(&"config".to_string()), "{t:?}");
        assert!(t.iter().all(|t| !t.is_empty()));
        let s = IndexedSection {
            kbid: KA.into(),
            section_type: "text/markdown".into(),
            terms: analyze("running runs ran"),
        };
        let f = encode_indexes(&[s], &[], BUILT).unwrap();
        let all = read_all_postings(&f.terms, &f.positions).unwrap();
        let run = all.iter().find(|(e, _)| e.term == "run").unwrap();
        assert_eq!(run.1, vec![p(0, &[0, 1])]);
        assert_eq!(marker_type_code(MarkerType::Wikilink), MARKER_WIKILINK);
    }

    #[test]
    fn snippets_are_cut_at_a_char_boundary() {
        let mut r = refs();
        r[0].snippet = "é".repeat(40_000); // 80 000 bytes
        let f = encode_indexes(&corpus(), &r, BUILT).unwrap();
        assert_eq!(f.stats.truncated_snippets, 1);
        let back = read_references(&f.references).unwrap();
        let s = &back.iter().find(|x| x.source == KB).unwrap().snippet;
        assert_eq!(s.len(), MAX_SNIPPET_BYTES - 1);
        assert_eq!(s.chars().count(), 32_767);
        assert_eq!(cut("aé", 2), "a");
        assert_eq!(cut("aé", 3), "aé");
    }

    #[test]
    fn invalid_input_is_rejected() {
        let bad = |sections: Vec<IndexedSection>, refs: Vec<ReferenceEntry>, built: &str| {
            encode_indexes(&sections, &refs, built)
                .unwrap_err()
                .to_string()
        };
        let mut s = corpus();
        s[0].kbid = "not-a-kbid".into();
        assert!(bad(s, refs(), BUILT).contains("\"not-a-kbid\" is not a kbid"));
        let mut s = corpus();
        s[0].kbid = KA.into();
        assert!(bad(s, refs(), BUILT).contains("listed twice"));
        assert!(bad(corpus(), refs(), "today").contains("not an RFC 3339 time"));
        let mut r = refs();
        r[0].marker_type = 3;
        assert!(bad(corpus(), r, BUILT).contains("unknown marker type 3"));
        let mut r = refs();
        r[0].target = "https://example.com".into();
        assert!(bad(corpus(), r, BUILT).contains("is not a kbdb://section/"));
        let mut r = refs();
        r[0].target = format!("kbdb://document/{}", "d".repeat(MAX_TARGET_BYTES));
        assert!(bad(corpus(), r, BUILT).contains("the limit is 65535"));
        let mut r = refs();
        r[1].ordinal = 0;
        assert!(bad(corpus(), r, BUILT).contains("listed twice"));
        let mut r = refs();
        r[0].source = "x".into();
        assert!(bad(corpus(), r, BUILT).contains("the source is not a kbid"));

        let tmp = tempfile::tempdir().unwrap();
        let e = write_indexes(tmp.path(), &corpus(), &refs(), "never").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(!tmp.path().join(META_FILE).exists());
    }

    fn corpus_err(b: &[u8]) -> String {
        read_corpus(b).unwrap_err().to_string()
    }
    fn terms_err(b: &[u8]) -> String {
        read_terms(b).unwrap_err().to_string()
    }
    fn postings_err(t: &[u8], p: &[u8]) -> String {
        read_all_postings(t, p).unwrap_err().to_string()
    }
    fn refs_err(b: &[u8]) -> String {
        read_references(b).unwrap_err().to_string()
    }

    #[test]
    fn every_truncation_and_trailing_byte_is_an_error() {
        let f = files();
        for n in 0..f.corpus.len() {
            assert!(read_corpus(&f.corpus[..n]).is_err(), "corpus prefix {n}");
        }
        for n in 0..f.terms.len() {
            assert!(read_terms(&f.terms[..n]).is_err(), "terms prefix {n}");
            assert!(read_all_postings(&f.terms[..n], &f.positions).is_err());
        }
        for n in 0..f.positions.len() {
            assert!(
                read_all_postings(&f.terms, &f.positions[..n]).is_err(),
                "positions prefix {n}"
            );
        }
        for n in 0..f.references.len() {
            assert!(
                read_references(&f.references[..n]).is_err(),
                "refs prefix {n}"
            );
        }
        let plus = |b: &[u8]| [b, &[0]].concat();
        assert!(corpus_err(&plus(&f.corpus)).contains("1 trailing bytes"));
        assert!(terms_err(&plus(&f.terms)).contains("trailing"));
        assert!(postings_err(&f.terms, &plus(&f.positions)).contains("trailing"));
        assert!(refs_err(&plus(&f.references)).contains("trailing"));
        let e = corpus_err(&f.corpus[..HEADER_LEN + 10]);
        assert!(
            e.starts_with("corpus.dat: at byte 9: truncated: kbid needs 26 bytes"),
            "{e}"
        );
    }

    #[test]
    fn hostile_headers() {
        let f = files();
        for (name, bytes, read) in [
            ("corpus.dat", &f.corpus, read_corpus as fn(&[u8]) -> _),
            ("references.idx", &f.references, |b: &[u8]| {
                read_references(b).map(|_| Vec::new())
            }),
        ] {
            let mut b = bytes.clone();
            b[0] = b'Z';
            let e = read(&b).unwrap_err().to_string();
            assert!(e.starts_with(name) && e.contains("bad magic"), "{e}");
            let mut b = bytes.clone();
            b[4] = 9;
            assert!(
                read(&b)
                    .unwrap_err()
                    .to_string()
                    .contains("unsupported version 9")
            );
            // A huge count: no allocation, a truncation error.
            let mut b = bytes.clone();
            b[5..9].copy_from_slice(&u32::MAX.to_le_bytes());
            assert!(read(&b).unwrap_err().to_string().contains("truncated"));
        }
        let mut t = f.terms.clone();
        t[5..9].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(terms_err(&t).contains("truncated"));
        assert!(terms_err(b"KBCO\x01\0\0\0\0").contains("bad magic"));
        let mut p = f.positions.clone();
        p[5] = 4;
        assert!(postings_err(&f.terms, &p).contains("holds 4 postings lists; terms.idx has 5"));
        // A huge position count inside a list.
        let mut p = f.positions.clone();
        p[HEADER_LEN + 4..HEADER_LEN + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(postings_err(&f.terms, &p).contains("truncated: positions needs"));
        let entry = TermEntry {
            term: "x".into(),
            doc_freq: u32::MAX,
            offset: u64::MAX,
        };
        assert!(
            read_postings(&f.positions, &entry)
                .unwrap_err()
                .to_string()
                .contains("outside the file")
        );
        let entry = TermEntry {
            offset: f.positions.len() as u64 - 4,
            ..entry
        };
        assert!(
            read_postings(&f.positions, &entry)
                .unwrap_err()
                .to_string()
                .contains("truncated")
        );
    }

    #[test]
    fn hostile_records() {
        let f = files();
        // corpus.dat: unsorted kbids, bad kbid, bad UTF-8 type.
        let rec = KBID_LEN + 8 + "text/markdown".len();
        let mut c = f.corpus.clone();
        c[HEADER_LEN + rec..HEADER_LEN + rec + KBID_LEN].copy_from_slice(KA.as_bytes());
        assert!(corpus_err(&c).contains("not above the previous one"));
        let mut c = f.corpus.clone();
        c[HEADER_LEN] = b'U';
        assert!(corpus_err(&c).contains("is not a kbid"));
        let mut c = f.corpus.clone();
        c[HEADER_LEN + KBID_LEN + 8] = 0xff;
        assert!(corpus_err(&c).contains("section type is not valid UTF-8"));

        // terms.idx: length 0 / too long, unsorted, df 0, bad offsets.
        let mut t = f.terms.clone();
        t[HEADER_LEN..HEADER_LEN + 2].copy_from_slice(&0u16.to_le_bytes());
        assert!(terms_err(&t).contains("term length 0"));
        t[HEADER_LEN..HEADER_LEN + 2].copy_from_slice(&256u16.to_le_bytes());
        assert!(terms_err(&t).contains("term length 256"));
        let mut t = f.terms.clone();
        t[HEADER_LEN + 2..HEADER_LEN + 8].copy_from_slice(b"zzzzzz");
        assert!(terms_err(&t).contains("must be sorted bytewise"));
        let mut t = f.terms.clone();
        t[HEADER_LEN + 8..HEADER_LEN + 12].copy_from_slice(&0u32.to_le_bytes());
        assert!(terms_err(&t).contains("document frequency 0"));
        let mut t = f.terms.clone();
        t[HEADER_LEN + 12] = 10;
        assert!(terms_err(&t).contains("out of order"));
        let mut t = f.terms.clone();
        t[HEADER_LEN + 2] = 0xff;
        assert!(terms_err(&t).contains("term is not valid UTF-8"));

        // positions.idx: unsorted positions, zero count, unsorted ordinals, misplaced lists.
        let mut t = f.terms.clone();
        t[HEADER_LEN + 8] = 1; // "deploy" df 1: its second posting becomes "friday"'s list start
        assert!(postings_err(&t, &f.positions).contains("should start here"));
        let mut p = f.positions.clone();
        p[HEADER_LEN + 4] = 0;
        assert!(postings_err(&f.terms, &p).contains("position count 0"));
        let mut p = f.positions.clone();
        p[HEADER_LEN + 12] = 0; // second ordinal of "deploy" 2 → 0
        assert!(postings_err(&f.terms, &p).contains("ordinal 0 is not above the previous one (0)"));
        // "tuesday" is the last list: ordinal 1 has positions [0, 2]; make them [2, 2].
        let n = f.positions.len();
        let mut p = f.positions.clone();
        p[n - 8] = 2;
        assert!(postings_err(&f.terms, &p).contains("not strictly ascending"));

        // references.idx: unsorted, bad marker, bad target, bad UTF-8.
        let r0 = HEADER_LEN;
        let mut r = f.references.clone();
        r[r0 + KBID_LEN] = 5; // first edge (KA, 0) → (KA, 5), above the next (KA, 1)
        assert!(refs_err(&r).contains("must be sorted by (source, ordinal)"));
        let mut r = f.references.clone();
        r[r0 + KBID_LEN + 4] = 3;
        assert!(refs_err(&r).contains("unknown marker type 3"));
        let mut r = f.references.clone();
        r[r0 + KBID_LEN + 7] = b'K';
        assert!(refs_err(&r).contains("is not a kbdb://section/"));
        let mut r = f.references.clone();
        r[r0 + KBID_LEN + 7] = 0xff;
        assert!(refs_err(&r).contains("target is not valid UTF-8"));
    }

    #[test]
    fn random_bytes_never_panic() {
        let f = files();
        let mut rng = crate::test_rng::XorShift::new(0x2545_f491_4f6c_dd1d);
        let mut next = || rng.next_u64();
        for _ in 0..2000 {
            for (orig, which) in [
                (&f.corpus, 0),
                (&f.terms, 1),
                (&f.positions, 2),
                (&f.references, 3),
            ] {
                let mut b = orig.clone();
                for _ in 0..1 + next() % 4 {
                    let i = (next() % b.len() as u64) as usize;
                    b[i] = next() as u8;
                }
                let _ = match which {
                    0 => read_corpus(&b).map(|_| ()),
                    1 => read_all_postings(&b, &f.positions).map(|_| ()),
                    2 => read_all_postings(&f.terms, &b).map(|_| ()),
                    _ => read_references(&b).map(|_| ()),
                };
            }
        }
    }
}
