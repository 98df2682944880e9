//! The MCP handler: tools, resources, prompts, completion, logging and subscriptions, each a
//! call of a daemon method (`daemon::methods`), shaped as the spec says.

use std::borrow::Cow;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::*;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::tools;
use super::transport::LineTransport;
use crate::daemon::pool::ClientPool;
use crate::error::{KbError, Result};
use crate::skills::{AgentDefinition, AgentSummary, SkillDefinition};

/// Page size of `resources/list`.
const PAGE: usize = 100;
/// Most resources one session may subscribe to at a time (docs/mcp.md).
pub const MAX_SUBSCRIPTIONS: usize = 1000;
/// Longest URI a session may subscribe to, in bytes: room for any kbdb URI (a docid is at most
/// 256 bytes), while a session's subscriptions stay within a few MiB.
pub const MAX_SUBSCRIPTION_URI_BYTES: usize = 4096;

enum Event {
    /// A change committed by any process.
    Changed(crate::model::ChangeEvent),
    /// The daemon's change events were lost (it stopped or dropped us) and are followed again:
    /// whatever changed in between is not known.
    Resubscribed,
    Log(LoggingLevel, Value),
}

struct State {
    pool: ClientPool,
    log_level: Mutex<Option<LoggingLevel>>,
    subscriptions: Mutex<HashSet<String>>,
    events: mpsc::UnboundedSender<Event>,
}

#[derive(Clone)]
struct Kbdb {
    state: Arc<State>,
}

fn level_rank(l: LoggingLevel) -> u8 {
    match l {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

fn internal(e: impl std::fmt::Display) -> McpError {
    McpError::internal_error(e.to_string(), None)
}

impl Kbdb {
    /// Call a daemon method off the async threads.
    async fn call(&self, method: &str, params: Value) -> Result<Value> {
        let state = self.state.clone();
        let method = method.to_string();
        tokio::task::spawn_blocking(move || state.pool.call(&method, params))
            .await
            .map_err(|e| KbError::Daemon(format!("call task failed: {e}")))?
    }

    async fn call_as<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
    ) -> Result<T> {
        let v = self.call(method, params).await?;
        serde_json::from_value(v)
            .map_err(|e| KbError::Daemon(format!("unexpected {method} result: {e}")))
    }

    fn log(&self, level: LoggingLevel, data: Value) {
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
    mut args: serde_json::Map<String, Value>,
) -> std::result::Result<(&'static str, Value), String> {
    tools::check_argument_types(name, &args)?;
    let method = match name {
        "search" => "search",
        "learn" => "learn",
        "unlearn" => "unlearn",
        "retrieve" => "retrieve",
        "recall" => "recall",
        "content" => "content",
        "status" => "status",
        "check" => "check",
        "gc" => "gc",
        "rebuild" => "rebuild",
        "export" => {
            // Exports stay under the folder that holds the database (docs/file-layout.md);
            // relative paths are taken from there, not from the host's working directory.
            let root = db_dir
                .parent()
                .map(PathBuf::from)
                .unwrap_or_else(|| db_dir.to_path_buf());
            let path = args
                .get("path")
                .and_then(Value::as_str)
                .unwrap_or("kbdb-export");
            args.insert("path".into(), json!(root.join(path)));
            args.insert("confine_to".into(), json!(root));
            "export"
        }
        "skill-learn" => "skill_learn",
        "skill-list" => "skill_list",
        "skill-get" => "skill_get",
        "skill-delete" => "skill_delete",
        "agent-create" => "agent_create",
        "agent-list" => "agent_list",
        "agent-get" => "agent_get",
        "agent-delete" => "agent_delete",
        other => super::collection_tools::method_of(other)
            .ok_or_else(|| format!("Unknown tool: {other}"))?,
    };
    Ok((method, Value::Object(args)))
}

fn text_result(text: String) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

fn tool_error(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text.into())])
}

