//! How a section's content is stored in `section_content`: zstd-compressed when that makes it
//! shorter, as is otherwise (from schema version 16), and compressed with the database's
//! content dictionary once it has one (from schema version 21; docs/storage.md).
//!
//! No tag marks a compressed row: the section record holds the content's length (`size`), and a
//! compressed row is kept only when it is strictly shorter than the content, so a row of exactly
//! `size` bytes is the content itself — which is how every row written before version 16 reads,
//! and why that version rewrites nothing — and a shorter row is a zstd frame. A frame made with a
//! dictionary names it in its header (zstd's dictionary id), so rows made before the database had
//! its dictionary read as before, and nothing is rewritten when it gets one.
//!
//! Dictionaries are registered process-wide by id ([`install`]): a read only has the row, and the
//! id, derived from the dictionary's bytes, names the same dictionary in every database that
//! holds it. A dictionary lives as long as the process (a few hundred KiB, one per database ever
//! opened).

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::{PoisonError, RwLock};

use sha2::{Digest, Sha256};
use zstd::dict::{DecoderDictionary, EncoderDictionary};

/// Content shorter than this is stored as is: a zstd frame's header and checksum-free framing
/// cost ~10 bytes, and a few dozen bytes of text rarely shrink by more.
const MIN_COMPRESSED: usize = 64;
/// zstd's fastest level, without a dictionary: on the 100k devdocs corpus it stores the content
/// in 13.5 MB instead of 24.4 (1.8×), as level 3 does (13.4 MB): sections are too short for more
/// effort to find more.
const LEVEL: i32 = 1;
/// The level with the dictionary: a trained dictionary gives level 3 something to find (10.0 MB
/// against 10.7 at level 1 on the same corpus), and compressing with it is still faster than
/// level 1 without (docs/performance.md).
const DICTIONARY_LEVEL: i32 = 3;
/// The most a row may claim to decompress to (a record's `size` is checked by its CRC, but the
/// allocation is made before the frame is read).
const MAX_DECOMPRESSED: u64 = 1 << 32;
/// The size of a trained dictionary.
pub const DICTIONARY_BYTES: usize = 64 << 10;
/// The most bytes of one section a dictionary is trained on, and of all of them: training reads
/// its samples in memory, and a few thousand sections' openings are what it needs.
const SAMPLE_PREFIX: usize = 8 << 10;
const SAMPLES_TOTAL: usize = 16 << 20;

/// A content dictionary: its bytes (as stored in `meta`), its id, and zstd's prepared forms.
pub struct Dictionary {
    pub id: u32,
    pub bytes: Vec<u8>,
    encoder: EncoderDictionary<'static>,
    decoder: DecoderDictionary<'static>,
}

impl std::fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dictionary")
            .field("id", &self.id)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// The dictionaries this process has installed (few: one per database with one).
static DICTIONARIES: RwLock<Vec<&'static Dictionary>> = RwLock::new(Vec::new());

