//! `kbdb sync` and `kbdb watch`: a folder of markdown files kept as documents (docs/sync.md).
//! The folder is read by the daemon (or in process with --embedded); the watcher runs here and
//! sends each batch of changed paths through the backend.

use std::path::Path;

use kbdb::KbError;
use kbdb::daemon::operations::op;
use kbdb::daemon::params::{DirParam, NoParams};
use kbdb::sync::{FolderWatcher, SyncReport, SyncRequest, WatchOptions};

use super::args::{Format, SyncArgs, WatchArgs};
use super::backend::Backend;
use super::maintenance::{progress_bar, reporter};
use super::output::{EXIT_OK, print_json, print_text};

fn absolute(p: &Path) -> Result<std::path::PathBuf, KbError> {
    std::path::absolute(p).map_err(|e| KbError::io(format!("cannot resolve {}", p.display()), e))
}

/// One sync through the backend, with a progress bar on a terminal.
fn run_sync(
    kb: &Backend,
    req: &SyncRequest,
    bar_label: Option<&str>,
) -> Result<SyncReport, KbError> {
    match bar_label {
        Some(label) => {
            let bar = progress_bar(label);
            let r = kb.run_progress(op::SYNC, req, Some(&reporter(&bar)));
            bar.finish_and_clear();
            r
        }
        None => kb.run(op::SYNC, req),
    }
}

fn prefix_shown(p: &str) -> String {
    if p.is_empty() {
        "no prefix".to_string()
    } else {
        format!("prefix {p}")
    }
}

/// The report's summary line.
fn summary(r: &SyncReport) -> String {
    format!(
        "synced {} ({}): {} file(s), {} added, {} updated, {} removed, {} unchanged{}; {} transaction(s), {:.0} ms",
        r.root,
        prefix_shown(&r.prefix),
        r.files,
        r.added,
        r.updated,
        r.removed,
        r.unchanged,
        if r.skipped.is_empty() {
            String::new()
        } else {
            format!(", {} skipped", r.skipped.len())
        },
        r.transactions,
        r.elapsed_ms
    )
}

fn warn_skipped(r: &SyncReport) {
    for s in &r.skipped {
        super::output::print_stderr(&format!("warning: {}: {}", s.path, s.reason));
    }
}

pub fn sync(db: &Path, format: Format, embedded: bool, a: SyncArgs) -> Result<i32, KbError> {
    let (kb, _) = Backend::open(db, embedded, false)?;
    if a.list {
        let roots = kb.run(op::SYNC_ROOTS, &NoParams {})?;
        match format {
            Format::Json => print_json(&roots, true),
            Format::Text if roots.is_empty() => print_text("no folder is synced"),
            Format::Text => {
                for r in roots {
                    print_text(&format!(
                        "{}\t{}\t{} file(s)\tsince {}",
                        r.dir,
                        if r.prefix.is_empty() { "-" } else { &r.prefix },
                        r.files,
                        r.created_at
                    ));
                }
            }
        }
        return Ok(EXIT_OK);
    }
    let dir = absolute(a.dir.as_deref().unwrap_or(Path::new(".")))?;
    if a.forget {
        let r = kb.run(op::SYNC_FORGET, &DirParam { dir })?;
        match format {
            Format::Json => print_json(&r, false),
            Format::Text if r.forgotten => print_text(&format!(
                "stopped syncing {} ({} file record(s) dropped; the documents stay)",
                r.dir, r.files
            )),
            Format::Text => print_text(&format!("{} was not synced", r.dir)),
        }
        return Ok(EXIT_OK);
    }
    let req = SyncRequest {
        dir,
        prefix: a.prefix,
        paths: None,
    };
    let r = run_sync(&kb, &req, Some("sync"))?;
    match format {
        Format::Json => print_json(&r, true),
        Format::Text => {
            warn_skipped(&r);
            print_text(&summary(&r));
        }
    }
    Ok(EXIT_OK)
}

pub fn watch(db: &Path, format: Format, embedded: bool, a: WatchArgs) -> Result<i32, KbError> {
    let (kb, _) = Backend::open(db, embedded, false)?;
    let dir = absolute(&a.dir)?;
    // Watch first, so nothing saved during the first sync is missed.
    let watcher = FolderWatcher::new(&dir, vec![kb.dir()], WatchOptions::default())?;
    let first = run_sync(
        &kb,
        &SyncRequest {
            dir: watcher.root().to_path_buf(),
            prefix: a.prefix,
            paths: None,
        },
        Some("sync"),
    )?;
    match format {
        Format::Json => print_json(&first, false),
        Format::Text => {
            warn_skipped(&first);
            print_text(&summary(&first));
        }
    }
    if format == Format::Text {
        super::output::print_stderr(&format!(
            "watching {} ({} folder(s)); Ctrl-C stops",
            watcher.root().display(),
            watcher.watched_folders()
        ));
    }
    let stop = watcher.stop_handle();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(|e| KbError::io("cannot install signal handlers", e))?;
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            stop.stop();
        }
    });
    kbdb::sync::watch::sync_loop(
        watcher,
        &first.prefix,
        &mut |req| run_sync(&kb, req, None),
        &mut |r| match r {
            Ok(r) if r.changes.is_empty() && r.skipped.is_empty() => {}
            Ok(r) => match format {
                Format::Json => print_json(&r, false),
                Format::Text => {
                    warn_skipped(&r);
                    let now = chrono::Local::now().format("%H:%M:%S");
                    for c in &r.changes {
                        print_text(&format!("{now} {} {} ({})", c.action, c.docid, c.path));
                    }
                    if r.changes_truncated {
                        print_text(&format!("{now} … {}", summary(&r)));
                    }
                }
            },
            Err(e) => super::output::print_stderr(&format!("warning: sync failed: {e}")),
        },
    )?;
    Ok(EXIT_OK)
}
