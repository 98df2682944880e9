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
    /// One word/identifier; `alternatives` are synonyms (each may be several words).
    Word {
        chunk: Chunk,
        alternatives: Vec<String>,
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
            let mut alternatives = super::synonyms::builtin(&lower);
            for s in user_synonyms(&lower) {
                if !alternatives.contains(&s) && s != lower {
                    alternatives.push(s);
                }
            }
            parts.push(Part::Word {
                chunk: c,
                alternatives,
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
            } => {
                let mut alts: Vec<(Occur, Box<dyn Query>)> =
                    vec![(Occur::Should, self.chunk_query(chunk))];
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
            } => {
                let mut ways = vec![vec![self.norm.norm(&chunk.whole)]];
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
