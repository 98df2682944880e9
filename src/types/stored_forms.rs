//! The compact forms records store their fields in (record version 3, migration 0017;
//! docs/storage.md, *Record layouts*).
//!
//! Every form gives back exactly the text it was given. A value in the shape kbdb itself writes
//! is stored compactly — a timestamp of `clock::now` as milliseconds, a lowercase hex SHA-256
//! as its 32 bytes, a source key made of the docid and the title as the docid alone — and any
//! other value (a timestamp an import brought, say) as its text. A section record took ~430
//! bytes on the devdocs corpus, ~200 of them in the text forms of these fields.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::kbid;
use super::records::SectionRecord;
use crate::index::near_dup::{BANDS, BandKeys};

/// A timestamp.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub enum Time<'a> {
    /// Milliseconds since the Unix epoch of a time written as `clock::now` writes it
    /// (`2026-12-04T18:54:29.123Z`).
    Millis(i64),
    Text(Cow<'a, str>),
}

/// Length of a timestamp as `clock::now` writes it (a year of four digits).
const CANONICAL_TIME_LEN: usize = "2026-12-04T18:54:29.123Z".len();

impl<'a> Time<'a> {
    pub fn of(text: &'a str) -> Self {
        canonical_millis(text).map_or(Time::Text(Cow::Borrowed(text)), Time::Millis)
    }

    pub fn into_text(self) -> Result<String, String> {
        match self {
            Time::Millis(ms) => {
                format_millis(ms).ok_or_else(|| format!("stored time {ms} ms is out of range"))
            }
            Time::Text(t) => Ok(t.into_owned()),
        }
    }
}

/// The milliseconds of `text` when formatting them gives `text` back.
fn canonical_millis(text: &str) -> Option<i64> {
    if text.len() != CANONICAL_TIME_LEN || !text.ends_with('Z') {
        return None;
    }
    let ms = chrono::DateTime::parse_from_rfc3339(text)
        .ok()?
        .timestamp_millis();
    (format_millis(ms)? == text).then_some(ms)
}

