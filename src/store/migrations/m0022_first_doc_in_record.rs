//! 0022 first_doc_in_record: no table changes. From this version on a section learned into a
//! document keeps that first membership in its record (`SectionRecord::doc`, written after the
//! record's other fields) instead of a row of `section_docs`; its other documents stay in
//! `section_docs`. A new section then costs one row under a random key instead of two. Records
//! written before read as before (no first document: all their memberships are rows), so
//! nothing is rewritten. The version makes an older kbdb, which would not see those
//! memberships, refuse the database at open.

use redb::WriteTransaction;

use crate::error::Result;

pub fn apply(_txn: &WriteTransaction) -> Result<()> {
    Ok(())
}
