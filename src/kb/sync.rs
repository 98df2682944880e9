//! Folder sync (docs/sync.md). A sync reads the folder outside any transaction — listing it,
//! and for each markdown file comparing its size, times and inode with the file's record (the
//! fast path), reading and hashing it only when they differ — and turns what changed into
//! `WriteOp::Sync` writes (src/sync/ops.rs), committed one transaction per batch through the
//! caller's writer (the daemon's group-commit writer, or `Kb::write_group`).

use super::Kb;
use crate::elapsed_ms;
use crate::error::{KbError, Result};
use crate::store::tables::{SYNC_FILES, SYNC_ROOTS};
use crate::sync::ops::*;
use crate::sync::records::{self, FileRecord, FileStat};
use crate::sync::scan::{self, Entry, ReadError, Rules, Taken};
use crate::sync::{
    ForgetReport, MAX_LISTED_CHANGES, SyncChange, SyncReport, SyncRequest, SyncRootInfo, SyncSkip,
};
use crate::types::validate;
use crate::writes::{WriteAnswer, WriteOp, WriteOutcome, Writer};
use redb::ReadableDatabase;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

impl Kb {
    /// `sync`: make the documents under the folder's prefix match its markdown files (all of
    /// them, or `req.paths`), each batch committed by a writer thread while the next is read
    /// and prepared, the lexical index catching up on a thread of its own
    /// (`with_index_behind`).
    pub fn sync(&self, req: &SyncRequest) -> Result<SyncReport> {
        self.with_index_behind(|write| self.sync_with(req, write, &|_, _| {}))
    }

