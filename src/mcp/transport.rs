//! Newline-delimited JSON-RPC transport for rmcp (server role) that, unlike
//! rmcp's built-in `AsyncRwTransport` (used by `rmcp::transport::stdio()`):
//!   * answers unparsable JSON with -32700 (id null) instead of ignoring it,
//!   * answers malformed messages (`"method": 42`, no `"jsonrpc":"2.0"`, non-object)
//!     with -32600 echoing the request id when usable (rmcp: -32600 with id null),
//!   * answers a message that still fails rmcp's typed parse with -32602 + id
//!     (rare: rmcp parses most malformed known requests as CustomRequest; see
//!     `Kbdb::on_custom_request` for the -32602 mapping of those),
//!   * drops notifications/responses that arrive before `initialize`
//!     (rmcp's handshake aborts the whole session on them).
//!
//! Valid messages are passed to rmcp unchanged.
use std::{io, sync::Arc};

use rmcp::{
    RoleServer,
    model::{ClientJsonRpcMessage, ErrorCode, ErrorData, RequestId, ServerJsonRpcMessage},
    transport::Transport,
};
use serde_json::Value;
use tokio::{
    io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader},
    sync::Mutex,
    task::JoinSet,
};

async fn write_msg<W: AsyncWrite + Send + Unpin>(
    writer: Arc<Mutex<Option<W>>>,
    msg: ServerJsonRpcMessage,
) -> io::Result<()> {
    let mut bytes = serde_json::to_vec(&msg).map_err(io::Error::other)?;
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

    fn reply_error(&mut self, code: ErrorCode, message: String, id: Option<RequestId>) {
        let msg = ServerJsonRpcMessage::error(ErrorData::new(code, message, None), id);
        let writer = self.writer.clone();
        self.replies.spawn(async move {
            if let Err(e) = write_msg(writer, msg).await {
                tracing::debug!("failed to write error reply: {e}");
            }
        });
    }

    /// Classify one complete line: Some(msg) to hand to rmcp, None if handled here.
    fn handle_line(&mut self, line: &[u8]) -> Option<ClientJsonRpcMessage> {
        let value: Value = match serde_json::from_slice(line) {
            Ok(v) => v,
            Err(e) => {
                self.reply_error(ErrorCode::PARSE_ERROR, format!("Parse error: {e}"), None);
                return None;
            }
        };
        let Value::Object(obj) = &value else {
            self.reply_error(
                ErrorCode::INVALID_REQUEST,
                "Invalid Request: not a JSON-RPC object".into(),
                None,
            );
            return None;
        };
        let id: Option<RequestId> = obj
            .get("id")
            .and_then(|v| serde_json::from_value(v.clone()).ok());
        let method = obj.get("method");
        let is_request = method.is_some() && obj.contains_key("id");
        let is_notification = method.is_some() && !obj.contains_key("id");
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0")
            || method.is_some_and(|m| !m.is_string())
        {
            if !is_notification {
                self.reply_error(ErrorCode::INVALID_REQUEST, "Invalid Request".into(), id);
            }
            return None;
        }
        let method = method.and_then(Value::as_str);
        if !self.saw_initialize && !is_request {
            eprintln!(
                "kbdb: dropping pre-initialize message {:?}",
                method.unwrap_or("(response)")
            );
            return None;
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
                        id,
                    );
                } else if !is_notification {
                    tracing::debug!("ignoring unparsable response: {e}");
                }
                None
            }
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
                self.line.clear();
                if !self.skipping {
                    self.skipping = true;
                    self.reply_error(
                        ErrorCode::INVALID_REQUEST,
                        format!("message exceeds {} bytes", crate::daemon::MAX_MESSAGE_BYTES),
                        None,
                    );
                }
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