thread_local! {
    // A compression context costs allocations and set-up worth more than compressing a short
    // section: one per thread, reused (one without a dictionary, one with the last used).
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
    static DICTIONARY_COMPRESSOR: RefCell<Option<(u32, zstd::bulk::Compressor<'static>)>> =
        const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
    static DICTIONARY_DECOMPRESSOR: RefCell<Option<(u32, zstd::bulk::Decompressor<'static>)>> =
        const { RefCell::new(None) };
}

thread_local! {
    static PREPARING: std::cell::Cell<Option<&'static Dictionary>> = const { std::cell::Cell::new(None) };
}

/// Run `prepare` with `dictionary` as the one `preparing_dictionary` gives on this thread: a
/// write's preparation (src/learn.rs) compresses its content on the thread that prepares it,
/// out of the writer's way, and is handed the database's dictionary this way rather than
/// through every function that splits and validates on the way there. A row prepared with
/// another (or none) is compressed again by the writer (`WriteTables::put_prepared_content`),
/// so this decides where the work is done, never what is stored.
pub fn preparing_with<T>(
    dictionary: Option<&'static Dictionary>,
    prepare: impl FnOnce() -> T,
) -> T {
    struct Restore(Option<&'static Dictionary>);
    impl Drop for Restore {
        fn drop(&mut self) {
            PREPARING.set(self.0);
        }
    }
    let _restore = Restore(PREPARING.replace(dictionary));
    prepare()
}

/// The dictionary the preparation running on this thread compresses with (`preparing_with`).
pub fn preparing_dictionary() -> Option<&'static Dictionary> {
    PREPARING.get()
}

/// The row to store for content of `section_type` when it is shorter than the content itself
/// (None: store the content as it is), compressed with `dictionary` when there is one. An
/// image's bytes are compressed already, so they are not tried.
pub fn compress(
    section_type: &str,
    content: &[u8],
    dictionary: Option<&'static Dictionary>,
) -> Option<Vec<u8>> {
    if content.len() < MIN_COMPRESSED || section_type.starts_with("image/") {
        return None;
    }
    let compressed = match dictionary {
        None => COMPRESSOR.with(|c| {
            let mut c = c.borrow_mut();
            if c.is_none() {
                *c = zstd::bulk::Compressor::new(LEVEL).ok();
            }
            c.as_mut()?.compress(content).ok()
        })?,
        Some(d) => DICTIONARY_COMPRESSOR.with(|c| {
            let mut c = c.borrow_mut();
            if c.as_ref().is_none_or(|(id, _)| *id != d.id) {
                *c = zstd::bulk::Compressor::with_prepared_dictionary(&d.encoder)
                    .ok()
                    .map(|c| (d.id, c));
            }
            c.as_mut()?.1.compress(content).ok()
        })?,
    };
    (compressed.len() < content.len()).then_some(compressed)
}

/// The dictionary id a stored row's zstd frame names (None: made without one, or not a frame).
pub fn frame_dictionary(row: &[u8]) -> Option<u32> {
    zstd::zstd_safe::get_dict_id_from_frame(row).map(|id| id.get())
}

/// The content of a stored row whose record says the content is `size` bytes long. None when a
/// shorter row is not a zstd frame of exactly `size` bytes, or names a dictionary this process
/// has not installed (damage: the caller decides what to report).
pub fn decode(row: &[u8], size: u64) -> Option<Cow<'_, [u8]>> {
    if row.len() as u64 == size {
        return Some(Cow::Borrowed(row));
    }
    if row.len() as u64 > size || size > MAX_DECOMPRESSED {
        return None;
    }
    let content = match frame_dictionary(row) {
        None => DECOMPRESSOR.with(|d| {
            let mut d = d.borrow_mut();
            if d.is_none() {
                *d = zstd::bulk::Decompressor::new().ok();
            }
            d.as_mut()?.decompress(row, size as usize).ok()
        })?,
        Some(id) => {
            let dictionary = installed(id)?;
            DICTIONARY_DECOMPRESSOR.with(|d| {
                let mut d = d.borrow_mut();
                if d.as_ref().is_none_or(|(have, _)| *have != id) {
                    *d = zstd::bulk::Decompressor::with_prepared_dictionary(&dictionary.decoder)
                        .ok()
                        .map(|d| (id, d));
                }
                d.as_mut()?.1.decompress(row, size as usize).ok()
            })?
        }
    };
    (content.len() as u64 == size).then_some(Cow::Owned(content))
}

/// The installed dictionary with this id.
pub fn installed(id: u32) -> Option<&'static Dictionary> {
    DICTIONARIES
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .find(|d| d.id == id)
        .copied()
}

/// Make a stored dictionary known to this process (once per id), for reads and writes. Err:
/// the bytes are not a dictionary this module made (its id is not the one its bytes give).
pub fn install(bytes: &[u8]) -> Result<&'static Dictionary, String> {
    let id = zstd::zstd_safe::get_dict_id_from_dict(bytes)
        .map(|id| id.get())
        .ok_or("not a zstd dictionary")?;
    if id != id_of(bytes) {
        return Err(format!(
            "its id {id} is not the one its bytes give ({})",
            id_of(bytes)
        ));
    }
    let mut all = DICTIONARIES.write().unwrap_or_else(PoisonError::into_inner);
    if let Some(d) = all.iter().find(|d| d.id == id) {
        return Ok(d);
    }
    let d: &'static Dictionary = Box::leak(Box::new(Dictionary {
        id,
        bytes: bytes.to_vec(),
        encoder: EncoderDictionary::try_copy(bytes, DICTIONARY_LEVEL)
            .map_err(|e| format!("zstd refuses it: {e}"))?,
        decoder: DecoderDictionary::try_copy(bytes).map_err(|e| format!("zstd refuses it: {e}"))?,
    }));
    all.push(d);
    Ok(d)
}

