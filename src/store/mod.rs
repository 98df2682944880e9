//! The store: redb is the source of truth. This module opens the database, runs migrations and
//! gives typed access to the tables inside one transaction.

#[doc(hidden)]
pub mod faults;
pub mod handle;
pub mod migrate;
pub mod synonyms;
pub mod tables;
pub mod txn;
pub mod wal;

pub use handle::Store;

/// File name of the redb database inside the database folder.
pub const DB_FILE: &str = "kbdb.redb";
