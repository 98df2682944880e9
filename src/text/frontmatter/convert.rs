//! JSON <-> YAML/TOML values, with the depth limit and the path of the offending value.

use serde_json::{Map, Number, Value};

use super::{FrontMatterError, MAX_DEPTH};

fn child_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

fn index_path(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

fn too_deep(path: &str) -> FrontMatterError {
    FrontMatterError::TooDeep {
        path: Some(path.to_string()),
    }
}

/// YAML → JSON; `depth` is the nesting level `v` would have if it is a container.
pub(super) fn yaml_to_json(
    v: yaml_serde::Value,
    depth: usize,
    path: &str,
) -> Result<Value, FrontMatterError> {
    use yaml_serde::Value as Y;
    Ok(match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => {
            if let Some(u) = n.as_u64() {
                Value::from(u)
            } else if let Some(i) = n.as_i64() {
                Value::from(i)
            } else {
                n.as_f64()
                    .and_then(Number::from_f64)
                    .map(Value::Number)
                    .ok_or_else(|| FrontMatterError::NonFiniteNumber {
                        path: path.to_string(),
                    })?
            }
        }
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => {
            if depth > MAX_DEPTH {
                return Err(too_deep(path));
            }
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                out.push(yaml_to_json(item, depth + 1, &index_path(path, i))?);
            }
            Value::Array(out)
        }
        Y::Mapping(m) => {
            if depth > MAX_DEPTH {
                return Err(too_deep(path));
            }
            let mut out = Map::new();
            for (k, val) in m {
                let key = match k {
                    Y::String(s) => s,
                    other => {
                        let shown =
                            yaml_serde::to_string(&other).unwrap_or_else(|_| format!("{other:?}"));
                        return Err(FrontMatterError::NonStringKey {
                            parent: path.to_string(),
                            key: crate::text::preview(shown.trim(), 40),
                        });
                    }
                };
                let converted = yaml_to_json(val, depth + 1, &child_path(path, &key))?;
                out.insert(key, converted);
            }
            Value::Object(out)
        }
        Y::Tagged(t) => yaml_to_json(t.value, depth, path)?,
    })
}

/// TOML → JSON; datetimes become RFC 3339 strings (a bare date: `YYYY-MM-DD`).
pub(super) fn toml_to_json(
    v: toml::Value,
    depth: usize,
    path: &str,
) -> Result<Value, FrontMatterError> {
    use toml::Value as T;
    Ok(match v {
        T::String(s) => Value::String(s),
        T::Integer(i) => Value::from(i),
        T::Float(f) => Number::from_f64(f).map(Value::Number).ok_or_else(|| {
            FrontMatterError::NonFiniteNumber {
                path: path.to_string(),
            }
        })?,
        T::Boolean(b) => Value::Bool(b),
        T::Datetime(d) => Value::String(d.to_string()),
        T::Array(items) => {
            if depth > MAX_DEPTH {
                return Err(too_deep(path));
            }
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                out.push(toml_to_json(item, depth + 1, &index_path(path, i))?);
            }
            Value::Array(out)
        }
        T::Table(t) => {
            if depth > MAX_DEPTH {
                return Err(too_deep(path));
            }
            let mut out = Map::new();
            for (k, val) in t {
                let converted = toml_to_json(val, depth + 1, &child_path(path, &k))?;
                out.insert(k, converted);
            }
            Value::Object(out)
        }
    })
}

pub(super) fn json_to_yaml(
    v: &Value,
    depth: usize,
    path: &str,
) -> Result<yaml_serde::Value, FrontMatterError> {
    use yaml_serde::Value as Y;
    Ok(match v {
        Value::Null => Y::Null,
        Value::Bool(b) => Y::Bool(*b),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Y::Number(u.into())
            } else if let Some(i) = n.as_i64() {
                Y::Number(i.into())
            } else {
                match n.as_f64() {
                    Some(f) if f.is_finite() => Y::Number(f.into()),
                    _ => {
                        return Err(FrontMatterError::NonFiniteNumber {
                            path: path.to_string(),
                        });
                    }
                }
            }
        }
        Value::String(s) => Y::String(s.clone()),
        Value::Array(items) => {
            if depth > MAX_DEPTH {
                return Err(too_deep(path));
            }
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(json_to_yaml(item, depth + 1, &index_path(path, i))?);
            }
            Y::Sequence(out)
        }
        Value::Object(m) => {
            if depth > MAX_DEPTH {
                return Err(too_deep(path));
            }
            let mut out = yaml_serde::Mapping::new();
            for (k, item) in m {
                out.insert(
                    Y::String(k.clone()),
                    json_to_yaml(item, depth + 1, &child_path(path, k))?,
                );
            }
            Y::Mapping(out)
        }
    })
}

pub(super) fn json_to_toml(
    v: &Value,
    depth: usize,
    path: &str,
) -> Result<toml::Value, FrontMatterError> {
    use toml::Value as T;
    Ok(match v {
        Value::Null => {
            return Err(FrontMatterError::NullInToml {
                path: path.to_string(),
            });
        }
        Value::Bool(b) => T::Boolean(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                T::Integer(i)
            } else if n.is_u64() {
                return Err(FrontMatterError::IntegerOutOfRange {
                    path: path.to_string(),
                    value: n.to_string(),
                });
            } else {
                match n.as_f64() {
                    Some(f) if f.is_finite() => T::Float(f),
                    _ => {
                        return Err(FrontMatterError::NonFiniteNumber {
                            path: path.to_string(),
                        });
                    }
                }
            }
        }
        Value::String(s) => T::String(s.clone()),
        Value::Array(items) => {
            if depth > MAX_DEPTH {
                return Err(too_deep(path));
            }
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(json_to_toml(item, depth + 1, &index_path(path, i))?);
            }
            T::Array(out)
        }
        Value::Object(m) => {
            if depth > MAX_DEPTH {
                return Err(too_deep(path));
            }
            let mut out = toml::Table::new();
            for (k, item) in m {
                out.insert(
                    k.clone(),
                    json_to_toml(item, depth + 1, &child_path(path, k))?,
                );
            }
            T::Table(out)
        }
    })
}
