//! Maintenance of the store: the integrity check and garbage collection (docs/maintenance.md).

pub(crate) mod check;
pub(crate) mod gc;
