//! Collections through the real binary: front matter in both syntaxes as metadata, models,
//! queries (every operator, arrays, nested paths, missing fields, type mismatches, sort,
//! paging, methods), validation (each rule), section edits (including a repeated heading and a
//! heading inside a code fence), create → validate clean, delete.

mod common;

use common::TestDb;
use serde_json::{Value, json};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/collection");

fn collection() -> TestDb {
    let db = TestDb::new();
    for docid in [
        "epics/auth",
        "epics/billing",
        "stories/login",
        "stories/logout",
        "stories/signup",
        "people/dana",
    ] {
        let file = format!("{FIXTURE}/{docid}.md");
        db.json(&["learn", "--file", &file, "--docid", docid, "--split"]);
    }
    db.json(&["models", "load", &format!("{FIXTURE}/models.toml")]);
    db
}

fn ids(r: &Value) -> Vec<String> {
    r["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_string())
        .collect()
}

fn query(db: &TestDb, q: Value) -> Value {
    db.json(&["query", "--json", &q.to_string()])
}

fn query_ids(db: &TestDb, q: Value) -> Vec<String> {
    ids(&query(db, q))
}

fn fails(db: &TestDb, args: &[&str]) -> String {
    let out = db.cmd().args(args).output().unwrap();
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout)
}

#[test]
fn front_matter_in_both_syntaxes_becomes_metadata() {
    let db = collection();
    let login = db.json(&["retrieve", "--docid", "stories/login"]);
    assert_eq!(login["metadata"]["status"], "ready");
    assert_eq!(login["metadata"]["labels"], json!(["auth", "web"]));
    assert_eq!(login["metadata"]["nested"]["area"]["name"], "sign-in");
    let logout = db.json(&["retrieve", "--docid", "stories/logout"]);
    assert_eq!(logout["metadata"]["points"], 2);
    // The front matter is not a section.
    assert!(
        !db.json(&["content", "stories/logout"])["data"]
            .as_str()
            .unwrap()
            .contains("+++")
    );
    let dana = db.json(&["retrieve", "--docid", "people/dana"]);
    assert_eq!(dana["metadata"]["started"], "2024-03-01");
    // recall shows it with the manifest.
    let kbid = login["kbids"][0].as_str().unwrap();
    let r = db.json(&["recall", kbid, "--depth", "1"]);
    assert_eq!(r["documents"][0]["metadata"]["epic"], "epics/auth", "{r}");
    // Broken front matter is refused and changes nothing.
    let bad = db.tmp.path().join("bad.md");
    std::fs::write(&bad, "---\nstatus: [unclosed\n---\n# X\n").unwrap();
    let before = db.state();
    let e = fails(
        &db,
        &[
            "learn",
            "--file",
            bad.to_str().unwrap(),
            "--docid",
            "x/bad",
            "--split",
        ],
    );
    assert!(e.contains("front matter"), "{e}");
    assert_eq!(db.state(), before);
}

#[test]
fn models_assign_documents_and_are_checked_before_loading() {
    let db = collection();
    let r = db.json(&["query", "--model", "Story", "--method", "count"]);
    assert_eq!(r["count"], 3);
    let list = db.json(&["models", "show"]);
    assert!(list["toml"].as_str().unwrap().contains("name = \"Story\""));
    let names: Vec<&str> = list["schema"]["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Epic", "Story", "Person", "Base"]);
    // An invalid file names the problem and keeps the old models.
    let bad = db.tmp.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[[model]]\nname = \"X\"\n[model.fields.s]\ntype = \"enum\"\n",
    )
    .unwrap();
    let e = fails(&db, &["models", "load", bad.to_str().unwrap()]);
    assert!(e.contains("values"), "{e}");
    assert_eq!(
        db.json(&["query", "--model", "Story", "--method", "count"])["count"],
        3
    );
    // `_model` overrides the prefix.
    db.json(&[
        "doc",
        "update",
        "people/dana",
        "--meta",
        r#"{"_model": "Story"}"#,
    ]);
    assert_eq!(
        db.json(&["query", "--model", "Story", "--method", "count"])["count"],
        4
    );
}