/// The spec: most tools answer 2-space JSON; those it lists as compact answer compact JSON.
fn serialise(name: &str, v: &Value) -> String {
    if tools::compact_tools().contains(&name) {
        v.to_string()
    } else {
        serde_json::to_string_pretty(v).unwrap_or_default()
    }
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

/// The `review-document` prompt text: the document, its validation, what to do.
fn review_text(doc: &Value, v: &Value) -> String {
    let issues = |key: &str| -> Vec<String> {
        v[key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                format!(
                    "- {}: {}",
                    e["path"].as_str().unwrap_or(""),
                    e["message"].as_str().unwrap_or("")
                )
            })
            .collect()
    };
    let (errors, warnings) = (issues("errors"), issues("warnings"));
    format!(
        "Review the document \"{}\" ({}).\n\n## Model: {}\n## Validation: {} error(s)\n{}\n{}\n\n## Current Frontmatter\n{}\n\n## Outline\n{}\n\n## Document Content\n{}\n\nPlease suggest fixes for validation errors and check that all sections are complete. Make changes with `update_section` or `update_document`, then `validate`.",
        doc["title"].as_str().unwrap_or(""),
        doc["id"].as_str().unwrap_or(""),
        doc["model"].as_str().unwrap_or(""),
        errors.len(),
        errors.join("\n"),
        if warnings.is_empty() {
            String::new()
        } else {
            format!("Warnings:\n{}", warnings.join("\n"))
        },
        serde_json::to_string_pretty(&doc["meta"]).unwrap_or_default(),
        doc["outline"].as_str().unwrap_or(""),
        doc["content"].as_str().unwrap_or(""),
    )
}

/// The collection's static resources: URI, name, MIME type, description.
const COLLECTION_RESOURCES: &[(&str, &str, &str, &str)] = &[
    (
        "kbdb://schema",
        "schema",
        "application/json",
        "JSON schema of all registered models — fields, sections, relationships, document counts",
    ),
    (
        "kbdb://toc",
        "toc",
        "text/markdown",
        "Markdown table of contents for all documents in the collection",
    ),
    (
        "kbdb://models-summary",
        "models-summary",
        "text/markdown",
        "Generated MODELS.md describing all model definitions with attributes, sections, and relationships",
    ),
    (
        "kbdb://primer",
        "primer",
        "text/markdown",
        "Combined teach output — workflow, models summary, query guide and table of contents",
    ),
];

/// `%XX` escapes of a URI segment decoded (headings with spaces arrive as `%20`).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(
                std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"),
                16,
            )
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn section_uri(kbid: &str) -> String {
    format!("kbdb://section/{kbid}")
}

