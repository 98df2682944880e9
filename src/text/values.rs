//! JSON <-> YAML/TOML values: one rule per direction, shared by front matter and the models
//! file. Containers nest at most [`MAX_DEPTH`] levels; numbers must be finite; keys must be
//! strings; TOML has no null, so a JSON null cannot become TOML (an error, never a stand-in
//! value); an integer beyond TOML's 64-bit range is an error, never a float. Every error names
//! the path of the value (`a.b[2]`). The `depth` argument is the nesting level the value would
//! have if it is a container (1 for a value that stands alone; a front matter's top-level values
//! are at 2, its mapping being level 1). See docs/decisions.md.

use serde_json::{Map, Number, Value};

/// The deepest nesting accepted; the outermost container is level 1.
pub const MAX_DEPTH: usize = 32;

/// A value that cannot be converted. Each names the path of the offending value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("nested more than {MAX_DEPTH} levels deep (at `{path}`)")]
    TooDeep { path: String },
    #[error("the key {key} under `{parent}` is not a string; keys must be strings")]
    NonStringKey { parent: String, key: String },
    #[error("`{path}` is not a finite number (NaN and infinity are not supported)")]
    NonFiniteNumber { path: String },
    #[error("`{path}` is null, which TOML cannot represent; remove the key or give it a value")]
    NullInToml { path: String },
    #[error("`{path}` = {value} is outside TOML's integer range")]
    IntegerOutOfRange { path: String, value: String },
}

impl ValueError {
    /// The path of the offending value (for a key that is not a string: its mapping's path).
    pub fn path(&self) -> &str {
        match self {
            ValueError::TooDeep { path }
            | ValueError::NonFiniteNumber { path }
            | ValueError::NullInToml { path }
            | ValueError::IntegerOutOfRange { path, .. } => path,
            ValueError::NonStringKey { parent, .. } => parent,
        }
    }
}

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

fn too_deep(path: &str) -> ValueError {
    ValueError::TooDeep {
        path: path.to_string(),
    }
}

/// YAML → JSON; `depth` is the nesting level `v` would have if it is a container.
pub fn yaml_to_json(v: yaml_serde::Value, depth: usize, path: &str) -> Result<Value, ValueError> {
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
                    .ok_or_else(|| ValueError::NonFiniteNumber {
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
                        return Err(ValueError::NonStringKey {
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
pub fn toml_to_json(v: toml::Value, depth: usize, path: &str) -> Result<Value, ValueError> {
    use toml::Value as T;
    Ok(match v {
        T::String(s) => Value::String(s),
        T::Integer(i) => Value::from(i),
        T::Float(f) => {
            Number::from_f64(f)
                .map(Value::Number)
                .ok_or_else(|| ValueError::NonFiniteNumber {
                    path: path.to_string(),
                })?
        }
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

/// JSON → YAML.
pub fn json_to_yaml(v: &Value, depth: usize, path: &str) -> Result<yaml_serde::Value, ValueError> {
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
                        return Err(ValueError::NonFiniteNumber {
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

/// JSON → TOML: a null, or an integer beyond `i64`, is an error (TOML holds neither).
pub fn json_to_toml(v: &Value, depth: usize, path: &str) -> Result<toml::Value, ValueError> {
    use toml::Value as T;
    Ok(match v {
        Value::Null => {
            return Err(ValueError::NullInToml {
                path: path.to_string(),
            });
        }
        Value::Bool(b) => T::Boolean(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                T::Integer(i)
            } else if n.is_u64() {
                return Err(ValueError::IntegerOutOfRange {
                    path: path.to_string(),
                    value: n.to_string(),
                });
            } else {
                match n.as_f64() {
                    Some(f) if f.is_finite() => T::Float(f),
                    _ => {
                        return Err(ValueError::NonFiniteNumber {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_to_toml_refuses_what_toml_cannot_hold_and_names_the_path() {
        let e = json_to_toml(&json!({"a": [1, null]}), 1, "").unwrap_err();
        assert_eq!(
            e,
            ValueError::NullInToml {
                path: "a[1]".into()
            }
        );
        let e = json_to_toml(&json!(u64::MAX), 1, "default").unwrap_err();
        assert_eq!(e.path(), "default");
        assert!(matches!(e, ValueError::IntegerOutOfRange { .. }));
    }

    #[test]
    fn one_depth_limit_in_every_direction() {
        let mut v = json!(1);
        for _ in 0..MAX_DEPTH {
            v = json!([v]);
        }
        assert!(json_to_toml(&v, 1, "").is_ok());
        assert!(json_to_yaml(&v, 1, "").is_ok());
        let t = json_to_toml(&v, 1, "").unwrap();
        assert!(toml_to_json(t, 1, "").is_ok());
        let deeper = json!([v]);
        let at = |e: ValueError| matches!(e, ValueError::TooDeep { .. });
        assert!(at(json_to_toml(&deeper, 1, "").unwrap_err()));
        assert!(at(json_to_yaml(&deeper, 1, "").unwrap_err()));
        let t = toml::Value::Array(vec![json_to_toml(&v, 1, "").unwrap()]);
        assert!(at(toml_to_json(t, 1, "").unwrap_err()));
    }
}
