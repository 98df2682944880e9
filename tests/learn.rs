//! `kbdb learn`, `retrieve`, `unlearn`, `status` through the real binary.

mod common;

use common::{PNG_B64, TestDb, kbdb_cmd};
use serde_json::Value;

fn kbid(v: &Value) -> String {
    v["kbid"].as_str().unwrap().to_string()
}

#[test]
fn learn_returns_the_spec_result_and_retrieve_returns_the_content() {
    let db = TestDb::new();
    let r = db.learn(&[
        "We chose Postgres because of JSONB.",
        "--title",
        "Database choice",
        "--tag",
        "adr",
    ]);
    assert_eq!(r["kbid"].as_str().unwrap().len(), 26);
    assert_eq!(r["type"], "text/markdown");
    assert_eq!(r["title"], "Database choice");
    assert!(r["indexed_terms_count"].as_u64().unwrap() >= 6);
    assert_eq!(r["attached"], false);
    assert_eq!(r["superseded"], Value::Null);
    assert_eq!(r["warnings"], serde_json::json!([]));
    assert_eq!(r["near_duplicates"], serde_json::json!([]));
    assert!(r["elapsed_ms"].is_number());
    assert!(r["created_at"].as_str().unwrap().ends_with('Z'));
    assert!(
        r.get("description").is_none(),
        "description only when provided"
    );

    let got = db.json(&["retrieve", "--kbid", &kbid(&r)]);
    assert_eq!(
        got,
        serde_json::json!([{
            "kbid": kbid(&r),
            "sectionType": "text/markdown",
            "content": "We chose Postgres because of JSONB.",
            "size": 35
        }])
    );
}

#[test]
fn kbid_is_sha256_of_preprocessed_content() {
    let db = TestDb::new();
    let a = db.learn(&["\u{feff}  line one\r\nline two\rCafe\u{301}  \n"]);
    assert_eq!(
        kbid(&a),
        kbdb::kbid_of("line one\nline two\nCaf\u{e9}".as_bytes())
    );
    let b = db.learn(&["line one\nline two\nCaf\u{e9}"]);
    assert_eq!(kbid(&a), kbid(&b));
    assert_eq!(b["skipped"], true, "same content without docid is skipped");
    assert_eq!(b["indexed_terms_count"], 0);
    assert_eq!(db.status()["sections"], 1);
}

