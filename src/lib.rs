//! kbdb — a local knowledge base for AI agents and the people who work with them.
//!
//! [`Kb`] is the engine and the only way in: every capability of the CLI, the daemon and the
//! MCP server is one method here. It is usable embedded, without daemon or async runtime.
//!
//! Code map (bottom to top; ARCHITECTURE.md walks each folder and follows a query, a write and
//! an MCP call file by file):
//!
//! - foundation: `error`, `config`, `clock`, `types` (API and record types), `files`,
//!   `process`, `text` (markdown, front matter, values, markers)
//! - `store`: redb tables, transactions, the write journal and the durability policy, migrations
//! - `index`, `embedding`, `vectors`: derived indexes (lexical, near-duplicate, source keys) and
//!   vectors
//! - features: `learn`, `unlearn`, `references`, `writes` (the write operations and their
//!   dispatcher), `recall`, `compose`, `search`, `collections`, `sync`, `skills`,
//!   `maintenance` (check, gc), `snapshot` (export, import)
//! - `kb`: the engine, one file per face (write, read, search, maintain, vectors, collections,
//!   sync, skills)
//! - adapters: `daemon` (the table of operations, the socket server and client), `mcp`, and the
//!   binary's `cli`

mod clock;
pub mod collections;
mod compose;
pub mod config;
pub mod daemon;
pub mod embedding;
pub mod error;
mod files;
pub mod index;
mod kb;
mod learn;
pub mod maintenance;
pub mod mcp;
mod process;
mod recall;
mod references;
pub mod search;
pub mod serve;
pub mod skills;
pub mod snapshot;
pub mod store;
pub mod sync;
#[cfg(test)]
mod test_rng;
pub mod text;
pub mod types;
mod unlearn;
pub mod vectors;
pub mod web;
pub mod writes;
pub use config::Config;
pub use error::{KbError, Result};
pub use kb::{Kb, PreparedWrite};
pub use process::disable_transparent_huge_pages;
pub use search::{SearchItem, SearchItems, SearchRequest, SearchResponse};
pub use snapshot::export::ExportOptions;
pub use snapshot::import::{ImportProblem, ImportResult};
pub use types::*;
pub use writes::{WriteOp, WriteOutcome};

pub(crate) use clock::{elapsed_ms, now};
