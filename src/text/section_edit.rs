//! Surgical edits of one heading section of a markdown text (the body, without front matter:
//! split that off first, or YAML comments would read as headings).
//!
//! Headings are found by the shared rule of [`super::markdown`]: ATX headings (`#`..`######`)
//! outside fenced code blocks; setext headings (`Title` over `===`) are not headings. A
//! section runs from its heading line to the next heading of the same or a higher level (a
//! lower number) or the end of the text, so it includes its subsections.

use std::collections::HashSet;
use std::str::FromStr;

use super::markdown::{atx_heading, fence};

/// A heading and the extent of its section, as byte offsets into the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heading {
    /// 1-6.
    pub level: u8,
    /// The heading text, trimmed, closing `#`s removed.
    pub text: String,
    /// 1-based line number of the heading line.
    pub line: usize,
    /// Byte offset of the heading line.
    pub start: usize,
    /// Byte offset just after the heading line (after its line end).
    pub body_start: usize,
    /// Byte offset of the section's end: the next heading of the same or a higher level, or
    /// the end of the text.
    pub end: usize,
}

/// What to do with the section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Keep the heading line, replace the rest of the section (subsections too) with the content.
    Replace,
    /// Add the content at the end of the section (after its subsections).
    Append,
    /// Remove the heading and its whole section.
    Remove,
    /// Insert the content right before the heading line.
    InsertBefore,
    /// Insert the content right after the section's end.
    InsertAfter,
}

impl Action {
    pub const ALL: [Action; 5] = [
        Action::Replace,
        Action::Append,
        Action::Remove,
        Action::InsertBefore,
        Action::InsertAfter,
    ];

    /// The name used in requests: `replace`, `append`, `remove`, `insert_before`, `insert_after`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Replace => "replace",
            Action::Append => "append",
            Action::Remove => "remove",
            Action::InsertBefore => "insert_before",
            Action::InsertAfter => "insert_after",
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Action {
    type Err = EditError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase();
        Action::ALL
            .into_iter()
            .find(|a| a.as_str() == wanted)
            .ok_or_else(|| EditError::UnknownAction {
                given: super::preview(s, 40),
            })
    }
}

/// Why a section edit could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    #[error("heading \"{heading}\" not found; {}", available_list(.available))]
    NotFound {
        heading: String,
        /// The document's distinct heading texts, in order.
        available: Vec<String>,
    },

    #[error(
        "heading \"{heading}\" appears {} times (lines {}); pass `occurrence` (1-based) to pick one",
        .lines.len(), join_lines(.lines)
    )]
    Ambiguous { heading: String, lines: Vec<usize> },

    #[error(
        "occurrence {occurrence} is out of range: heading \"{heading}\" appears {} time{} (line{} {}); occurrence counts from 1",
        .lines.len(), plural(.lines.len()), plural(.lines.len()), join_lines(.lines)
    )]
    OccurrenceOutOfRange {
        heading: String,
        occurrence: usize,
        lines: Vec<usize>,
    },

    #[error("the {action} action needs content")]
    MissingContent { action: Action },

    #[error(
        "unknown section action \"{given}\"; expected one of replace, append, remove, insert_before, insert_after"
    )]
    UnknownAction { given: String },
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn join_lines(lines: &[usize]) -> String {
    lines
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn available_list(available: &[String]) -> String {
    const MAX: usize = 50;
    if available.is_empty() {
        return "the document has no headings".to_string();
    }
    let mut shown: Vec<String> = available
        .iter()
        .take(MAX)
        .map(|h| format!("\"{h}\""))
        .collect();
    if available.len() > MAX {
        shown.push(format!("… ({} more)", available.len() - MAX));
    }
    format!("the document's headings are: {}", shown.join(", "))
}

/// The lines of a text: (start, end of content, start of the next line). A line ends at
/// `\r\n`, `\n` or a lone `\r`, as in [`super::markdown::split_sections`].
fn lines(text: &str) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
    let bytes = text.as_bytes();
    let mut pos = 0;
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        let start = pos;
        let Some(i) = bytes[start..]
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
        else {
            done = true;
            pos = bytes.len();
            return Some((start, bytes.len(), bytes.len()));
        };
        let end = start + i;
        let next = if bytes[end] == b'\r' && bytes.get(end + 1) == Some(&b'\n') {
            end + 2
        } else {
            end + 1
        };
        pos = next;
        Some((start, end, next))
    })
}