#[test]
fn dedup_attaches_docids_idempotently_and_keeps_order() {
    let db = TestDb::new();
    let first = db.learn(&["alpha", "--docid", "doc/one"]);
    let second = db.learn(&["beta", "--docid", "doc/one"]);
    let third = db.learn(&["gamma", "--docid", "doc/one"]);
    let again = db.learn(&["alpha", "--docid", "doc/two"]);
    assert_eq!(again["attached"], true);
    assert_eq!(again["indexed_terms_count"], 0);
    let idem = db.learn(&["alpha", "--docid", "doc/two"]);
    assert_eq!(idem["attached"], false);
    let doc = db.json(&["retrieve", "--docid", "doc/one"]);
    let order: Vec<&str> = doc["kbids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(order, vec![kbid(&first), kbid(&second), kbid(&third)]);
    assert_eq!(doc["sections"].as_array().unwrap().len(), 3);
    assert_eq!(
        db.json(&["retrieve", "--docid", "doc/two"])["kbids"],
        serde_json::json!([kbid(&first)])
    );
    assert_eq!(db.status()["sections"], 3);
    assert_eq!(db.status()["documents"], 2);
}

#[test]
fn replace_supersedes_by_source_key_in_place() {
    let db = TestDb::new();
    let intro = db.learn(&["intro text", "--docid", "adr/deploy", "--title", "Intro"]);
    let old = db.learn(&[
        "Deploys happen on Tuesdays",
        "--docid",
        "adr/deploy",
        "--title",
        "Deploy day",
    ]);
    let tail = db.learn(&["closing text", "--docid", "adr/deploy", "--title", "Outro"]);
    // Without --replace, the same source key is kept twice and flagged.
    let dup = db.learn(&[
        "Deploys happen on Mondays",
        "--title",
        "Deploy day",
        "--docid",
        "other",
    ]);
    assert_eq!(
        dup["warnings"],
        serde_json::json!([]),
        "different docid, different source key"
    );
    let new = db.learn(&[
        "Deploys happen on Wednesdays",
        "--docid",
        "adr/deploy",
        "--title",
        "Deploy day",
        "--replace",
    ]);
    assert_eq!(new["superseded"], kbid(&old));
    let doc = db.json(&["retrieve", "--docid", "adr/deploy"]);
    assert_eq!(
        doc["kbids"],
        serde_json::json!([kbid(&intro), kbid(&new), kbid(&tail)])
    );
    db.cmd()
        .args(["retrieve", "--kbid", &kbid(&old)])
        .assert()
        .code(4);

    // Explicit source keys work for standalone facts too.
    let a = db.learn(&["The office wifi password is hunter2", "--source", "wifi"]);
    let b = db.learn(&[
        "The office wifi password is correct-horse",
        "--source",
        "wifi",
        "--replace",
    ]);
    assert_eq!(b["superseded"], kbid(&a));
    let c = db.learn(&["Some other claim about the wifi", "--source", "wifi"]);
    assert_eq!(
        c["warnings"],
        serde_json::json!(["heading_missing", "source_key_exists"])
    );
}

#[test]
fn warnings_heading_missing_unless_titled_or_headed() {
    let db = TestDb::new();
    assert_eq!(
        db.learn(&["no title here"])["warnings"],
        serde_json::json!(["heading_missing"])
    );
    let h = db.learn(&["# Release process\nTag, build, publish."]);
    assert_eq!(h["title"], "Release process");
    assert_eq!(h["warnings"], serde_json::json!([]));
    assert_eq!(
        db.learn(&["titled", "--title", "T"])["warnings"],
        serde_json::json!([])
    );
}

#[test]
fn near_duplicates_are_reported_with_similarity() {
    let db = TestDb::new();
    let base: String = (0..120).map(|i| format!("token{i} ")).collect();
    let first = db.learn(&[&base]);
    let near = base.replace("token60 ", "changed ");
    let second = db.learn(&[&near]);
    let nd = second["near_duplicates"].as_array().unwrap();
    assert_eq!(nd.len(), 1);
    assert_eq!(nd[0]["kbid"], kbid(&first));
    let sim = nd[0]["similarity"].as_f64().unwrap();
    assert!((0.85..1.0).contains(&sim), "{sim}");
    let other: String = (0..120).map(|i| format!("unrelated{i} ")).collect();
    assert_eq!(
        db.learn(&[&other])["near_duplicates"],
        serde_json::json!([])
    );
}

#[test]
fn unlearn_cascades_and_unknown_kbid_is_not_an_error() {
    let db = TestDb::new();
    let a = db.learn(&[
        "only member",
        "--docid",
        "solo",
        "--tag",
        "t1",
        "--title",
        "Only",
    ]);
    let r = db.json(&["unlearn", &kbid(&a)]);
    assert_eq!(r["removed"], true);
    assert!(r["elapsed_ms"].is_number());
    db.cmd()
        .args(["retrieve", "--docid", "solo"])
        .assert()
        .code(4);
    let s = db.status();
    assert_eq!(
        (s["sections"].as_u64(), s["documents"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(db.json(&["unlearn", &kbid(&a)])["removed"], false);
    // Learning the same content again is a new section (nothing lingered).
    let again = db.learn(&["only member"]);
    assert_eq!(again["skipped"], false);
    assert!(again["indexed_terms_count"].as_u64().unwrap() > 0);
}

#[test]
fn images_are_base64_with_required_title() {
    let db = TestDb::new();
    let r = db.learn(&[PNG_B64, "--type", "image/png", "--title", "Pixel"]);
    assert_eq!(r["type"], "image/png");
    assert_eq!(r["indexed_terms_count"], 0);
    assert_eq!(r["warnings"], serde_json::json!([]));
    let got = db.json(&["retrieve", "--kbid", &kbid(&r)]);
    assert_eq!(got[0]["content"], PNG_B64);
    assert_eq!(got[0]["size"], 70);
    // The kbid hashes the decoded bytes.
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(PNG_B64)
        .unwrap();
    assert_eq!(kbid(&r), kbdb::kbid_of(&bytes));

    // --file infers the type from the extension and encodes the bytes.
    let f = db.tmp.path().join("pixel.png");
    std::fs::write(&f, &bytes).unwrap();
    let r2 = db.learn(&[
        "--file",
        f.to_str().unwrap(),
        "--title",
        "Pixel",
        "--docid",
        "img",
    ]);
    assert_eq!(r2["kbid"], r["kbid"]);
    assert_eq!(r2["attached"], true);
}

#[test]
fn json_and_other_text_types() {
    let db = TestDb::new();
    let r = db.learn(&[
        "{\"a\": [1, 2]}",
        "--type",
        "application/json",
        "--title",
        "cfg",
    ]);
    assert_eq!(r["type"], "application/json");
    let r = db.learn(&["fn main() {}", "--type", "Text/X-Rust", "--title", "main"]);
    assert_eq!(r["type"], "text/x-rust");
}

#[test]
fn content_from_file_and_stdin() {
    let db = TestDb::new();
    let f = db.tmp.path().join("note.md");
    std::fs::write(&f, "# From a file\nbody").unwrap();
    let r = db.learn(&["--file", f.to_str().unwrap()]);
    assert_eq!(r["title"], "From a file");
    let out = db
        .cmd()
        .args(["learn", "--format", "json"])
        .write_stdin("piped content")
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kbid"], kbdb::kbid_of(b"piped content"));
}

#[test]
fn jsonl_prints_one_result_per_line_in_order() {
    let db = TestDb::new();
    let input = "{\"content\":\"one\",\"tags\":[\"x\"]}\n\n{\"content\":\"two\",\"docid\":\"d\"}\nnot json\n{\"content\":\"\"}\n{\"content\":\"one\"}\n";
    let out = db
        .cmd()
        .args(["learn", "--jsonl", "--format", "json"])
        .write_stdin(input)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6), "some lines failed");
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5, "one line per non-blank input line");
    assert_eq!(lines[0]["kbid"], kbdb::kbid_of(b"one"));
    assert_eq!(lines[1]["docid"], "d");
    assert_eq!(lines[2]["line"], 4);
    assert_eq!(lines[2]["error"]["field"], "line");
    assert_eq!(lines[3]["error"]["field"], "content");
    assert_eq!(lines[4]["skipped"], true);
    assert_eq!(db.status()["sections"], 2);
}

/// Every bad input: a clear error naming the field, a non-zero exit, and no change.
#[test]
fn bad_input_is_rejected_and_changes_nothing() {
    let db = TestDb::new();
    db.learn(&["existing", "--docid", "d"]);
    let before = db.state();
    let nonutf8 = db.tmp.path().join("latin1.txt");
    std::fs::write(&nonutf8, b"caf\xe9").unwrap();
    let long_docid = "x".repeat(257);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec![""], "content"),
        (vec!["   \n\t "], "content"),
        (
            vec!["not base64!!", "--type", "image/png", "--title", "t"],
            "content",
        ),
        (
            vec!["aGVsbG8=", "--type", "image/png", "--title", "t"],
            "content",
        ),
        (vec![PNG_B64, "--type", "image/png"], "title"),
        (vec!["x", "--type", "application/pdf"], "type"),
        (vec!["x", "--type", "textmarkdown"], "type"),
        (vec!["x", "--type", "text/"], "type"),
        (vec!["{not json", "--type", "application/json"], "content"),
        (vec!["--file", nonutf8.to_str().unwrap()], "content"),
        (vec!["x", "--docid", "../etc"], "docid"),
        (vec!["x", "--docid", "a/../../b"], "docid"),
        (vec!["x", "--docid", "/abs"], "docid"),
        (vec!["x", "--docid", "a\u{7}b"], "docid"),
        (vec!["x", "--docid", &long_docid], "docid"),
        (vec!["x", "--tag", ""], "tags"),
        (vec!["x", "--title", "two\nlines"], "title"),
    ];
    for (args, field) in cases {
        let mut a = vec!["learn"];
        a.extend(args.iter());
        let out = db
            .cmd()
            .args(&a)
            .args(["--format", "json"])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(3),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["error"]["field"], field, "{args:?}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.starts_with(&format!("{field}: ")), "{msg}");
        // Text mode: the message on stderr.
        let out = db.cmd().args(&a).output().unwrap();
        assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("error: {field}: ")));
    }
    // Content over the configured maximum (env override), then via worker.toml.
    // (An environment override applies to the process that opens the database: here the
    // embedded one; a daemon takes its own environment.)
    db.stop_daemon();
    db.cmd()
        .env("KBDB_MAX_CONTENT_BYTES", "10")
        .args(["--embedded", "learn", "this is longer than ten bytes"])
        .assert()
        .code(3)
        .stderr(predicates::str::contains(
            "content: is 29 bytes; the limit is 10",
        ));
    std::fs::write(
        db.path().join("worker.toml"),
        "[limits]\nmax_content_bytes = 5\n",
    )
    .unwrap();
    db.cmd().args(["learn", "123456"]).assert().code(3);
    std::fs::write(db.path().join("worker.toml"), "[limits]\nmax_bytes = 5\n").unwrap();
    db.cmd()
        .args(["learn", "1"])
        .assert()
        .code(3)
        .stderr(predicates::str::contains("max_bytes"));
    std::fs::remove_file(db.path().join("worker.toml")).unwrap();
    // Malformed kbid on unlearn / retrieve.
    db.cmd()
        .args(["unlearn", "nope"])
        .assert()
        .code(3)
        .stderr(predicates::str::contains("kbid:"));
    db.cmd()
        .args(["retrieve"])
        .assert()
        .code(3)
        .stderr(predicates::str::contains("Provide kbid or docid"));

    assert_eq!(db.state(), before, "nothing changed");
}

