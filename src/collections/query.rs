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

use std::cmp::Ordering;

use regex::{Regex, RegexBuilder};
use serde_json::{Map, Number, Value};

/// Compiled-size limit for `$regex` patterns (bytes).
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A query input that breaks a rule. `field` locates it (`where.meta.status`, `sort[1]`,
/// `limit`, …); `message` says what is wrong and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct QueryError {
    pub field: String,
    pub message: String,
}

impl QueryError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        QueryError {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A comparison operator of a `where` condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    Eq,
    Neq,
    In,
    NotIn,
    Gt,
    Lt,
    Gte,
    Lte,
    Contains,
    StartsWith,
    EndsWith,
    Regex,
    Exists,
    NotExists,
}

const OPERATOR_LIST: &str = "$eq, $neq, $in, $notIn, $gt, $lt, $gte, $lte, $contains, \
                             $startsWith, $endsWith, $regex, $exists, $notExists";

impl Operator {
    /// Reads an operator name, with or without a leading `$`; `ne` and `nin` are aliases of
    /// `neq` and `notIn`. Case-sensitive.
    pub fn parse(name: &str) -> Option<Operator> {
        let bare = name.strip_prefix('$').unwrap_or(name);
        Some(match bare {
            "eq" => Operator::Eq,
            "neq" | "ne" => Operator::Neq,
            "in" => Operator::In,
            "notIn" | "nin" => Operator::NotIn,
            "gt" => Operator::Gt,
            "lt" => Operator::Lt,
            "gte" => Operator::Gte,
            "lte" => Operator::Lte,
            "contains" => Operator::Contains,
            "startsWith" => Operator::StartsWith,
            "endsWith" => Operator::EndsWith,
            "regex" => Operator::Regex,
            "exists" => Operator::Exists,
            "notExists" => Operator::NotExists,
            _ => return None,
        })
    }

    /// The canonical name, with `$`.
    pub fn name(self) -> &'static str {
        match self {
            Operator::Eq => "$eq",
            Operator::Neq => "$neq",
            Operator::In => "$in",
            Operator::NotIn => "$notIn",
            Operator::Gt => "$gt",
            Operator::Lt => "$lt",
            Operator::Gte => "$gte",
            Operator::Lte => "$lte",
            Operator::Contains => "$contains",
            Operator::StartsWith => "$startsWith",
            Operator::EndsWith => "$endsWith",
            Operator::Regex => "$regex",
            Operator::Exists => "$exists",
            Operator::NotExists => "$notExists",
        }
    }
}

/// Which top-level field of a view a path starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Root {
    Id,
    Title,
    Model,
    Meta,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Segment {
    key: String,
    index: Option<usize>,
}

/// A parsed field path, resolved by walking references (no allocation).
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldPath {
    raw: String,
    root: Root,
    segments: Vec<Segment>,
}

impl FieldPath {
    fn parse(raw: &str) -> Result<FieldPath, String> {
        if raw.is_empty() {
            return Err("empty path".to_string());
        }
        let mut parts = raw.split('.');
        let first = parts.next().unwrap_or_default();
        let (root, rest): (Root, Vec<&str>) = match first {
            "id" => (Root::Id, parts.collect()),
            "title" => (Root::Title, parts.collect()),
            "model" => (Root::Model, parts.collect()),
            "meta" => (Root::Meta, parts.collect()),
            _ => (Root::Meta, raw.split('.').collect()),
        };
        if first.is_empty() || rest.iter().any(|s| s.is_empty()) {
            return Err(format!("path \"{raw}\" has an empty segment"));
        }
        let segments = rest
            .into_iter()
            .map(|s| Segment {
                key: s.to_string(),
                index: segment_index(s),
            })
            .collect();
        Ok(FieldPath {
            raw: raw.to_string(),
            root,
            segments,
        })
    }

    /// The value at this path, `None` when missing (absent or `null`).
    #[inline]
    fn resolve<'v, D: Doc + ?Sized>(&self, doc: &'v D) -> Option<&'v Value> {
        self.resolve_in(doc, doc.meta())
    }

    /// [`resolve`](Self::resolve) with the document's metadata already found (shared by all
    /// the conditions evaluated on one document).
    #[inline]
    fn resolve_in<'v, D: Doc + ?Sized>(&self, doc: &'v D, meta: D::Meta<'v>) -> Option<&'v Value> {
        let (mut cur, rest) = match self.root {
            Root::Meta => match self.segments.split_first() {
                Some((first, rest)) => (D::meta_field(meta, &first.key)?, rest),
                None => (D::meta_value(meta)?, &[][..]),
            },
            Root::Id => (doc.id()?, &self.segments[..]),
            Root::Title => (doc.title()?, &self.segments[..]),
            Root::Model => (doc.model()?, &self.segments[..]),
        };
        for seg in rest {
            cur = match cur {
                Value::Object(map) => lookup(map, &seg.key)?,
                Value::Array(items) => items.get(seg.index?)?,
                _ => return None,
            };
        }
        if cur.is_null() { None } else { Some(cur) }
    }
}

/// What queries read of a document: the view's own fields and its metadata. Implemented by
/// JSON views `{id, title, model, meta}` and by the document index's entries, which keep no
/// JSON view (scanning thousands of them must not chase a map per field).
pub trait Doc {
    /// Where metadata fields are looked up, found once per document and shared by all the
    /// conditions tested on it (a view's `meta` value; an index entry itself).
    type Meta<'a>: Copy
    where
        Self: 'a;

    /// The view's `id`.
    fn id(&self) -> Option<&Value>;
    /// The view's `title`.
    fn title(&self) -> Option<&Value>;
    /// The view's `model`.
    fn model(&self) -> Option<&Value>;
    /// The metadata, for [`meta_field`](Self::meta_field) and
    /// [`meta_value`](Self::meta_value).
    fn meta(&self) -> Self::Meta<'_>;
    /// One top-level metadata field (`meta.<key>`); a whole-number key also indexes a metadata
    /// array.
    fn meta_field<'a>(meta: Self::Meta<'a>, key: &str) -> Option<&'a Value>;
    /// The whole metadata (the path `meta` alone, rarely asked for).
    fn meta_value<'a>(meta: Self::Meta<'a>) -> Option<&'a Value>;
}

impl Doc for Value {
    type Meta<'a> = Option<&'a Value>;

    #[inline]
    fn id(&self) -> Option<&Value> {
        field(self, "id")
    }

    #[inline]
    fn title(&self) -> Option<&Value> {
        field(self, "title")
    }

    #[inline]
    fn model(&self) -> Option<&Value> {
        field(self, "model")
    }

    #[inline]
    fn meta(&self) -> Option<&Value> {
        field(self, "meta")
    }

    #[inline]
    fn meta_field<'a>(meta: Self::Meta<'a>, key: &str) -> Option<&'a Value> {
        match meta? {
            Value::Object(map) => lookup(map, key),
            Value::Array(items) => items.get(segment_index(key)?),
            _ => None,
        }
    }

    #[inline]
    fn meta_value<'a>(meta: Self::Meta<'a>) -> Option<&'a Value> {
        meta
    }
}

/// A path segment as an array index: a whole number.
fn segment_index(s: &str) -> Option<usize> {
    if s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse().ok()
    } else {
        None
    }
}

/// The precompiled test of a condition.
#[derive(Debug, Clone)]
enum Test {
    Eq(Value),
    Neq(Value),
    In { list: Vec<Value>, null: bool },
    NotIn { list: Vec<Value>, null: bool },
    Cmp(Operator, Value),
    Contains(Value),
    StartsWith(String),
    EndsWith(String),
    Regex(Regex),
    Exists(bool),
}

/// One `where` condition: a path, an operator and a value, checked and precompiled.
#[derive(Debug, Clone)]
pub struct Condition {
    path: FieldPath,
    operator: Operator,
    value: Value,
    test: Test,
}

impl Condition {
    /// Builds a condition. For `$exists`/`$notExists` the value must be a boolean. Errors are
    /// located at `where.<path>`.
    pub fn new(path: &str, operator: Operator, value: Value) -> Result<Condition, QueryError> {
        let field = format!("where.{path}");
        let path = FieldPath::parse(path).map_err(|m| QueryError::new(&field, m))?;
        let op = operator.name();
        let test = match operator {
            Operator::Eq if value.is_null() => Test::Exists(false),
            Operator::Neq if value.is_null() => Test::Exists(true),
            Operator::Eq => Test::Eq(value.clone()),
            Operator::Neq => Test::Neq(value.clone()),
            Operator::In | Operator::NotIn => {
                let Value::Array(items) = &value else {
                    return Err(QueryError::new(
                        field,
                        format!("{op} needs an array of values, got {}", type_name(&value)),
                    ));
                };
                let null = items.iter().any(Value::is_null);
                let list = items.iter().filter(|v| !v.is_null()).cloned().collect();
                if operator == Operator::In {
                    Test::In { list, null }
                } else {
                    Test::NotIn { list, null }
                }
            }
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => match &value {
                Value::Number(_) | Value::String(_) | Value::Bool(_) => {
                    Test::Cmp(operator, value.clone())
                }
                other => {
                    return Err(QueryError::new(
                        field,
                        format!(
                            "{op} needs a number, string or boolean, got {}",
                            type_name(other)
                        ),
                    ));
                }
            },
            Operator::Contains => Test::Contains(value.clone()),
            Operator::StartsWith | Operator::EndsWith | Operator::Regex => {
                let Value::String(s) = &value else {
                    return Err(QueryError::new(
                        field,
                        format!("{op} needs a string, got {}", type_name(&value)),
                    ));
                };
                match operator {
                    Operator::StartsWith => Test::StartsWith(s.clone()),
                    Operator::EndsWith => Test::EndsWith(s.clone()),
                    _ => {
                        let re = RegexBuilder::new(s)
                            .size_limit(REGEX_SIZE_LIMIT)
                            .dfa_size_limit(REGEX_SIZE_LIMIT)
                            .build()
                            .map_err(|e| {
                                QueryError::new(&field, format!("invalid $regex {s:?}: {e}"))
                            })?;
                        Test::Regex(re)
                    }
                }
            }
            Operator::Exists | Operator::NotExists => {
                // No value (or null) means `true`: `{path, operator: "notExists"}`.
                let b = match value {
                    Value::Null => Value::Bool(true),
                    ref v => v.clone(),
                };
                let Value::Bool(b) = b else {
                    return Err(QueryError::new(
                        field,
                        format!("{op} needs true or false, got {}", type_name(&value)),
                    ));
                };
                Test::Exists(b == (operator == Operator::Exists))
            }
        };
        Ok(Condition {
            path,
            operator,
            value,
            test,
        })
    }

