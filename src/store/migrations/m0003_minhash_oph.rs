//! 0003 minhash_oph: near-duplicate signatures switch to one-permutation MinHash (one hash per
//! shingle instead of 64). The `minhash_bands` table is emptied and refilled from every text
//! section's content with the new band keys.

use redb::{ReadableTable, WriteTransaction};

use crate::error::Result;
use crate::store::tables::{CONTENT_BY_KBID, MINHASH_BANDS, SECTIONS};
use crate::types::records::{SectionRecordV1 as SectionRecord, decode};

pub fn apply(txn: &WriteTransaction) -> Result<()> {
    txn.delete_multimap_table(MINHASH_BANDS)?;
    let mut bands = txn.open_multimap_table(MINHASH_BANDS)?;
    let sections = txn.open_table(SECTIONS)?;
    let content = txn.open_table(CONTENT_BY_KBID)?;
    for row in sections.iter()? {
        let (k, v) = row?;
        let kbid = k.value();
        let rec: SectionRecord = decode("sections", kbid, v.value())?;
        if let Some(bytes) = content.get(kbid)?
            && let Some(keys) = crate::learn::band_keys_of(&rec.section_type, bytes.value())
        {
            for key in keys {
                bands.insert(u64::from(key), kbid)?;
            }
        }
    }
    Ok(())
}