#[test]
fn database_resolution_and_unavailable_databases() {
    // Default ./.kbdb in the working directory; learn creates it and says so.
    let tmp = tempfile::tempdir().unwrap();
    kbdb_cmd()
        .current_dir(tmp.path())
        .args(["status"])
        .assert()
        .code(5)
        .stderr(predicates::str::contains("kbdb init"));
    kbdb_cmd()
        .current_dir(tmp.path())
        .args(["learn", "hello"])
        .assert()
        .success()
        .stderr(predicates::str::contains("created a new knowledge base"));
    assert!(tmp.path().join(".kbdb/kbdb.redb").exists());
    // KBDB_DIR is honoured; --db wins over it.
    let other = tmp.path().join("other");
    kbdb_cmd()
        .env("KBDB_DIR", &other)
        .arg("init")
        .assert()
        .success();
    assert!(other.join("kbdb.redb").exists());
    let out = kbdb_cmd()
        .env("KBDB_DIR", &other)
        .args([
            "--db",
            tmp.path().join(".kbdb").to_str().unwrap(),
            "status",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["sections"], 1);
    // A path that is a file.
    let file = tmp.path().join("afile");
    std::fs::write(&file, "x").unwrap();
    kbdb_cmd()
        .args(["--db", file.to_str().unwrap(), "learn", "x"])
        .assert()
        .code(5)
        .stderr(predicates::str::contains("is not a directory"));
    kbdb_cmd()
        .args(["--db", file.to_str().unwrap(), "init"])
        .assert()
        .code(5);
}

#[test]
fn a_database_held_by_another_process_fails_fast_and_clearly() {
    let db = TestDb::new();
    // `learn --jsonl` keeps the database open while its stdin stays open.
    let holder = db.hold_embedded();

    let start = std::time::Instant::now();
    db.cmd()
        .args(["learn", "blocked"])
        .timeout(std::time::Duration::from_secs(20))
        .assert()
        .code(5)
        .stderr(predicates::str::contains("in use by another process"));
    assert!(start.elapsed() < std::time::Duration::from_secs(20));
    assert!(holder.release());
    // Released: usable again, and the blocked write did not happen.
    assert_eq!(db.status()["sections"], 1);
}

#[test]
fn help_teaches_by_example_and_completions_are_generated() {
    kbdb_cmd()
        .arg("--help")
        .assert()
        .success()
        .stdout(predicates::str::contains("Examples:"));
    kbdb_cmd()
        .args(["learn", "--help"])
        .assert()
        .success()
        .stdout(predicates::str::contains("--jsonl"));
    for shell in ["bash", "zsh", "fish"] {
        kbdb_cmd()
            .args(["completions", shell])
            .assert()
            .success()
            .stdout(predicates::str::contains("kbdb"));
    }
}

#[test]
fn text_output_is_readable() {
    let db = TestDb::new();
    db.cmd()
        .args([
            "learn",
            "hello world",
            "--title",
            "Greeting",
            "--docid",
            "g",
        ])
        .assert()
        .success()
        .stdout(predicates::str::starts_with("learned "));
    db.cmd()
        .args(["retrieve", "--docid", "g"])
        .assert()
        .success()
        .stdout(predicates::str::contains("Greeting"));
    db.cmd()
        .arg("status")
        .assert()
        .success()
        .stdout(predicates::str::contains("sections:  1"));
}

#[test]
fn jsonl_batches_stay_under_the_daemon_message_limit() {
    // 30 images of ~2 MB (base64 ~2.7 MB each, 80 MB in all) would not fit one 64 MiB daemon
    // message; images keep the test fast (no text analysis).
    use base64::Engine;
    let db = TestDb::new();
    let mut input = String::new();
    for i in 0..30u8 {
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        png.extend(std::iter::repeat_n(i, 2_000_000));
        let b64 = base64::engine::general_purpose::STANDARD.encode(&png);
        input.push_str(
            &serde_json::json!({"content": b64, "type": "image/png", "title": format!("img {i}")})
                .to_string(),
        );
        input.push('\n');
    }
    let out = db
        .cmd()
        .args(["learn", "--jsonl", "--format", "json"])
        .write_stdin(input)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        stdout.lines().next().unwrap_or("")
    );
    assert_eq!(stdout.lines().count(), 30);
    assert_eq!(db.status()["sections"], 30);
}

