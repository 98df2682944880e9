//! Text handling: preprocessing before hashing, word tokens and shingles.

pub mod frontmatter;
pub mod markdown;
pub mod markers;
pub mod preprocess;
pub mod section_edit;
pub mod shingles;
pub mod values;

pub use preprocess::preprocess;

/// A short, single-line preview of user input for error messages (char-boundary safe).
pub fn preview(s: &str, max_chars: usize) -> String {
    let mut out: String = s
        .chars()
        .take(max_chars)
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect();
    if s.chars().count() > max_chars {
        out.push('…');
    }
    out
}
