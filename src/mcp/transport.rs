//! Newline-delimited JSON-RPC transport for rmcp (server role) that, unlike
//! rmcp's built-in `AsyncRwTransport` (used by `rmcp::transport::stdio()`):
//!   * answers unparsable JSON with -32700 and `"id": null` (JSON-RPC 2.0; rmcp would omit
//!     the id) instead of ignoring it,
//!   * answers malformed messages (`"method": 42`, no `"jsonrpc":"2.0"`, non-object)
//!     with -32600 echoing the request id when usable, else `"id": null`,
//!   * answers a request whose id is neither a string nor an integer (`null`, a float, an
//!     object, an array, a boolean, an integer beyond 64 bits) with -32600 and `"id": null`
//!     (rmcp would answer without an id, or not at all),
//!   * answers a line over `MAX_MESSAGE_BYTES` with -32600 and the request's id when it can be
//!     read from the part received, and keeps reading the next line,
//!   * answers a message that still fails rmcp's typed parse with -32602 + id
//!     (rare: rmcp parses most malformed known requests as CustomRequest; see
//!     `Kbdb::on_custom_request` for the -32602 mapping of those),
//!   * answers requests other than `initialize` and `ping` that arrive before `initialize`
//!     with -32600 "send initialize first" (`server/discover`: -32601, so that newer clients
//!     fall back to `initialize`), and drops notifications and responses that arrive before
//!     it (rmcp's handshake aborts the whole session on them).
//!
//! Valid messages are passed to rmcp unchanged. The errors answered here are written as raw
//! JSON, since rmcp's error type leaves out an id it does not have.
use std::{io, sync::Arc};

use rmcp::{
    RoleServer,
    model::{ClientJsonRpcMessage, ErrorCode, RequestId, ServerJsonRpcMessage},
    transport::Transport,
};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader},
    sync::Mutex,
    task::JoinSet,
};

async fn write_msg<W: AsyncWrite + Send + Unpin>(
    writer: Arc<Mutex<Option<W>>>,
    msg: ServerJsonRpcMessage,
) -> io::Result<()> {
    let bytes = serde_json::to_vec(&msg).map_err(io::Error::other)?;
    write_line(writer, bytes).await
}

async fn write_line<W: AsyncWrite + Send + Unpin>(
    writer: Arc<Mutex<Option<W>>>,
    mut bytes: Vec<u8>,
) -> io::Result<()> {
    bytes.push(b'\n');
    let mut guard = writer.lock().await;
    let w = guard
        .as_mut()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "transport closed"))?;
    w.write_all(&bytes).await?;
    w.flush().await
}

pub struct LineTransport<R, W> {
    reader: BufReader<R>,
    writer: Arc<Mutex<Option<W>>>,
    /// Partial line survives cancellation: `receive` runs inside rmcp's `select!`.
    line: Vec<u8>,
    saw_initialize: bool,
    /// Discarding the rest of a line that exceeded `MAX_LINE_BYTES`.
    skipping: bool,
    /// Error replies written by spawned tasks: `receive` must never await a write,
    /// because rmcp drops (cancels) the `receive` future whenever another branch
    /// of its select! fires, which would lose the line or cut a reply in half.
    replies: JoinSet<()>,
}

impl LineTransport<tokio::io::Stdin, tokio::io::Stdout> {
    pub fn stdio() -> Self {
        Self::new(tokio::io::stdin(), tokio::io::stdout())
    }
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    pub fn new(read: R, write: W) -> Self {
        Self {
            reader: BufReader::new(read),
            writer: Arc::new(Mutex::new(Some(write))),
            line: Vec::new(),
            saw_initialize: false,
            skipping: false,
            replies: JoinSet::new(),
        }
    }

    /// An error answered here; `id` is the request's id, or `null` when it has none usable.
    fn reply_error(&mut self, code: ErrorCode, message: String, id: Value) {
        // Written by hand to keep the usual member order (serde_json sorts an object's keys).
        let error = json!({"code": code.0, "message": message});
        let bytes = format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#).into_bytes();
        let writer = self.writer.clone();
        self.replies.spawn(async move {
            if let Err(e) = write_line(writer, bytes).await {
                tracing::debug!("failed to write error reply: {e}");
            }
        });
    }