    /// `sync`, queueing each batch, prepared here, with `write` (the daemon passes its
    /// group-commit writer) and reporting (files done, files found) to `progress`.
    pub fn sync_with(
        &self,
        req: &SyncRequest,
        write: Writer<'_>,
        progress: &dyn Fn(u64, u64),
    ) -> Result<SyncReport> {
        let start = Instant::now();
        let (root, root_str) = self.sync_root_path(&req.dir)?;
        let txn = self.db()?.begin_read()?;
        let roots_t = txn.open_table(SYNC_ROOTS)?;
        let all = records::roots(&roots_t)?;
        let registered = all
            .iter()
            .find(|(d, _)| *d == root_str)
            .map(|(_, r)| r.prefix.clone());
        let prefix = match &req.prefix {
            Some(p) => normalize_prefix(p)?,
            None => registered.clone().unwrap_or_default(),
        };
        check_prefix(&all, &root_str, &prefix)?;
        drop((roots_t, txn));

        let mut rules = Rules::new(&root, vec![self.dir.clone()]);
        let mut candidates = Vec::new();
        let mut unreadable = Vec::new();
        let mut skipped = Vec::new();
        // A targeted sync needs the folder synced under this prefix already.
        let targeted = req
            .paths
            .as_ref()
            .filter(|_| registered.as_deref() == Some(prefix.as_str()));
        // The relative paths (files or folders) whose records a targeted sync revisits; None:
        // all of the folder's.
        let mut scope: Option<Vec<String>> = None;
        let mut found = Found {
            root: &root,
            candidates: &mut candidates,
            skipped: &mut skipped,
            unreadable: &mut unreadable,
        };
        match targeted {
            None => found.walk(&mut rules, &root),
            Some(paths) => {
                let mut sc = Vec::new();
                let mut whole = false;
                for p in paths {
                    let abs = if p.is_absolute() {
                        p.clone()
                    } else {
                        root.join(p)
                    };
                    let Ok(rel) = scan::relative(&root, &abs) else {
                        continue;
                    };
                    if rel.is_empty() {
                        // The folder itself: all of it.
                        sc.clear();
                        found.candidates.clear();
                        found.walk(&mut rules, &root);
                        whole = true;
                        break;
                    }
                    sc.push(rel.clone());
                    let Ok(m) = std::fs::symlink_metadata(&abs) else {
                        continue; // gone: its records are in scope
                    };
                    let is_dir = m.is_dir();
                    if !(is_dir || scan::is_markdown(&abs)) || rules.excluded(&abs, is_dir) {
                        continue;
                    }
                    if is_dir {
                        found.walk(&mut rules, &abs);
                    } else if m.is_file() {
                        found.candidates.push(Candidate {
                            abs,
                            rel,
                            stat: FileStat::of(&m),
                            ident: scan::identity(&m),
                        });
                    } else if m.file_type().is_symlink() {
                        found
                            .skipped
                            .push((rel, "is a symbolic link (links are not followed)".into()));
                    }
                }
                if !whole {
                    scope = Some(sc);
                }
            }
        }
        for (path, e) in &rules.problems {
            skipped.push((
                scan::relative(&root, path).unwrap_or_else(|_| path.display().to_string()),
                format!("ignore file not used: {e}"),
            ));
        }
        candidates.sort_by(|a, b| a.rel.cmp(&b.rel));
        candidates.dedup_by(|a, b| a.rel == b.rel);

        // The records to compare with: all of the folder's, or (a targeted sync) those whose
        // docid starts with a scoped path's (its file's docid, the files below a folder).
        let txn = self.db()?.begin_read()?;
        let files_t = txn.open_table(SYNC_FILES)?;
        let mut by_path: HashMap<String, (String, FileRecord)> = HashMap::new();
        let starts: Vec<String> = match &scope {
            None => vec![prefix.clone()],
            Some(sc) => sc.iter().map(|p| scan::docid_of(&prefix, p)).collect(),
        };
        // Records whose docid is not the one their path makes now (a file synced before docids
        // were NFC-normalised): removed, and the file synced again under its docid.
        let mut renamed: Vec<(String, String, String)> = Vec::new();
        for start in starts {
            for (d, r) in records::files_under(&files_t, &start, Some(&root_str))? {
                if d != scan::docid_of(&prefix, &r.path) {
                    renamed.push((r.path.clone(), d, r.hash));
                } else {
                    by_path.insert(r.path.clone(), (d, r));
                }
            }
        }
        for c in &candidates {
            let docid = scan::docid_of(&prefix, &c.rel);
            if scope.is_some()
                && let Some(r) = records::get_file(&files_t, &docid)?
                && r.root == root_str
            {
                by_path.insert(r.path.clone(), (docid, r));
            }
        }
        drop((files_t, txn));

        let mut run = Run {
            kb: self,
            root: root.clone(),
            root_str: root_str.clone(),
            prefix: prefix.clone(),
            by_docid: by_path
                .iter()
                .map(|(p, (d, _))| (d.clone(), p.clone()))
                .collect(),
            by_path,
            seen: HashSet::new(),
            unreadable,
            taken: Taken::default(),
            report: SyncReport {
                root: root_str.clone(),
                prefix: prefix.clone(),
                ..Default::default()
            },
            batch: Vec::new(),
            batch_paths: Vec::new(),
            batch_bytes: 0,
            batch_limit: BATCH_FILES.min(self.config.limits.max_batch).max(1),
            write,
            committing: None,
        };
        for (path, reason) in skipped {
            run.saw(&path);
            run.skip(&path, reason);
        }
        if registered.as_deref() != Some(prefix.as_str()) {
            // An empty path marks the registration: its failure fails the sync.
            run.push(
                "",
                WriteOp::Sync(SyncOp::Root {
                    dir: root_str.clone(),
                    prefix: prefix.clone(),
                }),
                0,
            )?;
        }
        let total = candidates.len() as u64;
        progress(0, total);
        for (n, c) in candidates.into_iter().enumerate() {
            run.file(c)?;
            if n % 64 == 63 {
                progress(n as u64 + 1, total);
            }
        }
        let in_scope = |rel: &str| match &scope {
            None => true,
            Some(s) => s.iter().any(|p| {
                rel == p || (rel.starts_with(p.as_str()) && rel[p.len()..].starts_with('/'))
            }),
        };
        let mut gone: Vec<(String, String, String)> = run
            .by_path
            .iter()
            .filter(|(rel, _)| in_scope(rel) && !run.seen.contains(*rel))
            .filter(|(rel, _)| {
                !run.unreadable.iter().any(|u| {
                    u.is_empty() || rel.starts_with(u.as_str()) && rel[u.len()..].starts_with('/')
                })
            })
            .map(|(rel, (docid, r))| (rel.clone(), docid.clone(), r.hash.clone()))
            .collect();
        gone.extend(renamed);
        gone.sort();
        for (rel, docid, expected) in gone {
            run.push(&rel, WriteOp::Sync(SyncOp::Remove { docid, expected }), 0)?;
        }
        run.flush()?;
        run.settle()?;
        progress(total, total);
        let mut report = run.report;
        report.skipped.sort_by(|a, b| a.path.cmp(&b.path));
        report.elapsed_ms = elapsed_ms(start);
        Ok(report)
    }

