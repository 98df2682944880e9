//! Models: the types of collection documents. A [`ModelSet`] is read from a TOML file
//! ([`ModelSet::from_toml`]): each model has a name, the docids it claims (a prefix or a glob
//! pattern), typed metadata fields, expected sections and relationships to other models. A
//! built-in `Base` model (no fields, no sections) takes every document no other model claims.
//!
//! This module is pure: it never reads the store. Callers hand it a document as a
//! [`DocInput`] and answer "does this docid exist?" with a closure. It gives the model of a
//! document ([`ModelSet::model_for`]), validates a document against it ([`validate`]), resolves
//! its relationships ([`relationships_of`]), scaffolds new documents ([`scaffold`]) and
//! describes the models for agents ([`schema_json`], [`summary_markdown`], [`create_prompt`],
//! [`query_guide`]). The format and the rules are written down in docs/collections.md.
//!
//! One file per concern: `definitions` (the types of a model and the set of models),
//! `toml_file` (the models file read and written), `docid_glob` (the patterns that claim
//! documents), `validation`, `relationships`, `scaffolding` (new documents) and
//! `introspection` (the models described for agents).

mod definitions;
mod docid_glob;
mod introspection;
mod relationships;
mod scaffolding;
#[cfg(test)]
mod tests;
mod toml_file;
mod validation;

pub use definitions::{
    FieldDef, FieldType, ModelDef, ModelError, ModelSet, RelKind, RelationshipDef, SectionDef,
};
pub use introspection::{
    QUERY_OPERATORS, create_prompt, query_guide, schema_json, summary_markdown,
};
pub use relationships::{Related, RelatedItem, relationships_of};
pub use scaffolding::scaffold;
pub use validation::{DocInput, DocSection, Issue, Validation, is_date, validate};

/// The name of the built-in model.
pub const BASE_MODEL: &str = "Base";
/// The metadata key that names a document's model explicitly (overriding its docid).
pub const MODEL_KEY: &str = "_model";
