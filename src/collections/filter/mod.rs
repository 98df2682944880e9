//! The query engine for typed document collections: filter, sort and page document *views*.
//!
//! A view is a JSON object `{"id": docid, "title": string|null, "model": "Story", "meta": {…}}`
//! where `meta` holds the document's front matter. This module is pure: it never touches the
//! store; callers hand documents (in docid order) to [`run`], as JSON views or as anything else
//! that answers the same questions ([`Doc`]; the document index's entries do).
//!
//! # Query input
//!
//! [`QuerySpec::from_json`] parses the `query` tool input. Keys: `model`, `where`, `sort`,
//! `limit`, `offset`, `method`; `select` and any other key are ignored (the caller handles
//! `select`).
//!
//! - `model`: a model name. Only views whose `"model"` equals it, ignoring case, pass. Absent,
//!   `null` or `""` means every model.
//! - `where`, two forms, both meaning the AND of all their conditions:
//!   - an array of `{"path": …, "operator": …, "value": …}`; `operator` may be written with or
//!     without `$` (`eq` or `$eq`) and defaults to `eq`. An element without any of the keys
//!     `path`, `operator`, `value` is read as an object of the second form.
//!   - a MongoDB-style object whose keys are paths and whose values are a literal (means `$eq`),
//!     an array (means `$in`) or an operator object such as `{"$gt": 5, "$lt": 9}` (several
//!     operators on one key are ANDed). Only keys starting with `$` are operators: an object
//!     value without `$` keys is a literal compared with `$eq`; mixing both is an error. To
//!     compare with an array literally, write `{"$eq": [...]}`. `$and`/`$or` are not supported.
//! - `sort`: a string `"meta.priority"` (ascending) or `"-meta.priority"` (descending; a leading
//!   `+` means ascending), an array of such strings and/or `{"path": …, "direction": …}`
//!   objects (direction `"asc"`/`"desc"`/`1`/`-1`, default ascending), a single
//!   `{"path": …, "direction": …}` object, or an object `{"meta.priority": "desc", "title":
//!   "asc"}`. **The object form sorts by its keys in alphabetical order**, not in the order
//!   written (JSON objects are read into a sorted map); use an array to choose the key order.
//! - `limit`: a whole number ≥ 0 (absent or `null`: no limit). The older string form
//!   `"all"`, `"first"`, `"last"`, `"count"` selects the method instead (`"all"` = `fetchAll`);
//!   it may not contradict an explicit `method`. A string of digits is read as a number.
//! - `offset`: a whole number ≥ 0, default 0.
//! - `method`: `fetchAll` (default; `all` is accepted), `first`, `last` or `count` (ignoring
//!   ASCII case).
//!
//! # Paths
//!
//! `id`, `title` and `model` name the view's own fields; `meta.a.b.c` walks into the metadata
//! (`meta` alone is the whole metadata object). Any other name is shorthand for a metadata
//! field: `status` means `meta.status`, `a.b` means `meta.a.b`. A segment that is a whole
//! number indexes an array (`meta.authors.0`); on an object it is an ordinary key. A path does
//! not fan out over arrays: `meta.authors.name` is missing when `authors` is an array.
//!
//! # Matching semantics
//!
//! - A field is **missing** when its path does not resolve or resolves to JSON `null`.
//! - Missing field: `$eq`, `$in`, `$gt`, `$gte`, `$lt`, `$lte`, `$contains`, `$startsWith`,
//!   `$endsWith`, `$regex` are false; `$neq`, `$notIn` are true; `$exists: false` (=
//!   `$notExists: true`) is true, `$exists: true` is false.
//! - `null` as a value follows MongoDB: `$eq: null` matches exactly the missing fields
//!   (same as `$exists: false`), `$neq: null` the present ones, and a `null` in an `$in`
//!   list matches a missing field (in `$notIn`, excludes it).
//! - Equality is deep JSON equality except that numbers compare by value: `1 == 1.0`.
//! - `$eq v`: the field equals `v`, or the field is an array and an element equals `v`.
//!   `$neq` is its negation.
//! - `$in [..]`: the field, or any element of an array field, equals an item of the list.
//!   `$notIn` is its negation.
//! - `$contains v`: on a string field and a string `v`, substring; on an array field, an
//!   element equals `v`; otherwise false.
//! - `$gt $gte $lt $lte`: numbers numerically (integers and floats mixed), strings
//!   lexicographically by bytes (so ISO-8601 dates compare correctly), booleans `false < true`.
//!   Mismatched types (number vs string, …) are false, never an error. On an array field, true
//!   when any element satisfies it.
//! - `$startsWith $endsWith $regex`: on a string field; on an array field, any string element;
//!   other types are false. `$regex` searches (unanchored; use `^…$` to anchor) with the Rust
//!   `regex` syntax; inline flags such as `(?i)` work.
//! - `$exists`: the field is present (not missing) — `true` or `false`.
//! - Everything is case-sensitive (except the `model` filter and method/direction names).
//!
//! Value rules checked when parsing: `$in`/`$notIn` need an array; `$exists`/`$notExists` a
//! boolean (`null`, or in the array form no value, means `true`); `$startsWith`, `$endsWith`
//! and `$regex` a string; `$gt $gte $lt $lte` a number, string or boolean. Regexes are compiled
//! once, with a 1 MiB size limit so that hostile patterns fail cleanly.
//!
//! # Sorting and paging
//!
//! Sort keys apply in order. Missing values (absent or `null`) sort last in both directions.
//! Values of different types order numbers < strings < booleans < arrays < objects (reversed
//! when descending); arrays compare element by element, objects compare equal. The sort is
//! stable: ties keep the input order (docid order).
//!
//! Then `offset` values are skipped and at most `limit` kept. `first` and `last` return the
//! first and last view of that page (0 or 1 views); `count` counts every match and ignores
//! `sort`, `limit` and `offset`. [`QueryOutcome::total_matched`] is always the number of
//! matches before paging.
//!
//! # Errors
//!
//! A [`QueryError`] names the offending field (`where.meta.status`, `where[2]`, `sort[1]`,
//! `limit`, …) and the rule, e.g. `where.meta.status: unknown operator "$equals" (one of $eq,
//! $neq, …)`.
//!
//! One file per concern: `spec` (the parsed query and its errors), `parse` (the input forms),
//! `path` (field paths and the [`Doc`] trait), `condition` (operators and conditions), `eval`
//! (equality and ordering of values) and `run` (filter, sort, page).

mod condition;
mod eval;
mod parse;
mod path;
mod run;
mod spec;
#[cfg(test)]
mod tests;

pub use condition::{Condition, Operator, REGEX_SIZE_LIMIT};
pub use path::Doc;
pub use run::{QueryOutcome, matches, run, run_of_model};
pub use spec::{Method, QueryError, QuerySpec, SortKey};
