//! 0006 vectors: adds `vectors` (kbid → embedding), `vector_state` (model, dimensions, the
//! change sequence the embedder has applied) and `vector_failures`. Nothing is embedded here:
//! with a provider configured, `rebuild` (or the embedder, for new sections) fills them.

use redb::WriteTransaction;

use crate::error::Result;
use crate::store::tables::{VECTOR_FAILURES, VECTOR_STATE, VECTORS};

pub fn apply(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(VECTORS)?;
    txn.open_table(VECTOR_STATE)?;
    txn.open_table(VECTOR_FAILURES)?;
    Ok(())
}