/// The ATX headings of a markdown text outside fenced code, with their sections.
pub fn headings(md: &str) -> Vec<Heading> {
    let mut out: Vec<Heading> = Vec::new();
    let mut open: Option<(char, usize)> = None;
    for (n, (start, end, next)) in lines(md).enumerate() {
        let line = &md[start..end];
        if let Some((c, len)) = open {
            if let Some((c2, len2)) = fence(line)
                && c2 == c
                && len2 >= len
                && line.trim().chars().all(|x| x == c)
            {
                open = None;
            }
            continue;
        }
        if let Some(f) = fence(line) {
            open = Some(f);
            continue;
        }
        if let Some((level, text)) = atx_heading(line) {
            out.push(Heading {
                level,
                text,
                line: n + 1,
                start,
                body_start: next,
                end: md.len(),
            });
        }
    }
    for i in 0..out.len() {
        let level = out[i].level;
        if let Some(next) = out[i + 1..].iter().find(|h| h.level <= level) {
            out[i].end = next.start;
        }
    }
    out
}

/// A heading text as compared: whitespace runs collapsed, lower-cased.
pub(crate) fn normalized(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// What the caller asked for, without a leading `#…` marker they may have copied along: the
/// forms to compare with [`normalized`] heading texts, in order of preference.
pub(crate) fn wanted(heading: &str) -> Vec<String> {
    let trimmed = heading.trim();
    let mut out: Vec<String> = Vec::with_capacity(3);
    let candidates = [
        atx_heading(trimmed).map(|(_, text)| text),
        Some(trimmed.to_string()),
        Some(trimmed.trim_start_matches('#').to_string()),
    ];
    for c in candidates.into_iter().flatten() {
        let c = normalized(&c);
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// The section a heading text names (case-insensitive, trimmed, a leading `#…` ignored);
/// `occurrence` (1-based) picks one when the heading appears more than once.
pub fn find_section(
    md: &str,
    heading: &str,
    occurrence: Option<usize>,
) -> Result<Heading, EditError> {
    let all = headings(md);
    let mut matches: Vec<&Heading> = Vec::new();
    for w in wanted(heading) {
        matches = all.iter().filter(|h| normalized(&h.text) == w).collect();
        if !matches.is_empty() {
            break;
        }
    }
    let shown = super::preview(heading.trim(), 80);
    if matches.is_empty() {
        let mut seen = HashSet::new();
        let available: Vec<String> = all
            .iter()
            .filter(|h| seen.insert(h.text.as_str()))
            .map(|h| h.text.clone())
            .collect();
        return Err(EditError::NotFound {
            heading: shown,
            available,
        });
    }
    let lines: Vec<usize> = matches.iter().map(|h| h.line).collect();
    match occurrence {
        None if matches.len() == 1 => Ok(matches[0].clone()),
        None => Err(EditError::Ambiguous {
            heading: shown,
            lines,
        }),
        Some(k) if (1..=matches.len()).contains(&k) => Ok(matches[k - 1].clone()),
        Some(k) => Err(EditError::OccurrenceOutOfRange {
            heading: shown,
            occurrence: k,
            lines,
        }),
    }
}

/// `s` without its trailing blank lines and final line end; the last non-blank line is kept
/// whole (trailing spaces too).
fn trim_trailing_blank(s: &str) -> &str {
    let content = s.trim_end();
    if content.is_empty() {
        return "";
    }
    let rest = &s[content.len()..];
    let keep = rest.find(['\n', '\r']).unwrap_or(rest.len());
    &s[..content.len() + keep]
}

/// `s` without its leading blank lines; the first non-blank line keeps its indentation.
fn trim_leading_blank(s: &str) -> &str {
    let Some(first) = s.find(|c: char| !c.is_whitespace()) else {
        return "";
    };
    let line_start = s[..first].rfind(['\n', '\r']).map_or(0, |i| i + 1);
    &s[line_start..]
}

fn trim_blank(s: &str) -> &str {
    trim_trailing_blank(trim_leading_blank(s))
}

/// Line ends of `s` turned into `nl`.
fn with_line_ends(s: &str, nl: &str) -> String {
    let unix = s.replace("\r\n", "\n").replace('\r', "\n");
    if nl == "\n" {
        unix
    } else {
        unix.replace('\n', nl)
    }
}

/// `md` with its title set to `title`. The title of markdown is its first heading (the synced
/// title rule): when that is an H1, its line is rewritten (its line end kept); otherwise a
/// `# title` line and a blank line are added at the top. Nothing else moves.
pub fn set_title(md: &str, title: &str) -> String {
    let title = title.trim();
    match headings(md).into_iter().next().filter(|h| h.level == 1) {
        Some(h) => {
            let line = &md[h.start..h.body_start];
            let ending = &line[line.trim_end_matches(['\n', '\r']).len()..];
            format!("{}# {title}{ending}{}", &md[..h.start], &md[h.body_start..])
        }
        None => {
            let nl = if md.contains("\r\n") { "\r\n" } else { "\n" };
            if md.trim().is_empty() {
                format!("# {title}{nl}")
            } else {
                format!("# {title}{nl}{nl}{md}")
            }
        }
    }
}

/// Whether `line` (a whole line, without its line end) holds only spaces and tabs.
fn is_blank(line: &str) -> bool {
    line.trim_matches([' ', '\t', '\r']).is_empty()
}

/// The lines of `md[from..to]` as (start, end of content, start of the next line).
fn lines_in(md: &str, from: usize, to: usize) -> Vec<(usize, usize, usize)> {
    lines(&md[from..to])
        .map(|(a, b, c)| (from + a, from + b, from + c))
        .filter(|(a, _, c)| a < c || *a < to)
        .collect()
}

/// The offset just after the last line of `md[from..to]` that is not blank (after its line
/// end), or `from` when every line is blank: what follows is the section's trailing gap.
fn after_last_text(md: &str, from: usize, to: usize) -> usize {
    lines_in(md, from, to)
        .into_iter()
        .rev()
        .find(|(a, b, _)| !is_blank(&md[*a..*b]))
        .map_or(from, |(_, _, next)| next)
}

/// A list item line: any indentation, then `-`, `*` or `+`, or 1-9 digits and `.` or `)`,
/// then a space, a tab or the end of the line.
fn is_list_item(line: &str) -> bool {
    let rest = line.trim_start_matches([' ', '\t']);
    let after = if let Some(r) = rest.strip_prefix(['-', '*', '+']) {
        r
    } else {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if !(1..=9).contains(&digits) {
            return false;
        }
        match rest[digits..].strip_prefix(['.', ')']) {
            Some(r) => r,
            None => return false,
        }
    };
    after.is_empty() || after.starts_with([' ', '\t'])
}

/// Whether the text of `md[from..to]` ends in a tight list: its last block (the run of non-blank
/// lines at its end) starts with a list item, every later line is an item or indented, and the
/// list did not start before a blank line (which would make it loose).
fn ends_in_tight_list(md: &str, from: usize, to: usize) -> bool {
    let texts: Vec<&str> = lines_in(md, from, to)
        .into_iter()
        .map(|(a, b, _)| &md[a..b])
        .collect();
    let Some(last) = texts.iter().rposition(|l| !is_blank(l)) else {
        return false;
    };
    let first = texts[..=last]
        .iter()
        .rposition(|l| is_blank(l))
        .map_or(0, |i| i + 1);
    let block = &texts[first..=last];
    let Some(item) = block.iter().position(|l| is_list_item(l)) else {
        return false;
    };
    let continued = block[item..]
        .iter()
        .all(|l| is_list_item(l) || l.starts_with([' ', '\t']));
    let before = texts[..first].iter().rev().find(|l| !is_blank(l));
    let loose = item == 0
        && first > 0
        && before.is_some_and(|l| is_list_item(l) || l.starts_with([' ', '\t']));
    continued && !loose
}

/// Edit the section under `heading` (see [`find_section`] for the matching).
///
/// - `Replace`: keep the heading line, replace the section's text (subsections included) with
///   `content`. If `content` starts with the same heading (same level and text), that heading
///   replaces the old heading line instead of repeating it.
/// - `Append`: add `content` at the end of the section's text (after its subsections, before
///   the next heading of the same or a higher level).
/// - `Remove`: remove the heading line and its whole section (`content` is ignored).
/// - `InsertBefore`: insert `content` (typically starting with its own heading) right before
///   the heading line.
/// - `InsertAfter`: insert `content` right after the section's end.
///
/// `content` is required for all but `Remove`; its leading and trailing blank lines are dropped
/// and its line ends follow the document (CRLF if the document uses CRLF). Only the lines of
/// the edited section move: every byte before and after them is kept as it is — the blank
/// lines that end a section (its gap before the next heading) stay, a blank line is added
/// only where the new text would otherwise touch a line of text, and content appended to a
/// section that ends in a tight list item joins the list without a blank line. A file whose
/// last line had no line end gets one when text is added after it.
pub fn edit(
    md: &str,
    heading: &str,
    action: Action,
    content: Option<&str>,
    occurrence: Option<usize>,
) -> Result<String, EditError> {
    let content = match (action, content) {
        (Action::Remove, _) => "",
        (_, Some(c)) => c,
        (_, None) => return Err(EditError::MissingContent { action }),
    };
    let h = find_section(md, heading, occurrence)?;
    let nl = if md.contains("\r\n") { "\r\n" } else { "\n" };
    let content = with_line_ends(content, nl);
    let content = trim_blank(&content);
    // Whether `md` ends a line right before `at` (or `at` is the start of the text).
    let line_ended = |at: usize| at == 0 || md[..at].ends_with(['\n', '\r']);
    // Whether the line before `at` is blank (no line before counts as blank).
    let blank_before = |at: usize| {
        let before = &md[..at];
        let Some(prev) = before
            .strip_suffix("\r\n")
            .or_else(|| before.strip_suffix(['\n', '\r']))
        else {
            return at == 0;
        };
        let line_start = prev.rfind(['\n', '\r']).map_or(0, |i| i + 1);
        is_blank(&prev[line_start..])
    };
    let text_end = after_last_text(md, h.body_start, h.end);
    let mut insert = String::new();
    let (a, b) = match action {
        Action::Replace => {
            let first_line = content.lines().next().unwrap_or("");
            let same_heading = atx_heading(first_line)
                .is_some_and(|(l, t)| l == h.level && normalized(&t) == normalized(&h.text));
            let a = if same_heading { h.start } else { h.body_start };
            if !content.is_empty() {
                if !line_ended(a) {
                    insert.push_str(nl);
                }
                // A blank line after the heading when the section had one (or had no text).
                let body_lines = lines_in(md, h.body_start, h.end);
                let spaced = body_lines
                    .first()
                    .is_none_or(|(x, y, _)| is_blank(&md[*x..*y]))
                    || text_end == h.body_start;
                if !same_heading && spaced {
                    insert.push_str(nl);
                }
                insert.push_str(content);
                insert.push_str(nl);
            }
            (a, text_end.max(a))
        }
        Action::Append => {
            let at = text_end.max(h.body_start);
            if !content.is_empty() {
                if !line_ended(at) {
                    insert.push_str(nl);
                }
                let tight = ends_in_tight_list(md, h.body_start, at)
                    && content.lines().next().is_some_and(is_list_item);
                if !tight {
                    insert.push_str(nl);
                }
                insert.push_str(content);
                insert.push_str(nl);
            }
            (at, at)
        }
        Action::Remove => (h.start, h.end),
        Action::InsertBefore => {
            if !content.is_empty() {
                if !blank_before(h.start) {
                    insert.push_str(nl);
                }
                insert.push_str(content);
                insert.push_str(nl);
            }
            (h.start, h.start)
        }
        Action::InsertAfter => {
            if !content.is_empty() {
                if !line_ended(h.end) {
                    insert.push_str(nl);
                }
                if !blank_before(h.end) || !line_ended(h.end) {
                    insert.push_str(nl);
                }
                insert.push_str(content);
                insert.push_str(nl);
            }
            (h.end, h.end)
        }
    };
    // New text never touches the line of text after it: a blank line between.
    if !insert.is_empty()
        && lines_in(md, b, md.len())
            .first()
            .is_some_and(|(x, y, _)| !is_blank(&md[*x..*y]))
        && !insert.ends_with(&format!("{nl}{nl}"))
    {
        insert.push_str(nl);
    }
    let mut out = String::with_capacity(md.len() + insert.len());
    out.push_str(&md[..a]);
    out.push_str(&insert);
    out.push_str(&md[b..]);
    if action == Action::Remove && b == md.len() {
        // The last section went: the blank lines it leaves at the end of the text go too.
        let kept = trim_trailing_blank(&out).len();
        out.truncate(kept);
        if kept > 0 {
            out.push_str(nl);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::markdown::split_sections;

    const DOC: &str = "Preamble text.\n\n# Intro\n\nHello.\n\n## Details\n\nSome details.\n\n```\n# not a heading\n```\n\n## Notes\n\nFirst notes.\n\n# Acceptance Criteria\n\n- works\n\n## Notes\n\nSecond notes.\n";

    fn titles(md: &str) -> Vec<(u8, String)> {
        headings(md)
            .into_iter()
            .map(|h| (h.level, h.text))
            .collect()
    }

    #[test]
    fn headings_and_sections() {
        let hs = headings(DOC);
        let got: Vec<(u8, &str, usize)> = hs
            .iter()
            .map(|h| (h.level, h.text.as_str(), h.line))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, "Intro", 3),
                (2, "Details", 7),
                (2, "Notes", 15),
                (1, "Acceptance Criteria", 19),
                (2, "Notes", 23),
            ]
        );
        let intro = &hs[0];
        assert_eq!(&DOC[intro.start..intro.body_start], "# Intro\n");
        assert_eq!(intro.end, hs[3].start, "a section includes its subsections");
        assert_eq!(hs[1].end, hs[2].start);
        assert_eq!(hs[4].end, DOC.len());
        assert_eq!(hs[3].end, DOC.len());
        assert!(headings("").is_empty());
        let last = headings("# Only");
        assert_eq!((last[0].body_start, last[0].end), (6, 6));
    }

    #[test]
    fn agrees_with_markdown_split_sections() {
        let tricky = "intro\r\n\n# A #\ntext\n```\n# not a heading\n```\n## B\n\n~~~~\n# still code\n~~~\n# C\n~~~~~\n\
            #hashtag\n   ### three spaces ###\n    # indented code\n####### seven\n# \n##\n\
            Setext\n======\n\r# after lone CR\n```rust\n## in code\n````\n# closed by a longer fence\n\
            ``` not a closer\n# still code?\n```\n#\ttab\n- # in a list item\n> # in a quote\n";
        let from_markdown: Vec<(u8, String)> = split_sections(tricky)
            .into_iter()
            .filter(|s| s.level > 0)
            .map(|s| (s.level, s.title))
            .collect();
        assert_eq!(titles(tricky), from_markdown);
        assert!(from_markdown.len() >= 5, "{from_markdown:?}");
        // And on the other test texts.
        for md in [
            DOC,
            "# a\r\n## b\r\n```\r\n# c\r\n",
            "no headings",
            "Title\n=====\n",
        ] {
            let from_markdown: Vec<(u8, String)> = split_sections(md)
                .into_iter()
                .filter(|s| s.level > 0)
                .map(|s| (s.level, s.title))
                .collect();
            assert_eq!(titles(md), from_markdown, "{md:?}");
        }
    }

    #[test]
    fn action_names() {
        for a in Action::ALL {
            assert_eq!(a.as_str().parse::<Action>().unwrap(), a);
        }
        assert_eq!(
            " Insert_After ".parse::<Action>().unwrap(),
            Action::InsertAfter
        );
        let e = "delete".parse::<Action>().unwrap_err().to_string();
        assert!(
            e.contains("\"delete\"") && e.contains("insert_before"),
            "{e}"
        );
    }

    #[test]
    fn replace_keeps_the_heading_and_drops_subsections() {
        let out = edit(DOC, "Intro", Action::Replace, Some("New intro.\n"), None).unwrap();
        assert_eq!(
            out,
            "Preamble text.\n\n# Intro\n\nNew intro.\n\n# Acceptance Criteria\n\n- works\n\n## Notes\n\nSecond notes.\n"
        );
        // The same heading at the start of the content is not repeated.
        let again = edit(
            DOC,
            "Intro",
            Action::Replace,
            Some("# Intro\nNew intro."),
            None,
        )
        .unwrap();
        assert_eq!(again, out.replace("# Intro\n\nNew", "# Intro\nNew"));
        // A different heading in the content stays: it becomes part of the section.
        let sub = edit(DOC, "details", Action::Replace, Some("### Sub\n\nx"), None).unwrap();
        assert!(
            sub.contains("## Details\n\n### Sub\n\nx\n\n## Notes\n\nFirst"),
            "{sub}"
        );
        // Empty content leaves the bare heading.
        let empty = edit(DOC, "Details", Action::Replace, Some(""), None).unwrap();
        assert!(
            empty.contains("Hello.\n\n## Details\n\n## Notes\n\nFirst"),
            "{empty}"
        );
    }

    #[test]
    fn append_goes_after_subsections_and_keeps_tight_lists_tight() {
        let out = edit(
            DOC,
            "Intro",
            Action::Append,
            Some("\n\nAppended.\n\n\n"),
            None,
        )
        .unwrap();
        assert!(
            out.contains("First notes.\n\nAppended.\n\n# Acceptance Criteria"),
            "{out}"
        );
        let out = edit(DOC, "Details", Action::Append, Some("More."), None).unwrap();
        assert!(out.contains("```\n\nMore.\n\n## Notes\n\nFirst"), "{out}");
        // A section with no body, and the last section.
        let md = "# A\n# B\ntext\n\n\n";
        assert_eq!(
            edit(md, "A", Action::Append, Some("x"), None).unwrap(),
            "# A\n\nx\n\n# B\ntext\n\n\n"
        );
        assert_eq!(
            edit(md, "B", Action::Append, Some("y\n"), None).unwrap(),
            "# A\n# B\ntext\n\ny\n\n\n",
            "the blank lines at the end stay"
        );
        // A tight list stays tight; a loose one, or other content, gets its blank line.
        let md = "## AC\nIntro:\n- one\n- two\n  wrapped\n\n## Next\n";
        assert_eq!(
            edit(md, "AC", Action::Append, Some("- three"), None).unwrap(),
            "## AC\nIntro:\n- one\n- two\n  wrapped\n- three\n\n## Next\n"
        );
        assert_eq!(
            edit(md, "AC", Action::Append, Some("After."), None).unwrap(),
            "## AC\nIntro:\n- one\n- two\n  wrapped\n\nAfter.\n\n## Next\n"
        );
        let loose = "## AC\n\n1. one\n\n2. two\n";
        assert_eq!(
            edit(loose, "AC", Action::Append, Some("3. three"), None).unwrap(),
            "## AC\n\n1. one\n\n2. two\n\n3. three\n"
        );
        assert!(!ends_in_tight_list("- a\n\ntext\n", 0, 10));
        assert!(ends_in_tight_list("* a\n+ b", 0, 7));
    }

    #[test]
    fn remove_takes_the_whole_section() {
        let out = edit(DOC, "Intro", Action::Remove, None, None).unwrap();
        assert_eq!(
            out,
            "Preamble text.\n\n# Acceptance Criteria\n\n- works\n\n## Notes\n\nSecond notes.\n"
        );
        let out = edit(DOC, "Acceptance Criteria", Action::Remove, None, None).unwrap();
        assert!(out.ends_with("## Notes\n\nFirst notes.\n"), "{out}");
        // The first section of a document without preamble, and the only one.
        assert_eq!(
            edit("# A\nx\n# B\ny\n", "A", Action::Remove, None, None).unwrap(),
            "# B\ny\n"
        );
        assert_eq!(
            edit("# A\nx\n", "A", Action::Remove, None, None).unwrap(),
            ""
        );
        // Content is not needed (and ignored).
        assert_eq!(
            edit("# A\n\n# B\n", "B", Action::Remove, Some("zz"), None).unwrap(),
            "# A\n"
        );
    }

    #[test]
    fn inserts_before_and_after() {
        let out = edit(
            DOC,
            "Acceptance criteria",
            Action::InsertBefore,
            Some("# Scope\n\nSmall."),
            None,
        )
        .unwrap();
        assert!(
            out.contains("First notes.\n\n# Scope\n\nSmall.\n\n# Acceptance Criteria\n"),
            "{out}"
        );
        let out = edit(
            DOC,
            "Intro",
            Action::InsertAfter,
            Some("# Scope\n\nSmall."),
            None,
        )
        .unwrap();
        assert!(
            out.contains("First notes.\n\n# Scope\n\nSmall.\n\n# Acceptance Criteria\n"),
            "{out}"
        );
        // First section: before the heading, after the preamble; with no preamble, at the top.
        let out = edit(DOC, "Intro", Action::InsertBefore, Some("# Zero"), None).unwrap();
        assert!(
            out.starts_with("Preamble text.\n\n# Zero\n\n# Intro\n"),
            "{out}"
        );
        let out = edit(
            "\n\n# A\nx",
            "A",
            Action::InsertBefore,
            Some("# Zero\n"),
            None,
        )
        .unwrap();
        assert_eq!(out, "\n\n# Zero\n\n# A\nx", "the bytes around are kept");
        // Last section: after it, at the end.
        let out = edit("# A\nx", "a", Action::InsertAfter, Some("# B\ny"), None).unwrap();
        assert_eq!(out, "# A\nx\n\n# B\ny\n");
    }

    #[test]
    fn content_is_required_except_for_remove() {
        for a in [
            Action::Replace,
            Action::Append,
            Action::InsertBefore,
            Action::InsertAfter,
        ] {
            let e = edit(DOC, "Intro", a, None, None).unwrap_err();
            assert_eq!(e, EditError::MissingContent { action: a });
            assert!(e.to_string().contains(a.as_str()));
        }
    }

    #[test]
    fn duplicate_headings_need_an_occurrence() {
        let e = edit(DOC, "Notes", Action::Replace, Some("x"), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "heading \"Notes\" appears 2 times (lines 15, 23); pass `occurrence` (1-based) to pick one"
        );
        let out = edit(DOC, "Notes", Action::Replace, Some("Replaced."), Some(2)).unwrap();
        assert!(out.ends_with("## Notes\n\nReplaced.\n"), "{out}");
        assert!(out.contains("First notes."));
        let out = edit(DOC, "notes", Action::Remove, None, Some(1)).unwrap();
        assert!(
            out.contains("```\n\n# Acceptance") && out.contains("Second notes."),
            "{out}"
        );
        for k in [0, 3] {
            let e = edit(DOC, "Notes", Action::Remove, None, Some(k)).unwrap_err();
            assert!(matches!(e, EditError::OccurrenceOutOfRange { .. }), "{e}");
            assert!(e.to_string().contains("lines 15, 23"), "{e}");
        }
        // A unique heading accepts occurrence 1 only.
        assert!(edit(DOC, "Intro", Action::Remove, None, Some(1)).is_ok());
        assert!(edit(DOC, "Intro", Action::Remove, None, Some(2)).is_err());
    }

    #[test]
    fn not_found_lists_the_headings() {
        let e = edit(DOC, "Foo", Action::Remove, None, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "heading \"Foo\" not found; the document's headings are: \"Intro\", \"Details\", \"Notes\", \"Acceptance Criteria\""
        );
        let e = edit("just text\n", "Foo", Action::Remove, None, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "heading \"Foo\" not found; the document has no headings"
        );
    }

    #[test]
    fn code_fences_and_setext_are_not_headings() {
        let e = edit(DOC, "not a heading", Action::Remove, None, None).unwrap_err();
        assert!(matches!(e, EditError::NotFound { .. }));
        // The fenced "# not a heading" is no boundary: Details runs through the fence.
        let out = edit(DOC, "Details", Action::Remove, None, None).unwrap();
        assert!(
            !out.contains("not a heading") && out.contains("## Notes\n\nFirst"),
            "{out}"
        );
        let setext = "Title\n=====\n\ntext\n\nSub\n---\n";
        assert!(headings(setext).is_empty());
        assert!(edit(setext, "Title", Action::Remove, None, None).is_err());
    }

    #[test]
    fn matching_is_case_insensitive_and_ignores_hash_marks() {
        for q in [
            "acceptance criteria",
            "  ACCEPTANCE   criteria ",
            "# Acceptance Criteria",
            "##Acceptance Criteria",
            "# acceptance criteria #",
        ] {
            let h = find_section(DOC, q, None).unwrap_or_else(|e| panic!("{q}: {e}"));
            assert_eq!(h.line, 19, "{q}");
        }
        // A heading whose text itself starts with `#`.
        let md = "# #tag\nx\n# tag\ny\n";
        assert_eq!(find_section(md, "#tag", None).unwrap().line, 1);
        assert_eq!(find_section(md, "# #tag", None).unwrap().line, 1);
        assert_eq!(find_section(md, "tag", None).unwrap().line, 3);
        let md = "# # x\n";
        assert_eq!(find_section(md, "# x", None).unwrap().line, 1);
    }

    #[test]
    fn random_documents_never_panic() {
        const PIECES: &[&str] = &[
            "# A\n",
            "## a\n",
            "### B\r\n",
            "# é ü\n",
            "## A ##\n",
            "```\n",
            "~~~\n",
            "````\n",
            "text\n",
            "\n",
            "\r\n",
            "\r",
            "é",
            "日本",
            "#x\n",
            "  # C\n",
            "    # D\n",
            "  \n",
            "- item\n",
            "Setext\n===\n",
            "\t\n",
            "# \n",
        ];
        let mut rng = crate::test_rng::XorShift::new(0x9E37_79B9_7F4A_7C15);
        let mut next = move |n: usize| rng.below(n as u64) as usize;
        let texts = |hs: &[Heading]| {
            hs.iter()
                .map(|h| (h.level, normalized(&h.text)))
                .collect::<Vec<_>>()
        };
        for _ in 0..1500 {
            let md: String = (0..next(25)).map(|_| PIECES[next(PIECES.len())]).collect();
            let hs = headings(&md);
            for (i, h) in hs.iter().enumerate() {
                assert!(h.start < h.body_start || h.body_start == md.len());
                assert!(h.body_start <= h.end && h.end <= md.len());
                let occurrence = hs[..i]
                    .iter()
                    .filter(|x| normalized(&x.text) == normalized(&h.text))
                    .count()
                    + 1;
                let query = format!("## {}", h.text);
                assert_eq!(
                    find_section(&md, &query, Some(occurrence)).unwrap(),
                    *h,
                    "{md:?}"
                );
                let inside = |x: &Heading| x.start >= h.start && x.start < h.end;
                let kept: Vec<Heading> = hs.iter().filter(|x| !inside(x)).cloned().collect();
                for action in Action::ALL {
                    let content = PIECES[next(PIECES.len())];
                    let out = edit(&md, &query, action, Some(content), Some(occurrence))
                        .unwrap_or_else(|e| panic!("{md:?} {action}: {e}"));
                    // Only the section's lines move.
                    let (keep_before, keep_after) = match action {
                        Action::InsertBefore => (h.start, h.start),
                        Action::InsertAfter => (h.end, h.end),
                        _ => (h.start, h.end),
                    };
                    if !(action == Action::Remove && h.end == md.len()) {
                        assert!(out.starts_with(&md[..keep_before]), "{md:?} -> {out:?}");
                        assert!(out.ends_with(&md[keep_after..]), "{md:?} -> {out:?}");
                    }
                    let out_texts = texts(&headings(&out));
                    let contains_fence = |s: &str| s.lines().any(|l| fence(l).is_some());
                    if action == Action::Remove {
                        assert_eq!(out_texts, texts(&kept), "{md:?} -> {out:?}");
                    }
                    if action == Action::Replace
                        && !contains_fence(content)
                        && atx_heading(content.trim()).is_none()
                    {
                        let mut want = kept.clone();
                        let at = want
                            .iter()
                            .position(|x| x.start > h.start)
                            .unwrap_or(want.len());
                        want.insert(at, h.clone());
                        assert_eq!(out_texts, texts(&want), "{md:?} -> {out:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn crlf_documents_stay_crlf() {
        let md = DOC.replace('\n', "\r\n");
        let out = edit(&md, "Details", Action::Replace, Some("One\nTwo\n"), None).unwrap();
        assert!(
            out.contains("## Details\r\n\r\nOne\r\nTwo\r\n\r\n## Notes\r\n"),
            "{out:?}"
        );
        assert!(!out.replace("\r\n", "").contains('\n'), "{out:?}");
        let out = edit(&md, "Notes", Action::Append, Some("tail"), Some(2)).unwrap();
        assert!(out.ends_with("Second notes.\r\n\r\ntail\r\n"), "{out:?}");
        let hs = headings(&md);
        assert_eq!(&md[hs[0].start..hs[0].body_start], "# Intro\r\n");
        assert_eq!(hs[4].line, 23);
    }

    #[test]
    fn bytes_outside_the_edit_are_kept() {
        // Odd spacing elsewhere is left alone, and so is the gap that ends the section edited.
        let md = "# A\n\n\n\ntext  \n\n\n\n# B\nb\n\n\n\n# C\n   indented c\n\n\n";
        let out = edit(md, "B", Action::Replace, Some("new b"), None).unwrap();
        assert_eq!(
            out,
            "# A\n\n\n\ntext  \n\n\n\n# B\nnew b\n\n\n\n# C\n   indented c\n\n\n"
        );
        let out = edit(md, "B", Action::Remove, None, None).unwrap();
        assert_eq!(out, "# A\n\n\n\ntext  \n\n\n\n# C\n   indented c\n\n\n");
        // Removing the last section drops the blank lines it leaves at the end.
        let out = edit(md, "C", Action::Remove, None, None).unwrap();
        assert_eq!(out, "# A\n\n\n\ntext  \n\n\n\n# B\nb\n");
        // A file without a final line end gets one only where text is added after it.
        assert_eq!(
            edit("# A\nx\n# B\ny", "A", Action::Append, Some("z"), None).unwrap(),
            "# A\nx\n\nz\n\n# B\ny"
        );
        assert_eq!(
            edit("# A\nx", "A", Action::Append, Some("z"), None).unwrap(),
            "# A\nx\n\nz\n"
        );
    }

    #[test]
    fn set_title_rewrites_the_first_h1_or_adds_one() {
        assert_eq!(
            set_title("intro\n# Old ##\r\nx\n# Other\n", " New "),
            "intro\n# New\r\nx\n# Other\n"
        );
        // A first heading that is no H1 stays; the new H1 comes first.
        assert_eq!(
            set_title("## Sub\n# Later\n", "New"),
            "# New\n\n## Sub\n# Later\n"
        );
        assert_eq!(set_title("## Sub\nx\n", "New"), "# New\n\n## Sub\nx\n");
        assert_eq!(set_title("", "New"), "# New\n");
        assert_eq!(
            set_title("```\n# code\n```\n", "T"),
            "# T\n\n```\n# code\n```\n"
        );
    }
}
