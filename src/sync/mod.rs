//! Folder sync: a folder of markdown files kept as documents (docs/sync.md).
//!
//! * `scan` — which files of a folder are synced (`.md`/`.mdx`, not hidden, not `.gitignore`d)
//!   and reading them safely;
//! * `records` — the per-file records (`sync_files`) and synced folders (`sync_roots`);
//! * `engine` — `Kb::sync` (a whole folder, or the paths a watcher saw change) and the
//!   `WriteOp::Sync` writes it commits, one transaction per batch;
//! * `writeback` — edits of a synced document written back to its file (atomically, keeping
//!   the front matter), refused when the file changed on disk since kbdb read it;
//! * `watch` — the file-system watcher (notify) that a client runs, with an event-driven
//!   debouncer (no timer while idle).

pub mod ops;
pub mod records;
pub mod scan;
pub mod watch;
pub(crate) mod writeback;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use ops::{SyncOp, SyncOutcome};
pub use records::{FileRecord, SyncRoot};
pub use watch::{FolderWatcher, StopHandle, WatchBatch, WatchOptions};

/// What to sync: a folder (with its docid prefix), all of it or only some paths.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SyncRequest {
    /// The folder.
    pub dir: PathBuf,
    /// The docid prefix of its documents. None: the prefix the folder is synced with already
    /// (none for a folder synced for the first time). A non-empty prefix ends with `/` (one is
    /// added when missing).
    #[serde(default)]
    pub prefix: Option<String>,
    /// Only these paths (files or folders inside `dir`, absolute or relative to it), e.g. what a
    /// watcher saw change. None: the whole folder.
    #[serde(default)]
    pub paths: Option<Vec<PathBuf>>,
}

/// What a sync did.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SyncReport {
    /// The folder (canonical path).
    pub root: String,
    /// Its docid prefix.
    pub prefix: String,
    /// Markdown files looked at.
    pub files: u64,
    /// Files whose document was already up to date.
    pub unchanged: u64,
    pub added: u64,
    pub updated: u64,
    pub removed: u64,
    /// Files whose content was unchanged but whose size/times record was refreshed.
    pub touched: u64,
    /// The documents added, updated and removed (at most [`MAX_LISTED_CHANGES`]).
    pub changes: Vec<SyncChange>,
    /// Whether `changes` was cut at [`MAX_LISTED_CHANGES`].
    #[serde(default)]
    pub changes_truncated: bool,
    /// Files not synced, with why (non-UTF-8, bad front matter, empty, …).
    pub skipped: Vec<SyncSkip>,
    /// Write transactions committed (0: the store was not written).
    pub transactions: u64,
    pub elapsed_ms: f64,
}

/// Most entries a report's `changes` lists.
pub const MAX_LISTED_CHANGES: usize = 1000;

/// One document a sync added, updated or removed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SyncChange {
    /// `added`, `updated` or `removed`.
    pub action: String,
    pub docid: String,
    /// The file, relative to the folder.
    pub path: String,
}

/// A file a sync left alone, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SyncSkip {
    /// Relative to the folder.
    pub path: String,
    pub reason: String,
}

/// A synced folder, as `sync --list` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SyncRootInfo {
    pub dir: String,
    pub prefix: String,
    /// Files recorded (synced documents).
    pub files: u64,
    pub created_at: String,
}

/// What `sync --forget` did.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ForgetReport {
    pub dir: String,
    /// Whether the folder was synced.
    pub forgotten: bool,
    /// File records dropped (their documents stay, no longer tied to files).
    pub files: u64,
}
