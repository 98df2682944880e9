//! The drivers of the fuzz targets (docs/fuzzing.md). One function per target feeds one input
//! to kbdb's real parsing and handling code and checks what must hold for every input: no
//! panic (a panic is the failure), plus cheap round-trip properties where a parsed value can be
//! written back. Hangs and unbounded allocations are caught by libFuzzer (`-timeout`,
//! `-rss_limit_mb`, `-malloc_limit_mb`).
//!
//! This file is also compiled into the root crate's `tests/fuzz_regressions.rs`
//! (`#[path = "../fuzz/src/harness.rs"]`), so crash inputs replay through exactly the same code
//! path in the normal test suite. It therefore uses only crates the root package depends on.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use serde_json::{Value, json};

use kbdb::Kb;
use kbdb::daemon::methods::{self, CallError, CallResult};
use kbdb::daemon::server::{RequestLine, parse_request, reply_line};

// ---------------------------------------------------------------------------------------------
// Sandbox and the shared knowledge base
// ---------------------------------------------------------------------------------------------

static SANDBOX: OnceLock<PathBuf> = OnceLock::new();

extern "C" fn remove_sandbox() {
    if let Some(dir) = SANDBOX.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A private folder for this process, removed at exit: under `$KBDB_FUZZ_TMP`, else
/// `/dev/shm` (fsync is free on tmpfs, so writes cost little), else the temp folder.
pub fn sandbox() -> &'static Path {
    SANDBOX.get_or_init(|| {
        let base = match std::env::var_os("KBDB_FUZZ_TMP") {
            Some(d) => PathBuf::from(d),
            None if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
            None => std::env::temp_dir(),
        };
        let dir = tempfile::Builder::new()
            .prefix("kbdb-fuzz-")
            .tempdir_in(&base)
            .expect("cannot create the fuzz sandbox")
            .keep();
        // SAFETY: registering a plain `extern "C" fn()` has no preconditions.
        unsafe { libc::atexit(remove_sandbox) };
        dir
    })
}

/// The knowledge base the daemon and MCP targets talk to, with the writes applied since it
/// was (re)created.
struct KbState {
    kb: Kb,
    writes: usize,
    generation: usize,
}

/// Writes applied before the knowledge base is thrown away and seeded again (keeps it small,
/// so every input sees nearly the same store).
const RESET_AFTER_WRITES: usize = 256;

static KB: Mutex<Option<KbState>> = Mutex::new(None);

fn kb_state() -> MutexGuard<'static, Option<KbState>> {
    KB.lock().unwrap_or_else(|e| e.into_inner())
}

const MODELS_TOML: &str = include_str!("../../tests/fixtures/collection/models.toml");
const COLLECTION: &[(&str, &str)] = &[
    (
        "epics/auth.md",
        include_str!("../../tests/fixtures/collection/epics/auth.md"),
    ),
    (
        "epics/billing.md",
        include_str!("../../tests/fixtures/collection/epics/billing.md"),
    ),
    (
        "stories/login.md",
        include_str!("../../tests/fixtures/collection/stories/login.md"),
    ),
    (
        "stories/signup.md",
        include_str!("../../tests/fixtures/collection/stories/signup.md"),
    ),
    (
        "stories/logout.md",
        include_str!("../../tests/fixtures/collection/stories/logout.md"),
    ),
    (
        "people/dana.md",
        include_str!("../../tests/fixtures/collection/people/dana.md"),
    ),
];

fn seed_call(kb: &Kb, method: &str, params: Value) -> Value {
    match methods::call(kb, method, params, &|_, _| {}) {
        Ok(v) => v,
        Err(e) => panic!("seeding the fuzz knowledge base: {method} failed: {e:?}"),
    }
}

