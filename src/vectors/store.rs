//! Reading and writing vectors and the vector state in redb.
//!
//! A `vectors` value is the 8-byte fingerprint of the embedded text followed by the vector as
//! little-endian f32. `vector_state` keys: `model` (UTF-8), `dimensions` (u32 LE), `applied_seq`
//! (u64 LE), `built_at` (RFC 3339, the last `rebuild`).

use redb::{ReadableTable, Table};

use crate::error::{KbError, Result};
use crate::store::tables::VECTOR_STATE;

pub const FINGERPRINT_LEN: usize = 8;

/// What `vector_state` records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VectorState {
    /// The model of the stored vectors (None: nothing embedded yet).
    pub model: Option<String>,
    pub dimensions: Option<usize>,
    /// The last change the embedder has applied.
    pub applied_seq: u64,
    pub built_at: Option<String>,
}

impl VectorState {
    pub fn read(table: &impl ReadableTable<&'static str, &'static [u8]>) -> Result<VectorState> {
        let get =
            |k: &str| -> Result<Option<Vec<u8>>> { Ok(table.get(k)?.map(|g| g.value().to_vec())) };
        let corrupt = |key: &str, detail: &str| KbError::Corrupt {
            table: "vector_state",
            key: key.to_string(),
            detail: detail.to_string(),
        };
        let model = match get("model")? {
            Some(b) => Some(String::from_utf8(b).map_err(|_| corrupt("model", "not UTF-8"))?),
            None => None,
        };
        let dimensions = match get("dimensions")? {
            Some(b) => Some(u32::from_le_bytes(
                b.as_slice()
                    .try_into()
                    .map_err(|_| corrupt("dimensions", "not 4 bytes"))?,
            ) as usize),
            None => None,
        };
        let applied_seq = match get("applied_seq")? {
            Some(b) => u64::from_le_bytes(
                b.as_slice()
                    .try_into()
                    .map_err(|_| corrupt("applied_seq", "not 8 bytes"))?,
            ),
            None => 0,
        };
        let built_at = match get("built_at")? {
            Some(b) => Some(String::from_utf8(b).map_err(|_| corrupt("built_at", "not UTF-8"))?),
            None => None,
        };
        Ok(VectorState {
            model,
            dimensions,
            applied_seq,
            built_at,
        })
    }

    pub fn write(&self, table: &mut Table<'_, &'static str, &'static [u8]>) -> Result<()> {
        match &self.model {
            Some(m) => table.insert("model", m.as_bytes())?,
            None => table.remove("model")?,
        };
        match self.dimensions {
            Some(d) => table.insert("dimensions", (d as u32).to_le_bytes().as_slice())?,
            None => table.remove("dimensions")?,
        };
        table.insert("applied_seq", self.applied_seq.to_le_bytes().as_slice())?;
        match &self.built_at {
            Some(b) => table.insert("built_at", b.as_bytes())?,
            None => table.remove("built_at")?,
        };
        Ok(())
    }

    /// Whether vectors of this state can answer queries embedded by `model` with `dimensions`.
    pub fn matches(&self, model: &str, dimensions: usize) -> bool {
        self.model.as_deref() == Some(model) && self.dimensions == Some(dimensions)
    }
}

/// Read the state inside any transaction.
pub fn read_state(txn: &redb::ReadTransaction) -> Result<VectorState> {
    VectorState::read(&txn.open_table(VECTOR_STATE)?)
}

pub fn encode_vector(fingerprint: &[u8; FINGERPRINT_LEN], v: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FINGERPRINT_LEN + v.len() * 4);
    out.extend_from_slice(fingerprint);
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// The fingerprint and the vector of a stored value (None: malformed).
pub fn decode_vector(bytes: &[u8]) -> Option<([u8; FINGERPRINT_LEN], Vec<f32>)> {
    if bytes.len() < FINGERPRINT_LEN || !(bytes.len() - FINGERPRINT_LEN).is_multiple_of(4) {
        return None;
    }
    let fp = bytes[..FINGERPRINT_LEN].try_into().ok()?;
    let v = bytes[FINGERPRINT_LEN..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Some((fp, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_round_trip_and_malformed() {
        let v = vec![0.5f32, -0.25, 1.0];
        let b = encode_vector(&[7; 8], &v);
        assert_eq!(decode_vector(&b), Some(([7; 8], v)));
        assert_eq!(decode_vector(&b[..10]), None);
        assert_eq!(decode_vector(&[1, 2]), None);
    }
}
