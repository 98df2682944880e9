//! Watching a synced folder: file-system events (notify: inotify on Linux, FSEvents/kqueue on
//! macOS) turned into batches of changed paths for `Kb::sync`.
//!
//! * **One watch per synced folder** (non-recursive), not one recursive watch of everything:
//!   hidden and ignored folders (`.git`, `node_modules` in `.gitignore`) cost no watch and wake
//!   nobody. A folder created or moved in gets its watches when its event arrives, and is then
//!   synced whole (files written into it before its watch existed are not missed).
//! * **Debounced and coalesced by events, not by a timer**: the thread blocks on the event
//!   channel while nothing happens (an idle watcher takes no CPU: no polling, no tick); the
//!   first relevant event opens a batch that closes once no relevant event came for
//!   `quiet` (100 ms), or `max_delay` (1 s) after it opened if events keep coming. Each path
//!   appears once per batch, whatever happened to it.
//! * **Rename-aware**: a rename's old and new paths (paired by inotify's cookie) land in the
//!   same batch, and the sync looks at what is on disk for each: an editor's
//!   write-temp-then-rename save is one update, a moved file is one removal and one addition
//!   in one transaction, a moved folder is synced whole.
//! * **Lost events**: an event-queue overflow (or a watcher error) makes the batch a rescan of
//!   the whole folder; so does a change to a `.gitignore`/`.ignore` file (what is synced
//!   changed).
//! * Events that change nothing a sync reads (opening or reading a file, metadata-only
//!   changes) are dropped without waking the batch logic.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{EventKind, RecursiveMode, Watcher};

use super::scan::{self, Rules};
use crate::error::{KbError, Result};

/// How events are grouped.
#[derive(Debug, Clone, Copy)]
pub struct WatchOptions {
    /// A batch closes once no relevant event came for this long.
    pub quiet: Duration,
    /// … or this long after its first event, if events keep coming.
    pub max_delay: Duration,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            quiet: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        }
    }
}

/// What changed, for one sync.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchBatch {
    /// These paths (files or folders, absolute) may have changed.
    Paths(Vec<PathBuf>),
    /// Events may have been lost, or the ignore rules changed: sync the whole folder.
    Rescan(String),
}

enum Msg {
    Event(notify::Result<notify::Event>),
    Stop,
}

/// Stops a running [`FolderWatcher`] from another thread (e.g. a signal handler thread).
#[derive(Clone)]
pub struct StopHandle(Sender<Msg>);

impl StopHandle {
    pub fn stop(&self) {
        let _ = self.0.send(Msg::Stop);
    }
}

/// A watcher of one synced folder.
pub struct FolderWatcher {
    root: PathBuf,
    rules: Rules,
    watcher: notify::RecommendedWatcher,
    /// The folders watched (every synced folder of the tree).
    dirs: BTreeSet<PathBuf>,
    rx: Receiver<Msg>,
    tx: Sender<Msg>,
    opts: WatchOptions,
}

/// The paths of one batch being collected.
#[derive(Default)]
struct Pending {
    paths: BTreeSet<PathBuf>,
    rescan: Option<String>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.paths.is_empty() && self.rescan.is_none()
    }
}

fn watch_error(root: &Path, e: notify::Error) -> KbError {
    let hint = match &e.kind {
        notify::ErrorKind::MaxFilesWatch => {
            "; the limit of inotify watches is reached: raise fs.inotify.max_user_watches (sysctl)"
        }
        _ => "",
    };
    KbError::Io {
        context: format!("cannot watch {}{hint}", root.display()),
        source: std::io::Error::other(e.to_string()),
    }
}

