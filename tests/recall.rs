//! The reference graph and `recall` at each depth, on a small linked corpus, through the real
//! binary: links both ways, a cycle, a dangling link satisfied later, batch order, the budget,
//! and unlearn removing outgoing edges.

mod common;

use common::TestDb;
use serde_json::{Value, json};

const A_MD: &str = "# Alpha\n\nAlpha intro, see [[guides/c]] later.\n\n## Details\n\nDetails continue in [setup](b.md#setup).\n";
const B_MD: &str = "# Beta\n\nBeta overview of [alpha](a.md).\n\n## Setup\n\nSetup steps; back to [details](a.md#details).\n";

struct Corpus {
    db: TestDb,
    alpha: String,
    details: String,
    beta: String,
    setup: String,
}

fn split(db: &TestDb, name: &str, text: &str, docid: &str) -> Vec<String> {
    let dir = db.tmp.path().join("guides");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    let r = db.learn(&[
        "--file",
        file.to_str().unwrap(),
        "--docid",
        docid,
        "--split",
    ]);
    r["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kbid"].as_str().unwrap().to_string())
        .collect()
}

/// guides/a (Alpha, Details) and guides/b (Beta, Setup): Details ⇄ Setup by heading links (a
/// cycle), Beta → the whole of guides/a, Alpha → guides/c (not learned yet).
fn corpus() -> Corpus {
    let db = TestDb::new();
    let a = split(&db, "a.md", A_MD, "guides/a");
    let b = split(&db, "b.md", B_MD, "guides/b");
    Corpus {
        db,
        alpha: a[0].clone(),
        details: a[1].clone(),
        beta: b[0].clone(),
        setup: b[1].clone(),
    }
}

fn recall(db: &TestDb, args: &[&str]) -> Value {
    let mut a = vec!["recall"];
    a.extend_from_slice(args);
    db.json(&a)
}

fn section(kbid: &str, heading: &str) -> Value {
    json!({"kbid": kbid, "heading": heading, "type": "text/markdown"})
}

fn back(kbid: &str, heading: &str, marker: &str, snippet: &str) -> Value {
    json!({"kbid": kbid, "heading": heading, "type": "text/markdown", "marker_type": marker,
           "context_snippet": snippet, "direction": "back"})
}

const DETAILS_TEXT: &str = "## Details\n\nDetails continue in [setup](b.md#setup).";
const SETUP_TEXT: &str = "## Setup\n\nSetup steps; back to [details](a.md#details).";

fn details_depth0(c: &Corpus) -> Value {
    json!({"kbid": c.details, "heading": "Details", "type": "text/markdown",
           "content": DETAILS_TEXT, "docids": ["guides/a"]})
}

fn details_depth1(c: &Corpus) -> Value {
    let mut v = details_depth0(c);
    v["documents"] = json!([{
        "docid": "guides/a", "title": "Alpha",
        "sections": [section(&c.alpha, "Alpha"), section(&c.details, "Details")],
        "back_references": [back(&c.beta, "Beta", "link", "Beta overview of [alpha](a.md).")],
    }]);
    v["back_references"] = json!([back(
        &c.setup,
        "Setup",
        "link",
        "Setup steps; back to [details](a.md#details)."
    )]);
    v
}

fn details_depth2(c: &Corpus) -> Value {
    let mut v = details_depth1(c);
    v["references"] = json!([{
        "kbid": c.setup, "docid": "guides/b", "heading": "Setup", "type": "text/markdown",
        "marker_type": "link", "context_snippet": "Details continue in [setup](b.md#setup).",
        "direction": "forward", "target": "kbdb://document/guides/b#setup", "resolved": true,
    }]);
    v["siblings"] = json!([{
        "kbid": c.alpha, "heading": "Alpha", "type": "text/markdown",
        "content": "# Alpha\n\nAlpha intro, see [[guides/c]] later.", "docid": "guides/a",
    }]);
    v
}

fn details_depth3(c: &Corpus) -> Value {
    let mut v = details_depth2(c);
    // The cycle: Setup's back-references list Details itself, and stop there.
    v["references"][0]["content"] = json!(SETUP_TEXT);
    v["references"][0]["back_references"] = json!([back(
        &c.details,
        "Details",
        "link",
        "Details continue in [setup](b.md#setup)."
    )]);
    v
}

#[test]
fn recall_returns_exactly_the_fields_of_each_depth() {
    let c = corpus();
    let d = c.details.as_str();
    assert_eq!(recall(&c.db, &[d]), details_depth0(&c));
    assert_eq!(recall(&c.db, &[d, "--depth", "0"]), details_depth0(&c));
    assert_eq!(recall(&c.db, &[d, "--depth", "1"]), details_depth1(&c));
    assert_eq!(recall(&c.db, &[d, "--depth", "2"]), details_depth2(&c));
    assert_eq!(recall(&c.db, &[d, "--depth", "3"]), details_depth3(&c));
    assert_eq!(
        recall(&c.db, &[d, "--depth", "9"]),
        details_depth3(&c),
        "depths above 3 are clamped"
    );
}

