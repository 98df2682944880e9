//! 0011 source_keys_in_memory: the `source_keys` table (source key → kbids) is deleted. The
//! same pairs are in the section records (`source_key`), from which the index is now built in
//! memory with the band index (src/index/source_keys.rs). Every section learned with a title
//! has a (derived) source key, and its row went under a random key — for a title learned many
//! times, into a subtree of its own — costing B-tree pages and their branch paths in every
//! commit. No record changes.

use redb::WriteTransaction;

use crate::error::Result;
use crate::store::tables::SOURCE_KEYS;

pub fn apply(txn: &WriteTransaction) -> Result<()> {
    txn.delete_multimap_table(SOURCE_KEYS)?;
    Ok(())
}
