//! Maintenance: check, rebuild, export, import, migrate and gc (docs/maintenance.md).

use std::path::Path;
use std::time::Instant;

use redb::ReadableDatabase;

use super::Kb;
use crate::config::Config;
use crate::error::{KbError, Result};
use crate::maintenance;
use crate::snapshot::{self, export::ExportOptions, import::ImportResult};
use crate::store::txn::ReadTables;
use crate::types::*;
use crate::writes::EngineOp;
use crate::{elapsed_ms, now};
use crate::{store, types};

impl Kb {
    /// `rebuild`: reconstruct the lexical index from the store.
    pub fn rebuild(&self) -> Result<RebuildResult> {
        self.rebuild_with_progress(&|_, _| {})
    }

    pub fn rebuild_with_progress(&self, progress: &dyn Fn(u64, u64)) -> Result<RebuildResult> {
        let start = Instant::now();
        let (sections, terms) = self.lexical()?.rebuild(&*self.db()?, progress)?;
        let vectors = self.rebuild_vectors(progress)?;
        Ok(RebuildResult {
            sections_reindexed: sections,
            terms_indexed: terms,
            elapsed_ms: elapsed_ms(start),
            vectors_embedded: vectors.map(|v| v.0),
            vector_failures: vectors.map(|v| v.1),
        })
    }

    /// `check`: verify checksums and kbids, types, orphans, manifests, references, divergent
    /// source keys and the lexical index against the store (docs/maintenance.md).
    pub fn check(&self) -> Result<CheckResult> {
        self.check_with_progress(&|_, _| {})
    }

    /// `check`, reporting (sections done, total) as it goes.
    pub fn check_with_progress(&self, progress: &dyn Fn(u64, u64)) -> Result<CheckResult> {
        let start = Instant::now();
        // Compare the index as of this very snapshot: apply and commit pending changes first,
        // under the lock, and read the store inside it so no write slips in between.
        let (txn, index) = {
            let mut lex = self.lexical()?;
            let mut attempts = 0;
            loop {
                self.commit_lexical(&mut lex, &*self.db()?)?;
                let txn = self.db()?.begin_read()?;
                let seq = ReadTables::open(&txn)?.last_seq()?;
                attempts += 1;
                // A write that committed between the catch-up and this snapshot would look like
                // a missing index entry: catch up again.
                if seq == lex.applied_seq() || attempts == 5 {
                    break (txn, maintenance::check::IndexView::read(&lex));
                }
            }
        };
        let mut r = maintenance::check::check(&txn, Some(index), progress)?;
        // A write journal found damaged was kept aside when the open refused it: the writes it
        // held after the damage are not in the store (src/store/journal.rs).
        for copy in store::journal::damaged_copies(&self.dir) {
            r.errors.push(types::CheckFinding {
                kind: "journal_damaged".into(),
                entity: copy.display().to_string(),
                detail: "a damaged write journal was set aside: writes acknowledged after its \
                         last checkpoint may be missing; restore from an export, or delete \
                         this copy once dealt with"
                    .into(),
            });
            r.ok = false;
        }
        r.elapsed_ms = elapsed_ms(start);
        Ok(r)
    }

    /// `export`: write a consistent snapshot as the plain-file layout (docs/file-layout.md).
    pub fn export(&self, opts: &ExportOptions) -> Result<ExportResult> {
        self.export_with_progress(opts, &|_, _| {})
    }

    pub fn export_with_progress(
        &self,
        opts: &ExportOptions,
        progress: &dyn Fn(u64, u64),
    ) -> Result<ExportResult> {
        let start = Instant::now();
        let target = snapshot::export::resolve_target(opts, &self.dir)?;
        // One read transaction: the snapshot every file is written from.
        let txn = self.db()?.begin_read()?;
        let schema = store::migrate::read_version(&txn)?;
        let w = snapshot::export::export(&txn, &target, opts, schema, &now(), progress)?;
        Ok(ExportResult {
            path: w.path.display().to_string(),
            sections_exported: w.sections,
            documents_exported: w.documents,
            elapsed_ms: elapsed_ms(start),
        })
    }

    /// `import`: read a plain-file layout into this database (docs/file-layout.md). Bad entries
    /// are reported and skipped, or stop the import with `strict` (then nothing is written).
    pub fn import(&self, path: &Path, strict: bool) -> Result<ImportResult> {
        self.import_with_progress(path, strict, &|_, _| {})
    }

    pub fn import_with_progress(
        &self,
        path: &Path,
        strict: bool,
        progress: &dyn Fn(u64, u64),
    ) -> Result<ImportResult> {
        let start = Instant::now();
        let plan = snapshot::import::read_layout(path, strict, &self.config.limits, progress)?;
        self.apply_import(path, plan, start)
    }