fn format_millis(ms: i64) -> Option<String> {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

/// `#[serde(with = "stored_forms::time")]`: a `String` timestamp field stored as `Time`.
pub mod time {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Time;

    pub fn serialize<S: Serializer>(text: &str, s: S) -> Result<S::Ok, S::Error> {
        Time::of(text).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        Time::deserialize(d)?
            .into_text()
            .map_err(serde::de::Error::custom)
    }
}

/// A section's `updated_at`, most often its `created_at`.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub enum Updated<'a> {
    AtCreation,
    At(Time<'a>),
}

/// A content checksum.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub enum Checksum<'a> {
    /// A lowercase hex SHA-256, as kbdb computes them.
    Sha256([u8; 32]),
    Text(Cow<'a, str>),
    /// A lowercase hex SHA-256 whose first 16 bytes are those of the kbid the record is stored
    /// under (as for every section: a kbid is the first half of its content's digest): the
    /// last 16 bytes (from schema 20).
    AfterKbid([u8; 16]),
}

impl<'a> Checksum<'a> {
    pub fn of(text: &'a str) -> Self {
        let lower_hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
        if text.len() != 64 || !text.bytes().all(lower_hex) {
            return Checksum::Text(Cow::Borrowed(text));
        }
        let mut bytes = [0u8; 32];
        for (i, pair) in text.as_bytes().chunks_exact(2).enumerate() {
            let digit = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
            bytes[i] = digit(pair[0]) << 4 | digit(pair[1]);
        }
        Checksum::Sha256(bytes)
    }

    /// The checksum of a record stored under `key`: its second half alone when its first half
    /// is the key's kbid.
    pub fn under(text: &'a str, key: &str) -> Self {
        match Self::of(text) {
            Checksum::Sha256(bytes) if kbid::kbid_bytes(key).is_some_and(|k| bytes[..16] == k) => {
                Checksum::AfterKbid(bytes[16..].try_into().expect("16 bytes"))
            }
            other => other,
        }
    }

    /// The checksum's text; `key`: the kbid the record is stored under (None: not known, which
    /// a checksum stored as its second half cannot be read without).
    pub fn into_text(self, key: Option<&str>) -> Result<String, String> {
        match self {
            Checksum::Sha256(bytes) => Ok(kbid::hex(&bytes)),
            Checksum::Text(t) => Ok(t.into_owned()),
            Checksum::AfterKbid(rest) => {
                let key =
                    key.ok_or("a checksum stored as its second half, read without its key")?;
                let first = kbid::kbid_bytes(key).ok_or_else(|| {
                    format!(
                        "the checksum is stored as its second half, after the kbid of the key, \
                         and the key {key:?} is not a kbid"
                    )
                })?;
                Ok(kbid::hex(&first) + &kbid::hex(&rest))
            }
        }
    }
}

/// A section's source key: most are `{docid}#{title}` (`learn` makes them so when none is
/// given), which is stored as the docid alone.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub enum SourceKey<'a> {
    Absent,
    /// The key is this, `#` and the section's title.
    BeforeTitle(Cow<'a, str>),
    Text(Cow<'a, str>),
}

impl<'a> SourceKey<'a> {
    pub fn of(key: Option<&'a str>, title: Option<&str>) -> Self {
        let Some(key) = key else {
            return SourceKey::Absent;
        };
        if let Some(title) = title
            && let Some(before) = key.strip_suffix(title)
            && let Some(docid) = before.strip_suffix('#')
        {
            return SourceKey::BeforeTitle(Cow::Borrowed(docid));
        }
        SourceKey::Text(Cow::Borrowed(key))
    }

    pub fn into_text(self, title: Option<&str>) -> Result<Option<String>, String> {
        match self {
            SourceKey::Absent => Ok(None),
            SourceKey::BeforeTitle(docid) => match title {
                Some(title) => Ok(Some(format!("{docid}#{title}"))),
                None => Err(
                    "the source key is stored as made of the title, and there is no title".into(),
                ),
            },
            SourceKey::Text(t) => Ok(Some(t.into_owned())),
        }
    }
}

/// A section type: the default one in a byte.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub enum SectionType<'a> {
    Markdown,
    Other(Cow<'a, str>),
}

impl<'a> SectionType<'a> {
    pub fn of(t: &'a str) -> Self {
        if t == super::section_type::DEFAULT_TYPE {
            SectionType::Markdown
        } else {
            SectionType::Other(Cow::Borrowed(t))
        }
    }

    pub fn into_text(self) -> String {
        match self {
            SectionType::Markdown => super::section_type::DEFAULT_TYPE.to_string(),
            SectionType::Other(t) => t.into_owned(),
        }
    }
}

/// Band keys as 64 little-endian bytes (postcard would write a varint of up to 5 bytes each).
#[derive(Debug, PartialEq)]
pub struct Bands(pub BandKeys);

impl Serialize for Bands {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut bytes = [0u8; BANDS * 4];
        for (chunk, key) in bytes.chunks_exact_mut(4).zip(self.0) {
            chunk.copy_from_slice(&key.to_le_bytes());
        }
        s.serialize_bytes(&bytes)
    }
}

impl<'de> Deserialize<'de> for Bands {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let bytes: Cow<'de, [u8]> = Cow::Owned(Vec::<u8>::deserialize(d)?);
        if bytes.len() != BANDS * 4 {
            return Err(serde::de::Error::custom(format!(
                "{} bytes of band keys, not {}",
                bytes.len(),
                BANDS * 4
            )));
        }
        let mut keys = [0u32; BANDS];
        for (key, chunk) in keys.iter_mut().zip(bytes.chunks_exact(4)) {
            *key = u32::from_le_bytes(chunk.try_into().expect("4 bytes"));
        }
        Ok(Bands(keys))
    }
}

/// A section record as stored (record version 3): `SectionRecord`'s fields in the forms above.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct StoredSection<'a> {
    section_type: SectionType<'a>,
    title: Option<Cow<'a, str>>,
    description: Option<Cow<'a, str>>,
    tags: Cow<'a, [String]>,
    source_key: SourceKey<'a>,
    created_at: Time<'a>,
    updated_at: Updated<'a>,
    checksum: Checksum<'a>,
    size: u64,
    standalone: bool,
    terms_count: u64,
    bands: Option<Bands>,
    content_seq: u64,
}

impl<'a> StoredSection<'a> {
    /// The record as stored under `kbid`: its checksum's first half, which is the key, is not
    /// stored again.
    pub fn under(r: &'a SectionRecord, kbid: &str) -> Self {
        StoredSection {
            checksum: Checksum::under(&r.checksum, kbid),
            ..Self::of(r)
        }
    }

