//! Writes the seed corpora under `fuzz/seeds/<target>/` from the test fixtures and the specs'
//! examples: `cargo run --example make_seeds` (in `fuzz/`, with `CARGO_TARGET_DIR` set
//! outside the repository). Seeds are committed; re-run after a format changes.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

const MODELS_TOML: &str = include_str!("../../tests/fixtures/collection/models.toml");
const LOGIN: &str = include_str!("../../tests/fixtures/collection/stories/login.md");
const SIGNUP: &str = include_str!("../../tests/fixtures/collection/stories/signup.md");
const AUTH: &str = include_str!("../../tests/fixtures/collection/epics/auth.md");
const DANA: &str = include_str!("../../tests/fixtures/collection/people/dana.md");

fn write(dir: &Path, name: &str, bytes: impl AsRef<[u8]>) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn rpc(id: u64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// The kbid the seeded knowledge base gives this text (fuzz/src/harness.rs learns it).
fn kbid(text: &str) -> String {
    kbdb::kbid_of(text.as_bytes())
}

fn jsonrpc(dir: &Path) {
    let runtime = kbid(
        "# Tokio runtime\n\nThe MCP server runs on tokio; see kbdb://document/epics/auth, [login](../stories/login.md) and [[Setup]].",
    );
    let seeds: Vec<(&str, String)> = vec![
        ("hello", rpc(1, "hello", Value::Null)),
        (
            "learn",
            rpc(
                2,
                "learn",
                json!({"content": "# Group commit\n\nConcurrent learns share one fsync. See kbdb://section/0123456789abcdefghjkmnpqrs.",
                       "title": "Group commit", "tags": ["daemon", "perf"], "docid": "notes/daemon"}),
            ),
        ),
        (
            "learn_many",
            rpc(
                3,
                "learn_many",
                json!({"requests": [{"content": "first fact"}, {"content": ""},
                                    {"content": "aGVsbG8=", "type": "image/png"}]}),
            ),
        ),
        (
            "learn_document",
            rpc(
                4,
                "learn_document",
                json!({"docid": "stories/new", "markdown": format!("{SIGNUP}\n## Extra\n\nmore\n")}),
            ),
        ),
        (
            "search",
            rpc(
                5,
                "search",
                json!({"query": "tokio \"MCP server\" runtime", "limit": 5, "content": true}),
            ),
        ),
        (
            "search_filtered",
            rpc(
                6,
                "search",
                json!({"query": "session", "model": "Story", "where": {"status": "ready"},
                       "mode": "documents"}),
            ),
        ),
        (
            "recall",
            rpc(7, "recall", json!({"kbid": runtime, "depth": 3, "max_chars": 500})),
        ),
        (
            "retrieve_content",
            [
                rpc(8, "retrieve", json!({"docid": "guides/setup"})),
                rpc(9, "content", json!({"ids": ["guides/setup", runtime]})),
                rpc(10, "retrieve", json!({"kbid": runtime})),
            ]
            .join("\n"),
        ),
        (
            "query",
            rpc(
                11,
                "query",
                json!({"model": "Story", "where": {"status": {"$in": ["ready", "done"]}, "points": {"$gte": 3}},
                       "sort": "-meta.points", "limit": 10}),
            ),
        ),
        (
            "update_section",
            rpc(
                12,
                "update_section",
                json!({"docid": "stories/login", "heading": "Notes", "action": "append",
                       "content": "- more notes", "occurrence": 2}),
            ),
        ),
        (
            "update_document",
            rpc(
                13,
                "update_document",
                json!({"pathId": "stories/signup", "meta": {"status": "done", "points": 8}}),
            ),
        ),
        (
            "create_delete_document",
            [
                rpc(
                    14,
                    "create_document",
                    json!({"model": "Story", "title": "Reset password", "meta": {"status": "draft"}}),
                ),
                rpc(15, "delete_document", json!({"docid": "stories/logout"})),
            ]
            .join("\n"),
        ),
        (
            "collection_reads",
            [
                rpc(16, "validate", json!({"target": "stories/login"})),
                rpc(17, "toc", Value::Null),
                rpc(18, "model_info", json!({"model": "Epic"})),
                rpc(
                    19,
                    "section_by_heading",
                    json!({"docid": "stories/login", "heading": "acceptance criteria"}),
                ),
                rpc(
                    20,
                    "search_content",
                    json!({"pattern": "lock(ed)? the account", "model": "Story"}),
                ),
                rpc(21, "model_instance", json!({"model": "Story", "docid": "stories/login"})),
            ]
            .join("\n"),
        ),
        (
            "skills",
            [
                rpc(22, "skill_get", json!({"name": "summarize"})),
                rpc(
                    23,
                    "skill_learn",
                    json!({"name": "review", "description": "Review", "body": "Review {{docid}}"}),
                ),
                rpc(24, "agent_list", Value::Null),
            ]
            .join("\n"),
        ),
        (
            "maintenance",
            [
                rpc(25, "status", Value::Null),
                rpc(26, "check", Value::Null),
                rpc(27, "changes_since", json!({"seq": 0})),
                rpc(28, "kbids_with_prefix", json!({"prefix": "a", "limit": 3})),
                rpc(29, "synonyms_list", Value::Null),
            ]
            .join("\n"),
        ),
        (
            "bad_lines",
            [
                "not json",
                "{\"jsonrpc\": \"1.0\", \"id\": 1, \"method\": \"status\"}",
                "[1, 2, 3]",
                "{\"jsonrpc\": \"2.0\", \"id\": {\"x\": 1}, \"method\": \"nope\"}",
                "{\"jsonrpc\": \"2.0\", \"id\": 2, \"method\": \"search\", \"params\": {\"query\": 5}}",
                "   ",
            ]
            .join("\n"),
        ),
    ];
    for (name, text) in seeds {
        write(dir, name, format!("{text}\n"));
    }
}

fn mcp(dir: &Path) {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "fuzz", "version": "1.0.0"}}})
    .to_string();
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let session = |lines: &[String]| {
        let mut all = vec![init.clone(), initialized.to_string()];
        all.extend(lines.iter().cloned());
        all.join("\n") + "\n"
    };
    let tool = |id: u64, name: &str, args: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": name, "arguments": args}})
        .to_string()
    };
    let req = |id: u64, method: &str, params: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
    };
    write(
        dir,
        "handshake_ping",
        session(&[r#"{"jsonrpc":"2.0","id":99,"method":"ping"}"#.to_string()]),
    );
    write(
        dir,
        "tools",
        session(&[
            req(1, "tools/list", json!({})),
            tool(2, "search", json!({"query": "login session", "limit": 3})),
            tool(
                3,
                "learn",
                json!({"content": "MCP learned fact", "tags": ["mcp"]}),
            ),
            tool(
                4,
                "recall",
                json!({"kbids": ["0123456789abcdefghjkmnpqrs"], "depth": 1}),
            ),
            tool(5, "content", json!({"ids": ["guides/setup"]})),
            tool(6, "status", json!({})),
        ]),
    );
    write(
        dir,
        "collection_tools",
        session(&[
            tool(
                1,
                "query",
                json!({"model": "Story", "where": [{"path": "meta.points", "operator": "gt", "value": 1}]}),
            ),
            tool(
                2,
                "update_section",
                json!({"pathId": "stories/login", "heading": "Notes", "action": "replace", "content": "x", "occurrence": 1}),
            ),
            tool(3, "validate", json!({"pathId": "stories/login"})),
            tool(4, "export", json!({"path": "../../escape"})),
        ]),
    );
    write(
        dir,
        "prompts_resources",
        session(&[
            req(1, "prompts/list", json!({})),
            req(
                2,
                "prompts/get",
                json!({"name": "summarize", "arguments": {"docid": "guides/setup", "style": "{{docid}}"}}),
            ),
            req(
                3,
                "resources/read",
                json!({"uri": "kbdb://document/stories/login/sections/Acceptance%20Criteria"}),
            ),
            req(4, "resources/list", json!({"cursor": "100"})),
            req(
                5,
                "completion/complete",
                json!({"ref": {"type": "ref/resource", "uri": "kbdb://document/{docid}"},
                       "argument": {"name": "docid", "value": "st"}}),
            ),
            req(6, "logging/setLevel", json!({"level": "debug"})),
        ]),
    );
    write(
        dir,
        "malformed",
        [
            "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\r".to_string(),
            "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":42}".to_string(),
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":1}}"
                .to_string(),
            init.clone(),
            "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":7}}".to_string(),
            "{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{}}".to_string(),
            "{broken".to_string(),
            "17".to_string(),
        ]
        .join("\n"),
    );
}

