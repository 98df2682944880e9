//! Vectors: the configured embedding provider (created on first use), the embedder rounds
//! that embed what was written, rebuild and status of the vectors.

use super::Kb;
use crate::WriteOutcome;
use crate::config::ProviderKind;
use crate::embedding::EmbedError;
use crate::error::{KbError, Result};
use crate::types::VectorStatus;
use crate::vectors::embedder::{self, Freshness, Provider};
use crate::vectors::state::*;
use crate::vectors::{embedding_input, input_fingerprint, store as vector_store};
use redb::ReadableTable;
use std::sync::Arc;
use std::time::Instant;

impl Kb {
    /// The configured embedding provider (None: `provider = "none"`), created on first use.
    pub fn embedding_provider(&self) -> Result<Option<Provider>> {
        let cfg = &self.config.embedding;
        if cfg.provider == ProviderKind::None {
            return Ok(None);
        }
        let mut slot = self.vectors.provider.lock().map_err(poisoned)?;
        if let Some(p) = slot.as_ref() {
            return Ok(Some(p.clone()));
        }
        let made: std::result::Result<Provider, EmbedError> = match cfg.provider {
            ProviderKind::None => unreachable!("handled above"),
            ProviderKind::Api => {
                crate::embedding::api::ApiProvider::new(cfg).map(|p| Arc::new(p) as Provider)
            }
            ProviderKind::Onnx => {
                let model_dir = if cfg.model_path.trim().is_empty() {
                    return Err(KbError::Embedding(
                        "embedding.model_path is not set: point it at a folder with model.onnx and tokenizer.json (tools/fetch-model.sh DIR makes one)".into(),
                    ));
                } else {
                    self.resolve(&cfg.model_path)
                };
                let lib = (!cfg.runtime_library.trim().is_empty())
                    .then(|| self.resolve(&cfg.runtime_library));
                crate::embedding::onnx::OnnxProvider::new(
                    &model_dir,
                    lib.as_deref(),
                    &cfg.model,
                    cfg.dimensions,
                    cfg.batch_size,
                )
                .map(|p| Arc::new(p) as Provider)
            }
        };
        let p = made.map_err(|e| KbError::Embedding(e.to_string()))?;
        *slot = Some(p.clone());
        Ok(Some(p))
    }

