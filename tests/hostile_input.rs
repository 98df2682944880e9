//! The hostile input matrix (docs/hostile-input.md): oversized and deeply nested JSON, invalid
//! UTF-8 and NUL bytes, megabyte headings and 100k-section documents, path-traversal docids and
//! export paths, database folders with wrong permissions, a second daemon on one database and
//! runtime folders or sockets of another user — through the real binary, the real daemon socket
//! and `kbdb mcp`. Every case asserts a clear error (naming the field and the rule), no crash (the
//! daemon still answers, no panic in stderr or the daemon log) and nothing lost (what was learned
//! before is still there and `kbdb check` is clean).

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::TestDb;
use common::daemon::{Raw, socket_path};
use common::mcp::McpChild as Mcp;
use serde_json::{Value, json};

/// The daemon's message limit (docs/daemon.md), and one line just over it.
const MAX_MESSAGE: usize = 64 * 1024 * 1024;
/// Nesting far beyond any parser's recursion limit.
const DEEP: usize = 100_000;
/// The user other-user cases run as (root only).
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() == 0 }
}

// ---------------------------------------------------------------------------------------------
// Running the CLI

/// What one command did.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn of(out: Output) -> Run {
        let r = Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        assert_no_panic(&r.stderr, "stderr");
        assert_no_panic(&r.stdout, "stdout");
        r
    }

    /// stdout as JSON (Null when it is not).
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or(Value::Null)
    }
}

/// `kbdb --db DIR <args> --format json`, with `stdin` when given.
fn run(db: &TestDb, args: &[&str], stdin: Option<&[u8]>) -> Run {
    let mut c = db.cmd();
    c.args(args).args(["--format", "json"]);
    if let Some(bytes) = stdin {
        c.write_stdin(bytes.to_vec());
    }
    Run::of(c.output().unwrap())
}

/// The command failed as invalid input (exit 3) with a JSON error naming `field` whose message
/// contains `rule`.
#[track_caller]
fn assert_invalid(r: &Run, field: &str, rule: &str) {
    let v = r.json();
    assert_eq!(r.code, 3, "exit 3 expected: {}\n{}", r.stdout, r.stderr);
    assert_eq!(v["error"]["code"], "invalid_input", "{}", r.stdout);
    assert_eq!(v["error"]["field"], field, "{}", r.stdout);
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains(field) && msg.contains(rule),
        "message names {field:?} and {rule:?}: {msg}"
    );
}

#[track_caller]
fn assert_no_panic(text: &str, what: &str) {
    assert!(
        !text.contains("panicked") && !text.contains("RUST_BACKTRACE"),
        "panic text in {what}: {text}"
    );
}

fn daemon_log(db: &TestDb) -> String {
    std::fs::read_to_string(db.dir.join("daemon.log")).unwrap_or_default()
}

fn daemon_pid(db: &TestDb) -> u64 {
    db.json(&["daemon", "status"])["daemon"]["pid"]
        .as_u64()
        .expect("a daemon runs")
}

// ---------------------------------------------------------------------------------------------
// What was learned before the hostile input, and the check that it is all still there

struct Seed {
    kbids: Vec<String>,
    docids: Vec<&'static str>,
}

fn seed(db: &TestDb) -> Seed {
    let one = db.learn(&[
        "Quasars outshine their host galaxies",
        "--docid",
        "seed/notes",
    ]);
    let md = db.tmp.path().join("seed.md");
    std::fs::write(
        &md,
        "# Pulsars\n\nPulsars spin very fast.\n\n## Magnetars\n\nMagnetars carry strong fields.\n",
    )
    .unwrap();
    let doc = db.learn(&[
        "--split",
        "--docid",
        "seed/doc",
        "--file",
        md.to_str().unwrap(),
    ]);
    let mut kbids = vec![one["kbid"].as_str().unwrap().to_string()];
    for s in doc["sections"].as_array().unwrap() {
        kbids.push(s["kbid"].as_str().unwrap().to_string());
    }
    Seed {
        kbids,
        docids: vec!["seed/notes", "seed/doc"],
    }
}

/// Everything seeded is retrievable and found, `check` is clean, and the daemon logged no panic.
#[track_caller]
fn assert_intact(db: &TestDb, seed: &Seed) {
    for k in &seed.kbids {
        let r = run(db, &["retrieve", "--kbid", k], None);
        assert_eq!(r.code, 0, "section {k} lost: {}", r.stdout);
    }
    for d in &seed.docids {
        let r = run(db, &["retrieve", "--docid", d], None);
        assert_eq!(r.code, 0, "document {d} lost: {}", r.stdout);
    }
    for q in ["quasars", "magnetars"] {
        assert!(
            db.json(&["search", q])["total"].as_u64().unwrap() >= 1,
            "search {q} finds the seed"
        );
    }
    let r = run(db, &["check"], None);
    assert_eq!(r.code, 0, "check: {}", r.stdout);
    assert_eq!(r.json()["ok"], true, "{}", r.stdout);
    assert_no_panic(&daemon_log(db), "daemon.log");
}

// ---------------------------------------------------------------------------------------------
// A raw connection to the daemon's socket

/// A JSON-RPC line around `params` (raw bytes, so they may be anything).
fn rpc_line(id: u64, method: &str, params: &[u8]) -> Vec<u8> {
    let mut line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"{method}\",\"params\":")
        .into_bytes();
    line.extend_from_slice(params);
    line.push(b'}');
    line
}