impl FolderWatcher {
    /// Watch the folder `root` (every synced folder in it). `exclude`: paths never synced (the
    /// database folder when it lies inside).
    pub fn new(root: &Path, exclude: Vec<PathBuf>, opts: WatchOptions) -> Result<FolderWatcher> {
        let root = root.canonicalize().map_err(|e| {
            KbError::invalid("dir", format!("{} cannot be opened: {e}", root.display()))
        })?;
        if !root.is_dir() {
            return Err(KbError::invalid(
                "dir",
                format!("{} is not a folder", root.display()),
            ));
        }
        let (tx, rx) = mpsc::channel();
        let events = tx.clone();
        let watcher = notify::recommended_watcher(move |r| {
            let _ = events.send(Msg::Event(r));
        })
        .map_err(|e| watch_error(&root, e))?;
        let mut w = FolderWatcher {
            rules: Rules::new(&root, exclude),
            root,
            watcher,
            dirs: BTreeSet::new(),
            rx,
            tx,
            opts,
        };
        let root = w.root.clone();
        w.watch_tree(&root).map_err(|e| watch_error(&root, e))?;
        Ok(w)
    }

    /// The folder watched (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// How many folders are watched.
    pub fn watched_folders(&self) -> usize {
        self.dirs.len()
    }

    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(self.tx.clone())
    }

    /// Watch `dir` and every synced folder below it not watched yet.
    fn watch_tree(&mut self, dir: &Path) -> notify::Result<()> {
        for d in scan::synced_dirs(&mut self.rules, dir) {
            if self.dirs.contains(&d) {
                continue;
            }
            match self.watcher.watch(&d, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    self.dirs.insert(d);
                }
                // Gone already: its removal event follows.
                Err(e) if matches!(e.kind, notify::ErrorKind::PathNotFound) => {}
                Err(e) if matches!(&e.kind, notify::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::NotFound) =>
                    {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Forget the watches of `dir` and below (it is gone, or moved away).
    fn unwatch_tree(&mut self, dir: &Path) {
        let gone: Vec<PathBuf> = self
            .dirs
            .range(dir.to_path_buf()..)
            .take_while(|d| d.starts_with(dir))
            .cloned()
            .collect();
        for d in gone {
            let _ = self.watcher.unwatch(&d);
            self.dirs.remove(&d);
        }
    }

    /// Take in one message; false when told to stop. Returns whether it added to the batch.
    fn take(&mut self, msg: Msg, pending: &mut Pending) -> Option<bool> {
        let ev = match msg {
            Msg::Stop => return None,
            Msg::Event(Err(e)) => {
                tracing::warn!(
                    "file watcher error ({e}); rescanning {}",
                    self.root.display()
                );
                pending.rescan = Some(format!("watcher error: {e}"));
                return Some(true);
            }
            Msg::Event(Ok(ev)) => ev,
        };
        if ev.need_rescan() {
            pending.rescan = Some("file-system events were lost (queue overflow)".into());
            return Some(true);
        }
        match ev.kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => {}
            EventKind::Access(_) | EventKind::Modify(ModifyKind::Metadata(_)) => {
                return Some(false);
            }
            _ => {}
        }
        let mut added = false;
        for p in ev.paths {
            if p == self.root {
                // The folder itself was removed or moved: the rescan reports it.
                if !self.root.is_dir() {
                    pending.rescan = Some(format!("{} is gone", self.root.display()));
                    added = true;
                }
                continue;
            }
            if !p.starts_with(&self.root) {
                continue;
            }
            if scan::is_ignore_file(&p) {
                self.rules.invalidate();
                pending.rescan = Some(format!("{} changed", p.display()));
                added = true;
                continue;
            }
            let rel = p.strip_prefix(&self.root).unwrap_or(&p);
            if rel.components().any(|c| scan::is_hidden(c.as_os_str())) {
                continue;
            }
            let relevant = match std::fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => !self.rules.excluded(&p, true),
                Ok(_) => scan::is_markdown(&p) && !self.rules.excluded(&p, false),
                // Gone: a markdown file, or a watched folder (its files go with it).
                Err(_) => scan::is_markdown(&p) || self.dirs.contains(&p),
            };
            if relevant {
                pending.paths.insert(p);
                added = true;
            }
        }
        Some(added)
    }

    /// Update the watches for the folders of a batch: new ones watched, gone ones forgotten.
    fn rewatch(&mut self, pending: &Pending) {
        if pending.rescan.is_some() {
            let stale: Vec<PathBuf> = self.dirs.iter().filter(|d| !d.is_dir()).cloned().collect();
            for d in stale {
                self.unwatch_tree(&d);
            }
            let root = self.root.clone();
            if root.is_dir()
                && let Err(e) = self.watch_tree(&root)
            {
                tracing::warn!("{}", watch_error(&root, e));
            }
            return;
        }
        for p in &pending.paths {
            if p.is_dir() {
                if let Err(e) = self.watch_tree(p) {
                    tracing::warn!("{}", watch_error(p, e));
                }
            } else if self.dirs.contains(p) {
                self.unwatch_tree(p);
            }
        }
    }

    /// Run until stopped (or the watcher fails), calling `on_batch` with each batch. A batch
    /// is handed over only after the watches of its new folders are in place, so what is
    /// written into them after the sync's look is seen.
    pub fn run(mut self, on_batch: &mut dyn FnMut(WatchBatch)) -> Result<()> {
        loop {
            // Idle: block until something happens (no timeout, no CPU).
            let Ok(first) = self.rx.recv() else {
                return Ok(());
            };
            let mut pending = Pending::default();
            match self.take(first, &mut pending) {
                None => return Ok(()),
                Some(false) => continue,
                Some(true) => {}
            }
            let opened = Instant::now();
            let mut last = opened;
            let mut stop = false;
            loop {
                let deadline = (last + self.opts.quiet).min(opened + self.opts.max_delay);
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                match self.rx.recv_timeout(deadline - now) {
                    Ok(msg) => match self.take(msg, &mut pending) {
                        None => {
                            stop = true;
                            break;
                        }
                        Some(true) => last = Instant::now(),
                        Some(false) => {}
                    },
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => {
                        stop = true;
                        break;
                    }
                }
            }
            if !pending.is_empty() {
                self.rewatch(&pending);
                match pending.rescan {
                    Some(reason) => on_batch(WatchBatch::Rescan(reason)),
                    None => {
                        let mut seen = HashSet::new();
                        let paths = pending
                            .paths
                            .into_iter()
                            .filter(|p| seen.insert(p.clone()))
                            .collect();
                        on_batch(WatchBatch::Paths(paths));
                    }
                }
            }
            if stop {
                return Ok(());
            }
        }
    }
}

