//! KWIC snippets: ~150 characters centred on the best matched term, cut on char boundaries.

use crate::index::analyzer::{Normalizer, chunks};

pub const SNIPPET_CHARS: usize = 150;

/// A snippet of `text` centred on the first occurrence of the best term (the first of `ranked`
/// that occurs); the start of the text when none occurs.
pub fn snippet(text: &str, ranked: &[String], norm: &mut Normalizer) -> String {
    let mut best: Option<(usize, usize)> = None; // (rank, byte offset)
    // Stems are (almost always) prefixes of the words they come from: only stem chunks that
    // start like one of the terms, so long sections are scanned cheaply.
    let heads: Vec<String> = ranked.iter().map(|t| t.chars().take(3).collect()).collect();
    'outer: for c in chunks(text) {
        let lower = c.whole.to_lowercase();
        let maybe = heads.iter().any(|h| lower.starts_with(h.as_str()))
            || c.parts.iter().any(|p| {
                let pl = p.to_lowercase();
                heads.iter().any(|h| pl.starts_with(h.as_str()))
            });
        if !maybe {
            continue;
        }
        let mut forms = vec![norm.norm(&c.whole)];
        forms.extend(c.parts.iter().map(|p| norm.norm(p)));
        for (rank, term) in ranked.iter().enumerate() {
            if best.is_some_and(|(r, _)| r <= rank) {
                break;
            }
            if forms.iter().any(|f| f == term) {
                best = Some((rank, c.start));
                if rank == 0 {
                    break 'outer;
                }
            }
        }
    }
    let centre = best.map(|(_, off)| off).unwrap_or(0);
    window(text, centre, SNIPPET_CHARS)
}

/// `width` characters of `text` around byte offset `centre`, whitespace collapsed, with `…`
/// where text was cut.
fn window(text: &str, centre: usize, width: usize) -> String {
    let before: Vec<(usize, char)> = text[..centre].char_indices().collect();
    let start = if before.len() > width / 3 {
        before[before.len() - width / 3].0
    } else {
        0
    };
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    let mut count = 0;
    let mut last_space = true;
    let mut cut = false;
    for c in text[start..].chars() {
        if count >= width {
            cut = true;
            break;
        }
        if c.is_whitespace() {
            if !last_space {
                out.push(' ');
                count += 1;
            }
            last_space = true;
        } else {
            out.push(c);
            count += 1;
            last_space = false;
        }
    }
    let trimmed = out.trim_end().to_string();
    if cut {
        format!("{trimmed}…")
    } else {
        trimmed
    }
}

/// Wrap the words of `text` that match any of `terms` (user words, normalised here) in
/// `open`/`close` markers, for people reading results in a terminal.
pub fn mark(text: &str, terms: &[String], open: &str, close: &str) -> String {
    let mut norm = Normalizer::default();
    let wanted: std::collections::HashSet<String> =
        terms.iter().flat_map(|t| norm.terms(t)).collect();
    let mut out = String::with_capacity(text.len() + 16);
    let mut last = 0;
    for c in chunks(text) {
        let hit = wanted.contains(&norm.norm(&c.whole))
            || c.parts.iter().any(|p| wanted.contains(&norm.norm(p)));
        if hit {
            out.push_str(&text[last..c.start]);
            out.push_str(open);
            out.push_str(&text[c.start..c.end]);
            out.push_str(close);
            last = c.end;
        }
    }
    out.push_str(&text[last..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn centres_on_the_term_and_respects_char_boundaries() {
        let mut n = Normalizer::default();
        let text = format!("{} needle {}", "ü日本 ".repeat(80), "é".repeat(300));
        let s = snippet(&text, &[n.norm("needle")], &mut n);
        assert!(s.contains("needle"));
        assert!(s.starts_with('…') && s.ends_with('…'));
        assert!(s.chars().count() <= SNIPPET_CHARS + 2);
    }

    #[test]
    fn short_text_is_whole() {
        let mut n = Normalizer::default();
        assert_eq!(snippet("a  short\n\ntext", &[], &mut n), "a short text");
    }
}