    /// The path as written (`status`, `meta.status`, …).
    pub fn path(&self) -> &str {
        &self.path.raw
    }

    pub fn operator(&self) -> Operator {
        self.operator
    }

    pub fn value(&self) -> &Value {
        &self.value
    }

    /// Whether `doc` satisfies this condition.
    #[inline]
    pub fn matches<D: Doc + ?Sized>(&self, doc: &D) -> bool {
        self.eval(self.path.resolve(doc))
    }

    /// The test on the resolved field (`None` = missing).
    #[inline]
    fn eval(&self, field: Option<&Value>) -> bool {
        match &self.test {
            Test::Exists(want) => field.is_some() == *want,
            Test::Eq(x) => field.is_some_and(|v| equals_or_has(v, x)),
            Test::Neq(x) => !field.is_some_and(|v| equals_or_has(v, x)),
            Test::In { list, null } => match field {
                None => *null,
                Some(v) => in_list(v, list),
            },
            Test::NotIn { list, null } => match field {
                None => !*null,
                Some(v) => !in_list(v, list),
            },
            Test::Cmp(op, x) => field.is_some_and(|v| match v {
                Value::Array(items) => items.iter().any(|e| compare_ok(*op, e, x)),
                _ => compare_ok(*op, v, x),
            }),
            Test::Contains(x) => match field {
                Some(Value::String(s)) => x.as_str().is_some_and(|x| s.contains(x)),
                Some(Value::Array(items)) => items.iter().any(|e| values_equal(e, x)),
                _ => false,
            },
            Test::StartsWith(p) => any_str(field, |s| s.starts_with(p.as_str())),
            Test::EndsWith(p) => any_str(field, |s| s.ends_with(p.as_str())),
            Test::Regex(re) => any_str(field, |s| re.is_match(s)),
        }
    }
}

/// One sort key: a path and a direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKey {
    path: FieldPath,
    descending: bool,
}

impl SortKey {
    /// Errors are located at `sort`.
    pub fn new(path: &str, descending: bool) -> Result<SortKey, QueryError> {
        let path = FieldPath::parse(path).map_err(|m| QueryError::new("sort", m))?;
        Ok(SortKey { path, descending })
    }

    /// The path as written.
    pub fn path(&self) -> &str {
        &self.path.raw
    }

    pub fn descending(&self) -> bool {
        self.descending
    }
}

/// What the query returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Method {
    #[default]
    FetchAll,
    First,
    Last,
    Count,
}

impl Method {
    /// `fetchAll` (or `all`), `first`, `last`, `count`, ignoring ASCII case.
    pub fn parse(name: &str) -> Option<Method> {
        let m = |s: &str| name.eq_ignore_ascii_case(s);
        if m("fetchAll") || m("all") {
            Some(Method::FetchAll)
        } else if m("first") {
            Some(Method::First)
        } else if m("last") {
            Some(Method::Last)
        } else if m("count") {
            Some(Method::Count)
        } else {
            None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Method::FetchAll => "fetchAll",
            Method::First => "first",
            Method::Last => "last",
            Method::Count => "count",
        }
    }
}

/// A parsed query.
#[derive(Debug, Clone, Default)]
pub struct QuerySpec {
    pub model: Option<String>,
    pub conditions: Vec<Condition>,
    pub sort: Vec<SortKey>,
    pub limit: Option<usize>,
    pub offset: usize,
    pub method: Method,
}

impl QuerySpec {
    /// Parses the `query` tool input (`model`, `where`, `sort`, `limit`, `offset`, `method`;
    /// other keys such as `select` are ignored).
    pub fn from_json(input: &Value) -> Result<QuerySpec, QueryError> {
        let Value::Object(obj) = input else {
            return Err(QueryError::new(
                "query",
                format!(
                    "expected an object with model, where, sort, limit, offset, method; got {}",
                    type_name(input)
                ),
            ));
        };
        let model = match obj.get("model") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(QueryError::new(
                    "model",
                    format!("expected a model name (string), got {}", type_name(other)),
                ));
            }
        };
        let conditions = match obj.get("where") {
            None | Some(Value::Null) => Vec::new(),
            Some(w) => parse_where(w)?,
        };
        let sort = match obj.get("sort") {
            None | Some(Value::Null) => Vec::new(),
            Some(s) => parse_sort(s)?,
        };
        let (limit, limit_method) = parse_limit(obj.get("limit"))?;
        let offset = match obj.get("offset") {
            None | Some(Value::Null) => 0,
            Some(v) => parse_whole(v).ok_or_else(|| {
                QueryError::new(
                    "offset",
                    format!("expected a whole number ≥ 0, got {}", describe(v)),
                )
            })?,
        };
        let method = match obj.get("method") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(Method::parse(s).ok_or_else(|| {
                QueryError::new(
                    "method",
                    format!("unknown method {s:?} (one of fetchAll, first, last, count)"),
                )
            })?),
            Some(other) => {
                return Err(QueryError::new(
                    "method",
                    format!(
                        "expected one of \"fetchAll\", \"first\", \"last\", \"count\", got {}",
                        type_name(other)
                    ),
                ));
            }
        };
        let method = match (method, limit_method) {
            (Some(m), Some(l)) if m != l => {
                return Err(QueryError::new(
                    "limit",
                    format!(
                        "\"{}\" conflicts with method \"{}\"; give a number as limit",
                        l.name(),
                        m.name()
                    ),
                ));
            }
            (Some(m), _) | (None, Some(m)) => m,
            (None, None) => Method::FetchAll,
        };
        Ok(QuerySpec {
            model,
            conditions,
            sort,
            limit,
            offset,
            method,
        })
    }
}

/// The result of [`run`]: references to the documents given (JSON views by default).
#[derive(Debug, Clone, PartialEq)]
pub enum QueryOutcome<'a, D: ?Sized = Value> {
    /// `method: count`: the number of matching views.
    Count(usize),
    /// The selected views, in order (0 or 1 for `first`/`last`), and how many matched before
    /// `offset`/`limit`.
    Docs {
        docs: Vec<&'a D>,
        total_matched: usize,
    },
}

impl<'a, D: ?Sized> QueryOutcome<'a, D> {
    /// How many views matched the model and conditions (before paging).
    pub fn total_matched(&self) -> usize {
        match self {
            QueryOutcome::Count(n) => *n,
            QueryOutcome::Docs { total_matched, .. } => *total_matched,
        }
    }

    /// The selected views (empty for `Count`).
    pub fn docs(&self) -> &[&'a D] {
        match self {
            QueryOutcome::Count(_) => &[],
            QueryOutcome::Docs { docs, .. } => docs,
        }
    }
}

/// Whether `doc` satisfies every condition (AND; an empty list matches everything).
#[inline]
pub fn matches<D: Doc + ?Sized>(doc: &D, conds: &[Condition]) -> bool {
    let meta = doc.meta();
    conds.iter().all(|c| c.eval(c.path.resolve_in(doc, meta)))
}

/// Runs a query over views given in docid order: model filter, conditions, sort, paging,
/// method.
pub fn run<'a, D: Doc + ?Sized>(
    docs: impl IntoIterator<Item = &'a D>,
    spec: &QuerySpec,
) -> QueryOutcome<'a, D> {
    let model = spec.model.as_deref();
    // One test per document (model, then conditions): a second filter stage costs a call per
    // document.
    let passes = |d: &&'a D| {
        model.is_none_or(|m| {
            d.model()
                .and_then(Value::as_str)
                .is_some_and(|dm| eq_ignore_case(dm, m))
        }) && matches(*d, &spec.conditions)
    };
    order_and_page(docs.into_iter().filter(passes), spec)
}

/// [`run`] over documents already filtered by `spec.model` (the document index does it by
/// comparing model numbers): conditions, sort, paging, method.
pub fn run_of_model<'a, D: Doc + ?Sized>(
    docs: impl IntoIterator<Item = &'a D>,
    spec: &QuerySpec,
) -> QueryOutcome<'a, D> {
    order_and_page(
        docs.into_iter().filter(|d| matches(*d, &spec.conditions)),
        spec,
    )
}

/// Sort, paging and method over the matches.
fn order_and_page<'a, D: Doc + ?Sized>(
    iter: impl Iterator<Item = &'a D>,
    spec: &QuerySpec,
) -> QueryOutcome<'a, D> {
    if spec.method == Method::Count {
        return QueryOutcome::Count(iter.count());
    }
    // The page of `total` matches.
    let page = |total: usize| {
        let start = spec.offset.min(total);
        let end = spec
            .limit
            .map_or(total, |l| start.saturating_add(l).min(total));
        start..end
    };
    let (mut docs, total) = if spec.sort.is_empty() {
        // Input order: keep only the page and count the rest (no list of every match).
        let wanted = page(usize::MAX);
        let mut docs = Vec::new();
        let mut total = 0;
        for d in iter {
            if wanted.contains(&total) {
                docs.push(d);
            }
            total += 1;
        }
        (docs, total)
    } else {
        let mut matched = Vec::with_capacity(iter.size_hint().1.unwrap_or(0));
        matched.extend(iter);
        let total = matched.len();
        let page = page(total);
        if total > 1 {
            matched = sorted(matched, &spec.sort, page.end);
        }
        matched.truncate(page.end);
        matched.drain(..page.start);
        (matched, total)
    };
    match spec.method {
        Method::First => docs.truncate(1),
        Method::Last => {
            let last = docs.pop();
            docs = last.into_iter().collect();
        }
        _ => {}
    }
    QueryOutcome::Docs {
        docs,
        total_matched: total,
    }
}

