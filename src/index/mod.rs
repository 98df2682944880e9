//! Derived indexes. `near_dup`: MinHash/LSH for near-duplicate detection at learn time.

pub mod near_dup;