/// A fresh knowledge base: the test collection (models + documents, synced from a folder),
/// loose sections with references, a markdown document, synonyms, a skill and an agent.
fn seeded_kb(generation: usize) -> Kb {
    let dir = sandbox().join(format!("kb-{generation}"));
    let _ = std::fs::remove_dir_all(&dir);
    let (kb, _) = Kb::open_or_create(&dir).expect("cannot create the fuzz knowledge base");
    seed_call(&kb, "models_load", json!({ "toml": MODELS_TOML }));
    let folder = sandbox().join(format!("collection-{generation}"));
    let _ = std::fs::remove_dir_all(&folder);
    for (path, text) in COLLECTION {
        let p = folder.join(path);
        std::fs::create_dir_all(p.parent().expect("fixture path has a folder"))
            .expect("cannot write the fixture collection");
        std::fs::write(&p, text).expect("cannot write the fixture collection");
    }
    seed_call(&kb, "sync", json!({ "dir": folder }));
    for req in [
        json!({"content": "# Tokio runtime\n\nThe MCP server runs on tokio; see kbdb://document/epics/auth, [login](../stories/login.md) and [[Setup]].",
               "title": "Tokio runtime", "tags": ["rust", "async"], "docid": "notes/runtime"}),
        json!({"content": "fn main() {\n    println!(\"hello\");\n}", "type": "text/x-rust", "title": "main"}),
        json!({"content": "redb transactions are durable once commit returns", "type": "text/plain",
               "description": "storage fact", "tags": ["storage"]}),
    ] {
        seed_call(&kb, "learn", req);
    }
    seed_call(
        &kb,
        "learn_document",
        json!({"docid": "guides/setup", "markdown": "# Setup\n\nInstall kbdb.\n\n## Configure\n\nEdit `worker.toml`.\n\n```toml\n# not a heading\n```\n\n## Run\n\nStart `kbdb daemon`.\n"}),
    );
    seed_call(
        &kb,
        "synonyms_add",
        json!({"term": "db", "synonyms": ["database", "store"]}),
    );
    let skill = seed_call(
        &kb,
        "skill_learn",
        json!({"name": "summarize", "description": "Summarize a document",
               "arguments": [{"name": "docid", "required": true}, {"name": "style"}],
               "body": "Summarize {{docid}} in the {{ style }} style."}),
    );
    seed_call(
        &kb,
        "agent_create",
        json!({"name": "helper", "description": "Helps with documents", "persona": "You help.",
               "skills": [skill["kbid"]]}),
    );
    kb
}

/// Run `f` on the shared knowledge base (created on first use, recreated after
/// [`RESET_AFTER_WRITES`] writes).
fn with_kb<T>(f: impl FnOnce(&mut KbState) -> T) -> T {
    let mut guard = kb_state();
    if guard
        .as_ref()
        .is_some_and(|s| s.writes >= RESET_AFTER_WRITES)
    {
        let old = guard.take().expect("checked above");
        let (dir, generation) = (old.kb.dir().to_path_buf(), old.generation);
        drop(old);
        let _ = std::fs::remove_dir_all(dir);
        let _ = std::fs::remove_dir_all(sandbox().join(format!("collection-{generation}")));
        *guard = Some(KbState {
            kb: seeded_kb(generation + 1),
            writes: 0,
            generation: generation + 1,
        });
    }
    let state = guard.get_or_insert_with(|| KbState {
        kb: seeded_kb(0),
        writes: 0,
        generation: 0,
    });
    f(state)
}

// ---------------------------------------------------------------------------------------------
// Daemon methods
// ---------------------------------------------------------------------------------------------

/// Methods that take a path of the caller's file system: never run by the fuzzer (it must not
/// read or write outside its sandbox). `import`'s reader has a target of its own.
const PATH_METHODS: &[&str] = &["export", "import", "sync", "sync_forget"];

/// Methods that change the store outside the write group.
const OTHER_WRITES: &[&str] = &[
    "gc",
    "rebuild",
    "synonyms_add",
    "synonyms_remove",
    "skill_learn",
    "skill_delete",
    "agent_create",
    "agent_delete",
    "models_load",
];

/// One daemon method, as the daemon dispatches it (`src/daemon/server.rs`): writes validated
/// and prepared, then applied as one group (the writer thread's `write_prepared_unindexed`),
/// the lexical index fed, the answer built by `methods::write_result`; every other method
/// through `methods::call`. None: a method the fuzzer does not run.
fn dispatch(state: &mut KbState, method: &str, params: Value) -> Option<CallResult> {
    let kb = &state.kb;
    Some(match method {
        "hello" => Ok(json!({"version": env!("CARGO_PKG_VERSION")})),
        "shutdown" => Ok(json!({"stopping": true})),
        "subscribe" => Ok(json!({"subscribed": true})),
        m if PATH_METHODS.contains(&m) => return None,
        m if methods::is_grouped_write(m) => {
            let r = (|| {
                let ops = methods::write_ops(kb, m, params)?;
                kb.check_batch(ops.len())?;
                let prepared = ops.into_iter().map(|op| kb.prepare_write(op)).collect();
                let outcomes = kb.write_prepared_unindexed(prepared)?;
                kb.index_pending();
                methods::write_result(kb, m, outcomes)
            })();
            state.writes += 1;
            r
        }
        m => {
            let r = methods::call(kb, m, params, &|_, _| {});
            if OTHER_WRITES.contains(&m) {
                state.writes += 1;
            }
            r
        }
    })
}

