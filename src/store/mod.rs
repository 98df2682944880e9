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
