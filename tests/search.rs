//! `kbdb search` through the real binary, and index consistency with the store.

mod common;

use std::io::Write;

use common::{PNG_B64, TestDb};
use serde_json::Value;

fn search(db: &TestDb, args: &[&str]) -> Value {
    let mut a = vec!["search"];
    a.extend_from_slice(args);
    db.json(&a)
}

fn kbids(v: &Value) -> Vec<String> {
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kbid"].as_str().unwrap().to_string())
        .collect()
}

fn corpus() -> TestDb {
    let db = TestDb::new();
    db.learn(&[
        "# Deploy day\nDeploys happen on Tuesdays; the pipeline runs at noon.",
        "--docid",
        "ops/deploy",
        "--tag",
        "process",
    ]);
    db.learn(&[
        "# Rollback\nIf a deploy fails, roll back with the previous image.",
        "--docid",
        "ops/deploy",
        "--tag",
        "process",
        "--tag",
        "incident",
    ]);
    db.learn(&["```rust\nfn parseConfigFile(path: &str) { std::fs::read(path); }\n```\nSee /etc/kbdb/worker.toml and user-id-42, version v1.2.3.", "--title", "Config parsing", "--docid", "code/config"]);
    db.learn(&[
        "fn load() { parse_config_file(\"a\") }",
        "--type",
        "text/x-rust",
        "--title",
        "Loader",
        "--docid",
        "code/config",
    ]);
    db.learn(&[
        "We picked the database for JSONB support.",
        "--title",
        "Storage choice",
    ]);
    db.learn(&[
        PNG_B64,
        "--type",
        "image/png",
        "--title",
        "Pipeline diagram",
        "--description",
        "deploy pipeline overview",
    ]);
    db
}

