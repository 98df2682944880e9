//! The engine's error type. Every failure a user can cause names the field and the rule.

use std::path::PathBuf;

/// Result alias used across the engine.
pub type Result<T, E = KbError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum KbError {
    /// Bad input: `message` already names the field and the rule.
    #[error("{message}")]
    InvalidInput { field: String, message: String },

    /// A section or document that was asked for by id does not exist.
    #[error("{0}")]
    NotFound(String),

    #[error("no knowledge base at {}; run `kbdb init` (or pass --db) to create one", .0.display())]
    NotInitialized(PathBuf),

    #[error("database path {} is not a directory", .0.display())]
    NotADirectory(PathBuf),

    #[error(
        "{} holds the plain-file layout (catalog.toml, sections/), not a database; run `kbdb migrate {}` to turn it into one",
        .0.display(), .0.display()
    )]
    PlainLayout(PathBuf),

    /// An entry of a plain-file layout that cannot be imported (`--strict` stops at the first).
    #[error("{path}: {reason}")]
    BadImport { path: String, reason: String },

    #[error(
        "the knowledge base at {} is in use by another process (only one process may open it; stop the other one or wait for it to finish)",
        .0.display()
    )]
    Locked(PathBuf),

    #[error("invalid configuration in {}: {message}", .file.display())]
    Config { file: PathBuf, message: String },

    #[error("corrupt record in table {table} for key {key}: {detail}")]
    Corrupt {
        table: &'static str,
        key: String,
        detail: String,
    },

    /// The database's files hold bytes that cannot be what kbdb wrote: a damaged page of the
    /// store (redb failed on it), content that does not hash to its kbid, a damaged write
    /// journal. `what` says which and where; the message says what to do.
    #[error("{what}; {DAMAGED_HINT}")]
    Damaged { what: String },

    /// A database folder (or a file in it) that another user could have tampered with: a
    /// folder others may write, or a symbolic link in place of one of its files.
    #[error("{message}")]
    UnsafeFolder { path: PathBuf, message: String },

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    #[error("storage error: {0}")]
    Storage(String),

    /// An error reported by the daemon, carried over the wire with its code and field.
    #[error("{message}")]
    Remote {
        code: String,
        message: String,
        field: Option<String>,
    },

    /// `vector` or `hybrid` search without an embedding provider (hybrid-search spec).
    #[error("Vector search requires a configured embedding provider")]
    EmbeddingNotConfigured,

    /// The embedding provider failed or is not available (missing model, runtime, API…).
    #[error("{0}")]
    Embedding(String),

    /// The daemon could not be reached, started or understood.
    #[error("{0}")]
    Daemon(String),

    /// An edit of a document that came from a file, refused because the file changed on disk
    /// since kbdb last read it (docs/sync.md): nothing was written on either side.
    #[error("{message}")]
    Conflict { path: PathBuf, message: String },
}

/// What to do about a damaged database (the end of every `damaged` error's message).
pub const DAMAGED_HINT: &str = "the database is damaged: run `kbdb check` to see what is affected, \
     and restore it from an export (`kbdb import`) if it finds errors (docs/reliability.md)";

/// CLI exit code of a `damaged` error (docs/cli.md).
pub const EXIT_DAMAGED: i32 = 9;

impl KbError {
    /// A copy of a group commit's error for each write of the group that shares it: a
    /// `damaged` one keeps its code, any other is a storage error with its message.
    pub(crate) fn shared_copy(&self) -> KbError {
        match self {
            KbError::Damaged { what } => KbError::damaged(what.clone()),
            other => KbError::Storage(other.to_string()),
        }
    }

    /// A damaged database file: `what` names the file, the table or the kbid.
    pub fn damaged(what: impl Into<String>) -> Self {
        KbError::Damaged { what: what.into() }
    }

    pub fn invalid(field: &str, rule: impl std::fmt::Display) -> Self {
        KbError::InvalidInput {
            field: field.to_string(),
            message: format!("{field}: {rule}"),
        }
    }

    /// A short stable code for machine consumers (CLI JSON errors, daemon wire).
    pub fn code(&self) -> &str {
        match self {
            KbError::Remote { code, .. } => code,
            KbError::Daemon(_) => "daemon",
            KbError::EmbeddingNotConfigured => "EMBEDDING_PROVIDER_NOT_CONFIGURED",
            KbError::Embedding(_) => "embedding_failed",
            KbError::InvalidInput { .. } => "invalid_input",
            KbError::NotFound(_) => "not_found",
            KbError::NotInitialized(_) => "not_initialized",
            KbError::NotADirectory(_) => "not_a_directory",
            KbError::PlainLayout(_) => "plain_layout",
            KbError::BadImport { .. } => "bad_import",
            KbError::Locked(_) => "locked",
            KbError::Config { .. } => "config",
            KbError::Corrupt { .. } => "corrupt",
            KbError::Damaged { .. } => "damaged",
            KbError::UnsafeFolder { .. } => "unsafe_folder",
            KbError::Io { .. } => "io",
            KbError::Storage(_) => "storage",
            KbError::Conflict { .. } => "conflict",
        }
    }

    /// The field an input error is about, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            KbError::InvalidInput { field, .. } => Some(field),
            KbError::Remote { field, .. } => field.as_deref(),
            _ => None,
        }
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        KbError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Whether an I/O error says the disk (or the user's quota) is full.
pub fn is_disk_full(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::StorageFull
        || e.kind() == std::io::ErrorKind::QuotaExceeded
        || matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

impl KbError {
    /// A failed read, write or fsync of the database file, saying plainly when the disk is full
    /// (docs/io-faults.md).
    pub fn storage_io(source: std::io::Error) -> Self {
        let context = if is_disk_full(&source) {
            "the disk is full: the database cannot save changes (free some space; reads keep working)"
        } else {
            "I/O error on the database file"
        };
        KbError::Io {
            context: context.to_string(),
            source,
        }
    }
}

/// What an operation gets when redb refused it because of an earlier I/O failure (the store
/// reopens the database on the next call: src/store/handle.rs).
const PREVIOUS_IO: &str =
    "the database stopped after an earlier I/O error and is reopened on the next call; retry";

impl From<redb::StorageError> for KbError {
    fn from(e: redb::StorageError) -> Self {
        match e {
            redb::StorageError::Io(io) => KbError::storage_io(io),
            redb::StorageError::PreviousIo => KbError::Storage(PREVIOUS_IO.into()),
            redb::StorageError::Corrupted(m) => {
                KbError::damaged(format!("redb found the database file corrupted ({m})"))
            }
            other => KbError::Storage(other.to_string()),
        }
    }
}

impl From<redb::Error> for KbError {
    fn from(e: redb::Error) -> Self {
        match e {
            redb::Error::Io(io) => KbError::storage_io(io),
            redb::Error::PreviousIo => KbError::Storage(PREVIOUS_IO.into()),
            redb::Error::Corrupted(m) => {
                KbError::damaged(format!("redb found the database file corrupted ({m})"))
            }
            other => KbError::Storage(other.to_string()),
        }
    }
}

macro_rules! storage_from {
    ($($t:ident),*) => {$(
        impl From<redb::$t> for KbError {
            fn from(e: redb::$t) -> Self {
                match e {
                    redb::$t::Storage(s) => s.into(),
                    other => KbError::Storage(other.to_string()),
                }
            }
        }
    )*};
}
storage_from!(TransactionError, TableError, CommitError);

impl From<redb::SetDurabilityError> for KbError {
    fn from(e: redb::SetDurabilityError) -> Self {
        KbError::Storage(e.to_string())
    }
}
