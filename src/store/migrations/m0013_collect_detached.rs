//! 0013 collect_detached: from this version on, a write that leaves a section in no document
//! removes that section in the same transaction, unless it was learned on its own
//! (docs/decisions.md, "Detached sections are collected at once"). Databases written before kept
//! such sections until `kbdb gc`, and search still found their text; this migration collects
//! them once, so an upgraded database serves no text that its documents no longer hold. It logs
//! each removal in the change log, so the lexical index drops them on its next replay.

use redb::WriteTransaction;

use crate::error::Result;
use crate::store::txn::WriteTables;

pub fn apply(txn: &WriteTransaction) -> Result<()> {
    let mut t = WriteTables::open(txn, crate::now())?;
    let (sections, _bytes) = crate::maintenance::gc::collect(&mut t)?;
    t.flush()?;
    if sections > 0 {
        tracing::info!(sections, "collected sections no document holds any more");
    }
    Ok(())
}