#[test]
fn sections_mode_envelope_and_item_fields() {
    let db = corpus();
    let r = search(&db, &["deploy"]);
    for key in [
        "items",
        "total",
        "offset",
        "limit",
        "has_more",
        "relaxed",
        "search_mode",
        "retrieval_method",
    ] {
        assert!(r.get(key).is_some(), "envelope lacks {key}");
    }
    assert_eq!(
        (r["offset"].as_u64(), r["limit"].as_u64()),
        (Some(0), Some(20))
    );
    assert_eq!(r["search_mode"], "lexical");
    assert_eq!(r["retrieval_method"], "lexical");
    assert_eq!(r["relaxed"], false);
    assert_eq!(
        r["total"], 3,
        "two text sections and the image (by its description)"
    );
    let first = &r["items"][0];
    assert_eq!(
        first["heading"], "Deploy day",
        "heading match outranks body match"
    );
    assert_eq!(first["type"], "text/markdown");
    assert_eq!(first["docids"], serde_json::json!(["ops/deploy"]));
    assert_eq!(first["matched_terms"], serde_json::json!(["deploy"]));
    assert_eq!(
        first["matched_fields"],
        serde_json::json!(["heading", "body"])
    );
    assert!(
        first["snippet"]
            .as_str()
            .unwrap()
            .contains("Deploys happen")
    );
    assert!(first["created_at"].as_str().unwrap().ends_with('Z'));
    assert!(first.get("content").is_none());
    let image = r["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "image/png")
        .unwrap();
    assert_eq!(image["snippet"], "", "images have no snippet");
    let with_content = search(&db, &["rollback", "--content"]);
    assert!(
        with_content["items"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with("# Rollback")
    );
}

#[test]
fn heading_outranks_body_for_the_same_term() {
    let db = TestDb::new();
    let body = db.learn(&[
        "The kubernetes cluster hosts the cache service.",
        "--title",
        "Cache",
    ]);
    let head = db.learn(&[
        "It hosts the web service for customers.",
        "--title",
        "Kubernetes cluster",
    ]);
    let r = search(&db, &["kubernetes"]);
    assert_eq!(
        kbids(&r),
        vec![
            head["kbid"].as_str().unwrap(),
            body["kbid"].as_str().unwrap()
        ]
    );
}

#[test]
fn stemming_synonyms_and_phrases() {
    let db = corpus();
    // running → runs
    assert_eq!(
        search(&db, &["running"])["items"][0]["heading"],
        "Deploy day"
    );
    // built-in synonym: db → database
    let r = search(&db, &["db"]);
    assert_eq!(r["items"][0]["heading"], "Storage choice");
    // user synonym
    db.cmd()
        .args(["synonyms", "add", "ship", "deploy"])
        .assert()
        .success();
    assert_eq!(
        search(&db, &["ship", "--type", "text/markdown"])["total"],
        2
    );
    let list = db.json(&["synonyms", "list"]);
    assert!(list.as_array().unwrap().iter().any(|e| e["term"] == "ship"));
    db.cmd()
        .args(["synonyms", "remove", "ship"])
        .assert()
        .success();
    assert_eq!(search(&db, &["ship"])["total"], 0);
    // phrase: words adjacent and in order
    assert_eq!(search(&db, &["\"previous image\""])["total"], 1);
    assert_eq!(search(&db, &["\"image previous\""])["total"], 0);
}

#[test]
fn all_words_must_match_else_relaxed_with_hint() {
    let db = corpus();
    let strict = search(&db, &["deploy rollback"]);
    assert_eq!(strict["total"], 1);
    assert_eq!(strict["relaxed"], false);
    let relaxed = search(&db, &["deploy zebra"]);
    assert_eq!(relaxed["relaxed"], true);
    assert_eq!(relaxed["total"], 3);
    assert!(relaxed["hint"].as_str().is_some());
    let none = search(&db, &["zebra quokka"]);
    assert_eq!(none["total"], 0);
    assert_eq!(none["hint"], "no section contains any of: zebra, quokka");
    let filtered = search(&db, &["deploy", "--tag", "nope"]);
    assert!(filtered["hint"].as_str().unwrap().contains("filters"));
    assert!(
        search(&db, &["the of and"])["total"].as_u64().unwrap() >= 1,
        "stop words alone are still searched"
    );
    assert_eq!(
        search(&db, &["!!! ???"])["hint"],
        "the query has no searchable words"
    );
}

#[test]
fn filters_by_tags_type_and_docid() {
    let db = corpus();
    assert_eq!(search(&db, &["deploy", "--tag", "process"])["total"], 2);
    assert_eq!(
        search(&db, &["deploy", "--tag", "process", "--tag", "incident"])["total"],
        1
    );
    assert_eq!(search(&db, &["deploy", "--type", "image/png"])["total"], 1);
    let r = search(&db, &["parse", "--docid", "code/config"]);
    assert_eq!(r["total"], 2);
    assert_eq!(
        search(&db, &["deploy", "--docid", "code/config"])["total"],
        0
    );
}

#[test]
fn identifiers_and_paths_are_found_whole_and_by_parts() {
    let db = corpus();
    for q in [
        "parseConfigFile",
        "parse_config_file",
        "std::fs::read",
        "fs",
        "/etc/kbdb/worker.toml",
        "worker.toml",
        "user-id-42",
        "v1.2.3",
    ] {
        let r = search(&db, &[q]);
        assert!(r["total"].as_u64().unwrap() >= 1, "{q} not found");
        assert_eq!(r["relaxed"], false, "{q}");
    }
    // parseConfigFile by its parts, and the snake_case spelling finds the camelCase one.
    let r = search(&db, &["parse config file"]);
    assert_eq!(r["total"], 2);
    let loader = search(&db, &["parse_config_file", "--type", "text/x-rust"]);
    assert_eq!(
        loader["items"][0]["matched_fields"],
        serde_json::json!(["code"])
    );
}

#[test]
fn paging_is_stable_without_duplicates() {
    let db = TestDb::new();
    let lines: String = (0..45)
        .map(|i| {
            format!(
                "{{\"content\":\"common topic number {i} {}\"}}\n",
                "filler ".repeat(i % 5)
            )
        })
        .collect();
    db.cmd()
        .args(["learn", "--jsonl"])
        .write_stdin(lines)
        .assert()
        .success();
    let mut seen = Vec::new();
    let mut offset = 0;
    loop {
        let r = search(
            &db,
            &[
                "common topic",
                "--limit",
                "10",
                "--offset",
                &offset.to_string(),
            ],
        );
        assert_eq!(r["total"], 45);
        let page = kbids(&r);
        seen.extend(page.clone());
        offset += 10;
        assert_eq!(r["has_more"], offset < 45, "offset {offset}");
        if !r["has_more"].as_bool().unwrap() {
            assert_eq!(page.len(), 5);
            break;
        }
    }
    let unique: std::collections::HashSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), 45, "no duplicates across pages");
    let again: Vec<String> = (0..5)
        .flat_map(|p| {
            kbids(&search(
                &db,
                &[
                    "common topic",
                    "--limit",
                    "10",
                    "--offset",
                    &(p * 10).to_string(),
                ],
            ))
        })
        .collect();
    assert_eq!(seen, again, "stable order");
    db.cmd()
        .args(["search", "x", "--limit", "0"])
        .assert()
        .code(3);
    db.cmd()
        .args(["search", "x", "--limit", "101"])
        .assert()
        .code(3);
}

