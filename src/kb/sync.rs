//! Folder sync (docs/sync.md): `Kb::sync` scans a folder and commits what changed through the
//! write door; the scan and the sync writes themselves are in `crate::sync`.

use super::Kb;
use crate::elapsed_ms;
use crate::error::{KbError, Result};
use crate::model::validate;
use crate::store::tables::{SYNC_FILES, SYNC_ROOTS};
use crate::sync::records::{self, FileRecord, FileStat};
use crate::sync::run::*;
use crate::sync::scan::{self, Rules, Taken};
use crate::sync::{ForgetReport, SyncReport, SyncRequest, SyncRootInfo};
use crate::writes::{WriteOp, WriteOutcome};
use redb::ReadableDatabase;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

impl Kb {
    /// `sync`: make the documents under the folder's prefix match its markdown files (all of
    /// them, or `req.paths`), committing through `write_group`.
    pub fn sync(&self, req: &SyncRequest) -> Result<SyncReport> {
        self.sync_with(req, &|ops| self.write_group(ops), &|_, _| {})
    }

    /// `sync`, committing each batch through `write` (the daemon passes its group-commit
    /// writer) and reporting (files done, files found) to `progress`.
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
            limits: &self.config.limits,
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
        };
        for (path, reason) in skipped {
            if !path.is_empty() {
                run.seen.insert(path.clone());
            }
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
        progress(total, total);
        let mut report = run.report;
        report.skipped.sort_by(|a, b| a.path.cmp(&b.path));
        report.elapsed_ms = elapsed_ms(start);
        Ok(report)
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
        validate::validate_docid(docid)?;
        let txn = self.db()?.begin_read()?;
        records::get_file(&txn.open_table(SYNC_FILES)?, docid)
    }

    /// Stop syncing `dir`: its records go, its documents stay (as documents no file backs).
    pub fn sync_forget(&self, dir: &Path) -> Result<ForgetReport> {
        self.sync_forget_with(dir, &|ops| self.write_group(ops))
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
        let r = write(vec![WriteOp::Sync(SyncOp::Forget {
            dir: dir_str.clone(),
        })])?
        .pop()
        .ok_or_else(|| KbError::Storage("no result".into()))??;
        let WriteOutcome::Synced(o) = r else {
            return Err(KbError::Storage("unexpected write outcome".into()));
        };
        Ok(ForgetReport {
            dir: dir_str,
            forgotten: o.changed,
            files: o.records_dropped,
        })
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
        let WriteOutcome::Synced(o) = out else {
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
    fn a_record_made_under_another_unicode_spelling_moves_to_the_nfc_docid() {
        let (_tmp, kb, dir) = setup();
        let nfd = "cafe\u{301}";
        std::fs::write(dir.join(format!("{nfd}.md")), "# Caf\n\nx\n").unwrap();
        kb.sync(&req(&dir, Some("n"), None)).unwrap();
        assert_eq!(docids(&kb), ["n/a", "n/caf\u{e9}", "n/sub/b"]);
        // As a sync before docids were normalised left it: the record under the NFD docid.
        let rec = kb.sync_record("n/caf\u{e9}").unwrap().unwrap();
        kb.write_group(vec![
            WriteOp::Sync(SyncOp::Remove {
                docid: "n/caf\u{e9}".into(),
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
        assert_eq!(docids(&kb), ["n/a", format!("n/{nfd}").as_str(), "n/sub/b"]);
        let r = kb.sync(&req(&dir, None, None)).unwrap();
        assert_eq!((r.added, r.removed), (1, 1), "{r:?}");
        assert_eq!(docids(&kb), ["n/a", "n/caf\u{e9}", "n/sub/b"]);
        let r = kb.sync(&req(&dir, None, None)).unwrap();
        assert_eq!(r.transactions, 0, "{r:?}");
    }
}
