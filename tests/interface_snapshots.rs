//! Guards for the public surface: the MCP listings (`tools/list`, `resources/list`,
//! `resources/templates/list`, `prompts/list`) and every command's `--help` are compared with the
//! files in `tests/snapshots/`. A change to the surface must be deliberate: rerun with
//! `KBDB_UPDATE_SNAPSHOTS=1` and commit the new files with the reason in the commit message.

mod common;

use std::path::PathBuf;

use common::TestDb;
use common::mcp::McpChild;
use serde_json::{Value, json};

fn snapshot_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots")
}

/// Compare `actual` with the stored snapshot `name`, or write it when updating. Returns a
/// description of the difference, if any.
fn compare(name: &str, actual: &str) -> Option<String> {
    let path = snapshot_dir().join(name);
    if std::env::var_os("KBDB_UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return None;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    if expected == actual {
        return None;
    }
    let line = expected
        .lines()
        .zip(actual.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
    Some(format!(
        "{name}: differs from tests/snapshots/{name} at line {}:\n  expected: {:?}\n  actual:   {:?}",
        line + 1,
        expected.lines().nth(line).unwrap_or("<end>"),
        actual.lines().nth(line).unwrap_or("<end>")
    ))
}

#[test]
fn mcp_listings_match_their_snapshots() {
    let db = TestDb::new();
    let mut mcp = McpChild::start(&db);
    let mut problems = Vec::new();
    for (method, file) in [
        ("tools/list", "mcp/tools-list.json"),
        ("resources/list", "mcp/resources-list.json"),
        (
            "resources/templates/list",
            "mcp/resources-templates-list.json",
        ),
        ("prompts/list", "mcp/prompts-list.json"),
    ] {
        let answer = mcp.request(method, json!({}));
        let result: &Value = &answer["result"];
        assert!(result.is_object(), "{method}: {answer}");
        let text = serde_json::to_string_pretty(result).unwrap() + "\n";
        problems.extend(compare(file, &text));
    }
    mcp.close();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The subcommands listed under "Commands:" of a help text (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut inside = false;
    for line in help.lines() {
        if line == "Commands:" {
            inside = true;
            continue;
        }
        if inside {
            if !line.starts_with("  ") {
                break;
            }
            if let Some(name) = line.split_whitespace().next()
                && name != "help"
            {
                names.push(name.to_string());
            }
        }
    }
    names
}

#[test]
fn every_commands_help_matches_its_snapshot() {
    let mut problems = Vec::new();
    let mut queue: Vec<Vec<String>> = vec![vec![]];
    let mut seen = 0;
    while let Some(path) = queue.pop() {
        let out = common::kbdb_cmd()
            .args(&path)
            .arg("--help")
            .env("COLUMNS", "100")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kbdb {} --help failed",
            path.join(" ")
        );
        let help = String::from_utf8(out.stdout).unwrap();
        let name = if path.is_empty() {
            "kbdb".to_string()
        } else {
            format!("kbdb-{}", path.join("-"))
        };
        problems.extend(compare(&format!("help/{name}.txt"), &help));
        seen += 1;
        for sub in subcommands(&help) {
            let mut next = path.clone();
            next.push(sub);
            queue.push(next);
        }
    }
    assert!(seen > 30, "only {seen} help pages found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
