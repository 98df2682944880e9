//! Helpers for integration tests: run the real `kbdb` binary against a temporary database.
#![allow(dead_code)]

pub mod daemon;
pub mod embed_server;
pub mod mcp;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::mpsc;

use assert_cmd::Command;
use serde_json::Value;

pub struct TestDb {
    pub tmp: tempfile::TempDir,
    pub dir: PathBuf,
}

impl TestDb {
    /// A fresh, initialised database.
    pub fn new() -> TestDb {
        let t = TestDb::uninit();
        t.cmd().arg("init").assert().success();
        t
    }

    /// A temp folder whose database does not exist yet.
    pub fn uninit() -> TestDb {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("kb");
        TestDb { tmp, dir }
    }

    /// `kbdb --db DIR` with a clean environment for kbdb's own variables; its daemon's
    /// socket lives in this test's own runtime folder.
    pub fn cmd(&self) -> Command {
        let mut c = kbdb_cmd();
        c.env("KBDB_RUNTIME_DIR", self.runtime_dir())
            .arg("--db")
            .arg(&self.dir);
        c
    }

    /// The same as [`cmd`](Self::cmd) as a plain `std::process::Command`, for a kbdb that runs
    /// in the background while the test goes on.
    pub fn process(&self) -> std::process::Command {
        let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("kbdb"));
        for var in [
            "KBDB_DIR",
            "KBDB_MAX_CONTENT_BYTES",
            "KBDB_MAX_BATCH",
            "KBDB_LOG",
            "KBDB_EMBEDDED",
            "KBDB_REQUEST_TIMEOUT_SECS",
            "KBDB_SILENT_DAEMON_WAIT_SECS",
            "KBDB_DAEMON_JOURNAL",
            "KBDB_DAEMON_JOURNAL_CHECKPOINT_MS",
        ] {
            c.env_remove(var);
        }
        c.env("KBDB_DAEMON_IDLE_SECS", "5")
            .env("KBDB_RUNTIME_DIR", self.runtime_dir())
            .arg("--db")
            .arg(&self.dir);
        c
    }

    pub fn runtime_dir(&self) -> PathBuf {
        self.tmp.path().join("run")
    }

    /// Stop this database's daemon (so a test can open the store itself).
    pub fn stop_daemon(&self) {
        let _ = self.cmd().args(["daemon", "stop"]).output();
    }

    /// Run with `--format json`, expect success, parse stdout.
    pub fn json(&self, args: &[&str]) -> Value {
        let (code, v) = self.json_exit(args);
        assert_eq!(code, Some(0), "kbdb {args:?} failed: {v}");
        v
    }

    /// Run with `--format json` and parse stdout (Null when it is not JSON), with its exit code
    /// (-1: killed by a signal); None when it has not exited within `secs` (it is killed): for
    /// a command that must not block.
    pub fn json_within(&self, args: &[&str], secs: u64) -> Option<(i32, Value)> {
        let mut child = self
            .process()
            .args(args)
            .args(["--format", "json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while std::time::Instant::now() < deadline {
            if let Some(status) = child.try_wait().unwrap() {
                let mut out = Vec::new();
                std::io::Read::read_to_end(child.stdout.as_mut().unwrap(), &mut out).unwrap();
                return Some((
                    status.code().unwrap_or(-1),
                    serde_json::from_slice(&out).unwrap_or(Value::Null),
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// Run with `--format json` and parse stdout, whatever the exit code (returned with it):
    /// for commands that print their findings and exit non-zero (`check`, `validate`).
    pub fn json_exit(&self, args: &[&str]) -> (Option<i32>, Value) {
        let out = self
            .cmd()
            .args(args)
            .args(["--format", "json"])
            .output()
            .unwrap();
        let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "kbdb {args:?} printed no JSON ({e}): {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out.status.code(), v)
    }

    pub fn learn(&self, args: &[&str]) -> Value {
        let mut a = vec!["learn"];
        a.extend_from_slice(args);
        self.json(&a)
    }

    /// `kbdb check` exits 0 (`when` says after what, in the failure message).
    pub fn assert_checks_clean(&self, when: &str) {
        let out = self
            .cmd()
            .args(["check", "--format", "json"])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "check after {when}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }

    pub fn status(&self) -> Value {
        self.json(&["status"])
    }

    /// What the store holds, for "nothing changed" assertions: counts and the change
    /// sequence (sizes and index state vary with compaction and replay).
    pub fn state(&self) -> Value {
        let s = self.status();
        serde_json::json!([s["sections"], s["documents"], s["last_change_seq"]])
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if self.runtime_dir().exists() {
            self.stop_daemon();
        }
    }
}

impl TestDb {
    /// `kbdb --embedded learn --jsonl --format json` as a child with piped stdin/stdout, holding
    /// the database open (in process) until its stdin closes or it is killed.
    pub fn spawn_jsonl(&self) -> std::process::Child {
        self.spawn_learn_jsonl(true)
    }

    /// `kbdb learn --jsonl --format json` with piped stdin/stdout (stderr discarded): in
    /// process when `embedded`, else through the database's daemon (started if none runs).
    pub fn learn_jsonl(&self, embedded: bool) -> std::process::Command {
        let mut cmd = self.process();
        if embedded {
            cmd.arg("--embedded");
        }
        cmd.args(["learn", "--jsonl", "--format", "json"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        cmd
    }

    /// `learn_jsonl`, started.
    pub fn spawn_learn_jsonl(&self, embedded: bool) -> std::process::Child {
        self.learn_jsonl(embedded).spawn().unwrap()
    }

    /// `spawn_jsonl`, with its input and its result lines taken out for the test to use.
    pub fn jsonl_stream(&self) -> JsonlStream {
        let mut child = self.spawn_jsonl();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        JsonlStream {
            child,
            stdin,
            lines,
        }
    }
}

/// A running `learn --jsonl` process (`TestDb::jsonl_stream`).
pub struct JsonlStream {
    pub child: std::process::Child,
    pub stdin: std::process::ChildStdin,
    pub lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

/// An `--embedded learn --jsonl` process that holds the database open until released.
pub struct EmbeddedHolder {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
}

impl EmbeddedHolder {
    /// Let go of the database (close its input) and whether the process then ended well.
    pub fn release(mut self) -> bool {
        drop(self.stdin.take());
        self.child.wait().unwrap().success()
    }
}

impl TestDb {
    /// Hold the database in an embedded process, returning once it has it open (its first
    /// learn is answered).
    pub fn hold_embedded(&self) -> EmbeddedHolder {
        use std::io::Write;
        let mut child = self.spawn_jsonl();
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "{{\"content\":\"held\"}}").unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("\"kbid\""), "{line}");
        EmbeddedHolder {
            child,
            stdin: Some(stdin),
        }
    }
}

pub fn kbdb_cmd() -> Command {
    let mut c = Command::cargo_bin("kbdb").unwrap();
    c.env_remove("KBDB_DIR")
        .env_remove("KBDB_MAX_CONTENT_BYTES")
        .env_remove("KBDB_MAX_BATCH")
        .env_remove("KBDB_LOG")
        .env_remove("KBDB_EMBEDDED")
        .env_remove("KBDB_REQUEST_TIMEOUT_SECS")
        .env_remove("KBDB_DAEMON_JOURNAL")
        .env_remove("KBDB_DAEMON_JOURNAL_CHECKPOINT_MS")
        // Daemons of finished tests go away soon.
        .env("KBDB_DAEMON_IDLE_SECS", "5");
    c
}

/// A 1×1 transparent PNG.
pub const PNG_B64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// The lines a child writes to its (piped) stdout, read on a thread of their own.
pub fn stdout_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().expect("stdout piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Make a FIFO at `p` (a file that blocks whoever opens it to read until a writer comes).
pub fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}
