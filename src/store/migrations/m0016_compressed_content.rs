//! 0016 compressed_content: no table changes. From this version on a section's content is stored
//! zstd-compressed when that makes it shorter (src/store/content_codec.rs): a row shorter than
//! its record's `size` is a zstd frame, a row of exactly `size` bytes is the content itself. Rows
//! written before are all of the second kind and read as before, so nothing is rewritten; each
//! content is compressed when it is next written. The version makes an older kbdb, which would
//! serve a compressed row as the content, refuse the database at open.

use redb::WriteTransaction;

use crate::error::Result;

pub fn apply(_txn: &WriteTransaction) -> Result<()> {
    Ok(())
}
