//! Docid globs: the `pattern` a model claims its documents by (`*` within a folder, `**`
//! across folders).

use super::validation::quote;

/// A docid glob: `/`-separated segments; `*` matches within one segment, `?` one character,
/// a `**` segment any number of segments (at least one when it ends the pattern).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Glob {
    segs: Vec<Seg>,
    pub(super) literal_chars: usize,
}

#[derive(Debug, Clone, PartialEq)]
enum Seg {
    AnyDepth,
    Part(Vec<char>),
}

impl Glob {
    pub(super) fn compile(p: &str) -> Result<Glob, String> {
        // Stored docids are NFC; a pattern typed in another form must still match them.
        let p = &*crate::types::validate::nfc(p);
        if p.is_empty() {
            return Err(
                "must not be empty (leave it out for a model chosen only by _model)".into(),
            );
        }
        if p.starts_with('/') {
            return Err(format!(
                "bad glob {}: docids are relative, it must not start with /",
                quote(p)
            ));
        }
        if let Some(c) = p
            .chars()
            .find(|c| c.is_control() || matches!(c, '[' | ']' | '{' | '}' | '\\'))
        {
            return Err(format!(
                "bad glob {}: {:?} is not supported (use * for one segment, ** for any, ? for one character)",
                quote(p),
                c
            ));
        }
        let mut segs = Vec::new();
        for seg in p.split('/') {
            if seg.is_empty() {
                return Err(format!(
                    "bad glob {}: empty path segment{}",
                    quote(p),
                    if p.ends_with('/') {
                        " (a folder is matched by prefix, or by pattern \"folder/**\")"
                    } else {
                        ""
                    }
                ));
            }
            if seg == "**" {
                if segs.last() == Some(&Seg::AnyDepth) {
                    return Err(format!("bad glob {}: ** follows **", quote(p)));
                }
                segs.push(Seg::AnyDepth);
            } else if seg.contains("**") {
                return Err(format!(
                    "bad glob {}: ** must be a whole segment (as in a/**/b)",
                    quote(p)
                ));
            } else {
                segs.push(Seg::Part(seg.chars().collect()));
            }
        }
        let literal_chars = p.chars().filter(|c| !matches!(c, '*' | '?')).count();
        Ok(Glob {
            segs,
            literal_chars,
        })
    }

    pub(super) fn matches(&self, docid: &str) -> bool {
        let parts: Vec<&str> = docid.split('/').collect();
        let (n, m) = (self.segs.len(), parts.len());
        // ok[i][j]: segs[i..] match parts[j..].
        let mut ok = vec![vec![false; m + 1]; n + 1];
        ok[n][m] = true;
        for i in (0..n).rev() {
            for j in (0..=m).rev() {
                ok[i][j] = match &self.segs[i] {
                    Seg::AnyDepth if i == n - 1 => j < m,
                    Seg::AnyDepth => ok[i + 1][j] || (j < m && ok[i][j + 1]),
                    Seg::Part(p) => j < m && ok[i + 1][j + 1] && wild(p, parts[j]),
                };
            }
        }
        ok[0][0]
    }
}

/// `*` (any run) and `?` (one character) within one segment.
fn wild(p: &[char], s: &str) -> bool {
    let s: Vec<char> = s.chars().collect();
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}
