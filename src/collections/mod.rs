//! Collections: typed documents. Front matter becomes a document's metadata; models (loaded
//! from TOML) give documents a type with fields, expected sections and relationships; queries
//! filter and sort documents by metadata; validation reports where a document departs from its
//! model; section edits change one section of a document. See docs/collections.md.

pub mod doc_index;
pub mod edit;
pub mod filter;
pub mod schema;
pub mod state;
pub mod validations;
