//! Section MIME types: `text/markdown` (default), any `text/*`, `application/json`, `image/*`,
//! and the internal `skill` type.

use crate::error::{KbError, Result};

pub const DEFAULT_TYPE: &str = "text/markdown";

/// The broad kind of a section type, which decides how content is validated and stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeKind {
    /// Text stored as preprocessed UTF-8 (text/*, skill).
    Text,
    /// JSON text that must parse.
    Json,
    /// Binary image data, supplied as base64.
    Image,
}

/// Parse and normalise (lowercase) a section type, rejecting unknown or ill-formed ones.
pub fn parse_type(raw: Option<&str>) -> Result<(String, TypeKind)> {
    let Some(raw) = raw else {
        return Ok((DEFAULT_TYPE.to_string(), TypeKind::Text));
    };
    let t = raw.trim().to_ascii_lowercase();
    if t == "skill" {
        return Ok((t, TypeKind::Text));
    }
    let Some((top, sub)) = t.split_once('/') else {
        return Err(bad(raw));
    };
    // RFC 6838 restricted-name characters.
    let token_ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 127
            && s.as_bytes()[0].is_ascii_alphanumeric()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    if !token_ok(top) || !token_ok(sub) {
        return Err(bad(raw));
    }
    let kind = match top {
        "text" => TypeKind::Text,
        "image" => TypeKind::Image,
        "application" if sub == "json" => TypeKind::Json,
        _ => {
            return Err(KbError::invalid(
                "type",
                format!(
                    "unsupported type '{}'; use text/markdown (default), another text/* type, application/json or image/*",
                    crate::text::preview(raw, 60)
                ),
            ));
        }
    };
    Ok((t, kind))
}

fn bad(raw: &str) -> KbError {
    KbError::invalid(
        "type",
        format!(
            "'{}' is not a MIME type of the form top/sub (e.g. text/markdown, image/png)",
            crate::text::preview(raw, 60)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_supported_types() {
        assert_eq!(parse_type(None).unwrap().0, "text/markdown");
        assert_eq!(
            parse_type(Some("Text/X-Rust")).unwrap(),
            ("text/x-rust".into(), TypeKind::Text)
        );
        assert_eq!(
            parse_type(Some("application/json")).unwrap().1,
            TypeKind::Json
        );
        assert_eq!(
            parse_type(Some("image/svg+xml")).unwrap().1,
            TypeKind::Image
        );
    }

    #[test]
    fn rejects_unknown_and_malformed_types() {
        for t in [
            "",
            "text",
            "text/",
            "/json",
            "application/pdf",
            "text/a b",
            "video/mp4",
        ] {
            let e = parse_type(Some(t)).unwrap_err();
            assert_eq!(e.field(), Some("type"), "{t}");
        }
    }
}