#[test]
fn documents_and_stats_modes() {
    let db = corpus();
    let r = search(&db, &["deploy", "--mode", "documents"]);
    assert_eq!(r["mode"], "documents");
    let items = r["items"].as_array().unwrap();
    assert_eq!(items[0]["docid"], "ops/deploy");
    assert_eq!(items[0]["hits"], 2);
    assert_eq!(
        items[0]["sections"][0]["heading"], "Deploy day",
        "best section first"
    );
    assert!(
        items.iter().any(|d| d["docid"].is_null()),
        "the standalone image groups alone"
    );
    assert_eq!(r["total"], 2);

    let s = search(&db, &["deploy", "--mode", "stats"]);
    assert_eq!(s["total"], 3);
    assert_eq!(
        s["stats"]["by_type"],
        serde_json::json!({"text/markdown": 2, "image/png": 1})
    );
    assert_eq!(
        s["stats"]["by_tag"],
        serde_json::json!({"process": 2, "incident": 1})
    );
    assert_eq!(
        s["stats"]["by_document"],
        serde_json::json!({"ops/deploy": 2})
    );
    assert_eq!(
        s["stats"]["terms"],
        serde_json::json!([{"term": "deploy", "document_frequency": 3}])
    );
}

/// A section held by two documents counts in each of them, whether the document holds it in
/// the section's record (the first) or in the membership table (the others).
#[test]
fn stats_count_a_shared_section_in_every_document_that_holds_it() {
    let db = TestDb::new();
    for docid in ["runbooks/primary", "runbooks/replica", "runbooks/standby"] {
        db.learn(&[
            "# Failover
Promote the standby, then repoint the pooler.",
            "--docid",
            docid,
        ]);
    }
    let s = search(&db, &["failover", "--mode", "stats"]);
    assert_eq!(s["total"], 1, "one section: {s}");
    assert_eq!(
        s["stats"]["by_document"],
        serde_json::json!({"runbooks/primary": 1, "runbooks/replica": 1, "runbooks/standby": 1})
    );
}

#[test]
fn snippets_on_multibyte_text_are_centred_and_whole_characters() {
    let db = TestDb::new();
    let text = format!(
        "{} Schlüsselwort {}",
        "日本語のテキスト ".repeat(40),
        "ñandú ".repeat(60)
    );
    db.learn(&[&text, "--title", "Multibyte"]);
    let r = search(&db, &["schlüsselwort"]);
    let snip = r["items"][0]["snippet"].as_str().unwrap();
    assert!(snip.contains("Schlüsselwort"), "{snip}");
    assert!(snip.starts_with('…') && snip.ends_with('…'));
    assert!(snip.chars().count() <= 152);
}

