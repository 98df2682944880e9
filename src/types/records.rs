//! Stored records. Each is encoded as one version byte, postcard, and (from version 2) a CRC-32
//! of both, so a flipped byte in a record is reported as damage instead of read as another
//! value (a changed source key, tag or title has no other copy to be compared with). A schema
//! change adds a new version and a migration (see migrations/ and docs/storage.md).

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::error::{KbError, Result};

/// Current version byte of every record type: postcard followed by a CRC-32 (little-endian) of
/// the version byte and the postcard bytes (migration 0015).
pub const RECORD_VERSION: u8 = 2;
/// Records written before migration 0015: the version byte and postcard, no checksum. They are
/// still read, and gain a checksum when they are next written.
const RECORD_VERSION_UNCHECKED: u8 = 1;
const CHECKSUM_BYTES: usize = 4;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SectionRecord {
    pub section_type: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub tags: Vec<String>,
    pub source_key: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// Lowercase hex SHA-256 of the stored content bytes.
    pub checksum: String,
    pub size: u64,
    /// Learned at least once without a docid: the user's memory, never collected by gc.
    pub standalone: bool,
    pub terms_count: u64,
    /// A text section's 16 near-duplicate band keys (one-permutation MinHash; None for images
    /// and texts without shingles). In the record since migration 0009, so a new section
    /// touches one random-key row less per commit.
    pub bands: Option<[u64; 16]>,
    /// The key of the section's content in `section_content` (migration 0010).
    pub content_seq: u64,
}

/// The layout of a section record before migration 0010 (no `content_seq`), read and written by
/// the migrations up to 0010. Decoding a newer record with it ignores the fields added since.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SectionRecordV2 {
    pub section_type: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub tags: Vec<String>,
    pub source_key: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub checksum: String,
    pub size: u64,
    pub standalone: bool,
    pub terms_count: u64,
    pub bands: Option<[u64; 16]>,
}

impl SectionRecordV2 {
    /// The record in today's layout, its content under `content_seq` (migration 0010).
    pub fn with_content_seq(self, content_seq: u64) -> SectionRecord {
        SectionRecord {
            section_type: self.section_type,
            title: self.title,
            description: self.description,
            tags: self.tags,
            source_key: self.source_key,
            created_at: self.created_at,
            updated_at: self.updated_at,
            checksum: self.checksum,
            size: self.size,
            standalone: self.standalone,
            terms_count: self.terms_count,
            bands: self.bands,
            content_seq,
        }
    }
}

/// The layout of a section record before migration 0009 (no band keys), read by the migrations
/// written for it. Decoding a newer record with it ignores the fields added since.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SectionRecordV1 {
    pub section_type: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub tags: Vec<String>,
    pub source_key: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub checksum: String,
    pub size: u64,
    pub standalone: bool,
    pub terms_count: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DocumentRecord {
    pub title: Option<String>,
    pub doc_type: String,
    /// JSON object text (postcard cannot carry self-describing values).
    pub metadata: Option<String>,
    /// Ordered member sections.
    pub kbids: Vec<String>,
    pub created_at: String,
    pub updated_at: String,
}

impl DocumentRecord {
    /// The metadata as a JSON value (None when absent or not valid JSON).
    pub fn metadata_value(&self) -> Option<serde_json::Value> {
        self.metadata
            .as_deref()
            .and_then(|m| serde_json::from_str(m).ok())
    }

    /// An empty document created at `now`.
    pub fn empty(now: &str) -> Self {
        DocumentRecord {
            title: None,
            doc_type: "document".to_string(),
            metadata: None,
            kbids: Vec::new(),
            created_at: now.to_string(),
            updated_at: now.to_string(),
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum ChangeKind {
    SectionAdded,
    SectionChanged,
    SectionRemoved,
    DocumentChanged,
    DocumentRemoved,
    /// The collection's models were replaced (id `models`).
    ModelsChanged,
}

/// One entry of the change log that derived indexes replay.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChangeRecord {
    pub kind: ChangeKind,
    /// kbid for section changes, docid for document changes.
    pub id: String,
    pub at: String,
}

pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = vec![RECORD_VERSION];
    // Serialising plain structs into a Vec cannot fail.
    out.extend(postcard::to_stdvec(value).expect("postcard serialisation of a record"));
    let crc = crc32fast::hash(&out);
    out.extend(crc.to_le_bytes());
    out
}

pub fn decode<T: DeserializeOwned>(table: &'static str, key: &str, bytes: &[u8]) -> Result<T> {
    let corrupt = |detail: String| KbError::Corrupt {
        table,
        key: key.to_string(),
        detail,
    };
    match bytes.split_first() {
        Some((&RECORD_VERSION, _)) => {
            if bytes.len() < 1 + CHECKSUM_BYTES {
                return Err(corrupt("record shorter than its checksum".into()));
            }
            let (body, sum) = bytes.split_at(bytes.len() - CHECKSUM_BYTES);
            let stored = u32::from_le_bytes(sum.try_into().expect("4 bytes"));
            let actual = crc32fast::hash(body);
            if stored != actual {
                return Err(corrupt(format!(
                    "record checksum mismatch (stored {stored:08x}, computed {actual:08x}): the record was damaged"
                )));
            }
            postcard::from_bytes(&body[1..]).map_err(|e| corrupt(e.to_string()))
        }
        Some((&RECORD_VERSION_UNCHECKED, rest)) => {
            postcard::from_bytes(rest).map_err(|e| corrupt(e.to_string()))
        }
        Some((v, _)) => Err(corrupt(format!(
            "record version {v} is not known to this kbdb (expected {RECORD_VERSION}); upgrade kbdb"
        ))),
        None => Err(corrupt("empty record".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_version_check() {
        let c = ChangeRecord {
            kind: ChangeKind::SectionAdded,
            id: "x".into(),
            at: "t".into(),
        };
        let b = encode(&c);
        assert_eq!(b[0], RECORD_VERSION);
        assert_eq!(decode::<ChangeRecord>("changes", "1", &b).unwrap(), c);
        let mut future = b.clone();
        future[0] = 9;
        assert!(decode::<ChangeRecord>("changes", "1", &future).is_err());
    }

    #[test]
    fn every_flipped_bit_of_a_record_is_reported_and_unchecked_records_still_read() {
        let c = ChangeRecord {
            kind: ChangeKind::DocumentChanged,
            id: "notes/deploy".into(),
            at: "2026-01-01T00:00:00.000Z".into(),
        };
        let b = encode(&c);
        for byte in 1..b.len() {
            for bit in 0..8 {
                let mut damaged = b.clone();
                damaged[byte] ^= 1 << bit;
                let e = decode::<ChangeRecord>("changes", "7", &damaged).unwrap_err();
                assert!(
                    matches!(e, KbError::Corrupt { .. }),
                    "byte {byte} bit {bit}: {e}"
                );
            }
        }
        // A record an older kbdb wrote (version 1, no checksum) is read as it is.
        let mut old = vec![RECORD_VERSION_UNCHECKED];
        old.extend(postcard::to_stdvec(&c).unwrap());
        assert_eq!(decode::<ChangeRecord>("changes", "7", &old).unwrap(), c);
        assert!(decode::<ChangeRecord>("changes", "7", &b[..3]).is_err());
    }
}