/// The daemon's handling of one request line (`handle` in `src/daemon/server.rs`, through the
/// same `parse_request` and `reply_line`): the response line, or None for a blank line or a
/// method the fuzzer does not run.
fn daemon_line(state: &mut KbState, line: &[u8]) -> Option<String> {
    match parse_request(line) {
        RequestLine::Blank => None,
        RequestLine::Invalid(reply) => Some(reply),
        RequestLine::Call {
            id, method, params, ..
        } => Some(reply_line(&id, dispatch(state, &method, params)?)),
    }
}

/// A response line must be one JSON-RPC 2.0 response: a result or an error with a code.
fn check_response(line: &str) {
    assert!(!line.contains('\n'), "a response is one line: {line}");
    let v: Value = serde_json::from_str(line).expect("a response is JSON");
    assert_eq!(v["jsonrpc"], "2.0", "{line}");
    match (v.get("result"), v.get("error")) {
        (Some(_), None) => {}
        (None, Some(e)) => {
            assert!(e["code"].is_i64(), "error code: {line}");
            assert!(e["message"].is_string(), "error message: {line}");
            if let Some(d) = e.get("data") {
                assert!(d["code"].is_string() && d["message"].is_string(), "{line}");
            }
        }
        _ => panic!("neither result nor error: {line}"),
    }
}

/// Lines of one input the daemon targets handle at most.
const MAX_LINES: usize = 8;

/// `jsonrpc_line`: request lines (one per `\n`, as the daemon reads them) dispatched to the
/// real method dispatcher over a real knowledge base. Returns the response lines.
pub fn jsonrpc_line(data: &[u8]) -> Vec<String> {
    with_kb(|state| {
        let mut out = Vec::new();
        for line in data.split_inclusive(|b| *b == b'\n').take(MAX_LINES) {
            if let Some(resp) = daemon_line(state, line) {
                check_response(&resp);
                out.push(resp);
            }
        }
        out
    })
}

// ---------------------------------------------------------------------------------------------
// MCP
// ---------------------------------------------------------------------------------------------

/// An in-memory writer for the transport's replies.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl tokio::io::AsyncWrite for Capture {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("cannot start a tokio runtime")
    })
}

/// Messages of one input handed on to the server's handling at most.
const MAX_MESSAGES: usize = 16;

/// What the MCP target saw: the messages the transport passed on (as JSON) and the error
/// replies it wrote itself.
pub struct McpOutcome {
    pub messages: Vec<Value>,
    pub replies: Vec<Value>,
}

/// `mcp_message`: the input as the MCP server's stdin. The real line transport
/// (`src/mcp/transport.rs`) frames, classifies and parses it (answering bad lines itself);
/// each message it hands on is checked to serialise and parse back the same, and the
/// synchronous part of the server's handling runs on it: `tools/call` through the server's
/// tool→method mapping (`mcp::server::tool_call`) into the daemon dispatcher, `prompts/get` of
/// a skill through `skills::render`.
pub fn mcp_message(data: &[u8]) -> McpOutcome {
    use rmcp::model::ClientJsonRpcMessage;
    use rmcp::transport::Transport;

    let capture = Capture::default();
    let received: Vec<ClientJsonRpcMessage> = runtime().block_on(async {
        let mut t = kbdb::mcp::transport::LineTransport::new(data, capture.clone());
        let mut received = Vec::new();
        while received.len() < MAX_MESSAGES {
            match Transport::<rmcp::RoleServer>::receive(&mut t).await {
                Some(m) => received.push(m),
                None => break,
            }
        }
        let _ = Transport::<rmcp::RoleServer>::close(&mut t).await;
        received
    });

    let mut messages = Vec::new();
    for msg in &received {
        let v = serde_json::to_value(msg).expect("a parsed MCP message serialises");
        let back: ClientJsonRpcMessage =
            serde_json::from_value(v.clone()).expect("a serialised MCP message parses again");
        assert_eq!(
            serde_json::to_value(&back).expect("serialises"),
            v,
            "an MCP message survives a round trip"
        );
        messages.push(v);
    }
    with_kb(|state| {
        for msg in received {
            mcp_handle(state, msg);
        }
    });

    let bytes = capture.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let text = String::from_utf8(bytes).expect("replies are UTF-8");
    let mut replies = Vec::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).expect("a transport reply is JSON");
        assert_eq!(v["jsonrpc"], "2.0", "{line}");
        assert!(
            v["error"]["code"].is_i64(),
            "a transport reply is an error: {line}"
        );
        assert!(v["error"]["message"].is_string(), "{line}");
        replies.push(v);
    }
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "replies end with a line end"
    );
    McpOutcome { messages, replies }
}