#[test]
fn hostile_queries_never_error() {
    let db = corpus();
    let long = "deploy ".repeat(1500);
    let hostile = [
        "\"",
        "\"\"",
        "\"deploy",
        "deploy\"",
        "NOT deploy",
        "deploy AND OR NOT",
        "-deploy",
        "+deploy",
        "title:deploy",
        "deploy*",
        "*",
        "(deploy",
        "deploy)",
        "[]{}",
        "\\",
        "🔥💥 deploy 🚀",
        "\u{7}",
        "' OR 1=1 --",
        "<script>alert(1)</script>",
        "ﷺ",
        "a:b:c::d",
        "~~~",
        "```",
        "#",
        &long,
    ];
    for q in hostile {
        let out = db
            .cmd()
            .args(["search", "--format", "json", "--", q])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{q:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v["total"].is_u64());
    }
    let v = search(&db, &[&long]);
    assert!(
        v["warnings"][0]
            .as_str()
            .unwrap()
            .starts_with("query_truncated")
    );
}

#[test]
fn read_your_writes_and_unlearn_disappears_from_search() {
    let db = TestDb::new();
    let a = db.learn(&["ephemeral knowledge about quasars"]);
    assert_eq!(search(&db, &["quasars"])["total"], 1);
    db.json(&["unlearn", a["kbid"].as_str().unwrap()]);
    assert_eq!(search(&db, &["quasars"])["total"], 0);
    // Attaching to a document updates the docid filter.
    db.learn(&["shared fact about pulsars"]);
    db.learn(&["shared fact about pulsars", "--docid", "astro"]);
    assert_eq!(search(&db, &["pulsars", "--docid", "astro"])["total"], 1);
}

#[test]
fn sigkill_before_the_index_commit_loses_nothing_searchable() {
    let db = TestDb::new();
    let common::JsonlStream {
        mut child,
        mut stdin,
        lines: mut out,
    } = db.jsonl_stream();
    let mut acked = 0;
    for i in 0..30 {
        writeln!(stdin, "{{\"content\":\"crashproof marker{i} nebula\"}}").unwrap();
        let line = out.next().unwrap().unwrap();
        assert!(line.contains("kbid"));
        acked += 1;
    }
    // The store has committed every line; the index writer has not committed (learn leaves it
    // to the next search). SIGKILL now.
    child.kill().unwrap();
    child.wait().unwrap();
    let r = search(&db, &["nebula", "--limit", "100"]);
    assert_eq!(r["total"], acked);
    for i in [0, 17, 29] {
        assert_eq!(search(&db, &[&format!("marker{i}")])["total"], 1);
    }
}

#[test]
fn a_deleted_or_corrupt_index_is_rebuilt_on_open() {
    let db = corpus();
    let before = search(&db, &["deploy"]);
    // The index is opened by whoever opens the database: stop the daemon to damage it.
    db.stop_daemon();
    std::fs::remove_dir_all(db.path().join("index")).unwrap();
    assert_eq!(search(&db, &["deploy"]), before);
    // Garbage in the index metadata: rebuilt too.
    db.stop_daemon();
    std::fs::write(db.path().join("index/lexical/meta.json"), b"{not json").unwrap();
    assert_eq!(search(&db, &["deploy"]), before);
    assert_eq!(db.status()["cacheStats"]["indexCount"], 6);
}

