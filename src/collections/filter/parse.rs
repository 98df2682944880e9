//! Parsing helpers: the `where`, `sort` and `limit` forms the query input accepts.

use serde_json::{Map, Value};

use super::condition::{Condition, OPERATOR_LIST, Operator};
use super::path::FieldPath;
use super::spec::{Method, QueryError, SortKey};

pub(super) fn parse_where(w: &Value) -> Result<Vec<Condition>, QueryError> {
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

pub(super) fn parse_sort(s: &Value) -> Result<Vec<SortKey>, QueryError> {
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

pub(super) fn parse_limit(
    v: Option<&Value>,
) -> Result<(Option<usize>, Option<Method>), QueryError> {
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
pub(super) fn parse_whole(v: &Value) -> Option<usize> {
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

pub(super) fn type_name(v: &Value) -> &'static str {
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
pub(super) fn describe(v: &Value) -> String {
    match v {
        Value::Number(_) | Value::Bool(_) | Value::Null => v.to_string(),
        Value::String(s) if s.chars().count() <= 40 => format!("{s:?}"),
        _ => type_name(v).to_string(),
    }
}
