//! Helpers for integration tests: run the real `kbdb` binary against a temporary database.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

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

    /// `kbdb --db DIR` with a clean environment for kbdb's own variables.
    pub fn cmd(&self) -> Command {
        let mut c = kbdb_cmd();
        c.arg("--db").arg(&self.dir);
        c
    }

    /// Run with `--format json`, expect success, parse stdout.
    pub fn json(&self, args: &[&str]) -> Value {
        let out = self
            .cmd()
            .args(args)
            .args(["--format", "json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kbdb {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    pub fn learn(&self, args: &[&str]) -> Value {
        let mut a = vec!["learn"];
        a.extend_from_slice(args);
        self.json(&a)
    }

    pub fn status(&self) -> Value {
        self.json(&["status"])
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl TestDb {
    /// `kbdb learn --jsonl --format json` as a child with piped stdin/stdout, holding the
    /// database open until its stdin closes or it is killed.
    pub fn spawn_jsonl(&self) -> std::process::Child {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("kbdb"))
            .args([
                "--db",
                self.dir.to_str().unwrap(),
                "learn",
                "--jsonl",
                "--format",
                "json",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    }
}

pub fn kbdb_cmd() -> Command {
    let mut c = Command::cargo_bin("kbdb").unwrap();
    c.env_remove("KBDB_DIR")
        .env_remove("KBDB_MAX_CONTENT_BYTES")
        .env_remove("KBDB_MAX_BATCH")
        .env_remove("KBDB_LOG");
    c
}

/// A 1×1 transparent PNG.
pub const PNG_B64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
