//! Stored records. Each is encoded as one version byte, postcard, and (from version 2) a CRC-32
//! of both, so a flipped byte in a record is reported as damage instead of read as another
//! value (a changed source key, tag or title has no other copy to be compared with). A schema
//! change adds a new version and a migration (see migrations/ and docs/storage.md).
//!
//! Version 3 (migration 0017) stores sections, documents and changes in compact forms
//! (src/types/stored_forms.rs): timestamps as milliseconds, checksums as bytes, band keys as 64
//! fixed bytes. A record of version 1 or 2 is read in the layout its type had then
//! (`Record::Before0017`), so every older row reads, whichever code reads it.

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use super::stored_forms::{self, StoredSection};
use crate::error::{KbError, Result};
use crate::index::near_dup::{BANDS, BandKeys, fold_key};

/// Current version byte of every record type: postcard in the compact layouts of migration 0017,
/// followed by a CRC-32 (little-endian) of the version byte and the postcard bytes.
pub const RECORD_VERSION: u8 = 3;
/// Records written from migration 0015 to 0017: checksummed, in the layouts before 0017.
const RECORD_VERSION_BEFORE_0017: u8 = 2;
/// Records written before migration 0015: the version byte and postcard, no checksum. They are
/// still read, and gain a checksum when they are next written.
const RECORD_VERSION_UNCHECKED: u8 = 1;
const CHECKSUM_BYTES: usize = 4;

/// A type stored as a record.
pub trait Record: Serialize + DeserializeOwned {
    /// Its layout in records of version 1 and 2, written before migration 0017.
    type Before0017: DeserializeOwned + Into<Self>;

    /// A record of the current version from its postcard bytes, stored under `key`.
    fn from_stored(bytes: &[u8], _key: &str) -> std::result::Result<Self, String> {
        postcard::from_bytes(bytes).map_err(|e| e.to_string())
    }
}

/// Record types whose layout did not change in migration 0017.
macro_rules! same_layout_before_0017 {
    ($($t:ty),* $(,)?) => {
        $(impl Record for $t {
            type Before0017 = $t;
        })*
    };
}

same_layout_before_0017!(
    SectionRecordV1,
    SectionRecordV2,
    crate::text::markers::Marker,
    crate::sync::records::SyncRoot,
    crate::sync::records::FileRecord,
);

impl Record for SectionRecord {
    type Before0017 = SectionRecordV3;

    /// Its checksum may be stored as its second half, the first being the key's
    /// (`encode_section`).
    /// Its first document, when it has one, follows (`encode_section`).
    fn from_stored(bytes: &[u8], key: &str) -> std::result::Result<Self, String> {
        let (stored, rest) =
            postcard::take_from_bytes::<StoredSection>(bytes).map_err(|e| e.to_string())?;
        let mut rec = stored.into_record(Some(key))?;
        if !rest.is_empty() {
            let (doc, rest) =
                postcard::take_from_bytes::<String>(rest).map_err(|e| e.to_string())?;
            if !rest.is_empty() {
                return Err(format!("{} bytes after the record", rest.len()));
            }
            rec.doc = Some(doc);
        }
        Ok(rec)
    }
}

impl Record for DocumentRecord {
    type Before0017 = DocumentRecordV1;
}

impl Record for ChangeRecord {
    type Before0017 = ChangeRecordV1;
}

/// A section's metadata. Stored as `StoredSection` (src/types/stored_forms.rs), which keeps
/// every field exactly while taking ~200 bytes less than this struct's own layout did.
#[derive(Debug, Clone, PartialEq)]
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
    pub bands: Option<BandKeys>,
    /// The key of the section's content in `section_content` (migration 0010).
    pub content_seq: u64,
    /// The document that took the section when it was learned, while it holds it: that
    /// membership is here instead of in `section_docs` (a new section costs one row under a
    /// random key instead of two; schema 22). Its other documents are in `section_docs`.
    pub doc: Option<String>,
}

impl Serialize for SectionRecord {
    /// The record's fields, then its first document when it has one: what `encode_section`
    /// writes (less the kbid's half of the checksum) and `from_stored` reads, so that no
    /// encoding of a record drops a membership.
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match &self.doc {
            None => StoredSection::of(self).serialize(s),
            Some(doc) => (StoredSection::of(self), doc).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for SectionRecord {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        StoredSection::deserialize(d)?
            .into_record(None)
            .map_err(serde::de::Error::custom)
    }
}

/// The layout of a section record from migration 0010 to 0017: every field as its text, 64-bit
/// band keys. Read from records of version 1 and 2.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SectionRecordV3 {
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
    pub bands: Option<[u64; BANDS]>,
    pub content_seq: u64,
}

#[cfg(test)]
impl SectionRecordV3 {
    /// A record as kbdb wrote it before migration 0017 (its 32-bit band keys as they are).
    pub fn before_0017(r: &SectionRecord) -> Self {
        SectionRecordV3 {
            section_type: r.section_type.clone(),
            title: r.title.clone(),
            description: r.description.clone(),
            tags: r.tags.clone(),
            source_key: r.source_key.clone(),
            created_at: r.created_at.clone(),
            updated_at: r.updated_at.clone(),
            checksum: r.checksum.clone(),
            size: r.size,
            standalone: r.standalone,
            terms_count: r.terms_count,
            bands: r.bands.map(|keys| keys.map(u64::from)),
            content_seq: r.content_seq,
        }
    }
}