fn markdown(dir: &Path) {
    write(dir, "login.md", LOGIN);
    write(dir, "signup.md", SIGNUP);
    write(dir, "auth.md", AUTH);
    write(dir, "dana.md", DANA);
    write(
        dir,
        "toml_front_matter.md",
        "+++\nstatus = \"ready\"\npoints = 5\nlabels = [\"auth\", \"web\"]\ndue = 2026-12-15\n[nested]\nteam = \"identity\"\n+++\n# Login\n\n## Acceptance Criteria\n\n- works\n",
    );
    write(
        dir,
        "crlf_fences.md",
        "---\r\ntitle: CRLF\r\ntags:\r\n  - a\r\n  - b\r\n---\r\nintro\r\n\r\n# A\r\ntext\r\n~~~~\r\n# not a heading\r\n~~~\r\n## B ##\r\n\r\nsee [b](../b.md#x) and [[Wiki Page|alias]]\r\n",
    );
    write(
        dir,
        "references.md",
        "# Links\n\nSee kbdb://section/0123456789abcdefghjkmnpqrs and kbdb://document/guides/setup.\n\n[rel](./other.md) [abs](/root.md) [web](https://example.com) ![img](pic.png)\n\n## Same\n\n## Same\n\n   ### indented ###\n\n```rust\n# no\n```\n",
    );
    write(
        dir,
        "yaml_anchors.md",
        "---\nbase: &b {x: 1, y: [1, 2]}\nderived:\n  <<: *b\n  z: !tag 3\nempty:\nquoted: \"a: b\"\n---\n# T\n",
    );
}

