//! `gc`: remove sections that no document holds and that were never learned on their own.

use redb::ReadableTable;

use crate::error::Result;
use crate::store::txn::WriteTables;
use crate::types::records::{SectionRecord, decode};

/// Remove every collectable section inside `t`; returns (sections, bytes) removed.
pub(crate) fn collect(t: &mut WriteTables<'_>) -> Result<(u64, u64)> {
    let mut doomed = Vec::new();
    for row in t.sections.iter()? {
        let (k, v) = row?;
        let kbid = k.value();
        let rec: SectionRecord = decode("sections", kbid, v.value())?;
        if !rec.standalone && !t.section_held(kbid, &rec)? {
            doomed.push((kbid.to_string(), rec.size));
        }
    }
    let mut bytes = 0;
    for (kbid, size) in &doomed {
        crate::unlearn::remove_section(t, kbid)?;
        bytes += size;
    }
    Ok((doomed.len() as u64, bytes))
}
