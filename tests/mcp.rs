//! `kbdb mcp` as a child process, driven with raw JSON-RPC lines: the handshake, every tool
//! (success and documented errors), resources and a subscription fired by another process,
//! prompts, completion, logging and the protocol error paths.

mod common;

use common::mcp::McpChild as Mcp;
use common::{PNG_B64, TestDb};
use serde_json::{Value, json};

#[test]
fn tools_list_carries_every_tool_with_the_spec_annotations() {
    let db = TestDb::new();
    let mut m = Mcp::start(&db);
    let v = m.request("tools/list", json!({}));
    let tools = v["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        vec![
            "search",
            "learn",
            "unlearn",
            "retrieve",
            "recall",
            "content",
            "status",
            "check",
            "gc",
            "rebuild",
            "export",
            "skill-learn",
            "skill-list",
            "skill-get",
            "skill-delete",
            "agent-create",
            "agent-list",
            "agent-get",
            "agent-delete",
            "read_me",
            "inspect",
            "get_model_info",
            "list_documents",
            "query",
            "search_content",
            "text_search",
            "validate",
            "create_document",
            "update_document",
            "update_section",
            "delete_document"
        ]
    );
    let unlearn = &tools[2]["annotations"];
    assert_eq!(
        unlearn,
        &json!({"title": "Remove Section", "readOnlyHint": false, "destructiveHint": true,
                "idempotentHint": true, "openWorldHint": false})
    );
    for t in tools {
        assert_eq!(t["inputSchema"]["type"], "object", "{}", t["name"]);
        assert!(!t["description"].as_str().unwrap().is_empty());
    }
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
}

#[test]
fn every_tool_answers_and_its_documented_errors_are_tool_errors() {
    let db = TestDb::new();
    let mut m = Mcp::start(&db);
    // learn, search, retrieve, recall, content
    let r = m.tool_ok(
        "learn",
        json!({"content": "# Deploys\n\nWe deploy on Tuesdays; see [[ops/freeze]].", "docid": "ops/deploy", "tags": ["process"]}),
    );
    let kbid = r["kbid"].as_str().unwrap().to_string();
    let (_, compact) = m.tool("learn", json!({"content": "another fact"}));
    assert!(!compact.contains('\n'), "learn answers compact JSON");
    let s = m.tool_ok("search", json!({"query": "tuesdays"}));
    assert_eq!(s["items"][0]["kbid"], kbid);
    let (_, pretty) = m.tool("search", json!({"query": "tuesdays"}));
    assert!(pretty.contains("\n  "), "search answers 2-space JSON");
    let got = m.tool_ok("retrieve", json!({"kbid": kbid}));
    assert_eq!(got[0]["sectionType"], "text/markdown");
    let doc = m.tool_ok("retrieve", json!({"docid": "ops/deploy"}));
    assert_eq!(doc["kbids"], json!([kbid]));
    let rc = m.tool_ok("recall", json!({"kbid": kbid, "depth": 2}));
    assert_eq!(rc["references"][0]["target"], "kbdb://document/ops/freeze");
    assert_eq!(rc["references"][0]["resolved"], false);
    let c = m.tool_ok("content", json!({"ids": ["ops/deploy"]}));
    assert_eq!(c["type"], "text/markdown");
    // status, check (a dangling wiki-link is a broken reference), rebuild, gc, export
    assert_eq!(m.tool_ok("status", json!({}))["sections"], 2);
    let chk = m.tool_ok("check", json!({}));
    assert_eq!(chk["ok"], false);
    assert_eq!(chk["errors"][0]["type"], "broken_reference");
    assert_eq!(m.tool_ok("rebuild", json!({}))["sections_reindexed"], 2);
    assert_eq!(m.tool_ok("gc", json!({}))["removed_sections"], 0);
    let ex = m.tool_ok("export", json!({"path": "snapshot"}));
    let expected = db.dir.parent().unwrap().join("snapshot");
    assert_eq!(
        ex["path"],
        expected.canonicalize().unwrap().to_str().unwrap()
    );
    assert!(expected.join("catalog.toml").is_file());
    // skills and agents
    let sk = m.tool_ok(
        "skill-learn",
        json!({"name": "review-file", "description": "Review a file", "body": "Review {{file}} for {{focus}}."}),
    );
    let skill = sk["kbid"].as_str().unwrap().to_string();
    assert_eq!(sk["arguments"][0]["name"], "file");
    assert_eq!(m.tool_ok("skill-list", json!({}))[0]["argumentCount"], 2);
    assert_eq!(
        m.tool_ok("skill-get", json!({"name": "review-file"}))["body"],
        "Review {{file}} for {{focus}}."
    );
    let ag = m.tool_ok(
        "agent-create",
        json!({"name": "reviewer", "description": "Reviews code", "persona": "You are a careful reviewer.", "skills": [skill]}),
    );
    assert_eq!(ag["docid"], "agent-reviewer");
    assert_eq!(m.tool_ok("agent-list", json!({}))[0]["skillCount"], 1);
    assert_eq!(
        m.tool_ok("skill-delete", json!({"kbid": skill}))["removed"],
        true
    );
    let a = m.tool_ok("agent-get", json!({"docid": "agent-reviewer"}));
    assert_eq!(
        a["skills"][0]["name"],
        Value::Null,
        "a deleted skill shows name null"
    );
    assert_eq!(
        m.tool_ok("agent-delete", json!({"docid": "agent-reviewer"}))["removed"],
        true
    );
    m.tool_ok("unlearn", json!({"kbid": kbid}));

    // Documented errors: tool results with isError and a message a model can act on.
    for (name, args, msg) in [
        ("retrieve", json!({}), "Provide kbid or docid"),
        ("recall", json!({}), "Provide kbid or kbids"),
        ("recall", json!({"kbid": kbid, "depth": -1}), "depth"),
        ("skill-get", json!({}), "Provide name or kbid"),
        (
            "skill-learn",
            json!({"name": "x", "description": "d", "body": "  "}),
            "skill body must not be empty",
        ),
        (
            "skill-learn",
            json!({"name": "Bad Name", "description": "d", "body": "b"}),
            "kebab-case",
        ),
        ("learn", json!({"content": ""}), "content"),
        (
            "learn",
            json!({"content": PNG_B64, "type": "image/png"}),
            "title",
        ),
        ("export", json!({"path": "/etc/kbdb-escape"}), "confined"),
        (
            "search",
            json!({"query": "x", "mode": "hybrid"}),
            "EMBEDDING_PROVIDER_NOT_CONFIGURED",
        ),
        ("content", json!({"ids": ["no/such/doc"]}), "no/such/doc"),
        (
            "agent-create",
            json!({"name": "a", "description": "d", "persona": "p", "skills": [kbid]}),
            "not skills",
        ),
    ] {
        let (err, text) = m.tool(name, args);
        assert!(err, "{name} should fail");
        assert!(
            text.contains(msg),
            "{name}: {text:?} should mention {msg:?}"
        );
    }
    // An unknown tool is a protocol error.
    let v = m.request(
        "tools/call",
        json!({"name": "no-such-tool", "arguments": {}}),
    );
    assert_eq!(v["error"]["code"], -32602);
}

