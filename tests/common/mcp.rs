//! `kbdb mcp` as a child process, driven with raw JSON-RPC lines over its stdin and stdout.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::TestDb;

/// How long any one message may take to arrive.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

pub struct McpChild {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// The server's answer to `initialize`.
    pub init: Value,
    next_id: u64,
    /// Messages read while waiting for another one, in arrival order.
    aside: Vec<Value>,
    /// The server's stderr, captured to a file.
    pub stderr: PathBuf,
}

impl McpChild {
    /// Start `kbdb mcp --db DIR` (through the test's own daemon folder) and complete the
    /// handshake, offering no client capabilities.
    pub fn start(db: &TestDb) -> McpChild {
        Self::start_with(db, json!({}))
    }

    /// Start it offering the client `capabilities`.
    pub fn start_with(db: &TestDb, capabilities: Value) -> McpChild {
        Self::start_with_args(db, &[], capabilities)
    }

    /// Start `kbdb mcp --db DIR ARGS…` offering the client `capabilities`.
    pub fn start_with_args(db: &TestDb, args: &[&str], capabilities: Value) -> McpChild {
        let mut m = Self::spawn(db, args);
        m.initialize(capabilities);
        m
    }

    /// Start `kbdb mcp --db DIR ARGS…` without the handshake.
    pub fn spawn(db: &TestDb, args: &[&str]) -> McpChild {
        let stderr = db.tmp.path().join(format!("mcp-stderr-{}.txt", unique()));
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("kbdb"))
            .env("KBDB_RUNTIME_DIR", db.runtime_dir())
            .env("KBDB_DAEMON_IDLE_SECS", "5")
            .env_remove("KBDB_EMBEDDED")
            .args(["mcp", "--db", db.dir.to_str().unwrap()])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let lines = super::stdout_lines(&mut child);
        McpChild {
            stdin: child.stdin.take(),
            child,
            lines,
            init: Value::Null,
            next_id: 1,
            aside: Vec::new(),
            stderr,
        }
    }

    /// The handshake: `initialize` offering `capabilities`, then `notifications/initialized`.
    pub fn initialize(&mut self, capabilities: Value) {
        let m = self;
        let init = m.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
                   "clientInfo": {"name": "kbdb-test", "version": "1"}}),
        );
        assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
        assert_eq!(init["result"]["serverInfo"]["name"], "kbdb", "{init}");
        m.init = init;
        m.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    }

    /// Write one line (the newline is added).
    pub fn send(&mut self, line: impl AsRef<[u8]>) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_ref()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The next line of stdout, which must be JSON (stdout carries nothing else).
    fn read(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(ANSWER_WITHIN)
            .expect("the MCP server answers within 60 s");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON-RPC ({e}): {line}"))
    }

    /// The next message that is not a notification (notifications are kept aside).
    pub fn next(&mut self) -> Value {
        self.wait_for(|v| v.get("id").is_some() || v.get("method").is_none())
    }

    /// The first message, kept aside or new, for which `pred` holds; the others are kept aside.
    pub fn wait_for(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.aside.iter().position(&pred) {
            return self.aside.remove(i);
        }
        loop {
            let v = self.read();
            if pred(&v) {
                return v;
            }
            self.aside.push(v);
        }
    }

    /// The messages received while waiting for others, not taken yet (in arrival order).
    pub fn aside(&mut self) -> &mut Vec<Value> {
        &mut self.aside
    }

    /// Send a request and wait for its answer.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        );
        self.wait_for(|v| v["id"] == json!(id) && v.get("method").is_none())
    }

    /// Call a tool: (isError, text).
    pub fn tool(&mut self, name: &str, args: Value) -> (bool, String) {
        let v = self.request("tools/call", json!({"name": name, "arguments": args}));
        let r = &v["result"];
        assert!(r.is_object(), "{name}: {v}");
        (
            r["isError"] == true,
            r["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    }

    /// Call a tool that must succeed; its text parsed as JSON.
    pub fn tool_ok(&mut self, name: &str, args: Value) -> Value {
        let (err, text) = self.tool(name, args);
        assert!(!err, "{name} failed: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}: {text}"))
    }

    /// Close stdin and wait (30 s at most) for the server to exit; its status and stderr.
    pub fn close(mut self) -> (ExitStatus, String) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "kbdb mcp did not exit at EOF");
            std::thread::sleep(Duration::from_millis(20));
        };
        (
            status,
            std::fs::read_to_string(&self.stderr).unwrap_or_default(),
        )
    }
}

impl Drop for McpChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A number no other client of this test process used.
fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}