#[track_caller]
fn assert_rpc_error(v: &Value, code: i64, needle: &str) {
    assert_eq!(v["error"]["code"], code, "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains(needle), "{needle:?} in {v}");
}

/// An operation error (-32000) naming `field`.
#[track_caller]
fn assert_rpc_invalid(v: &Value, field: &str, rule: &str) {
    assert_eq!(v["error"]["code"], -32000, "{v}");
    assert_eq!(v["error"]["data"]["code"], "invalid_input", "{v}");
    assert_eq!(v["error"]["data"]["field"], field, "{v}");
    let msg = v["error"]["data"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains(rule), "{rule:?} in {v}");
}

// ---------------------------------------------------------------------------------------------
// `kbdb mcp` as a child

/// A protocol error without a request id (the line could not be read as a request).
#[track_caller]
fn expect_error(m: &mut Mcp, code: i64, needle: &str) {
    let v = m.next();
    assert!(v.get("id").is_none_or(Value::is_null), "{v}");
    assert_rpc_error(&v, code, needle);
}

/// Close stdin; the server exits cleanly and printed no panic.
fn finish(m: Mcp) {
    let (status, stderr) = m.close();
    assert!(status.success(), "kbdb mcp exit: {status}");
    assert_no_panic(&stderr, "kbdb mcp stderr");
}

// ---------------------------------------------------------------------------------------------
// Oversized and deeply nested JSON; invalid UTF-8 and NUL in JSON-RPC lines

#[test]
fn the_daemon_socket_survives_oversized_nested_invalid_and_nul_json() {
    let db = TestDb::new();
    let seed = seed(&db);
    let pid = daemon_pid(&db);
    let mut raw = Raw::connect(&db);

    // Deep nesting: a parse error (serde_json's recursion limit), the connection stays usable.
    let v = raw.call(&vec![b'['; DEEP]);
    assert_rpc_error(&v, -32700, "recursion limit exceeded");
    assert_eq!(v["id"], Value::Null);
    let v = raw.call(&b"{\"a\":".repeat(DEEP));
    assert_rpc_error(&v, -32700, "recursion limit exceeded");
    let mut deep_params = vec![b'['; DEEP];
    deep_params.extend(vec![b']'; DEEP]);
    let v = raw.call(&rpc_line(1, "learn", &deep_params));
    assert_rpc_error(&v, -32700, "recursion limit exceeded");

    // Invalid UTF-8 and raw NUL bytes, inside a string and outside one.
    let v = raw.call(&rpc_line(2, "search", b"{\"query\":\"qua\xffsars\"}"));
    assert_rpc_error(&v, -32700, "invalid unicode code point");
    let v = raw.call(b"\xfe{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"status\"}");
    assert_rpc_error(&v, -32700, "expected value");
    let v = raw.call(&rpc_line(4, "search", b"{\"query\":\"qua\x00sars\"}"));
    assert_rpc_error(&v, -32700, "control character");
    let v = raw.call(b"\x00");
    assert_rpc_error(&v, -32700, "parse error");

    // NUL as a JSON escape: refused where it is data (docid, content, title), a word separator
    // in a query (docs/search.md).
    let v = raw.call(&rpc_line(
        5,
        "learn",
        br#"{"content":"nul docid","docid":"seed/a\u0000b"}"#,
    ));
    assert_rpc_invalid(&v, "docid", "control characters (found U+0000)");
    let v = raw.call(&rpc_line(6, "learn", br#"{"content":"before\u0000after"}"#));
    assert_rpc_invalid(&v, "content", "NUL");
    let v = raw.call(&rpc_line(
        7,
        "learn",
        br#"{"content":"titled","title":"a\u0000b"}"#,
    ));
    assert_rpc_invalid(&v, "title", "control characters");
    let v = raw.call(&rpc_line(8, "retrieve", br#"{"docid":"seed\u0000notes"}"#));
    assert_rpc_invalid(&v, "docid", "control characters");
    let v = raw.call(&rpc_line(9, "search", br#"{"query":"quasars\u0000host"}"#));
    assert_eq!(v["id"], 9, "{v}");
    assert!(v["result"]["total"].as_u64().unwrap() >= 1, "{v}");

    // The connection still serves ordinary requests.
    let v = raw.call(&rpc_line(10, "status", b"null"));
    assert_eq!(v["result"]["sections"], 3, "{v}");

    // A line over 64 MiB: -32600, then the daemon closes this connection (it cannot resync).
    let mut big =
        b"{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"learn\",\"params\":{\"content\":\"".to_vec();
    big.resize(MAX_MESSAGE + 1024, b'x');
    big.extend_from_slice(b"\"}}");
    raw.send(&big);
    let v = raw.read().expect("an error before closing");
    assert_rpc_error(&v, -32600, "exceeds 67108864 bytes");
    assert!(raw.read().is_none(), "the connection is closed after it");

    // The same daemon serves everyone else, and nothing changed.
    assert_eq!(daemon_pid(&db), pid, "the daemon did not restart");
    assert_eq!(db.status()["sections"], 3);
    assert_intact(&db, &seed);
}

#[test]
fn kbdb_mcp_survives_oversized_nested_invalid_and_nul_json() {
    let db = TestDb::new();
    let seed = seed(&db);
    let mut m = Mcp::start(&db);

    m.send(vec![b'['; DEEP]);
    expect_error(&mut m, -32700, "recursion limit exceeded");
    let mut deep = rpc_line(
        90,
        "tools/call",
        br#"{"name":"search","arguments":{"query":"#,
    );
    deep.pop();
    deep.extend(vec![b'['; DEEP]);
    m.send(&deep);
    expect_error(&mut m, -32700, "recursion limit exceeded");

    m.send(rpc_line(
        91,
        "tools/call",
        b"{\"name\":\"search\",\"arguments\":{\"query\":\"qua\xffsars\"}}",
    ));
    expect_error(&mut m, -32700, "invalid unicode code point");
    m.send(b"{\"jsonrpc\":\"2.0\",\"id\":92,\"method\":\"ping\",\"x\":\"a\x00b\"}");
    expect_error(&mut m, -32700, "control character");

    let (err, text) = m.tool("learn", json!({"content": "x", "docid": "seed/a\u{0}b"}));
    assert!(err, "{text}");
    assert!(
        text.contains("docid: must not contain control characters"),
        "{text}"
    );
    let (err, text) = m.tool("learn", json!({"content": "before\u{0}after"}));
    assert!(err, "{text}");
    assert!(
        text.starts_with("content: contains a NUL character"),
        "{text}"
    );
    let (err, text) = m.tool("search", json!({"query": "quasars\u{0}host"}));
    assert!(!err, "{text}");
    assert!(text.contains("Quasars"), "{text}");
    let (err, text) = m.tool("retrieve", json!({"docid": "../seed/notes"}));
    assert!(err, "{text}");
    assert!(
        text.contains("docid: must not contain a '..' segment"),
        "{text}"
    );

    // A message over 64 MiB: -32600 with its id (read from the part received); the rest of
    // that line is skipped and the next line is read.
    let mut big = br#"{"jsonrpc":"2.0","id":93,"method":"ping","params":{"pad":""#.to_vec();
    big.resize(MAX_MESSAGE + 1024, b'x');
    big.extend_from_slice(b"\"}}");
    m.send(&big);
    let v = m.next();
    assert_eq!(v["id"], 93, "{v}");
    assert_rpc_error(&v, -32600, "exceeds 67108864 bytes");

    let (err, text) = m.tool("search", json!({"query": "magnetars"}));
    assert!(!err, "{text}");
    assert!(
        text.contains("Magnetars"),
        "the server still answers: {text}"
    );
    let (err, text) = m.tool("learn", json!({"content": "learned after the storm"}));
    assert!(!err, "{text}");
    finish(m);
    assert_eq!(db.status()["sections"], 4);
    assert_intact(&db, &seed);
}

#[test]
fn deeply_nested_front_matter_and_json_content_do_not_recurse() {
    let db = TestDb::new();
    let seed = seed(&db);
    let before = db.state();
    let d = 30_000; // within the 64 KiB front matter limit
    // Nine levels of nine aliases each: 9^9 nodes if expanded.
    let mut yaml_alias = String::from("---\na: &a [x, x, x, x, x, x, x, x, x]\n");
    for (prev, name) in "abcdefgh".chars().zip("bcdefghi".chars()) {
        let refs = vec![format!("*{prev}"); 9].join(", ");
        yaml_alias.push_str(&format!("{name}: &{name} [{refs}]\n"));
    }
    yaml_alias.push_str("---\n# T\n\nbody\n");
    for (name, text, rule) in [
        (
            "yaml",
            format!(
                "---\na: {}{}\n---\n# T\n\nbody\n",
                "[".repeat(d),
                "]".repeat(d)
            ),
            "front matter: nested more than 32 levels deep",
        ),
        (
            "toml",
            format!(
                "+++\na = {}{}\n+++\n# T\n\nbody\n",
                "[".repeat(d),
                "]".repeat(d)
            ),
            "front matter: nested more than 32 levels deep",
        ),
        (
            "big",
            format!(
                "---\na: {}{}\n---\n# T\n",
                "[".repeat(DEEP),
                "]".repeat(DEEP)
            ),
            "more than the limit of 65536 bytes",
        ),
        ("alias", yaml_alias, "front matter: invalid YAML"),
    ] {
        let f = db.tmp.path().join(format!("{name}.md"));
        std::fs::write(&f, text).unwrap();
        let r = run(
            &db,
            &[
                "learn",
                "--split",
                "--docid",
                "deep/doc",
                "--file",
                f.to_str().unwrap(),
            ],
            None,
        );
        assert_invalid(&r, "content", rule);
    }
    assert_eq!(db.state(), before);
    // Valid JSON nested 100,000 deep is valid JSON: stored, and checked without recursion.
    let json = format!("{}{}", "[".repeat(DEEP), "]".repeat(DEEP));
    let r = run(
        &db,
        &["learn", "--type", "application/json", "--title", "Deep"],
        Some(json.as_bytes()),
    );
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert!(r.json()["kbid"].is_string(), "{}", r.stdout);
    assert_intact(&db, &seed);
}

// ---------------------------------------------------------------------------------------------
// Invalid UTF-8 and NUL bytes through the CLI

#[test]
fn invalid_utf8_and_nul_in_learn_content_from_stdin_file_and_jsonl() {
    let db = TestDb::new();
    let seed = seed(&db);
    let before = db.state();

    let r = run(&db, &["learn"], Some(b"abc\xff\xfedef"));
    assert_invalid(
        &r,
        "content",
        "is not valid UTF-8 (first invalid byte at offset 3)",
    );
    let bad = db.tmp.path().join("bad.md");
    std::fs::write(&bad, b"# Title\n\nbody \xc3\x28 here\n").unwrap();
    let r = run(&db, &["learn", "--file", bad.to_str().unwrap()], None);
    assert_invalid(
        &r,
        "content",
        "is not valid UTF-8 (first invalid byte at offset 14)",
    );
    let r = run(
        &db,
        &[
            "learn",
            "--split",
            "--docid",
            "bad/utf8",
            "--file",
            bad.to_str().unwrap(),
        ],
        None,
    );
    assert_invalid(&r, "content", "is not valid UTF-8");

    // NUL: refused in text, wherever it comes from (UTF-16 text read as UTF-8 is full of it).
    let r = run(&db, &["learn"], Some(b"abc\x00def"));
    assert_invalid(&r, "content", "contains a NUL character (U+0000) at byte 3");
    let utf16: Vec<u8> = "utf sixteen"
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    let r = run(&db, &["learn", "--type", "text/plain"], Some(&utf16));
    assert_invalid(&r, "content", "NUL");
    let nul = db.tmp.path().join("nul.md");
    std::fs::write(&nul, b"# Heading\n\nbinary\x00junk\n\n# Other\n\nfine\n").unwrap();
    let r = run(&db, &["learn", "--file", nul.to_str().unwrap()], None);
    assert_invalid(&r, "content", "NUL");
    let r = run(
        &db,
        &[
            "learn",
            "--split",
            "--docid",
            "bad/nul",
            "--file",
            nul.to_str().unwrap(),
        ],
        None,
    );
    assert_invalid(&r, "content", "section 0");
    assert_eq!(db.state(), before, "nothing was stored");

    // --jsonl: each bad line fails alone, in place; the stream goes on (exit 6).
    let mut input = Vec::new();
    input.extend_from_slice(b"{\"content\":\"jsonl line one\"}\n");
    input.extend_from_slice(b"{\"content\":\"bad \xff utf8\"}\n");
    input.extend_from_slice(b"{\"content\":\"jsonl line three\"}\n");
    input.extend_from_slice(b"{\"content\":\"raw \x00 nul\"}\n");
    input.extend_from_slice(b"{\"content\":\"escaped \\u0000 nul\"}\n");
    input.extend(vec![b'['; DEEP]);
    input.push(b'\n');
    let mut long = b"{\"content\":\"".to_vec();
    long.resize(33 * 1024 * 1024, b'y');
    long.extend_from_slice(b"\"}\n");
    input.extend_from_slice(&long);
    input.extend_from_slice(b"{\"content\":\"jsonl line eight\"}\r\n");
    let r = run(&db, &["learn", "--jsonl"], Some(&input));
    assert_eq!(r.code, 6, "{}", r.stdout);
    let lines: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 8, "one result per line: {}", r.stdout);
    let expect: [Option<(&str, &str)>; 8] = [
        None,
        Some((
            "line",
            "is not valid UTF-8 (first invalid byte at offset 16)",
        )),
        None,
        Some(("line", "control character")),
        Some(("content", "NUL")),
        Some(("line", "is not a learn object")),
        Some(("line", "is longer than 33554432 bytes")),
        None,
    ];
    for (i, (v, want)) in lines.iter().zip(expect).enumerate() {
        match want {
            None => assert!(v["kbid"].is_string(), "line {}: {v}", i + 1),
            Some((field, rule)) => {
                assert_eq!(v["line"], i + 1, "{v}");
                assert_eq!(v["error"]["field"], field, "line {}: {v}", i + 1);
                let msg = v["error"]["message"].as_str().unwrap();
                assert!(msg.contains(rule), "line {}: {rule:?} in {msg}", i + 1);
            }
        }
    }
    assert_eq!(
        db.status()["sections"],
        6,
        "the three good lines were stored"
    );
    assert!(db.json(&["search", "eight"])["total"].as_u64().unwrap() >= 1);

    // Content over the daemon's message limit: a clear error before sending, not a "lost
    // connection".
    let huge = db.tmp.path().join("huge.txt");
    std::fs::write(&huge, vec![b'z'; MAX_MESSAGE + 16]).unwrap();
    let r = run(&db, &["learn", "--file", huge.to_str().unwrap()], None);
    assert_invalid(&r, "request", "the limit is 67108864 bytes");
    std::fs::remove_file(&huge).unwrap();
    assert_intact(&db, &seed);
}

#[test]
fn invalid_utf8_and_control_characters_in_docids_and_queries_on_the_command_line() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let db = TestDb::new();
    let seed = seed(&db);
    let before = db.state();
    let os = |b: &[u8]| OsStr::from_bytes(b).to_os_string();

    let out = db
        .cmd()
        .args(["learn", "some content", "--docid"])
        .arg(os(b"notes/\xffbad"))
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_invalid(
        &Run::of(out),
        "docid",
        "is not valid UTF-8 (first invalid byte at offset 6)",
    );
    let out = db
        .cmd()
        .args(["learn", "some content"])
        .arg(os(b"--docid=a\xc3"))
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_invalid(
        &Run::of(out),
        "docid",
        "is not valid UTF-8 (first invalid byte at offset 1)",
    );
    // A positional argument is named by its position.
    let out = db
        .cmd()
        .arg("search")
        .arg(os(b"qua\xffsars"))
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_invalid(&Run::of(out), "argument 4", "is not valid UTF-8");
    // Text output: the same message on stderr.
    let out = db
        .cmd()
        .args(["retrieve", "--docid"])
        .arg(os(b"\xfe"))
        .output()
        .unwrap();
    let r = Run::of(out);
    assert_eq!(r.code, 3);
    assert!(
        r.stderr.starts_with("error: docid: is not valid UTF-8"),
        "{}",
        r.stderr
    );

    for bad in ["a\u{1}b", "a\tb", "a\u{7f}b", "a\u{85}b"] {
        let r = run(&db, &["learn", "x y", "--docid", bad], None);
        assert_invalid(&r, "docid", "control characters");
        let r = run(&db, &["retrieve", "--docid", bad], None);
        assert_invalid(&r, "docid", "control characters");
    }
    // Control characters in a query separate words (docs/search.md): not an error.
    let r = run(&db, &["search", "quasars\u{1}\u{7f}\u{1b}[31m"], None);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert!(r.json()["total"].as_u64().unwrap() >= 1);
    assert_eq!(db.state(), before);
    assert_intact(&db, &seed);
}

// ---------------------------------------------------------------------------------------------
// Megabyte headings and documents of 100,000 sections

#[test]
fn a_one_megabyte_heading_is_refused_by_split_and_learned_plainly_without_a_title() {
    let db = TestDb::new();
    let seed = seed(&db);
    let before = db.state();
    let file = db.tmp.path().join("heading.md");
    let mut md = b"# ".to_vec();
    md.extend(vec![b'h'; 1024 * 1024]);
    md.extend_from_slice(b"\n\nThe body under a megabyte heading.\n\n## Second\n\nmore\n");
    std::fs::write(&file, &md).unwrap();

    let start = Instant::now();
    let r = run(
        &db,
        &[
            "learn",
            "--split",
            "--docid",
            "big/heading",
            "--file",
            file.to_str().unwrap(),
        ],
        None,
    );
    assert_invalid(&r, "title", "is 1048576 characters long; the limit is 1024");
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("section 0 (\"")
    );
    assert!(
        r.stdout.len() < 1024,
        "the error quotes a preview, not the heading: {} bytes",
        r.stdout.len()
    );
    let r = run(
        &db,
        &[
            "learn",
            "--file",
            file.to_str().unwrap(),
            "--title",
            &"t".repeat(1025),
        ],
        None,
    );
    assert_invalid(&r, "title", "is 1025 characters long; the limit is 1024");
    assert_eq!(db.state(), before);

    // As one section it is ordinary text (1 MiB is under the content limit): stored, no title.
    let r = db.learn(&["--file", file.to_str().unwrap()]);
    assert_eq!(r["warnings"], json!(["heading_missing"]), "{r}");
    assert!(
        db.json(&["search", "megabyte heading"])["total"]
            .as_u64()
            .unwrap()
            >= 1
    );
    assert!(start.elapsed() < Duration::from_secs(60));
    assert_intact(&db, &seed);
}

#[test]
fn a_document_of_100k_sections_is_refused_by_the_batch_limit_at_once() {
    let db = TestDb::new();
    let seed = seed(&db);
    let before = db.state();
    let file = db.tmp.path().join("many.md");
    let mut md = String::new();
    for i in 0..100_000 {
        md.push_str(&format!("# Heading {i}\n\nbody {i}\n\n"));
    }
    std::fs::write(&file, &md).unwrap();
    let start = Instant::now();
    let r = run(
        &db,
        &[
            "learn",
            "--split",
            "--docid",
            "many/sections",
            "--file",
            file.to_str().unwrap(),
        ],
        None,
    );
    assert_invalid(
        &r,
        "content",
        "splits into 100000 sections; the limit is 10000 (limits.max_batch)",
    );
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "refused before any work: {:?}",
        start.elapsed()
    );
    assert_eq!(db.state(), before);
    assert_intact(&db, &seed);

    // The limit is limits.max_batch: at the limit a document is learned, one more is refused.
    let small = TestDb::uninit();
    std::fs::create_dir_all(&small.dir).unwrap();
    std::fs::write(small.dir.join("worker.toml"), "[limits]\nmax_batch = 50\n").unwrap();
    small.cmd().arg("init").assert().success();
    let doc = |n: usize| {
        let mut md = String::new();
        for i in 0..n {
            md.push_str(&format!("# Part {i}\n\ntext {i}\n\n"));
        }
        let f = small.tmp.path().join(format!("doc{n}.md"));
        std::fs::write(&f, md).unwrap();
        f
    };
    let at = doc(50);
    let r = small.learn(&["--split", "--docid", "d/at", "--file", at.to_str().unwrap()]);
    assert_eq!(r["sections"].as_array().unwrap().len(), 50);
    let over = doc(51);
    let r = run(
        &small,
        &[
            "learn",
            "--split",
            "--docid",
            "d/over",
            "--file",
            over.to_str().unwrap(),
        ],
        None,
    );
    assert_invalid(&r, "content", "splits into 51 sections; the limit is 50");
    assert_eq!(small.status()["documents"], 1);
}

// ---------------------------------------------------------------------------------------------
// Path traversal: docids, import layouts, export destinations

const BAD_DOCIDS: &[(&str, &str)] = &[
    ("../x", "must not contain a '..' segment"),
    ("/etc/passwd", "must be relative"),
    ("a/../../b", "must not contain a '..' segment"),
    ("..", "must not contain a '..' segment"),
    ("./a", "must not contain a '.' segment"),
    ("a\\..\\b", "must not contain '\\'"),
    ("a\\b", "must not contain '\\'"),
    ("a//b", "must not contain empty segments"),
    ("a/", "must not contain empty segments"),
    ("", "must not be empty"),
    (" a", "must not start or end with whitespace"),
];

#[test]
fn path_traversal_docids_are_refused_by_learn_retrieve_and_export() {
    let db = TestDb::new();
    let seed = seed(&db);
    let before = db.state();
    let md = db.tmp.path().join("doc.md");
    std::fs::write(&md, "# Escape\n\nattempt\n").unwrap();
    for (docid, rule) in BAD_DOCIDS {
        let r = run(&db, &["learn", "escape attempt", "--docid", docid], None);
        assert_invalid(&r, "docid", rule);
        let r = run(
            &db,
            &[
                "learn",
                "--split",
                "--docid",
                docid,
                "--file",
                md.to_str().unwrap(),
            ],
            None,
        );
        assert_invalid(&r, "docid", rule);
        let r = run(&db, &["retrieve", "--docid", docid], None);
        assert_invalid(&r, "docid", rule);
    }
    let long = "d".repeat(257);
    let r = run(&db, &["learn", "x", "--docid", &long], None);
    assert_invalid(&r, "docid", "is 257 bytes long; the limit is 256");
    assert_eq!(db.state(), before);
    assert!(!db.tmp.path().join("x").exists() && !db.tmp.path().join("b").exists());

    // Every file an export writes stays inside it.
    let out = db.tmp.path().join("out");
    db.json(&["export", out.to_str().unwrap()]);
    let root = out.canonicalize().unwrap();
    let mut stack = vec![root.clone()];
    let mut files = 0;
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path().canonicalize().unwrap();
            assert!(p.starts_with(&root), "{} escapes the export", p.display());
            if p.is_dir() {
                stack.push(p);
            } else {
                files += 1;
            }
        }
    }
    assert!(files >= 8, "{files} files");
    assert_intact(&db, &seed);
}

#[test]
fn an_import_layout_with_traversal_docids_paths_and_links_is_reported_and_skipped() {
    let db = TestDb::new();
    let seed = seed(&db);
    let layout = db.tmp.path().join("layout");
    db.json(&["export", layout.to_str().unwrap()]);
    let kbid = &seed.kbids[0];
    for (i, (docid, _)) in BAD_DOCIDS.iter().enumerate() {
        std::fs::write(
            layout.join(format!("documents/evil{i}.toml")),
            format!(
                "docid = {}\ntype = \"document\"\ncreated_at = \"2026-01-01T00:00:00Z\"\n\
                 updated_at = \"2026-01-01T00:00:00Z\"\nkbids = [\"{kbid}\"]\n",
                toml_string(docid)
            ),
        )
        .unwrap();
    }
    // A section whose metadata points its content file outside the layout.
    let secret = db.tmp.path().join("secret.txt");
    std::fs::write(&secret, "outside the layout").unwrap();
    let fake = kbdb::kbid_of(b"outside the layout");
    let fan = layout.join("sections").join(&fake[..2]);
    std::fs::create_dir_all(&fan).unwrap();
    std::fs::write(
        fan.join(format!("{fake}.toml")),
        format!(
            "kbid = \"{fake}\"\ntype = \"text/plain\"\nfile = \"../../../secret.txt\"\n\
             created_at = \"2026-01-01T00:00:00Z\"\nupdated_at = \"2026-01-01T00:00:00Z\"\n\
             size = 18\nchecksum = \"00\"\n"
        ),
    )
    .unwrap();
    // A document manifest that is a symbolic link to a file outside.
    let outside = db.tmp.path().join("outside.toml");
    std::fs::write(
        &outside,
        format!(
            "docid = \"linked\"\ntype = \"document\"\ncreated_at = \"2026-01-01T00:00:00Z\"\n\
             updated_at = \"2026-01-01T00:00:00Z\"\nkbids = [\"{kbid}\"]\n"
        ),
    )
    .unwrap();
    std::os::unix::fs::symlink(&outside, layout.join("documents/linked.toml")).unwrap();

    let copy = TestDb::uninit();
    let strict = run(
        &copy,
        &["import", layout.to_str().unwrap(), "--strict"],
        None,
    );
    assert_eq!(strict.code, 3, "{}", strict.stdout);
    assert_eq!(
        strict.json()["error"]["code"],
        "bad_import",
        "{}",
        strict.stdout
    );
    let r = run(&copy, &["import", layout.to_str().unwrap()], None);
    assert_eq!(r.code, 0, "{}", r.stdout);
    let v = r.json();
    let problems = v["problems"].as_array().unwrap();
    let text = serde_json::to_string(problems).unwrap();
    for (i, _) in BAD_DOCIDS.iter().enumerate() {
        assert!(
            text.contains(&format!("evil{i}.toml")),
            "evil{i} reported: {text}"
        );
    }
    assert!(
        text.contains(&fake),
        "the escaping content file is reported: {text}"
    );
    assert!(text.contains("linked.toml"), "the link is reported: {text}");
    assert!(text.contains("symbolic link"), "{text}");
    assert_eq!(v["sections_imported"], 3, "{v}");
    assert_eq!(
        v["documents_imported"], 2,
        "only the two real documents: {v}"
    );
    assert_eq!(
        run(&copy, &["retrieve", "--kbid", &fake], None).code,
        4,
        "nothing read from outside the layout"
    );
    assert_eq!(run(&copy, &["retrieve", "--docid", "linked"], None).code, 4);
    assert_intact(&copy, &seed);
    assert_intact(&db, &seed);
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

#[test]
fn export_destinations_that_traverse_link_or_hit_the_database_are_refused() {
    let db = TestDb::new();
    let seed = seed(&db);
    let tmp = db.tmp.path();

    // The database folder, its parent, anything inside it (a forced export there replaced the
    // lexical index under the running daemon: searches and check then failed).
    let dir = db.dir.to_str().unwrap().to_string();
    for (target, rule) in [
        (dir.clone(), "would replace the database folder itself"),
        (
            format!("{dir}/"),
            "would replace the database folder itself",
        ),
        (
            format!("{dir}/../kb"),
            "would replace the database folder itself",
        ),
        (
            tmp.to_str().unwrap().to_string(),
            "would replace the database folder itself",
        ),
        (format!("{dir}/index"), "is inside the database folder"),
        (
            format!("{dir}/index/lexical"),
            "is inside the database folder",
        ),
        (format!("{dir}/new-folder"), "is inside the database folder"),
        (
            format!("{dir}/new-parent/x"),
            "is inside the database folder",
        ),
    ] {
        for force in [false, true] {
            let mut args = vec!["export", target.as_str()];
            if force {
                args.push("--force");
            }
            let r = run(&db, &args, None);
            assert_invalid(&r, "path", rule);
        }
    }
    assert!(!db.dir.join("new-folder").exists() && !db.dir.join("new-parent").exists());

    // A symbolic link as the destination: refused, nothing written where it points.
    let elsewhere = tmp.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let link = tmp.join("link");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    for force in [false, true] {
        let mut args = vec!["export", link.to_str().unwrap()];
        if force {
            args.push("--force");
        }
        assert_invalid(&run(&db, &args, None), "path", "is a symbolic link");
    }
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    // A link to the database folder itself.
    let db_link = tmp.join("db-link");
    std::os::unix::fs::symlink(&db.dir, &db_link).unwrap();
    let into = format!("{}/index", db_link.display());
    assert_invalid(
        &run(&db, &["export", &into, "--force"], None),
        "path",
        "is inside the database folder",
    );
    // A file, a non-empty folder without --force, a path naming no folder.
    let file = tmp.join("file");
    std::fs::write(&file, "x").unwrap();
    assert_invalid(
        &run(&db, &["export", file.to_str().unwrap()], None),
        "path",
        "exists and is not a folder",
    );
    assert_invalid(
        &run(
            &db,
            &["export", elsewhere.parent().unwrap().to_str().unwrap()],
            None,
        ),
        "path",
        "would replace the database folder itself",
    );
    std::fs::write(elsewhere.join("keep"), "mine").unwrap();
    assert_invalid(
        &run(&db, &["export", elsewhere.to_str().unwrap()], None),
        "path",
        "is not empty (it holds keep)",
    );
    assert_invalid(
        &run(&db, &["export", "/"], None),
        "path",
        "does not name a folder",
    );
    // `..` in a path given on the command line is the user's own choice: resolved, written.
    let dotted = format!("{}/cli/../dotted", tmp.display());
    let v = db.json(&["export", &dotted]);
    assert_eq!(v["path"], tmp.join("dotted").to_str().unwrap());

    // An agent (MCP) is confined to the folder that holds the database: `..`, absolute paths
    // and links out of it are refused.
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), tmp.join("out-link")).unwrap();
    let mut m = Mcp::start(&db);
    for path in [
        "../escape".to_string(),
        "a/../../escape".to_string(),
        "../made-outside/deeper/x".to_string(),
        "/etc/kbdb-escape".to_string(),
        format!("{}/x", outside.path().display()),
        "out-link/x".to_string(),
    ] {
        let (err, text) = m.tool("export", json!({"path": path}));
        assert!(err, "{path}: {text}");
        assert!(
            text.starts_with("path: ") && text.contains("is outside"),
            "{path}: {text}"
        );
    }
    let (err, text) = m.tool("export", json!({"path": "kb/index", "force": true}));
    assert!(
        err && text.contains("is inside the database folder"),
        "{text}"
    );
    finish(m);
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    // A refused export creates nothing, not even the folders on its way.
    assert!(!tmp.parent().unwrap().join("escape").exists());
    assert!(!tmp.parent().unwrap().join("made-outside").exists());
    assert!(!tmp.join("a").exists());
    assert_intact(&db, &seed);
}