    /// Prepare `ops` on this thread and commit them through `write`, waiting for the results.
    fn write_now(&self, write: Writer<'_>, ops: Vec<WriteOp>) -> Result<Vec<Result<WriteOutcome>>> {
        write(self.prepare_group(ops, false)?)?.wait()
    }

    /// The canonical path of a folder to sync (and its text form), checked.
    pub(super) fn sync_root_path(&self, dir: &Path) -> Result<(PathBuf, String)> {
        let root = dir.canonicalize().map_err(|e| {
            KbError::invalid("dir", format!("{} cannot be opened: {e}", dir.display()))
        })?;
        if !root.is_dir() {
            return Err(KbError::invalid(
                "dir",
                format!("{} is not a folder", root.display()),
            ));
        }
        if root.starts_with(&self.dir) {
            return Err(KbError::invalid(
                "dir",
                format!("{} is inside the database folder", root.display()),
            ));
        }
        let s = root
            .to_str()
            .ok_or_else(|| {
                KbError::invalid("dir", format!("{} is not valid UTF-8", root.display()))
            })?
            .to_string();
        Ok((root, s))
    }

    /// The synced folders with their prefixes and how many files each has recorded.
    pub fn sync_roots(&self) -> Result<Vec<SyncRootInfo>> {
        let txn = self.db()?.begin_read()?;
        let roots_t = txn.open_table(SYNC_ROOTS)?;
        let files_t = txn.open_table(SYNC_FILES)?;
        let mut out = Vec::new();
        for (dir, r) in records::roots(&roots_t)? {
            let files = records::files_under(&files_t, &r.prefix, Some(&dir))?.len() as u64;
            out.push(SyncRootInfo {
                dir,
                prefix: r.prefix,
                files,
                created_at: r.created_at,
            });
        }
        Ok(out)
    }

    /// The file record of a synced document (None: the document does not come from a file).
    pub fn sync_record(&self, docid: &str) -> Result<Option<FileRecord>> {
        let docid = &*validate::docid(docid)?;
        let txn = self.db()?.begin_read()?;
        records::get_file(&txn.open_table(SYNC_FILES)?, docid)
    }

    /// Stop syncing `dir`: its records go, its documents stay (as documents no file backs).
    pub fn sync_forget(&self, dir: &Path) -> Result<ForgetReport> {
        self.with_index_behind(|write| self.sync_forget_with(dir, write))
    }

    pub fn sync_forget_with(&self, dir: &Path, write: Writer<'_>) -> Result<ForgetReport> {
        // The folder may be gone already: use its path as given when it cannot be resolved.
        let dir_str = match dir.canonicalize() {
            Ok(p) => p.to_string_lossy().into_owned(),
            Err(_) => std::path::absolute(dir)
                .map_err(|e| KbError::invalid("dir", format!("{}: {e}", dir.display())))?
                .to_string_lossy()
                .into_owned(),
        };
        let r = self
            .write_now(
                write,
                vec![WriteOp::Sync(SyncOp::Forget {
                    dir: dir_str.clone(),
                })],
            )?
            .pop()
            .ok_or_else(|| KbError::Storage("no result".into()))??;
        let o: crate::sync::SyncOutcome = crate::writes::outcome(r)?;
        Ok(ForgetReport {
            dir: dir_str,
            forgotten: o.changed,
            files: o.records_dropped,
        })
    }
}

/// A file found by a scan.
pub(crate) struct Candidate {
    pub(crate) abs: PathBuf,
    pub(crate) rel: String,
    pub(crate) stat: FileStat,
    /// (device, inode) when listed: the file read must be this one.
    pub(crate) ident: (u64, u64),
}

/// What a scan found: files to look at, files left alone (with why), unreadable folders.
pub(crate) struct Found<'a> {
    pub(crate) root: &'a Path,
    pub(crate) candidates: &'a mut Vec<Candidate>,
    pub(crate) skipped: &'a mut Vec<(String, String)>,
    pub(crate) unreadable: &'a mut Vec<String>,
}

