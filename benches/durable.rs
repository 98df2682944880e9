//! Durable writes one at a time in this process, through the `Kb` library API, next to SQLite
//! FTS5 doing the same in its process: the embedded engine's durable ingest, without a process
//! boundary on either side (`tools/bench_scale_drive.py durable` measures it through the CLI).
//!
//! Each round writes the first `--lines` lines of a `learn.jsonl` (`{"content","title","docid"}`,
//! as `tools/make-scale-corpus.py` writes) into fresh databases, each write acknowledged (its
//! call returned, durable) before the next is made:
//!
//! - `kbdb ×N`: `Kb::learn` per line, as a library user's process makes it, from N threads
//!   sharing one `Kb` (`--writers 1,8`), each awaiting its writes one by one: one fsync of the
//!   write journal per group of the writes made meanwhile (src/kb/group_commit.rs), redb made
//!   durable every `daemon.journal_checkpoint_ms`;
//! - `kbdb redb`: the same with `daemon.journal = false`: each write a durable redb commit
//!   (`--kbdb journal,redb` to run it too; one writer);
//! - `fts5`: one transaction per row, `journal_mode=WAL`, `synchronous=FULL`, through the shared
//!   kit's `baseline_fts5.py` (its `ingest_durable`), in a Python process.
//!
//! They alternate, `--rounds` times, so that a noisy machine moves all of them alike; the table
//! gives each round's writes per second and p50 / p99 latency, and kbdb's rate over FTS5's (one
//! writer) of the same round.
//!
//! ```text
//! cargo bench --bench durable -- --jsonl /tmp/kbdb-scale/s100000/learn.jsonl [--lines 2000]
//!                                [--rounds 3] [--writers 1,8] [--kbdb journal,redb] [--json FILE]
//! ```
//!
//! `--json FILE` also writes the rounds as `{"lines", "rounds": [{ENGINE: {"writes_per_s",
//! "p50_ms", "p99_ms", "over_fts5"}}]}`, ENGINE as in the table (`fts5`, `kbdb ×1`, …), for
//! `tools/bench-scale.sh`.

mod common;
use common::{BoxError, arg};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use kbdb::{Kb, LearnRequest};
use serde::Deserialize;

#[derive(Deserialize, Clone)]
struct Line {
    content: String,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    docid: Option<String>,
}