fn layout(dir: &Path, tmp: &Path) {
    // A real export of a small knowledge base, packed in the target's archive format.
    let kb_dir = tmp.join("kb");
    let (kb, _) = kbdb::Kb::open_or_create(&kb_dir).unwrap();
    kb.models_load(MODELS_TOML).unwrap();
    kb.learn_document("stories/login", LOGIN, None).unwrap();
    kb.learn_document("epics/auth", AUTH, None).unwrap();
    kb.learn(kbdb::LearnRequest {
        content: "fn main() {}".into(),
        section_type: Some("text/x-rust".into()),
        title: Some("main".into()),
        tags: vec!["rust".into()],
        ..Default::default()
    })
    .unwrap();
    kb.synonyms_add("db", &["database".to_string()]).unwrap();
    let out = tmp.join("export");
    kb.export(&kbdb::ExportOptions {
        path: out.clone(),
        with_indexes: false,
        force: true,
        confine_to: None,
    })
    .unwrap();
    let mut files = Vec::new();
    collect(&out, &out, &mut files);
    files.sort();
    let mut archive = Vec::new();
    for (rel, bytes) in &files {
        archive.extend_from_slice(format!("@@ {rel}\n").as_bytes());
        archive.extend_from_slice(bytes);
        archive.push(b'\n'); // the separator, not part of the file
    }
    write(dir, "export", &archive);
    // The same with vectors (3 dimensions for every section).
    let mut idx = kbdb::maintenance::vectors_idx::VectorsIdx::new(3);
    for (rel, _) in &files {
        if let Some(name) = rel.strip_prefix("sections/")
            && let Some(kbid) = name.split('/').nth(1).and_then(|f| f.strip_suffix(".toml"))
        {
            idx.push(kbid, vec![0.25, -1.0, f32::NAN]);
        }
    }
    let meta = kbdb::maintenance::vectors_idx::VectorsMeta {
        model_name: "all-MiniLM-L6-v2".into(),
        dimensions: 3,
        version: 1,
        last_built: "2026-06-23T10:00:00Z".into(),
        section_count: idx.records.len() as u64,
    };
    let mut with_vectors = archive.clone();
    with_vectors.extend_from_slice(b"@@ indexes/vectors.idx\n");
    with_vectors.extend_from_slice(&idx.encode().unwrap());
    with_vectors.extend_from_slice(b"\n@@ indexes/vectors-meta.toml\n");
    with_vectors.extend_from_slice(meta.to_toml().as_bytes());
    with_vectors.push(b'\n');
    write(dir, "export_with_vectors", &with_vectors);
    // One document and its sections only, and a layout with problems.
    let mut small = Vec::new();
    for (rel, bytes) in &files {
        if rel == "catalog.toml"
            || rel.starts_with("sections/")
            || rel == "documents/epics/auth.toml"
        {
            small.extend_from_slice(format!("@@ {rel}\n").as_bytes());
            small.extend_from_slice(bytes);
            small.push(b'\n');
        }
    }
    write(dir, "one_document", &small);
    let broken = String::from_utf8_lossy(&archive)
        .replacen("checksum = \"", "checksum = \"0", 1)
        .replacen("size = ", "size = 1", 1);
    write(dir, "problems", broken.as_bytes());
    write(
        dir,
        "links_and_folders",
        "@@ catalog.toml\n[catalog]\nformat_version = 1\nkbdb_version = \"0.1.0\"\nschema_version = 6\nexported_at = \"2026-01-01T00:00:00Z\"\nsections = 0\ndocuments = 0\n@@> documents/a.toml\ncatalog.toml\n@@/ sections/zz/sub\n@@ documents/b.txt\nx\n",
    );
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(root, &p, out);
        } else {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            out.push((rel, std::fs::read(&p).unwrap()));
        }
    }
}