/// The first `end` of `matched` in sort order (stable: ties keep the input order). Only what
/// the page needs is ordered: a page of 20 out of thousands of matches is selected in linear
/// time, then sorted.
fn sorted<'a, D: Doc + ?Sized>(matched: Vec<&'a D>, keys: &[SortKey], end: usize) -> Vec<&'a D> {
    let Some((first, rest)) = keys.split_first() else {
        return matched;
    };
    // Decorate: the first key inline in each entry, the other keys in a flat table.
    let mut entries: Vec<(SortVal<'a>, usize)> = matched
        .iter()
        .enumerate()
        .map(|(i, v)| (SortVal::of(first.path.resolve(*v)), i))
        .collect();
    let others: Vec<SortVal<'a>> = matched
        .iter()
        .flat_map(|v| {
            rest.iter()
                .map(move |key| SortVal::of(key.path.resolve(*v)))
        })
        .collect();
    let r = rest.len();
    // The input position breaks ties, so the order is total and the unstable sort and
    // selection below give exactly the stable order.
    let cmp = |(a, i): &(SortVal<'a>, usize), (b, j): &(SortVal<'a>, usize)| {
        a.cmp_directed(b, first.descending)
            .then_with(|| {
                rest.iter()
                    .enumerate()
                    .map(|(s, key)| {
                        others[i * r + s].cmp_directed(&others[j * r + s], key.descending)
                    })
                    .find(|o| o.is_ne())
                    .unwrap_or(Ordering::Equal)
            })
            .then(i.cmp(j))
    };
    if end == 0 {
        return Vec::new();
    }
    if end < entries.len() {
        entries.select_nth_unstable_by(end - 1, cmp);
        entries.truncate(end);
    }
    entries.sort_unstable_by(cmp);
    entries.into_iter().map(|(_, i)| matched[i]).collect()
}

/// A sort value decorated so that most comparisons need no pointer chasing: numbers carry
/// their `f64`, strings their first 16 bytes (big-endian, zero-padded); the full value is
/// compared only on a tie.
#[derive(Clone, Copy)]
enum SortVal<'v> {
    Num(f64, &'v Number),
    Str(u128, &'v str),
    Bool(bool),
    Other(&'v Value),
    Missing,
}

impl<'v> SortVal<'v> {
    fn of(v: Option<&'v Value>) -> SortVal<'v> {
        match v {
            None | Some(Value::Null) => SortVal::Missing,
            Some(Value::Number(n)) => SortVal::Num(n.as_f64().unwrap_or(0.0), n),
            Some(Value::String(s)) => {
                let mut buf = [0u8; 16];
                let n = s.len().min(16);
                buf[..n].copy_from_slice(&s.as_bytes()[..n]);
                SortVal::Str(u128::from_be_bytes(buf), s)
            }
            Some(Value::Bool(b)) => SortVal::Bool(*b),
            Some(other) => SortVal::Other(other),
        }
    }

    fn rank(&self) -> u8 {
        match self {
            SortVal::Num(..) => 0,
            SortVal::Str(..) => 1,
            SortVal::Bool(_) => 2,
            SortVal::Other(v) => type_rank(v),
            SortVal::Missing => 6,
        }
    }

    /// Missing values last whatever the direction; present values in [`total_cmp`] order,
    /// reversed when descending.
    fn cmp_directed(&self, other: &SortVal<'v>, descending: bool) -> Ordering {
        let o = match (self, other) {
            (SortVal::Missing, SortVal::Missing) => return Ordering::Equal,
            (SortVal::Missing, _) => return Ordering::Greater,
            (_, SortVal::Missing) => return Ordering::Less,
            // f64 order agrees with the exact order when the f64s differ.
            (SortVal::Num(x, p), SortVal::Num(y, q)) => match x.partial_cmp(y) {
                Some(o) if o.is_ne() => o,
                _ => num_cmp(p, q),
            },
            // Prefix order agrees with byte order when the prefixes differ.
            (SortVal::Str(x, p), SortVal::Str(y, q)) => x.cmp(y).then_with(|| p.cmp(q)),
            (SortVal::Bool(x), SortVal::Bool(y)) => x.cmp(y),
            (SortVal::Other(x), SortVal::Other(y)) => total_cmp(x, y),
            _ => self.rank().cmp(&other.rank()),
        };
        if descending { o.reverse() } else { o }
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing helpers
// ---------------------------------------------------------------------------------------------

fn parse_where(w: &Value) -> Result<Vec<Condition>, QueryError> {
    let mut out = Vec::new();
    match w {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                parse_array_condition(i, item, &mut out)?;
            }
        }
        Value::Object(map) => parse_where_object(map, &mut out)?,
        other => {
            return Err(QueryError::new(
                "where",
                format!(
                    "expected an array of {{path, operator, value}} or an object of \
                     path: value, got {}",
                    type_name(other)
                ),
            ));
        }
    }
    Ok(out)
}

fn parse_array_condition(
    i: usize,
    item: &Value,
    out: &mut Vec<Condition>,
) -> Result<(), QueryError> {
    let at = format!("where[{i}]");
    let Value::Object(map) = item else {
        return Err(QueryError::new(
            at,
            format!(
                "expected a condition {{path, operator, value}}, got {}",
                type_name(item)
            ),
        ));
    };
    if !["path", "operator", "value"]
        .iter()
        .any(|k| map.contains_key(*k))
    {
        return parse_where_object(map, out);
    }
    if let Some(key) = map
        .keys()
        .find(|k| !matches!(k.as_str(), "path" | "operator" | "value"))
    {
        return Err(QueryError::new(
            at,
            format!("unknown key {key:?} in condition (expected path, operator, value)"),
        ));
    }
    let path = match map.get("path") {
        Some(Value::String(p)) => p.as_str(),
        Some(other) => {
            return Err(QueryError::new(
                at,
                format!("\"path\" must be a string, got {}", type_name(other)),
            ));
        }
        None => return Err(QueryError::new(at, "condition has no \"path\"")),
    };
    let field = format!("where.{path}");
    let operator = match map.get("operator") {
        None | Some(Value::Null) => Operator::Eq,
        Some(Value::String(name)) => {
            Operator::parse(name).ok_or_else(|| unknown_op(&field, name))?
        }
        Some(other) => {
            return Err(QueryError::new(
                field,
                format!("\"operator\" must be a string, got {}", type_name(other)),
            ));
        }
    };
    let value = match (map.get("value"), operator) {
        (Some(v), _) => v.clone(),
        (None, Operator::Exists | Operator::NotExists) => Value::Bool(true),
        (None, op) => {
            return Err(QueryError::new(
                field,
                format!("condition with {} has no \"value\"", op.name()),
            ));
        }
    };
    out.push(Condition::new(path, operator, value)?);
    Ok(())
}

fn parse_where_object(
    map: &Map<String, Value>,
    out: &mut Vec<Condition>,
) -> Result<(), QueryError> {
    for (path, v) in map {
        let field = format!("where.{path}");
        if path.starts_with('$') {
            return Err(QueryError::new(
                field,
                "logical operators ($and, $or, …) are not supported; \
                 the conditions of `where` are always ANDed",
            ));
        }
        match v {
            Value::Array(_) => out.push(Condition::new(path, Operator::In, v.clone())?),
            Value::Object(ops) if ops.keys().any(|k| k.starts_with('$')) => {
                if let Some(plain) = ops.keys().find(|k| !k.starts_with('$')) {
                    return Err(QueryError::new(
                        field,
                        format!(
                            "operator object mixes operators and the plain key {plain:?} \
                             (use {{\"$eq\": {{…}}}} to compare with an object)"
                        ),
                    ));
                }
                for (name, value) in ops {
                    let op = Operator::parse(name).ok_or_else(|| unknown_op(&field, name))?;
                    out.push(Condition::new(path, op, value.clone())?);
                }
            }
            _ => out.push(Condition::new(path, Operator::Eq, v.clone())?),
        }
    }
    Ok(())
}

fn unknown_op(field: &str, name: &str) -> QueryError {
    QueryError::new(
        field,
        format!("unknown operator {name:?} (one of {OPERATOR_LIST})"),
    )
}

fn parse_sort(s: &Value) -> Result<Vec<SortKey>, QueryError> {
    match s {
        Value::String(spec) => Ok(vec![sort_from_str("sort", spec)?]),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let at = format!("sort[{i}]");
                match item {
                    Value::String(spec) => sort_from_str(&at, spec),
                    Value::Object(map) => sort_from_path_object(&at, map),
                    other => Err(QueryError::new(
                        at,
                        format!(
                            "expected \"path\", \"-path\" or {{path, direction}}, got {}",
                            type_name(other)
                        ),
                    )),
                }
            })
            .collect(),
        Value::Object(map) => {
            // A single {path, direction} object, recognised by a "path" key whose value is not
            // a direction.
            if map.get("path").is_some_and(|p| {
                p.as_str()
                    .is_some_and(|p| parse_direction(&Value::from(p)).is_none())
            }) {
                return Ok(vec![sort_from_path_object("sort", map)?]);
            }
            map.iter()
                .map(|(path, dir)| {
                    let at = format!("sort.{path}");
                    let descending = parse_direction(dir).ok_or_else(|| bad_direction(&at, dir))?;
                    let path = FieldPath::parse(path).map_err(|m| QueryError::new(&at, m))?;
                    Ok(SortKey { path, descending })
                })
                .collect()
        }
        other => Err(QueryError::new(
            "sort",
            format!(
                "expected \"path\", \"-path\", an array of those or of {{path, direction}}, or \
                 an object of path: \"asc\"|\"desc\"; got {}",
                type_name(other)
            ),
        )),
    }
}

fn sort_from_str(at: &str, spec: &str) -> Result<SortKey, QueryError> {
    let spec = spec.trim();
    let (path, descending) = if let Some(p) = spec.strip_prefix('-') {
        (p, true)
    } else if let Some(p) = spec.strip_prefix('+') {
        (p, false)
    } else {
        (spec, false)
    };
    let path = FieldPath::parse(path).map_err(|m| QueryError::new(at, m))?;
    Ok(SortKey { path, descending })
}

fn sort_from_path_object(at: &str, map: &Map<String, Value>) -> Result<SortKey, QueryError> {
    if let Some(key) = map
        .keys()
        .find(|k| !matches!(k.as_str(), "path" | "direction"))
    {
        return Err(QueryError::new(
            at,
            format!("unknown key {key:?} in sort key (expected path, direction)"),
        ));
    }
    let path = match map.get("path") {
        Some(Value::String(p)) => p,
        Some(other) => {
            return Err(QueryError::new(
                at,
                format!("\"path\" must be a string, got {}", type_name(other)),
            ));
        }
        None => return Err(QueryError::new(at, "sort key has no \"path\"")),
    };
    let descending = match map.get("direction") {
        None | Some(Value::Null) => false,
        Some(d) => parse_direction(d).ok_or_else(|| bad_direction(at, d))?,
    };
    let path = FieldPath::parse(path).map_err(|m| QueryError::new(at, m))?;
    Ok(SortKey { path, descending })
}

/// `Some(true)` for descending.
fn parse_direction(d: &Value) -> Option<bool> {
    match d {
        Value::String(s) => {
            let s = s.trim();
            if s.eq_ignore_ascii_case("asc") || s.eq_ignore_ascii_case("ascending") {
                Some(false)
            } else if s.eq_ignore_ascii_case("desc") || s.eq_ignore_ascii_case("descending") {
                Some(true)
            } else {
                None
            }
        }
        Value::Number(n) => match n.as_f64() {
            Some(1.0) => Some(false),
            Some(-1.0) => Some(true),
            _ => None,
        },
        _ => None,
    }
}

fn bad_direction(at: &str, d: &Value) -> QueryError {
    QueryError::new(
        at,
        format!(
            "direction must be \"asc\", \"desc\", 1 or -1, got {}",
            describe(d)
        ),
    )
}

fn parse_limit(v: Option<&Value>) -> Result<(Option<usize>, Option<Method>), QueryError> {
    let bad = |v: &Value| {
        QueryError::new(
            "limit",
            format!(
                "expected a whole number ≥ 0 or one of \"all\", \"first\", \"last\", \"count\"; \
                 got {}",
                describe(v)
            ),
        )
    };
    match v {
        None | Some(Value::Null) => Ok((None, None)),
        Some(text @ Value::String(s)) if !s.trim().is_empty() && !is_digits(s.trim()) => {
            let m = Method::parse(s.trim()).ok_or_else(|| bad(text))?;
            Ok((None, Some(m)))
        }
        Some(other) => Ok((Some(parse_whole(other).ok_or_else(|| bad(other))?), None)),
    }
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// A whole number ≥ 0: a JSON integer, an integral float, or a string of digits. Saturates at
/// `usize::MAX`.
fn parse_whole(v: &Value) -> Option<usize> {
    match v {
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Some(usize::try_from(u).unwrap_or(usize::MAX))
            } else if n.is_i64() {
                None
            } else {
                let f = n.as_f64()?;
                if f < 0.0 || f.fract() != 0.0 {
                    None
                } else if f >= usize::MAX as f64 {
                    Some(usize::MAX)
                } else {
                    Some(f as usize)
                }
            }
        }
        Value::String(s) if is_digits(s.trim()) => {
            Some(s.trim().parse::<usize>().unwrap_or(usize::MAX))
        }
        _ => None,
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A short rendering of a scalar value for messages, or its type.
fn describe(v: &Value) -> String {
    match v {
        Value::Number(_) | Value::Bool(_) | Value::Null => v.to_string(),
        Value::String(s) if s.chars().count() <= 40 => format!("{s:?}"),
        _ => type_name(v).to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Evaluation helpers (no allocation)
// ---------------------------------------------------------------------------------------------

/// Maps up to this size are searched by a linear scan (see [`lookup`]).
const LINEAR_SCAN_MAX: usize = 32;

/// `map[key]`. For small maps, a linear scan that compares key lengths first: a `String`'s
/// length sits in the map node while its bytes are elsewhere on the heap, so only keys of the
/// right length are dereferenced. `BTreeMap::get` dereferences every key it compares, and those
/// cache misses dominate the cost of matching thousands of views.
#[inline]
fn lookup<'v>(map: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
    if map.len() <= LINEAR_SCAN_MAX {
        map.iter()
            .find(|(k, _)| k.len() == key.len() && k.as_str() == key)
            .map(|(_, v)| v)
    } else {
        map.get(key)
    }
}

/// `value[key]` when `value` is an object.
#[inline]
fn field<'v>(value: &'v Value, key: &str) -> Option<&'v Value> {
    match value {
        Value::Object(map) => lookup(map, key),
        _ => None,
    }
}

/// Unicode case-insensitive equality without allocating.
fn eq_ignore_case(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
        || (!a.is_ascii() || !b.is_ascii())
            && a.chars()
                .flat_map(char::to_lowercase)
                .eq(b.chars().flat_map(char::to_lowercase))
}

fn num_cmp(a: &Number, b: &Number) -> Ordering {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return x.cmp(&y);
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        return x.cmp(&y);
    }
    if !a.is_f64() && !b.is_f64() {
        // Both integers, one above i64::MAX and the other negative.
        return if a.is_u64() {
            Ordering::Greater
        } else {
            Ordering::Less
        };
    }
    let (x, y) = (a.as_f64().unwrap_or(0.0), b.as_f64().unwrap_or(0.0));
    x.partial_cmp(&y).unwrap_or(Ordering::Equal)
}