fn document_uri(docid: &str) -> String {
    format!("kbdb://document/{docid}")
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
        let known = tools::tool_definitions()
            .as_array()
            .is_some_and(|a| a.iter().any(|t| t["name"] == name));
        if !known {
            return Err(McpError::invalid_params(
                format!("Unknown tool: {name}"),
                Some(json!({"name": name})),
            ));
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
                let mut r = text_result(serialise(&name, &v));
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
        let start = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(c) => c
                .parse::<usize>()
                .map_err(|_| McpError::invalid_params(format!("invalid cursor {c:?}"), None))?,
        };
        let docs: Vec<crate::DocumentSummary> =
            self.call_as("docs", json!({})).await.map_err(internal)?;
        let mut page: Vec<Resource> = Vec::new();
        if start == 0 {
            for (uri, name, mime, description) in COLLECTION_RESOURCES {
                page.push(
                    Resource::new(*uri, *name)
                        .with_mime_type(*mime)
                        .with_description(*description),
                );
            }
        }
        page.extend(docs.iter().skip(start).take(PAGE).map(|d| {
            let mut r = Resource::new(document_uri(&d.docid), d.docid.clone())
                .with_mime_type("application/json");
            if let Some(t) = &d.title {
                r = r.with_title(t.clone());
            }
            r.with_description(format!(
                "{} section(s), updated {}",
                d.sections, d.updated_at
            ))
        }));
        let mut result = ListResourcesResult::with_all_items(page);
        if start + PAGE < docs.len() {
            result.next_cursor = Some((start + PAGE).to_string());
        }
        Ok(result)
    }

    async fn list_resource_templates(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> std::result::Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new("kbdb://section/{kbid}", "section")
                .with_description("Section by kb-id")
                .with_mime_type("text/plain"),
            ResourceTemplate::new("kbdb://document/{docid}", "document")
                .with_description("Document + sections")
                .with_mime_type("application/json"),
            ResourceTemplate::new("kbdb://models/{model}/{docid}", "model-instance")
                .with_description(
                    "Typed document: metadata, sections by heading, relationships, validation",
                )
                .with_mime_type("application/json"),
            ResourceTemplate::new(
                "kbdb://document/{docid}/sections/{heading}",
                "document-section",
            )
            .with_description("One section of a document, by heading (case-insensitive)")
            .with_mime_type("text/markdown"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> std::result::Result<ReadResourceResponse, McpError> {
        let uri = request.uri;
        let not_found =
            || McpError::resource_not_found("Resource not found", Some(json!({"uri": uri})));
        if let Some(kbid) = uri.strip_prefix("kbdb://section/") {
            let v: Vec<crate::RetrievedSection> =
                match self.call_as("retrieve", json!({"kbid": kbid})).await {
                    Ok(v) => v,
                    Err(_) => return Err(not_found()),
                };
            let s = v.into_iter().next().ok_or_else(not_found)?;
            let contents = if s.section_type.starts_with("image/") {
                ResourceContents::blob(s.content, uri.clone()).with_mime_type(s.section_type)
            } else {
                ResourceContents::text(s.content, uri.clone()).with_mime_type(s.section_type)
            };
            return Ok(ReadResourceResult::new(vec![contents]).into());
        }
        let text = |body: String, mime: &str| -> ReadResourceResponse {
            ReadResourceResult::new(vec![
                ResourceContents::text(body, uri.clone()).with_mime_type(mime.to_string()),
            ])
            .into()
        };
        let static_method = match uri.as_str() {
            "kbdb://schema" => Some("schema"),
            "kbdb://toc" => Some("toc"),
            "kbdb://models-summary" => Some("models_summary"),
            "kbdb://primer" => Some("primer"),
            _ => None,
        };
        if let Some(m) = static_method {
            return match self.call(m, json!({})).await.map_err(internal)? {
                Value::String(s) => Ok(text(s, "text/markdown")),
                v => Ok(text(
                    serde_json::to_string_pretty(&v).map_err(internal)?,
                    "application/json",
                )),
            };
        }
        if let Some(rest) = uri.strip_prefix("kbdb://models/")
            && let Some((model, docid)) = rest.split_once('/')
        {
            let v = self
                .call("model_instance", json!({"model": model, "docid": docid}))
                .await
                .map_err(|_| not_found())?;
            return Ok(text(
                serde_json::to_string_pretty(&v).map_err(internal)?,
                "application/json",
            ));
        }
        if let Some(rest) = uri.strip_prefix("kbdb://document/")
            && let Some((docid, heading)) = rest.rsplit_once("/sections/")
        {
            let heading = percent_decode(heading);
            let v = self
                .call(
                    "section_by_heading",
                    json!({"docid": docid, "heading": heading}),
                )
                .await
                .map_err(|_| not_found())?;
            return Ok(text(
                v.as_str().unwrap_or_default().to_string(),
                "text/markdown",
            ));
        }
        if let Some(docid) = uri.strip_prefix("kbdb://document/") {
            let doc = match self.call("retrieve", json!({"docid": docid})).await {
                Ok(v) => v,
                Err(_) => return Err(not_found()),
            };
            let kbids: Vec<String> =
                serde_json::from_value(doc["kbids"].clone()).unwrap_or_default();
            let sections: Vec<crate::RetrievedSection> = if kbids.is_empty() {
                Vec::new()
            } else {
                self.call_as("retrieve_many", json!({"kbids": kbids}))
                    .await
                    .map_err(internal)?
            };
            let mut body = doc;
            body["sections"] = json!(sections
                .iter()
                .enumerate()
                .map(|(position, s)| json!({"position": position, "kbid": s.kbid, "type": s.section_type, "content": s.content}))
                .collect::<Vec<_>>());
            let text = serde_json::to_string_pretty(&body).map_err(internal)?;
            return Ok(ReadResourceResult::new(vec![
                ResourceContents::text(text, uri.clone()).with_mime_type("application/json"),
            ])
            .into());
        }
        Err(not_found())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> std::result::Result<(), McpError> {
        // Any URI may be subscribed (one that does not exist yet notifies when it appears),
        // within the limits: a client cannot make the server hold unbounded memory.
        if request.uri.len() > MAX_SUBSCRIPTION_URI_BYTES {
            return Err(McpError::invalid_params(
                format!(
                    "uri: is {} bytes; the limit for a subscription is {MAX_SUBSCRIPTION_URI_BYTES} bytes",
                    request.uri.len()
                ),
                Some(json!({"limit": MAX_SUBSCRIPTION_URI_BYTES})),
            ));
        }
        let mut s = self.state.subscriptions.lock().map_err(internal)?;
        if s.len() >= MAX_SUBSCRIPTIONS && !s.contains(&request.uri) {
            return Err(McpError::invalid_params(
                format!(
                    "uri: this session already has {MAX_SUBSCRIPTIONS} subscriptions, the limit; \
                     unsubscribe from some first"
                ),
                Some(json!({"limit": MAX_SUBSCRIPTIONS})),
            ));
        }
        s.insert(request.uri);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> std::result::Result<(), McpError> {
        if let Ok(mut s) = self.state.subscriptions.lock() {
            s.remove(&request.uri);
        }
        Ok(())
    }

    async fn list_prompts(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> std::result::Result<ListPromptsResult, McpError> {
        let skills: Vec<SkillDefinition> =
            self.call_as("skills", json!({})).await.map_err(internal)?;
        let agents: Vec<AgentSummary> = self
            .call_as("agent_list", json!({}))
            .await
            .map_err(internal)?;
        let mut prompts: Vec<Prompt> = skills
            .into_iter()
            .map(|s| {
                let args = s
                    .arguments
                    .into_iter()
                    .map(|a| {
                        let mut p = PromptArgument::new(a.name).with_required(a.required);
                        if let Some(d) = a.description {
                            p = p.with_description(d);
                        }
                        p
                    })
                    .collect();
                Prompt::new(s.name, Some(s.description), Some(args))
            })
            .collect();
        prompts.extend(agents.into_iter().map(|a| {
            Prompt::new(
                format!("agent:{}", a.name),
                Some(a.description),
                Some(Vec::new()),
            )
        }));
        // The collection's prompts come first: one `create-<model>` per model, then the guides.
        let schema = self.call("schema", json!({})).await.map_err(internal)?;
        let mut collection: Vec<Prompt> = schema["models"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["name"] != "Base")
            .map(|m| {
                let name = m["name"].as_str().unwrap_or_default();
                Prompt::new(
                    format!("create-{}", name.to_lowercase()),
                    Some(format!(
                        "Guide creation of a new {name} document with proper schema and sections"
                    )),
                    Some(vec![
                        PromptArgument::new("title")
                            .with_required(true)
                            .with_description(format!("Title for the new {name}")),
                    ]),
                )
            })
            .collect();
        collection.push(Prompt::new(
            "review-document",
            Some("Fetch a document, run validation, and present it for review"),
            Some(vec![
                PromptArgument::new("pathId")
                    .with_required(true)
                    .with_description("The document's id (docid)"),
            ]),
        ));
        collection.push(Prompt::new(
            "teach",
            Some(
                "Full collection documentation — workflow, models, query guide and table of \
                 contents. For a quick-start behavioral guide, use the `read_me` tool instead.",
            ),
            Some(Vec::new()),
        ));
        collection.push(Prompt::new(
            "query-guide",
            Some("Show available models, fields, and query operators to help build queries"),
            Some(vec![
                PromptArgument::new("intent")
                    .with_required(true)
                    .with_description("What you're trying to find (natural language)"),
            ]),
        ));
        let taken: std::collections::HashSet<String> =
            collection.iter().map(|p| p.name.to_string()).collect();
        collection.extend(
            prompts
                .into_iter()
                .filter(|p| !taken.contains(&p.name.to_string())),
        );
        Ok(ListPromptsResult::with_all_items(collection))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> std::result::Result<GetPromptResponse, McpError> {
        let unknown = || {
            McpError::invalid_params(
                format!("Unknown prompt: {}", request.name),
                Some(json!({"name": request.name})),
            )
        };
        let args = request.arguments.clone().unwrap_or_default();
        let arg = |name: &str| -> std::result::Result<String, McpError> {
            args.get(name)
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| {
                    (name == "pathId")
                        .then(|| {
                            args.get("docid")
                                .and_then(Value::as_str)
                                .map(str::to_string)
                        })
                        .flatten()
                })
                .ok_or_else(|| {
                    McpError::invalid_params(
                        format!("{name}: is required by prompt {}", request.name),
                        Some(json!({"name": request.name})),
                    )
                })
        };
        let user = |text: String, description: String| -> GetPromptResponse {
            GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
                .with_description(description)
                .into()
        };
        match request.name.as_str() {
            "teach" => {
                let text = self.call("primer", json!({})).await.map_err(internal)?;
                return Ok(user(
                    text.as_str().unwrap_or_default().to_string(),
                    "Full collection documentation".into(),
                ));
            }
            "query-guide" => {
                let intent = arg("intent")?;
                let guide = self
                    .call("query_guide", json!({}))
                    .await
                    .map_err(internal)?;
                return Ok(user(
                    format!(
                        "{}\n\n## What to find\n\n{intent}\n\nBuild a `query` tool call (model, where, sort, select) that finds it.",
                        guide.as_str().unwrap_or_default()
                    ),
                    "Help construct a query".into(),
                ));
            }
            "review-document" => {
                let docid = arg("pathId")?;
                let doc = self
                    .call("document_json", json!({"docid": docid}))
                    .await
                    .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
                let v = self
                    .call("validate", json!({"target": docid}))
                    .await
                    .map_err(internal)?;
                return Ok(user(review_text(&doc, &v), "Review a document".into()));
            }
            name => {
                if let Some(model) = name.strip_prefix("create-") {
                    let title = arg("title")?;
                    if let Ok(text) = self
                        .call("create_prompt", json!({"model": model, "title": title}))
                        .await
                    {
                        return Ok(user(
                            text.as_str().unwrap_or_default().to_string(),
                            format!("Create a {model} document"),
                        ));
                    }
                }
            }
        }
        if let Some(agent) = request.name.strip_prefix("agent:") {
            let a: AgentDefinition = self
                .call_as(
                    "agent_get",
                    json!({"docid": format!("{}{agent}", crate::skills::AGENT_DOCID_PREFIX)}),
                )
                .await
                .map_err(|_| unknown())?;
            let mut listing = String::from("Available skills:");
            for s in &a.skills {
                match &s.name {
                    Some(n) => {
                        let d: Option<SkillDefinition> = self
                            .call_as("skill_get", json!({"kbid": s.kbid}))
                            .await
                            .ok();
                        listing.push_str(&format!(
                            "\n- {n}: {}",
                            d.map(|d| d.description).unwrap_or_default()
                        ));
                    }
                    None => listing.push_str(&format!("\n- {} (deleted)", s.kbid)),
                }
            }
            return Ok(GetPromptResult::new(vec![
                PromptMessage::new_text(Role::Assistant, a.persona),
                PromptMessage::new_text(Role::User, listing),
            ])
            .with_description(a.description)
            .into());
        }
        let skill: SkillDefinition = self
            .call_as("skill_get", json!({"name": request.name}))
            .await
            .map_err(|_| unknown())?;
        let values = request.arguments.unwrap_or_default();
        let text = crate::skills::render(&skill.body, &skill.arguments, &values).map_err(|e| {
            McpError::invalid_params(e.to_string(), Some(json!({"name": request.name})))
        })?;
        Ok(
            GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
                .with_description(skill.description)
                .into(),
        )
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> std::result::Result<CompleteResult, McpError> {
        let prefix = request.argument.value.clone();
        let values: Vec<String> = match &request.r#ref {
            Reference::Prompt(p) => {
                // Prompt argument values: the names of documents for a `docid`-like argument,
                // else nothing to suggest; argument names are offered for an empty value.
                let skills: Vec<SkillDefinition> =
                    self.call_as("skills", json!({})).await.unwrap_or_default();
                match skills.into_iter().find(|s| s.name == p.name) {
                    Some(s) if request.argument.name.contains("docid") => {
                        let docs: Vec<crate::DocumentSummary> =
                            self.call_as("docs", json!({})).await.unwrap_or_default();
                        let _ = s;
                        docs.into_iter()
                            .map(|d| d.docid)
                            .filter(|d| d.starts_with(&prefix))
                            .collect()
                    }
                    Some(s) => s
                        .arguments
                        .into_iter()
                        .map(|a| a.name)
                        .filter(|n| n.starts_with(&prefix) && n != &request.argument.name)
                        .collect(),
                    None => {
                        // Not a skill: complete prompt names (skills and `agent:` prompts).
                        let agents: Vec<AgentSummary> = self
                            .call_as("agent_list", json!({}))
                            .await
                            .unwrap_or_default();
                        let skills: Vec<SkillDefinition> =
                            self.call_as("skills", json!({})).await.unwrap_or_default();
                        skills
                            .into_iter()
                            .map(|s| s.name)
                            .chain(agents.into_iter().map(|a| format!("agent:{}", a.name)))
                            .filter(|n| n.starts_with(&prefix))
                            .collect()
                    }
                }
            }
            Reference::Resource(r) => {
                if r.uri.starts_with("kbdb://document/") || request.argument.name == "docid" {
                    let docs: Vec<crate::DocumentSummary> =
                        self.call_as("docs", json!({})).await.unwrap_or_default();
                    docs.into_iter()
                        .map(|d| d.docid)
                        .filter(|d| d.starts_with(&prefix))
                        .collect()
                } else {
                    self.call_as("kbids_with_prefix", json!({"prefix": prefix, "limit": 100}))
                        .await
                        .unwrap_or_default()
                }
            }
            _ => Vec::new(),
        };
        let mut values = values;
        values.sort();
        values.dedup();
        values.truncate(100);
        let info = CompletionInfo::with_all_values(values)
            .map_err(|e| McpError::internal_error(e, None))?;
        Ok(CompleteResult::new(info))
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

/// `kbdb mcp --watch`: sync the folder, then every batch of changes, through the daemon (on a
/// thread of its own). Problems are logged to stderr and sent as `notifications/message`.
fn start_watching(state: Arc<State>, watcher: crate::sync::FolderWatcher, prefix: Option<String>) {
    std::thread::spawn(move || {
        let log = |level: LoggingLevel, data: Value| {
            let _ = state.events.send(Event::Log(level, data));
        };
        let mut sync = |req: &crate::sync::SyncRequest| -> Result<crate::sync::SyncReport> {
            let params = serde_json::to_value(req).map_err(|e| KbError::Storage(e.to_string()))?;
            serde_json::from_value(state.pool.call("sync", params)?)
                .map_err(|e| KbError::Daemon(format!("unexpected sync result: {e}")))
        };
        let mut report = |r: Result<crate::sync::SyncReport>| match r {
            Ok(r) => {
                for s in &r.skipped {
                    tracing::warn!(path = %s.path, "not synced: {}", s.reason);
                }
                if !r.skipped.is_empty() {
                    log(
                        LoggingLevel::Warning,
                        json!({"event": "sync", "root": r.root, "skipped": r.skipped}),
                    );
                }
                if !r.changes.is_empty() {
                    log(
                        LoggingLevel::Debug,
                        json!({"event": "sync", "root": r.root, "changes": r.changes}),
                    );
                }
            }
            Err(e) => {
                tracing::warn!("sync failed: {e}");
                log(
                    LoggingLevel::Warning,
                    json!({"event": "sync", "error": e.to_string()}),
                );
            }
        };
        let first = sync(&crate::sync::SyncRequest {
            dir: watcher.root().to_path_buf(),
            prefix,
            paths: None,
        });
        let prefix = match &first {
            Ok(r) => r.prefix.clone(),
            Err(e) => {
                tracing::error!(
                    "cannot sync {}: {e}; not watching it",
                    watcher.root().display()
                );
                report(first);
                return;
            }
        };
        report(first);
        if let Err(e) = crate::sync::watch::sync_loop(watcher, &prefix, &mut sync, &mut report) {
            tracing::error!("the folder watcher stopped: {e}");
        }
    });
}

/// Pass the daemon's change events on to the notifier until it is gone. When they stop (the
/// daemon stopped, was replaced, or dropped a subscriber that fell behind), subscribe again —
/// starting a daemon if none runs — after a pause that starts at 0.1 s and doubles (up to 10 s)
/// while attempts fail or end at once without an event (a daemon that drops every subscriber
/// at once must not make this loop spin), and tell the notifier that changes may have been
/// missed.
fn follow_changes(
    state: &State,
    first: Result<crate::daemon::client::Client>,
    tx: &mpsc::UnboundedSender<Event>,
) {
    let mut subscription = first;
    let mut pause = Duration::from_millis(100);
    loop {
        match subscription {
            Ok(mut sub) => {
                let began = std::time::Instant::now();
                loop {
                    match sub.next_event() {
                        Ok(e) => {
                            pause = Duration::from_millis(100);
                            if tx.send(Event::Changed(e)).is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            tracing::info!("change events stopped ({e}); subscribing again");
                            break;
                        }
                    }
                }
                // A subscription that lasted (an idle daemon that exited) was not a failure.
                if began.elapsed() >= Duration::from_secs(10) {
                    pause = Duration::from_millis(100);
                }
            }
            Err(e) => {
                tracing::warn!(
                    "cannot subscribe to change events ({e}); retrying in {} ms",
                    pause.as_millis()
                );
            }
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(10));
        if tx.is_closed() {
            return;
        }
        subscription = state.pool.subscription();
        if subscription.is_ok() && tx.send(Event::Resubscribed).is_err() {
            return;
        }
    }
}

/// The kbids of the skills the database holds now (empty if the daemon cannot say).
async fn skill_kbids(state: &Arc<State>) -> HashSet<String> {
    let state = state.clone();
    tokio::task::spawn_blocking(move || state.pool.call("skills", json!({})))
        .await
        .ok()
        .and_then(|r| r.ok())
        .and_then(|v| serde_json::from_value::<Vec<SkillDefinition>>(v).ok())
        .map(|skills| skills.into_iter().map(|s| s.kbid).collect())
        .unwrap_or_default()
}

/// Turns daemon change events and log requests into MCP notifications.
async fn notifier(
    peer: Peer<RoleServer>,
    state: Arc<State>,
    mut rx: mpsc::UnboundedReceiver<Event>,
) {
    let mut known_docs: Option<HashSet<String>> = None;
    // The skills (prompts) there are: a removed section is a prompt gone only if it was one.
    let mut known_skills = skill_kbids(&state).await;
    while let Some(ev) = rx.recv().await {
        let res = match ev {
            Event::Changed(crate::model::ChangeEvent {
                kind,
                id,
                section_type,
                ..
            }) => {
                let uri = if kind.starts_with("section") {
                    section_uri(&id)
                } else {
                    document_uri(&id)
                };
                let subscribed = state
                    .subscriptions
                    .lock()
                    .map(|s| s.contains(&uri))
                    .unwrap_or(false);
                if subscribed
                    && let Err(e) = peer
                        .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                        .await
                {
                    tracing::debug!("notification failed: {e}");
                    break;
                }
                // The list of documents (resources) or of skills/agents (prompts) changed.
                let mut list_changed = false;
                if kind.starts_with("document") {
                    let docs = known_docs.get_or_insert_with(HashSet::new);
                    list_changed = if kind == "document_removed" {
                        docs.remove(&id)
                    } else {
                        docs.insert(id.clone())
                    };
                }
                if list_changed {
                    let _ = peer.notify_resource_list_changed().await;
                }
                // The prompts are the skills, the agents and one per model: only a change of
                // one of those changes their list (an agent's description, a skill's
                // arguments), not any other write.
                let prompts_changed = match kind.as_str() {
                    "section_added" | "section_changed" => {
                        section_type.as_deref() == Some(crate::skills::SKILL_TYPE)
                            && (known_skills.insert(id.clone()) || kind == "section_changed")
                    }
                    "section_removed" => known_skills.remove(&id),
                    "document_changed" | "document_removed" => {
                        id.starts_with(crate::skills::AGENT_DOCID_PREFIX)
                    }
                    _ => false,
                };
                if prompts_changed {
                    let _ = peer.notify_prompt_list_changed().await;
                }
                if kind == "models_changed" {
                    // New models: new `create-<model>` prompts, a new schema and summary.
                    let _ = peer.notify_prompt_list_changed().await;
                    for uri in ["kbdb://schema", "kbdb://models-summary", "kbdb://primer"] {
                        let subscribed = state
                            .subscriptions
                            .lock()
                            .map(|s| s.contains(uri))
                            .unwrap_or(false);
                        if subscribed {
                            let _ = peer
                                .notify_resource_updated(ResourceUpdatedNotificationParam::new(
                                    uri.to_string(),
                                ))
                                .await;
                        }
                    }
                }
                Ok(())
            }
            Event::Resubscribed => {
                // Changes made while nobody listened are unknown: every subscribed resource
                // and both lists may have changed.
                known_skills = skill_kbids(&state).await;
                let uris: Vec<String> = state
                    .subscriptions
                    .lock()
                    .map(|s| s.iter().cloned().collect())
                    .unwrap_or_default();
                for uri in uris {
                    let _ = peer
                        .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                        .await;
                }
                let _ = peer.notify_resource_list_changed().await;
                let _ = peer.notify_prompt_list_changed().await;
                Ok(())
            }
            Event::Log(level, data) => {
                let min = state.log_level.lock().ok().and_then(|l| *l);
                if min.is_some_and(|m| level_rank(level) < level_rank(m)) {
                    continue;
                }
                peer.notify_logging_message(
                    LoggingMessageNotificationParam::new(level, data).with_logger("kbdb"),
                )
                .await
            }
        };
        if let Err(e) = res {
            tracing::debug!("notification failed: {e}");
            break;
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
    let state = Arc::new(State {
        pool,
        log_level: Mutex::new(None),
        subscriptions: Mutex::new(HashSet::new()),
        events: tx.clone(),
    });
    let server = Kbdb {
        state: state.clone(),
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
