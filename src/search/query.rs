//! Turning any user string into a tantivy query, never failing: words and quoted phrases,
//! operators and punctuation ignored, stop words dropped when other words remain, synonyms
//! expanded, identifiers matched whole or by all of their parts.

use tantivy::Term;
use tantivy::query::{
    BooleanQuery, BoostQuery, ConstScoreQuery, Occur, PhraseQuery, Query, TermQuery,
};
use tantivy::schema::{Field, IndexRecordOption};

use crate::index::analyzer::{Chunk, Normalizer, chunks, is_stopword};
use crate::index::lexical::*;

/// Longest query accepted; longer input is cut (and the response says so).
pub const MAX_QUERY_CHARS: usize = 1000;
/// Words of a multi-word query within this many positions of their order earn a proximity
/// bonus (chosen on the development relevance set: 0 → nDCG@10 0.6567, 2 → 0.6575,
/// 6 → 0.6592, 12 → 0.6585; see docs/performance.md).
pub const PROXIMITY_SLOP: u32 = 6;
/// Most words (and phrases) used from one query.
pub const MAX_QUERY_PARTS: usize = 32;

#[derive(Debug, Clone)]
pub enum Part {
    /// One word/identifier; `alternatives` are synonyms (each may be several words);
    /// `corrected` is an index term the word was corrected to because it matched nothing
    /// (`correct_typos`).
    Word {
        chunk: Chunk,
        alternatives: Vec<String>,
        corrected: Option<String>,
    },
    Phrase {
        words: Vec<Chunk>,
        text: String,
    },
}

impl Part {
    /// The user-facing form of the part (as reported in `matched_terms`).
    pub fn label(&self) -> String {
        match self {
            Part::Word { chunk, .. } => chunk.whole.to_lowercase(),
            Part::Phrase { text, .. } => text.to_lowercase(),
        }
    }
}

pub struct Parsed {
    pub parts: Vec<Part>,
    pub truncated: bool,
}

pub fn parse(query: &str, user_synonyms: &dyn Fn(&str) -> Vec<String>) -> Parsed {
    let mut truncated = false;
    let q: String = if query.chars().count() > MAX_QUERY_CHARS {
        truncated = true;
        query.chars().take(MAX_QUERY_CHARS).collect()
    } else {
        query.to_string()
    };
    let mut parts = Vec::new();
    // Split on double quotes: odd segments are phrases when the quote is closed.
    let segments: Vec<&str> = q.split('"').collect();
    let closed = segments.len() % 2 == 1;
    for (i, seg) in segments.iter().enumerate() {
        let is_phrase = i % 2 == 1 && (closed || i + 1 < segments.len());
        let cs = chunks(seg);
        if is_phrase && cs.len() > 1 {
            parts.push(Part::Phrase {
                text: cs
                    .iter()
                    .map(|c| c.whole.as_str())
                    .collect::<Vec<_>>()
                    .join(" "),
                words: cs,
            });
            continue;
        }
        for c in cs {
            if matches!(c.whole.as_str(), "AND" | "OR" | "NOT") {
                continue;
            }
            let lower = c.whole.to_lowercase();
            let mut alternatives = super::builtin_synonyms::builtin(&lower);
            for s in user_synonyms(&lower) {
                if !alternatives.contains(&s) && s != lower {
                    alternatives.push(s);
                }
            }
            parts.push(Part::Word {
                chunk: c,
                alternatives,
                corrected: None,
            });
        }
    }
    // Drop stop words when something else remains; drop repeated words.
    let has_content = parts.iter().any(|p| match p {
        Part::Word { chunk, .. } => !is_stopword(&chunk.whole.to_lowercase()),
        Part::Phrase { .. } => true,
    });
    let mut seen = std::collections::HashSet::new();
    parts.retain(|p| {
        let keep = match p {
            Part::Word { chunk, .. } => !has_content || !is_stopword(&chunk.whole.to_lowercase()),
            Part::Phrase { .. } => true,
        };
        keep && seen.insert(p.label())
    });
    if parts.len() > MAX_QUERY_PARTS {
        parts.truncate(MAX_QUERY_PARTS);
        truncated = true;
    }
    Parsed { parts, truncated }
}

