//! A parsed query: its conditions, sort keys, paging and method, read from the `query` tool
//! input, and the error that names the field and the rule it breaks.

use serde_json::Value;

use super::condition::Condition;
use super::parse::{describe, parse_limit, parse_sort, parse_where, parse_whole, type_name};
use super::path::FieldPath;

/// A query input that breaks a rule. `field` locates it (`where.meta.status`, `sort[1]`,
/// `limit`, …); `message` says what is wrong and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct QueryError {
    pub field: String,
    pub message: String,
}

impl QueryError {
    pub(super) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        QueryError {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// One sort key: a path and a direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKey {
    pub(super) path: FieldPath,
    pub(super) descending: bool,
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
