//! The MCP handler: `ServerHandler` delegates to one file per concern — tools here (each a
//! call of the daemon method the operations table names), resources (`resources.rs`), prompts
//! and completion (`prompts.rs`), subscriptions and notifications (`notifications.rs`), the
//! folder watch (`watch.rs`) — and `serve` wires them together.

use std::borrow::Cow;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rmcp::model::*;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::notifications::{Event, follow_changes, notifier};
pub use super::notifications::{MAX_SUBSCRIPTION_URI_BYTES, MAX_SUBSCRIPTIONS};
use super::tools;
use super::transport::LineTransport;
use super::watch::start_watching;
use crate::daemon::operations;
use crate::daemon::pool::ClientPool;
use crate::error::{KbError, Result};

pub(super) struct State {
    pub(super) pool: Arc<ClientPool>,
    pub(super) log_level: Mutex<Option<LoggingLevel>>,
    pub(super) subscriptions: Mutex<HashSet<String>>,
    pub(super) events: mpsc::UnboundedSender<Event>,
    /// An HTTP session's events, taken by its notifier once the client is initialized (stdio
    /// starts its notifier itself: None).
    pub(super) pending_events: Mutex<Option<mpsc::UnboundedReceiver<Event>>>,
    /// Cancelled when an HTTP session's handler is dropped (the session ended): its notifier
    /// stops.
    pub(super) ended: tokio_util::sync::CancellationToken,
}

#[derive(Clone)]
pub(super) struct Kbdb {
    pub(super) state: Arc<State>,
    /// An HTTP session's: cancels `state.ended` when the last clone of the handler goes.
    pub(super) _end_guard: Option<Arc<tokio_util::sync::DropGuard>>,
}

/// What the bearer token of an HTTP request grants; `kbdb serve` puts it in the request's
/// extensions. Absent (stdio): everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// The token's name (never the token).
    pub token_name: String,
    pub read_only: bool,
}

pub(super) fn internal(e: impl std::fmt::Display) -> McpError {
    McpError::internal_error(e.to_string(), None)
}

impl State {
    pub(super) fn new(
        pool: Arc<ClientPool>,
        events: mpsc::UnboundedSender<Event>,
        pending_events: Option<mpsc::UnboundedReceiver<Event>>,
    ) -> State {
        State {
            pool,
            log_level: Mutex::new(None),
            subscriptions: Mutex::new(HashSet::new()),
            events,
            pending_events: Mutex::new(pending_events),
            ended: tokio_util::sync::CancellationToken::new(),
        }
    }
}

impl Kbdb {
    /// Call a daemon method off the async threads.
    pub(super) async fn call(&self, method: &str, params: Value) -> Result<Value> {
        let state = self.state.clone();
        let method = method.to_string();
        tokio::task::spawn_blocking(move || state.pool.call(&method, params))
            .await
            .map_err(|e| KbError::Daemon(format!("call task failed: {e}")))?
    }

    pub(super) async fn call_as<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
    ) -> Result<T> {
        let v = self.call(method, params).await?;
        serde_json::from_value(v)
            .map_err(|e| KbError::Daemon(format!("unexpected {method} result: {e}")))
    }

    pub(super) fn log(&self, level: LoggingLevel, data: Value) {
        let _ = self.state.events.send(Event::Log(level, data));
    }

    /// A tool's arguments as the daemon method's parameters.
    fn tool_call(
        &self,
        name: &str,
        args: serde_json::Map<String, Value>,
    ) -> std::result::Result<(&'static str, Value), String> {
        tool_call(self.state.pool.db_dir(), name, args)
    }

    /// `skill-learn` without a body: ask the client's model to write one (sampling), when the
    /// client offers it.
    async fn sample_skill_body(
        &self,
        args: &serde_json::Map<String, Value>,
        peer: &Peer<RoleServer>,
    ) -> std::result::Result<String, String> {
        let offers_sampling = peer
            .peer_info()
            .is_some_and(|i| i.capabilities.sampling.is_some());
        if !offers_sampling {
            return Err(
                "body: is required (this client does not offer sampling to draft one)".into(),
            );
        }
        let name = args.get("name").and_then(Value::as_str).unwrap_or("skill");
        let description = args
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("");
        let request = format!(
            "Write the prompt template body for a reusable skill named {name:?}: {description}\n\
             Use {{{{argument}}}} placeholders for its inputs. Reply with the template only."
        );
        let params =
            CreateMessageRequestParams::new(vec![SamplingMessage::user_text(request)], 1024);
        let reply = peer
            .create_message(params)
            .await
            .map_err(|e| format!("body: is required; drafting one by sampling failed: {e}"))?;
        match reply.message.content.first().and_then(|c| c.as_text()) {
            Some(t) if !t.text.trim().is_empty() => Ok(t.text.clone()),
            _ => Err("body: is required; the sampled draft was empty".into()),
        }
    }
}

