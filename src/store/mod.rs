//! The store: redb is the source of truth. This module opens the database, runs migrations and
//! gives typed access to the tables inside one transaction.

#[doc(hidden)]
pub mod faults;
pub mod handle;
pub mod journal;
pub mod migrate;
pub mod synonyms;
pub mod tables;
pub mod txn;

use std::path::Path;

use redb::{Database, DatabaseError};

use crate::error::{KbError, Result};

pub use handle::Store;

/// File name of the redb database inside the database folder.
pub const DB_FILE: &str = "kbdb.redb";

/// Run `f` (a call into the store), turning a panic into a `damaged` error: redb panics on some
/// damaged pages (a slice index out of range, a key that is not UTF-8, "entered unreachable
/// code") instead of returning an error, and one damaged page must not take down the process
/// that serves every client. `what` names the operation for the message.
pub fn guard<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => Err(panic_error(what, payload.as_ref())),
    }
}

/// The `damaged` error for a panic caught while `what` ran.
pub fn panic_error(what: &str, payload: &(dyn std::any::Any + Send)) -> KbError {
    let why = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into());
    KbError::damaged(format!("{what} failed on bytes it cannot read ({why})"))
}

/// Open (creating if needed) the redb file in `dir` and bring its schema up to date.
pub fn open_database(dir: &Path) -> Result<Database> {
    let file = dir.join(DB_FILE);
    let mut db = Database::builder().create(&file).map_err(|e| match e {
        DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => {
            KbError::Locked(dir.to_path_buf())
        }
        DatabaseError::Storage(redb::StorageError::Io(io)) => {
            KbError::io(format!("cannot open {}", file.display()), io)
        }
        other => KbError::Storage(format!("cannot open {}: {other}", file.display())),
    })?;
    migrate::run(&mut db)?;
    Ok(db)
}