/// Builds tantivy queries from parsed parts.
pub struct Builder<'a> {
    pub fields: &'a Fields,
    pub norm: Normalizer,
}

impl Builder<'_> {
    fn scored_fields(&self) -> [(Field, f32); 5] {
        let f = self.fields;
        [
            (f.heading, BOOST_HEADING),
            (f.body, BOOST_BODY),
            (f.code, BOOST_CODE),
            (f.description, BOOST_DESCRIPTION),
            (f.tags_text, BOOST_TAGS),
        ]
    }

    /// A normalised term in any text field.
    fn term_any_field(&self, term: &str) -> Box<dyn Query> {
        let subs: Vec<(Occur, Box<dyn Query>)> = self
            .scored_fields()
            .into_iter()
            .map(|(field, boost)| {
                let q: Box<dyn Query> = Box::new(TermQuery::new(
                    Term::from_field_text(field, term),
                    IndexRecordOption::WithFreqs,
                ));
                (
                    Occur::Should,
                    Box::new(BoostQuery::new(q, boost)) as Box<dyn Query>,
                )
            })
            .collect();
        Box::new(BooleanQuery::new(subs))
    }

    /// A chunk: its whole form, or all of its parts.
    fn chunk_query(&mut self, c: &Chunk) -> Box<dyn Query> {
        let whole = self.norm.norm(&c.whole);
        let mut alts: Vec<(Occur, Box<dyn Query>)> =
            vec![(Occur::Should, self.term_any_field(&whole))];
        if let Some(q) = self.cjk_char_query(&whole) {
            alts.push((Occur::Should, q));
        }
        if !c.parts.is_empty() {
            let parts: Vec<(Occur, Box<dyn Query>)> = c
                .parts
                .iter()
                .map(|p| {
                    let n = self.norm.norm(p);
                    (Occur::Must, self.term_any_field(&n))
                })
                .collect();
            alts.push((Occur::Should, Box::new(BooleanQuery::new(parts))));
        }
        Box::new(BooleanQuery::new(alts))
    }

    /// A word of one CJK character (`桜`) is indexed alone only where it stands alone; inside
    /// a run it is in the run's character pairs (`桜の`, `夜桜`). So it matches any indexed pair
    /// that holds it: a walk of the term dictionary with a two-state automaton, on this rare
    /// path only (one-character CJK words).
    fn cjk_char_query(&self, word: &str) -> Option<Box<dyn Query>> {
        let mut chars = word.chars();
        let c = chars.next()?;
        if chars.next().is_some() || !crate::index::analyzer::is_cjk(c) {
            return None;
        }
        // A CJK character is no regex metacharacter; escaping keeps that a fact.
        let c = regex::escape(&c.to_string());
        let subs: Vec<(Occur, Box<dyn Query>)> = self
            .scored_fields()
            .into_iter()
            .filter_map(|(field, boost)| {
                let q =
                    tantivy::query::RegexQuery::from_pattern(&format!("{c}.|.{c}"), field).ok()?;
                Some((
                    Occur::Should,
                    Box::new(BoostQuery::new(Box::new(q), boost)) as Box<dyn Query>,
                ))
            })
            .collect();
        Some(Box::new(BooleanQuery::new(subs)))
    }

    fn phrase_query(&mut self, words: &[Chunk]) -> Box<dyn Query> {
        let terms: Vec<String> = words.iter().map(|c| self.norm.norm(&c.whole)).collect();
        let subs: Vec<(Occur, Box<dyn Query>)> = self
            .scored_fields()
            .into_iter()
            .map(|(field, boost)| {
                let q: Box<dyn Query> = Box::new(PhraseQuery::new(
                    terms
                        .iter()
                        .map(|t| Term::from_field_text(field, t))
                        .collect(),
                ));
                (
                    Occur::Should,
                    Box::new(BoostQuery::new(q, boost)) as Box<dyn Query>,
                )
            })
            .collect();
        Box::new(BooleanQuery::new(subs))
    }

    /// A scoring-only clause that favours sections where the query's words stand close together
    /// (within `PROXIMITY_SLOP` positions of their order); None for a single word or a query with phrases.
    pub fn proximity_query(&mut self, parts: &[Part]) -> Option<Box<dyn Query>> {
        if !(2..=8).contains(&parts.len()) {
            return None;
        }
        let mut terms = Vec::new();
        let mut offset = 0usize;
        for p in parts {
            let Part::Word { chunk, .. } = p else {
                return None;
            };
            terms.push((offset, self.norm.norm(&chunk.whole)));
            // The tokenizer gives a compound chunk one position per part.
            offset += chunk.parts.len().max(1);
        }
        let subs: Vec<(Occur, Box<dyn Query>)> = [
            (self.fields.heading, BOOST_HEADING),
            (self.fields.body, BOOST_BODY),
        ]
        .into_iter()
        .map(|(field, boost)| {
            let q: Box<dyn Query> = Box::new(PhraseQuery::new_with_offset_and_slop(
                terms
                    .iter()
                    .map(|(o, t)| (*o, Term::from_field_text(field, t)))
                    .collect(),
                PROXIMITY_SLOP,
            ));
            (
                Occur::Should,
                Box::new(BoostQuery::new(q, boost)) as Box<dyn Query>,
            )
        })
        .collect();
        Some(Box::new(BooleanQuery::new(subs)))
    }

    /// The query for one part (a word with its synonyms, or a phrase).
    pub fn part_query(&mut self, part: &Part) -> Box<dyn Query> {
        match part {
            Part::Word {
                chunk,
                alternatives,
                corrected,
            } => {
                let mut alts: Vec<(Occur, Box<dyn Query>)> =
                    vec![(Occur::Should, self.chunk_query(chunk))];
                if let Some(term) = corrected {
                    alts.push((Occur::Should, self.term_any_field(term)));
                }
                for alt in alternatives {
                    let cs = chunks(alt);
                    let q = if cs.len() > 1 {
                        self.phrase_query(&cs)
                    } else if let Some(c) = cs.first() {
                        self.chunk_query(c)
                    } else {
                        continue;
                    };
                    alts.push((Occur::Should, q));
                }
                Box::new(BooleanQuery::new(alts))
            }
            Part::Phrase { words, .. } => self.phrase_query(words),
        }
    }

    /// Normalised terms of a part (for matched_terms and snippets).
    pub fn part_terms(&mut self, part: &Part) -> Vec<Vec<String>> {
        // Each inner list is one way the part can match: all its terms must occur.
        match part {
            Part::Word {
                chunk,
                alternatives,
                corrected,
            } => {
                let mut ways = vec![vec![self.norm.norm(&chunk.whole)]];
                if let Some(term) = corrected {
                    ways.push(vec![term.clone()]);
                }
                if !chunk.parts.is_empty() {
                    ways.push(chunk.parts.iter().map(|p| self.norm.norm(p)).collect());
                }
                for alt in alternatives {
                    let t: Vec<String> = chunks(alt)
                        .iter()
                        .map(|c| self.norm.norm(&c.whole))
                        .collect();
                    if !t.is_empty() {
                        ways.push(t);
                    }
                }
                ways
            }
            Part::Phrase { words, .. } => {
                vec![words.iter().map(|c| self.norm.norm(&c.whole)).collect()]
            }
        }
    }
}

