//! Folder sync benchmark (docs/sync.md, docs/performance.md "Folder sync"):
//!
//! 1. **pg15 sync**: `Kb::sync` of the pg15 corpus (the shared bench kit's markdown folder,
//!    default `/tmp/kbdb-bench/pg15`; `tools/bench-search.sh` or the kit's `get-corpora.sh`
//!    fetches it) into a fresh database, in files/s (skipped when the folder is missing);
//! 2. **no-change rescan** of a generated tree of `--files` files (default 10,000): the initial
//!    sync, then `--rescans` syncs of the unchanged tree (target ≤ 1 s each);
//! 3. **edit-to-searchable latency through a watcher**: the real `kbdb watch` (a child process,
//!    talking to the real daemon) on that tree; `--edits` editor saves (write a temporary file,
//!    rename it over a note) each with a new word, and the time until a search through the
//!    daemon finds it (p50/p99; target p99 ≤ 1.5 s);
//! 4. **idle CPU** of that watcher over `--idle-secs` (default 60) with nothing changing: CPU
//!    time and context switches of the watcher process (and of the daemon, for reference),
//!    from /proc.
//!
//! ```text
//! cargo bench --bench sync -- [--corpus DIR] [--files 10000] [--rescans 5] [--edits 100] [--idle-secs 60]
//! ```

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::io::Write;
use std::os::unix::net::UnixStream;

use kbdb::Kb;
use kbdb::sync::SyncRequest;
use serde_json::{Value, json};

/// A raw JSON-RPC connection to the daemon the watcher started (the library's client would
/// replace a daemon of another build — this bench's binary is not `kbdb`).
struct Rpc {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next: u64,
}

impl Rpc {
    fn connect(db_dir: &Path) -> Rpc {
        let sock = std::fs::read_to_string(db_dir.join(kbdb::daemon::ENDPOINT_FILE))
            .expect("the daemon records its socket");
        let s = UnixStream::connect(sock.trim()).expect("connect to the daemon");
        Rpc {
            writer: s.try_clone().unwrap(),
            reader: BufReader::new(s),
            next: 1,
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.writer, "{req}").unwrap();
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).unwrap();
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == json!(id) {
                return v["result"].clone();
            }
        }
    }
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// A generated note: front matter, a title, three sections of text.
fn note(i: usize) -> String {
    let words = [
        "replication",
        "vacuum",
        "index",
        "planner",
        "checkpoint",
        "tablespace",
        "trigger",
        "sequence",
        "snapshot",
        "partition",
    ];
    let w = |k: usize| words[(i * 7 + k * 3) % words.len()];
    format!(
        "---\ntitle: Note {i}\nstatus: {}\ntags: [{}, {}]\n---\n# Note {i}\n\nThis note is about {} and {} (number {i}).\n\n## Details\n\n{}\n\n## See also\n\n- [next](n{:05}.md)\n",
        ["draft", "ready", "done"][i % 3],
        w(1),
        w(2),
        w(3),
        w(4),
        format!(
            "The {} of {} interacts with {} when {} runs. ",
            w(5),
            w(6),
            w(7),
            w(8)
        )
        .repeat(8),
        i + 1
    )
}

