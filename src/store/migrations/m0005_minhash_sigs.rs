//! 0005 minhash_sigs: near-duplicate band keys move from `minhash_bands` (16 rows per section,
//! scattered over the B-tree, the main cost of a write) to `minhash_sigs` (one row per section:
//! its 16 keys); the band index is built from it in memory. Filled from every text section's
//! content; `minhash_bands` is deleted.

use redb::{ReadableTable, WriteTransaction};

use crate::error::Result;
use crate::index::near_dup::encode_keys;
use crate::store::tables::{CONTENT_BY_KBID, MINHASH_BANDS, MINHASH_SIGS, SECTIONS};
use crate::types::records::{SectionRecordV1 as SectionRecord, decode};

pub fn apply(txn: &WriteTransaction) -> Result<()> {
    {
        let mut sigs = txn.open_table(MINHASH_SIGS)?;
        let sections = txn.open_table(SECTIONS)?;
        let content = txn.open_table(CONTENT_BY_KBID)?;
        for row in sections.iter()? {
            let (k, v) = row?;
            let kbid = k.value();
            let rec: SectionRecord = decode("sections", kbid, v.value())?;
            if let Some(bytes) = content.get(kbid)?
                && let Some(keys) = crate::learn::band_keys_of(&rec.section_type, bytes.value())
            {
                sigs.insert(kbid, encode_keys(&keys).as_slice())?;
            }
        }
    }
    txn.delete_multimap_table(MINHASH_BANDS)?;
    Ok(())
}
