//! Reference markers inside section text: markdown links (inline and reference definitions),
//! bare `kbdb://section/<kbid>` and `kbdb://document/<docid>` URIs, wiki-links `[[docid]]` /
//! `[[docid#heading]]` / `[[docid|label]]`, and relative links to other markdown files
//! (`other.md#anchor`), resolved against the folder of the document the text is learned into.
//! Code (fenced blocks and inline code spans) never holds references.
//! The rules are written down in docs/references.md.

use serde::{Deserialize, Serialize};

use crate::types::kbid::is_kbid;

/// How a reference was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MarkerType {
    /// A markdown link `[text](dest)` or reference definition `[id]: dest`.
    Link,
    /// A bare `kbdb://…` URI in the text.
    Uri,
    /// `[[docid]]`, `[[docid#heading]]`, `[[docid|label]]`.
    Wikilink,
}

impl MarkerType {
    pub fn as_str(self) -> &'static str {
        match self {
            MarkerType::Link => "link",
            MarkerType::Uri => "uri",
            MarkerType::Wikilink => "wikilink",
        }
    }
}

/// What a reference points at. Targets are names, resolved when read: a reference to something
/// not learned yet resolves once it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Target {
    Section(String),
    /// A document, optionally one of its headings (anchor as a slug, see [`slug`]).
    Document {
        docid: String,
        anchor: Option<String>,
    },
}

impl Target {
    /// The key of the backward-edge table: `s\0<kbid>`, `d\0<docid>` or `d\0<docid>\0<slug>`
    /// (NUL cannot occur in a kbid, a docid or a slug).
    pub fn key(&self) -> String {
        match self {
            Target::Section(k) => format!("s\0{k}"),
            Target::Document {
                docid,
                anchor: None,
            } => format!("d\0{docid}"),
            Target::Document {
                docid,
                anchor: Some(a),
            } => format!("d\0{docid}\0{a}"),
        }
    }

    /// The target as a `kbdb://` URI (what results show).
    pub fn uri(&self) -> String {
        match self {
            Target::Section(k) => format!("kbdb://section/{k}"),
            Target::Document {
                docid,
                anchor: None,
            } => format!("kbdb://document/{docid}"),
            Target::Document {
                docid,
                anchor: Some(a),
            } => format!("kbdb://document/{docid}#{a}"),
        }
    }
}

/// One reference found in a text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    pub target: Target,
    pub marker_type: MarkerType,
    /// The text around the marker, whitespace collapsed, at most ~`SNIPPET_RADIUS` characters
    /// each side, cut ends marked with `…`.
    pub context_snippet: String,
}

/// Characters of context kept on each side of a marker.
pub const SNIPPET_RADIUS: usize = 60;
/// Markers kept per section (the rest are ignored; a section is not a link farm).
pub const MAX_MARKERS: usize = 1000;

/// GitHub-style heading slug: lowercase; letters, digits, `-` and `_` kept; spaces become `-`;
/// everything else dropped. `slug("Getting Started!") == "getting-started"`.
pub fn slug(heading: &str) -> String {
    let mut out = String::with_capacity(heading.len());
    for c in heading.trim().chars() {
        if c.is_alphanumeric() || c == '_' || c == '-' {
            out.extend(c.to_lowercase());
        } else if c.is_whitespace() {
            out.push('-');
        }
    }
    out
}

/// Every reference marker of `text`, in order of appearance. `base_docid` is the document the
/// text is learned into: relative links and `#anchor` links resolve against it (without it they
/// are not references).
pub fn extract(text: &str, base_docid: Option<&str>) -> Vec<Marker> {
    let mut out = Vec::new();
    let mut offset = 0;
    let mut fence: Option<(char, usize)> = None;
    for line in text.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        if let Some((c, n)) = fence_of(line) {
            match fence {
                None => {
                    fence = Some((c, n));
                    continue;
                }
                Some((fc, fnum)) if fc == c && n >= fnum && line.trim().chars().all(|x| x == c) => {
                    fence = None;
                    continue;
                }
                Some(_) => {}
            }
        }
        if fence.is_some() {
            continue;
        }
        scan_line(text, start, line, base_docid, &mut out);
        if out.len() >= MAX_MARKERS {
            out.truncate(MAX_MARKERS);
            break;
        }
    }
    out
}