// ---------------------------------------------------------------------------------------------
// A database folder with wrong permissions

/// Chown a tree (no links followed).
fn chown_tree(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
    if std::fs::symlink_metadata(path).unwrap().is_dir() {
        for e in std::fs::read_dir(path).unwrap().flatten() {
            chown_tree(&e.path(), uid);
        }
    }
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Another user to run as: nobody when we are root (root bypasses file modes), else ourselves.
struct Other {
    uid: u32,
    runtime: PathBuf,
}

impl Other {
    fn new(db: &TestDb) -> Other {
        // The temp folder is 0700: let the other user reach the database inside it.
        chmod(db.tmp.path(), 0o755);
        let uid = if is_root() {
            NOBODY
        } else {
            // SAFETY: getuid has no preconditions.
            unsafe { libc::getuid() }
        };
        let runtime = db.tmp.path().join("run-other");
        std::fs::create_dir(&runtime).unwrap();
        chmod(&runtime, 0o700);
        std::os::unix::fs::chown(&runtime, Some(uid), Some(uid)).unwrap();
        Other { uid, runtime }
    }

    fn run(&self, db: &TestDb, args: &[&str]) -> Run {
        let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("kbdb"));
        c.env("KBDB_RUNTIME_DIR", &self.runtime)
            .env("KBDB_DAEMON_IDLE_SECS", "5")
            .env_remove("KBDB_EMBEDDED")
            .env_remove("KBDB_DIR")
            .arg("--db")
            .arg(&db.dir)
            .args(args)
            .args(["--format", "json"])
            .stdin(Stdio::null());
        if is_root() {
            c.uid(self.uid).gid(self.uid);
        }
        Run::of(c.output().unwrap())
    }

    /// The command failed, saying permission was denied on `what` in the database folder.
    #[track_caller]
    fn assert_denied(&self, db: &TestDb, args: &[&str], what: &str) {
        let r = self.run(db, args);
        assert_ne!(r.code, 0, "{args:?} succeeded: {}", r.stdout);
        let msg = r.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            msg.contains("Permission denied") && msg.contains(what),
            "{args:?}: permission denied on {what:?}: {msg}"
        );
        assert!(!msg.contains("run `kbdb init`"), "not 'missing': {msg}");
        // No daemon of the other user was left behind.
        let sockets = std::fs::read_dir(&self.runtime)
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "sock"))
            .count();
        assert_eq!(sockets, 0, "{args:?} left a daemon");
    }

    fn restore(&self, db: &TestDb) {
        chmod(&db.dir, 0o755);
        chmod(&db.dir.join("kbdb.redb"), 0o644);
        // SAFETY: getuid has no preconditions.
        chown_tree(&db.dir, unsafe { libc::getuid() });
    }
}