/// The text fields a word is searched in (those `Builder::scored_fields` boosts).
fn text_fields(f: &Fields) -> [Field; 5] {
    [f.heading, f.body, f.code, f.description, f.tags_text]
}

/// Shortest normalised word that typo tolerance corrects (shorter ones have too many
/// neighbours one edit away).
pub const MIN_FUZZY_CHARS: usize = 4;
/// Normalised words of at least this many characters may be two edits away; shorter ones one.
pub const TWO_EDITS_CHARS: usize = 8;

/// Typo tolerance, a fallback only: each plain word of the query that matches nothing in the
/// index (neither itself, nor its parts, nor a synonym) is corrected to the indexed term closest
/// to it — at most one edit away (two for words of `TWO_EDITS_CHARS` characters or more; an edit
/// is an insertion, deletion, substitution or transposition), with the same first character;
/// among equals, the term most sections contain. Returns (the word as typed, lowercased; the
/// term). A query whose words all match is never changed.
pub fn correct_typos(
    parts: &mut [Part],
    b: &mut Builder<'_>,
    searcher: &tantivy::Searcher,
) -> tantivy::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for part in parts.iter_mut() {
        let Part::Word { chunk, .. } = &*part else {
            continue;
        };
        if !chunk.parts.is_empty() {
            continue;
        }
        let term = b.norm.norm(&chunk.whole);
        let len = term.chars().count();
        if len < MIN_FUZZY_CHARS || !term.chars().all(char::is_alphabetic) {
            continue;
        }
        // Almost every word is an indexed term: a few dictionary lookups settle it, so a search
        // whose words match pays no query for this (the full one below also tries synonyms).
        let fields = text_fields(b.fields);
        let mut indexed = false;
        for f in fields {
            if searcher.doc_freq(&Term::from_field_text(f, &term))? > 0 {
                indexed = true;
                break;
            }
        }
        if indexed {
            continue;
        }
        let q = b.part_query(part);
        if searcher.search(q.as_ref(), &tantivy::collector::Count)? > 0 {
            continue;
        }
        // One edit of the word as typed, each variant stemmed (a stem can be further from a
        // typo's stem than the words are: `postgress` / `postgres`); then, for long words,
        // two edits of the stem against the index's terms.
        let typed = chunk.whole.to_lowercase();
        let mut best = one_edit_term(b, searcher, &typed)?;
        if best.is_none() && len >= TWO_EDITS_CHARS {
            best = nearest_term(b.fields, searcher, &term, 2)?;
        }
        if let Some(best) = best {
            let label = part.label();
            if let Part::Word { corrected, .. } = part {
                *corrected = Some(best.clone());
            }
            out.push((label, best));
        }
    }
    Ok(out)
}

