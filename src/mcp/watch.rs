//! `kbdb mcp --watch`: a folder kept in sync by a watcher in this process, every change
//! through the daemon.

use std::sync::Arc;

use rmcp::model::LoggingLevel;
use serde_json::{Value, json};

use super::notifications::Event;
use super::server::State;
use crate::error::{KbError, Result};

/// `kbdb mcp --watch`: sync the folder, then every batch of changes, through the daemon (on a
/// thread of its own). Problems are logged to stderr and sent as `notifications/message`.
pub(super) fn start_watching(
    state: Arc<State>,
    watcher: crate::sync::FolderWatcher,
    prefix: Option<String>,
) {
    std::thread::spawn(move || {
        let log = |level: LoggingLevel, data: Value| {
            let _ = state.events.send(Event::Log(level, data));
        };
        let mut sync = |req: &crate::sync::SyncRequest| -> Result<crate::sync::SyncReport> {
            let params = serde_json::to_value(req).map_err(|e| KbError::Storage(e.to_string()))?;
            serde_json::from_value(state.pool.call("sync", params)?)
                .map_err(|e| KbError::Daemon(format!("unexpected sync result: {e}")))
        };
        let mut report = |r: Result<crate::sync::SyncReport>| match r {
            Ok(r) => {
                for s in &r.skipped {
                    tracing::warn!(path = %s.path, "not synced: {}", s.reason);
                }
                if !r.skipped.is_empty() {
                    log(
                        LoggingLevel::Warning,
                        json!({"event": "sync", "root": r.root, "skipped": r.skipped}),
                    );
                }
                if !r.changes.is_empty() {
                    log(
                        LoggingLevel::Debug,
                        json!({"event": "sync", "root": r.root, "changes": r.changes}),
                    );
                }
            }
            Err(e) => {
                tracing::warn!("sync failed: {e}");
                log(
                    LoggingLevel::Warning,
                    json!({"event": "sync", "error": e.to_string()}),
                );
            }
        };
        let first = sync(&crate::sync::SyncRequest {
            dir: watcher.root().to_path_buf(),
            prefix,
            paths: None,
        });
        let prefix = match &first {
            Ok(r) => r.prefix.clone(),
            Err(e) => {
                tracing::error!(
                    "cannot sync {}: {e}; not watching it",
                    watcher.root().display()
                );
                report(first);
                return;
            }
        };
        report(first);
        if let Err(e) = crate::sync::watch::sync_loop(watcher, &prefix, &mut sync, &mut report) {
            tracing::error!("the folder watcher stopped: {e}");
        }
    });
}