/// Run `watcher` until stopped, syncing each batch with `sync` (a daemon call, or
/// `Kb::sync`) under `prefix` and handing each outcome to `report`. A sync that fails because
/// the daemon could not be reached is retried (after 0.25, 1 and 4 s); when it still fails,
/// the next batch syncs the whole folder, so no change is lost.
pub fn sync_loop(
    watcher: FolderWatcher,
    prefix: &str,
    sync: &mut dyn FnMut(&super::SyncRequest) -> Result<super::SyncReport>,
    report: &mut dyn FnMut(Result<super::SyncReport>),
) -> Result<()> {
    let root = watcher.root().to_path_buf();
    let mut owed_rescan = false;
    watcher.run(&mut |batch| {
        let paths = match batch {
            WatchBatch::Paths(p) if !owed_rescan => Some(p),
            WatchBatch::Paths(_) => None,
            WatchBatch::Rescan(reason) => {
                tracing::info!("rescanning {}: {reason}", root.display());
                None
            }
        };
        let req = super::SyncRequest {
            dir: root.clone(),
            prefix: Some(prefix.to_string()),
            paths,
        };
        let mut r = sync(&req);
        for pause in [250, 1000, 4000] {
            match &r {
                Err(e) if e.code() == "daemon" => {
                    std::thread::sleep(Duration::from_millis(pause));
                    r = sync(&req);
                }
                _ => break,
            }
        }
        owed_rescan = r.is_err();
        report(r);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run a watcher on its own thread; batches arrive on the returned channel.
    fn start(
        root: &Path,
    ) -> (
        StopHandle,
        Receiver<WatchBatch>,
        std::thread::JoinHandle<()>,
    ) {
        let w = FolderWatcher::new(root, vec![], WatchOptions::default()).unwrap();
        let stop = w.stop_handle();
        let (tx, rx) = mpsc::channel();
        let h = std::thread::spawn(move || {
            w.run(&mut |b| {
                let _ = tx.send(b);
            })
            .unwrap();
        });
        (stop, rx, h)
    }

    #[test]
    fn lost_events_and_watcher_errors_make_a_rescan() {
        let tmp = tempfile::tempdir().unwrap();
        let w = FolderWatcher::new(tmp.path(), vec![], WatchOptions::default()).unwrap();
        let inject = w.tx.clone();
        let stop = w.stop_handle();
        let (tx, rx) = mpsc::channel();
        let h = std::thread::spawn(move || {
            w.run(&mut |b| {
                let _ = tx.send(b);
            })
            .unwrap();
        });
        // What notify's inotify backend sends on IN_Q_OVERFLOW.
        let overflow = notify::Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan);
        inject.send(Msg::Event(Ok(overflow))).unwrap();
        assert!(matches!(next(&rx), WatchBatch::Rescan(r) if r.contains("lost")));
        inject
            .send(Msg::Event(Err(notify::Error::generic("boom"))))
            .unwrap();
        assert!(matches!(next(&rx), WatchBatch::Rescan(r) if r.contains("boom")));
        stop.stop();
        h.join().unwrap();
    }

    fn next(rx: &Receiver<WatchBatch>) -> WatchBatch {
        rx.recv_timeout(Duration::from_secs(10)).expect("a batch")
    }

    #[test]
    fn saves_renames_and_new_folders_arrive_as_batches_of_paths() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        std::fs::create_dir(root.join(".git")).unwrap();
        let (stop, rx, h) = start(&root);

        // Several writes of one file coalesce into one batch naming it once.
        for i in 0..5 {
            std::fs::write(root.join("a.md"), format!("# A {i}\n")).unwrap();
        }
        assert_eq!(next(&rx), WatchBatch::Paths(vec![root.join("a.md")]));

        // Noise: a hidden folder, a non-markdown file, reading a file.
        std::fs::write(root.join(".git/HEAD"), "x").unwrap();
        std::fs::write(root.join("notes.txt"), "x").unwrap();
        let _ = std::fs::read(root.join("a.md")).unwrap();
        // An editor's save: write a temporary file, rename it over the original.
        std::fs::write(root.join(".a.md.swp"), "# A new\n").unwrap();
        std::fs::rename(root.join(".a.md.swp"), root.join("a.md")).unwrap();
        assert_eq!(next(&rx), WatchBatch::Paths(vec![root.join("a.md")]));

        // A rename: both paths in one batch.
        std::fs::rename(root.join("a.md"), root.join("b.md")).unwrap();
        assert_eq!(
            next(&rx),
            WatchBatch::Paths(vec![root.join("a.md"), root.join("b.md")])
        );

        // A new folder is watched once its event arrives; what is written into it after shows.
        std::fs::create_dir(root.join("sub")).unwrap();
        assert_eq!(next(&rx), WatchBatch::Paths(vec![root.join("sub")]));
        std::fs::write(root.join("sub/c.md"), "# C\n").unwrap();
        assert_eq!(next(&rx), WatchBatch::Paths(vec![root.join("sub/c.md")]));

        // An ignore file changes what is synced: a rescan.
        std::fs::write(root.join(".gitignore"), "sub/\n").unwrap();
        assert!(matches!(next(&rx), WatchBatch::Rescan(_)));

        stop.stop();
        h.join().unwrap();
    }
}
