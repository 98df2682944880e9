//! redb table definitions. See docs/storage.md for what each holds.

use redb::{MultimapTableDefinition, TableDefinition};

/// `meta`: schema version and other database-wide values.
pub const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// `sections`: kbid → versioned `SectionRecord`.
pub const SECTIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("sections");
/// `section_content`: content sequence → content bytes (UTF-8 text, or decoded image bytes).
/// A section's record holds its `content_seq`; new content takes the next sequence, so a group
/// commit's contents share the B-tree's last leaf instead of one random leaf each
/// (migration 0010).
pub const CONTENT: TableDefinition<u64, &[u8]> = TableDefinition::new("section_content");
/// `content`: kbid → content bytes (migrations 0001–0009; replaced by `section_content`).
pub const CONTENT_BY_KBID: TableDefinition<&str, &[u8]> = TableDefinition::new("content");
/// `documents`: docid → versioned `DocumentRecord` (the ordered manifest).
pub const DOCUMENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("documents");
/// `doc_sections`: docid → kbid (migrations 0001–0018; dropped by 0019: a document's sections
/// are those its record lists).
pub const DOC_SECTIONS: MultimapTableDefinition<&str, &str> =
    MultimapTableDefinition::new("doc_sections");
/// `section_docs`: kbid → docid (membership, section side).
pub const SECTION_DOCS: MultimapTableDefinition<&str, &str> =
    MultimapTableDefinition::new("section_docs");
/// `tags`: tag → kbid.
pub const TAGS: MultimapTableDefinition<&str, &str> = MultimapTableDefinition::new("tags");
/// `source_keys`: source key → kbid (migrations 0001–0010; the index is now built in memory
/// from the records' `source_key`, src/index/source_keys.rs).
pub const SOURCE_KEYS: MultimapTableDefinition<&str, &str> =
    MultimapTableDefinition::new("source_keys");
/// `changes`: monotonic sequence → versioned `ChangeRecord`.
pub const CHANGES: TableDefinition<u64, &[u8]> = TableDefinition::new("changes");
/// `minhash_bands`: LSH band key → kbid (migrations 0001–0004; replaced by `minhash_sigs`).
pub const MINHASH_BANDS: MultimapTableDefinition<u64, &str> =
    MultimapTableDefinition::new("minhash_bands");

/// `synonyms`: lowercase term ⇒ lowercase synonym (added in both directions).
pub const SYNONYMS: MultimapTableDefinition<&str, &str> = MultimapTableDefinition::new("synonyms");

pub const META_SCHEMA_VERSION: &str = "schema_version";

/// `refs_out`: (source kbid, marker ordinal) → versioned `Marker` (target, marker type, context
/// snippet): a section's references in the order they appear (migration 0004).
pub const REFS_OUT: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("refs_out");
/// `refs_in`: target key (`Target::key`) ⇒ source kbid: who references a section, a document or
/// a document's heading. Keyed by name, so a reference to something not learned yet resolves
/// when it is (migration 0004).
pub const REFS_IN: MultimapTableDefinition<&str, &str> = MultimapTableDefinition::new("refs_in");

/// `minhash_sigs`: kbid → its 16 LSH band keys (16 little-endian u64) (migrations 0005–0008;
/// migration 0009 moved them into the section records and deleted the table).
pub const MINHASH_SIGS: TableDefinition<&str, &[u8]> = TableDefinition::new("minhash_sigs");
/// `vectors`: kbid → the section's embedding, `dimensions` × f32 little-endian (derived from the
/// section text by the configured embedding provider; docs/vectors.md).
pub const VECTORS: TableDefinition<&str, &[u8]> = TableDefinition::new("vectors");
/// `vector_state`: the vectors' model name, dimensions, build time and the change sequence the
/// embedder has applied (`model`, `dimensions`, `built_at`, `applied_seq`).
pub const VECTOR_STATE: TableDefinition<&str, &[u8]> = TableDefinition::new("vector_state");
/// `vector_failures`: kbid → why its embedding failed (retried by `rebuild`).
pub const VECTOR_FAILURES: TableDefinition<&str, &str> = TableDefinition::new("vector_failures");
/// `collection`: `models` → the TOML text of the loaded models (docs/collections.md).
pub const COLLECTION: TableDefinition<&str, &str> = TableDefinition::new("collection");
/// `sync_roots`: canonical folder path → versioned `SyncRoot` (its docid prefix): the folders
/// kept in sync with documents (migration 0008, docs/sync.md).
pub const SYNC_ROOTS: TableDefinition<&str, &[u8]> = TableDefinition::new("sync_roots");
/// `sync_files`: docid → versioned `FileRecord` (the file it came from: path, content hash,
/// size and times, front-matter syntax) (migration 0008, docs/sync.md).
pub const SYNC_FILES: TableDefinition<&str, &[u8]> = TableDefinition::new("sync_files");
