//! Markdown documents split into heading sections, by the shared rule of the bench kit
//! (`sections.py`): ATX headings start a section, fenced code never does, text before the
//! first heading is a section when it is not blank.

/// One section of a markdown document.
#[derive(Debug, Clone, PartialEq)]
pub struct MdSection {
    /// 1-6 for a heading section, 0 for the preamble.
    pub level: u8,
    /// The heading text ("" for the preamble or an empty heading).
    pub title: String,
    /// The section's lines, heading line included, trailing whitespace removed.
    pub text: String,
}

/// An ATX heading line: 0-3 spaces, 1-6 `#`, then a space/tab or the end of the line.
/// Returns (level, heading text without the optional closing `#` run).
pub fn atx_heading(line: &str) -> Option<(u8, String)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let hashes = rest.len() - rest.trim_start_matches('#').len();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let after = &rest[hashes..];
    if after.is_empty() {
        return Some((hashes as u8, String::new()));
    }
    if !after.starts_with([' ', '\t']) {
        return None;
    }
    let mut content = after.trim_matches([' ', '\t']);
    let without_closing = content.trim_end_matches('#');
    if without_closing.is_empty() {
        content = "";
    } else if without_closing.len() < content.len() && without_closing.ends_with([' ', '\t']) {
        content = without_closing.trim_end_matches([' ', '\t']);
    }
    Some((hashes as u8, content.trim().to_string()))
}

/// A fence line: 0-3 spaces then at least 3 backticks or tildes. Returns (char, run length).
pub(crate) fn fence(line: &str) -> Option<(char, usize)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let c = rest.chars().next()?;
    if c != '`' && c != '~' {
        return None;
    }
    let n = rest.len() - rest.trim_start_matches(c).len();
    (n >= 3).then_some((c, n))
}

/// Split a markdown text into its sections, in order.
pub fn split_sections(text: &str) -> Vec<MdSection> {
    let text = text.replace("\r\n", "\n").replace('\r', "\n");
    let mut out = Vec::new();
    let (mut level, mut title, mut cur): (u8, String, Vec<&str>) = (0, String::new(), Vec::new());
    let mut open: Option<(char, usize)> = None;
    let emit = |level: u8, title: &str, cur: &[&str], out: &mut Vec<MdSection>| {
        if level > 0 || cur.iter().any(|l| !l.trim().is_empty()) {
            out.push(MdSection {
                level,
                title: title.to_string(),
                text: cur.join("\n").trim_end().to_string(),
            });
        }
    };
    for line in text.split('\n') {
        if let Some((c, n)) = open {
            if let Some((c2, n2)) = fence(line)
                && c2 == c
                && n2 >= n
                && line.trim().chars().all(|x| x == c)
            {
                open = None;
            }
            cur.push(line);
            continue;
        }
        if let Some(f) = fence(line) {
            open = Some(f);
            cur.push(line);
            continue;
        }
        if let Some((l, t)) = atx_heading(line) {
            emit(level, &title, &cur, &mut out);
            (level, title, cur) = (l, t, vec![line]);
            continue;
        }
        cur.push(line);
    }
    emit(level, &title, &cur, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_follow_the_shared_rule() {
        assert_eq!(atx_heading("# Title ##"), Some((1, "Title".into())));
        assert_eq!(atx_heading("   ### x#"), Some((3, "x#".into())));
        assert_eq!(atx_heading("#"), Some((1, "".into())));
        assert_eq!(atx_heading("# ###"), Some((1, "".into())));
        assert_eq!(atx_heading("#hashtag"), None);
        assert_eq!(atx_heading("    # indented code"), None);
        assert_eq!(atx_heading("####### seven"), None);
    }

    #[test]
    fn splits_with_preamble_and_fences() {
        let md = "intro\r\n\n# A\ntext\n```\n# not a heading\n```\n## B\n\n~~~~\n# still code\n~~~\n# C\n";
        let s = split_sections(md);
        let titles: Vec<(u8, &str)> = s.iter().map(|x| (x.level, x.title.as_str())).collect();
        assert_eq!(
            titles,
            vec![(0, ""), (1, "A"), (2, "B")],
            "an unclosed fence runs to the end"
        );
        assert_eq!(s[0].text, "intro");
        assert_eq!(s[1].text, "# A\ntext\n```\n# not a heading\n```");
        assert!(
            split_sections("  \n\n# Only\n").len() == 1,
            "a blank preamble is no section"
        );
    }
}