    /// Classify one complete line: Some(msg) to hand to rmcp, None if handled here.
    fn handle_line(&mut self, line: &[u8]) -> Option<ClientJsonRpcMessage> {
        let value: Value = match serde_json::from_slice(line) {
            Ok(v) => v,
            Err(e) => {
                self.reply_error(
                    ErrorCode::PARSE_ERROR,
                    format!("Parse error: {e}"),
                    Value::Null,
                );
                return None;
            }
        };
        let Value::Object(obj) = &value else {
            self.reply_error(
                ErrorCode::INVALID_REQUEST,
                "Invalid Request: not a JSON-RPC object".into(),
                Value::Null,
            );
            return None;
        };
        let method = obj.get("method");
        let id = obj.get("id").map(request_id);
        let is_request = method.is_some() && id.is_some();
        let is_notification = method.is_some() && id.is_none();
        // The id to answer with: the request's own when usable, else null.
        let reply_id = match &id {
            Some(Ok(_)) => obj["id"].clone(),
            Some(Err(echo)) => echo.clone(),
            None => Value::Null,
        };
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0")
            || method.is_some_and(|m| !m.is_string())
        {
            if !is_notification {
                self.reply_error(
                    ErrorCode::INVALID_REQUEST,
                    "Invalid Request".into(),
                    reply_id,
                );
            }
            return None;
        }
        let method = method.and_then(Value::as_str);
        if is_request && let Some(Err(_)) = &id {
            self.reply_error(
                ErrorCode::INVALID_REQUEST,
                format!(
                    "Invalid Request: id must be a string or an integer between -2^63 and \
                     2^63-1 (got {})",
                    describe_id(&obj["id"])
                ),
                reply_id,
            );
            return None;
        }
        if !self.saw_initialize {
            if !is_request {
                // (Not eprintln!, which panics when stderr is closed.)
                tracing::warn!(
                    "dropping pre-initialize message {:?}",
                    method.unwrap_or("(response)")
                );
                return None;
            }
            // rmcp would answer with a complaint about missing `_meta` keys of a protocol
            // version kbdb does not speak; say what the client must do instead. A newer SDK's
            // `server/discover` probe gets -32601 (what `Kbdb::discover` answers when rmcp
            // accepts the probe), so that the client falls back to `initialize`.
            if method == Some("server/discover") {
                self.reply_error(
                    ErrorCode::METHOD_NOT_FOUND,
                    "server/discover is not supported; send initialize".into(),
                    reply_id,
                );
                return None;
            }
            if !matches!(method, Some("initialize" | "ping")) {
                self.reply_error(
                    ErrorCode::INVALID_REQUEST,
                    format!(
                        "Invalid Request: the session is not initialized; send initialize \
                         first (got {})",
                        method.unwrap_or("?")
                    ),
                    reply_id,
                );
                return None;
            }
        }
        match serde_json::from_value::<ClientJsonRpcMessage>(value.clone()) {
            Ok(msg) => {
                if method == Some("initialize") {
                    self.saw_initialize = true;
                }
                Some(msg)
            }
            Err(e) => {
                if is_request {
                    // Rare: rmcp turns most malformed known requests into a
                    // CustomRequest (see Kbdb::on_custom_request), not an error.
                    self.reply_error(
                        ErrorCode::INVALID_PARAMS,
                        format!("Invalid params for {}: {e}", method.unwrap_or("?")),
                        reply_id,
                    );
                } else if !is_notification {
                    tracing::debug!("ignoring unparsable response: {e}");
                }
                None
            }
        }
    }
}

/// A request id as rmcp takes it: a string, or an integer that fits an i64. Otherwise the id
/// to answer the error with: the integer itself when it is one (beyond i64, within u64), else
/// `null` (JSON-RPC 2.0: ids are strings or numbers without fractions; MCP: strings or
/// integers).
fn request_id(id: &Value) -> Result<RequestId, Value> {
    match id {
        Value::String(s) => Ok(RequestId::String(s.as_str().into())),
        Value::Number(n) if n.is_i64() => Ok(RequestId::Number(n.as_i64().unwrap_or_default())),
        Value::Number(n) if n.is_u64() => Err(id.clone()),
        _ => Err(Value::Null),
    }
}