/// The indexed term of a word one edit away from `word` (deleting, transposing, replacing or
/// inserting one letter), stemmed as the index is; the one most sections contain wins, then the
/// smallest. The first letter stays.
fn one_edit_term(
    b: &mut Builder<'_>,
    searcher: &tantivy::Searcher,
    word: &str,
) -> tantivy::Result<Option<String>> {
    let chars: Vec<char> = word.chars().collect();
    let mut letters: Vec<char> = ('a'..='z').collect();
    letters.extend(chars.iter().copied().filter(|c| !c.is_ascii_lowercase()));
    let mut variants: std::collections::BTreeSet<String> = Default::default();
    let at = |v: Vec<char>| v.into_iter().collect::<String>();
    for i in 1..chars.len() {
        let mut v = chars.clone();
        v.remove(i);
        variants.insert(at(v));
        if i + 1 < chars.len() {
            let mut v = chars.clone();
            v.swap(i, i + 1);
            variants.insert(at(v));
        }
        for &l in &letters {
            let mut v = chars.clone();
            v[i] = l;
            variants.insert(at(v));
        }
    }
    for i in 1..=chars.len() {
        for &l in &letters {
            let mut v = chars.clone();
            v.insert(i, l);
            variants.insert(at(v));
        }
    }
    let fields = text_fields(b.fields);
    let own = b.norm.norm(word);
    let mut best: Option<(u64, String)> = None;
    let mut seen = std::collections::HashSet::new();
    for v in variants {
        let term = b.norm.norm(&v);
        if term == own || term.chars().count() < MIN_FUZZY_CHARS - 1 || !seen.insert(term.clone()) {
            continue;
        }
        let mut df = 0;
        for f in fields {
            df += searcher.doc_freq(&Term::from_field_text(f, &term))?;
        }
        if df > 0
            && best
                .as_ref()
                .is_none_or(|(d, t)| df > *d || (df == *d && term < *t))
        {
            best = Some((df, term));
        }
    }
    Ok(best.map(|(_, t)| t))
}

