//! Section vectors: the embeddings behind the `vector` and `hybrid` search paths
//! (hybrid-search spec, docs/vectors.md).
//!
//! The store is the truth: `vectors` holds one embedding per section and `vector_state` the
//! model that produced them and the change sequence the embedder has applied. Like the lexical
//! index, vectors are derived data that follow the change log: learn only commits the section;
//! the embedder (the daemon's background thread, or the learning call itself when embedded)
//! replays the changes after `applied_seq`, so sections waiting for an embedding survive a
//! crash and are picked up on restart. The in-memory [`matrix::VectorMatrix`] is loaded from
//! the table on first use and follows each embedder commit.

pub mod embedder;
pub mod matrix;
pub mod state;
pub mod store;

use sha2::{Digest, Sha256};

use crate::types::records::SectionRecord;

/// The text a section is embedded from: `{title}\n{content}` (the title carries weight, as it
/// does for BM25F). Images embed their title and description; a section with none of these is
/// not embedded (None).
pub fn embedding_input(rec: &SectionRecord, content: &[u8]) -> Option<String> {
    let title = rec.title.as_deref().unwrap_or("").trim();
    let body = if rec.section_type.starts_with("image/") {
        rec.description.as_deref().unwrap_or("").trim().to_string()
    } else {
        String::from_utf8_lossy(content).trim().to_string()
    };
    match (title.is_empty(), body.is_empty()) {
        (true, true) => None,
        (false, true) => Some(title.to_string()),
        (true, false) => Some(body),
        (false, false) => Some(format!("{title}\n{body}")),
    }
}

/// A short fingerprint of an embedding input, stored with the vector: a section whose metadata
/// changed without changing its text is not embedded again.
pub fn input_fingerprint(input: &str) -> [u8; 8] {
    let d = Sha256::digest(input.as_bytes());
    d[..8].try_into().expect("8 bytes of a digest")
}