#[test]
fn a_database_folder_with_wrong_permissions_gets_a_clear_error_and_loses_nothing() {
    let db = TestDb::new();
    let seed = seed(&db);
    let before = db.state();
    db.stop_daemon();
    let other = Other::new(&db);
    let dir = db.dir.to_str().unwrap().to_string();
    let file = format!("{dir}/kbdb.redb");

    if is_root() {
        // Owned by another user (root's database, nobody's client).
        for args in [
            &["status"][..],
            &["learn", "not mine"],
            &["search", "quasars"],
        ] {
            other.assert_denied(&db, args, &dir);
        }
        // Embedded, the folder's owner is checked before any of its files is opened.
        let r = other.run(&db, &["--embedded", "status"]);
        assert_eq!(r.json()["error"]["code"], "unsafe_folder", "{}", r.stdout);
        assert!(r.stdout.contains("belongs to uid 0"), "{}", r.stdout);
        chown_tree(&db.dir, other.uid);
    }
    // Not writable.
    chmod(&db.dir, 0o555);
    for args in [&["status"][..], &["learn", "no room"], &["check"]] {
        other.assert_denied(&db, args, &dir);
    }
    // Not readable (not even the database file's existence can be seen).
    chmod(&db.dir, 0o000);
    for args in [
        &["status"][..],
        &["learn", "no entry"],
        &["--embedded", "status"],
    ] {
        other.assert_denied(&db, args, &file);
    }
    // A read-only database file in a writable folder.
    chmod(&db.dir, 0o755);
    chmod(&db.dir.join("kbdb.redb"), 0o444);
    for args in [&["status"][..], &["learn", "read only"]] {
        other.assert_denied(&db, args, &file);
    }
    other.restore(&db);
    assert_eq!(db.state(), before, "nothing changed");
    assert_intact(&db, &seed);
}