/// An invalid id, for the error message (its JSON, cut short when long).
fn describe_id(id: &Value) -> String {
    let what = match id {
        Value::Null => return "null".into(),
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_u64() => "an integer beyond 2^63-1",
        Value::Number(_) => "a number that is not a 64-bit integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    let text = id.to_string();
    if text.len() <= 40 {
        format!("{what}: {text}")
    } else {
        what.to_string()
    }
}

/// The `"id"` member of a JSON-RPC object of which only a prefix was received (a line over the
/// size limit), when it comes before the cut: the top-level members are walked without
/// building their values (nesting is counted, not recursed into).
fn id_in_prefix(buf: &[u8]) -> Option<Value> {
    let mut i = 0;
    let ws = |i: &mut usize| {
        while buf.get(*i).is_some_and(u8::is_ascii_whitespace) {
            *i += 1;
        }
    };
    // The end (exclusive) of the string starting at `i` (a quote), if it is complete.
    let string_end = |mut i: usize| -> Option<usize> {
        i += 1;
        loop {
            match buf.get(i)? {
                b'\\' => i += 2,
                b'"' => return Some(i + 1),
                _ => i += 1,
            }
        }
    };
    if buf.starts_with(b"\xEF\xBB\xBF") {
        i = 3;
    }
    ws(&mut i);
    if buf.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        ws(&mut i);
        if buf.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(i)?;
        let key = &buf[i..key_end];
        i = key_end;
        ws(&mut i);
        if buf.get(i) != Some(&b':') {
            return None;
        }
        i += 1;
        ws(&mut i);
        let start = i;
        match buf.get(i)? {
            b'"' => i = string_end(i)?,
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match buf.get(i)? {
                        b'"' => {
                            i = string_end(i)?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                i += 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
            }
            _ => {
                while !matches!(buf.get(i)?, b',' | b'}') && !buf[i].is_ascii_whitespace() {
                    i += 1;
                }
            }
        }
        if key == b"\"id\"" {
            return serde_json::from_slice(&buf[start..i]).ok();
        }
        ws(&mut i);
        match buf.get(i)? {
            b',' => i += 1,
            _ => return None,
        }
    }
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        write_msg(self.writer.clone(), item)
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            while self.replies.try_join_next().is_some() {}
            // read_until appends to self.line, so a call cancelled by rmcp's select!
            // loses nothing; the next call resumes the same line.
            // At most MAX_LINE_BYTES are buffered: a longer line is answered with an error and
            // the rest of it is discarded, so no input can exhaust memory.
            let room = (crate::daemon::MAX_MESSAGE_BYTES + 1).saturating_sub(self.line.len());
            let read = (&mut self.reader)
                .take(room as u64)
                .read_until(b'\n', &mut self.line)
                .await;
            if read.as_ref().is_ok_and(|n| *n > 0)
                && self.line.last() != Some(&b'\n')
                && self.line.len() > crate::daemon::MAX_MESSAGE_BYTES
            {
                if !self.skipping {
                    self.skipping = true;
                    // Answered with the request's id when the part received holds it.
                    let id = id_in_prefix(&self.line)
                        .and_then(|id| request_id(&id).ok().map(|_| id))
                        .unwrap_or(Value::Null);
                    self.reply_error(
                        ErrorCode::INVALID_REQUEST,
                        format!("message exceeds {} bytes", crate::daemon::MAX_MESSAGE_BYTES),
                        id,
                    );
                }
                self.line.clear();
                continue;
            }
            if self.skipping {
                // The end of an oversized line.
                self.skipping = false;
                self.line.clear();
                continue;
            }
            match read {
                Ok(0) => {
                    // EOF: rmcp ends the session (QuitReason::Closed). Finish our replies
                    // first (join_next is cancel-safe).
                    while self.replies.join_next().await.is_some() {}
                    return None;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!("stdin read error: {e}");
                    return None;
                }
            }
            // (A line without '\n' here is a final line cut off by EOF; handled like any other.)
            let mut line = std::mem::take(&mut self.line);
            while matches!(line.last(), Some(b'\n' | b'\r')) {
                line.pop();
            }
            let body = line
                .strip_prefix(b"\xEF\xBB\xBF".as_slice())
                .unwrap_or(&line);
            if body.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let body = body.to_vec();
            if let Some(msg) = self.handle_line(&body) {
                return Some(msg);
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        while self.replies.join_next().await.is_some() {}
        if let Some(mut w) = self.writer.lock().await.take() {
            let _ = w.flush().await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_of_a_cut_message_is_read_when_it_comes_before_the_cut() {
        let id = |s: &str| id_in_prefix(s.as_bytes());
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","id":7,"method":"x","params":{"a":"xxx"#),
            Some(json!(7))
        );
        assert_eq!(id(r#"  {"id" : "a\"b" , "params": "#), Some(json!("a\"b")));
        // Members before it are skipped whole, strings and nesting included.
        assert_eq!(
            id(r#"{"params":{"s":"}]\"{","n":[1,{"id":3}]},"jsonrpc":"2.0","id":-4,"x":"#),
            Some(json!(-4))
        );
        assert_eq!(id("\u{feff}{\"id\":1,"), Some(json!(1)));
        // After the cut, cut itself, or not an object: unknown.
        assert_eq!(id(r#"{"jsonrpc":"2.0","params":{"pad":"xxxx"#), None);
        assert_eq!(id(r#"{"method":"x","id":12"#), None);
        assert_eq!(id(r#"{"method":"x","id":"ab"#), None);
        assert_eq!(id(r#"[{"id":1}"#), None);
        assert_eq!(id(""), None);
    }

    #[test]
    fn ids_are_strings_or_64_bit_integers() {
        assert!(request_id(&json!("a")).is_ok());
        assert!(request_id(&json!(-3)).is_ok());
        assert!(request_id(&json!(i64::MAX)).is_ok());
        assert_eq!(request_id(&json!(u64::MAX)), Err(json!(u64::MAX)));
        for bad in [
            json!(null),
            json!(1.5),
            json!(2.0),
            json!(true),
            json!([1]),
            json!({}),
        ] {
            assert_eq!(request_id(&bad), Err(Value::Null), "{bad}");
        }
    }
}
