//! Untrusted content as HTML: markdown through pulldown-cmark with every raw HTML event turned
//! into escaped text, links and images kept only for safe schemes, code highlighted by a tiny
//! class-based highlighter, and search snippets with their matched terms marked.

use pulldown_cmark::{CodeBlockKind, CowStr, Event, Options, Parser, Tag, TagEnd};

/// `text` escaped for HTML text and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` for a URL's path segment or query value.
pub fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A docid in a path: each `/`-separated part encoded, the slashes kept.
pub fn docid_path(docid: &str) -> String {
    docid
        .split('/')
        .map(url_encode)
        .collect::<Vec<_>>()
        .join("/")
}

/// Where a link in content may point, rewritten for the page: `kbdb://section/KBID` and
/// `kbdb://document/DOCID` become the page's own views; http(s), mailto, relative paths and
/// fragments stay; every other scheme (`javascript:`, `data:`, `vbscript:`, `file:` …) is None.
pub fn safe_link(dest: &str) -> Option<String> {
    let d = dest.trim();
    if let Some(kbid) = d.strip_prefix("kbdb://section/") {
        return Some(format!("/section/{}", url_encode(kbid)));
    }
    if let Some(docid) = d.strip_prefix("kbdb://document/") {
        return Some(format!("/doc/{}", docid_path(docid)));
    }
    // A scheme is letters, digits, + - . before the first ':' (browsers ignore control
    // characters and spaces inside it, so those make the link unsafe too).
    match d.find(':') {
        None => Some(d.to_string()),
        Some(i) => {
            let scheme = &d[..i];
            if scheme.contains(['/', '?', '#']) {
                // The ':' is in the path or query of a relative URL.
                return Some(d.to_string());
            }
            let lower = scheme.to_ascii_lowercase();
            matches!(lower.as_str(), "http" | "https" | "mailto").then(|| d.to_string())
        }
    }
}

/// Where an image may come from: a section of the knowledge base (`kbdb://section/KBID`, served
/// by the page), or a `data:image/{png,gif,jpeg,webp}` URL. Others (remote images would leak
/// the reader's address; CSP refuses them anyway) are None and the image shows as its alt text.
pub fn safe_image(dest: &str) -> Option<String> {
    let d = dest.trim();
    if let Some(kbid) = d.strip_prefix("kbdb://section/") {
        return Some(format!("/raw/{}", url_encode(kbid)));
    }
    let lower = d.to_ascii_lowercase();
    [
        "data:image/png;",
        "data:image/gif;",
        "data:image/jpeg;",
        "data:image/webp;",
    ]
    .iter()
    .any(|p| lower.starts_with(p))
    .then(|| d.to_string())
}

/// Markdown as sanitised HTML. Raw HTML (block or inline) shows as text; links with an unsafe
/// scheme keep their text and lose the link; unsafe images show their alt text.
pub fn markdown(text: &str) -> String {
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_FOOTNOTES;
    let mut events: Vec<Event> = Vec::new();
    // For each open link: whether it was kept (its End is kept too).
    let mut links: Vec<bool> = Vec::new();
    // For each open image: whether it was kept; a dropped image's text (the alt) stays as text.
    let mut images: Vec<bool> = Vec::new();
    // An open code block: its language and text so far.
    let mut code: Option<(String, String)> = None;
    for event in Parser::new_ext(text, options) {
        if let Some((_, body)) = code.as_mut() {
            match event {
                Event::Text(t) | Event::Html(t) | Event::InlineHtml(t) => body.push_str(&t),
                Event::End(TagEnd::CodeBlock) => {
                    let (lang, body) = code.take().unwrap_or_default();
                    events.push(Event::Html(CowStr::from(code_block(&lang, &body))));
                }
                _ => {}
            }
            continue;
        }
        match event {
            Event::Html(t) | Event::InlineHtml(t) => events.push(Event::Text(t)),
            Event::Start(Tag::CodeBlock(kind)) => {
                let lang = match kind {
                    CodeBlockKind::Fenced(l) => l.split_whitespace().next().unwrap_or("").into(),
                    CodeBlockKind::Indented => String::new(),
                };
                code = Some((lang, String::new()));
            }
            Event::Start(Tag::Link {
                link_type,
                dest_url,
                title,
                id,
            }) => match safe_link(&dest_url) {
                Some(url) => {
                    links.push(true);
                    events.push(Event::Start(Tag::Link {
                        link_type,
                        dest_url: url.into(),
                        title,
                        id,
                    }));
                }
                None => links.push(false),
            },
            Event::End(TagEnd::Link) => {
                if links.pop().unwrap_or(false) {
                    events.push(Event::End(TagEnd::Link));
                }
            }
            Event::Start(Tag::Image {
                link_type,
                dest_url,
                title,
                id,
            }) => match safe_image(&dest_url) {
                Some(url) => {
                    images.push(true);
                    events.push(Event::Start(Tag::Image {
                        link_type,
                        dest_url: url.into(),
                        title,
                        id,
                    }));
                }
                None => images.push(false),
            },
            Event::End(TagEnd::Image) => {
                if images.pop().unwrap_or(false) {
                    events.push(Event::End(TagEnd::Image));
                }
            }
            other => events.push(other),
        }
    }
    let mut out = String::with_capacity(text.len() * 3 / 2);
    pulldown_cmark::html::push_html(&mut out, events.into_iter());
    out
}