// ---------------------------------------------------------------------------------------------
// Two daemons on one database

/// Run `kbdb --db DIR daemon run` in the foreground; it must exit within 20 s.
fn second_daemon(db: &TestDb, runtime: &Path) -> Run {
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("kbdb"))
        .env("KBDB_RUNTIME_DIR", runtime)
        .env("KBDB_DAEMON_IDLE_SECS", "5")
        .env_remove("KBDB_EMBEDDED")
        .args(["--db", db.dir.to_str().unwrap(), "daemon", "run"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("a second daemon kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Run::of(child.wait_with_output().unwrap())
}

#[test]
fn a_second_daemon_on_the_same_database_is_refused_and_the_first_serves_on() {
    let db = TestDb::new();
    let seed = seed(&db);
    let pid = daemon_pid(&db);
    let sock = socket_path(&db).expect("the daemon's socket");
    let other_runtime = db.tmp.path().join("run-second");
    for runtime in [db.runtime_dir(), other_runtime.clone()] {
        let r = second_daemon(&db, &runtime);
        assert_eq!(r.code, 5, "{}", r.stderr);
        assert!(
            r.stderr.contains("is in use by another process"),
            "{}",
            r.stderr
        );
    }
    assert!(sock.exists(), "the first daemon's socket is untouched");
    assert_eq!(daemon_pid(&db), pid, "the first daemon serves on");
    let v = db.learn(&["learned while a second daemon was refused"]);
    assert!(v["kbid"].is_string());
    assert_eq!(db.status()["sections"], 4);
    // A client of the other runtime folder finds the first daemon through daemon.endpoint.
    let out = common::kbdb_cmd()
        .env("KBDB_RUNTIME_DIR", &other_runtime)
        .args([
            "--db",
            db.dir.to_str().unwrap(),
            "daemon",
            "status",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["daemon"]["pid"], pid, "{v}");
    assert_intact(&db, &seed);
}

// ---------------------------------------------------------------------------------------------
// Runtime folders and sockets of another user, or with wrong modes

fn with_runtime(db: &TestDb, runtime: &Path, args: &[&str]) -> Run {
    let out = common::kbdb_cmd()
        .env("KBDB_RUNTIME_DIR", runtime)
        .arg("--db")
        .arg(&db.dir)
        .args(args)
        .args(["--format", "json"])
        .output()
        .unwrap();
    Run::of(out)
}

#[test]
fn runtime_folders_and_sockets_of_another_user_or_with_wrong_modes() {
    let db = TestDb::new();
    let seed = seed(&db);
    db.stop_daemon();
    let tmp = db.tmp.path();

    // A runtime folder open to everyone is made private (0700) and used.
    let open = tmp.join("run-open");
    std::fs::create_dir(&open).unwrap();
    chmod(&open, 0o777);
    let r = with_runtime(&db, &open, &["status"]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert_eq!(std::fs::metadata(&open).unwrap().mode() & 0o777, 0o700);
    let sock = std::fs::read_dir(&open)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "sock"))
        .unwrap();
    assert_eq!(std::fs::metadata(&sock).unwrap().mode() & 0o777, 0o600);
    with_runtime(&db, &open, &["daemon", "stop"]);

    // A link, or a file, where the runtime folder should be: refused, naming it.
    let link = tmp.join("run-link");
    std::os::unix::fs::symlink(&open, &link).unwrap();
    let file = tmp.join("run-file");
    std::fs::write(&file, "").unwrap();
    for bad in [&link, &file] {
        let r = with_runtime(&db, bad, &["status"]);
        assert_eq!(r.code, 5, "{}", r.stdout);
        let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(
            msg.contains(&format!(
                "runtime folder {} is not a plain folder",
                bad.display()
            )),
            "{msg}"
        );
    }

    if is_root() {
        // A runtime folder that belongs to another user: refused, nothing started in it.
        let foreign = tmp.join("run-foreign");
        std::fs::create_dir(&foreign).unwrap();
        chmod(&foreign, 0o700);
        std::os::unix::fs::chown(&foreign, Some(NOBODY), Some(NOBODY)).unwrap();
        let r = with_runtime(&db, &foreign, &["status"]);
        assert_eq!(r.code, 5, "{}", r.stdout);
        let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(
            msg.contains("belongs to uid 65534, not to you") && msg.contains("KBDB_RUNTIME_DIR"),
            "{msg}"
        );
        assert_eq!(std::fs::read_dir(&foreign).unwrap().count(), 0);

        // A stale socket of another user where this database's socket goes: replaced.
        let own = db.runtime_dir();
        db.status();
        let sock = socket_path(&db).expect("the daemon's socket");
        db.stop_daemon();
        let stale = UnixListener::bind(&sock).unwrap();
        drop(stale);
        std::os::unix::fs::lchown(&sock, Some(NOBODY), Some(NOBODY)).unwrap();
        assert_eq!(db.status()["sections"], 3);
        let meta = std::fs::symlink_metadata(&sock).unwrap();
        assert_eq!(meta.uid(), 0, "the socket is the new daemon's");
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert!(own.join(sock.file_name().unwrap()).exists());
        db.stop_daemon();

        // daemon.endpoint naming a live socket of another user: ignored, never connected to.
        let trap_dir = tmp.join("trap");
        std::fs::create_dir(&trap_dir).unwrap();
        let trap = trap_dir.join("trap.sock");
        let listener = UnixListener::bind(&trap).unwrap();
        listener.set_nonblocking(true).unwrap();
        std::os::unix::fs::lchown(&trap, Some(NOBODY), Some(NOBODY)).unwrap();
        std::fs::write(db.dir.join("daemon.endpoint"), trap.to_str().unwrap()).unwrap();
        assert_eq!(db.status()["sections"], 3);
        assert!(
            matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "the client connected to another user's socket"
        );
        let recorded = std::fs::read_to_string(db.dir.join("daemon.endpoint")).unwrap();
        assert_eq!(
            Path::new(recorded.trim()),
            socket_path(&db).expect("the daemon's socket"),
            "the real daemon's record"
        );
    }
    assert_intact(&db, &seed);
}

#[test]
fn a_fifo_or_a_huge_sparse_file_in_place_of_a_database_file_is_refused_at_once() {
    let db = TestDb::new();
    let seed = seed(&db);
    db.stop_daemon();
    let journal = db.path().join("kbdb.journal");
    let moved = db.tmp.path().join("kbdb.journal.kept");
    if journal.exists() {
        std::fs::rename(&journal, &moved).unwrap();
    }
    let status = ["--embedded", "status"];
    // A FIFO: opening it to read would wait for a writer, forever.
    common::mkfifo(&journal);
    let (code, e) = db
        .json_within(&status, 20)
        .expect("the open does not wait on a FIFO");
    assert_eq!(code, 5, "{e}");
    assert_eq!(e["error"]["code"], "unsafe_folder", "{e}");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("kbdb.journal") && msg.contains("not a regular file"),
        "{msg}"
    );
    // Through the daemon too: it refuses to start, and says why.
    let (code, e) = db.json_within(&["status"], 20).expect("not blocked");
    assert_ne!(code, 0, "{e}");
    std::fs::remove_file(&journal).unwrap();
    // A 20 GiB sparse file (no disk taken): refused by its size, not read into memory.
    std::fs::File::create(&journal)
        .unwrap()
        .set_len(20 << 30)
        .unwrap();
    let (code, e) = db
        .json_within(&status, 20)
        .expect("the open does not read it");
    assert_eq!(code, 9, "{e}");
    assert_eq!(e["error"]["code"], "damaged", "{e}");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("kbdb.journal") && msg.contains("more than any journal"),
        "{msg}"
    );
    // Moved aside, as the message says: the database opens with everything it held.
    std::fs::remove_file(&journal).unwrap();
    if moved.exists() {
        std::fs::rename(&moved, &journal).unwrap();
    }
    assert_intact(&db, &seed);
}

