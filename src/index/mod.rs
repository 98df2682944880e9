//! Derived indexes: `lexical` (tantivy, replayed from the change log), its `analyzer`, and
//! `near_dup` (MinHash/LSH for near-duplicate detection at learn time).

pub mod analyzer;
pub mod lexical;
pub mod near_dup;
