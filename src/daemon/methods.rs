//! Every `Kb` operation as a named method with JSON parameters and a JSON result: the one
//! dispatcher behind the daemon's JSON-RPC, the embedded CLI and the MCP server. The methods
//! themselves are the table in `operations.rs` (docs/daemon.md lists them); this module runs
//! them and gives their errors a wire form.

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::operations::{self, Answer, Kind};
use crate::error::KbError;
use crate::{Kb, WriteOutcome};

/// Why a call failed.
#[derive(Debug)]
pub enum CallError {
    UnknownMethod(String),
    /// The parameters do not have the method's shape (JSON-RPC -32602).
    InvalidParams(String),
    /// The operation itself failed.
    Kb(KbError),
}

impl From<KbError> for CallError {
    fn from(e: KbError) -> Self {
        CallError::Kb(e)
    }
}

pub type CallResult = std::result::Result<Value, CallError>;

/// Whether `method` changes the store through the write group (the daemon batches these).
pub fn is_grouped_write(method: &str) -> bool {
    operations::by_method(method).is_some_and(|o| matches!(o.kind, Kind::Write(..)))
}

/// A method's parameters (null for none) as `T`. A bad value of a choice field (search's
/// `mode`) is the invalid-input error of that field, like the engine's own rules.
pub fn params<T: DeserializeOwned>(p: Value) -> std::result::Result<T, CallError> {
    let p = if p.is_null() { json!({}) } else { p };
    serde_json::from_value(p).map_err(|e| {
        let message = e.to_string();
        match super::params::invalid_choice(&message) {
            Some(e) => CallError::Kb(e),
            None => CallError::InvalidParams(message),
        }
    })
}

pub(crate) fn to_value<T: serde::Serialize>(v: T) -> CallResult {
    serde_json::to_value(v).map_err(|e| CallError::Kb(KbError::Storage(e.to_string())))
}

/// One result of a batch: `{"ok": …}` or `{"error": {code, message, field?}}`.
pub fn item_result<T: serde::Serialize>(r: crate::Result<T>) -> Value {
    match r {
        Ok(v) => json!({ "ok": v }),
        Err(e) => json!({ "error": error_object(&e) }),
    }
}

/// The wire form of an error: `{code, message, field?}`.
pub fn error_object(e: &KbError) -> Value {
    let mut o = json!({ "code": e.code(), "message": e.to_string() });
    if let Some(f) = e.field() {
        o["field"] = f.into();
    }
    o
}

/// An error back from its wire form.
pub fn error_from_object(o: &Value) -> KbError {
    KbError::Remote {
        code: o["code"].as_str().unwrap_or("internal").to_string(),
        message: o["message"].as_str().unwrap_or("unknown error").to_string(),
        field: o["field"].as_str().map(str::to_string),
    }
}

/// Parse a write method's parameters into write operations (one, or many for `learn_many`).
pub fn write_ops(
    kb: &Kb,
    method: &str,
    p: Value,
) -> std::result::Result<Vec<crate::WriteOp>, CallError> {
    match operations::by_method(method).map(|o| o.kind) {
        Some(Kind::Write(ops, _)) => ops(kb, p),
        _ => Err(CallError::UnknownMethod(method.to_string())),
    }
}

/// The JSON result of a write method from the outcomes of its operations.
pub fn write_result(
    kb: &Kb,
    method: &str,
    outcomes: Vec<crate::Result<WriteOutcome>>,
) -> CallResult {
    if let Some(Ok(WriteOutcome::Edited(_))) = outcomes.first() {
        let Some(Ok(WriteOutcome::Edited(r))) = outcomes.into_iter().next() else {
            unreachable!("matched above");
        };
        return Ok(kb.edit_answer(r)?);
    }
    if let Some(Kind::Write(_, Answer::Each)) = operations::by_method(method).map(|o| o.kind) {
        return Ok(Value::Array(
            outcomes.into_iter().map(item_result).collect(),
        ));
    }
    match outcomes.into_iter().next() {
        Some(Ok(o)) => to_value(o),
        Some(Err(e)) => Err(CallError::Kb(e)),
        None => Err(CallError::Kb(KbError::Storage("no result".into()))),
    }
}

/// Run `method` on `kb`. Writes run as their own group here; the daemon batches them instead.
pub fn call(kb: &Kb, method: &str, p: Value, progress: &dyn Fn(u64, u64)) -> CallResult {
    let Some(op) = operations::by_method(method) else {
        return Err(CallError::UnknownMethod(method.to_string()));
    };
    match op.kind {
        Kind::Read(run) | Kind::Change(run) | Kind::Maintenance(run) => run(kb, p, progress),
        Kind::Write(ops, _) => {
            let ops = ops(kb, p)?;
            write_result(kb, method, kb.write_group(ops)?)
        }
        Kind::Sync(run, _) => kb.with_index_behind(|write| run(kb, p, progress, write)),
        // Only a daemon answers these.
        Kind::Daemon(_) => Err(CallError::UnknownMethod(method.to_string())),
    }
}
