//! 0007 collection: adds `collection`, which holds the TOML text of the loaded models (none
//! yet: every document is of the built-in `Base` model until `kbdb models load`).

use redb::WriteTransaction;

use crate::error::Result;
use crate::store::tables::COLLECTION;

pub fn apply(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(COLLECTION)?;
    Ok(())
}