fn fence_of(line: &str) -> Option<(char, usize)> {
    super::markdown::fence(line.trim_end_matches(['\n', '\r']))
}

/// Scan one line (outside fenced code) for markers. `start` is the line's byte offset in
/// `text`, for context snippets.
fn scan_line(text: &str, start: usize, line: &str, base: Option<&str>, out: &mut Vec<Marker>) {
    // Reference definition: `[id]: dest`.
    let trimmed = line.trim_start_matches(' ');
    if line.len() - trimmed.len() <= 3
        && trimmed.starts_with('[')
        && !trimmed.starts_with("[[")
        && let Some(close) = trimmed.find("]:")
    {
        let dest = trimmed[close + 2..].trim();
        let dest = dest.split_whitespace().next().unwrap_or("");
        if let Some(target) = link_target(dest.trim_matches(['<', '>']), base) {
            push(
                out,
                text,
                start,
                start + line.len(),
                target,
                MarkerType::Link,
            );
        }
        return;
    }
    let bytes = line.as_bytes();
    let mut links = LinkScan::new(line);
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'`' => {
                // Inline code span: skip to the closing run of the same length.
                let run = bytes[i..].iter().take_while(|&&b| b == b'`').count();
                let fence = &line[i..i + run];
                match line[i + run..].find(fence) {
                    Some(end) => i += run + end + run,
                    None => i += run,
                }
            }
            b'[' if bytes.get(i + 1) == Some(&b'[') => match links.wiki_close(i) {
                Some(end) => {
                    let inner = &line[i + 2..i + 2 + end];
                    if let Some(target) = wiki_target(inner, base) {
                        push(
                            out,
                            text,
                            start + i,
                            start + i + 4 + end,
                            target,
                            MarkerType::Wikilink,
                        );
                    }
                    i += 4 + end;
                }
                None => i += 2,
            },
            b'[' => match links.inline_link(i) {
                Some((dest, len)) => {
                    if let Some(target) = link_target(dest, base) {
                        // `![alt](…)` images count from the `!`.
                        let from = if i > 0 && bytes[i - 1] == b'!' {
                            i - 1
                        } else {
                            i
                        };
                        push(
                            out,
                            text,
                            start + from,
                            start + i + len,
                            target,
                            MarkerType::Link,
                        );
                    }
                    i += len;
                }
                None => i += 1,
            },
            b'k' if line[i..].starts_with("kbdb://") => {
                let len = line[i..]
                    .find(|c: char| {
                        c.is_whitespace() || matches!(c, ')' | ']' | '>' | '<' | '"' | '\'' | '`')
                    })
                    .unwrap_or(line.len() - i);
                let uri = line[i..i + len].trim_end_matches(['.', ',', ';', ':', '!', '?']);
                if let Some(target) = kbdb_uri(uri) {
                    push(
                        out,
                        text,
                        start + i,
                        start + i + uri.len(),
                        target,
                        MarkerType::Uri,
                    );
                }
                i += len.max(1);
            }
            _ => i += 1,
        }
    }
}

fn push(out: &mut Vec<Marker>, text: &str, from: usize, to: usize, t: Target, m: MarkerType) {
    out.push(Marker {
        target: t,
        marker_type: m,
        context_snippet: context_snippet(text, from, to),
    });
}

/// `[text](dest "title")` at the start of `s`: the destination and the byte length of the
/// whole link. Brackets in the text may nest. The rule, as a scan from one `[`: [`LinkScan`]
/// applies it at every `[` of a text at once (tests check that both agree).
#[cfg(test)]
pub(crate) fn inline_link(s: &str) -> Option<(&str, usize)> {
    let bytes = s.as_bytes();
    let mut depth = 0usize;
    let mut close = None;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 1,
            b'[' => depth += 1,
            b']' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(i);
                    break;
                }
            }
            _ => {}
        }
        i += 1;
    }
    let close = close?;
    if bytes.get(close + 1) != Some(&b'(') {
        return None;
    }
    let rest = &s[close + 2..];
    let (dest, consumed) = if let Some(r) = rest.strip_prefix('<') {
        let end = r.find('>')?;
        let after = r[end + 1..].find(')')?;
        (&r[..end], 1 + end + 1 + after + 1)
    } else {
        let mut depth = 0usize;
        let mut end = None;
        for (j, c) in rest.char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = Some(j);
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let end = end?;
        let inner = rest[..end].trim();
        (inner.split_whitespace().next().unwrap_or(""), end + 1)
    };
    Some((dest, close + 2 + consumed))
}