#[test]
fn a_fifo_or_an_oversized_file_as_the_configuration_or_the_daemon_endpoint_never_blocks() {
    let db = TestDb::new();
    let seed = seed(&db);
    db.stop_daemon();
    let config = db.path().join("worker.toml");
    let endpoint = db.path().join("daemon.endpoint");
    let _ = std::fs::remove_file(&config);
    let _ = std::fs::remove_file(&endpoint);
    // The daemon's endpoint record as a FIFO: not read, and the client starts a daemon.
    common::mkfifo(&endpoint);
    let (code, v) = db.json_within(&["status"], 20).expect("not blocked");
    assert_eq!(code, 0, "{v}");
    db.stop_daemon();
    let _ = std::fs::remove_file(&endpoint);
    // The configuration as a FIFO, then over its 1 MiB bound: a clear error, at once.
    let refused = |why: &str| {
        let (code, e) = db
            .json_within(&["--embedded", "status"], 20)
            .expect("not blocked");
        assert_ne!(code, 0, "{e}");
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(msg.contains("worker.toml") && msg.contains(why), "{msg}");
    };
    common::mkfifo(&config);
    refused("not a regular file");
    std::fs::remove_file(&config).unwrap();
    std::fs::write(&config, format!("# {}\n", "x".repeat(2 << 20))).unwrap();
    refused("larger than 1048576 bytes");
    std::fs::remove_file(&config).unwrap();
    assert_intact(&db, &seed);
}