    /// The record as stored whatever its key (its full checksum).
    pub fn of(r: &'a SectionRecord) -> Self {
        StoredSection {
            section_type: SectionType::of(&r.section_type),
            title: r.title.as_deref().map(Cow::Borrowed),
            description: r.description.as_deref().map(Cow::Borrowed),
            tags: Cow::Borrowed(&r.tags),
            source_key: SourceKey::of(r.source_key.as_deref(), r.title.as_deref()),
            created_at: Time::of(&r.created_at),
            updated_at: if r.updated_at == r.created_at {
                Updated::AtCreation
            } else {
                Updated::At(Time::of(&r.updated_at))
            },
            checksum: Checksum::of(&r.checksum),
            size: r.size,
            standalone: r.standalone,
            terms_count: r.terms_count,
            bands: r.bands.map(Bands),
            content_seq: r.content_seq,
        }
    }

    /// The record; `key`: the kbid it is stored under (None: not known).
    pub fn into_record(self, key: Option<&str>) -> Result<SectionRecord, String> {
        let title = self.title.map(Cow::into_owned);
        let created_at = self.created_at.into_text()?;
        let updated_at = match self.updated_at {
            Updated::AtCreation => created_at.clone(),
            Updated::At(t) => t.into_text()?,
        };
        Ok(SectionRecord {
            section_type: self.section_type.into_text(),
            source_key: self.source_key.into_text(title.as_deref())?,
            title,
            description: self.description.map(Cow::into_owned),
            tags: self.tags.into_owned(),
            created_at,
            updated_at,
            checksum: self.checksum.into_text(key)?,
            size: self.size,
            standalone: self.standalone,
            terms_count: self.terms_count,
            bands: self.bands.map(|b| b.0),
            content_seq: self.content_seq,
            doc: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::records::{SectionRecordV3, decode, encode, encode_before_0017};

    fn record() -> SectionRecord {
        SectionRecord {
            section_type: "text/markdown".into(),
            title: Some("Install".into()),
            description: None,
            tags: vec!["ops".into()],
            source_key: Some("guide/setup.md#Install".into()),
            created_at: "2026-12-04T18:54:29.123Z".into(),
            updated_at: "2026-12-04T18:54:29.123Z".into(),
            checksum: kbid::hex(&kbid::sha256(b"content")),
            size: 7,
            standalone: false,
            terms_count: 1,
            bands: Some(std::array::from_fn(|i| u32::MAX - i as u32)),
            content_seq: 42,
            doc: None,
        }
    }

    /// A record with its first document (schema 22) reads back whole; without one it is the
    /// schema-21 bytes; bytes after the docid are a damaged record, not ignored.
    #[test]
    fn a_records_first_document_follows_it_and_nothing_else_may() {
        use crate::types::records::encode_section;
        let kbid = "k";
        let mut r = record();
        let without = encode_section(kbid, &r);
        r.doc = Some("notes/a.md".into());
        let with = encode_section(kbid, &r);
        assert!(with.len() > without.len());
        assert_eq!(decode::<SectionRecord>("sections", kbid, &with).unwrap(), r);
        // The generic encoding (migrations, tests) keeps it too.
        assert_eq!(round_trip(&r), r, "the first document was dropped");
        r.doc = None;
        assert_eq!(
            decode::<SectionRecord>("sections", kbid, &without).unwrap(),
            r
        );
        // The same body with a byte after the docid, its checksum made right again.
        let mut body = with[..with.len() - 4].to_vec();
        body.push(7);
        let crc = crc32fast::hash(&body);
        body.extend(crc.to_le_bytes());
        let err = decode::<SectionRecord>("sections", kbid, &body).unwrap_err();
        assert!(err.to_string().contains("after the record"), "{err}");
    }

    fn round_trip(r: &SectionRecord) -> SectionRecord {
        decode("sections", "k", &encode(r)).expect("decodes")
    }

    #[test]
    fn kbdb_s_own_values_are_stored_compactly_and_read_back_exactly() {
        let r = record();
        assert_eq!(round_trip(&r), r);
        let stored = postcard::to_stdvec(&StoredSection::of(&r)).unwrap();
        let mut before = SectionRecordV3::before_0017(&r);
        before.bands = Some(std::array::from_fn(|i| u64::MAX - i as u64));
        let old = postcard::to_stdvec(&before).unwrap();
        assert!(
            stored.len() + 150 < old.len(),
            "{} bytes stored, {} before",
            stored.len(),
            old.len()
        );
        assert!(matches!(
            StoredSection::of(&r).source_key,
            SourceKey::BeforeTitle(_)
        ));
    }

    #[test]
    fn values_of_other_shapes_are_kept_as_their_text() {
        let mut r = record();
        r.created_at = "2026-12-04T18:54:29Z".into(); // no milliseconds
        r.updated_at = "2026-12-04T19:54:29.123+01:00".into(); // an offset
        r.checksum = "ABCDEF".into();
        r.source_key = Some("elsewhere#Other".into());
        r.section_type = "text/x-rust".into();
        assert_eq!(round_trip(&r), r);
        r.updated_at = "2027-01-01T00:00:00.000Z".into();
        r.title = None;
        r.source_key = Some("#".into());
        r.checksum = "A".repeat(64); // uppercase hex is kept as text
        r.bands = None;
        assert_eq!(round_trip(&r), r);
        r.source_key = None;
        r.tags.clear();
        r.created_at = "+10000-01-01T00:00:00.000Z".into();
        assert_eq!(round_trip(&r), r);
        for t in [
            "",
            "not a time",
            "2026-02-30T00:00:00.000Z",
            "2026-12-04t18:54:29.123z",
        ] {
            r.created_at = t.into();
            assert_eq!(round_trip(&r), r, "{t:?}");
        }
        // An empty title and a key of just `#`.
        r.title = Some(String::new());
        r.source_key = Some("#".into());
        assert_eq!(round_trip(&r), r);
    }

    #[test]
    fn a_record_under_its_kbid_stores_only_the_second_half_of_its_checksum() {
        use crate::types::records::encode_section;
        let r = record();
        let kbid = kbid::kbid_of(b"content");
        let under_kbid = encode_section(&kbid, &r);
        assert_eq!(under_kbid.len() + 16, encode(&r).len());
        let read: SectionRecord = decode("sections", &kbid, &under_kbid).unwrap();
        assert_eq!(read, r, "the checksum is whole again");
        // Under another key, or with a checksum of another shape, it is stored whole.
        let other = kbid::kbid_of(b"other");
        assert_eq!(encode_section(&other, &r), encode(&r));
        let mut text = record();
        text.checksum = "ABCDEF".into();
        assert_eq!(encode_section(&kbid, &text), encode(&text));
        // Read under a key that is not a kbid, or without a key, it is damage, not a value.
        let e = decode::<SectionRecord>("sections", "notakbid", &under_kbid).unwrap_err();
        assert!(e.to_string().contains("is not a kbid"), "{e}");
        let body = &under_kbid[1..under_kbid.len() - 4];
        assert!(postcard::from_bytes::<SectionRecord>(body).is_err());
        // Under another kbid it reads, with that kbid's half: `check` then finds the content
        // does not hash to it, as for any damaged checksum.
        let moved: SectionRecord = decode("sections", &other, &under_kbid).unwrap();
        assert_ne!(moved.checksum, r.checksum);
        assert_eq!(moved.checksum[32..], r.checksum[32..]);
    }

    #[test]
    fn a_record_written_before_0017_reads_in_its_old_layout() {
        let r = record();
        let mut before = SectionRecordV3::before_0017(&r);
        before.updated_at = "2026-12-05T00:00:00.000Z".into();
        before.bands = Some(std::array::from_fn(|i| (i as u64) << 32 | 7));
        let read: SectionRecord = decode("sections", "k", &encode_before_0017(&before)).unwrap();
        assert_eq!(read.updated_at, "2026-12-05T00:00:00.000Z");
        // 64-bit keys are folded to the 32 bits computed today.
        let folded: BandKeys = std::array::from_fn(|i| 7 ^ i as u32);
        assert_eq!(read.bands, Some(folded));
        before.bands = None;
        let read: SectionRecord = decode("sections", "k", &encode_before_0017(&before)).unwrap();
        assert_eq!(read.bands, None);
    }

    #[test]
    fn damaged_compact_fields_are_errors_not_values() {
        // A source key stored as made of the title, with no title.
        let r = record();
        let mut s = StoredSection::of(&r);
        s.title = None;
        let bytes = crate::types::records::encode(&s);
        assert!(decode::<SectionRecord>("sections", "k", &bytes).is_err());
        // A time out of chrono's range.
        let mut s = StoredSection::of(&r);
        s.created_at = Time::Millis(i64::MAX);
        let bytes = crate::types::records::encode(&s);
        assert!(decode::<SectionRecord>("sections", "k", &bytes).is_err());
    }
}