/// A tool's arguments as the daemon method's parameters, for the database in `db_dir`.
#[doc(hidden)] // public for the fuzz targets (fuzz/)
pub fn tool_call(
    db_dir: &std::path::Path,
    name: &str,
    args: serde_json::Map<String, Value>,
) -> std::result::Result<(&'static str, Value), String> {
    tools::method_call(db_dir, name, args)
}

/// The refusal of a tool that writes, for a request whose token is read-only.
fn read_only_refusal(tool: &str, context: &RequestContext<RoleServer>) -> Option<CallToolResult> {
    let access = context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<Access>())?;
    let writes = operations::by_tool(tool).is_some_and(|op| op.writes());
    if !access.read_only || !writes {
        return None;
    }
    let message = format!(
        "{tool}: refused, the token {:?} is read-only and this tool changes the knowledge base \
         (nothing was changed); use a token made without --read-only",
        access.token_name
    );
    let mut r = tool_error(message.clone());
    r.structured_content = Some(json!({"error": message, "code": "read_only_token"}));
    Some(r)
}

fn text_result(text: String) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

fn tool_error(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text.into())])
}

/// The text of a failed tool: the error's message (the spec), or for a coded error of the
/// hybrid-search spec its structured form `{error, code}`. Words of the CLI are put in those
/// of the tool: `--force` is the argument `force: true` here.
fn error_text(tool: &str, e: &KbError) -> String {
    match e.code() {
        "EMBEDDING_PROVIDER_NOT_CONFIGURED" => {
            json!({"error": e.to_string(), "code": e.code()}).to_string()
        }
        _ if tool == "export" => e.to_string().replace("--force", "`force: true`"),
        _ => tools::without_rust_types(&e.to_string()),
    }
}