/// The server's handling of one message, as far as it runs without a client session.
fn mcp_handle(state: &mut KbState, msg: rmcp::model::ClientJsonRpcMessage) {
    use rmcp::model::{ClientRequest, JsonRpcMessage};

    let JsonRpcMessage::Request(req) = msg else {
        return;
    };
    match req.request {
        ClientRequest::CallToolRequest(call) => {
            let name = call.params.name.to_string();
            let known = kbdb::mcp::tools::tool_definitions()
                .as_array()
                .is_some_and(|a| a.iter().any(|t| t["name"] == name));
            let args = call.params.arguments.unwrap_or_default();
            if !known || (name == "skill-learn" && !args.contains_key("body")) {
                return; // the server answers -32602, or asks the client to sample a body
            }
            let dir = state.kb.dir().to_path_buf();
            if let Ok((method, params)) = kbdb::mcp::server::tool_call(&dir, &name, args)
                && let Some(r) = dispatch(state, method, params)
            {
                // The server's tool result: the method's JSON as text (or its error's text).
                match r {
                    Ok(v) => {
                        let _ = serde_json::to_string_pretty(&v).expect("a result serialises");
                    }
                    Err(CallError::Kb(e)) => {
                        let _ = e.to_string();
                    }
                    Err(_) => {}
                }
            }
        }
        ClientRequest::GetPromptRequest(get) => {
            let name = get.params.name.to_string();
            if name.starts_with("agent:") || name.starts_with("create-") {
                return;
            }
            let Some(Ok(skill)) = dispatch(state, "skill_get", json!({ "name": name })) else {
                return;
            };
            let Ok(skill) = serde_json::from_value::<kbdb::skills::SkillDefinition>(skill) else {
                return;
            };
            let values = get.params.arguments.unwrap_or_default();
            let _ = kbdb::skills::render(&skill.body, &skill.arguments, &values);
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Markdown, front matter, references, section edits
// ---------------------------------------------------------------------------------------------

/// `markdown_split`: front matter split (YAML/TOML) and re-rendered, the body split into
/// sections, its headings located, each edit action tried on a heading, reference markers
/// extracted, and the preprocessing step checked to be idempotent.
pub fn markdown_split(data: &[u8]) {
    use kbdb::text::section_edit::{self, Action};
    use kbdb::text::{frontmatter, markdown, markers, preprocess};

    let text = String::from_utf8_lossy(data);

    let pre = preprocess(&text);
    assert_eq!(preprocess(&pre), pre, "preprocessing is idempotent");

    let body = match frontmatter::split(&text) {
        Ok((Some(fm), body)) => {
            // Round trip: what was read renders, and the rendering reads back the same.
            if let Ok(rendered) = frontmatter::render(fm.syntax, &fm.meta, &fm.key_order) {
                match frontmatter::split(&rendered) {
                    Ok((Some(again), rest)) => {
                        assert_eq!(again, fm, "rendered front matter reads back the same");
                        assert_eq!(rest, "", "rendered front matter is the whole text");
                    }
                    other => panic!("rendered front matter does not read back: {other:?}"),
                }
            }
            // The other syntax: either it renders and reads back, or it is a clear error.
            let other = match fm.syntax {
                frontmatter::Syntax::Yaml => frontmatter::Syntax::Toml,
                frontmatter::Syntax::Toml => frontmatter::Syntax::Yaml,
            };
            if let Ok(rendered) = frontmatter::render(other, &fm.meta, &fm.key_order) {
                let (again, _) = frontmatter::split(&rendered).expect("rendered reads back");
                assert_eq!(again.map(|f| f.meta), Some(fm.meta.clone()));
            }
            body
        }
        Ok((None, body)) => body,
        Err(e) => {
            assert!(e.to_string().starts_with("front matter: "), "{e}");
            &text
        }
    };

    let sections = markdown::split_sections(body);
    for s in &sections {
        assert!(s.level <= 6);
        if s.level > 0 {
            let first = s.text.lines().next().unwrap_or("");
            assert_eq!(
                markdown::atx_heading(first),
                Some((s.level, s.title.clone())),
                "a section starts with its heading line"
            );
        }
    }

    let headings = section_edit::headings(body);
    let mut last_start = None;
    for h in &headings {
        assert!((1..=6).contains(&h.level));
        assert!(h.start < h.body_start && h.body_start <= h.end && h.end <= body.len());
        assert!(body.is_char_boundary(h.start) && body.is_char_boundary(h.end));
        assert!(last_start.is_none_or(|s| s < h.start), "headings in order");
        last_start = Some(h.start);
    }
    // The heading-section count agrees between the two splitters (both follow one rule).
    let heading_sections = sections.iter().filter(|s| s.level > 0).count();
    assert_eq!(
        heading_sections,
        headings.len(),
        "both splitters see the same headings"
    );

    if let Some(h) = headings.first().or(headings.last()) {
        let content = sections
            .last()
            .map(|s| s.text.as_str())
            .unwrap_or("new text");
        // A lone CR ends a line too (as `section_edit` reads lines).
        let last_line = &body[body.rfind(['\n', '\r']).map_or(0, |i| i + 1)..];
        for action in Action::ALL {
            // Pick this heading exactly: the occurrence among the headings of the same text.
            let r = section_edit::find_section(body, &h.text, None);
            let occurrence = match r {
                Err(section_edit::EditError::Ambiguous { lines, .. }) => {
                    lines.iter().position(|l| *l == h.line).map(|i| i + 1)
                }
                _ => None,
            };
            match section_edit::edit(body, &h.text, action, Some(content), occurrence) {
                // An edit moves only the edited section's lines and keeps the bytes after them
                // as written (`section_edit::edit`), so a text whose last line has no line end
                // keeps it unended unless the edit reaches the end: the output ends with a line
                // end, or with the input's own unended last line.
                Ok(out) => assert!(
                    out.is_empty()
                        || out.ends_with(['\n', '\r'])
                        || (!last_line.is_empty() && out.ends_with(last_line)),
                    "an edit ends with a line end or with the text's unended last line"
                ),
                Err(e) => assert!(!e.to_string().is_empty()),
            }
        }
        let _ = section_edit::edit(
            body,
            "# no such heading here",
            Action::Remove,
            None,
            Some(2),
        );
    }

    let found = markers::extract(body, Some("notes/fuzz"));
    assert!(found.len() <= markers::MAX_MARKERS);
    for m in &found {
        let _ = m.target.uri();
        let _ = m.target.key();
    }
    for s in sections.iter().take(8) {
        let _ = markers::slug(&s.title);
    }
}

// ---------------------------------------------------------------------------------------------
// Plain-file import layout
// ---------------------------------------------------------------------------------------------

/// Files one input may create at most.
const MAX_LAYOUT_ENTRIES: usize = 32;

/// A relative path of the layout from an entry header: segments of `[A-Za-z0-9._-]` (others
/// become `_`), no `.`/`..`/empty segment, at most 6 deep. None: unusable.
fn layout_path(header: &[u8]) -> Option<PathBuf> {
    let s = std::str::from_utf8(header).ok()?.trim();
    let mut out = PathBuf::new();
    let mut depth = 0;
    for seg in s.split('/') {
        if seg.is_empty() || seg == "." || seg == ".." {
            return None;
        }
        let clean: String = seg
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        out.push(clean);
        depth += 1;
    }
    (depth > 0 && depth <= 6).then_some(out)
}

/// One entry of the layout archive: what it is, its path below the root, its bytes.
struct Entry<'a> {
    kind: EntryKind,
    path: PathBuf,
    content: &'a [u8],
}

#[derive(Clone, Copy, PartialEq)]
enum EntryKind {
    File,
    Folder,
    Link,
}

/// The entries of a layout archive. The archive is a small text format: entries start with a
/// line `@@ <path>` (a file: its bytes up to the next `\n@@` or the end of the input, that
/// line end, and the input's final one, being separators), `@@/ <path>` (a folder) or
/// `@@> <path>` (a symbolic link to the entry's text, a relative target). Text before the
/// first header is ignored; paths are cleaned by [`layout_path`].
fn archive_entries(data: &[u8]) -> Vec<Entry<'_>> {
    let mut raw: Vec<&[u8]> = Vec::new();
    if let Some(i) = find(data, b"@@") {
        let mut rest = &data[i..];
        loop {
            match find(&rest[2..], b"\n@@") {
                Some(j) => {
                    raw.push(&rest[2..2 + j]);
                    rest = &rest[2 + j + 1..];
                }
                None => {
                    // The input's final line end, like the others before `@@`, is a separator.
                    let last = &rest[2..];
                    raw.push(last.strip_suffix(b"\n").unwrap_or(last));
                    break;
                }
            }
        }
    }
    let mut out = Vec::new();
    for entry in raw.into_iter().take(MAX_LAYOUT_ENTRIES) {
        let (kind, entry) = match entry.first() {
            Some(b'/') => (EntryKind::Folder, &entry[1..]),
            Some(b'>') => (EntryKind::Link, &entry[1..]),
            _ => (EntryKind::File, entry),
        };
        let (header, content) = match entry.iter().position(|b| *b == b'\n') {
            Some(i) => (&entry[..i], &entry[i + 1..]),
            None => (entry, &[][..]),
        };
        if let Some(path) = layout_path(header) {
            out.push(Entry {
                kind,
                path,
                content,
            });
        }
    }
    out
}

/// Write the input, a layout archive ([`archive_entries`]), as a layout under `root`.
pub fn unpack_layout(data: &[u8], root: &Path) {
    let _ = std::fs::remove_dir_all(root);
    std::fs::create_dir_all(root).expect("cannot create the layout folder");
    for e in archive_entries(data) {
        let path = root.join(&e.path);
        if let Some(parent) = path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        match e.kind {
            EntryKind::Folder => {
                let _ = std::fs::create_dir_all(&path);
            }
            EntryKind::Link => {
                let target = String::from_utf8_lossy(e.content).trim().to_string();
                if !target.starts_with('/') && !target.contains("..") && !target.is_empty() {
                    let _ = std::os::unix::fs::symlink(target, &path);
                }
            }
            EntryKind::File => {
                let _ = std::fs::write(&path, e.content);
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let mut from = 0;
    while let Some(i) = hay[from..].iter().position(|b| *b == first) {
        let at = from + i;
        if hay[at + 1..].starts_with(rest) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// The plan's content in a comparable form.
#[derive(Debug, PartialEq)]
struct PlanView {
    sections: Vec<(String, kbdb::types::records::SectionRecord, Vec<u8>)>,
    documents: Vec<kbdb::snapshot::layout::DocumentManifest>,
    synonyms: BTreeMap<String, Vec<String>>,
    /// The metadata and the vectors (their bits: NaN is data too).
    vectors: Option<(kbdb::snapshot::vectors_idx::VectorsMeta, VectorBits)>,
    models: Option<String>,
}

type VectorBits = Vec<([u8; 16], Vec<u32>)>;

fn plan_view(p: kbdb::snapshot::import::Plan) -> PlanView {
    use kbdb::snapshot::vectors_idx::key_of;

    let mut sections: Vec<_> = p
        .sections
        .into_iter()
        .map(|s| (s.kbid, s.record, s.bytes))
        .collect();
    sections.sort_by(|a, b| a.0.cmp(&b.0));
    // Only the vectors of the sections that were read: an import reuses no others
    // (`Kb::apply_import` looks up the imported kbids), and an export writes no others. A
    // lenient read keeps the whole vectors.idx even when a section was skipped (a bad
    // checksum, say), and writing that back would announce more vectors than sections.
    let read: HashSet<_> = sections.iter().map(|s| key_of(&s.0)).collect();
    PlanView {
        sections,
        documents: p.documents,
        synonyms: p.synonyms,
        vectors: p.vectors.map(|(meta, idx)| {
            let bits = idx
                .records
                .into_iter()
                .filter(|(k, _)| read.contains(k))
                .map(|(k, v)| (k, v.into_iter().map(f32::to_bits).collect()))
                .collect();
            (meta, bits)
        }),
        models: p.models,
    }
}

/// Write a read layout back in the documented format (what `export` writes).
fn write_layout(v: &PlanView, root: &Path) {
    use kbdb::snapshot::layout::{self, Catalog, CatalogInfo, SectionMeta};

    let _ = std::fs::remove_dir_all(root);
    std::fs::create_dir_all(root).expect("cannot create the layout folder");
    let catalog = Catalog {
        catalog: CatalogInfo {
            format_version: layout::FORMAT_VERSION,
            kbdb_version: "fuzz".into(),
            schema_version: 1,
            exported_at: "2025-01-01T00:00:00.000Z".into(),
            sections: v.sections.len() as u64,
            documents: v.documents.len() as u64,
            synonyms: v.synonyms.len() as u64,
            with_indexes: v.vectors.is_some(),
        },
    };
    std::fs::write(root.join(layout::CATALOG), toml_text(&catalog)).expect("write");
    for (kbid, r, bytes) in &v.sections {
        let dir = layout::section_dir(root, kbid);
        std::fs::create_dir_all(&dir).expect("write");
        let file = format!("{kbid}.{}", layout::extension(&r.section_type));
        let meta = SectionMeta {
            kbid: kbid.clone(),
            section_type: r.section_type.clone(),
            file: file.clone(),
            title: r.title.clone(),
            description: r.description.clone(),
            tags: r.tags.clone(),
            source_key: r.source_key.clone(),
            standalone: r.standalone,
            created_at: r.created_at.clone(),
            updated_at: r.updated_at.clone(),
            size: r.size,
            checksum: r.checksum.clone(),
        };
        std::fs::write(dir.join(format!("{kbid}.toml")), toml_text(&meta)).expect("write");
        std::fs::write(dir.join(file), bytes).expect("write");
    }
    for d in &v.documents {
        let path = layout::document_path(root, &d.docid);
        std::fs::create_dir_all(path.parent().expect("in documents/")).expect("write");
        std::fs::write(path, toml_text(d)).expect("write");
    }
    if !v.synonyms.is_empty() {
        let mut t = BTreeMap::new();
        t.insert("synonyms".to_string(), v.synonyms.clone());
        std::fs::write(root.join(layout::SYNONYMS), toml_text(&t)).expect("write");
    }
    if let Some(m) = &v.models {
        std::fs::write(root.join(layout::MODELS), m).expect("write");
    }
    if let Some((meta, bits)) = &v.vectors {
        let mut idx = kbdb::snapshot::vectors_idx::VectorsIdx::new(meta.dimensions);
        for (key, vector) in bits {
            let kbid = String::from_utf8(key.to_vec()).expect("keys are kbid characters");
            idx.push(&kbid, vector.iter().copied().map(f32::from_bits).collect());
        }
        let dir = root.join(layout::INDEXES_DIR);
        std::fs::create_dir_all(&dir).expect("write");
        let bytes = idx.encode().expect("vectors that were read encode again");
        std::fs::write(dir.join("vectors.idx"), bytes).expect("write");
        std::fs::write(dir.join("vectors-meta.toml"), meta.to_toml()).expect("write");
    }
}

fn toml_text<T: serde::Serialize>(v: &T) -> String {
    toml::to_string(v).expect("a layout record serialises to TOML")
}

/// The per-file records: each TOML entry read as what its path says (catalog, section
/// metadata, document manifest); whatever parses must write back and parse to the same value.
fn layout_records(data: &[u8]) {
    use kbdb::snapshot::layout::{CATALOG, Catalog, DocumentManifest, SectionMeta};

    fn round_trip<T>(text: &str)
    where
        T: serde::de::DeserializeOwned + serde::Serialize + PartialEq + std::fmt::Debug,
    {
        if let Ok(v) = toml::from_str::<T>(text) {
            let again = toml::to_string(&v).expect("a parsed record serialises");
            let back: T = toml::from_str(&again).expect("a written record parses");
            assert_eq!(back, v, "a layout record survives a round trip");
        }
    }
    for e in archive_entries(data) {
        let Ok(text) = std::str::from_utf8(e.content) else {
            continue;
        };
        if e.kind != EntryKind::File || e.path.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        match e
            .path
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
        {
            Some(CATALOG) => round_trip::<Catalog>(text),
            Some("sections") => round_trip::<SectionMeta>(text),
            Some("documents") => round_trip::<DocumentManifest>(text),
            _ => {}
        }
    }
}

/// `import_layout`: the input unpacked as a plain-file layout and read by the importer's
/// reader (`snapshot::import::read_layout`), lenient and strict; a layout that reads is
/// written back in the documented format and must read back the same, with no problem.
pub fn import_layout(data: &[u8]) {
    use kbdb::snapshot::import::read_layout;

    layout_records(data);
    let root = sandbox().join("layout");
    unpack_layout(data, &root);
    let limits = kbdb::config::Limits::default();
    let lenient = read_layout(&root, false, &limits, &|_, _| {});
    let strict = read_layout(&root, true, &limits, &|_, _| {});
    match (&lenient, &strict) {
        (Ok(l), Ok(_)) => assert!(l.problems.is_empty(), "strict accepted what had problems"),
        (Ok(l), Err(e)) => {
            let first = l.problems.first().expect("strict failed without a problem");
            assert_eq!(e.to_string(), format!("{}", bad_import(first)));
        }
        (Err(_), Err(_)) => {}
        (Err(e), Ok(_)) => panic!("lenient failed where strict did not: {e}"),
    }
    let Ok(plan) = lenient else {
        return;
    };
    let view = plan_view(plan);
    if view.sections.is_empty() && view.documents.is_empty() && view.vectors.is_none() {
        return;
    }
    let again_root = sandbox().join("layout-again");
    write_layout(&view, &again_root);
    let again = read_layout(&again_root, true, &limits, &|_, _| {})
        .unwrap_or_else(|e| panic!("a layout written back from what was read fails: {e}"));
    assert!(again.problems.is_empty());
    assert_eq!(plan_view(again), view, "a layout survives a round trip");
}

fn bad_import(p: &kbdb::ImportProblem) -> kbdb::KbError {
    kbdb::KbError::BadImport {
        path: p.path.clone(),
        reason: p.reason.clone(),
    }
}

// ---------------------------------------------------------------------------------------------
// vectors.idx / vectors-meta.toml
// ---------------------------------------------------------------------------------------------

/// `vectors_idx`: the input decoded as `vectors.idx` (a file that decodes encodes to the same
/// bytes, and every record is found by its key) and, when it is UTF-8, parsed as
/// `vectors-meta.toml` (what parses writes back and parses the same).
pub fn vectors_idx(data: &[u8]) {
    use kbdb::snapshot::vectors_idx::{VectorsIdx, VectorsIdxError, VectorsMeta};

    match VectorsIdx::decode(data) {
        Ok(idx) => {
            let again = idx.encode().expect("a decoded vectors.idx encodes");
            assert_eq!(
                again, data,
                "vectors.idx survives a round trip byte for byte"
            );
            for (key, vector) in idx.records.iter().take(64) {
                let kbid = std::str::from_utf8(key).expect("keys are kbid characters");
                let found = idx.get(kbid).expect("every record is found by its key");
                assert_eq!(found.len(), usize::from(idx.dimensions));
                assert_eq!(
                    found.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                    vector.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
                );
            }
        }
        Err(e) => assert!(matches!(e, VectorsIdxError::Index(_)), "{e}"),
    }
    if let Ok(text) = std::str::from_utf8(data) {
        match VectorsMeta::from_toml(text) {
            Ok(meta) => {
                let again = VectorsMeta::from_toml(&meta.to_toml())
                    .expect("written vectors-meta.toml parses");
                assert_eq!(again, meta, "vectors-meta.toml survives a round trip");
            }
            Err(e) => assert!(matches!(e, VectorsIdxError::Meta(_)), "{e}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Search and collection queries
// ---------------------------------------------------------------------------------------------

/// `query_parser`: the input as a search query (the parser with synonyms, then a real search
/// of the seeded knowledge base in two modes) and, when it is JSON, as a collections query
/// (`QuerySpec::from_json`, run over views, and the knowledge base's `query`).
pub fn query_parser(data: &[u8]) {
    use kbdb::collections::filter::{QuerySpec, run};
    use kbdb::search::query::{MAX_QUERY_PARTS, parse};

    let text = String::from_utf8_lossy(data);
    let synonyms = |w: &str| -> Vec<String> {
        if w.len().is_multiple_of(3) {
            vec![format!("{w} alias"), w.chars().rev().collect()]
        } else {
            Vec::new()
        }
    };
    let parsed = parse(&text, &synonyms);
    assert!(parsed.parts.len() <= MAX_QUERY_PARTS);
    let mut labels = std::collections::HashSet::new();
    for p in &parsed.parts {
        assert!(labels.insert(p.label()), "repeated parts are merged");
    }

    let json: Option<Value> = serde_json::from_slice(data).ok();
    let views = [
        json!({"id": "epics/auth", "title": "Auth", "model": "Epic",
               "meta": {"status": "in-progress", "priority": "high", "due": "2025-03-01"}}),
        json!({"id": "stories/login", "title": "Login", "model": "Story",
               "meta": {"status": "ready", "points": 5, "labels": ["auth", "web"],
                        "nested": {"team": "identity"}}}),
        json!({"id": "people/dana", "title": "Dana", "meta": {}}),
        json!({"id": "x", "meta": [1, "two", null]}),
    ];
    if let Some(v) = &json
        && let Ok(spec) = QuerySpec::from_json(v)
    {
        let out = run(views.iter(), &spec);
        assert!(out.docs().len() <= out.total_matched());
        if let Some(limit) = spec.limit {
            assert!(out.docs().len() <= limit);
        }
    }

    with_kb(|state| {
        let kb = &state.kb;
        // One real search per input (they dominate the cost): sections, or documents mode for
        // inputs of odd length.
        let mut req = kbdb::SearchRequest::new(text.to_string());
        if data.len() % 2 == 1 {
            req.mode = Some(kbdb::search::SearchMode::Documents);
        }
        if let Ok(r) = kb.search(&req) {
            let _ = serde_json::to_value(&r).expect("a search response serialises");
        }
        if let Some(v) = &json {
            let _ = kb.query(v);
            let mut req = kbdb::SearchRequest::new("login");
            req.where_ = Some(v.clone());
            let _ = kb.search(&req);
        }
    });
}
