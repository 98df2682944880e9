//! The store: redb is the source of truth. This module opens the database, runs migrations and
//! gives typed access to the tables inside one transaction.

pub mod content_codec;
#[doc(hidden)]
pub(crate) mod durability;
pub mod faults;
pub mod handle;
pub mod journal;
pub mod migrate;
mod migrations;
pub mod synonyms;
pub mod tables;
pub mod txn;

use std::path::Path;

use redb::{Database, DatabaseError};

use crate::error::{KbError, Result};

pub use handle::Store;

/// Open a file of the database folder without following a symbolic link in its place: another
/// user who could write the folder could plant one to make kbdb write over (or truncate) a file
/// of the user's. `write`: open it for writing too, creating it when missing. Anything but a
/// regular file there (a FIFO, a device, a folder) is refused (`files::NotRegular`) without waiting:
/// opening a FIFO to read it waits for a writer, and would hang every open of the database.
pub fn open_nofollow(path: &Path, write: bool) -> std::io::Result<std::fs::File> {
    crate::files::open_regular(path, write, libc::O_NOFOLLOW)
}

/// Create a new file in the database folder for writing; fails when anything (a symbolic link
/// included) is there by that name.
pub fn create_new(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// The error for a file of the database folder that could not be opened: a symbolic link in
/// its place (ELOOP under O_NOFOLLOW), or something else than a regular file, says so; anything
/// else is an I/O error.
pub fn open_error(what: &str, path: &Path, e: std::io::Error) -> KbError {
    if e.raw_os_error() == Some(libc::ELOOP) {
        return KbError::UnsafeFolder {
            path: path.to_path_buf(),
            message: format!(
                "{} is a symbolic link: kbdb does not follow links in its database folder \
                 (someone who can write the folder may have put it there); remove it, and \
                 check who can write the folder",
                path.display()
            ),
        };
    }
    if crate::files::is_not_regular(&e) {
        return KbError::UnsafeFolder {
            path: path.to_path_buf(),
            message: format!(
                "{} is not a regular file (a FIFO, a device or a folder): kbdb keeps only \
                 regular files there, and does not wait on one it cannot read; remove it, and \
                 check who can write the folder",
                path.display()
            ),
        };
    }
    KbError::io(format!("cannot {what} {}", path.display()), e)
}

/// Create a database folder (and its parents) that others cannot write whatever the umask, as
/// `check_folder` expects.
pub fn create_folder(dir: &Path) -> Result<()> {
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o755)
        .recursive(true)
        .create(dir)
        .map_err(|e| KbError::io(format!("cannot create {}", dir.display()), e))
}

/// Refuse a database folder that another user could write (group- or other-writable without
/// the sticky bit, or owned by another user): they could replace its files or plant links in
/// them. Says how to fix the mode.
pub fn check_folder(dir: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir)
        .map_err(|e| KbError::io(format!("cannot access {}", dir.display()), e))?;
    // SAFETY: getuid has no preconditions and cannot fail.
    let me = unsafe { libc::getuid() };
    if meta.uid() != me {
        return Err(KbError::UnsafeFolder {
            path: dir.to_path_buf(),
            message: format!(
                "the database folder {} belongs to uid {}, not to you (uid {me}): its owner \
                 could change its files under you; use a database folder of your own",
                dir.display(),
                meta.uid()
            ),
        });
    }
    let mode = meta.mode();
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(KbError::UnsafeFolder {
            path: dir.to_path_buf(),
            message: format!(
                "the database folder {} can be written by other users (mode {:o}): they could \
                 replace its files or plant links in it; run `chmod go-w {}`",
                dir.display(),
                mode & 0o7777,
                dir.display()
            ),
        });
    }
    Ok(())
}

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