impl ServerHandler for Kbdb {
    fn get_info(&self) -> ServerConfig {
        let mut caps = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_resources_list_changed()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_completions()
            .enable_logging()
            .build();
        if let Some(t) = caps.tools.as_mut() {
            t.list_changed = Some(false);
        }
        ServerConfig::new(caps)
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
            .with_server_info(Implementation::new("kbdb", env!("CARGO_PKG_VERSION")).with_title("kbdb"))
            .with_instructions(
                "kbdb is a local knowledge base. Use `search` to find sections, then `recall` to read \
                 them with their context; `learn` stores facts, decisions, code and images; `content` \
                 composes markdown from sections and documents.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn discover(
        &self,
        _c: RequestContext<RoleServer>,
    ) -> std::result::Result<DiscoverResult, McpError> {
        Err(McpError::new(
            ErrorCode::METHOD_NOT_FOUND,
            "server/discover is not supported; send initialize",
            None,
        ))
    }

    async fn list_tools(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, McpError> {
        let defs: Vec<Tool> =
            serde_json::from_value(tools::tool_definitions()).map_err(internal)?;
        Ok(ListToolsResult::with_all_items(defs))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, McpError> {
        let name = request.name.to_string();
        if operations::by_tool(&name).is_none() {
            return Err(McpError::invalid_params(
                format!("Unknown tool: {name}"),
                Some(json!({"name": name})),
            ));
        }
        if let Some(refusal) = read_only_refusal(&name, &context) {
            return Ok(refusal.into());
        }
        let mut args = request.arguments.unwrap_or_default();
        if let Err(msg) = tools::check_argument_types(&name, &args) {
            return Ok(tool_error(msg).into());
        }
        if name == "skill-learn" && !args.contains_key("body") {
            match self.sample_skill_body(&args, &context.peer).await {
                Ok(body) => {
                    args.insert("body".into(), json!(body));
                }
                Err(msg) => return Ok(tool_error(msg).into()),
            }
        }
        let (method, params) = match self.tool_call(&name, args) {
            Ok(x) => x,
            Err(msg) => return Ok(tool_error(msg).into()),
        };
        let result = match self.call(method, params).await {
            Ok(Value::String(text)) => text_result(text),
            Ok(v) => {
                let mut r = text_result(tools::result_text(&name, &v));
                if v.is_object() {
                    r.structured_content = Some(v);
                }
                r
            }
            Err(e) => {
                self.log(
                    LoggingLevel::Debug,
                    json!({"tool": name, "error": e.to_string()}),
                );
                tool_error(error_text(&name, &e))
            }
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> std::result::Result<ListResourcesResult, McpError> {
        self.resources_list(request).await
    }

    async fn list_resource_templates(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> std::result::Result<ListResourceTemplatesResult, McpError> {
        self.resource_templates().await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> std::result::Result<ReadResourceResponse, McpError> {
        self.resource_read(request).await
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> std::result::Result<(), McpError> {
        self.subscribe_to(request).await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> std::result::Result<(), McpError> {
        self.unsubscribe_from(request).await
    }

    async fn list_prompts(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> std::result::Result<ListPromptsResult, McpError> {
        self.prompts_list().await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> std::result::Result<GetPromptResponse, McpError> {
        self.prompt_get(request).await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> std::result::Result<CompleteResult, McpError> {
        self.completion(request).await
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        // An HTTP session: its notifier starts now that the client can hear it, and stops
        // when the session ends.
        let pending = self
            .state
            .pending_events
            .lock()
            .ok()
            .and_then(|mut p| p.take());
        if let Some(rx) = pending {
            let state = self.state.clone();
            let ended = self.state.ended.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = notifier(context.peer, state, rx) => {}
                    _ = ended.cancelled() => tracing::debug!("session ended; its notifier stops"),
                }
            });
        }
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> std::result::Result<(), McpError> {
        if let Ok(mut l) = self.state.log_level.lock() {
            *l = Some(request.level);
        }
        Ok(())
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _c: RequestContext<RoleServer>,
    ) -> std::result::Result<CustomResult, McpError> {
        const KNOWN: &[&str] = &[
            "initialize",
            "ping",
            "tools/list",
            "tools/call",
            "resources/list",
            "resources/templates/list",
            "resources/read",
            "resources/subscribe",
            "resources/unsubscribe",
            "prompts/list",
            "prompts/get",
            "completion/complete",
            "logging/setLevel",
        ];
        if KNOWN.contains(&request.method.as_str()) {
            Err(McpError::invalid_params(
                format!("Invalid params for {}", request.method),
                None,
            ))
        } else {
            Err(McpError::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("Method not found: {}", request.method),
                None,
            ))
        }
    }
}

pub(super) async fn serve(db_dir: PathBuf, watch: Option<super::WatchSpec>) -> Result<()> {
    let pool = tokio::task::spawn_blocking(move || ClientPool::connect(db_dir))
        .await
        .map_err(|e| KbError::Daemon(e.to_string()))??;
    // A folder that cannot be watched fails the start, before the handshake.
    let watcher = match &watch {
        Some(w) => Some(crate::sync::FolderWatcher::new(
            &w.dir,
            vec![pool.db_dir().to_path_buf()],
            crate::sync::WatchOptions::default(),
        )?),
        None => None,
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let state = Arc::new(State::new(Arc::new(pool), tx.clone(), None));
    let server = Kbdb {
        state: state.clone(),
        _end_guard: None,
    };
    // Subscribed to the daemon's change events before the handshake: a change made once the
    // client is initialized (a `resources/subscribe` followed by another process's write) is
    // never missed.
    let subscription = {
        let state = state.clone();
        tokio::task::spawn_blocking(move || state.pool.subscription())
            .await
            .map_err(|e| KbError::Daemon(e.to_string()))?
    };
    let running = match server.clone().serve(LineTransport::stdio()).await {
        Ok(r) => r,
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
        Err(e) => return Err(KbError::Daemon(format!("MCP initialization failed: {e}"))),
    };
    tokio::spawn(notifier(running.peer().clone(), state.clone(), rx));
    if let (Some(w), Some(spec)) = (watcher, watch) {
        start_watching(state.clone(), w, spec.prefix);
    }

    // Change events from the daemon (any process's writes), on a blocking thread.
    {
        let tx = tx.clone();
        let state = state.clone();
        std::thread::spawn(move || follow_changes(&state, subscription, &tx));
    }

    // The startup health check runs in the background: never delays the handshake or a tool.
    {
        let server = server.clone();
        tokio::spawn(async move {
            match server
                .call_as::<crate::CheckResult>("check", json!({}))
                .await
            {
                Ok(r) if !r.ok => {
                    let mut kinds: Vec<&str> = r.errors.iter().map(|e| e.kind.as_str()).collect();
                    kinds.sort();
                    kinds.dedup();
                    server.log(
                        LoggingLevel::Warning,
                        json!({"event": "startup check", "ok": false, "errors": r.errors.len(), "kinds": kinds,
                               "hint": "run the check tool for details, gc for orphans, rebuild for index mismatches"}),
                    );
                }
                Ok(_) => {}
                Err(e) => server.log(
                    LoggingLevel::Warning,
                    json!({"event": "startup check", "error": e.to_string()}),
                ),
            }
        });
    }
    let _ = running.waiting().await;
    Ok(())
}
