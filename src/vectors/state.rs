//! The `Kb` side of vectors: the configured provider (created on first use), the in-memory
//! matrix, the embedder rounds, vector and hybrid search, and rebuild and status parts.

use std::sync::{Mutex, RwLock};

use super::embedder::Provider;
use super::matrix::VectorMatrix;
use crate::error::KbError;

/// Most pending section changes a vector search embeds itself before answering (read-your-
/// writes for a few fresh sections; beyond that it answers with what is embedded and says so).
pub const SEARCH_CATCH_UP: u64 = 256;

/// Vector state a `Kb` keeps in memory.
#[derive(Default)]
pub struct VectorEngine {
    pub(crate) provider: Mutex<Option<Provider>>,
    /// Loaded on the first vector search; follows every embedder commit after that.
    pub(crate) matrix: RwLock<Option<VectorMatrix>>,
    /// One embedder round (or rebuild) at a time.
    pub(crate) embed_lock: Mutex<()>,
    /// The last embedding failure, cleared by the next success.
    pub(crate) last_error: Mutex<Option<String>>,
    /// Whether any embedding attempt (or the provider probe) has finished, so `last_error`
    /// says whether the provider works.
    pub(crate) health_known: std::sync::atomic::AtomicBool,
    /// Whether a probe was started (the daemon's embedder); writes wait for its answer only
    /// then.
    pub(crate) probing: std::sync::atomic::AtomicBool,
    /// Recent query embeddings (a repeated search skips the model).
    pub(crate) queries: super::embedder::QueryCache,
}

/// How long the first write of a process waits for the provider probe to finish, so that it
/// can say `vector_embedding_failed` when the provider is down (docs/vectors.md).
pub(crate) const PROBE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

pub(crate) fn poisoned<T>(_: T) -> KbError {
    KbError::Storage("vector state lock poisoned by an earlier panic".into())
}

impl VectorEngine {
    /// After a panic was caught (a damaged page): the locks work again, and the vectors are
    /// loaded anew at the next vector search.
    pub(crate) fn recover(&self) {
        self.provider.clear_poison();
        self.matrix.clear_poison();
        self.embed_lock.clear_poison();
        self.last_error.clear_poison();
        if let Ok(mut m) = self.matrix.write() {
            *m = None;
        }
    }
}
