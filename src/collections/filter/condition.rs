//! `where` conditions: the operators, and a condition (path, operator, value) checked and
//! precompiled when it is built, then tested against a document.

use regex::{Regex, RegexBuilder};
use serde_json::Value;

use super::eval::{any_str, compare_ok, equals_or_has, in_list, values_equal};
use super::parse::type_name;
use super::path::{Doc, FieldPath};
use super::spec::QueryError;

/// Compiled-size limit for `$regex` patterns (bytes).
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;

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

pub(super) const OPERATOR_LIST: &str = "$eq, $neq, $in, $notIn, $gt, $lt, $gte, $lte, $contains, \
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

/// The precompiled test of a condition.
#[derive(Debug, Clone)]
pub(super) enum Test {
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
    pub(super) path: FieldPath,
    operator: Operator,
    value: Value,
    pub(super) test: Test,
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
    pub(super) fn eval(&self, field: Option<&Value>) -> bool {
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