#[test]
fn every_operator_in_both_where_forms() {
    let db = collection();
    let q = |w: Value| query_ids(&db, json!({ "model": "Story", "where": w }));
    let arr = |path: &str, op: &str, v: Value| {
        query_ids(
            &db,
            json!({"model": "Story", "where": [{"path": path, "operator": op, "value": v}]}),
        )
    };
    let login = vec!["stories/login".to_string()];
    assert_eq!(q(json!({"status": "ready"})), login);
    assert_eq!(arr("meta.status", "eq", json!("ready")), login);
    assert_eq!(
        q(json!({"status": {"$neq": "ready"}})),
        ["stories/logout", "stories/signup"]
    );
    assert_eq!(
        q(json!({"status": ["ready", "done"]})),
        ["stories/login", "stories/logout"]
    );
    assert_eq!(
        arr("status", "$notIn", json!(["ready", "done"])),
        ["stories/signup"]
    );
    assert_eq!(q(json!({"points": {"$gt": 2}})), login);
    assert_eq!(
        q(json!({"points": {"$gte": 2, "$lt": 5}})),
        ["stories/logout"]
    );
    assert_eq!(
        arr("meta.points", "lte", json!(5)),
        ["stories/login", "stories/logout"]
    );
    // Type mismatch: "three" is not compared with numbers, and is no error.
    assert!(!q(json!({"points": {"$gt": 0}})).contains(&"stories/signup".to_string()));
    // Arrays: $eq / $contains / $in on an element.
    assert_eq!(q(json!({"labels": "web"})), login);
    assert_eq!(
        arr("labels", "contains", json!("auth")),
        ["stories/login", "stories/logout", "stories/signup"]
    );
    assert_eq!(q(json!({"labels": {"$in": ["web", "x"]}})), login);
    assert_eq!(q(json!({"labels": {"$contains": 7}})), ["stories/signup"]);
    // Strings.
    assert_eq!(
        q(json!({"title": {"$startsWith": "Log"}})),
        ["stories/login", "stories/logout"]
    );
    assert_eq!(
        q(json!({"title": {"$endsWith": "out"}})),
        ["stories/logout"]
    );
    assert_eq!(
        q(json!({"epic": {"$contains": "auth"}})),
        ["stories/login", "stories/logout", "stories/signup"]
    );
    assert_eq!(
        q(json!({"id": {"$regex": "^stories/log(in|out)$"}})),
        ["stories/login", "stories/logout"]
    );
    // Nested paths and missing fields.
    assert_eq!(q(json!({"meta.nested.area.name": "sign-in"})), login);
    assert_eq!(q(json!({"review": {"$exists": true}})), login);
    assert_eq!(
        arr("review", "notExists", Value::Null),
        ["stories/logout", "stories/signup"]
    );
    let no_value =
        json!({"model": "Story", "where": [{"path": "review", "operator": "notExists"}]});
    assert_eq!(
        query_ids(&db, no_value),
        ["stories/logout", "stories/signup"]
    );
    assert_eq!(
        q(json!({"review": {"$exists": false}})),
        ["stories/logout", "stories/signup"]
    );
    assert!(q(json!({"meta.nested.missing": "x"})).is_empty());
    assert_eq!(q(json!({"review": true})), login);
    assert_eq!(
        q(json!({"model": "Story", "status": "done"})),
        ["stories/logout"]
    );
    // Without a model: every document.
    assert_eq!(
        query_ids(&db, json!({"where": {"priority": "high"}})),
        ["epics/auth"]
    );
    // Bad input names the field and the rule.
    let e = fails(&db, &["query", "--where", r#"{"status": {"$equals": 1}}"#]);
    assert!(e.contains("$equals"), "{e}");
    let e = fails(&db, &["query", "--where", r#"{"id": {"$regex": "("}}"#]);
    assert!(e.contains("regex"), "{e}");
    let e = fails(&db, &["query", "--model", "Nope"]);
    assert!(e.contains("Nope") && e.contains("Story"), "{e}");
}

#[test]
fn sort_paging_and_methods() {
    let db = collection();
    let by_points = query_ids(&db, json!({"model": "Story", "sort": "-meta.points"}));
    // Types order numbers < strings, and descending reverses it all: the string "three" first.
    assert_eq!(
        by_points,
        ["stories/signup", "stories/login", "stories/logout"]
    );
    let asc = query_ids(&db, json!({"model": "Story", "sort": ["meta.points"]}));
    assert_eq!(asc[..2], ["stories/logout", "stories/login"]);
    let page = query(
        &db,
        json!({"model": "Story", "sort": "title", "limit": 1, "offset": 1}),
    );
    assert_eq!(ids(&page), ["stories/logout"]);
    assert_eq!(page["total"], 3);
    let first = query(
        &db,
        json!({"model": "Story", "sort": "title", "method": "first"}),
    );
    assert_eq!(first["result"]["id"], "stories/login");
    let last = query(
        &db,
        json!({"model": "Story", "sort": "title", "method": "last"}),
    );
    assert_eq!(last["result"]["id"], "stories/signup");
    let count = query(
        &db,
        json!({"model": "Story", "limit": 1, "method": "count"}),
    );
    assert_eq!(count["count"], 3);
    // Lean results by default; sections and related on request.
    let one = query(&db, json!({"model": "Story", "where": {"status": "ready"}}));
    let keys: Vec<&String> = one["results"][0].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["id", "meta", "model", "title"]);
    let rich = query(
        &db,
        json!({"model": "Story", "where": {"status": "ready"},
               "select": {"sections": ["Acceptance Criteria"], "related": ["epic"]}}),
    );
    let ac = rich["results"][0]["sections"]["Acceptance Criteria"]
        .as_str()
        .unwrap();
    assert!(ac.contains("five failed attempts"), "{rich}");
    assert_eq!(rich["results"][0]["related"]["epic"][0]["id"], "epics/auth");
}

#[test]
fn validation_reports_each_rule_and_never_gates() {
    let db = collection();
    // `validate` of an invalid document exits 7 but prints its findings.
    let (code, v) = db.json_exit(&["validate", "stories/signup"]);
    assert_eq!(code, Some(7));
    assert_eq!(v["valid"], false);
    let text = v.to_string();
    for needle in [
        "meta.status",         // not in the enum
        "meta.points",         // a string for a number
        "meta.labels",         // 7 is not a string
        "Acceptance Criteria", // required section missing
    ] {
        assert!(text.contains(needle), "{needle} missing from {text}");
    }
    assert!(v["warnings"].to_string().contains("colour"), "{v}");
    // A belongsTo to a missing document, a hasMany item that does not exist.
    let (_, all) = db.json_exit(&["validate", "Story"]);
    assert_eq!(all["checked"], 3);
    let logout = all["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["docid"] == "stories/logout")
        .unwrap();
    assert!(
        logout["errors"].to_string().contains("people/sam"),
        "{logout}"
    );
    let billing = db
        .cmd()
        .args(["validate", "epics/billing", "--format", "json"])
        .output()
        .unwrap();
    let billing: Value = serde_json::from_slice(&billing.stdout).unwrap();
    assert!(
        billing["errors"].to_string().contains("stories/invoices"),
        "{billing}"
    );
    // The slug `auth` of logout's epic resolves under the Epic folder; login is clean.
    let login = db.json(&["validate", "stories/login"]);
    assert_eq!(login["valid"], true, "{login}");
    assert_eq!(db.json(&["validate", "epics/auth"])["valid"], true);
    // Edits save even when they make a document invalid.
    let r = db.json(&[
        "doc",
        "update",
        "stories/login",
        "--meta",
        r#"{"status": "bogus"}"#,
    ]);
    assert_eq!(r["changed"], true);
    assert_eq!(r["validation"]["valid"], false);
    assert_eq!(
        db.json(&["retrieve", "--docid", "stories/login"])["metadata"]["status"],
        "bogus"
    );
}

#[test]
fn section_edits_by_heading() {
    let db = collection();
    let body = |db: &TestDb| {
        db.json(&["doc", "show", "stories/login"])["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let kbids_before = db.json(&["retrieve", "--docid", "stories/login"])["kbids"].clone();
    // "Notes" appears twice: ambiguous until `occurrence` picks one.
    let e = fails(
        &db,
        &[
            "doc",
            "section",
            "stories/login",
            "notes",
            "--action",
            "replace",
            "--content",
            "x",
        ],
    );
    assert!(e.contains("2") && e.contains("occurrence"), "{e}");
    let r = db.json(&[
        "doc",
        "section",
        "stories/login",
        "notes",
        "--action",
        "replace",
        "--content",
        "Replaced second notes.",
        "--occurrence",
        "2",
    ]);
    assert_eq!(r["changed"], true);
    let text = body(&db);
    assert!(
        text.contains("Rate limiting lives in the gateway."),
        "{text}"
    );
    assert!(
        text.contains("Replaced second notes.") && !text.contains("A second section"),
        "{text}"
    );
    // Unchanged sections keep their kbids; the edited one gets a new one.
    let kbids_after = db.json(&["retrieve", "--docid", "stories/login"])["kbids"].clone();
    assert_eq!(kbids_before[0], kbids_after[0]);
    assert_ne!(kbids_before, kbids_after);
    // The "## Acceptance Criteria" inside the code fence is not a heading: one match only.
    db.json(&[
        "doc",
        "section",
        "stories/login",
        "Acceptance Criteria",
        "--action",
        "append",
        "--content",
        "- sessions expire after a day",
    ]);
    let text = body(&db);
    let ac = text.find("## Acceptance Criteria").unwrap();
    let added = text.find("- sessions expire after a day").unwrap();
    let notes = text.find("## Notes").unwrap();
    assert!(ac < added && added < notes, "{text}");
    assert!(text.contains("this is code, not a heading"));
    // insert_before / insert_after / remove.
    db.json(&[
        "doc",
        "section",
        "stories/login",
        "Acceptance Criteria",
        "--action",
        "insert_before",
        "--content",
        "## Context\n\nWhy this matters.",
    ]);
    db.json(&[
        "doc",
        "section",
        "stories/login",
        "Acceptance Criteria",
        "--action",
        "insert_after",
        "--content",
        "## Risks\n\nNone known.",
    ]);
    let text = body(&db);
    let (c, a, r) = (
        text.find("## Context").unwrap(),
        text.find("## Acceptance").unwrap(),
        text.find("## Risks").unwrap(),
    );
    assert!(c < a && a < r, "{text}");
    db.json(&[
        "doc",
        "section",
        "stories/login",
        "risks",
        "--action",
        "remove",
    ]);
    assert!(!body(&db).contains("## Risks"));
    // Not found lists the headings; a missing content is named; nothing changes.
    let before = db.state();
    let e = fails(
        &db,
        &[
            "doc",
            "section",
            "stories/login",
            "Nope",
            "--action",
            "remove",
        ],
    );
    assert!(
        e.contains("\"Context\"") && e.contains("\"Acceptance Criteria\""),
        "{e}"
    );
    let e = fails(
        &db,
        &[
            "doc",
            "section",
            "stories/login",
            "Context",
            "--action",
            "append",
        ],
    );
    assert!(e.contains("content"), "{e}");
    assert_eq!(db.state(), before);
    // The metadata survives edits.
    assert_eq!(
        db.json(&["retrieve", "--docid", "stories/login"])["metadata"]["points"],
        5
    );
}

#[test]
fn create_validates_clean_and_search_filters_by_model_and_metadata() {
    let db = collection();
    let r = db.json(&[
        "doc",
        "create",
        "--model",
        "Story",
        "--title",
        "Dark mode",
        "--meta",
        r#"{"points": 1}"#,
    ]);
    assert_eq!(r["docid"], "stories/dark-mode");
    assert_eq!(r["validation"]["valid"], true, "{r}");
    let doc = db.json(&["retrieve", "--docid", "stories/dark-mode"]);
    assert_eq!(doc["metadata"], json!({"points": 1, "status": "draft"}));
    assert_eq!(db.json(&["validate", "stories/dark-mode"])["valid"], true);
    // A Person created under another folder keeps its model through `_model`.
    let p = db.json(&[
        "doc",
        "create",
        "--model",
        "Person",
        "--title",
        "Sam",
        "--docid",
        "team/sam",
        "--meta",
        r#"{"role": "pm"}"#,
    ]);
    assert_eq!(p["validation"]["model"], "Person");
    assert_eq!(
        db.json(&["retrieve", "--docid", "team/sam"])["metadata"]["_model"],
        "Person"
    );

    // Search restricted by model and metadata.
    let all = db.json(&["search", "session"]);
    assert!(!all["items"].as_array().unwrap().is_empty());
    let stories = db.json(&[
        "search",
        "session",
        "--model",
        "Story",
        "--where",
        r#"{"status": "ready"}"#,
    ]);
    for item in stories["items"].as_array().unwrap() {
        assert_eq!(item["docids"][0], "stories/login", "{stories}");
    }
    let none = db.json(&[
        "search",
        "session",
        "--model",
        "Story",
        "--where",
        r#"{"points": {"$gt": 100}}"#,
    ]);
    assert!(none["items"].as_array().unwrap().is_empty(), "{none}");
    assert!(none["hint"].as_str().unwrap().contains("filters"), "{none}");
    let e = fails(&db, &["search", "x", "--model", "Nope"]);
    assert!(e.contains("Nope"), "{e}");

    // Delete: the document goes, its sections become collectable.
    let d = db.json(&["doc", "delete", "stories/dark-mode"]);
    assert_eq!(d["action"], "delete");
    let e = fails(&db, &["doc", "show", "stories/dark-mode"]);
    assert!(e.contains("not found"), "{e}");
}

#[test]
fn models_and_metadata_travel_through_export_and_import() {
    let db = collection();
    let out = db.tmp.path().join("export");
    db.json(&["export", out.to_str().unwrap()]);
    assert!(out.join("models.toml").exists());
    let other = TestDb::new();
    let r = other.json(&["import", out.to_str().unwrap()]);
    assert_eq!(r["models_imported"], true, "{r}");
    assert_eq!(
        other.json(&["query", "--model", "Story", "--method", "count"])["count"],
        3
    );
    let q = other.json(&[
        "query",
        "--model",
        "Story",
        "--where",
        r#"{"meta.nested.team": "identity"}"#,
    ]);
    assert_eq!(ids(&q), ["stories/login"]);
}

#[test]
fn edit_errors_name_the_field_and_change_nothing() {
    let db = collection();
    let before = db.state();
    let e = fails(&db, &["doc", "update", "stories/login"]);
    assert!(e.contains("nothing to update"), "{e}");
    let e = fails(&db, &["doc", "delete", "stories/nope"]);
    assert!(e.contains("Document not found: stories/nope"), "{e}");
    let e = fails(
        &db,
        &[
            "doc",
            "section",
            "stories/nope",
            "Notes",
            "--action",
            "remove",
        ],
    );
    assert!(e.contains("Document not found"), "{e}");
    let e = fails(&db, &["doc", "create", "--model", "Nope", "--title", "X"]);
    assert!(
        e.contains("no model \"Nope\"") && e.contains("Story"),
        "{e}"
    );
    let e = fails(
        &db,
        &["doc", "create", "--model", "Story", "--title", "!!!"],
    );
    assert!(e.contains("give docid"), "{e}");
    let e = fails(&db, &["doc", "update", "stories/login", "--meta", "[1]"]);
    assert!(e.contains("meta"), "{e}");
    let e = fails(&db, &["validate", "Nope"]);
    assert!(e.contains("neither a document nor a model"), "{e}");
    assert_eq!(db.state(), before);
}

// ---------------------------------------------------------------------------------------------
// Edits keep the user's bytes: sections with their sub-sections, surgical front matter edits,
// quoting, tight lists, titles, one H1.

const PARK: &str = "# Yosemite\n\nA park.\n\n## Trails\n\n### North loop\n\nSteep.\n\n### River walk\n\nFlat.\n\n## Camping\n\nBook early.\n";

#[test]
fn a_section_includes_its_sub_sections_everywhere() {
    let db = TestDb::new();
    let file = db.tmp.path().join("park.md");
    std::fs::write(&file, PARK).unwrap();
    db.json(&[
        "learn",
        "--file",
        file.to_str().unwrap(),
        "--docid",
        "parks/yosemite",
        "--split",
    ]);
    let want = "### North loop\n\nSteep.\n\n### River walk\n\nFlat.";
    // query's section selection (the CLI and the MCP tool).
    let r = query(
        &db,
        json!({"where": {"id": "parks/yosemite"}, "select": {"sections": ["Trails", "camping"]}}),
    );
    assert_eq!(r["results"][0]["sections"]["Trails"], want, "{r}");
    assert_eq!(r["results"][0]["sections"]["camping"], "Book early.", "{r}");
    let mut m = common::mcp::McpChild::start(&db);
    let r = m.tool_ok(
        "query",
        json!({"where": {"id": "parks/yosemite"}, "select": {"sections": ["## trails"]}}),
    );
    assert_eq!(r["results"][0]["sections"]["## trails"], want, "{r}");
    // The section resource: the heading and everything under it, up to the next `##`.
    let read = |m: &mut common::mcp::McpChild, uri: &str| {
        let v = m.request("resources/read", json!({ "uri": uri }));
        v["result"]["contents"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{v}"))
            .to_string()
    };
    assert_eq!(
        read(&mut m, "kbdb://document/parks/yosemite/sections/Trails"),
        format!("## Trails\n\n{want}")
    );
    assert_eq!(
        read(
            &mut m,
            "kbdb://document/parks/yosemite/sections/North%20loop"
        ),
        "### North loop\n\nSteep."
    );
    // The typed instance, and the title section holds the whole document.
    let v = m.request(
        "resources/read",
        json!({"uri": "kbdb://models/Base/parks/yosemite"}),
    );
    let inst: Value =
        serde_json::from_str(v["result"]["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(inst["sections"]["Trails"], want, "{inst}");
    assert!(
        inst["sections"]["Yosemite"]
            .as_str()
            .unwrap()
            .ends_with("Book early."),
        "{inst}"
    );
    // update_section replace agrees: the section it replaces is the one read.
    m.tool_ok(
        "update_section",
        json!({"pathId": "parks/yosemite", "heading": "Trails", "action": "replace",
               "content": "Closed."}),
    );
    assert_eq!(
        read(&mut m, "kbdb://document/parks/yosemite/sections/Trails"),
        "## Trails\n\nClosed."
    );
}

/// A synced folder `notes/` under the prefix `n/`, with `files` written into it.
fn synced(files: &[(&str, &str)]) -> (TestDb, std::path::PathBuf) {
    let db = TestDb::new();
    let dir = db.tmp.path().join("notes");
    for (rel, text) in files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    std::fs::create_dir_all(&dir).unwrap();
    db.json(&["sync", dir.to_str().unwrap(), "--prefix", "n/"]);
    (db, dir)
}

const HAND: &str = "---\n# Trip notes, kept by hand\ntitle: \"Yosemite, in May\"   # shown on the site\nstatus: draft # draft | ready\ntags: [hiking, 'camping']\n\n# dates are ISO\ndate: 2024-05-01\nrating: 4\n---\n# Yosemite\n\nIntro.\n\n## Trails\n\n- North loop\n- River walk\n\n## Camping\n\nBook early.\n";

#[test]
fn a_metadata_edit_of_a_synced_file_changes_only_that_keys_lines() {
    let (db, dir) = synced(&[("trip.md", HAND)]);
    let read = || std::fs::read_to_string(dir.join("trip.md")).unwrap();
    db.json(&[
        "doc",
        "update",
        "n/trip",
        "--meta",
        r#"{"status": "ready"}"#,
    ]);
    let mut want = HAND.replace("status: draft # draft | ready\n", "status: ready\n");
    assert_eq!(read(), want);
    // A removed key removes its line only; new keys come at the end of the front matter,
    // quoted where a YAML 1.1 reader (PyYAML, js-yaml) would read a date, a boolean, a null or
    // a number.
    db.json(&[
        "doc",
        "update",
        "n/trip",
        "--meta",
        r#"{"rating": null, "due": "2024-06-01", "permit": "yes", "camp": "off", "code": "0123", "none": "~", "owner": "ann"}"#,
    ]);
    want = want.replace(
        "rating: 4\n",
        "camp: 'off'\ncode: '0123'\ndue: '2024-06-01'\nnone: '~'\nowner: ann\npermit: 'yes'\n",
    );
    assert_eq!(read(), want);
    // The quoted title keeps its quotes; the metadata reads back as strings.
    db.json(&[
        "doc",
        "update",
        "n/trip",
        "--meta",
        r#"{"title": "Yosemite, in June"}"#,
    ]);
    want = want.replace(
        "title: \"Yosemite, in May\"   # shown on the site\n",
        "title: \"Yosemite, in June\"\n",
    );
    assert_eq!(read(), want);
    let meta = db.json(&["retrieve", "--docid", "n/trip"])["metadata"].clone();
    assert_eq!(meta["due"], "2024-06-01");
    assert_eq!(meta["permit"], "yes");
    assert_eq!(meta["date"], "2024-05-01", "untouched, as written");
    // A file created under the synced prefix quotes them too.
    db.json(&[
        "doc",
        "create",
        "--model",
        "Base",
        "--title",
        "Plan",
        "--docid",
        "n/plan",
        "--content",
        "Go.",
        "--meta",
        r#"{"due": "2024-07-01", "ok": "no", "n": "null"}"#,
    ]);
    assert_eq!(
        std::fs::read_to_string(dir.join("plan.md")).unwrap(),
        "---\ndue: '2024-07-01'\n'n': 'null'\nok: 'no'\n---\n# Plan\n\nGo.\n"
    );
    // Files and records agree.
    let r = db.json(&["sync", dir.to_str().unwrap()]);
    assert_eq!(r["transactions"], 0, "{r}");
}

#[test]
fn appending_to_a_tight_list_keeps_it_tight() {
    // A synced file and a stored document alike.
    let (db, dir) = synced(&[("trip.md", HAND)]);
    let append = |docid: &str| {
        db.json(&[
            "doc",
            "section",
            docid,
            "Trails",
            "--action",
            "append",
            "--content",
            "- Mist trail",
        ]);
    };
    append("n/trip");
    assert_eq!(
        std::fs::read_to_string(dir.join("trip.md")).unwrap(),
        HAND.replace("- River walk\n", "- River walk\n- Mist trail\n")
    );
    let file = db.tmp.path().join("stored.md");
    std::fs::write(
        &file,
        "# S\n\n## Trails\n\n1. North loop\n2. River walk\n\n## End\n",
    )
    .unwrap();
    db.json(&[
        "learn",
        "--file",
        file.to_str().unwrap(),
        "--docid",
        "stored",
        "--split",
    ]);
    db.json(&[
        "doc",
        "section",
        "stored",
        "Trails",
        "--action",
        "append",
        "--content",
        "3. Mist trail",
    ]);
    let content = db.json(&["doc", "show", "stored"])["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        content.contains("1. North loop\n2. River walk\n3. Mist trail\n\n## End"),
        "{content}"
    );
}

/// ATX headings outside fenced code, as the shared rule reads them: (level, text, start of the
/// heading line, start of the next line, end of the section).
fn sections_of(md: &str) -> Vec<(usize, String, usize, usize, usize)> {
    let mut out: Vec<(usize, String, usize, usize, usize)> = Vec::new();
    let mut fence: Option<(char, usize)> = None;
    let mut pos = 0;
    for line in md.split_inclusive('\n') {
        let (start, next) = (pos, pos + line.len());
        pos = next;
        let l = line.trim_end_matches(['\n', '\r']);
        let indent = l.len() - l.trim_start_matches(' ').len();
        let rest = &l[indent..];
        let f = rest.chars().next().filter(|c| *c == '`' || *c == '~');
        let run = f.map_or(0, |c| rest.len() - rest.trim_start_matches(c).len());
        if let Some((c, n)) = fence {
            if indent <= 3 && f == Some(c) && run >= n && rest.trim().chars().all(|x| x == c) {
                fence = None;
            }
            continue;
        }
        if indent <= 3 && run >= 3 {
            fence = Some((f.unwrap(), run));
            continue;
        }
        let hashes = rest.len() - rest.trim_start_matches('#').len();
        let after = &rest[hashes..];
        if indent <= 3
            && (1..=6).contains(&hashes)
            && (after.is_empty() || after.starts_with([' ', '\t']))
        {
            out.push((hashes, after.trim().to_string(), start, next, md.len()));
        }
    }
    for i in 0..out.len() {
        if let Some(n) = out[i + 1..].iter().find(|h| h.0 <= out[i].0) {
            out[i].4 = n.2;
        }
    }
    out
}

/// Where the body starts: after the front matter's closing fence.
fn body_start(text: &str) -> usize {
    let fence = if text.starts_with("+++") {
        "\n+++\n"
    } else {
        "\n---\n"
    };
    text.find(fence).unwrap() + fence.len()
}

#[test]
fn edits_of_real_markdown_leave_every_other_byte_identical() {
    // Markdown written by people: the project's own docs and a few crates' READMEs and
    // changelogs (tests/fixtures/real-markdown/SOURCES.txt), each under hand-written front
    // matter with comments and quoting.
    let root = env!("CARGO_MANIFEST_DIR");
    let mut files: Vec<(String, String)> = Vec::new();
    for dir in ["docs", "tests/fixtures/real-markdown"] {
        let mut names: Vec<_> = std::fs::read_dir(format!("{root}/{dir}"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        names.sort();
        for p in names {
            let text = std::fs::read_to_string(&p).unwrap();
            let name = format!(
                "{}.md",
                p.file_stem().unwrap().to_string_lossy().to_lowercase()
            );
            // Every other file in TOML, with a table.
            let front = if files.len().is_multiple_of(2) {
                "---\n# written by hand\nstatus: draft   # draft | ready\nreviewed: 2024-05-01\ntags: ['docs', \"real\"]\n---\n"
            } else {
                "+++\n# written by hand\nstatus = 'draft'   # draft | ready\nreviewed = 2024-05-01\n\n[site]\ntags = ['docs', \"real\"]\n+++\n"
            };
            files.push((name, format!("{front}{text}")));
        }
    }
    assert!(files.len() >= 10, "{}", files.len());
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let (db, dir) = synced(&refs);
    let mut edits = 0;
    for (name, _) in &files {
        let path = dir.join(name);
        let docid = format!("n/{}", name.trim_end_matches(".md"));
        let old = std::fs::read_to_string(&path).unwrap();
        let body_at = body_start(&old);
        // Headings that name one section only (compared as kbdb does: case and spaces aside),
        // sub-sections first (an H1 often holds the whole document).
        let norm = |s: &str| {
            s.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .to_lowercase()
        };
        let _ = body_at;
        let mut old = old;
        let mut used: Vec<String> = Vec::new();
        for k in 0..3 {
            // The sections as they now are in the file (earlier edits moved them).
            let body_at = body_start(&old);
            let now = sections_of(&old[body_at..]);
            let mut unique: Vec<_> = now
                .iter()
                .filter(|s| {
                    !s.1.is_empty()
                        && !used.contains(&norm(&s.1))
                        && now.iter().filter(|t| norm(&t.1) == norm(&s.1)).count() == 1
                })
                .collect();
            unique.sort_by_key(|s| s.0 == 1);
            let Some(&&(level, ref text, start, _, end)) = unique.get(k * unique.len() / 3) else {
                continue;
            };
            used.push(norm(text));
            let (start, end) = (body_at + start, body_at + end);
            // (A document's only H1 is not removed: that would leave it empty.)
            let action = match k {
                0 => "replace",
                2 if level > 1 => "remove",
                _ => "append",
            };
            db.json(&[
                "doc",
                "section",
                &docid,
                text,
                "--action",
                action,
                "--content",
                "Edited by the test.\n\n- one\n- two",
            ]);
            let new = std::fs::read_to_string(&path).unwrap();
            if action == "remove" && end == old.len() {
                // The last section: the blank lines it leaves at the end go with it.
                assert_eq!(new.trim_end(), old[..start].trim_end(), "{name}");
                assert!(new.ends_with('\n') && !new.ends_with("\n\n"), "{name}");
            } else {
                assert!(
                    new.starts_with(&old[..start]) && new.ends_with(&old[end..]),
                    "{name}: {action} of {text:?} changed bytes outside the section"
                );
            }
            if action != "remove" {
                assert!(new[start..].contains("Edited by the test."), "{name}");
            }
            old = new;
            edits += 1;
        }
        // Metadata: a changed key's line alone changes; a new key is added at the end (in
        // TOML before the table), a removed one takes its line only.
        db.json(&[
            "doc",
            "update",
            &docid,
            "--meta",
            r#"{"status": "ready", "reviewed": null, "owner": "ann"}"#,
        ]);
        let new = std::fs::read_to_string(&path).unwrap();
        let want = if old.starts_with("---") {
            old.replacen("status: draft   # draft | ready\n", "status: ready\n", 1)
                .replacen("reviewed: 2024-05-01\n", "", 1)
                .replacen("real\"]\n---\n", "real\"]\nowner: ann\n---\n", 1)
        } else {
            old.replacen(
                "status = 'draft'   # draft | ready\n",
                "status = \"ready\"\n",
                1,
            )
            .replacen("reviewed = 2024-05-01\n", "owner = \"ann\"\n", 1)
        };
        assert_eq!(new, want, "{name}");
        edits += 1;
    }
    eprintln!("{edits} edits of {} files", files.len());
    assert!(edits >= 40, "{edits}");
    // The store holds what the files say: a sync finds nothing to do.
    let r = db.json(&["sync", dir.to_str().unwrap()]);
    assert_eq!(r["transactions"], 0, "{r}");
}

#[test]
fn a_section_edit_moves_only_that_sections_lines() {
    // Odd spacing elsewhere — three blank lines, a heading with no blank line after it,
    // trailing spaces, blank lines at the end — stays as written.
    let text =
        "---\nk: v   # note\n---\n# T\nintro  \n\n\n\n## A\na\n\n\n## B\n\nb\n\n## C\nc\n\n\n";
    // Mixed line ends (a file edited on Windows and elsewhere) stay mixed.
    let mixed = "---\r\nk: v\n---\r\n# T\r\nintro\r\n\r\n## A\na\n\n## B\r\nb\r\n";
    let (db, dir) = synced(&[("odd.md", text), ("mixed.md", mixed)]);
    db.json(&[
        "doc",
        "section",
        "n/mixed",
        "A",
        "--action",
        "replace",
        "--content",
        "x",
    ]);
    db.json(&["doc", "update", "n/mixed", "--meta", r#"{"k": "w"}"#]);
    assert_eq!(
        std::fs::read_to_string(dir.join("mixed.md")).unwrap(),
        "---\r\nk: w\r\n---\r\n# T\r\nintro\r\n\r\n## A\nx\r\n\n## B\r\nb\r\n"
    );
    let read = || std::fs::read_to_string(dir.join("odd.md")).unwrap();
    let edit = |heading: &str, action: &str, content: &str| {
        db.json(&[
            "doc",
            "section",
            "n/odd",
            heading,
            "--action",
            action,
            "--content",
            content,
        ]);
    };
    edit("B", "replace", "new b");
    assert_eq!(read(), text.replace("## B\n\nb\n", "## B\n\nnew b\n"));
    edit("A", "append", "more a");
    assert_eq!(
        read(),
        text.replace("## B\n\nb\n", "## B\n\nnew b\n")
            .replace("## A\na\n", "## A\na\n\nmore a\n")
    );
    edit("B", "remove", "");
    assert_eq!(
        read(),
        text.replace("## B\n\nb\n\n", "")
            .replace("## A\na\n", "## A\na\n\nmore a\n")
    );
}

#[test]
fn a_new_title_is_the_documents_h1_and_validate_agrees() {
    let (db, dir) = synced(&[
        (
            "trip.md",
            "---\nstatus: draft  # by hand\n---\n# Yosemite\n\nIntro.\n",
        ),
        (
            "keeps.md",
            "---\ntitle: Old name\nstatus: draft\n---\nBody.\n",
        ),
    ]);
    let models = db.tmp.path().join("models.toml");
    std::fs::write(
        &models,
        "[[model]]\nname = \"Trip\"\nprefix = \"n/\"\n\n[model.fields.status]\ntype = \"string\"\n",
    )
    .unwrap();
    db.json(&["models", "load", models.to_str().unwrap()]);
    let read = |rel: &str| std::fs::read_to_string(dir.join(rel)).unwrap();
    let clean = |docid: &str| {
        let v = db.json(&["validate", docid]);
        assert_eq!(v["valid"], true, "{v}");
        assert_eq!(v["warnings"], json!([]), "{v}");
    };
    // A file without a `title` key: its H1 changes, no key is added.
    db.json(&["doc", "update", "n/trip", "--title", "Yosemite in June"]);
    assert_eq!(
        read("trip.md"),
        "---\nstatus: draft  # by hand\n---\n# Yosemite in June\n\nIntro.\n"
    );
    assert_eq!(
        db.json(&["retrieve", "--docid", "n/trip"])["title"],
        "Yosemite in June"
    );
    clean("n/trip");
    // A file that keeps its title in the front matter: that line changes.
    db.json(&["doc", "update", "n/keeps", "--title", "New name"]);
    assert_eq!(
        read("keeps.md"),
        "---\ntitle: New name\nstatus: draft\n---\nBody.\n"
    );
    assert_eq!(
        db.json(&["retrieve", "--docid", "n/keeps"])["title"],
        "New name"
    );
    clean("n/keeps");
    // A stored document: its H1 follows the title, so it is composed with one H1.
    let file = db.tmp.path().join("stored.md");
    std::fs::write(&file, "# Old\n\nText.\n").unwrap();
    db.json(&[
        "learn",
        "--file",
        file.to_str().unwrap(),
        "--docid",
        "n2/stored",
        "--split",
    ]);
    db.json(&["doc", "update", "n2/stored", "--title", "New"]);
    let content = db.json(&["content", "n2/stored"])["data"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(content, "# New\n\nText.");
}

#[test]
fn an_untitled_document_is_composed_with_one_h1() {
    let db = TestDb::new();
    db.json(&["learn", "# Hello\n\ntext", "--docid", "notes/untitled"]);
    assert_eq!(
        db.json(&["retrieve", "--docid", "notes/untitled"])["title"],
        Value::Null
    );
    assert_eq!(
        db.json(&["content", "notes/untitled"])["data"],
        "# Hello\n\ntext"
    );
    // A preamble before the H1: still one H1, the document's own.
    db.json(&["learn", "badges", "--docid", "notes/later"]);
    db.json(&["learn", "# Later\n\nmore", "--docid", "notes/later"]);
    let c = db.json(&["content", "notes/later"])["data"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        c.matches("\n# ").count() + usize::from(c.starts_with("# ")),
        1,
        "{c}"
    );
    // Without any H1, the title (or the docid) still heads it.
    db.json(&["learn", "## Only a sub", "--docid", "notes/sub"]);
    assert_eq!(
        db.json(&["content", "notes/sub"])["data"],
        "# notes/sub\n\n## Only a sub"
    );
}

/// A model's default goes through the same value conversion as front matter: a NaN and a
/// nesting deeper than 32 levels are refused with the path of the value and the rule.
#[test]
fn model_defaults_follow_the_shared_value_rules() {
    let db = collection();
    let bad = db.tmp.path().join("nan.toml");
    std::fs::write(
        &bad,
        "[[model]]\nname = \"X\"\n[model.fields.n]\ntype = \"number\"\ndefault = nan\n",
    )
    .unwrap();
    let e = fails(&db, &["models", "load", bad.to_str().unwrap()]);
    assert!(e.contains("fields.n.default"), "{e}");
    assert!(
        e.contains("not a finite number (NaN and infinity are not supported)"),
        "{e}"
    );
    let deep = format!("{}1{}", "[".repeat(34), "]".repeat(34));
    std::fs::write(
        &bad,
        format!("[[model]]\nname = \"X\"\n[model.fields.l]\ntype = \"array\"\ndefault = {deep}\n"),
    )
    .unwrap();
    let e = fails(&db, &["models", "load", bad.to_str().unwrap()]);
    assert!(e.contains("nested more than 32 levels deep"), "{e}");
    assert!(e.contains("fields.l.default[0]"), "{e}");
    // Nothing changed: the old models still answer.
    assert_eq!(
        db.json(&["query", "--model", "Story", "--method", "count"])["count"],
        3
    );
}