/// [`inline_link`] and the `[[…]]` close search at any position of one text, in linear time
/// overall. Both scan ahead to a closing bracket or parenthesis, so trying them at every `[` of
/// a long line was quadratic (a 160 KB line of `[a](` took over a minute): here every `[` finds
/// its `]` and every destination its `)` in one pass each, built on first use.
pub(crate) struct LinkScan<'a> {
    text: &'a str,
    index: Option<LinkIndex>,
    /// No `]]` at or after this offset (a `[[` search from here on fails at once).
    no_wiki_close_from: usize,
}

struct LinkIndex {
    /// Every `[` and the `]` that closes it by `inline_link`'s rule, sorted by offset.
    brackets: Vec<(usize, Option<usize>)>,
    /// Every offset just after `](` and the `)` that ends a destination starting there.
    dests: Vec<(usize, Option<usize>)>,
    /// Offsets of every `>` and every `)` (the `<dest>` form takes the next of each).
    gts: Vec<usize>,
    parens: Vec<usize>,
}

/// The first offset in sorted `v` at or after `from`.
fn next_at(v: &[usize], from: usize) -> Option<usize> {
    v.get(v.partition_point(|&p| p < from)).copied()
}

fn closer(v: &[(usize, Option<usize>)], at: usize) -> Option<usize> {
    v.binary_search_by_key(&at, |e| e.0)
        .ok()
        .and_then(|k| v[k].1)
}

impl LinkIndex {
    fn new(text: &str) -> LinkIndex {
        let bytes = text.as_bytes();
        // Brackets: `inline_link` counts `[` +1 and `]` -1 from its start and skips the byte
        // after a backslash. Started anywhere, it reads the bytes after its `[` as a pass from
        // the beginning does, so with `depth` that pass's count, a `[` at `i` is closed by the
        // first later `]` that brings `depth` below its value just after `i`.
        let mut brackets = Vec::new();
        let mut pending: Vec<(usize, i64)> = Vec::new();
        let mut depth = 0i64;
        let mut escaped = false;
        for (x, &b) in bytes.iter().enumerate() {
            if escaped {
                escaped = false;
                if b == b'[' {
                    // A `[` the pass skips is still a start for a scan of its own.
                    pending.push((brackets.len(), depth - 1));
                    brackets.push((x, None));
                }
                continue;
            }
            match b {
                b'\\' => escaped = true,
                b'[' => {
                    pending.push((brackets.len(), depth));
                    brackets.push((x, None));
                    depth += 1;
                }
                b']' => {
                    depth -= 1;
                    while let Some(&(k, target)) = pending.last()
                        && target == depth
                    {
                        brackets[k].1 = Some(x);
                        pending.pop();
                    }
                }
                _ => {}
            }
        }
        // Destinations: from just after `](`, the first `)` at nesting depth 0 (no escapes).
        let mut dests = Vec::new();
        let mut pending: Vec<(usize, i64)> = Vec::new();
        let mut depth = 0i64;
        let (mut gts, mut parens) = (Vec::new(), Vec::new());
        for (x, &b) in bytes.iter().enumerate() {
            if x >= 2 && bytes[x - 2] == b']' && bytes[x - 1] == b'(' {
                pending.push((dests.len(), depth - 1));
                dests.push((x, None));
            }
            match b {
                b'(' => depth += 1,
                b')' => {
                    parens.push(x);
                    depth -= 1;
                    while let Some(&(k, target)) = pending.last()
                        && target == depth
                    {
                        dests[k].1 = Some(x);
                        pending.pop();
                    }
                }
                b'>' => gts.push(x),
                _ => {}
            }
        }
        LinkIndex {
            brackets,
            dests,
            gts,
            parens,
        }
    }
}