#[test]
fn words_close_together_outrank_words_far_apart() {
    // Both sections have the same words and length, so BM25 ties; pick texts whose tie-break
    // key puts the far one first, so only the proximity bonus can put the near one on top.
    let key = |t: &str| kbdb::index::lexical::kbid_key(&kbdb::kbid_of(t.as_bytes()));
    let (far, near) = (0..100)
        .map(|i| {
            let filler = format!("lorem{i} ipsum dolor sit amet ").repeat(6);
            (
                format!("alpha {filler} omega"),
                format!("alpha omega {filler}"),
            )
        })
        .find(|(f, n)| key(f) < key(n))
        .unwrap();
    let db = TestDb::new();
    let far = db.learn(&[&far]);
    let near = db.learn(&[&near]);
    let r = search(&db, &["alpha omega"]);
    assert_eq!(
        kbids(&r),
        vec![
            near["kbid"].as_str().unwrap(),
            far["kbid"].as_str().unwrap()
        ]
    );
    // Without a second word there is no proximity: the tie-break decides.
    let r = search(&db, &["alpha"]);
    assert_eq!(kbids(&r)[0], far["kbid"].as_str().unwrap());
}

#[test]
fn search_and_synonym_input_errors_name_the_field_and_change_nothing() {
    let db = corpus();
    let before = db.state();
    let out = db
        .cmd()
        .args([
            "search", "deploy", "--offset", "9995", "--limit", "10", "--format", "json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["field"], "offset");
    db.cmd()
        .args(["search", "deploy", "--docid", "../x"])
        .assert()
        .code(3)
        .stderr(predicates::str::contains("docid:"));
    db.cmd()
        .args(["search", "deploy", "--type", "video/mp4"])
        .assert()
        .code(3)
        .stderr(predicates::str::contains("type:"));
    db.cmd()
        .args(["synonyms", "add", "ship", ""])
        .assert()
        .code(3)
        .stderr(predicates::str::contains("synonyms: must not be empty"));
    db.cmd()
        .args(["synonyms", "add", " ", "x"])
        .assert()
        .code(3)
        .stderr(predicates::str::contains("term:"));
    assert_eq!(db.json(&["synonyms", "list"]), serde_json::json!([]));
    assert_eq!(db.state(), before);
}

#[test]
fn unquoted_words_after_search_are_one_query() {
    let db = TestDb::new();
    db.learn(&[
        "SQLite edge cases: NULL ordering.",
        "--title",
        "SQLite edges",
    ]);
    db.learn(&["An unrelated note about sqlite only."]);
    let r = search(&db, &["sqlite", "edge", "--limit", "5"]);
    assert_eq!(r["total"], 1, "{r}");
    assert_eq!(r["relaxed"], false, "{r}");
    assert_eq!(r["items"][0]["heading"], "SQLite edges");
    // The same as the quoted form.
    assert_eq!(
        search(&db, &["sqlite edge", "--limit", "5"])["items"],
        r["items"]
    );
}

/// Run kbdb with its stdout a pipe whose reader is already gone: (exit code, stderr).
fn with_closed_stdout(db: &TestDb, args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = db
        .process()
        .args(args)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn no_command_panics_when_its_output_pipe_closes() {
    let db = TestDb::new();
    db.learn(&["Piped output is cut short by head."]);
    for args in [
        &["completions", "bash"][..],
        &["search", "piped"],
        &["search", "piped", "--format", "json"],
        &["status"],
        &["docs", "--format", "json"],
        &["learn", "a fact printed into a closed pipe"],
    ] {
        let (code, stderr) = with_closed_stdout(&db, args);
        assert!(!stderr.contains("panicked"), "kbdb {args:?}: {stderr}");
        // Stopped as a command killed by SIGPIPE is reported by a shell.
        assert_eq!(code, Some(141), "kbdb {args:?}: {stderr}");
    }
    // What was written before the pipe closed is kept.
    assert_eq!(db.status()["sections"], 2);
    // Help goes through clap, which swallows the error.
    let (code, stderr) = with_closed_stdout(&db, &["--help"]);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(code, Some(0));
}
