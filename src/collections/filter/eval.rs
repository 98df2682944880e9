//! Evaluation helpers: key lookup, equality and ordering of JSON values (no allocation).

use std::cmp::Ordering;

use serde_json::{Map, Number, Value};

use super::condition::Operator;

/// Maps up to this size are searched by a linear scan (see [`lookup`]).
const LINEAR_SCAN_MAX: usize = 32;

/// `map[key]`. For small maps, a linear scan that compares key lengths first: a `String`'s
/// length sits in the map node while its bytes are elsewhere on the heap, so only keys of the
/// right length are dereferenced. `BTreeMap::get` dereferences every key it compares, and those
/// cache misses dominate the cost of matching thousands of views.
#[inline]
pub(super) fn lookup<'v>(map: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
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
pub(super) fn field<'v>(value: &'v Value, key: &str) -> Option<&'v Value> {
    match value {
        Value::Object(map) => lookup(map, key),
        _ => None,
    }
}

/// Unicode case-insensitive equality without allocating.
pub(super) fn eq_ignore_case(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
        || (!a.is_ascii() || !b.is_ascii())
            && a.chars()
                .flat_map(char::to_lowercase)
                .eq(b.chars().flat_map(char::to_lowercase))
}

pub(super) fn num_cmp(a: &Number, b: &Number) -> Ordering {
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
pub(super) fn values_equal(a: &Value, b: &Value) -> bool {
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
pub(super) fn equals_or_has(field: &Value, x: &Value) -> bool {
    values_equal(field, x)
        || matches!(field, Value::Array(items) if items.iter().any(|e| values_equal(e, x)))
}

#[inline]
pub(super) fn in_list(field: &Value, list: &[Value]) -> bool {
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
pub(super) fn compare_ok(op: Operator, field: &Value, x: &Value) -> bool {
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
pub(super) fn any_str(field: Option<&Value>, pred: impl Fn(&str) -> bool) -> bool {
    match field {
        Some(Value::String(s)) => pred(s),
        Some(Value::Array(items)) => items.iter().any(|e| e.as_str().is_some_and(&pred)),
        _ => false,
    }
}

pub(super) fn type_rank(v: &Value) -> u8 {
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
pub(super) fn total_cmp(a: &Value, b: &Value) -> Ordering {
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