/// Another process adds a section to `ops/runbook`; the server, subscribed to it, says so.
fn runbook_changed_elsewhere_is_heard(db: &TestDb, m: &mut Mcp) {
    db.learn(&[
        "## Escalation\n\nPage the on-call.",
        "--docid",
        "ops/runbook",
    ]);
    let n = m.wait_for(|v| v["method"] == "notifications/resources/updated");
    assert_eq!(n["params"]["uri"], "kbdb://document/ops/runbook");
}

#[test]
fn resources_list_read_and_a_subscription_fired_by_another_process() {
    let db = TestDb::new();
    db.learn(&[
        "# Runbook\n\nRestart the service.",
        "--docid",
        "ops/runbook",
    ]);
    let img = db.learn(&[PNG_B64, "--type", "image/png", "--title", "Pixel"])["kbid"]
        .as_str()
        .unwrap()
        .to_string();
    let mut m = Mcp::start(&db);
    let list = m.request("resources/list", json!({}));
    // The collection's four static resources, then the documents.
    assert_eq!(list["result"]["resources"][0]["uri"], "kbdb://schema");
    assert_eq!(
        list["result"]["resources"][4]["uri"],
        "kbdb://document/ops/runbook"
    );
    let t = m.request("resources/templates/list", json!({}));
    assert_eq!(
        t["result"]["resourceTemplates"].as_array().unwrap().len(),
        4
    );
    let doc = m.request(
        "resources/read",
        json!({"uri": "kbdb://document/ops/runbook"}),
    );
    let body: Value =
        serde_json::from_str(doc["result"]["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        body["sections"][0]["content"],
        "# Runbook\n\nRestart the service."
    );
    let pic = m.request(
        "resources/read",
        json!({"uri": format!("kbdb://section/{img}")}),
    );
    assert_eq!(pic["result"]["contents"][0]["mimeType"], "image/png");
    assert_eq!(pic["result"]["contents"][0]["blob"], PNG_B64);
    let missing = m.request("resources/read", json!({"uri": "kbdb://document/nope"}));
    assert_eq!(missing["error"]["code"], -32002);

    let sub = m.request(
        "resources/subscribe",
        json!({"uri": "kbdb://document/ops/runbook"}),
    );
    assert_eq!(sub["result"], json!({}));
    // Another process learns into the same database (through the shared daemon).
    runbook_changed_elsewhere_is_heard(&db, &mut m);
    // A new document changes the resource list (not the prompts: it is no skill or agent).
    db.learn(&["# New page", "--docid", "ops/new"]);
    m.wait_for(|v| v["method"] == "notifications/resources/list_changed");
}

/// Whether a notification `method` was received (and kept aside) so far.
fn seen(m: &mut Mcp, method: &str) -> bool {
    m.aside().iter().any(|v| v["method"] == method)
}

#[test]
fn prompts_list_changed_is_sent_only_when_a_skill_an_agent_or_the_models_change() {
    let db = TestDb::new();
    let plain = db.learn(&["A plain fact, no prompt."])["kbid"]
        .as_str()
        .unwrap()
        .to_string();
    let mut m = Mcp::start(&db);
    let marker = "kbdb://document/ops/marker";
    m.request("resources/subscribe", json!({"uri": marker}));
    // Ordinary writes by another process: a section, a document, a removal.
    db.learn(&["Another plain fact."]);
    db.learn(&["# Notes\n\nSome notes.", "--docid", "notes/a"]);
    db.json(&["unlearn", &plain]);
    // The change events reach the server in order: once the marker's update is here, every
    // notification of the writes before it has been sent.
    db.learn(&["# Marker", "--docid", "ops/marker"]);
    m.wait_for(|v| {
        v["method"] == "notifications/resources/updated" && v["params"]["uri"] == marker
    });
    assert!(seen(&mut m, "notifications/resources/list_changed"));
    assert!(
        !seen(&mut m, "notifications/prompts/list_changed"),
        "no prompt changed: {:?}",
        m.aside()
    );
    // A skill learned, an agent created, a skill deleted, the models loaded: each is heard.
    let skill = db.json(&[
        "skill",
        "learn",
        "triage",
        "--description",
        "Triage",
        "--body",
        "Triage {{issue}}",
    ])["kbid"]
        .as_str()
        .unwrap()
        .to_string();
    m.wait_for(|v| v["method"] == "notifications/prompts/list_changed");
    db.json(&[
        "agent",
        "create",
        "helper",
        "--description",
        "Helps",
        "--persona",
        "You help.",
        "--skill",
        &skill,
    ]);
    m.wait_for(|v| v["method"] == "notifications/prompts/list_changed");
    db.json(&["agent", "delete", "agent-helper"]);
    m.wait_for(|v| v["method"] == "notifications/prompts/list_changed");
    db.json(&["skill", "delete", &skill]);
    m.wait_for(|v| v["method"] == "notifications/prompts/list_changed");
    db.json(&["models", "load", &format!("{FIXTURE}/models.toml")]);
    m.wait_for(|v| v["method"] == "notifications/prompts/list_changed");
    // And a plain write after them: still no prompts notification (the marker first lets the
    // notifications of the writes above arrive, one write may bring several).
    db.learn(&["# Marker 1", "--docid", "ops/marker"]);
    m.wait_for(|v| {
        v["method"] == "notifications/resources/updated" && v["params"]["uri"] == marker
    });
    m.aside().clear();
    db.learn(&["Yet another plain fact."]);
    db.learn(&["# Marker 2", "--docid", "ops/marker"]);
    m.wait_for(|v| {
        v["method"] == "notifications/resources/updated" && v["params"]["uri"] == marker
    });
    assert!(
        !seen(&mut m, "notifications/prompts/list_changed"),
        "{:?}",
        m.aside()
    );
}

#[test]
fn prompts_completion_and_logging() {
    let db = TestDb::new();
    db.learn(&["# Spec\n\ntext", "--docid", "specs/api"]);
    let mut m = Mcp::start(&db);
    m.tool_ok(
        "skill-learn",
        json!({"name": "summarize-document", "description": "Summarize a document",
               "body": "Summarize {{docid}} in at most {{max_points}} points."}),
    );
    let skill = m.tool_ok("skill-get", json!({"name": "summarize-document"}))["kbid"].clone();
    m.tool_ok("agent-create", json!({"name": "writer", "description": "Writes docs", "persona": "You write clearly.", "skills": [skill]}));
    let list = m.request("prompts/list", json!({}));
    let names: Vec<&str> = list["result"]["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    // The collection's guides first (no models loaded: no `create-<model>`), then skills and agents.
    assert_eq!(
        names,
        vec![
            "review-document",
            "teach",
            "query-guide",
            "summarize-document",
            "agent:writer"
        ]
    );
    let got = m.request(
        "prompts/get",
        json!({"name": "summarize-document", "arguments": {"docid": "specs/api", "max_points": "3"}}),
    );
    assert_eq!(got["result"]["messages"][0]["role"], "user");
    assert_eq!(
        got["result"]["messages"][0]["content"]["text"],
        "Summarize specs/api in at most 3 points."
    );
    let missing = m.request(
        "prompts/get",
        json!({"name": "summarize-document", "arguments": {"docid": "x"}}),
    );
    assert_eq!(missing["error"]["code"], -32602);
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_points")
    );
    let agent = m.request("prompts/get", json!({"name": "agent:writer"}));
    assert_eq!(agent["result"]["messages"][0]["role"], "assistant");
    assert_eq!(
        agent["result"]["messages"][0]["content"]["text"],
        "You write clearly."
    );
    assert!(
        agent["result"]["messages"][1]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("- summarize-document: Summarize a document")
    );
    assert_eq!(
        m.request("prompts/get", json!({"name": "nope"}))["error"]["code"],
        -32602
    );

    let c = m.request(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "summarize-document"}, "argument": {"name": "docid", "value": "spe"}}),
    );
    assert_eq!(c["result"]["completion"]["values"], json!(["specs/api"]));
    let c = m.request(
        "completion/complete",
        json!({"ref": {"type": "ref/resource", "uri": "kbdb://document/{docid}"}, "argument": {"name": "docid", "value": "sp"}}),
    );
    assert_eq!(c["result"]["completion"]["values"], json!(["specs/api"]));
    // Section URIs by kbid prefix.
    let kbid = m.tool_ok("skill-get", json!({"name": "summarize-document"}))["kbid"]
        .as_str()
        .unwrap()
        .to_string();
    let c = m.request(
        "completion/complete",
        json!({"ref": {"type": "ref/resource", "uri": "kbdb://section/{kbid}"}, "argument": {"name": "kbid", "value": &kbid[..6]}}),
    );
    assert!(
        c["result"]["completion"]["values"]
            .as_array()
            .unwrap()
            .contains(&json!(kbid)),
        "{c}"
    );
    // Prompt names (for a reference that is not a prompt yet) and argument names.
    let c = m.request(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "?"}, "argument": {"name": "name", "value": "agent:"}}),
    );
    assert_eq!(c["result"]["completion"]["values"], json!(["agent:writer"]));
    let c = m.request(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "summarize-document"}, "argument": {"name": "x", "value": "max"}}),
    );
    assert_eq!(c["result"]["completion"]["values"], json!(["max_points"]));
    assert_eq!(
        m.request("logging/setLevel", json!({"level": "debug"}))["result"],
        json!({})
    );
}

