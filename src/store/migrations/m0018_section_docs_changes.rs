//! 0018 section_docs_changes: no table changes. From this version on a document taking or giving
//! up a section is logged as the change kind `SectionDocsChanged` (src/types/records.rs), which
//! an older kbdb cannot read in the change log; the version makes it refuse the database at open
//! instead. Entries written before stay as they are (`SectionChanged`, read as before).

use redb::WriteTransaction;

use crate::error::Result;

pub fn apply(_txn: &WriteTransaction) -> Result<()> {
    Ok(())
}