struct Run {
    writes_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn summarize(total_s: f64, mut lat_ms: Vec<f64>) -> Run {
    lat_ms.sort_by(f64::total_cmp);
    Run {
        writes_per_s: lat_ms.len() as f64 / total_s,
        p50_ms: percentile(&lat_ms, 0.50),
        p99_ms: percentile(&lat_ms, 0.99),
    }
}

/// `lines` written by `writers` threads of one process sharing one `Kb` (line i by thread
/// i % writers), each awaiting every write before its next.
fn kbdb_run(dir: &Path, lines: &[Line], journal: bool, writers: usize) -> Result<Run, BoxError> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    if !journal {
        std::fs::write(
            dir.join(kbdb::config::CONFIG_FILE),
            "[daemon]\njournal = false\n",
        )?;
    }
    let (kb, _) = Kb::open_or_create(dir)?;
    let t0 = Instant::now();
    let per_thread: Vec<Result<Vec<f64>, String>> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..writers)
            .map(|w| {
                let kb = &kb;
                s.spawn(move || {
                    let mut lat = Vec::new();
                    for l in lines.iter().skip(w).step_by(writers) {
                        let req = LearnRequest {
                            content: l.content.clone(),
                            title: l.title.clone(),
                            docid: l.docid.clone(),
                            ..Default::default()
                        };
                        let a = Instant::now();
                        kb.learn(req).map_err(|e| e.to_string())?;
                        lat.push(a.elapsed().as_secs_f64() * 1e3);
                    }
                    Ok(lat)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a writer thread"))
            .collect()
    });
    let total = t0.elapsed().as_secs_f64();
    let mut lat = Vec::with_capacity(lines.len());
    for l in per_thread {
        lat.extend(l?);
    }
    kb.close()?;
    drop(kb);
    let _ = std::fs::remove_dir_all(dir);
    Ok(summarize(total, lat))
}

/// FTS5's durable ingest of the same rows, by the shared kit's own function.
fn fts5_run(kit: &Path, jsonl: &Path, n: usize, dir: &Path) -> Result<Run, BoxError> {
    let script = r#"
import json, sys, time
sys.path.insert(0, sys.argv[1])
import baseline_fts5 as b
rows = []
with open(sys.argv[2], encoding="utf-8") as f:
    for i, line in enumerate(f):
        if i >= int(sys.argv[3]):
            break
        d = json.loads(line)
        rows.append((str(i), d.get("docid", ""), d.get("title", ""), d["content"]))
r = b.ingest_durable(sys.argv[4], rows)
print(json.dumps(r))
"#;
    let db = dir.join("durable.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(kit)
        .arg(jsonl)
        .arg(n.to_string())
        .arg(&db)
        .output()?;
    if !out.status.success() {
        return Err(format!("fts5: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let ms = |k: &str| v["commit_ms"][k].as_f64().unwrap_or(f64::NAN);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    Ok(Run {
        writes_per_s: v["sections_per_s"].as_f64().unwrap_or(f64::NAN),
        p50_ms: ms("p50"),
        p99_ms: ms("p99"),
    })
}

fn run(args: &[String]) -> Result<(), BoxError> {
    let jsonl = args
        .iter()
        .position(|a| a == "--jsonl")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
        .ok_or("--jsonl PATH is required (a learn.jsonl of tools/make-scale-corpus.py)")?;
    let n = arg(args, "--lines", 2000);
    let json_out = args
        .iter()
        .position(|a| a == "--json")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from);
    let rounds = arg(args, "--rounds", 3);
    let engines: Vec<String> = args
        .iter()
        .position(|a| a == "--kbdb")
        .and_then(|i| args.get(i + 1))
        .map_or("journal", String::as_str)
        .split(',')
        .map(str::to_string)
        .collect();
    let writers: Vec<usize> = args
        .iter()
        .position(|a| a == "--writers")
        .and_then(|i| args.get(i + 1))
        .map_or("1,8", String::as_str)
        .split(',')
        .map(|w| {
            w.parse::<usize>()
                .map_err(|_| format!("--writers: {w:?} is not a number"))
        })
        .collect::<Result<_, _>>()?;
    if writers.contains(&0) {
        return Err("--writers: each count must be at least 1".into());
    }
    let kit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/bench");
    let mut lines = Vec::with_capacity(n);
    for line in BufReader::new(std::fs::File::open(&jsonl)?).lines().take(n) {
        lines.push(serde_json::from_str::<Line>(&line?)?);
    }
    let work = tempfile::Builder::new()
        .prefix("kbdb-durable-")
        .tempdir_in(std::env::temp_dir())?;
    println!(
        "{} durable writes a run, one at a time, in-process; {rounds} rounds",
        lines.len()
    );
    println!(
        "{:<6} {:<13} {:>9} {:>8} {:>8} {:>9}",
        "round", "engine", "writes/s", "p50 ms", "p99 ms", "/ FTS5"
    );
    let mut json_rounds = Vec::new();
    for round in 1..=rounds {
        let fts5 = fts5_run(&kit, &jsonl, lines.len(), work.path())?;
        let mut runs = vec![("fts5".to_string(), fts5)];
        if engines.iter().any(|e| e == "redb") {
            let r = kbdb_run(&work.path().join("redb"), &lines, false, 1)?;
            runs.push(("kbdb redb".to_string(), r));
        }
        if engines.iter().any(|e| e == "journal") {
            for &w in &writers {
                let r = kbdb_run(&work.path().join("journal"), &lines, true, w)?;
                runs.push((format!("kbdb ×{w}"), r));
            }
        }
        let fts5_rate = runs[0].1.writes_per_s;
        json_rounds.push(serde_json::Value::Object(
            runs.iter()
                .map(|(name, r)| {
                    let v = serde_json::json!({
                        "writes_per_s": r.writes_per_s,
                        "p50_ms": r.p50_ms,
                        "p99_ms": r.p99_ms,
                        "over_fts5": r.writes_per_s / fts5_rate,
                    });
                    (name.clone(), v)
                })
                .collect(),
        ));
        for (name, r) in &runs {
            println!(
                "{round:<6} {name:<13} {:>9.0} {:>8.3} {:>8.3} {:>8.2}×",
                r.writes_per_s,
                r.p50_ms,
                r.p99_ms,
                r.writes_per_s / fts5_rate
            );
        }
    }
    if let Some(path) = json_out {
        let v = serde_json::json!({"lines": lines.len(), "rounds": json_rounds});
        std::fs::write(&path, format!("{v}\n"))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