#[test]
fn the_startup_check_warns_about_a_damaged_database() {
    let db = TestDb::new();
    db.learn(&["see [[missing/doc]] for more"]);
    let mut m = Mcp::start(&db);
    let n = m.wait_for(|v| v["method"] == "notifications/message");
    assert_eq!(n["params"]["level"], "warning");
    assert_eq!(n["params"]["data"]["kinds"], json!(["broken_reference"]));
}

#[test]
fn protocol_errors_keep_the_connection_and_stdin_eof_ends_the_server() {
    let db = TestDb::new();
    let mut m = Mcp::start(&db);
    m.send("{this is not json");
    let v = m.next();
    assert_eq!(v["error"]["code"], -32700);
    assert_eq!(v["id"], Value::Null);
    assert_eq!(
        m.request("no/such/method", json!({}))["error"]["code"],
        -32601
    );
    assert_eq!(
        m.request("ping", json!({}))["result"],
        json!({}),
        "still usable"
    );
    let (status, _) = m.close();
    assert!(
        status.success(),
        "exits cleanly when stdin closes: {status}"
    );
}

#[test]
fn mcp_needs_a_database_path_and_never_uses_the_working_directory() {
    let out = common::kbdb_cmd().arg("mcp").output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("KBDB_DIR"));
}

