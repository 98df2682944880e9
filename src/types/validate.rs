//! Field rules shared by every entry point. Limits are documented in docs/limits.md.

use crate::error::{KbError, Result};
use crate::text::preview;

pub const MAX_DOCID_BYTES: usize = 256;
pub const MAX_TITLE_CHARS: usize = 1024;
pub const MAX_DESCRIPTION_CHARS: usize = 4096;
pub const MAX_TAG_CHARS: usize = 128;
pub const MAX_TAGS: usize = 64;
pub const MAX_SOURCE_CHARS: usize = 1024;
/// Largest document metadata, as JSON text.
pub const MAX_METADATA_BYTES: usize = 64 * 1024;

/// A docid as the store keys it: `docid` checked by [`validate_docid`] and put in Unicode
/// Normalization Form C, so `café` typed with a combining accent and with a precomposed `é`
/// name the same document (a file name from macOS and one from Linux, a pasted link and a
/// typed one). Every entry that takes a docid from a user goes through here; the store holds
/// only NFC docids (migration 0014 renamed older ones). Borrowed when already NFC.
pub fn docid(docid: &str) -> Result<std::borrow::Cow<'_, str>> {
    let docid = nfc(docid);
    validate_docid(&docid)?;
    Ok(docid)
}

/// A docid prefix (a filter, or a synced folder's prefix) in NFC, so it matches the NFC docids
/// the store holds. Only its length is checked: a prefix may end in the middle of a segment.
pub fn docid_prefix(prefix: &str) -> std::borrow::Cow<'_, str> {
    nfc(prefix)
}

/// `s` in Unicode Normalization Form C (borrowed when it already is).
pub fn nfc(s: &str) -> std::borrow::Cow<'_, str> {
    use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick};
    match is_nfc_quick(s.chars()) {
        IsNormalized::Yes => std::borrow::Cow::Borrowed(s),
        _ => std::borrow::Cow::Owned(s.nfc().collect()),
    }
}

/// A docid is a printable, relative, folder-safe path: it may contain `/` between non-empty
/// segments, but never `..`/`.` segments, a leading `/`, a backslash, or control characters.
pub fn validate_docid(docid: &str) -> Result<()> {
    let f = "docid";
    if docid.is_empty() {
        return Err(KbError::invalid(f, "must not be empty"));
    }
    if docid.len() > MAX_DOCID_BYTES {
        return Err(KbError::invalid(
            f,
            format!(
                "is {} bytes long; the limit is {MAX_DOCID_BYTES}",
                docid.len()
            ),
        ));
    }
    if let Some(c) = docid.chars().find(|c| c.is_control()) {
        return Err(KbError::invalid(
            f,
            format!(
                "must not contain control characters (found U+{:04X})",
                c as u32
            ),
        ));
    }
    if docid.starts_with('/') {
        return Err(KbError::invalid(
            f,
            "must be relative (must not start with '/')",
        ));
    }
    if docid.contains('\\') {
        return Err(KbError::invalid(
            f,
            "must not contain '\\' (use '/' between segments)",
        ));
    }
    if docid.trim() != docid {
        return Err(KbError::invalid(f, "must not start or end with whitespace"));
    }
    for seg in docid.split('/') {
        match seg {
            "" => {
                return Err(KbError::invalid(
                    f,
                    "must not contain empty segments ('//' or a trailing '/')",
                ));
            }
            "." | ".." => {
                return Err(KbError::invalid(
                    f,
                    format!("must not contain a '{seg}' segment"),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A single-line text field of bounded length; returns it trimmed, `None` when blank.
pub fn validate_line(field: &str, value: Option<&str>, max_chars: usize) -> Result<Option<String>> {
    let Some(v) = value else { return Ok(None) };
    let v = v.trim();
    if v.is_empty() {
        return Ok(None);
    }
    let n = v.chars().count();
    if n > max_chars {
        return Err(KbError::invalid(
            field,
            format!("is {n} characters long; the limit is {max_chars}"),
        ));
    }
    if v.chars().any(|c| c.is_control() && c != '\t') {
        return Err(KbError::invalid(
            field,
            "must be a single line without control characters",
        ));
    }
    Ok(Some(v.to_string()))
}

/// Descriptions may span lines but are bounded.
pub fn validate_description(value: Option<&str>) -> Result<Option<String>> {
    let Some(v) = value else { return Ok(None) };
    let v = crate::text::preprocess(v);
    if v.is_empty() {
        return Ok(None);
    }
    let n = v.chars().count();
    if n > MAX_DESCRIPTION_CHARS {
        return Err(KbError::invalid(
            "description",
            format!("is {n} characters long; the limit is {MAX_DESCRIPTION_CHARS}"),
        ));
    }
    if v.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Err(KbError::invalid(
            "description",
            "must not contain control characters",
        ));
    }
    Ok(Some(v))
}

/// Tags: trimmed, non-empty, single-line, bounded, de-duplicated keeping first-seen order.
pub fn validate_tags(tags: &[String]) -> Result<Vec<String>> {
    if tags.len() > MAX_TAGS {
        return Err(KbError::invalid(
            "tags",
            format!("has {} entries; the limit is {MAX_TAGS}", tags.len()),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(tags.len());
    for t in tags {
        let tt = t.trim();
        if tt.is_empty() {
            return Err(KbError::invalid("tags", "must not contain an empty tag"));
        }
        if tt.chars().count() > MAX_TAG_CHARS {
            return Err(KbError::invalid(
                "tags",
                format!(
                    "tag '{}' is longer than {MAX_TAG_CHARS} characters",
                    preview(tt, 30)
                ),
            ));
        }
        if tt.chars().any(|c| c.is_control()) {
            return Err(KbError::invalid(
                "tags",
                "a tag must not contain control characters",
            ));
        }
        if !out.iter().any(|o| o == tt) {
            out.push(tt.to_string());
        }
    }
    Ok(out)
}

/// Document metadata: a JSON object of at most `MAX_METADATA_BYTES` as text. Returns the text.
pub fn validate_metadata(meta: &serde_json::Map<String, serde_json::Value>) -> Result<String> {
    let text = serde_json::Value::Object(meta.clone()).to_string();
    if text.len() > MAX_METADATA_BYTES {
        return Err(KbError::invalid(
            "metadata",
            format!(
                "is {} bytes as JSON; the limit is {MAX_METADATA_BYTES}",
                text.len()
            ),
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docid_rules() {
        for ok in [
            "a",
            "epics/authentication",
            "notes/2026-11-30 meeting",
            "ü/ß",
        ] {
            validate_docid(ok).unwrap();
        }
        for bad in [
            "", "/abs", "a/../b", "..", "a/./b", "a//b", "a/", "a\\b", "a\u{0}b", "a\nb", " a",
        ] {
            assert_eq!(
                validate_docid(bad).unwrap_err().field(),
                Some("docid"),
                "{bad:?}"
            );
        }
        assert!(validate_docid(&"x".repeat(MAX_DOCID_BYTES)).is_ok());
        assert!(validate_docid(&"x".repeat(MAX_DOCID_BYTES + 1)).is_err());
    }

    #[test]
    fn tags_are_trimmed_and_deduplicated() {
        let t = validate_tags(&[" a ".into(), "b".into(), "a".into()]).unwrap();
        assert_eq!(t, vec!["a", "b"]);
        assert!(validate_tags(&["".into()]).is_err());
    }
}
