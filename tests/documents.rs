//! `kbdb learn --split`: markdown files as documents of heading sections.

mod common;

use common::TestDb;
use serde_json::Value;

const V1: &str = "Intro line before any heading.\n\n# Deploys\nWe deploy on Tuesdays.\n\n```sh\n# not a heading\nmake deploy\n```\n\n## Rollback\nRoll back with the previous image.\n\n## Contacts\nAsk the on-call.\n";

fn split(db: &TestDb, file: &str, docid: &str) -> Value {
    db.learn(&["--file", file, "--docid", docid, "--split"])
}

fn kbids(v: &Value) -> Vec<String> {
    v["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kbid"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_markdown_file_becomes_a_document_of_its_heading_sections() {
    let db = TestDb::new();
    let f = db.tmp.path().join("ops.md");
    std::fs::write(&f, V1).unwrap();
    let r = split(&db, f.to_str().unwrap(), "ops/deploy");
    let headings: Vec<Value> = r["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["heading"].clone())
        .collect();
    assert_eq!(
        headings,
        vec![
            Value::Null,
            "Deploys".into(),
            "Rollback".into(),
            "Contacts".into()
        ]
    );
    assert_eq!(
        (r["added"].as_u64(), r["unchanged"].as_u64()),
        (Some(4), Some(0))
    );
    assert_eq!(r["title"], "Deploys");
    let doc = db.json(&["retrieve", "--docid", "ops/deploy"]);
    assert_eq!(doc["kbids"].as_array().unwrap().len(), 4);
    assert_eq!(doc["kbids"], serde_json::json!(kbids(&r)));
    let deploy = db.json(&["retrieve", "--kbid", &kbids(&r)[1]]);
    assert!(
        deploy[0]["content"]
            .as_str()
            .unwrap()
            .contains("# not a heading"),
        "fenced code stays in its section"
    );
    // Each section is searchable within the document.
    let hits = db.json(&["search", "rollback", "--docid", "ops/deploy"]);
    assert_eq!(hits["items"][0]["heading"], "Rollback");

    // The same file again changes nothing.
    let seq = db.status()["last_change_seq"].clone();
    let again = split(&db, f.to_str().unwrap(), "ops/deploy");
    assert_eq!(again["changed"], false);
    assert_eq!(again["unchanged"], 4);
    assert_eq!(db.status()["last_change_seq"], seq);

    // An edited version: unchanged sections keep their kbid, the vanished one is detached.
    let v2 = V1
        .replace(
            "Roll back with the previous image.",
            "Roll back with `kbdb rollback`.",
        )
        .replace("## Contacts\nAsk the on-call.\n", "");
    std::fs::write(&f, v2).unwrap();
    let edited = split(&db, f.to_str().unwrap(), "ops/deploy");
    let (old, new) = (kbids(&r), kbids(&edited));
    assert_eq!(new.len(), 3);
    assert_eq!(&new[..2], &old[..2], "unchanged sections keep their kbid");
    assert_ne!(new[2], old[2], "the edited section has a new kbid");
    assert_eq!(
        edited["detached"],
        serde_json::json!([old[2].clone(), old[3].clone()])
    );
    assert_eq!(
        db.json(&["retrieve", "--docid", "ops/deploy"])["kbids"],
        serde_json::json!(new)
    );
    assert_eq!(
        db.json(&["search", "on-call", "--docid", "ops/deploy"])["total"],
        0
    );
}

#[test]
fn split_needs_a_docid_and_a_non_empty_document() {
    let db = TestDb::new();
    let f = db.tmp.path().join("empty.md");
    std::fs::write(&f, "  \n\n").unwrap();
    let before = db.state();
    db.cmd()
        .args(["learn", "--file", f.to_str().unwrap(), "--split"])
        .assert()
        .code(3)
        .stderr(predicates::str::contains("docid: is required"));
    db.cmd()
        .args([
            "learn",
            "--file",
            f.to_str().unwrap(),
            "--split",
            "--docid",
            "e",
        ])
        .assert()
        .code(3)
        .stderr(predicates::str::contains("content: has no sections"));
    db.cmd()
        .args(["learn", "# A\nx", "--split", "--docid", "../x"])
        .assert()
        .code(3);
    assert_eq!(db.state(), before);
    // Text output lists the sections.
    db.cmd()
        .args(["learn", "# A\nalpha\n# B\nbeta", "--split", "--docid", "ab"])
        .assert()
        .success()
        .stdout(predicates::str::contains("learned ab: 2 section(s), 2 new"));
}

#[test]
fn content_composes_documents_and_sections_and_docs_lists_them() {
    let db = TestDb::new();
    db.learn(&[
        "# Überblick\nÄrger mit Umlauten – ß.\n\n## Teil\nmehr",
        "--split",
        "--docid",
        "de",
    ]);
    let note = db.learn(&["a standalone note", "--title", "Note"]);
    let code = db.learn(&["fn main() {}", "--type", "text/x-rust", "--title", "Main"]);
    let img = db.learn(&[
        common::PNG_B64,
        "--type",
        "image/png",
        "--title",
        "Pixel [1]",
    ]);
    let ids = [
        "de",
        note["kbid"].as_str().unwrap(),
        code["kbid"].as_str().unwrap(),
        img["kbid"].as_str().unwrap(),
    ];
    let mut args = vec!["content"];
    args.extend(ids);
    let c = db.json(&args);
    let expected = format!(
        "# Überblick\nÄrger mit Umlauten – ß.\n\n## Teil\nmehr\n\n## Note\n\na standalone note\n\n## Main\n\n```rust\nfn main() {{}}\n```\n\n![Pixel 1](kbdb://section/{})",
        img["kbid"].as_str().unwrap()
    );
    assert_eq!(c["type"], "text/markdown");
    assert_eq!(c["data"], expected);
    assert_eq!(
        c["total"],
        expected.chars().count(),
        "characters, not bytes"
    );
    assert_ne!(expected.chars().count(), expected.len());
    // Text output is the markdown itself, pipeable.
    let out = db.cmd().args(&args).output().unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("{expected}\n")
    );
    // Unknown ids are named.
    db.cmd()
        .args(["content", "de", "nope", "zzzzzzzzzzzzzzzzzzzzzzzzzz"])
        .assert()
        .code(4)
        .stderr(predicates::str::contains(
            "nope, zzzzzzzzzzzzzzzzzzzzzzzzzz",
        ));
    // A document whose first section does not open with its title gets a title line.
    db.learn(&["plain text", "--docid", "bare"]);
    let bare = db.json(&["content", "bare"]);
    assert_eq!(bare["data"], "# bare\n\nplain text");
    let docs = db.json(&["docs"]);
    assert_eq!(docs[0]["docid"], "bare");
    assert_eq!(
        docs[1],
        serde_json::json!({"docid": "de", "title": "Überblick", "sections": 2, "updated_at": docs[1]["updated_at"].clone()})
    );
}

#[test]
fn a_docid_typed_with_a_combining_accent_names_the_same_document_as_a_precomposed_one() {
    let db = TestDb::new();
    let nfc = "menus/caf\u{e9}";
    let nfd = "menus/cafe\u{301}";
    let f = db.tmp.path().join("menu.md");
    std::fs::write(&f, "# Espresso\nDouble shot.\n\n# Latte\nSteamed milk.\n").unwrap();
    let first = split(&db, f.to_str().unwrap(), nfd);
    assert_eq!(first["docid"], nfc, "the docid is stored in NFC");
    // Learning again under the other spelling updates the same document.
    let again = split(&db, f.to_str().unwrap(), nfc);
    assert_eq!(again["docid"], nfc);
    assert_eq!(again["added"], 0, "{again}");
    for typed in [nfc, nfd] {
        let doc = db.json(&["retrieve", "--docid", typed]);
        assert_eq!(doc["docid"], nfc, "{doc}");
        assert_eq!(
            doc["kbids"],
            first["sections"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["kbid"].clone())
                .collect::<Value>()
        );
        let hits = db.json(&["search", "steamed", "--docid", typed]);
        assert_eq!(hits["total"], 1, "search --docid {typed:?}: {hits}");
        assert_eq!(db.json(&["doc", "show", typed])["id"], nfc);
    }
    db.assert_checks_clean("after learning under both spellings");
}
