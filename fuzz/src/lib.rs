//! Drivers of the kbdb fuzz targets. Each `harness::<target>(data)` feeds one input to the
//! library's real parsing and handling code and panics when a property is broken; the root
//! crate's `tests/fuzz_regressions.rs` includes the same file to replay crash inputs.

#[path = "harness.rs"]
pub mod harness;
