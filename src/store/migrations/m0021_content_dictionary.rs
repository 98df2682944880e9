//! 0021 content_dictionary: no table changes. From this version on a database trains a zstd
//! dictionary on its own sections once it holds a few thousand (stored in `meta` under
//! `content_dictionary`, src/kb/dictionary.rs), and content is compressed with it from then
//! on. Rows written before read as before, so nothing is rewritten. The version makes an older
//! kbdb, which cannot read a row compressed with a dictionary, refuse the database at open.

use redb::WriteTransaction;

use crate::error::Result;

pub fn apply(_txn: &WriteTransaction) -> Result<()> {
    Ok(())
}