impl Found<'_> {
    /// Everything synced at and below the folder `dir`.
    pub(crate) fn walk(&mut self, rules: &mut Rules, dir: &Path) {
        let root = self.root;
        let rel_or_shown =
            |p: &Path| scan::relative(root, p).unwrap_or_else(|_| p.display().to_string());
        scan::walk(rules, dir, &mut |e| match e {
            Entry::File(p, stat, ident) => match scan::relative(root, p) {
                Ok(rel) => self.candidates.push(Candidate {
                    abs: p.to_path_buf(),
                    rel,
                    stat,
                    ident,
                }),
                Err(reason) => self.skipped.push((p.display().to_string(), reason)),
            },
            Entry::Skipped(p, reason) => self.skipped.push((rel_or_shown(p), reason)),
            Entry::Unreadable(p, reason) => {
                let rel = scan::relative(root, p).unwrap_or_default();
                self.skipped
                    .push((rel.clone(), format!("folder cannot be read: {reason}")));
                self.unreadable.push(rel);
            }
            Entry::Dir(_) => {}
        })
    }
}

/// The state of one sync.
pub(crate) struct Run<'a> {
    pub(crate) kb: &'a Kb,
    pub(crate) root: PathBuf,
    pub(crate) root_str: String,
    pub(crate) prefix: String,
    /// The records of this folder when the scan started, by relative path: (docid, record).
    pub(crate) by_path: HashMap<String, (String, FileRecord)>,
    /// The same records' relative paths by docid.
    pub(crate) by_docid: HashMap<String, String>,
    /// Relative paths of the recorded files that exist and were looked at (their records
    /// stay): only those of `by_path` (`saw`), so that a first sync holds no set of its paths.
    pub(crate) seen: HashSet<String>,
    /// Folders that could not be read: the records below them stay.
    pub(crate) unreadable: Vec<String>,
    pub(crate) taken: Taken,
    pub(crate) report: SyncReport,
    pub(crate) batch: Vec<WriteOp>,
    /// The relative path of each write of `batch`.
    pub(crate) batch_paths: Vec<String>,
    pub(crate) batch_bytes: usize,
    pub(crate) batch_limit: usize,
    pub(crate) write: Writer<'a>,
    /// The batch the writer is committing while the next is read and prepared, with the
    /// relative path of each of its writes.
    pub(crate) committing: Option<(WriteAnswer, Vec<String>)>,
}