#[test]
fn links_resolve_both_ways_and_a_dangling_link_resolves_once_its_target_is_learned() {
    let c = corpus();
    let alpha = recall(&c.db, &[&c.alpha, "--depth", "2"]);
    assert_eq!(
        alpha["references"],
        json!([{"docid": "guides/c", "heading": null, "marker_type": "wikilink",
                "context_snippet": "Alpha intro, see [[guides/c]] later.", "direction": "forward",
                "target": "kbdb://document/guides/c", "resolved": false}])
    );
    assert_eq!(alpha["back_references"], json!([]));

    // The target arrives, and it links back to Alpha by kbid: both directions now resolve.
    let gamma_md = format!("# Gamma\n\nGamma cites kbdb://section/{}.\n", c.alpha);
    let gamma = split(&c.db, "c.md", &gamma_md, "guides/c")[0].clone();
    let alpha = recall(&c.db, &[&c.alpha, "--depth", "3"]);
    let r = &alpha["references"][0];
    assert_eq!(r["resolved"], true);
    assert_eq!(r["heading"], "Gamma");
    assert_eq!(r["type"], "document");
    assert_eq!(
        r["content"],
        gamma_md.trim_end(),
        "a document renders composed"
    );
    assert_eq!(
        alpha["back_references"],
        json!([back(
            &gamma,
            "Gamma",
            "uri",
            &format!("Gamma cites kbdb://section/{}.", c.alpha)
        )])
    );
    assert_eq!(
        r["back_references"],
        json!([back(
            &c.alpha,
            "Alpha",
            "wikilink",
            "Alpha intro, see [[guides/c]] later."
        )]),
        "the referenced document's back-references (the Alpha ⇄ Gamma cycle ends there)"
    );
}

#[test]
fn batches_keep_their_order_and_a_single_kbid_is_an_object() {
    let c = corpus();
    let v = recall(&c.db, &[&c.setup, &c.details, &c.setup]);
    let kbids: Vec<&str> = v
        .as_array()
        .expect("several kbids give an array")
        .iter()
        .map(|i| i["kbid"].as_str().unwrap())
        .collect();
    assert_eq!(
        kbids,
        vec![c.setup.as_str(), c.details.as_str()],
        "repeats dropped"
    );
    assert!(recall(&c.db, &[&c.setup]).is_object());
}

#[test]
fn the_budget_stops_expansion_and_says_so() {
    let c = corpus();
    let d = c.details.as_str();
    let full = recall(&c.db, &[d, "--depth", "2"]);
    assert!(full.get("truncated").is_none());

    // Room for level 1 (documents, back-references) and the reference, not the sibling.
    let cost = |v: &Value| serde_json::to_string(v).unwrap().chars().count() + 1;
    let mut manifest = full["documents"][0].clone();
    manifest["back_references"] = json!([]);
    let level1 = cost(&manifest)
        + cost(&full["documents"][0]["back_references"][0])
        + cost(&full["back_references"][0]);
    let level2_refs = cost(&full["references"][0]);
    let budget = level1 + level2_refs + 5;
    let cut = recall(
        &c.db,
        &[d, "--depth", "2", "--max-chars", &budget.to_string()],
    );
    assert_eq!(cut["truncated"], true);
    assert_eq!(cut["documents"], full["documents"]);
    assert_eq!(cut["back_references"], full["back_references"]);
    assert_eq!(cut["references"], full["references"]);
    assert_eq!(cut["siblings"], json!([]), "the sibling did not fit");

    // A zero budget: the section itself, whole; every expansion field present and empty.
    let none = recall(&c.db, &[d, "--depth", "3", "--max-chars", "0"]);
    assert_eq!(none["content"], DETAILS_TEXT);
    assert_eq!(none["truncated"], true);
    for f in ["documents", "back_references", "references", "siblings"] {
        assert_eq!(none[f], json!([]), "{f}");
    }
    // A budget that fits everything changes nothing.
    assert_eq!(
        recall(&c.db, &[d, "--depth", "3", "--max-chars", "1000000"]),
        details_depth3(&c)
    );
}

#[test]
fn unlearning_a_section_removes_its_outgoing_edges() {
    let c = corpus();
    let out = c.db.cmd().args(["unlearn", &c.setup]).output().unwrap();
    assert!(out.status.success());
    let v = recall(&c.db, &[&c.details, "--depth", "2"]);
    assert_eq!(v["back_references"], json!([]), "Setup's link is gone");
    let r = &v["references"][0];
    assert_eq!(r["resolved"], false, "the heading it named is gone too");
    assert_eq!(r["docid"], "guides/b");
}

#[test]
fn bad_recall_input_is_a_clear_error() {
    let c = corpus();
    let run = |args: &[&str]| {
        let out =
            c.db.cmd()
                .arg("recall")
                .args(args)
                .args(["--format", "json"])
                .output()
                .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code().unwrap(), v)
    };
    let (code, v) = run(&[&c.details, "--depth", "-1"]);
    assert_eq!(code, 3);
    assert_eq!(v["error"]["field"], "depth");
    let (code, v) = run(&[&c.details, "--max-chars", "-5"]);
    assert_eq!(code, 3);
    assert_eq!(v["error"]["field"], "max_chars");
    let (code, v) = run(&[&c.details, "not-a-kbid"]);
    assert_eq!(code, 3);
    assert_eq!(v["error"]["field"], "kbids[1]");
    let unknown = kbdb::kbid_of(b"never learned");
    let (code, v) = run(&[&unknown]);
    assert_eq!(code, 4);
    assert!(
        v["error"]["message"].as_str().unwrap().contains(&unknown),
        "{v}"
    );
}

#[test]
fn recall_text_is_readable() {
    let c = corpus();
    let out =
        c.db.cmd()
            .args(["recall", &c.details, "--depth", "2"])
            .output()
            .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for expected in [
        "== Details [text/markdown]",
        "in: guides/a",
        "Details continue in [setup](b.md#setup).",
        "-- document guides/a — Alpha",
        "← this",
        "← ",
        "→ ",
        "-- sibling in guides/a: Alpha",
    ] {
        assert!(text.contains(expected), "{expected:?} missing in:\n{text}");
    }
}