/// The indexed term within `max` edits of `term` that shares its first character, nearest
/// first, then the one most sections contain (summed over the text fields), then the smallest.
fn nearest_term(
    fields: &Fields,
    searcher: &tantivy::Searcher,
    term: &str,
    max: usize,
) -> tantivy::Result<Option<String>> {
    let Some(first) = term.chars().next() else {
        return Ok(None);
    };
    let lo = first.to_string();
    let hi = char::from_u32(first as u32 + 1)
        .map(|c| c.to_string())
        .unwrap_or_else(|| format!("{first}\u{10ffff}"));
    let target: Vec<char> = term.chars().collect();
    let mut found: std::collections::HashMap<String, (usize, u64)> = Default::default();
    for segment in searcher.segment_readers() {
        for field in text_fields(fields) {
            let index = segment.inverted_index(field)?;
            let mut stream = index
                .terms()
                .range()
                .ge(lo.as_bytes())
                .lt(hi.as_bytes())
                .into_stream()?;
            while stream.advance() {
                let Ok(candidate) = std::str::from_utf8(stream.key()) else {
                    continue;
                };
                let clen = candidate.chars().count();
                if clen.abs_diff(target.len()) > max || clen < MIN_FUZZY_CHARS - 1 {
                    continue;
                }
                let c: Vec<char> = candidate.chars().collect();
                let Some(d) = edit_distance(&target, &c, max) else {
                    continue;
                };
                let e = found.entry(candidate.to_string()).or_insert((d, 0));
                e.1 += u64::from(stream.value().doc_freq);
            }
        }
    }
    Ok(found
        .into_iter()
        .min_by(|(ta, (da, fa)), (tb, (db, fb))| da.cmp(db).then(fb.cmp(fa)).then(ta.cmp(tb)))
        .map(|(t, _)| t))
}

/// The optimal-string-alignment distance of `a` and `b` (a transposition of two neighbours
/// counts as one edit) when it is at most `max`, else None.
pub fn edit_distance(a: &[char], b: &[char], max: usize) -> Option<usize> {
    if a.len().abs_diff(b.len()) > max {
        return None;
    }
    let w = b.len() + 1;
    let mut rows = vec![vec![0usize; w]; a.len() + 1];
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        rows[i][0] = i;
        let mut best = rows[i][0];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = v;
            best = best.min(v);
        }
        if best > max {
            return None;
        }
    }
    let d = rows[a.len()][b.len()];
    (d <= max).then_some(d)
}

/// A filter clause that does not change scores.
pub fn filter(field: Field, value: &str) -> Box<dyn Query> {
    Box::new(ConstScoreQuery::new(
        Box::new(TermQuery::new(
            Term::from_field_text(field, value),
            IndexRecordOption::Basic,
        )),
        0.0,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_insertions_deletions_substitutions_and_transpositions() {
        let d = |a: &str, b: &str, max| {
            edit_distance(
                &a.chars().collect::<Vec<_>>(),
                &b.chars().collect::<Vec<_>>(),
                max,
            )
        };
        assert_eq!(d("postgress", "postgres", 2), Some(1));
        assert_eq!(d("kubernetse", "kubernetes", 2), Some(1));
        assert_eq!(d("databse", "database", 1), Some(1));
        assert_eq!(d("cache", "cache", 1), Some(0));
        assert_eq!(d("rust", "trust", 1), Some(1));
        assert_eq!(d("graph", "grape", 1), Some(1));
        assert_eq!(d("kitten", "sitting", 2), None);
        assert_eq!(d("kitten", "sitting", 3), Some(3));
        assert_eq!(d("abc", "abcdef", 2), None);
    }

    #[test]
    fn hostile_strings_parse_without_error() {
        let none = |_: &str| Vec::new();
        for q in [
            "\"unbalanced",
            "NOT -x:y*",
            "a AND OR",
            "🔥💥",
            "((()))",
            "\"\"",
            ":::",
            "",
            "\u{0}nul",
        ] {
            let _ = parse(q, &none);
        }
        let p = parse(&"word ".repeat(5000), &none);
        assert!(p.truncated);
        assert_eq!(p.parts.len(), 1, "repeated words are merged");
        let p = parse("the \"quick brown\" fox", &none);
        assert_eq!(p.parts.len(), 2, "stop word dropped, phrase kept");
    }
}