/// CPU seconds (user + system) and context switches of every thread of `pid`.
fn proc_usage(pid: u32) -> (f64, u64) {
    let ticks = 100.0; // USER_HZ on Linux
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    let cpu = fields
        .get(11)
        .zip(fields.get(12))
        .map(|(u, s)| (u.parse::<f64>().unwrap_or(0.0) + s.parse::<f64>().unwrap_or(0.0)) / ticks)
        .unwrap_or(0.0);
    let mut switches = 0;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let s = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            for line in s.lines() {
                if let Some(v) = line
                    .strip_prefix("voluntary_ctxt_switches:")
                    .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
                {
                    switches += v.trim().parse::<u64>().unwrap_or(0);
                }
            }
        }
    }
    (cpu, switches)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let corpus: PathBuf = arg(&args, "--corpus", PathBuf::from("/tmp/kbdb-bench/pg15"));
    let n_files: usize = arg(&args, "--files", 10_000);
    let rescans: usize = arg(&args, "--rescans", 5);
    let edits: usize = arg(&args, "--edits", 100);
    let idle_secs: u64 = arg(&args, "--idle-secs", 60);
    let work = std::env::temp_dir().join(format!("kbdb-bench-sync-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();

    println!("| measurement | value |\n|---|---|");

    // 1. pg15
    if corpus.is_dir() {
        let (kb, _) = Kb::open_or_create(work.join("pg15-db")).unwrap();
        let t = Instant::now();
        let r = kb
            .sync(&SyncRequest {
                dir: corpus.clone(),
                prefix: Some("pg15/".into()),
                paths: None,
            })
            .unwrap();
        let secs = t.elapsed().as_secs_f64();
        let sections = kb.status().unwrap().sections;
        println!(
            "| pg15 sync ({} files, {} sections, {} skipped, {} transactions) | {:.2} s = **{:.0} files/s** |",
            r.files,
            sections,
            r.skipped.len(),
            r.transactions,
            secs,
            r.files as f64 / secs
        );
        let t = Instant::now();
        let again = kb
            .sync(&SyncRequest {
                dir: corpus.clone(),
                prefix: None,
                paths: None,
            })
            .unwrap();
        println!(
            "| pg15 no-change rescan ({} unchanged, {} transactions) | {:.0} ms |",
            again.unchanged,
            again.transactions,
            t.elapsed().as_secs_f64() * 1000.0
        );
    } else {
        println!(
            "| pg15 sync | skipped: {} not found (fetch it with ../shared/bench/get-corpora.sh /tmp/kbdb-bench pg15) |",
            corpus.display()
        );
    }

    // 2. no-change rescan of a generated tree
    let tree = work.join("tree");
    let t = Instant::now();
    for i in 0..n_files {
        let dir = tree.join(format!("d{:03}", i % 100));
        if i < 100 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(dir.join(format!("n{i:05}.md")), note(i)).unwrap();
    }
    println!(
        "| generated tree: {n_files} files in 100 folders | written in {:.1} s |",
        t.elapsed().as_secs_f64()
    );
    let db_dir = work.join("tree-db");
    {
        let (kb, _) = Kb::open_or_create(&db_dir).unwrap();
        let t = Instant::now();
        let r = kb
            .sync(&SyncRequest {
                dir: tree.clone(),
                prefix: Some("tree/".into()),
                paths: None,
            })
            .unwrap();
        let secs = t.elapsed().as_secs_f64();
        println!(
            "| initial sync of the tree ({} added, {} transactions) | {:.2} s = {:.0} files/s |",
            r.added,
            r.transactions,
            secs,
            r.files as f64 / secs
        );
        let mut times = Vec::new();
        for _ in 0..rescans {
            let t = Instant::now();
            let r = kb
                .sync(&SyncRequest {
                    dir: tree.clone(),
                    prefix: None,
                    paths: None,
                })
                .unwrap();
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(r.transactions, 0, "an unchanged tree is not written");
            assert_eq!(r.unchanged as usize, n_files);
        }
        times.sort_by(f64::total_cmp);
        let worst = times.last().copied().unwrap_or(0.0);
        println!(
            "| no-change rescan of {n_files} files ({rescans} runs) | p50 {:.0} ms, max {:.0} ms: **{}** (target ≤ 1 s) |",
            pct(&times, 0.5),
            worst,
            if worst <= 1000.0 { "PASS" } else { "FAIL" }
        );
    } // the database is closed: the daemon takes it

    // 3. edit-to-searchable through `kbdb watch` and the daemon
    let exe = env!("CARGO_BIN_EXE_kbdb");
    let runtime = work.join("run");
    let mut watch: Child = Command::new(exe)
        .env("KBDB_RUNTIME_DIR", &runtime)
        .env("KBDB_DAEMON_IDLE_SECS", "30")
        .env_remove("KBDB_EMBEDDED")
        .env_remove("KBDB_DIR")
        .args([
            "--db",
            db_dir.to_str().unwrap(),
            "watch",
            tree.to_str().unwrap(),
        ])
        .args(["--format", "json"])
        .env("KBDB_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(work.join("watch.log")).unwrap())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let first = lines.next().expect("the watcher's first report").unwrap();
    let first: Value = serde_json::from_str(&first).unwrap();
    // Drain the watcher's reports so its pipe never fills.
    std::thread::spawn(move || for _ in lines.by_ref() {});
    println!(
        "| watcher started: first sync {} unchanged in {:.0} ms | |",
        first["unchanged"],
        first["elapsed_ms"].as_f64().unwrap_or(0.0)
    );
    let mut client = Rpc::connect(&db_dir);
    let daemon_pid = client.call("hello", json!({}))["pid"].as_u64().unwrap() as u32;
    // The daemon's first search opens and catches up the index: not part of an edit's latency.
    let t = Instant::now();
    client.call("search", json!({"query": "replication", "limit": 1}));
    println!(
        "| first search through the daemon (opens the index; warm-up, not timed below) | {:.0} ms |",
        t.elapsed().as_secs_f64() * 1000.0
    );
    // So is its first write, which loads the near-duplicate band index from the store.
    let t = Instant::now();
    client.call(
        "learn",
        json!({"content": "bench warm-up: the first write of this daemon"}),
    );
    println!(
        "| first write through the daemon (loads the near-duplicate band index; warm-up) | {:.0} ms |",
        t.elapsed().as_secs_f64() * 1000.0
    );
    let mut lat = Vec::new();
    for e in 0..edits {
        let i = (e * 97) % n_files;
        let path = tree.join(format!("d{:03}/n{i:05}.md", i % 100));
        let token = format!("zqxedit{e}marker");
        let text = note(i).replace("## See also", &format!("Edited: {token}.\n\n## See also"));
        let tmp = path.with_file_name(format!(".n{i:05}.md.swp"));
        std::fs::write(&tmp, text).unwrap();
        let t = Instant::now();
        std::fs::rename(&tmp, &path).unwrap();
        loop {
            let r = client.call("search", json!({"query": token, "limit": 1}));
            if r["total"].as_u64().unwrap_or(0) > 0 {
                break;
            }
            if t.elapsed() > Duration::from_secs(30) {
                panic!("edit {e} not searchable after 30 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        if ms > 1000.0 {
            eprintln!("slow edit {e}: {ms:.0} ms");
        }
        lat.push(ms);
        std::thread::sleep(Duration::from_millis(50));
    }
    lat.sort_by(f64::total_cmp);
    let p99 = pct(&lat, 0.99);
    println!(
        "| edit-to-searchable through `kbdb watch` ({edits} editor saves) | p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms: **{}** (target p99 ≤ 1.5 s) |",
        pct(&lat, 0.5),
        p99,
        lat.last().copied().unwrap_or(0.0),
        if p99 <= 1500.0 { "PASS" } else { "FAIL" }
    );

    // 4. idle CPU of the watcher (and the daemon, for reference)
    drop(client);
    std::thread::sleep(Duration::from_secs(2)); // let the last reports settle
    let (w0, ws0) = proc_usage(watch.id());
    let (d0, ds0) = proc_usage(daemon_pid);
    std::thread::sleep(Duration::from_secs(idle_secs));
    let (w1, ws1) = proc_usage(watch.id());
    let (d1, ds1) = proc_usage(daemon_pid);
    println!(
        "| idle watcher over {idle_secs} s (`kbdb watch`, 101 folders) | {:.2} s CPU = **{:.3} %**, {} context switches |",
        w1 - w0,
        (w1 - w0) / idle_secs as f64 * 100.0,
        ws1 - ws0
    );
    println!(
        "| idle daemon over the same {idle_secs} s (for reference) | {:.2} s CPU = {:.3} %, {} context switches |",
        d1 - d0,
        (d1 - d0) / idle_secs as f64 * 100.0,
        ds1 - ds0
    );
    let _ = watch.kill();
    let _ = watch.wait();
    let log = std::fs::read_to_string(work.join("watch.log")).unwrap_or_default();
    let problems: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("rescan"))
        .collect();
    println!(
        "| watcher warnings | {} |",
        if problems.is_empty() {
            "none".to_string()
        } else {
            problems.join("<br>")
        }
    );
    let _ = kbdb::daemon::client::stop_daemon(
        &kbdb::daemon::client::daemon_socket(&db_dir.canonicalize().unwrap()).unwrap(),
    );
    let _ = std::fs::remove_dir_all(&work);
}