impl Run<'_> {
    /// The file `rel` exists and was looked at: its record, if it has one, stays.
    pub(crate) fn saw(&mut self, rel: &str) {
        if self.by_path.contains_key(rel) {
            self.seen.insert(rel.to_string());
        }
    }

    pub(crate) fn skip(&mut self, rel: &str, reason: impl Into<String>) {
        let reason = reason.into();
        tracing::info!(path = rel, "not synced: {reason}");
        self.report.skipped.push(SyncSkip {
            path: rel.to_string(),
            reason,
        });
    }

    pub(crate) fn push(&mut self, rel: &str, op: WriteOp, bytes: usize) -> Result<()> {
        self.batch.push(op);
        self.batch_paths.push(rel.to_string());
        self.batch_bytes += bytes;
        if self.batch.len() >= self.batch_limit || self.batch_bytes >= BATCH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Hand the batch to the writer: prepared here (while the writer commits the batch before
    /// it), queued once that one's results are in (so a failed registration stops the sync
    /// before anything after it is written). The next files are read while it commits.
    pub(crate) fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let ops = std::mem::take(&mut self.batch);
        let paths = std::mem::take(&mut self.batch_paths);
        self.batch_bytes = 0;
        let prepared = self.kb.prepare_group(ops, false)?;
        self.settle()?;
        self.committing = Some(((self.write)(prepared)?, paths));
        Ok(())
    }

    /// Wait for the batch being committed and count its results.
    pub(crate) fn settle(&mut self) -> Result<()> {
        let Some((pending, paths)) = self.committing.take() else {
            return Ok(());
        };
        let results = pending.wait()?;
        let mut committed = false;
        for (r, rel) in results.into_iter().zip(paths) {
            match r {
                Ok(o) => {
                    let o: crate::sync::SyncOutcome = crate::writes::outcome(o)?;
                    committed |= o.changed;
                    let listed = match o.action.as_str() {
                        "added" => {
                            self.report.added += 1;
                            true
                        }
                        "updated" => {
                            self.report.updated += 1;
                            true
                        }
                        "removed" => {
                            self.report.removed += 1;
                            true
                        }
                        "touched" => {
                            self.report.touched += 1;
                            false
                        }
                        _ => false,
                    };
                    if listed {
                        if self.report.changes.len() < MAX_LISTED_CHANGES {
                            self.report.changes.push(SyncChange {
                                action: o.action.clone(),
                                docid: o.id.clone(),
                                path: rel,
                            });
                        } else {
                            self.report.changes_truncated = true;
                        }
                    }
                }
                Err(e) if rel.is_empty() => return Err(e),
                Err(e) => self.skip(&rel, e.to_string()),
            }
        }
        if committed {
            self.report.transactions += 1;
        }
        Ok(())
    }

    /// Look at one file: unchanged, touched, or new/changed content to store.
    pub(crate) fn file(&mut self, c: Candidate) -> Result<()> {
        let docid = scan::docid_of(&self.prefix, &c.rel);
        if let Err(e) = validate::validate_docid(&docid) {
            self.saw(&c.rel);
            let msg = e.to_string();
            let rule = msg.strip_prefix("docid: ").unwrap_or(&msg).to_string();
            self.skip(&c.rel, format!("cannot become a docid ({docid:?}: {rule})"));
            return Ok(());
        }
        if !self.taken.take(&docid) {
            self.saw(&c.rel);
            self.skip(
                &c.rel,
                format!(
                    "has the same docid ({docid}) as another file of the folder; rename one of them"
                ),
            );
            return Ok(());
        }
        // Another file holds this docid already (`a.md` synced, `a.mdx` new).
        let holder = self.by_docid.get(&docid).filter(|p| **p != c.rel).cloned();
        if let Some(p) = holder
            && self.root.join(&p).is_file()
        {
            self.saw(&c.rel);
            self.skip(
                &c.rel,
                format!("has the same docid ({docid}) as {p}, which is synced; rename one of them"),
            );
            return Ok(());
        }
        let rec = self.by_path.get(&c.rel).map(|(_, r)| r.clone());
        self.report.files += 1;
        if rec.as_ref().is_some_and(|r| r.proves_unchanged(&c.stat)) {
            self.saw(&c.rel);
            self.report.unchanged += 1;
            return Ok(());
        }
        let recorded_at_ns = records::now_ns();
        let read = match scan::read_file(
            &c.abs,
            self.kb.config.limits.max_content_bytes,
            Some(c.ident),
        ) {
            Ok(r) => r,
            Err(ReadError::Missing) => {
                self.report.files -= 1;
                return Ok(());
            }
            Err(ReadError::Other(reason)) => {
                self.saw(&c.rel);
                self.skip(&c.rel, reason);
                return Ok(());
            }
        };
        self.saw(&c.rel);
        let hash = scan::hash(&read.bytes);
        let record = FileRecord {
            root: self.root_str.clone(),
            path: c.rel.clone(),
            hash: hash.clone(),
            size: read.stat.size,
            mtime_ns: read.stat.mtime_ns,
            ctime_ns: read.stat.ctime_ns,
            ino: read.stat.ino,
            recorded_at_ns,
            front_matter: rec.as_ref().and_then(|r| r.front_matter.clone()),
        };
        match rec {
            Some(r) if r.hash == hash => {
                if r.stat() == read.stat {
                    self.report.unchanged += 1;
                } else {
                    // Same content, other times (touched, copied back): refresh the record so
                    // the next scan takes the fast path.
                    self.report.unchanged += 1;
                    self.push(&c.rel, WriteOp::Sync(SyncOp::Touch { docid, record }), 0)?;
                }
            }
            r => match String::from_utf8(read.bytes) {
                Ok(text) => {
                    let len = text.len();
                    let op = SyncOp::File {
                        docid,
                        text,
                        record,
                        expected: r.map(|r| r.hash),
                    };
                    self.push(&c.rel, WriteOp::Sync(op), len)?;
                }
                Err(_) => self.skip(&c.rel, "is not valid UTF-8 text"),
            },
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::SyncRequest;

    fn setup() -> (tempfile::TempDir, Kb, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let (kb, _) = Kb::open_or_create(tmp.path().join("kb")).unwrap();
        let dir = tmp.path().join("notes");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("a.md"), "# A\n\nalpha\n").unwrap();
        std::fs::write(dir.join("sub/b.md"), "# B\n\nbeta\n").unwrap();
        (tmp, kb, dir)
    }

    fn req(dir: &Path, prefix: Option<&str>, paths: Option<Vec<PathBuf>>) -> SyncRequest {
        SyncRequest {
            dir: dir.to_path_buf(),
            prefix: prefix.map(str::to_string),
            paths,
        }
    }

    fn docids(kb: &Kb) -> Vec<String> {
        kb.list_documents()
            .unwrap()
            .into_iter()
            .map(|d| d.docid)
            .collect()
    }

    #[test]
    fn a_sync_returns_with_the_lexical_index_caught_up_with_its_batches() {
        let (_tmp, kb, dir) = setup();
        for i in 0..300 {
            std::fs::write(
                dir.join(format!("f{i}.md")),
                format!("# File {i}\n\nword{i} zzsync\n"),
            )
            .unwrap();
        }
        let report = kb.sync(&req(&dir, Some("n"), None)).unwrap();
        assert_eq!(report.added, 302);
        assert!(report.transactions >= 1, "{report:?}");
        // Indexed on a thread of its own during the sync, and joined before it returned: the
        // index holds every change, not only what a search would catch up with.
        let applied = kb.lexical().unwrap().applied_seq();
        assert_eq!(applied, kb.last_change_seq().unwrap());
        assert!(applied > 0);
    }

    /// A database whose I/O goes through a fault plan, and a folder of `files` notes, each
    /// holding `word`, beside it. Each batch of a sync is one redb commit of two fsyncs, so the
    /// third store fsync from here is the second batch's.
    fn notes_beside_a_faulty_kb(
        files: usize,
        word: &str,
    ) -> (
        tempfile::TempDir,
        Kb,
        crate::store::faults::FaultPlan,
        PathBuf,
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let plan = crate::store::faults::FaultPlan::new();
        let (kb, _) = Kb::open_with_io(tmp.path().join("kb"), plan.clone()).unwrap();
        let dir = tmp.path().join("notes");
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..files {
            std::fs::write(
                dir.join(format!("f{i:04}.md")),
                format!("# File {i}\n\nentry{i} {word}\n"),
            )
            .unwrap();
        }
        (tmp, kb, plan, dir)
    }

    /// A sync whose second batch fails to commit stops there: the first batch is written, no
    /// later one (the next batch is prepared while one commits, but only queued once that one
    /// has succeeded), and the next sync completes the folder.
    #[test]
    fn a_sync_stops_at_the_batch_that_fails_and_the_next_sync_completes_it() {
        use crate::store::faults::{Errno, Op, Target};
        let files = BATCH_FILES * 3;
        let (_tmp, kb, plan, dir) = notes_beside_a_faulty_kb(files, "batches");
        let second = plan.count(Target::Store, Op::Sync) + 3;
        plan.fail_nth(Target::Store, Op::Sync, second, Errno::Eio);
        let failed = kb.sync(&req(&dir, Some("n"), None));
        // The commit's own error, as `write_group` would return it (not a copy made for a
        // group's many writers).
        assert!(matches!(failed, Err(KbError::Io { .. })), "{failed:?}");
        assert!(
            plan.fired().iter().any(|f| f.n == second),
            "{:?}",
            plan.fired()
        );
        // The first batch: the folder's registration and the first files in path order.
        let first: Vec<String> = (0..BATCH_FILES - 1).map(|i| format!("n/f{i:04}")).collect();
        assert_eq!(docids(&kb), first);

        let report = kb.sync(&req(&dir, Some("n"), None)).unwrap();
        assert_eq!(report.added as usize, files - first.len(), "{report:?}");
        assert_eq!(docids(&kb).len(), files);
        let hits = kb.search(&crate::SearchRequest::new("batches")).unwrap();
        assert_eq!(hits.total as usize, files);
    }

    /// A panic while the writer thread commits a batch (a bug, or a damaged page) reaches the
    /// sync's caller, as it would a `write_group` caller's, after the sync's threads have
    /// stopped; the `Kb` recovers, and the next sync completes the folder.
    #[test]
    fn a_panic_while_a_batch_commits_reaches_the_caller_and_the_next_sync_completes() {
        use crate::store::faults::{Op, Target};
        let files = BATCH_FILES * 2;
        let (_tmp, kb, plan, dir) = notes_beside_a_faulty_kb(files, "okapi");
        plan.panic_nth(
            Target::Store,
            Op::Sync,
            plan.count(Target::Store, Op::Sync) + 3,
        );
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            kb.sync(&req(&dir, Some("n"), None))
        }));
        assert!(
            caught.is_err(),
            "the panic did not reach the caller: {caught:?}"
        );
        assert_eq!(docids(&kb).len(), BATCH_FILES - 1, "only the first batch");
        let report = kb.sync(&req(&dir, Some("n"), None)).unwrap();
        assert_eq!(
            report.added as usize,
            files - (BATCH_FILES - 1),
            "{report:?}"
        );
        let hits = kb.search(&crate::SearchRequest::new("okapi")).unwrap();
        assert_eq!(hits.total as usize, files);
    }

    #[test]
    fn a_write_based_on_a_record_that_changed_since_is_not_applied() {
        let (_tmp, kb, dir) = setup();
        kb.sync(&req(&dir, Some("n"), None)).unwrap();
        let rec = kb.sync_record("n/a").unwrap().unwrap();
        // A scan that saw no record (or an older one) loses against the current record.
        let op = WriteOp::Sync(SyncOp::File {
            docid: "n/a".into(),
            text: "# A\n\nstale\n".into(),
            record: rec.clone(),
            expected: None,
        });
        let out = kb.write_group(vec![op]).unwrap().pop().unwrap().unwrap();
        let crate::WriteOutcome::Synced(o) = out else {
            panic!()
        };
        assert_eq!((o.action.as_str(), o.changed), ("stale", false));
        let op = WriteOp::Sync(SyncOp::Remove {
            docid: "n/a".into(),
            expected: "0".repeat(64),
        });
        kb.write_group(vec![op]).unwrap();
        assert_eq!(kb.sync_record("n/a").unwrap(), Some(rec));
        assert_eq!(docids(&kb), ["n/a", "n/sub/b"]);
    }

    #[test]
    fn targeted_syncs_look_at_the_paths_given_and_what_is_below_them() {
        let (_tmp, kb, dir) = setup();
        kb.sync(&req(&dir, None, None)).unwrap();
        std::fs::write(dir.join("a.md"), "# A\n\nchanged\n").unwrap();
        std::fs::rename(dir.join("sub"), dir.join("moved")).unwrap();
        // Only `sub` and `moved` are looked at: a.md's change waits for its own event.
        let r = kb
            .sync(&req(
                &dir,
                None,
                Some(vec![dir.join("sub"), PathBuf::from("moved")]),
            ))
            .unwrap();
        assert_eq!((r.added, r.removed, r.updated), (1, 1, 0), "{r:?}");
        assert_eq!(docids(&kb), ["a", "moved/b"]);
        let r = kb
            .sync(&req(
                &dir,
                None,
                Some(vec![dir.join("a.md"), PathBuf::from("/elsewhere/x.md")]),
            ))
            .unwrap();
        assert_eq!((r.files, r.updated), (1, 1));
        // Paths that are all outside the folder look at nothing (and remove nothing).
        let r = kb
            .sync(&req(
                &dir,
                None,
                Some(vec![PathBuf::from("/elsewhere/y.md")]),
            ))
            .unwrap();
        assert_eq!((r.files, r.removed, r.transactions), (0, 0, 0));
        assert_eq!(docids(&kb), ["a", "moved/b"]);
        // The folder itself: all of it.
        std::fs::write(dir.join("c.md"), "# C\n").unwrap();
        let r = kb.sync(&req(&dir, None, Some(vec![dir.clone()]))).unwrap();
        assert_eq!((r.files, r.added), (3, 1));
    }

    #[test]
    fn a_new_prefix_moves_the_folder_s_documents() {
        let (_tmp, kb, dir) = setup();
        kb.sync(&req(&dir, Some("old/"), None)).unwrap();
        let r = kb.sync(&req(&dir, Some("new"), None)).unwrap();
        assert_eq!(r.added, 2);
        assert_eq!(docids(&kb), ["new/a", "new/sub/b"]);
        assert_eq!(kb.sync_roots().unwrap()[0].prefix, "new/");
        // A targeted sync of a folder synced under another prefix syncs it whole.
        let r = kb
            .sync(&req(&dir, Some("other/"), Some(vec![dir.join("a.md")])))
            .unwrap();
        assert_eq!(r.added, 2);
        assert_eq!(docids(&kb), ["other/a", "other/sub/b"]);
    }

    #[test]
    fn prefixes_are_normalised_and_checked() {
        assert_eq!(normalize_prefix(" notes ").unwrap(), "notes/");
        assert_eq!(normalize_prefix("a/b/").unwrap(), "a/b/");
        assert_eq!(normalize_prefix("").unwrap(), "");
        for bad in ["/abs", "a/../b", "a//b", "x\u{1}"] {
            assert_eq!(
                normalize_prefix(bad).unwrap_err().field(),
                Some("prefix"),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_database_folder_is_never_synced() {
        let (tmp, kb, _) = setup();
        std::fs::write(tmp.path().join("top.md"), "# Top\n").unwrap();
        std::fs::write(kb.dir().join("inside.md"), "# In\n").unwrap();
        let r = kb.sync(&req(tmp.path(), Some("t"), None)).unwrap();
        assert_eq!(
            docids(&kb),
            ["t/notes/a", "t/notes/sub/b", "t/top"],
            "{r:?}"
        );
        let e = kb.sync(&req(kb.dir(), None, None)).unwrap_err();
        assert_eq!(e.field(), Some("dir"));
    }

    #[test]
    fn a_sync_write_under_another_unicode_spelling_lands_on_the_nfc_docid() {
        let (_tmp, kb, dir) = setup();
        let nfd = "cafe\u{301}";
        std::fs::write(dir.join(format!("{nfd}.md")), "# Caf\n\nx\n").unwrap();
        kb.sync(&req(&dir, Some("n"), None)).unwrap();
        assert_eq!(docids(&kb), ["n/a", "n/caf\u{e9}", "n/sub/b"]);
        let rec = kb.sync_record(&format!("n/{nfd}")).unwrap().unwrap();
        kb.write_group(vec![
            WriteOp::Sync(SyncOp::Remove {
                docid: format!("n/{nfd}"),
                expected: rec.hash.clone(),
            }),
            WriteOp::Sync(SyncOp::File {
                docid: format!("n/{nfd}"),
                text: "# Caf\n\nx\n".into(),
                record: rec.clone(),
                expected: None,
            }),
        ])
        .unwrap();
        assert_eq!(docids(&kb), ["n/a", "n/caf\u{e9}", "n/sub/b"]);
        let r = kb.sync(&req(&dir, None, None)).unwrap();
        assert_eq!(r.transactions, 0, "{r:?}");
    }

    #[test]
    fn a_synced_document_stored_under_another_unicode_spelling_is_moved_by_migration_14() {
        let (_tmp, kb, dir) = setup();
        let nfd = "n/cafe\u{301}";
        let nfc = "n/caf\u{e9}";
        std::fs::write(dir.join("cafe\u{301}.md"), "# Caf\n\nx\n").unwrap();
        kb.sync(&req(&dir, Some("n"), None)).unwrap();
        let db_dir = kb.dir().to_path_buf();
        drop(kb);
        {
            // As a version that stored docids as typed could have left it.
            let db = redb::Database::create(db_dir.join(crate::store::DB_FILE)).unwrap();
            let txn = db.begin_write().unwrap();
            for name in [
                crate::store::tables::DOCUMENTS,
                crate::store::tables::SYNC_FILES,
            ] {
                let mut t = txn.open_table(name).unwrap();
                let bytes = t.remove(nfc).unwrap().unwrap().value().to_vec();
                t.insert(nfd, bytes.as_slice()).unwrap();
            }
            {
                use redb::ReadableTable;
                let documents = txn.open_table(crate::store::tables::DOCUMENTS).unwrap();
                let bytes = documents.get(nfd).unwrap().unwrap().value().to_vec();
                let doc: crate::types::records::DocumentRecord =
                    crate::types::records::decode("documents", nfd, &bytes).unwrap();
                let mut section_docs = txn
                    .open_multimap_table(crate::store::tables::SECTION_DOCS)
                    .unwrap();
                for k in &doc.kbids {
                    section_docs.remove(k.as_str(), nfc).unwrap();
                    section_docs.insert(k.as_str(), nfd).unwrap();
                }
            }
            txn.open_table(crate::store::tables::META)
                .unwrap()
                .insert(
                    crate::store::tables::META_SCHEMA_VERSION,
                    13u32.to_le_bytes().as_slice(),
                )
                .unwrap();
            txn.commit().unwrap();
        }
        let kb = Kb::open(&db_dir).unwrap();
        assert_eq!(docids(&kb), ["n/a", nfc, "n/sub/b"]);
        assert!(kb.sync_record(nfc).unwrap().is_some(), "the record moved");
        let r = kb.sync(&req(&dir, None, None)).unwrap();
        assert_eq!(r.transactions, 0, "nothing to sync again: {r:?}");
        assert!(kb.check().unwrap().ok);
    }
}
