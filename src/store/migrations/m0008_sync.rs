//! 0008 sync: adds `sync_roots` (a synced folder → its docid prefix) and `sync_files` (a docid →
//! the file it came from: relative path, content hash, size, times, front-matter syntax), the
//! records of folder sync and write-back (docs/sync.md). Both start empty: nothing is synced
//! until `kbdb sync DIR`.

use redb::WriteTransaction;

use crate::error::Result;
use crate::store::tables::{SYNC_FILES, SYNC_ROOTS};

pub fn apply(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(SYNC_ROOTS)?;
    txn.open_table(SYNC_FILES)?;
    Ok(())
}
