//! 0015 record_checksums: from this version on, every record is written as version 2: the
//! version byte, postcard and a CRC-32 of both (src/types/records.rs), so byte damage inside a
//! record (a source key, a tag, a title: values nothing else holds a copy of) is reported by
//! `check` and by reads instead of served. Records written before keep version 1 and are read
//! as before; each gains its checksum when it is next written. Nothing is rewritten here: the
//! version exists so that an older kbdb, which cannot read version-2 records, refuses the
//! database at open instead of failing on the first record it reads.

use redb::WriteTransaction;

use crate::error::Result;

pub fn apply(_txn: &WriteTransaction) -> Result<()> {
    Ok(())
}