#[test]
fn content_that_starts_with_a_dash_is_read_from_stdin_and_the_error_says_how() {
    let db = TestDb::new();
    let out = db.cmd().args(["learn", "- buy milk"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r#"use "kbdb learn -" to read it from stdin, or "--" before the content"#),
        "{err}"
    );
    // Front matter too; a mistyped option keeps clap's own tip.
    let out = db
        .cmd()
        .args(["learn", "---\ntitle: x\n---\nbody"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(r#"use "kbdb learn -""#), "{err}");
    assert!(!err.contains("similar argument"), "{err}");
    let out = db.cmd().args(["learn", "--titel", "x"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("a similar argument exists: '--title'"),
        "{err}"
    );
    // `-` reads standard input.
    let out = db
        .cmd()
        .args(["learn", "-", "--format", "json"])
        .write_stdin("- buy milk\n- and eggs")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let got = db.json(&["retrieve", "--kbid", &kbid(&r)]);
    assert_eq!(got[0]["content"], "- buy milk\n- and eggs");
    // `--` before the content works too.
    let out = db
        .cmd()
        .args(["--format", "json", "learn", "--", "- buy bread"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let got = db.json(&["retrieve", "--kbid", &kbid(&r)]);
    assert_eq!(got[0]["content"], "- buy bread");
}

#[test]
fn a_split_document_takes_tags_on_every_section() {
    let db = TestDb::new();
    let f = db.tmp.path().join("guide.md");
    std::fs::write(
        &f,
        "# Guide\n\nIntro to flux.\n\n## Setup\n\nFlux capacitor setup.\n",
    )
    .unwrap();
    let r = db.learn(&[
        "--split",
        "--docid",
        "guide",
        "--file",
        f.to_str().unwrap(),
        "--tag",
        "howto",
        "--tag",
        "ops",
    ]);
    assert_eq!(r["added"], 2, "{r}");
    for tag in ["howto", "ops"] {
        let s = db.json(&["search", "flux", "--tag", tag]);
        assert_eq!(s["total"], 2, "{tag}: {s}");
    }
    // Learning it again with another tag adds the tag, keeps the kbids.
    let again = db.learn(&[
        "--split",
        "--docid",
        "guide",
        "--file",
        f.to_str().unwrap(),
        "--tag",
        "v2",
    ]);
    let kbids = |v: &Value| -> Vec<Value> {
        v["sections"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["kbid"].clone())
            .collect()
    };
    assert_eq!(kbids(&again), kbids(&r));
    assert_eq!(again["added"], 0, "{again}");
    assert_eq!(db.json(&["search", "flux", "--tag", "v2"])["total"], 2);
    // A bad tag is refused and changes nothing.
    let before = db.state();
    let out = db
        .cmd()
        .args([
            "learn",
            "--split",
            "--docid",
            "guide2",
            "--file",
            f.to_str().unwrap(),
        ])
        .args(["--tag", " ", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["error"]["field"], "tags", "{e}");
    assert_eq!(db.state(), before);
}

#[test]
fn usage_errors_honour_format_json() {
    let db = TestDb::new();
    for (args, needle) in [
        (&["search", "--format", "json"][..], "<QUERY>"),
        (
            &["--format=json", "learn", "--bogus"],
            "unexpected argument '--bogus'",
        ),
        (&["learn", "- milk", "--format", "json"], "kbdb learn -"),
        (
            &["--format", "json", "search", "x", "--limit", "ten"],
            "--limit",
        ),
        (&["--format", "json", "no-such-command"], "no-such-command"),
        (&["--format", "json"], "requires a subcommand"),
    ] {
        let out = db.cmd().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {out:?}"));
        assert_eq!(v["error"]["code"], "usage", "{args:?}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{args:?}: {msg}");
        assert!(!msg.starts_with("error:"), "{msg}");
        assert!(out.stderr.is_empty(), "{args:?}: {out:?}");
    }
    // Without --format json, clap's text on stderr.
    let out = db.cmd().args(["search"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Usage: kbdb search"));
}

#[test]
fn a_replace_that_supersedes_several_sections_lists_every_one() {
    let db = TestDb::new();
    let a = db.learn(&["Wifi password: hunter2", "--source", "wifi"]);
    let b = db.learn(&["Wifi password: letmein", "--source", "wifi"]);
    assert_eq!(
        b["warnings"],
        serde_json::json!(["heading_missing", "source_key_exists"])
    );
    let c = db.learn(&[
        "Wifi password: correct-horse",
        "--source",
        "wifi",
        "--replace",
    ]);
    let mut got: Vec<String> = c["superseded"]
        .as_array()
        .unwrap_or_else(|| panic!("an array of every replaced kbid: {c}"))
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    got.sort();
    let mut want = vec![kbid(&a), kbid(&b)];
    want.sort();
    assert_eq!(got, want);
    // The text output names each.
    let d = db
        .cmd()
        .args([
            "learn",
            "Wifi password: tr0ub4dor",
            "--source",
            "wifi",
            "--replace",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&d.stdout);
    assert!(text.contains(&format!("superseded {}", kbid(&c))), "{text}");
    // One replaced section is still the spec's single kbid.
    let e = db.learn(&["Wifi password: final", "--source", "wifi", "--replace"]);
    assert!(e["superseded"].is_string(), "{e}");
    assert_eq!(db.status()["sections"], 1);
}

/// On a terminal, a long `--jsonl` ingest shows how many sections are done and how many a
/// second; piped (every other test here), stderr stays quiet.
#[test]
fn jsonl_on_a_terminal_counts_sections_and_their_rate() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no `script` to give the command a terminal");
        return;
    }
    let db = TestDb::new();
    let input = db.dir.join("in.jsonl");
    let lines: String = (0..4000)
        .map(|i| format!("{{\"content\":\"terminal ingest line {i} about tty{i}\"}}\n"))
        .collect();
    std::fs::write(&input, lines).unwrap();
    let bin = assert_cmd::cargo::cargo_bin("kbdb");
    let command = format!(
        "{} --db {} learn --jsonl --embedded < {} > /dev/null",
        bin.display(),
        db.dir.join("kb").display(),
        input.display()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let tty = String::from_utf8_lossy(&out.stdout);
    assert!(tty.contains("sections ("), "no counter: {tty}");
    assert!(tty.contains("/s"), "no rate: {tty}");
    // The same ingest piped: nothing on stderr.
    let out = db
        .cmd()
        .args(["learn", "--jsonl"])
        .write_stdin("{\"content\":\"piped line\"}\n")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A line written and left waiting (an agent feeding `learn --jsonl` one note at a time) gets
/// its result at once, without more input or the end of the input, embedded and through the
/// daemon.
#[test]
fn jsonl_answers_each_line_as_it_comes_without_waiting_for_more() {
    use std::io::Write;
    for embedded in [true, false] {
        let db = TestDb::new();
        let mut child = db.spawn_learn_jsonl(embedded);
        let mut stdin = child.stdin.take().unwrap();
        let results = common::stdout_lines(&mut child);
        for i in 0..3 {
            let content = format!("note {i} fed one at a time");
            writeln!(stdin, "{}", serde_json::json!({ "content": content })).unwrap();
            stdin.flush().unwrap();
            let got = results
                .recv_timeout(std::time::Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("no result for line {i} (embedded: {embedded})"));
            let v: Value = serde_json::from_str(&got).unwrap();
            assert_eq!(v["kbid"], kbdb::kbid_of(content.as_bytes()), "{got}");
        }
        drop(stdin);
        assert!(child.wait().unwrap().success());
    }
}