    /// A path of worker.toml, relative to the database folder when not absolute.
    pub(super) fn resolve(&self, path: &str) -> std::path::PathBuf {
        let p = std::path::Path::new(path.trim());
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.dir.join(p)
        }
    }

    /// Use `provider` instead of the configured one (tests and embedders of the library).
    pub fn set_embedding_provider(&self, provider: Provider) -> Result<()> {
        *self.vectors.provider.lock().map_err(poisoned)? = Some(provider);
        *self.vectors.matrix.write().map_err(poisoned)? = None;
        self.vectors.queries.clear();
        Ok(())
    }

    /// Whether an embedding provider is configured (or set).
    pub fn embedding_configured(&self) -> bool {
        self.has_provider()
    }

    pub(super) fn has_provider(&self) -> bool {
        self.config.embedding.provider != ProviderKind::None
            || self
                .vectors
                .provider
                .lock()
                .map(|p| p.is_some())
                .unwrap_or(false)
    }

    pub(super) fn active_provider(&self) -> Result<Option<Provider>> {
        if let Some(p) = self.vectors.provider.lock().map_err(poisoned)?.as_ref() {
            return Ok(Some(p.clone()));
        }
        self.embedding_provider()
    }

    /// Embed what waits for the embedder, round after round (the daemon's background thread
    /// calls this after writes). Returns whether anything is still pending because of an
    /// error. Without a provider, or with stale vectors, it does nothing.
    pub fn embed_pending(&self) -> Result<()> {
        self.embed_rounds(u64::MAX)
    }

    pub(super) fn embed_rounds(&self, max_changes: u64) -> Result<()> {
        let provider = match self.active_provider() {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(()),
            Err(e) => {
                self.note_embedding(Err(&e));
                return Err(e);
            }
        };
        let _one = self.vectors.embed_lock.lock().map_err(poisoned)?;
        if embedder::freshness(&*self.db()?, provider.as_ref())? == Freshness::Stale {
            return Ok(());
        }
        let mut done = 0;
        loop {
            let r = embedder::embed_pending(
                &*self.db_write()?,
                provider.as_ref(),
                &self.vectors.matrix,
            );
            // A round that asked the provider nothing says nothing about it (a probe's failure
            // must stand until a real request succeeds).
            match &r {
                Ok(round) if round.embedded == 0 && round.failed.is_empty() => {}
                _ => self.note_embedding(r.as_ref().map(|_| ())),
            }
            let round = r?;
            done += embedder::CHANGES_PER_ROUND as u64;
            if !round.failed.is_empty() {
                tracing::warn!(
                    sections = round.failed.len(),
                    "the embedding provider refused some sections (see vector_failures)"
                );
            }
            if !round.more || done >= max_changes {
                return Ok(());
            }
        }
    }

    pub(super) fn note_embedding(&self, r: std::result::Result<(), &KbError>) {
        self.vectors
            .health_known
            .store(true, std::sync::atomic::Ordering::SeqCst);
        if let Ok(mut last) = self.vectors.last_error.lock() {
            match r {
                Ok(()) => *last = None,
                Err(e) => {
                    if last.as_deref() != Some(&e.to_string()) {
                        tracing::warn!("embedding failed (sections stay pending): {e}");
                    }
                    *last = Some(e.to_string());
                }
            }
        }
    }

    /// Whether the provider is failing (the last embedding attempt failed).
    pub fn embedding_failing(&self) -> bool {
        self.vectors
            .last_error
            .lock()
            .map(|e| e.is_some())
            .unwrap_or(false)
    }

    /// Ask the provider whether it works (one request, no retries, for an API; creating the
    /// provider for a local model) and note the answer. The daemon's embedder does this first,
    /// so that the first learn made while the provider is down already carries
    /// `vector_embedding_failed`.
    pub fn probe_embedding(&self) {
        self.expect_embedding_probe();
        match self.active_provider() {
            Ok(Some(p)) => {
                let r = p.probe().map_err(|e| {
                    KbError::Embedding(format!("the embedding provider is down: {e}"))
                });
                self.note_embedding(r.as_ref().map(|_| ()));
            }
            Ok(None) => {}
            Err(e) => self.note_embedding(Err(&e)),
        }
    }

    /// Make writes wait (at most `PROBE_WAIT`) for the answer of a probe about to start on
    /// another thread.
    pub fn expect_embedding_probe(&self) {
        self.vectors
            .probing
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// After a write group: mark learned sections when embeddings are failing (the daemon,
    /// whose embedder runs after the acknowledgement) — see docs/vectors.md. Until the first
    /// embedding attempt or probe has finished, wait for it (at most `PROBE_WAIT`).
    pub(crate) fn flag_embedding_state(&self, out: &mut [Result<WriteOutcome>]) {
        if !self.has_provider() || out.iter().flatten().all(|o| !o.changed_something()) {
            return;
        }
        let known = || {
            !self
                .vectors
                .probing
                .load(std::sync::atomic::Ordering::SeqCst)
                || self
                    .vectors
                    .health_known
                    .load(std::sync::atomic::Ordering::SeqCst)
        };
        let start = Instant::now();
        while !known() && start.elapsed() < PROBE_WAIT {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if self.embedding_failing() {
            for o in out.iter_mut().flatten() {
                o.set_embedding_failed(true);
            }
        }
    }

    /// Embed right after a write group, in the caller's thread (the library used without the
    /// daemon), and flag the results when it failed.
    pub(crate) fn embed_after_write(&self, out: &mut [Result<WriteOutcome>]) {
        if !self.has_provider() {
            return;
        }
        let failed = self.embed_pending().is_err();
        for o in out.iter_mut().flatten() {
            o.set_embedding_failed(failed);
        }
    }

    pub(super) fn ensure_matrix(&self, dims: usize) -> Result<()> {
        if self
            .vectors
            .matrix
            .read()
            .map_err(poisoned)?
            .as_ref()
            .is_some_and(|m| m.dimensions() == dims)
        {
            return Ok(());
        }
        let _one = self.vectors.embed_lock.lock().map_err(poisoned)?;
        let mut w = self.vectors.matrix.write().map_err(poisoned)?;
        if w.as_ref().is_none_or(|m| m.dimensions() != dims) {
            *w = Some(embedder::load_matrix(&*self.db()?, dims)?);
        }
        Ok(())
    }

    /// Re-embed every section with the provider (part of `rebuild`; None without one).
    pub(crate) fn rebuild_vectors(
        &self,
        progress: &dyn Fn(u64, u64),
    ) -> Result<Option<(u64, u64)>> {
        let Some(provider) = self.active_provider()? else {
            return Ok(None);
        };
        let _one = self.vectors.embed_lock.lock().map_err(poisoned)?;
        let r = embedder::rebuild(
            &*self.db_write()?,
            provider.as_ref(),
            progress,
            &crate::now(),
        );
        self.note_embedding(r.as_ref().map(|_| ()));
        let r = r?;
        *self.vectors.matrix.write().map_err(poisoned)? = None;
        Ok(Some(r))
    }

    /// Store the vectors of an imported layout for the imported sections, when they are of the
    /// configured provider's model and the database's vectors are of it too (or none exist).
    /// Returns how many were stored; the embedder embeds the rest.
    /// Hold off the embedder (its rounds take this lock) while the guard lives: an import
    /// takes it before its sections become visible, so the embedder does not embed them again
    /// before `reuse_imported_vectors` stores the shipped vectors.
    pub(crate) fn pause_embedder(&self) -> Result<std::sync::MutexGuard<'_, ()>> {
        self.vectors.embed_lock.lock().map_err(poisoned)
    }

    /// Store the vectors an import shipped for `kbids` (the caller holds `pause_embedder`).
    pub(crate) fn reuse_imported_vectors(
        &self,
        meta: &crate::snapshot::vectors_idx::VectorsMeta,
        idx: &crate::snapshot::vectors_idx::VectorsIdx,
        kbids: &[String],
        _paused: &std::sync::MutexGuard<'_, ()>,
    ) -> Result<u64> {
        let Ok(Some(provider)) = self.active_provider() else {
            return Ok(0);
        };
        if meta.model_name != provider.model_name()
            || meta.dimensions as usize != provider.dimensions()
        {
            return Ok(0);
        }
        let mut txn = self.db_write()?.begin_write()?;
        txn.set_durability(redb::Durability::Immediate)?;
        let mut stored = 0;
        {
            let mut st = txn.open_table(crate::store::tables::VECTOR_STATE)?;
            let mut state = vector_store::VectorState::read(&st)?;
            if state.model.is_none() {
                // Adopt the model; the embedder replays every change and skips the sections
                // whose vector is stored below.
                state.model = Some(provider.model_name().to_string());
                state.dimensions = Some(provider.dimensions());
                state.applied_seq = 0;
                state.write(&mut st)?;
            } else if !state.matches(provider.model_name(), provider.dimensions()) {
                return Ok(0);
            }
            let sections = txn.open_table(crate::store::tables::SECTIONS)?;
            let content = txn.open_table(crate::store::tables::CONTENT)?;
            let mut vt = txn.open_table(crate::store::tables::VECTORS)?;
            for kbid in kbids {
                let Some(v) = idx.get(kbid) else { continue };
                if vt.get(kbid.as_str())?.is_some() {
                    continue;
                }
                let Some(rec) = sections.get(kbid.as_str())? else {
                    continue;
                };
                let rec: crate::types::records::SectionRecord =
                    crate::types::records::decode("sections", kbid, rec.value())?;
                let bytes = crate::store::txn::record_content_unverified(&content, &rec)?
                    .unwrap_or_default();
                let Some(input) = embedding_input(&rec, &bytes) else {
                    continue;
                };
                let fp = input_fingerprint(&input);
                vt.insert(
                    kbid.as_str(),
                    vector_store::encode_vector(&fp, v).as_slice(),
                )?;
                stored += 1;
            }
        }
        txn.commit()?;
        *self.vectors.matrix.write().map_err(poisoned)? = None;
        Ok(stored)
    }

    /// The vector part of `status`.
    pub(crate) fn vector_status(&self) -> Result<VectorStatus> {
        let cfg = &self.config.embedding;
        let state = {
            let txn = redb::ReadableDatabase::begin_read(&*self.db()?)?;
            vector_store::read_state(&txn)?
        };
        let (count, failures) = embedder::counts(&*self.db()?)?;
        let (model, dims) = match self.vectors.provider.lock().map_err(poisoned)?.as_ref() {
            Some(p) => (p.model_name().to_string(), p.dimensions()),
            None => (cfg.model.clone(), cfg.dimensions),
        };
        let stale = self.has_provider() && state.model.is_some() && !state.matches(&model, dims);
        Ok(VectorStatus {
            provider: match cfg.provider {
                ProviderKind::None if self.has_provider() => "custom",
                ProviderKind::None => "none",
                ProviderKind::Onnx => "onnx",
                ProviderKind::Api => "api",
            }
            .to_string(),
            model,
            stored_model: state.model,
            stored_dimensions: state.dimensions,
            count,
            pending_changes: if self.has_provider() {
                embedder::pending_changes(&*self.db()?)?
            } else {
                0
            },
            failures,
            stale,
            built_at: state.built_at,
            memory_bytes: self
                .vectors
                .matrix
                .read()
                .map_err(poisoned)?
                .as_ref()
                .map(|m| m.memory_bytes() as u64)
                .unwrap_or(0),
            last_error: self.vectors.last_error.lock().map_err(poisoned)?.clone(),
        })
    }
}