/// Train a dictionary on the contents of sections (their first `SAMPLE_PREFIX` bytes each, at
/// most `SAMPLES_TOTAL` in all). None when zstd finds nothing to train on (too few or too
/// short samples): the database goes on without one.
pub fn train<'a>(samples: impl IntoIterator<Item = &'a [u8]>) -> Option<Vec<u8>> {
    let mut total = 0;
    let samples: Vec<&[u8]> = samples
        .into_iter()
        .filter(|s| s.len() >= MIN_COMPRESSED)
        .map(|s| &s[..s.len().min(SAMPLE_PREFIX)])
        .take_while(|s| {
            total += s.len();
            total <= SAMPLES_TOTAL
        })
        .collect();
    let mut bytes = zstd::dict::from_samples(&samples, DICTIONARY_BYTES).ok()?;
    // zstd's header: magic (4 bytes), then the id (4, little-endian).
    if bytes.len() < 8 || zstd::zstd_safe::get_dict_id_from_dict(&bytes).is_none() {
        return None;
    }
    let id = id_of(&bytes);
    bytes[4..8].copy_from_slice(&id.to_le_bytes());
    Some(bytes)
}

/// A dictionary's id: from the SHA-256 of its bytes with the id field zeroed, in the range zstd
/// leaves to users (32,768 to 2^31 - 1), so that the same dictionary has the same id in every
/// process and two different ones almost surely differ.
fn id_of(bytes: &[u8]) -> u32 {
    let mut h = Sha256::new();
    h.update(&bytes[..4.min(bytes.len())]);
    h.update([0u8; 4]);
    if bytes.len() > 8 {
        h.update(&bytes[8..]);
    }
    let d = h.finalize();
    let x = u32::from_le_bytes([d[0], d[1], d[2], d[3]]);
    32_768 + x % ((1 << 31) - 32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_stored_shorter_and_reads_back() {
        let text = "The write journal commits each group with one sequential fsync. ".repeat(20);
        let row = compress("text/markdown", text.as_bytes(), None).unwrap();
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
        assert_eq!(compress("text/plain", b"a short fact", None), None);
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
        assert_eq!(compress("application/octet-stream", &noise, None), None);
        assert_eq!(
            decode(&noise, noise.len() as u64).as_deref(),
            Some(&noise[..])
        );
        // An image is not tried, however well it would compress.
        let text = "a text stored under an image type ".repeat(20);
        assert!(compress("text/plain", text.as_bytes(), None).is_some());
        assert_eq!(compress("image/png", text.as_bytes(), None), None);
    }

    #[test]
    fn a_damaged_row_decodes_to_nothing() {
        let text = "reference markers in text order, one row per marker ".repeat(10);
        let mut row = compress("text/plain", text.as_bytes(), None).unwrap();
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
    /// Sections of generated prose that share their words, as a database's sections do.
    fn prose(n: usize, seed: u64) -> Vec<Vec<u8>> {
        crate::test_rng::prose(n, seed, 120)
            .into_iter()
            .map(String::into_bytes)
            .collect()
    }

    #[test]
    fn a_trained_dictionary_compresses_better_and_its_rows_read_back() {
        let samples = prose(2_000, 3);
        let bytes = train(samples.iter().map(Vec::as_slice)).expect("trained");
        assert!(bytes.len() <= DICTIONARY_BYTES);
        let d = install(&bytes).unwrap();
        assert!(std::ptr::eq(d, install(&bytes).unwrap()), "installed once");
        assert!((32_768..1 << 31).contains(&d.id));
        let (mut plain, mut with) = (0, 0);
        for text in prose(200, 99) {
            let row = compress("text/markdown", &text, Some(d)).unwrap();
            assert_eq!(frame_dictionary(&row), Some(d.id), "the frame names it");
            let without = compress("text/markdown", &text, None).unwrap();
            assert_eq!(frame_dictionary(&without), None);
            assert_eq!(decode(&row, text.len() as u64).as_deref(), Some(&text[..]));
            plain += without.len();
            with += row.len();
        }
        assert!(
            with * 10 < plain * 9,
            "{with} bytes with it, {plain} without"
        );
    }

    #[test]
    fn a_row_naming_a_dictionary_this_process_lacks_does_not_decode() {
        let samples = prose(2_000, 5);
        let mut bytes = train(samples.iter().map(Vec::as_slice)).unwrap();
        let text = &prose(1, 77)[0];
        // A dictionary compressed with directly, never installed.
        let encoder = EncoderDictionary::copy(&bytes, DICTIONARY_LEVEL);
        let row = zstd::bulk::Compressor::with_prepared_dictionary(&encoder)
            .unwrap()
            .compress(text)
            .unwrap();
        assert_eq!(frame_dictionary(&row), Some(id_of(&bytes)));
        assert!(installed(id_of(&bytes)).is_none());
        assert_eq!(decode(&row, text.len() as u64), None);
        // Bytes whose id is not the one they give are refused.
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert!(
            install(&bytes)
                .unwrap_err()
                .contains("is not the one its bytes give")
        );
        assert!(install(b"not a dictionary").is_err());
        // Too little to train on.
        assert_eq!(train([&b"short"[..]]), None);
    }
}
