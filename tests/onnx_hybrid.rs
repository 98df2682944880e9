//! Hybrid search with the real embedding model (all-MiniLM-L6-v2 through ONNX Runtime), as put
//! in a folder by `tools/fetch-model.sh DIR`: `KBDB_TEST_MODEL_DIR=DIR`, or by default
//! `target/test-model` (`tools/fetch-model.sh target/test-model`). Without a model these tests
//! say they are skipped; CI fetches the model and sets `KBDB_REQUIRE_MODEL=1`, which turns a
//! missing model into a failure.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;

use common::TestDb;
use serde_json::Value;

fn model_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("KBDB_TEST_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-model"));
    match dir {
        d if d.join("model.onnx").exists() => Some(d),
        _ => {
            assert!(
                std::env::var_os("KBDB_REQUIRE_MODEL").is_none(),
                "KBDB_REQUIRE_MODEL is set but KBDB_TEST_MODEL_DIR holds no model (run tools/fetch-model.sh DIR)"
            );
            eprintln!("skipped: set KBDB_TEST_MODEL_DIR (tools/fetch-model.sh DIR) to run");
            None
        }
    }
}

fn onnx_db(dir: &std::path::Path) -> TestDb {
    let db = TestDb::new();
    std::fs::write(
        db.dir.join("worker.toml"),
        format!(
            "[embedding]\nprovider = \"onnx\"\nmodel_path = \"{0}\"\nruntime_library = \"{0}/libonnxruntime.so\"\n",
            dir.display()
        ),
    )
    .unwrap();
    db
}

fn kbids(r: &Value) -> Vec<String> {
    r["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kbid"].as_str().unwrap().to_string())
        .collect()
}

/// Learn many sections through one `learn --jsonl` (one process, one transaction per line).
fn learn_all(db: &TestDb, texts: &[String]) -> Vec<String> {
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("kbdb"))
        .env("KBDB_RUNTIME_DIR", db.runtime_dir())
        .env("KBDB_DAEMON_IDLE_SECS", "5")
        .args([
            "--db",
            db.dir.to_str().unwrap(),
            "learn",
            "--jsonl",
            "--format",
            "json",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for t in texts {
            writeln!(stdin, "{}", serde_json::json!({ "content": t })).unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["kbid"].as_str().unwrap().to_string()
        })
        .collect()
}

#[test]
fn the_spec_example_is_found_by_hybrid_and_not_by_lexical() {
    let Some(dir) = model_dir() else { return };
    let db = onnx_db(&dir);
    let fact = db.learn(&["we chose Postgres because of JSONB"]);
    let others = [
        "The kitten sleeps on the sofa all afternoon.",
        "Release notes are written by the person who merges the change.",
        "Our office coffee machine needs descaling every month.",
    ];
    for o in others {
        db.learn(&[o]);
    }
    let lexical = db.json(&["search", "database rationale"]);
    assert!(kbids(&lexical).is_empty(), "{lexical}");
    let hybrid = db.json(&["search", "--mode", "hybrid", "database rationale"]);
    assert_eq!(hybrid["retrieval_method"], "hybrid");
    assert_eq!(
        kbids(&hybrid)[0],
        fact["kbid"].as_str().unwrap(),
        "{hybrid}"
    );
    let s = db.status();
    assert_eq!(s["vectors"]["stored_model"], "all-MiniLM-L6-v2");
    assert_eq!(s["vectors"]["stored_dimensions"], 384);
}

#[test]
fn paraphrases_are_recalled_by_hybrid() {
    let Some(dir) = model_dir() else { return };
    let pairs: Vec<Value> = include_str!("fixtures/paraphrases.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(pairs.len() >= 50);
    let db = onnx_db(&dir);
    let facts: Vec<String> = pairs
        .iter()
        .map(|p| p["fact"].as_str().unwrap().to_string())
        .collect();
    let kbid_of = learn_all(&db, &facts);
    let (mut lexical_hits, mut hybrid_hits) = (0, 0);
    for (p, want) in pairs.iter().zip(&kbid_of) {
        let q = p["query"].as_str().unwrap();
        if kbids(&db.json(&["search", q, "--limit", "10"])).contains(want) {
            lexical_hits += 1;
        }
        if kbids(&db.json(&["search", "--mode", "hybrid", q, "--limit", "10"])).contains(want) {
            hybrid_hits += 1;
        }
    }
    let n = pairs.len() as f64;
    let (lexical, hybrid) = (lexical_hits as f64 / n, hybrid_hits as f64 / n);
    eprintln!(
        "recall@10 over {} paraphrase pairs: lexical {lexical:.3}, hybrid {hybrid:.3}",
        pairs.len()
    );
    assert!(hybrid >= 0.8, "hybrid recall@10 {hybrid:.3} < 0.8");
    assert!(hybrid > lexical);
}

#[test]
fn a_base_of_unrelated_sections_is_not_listed_for_a_question_about_something_else() {
    let Some(dir) = model_dir() else { return };
    let db = onnx_db(&dir);
    let unrelated: Vec<String> = [
        "Knead the dough for ten minutes, then let it rise in a warm place.",
        "Tomatoes need full sun and regular watering in July.",
        "The choir rehearses on Thursday evenings in the church hall.",
        "Tighten the bicycle chain until it moves half an inch.",
        "A watercolour dries lighter than it looks when wet.",
        "The ferry to the island leaves every two hours in summer.",
        "Brush the dog twice a week during the moulting season.",
        "The museum is closed on public holidays.",
        "Sew the hem with small stitches so they do not show.",
        "Roast the peppers until the skin blisters, then peel them.",
        "The marathon route passes the old harbour twice.",
        "Repot the orchid after it has finished flowering.",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    learn_all(&db, &unrelated);
    for mode in ["vector", "hybrid"] {
        let r = db.json(&[
            "search",
            "--mode",
            mode,
            "--limit",
            "50",
            "database schema migration rationale",
        ]);
        let n = kbids(&r).len();
        assert!(n < unrelated.len(), "{mode}: all listed: {r}");
        assert_eq!(r["total"], n, "{mode}: {r}");
        let all = db.json(&[
            "search",
            "--mode",
            mode,
            "--limit",
            "50",
            "--min-score",
            "0",
            "database schema migration rationale",
        ]);
        assert!(all["total"].as_u64().unwrap() > n as u64, "{mode}: {all}");
    }
}