#[test]
fn a_fifo_or_a_link_in_the_lexical_index_folder_gets_the_index_rebuilt_not_waited_on() {
    let db = TestDb::new();
    let seed = seed(&db);
    db.stop_daemon();
    let index = db.path().join("index/lexical");
    let query = ["--embedded", "search", "pulsars"];
    let hits = |v: &Value| v["items"].as_array().map_or(0, Vec::len);
    let (code, before) = db.json_within(&query, 20).expect("a search");
    assert_eq!(code, 0, "{before}");
    assert!(hits(&before) > 0, "{before}");
    // A FIFO in place of the index's meta.json: tantivy would wait on it for a writer.
    std::fs::remove_file(index.join("meta.json")).unwrap();
    common::mkfifo(&index.join("meta.json"));
    let (code, v) = db
        .json_within(&query, 20)
        .expect("the open does not wait on a FIFO");
    assert_eq!((code, hits(&v)), (0, hits(&before)), "{v}");
    // A link to a file outside: the index is rebuilt, the file it points at left alone.
    let outside = db.tmp.path().join("not-kbdbs.txt");
    std::fs::write(&outside, "someone else's").unwrap();
    std::os::unix::fs::symlink(&outside, index.join("planted.idx")).unwrap();
    let (code, v) = db.json_within(&query, 20).expect("a search");
    assert_eq!((code, hits(&v)), (0, hits(&before)), "{v}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "someone else's");
    assert!(!index.join("planted.idx").exists());
    assert_intact(&db, &seed);
}
