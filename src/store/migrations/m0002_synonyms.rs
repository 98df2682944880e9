//! 0002 synonyms: adds the `synonyms` table (term ⇒ synonym, both directions stored), used by
//! search at query time. No record changes.

use redb::WriteTransaction;

use crate::error::Result;
use crate::store::tables::SYNONYMS;

pub fn apply(txn: &WriteTransaction) -> Result<()> {
    txn.open_multimap_table(SYNONYMS)?;
    Ok(())
}