impl From<SectionRecordV3> for SectionRecord {
    fn from(r: SectionRecordV3) -> Self {
        SectionRecordV2 {
            section_type: r.section_type,
            title: r.title,
            description: r.description,
            tags: r.tags,
            source_key: r.source_key,
            created_at: r.created_at,
            updated_at: r.updated_at,
            checksum: r.checksum,
            size: r.size,
            standalone: r.standalone,
            terms_count: r.terms_count,
            bands: r.bands,
        }
        .with_content_seq(r.content_seq)
    }
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
    /// The record in today's layout, its content under `content_seq` (migration 0010), its
    /// 64-bit band keys folded to today's 32 bits.
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
            bands: self.bands.map(|keys| keys.map(fold_key)),
            content_seq,
            doc: None,
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
    #[serde(with = "stored_forms::time")]
    pub created_at: String,
    #[serde(with = "stored_forms::time")]
    pub updated_at: String,
}

/// The layout of a document record before migration 0017 (times as text).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DocumentRecordV1 {
    pub title: Option<String>,
    pub doc_type: String,
    pub metadata: Option<String>,
    pub kbids: Vec<String>,
    pub created_at: String,
    pub updated_at: String,
}

impl From<DocumentRecordV1> for DocumentRecord {
    fn from(r: DocumentRecordV1) -> Self {
        DocumentRecord {
            title: r.title,
            doc_type: r.doc_type,
            metadata: r.metadata,
            kbids: r.kbids,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

impl DocumentRecord {
    /// Whether the manifest lists section `kbid`.
    pub fn lists(&self, kbid: &str) -> bool {
        self.kbids.iter().any(|k| k == kbid)
    }

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
    /// A document took or gave up the section (id the kbid); the section itself is unchanged.
    /// Subscribers are told `section_changed`; the lexical index and embeddings, which hold
    /// nothing of a section's documents, skip it (a section shared by a thousand documents was
    /// re-indexed with each one that took it).
    SectionDocsChanged,
}

/// One entry of the change log that derived indexes replay.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChangeRecord {
    pub kind: ChangeKind,
    /// kbid for section changes, docid for document changes.
    pub id: String,
    #[serde(with = "stored_forms::time")]
    pub at: String,
}

/// The layout of a change record before migration 0017 (its time as text).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChangeRecordV1 {
    pub kind: ChangeKind,
    pub id: String,
    pub at: String,
}

impl From<ChangeRecordV1> for ChangeRecord {
    fn from(r: ChangeRecordV1) -> Self {
        ChangeRecord {
            kind: r.kind,
            id: r.id,
            at: r.at,
        }
    }
}

pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    encode_as(RECORD_VERSION, value)
}

/// A section record to store under `kbid`: the first half of its checksum, which is the kbid's
/// digest, is not stored again (16 bytes a section, from schema 20). `decode` completes it
/// from the key.
pub fn encode_section(kbid: &str, rec: &SectionRecord) -> Vec<u8> {
    match &rec.doc {
        None => encode_as(RECORD_VERSION, &StoredSection::under(rec, kbid)),
        // The record's first document after it (schema 22): a record without one is the
        // layout of schema 21.
        Some(doc) => encode_as(RECORD_VERSION, &(StoredSection::under(rec, kbid), doc)),
    }
}

/// A record as kbdb wrote it before migration 0017 (version 2, in the layout `value`'s type
/// had then): for tests that make an older database.
pub fn encode_before_0017<T: Serialize>(value: &T) -> Vec<u8> {
    encode_as(RECORD_VERSION_BEFORE_0017, value)
}

/// Whether a stored record was written before migration 0017 (which rewrites them).
pub fn is_before_0017(bytes: &[u8]) -> bool {
    matches!(
        bytes.first(),
        Some(&(RECORD_VERSION_BEFORE_0017 | RECORD_VERSION_UNCHECKED))
    )
}

fn encode_as<T: Serialize>(version: u8, value: &T) -> Vec<u8> {
    let mut out = vec![version];
    // Serialising plain structs into a Vec cannot fail.
    out.extend(postcard::to_stdvec(value).expect("postcard serialisation of a record"));
    let crc = crc32fast::hash(&out);
    out.extend(crc.to_le_bytes());
    out
}

pub fn decode<T: Record>(table: &'static str, key: &str, bytes: &[u8]) -> Result<T> {
    let corrupt = |detail: String| KbError::Corrupt {
        table,
        key: key.to_string(),
        detail,
    };
    match bytes.split_first() {
        Some((&(RECORD_VERSION | RECORD_VERSION_BEFORE_0017), _)) => {
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
            if body[0] == RECORD_VERSION {
                T::from_stored(&body[1..], key).map_err(corrupt)
            } else {
                postcard::from_bytes::<T::Before0017>(&body[1..])
                    .map(Into::into)
                    .map_err(|e| corrupt(e.to_string()))
            }
        }
        Some((&RECORD_VERSION_UNCHECKED, rest)) => postcard::from_bytes::<T::Before0017>(rest)
            .map(Into::into)
            .map_err(|e| corrupt(e.to_string())),
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
        // A record an older kbdb wrote (version 1, no checksum; its time as text) is read.
        let mut old = vec![RECORD_VERSION_UNCHECKED];
        let v1 = ChangeRecordV1 {
            kind: c.kind,
            id: c.id.clone(),
            at: c.at.clone(),
        };
        old.extend(postcard::to_stdvec(&v1).unwrap());
        assert_eq!(decode::<ChangeRecord>("changes", "7", &old).unwrap(), c);
        assert!(decode::<ChangeRecord>("changes", "7", &b[..3]).is_err());
    }
}
