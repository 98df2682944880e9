//! How a section's content is stored in `section_content`: zstd-compressed when that makes it
//! shorter, as is otherwise (from schema version 16, docs/storage.md).
//!
//! No tag marks a compressed row: the section record holds the content's length (`size`), and a
//! compressed row is kept only when it is strictly shorter than the content, so a row of exactly
//! `size` bytes is the content itself — which is how every row written before version 16 reads,
//! and why that version rewrites nothing — and a shorter row is a zstd frame.

use std::borrow::Cow;
use std::cell::RefCell;

/// Content shorter than this is stored as is: a zstd frame's header and checksum-free framing
/// cost ~10 bytes, and a few dozen bytes of text rarely shrink by more.
const MIN_COMPRESSED: usize = 64;
/// zstd's fastest level: on the 100k devdocs corpus it stores the content in 13.5 MB instead of
/// 24.4 (1.8×), as level 3 does (13.4 MB): sections are too short for more effort to find more.
const LEVEL: i32 = 1;
/// The most a row may claim to decompress to (a record's `size` is checked by its CRC, but the
/// allocation is made before the frame is read).
const MAX_DECOMPRESSED: u64 = 1 << 32;

thread_local! {
    // A compression context costs allocations and set-up worth more than compressing a short
    // section: one per thread, reused.
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

/// The row to store for content of `section_type` when it is shorter than the content itself
/// (None: store the content as it is). An image's bytes are compressed already, so they are not
/// tried.
pub fn compress(section_type: &str, content: &[u8]) -> Option<Vec<u8>> {
    if content.len() < MIN_COMPRESSED || section_type.starts_with("image/") {
        return None;
    }
    let compressed = COMPRESSOR.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = zstd::bulk::Compressor::new(LEVEL).ok();
        }
        c.as_mut()?.compress(content).ok()
    })?;
    (compressed.len() < content.len()).then_some(compressed)
}

/// The content of a stored row whose record says the content is `size` bytes long. None when a
/// shorter row is not a zstd frame of exactly `size` bytes (damage: the caller decides what to
/// report).
pub fn decode(row: &[u8], size: u64) -> Option<Cow<'_, [u8]>> {
    if row.len() as u64 == size {
        return Some(Cow::Borrowed(row));
    }
    if row.len() as u64 > size || size > MAX_DECOMPRESSED {
        return None;
    }
    let content = DECOMPRESSOR.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_none() {
            *d = zstd::bulk::Decompressor::new().ok();
        }
        d.as_mut()?.decompress(row, size as usize).ok()
    })?;
    (content.len() as u64 == size).then_some(Cow::Owned(content))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_stored_shorter_and_reads_back() {
        let text = "The write journal commits each group with one sequential fsync. ".repeat(20);
        let row = compress("text/markdown", text.as_bytes()).unwrap();
        assert!(
            row.len() < text.len() / 4,
            "{} of {}",
            row.len(),
            text.len()
        );
        assert_eq!(
            decode(&row, text.len() as u64).as_deref(),
            Some(text.as_bytes())
        );
    }

    #[test]
    fn short_or_incompressible_content_is_stored_as_is() {
        assert_eq!(compress("text/plain", b"a short fact"), None);
        // Bytes that do not compress: a zstd frame would be longer, so the row is the content
        // and its length says so.
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                // xorshift64
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        assert_eq!(compress("application/octet-stream", &noise), None);
        assert_eq!(
            decode(&noise, noise.len() as u64).as_deref(),
            Some(&noise[..])
        );
        // An image is not tried, however well it would compress.
        let text = "a text stored under an image type ".repeat(20);
        assert!(compress("text/plain", text.as_bytes()).is_some());
        assert_eq!(compress("image/png", text.as_bytes()), None);
    }

    #[test]
    fn a_damaged_row_decodes_to_nothing() {
        let text = "reference markers in text order, one row per marker ".repeat(10);
        let mut row = compress("text/plain", text.as_bytes()).unwrap();
        let size = text.len() as u64;
        // Cut short, or a byte changed inside the frame, or a size the frame does not hold.
        assert_eq!(decode(&row[..row.len() - 3], size), None);
        assert_eq!(decode(&row, size + 1), None);
        assert_eq!(decode(&row, size - 1), None);
        row[4] ^= 0xff;
        assert!(decode(&row, size).is_none_or(|c| c.as_ref() != text.as_bytes()));
        // Longer than the record says: never a frame of this content.
        assert_eq!(decode(text.as_bytes(), size - 1), None);
    }
}
