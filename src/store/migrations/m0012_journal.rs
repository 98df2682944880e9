//! 0012 journal: no table changes. From this version on the worker daemon commits its groups of
//! writes through the write journal (`kbdb.journal`, docs/storage.md), and a database may hold
//! acknowledged writes that only a replay of that file brings back. The version makes a kbdb
//! that does not know the journal refuse the database ("newer than this kbdb supports") instead
//! of opening it without them.

use redb::WriteTransaction;

use crate::error::Result;

pub fn apply(_txn: &WriteTransaction) -> Result<()> {
    Ok(())
}
