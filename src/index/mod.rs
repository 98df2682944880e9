//! Derived indexes: `lexical` (tantivy, replayed from the change log), its `analyzer`,
//! `near_dup` (MinHash/LSH for near-duplicate detection at learn time) and `source_keys`; the
//! last two are held in memory (`memory`), built from the section records; `band_map` keeps the
//! near-duplicate bands compact.

pub mod analyzer;
pub mod band_map;
pub mod lexical;
pub mod memory;
pub mod near_dup;
pub mod source_keys;