/// Deep equality where numbers compare by value (`1 == 1.0`).
fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => num_cmp(x, y) == Ordering::Equal,
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Null, Value::Null) => true,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| values_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, p)| y.get(k).is_some_and(|q| values_equal(p, q)))
        }
        _ => false,
    }
}

/// The field equals `x`, or is an array with an element equal to `x`.
#[inline]
fn equals_or_has(field: &Value, x: &Value) -> bool {
    values_equal(field, x)
        || matches!(field, Value::Array(items) if items.iter().any(|e| values_equal(e, x)))
}

#[inline]
fn in_list(field: &Value, list: &[Value]) -> bool {
    list.iter().any(|x| equals_or_has(field, x))
}

/// Same-type comparison of scalars; `None` for mismatched or non-scalar types.
fn scalar_cmp(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => Some(num_cmp(x, y)),
        (Value::String(x), Value::String(y)) => Some(x.as_str().cmp(y.as_str())),
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

#[inline]
fn compare_ok(op: Operator, field: &Value, x: &Value) -> bool {
    let Some(ord) = scalar_cmp(field, x) else {
        return false;
    };
    match op {
        Operator::Gt => ord == Ordering::Greater,
        Operator::Gte => ord != Ordering::Less,
        Operator::Lt => ord == Ordering::Less,
        Operator::Lte => ord != Ordering::Greater,
        _ => false,
    }
}

/// `pred` holds for a string field, or for any string element of an array field.
#[inline]
fn any_str(field: Option<&Value>, pred: impl Fn(&str) -> bool) -> bool {
    match field {
        Some(Value::String(s)) => pred(s),
        Some(Value::Array(items)) => items.iter().any(|e| e.as_str().is_some_and(&pred)),
        _ => false,
    }
}

fn type_rank(v: &Value) -> u8 {
    match v {
        Value::Number(_) => 0,
        Value::String(_) => 1,
        Value::Bool(_) => 2,
        Value::Array(_) => 3,
        Value::Object(_) => 4,
        Value::Null => 5,
    }
}

/// The sort order of present values: numbers < strings < booleans < arrays < objects.
fn total_cmp(a: &Value, b: &Value) -> Ordering {
    if let Some(o) = scalar_cmp(a, b) {
        return o;
    }
    match (a, b) {
        (Value::Array(x), Value::Array(y)) => {
            for (p, q) in x.iter().zip(y) {
                let o = total_cmp(p, q);
                if o != Ordering::Equal {
                    return o;
                }
            }
            x.len().cmp(&y.len())
        }
        _ => type_rank(a).cmp(&type_rank(b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn view(id: u64, title: Option<&str>, meta: Value) -> Value {
        json!({"id": id, "title": title, "model": "Story", "meta": meta})
    }

    fn cond(path: &str, op: &str, value: Value) -> Condition {
        Condition::new(path, Operator::parse(op).unwrap(), value).unwrap()
    }

    /// Whether `meta` (as a view's metadata) satisfies `path op value`.
    fn m(meta: Value, path: &str, op: &str, value: Value) -> bool {
        cond(path, op, value).matches(&view(1, Some("T"), meta))
    }

    fn spec(input: Value) -> QuerySpec {
        QuerySpec::from_json(&input).unwrap()
    }

    fn err(input: Value) -> String {
        QuerySpec::from_json(&input).unwrap_err().to_string()
    }

    fn ids(outcome: &QueryOutcome) -> Vec<u64> {
        outcome
            .docs()
            .iter()
            .map(|v| v["id"].as_u64().unwrap())
            .collect()
    }

    fn corpus() -> Vec<Value> {
        vec![
            view(
                1,
                Some("Alpha"),
                json!({"status": "open", "priority": 2, "tags": ["a", "b"], "due": "2024-03-01"}),
            ),
            view(
                2,
                Some("Beta"),
                json!({"status": "done", "priority": 1, "tags": ["b"], "due": "2024-01-15"}),
            ),
            view(3, None, json!({"status": "open", "priority": 3})),
            view(
                4,
                Some("Delta"),
                json!({"status": "open", "priority": 2, "tags": [], "due": "2023-12-31"}),
            ),
            json!({"id": 5, "title": "Epic", "model": "Epic", "meta": {"status": "open", "priority": 9}}),
        ]
    }

    fn query<'a>(views: &'a [Value], input: Value) -> QueryOutcome<'a> {
        run(views, &spec(input))
    }

    // --- operators on scalars -----------------------------------------------------------------

    #[test]
    fn eq_and_neq_on_scalars() {
        assert!(m(json!({"s": "open"}), "s", "$eq", json!("open")));
        assert!(!m(json!({"s": "open"}), "s", "eq", json!("Open")));
        assert!(m(json!({"n": 1}), "n", "$eq", json!(1.0)));
        assert!(m(json!({"n": 2.5}), "n", "$eq", json!(2.5)));
        assert!(m(json!({"b": true}), "b", "$eq", json!(true)));
        assert!(m(json!({"o": {"x": 1}}), "o", "$eq", json!({"x": 1.0})));
        assert!(!m(
            json!({"o": {"x": 1}}),
            "o",
            "$eq",
            json!({"x": 1, "y": 2})
        ));
        assert!(m(json!({"s": "open"}), "s", "$neq", json!("done")));
        assert!(!m(json!({"s": "open"}), "s", "$neq", json!("open")));
        assert!(!m(json!({"n": 1}), "n", "$ne", json!(1.0)));
    }

    #[test]
    fn in_and_not_in_on_scalars() {
        assert!(m(json!({"s": "a"}), "s", "$in", json!(["a", "b"])));
        assert!(!m(json!({"s": "c"}), "s", "$in", json!(["a", "b"])));
        assert!(m(json!({"n": 2}), "n", "$in", json!([1, 2.0])));
        assert!(m(json!({"s": "c"}), "s", "$notIn", json!(["a", "b"])));
        assert!(!m(json!({"s": "a"}), "s", "$nin", json!(["a", "b"])));
        assert!(!m(json!({"s": "a"}), "s", "$in", json!([])));
        assert!(m(json!({"s": "a"}), "s", "$notIn", json!([])));
    }

    #[test]
    fn comparisons_on_scalars() {
        let n = json!({"n": 5, "f": 2.5, "s": "2024-03-01", "b": true});
        assert!(m(n.clone(), "n", "$gt", json!(4)));
        assert!(m(n.clone(), "n", "$gt", json!(4.5)));
        assert!(!m(n.clone(), "n", "$gt", json!(5)));
        assert!(m(n.clone(), "n", "$gte", json!(5.0)));
        assert!(m(n.clone(), "n", "$lt", json!(6)));
        assert!(!m(n.clone(), "n", "$lt", json!(5)));
        assert!(m(n.clone(), "n", "$lte", json!(5)));
        assert!(m(n.clone(), "f", "$lt", json!(3)));
        assert!(m(n.clone(), "f", "$gt", json!(2)));
        assert!(m(n.clone(), "s", "$gt", json!("2024-02-29")));
        assert!(m(n.clone(), "s", "$lt", json!("2024-12-01")));
        assert!(m(n.clone(), "s", "$gte", json!("2024-03-01")));
        assert!(!m(n.clone(), "s", "$lt", json!("2024-03-01")));
        assert!(m(n.clone(), "b", "$gt", json!(false)));
        assert!(!m(n.clone(), "b", "$lt", json!(true)));
        assert!(m(n, "b", "$lte", json!(true)));
        // large integers keep exact order
        assert!(m(json!({"n": u64::MAX}), "n", "$gt", json!(u64::MAX - 1)));
        assert!(m(json!({"n": -1}), "n", "$lt", json!(u64::MAX)));
    }

    #[test]
    fn string_operators_on_scalars() {
        let s = json!({"s": "Hello world"});
        assert!(m(s.clone(), "s", "$contains", json!("lo wo")));
        assert!(!m(s.clone(), "s", "$contains", json!("hello")));
        assert!(m(s.clone(), "s", "$startsWith", json!("Hello")));
        assert!(!m(s.clone(), "s", "$startsWith", json!("world")));
        assert!(m(s.clone(), "s", "$endsWith", json!("world")));
        assert!(!m(s.clone(), "s", "$endsWith", json!("Hello")));
        assert!(m(s.clone(), "s", "$regex", json!("^H.*d$")));
        assert!(m(s.clone(), "s", "$regex", json!("o w")));
        assert!(!m(s.clone(), "s", "$regex", json!("^world")));
        assert!(m(s, "s", "$regex", json!("(?i)^hello")));
    }

    #[test]
    fn exists_and_not_exists() {
        let s = json!({"s": "x", "z": 0, "e": "", "n": null});
        assert!(m(s.clone(), "s", "$exists", json!(true)));
        assert!(m(s.clone(), "z", "$exists", json!(true)));
        assert!(m(s.clone(), "e", "$exists", json!(true)));
        assert!(!m(s.clone(), "s", "$exists", json!(false)));
        assert!(m(s.clone(), "q", "$exists", json!(false)));
        assert!(
            m(s.clone(), "n", "$exists", json!(false)),
            "null is missing"
        );
        assert!(m(s.clone(), "q", "$notExists", json!(true)));
        assert!(!m(s.clone(), "s", "notExists", json!(true)));
        assert!(m(s, "s", "$notExists", json!(false)));
    }

    // --- operators on arrays ------------------------------------------------------------------

    #[test]
    fn operators_on_arrays() {
        let t = json!({"tags": ["a", "b"], "nums": [1, 5, 9], "dates": ["2024-01-01", "2025-06-01"], "mixed": [1, "x", true]});
        // $eq: whole array or any element
        assert!(m(t.clone(), "tags", "$eq", json!("a")));
        assert!(m(t.clone(), "tags", "$eq", json!(["a", "b"])));
        assert!(!m(t.clone(), "tags", "$eq", json!(["b", "a"])));
        assert!(!m(t.clone(), "tags", "$eq", json!("c")));
        assert!(m(t.clone(), "nums", "$eq", json!(5.0)));
        // $neq: negation
        assert!(!m(t.clone(), "tags", "$neq", json!("a")));
        assert!(!m(t.clone(), "tags", "$neq", json!(["a", "b"])));
        assert!(m(t.clone(), "tags", "$neq", json!("c")));
        // $in / $notIn
        assert!(m(t.clone(), "tags", "$in", json!(["x", "b"])));
        assert!(m(t.clone(), "tags", "$in", json!([["a", "b"]])));
        assert!(!m(t.clone(), "tags", "$in", json!(["x", "y"])));
        assert!(m(t.clone(), "tags", "$notIn", json!(["x", "y"])));
        assert!(!m(t.clone(), "tags", "$notIn", json!(["b"])));
        // $contains: element equality
        assert!(m(t.clone(), "tags", "$contains", json!("a")));
        assert!(!m(t.clone(), "tags", "$contains", json!("ab")));
        assert!(m(t.clone(), "nums", "$contains", json!(9.0)));
        // comparisons: any element
        assert!(m(t.clone(), "nums", "$gt", json!(8)));
        assert!(!m(t.clone(), "nums", "$gt", json!(9)));
        assert!(m(t.clone(), "nums", "$lt", json!(2)));
        assert!(m(t.clone(), "nums", "$gte", json!(9)));
        assert!(m(t.clone(), "nums", "$lte", json!(1)));
        assert!(m(t.clone(), "dates", "$gt", json!("2025-01-01")));
        assert!(m(t.clone(), "mixed", "$gt", json!(0)));
        assert!(m(t.clone(), "mixed", "$gt", json!("w")));
        // string operators: any string element
        assert!(m(t.clone(), "dates", "$startsWith", json!("2025")));
        assert!(m(t.clone(), "dates", "$endsWith", json!("06-01")));
        assert!(m(t.clone(), "dates", "$regex", json!("^2024-")));
        assert!(!m(t.clone(), "nums", "$regex", json!("1")));
        assert!(m(t.clone(), "mixed", "$startsWith", json!("x")));
        // $exists on an empty array: present
        assert!(m(json!({"e": []}), "e", "$exists", json!(true)));
        assert!(!m(json!({"e": []}), "e", "$eq", json!("a")));
        assert!(m(json!({"e": []}), "e", "$eq", json!([])));
        assert!(!m(t, "tags", "$contains", json!(["a"])));
    }

    // --- paths --------------------------------------------------------------------------------

    #[test]
    fn nested_paths_and_array_indexes() {
        let v = view(
            7,
            Some("Nested"),
            json!({"a": {"b": {"c": 42}}, "authors": [{"name": "Ann"}, {"name": "Bob"}],
                   "grid": [[1, 2], [3, 4]], "obj": {"0": "zero"}}),
        );
        let t = |p: &str, op: &str, val: Value| cond(p, op, val).matches(&v);
        assert!(t("meta.a.b.c", "$eq", json!(42)));
        assert!(t("a.b.c", "$eq", json!(42)), "bare dotted name means meta");
        assert!(t("meta.a.b", "$eq", json!({"c": 42})));
        assert!(t("meta.authors.1.name", "$eq", json!("Bob")));
        assert!(t("authors.0.name", "$startsWith", json!("A")));
        assert!(t("meta.grid.1.0", "$eq", json!(3)));
        assert!(
            t("meta.obj.0", "$eq", json!("zero")),
            "numeric key on an object"
        );
        assert!(!t("meta.authors.2.name", "$exists", json!(true)));
        assert!(
            !t("meta.authors.name", "$exists", json!(true)),
            "no fan-out"
        );
        assert!(!t("meta.a.b.c.d", "$exists", json!(true)));
        assert!(!t("meta.a.x.c", "$exists", json!(true)));
        assert!(t("meta", "$exists", json!(true)));
        assert!(t("id", "$eq", json!(7)));
        assert!(t("title", "$eq", json!("Nested")));
        assert!(t("model", "$eq", json!("Story")));
        assert!(!t("title.x", "$exists", json!(true)));
    }

    #[test]
    fn bare_name_shorthand() {
        let views = corpus();
        let a = query(&views, json!({"where": {"status": "done"}}));
        let b = query(&views, json!({"where": {"meta.status": "done"}}));
        assert_eq!(ids(&a), vec![2]);
        assert_eq!(ids(&a), ids(&b));
        assert_eq!(cond("status", "$eq", json!(1)).path(), "status");
        // id/title/model are the view's own fields, not metadata
        let v = view(3, Some("T"), json!({"id": 99, "title": "meta title"}));
        assert!(cond("id", "$eq", json!(3)).matches(&v));
        assert!(cond("meta.id", "$eq", json!(99)).matches(&v));
        assert!(cond("title", "$eq", json!("T")).matches(&v));
        assert!(cond("meta.title", "$eq", json!("meta title")).matches(&v));
    }

    // --- missing fields and type mismatches ---------------------------------------------------

    #[test]
    fn missing_field_for_each_operator() {
        let cases: &[(&str, Value, bool)] = &[
            ("$eq", json!("x"), false),
            ("$neq", json!("x"), true),
            ("$in", json!(["x"]), false),
            ("$notIn", json!(["x"]), true),
            ("$gt", json!(1), false),
            ("$gte", json!(1), false),
            ("$lt", json!(1), false),
            ("$lte", json!(1), false),
            ("$contains", json!("x"), false),
            ("$startsWith", json!(""), false),
            ("$endsWith", json!(""), false),
            ("$regex", json!(".*"), false),
            ("$exists", json!(true), false),
            ("$exists", json!(false), true),
            ("$notExists", json!(true), true),
            ("$notExists", json!(false), false),
        ];
        for (op, val, want) in cases {
            for meta in [json!({}), json!({"gone": null})] {
                assert_eq!(
                    m(meta.clone(), "gone", op, val.clone()),
                    *want,
                    "{op} {val} on {meta}"
                );
            }
        }
        // title null is missing
        let v = view(1, None, json!({}));
        assert!(cond("title", "$exists", json!(false)).matches(&v));
        assert!(!cond("title", "$eq", json!("")).matches(&v));
        // without a meta object at all
        let bare = json!({"id": 1, "model": "Story"});
        assert!(!cond("status", "$eq", json!("x")).matches(&bare));
        assert!(cond("status", "$neq", json!("x")).matches(&bare));
    }

    #[test]
    fn null_values_follow_mongodb() {
        assert!(m(json!({}), "s", "$eq", json!(null)));
        assert!(m(json!({"s": null}), "s", "$eq", json!(null)));
        assert!(!m(json!({"s": "x"}), "s", "$eq", json!(null)));
        assert!(m(json!({"s": "x"}), "s", "$neq", json!(null)));
        assert!(!m(json!({}), "s", "$neq", json!(null)));
        assert!(m(json!({}), "s", "$in", json!([null, "a"])));
        assert!(m(json!({"s": "a"}), "s", "$in", json!([null, "a"])));
        assert!(!m(json!({"s": "b"}), "s", "$in", json!([null, "a"])));
        assert!(!m(json!({}), "s", "$notIn", json!([null, "a"])));
        assert!(m(json!({"s": "b"}), "s", "$notIn", json!([null, "a"])));
    }

    #[test]
    fn type_mismatches_are_false() {
        assert!(!m(json!({"n": 5}), "n", "$eq", json!("5")));
        assert!(m(json!({"n": 5}), "n", "$neq", json!("5")));
        assert!(!m(json!({"n": 5}), "n", "$gt", json!("4")));
        assert!(!m(json!({"n": 5}), "n", "$lt", json!("6")));
        assert!(!m(json!({"s": "5"}), "s", "$gte", json!(1)));
        assert!(!m(json!({"b": true}), "b", "$gt", json!(0)));
        assert!(!m(json!({"b": true}), "b", "$eq", json!(1)));
        assert!(!m(json!({"o": {"a": 1}}), "o", "$gt", json!(0)));
        assert!(!m(json!({"n": 12}), "n", "$contains", json!("1")));
        assert!(!m(json!({"s": "a1"}), "s", "$contains", json!(1)));
        assert!(!m(json!({"n": 12}), "n", "$startsWith", json!("1")));
        assert!(!m(json!({"n": 12}), "n", "$endsWith", json!("2")));
        assert!(!m(json!({"n": 12}), "n", "$regex", json!("1")));
        assert!(!m(json!({"o": {"s": "x"}}), "o", "$regex", json!("x")));
        assert!(!m(json!({"n": 5}), "n", "$in", json!(["5"])));
        assert!(m(json!({"n": 5}), "n", "$notIn", json!(["5"])));
    }

    // --- where forms --------------------------------------------------------------------------

    #[test]
    fn both_where_forms_are_equivalent() {
        let views = corpus();
        let pairs = [
            (
                json!([{"path": "meta.status", "operator": "eq", "value": "open"},
                       {"path": "priority", "operator": "$gte", "value": 2},
                       {"path": "priority", "operator": "lt", "value": 9}]),
                json!({"meta.status": "open", "priority": {"$gte": 2, "$lt": 9}}),
            ),
            (
                json!([{"path": "tags", "operator": "in", "value": ["a", "x"]}]),
                json!({"tags": ["a", "x"]}),
            ),
            (
                json!([{"path": "status", "value": "done"}]),
                json!({"status": {"$eq": "done"}}),
            ),
            (
                json!([{"path": "tags", "operator": "notExists"}]),
                json!({"tags": {"$notExists": true}}),
            ),
            (
                json!([{"path": "tags", "operator": "exists"}, {"path": "due", "operator": "$regex", "value": "^2024"}]),
                json!({"tags": {"$exists": true}, "due": {"$regex": "^2024"}}),
            ),
            (
                json!([{"path": "tags", "operator": "$eq", "value": []}]),
                json!({"tags": {"$eq": []}}),
            ),
        ];
        for (array_form, object_form) in pairs {
            let a = spec(json!({"where": array_form}));
            let o = spec(json!({"where": object_form}));
            let shape = |s: &QuerySpec| {
                let mut v: Vec<(String, Operator, Value)> = s
                    .conditions
                    .iter()
                    .map(|c| (c.path().to_string(), c.operator(), c.value().clone()))
                    .collect();
                v.sort_by(|x, y| (&x.0, x.1.name()).cmp(&(&y.0, y.1.name())));
                v
            };
            assert_eq!(shape(&a), shape(&o), "{array_form} vs {object_form}");
            for v in &views {
                assert_eq!(
                    matches(v, &a.conditions),
                    matches(v, &o.conditions),
                    "{array_form} vs {object_form} on {v}"
                );
            }
        }
        let r = query(
            &views,
            json!({"where": {"status": "open", "priority": {"$gte": 2, "$lt": 9}}}),
        );
        assert_eq!(ids(&r), vec![1, 3, 4]);
        let r = query(&views, json!({"where": {"tags": ["a", "x"]}}));
        assert_eq!(ids(&r), vec![1]);
    }

    #[test]
    fn where_details() {
        let views = corpus();
        // object inside the array form; literal object equality; empty where
        let r = query(
            &views,
            json!({"where": [{"status": "open"}, {"path": "priority", "value": 2}]}),
        );
        assert_eq!(ids(&r), vec![1, 4]);
        let v = view(1, None, json!({"o": {"k": 1}}));
        let s = spec(json!({"where": {"o": {"k": 1}}}));
        assert_eq!(s.conditions[0].operator(), Operator::Eq);
        assert!(matches(&v, &s.conditions));
        assert_eq!(ids(&query(&views, json!({"where": []}))).len(), 5);
        assert_eq!(ids(&query(&views, json!({"where": {}}))).len(), 5);
        assert_eq!(ids(&query(&views, json!({"where": null}))).len(), 5);
        assert!(matches(&v, &[]));
        // operator aliases
        let s = spec(json!({"where": {"status": {"$ne": "x", "$nin": ["y"]}}}));
        let ops: Vec<Operator> = s.conditions.iter().map(Condition::operator).collect();
        assert!(ops.contains(&Operator::Neq) && ops.contains(&Operator::NotIn));
    }

    #[test]
    fn model_filter_is_case_insensitive() {
        let views = corpus();
        assert_eq!(
            ids(&query(&views, json!({"model": "story"}))),
            vec![1, 2, 3, 4]
        );
        assert_eq!(ids(&query(&views, json!({"model": "EPIC"}))), vec![5]);
        assert_eq!(
            ids(&query(&views, json!({"model": "Nope"}))),
            Vec::<u64>::new()
        );
        assert_eq!(ids(&query(&views, json!({"model": null}))).len(), 5);
        assert!(eq_ignore_case("Straße", "STRAßE"));
        assert!(eq_ignore_case("ÉPOPÉE", "épopée"));
        assert!(!eq_ignore_case("Story", "Stories"));
    }

    // --- sort ---------------------------------------------------------------------------------

    #[test]
    fn sort_forms() {
        let views = corpus();
        let by = |s: Value| ids(&query(&views, json!({"model": "Story", "sort": s})));
        assert_eq!(by(json!("meta.priority")), vec![2, 1, 4, 3]);
        assert_eq!(by(json!("-meta.priority")), vec![3, 1, 4, 2]);
        assert_eq!(by(json!("+priority")), vec![2, 1, 4, 3]);
        assert_eq!(by(json!(["-priority", "-id"])), vec![3, 4, 1, 2]);
        assert_eq!(
            by(json!([{"path": "priority", "direction": "desc"}, {"path": "id", "direction": -1}])),
            vec![3, 4, 1, 2]
        );
        assert_eq!(
            by(json!([{"path": "priority"}, {"path": "id", "direction": "DESC"}])),
            vec![2, 4, 1, 3]
        );
        assert_eq!(
            by(json!({"path": "priority", "direction": "desc"})),
            vec![3, 1, 4, 2]
        );
        // object form: keys alphabetical ("id" before "priority")
        assert_eq!(
            by(json!({"priority": "desc", "id": "desc"})),
            vec![4, 3, 2, 1]
        );
        assert_eq!(by(json!({"priority": 1})), vec![2, 1, 4, 3]);
        assert_eq!(by(json!({"priority": -1})), vec![3, 1, 4, 2]);
        assert_eq!(by(json!("title")), vec![1, 2, 4, 3], "null title last");
        assert_eq!(by(json!("-title")), vec![4, 2, 1, 3], "null title last");
        assert_eq!(by(json!("due")), vec![4, 2, 1, 3]);
        assert_eq!(by(json!([])), vec![1, 2, 3, 4]);
    }

    #[test]
    fn sort_missing_last_and_mixed_types() {
        let views = vec![
            view(1, None, json!({"k": "b"})),
            view(2, None, json!({})),
            view(3, None, json!({"k": 2})),
            view(4, None, json!({"k": true})),
            view(5, None, json!({"k": null})),
            view(6, None, json!({"k": 10.5})),
            view(7, None, json!({"k": "a"})),
            view(8, None, json!({"k": [1]})),
            view(9, None, json!({"k": false})),
        ];
        let asc = ids(&query(&views, json!({"sort": "k"})));
        assert_eq!(asc, vec![3, 6, 7, 1, 9, 4, 8, 2, 5]);
        let desc = ids(&query(&views, json!({"sort": "-k"})));
        assert_eq!(desc, vec![8, 4, 9, 1, 7, 6, 3, 2, 5]);
    }

    #[test]
    fn sort_is_stable_and_multi_key() {
        let views: Vec<Value> = (1..=8)
            .map(|i| view(i, None, json!({"g": i % 2, "h": i % 3})))
            .collect();
        let r = ids(&query(&views, json!({"sort": "g"})));
        assert_eq!(r, vec![2, 4, 6, 8, 1, 3, 5, 7]);
        let r = ids(&query(&views, json!({"sort": "-g"})));
        assert_eq!(r, vec![1, 3, 5, 7, 2, 4, 6, 8]);
        let r = ids(&query(&views, json!({"sort": ["g", "-h"]})));
        // g=0: 2(h2) 4(h1) 6(h0) 8(h2) -> 2 8 4 6; g=1: 1(h1) 3(h0) 5(h2) 7(h1) -> 5 1 7 3
        assert_eq!(r, vec![2, 8, 4, 6, 5, 1, 7, 3]);
    }

    #[test]
    fn sorted_pages_are_slices_of_the_full_order() {
        // Only the page is ordered (selection, then a sort of the page): every page must be
        // the same slice of the stable full order, ties included.
        let views: Vec<Value> = (0..60u64)
            .map(|i| view(i, None, json!({"g": (i * 7) % 5, "h": (i * 3) % 4})))
            .chain([
                view(60, None, json!({})),
                view(61, None, json!({"g": null})),
            ])
            .collect();
        for sort in [json!("g"), json!(["-g", "h"]), json!(["h", "-id"])] {
            let full = ids(&query(&views, json!({ "sort": sort })));
            assert_eq!(full.len(), views.len());
            for offset in [0, 1, 7, 30, 59, 61, 62, 70] {
                for limit in [0, 1, 2, 5, 20, 100] {
                    let q = json!({"sort": sort, "offset": offset, "limit": limit});
                    let got = query(&views, q.clone());
                    let want: Vec<u64> = full.iter().copied().skip(offset).take(limit).collect();
                    assert_eq!(ids(&got), want, "{q}");
                    assert_eq!(got.total_matched(), views.len(), "{q}");
                    let first = query(
                        &views,
                        json!({"sort": sort, "offset": offset, "limit": limit, "method": "first"}),
                    );
                    assert_eq!(
                        ids(&first),
                        want.first().copied().into_iter().collect::<Vec<_>>(),
                        "first {q}"
                    );
                    let last = query(
                        &views,
                        json!({"sort": sort, "offset": offset, "limit": limit, "method": "last"}),
                    );
                    assert_eq!(
                        ids(&last),
                        want.last().copied().into_iter().collect::<Vec<_>>(),
                        "last {q}"
                    );
                }
            }
        }
    }

    #[test]
    fn decorated_sort_keys_agree_with_total_order() {
        let long = "x".repeat(40);
        let values = vec![
            json!("2024-03-01T10:00:00Z"),
            json!("2024-03-01T09:00:00Z"),
            json!("2024-03-01"),
            json!("ab"),
            json!("ab\0"),
            json!("ab\0c"),
            json!(""),
            json!(format!("{long}b")),
            json!(format!("{long}a")),
            json!(long),
            json!("é"),
            json!("z"),
            json!(u64::MAX),
            json!(u64::MAX - 1),
            json!(9_007_199_254_740_993u64),
            json!(9_007_199_254_740_992u64),
            json!(9_007_199_254_740_992.0),
            json!(-1),
            json!(-1.5),
            json!(i64::MIN),
            json!(0),
            json!(0.0),
            json!(true),
            json!(false),
            json!([2, "a"]),
            json!([1]),
            json!([1, 0]),
            json!({"k": 1}),
            json!(null),
        ];
        let mut views: Vec<Value> = values
            .iter()
            .enumerate()
            .map(|(i, v)| view(i as u64, None, json!({ "k": v })))
            .collect();
        views.push(view(values.len() as u64, None, json!({})));
        for descending in [false, true] {
            let mut expected: Vec<&Value> = views.iter().collect();
            expected.sort_by(|a, b| {
                match (
                    a["meta"].get("k").filter(|v| !v.is_null()),
                    b["meta"].get("k").filter(|v| !v.is_null()),
                ) {
                    (None, None) => Ordering::Equal,
                    (None, Some(_)) => Ordering::Greater,
                    (Some(_), None) => Ordering::Less,
                    (Some(x), Some(y)) if descending => total_cmp(x, y).reverse(),
                    (Some(x), Some(y)) => total_cmp(x, y),
                }
            });
            let key = if descending { "-k" } else { "k" };
            let got = query(&views, json!({ "sort": key }));
            assert_eq!(got.docs(), expected.as_slice(), "sort {key}");
        }
        // spot checks of the reference order itself
        let pos = |v: Value| values.iter().position(|x| *x == v).unwrap() as u64;
        let asc = ids(&query(&views, json!({"sort": "k"})));
        let at = |id: u64| asc.iter().position(|x| *x == id).unwrap();
        assert!(at(pos(json!(u64::MAX - 1))) < at(pos(json!(u64::MAX))));
        assert!(
            at(pos(json!(9_007_199_254_740_992u64))) < at(pos(json!(9_007_199_254_740_993u64)))
        );
        assert!(at(pos(json!("ab"))) < at(pos(json!("ab\0"))));
        assert!(at(pos(json!("ab\0"))) < at(pos(json!("ab\0c"))));
        assert!(at(pos(json!(format!("{long}a")))) < at(pos(json!(format!("{long}b")))));
        assert!(at(pos(json!(i64::MIN))) < at(pos(json!(-1.5))));
        assert!(at(pos(json!("z"))) < at(pos(json!("é"))), "byte order");
        assert!(at(pos(json!("é"))) < at(pos(json!(false))));
        assert!(at(pos(json!([1, 0]))) < at(pos(json!([2, "a"]))));
        assert!(at(pos(json!([2, "a"]))) < at(pos(json!({"k": 1}))));
        // 0 and 0.0 are equal: input order kept
        assert!(at(pos(json!(0))) < at(pos(json!(0.0))));
    }

    #[test]
    fn lookups_in_large_maps() {
        let mut meta = Map::new();
        for i in 0..100 {
            meta.insert(format!("key{i:03}"), json!(i));
        }
        meta.insert("k".into(), json!({"inner": "x"}));
        let v = view(1, None, Value::Object(meta));
        assert!(cond("key000", "$eq", json!(0)).matches(&v));
        assert!(cond("meta.key099", "$eq", json!(99)).matches(&v));
        assert!(cond("key050", "$gt", json!(49)).matches(&v));
        assert!(cond("k.inner", "$eq", json!("x")).matches(&v));
        assert!(cond("key100", "$exists", json!(false)).matches(&v));
        let small = view(2, None, json!({"ab": 1, "ba": 2, "a": 3, "abc": 4}));
        assert!(cond("ab", "$eq", json!(1)).matches(&small));
        assert!(cond("ba", "$eq", json!(2)).matches(&small));
        assert!(cond("abc", "$eq", json!(4)).matches(&small));
        assert!(cond("b", "$exists", json!(false)).matches(&small));
    }

    // --- limit, offset, method ----------------------------------------------------------------

    #[test]
    fn limit_offset_and_methods() {
        let views = corpus();
        let q = |input: Value| query(&views, input);
        let r = q(json!({"sort": "id", "limit": 2}));
        assert_eq!((ids(&r), r.total_matched()), (vec![1, 2], 5));
        let r = q(json!({"limit": 2, "offset": 2}));
        assert_eq!(ids(&r), vec![3, 4]);
        let r = q(json!({"offset": 4}));
        assert_eq!(ids(&r), vec![5]);
        let r = q(json!({"offset": 10}));
        assert_eq!((ids(&r), r.total_matched()), (vec![], 5));
        assert_eq!(ids(&q(json!({"limit": 0}))), Vec::<u64>::new());
        assert_eq!(ids(&q(json!({"limit": "3"}))), vec![1, 2, 3]);
        assert_eq!(ids(&q(json!({"limit": 3.0}))), vec![1, 2, 3]);
        assert_eq!(ids(&q(json!({"limit": u64::MAX, "offset": 1}))).len(), 4);
        // first / last
        let r = q(json!({"method": "first", "sort": "-priority"}));
        assert_eq!((ids(&r), r.total_matched()), (vec![5], 5));
        let r = q(json!({"method": "last", "where": {"status": "open"}}));
        assert_eq!((ids(&r), r.total_matched()), (vec![5], 4));
        let r = q(json!({"method": "last", "limit": 2, "offset": 1}));
        assert_eq!(ids(&r), vec![3]);
        let r = q(json!({"method": "first", "where": {"status": "nope"}}));
        assert_eq!((ids(&r), r.total_matched()), (vec![], 0));
        // count ignores limit/offset/sort
        let r = q(
            json!({"method": "count", "limit": 1, "offset": 3, "sort": "id", "where": {"status": "open"}}),
        );
        assert_eq!(r, QueryOutcome::Count(4));
        assert_eq!(r.total_matched(), 4);
        assert!(r.docs().is_empty());
        // older string form of limit
        assert_eq!(q(json!({"limit": "count"})), QueryOutcome::Count(5));
        assert_eq!(ids(&q(json!({"limit": "first"}))), vec![1]);
        assert_eq!(ids(&q(json!({"limit": "last"}))), vec![5]);
        assert_eq!(ids(&q(json!({"limit": "all"}))).len(), 5);
        assert_eq!(ids(&q(json!({"limit": "last", "method": "last"}))), vec![5]);
        assert_eq!(spec(json!({"method": "FetchAll"})).method, Method::FetchAll);
        assert_eq!(spec(json!({"method": "all"})).method, Method::FetchAll);
        assert_eq!(spec(json!({})).method, Method::FetchAll);
        // select and unknown keys are ignored
        let s = spec(json!({"select": ["title"], "model": "Story", "offset": null}));
        assert_eq!(
            (s.model.as_deref(), s.offset, s.limit),
            (Some("Story"), 0, None)
        );
    }

    // --- errors -------------------------------------------------------------------------------

    #[test]
    fn error_messages() {
        let cases: &[(Value, &str)] = &[
            (json!([]), "query: expected an object"),
            (
                json!({"model": 3}),
                "model: expected a model name (string), got a number",
            ),
            (
                json!({"where": "status=open"}),
                "where: expected an array of {path, operator, value} or an object",
            ),
            (
                json!({"where": {"meta.status": {"$equals": "x"}}}),
                "where.meta.status: unknown operator \"$equals\" (one of $eq, $neq, $in, $notIn, $gt, $lt, $gte, $lte, $contains, $startsWith, $endsWith, $regex, $exists, $notExists)",
            ),
            (
                json!({"where": [{"path": "status", "operator": "like", "value": "x"}]}),
                "where.status: unknown operator \"like\" (one of $eq,",
            ),
            (
                json!({"where": {"tags": {"$in": "a"}}}),
                "where.tags: $in needs an array of values, got a string",
            ),
            (
                json!({"where": [{"path": "tags", "operator": "notIn", "value": 3}]}),
                "where.tags: $notIn needs an array of values, got a number",
            ),
            (
                json!({"where": {"tags": {"$exists": "yes"}}}),
                "where.tags: $exists needs true or false, got a string",
            ),
            (
                json!({"where": {"tags": {"$notExists": 1}}}),
                "where.tags: $notExists needs true or false, got a number",
            ),
            (
                json!({"where": {"t": {"$regex": "("}}}),
                "where.t: invalid $regex \"(\": ",
            ),
            (
                json!({"where": {"t": {"$regex": 5}}}),
                "where.t: $regex needs a string, got a number",
            ),
            (
                json!({"where": {"t": {"$startsWith": 5}}}),
                "where.t: $startsWith needs a string, got a number",
            ),
            (
                json!({"where": {"t": {"$endsWith": null}}}),
                "where.t: $endsWith needs a string, got null",
            ),
            (
                json!({"where": {"t": {"$gt": [1]}}}),
                "where.t: $gt needs a number, string or boolean, got an array",
            ),
            (
                json!({"where": {"t": {"$lte": null}}}),
                "where.t: $lte needs a number, string or boolean, got null",
            ),
            (
                json!({"where": {"t": {"$eq": 1, "x": 2}}}),
                "where.t: operator object mixes operators and the plain key \"x\"",
            ),
            (
                json!({"where": {"$or": [{"a": 1}]}}),
                "where.$or: logical operators ($and, $or, …) are not supported",
            ),
            (
                json!({"where": {"a..b": 1}}),
                "where.a..b: path \"a..b\" has an empty segment",
            ),
            (json!({"where": {"": 1}}), "where.: empty path"),
            (
                json!({"where": {"meta.": 1}}),
                "where.meta.: path \"meta.\" has an empty segment",
            ),
            (
                json!({"where": ["status"]}),
                "where[0]: expected a condition {path, operator, value}, got a string",
            ),
            (
                json!({"where": [{"operator": "eq", "value": 1}]}),
                "where[0]: condition has no \"path\"",
            ),
            (
                json!({"where": [{"path": 1, "value": 1}]}),
                "where[0]: \"path\" must be a string, got a number",
            ),
            (
                json!({"where": [{"path": "a", "value": 1, "op": "gt"}]}),
                "where[0]: unknown key \"op\" in condition (expected path, operator, value)",
            ),
            (
                json!({"where": [{"path": "a", "operator": "gt"}]}),
                "where.a: condition with $gt has no \"value\"",
            ),
            (
                json!({"where": [{"path": "a", "operator": 5, "value": 1}]}),
                "where.a: \"operator\" must be a string, got a number",
            ),
            (json!({"sort": 5}), "sort: expected \"path\", \"-path\""),
            (json!({"sort": ""}), "sort: empty path"),
            (
                json!({"sort": ["title", 3]}),
                "sort[1]: expected \"path\", \"-path\" or {path, direction}, got a number",
            ),
            (
                json!({"sort": [{"path": "a", "direction": "up"}]}),
                "sort[0]: direction must be \"asc\", \"desc\", 1 or -1, got \"up\"",
            ),
            (
                json!({"sort": [{"direction": "asc"}]}),
                "sort[0]: sort key has no \"path\"",
            ),
            (
                json!({"sort": [{"path": "a", "dir": "asc"}]}),
                "sort[0]: unknown key \"dir\" in sort key",
            ),
            (
                json!({"sort": {"priority": "down"}}),
                "sort.priority: direction must be \"asc\", \"desc\", 1 or -1, got \"down\"",
            ),
            (
                json!({"sort": {"priority": 2}}),
                "sort.priority: direction must be \"asc\", \"desc\", 1 or -1, got 2",
            ),
            (json!({"sort": ["-"]}), "sort[0]: empty path"),
            (
                json!({"limit": -1}),
                "limit: expected a whole number ≥ 0 or one of \"all\", \"first\", \"last\", \"count\"; got -1",
            ),
            (json!({"limit": 2.5}), "limit: expected a whole number ≥ 0"),
            (
                json!({"limit": "some"}),
                "limit: expected a whole number ≥ 0 or one of \"all\", \"first\", \"last\", \"count\"; got \"some\"",
            ),
            (json!({"limit": true}), "limit: expected a whole number ≥ 0"),
            (
                json!({"limit": "first", "method": "count"}),
                "limit: \"first\" conflicts with method \"count\"",
            ),
            (
                json!({"offset": -3}),
                "offset: expected a whole number ≥ 0, got -3",
            ),
            (
                json!({"offset": "x"}),
                "offset: expected a whole number ≥ 0, got \"x\"",
            ),
            (
                json!({"method": "fetchOne"}),
                "method: unknown method \"fetchOne\" (one of fetchAll, first, last, count)",
            ),
            (
                json!({"method": 1}),
                "method: expected one of \"fetchAll\", \"first\", \"last\", \"count\", got a number",
            ),
        ];
        for (input, want) in cases {
            let got = err(input.clone());
            assert!(got.starts_with(want), "{input}\n got: {got}\nwant: {want}…");
        }
        let e =
            QuerySpec::from_json(&json!({"where": {"meta.status": {"$equals": 1}}})).unwrap_err();
        assert_eq!(e.field, "where.meta.status");
        assert!(e.message.starts_with("unknown operator"));
        assert!(SortKey::new("", false).is_err());
        // `$exists`/`$notExists` with null (or, in the array form, no value) mean `true`.
        let v = view(1, None, json!({"a": 1}));
        assert!(
            Condition::new("a", Operator::Exists, json!(null))
                .unwrap()
                .matches(&v)
        );
        assert!(
            !Condition::new("a", Operator::NotExists, json!(null))
                .unwrap()
                .matches(&v)
        );
        assert!(Condition::new("a", Operator::Exists, json!(0)).is_err());
    }

    #[test]
    fn regex_size_limit_fails_cleanly() {
        let e = err(json!({"where": {"t": {"$regex": "\\w{1000}\\w{1000}\\w{1000}"}}}));
        assert!(e.starts_with("where.t: invalid $regex"), "{e}");
        assert!(e.contains("size limit"), "{e}");
        let e = err(json!({"where": {"t": {"$regex": "((a{100}){100}){100}"}}}));
        assert!(e.contains("size limit"), "{e}");
    }

    #[test]
    fn regex_is_compiled_once_and_reused() {
        let c = cond("s", "$regex", json!("^a+$"));
        assert!(matches!(c.test, Test::Regex(_)));
        let views: Vec<Value> = ["aa", "ab", "a"]
            .iter()
            .map(|s| view(1, None, json!({"s": s})))
            .collect();
        let hits: Vec<bool> = views.iter().map(|v| c.matches(v)).collect();
        assert_eq!(hits, vec![true, false, true]);
    }

    /// CPU time of this thread (unaffected by other processes on a loaded machine).
    fn thread_cpu() -> std::time::Duration {
        #[cfg(target_os = "linux")]
        {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `ts` is a valid, writable timespec.
            if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0 {
                return std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
            }
        }
        std::time::Duration::ZERO
    }

    /// `cargo test --release --lib collections::query -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn bench_10k_views_3_conditions() {
        let statuses = ["open", "done", "blocked", "review"];
        let views: Vec<Value> = (0..10_000u64)
            .map(|i| {
                json!({
                    "id": i,
                    "title": format!("Story {i}"),
                    "model": if i % 10 == 0 { "Epic" } else { "Story" },
                    "meta": {
                        "status": statuses[(i % 4) as usize],
                        "priority": i % 7,
                        "due": format!("2024-{:02}-{:02}", i % 12 + 1, i % 28 + 1),
                        "tags": ["x", if i % 3 == 0 { "urgent" } else { "later" }],
                        "owner": {"name": "ann", "team": "core"},
                    }
                })
            })
            .collect();
        let s = spec(json!({
            "model": "story",
            "where": {"status": {"$in": ["open", "review"]}, "priority": {"$gte": 3}, "tags": "urgent"},
        }));
        assert_eq!(s.conditions.len(), 3);
        let mut best = std::time::Duration::MAX;
        let mut best_cpu = std::time::Duration::MAX;
        let mut n = 0;
        for _ in 0..50 {
            let (t, c) = (std::time::Instant::now(), thread_cpu());
            let r = run(&views, &s);
            best = best.min(t.elapsed());
            best_cpu = best_cpu.min(thread_cpu().saturating_sub(c));
            n = r.total_matched();
        }
        let mut best_sorted = std::time::Duration::MAX;
        let sorted_spec =
            spec(json!({"where": {"priority": {"$gte": 0}}, "sort": ["-due", "title"]}));
        for _ in 0..5 {
            let t = std::time::Instant::now();
            let r = run(&views, &sorted_spec);
            best_sorted = best_sorted.min(t.elapsed());
            assert_eq!(r.total_matched(), 10_000);
        }
        eprintln!(
            "10k views x 3 conditions: {best:?} wall, {best_cpu:?} thread CPU ({n} matched); \
             filter+sort 10k by 2 keys: {best_sorted:?} wall"
        );
        assert!(n > 0);
        if !cfg!(debug_assertions) {
            // Thread CPU time when available: a loaded machine's preemption does not count.
            let t = if best_cpu.is_zero() { best } else { best_cpu };
            assert!(t < std::time::Duration::from_millis(5), "{t:?}");
        }
    }
}