impl<'a> LinkScan<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        LinkScan {
            text,
            index: None,
            no_wiki_close_from: usize::MAX,
        }
    }

    /// `inline_link(&text[at..])` for a `[` at `at`.
    pub(crate) fn inline_link(&mut self, at: usize) -> Option<(&'a str, usize)> {
        let text = self.text;
        let bytes = text.as_bytes();
        let idx = self.index.get_or_insert_with(|| LinkIndex::new(text));
        let close = closer(&idx.brackets, at)?;
        if bytes.get(close + 1) != Some(&b'(') {
            return None;
        }
        let s = close + 2;
        let (dest, end) = if bytes.get(s) == Some(&b'<') {
            let gt = next_at(&idx.gts, s + 1)?;
            (&text[s + 1..gt], next_at(&idx.parens, gt + 1)?)
        } else {
            let end = closer(&idx.dests, s)?;
            let inner = text[s..end].trim();
            (inner.split_whitespace().next().unwrap_or(""), end)
        };
        Some((dest, end + 1 - at))
    }

    /// For `[[` at `at`: the offset of the next `]]` after it, relative to `at + 2`.
    pub(crate) fn wiki_close(&mut self, at: usize) -> Option<usize> {
        let from = at + 2;
        if from >= self.no_wiki_close_from {
            return None;
        }
        let found = self.text[from..].find("]]");
        if found.is_none() {
            self.no_wiki_close_from = from;
        }
        found
    }
}

/// The target of a link destination, or None when it is not a reference (web links, files
/// that are not markdown, relative links without a base document).
fn link_target(dest: &str, base: Option<&str>) -> Option<Target> {
    let dest = percent_decode(dest.trim());
    if dest.starts_with("kbdb://") {
        return kbdb_uri(&dest);
    }
    if let Some(anchor) = dest.strip_prefix('#') {
        let docid = base?.to_string();
        return Some(Target::Document {
            docid,
            anchor: nonempty_slug(anchor),
        });
    }
    // Any other scheme (https:, mailto:, file:, …) is not a knowledge-base reference.
    if has_scheme(&dest) || dest.starts_with("//") {
        return None;
    }
    let (path, anchor) = match dest.split_once('#') {
        Some((p, a)) => (p, nonempty_slug(a)),
        None => (dest.as_str(), None),
    };
    let path = path.split('?').next().unwrap_or("");
    let stem = [".md", ".mdx", ".markdown"]
        .iter()
        .find_map(|ext| path.strip_suffix(ext))?;
    let docid = resolve_relative(base?, stem)?;
    Some(Target::Document { docid, anchor })
}

fn has_scheme(s: &str) -> bool {
    let Some((scheme, _)) = s.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// `kbdb://section/<kbid>` or `kbdb://document/<docid>[#anchor]`.
fn kbdb_uri(uri: &str) -> Option<Target> {
    if let Some(k) = uri.strip_prefix("kbdb://section/") {
        let k = k.to_ascii_lowercase();
        return is_kbid(&k).then_some(Target::Section(k));
    }
    let rest = uri.strip_prefix("kbdb://document/")?;
    let rest = percent_decode(rest);
    let (docid, anchor) = match rest.split_once('#') {
        Some((d, a)) => (d.to_string(), nonempty_slug(a)),
        None => (rest.clone(), None),
    };
    let docid = stored_docid(&docid)?;
    Some(Target::Document { docid, anchor })
}

/// `docid`, `docid#heading`, `docid|label`, `#heading` (same document).
fn wiki_target(inner: &str, base: Option<&str>) -> Option<Target> {
    let name = inner.split('|').next().unwrap_or("").trim();
    let (docid, anchor) = match name.split_once('#') {
        Some((d, a)) => (d.trim(), nonempty_slug(a)),
        None => (name, None),
    };
    let docid = if docid.is_empty() {
        base?.to_string()
    } else {
        docid.to_string()
    };
    let docid = stored_docid(&docid)?;
    Some(Target::Document { docid, anchor })
}

/// A docid named in a reference, as the store keys it (NFC), or None when it is no docid.
fn stored_docid(docid: &str) -> Option<String> {
    crate::types::validate::docid(docid)
        .ok()
        .map(|d| d.into_owned())
}

fn nonempty_slug(anchor: &str) -> Option<String> {
    let s = slug(anchor);
    (!s.is_empty()).then_some(s)
}

/// `stem` (a path without its markdown extension) relative to the folder of `base`, with `.`
/// and `..` segments resolved; a leading `/` means the root of the docid space. None when it
/// climbs above the root or is not a valid docid.
fn resolve_relative(base: &str, stem: &str) -> Option<String> {
    let mut segs: Vec<&str> = if stem.starts_with('/') {
        Vec::new()
    } else {
        let mut b: Vec<&str> = base.split('/').collect();
        b.pop();
        b
    };
    for seg in stem.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                segs.pop()?;
            }
            s => segs.push(s),
        }
    }
    stored_docid(&segs.join("/"))
}