#[test]
fn skills_and_agents_from_the_cli() {
    let db = TestDb::new();
    let s = db.json(&[
        "skill",
        "learn",
        "triage",
        "--description",
        "Triage an issue",
        "--body",
        "Triage {{issue}}",
    ]);
    let kbid = s["kbid"].as_str().unwrap().to_string();
    assert_eq!(s["arguments"][0]["name"], "issue");
    assert_eq!(db.json(&["skill", "list"])[0]["name"], "triage");
    assert_eq!(
        db.json(&["skill", "get", "triage"])["body"],
        "Triage {{issue}}"
    );
    let a = db.json(&[
        "agent",
        "create",
        "helper",
        "--description",
        "Helps",
        "--persona",
        "You help.",
        "--skill",
        &kbid,
    ]);
    assert_eq!(a["skills"][0]["name"], "triage");
    assert_eq!(db.json(&["agent", "list"])[0]["docid"], "agent-helper");
    let out = db
        .cmd()
        .args(["agent", "get", "agent-helper"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("1. "));
    assert_eq!(db.json(&["skill", "delete", &kbid])["removed"], true);
    assert_eq!(
        db.json(&["agent", "get", "agent-helper"])["skills"][0]["name"],
        Value::Null
    );
    assert_eq!(
        db.json(&["agent", "delete", "agent-helper"])["removed"],
        true
    );
    let out = db.cmd().args(["skill", "get"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn skill_learn_without_a_body_drafts_one_by_sampling_when_the_client_offers_it() {
    let db = TestDb::new();
    // Without sampling: the spec's error, naming the field.
    let mut m = Mcp::start(&db);
    let (err, text) = m.tool(
        "skill-learn",
        json!({"name": "draft", "description": "Draft notes"}),
    );
    assert!(err);
    assert!(text.starts_with("body: is required"), "{text}");
    drop(m);

    let mut m = Mcp::start_with(&db, json!({"sampling": {}}));
    m.send(
        json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                "params": {"name": "skill-learn", "arguments": {"name": "draft", "description": "Draft release notes"}}})
        .to_string(),
    );
    // The server asks the client's model; the test answers as the client.
    let ask = m.wait_for(|v| v["method"] == "sampling/createMessage");
    let prompt = ask["params"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(prompt.contains("Draft release notes"), "{prompt}");
    m.send(
        json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"role": "assistant", "model": "test-model",
                "content": {"type": "text", "text": "Write release notes for {{version}}."}}})
        .to_string(),
    );
    let done = m.wait_for(|v| v["id"] == 99);
    let r: Value =
        serde_json::from_str(done["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(r["arguments"][0]["name"], "version");
    assert_eq!(
        m.tool_ok("skill-get", json!({"name": "draft"}))["body"],
        "Write release notes for {{version}}."
    );
}

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/collection");

#[test]
fn collection_tools_resources_and_prompts_end_to_end() {
    let db = TestDb::new();
    for docid in [
        "epics/auth",
        "stories/login",
        "stories/logout",
        "people/dana",
    ] {
        let file = format!("{FIXTURE}/{docid}.md");
        db.json(&["learn", "--file", &file, "--docid", docid, "--split"]);
    }
    let mut m = Mcp::start(&db);
    let before = m.tool_ok("inspect", json!({}));
    assert_eq!(before["modelsLoaded"], false);
    m.request("resources/subscribe", json!({"uri": "kbdb://schema"}));
    // Models loaded by another process: the prompt list changes, the schema too.
    db.json(&["models", "load", &format!("{FIXTURE}/models.toml")]);
    m.wait_for(|v| {
        v["method"] == "notifications/resources/updated" && v["params"]["uri"] == "kbdb://schema"
    });
    m.wait_for(|v| v["method"] == "notifications/prompts/list_changed");

    let (err, guide) = m.tool("read_me", json!({}));
    assert!(
        !err && guide.contains("## Story") && guide.contains("$gte"),
        "{guide}"
    );
    let inspect = m.tool_ok("inspect", json!({}));
    assert_eq!(inspect["totalDocuments"], 4);
    let info = m.tool_ok("get_model_info", json!({"model": "story"}));
    assert_eq!(info["name"], "Story");
    assert!(
        info["example"]["id"]
            .as_str()
            .unwrap()
            .starts_with("stories/")
    );
    let list = m.tool_ok("list_documents", json!({"model": "Story"}));
    assert_eq!(list["count"], 2);
    let q = m.tool_ok(
        "query",
        json!({"model": "Story", "where": {"points": {"$gte": 3}}, "select": {"related": ["epic"]}}),
    );
    assert_eq!(q["results"][0]["id"], "stories/login");
    assert_eq!(q["results"][0]["related"]["epic"][0]["id"], "epics/auth");
    let (err, text) = m.tool("query", json!({"where": {"x": {"$bogus": 1}}}));
    assert!(err && text.contains("$bogus"), "{text}");

    // create → validate clean; edits; delete.
    let created = m.tool_ok(
        "create_document",
        json!({"model": "Story", "title": "Password reset", "meta": {"points": 3, "epic": "epics/auth"}}),
    );
    assert_eq!(created["docid"], "stories/password-reset");
    assert_eq!(created["validation"]["valid"], true, "{created}");
    let v = m.tool_ok("validate", json!({"pathId": "stories/password-reset"}));
    assert_eq!(v["valid"], true);
    assert_eq!(v["model"], "Story");
    let (err, text) = m.tool(
        "create_document",
        json!({"model": "Story", "title": "Password reset"}),
    );
    assert!(err && text.contains("already exists"), "{text}");
    let r = m.tool_ok(
        "update_section",
        json!({"pathId": "stories/password-reset", "heading": "acceptance criteria",
               "action": "append", "content": "- a reset link expires after an hour"}),
    );
    assert_eq!(r["changed"], true);
    let section = m.request(
        "resources/read",
        json!({"uri": "kbdb://document/stories/password-reset/sections/Acceptance%20Criteria"}),
    );
    let text = section["result"]["contents"][0]["text"].as_str().unwrap();
    assert!(text.contains("expires after an hour"), "{section}");
    let (err, text) = m.tool(
        "update_section",
        json!({"pathId": "stories/password-reset", "heading": "Nope", "action": "remove"}),
    );
    assert!(err && text.contains("Acceptance Criteria"), "{text}");
    let r = m.tool_ok(
        "update_document",
        json!({"pathId": "stories/password-reset", "meta": {"status": "ready", "points": null}}),
    );
    assert_eq!(r["changed"], true);
    let doc = db.json(&["retrieve", "--docid", "stories/password-reset"]);
    assert_eq!(doc["metadata"]["status"], "ready");
    assert!(doc["metadata"].get("points").is_none(), "{doc}");
    let found = m.tool_ok(
        "search_content",
        json!({"pattern": "reset link", "model": "Story"}),
    );
    assert_eq!(found["results"][0]["id"], "stories/password-reset");
    let lines = m.tool_ok(
        "text_search",
        json!({"pattern": "SESSION", "ignoreCase": true, "expanded": true, "include": "stories/*"}),
    );
    assert_eq!(lines["files"][0]["file"], "stories/login");
    assert!(lines["files"][0]["matches"][0]["line"].as_u64().unwrap() > 1);
    let gone = m.tool_ok(
        "delete_document",
        json!({"pathId": "stories/password-reset"}),
    );
    assert_eq!(gone["action"], "delete");
    let (err, _) = m.tool("validate", json!({"pathId": "stories/password-reset"}));
    assert!(err);

    // Resources.
    let schema = m.request("resources/read", json!({"uri": "kbdb://schema"}));
    let schema: Value =
        serde_json::from_str(schema["result"]["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(schema["models"][1]["name"], "Story");
    assert_eq!(schema["models"][1]["documentCount"], 2);
    for uri in ["kbdb://toc", "kbdb://models-summary", "kbdb://primer"] {
        let r = m.request("resources/read", json!({"uri": uri}));
        assert!(
            r["result"]["contents"][0]["text"]
                .as_str()
                .unwrap()
                .contains("Story"),
            "{uri}: {r}"
        );
    }
    let inst = m.request(
        "resources/read",
        json!({"uri": "kbdb://models/Story/stories/login"}),
    );
    let inst: Value =
        serde_json::from_str(inst["result"]["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert!(
        inst["sections"]["Acceptance Criteria"]
            .as_str()
            .unwrap()
            .contains("session")
    );
    assert_eq!(inst["validation"]["valid"], true);
    let listed = m.request("resources/list", json!({}));
    let uris: Vec<&str> = listed["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    assert!(uris.contains(&"kbdb://schema") && uris.contains(&"kbdb://document/stories/login"));
    let templates = m.request("resources/templates/list", json!({}));
    assert!(
        templates
            .to_string()
            .contains("kbdb://models/{model}/{docid}")
    );

    // Prompts.
    let prompts = m.request("prompts/list", json!({}));
    let names: Vec<&str> = prompts["result"]["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    for want in [
        "create-epic",
        "create-story",
        "create-person",
        "review-document",
        "teach",
        "query-guide",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let p = m.request(
        "prompts/get",
        json!({"name": "create-story", "arguments": {"title": "Dark mode"}}),
    );
    let text = p["result"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap();
    assert!(
        text.contains("Dark mode") && text.contains("Acceptance Criteria"),
        "{text}"
    );
    let p = m.request(
        "prompts/get",
        json!({"name": "review-document", "arguments": {"pathId": "stories/logout"}}),
    );
    let text = p["result"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap();
    assert!(text.contains("people/sam"), "{text}");
    let p = m.request(
        "prompts/get",
        json!({"name": "query-guide", "arguments": {"intent": "ready stories"}}),
    );
    assert!(
        p["result"]["messages"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("ready stories")
    );
    let p = m.request("prompts/get", json!({"name": "teach", "arguments": {}}));
    assert!(
        p["result"]["messages"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("Story")
    );
}

#[test]
fn the_server_listens_for_changes_before_it_answers_initialize() {
    let db = TestDb::new();
    db.learn(&["a fact, so that a daemon runs"]);
    let mut raw = common::daemon::Raw::connect(&db);
    let hello = json!({"jsonrpc": "2.0", "id": 1, "method": "hello"});
    assert_eq!(
        raw.call_json(hello.clone())["result"]["activity"]["subscribers"],
        0
    );
    // Asked the moment `initialize` is answered: a change made from now on reaches the client.
    let m = Mcp::start(&db);
    let v = raw.call_json(hello.clone());
    assert_eq!(v["result"]["activity"]["subscribers"], 1, "{v}");
    // A server that ends leaves the subscribers with its connection.
    m.close();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let v = raw.call_json(hello.clone());
        if v["result"]["activity"]["subscribers"] == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{v}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn after_its_daemon_dies_the_server_subscribes_again_and_says_what_may_have_changed() {
    let db = TestDb::new();
    db.learn(&[
        "# Runbook\n\nRestart the service.",
        "--docid",
        "ops/runbook",
    ]);
    let mut m = Mcp::start(&db);
    let sub = m.request(
        "resources/subscribe",
        json!({"uri": "kbdb://document/ops/runbook"}),
    );
    assert_eq!(sub["result"], json!({}));
    let pid = db.json(&["daemon", "status"])["daemon"]["pid"]
        .as_u64()
        .unwrap() as u32;
    assert!(common::daemon::sigkill(pid));
    assert!(common::daemon::wait_gone(
        pid,
        std::time::Duration::from_secs(60)
    ));
    // The server follows a new daemon (it starts one) and, not knowing what changed meanwhile,
    // reports the subscribed resource and both lists as changed.
    let n = m.wait_for(|v| v["method"] == "notifications/resources/updated");
    assert_eq!(n["params"]["uri"], "kbdb://document/ops/runbook");
    m.wait_for(|v| v["method"] == "notifications/resources/list_changed");
    // And it hears of changes again.
    runbook_changed_elsewhere_is_heard(&db, &mut m);
}

/// A stand-in for a daemon that misbehaves in one way: it answers `hello` as the real one did
/// (same build, so no client replaces it), accepts every subscription and hangs up at once.
/// Records when each subscription came.
fn daemon_that_drops_subscribers(
    sock: std::path::PathBuf,
    hello: Value,
) -> std::sync::Arc<std::sync::Mutex<Vec<std::time::Instant>>> {
    use std::io::{BufRead, BufReader, Write};
    let subscribed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let seen = subscribed.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let seen = seen.clone();
            let hello = hello.clone();
            std::thread::spawn(move || {
                let mut writer = conn.try_clone().unwrap();
                for line in BufReader::new(conn).lines() {
                    let Ok(line) = line else { return };
                    let Ok(req) = serde_json::from_str::<Value>(&line) else {
                        return;
                    };
                    let (id, method) = (req["id"].clone(), req["method"].as_str().unwrap_or(""));
                    let answer = match method {
                        "hello" => json!({"jsonrpc": "2.0", "id": id, "result": hello}),
                        "subscribe" => json!({"jsonrpc": "2.0", "id": id,
                                              "result": {"subscribed": true}}),
                        other => json!({"jsonrpc": "2.0", "id": id, "error":
                                        {"code": -32601, "message": format!("unknown method: {other}")}}),
                    };
                    let _ = writer.write_all(format!("{answer}\n").as_bytes());
                    if method == "subscribe" {
                        seen.lock().unwrap().push(std::time::Instant::now());
                        return;
                    }
                }
            });
        }
    });
    subscribed
}

#[test]
fn a_daemon_that_drops_every_subscription_at_once_is_asked_again_ever_more_slowly() {
    let db = TestDb::new();
    // The real daemon's hello (with the MCP server's environment), then it is stopped and the
    // stand-in takes its socket.
    db.cmd()
        .env("KBDB_DAEMON_IDLE_SECS", "5")
        .arg("status")
        .assert()
        .success();
    let sock = common::daemon::socket_path(&db).expect("the daemon's socket");
    let hello = common::daemon::Raw::connect(&db)
        .call_json(json!({"jsonrpc": "2.0", "id": 1, "method": "hello"}))["result"]
        .clone();
    assert!(hello["build"].is_string(), "{hello}");
    db.stop_daemon();
    let _ = std::fs::remove_file(&sock);
    let subscribed = daemon_that_drops_subscribers(sock.clone(), hello);
    let m = Mcp::start(&db);
    std::thread::sleep(std::time::Duration::from_millis(3000));
    let times = subscribed.lock().unwrap().clone();
    drop(m);
    // Gone for the test's cleanup, which stops the database's daemon (the stand-in would not).
    std::fs::remove_file(&sock).unwrap();
    // From 0.1 s doubling: about 0, 0.1, 0.3, 0.7, 1.5 s (and 3.1 s) into the run. Resubscribing
    // at once would have made thousands; at a fixed pause, dozens.
    assert!(
        (3..=8).contains(&times.len()),
        "{} subscriptions in 3 s",
        times.len()
    );
    let gaps: Vec<f64> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    assert!(
        gaps.last().unwrap() >= &(1.5 * gaps[0]),
        "the pauses grow: {gaps:?} s"
    );
}

#[test]
fn errors_without_a_usable_id_say_id_null_and_ids_must_be_strings_or_integers() {
    let db = TestDb::new();
    let mut m = Mcp::start(&db);
    // JSON-RPC 2.0: a parse error is answered with `"id": null`, not without an id.
    m.send("{this is not json");
    let v = m.next();
    assert_eq!(v["error"]["code"], -32700, "{v}");
    assert_eq!(v.get("id"), Some(&Value::Null), "{v}");
    m.send("[1, 2]");
    let v = m.next();
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert_eq!(v.get("id"), Some(&Value::Null), "{v}");
    // A request whose id is null, a float, too large for 64 bits, an object, an array or a
    // boolean: -32600 with id null, never an answer without an id (or none at all).
    for id in [
        "null",
        "1.5",
        "2.0",
        "1e3",
        "123456789012345678901234567890",
        r#"{"a": 1}"#,
        "[7]",
        "true",
    ] {
        m.send(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#));
        let v = m.next();
        assert_eq!(v["error"]["code"], -32600, "id {id}: {v}");
        assert_eq!(v.get("id"), Some(&Value::Null), "id {id}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("id must be a string or an integer"),
            "id {id}: {msg}"
        );
    }
    // An integer beyond i64 (that rmcp cannot carry) is refused but echoed: it is readable.
    m.send(r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"ping"}"#);
    let v = m.next();
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert_eq!(v["id"], json!(18446744073709551615u64), "{v}");
    // Strings and integers, negative ones too, are ids.
    m.send(r#"{"jsonrpc":"2.0","id":"s-1","method":"ping"}"#);
    assert_eq!(
        m.next(),
        json!({"jsonrpc": "2.0", "id": "s-1", "result": {}})
    );
    m.send(r#"{"jsonrpc":"2.0","id":-5,"method":"ping"}"#);
    assert_eq!(m.next(), json!({"jsonrpc": "2.0", "id": -5, "result": {}}));
    let (status, _) = m.close();
    assert!(status.success(), "{status}");
}

#[test]
fn a_request_before_initialize_is_told_to_initialize_first() {
    let db = TestDb::new();
    let mut m = Mcp::spawn(&db, &[]);
    for method in ["tools/list", "tools/call", "resources/read"] {
        let v = m.request(method, json!({}));
        assert_eq!(v["error"]["code"], -32600, "{method}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains("send initialize first"), "{method}: {msg}");
    }
    // A newer client's discovery probe: not supported, so that it falls back to initialize.
    let v = m.request("server/discover", json!({}));
    assert_eq!(v["error"]["code"], -32601, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("send initialize"),
        "{v}"
    );
    // ping is allowed before the handshake; the session then starts normally.
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
    m.initialize(json!({}));
    let tools = m.request("tools/list", json!({}));
    assert!(tools["result"]["tools"].as_array().unwrap().len() >= 19);
}

#[test]
fn a_message_over_the_size_limit_is_answered_with_its_id_and_the_session_goes_on() {
    const MAX_MESSAGE: usize = 64 * 1024 * 1024;
    let db = TestDb::new();
    let mut m = Mcp::start(&db);
    // The id comes before the cut: the answer carries it.
    let mut big = br#"{"jsonrpc":"2.0","id":"big-1","method":"tools/call","params":{"name":"learn","arguments":{"content":""#.to_vec();
    big.resize(MAX_MESSAGE + 1024, b'x');
    big.extend_from_slice(b"\"}}}");
    m.send(&big);
    let v = m.next();
    assert_eq!(v["error"]["code"], -32600, "{}", v["error"]);
    assert_eq!(v["id"], "big-1", "{}", v["error"]);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exceeds 67108864 bytes")
    );
    // The id comes after the cut: it cannot be read, the answer says null.
    let mut big = br#"{"jsonrpc":"2.0","method":"ping","params":{"pad":""#.to_vec();
    big.resize(MAX_MESSAGE + 1024, b'x');
    big.extend_from_slice(br#""},"id":77}"#);
    m.send(&big);
    let v = m.next();
    assert_eq!(v["error"]["code"], -32600, "{}", v["error"]);
    assert_eq!(v.get("id"), Some(&Value::Null), "{}", v["error"]);
    // The connection stays up.
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
    let (err, text) = m.tool("learn", json!({"content": "after the big ones"}));
    assert!(!err, "{text}");
    assert_eq!(db.status()["sections"], 1);
}

/// A value of another JSON type than the schema's, for each kind of property.
fn wrong_value(p: &Value) -> Value {
    if p["anyOf"].is_array() {
        return json!(42);
    }
    match p["type"].as_str() {
        Some("string") => json!(42),
        Some("integer" | "number") => json!("ten"),
        Some("boolean") => json!("yes"),
        Some("array") => json!("x"),
        Some("object") => json!("x"),
        other => panic!("a property of type {other:?}"),
    }
}

#[test]
fn wrong_type_arguments_name_the_field_and_the_json_type_for_every_tool() {
    let db = TestDb::new();
    let mut m = Mcp::start(&db);
    let list = m.request("tools/list", json!({}));
    let rust_words = [
        "usize", "u64", "u32", "u8", "i64", "i32", "f64", "sequence", "struct ", "a map",
    ];
    let mut checked = 0;
    for t in list["result"]["tools"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let Some(props) = t["inputSchema"]["properties"].as_object() else {
            continue;
        };
        for (field, p) in props {
            let bad = wrong_value(p);
            let (err, text) = m.tool(name, json!({ field: bad }));
            assert!(err, "{name}.{field} = {bad}: {text}");
            assert!(
                text.starts_with(&format!("{field}: expected ")),
                "{name}.{field} = {bad}: {text}"
            );
            for w in rust_words {
                assert!(!text.contains(w), "{name}.{field}: {text}");
            }
            checked += 1;
        }
    }
    assert!(checked > 60, "{checked} parameters checked");
    // The message says what the field should be and what it got.
    let (_, text) = m.tool("search", json!({"query": "x", "limit": "ten"}));
    assert_eq!(
        text,
        r#"limit: expected a non-negative integer, got the string "ten""#
    );
    let (_, text) = m.tool("search", json!({"query": "x", "offset": -3}));
    assert_eq!(
        text,
        "offset: expected a non-negative integer, got the number -3"
    );
    let (_, text) = m.tool("search", json!({"query": "x", "limit": 2.5}));
    assert_eq!(
        text,
        "limit: expected a non-negative integer, got the number 2.5"
    );
    let (_, text) = m.tool("learn", json!({"content": "x", "tags": ["a", 2]}));
    assert_eq!(text, "tags[1]: expected a string, got the number 2");
    let (_, text) = m.tool("learn", json!({"content": null}));
    assert_eq!(text, "content: expected a string, got null");
    let (_, text) = m.tool(
        "skill-learn",
        json!({"name": "s", "description": "d", "body": "b", "arguments": [{"name": true}]}),
    );
    assert_eq!(
        text,
        "arguments[0].name: expected a string, got the boolean true"
    );
    let (_, text) = m.tool("query", json!({"select": {"sections": "Summary"}}));
    assert_eq!(
        text,
        r#"select.sections: expected an array of strings, got the string "Summary""#
    );
    // An absent optional argument may be given as null.
    let (err, text) = m.tool("search", json!({"query": "x", "limit": null}));
    assert!(!err, "{text}");
    // Nothing was written by any of these.
    assert_eq!(db.status()["sections"], 0);
}

#[test]
fn subscriptions_are_bounded_in_count_and_uri_size() {
    let db = TestDb::new();
    let mut m = Mcp::start(&db);
    let long = format!("kbdb://document/{}", "a".repeat(5000));
    let v = m.request("resources/subscribe", json!({"uri": long}));
    assert_eq!(v["error"]["code"], -32602, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("the limit for a subscription is 4096 bytes"),
        "{msg}"
    );
    let at_limit = format!("kbdb://document/{}", "b".repeat(4096 - 16));
    assert_eq!(at_limit.len(), 4096);
    let v = m.request("resources/subscribe", json!({"uri": at_limit}));
    assert_eq!(v["result"], json!({}), "{v}");
    for i in 1..1000 {
        let v = m.request(
            "resources/subscribe",
            json!({"uri": format!("kbdb://document/n/{i}")}),
        );
        assert_eq!(v["result"], json!({}), "{i}: {v}");
    }
    let v = m.request(
        "resources/subscribe",
        json!({"uri": "kbdb://document/one-more"}),
    );
    assert_eq!(v["error"]["code"], -32602, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("1000 subscriptions, the limit"), "{msg}");
    // Subscribing again to a subscribed URI is fine; after an unsubscribe there is room.
    let v = m.request("resources/subscribe", json!({"uri": "kbdb://document/n/7"}));
    assert_eq!(v["result"], json!({}), "{v}");
    m.request(
        "resources/unsubscribe",
        json!({"uri": "kbdb://document/n/7"}),
    );
    let v = m.request(
        "resources/subscribe",
        json!({"uri": "kbdb://document/one-more"}),
    );
    assert_eq!(v["result"], json!({}), "{v}");
    // The subscriptions work.
    db.learn(&["# One more", "--docid", "one-more"]);
    let n = m.wait_for(|v| v["method"] == "notifications/resources/updated");
    assert_eq!(n["params"]["uri"], "kbdb://document/one-more");
}

#[test]
fn the_export_tool_names_its_own_force_argument_not_the_cli_flag() {
    let db = TestDb::new();
    db.learn(&["Exported fact."]);
    let mut m = Mcp::start(&db);
    m.tool_ok("export", json!({"path": "snap"}));
    let (err, text) = m.tool("export", json!({"path": "snap"}));
    assert!(err, "{text}");
    assert!(text.contains("force"), "{text}");
    assert!(
        !text.contains("--force"),
        "a CLI flag in an MCP error: {text}"
    );
    let ex = m.tool_ok("export", json!({"path": "snap", "force": true}));
    assert_eq!(ex["sections_exported"], 1, "{ex}");
}

#[test]
fn the_learn_tool_lists_every_superseded_kbid() {
    let db = TestDb::new();
    let mut m = Mcp::start(&db);
    let a = m.tool_ok(
        "learn",
        json!({"content": "v1 of the rule", "source": "rule"}),
    );
    let b = m.tool_ok(
        "learn",
        json!({"content": "v2 of the rule", "source": "rule"}),
    );
    let c = m.tool_ok(
        "learn",
        json!({"content": "v3 of the rule", "source": "rule", "replace": true}),
    );
    let mut got: Vec<Value> = c["superseded"].as_array().cloned().unwrap_or_default();
    got.sort_by_key(|v| v.to_string());
    let mut want = vec![a["kbid"].clone(), b["kbid"].clone()];
    want.sort_by_key(|v| v.to_string());
    assert_eq!(got, want, "{c}");
}

#[test]
fn text_search_reads_the_front_matter_and_counts_lines_from_the_top_of_the_file() {
    let db = TestDb::new();
    let f = db.tmp.path().join("note.md");
    std::fs::write(
        &f,
        "---\nowner: zelda\nstatus: draft\n---\n# Plan\n\nShip the widget.\n",
    )
    .unwrap();
    db.learn(&[
        "--split",
        "--docid",
        "notes/plan",
        "--file",
        f.to_str().unwrap(),
    ]);
    let mut m = Mcp::start(&db);
    // A value of the front matter is found.
    let r = m.tool_ok("text_search", json!({"pattern": "zelda"}));
    assert_eq!(r["files"], json!(["notes/plan"]), "{r}");
    // Line numbers are those of the file: the front matter's lines count.
    let r = m.tool_ok(
        "text_search",
        json!({"pattern": "owner|widget", "expanded": true}),
    );
    let matches = &r["files"][0]["matches"];
    assert_eq!(matches[0]["line"], 2, "{r}");
    assert_eq!(matches[0]["content"], "owner: zelda");
    assert_eq!(matches[1]["line"], 7, "{r}");
    assert_eq!(matches[1]["content"], "Ship the widget.");
    assert_eq!(matches[1]["column"], 10);
}

/// A resource URI's heading is percent-decoded by the one strict rule (text::markers): `%20`
/// is a space, while `%+f` is not an escape and stays as written (it was once read as the
/// byte 0x0f, so a heading containing it could not be read).
#[test]
fn a_section_uri_keeps_an_invalid_escape_literally() {
    let db = TestDb::new();
    let file = db.path().parent().unwrap().join("growth.md");
    std::fs::write(
        &file,
        "# Growth\n\n## Rate %+f here\n\nThe rate is formatted with a sign.\n",
    )
    .unwrap();
    db.json(&[
        "learn",
        "--file",
        file.to_str().unwrap(),
        "--docid",
        "notes/growth",
        "--split",
    ]);
    let mut m = Mcp::start(&db);
    let section = m.request(
        "resources/read",
        json!({"uri": "kbdb://document/notes/growth/sections/Rate%20%+f%20here"}),
    );
    let text = section["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("formatted with a sign"), "{section}");
    m.close();
}
