//! `vectors.idx` and `vectors-meta.toml` of the plain-file export (docs/index-files.md): one
//! embedding per section, keyed by the first 16 characters of its kbid, sorted so that readers
//! can binary-search. Pure encoding and decoding; decoding validates everything and never
//! panics on hostile bytes.
//!
//! ```text
//! header  0..4  magic "KBVX"
//!         4     version u8 = 1
//!         5..7  dimensions u16 LE
//!         7..11 record_count u32 LE
//! record  0..16 kbid_hash: the first 16 ASCII characters of the section's kbid
//!         16..  dimensions × f32 LE
//! ```

use thiserror::Error;

/// The file's magic bytes.
pub const MAGIC: [u8; 4] = *b"KBVX";
/// The format version written and the only one read.
pub const VERSION: u8 = 1;
/// Bytes before the first record.
pub const HEADER_LEN: usize = 11;
/// Bytes of a record key (`kbid_hash`).
pub const KEY_LEN: usize = 16;
/// File name of the vectors in `indexes/`.
pub const VECTORS_FILE: &str = "vectors.idx";
/// File name of the vectors' metadata in `indexes/`.
pub const META_FILE: &str = "vectors-meta.toml";

/// The characters of a kbid (lowercase Crockford base32); every key byte is one of them.
const KBID_ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// What is wrong with a `vectors.idx` or `vectors-meta.toml` (or with what was to be encoded).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum VectorsIdxError {
    #[error("vectors.idx: {0}")]
    Index(String),
    #[error("vectors-meta.toml: {0}")]
    Meta(String),
}

fn idx_err(message: impl Into<String>) -> VectorsIdxError {
    VectorsIdxError::Index(message.into())
}

fn meta_err(message: impl Into<String>) -> VectorsIdxError {
    VectorsIdxError::Meta(message.into())
}

/// The contents of `vectors.idx`.
///
/// `records` holds `(kbid_hash, vector)` pairs. [`VectorsIdx::decode`] returns them sorted by
/// key (as the file stores them); [`VectorsIdx::get`] relies on that order, so call
/// [`VectorsIdx::sort`] after pushing records yourself. [`VectorsIdx::encode`] sorts on its own.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorsIdx {
    pub dimensions: u16,
    pub records: Vec<([u8; KEY_LEN], Vec<f32>)>,
}

/// The key of a kbid: its first 16 bytes (a kbid is 26 ASCII characters). A shorter string is
/// padded with zero bytes, which never match a stored key.
pub fn key_of(kbid: &str) -> [u8; KEY_LEN] {
    let mut key = [0u8; KEY_LEN];
    let b = kbid.as_bytes();
    let n = b.len().min(KEY_LEN);
    key[..n].copy_from_slice(&b[..n]);
    key
}

fn check_key(key: &[u8; KEY_LEN]) -> Result<(), String> {
    if key.iter().all(|b| KBID_ALPHABET.contains(b)) {
        Ok(())
    } else {
        Err(format!(
            "key {:?} is not the first 16 characters of a kbid (lowercase Crockford base32)",
            String::from_utf8_lossy(key)
        ))
    }
}

fn record_len(dimensions: u16) -> usize {
    KEY_LEN + usize::from(dimensions) * 4
}

impl VectorsIdx {
    /// An empty index of vectors with `dimensions` components.
    pub fn new(dimensions: u16) -> Self {
        VectorsIdx {
            dimensions,
            records: Vec::new(),
        }
    }

    /// Add the vector of section `kbid` (unsorted; see [`VectorsIdx::sort`]).
    pub fn push(&mut self, kbid: &str, vector: Vec<f32>) {
        self.records.push((key_of(kbid), vector));
    }

    /// Sort the records by key, bytewise (the order of the file and of [`VectorsIdx::get`]).
    pub fn sort(&mut self) {
        self.records.sort_by_key(|r| r.0);
    }