/// Words the highlighter shows as keywords: the common ones of the usual languages.
const KEYWORDS: &[&str] = &[
    "as",
    "async",
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "def",
    "default",
    "defer",
    "do",
    "elif",
    "else",
    "enum",
    "export",
    "extends",
    "false",
    "fn",
    "for",
    "from",
    "func",
    "function",
    "go",
    "if",
    "impl",
    "import",
    "in",
    "interface",
    "let",
    "loop",
    "match",
    "mod",
    "module",
    "mut",
    "new",
    "nil",
    "None",
    "null",
    "package",
    "pub",
    "return",
    "self",
    "Self",
    "static",
    "struct",
    "switch",
    "this",
    "throw",
    "trait",
    "true",
    "True",
    "False",
    "try",
    "type",
    "use",
    "var",
    "where",
    "while",
    "with",
    "yield",
];

/// A code block as `<pre><code>` with spans for comments, strings, numbers and keywords
/// (class-based: the colours are in the stylesheet). Everything is escaped.
pub fn code_block(lang: &str, body: &str) -> String {
    let class = lang
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(32)
        .collect::<String>();
    let hash_comments = matches!(
        class.as_str(),
        "python" | "py" | "sh" | "bash" | "shell" | "toml" | "yaml" | "yml" | "ruby" | "rb"
    );
    let mut out = String::with_capacity(body.len() * 2);
    out.push_str("<pre><code");
    if !class.is_empty() {
        out.push_str(&format!(" class=\"language-{class}\""));
    }
    out.push('>');
    let chars: Vec<char> = body.chars().collect();
    let mut i = 0;
    let span = |out: &mut String, class: &str, text: &str| {
        out.push_str(&format!("<span class=\"{class}\">{}</span>", escape(text)));
    };
    while i < chars.len() {
        let c = chars[i];
        let rest_starts = |s: &str| {
            s.chars()
                .enumerate()
                .all(|(k, sc)| chars.get(i + k) == Some(&sc))
        };
        if rest_starts("//") || (hash_comments && c == '#') {
            let end = chars[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |p| i + p);
            span(&mut out, "c", &chars[i..end].iter().collect::<String>());
            i = end;
        } else if c == '"' || c == '\'' || c == '`' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != c && chars[j] != '\n' {
                if chars[j] == '\\' {
                    j += 1;
                }
                j += 1;
            }
            let end = (j + 1).min(chars.len());
            span(&mut out, "s", &chars[i..end].iter().collect::<String>());
            i = end;
        } else if c.is_ascii_digit() {
            let mut j = i;
            while j < chars.len()
                && (chars[j].is_ascii_alphanumeric() || chars[j] == '.' || chars[j] == '_')
            {
                j += 1;
            }
            span(&mut out, "n", &chars[i..j].iter().collect::<String>());
            i = j;
        } else if c.is_alphabetic() || c == '_' {
            let mut j = i;
            while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
                j += 1;
            }
            let word: String = chars[i..j].iter().collect();
            if KEYWORDS.contains(&word.as_str()) {
                span(&mut out, "k", &word);
            } else {
                out.push_str(&escape(&word));
            }
            i = j;
        } else {
            out.push_str(&escape(&c.to_string()));
            i += 1;
        }
    }
    out.push_str("</code></pre>\n");
    out
}