    pub(super) fn apply_import(
        &self,
        path: &Path,
        plan: snapshot::import::Plan,
        start: Instant,
    ) -> Result<ImportResult> {
        // The embedder is held off before the write transaction begins: its rounds take the
        // embed lock and then a write transaction, so taking them the other way round (the
        // transaction, then the lock) deadlocked an import against a running embedder.
        let paused = match plan.vectors {
            Some(_) => Some(self.pause_embedder()?),
            None => None,
        };
        self.train_content_dictionary_for_import(&plan.sections);
        let imported_kbids: Vec<String> = plan.sections.iter().map(|s| s.kbid.clone()).collect();
        let writes = snapshot::import::ImportWrites {
            sections: plan.sections,
            documents: plan.documents,
            synonyms: plan.synonyms,
        };
        let counts = self.write_engine(EngineOp::import(writes))?;
        let mut result = ImportResult {
            path: path.display().to_string(),
            sections_imported: counts.sections_imported,
            sections_existing: counts.sections_existing,
            documents_imported: counts.documents_imported,
            documents_replaced: counts.documents_replaced,
            synonyms_imported: counts.synonyms_imported,
            vectors_found: plan.vectors_found,
            vectors_reused: 0,
            models_imported: false,
            problems: plan.problems,
            elapsed_ms: 0.0,
        };
        if let (Some((meta, idx)), Some(paused)) = (&plan.vectors, &paused) {
            result.vectors_reused =
                self.reuse_imported_vectors(meta, idx, &imported_kbids, paused)?;
        }
        drop(paused);
        if let Some(models) = &plan.models {
            self.models_load(models)?;
            result.models_imported = true;
        }
        if self.embedding_configured() {
            let _ = self.embed_pending(); // failures stay pending (status)
        }
        result.elapsed_ms = elapsed_ms(start);
        Ok(result)
    }

    /// `migrate`: turn a folder in the plain-file layout into a database. With `new_dir` the
    /// database is created there and the old folder is left untouched; without, it is created
    /// in place and the plain files move into `plain-layout-<time>/` inside the folder.
    pub fn migrate(old_dir: &Path, new_dir: Option<&Path>) -> Result<(Kb, ImportResult)> {
        Self::migrate_with_progress(old_dir, new_dir, &|_, _| {})
    }

    pub fn migrate_with_progress(
        old_dir: &Path,
        new_dir: Option<&Path>,
        progress: &dyn Fn(u64, u64),
    ) -> Result<(Kb, ImportResult)> {
        if !snapshot::layout::is_plain_layout(old_dir) {
            return Err(KbError::BadImport {
                path: old_dir.display().to_string(),
                reason: "is not a plain-file layout (catalog.toml and sections/ are required)"
                    .into(),
            });
        }
        let in_place = new_dir.is_none_or(|n| n == old_dir);
        let target = new_dir.unwrap_or(old_dir);
        if target.join(store::DB_FILE).exists() {
            return Err(KbError::invalid(
                "db",
                format!(
                    "{} already holds a database; use `kbdb import` to add to it",
                    target.display()
                ),
            ));
        }
        // Read and verify everything before creating anything: an unreadable layout leaves no
        // empty database behind.
        let start = Instant::now();
        let limits = Config::load(target).map(|c| c.limits).unwrap_or_default();
        let plan = snapshot::import::read_layout(old_dir, false, &limits, progress)?;
        let (kb, _) = Self::open_inner(target, true, in_place)?;
        let result = kb.apply_import(old_dir, plan, start)?;
        if in_place {
            let backup = old_dir.join(format!("plain-layout-{}", now().replace(':', "-")));
            std::fs::create_dir(&backup)
                .map_err(|e| KbError::io(format!("cannot create {}", backup.display()), e))?;
            for name in [
                snapshot::layout::CATALOG,
                snapshot::layout::SECTIONS_DIR,
                snapshot::layout::DOCUMENTS_DIR,
                snapshot::layout::INDEXES_DIR,
                snapshot::layout::SYNONYMS,
            ] {
                let from = old_dir.join(name);
                if from.exists() {
                    std::fs::rename(&from, backup.join(name)).map_err(|e| {
                        KbError::io(format!("cannot move {} aside", from.display()), e)
                    })?;
                }
            }
        }
        Ok((kb, result))
    }

    /// `gc`: remove sections no document holds that were not learned on their own.
    pub fn gc(&self) -> Result<GcResult> {
        let start = Instant::now();
        let (removed_sections, removed_bytes) = self.write_engine(EngineOp::gc())?;
        Ok(GcResult {
            removed_sections,
            removed_bytes,
            elapsed_ms: elapsed_ms(start),
        })
    }

    /// `import` into the database in `dir`, creating it when it does not exist — only once the
    /// layout has been read and verified, so a refused import (a bad entry with `strict`, a
    /// missing catalog, an incomplete export) creates nothing. Should writing fail after the
    /// database was created, what was created is removed again: a failed import leaves no
    /// trace. A database that exists is imported into as by [`Kb::import`].
    pub fn import_creating(
        dir: &Path,
        path: &Path,
        strict: bool,
        progress: &dyn Fn(u64, u64),
    ) -> Result<(crate::Kb, ImportResult)> {
        let start = std::time::Instant::now();
        if dir.join(crate::store::DB_FILE).exists() {
            let kb = crate::Kb::open(dir)?;
            let r = kb.import_with_progress(path, strict, progress)?;
            return Ok((kb, r));
        }
        let limits = crate::Config::load(dir)
            .map(|c| c.limits)
            .unwrap_or_default();
        let plan = snapshot::import::read_layout(path, strict, &limits, progress)?;
        // What the folder held before the database was created: everything else is ours.
        let before: Option<std::collections::HashSet<std::ffi::OsString>> =
            match std::fs::read_dir(dir) {
                Ok(rd) => Some(rd.flatten().map(|e| e.file_name()).collect()),
                Err(_) => None,
            };
        let created = crate::Kb::open_or_create(dir)
            .and_then(|(kb, _)| kb.apply_import(path, plan, start).map(|r| (kb, r)));
        if created.is_err() {
            match &before {
                None => {
                    let _ = std::fs::remove_dir_all(dir);
                }
                Some(names) => {
                    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                        if !names.contains(&e.file_name()) {
                            let p = e.path();
                            let _ =
                                std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
                        }
                    }
                }
            }
        }
        created
    }
}
