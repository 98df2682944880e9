//! Embedding providers: turn section text into vectors for the vector and hybrid search paths
//! (hybrid-search spec). One trait, three implementations chosen by `[embedding] provider`:
//! `none` (no vectors), `onnx` (local ONNX Runtime, `onnx.rs`) and `api` (an OpenAI-compatible
//! HTTP endpoint, `api.rs`). The engine only ever talks to the trait.

pub mod api;
pub mod onnx;
use thiserror::Error;

/// Why a provider could not produce vectors. The message is for a person: it says what to do.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EmbedError {
    /// The provider cannot start: missing model files, runtime library, API URL, key variable…
    #[error("embedding provider not available: {0}")]
    Unavailable(String),
    /// One call failed (network, HTTP status, inference error, malformed answer).
    #[error("embedding failed: {0}")]
    Failed(String),
}

/// Computes embeddings. Implementations are shared between threads (the daemon's embedding
/// worker and searching clients), so they must be `Send + Sync`.
pub trait EmbeddingProvider: Send + Sync {
    /// One vector per input text, in order, each of length [`dimensions`](Self::dimensions).
    /// Callers keep batches at most [`max_batch`](Self::max_batch) long.
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// The fixed vector length of this provider.
    fn dimensions(&self) -> usize;
    /// Stable identifier of the model, stored with every vector for stale detection.
    fn model_name(&self) -> &str;
    /// Most texts in one `embed` call.
    fn max_batch(&self) -> usize {
        64
    }
    /// Whether the provider can embed now, asked as cheaply as it can be: one request without
    /// retries for a remote API. A local model that loaded works.
    fn probe(&self) -> Result<(), EmbedError> {
        Ok(())
    }
}

/// Scale `v` to unit length (left as is when it is all zeros).
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in v.iter_mut() {
            *x /= norm;
        }
    }
}