    /// The vector of section `kbid`, by binary search on its first 16 bytes. Expects sorted
    /// records (see the type's documentation).
    pub fn get(&self, kbid: &str) -> Option<&[f32]> {
        if kbid.len() < KEY_LEN {
            return None;
        }
        let key = key_of(kbid);
        self.records
            .binary_search_by(|r| r.0.cmp(&key))
            .ok()
            .map(|i| self.records[i].1.as_slice())
    }

    /// The file's bytes, records sorted by key. Rejects zero dimensions, a vector whose length
    /// is not `dimensions`, a key that is not kbid characters, duplicate keys and more than
    /// `u32::MAX` records.
    pub fn encode(&self) -> Result<Vec<u8>, VectorsIdxError> {
        if self.dimensions == 0 {
            return Err(idx_err("dimensions must be at least 1"));
        }
        let count = u32::try_from(self.records.len()).map_err(|_| {
            idx_err(format!(
                "{} records do not fit the u32 record count",
                self.records.len()
            ))
        })?;
        let mut order: Vec<&([u8; KEY_LEN], Vec<f32>)> = self.records.iter().collect();
        order.sort_by_key(|r| r.0);
        for (i, (key, vector)) in order.iter().enumerate() {
            check_key(key).map_err(idx_err)?;
            if vector.len() != usize::from(self.dimensions) {
                return Err(idx_err(format!(
                    "the vector of key {:?} has {} components; dimensions is {}",
                    String::from_utf8_lossy(key),
                    vector.len(),
                    self.dimensions
                )));
            }
            if i > 0 && order[i - 1].0 == *key {
                return Err(idx_err(format!(
                    "duplicate key {:?} (two kbids share their first 16 characters)",
                    String::from_utf8_lossy(key)
                )));
            }
        }
        let mut out = Vec::with_capacity(HEADER_LEN + order.len() * record_len(self.dimensions));
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.dimensions.to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
        for (key, vector) in order {
            out.extend_from_slice(key);
            for x in vector {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        Ok(out)
    }

    /// Parse and validate a whole file: magic, version, dimensions ≥ 1, the length exactly
    /// `HEADER_LEN + record_count × (16 + 4 × dimensions)`, keys of kbid characters, strictly
    /// ascending (sorted, no duplicates). Any f32 bit pattern (NaN included) is data.
    pub fn decode(bytes: &[u8]) -> Result<Self, VectorsIdxError> {
        if bytes.len() < HEADER_LEN {
            return Err(idx_err(format!(
                "truncated header: {} bytes, the header has {HEADER_LEN}",
                bytes.len()
            )));
        }
        if bytes[0..4] != MAGIC {
            return Err(idx_err(format!(
                "bad magic {:?}, expected \"KBVX\" (not a vectors.idx file)",
                String::from_utf8_lossy(&bytes[0..4])
            )));
        }
        if bytes[4] != VERSION {
            return Err(idx_err(format!(
                "unsupported version {}; this kbdb reads version {VERSION}",
                bytes[4]
            )));
        }
        let dimensions = u16::from_le_bytes([bytes[5], bytes[6]]);
        if dimensions == 0 {
            return Err(idx_err("dimensions is 0; it must be at least 1"));
        }
        let count = u32::from_le_bytes([bytes[7], bytes[8], bytes[9], bytes[10]]);
        let rec = record_len(dimensions);
        let body = &bytes[HEADER_LEN..];
        let expected = (count as u64) * (rec as u64);
        if body.len() as u64 != expected {
            let kind = if (body.len() as u64) < expected {
                "truncated"
            } else {
                "trailing bytes"
            };
            return Err(idx_err(format!(
                "{kind}: {count} records of {rec} bytes need {expected} bytes after the header, \
                 the file has {}",
                body.len()
            )));
        }
        let mut records: Vec<([u8; KEY_LEN], Vec<f32>)> = Vec::with_capacity(count as usize);
        for (i, chunk) in body.chunks_exact(rec).enumerate() {
            let mut key = [0u8; KEY_LEN];
            key.copy_from_slice(&chunk[..KEY_LEN]);
            check_key(&key).map_err(|m| idx_err(format!("record {i}: {m}")))?;
            if let Some((prev, _)) = records.last()
                && *prev >= key
            {
                return Err(idx_err(format!(
                    "record {i}: key {:?} {} the previous key (records must be sorted \
                     ascending with no duplicates)",
                    String::from_utf8_lossy(&key),
                    if *prev == key { "repeats" } else { "is below" }
                )));
            }
            let vector = chunk[KEY_LEN..]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            records.push((key, vector));
        }
        Ok(VectorsIdx {
            dimensions,
            records,
        })
    }
}

/// `vectors-meta.toml`: which model made the vectors, so an importer can tell whether they
/// are usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VectorsMeta {
    pub model_name: String,
    pub dimensions: u16,
    /// The `vectors.idx` format version ([`VERSION`]).
    pub version: u32,
    /// RFC 3339 time the vectors were built.
    pub last_built: String,
    pub section_count: u64,
}

/// A TOML basic string: quoted, with `"`, `\` and control characters escaped.
pub(crate) fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl VectorsMeta {
    /// The `[vectors]` table, keys in the documented order and layout.
    pub fn to_toml(&self) -> String {
        format!(
            "[vectors]\n\
             model_name  = {}\n\
             dimensions  = {}\n\
             version     = {}\n\
             last_built  = {}\n\
             section_count = {}\n",
            toml_string(&self.model_name),
            self.dimensions,
            self.version,
            toml_string(&self.last_built),
            self.section_count
        )
    }

    /// Parse `vectors-meta.toml`. Every key of `[vectors]` is required with its type
    /// (`model_name` a non-empty string, `dimensions` an integer 1..=65535, `version` the
    /// integer 1, `last_built` an RFC 3339 string, `section_count` an integer ≥ 0); errors name
    /// the key. Unknown keys are ignored.
    pub fn from_toml(text: &str) -> Result<Self, VectorsIdxError> {
        let doc: toml::Table =
            toml::from_str(text).map_err(|e| meta_err(format!("not valid TOML: {e}")))?;
        let table = match doc.get("vectors") {
            Some(toml::Value::Table(t)) => t,
            Some(_) => return Err(meta_err("`vectors` must be a table ([vectors])")),
            None => return Err(meta_err("missing table [vectors]")),
        };
        let get = |key: &str| {
            table
                .get(key)
                .ok_or_else(|| meta_err(format!("missing key `vectors.{key}`")))
        };
        let string = |key: &str| match get(key)? {
            toml::Value::String(s) => Ok(s.clone()),
            other => Err(meta_err(format!(
                "`vectors.{key}` must be a string, found {}",
                other.type_str()
            ))),
        };
        let int = |key: &str, min: i64, max: i64| match get(key)? {
            toml::Value::Integer(i) if (min..=max).contains(i) => Ok(*i),
            toml::Value::Integer(i) => Err(meta_err(format!(
                "`vectors.{key}` is {i}; it must be in {min}..={max}"
            ))),
            other => Err(meta_err(format!(
                "`vectors.{key}` must be an integer, found {}",
                other.type_str()
            ))),
        };
        let model_name = string("model_name")?;
        if model_name.is_empty() {
            return Err(meta_err("`vectors.model_name` is empty"));
        }
        let dimensions = int("dimensions", 1, i64::from(u16::MAX))? as u16;
        let version = int("version", 0, i64::from(u32::MAX))? as u32;
        if version != u32::from(VERSION) {
            return Err(meta_err(format!(
                "`vectors.version` is {version}; this kbdb reads version {VERSION}"
            )));
        }
        let last_built = string("last_built")?;
        if chrono::DateTime::parse_from_rfc3339(&last_built).is_err() {
            return Err(meta_err(format!(
                "`vectors.last_built` is {last_built:?}, not an RFC 3339 time"
            )));
        }
        let section_count = int("section_count", 0, i64::MAX)? as u64;
        Ok(VectorsMeta {
            model_name,
            dimensions,
            version,
            last_built,
            section_count,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KBID_A: &str = "0123456789abcdefghjkmnpqrs";
    const KBID_B: &str = "zyxwvtsrqpnmkjhgfedcba9870";

    /// Dimensions 2; records pushed out of order: B = [-2.0, 0.25], A = [1.0, -0.5].
    fn example() -> VectorsIdx {
        let mut v = VectorsIdx::new(2);
        v.push(KBID_B, vec![-2.0, 0.25]);
        v.push(KBID_A, vec![1.0, -0.5]);
        v
    }

    /// The bytes of `example()`, written out by hand.
    fn example_bytes() -> Vec<u8> {
        [
            &b"KBVX"[..],              // magic
            &[0x01],                   // version
            &[0x02, 0x00],             // dimensions = 2
            &[0x02, 0x00, 0x00, 0x00], // record_count = 2
            b"0123456789abcdef",       // key of KBID_A (sorts first)
            &[0x00, 0x00, 0x80, 0x3f], // 1.0
            &[0x00, 0x00, 0x00, 0xbf], // -0.5
            b"zyxwvtsrqpnmkjhg",       // key of KBID_B
            &[0x00, 0x00, 0x00, 0xc0], // -2.0
            &[0x00, 0x00, 0x80, 0x3e], // 0.25
        ]
        .concat()
    }

    #[test]
    fn byte_exact_example() {
        let bytes = example().encode().unwrap();
        assert_eq!(bytes, example_bytes());
        assert_eq!(bytes.len(), HEADER_LEN + 2 * (KEY_LEN + 2 * 4));
        let decoded = VectorsIdx::decode(&bytes).unwrap();
        assert_eq!(decoded.dimensions, 2);
        assert_eq!(
            decoded.records,
            vec![
                (*b"0123456789abcdef", vec![1.0, -0.5]),
                (*b"zyxwvtsrqpnmkjhg", vec![-2.0, 0.25]),
            ]
        );
        let mut sorted = example();
        sorted.sort();
        assert_eq!(decoded, sorted);
    }

    #[test]
    fn lookup_by_kbid() {
        let v = VectorsIdx::decode(&example_bytes()).unwrap();
        assert_eq!(v.get(KBID_A), Some(&[1.0f32, -0.5][..]));
        assert_eq!(v.get(KBID_B), Some(&[-2.0f32, 0.25][..]));
        // Only the first 16 characters count.
        assert_eq!(
            v.get("0123456789abcdefzzzzzzzzzz"),
            Some(&[1.0f32, -0.5][..])
        );
        assert_eq!(v.get("1123456789abcdefghjkmnpqrs"), None);
        assert_eq!(v.get("0123"), None);
        assert_eq!(v.get(""), None);
        assert_eq!(key_of("abc"), *b"abc\0\0\0\0\0\0\0\0\0\0\0\0\0");
    }

    #[test]
    fn encode_sorts_many_records() {
        let kbid = |c: u8| -> String { std::iter::repeat_n(c as char, 26).collect() };
        let mut v = VectorsIdx::new(1);
        for (i, &c) in KBID_ALPHABET.iter().enumerate().rev() {
            v.push(&kbid(c), vec![i as f32]);
        }
        let d = VectorsIdx::decode(&v.encode().unwrap()).unwrap();
        assert!(d.records.windows(2).all(|w| w[0].0 < w[1].0));
        for (i, &c) in KBID_ALPHABET.iter().enumerate() {
            assert_eq!(d.get(&kbid(c)), Some(&[i as f32][..]));
        }
    }

    #[test]
    fn nan_and_special_values_are_data() {
        let mut v = VectorsIdx::new(3);
        let nan = f32::from_bits(0x7fc0_1234);
        v.push(KBID_A, vec![nan, f32::INFINITY, -0.0]);
        let d = VectorsIdx::decode(&v.encode().unwrap()).unwrap();
        let got = d.get(KBID_A).unwrap();
        assert_eq!(got[0].to_bits(), 0x7fc0_1234);
        assert_eq!(got[1], f32::INFINITY);
        assert_eq!(got[2].to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn empty_index() {
        let v = VectorsIdx::new(384);
        let bytes = v.encode().unwrap();
        assert_eq!(bytes, [&b"KBVX"[..], &[1, 0x80, 0x01, 0, 0, 0, 0]].concat());
        assert_eq!(VectorsIdx::decode(&bytes).unwrap(), v);
    }

    #[test]
    fn encode_rejections() {
        let mut v = example();
        v.records[0].1.push(1.0);
        let e = v.encode().unwrap_err().to_string();
        assert!(e.contains("3 components; dimensions is 2"), "{e}");

        let mut v = example();
        v.push(&format!("{}xxxxxxxxxx", &KBID_A[..16]), vec![0.0, 0.0]);
        let e = v.encode().unwrap_err().to_string();
        assert!(e.contains("duplicate key"), "{e}");

        let mut v = example();
        v.push("0123456789ABCDEF", vec![0.0, 0.0]);
        let e = v.encode().unwrap_err().to_string();
        assert!(e.contains("not the first 16 characters of a kbid"), "{e}");

        let e = VectorsIdx::new(0).encode().unwrap_err().to_string();
        assert!(e.contains("dimensions must be at least 1"), "{e}");
    }

    fn decode_err(bytes: &[u8]) -> String {
        VectorsIdx::decode(bytes).unwrap_err().to_string()
    }

    #[test]
    fn decode_rejections() {
        let good = example_bytes();
        for n in 0..good.len() {
            let e = decode_err(&good[..n]);
            assert!(e.starts_with("vectors.idx: "), "{e}");
            assert!(e.contains("truncated"), "prefix {n}: {e}");
        }
        let mut b = good.clone();
        b.push(0);
        assert!(decode_err(&b).contains("trailing bytes"));

        let mut b = good.clone();
        b[0] = b'X';
        assert!(decode_err(&b).contains("bad magic"));
        let mut b = good.clone();
        b[4] = 2;
        assert!(decode_err(&b).contains("unsupported version 2"));
        let mut b = good.clone();
        b[5] = 0;
        assert!(decode_err(&b).contains("dimensions is 0"));

        // A huge record count that does not match the length (no allocation, no overflow).
        let mut b = good.clone();
        b[7..11].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_err(&b).contains("truncated"));
        let mut b = good.clone();
        b[5..7].copy_from_slice(&u16::MAX.to_le_bytes());
        b[7..11].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_err(&b).contains("truncated"));
        // A smaller count leaves the rest as trailing bytes.
        let mut b = good.clone();
        b[7] = 1;
        assert!(decode_err(&b).contains("trailing bytes"));

        // Unsorted and duplicate keys.
        let rec = KEY_LEN + 8;
        let mut b = good.clone();
        let (r0, r1) = (
            good[HEADER_LEN..HEADER_LEN + rec].to_vec(),
            good[HEADER_LEN + rec..].to_vec(),
        );
        b[HEADER_LEN..HEADER_LEN + rec].copy_from_slice(&r1);
        b[HEADER_LEN + rec..].copy_from_slice(&r0);
        assert!(decode_err(&b).contains("record 1: key \"0123456789abcdef\" is below"));
        let mut b = good.clone();
        b[HEADER_LEN + rec..HEADER_LEN + rec + KEY_LEN].copy_from_slice(b"0123456789abcdef");
        assert!(decode_err(&b).contains("repeats"));

        // Keys that are not kbid characters.
        let mut b = good.clone();
        b[HEADER_LEN] = 0;
        assert!(decode_err(&b).contains("record 0"));
        let mut b = good;
        b[HEADER_LEN + 3] = b'I';
        assert!(decode_err(&b).contains("not the first 16 characters of a kbid"));
    }

    const META_TEXT: &str = "[vectors]
model_name  = \"all-MiniLM-L6-v2\"
dimensions  = 384
version     = 1
last_built  = \"2026-06-23T10:00:00Z\"
section_count = 2847
";

    fn meta() -> VectorsMeta {
        VectorsMeta {
            model_name: "all-MiniLM-L6-v2".into(),
            dimensions: 384,
            version: 1,
            last_built: "2026-06-23T10:00:00Z".into(),
            section_count: 2847,
        }
    }

    #[test]
    fn meta_exact_text_and_round_trip() {
        assert_eq!(meta().to_toml(), META_TEXT);
        assert_eq!(VectorsMeta::from_toml(META_TEXT).unwrap(), meta());
        let odd = VectorsMeta {
            model_name: "a \"quoted\"\\name\n".into(),
            ..meta()
        };
        assert_eq!(VectorsMeta::from_toml(&odd.to_toml()).unwrap(), odd);
        // Unknown keys are ignored.
        let extra = format!("{META_TEXT}future = true\n");
        assert_eq!(VectorsMeta::from_toml(&extra).unwrap(), meta());
    }

    #[test]
    fn meta_rejections_name_the_key() {
        for key in [
            "model_name",
            "dimensions",
            "version",
            "last_built",
            "section_count",
        ] {
            let without: String = META_TEXT
                .lines()
                .filter(|l| !l.starts_with(key))
                .map(|l| format!("{l}\n"))
                .collect();
            let e = VectorsMeta::from_toml(&without).unwrap_err().to_string();
            assert_eq!(e, format!("vectors-meta.toml: missing key `vectors.{key}`"));
        }
        let cases = [
            (
                "model_name  = \"all-MiniLM-L6-v2\"",
                "model_name = 7",
                "`vectors.model_name` must be a string, found integer",
            ),
            (
                "model_name  = \"all-MiniLM-L6-v2\"",
                "model_name = \"\"",
                "`vectors.model_name` is empty",
            ),
            (
                "dimensions  = 384",
                "dimensions = \"384\"",
                "`vectors.dimensions` must be an integer, found string",
            ),
            (
                "dimensions  = 384",
                "dimensions = 0",
                "`vectors.dimensions` is 0",
            ),
            (
                "dimensions  = 384",
                "dimensions = 65536",
                "`vectors.dimensions` is 65536",
            ),
            (
                "version     = 1",
                "version = 2",
                "`vectors.version` is 2; this kbdb reads version 1",
            ),
            (
                "version     = 1",
                "version = 1.0",
                "`vectors.version` must be an integer, found float",
            ),
            (
                "last_built  = \"2026-06-23T10:00:00Z\"",
                "last_built = 2026-06-23T10:00:00Z",
                "`vectors.last_built` must be a string, found datetime",
            ),
            (
                "last_built  = \"2026-06-23T10:00:00Z\"",
                "last_built = \"yesterday\"",
                "not an RFC 3339 time",
            ),
            (
                "section_count = 2847",
                "section_count = -1",
                "`vectors.section_count` is -1",
            ),
        ];
        for (from, to, want) in cases {
            let text = META_TEXT.replace(from, to);
            assert_ne!(text, META_TEXT);
            let e = VectorsMeta::from_toml(&text).unwrap_err().to_string();
            assert!(e.contains(want), "{to}: {e}");
        }
        assert!(
            VectorsMeta::from_toml("")
                .unwrap_err()
                .to_string()
                .contains("missing table [vectors]")
        );
        assert!(
            VectorsMeta::from_toml("vectors = 1")
                .unwrap_err()
                .to_string()
                .contains("must be a table")
        );
        assert!(
            VectorsMeta::from_toml("[vectors")
                .unwrap_err()
                .to_string()
                .contains("not valid TOML")
        );
    }
}