fn vectors(dir: &Path) {
    use kbdb::maintenance::vectors_idx::{VectorsIdx, VectorsMeta};
    let mut idx = VectorsIdx::new(4);
    idx.push("0123456789abcdefghjkmnpqrs", vec![1.0, 0.0, -0.5, 2.5]);
    idx.push(
        "zyxwvtsrqpnmkjhg0123456789",
        vec![f32::NAN, f32::INFINITY, 0.0, -0.0],
    );
    write(dir, "two_records.idx", idx.encode().unwrap());
    write(dir, "empty.idx", VectorsIdx::new(384).encode().unwrap());
    let meta = VectorsMeta {
        model_name: "all-MiniLM-L6-v2".into(),
        dimensions: 384,
        version: 1,
        last_built: "2026-06-23T10:00:00Z".into(),
        section_count: 2847,
    };
    write(dir, "meta.toml", meta.to_toml());
    write(
        dir,
        "meta_spec.toml",
        "[vectors]\nmodel_name  = \"all-MiniLM-L6-v2\"\ndimensions  = 384\nversion     = 1\nlast_built  = \"2026-06-23T10:00:00Z\"\nsection_count = 2847\n",
    );
    write(
        dir,
        "meta_escapes.toml",
        "[vectors]\nmodel_name = \"a\\\"b\\u0001\\n\"\ndimensions = 65535\nversion = 1\nlast_built = \"2026-06-23T10:00:00.123+02:00\"\nsection_count = 0\nextra = 1\n",
    );
}

fn queries(dir: &Path) {
    let seeds: Vec<(&str, String)> =
        vec![
        ("words", "tokio runtime login".into()),
        ("phrase", "\"acceptance criteria\" session -lock".into()),
        ("identifiers", "snake_case_name CamelCaseIdent kebab-case x.y::z".into()),
        ("operators", "NOT a AND b OR \"unclosed".into()),
        ("unicode", "Ünïcödé 日本語 🔥 \u{0} \u{feff}".into()),
        (
            "query_object",
            json!({"model": "Story", "where": {"status": "ready", "points": {"$gte": 3, "$lt": 9},
                   "labels": ["auth"], "nested.team": {"$exists": true}},
                   "sort": [{"path": "meta.points", "direction": "desc"}, "title"],
                   "limit": 5, "offset": 1, "method": "fetchAll"})
            .to_string(),
        ),
        (
            "query_array",
            json!({"where": [{"path": "meta.status", "operator": "$in", "value": ["ready", null]},
                             {"path": "title", "operator": "regex", "value": "^Lo(g|ck)"},
                             {"path": "meta.labels.0", "operator": "startsWith", "value": "a"}],
                   "sort": {"meta.due": "asc", "title": -1}, "limit": "count"})
            .to_string(),
        ),
        (
            "query_edge",
            json!({"model": "", "where": {"meta": {"$notIn": [1, "x"]}, "id": {"$endsWith": "n"}},
                   "limit": "10", "method": "LAST"})
            .to_string(),
        ),
    ];
    for (name, text) in seeds {
        write(dir, name, text);
    }
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let tmp = tempfile::tempdir().unwrap();
    jsonrpc(&root.join("jsonrpc_line"));
    mcp(&root.join("mcp_message"));
    markdown(&root.join("markdown_split"));
    layout(&root.join("import_layout"), tmp.path());
    vectors(&root.join("vectors_idx"));
    queries(&root.join("query_parser"));
    println!("seeds written to {}", root.display());
}
