//! The README is a promise to a newcomer: its tour runs as written, in order, in an empty
//! folder, and what it says about the MCP server is what the server does.

mod common;

use std::process::Command;

use common::TestDb;
use common::mcp::McpChild;
use serde_json::json;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

/// The first ```sh block under the heading `heading`.
fn shell_block(text: &str, heading: &str) -> String {
    let at = text
        .find(heading)
        .unwrap_or_else(|| panic!("README has no heading {heading:?}"));
    let start = text[at..].find("```sh\n").expect("a ```sh block") + at + "```sh\n".len();
    let end = text[start..].find("\n```").expect("the block's end") + start;
    text[start..end].to_string()
}

#[test]
fn the_readme_tour_runs_in_order_in_an_empty_folder() {
    let tour = shell_block(&readme(), "## A short tour");
    let tmp = tempfile::tempdir().unwrap();
    let bin = assert_cmd::cargo::cargo_bin("kbdb");
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("bash");
    cmd.args(["-euo", "pipefail", "-c", &tour])
        .current_dir(tmp.path())
        .env("PATH", path)
        .env("HOME", tmp.path())
        .env("KBDB_RUNTIME_DIR", tmp.path().join("run"))
        .env("KBDB_DAEMON_IDLE_SECS", "5");
    for var in [
        "KBDB_DIR",
        "KBDB_EMBEDDED",
        "KBDB_LOG",
        "KBDB_MAX_CONTENT_BYTES",
        "KBDB_MAX_BATCH",
        "KBDB_REQUEST_TIMEOUT_SECS",
    ] {
        cmd.env_remove(var);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the tour stopped ({:?})\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    // What the tour shows happened.
    let tour_dir = tmp.path().join("tour");
    let story = std::fs::read_to_string(tour_dir.join("notes/stories/login.md")).unwrap();
    assert!(story.contains("- one more"), "{story}");
    assert!(tour_dir.join("backup/kb/catalog.toml").is_file());
    assert!(tour_dir.join("bundle.md").metadata().unwrap().len() > 0);
    assert!(stdout.contains("1 of 1 matching"), "{stdout}");
}

#[test]
fn the_readme_counts_the_mcp_tools_the_server_lists() {
    let text = readme();
    let db = TestDb::new();
    let mut mcp = McpChild::start(&db);
    let tools = mcp.request("tools/list", json!({}))["result"]["tools"]
        .as_array()
        .unwrap()
        .len();
    mcp.close();
    assert!(
        text.contains(&format!("{tools} tools")),
        "the server lists {tools} tools; the README says otherwise"
    );
}
