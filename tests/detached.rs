//! Text that an edit or a delete took out of every document leaves search, recall and retrieve
//! with that write: an agent is never served what the user replaced or deleted. Sections
//! learned on their own stay (docs/decisions.md, "Detached sections are collected at once").

mod common;

use common::TestDb;
use common::mcp::McpChild;
use serde_json::{Value, json};

/// The kbids a search for `word` finds.
/// (A search whose word matched nothing answers with the nearest indexed word, `corrected`:
/// none of those hold it.)
fn found(db: &TestDb, word: &str) -> Vec<String> {
    let v = db.json(&["search", word]);
    if v["corrected"].get(word).is_some() {
        return Vec::new();
    }
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kbid"].as_str().unwrap().to_string())
        .collect()
}

/// The word is in no search result, `check` is clean, and nothing for `gc` to collect.
fn gone(db: &TestDb, word: &str) {
    assert_eq!(
        found(db, word),
        Vec::<String>::new(),
        "{word} is still found"
    );
    db.assert_checks_clean(&format!("{word} left"));
    assert_eq!(db.json(&["gc"])["removed_sections"], 0);
}

fn sync(db: &TestDb, dir: &std::path::Path) -> Value {
    db.json(&["sync", dir.to_str().unwrap()])
}

#[test]
fn a_split_relearn_drops_the_replaced_section_from_search() {
    let db = TestDb::new();
    let file = db.tmp.path().join("d.md");
    std::fs::write(&file, "# D\n\nintro\n\n## Old\n\nxylophone tuning notes\n").unwrap();
    db.learn(&["--file", file.to_str().unwrap(), "--docid", "d", "--split"]);
    assert_eq!(found(&db, "xylophone").len(), 1);
    std::fs::write(&file, "# D\n\nintro\n\n## New\n\nmarimba notes\n").unwrap();
    db.learn(&["--file", file.to_str().unwrap(), "--docid", "d", "--split"]);
    gone(&db, "xylophone");
    assert_eq!(found(&db, "marimba").len(), 1);
}

#[test]
fn document_edits_and_deletes_drop_their_old_text_from_search() {
    let db = TestDb::new();
    let notes = db.tmp.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    std::fs::write(
        notes.join("a.md"),
        "# A\n\nfirst part\n\n## Plan\n\nzeppelin launch window\n",
    )
    .unwrap();
    std::fs::write(notes.join("b.md"), "# B\n\nbagpipe rehearsal\n").unwrap();
    std::fs::write(notes.join("c.md"), "# C\n\ncormorant sighting\n").unwrap();
    sync(&db, &notes);
    let docs = db.json(&["docs"]);
    let docid = |stem: &str| {
        docs.as_array()
            .unwrap()
            .iter()
            .map(|d| d["docid"].as_str().unwrap().to_string())
            .find(|d| d.ends_with(stem))
            .unwrap_or_else(|| panic!("no document for {stem}: {docs}"))
    };
    let (a, b, c) = (docid("a"), docid("b"), docid("c"));
    for w in ["zeppelin", "bagpipe", "cormorant"] {
        assert_eq!(found(&db, w).len(), 1, "{w}");
    }

    // A section edit replaces the section's text.
    db.json(&[
        "doc",
        "section",
        &a,
        "Plan",
        "--action",
        "replace",
        "--content",
        "dirigible launch window",
    ]);
    gone(&db, "zeppelin");
    assert_eq!(found(&db, "dirigible").len(), 1);

    // A whole-body update.
    db.json(&[
        "doc",
        "update",
        &b,
        "--content",
        "# B\n\nfiddle rehearsal\n",
    ]);
    gone(&db, "bagpipe");

    // A delete.
    db.json(&["doc", "delete", &c]);
    gone(&db, "cormorant");

    // A changed file and a deleted file, through sync.
    let a_text = std::fs::read_to_string(notes.join("a.md")).unwrap();
    std::fs::write(notes.join("a.md"), a_text.replace("dirigible", "blimp")).unwrap();
    sync(&db, &notes);
    gone(&db, "dirigible");
    assert_eq!(found(&db, "blimp").len(), 1);
    std::fs::remove_file(notes.join("a.md")).unwrap();
    sync(&db, &notes);
    gone(&db, "blimp");
}

#[test]
fn mcp_edits_and_deletes_drop_their_old_text_from_search_and_recall() {
    let db = TestDb::new();
    let mut mcp = McpChild::start(&db);
    let plan = mcp.tool_ok(
        "learn",
        json!({"content": "# Trip\n\n## Plan\n\nquasar observation night", "docid": "trip"}),
    );
    let old = plan["kbid"].as_str().unwrap().to_string();
    mcp.tool_ok(
        "update_section",
        json!({"docid": "trip", "heading": "Plan", "action": "replace", "content": "pulsar observation night"}),
    );
    let s = mcp.tool_ok("search", json!({"query": "quasar"}));
    assert_eq!(s["items"].as_array().unwrap().len(), 0, "{s}");
    let (err, text) = mcp.tool("recall", json!({"kbid": old}));
    assert!(err, "recall of replaced text: {text}");

    mcp.tool_ok(
        "update_document",
        json!({"docid": "trip", "content": "# Trip\n\nnebula photography"}),
    );
    let s = mcp.tool_ok("search", json!({"query": "pulsar"}));
    assert_eq!(s["items"].as_array().unwrap().len(), 0, "{s}");

    mcp.tool_ok("delete_document", json!({"docid": "trip"}));
    let s = mcp.tool_ok("search", json!({"query": "nebula"}));
    assert_eq!(s["items"].as_array().unwrap().len(), 0, "{s}");
    mcp.close();
    gone(&db, "quasar");
}

#[test]
fn a_fact_learned_on_its_own_stays_when_the_document_it_joined_drops_it() {
    let db = TestDb::new();
    db.learn(&["okapi habitat facts"]);
    db.learn(&["okapi habitat facts", "--docid", "zoo"]);
    db.learn(&["# Zoo\n\nother text", "--docid", "zoo"]);
    db.json(&["doc", "delete", "zoo"]);
    assert_eq!(found(&db, "okapi").len(), 1);
}
