//! Content preprocessing before hashing (text types only): strip a BOM, CRLF/CR → LF,
//! Unicode NFC, trim surrounding whitespace.

use unicode_normalization::{UnicodeNormalization, is_nfc_quick};

use crate::error::{KbError, Result};

pub fn preprocess(raw: &str) -> String {
    // Every leading BOM and the whitespace around it: stripping only the first BOM left a
    // second one (or one after leading whitespace) in front, so preprocessing the result again
    // gave other bytes, and re-learning a retrieved section another kbid.
    let s = raw.trim_start_matches(|c: char| c == '\u{feff}' || c.is_whitespace());
    let s = if s.contains('\r') {
        s.replace("\r\n", "\n").replace('\r', "\n")
    } else {
        s.to_string()
    };
    let s = match is_nfc_quick(s.chars()) {
        unicode_normalization::IsNormalized::Yes => s,
        _ => s.nfc().collect(),
    };
    s.trim().to_string()
}

/// Decode bytes as UTF-8, naming `field` and the byte offset of the first bad byte on failure.
pub fn decode_utf8(field: &str, bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes).map_err(|e| {
        KbError::invalid(
            field,
            format!(
                "is not valid UTF-8 (first invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_bom_line_endings_nfc_and_whitespace() {
        assert_eq!(preprocess("\u{feff}  a\r\nb\rc \n"), "a\nb\nc");
        // e + combining acute → é (NFC)
        assert_eq!(preprocess("Cafe\u{301}"), "Caf\u{e9}");
        assert_eq!(preprocess(" \t\n "), "");
    }

    #[test]
    fn is_idempotent_with_several_leading_boms() {
        for raw in [
            "\u{feff}\u{feff}sS sS",
            " \u{feff}x",
            "\u{feff}\r\n\u{feff} y\u{feff}",
        ] {
            let once = preprocess(raw);
            assert_eq!(preprocess(&once), once, "{raw:?}");
        }
        assert_eq!(preprocess("\u{feff}\u{feff}sS sS"), "sS sS");
    }

    #[test]
    fn reports_offset_of_invalid_utf8() {
        let e = decode_utf8("content", vec![b'a', b'b', 0xff]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "content: is not valid UTF-8 (first invalid byte at offset 2)"
        );
    }
}
