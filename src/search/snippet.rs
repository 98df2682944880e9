//! KWIC snippets: ~150 characters centred on the best matched term, cut on char boundaries.

use crate::index::analyzer::{Normalizer, chunks};

pub const SNIPPET_CHARS: usize = 150;

/// A snippet of `text` centred on the first occurrence of the best term (the first of `ranked`
/// that occurs); the start of the text when none occurs.
pub fn snippet(text: &str, ranked: &[String], norm: &mut Normalizer) -> String {
    let centre = ranked
        .iter()
        .find_map(|term| first_occurrence(text, term, norm))
        .unwrap_or(0);
    window(text, centre, SNIPPET_CHARS)
}

/// Byte offset of the first word (or identifier) of `text` that normalises to `term`.
/// Stems are (almost always) prefixes of their words, so only words starting like the term's
/// first characters are stemmed: a long section is scanned at the cost of a byte comparison.
fn first_occurrence(text: &str, term: &str, norm: &mut Normalizer) -> Option<usize> {
    let head: Vec<char> = term.chars().take(3).collect();
    let first = *head.first()?;
    let lower_first: Vec<char> = std::iter::once(first).collect();
    let candidates: Box<dyn Iterator<Item = usize>> = if first.is_ascii() {
        // Fast path: a byte scan (an ASCII byte is always a char boundary).
        let (lo, up) = (first as u8, first.to_ascii_uppercase() as u8);
        Box::new(
            text.bytes()
                .enumerate()
                .filter(move |&(_, b)| b == lo || b == up)
                .map(|(i, _)| i),
        )
    } else {
        Box::new(
            text.char_indices()
                .filter(move |(_, c)| c.to_lowercase().eq(lower_first.iter().copied()))
                .map(|(i, _)| i),
        )
    };
    for i in candidates {
        let c = text[i..].chars().next().unwrap_or(' ');
        let at_start = match text[..i].chars().next_back() {
            None => true,
            Some(p) => !p.is_alphanumeric() || (p.is_lowercase() && c.is_uppercase()),
        };
        if !at_start {
            continue;
        }
        let rest = &text[i..];
        if !rest
            .chars()
            .flat_map(char::to_lowercase)
            .take(head.len())
            .eq(head.iter().copied())
        {
            continue;
        }
        // The word (letters/digits) and the identifier (with joiners) that start here.
        let word_end = rest
            .char_indices()
            .find(|&(j, ch)| {
                !ch.is_alphanumeric()
                    || (j > 0
                        && ch.is_uppercase()
                        && rest[..j].chars().last().is_some_and(char::is_lowercase))
            })
            .map(|(j, _)| j)
            .unwrap_or(rest.len());
        if norm.norm(&rest[..word_end]) == term {
            return Some(i);
        }
        let mut cap = rest.len().min(256);
        while !rest.is_char_boundary(cap) {
            cap -= 1;
        }
        if let Some(c) = chunks(&rest[..cap]).first()
            && c.start == 0
            && norm.norm(&c.whole) == term
        {
            return Some(i);
        }
    }
    None
}

/// `width` characters of `text` around byte offset `centre`, whitespace collapsed, with `…`
/// where text was cut.
fn window(text: &str, centre: usize, width: usize) -> String {
    let start = text[..centre]
        .char_indices()
        .rev()
        .nth(width / 3 - 1)
        .map(|(i, _)| i)
        .unwrap_or(0);
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
    fn identifiers_next_to_multibyte_characters_do_not_split_them() {
        let mut n = Normalizer::default();
        let text = format!("{}├── std::fs::read", "x".repeat(250));
        let terms = [n.norm("std::fs::read"), n.norm("xxxx")];
        let _ = snippet(&format!("x{}", "─".repeat(200)), &terms, &mut n);
        assert!(snippet(&text, &terms[..1], &mut n).contains("std::fs::read"));
    }

    #[test]
    fn short_text_is_whole() {
        let mut n = Normalizer::default();
        assert_eq!(snippet("a  short\n\ntext", &[], &mut n), "a short text");
    }
}