/// `%XX` escapes decoded (two hex digits each). Anything else — a `%` not followed by two hex
/// digits (`%+f`, `%zz`, a trailing `%`) — is kept literally, and so is the whole text when
/// the decoded bytes are not UTF-8. Also decodes the heading of an MCP resource URI.
pub(crate) fn percent_decode(s: &str) -> String {
    if !s.contains('%') {
        return s.to_string();
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && bytes[i + 1].is_ascii_hexdigit()
            && bytes[i + 2].is_ascii_hexdigit()
        {
            let hex = |b: u8| (b as char).to_digit(16).unwrap_or(0) as u8;
            out.push(hex(bytes[i + 1]) * 16 + hex(bytes[i + 2]));
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_string())
}

/// The text around `text[from..to]` within its paragraph: up to `SNIPPET_RADIUS` characters
/// each side, whitespace collapsed, `…` where it was cut.
pub fn context_snippet(text: &str, from: usize, to: usize) -> String {
    // Stay inside the marker's paragraph (blank lines bound it).
    let para_start = text[..from].rfind("\n\n").map(|i| i + 2).unwrap_or(0);
    let para_end = text[to..]
        .find("\n\n")
        .map(|i| to + i)
        .unwrap_or(text.len());
    let before = &text[para_start..from];
    let after = &text[to..para_end];
    let mut left: Vec<char> = before.chars().rev().take(SNIPPET_RADIUS + 1).collect();
    let left_cut = left.len() > SNIPPET_RADIUS;
    left.truncate(SNIPPET_RADIUS);
    left.reverse();
    let mut right: Vec<char> = after.chars().take(SNIPPET_RADIUS + 1).collect();
    let right_cut = right.len() > SNIPPET_RADIUS;
    right.truncate(SNIPPET_RADIUS);
    let raw: String = left
        .into_iter()
        .chain(text[from..to].chars())
        .chain(right)
        .collect();
    let mut s = raw.split_whitespace().collect::<Vec<_>>().join(" ");
    if left_cut {
        s.insert(0, '…');
    }
    if right_cut {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(docid: &str, anchor: Option<&str>) -> Target {
        Target::Document {
            docid: docid.into(),
            anchor: anchor.map(Into::into),
        }
    }

    fn targets(text: &str, base: Option<&str>) -> Vec<(Target, MarkerType)> {
        extract(text, base)
            .into_iter()
            .map(|m| (m.target, m.marker_type))
            .collect()
    }

    fn k() -> String {
        crate::types::kbid::kbid_of(b"target")
    }

    #[test]
    fn finds_each_marker_kind() {
        let k = k();
        let text = format!(
            "See [the setup](kbdb://section/{k}) and kbdb://document/guides/intro.\n\
             Also [[ops/runbook#On Call|runbook]], [next](next.md#step-2), [home](/index.md),\n\
             [up](../top.md), [web](https://example.com/a.md), ![pic](kbdb://section/{k}).\n\
             [ref]: <kbdb://document/x%20y>\n"
        );
        assert_eq!(
            targets(&text, Some("guides/intro")),
            vec![
                (Target::Section(k.clone()), MarkerType::Link),
                (doc("guides/intro", None), MarkerType::Uri),
                (doc("ops/runbook", Some("on-call")), MarkerType::Wikilink),
                (doc("guides/next", Some("step-2")), MarkerType::Link),
                (doc("index", None), MarkerType::Link),
                (doc("top", None), MarkerType::Link),
                (Target::Section(k.clone()), MarkerType::Link),
                (doc("x y", None), MarkerType::Link),
            ]
        );
    }

    #[test]
    fn code_holds_no_references() {
        let k = k();
        let text = format!(
            "```\n[[a]] kbdb://section/{k}\n```\nuse `[[b]]` here but [[c]]\n~~~~\n[x](y.md)\n~~~~\n"
        );
        assert_eq!(
            targets(&text, Some("d")),
            vec![(doc("c", None), MarkerType::Wikilink)]
        );
    }

    #[test]
    fn relative_links_need_a_base_and_stay_inside() {
        assert!(targets("[a](a.md) [b](#top)", None).is_empty());
        assert!(targets("[a](../../a.md)", Some("x/y")).is_empty());
        assert_eq!(
            targets("[b](#top-part)", Some("x/y")),
            vec![(doc("x/y", Some("top-part")), MarkerType::Link)]
        );
    }

    #[test]
    fn invalid_targets_are_ignored() {
        assert!(targets("kbdb://section/nothex kbdb://document/ [[]] [[/abs]]", None).is_empty());
    }

    #[test]
    fn snippet_is_bounded_and_marks_cuts() {
        let long = "word ".repeat(40);
        let text = format!("{long}[[target]]{long}");
        let m = &extract(&text, None)[0];
        assert!(m.context_snippet.starts_with('…') && m.context_snippet.ends_with('…'));
        assert!(m.context_snippet.contains("[[target]]"));
        assert!(m.context_snippet.chars().count() <= 2 * SNIPPET_RADIUS + 12);
        let short = extract("# Head\n\nsee\n[[t]]  now\n\nnext paragraph", None);
        assert_eq!(short[0].context_snippet, "see [[t]] now");
    }

    #[test]
    fn slugs_like_github() {
        assert_eq!(slug("Getting Started!"), "getting-started");
        assert_eq!(slug("API v2: the_end"), "api-v2-the_end");
        assert_eq!(slug("Überblick"), "überblick");
    }

    /// `LinkScan` gives what `inline_link` gives at every `[`, and the `]]` search agrees.
    #[test]
    fn link_scan_agrees_with_the_scan_from_each_bracket() {
        let samples = [
            "[a](b) [c](<d e> \"t\") [x]",
            "[a [b](c)](d) ![i](p.png) [e](f(g)h) [u](v (w)",
            "\\[a](b) [\\]](c) \\\\[d](e) [f\\](g)",
            "[a](<b) [c](<d>) [e](<f> ) ) [g]( h i ) [j]()",
            "]] [[x]] [[y [z](w.md) [[",
            "[é](ü) [日本](語) [\\é](x)",
            "[[[a]]] [a[b[c]d]e](f) [a]](b) [a](b))",
        ];
        // And random mixes of the characters the scans care about (xorshift, fixed seed).
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut random = Vec::new();
        for _ in 0..2000 {
            let mut text = String::new();
            for _ in 0..(state % 60) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let alphabet = ['[', ']', '(', ')', '<', '>', '\\', 'a', ' ', 'é'];
                text.push(alphabet[(state % alphabet.len() as u64) as usize]);
            }
            state = state.wrapping_add(1);
            random.push(text);
        }
        for text in samples
            .iter()
            .copied()
            .chain(random.iter().map(String::as_str))
        {
            let mut scan = LinkScan::new(text);
            for (i, _) in text.match_indices('[') {
                assert_eq!(
                    scan.inline_link(i),
                    inline_link(&text[i..]),
                    "{text:?} at {i}"
                );
            }
            let mut scan = LinkScan::new(text);
            for (i, _) in text.match_indices("[[") {
                assert_eq!(
                    scan.wiki_close(i),
                    text[i + 2..].find("]]"),
                    "{text:?} at {i}"
                );
            }
        }
    }

    /// Lines built to make a scan from every `[` run to the end of the line (quadratic: over a
    /// minute for 160 KB) are read in linear time.
    #[test]
    fn long_hostile_lines_are_linear() {
        let n = 1 << 20;
        for unit in ["[a", "[[", "[a](", "[x](<", "[a](b", "[a]("] {
            let line = unit.repeat(n / unit.len());
            let start = std::time::Instant::now();
            let found = extract(&line, Some("d/e")).len();
            let took = start.elapsed();
            assert!(found <= MAX_MARKERS);
            assert!(
                took < std::time::Duration::from_secs(20),
                "{unit:?} × {}: {took:?}",
                n / unit.len()
            );
        }
    }

    #[test]
    fn hostile_text_does_not_panic() {
        for s in [
            "[",
            "[[",
            "[]( ",
            "[a](<b",
            "kbdb://",
            "%",
            "[x](%zz.md)",
            "`",
            "[a](b.md#%E2%82",
        ] {
            let _ = extract(s, Some("d"));
        }
    }
}
