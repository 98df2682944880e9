//! `kbdb mcp`: the MCP server over stdio (rmcp), a thin adapter over the daemon's methods
//! (docs/mcp.md). stdout carries only JSON-RPC; diagnostics go to stderr.
// Logging and resources/subscribe are current in protocol 2025-11-25 but marked deprecated in
// rmcp (they leave the protocol in 2026-07-28, which kbdb does not negotiate).
#![allow(deprecated)]

mod notifications;
mod prompts;
mod resources;
#[doc(hidden)] // public for the fuzz targets (fuzz/): `tool_call`
pub mod server;
pub mod sessions;
pub mod tools;
#[doc(hidden)] // public for the fuzz targets (fuzz/): `LineTransport`
pub mod transport;
mod watch;

use std::path::Path;

pub use server::Access;

use crate::error::{KbError, Result};

/// A folder `kbdb mcp --watch` keeps in sync.
#[derive(Debug, Clone)]
pub struct WatchSpec {
    pub dir: std::path::PathBuf,
    /// Docid prefix (None: the folder's current one).
    pub prefix: Option<String>,
}

/// Serve MCP on stdin/stdout for the database in `db_dir` until stdin closes.
pub fn run(db_dir: &Path) -> Result<()> {
    run_watching(db_dir, None)
}

/// `run`, also keeping `watch`'s folder in sync (a watcher in this process; every change goes
/// through the daemon, whose change events reach subscribed clients).
pub fn run_watching(db_dir: &Path, watch: Option<WatchSpec>) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| KbError::io("cannot start the async runtime", e))?;
    runtime.block_on(server::serve(db_dir.to_path_buf(), watch))
}