/// A search snippet with the words that start with a matched term in `<mark>`.
pub fn snippet(text: &str, terms: &[String]) -> String {
    let terms: Vec<String> = terms
        .iter()
        .map(|t| t.to_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    let mut out = String::with_capacity(text.len() + 32);
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.is_empty() {
            return;
        }
        let lower = word.to_lowercase();
        if terms
            .iter()
            .any(|t| lower.starts_with(t.as_str()) || t.starts_with(&lower) && lower.len() >= 3)
        {
            out.push_str(&format!("<mark>{}</mark>", escape(word)));
        } else {
            out.push_str(&escape(word));
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push_str(&escape(&c.to_string()));
        }
    }
    flush(&mut word, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_html_in_markdown_is_shown_as_text() {
        let html = markdown("hello <script>alert(1)</script>\n\n<img src=x onerror=alert(2)>\n");
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(
            html.contains("&lt;img src=x onerror=alert(2)&gt;"),
            "{html}"
        );
    }

    #[test]
    fn unsafe_links_lose_their_link_and_keep_their_text() {
        let html = markdown(
            "[a](javascript:alert(1)) [b](JaVaScRiPt:x) [c](data:text/html,x) [d](vbscript:x) \
             [e](https://example.com/x) [f](kbdb://section/abc) [g](kbdb://document/notes/to%20day)",
        );
        assert!(!html.to_lowercase().contains("javascript"), "{html}");
        assert!(!html.contains("data:"), "{html}");
        assert!(!html.contains("vbscript"), "{html}");
        for text in ["a", "b", "c", "d"] {
            assert!(
                html.contains(&format!(" {text} ")) || html.contains(&format!(">{text} ")),
                "{text}: {html}"
            );
        }
        assert!(
            html.contains(r#"<a href="https://example.com/x">e</a>"#),
            "{html}"
        );
        assert!(html.contains(r#"<a href="/section/abc">f</a>"#), "{html}");
        assert!(html.contains(r#"href="/doc/notes/to%2520day""#), "{html}");
    }

    #[test]
    fn images_are_kept_only_from_the_knowledge_base_or_data_urls() {
        let html = markdown(
            "![arch](kbdb://section/k1) ![x](https://evil.example/t.png) ![s](data:image/svg+xml,<svg>)",
        );
        assert!(html.contains(r#"<img src="/raw/k1" alt="arch""#), "{html}");
        assert!(!html.contains("evil.example"), "{html}");
        assert!(!html.contains("svg+xml"), "{html}");
    }

    #[test]
    fn code_is_highlighted_and_escaped() {
        let html = markdown("```rust\nfn main() { let s = \"<b>\"; } // done\n```\n");
        assert!(html.contains(r#"<code class="language-rust">"#), "{html}");
        assert!(html.contains(r#"<span class="k">fn</span>"#), "{html}");
        assert!(
            html.contains(r#"<span class="s">&quot;&lt;b&gt;&quot;</span>"#),
            "{html}"
        );
        assert!(html.contains(r#"<span class="c">// done</span>"#), "{html}");
    }

    #[test]
    fn snippets_mark_the_matched_terms_and_escape_the_rest() {
        let s = snippet(
            "Deploys <b>happen</b> on Tuesdays",
            &["deploy".into(), "tuesday".into()],
        );
        assert_eq!(
            s,
            "<mark>Deploys</mark> &lt;b&gt;happen&lt;/b&gt; on <mark>Tuesdays</mark>"
        );
    }
}
