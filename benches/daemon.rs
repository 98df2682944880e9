//! Write throughput through the worker daemon (docs/daemon.md) with 1, 8 and 32 concurrent
//! writers, next to SQLite FTS5 single durable commits measured in the same run.
//! `tools/bench-daemon.sh` builds the release binary and runs this; see docs/performance.md.
//!
//! ```text
//! cargo bench --bench daemon -- [--secs 5] [--warmup 1] [--writers 1,8,32] [--rounds 1]
//!     [--kbdb PATH] [--tmp DIR] [--python python3] [--fts5-writers 8] [--out FILE]
//! ```
//!
//! * kbdb: for each writer count, a fresh database (`kbdb --db DIR init`), then the release
//!   binary's `kbdb --db DIR daemon` started here with `KBDB_RUNTIME_DIR` set to a fresh private
//!   folder (the socket is the only `*.sock` in it). Each writer thread has its own Unix socket
//!   connection and sends `learn` requests one after the other (raw JSON-RPC lines, not
//!   `kbdb::daemon::client`, which would start a daemon from this executable). Every answer
//!   must be a `result` with a `kbid`; anything else counts as an error. An answer means the
//!   write's transaction is durable (redb `Durability::Immediate`; concurrent writes share
//!   one transaction). The lexical index is updated before the answer but committed to disk
//!   lazily (replayed from the change log after a crash), unlike FTS5, whose index is part of
//!   the transaction.
//! * FTS5: `python3` (sqlite3 module) processes inserting one row per transaction
//!   (`BEGIN IMMEDIATE; INSERT; COMMIT`) into `CREATE VIRTUAL TABLE s USING fts5(title, body)`
//!   with `synchronous=FULL`: WAL with one writer, the rollback journal (`DELETE`) with one
//!   writer, and WAL with `--fts5-writers` processes contending (`busy_timeout=5000`; a commit
//!   that fails with "database is locked" counts as an error).
//! * Same content for both: a pool of realistic markdown sections (title + 240-700 bytes of
//!   prose); each write appends "Recorded by writer W, entry N." so every write is new content
//!   (kbdb is content-addressed). Contents are ~300-800 bytes.
//! * Timing: every writer runs `--warmup` seconds unmeasured, then `--secs` seconds; the
//!   requests started inside the measured window count. writes/s = acknowledged writes /
//!   (last acknowledgement − window start). Latency = request round trip seen by the writer
//!   (for kbdb including the socket and JSON), p50/p99 by nearest rank over all writers.
//! * Checks: after each run the stored row/section count must equal all acknowledged writes
//!   (warm-up included).
//! * The lexical index: how many changes it was behind when the writers stopped and how long it
//!   then took to catch up (`status` polled every 10 ms), with the daemon's CPU per write, so a
//!   rate bought by leaving indexing for later would show.
//! * Configurations run interleaved (FTS5, kbdb, FTS5, …) so machine noise spreads over both.
//!   `--rounds N` runs the whole interleaved sequence N times: every run is checked, the table
//!   shows each configuration's median run, and each kbdb / FTS5 ratio is the median of the
//!   ratios within a round (a VM's fsync cost drifts over minutes, so runs are paired in time).
//!
//! Output: a markdown table, ratios and PASS/FAIL against the targets (≥ 100 writes/s with 8
//! writers; ≥ 2× the best FTS5 durable single-writer commit rate), and the same as JSON to
//! `$OUT` (or `--out`).

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

const USAGE: &str = "usage: cargo bench --bench daemon -- [--secs 5] [--warmup 1] \
[--writers 1,8,32] [--rounds 1] [--kbdb PATH] [--tmp DIR] [--python python3] [--fts5-writers 8] \
[--out FILE] [--sections FILE]";

/// Targets: acknowledged writes/s with 8 writers, and kbdb(8) / best FTS5 durable single writer.
const TARGET_WRITES_PER_S: f64 = 100.0;
const TARGET_FTS5_RATIO: f64 = 2.0;
const TARGET_WRITERS: usize = 8;

type BoxError = Box<dyn std::error::Error>;

struct Args {
    secs: f64,
    warmup: f64,
    writers: Vec<usize>,
    /// Times the interleaved configurations are run; the table shows each one's median run and
    /// the ratios are the medians of the ratios within each round.
    rounds: usize,
    kbdb: Option<PathBuf>,
    tmp: Option<PathBuf>,
    python: String,
    fts5_writers: usize,
    out: Option<PathBuf>,
    /// Contents from a `sections.py dump` (JSON lines) instead of the generated pool.
    sections: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        secs: 5.0,
        warmup: 1.0,
        writers: vec![1, 8, 32],
        rounds: 1,
        kbdb: None,
        tmp: None,
        python: "python3".into(),
        fts5_writers: 8,
        out: std::env::var_os("OUT")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
        sections: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--bench" {
            continue; // appended by `cargo bench`
        }
        if flag == "-h" || flag == "--help" {
            return Err(USAGE.to_string());
        }
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let seconds = |v: String, min: f64| match v.parse::<f64>() {
            Ok(s) if s.is_finite() && s >= min => Ok(s),
            _ => Err(format!("{flag}: not a number of seconds >= {min}: {v}")),
        };
        match flag.as_str() {
            "--secs" => a.secs = seconds(value()?, 0.1)?,
            "--warmup" => a.warmup = seconds(value()?, 0.0)?,
            "--writers" => {
                let v = value()?;
                a.writers = v
                    .split(',')
                    .map(|n| match n.trim().parse::<usize>() {
                        Ok(n) if n > 0 => Ok(n),
                        _ => Err(format!("--writers: not a positive number: {n}")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--rounds" => {
                let v = value()?;
                a.rounds = match v.parse::<usize>() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(format!("--rounds: not a positive number: {v}")),
                };
            }
            "--kbdb" => a.kbdb = Some(value()?.into()),
            "--tmp" => a.tmp = Some(value()?.into()),
            "--python" => a.python = value()?,
            "--fts5-writers" => {
                let v = value()?;
                a.fts5_writers = v
                    .parse()
                    .map_err(|_| format!("--fts5-writers: not a number: {v}"))?;
            }
            "--out" => a.out = Some(value()?.into()),
            "--sections" => a.sections = Some(value()?.into()),
            _ => return Err(format!("unknown argument {flag}\n{USAGE}")),
        }
    }
    Ok(a)
}

// ---------------------------------------------------------------------------------------------
// Content

/// Small deterministic generator (xorshift64*), so every run writes the same texts.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const TOPICS: &[&str] = &[
    "Database choice",
    "Deploy schedule",
    "Cache invalidation",
    "Retry policy",
    "API versioning",
    "Logging format",
    "Index rebuild",
    "Backup rotation",
    "Auth token lifetime",
    "Queue backpressure",
    "Schema migration",
    "Feature flags",
    "Error budget",
    "Config loading",
    "Rate limiting",
    "Release checklist",
];
const SUBJECTS: &[&str] = &[
    "The ingest service",
    "Our team",
    "The nightly export job",
    "The search API",
    "The billing worker",
    "Each shard",
    "The CLI",
    "The review agent",
    "The staging cluster",
    "The Postgres primary",
];
const VERBS: &[&str] = &[
    "uses",
    "retries",
    "batches",
    "caches",
    "validates",
    "replicates",
    "compresses",
    "streams",
    "rejects",
    "logs",
];
const OBJECTS: &[&str] = &[
    "JSONB columns for the event payloads",
    "writes in groups of at most 64 rows",
    "failed requests with exponential backoff and jitter",
    "parquet files uploaded to the archive bucket",
    "the parsed configuration for ten minutes",
    "session tokens signed with Ed25519",
    "messages larger than 256 KiB",
    "every schema change through a reviewed migration",
    "the p99 latency of each endpoint per minute",
    "deploys that have not passed the smoke tests",
];
const REASONS: &[&str] = &[
    "latency under load matters more than raw throughput",
    "the previous approach lost data when a node crashed",
    "it keeps the p99 below 50 ms during the morning peak",
    "the vendor SDK does not support streaming uploads",
    "incident 4127 showed that silent truncation is worse than a hard error",
    "operators asked for one place to look during an outage",
    "it halves the storage bill without slowing down queries",
    "the compliance review requires an audit trail",
];
const ASIDES: &[&str] = &[
    "See `parse_config_file()` in src/config.rs for the details.",
    "This was agreed in the architecture review on Tuesday.",
    "Revisit the decision when traffic doubles.",
    "The runbook links to the dashboard for this.",
    "Ask the platform team before changing the defaults.",
    "A follow-up ticket tracks the remaining edge cases.",
];

struct PoolEntry {
    title: String,
    body: String,
}

/// Real sections from a `sections.py dump` file (JSON lines with `title` and `body`), those
/// whose body has 240-700 bytes like the generated pool's, in the file's order.
fn sections_pool(file: &Path) -> Result<Vec<PoolEntry>, BoxError> {
    let text = fs::read_to_string(file)
        .map_err(|e| format!("--sections: cannot read {}: {e}", file.display()))?;
    let pool: Vec<PoolEntry> = text
        .lines()
        .filter_map(|line| {
            let v: Value = serde_json::from_str(line).ok()?;
            let title = v["title"].as_str()?.to_string();
            let body = v["body"].as_str()?.to_string();
            (240..=700)
                .contains(&body.len())
                .then_some(PoolEntry { title, body })
        })
        .collect();
    if pool.is_empty() {
        return Err(format!(
            "--sections: {} has no section with a body of 240-700 bytes (expected `sections.py dump` JSON lines)",
            file.display()
        )
        .into());
    }
    Ok(pool)
}

/// Realistic markdown sections: a title and 240-700 bytes of prose.
fn content_pool(n: usize) -> Vec<PoolEntry> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    (0..n)
        .map(|i| {
            let title = format!("{} #{}", rng.pick(TOPICS), i + 1);
            let target = 240 + rng.below(461);
            let mut body = String::new();
            while body.len() < target {
                if !body.is_empty() {
                    body.push(if rng.below(4) == 0 { '\n' } else { ' ' });
                }
                if rng.below(5) == 0 {
                    body.push_str(rng.pick(ASIDES));
                } else {
                    body.push_str(&format!(
                        "{} {} {} because {}.",
                        rng.pick(SUBJECTS),
                        rng.pick(VERBS),
                        rng.pick(OBJECTS),
                        rng.pick(REASONS)
                    ));
                }
            }
            if body.len() > 700 {
                let mut cut = 700;
                while !body.is_char_boundary(cut) {
                    cut -= 1;
                }
                body.truncate(cut);
                body.push('.');
            }
            PoolEntry { title, body }
        })
        .collect()
}

/// The content of write `seq` of writer `w` (the FTS5 script builds the same string).
fn content_of(pool: &[PoolEntry], w: usize, seq: u64) -> (&str, String) {
    let p = &pool[(w as u64 * 7919 + seq) as usize % pool.len()];
    let content = format!(
        "## {}\n\n{}\n\nRecorded by writer {w}, entry {seq}.",
        p.title, p.body
    );
    (&p.title, content)
}

// ---------------------------------------------------------------------------------------------
// Results

struct Row {
    config: String,
    engine: &'static str,
    writers: usize,
    /// Acknowledged writes started inside the measured window.
    writes: u64,
    elapsed_s: f64,
    /// Per-write latency in ms, sorted.
    lat_ms: Vec<f64>,
    errors: u64,
    first_error: Option<String>,
    /// Rows/sections stored at the end vs. all acknowledged writes (warm-up included).
    stored: u64,
    acknowledged_total: u64,
    load_1m: f64,
    extra: Value,
}

impl Row {
    fn rate(&self) -> f64 {
        if self.elapsed_s > 0.0 {
            self.writes as f64 / self.elapsed_s
        } else {
            0.0
        }
    }
    fn pct(&self, p: f64) -> f64 {
        percentile(&self.lat_ms, p)
    }
    fn json(&self) -> Value {
        let mean = if self.lat_ms.is_empty() {
            0.0
        } else {
            self.lat_ms.iter().sum::<f64>() / self.lat_ms.len() as f64
        };
        json!({
            "config": self.config,
            "engine": self.engine,
            "writers": self.writers,
            "writes": self.writes,
            "elapsed_s": round(self.elapsed_s, 3),
            "writes_per_s": round(self.rate(), 1),
            "p50_ms": round(self.pct(0.50), 3),
            "p99_ms": round(self.pct(0.99), 3),
            "mean_ms": round(mean, 3),
            "max_ms": round(self.lat_ms.last().copied().unwrap_or(0.0), 3),
            "errors": self.errors,
            "first_error": self.first_error,
            "stored": self.stored,
            "acknowledged_total": self.acknowledged_total,
            "stored_matches_acknowledged": self.stored == self.acknowledged_total,
            "load_avg_1m_at_start": self.load_1m,
            "details": self.extra,
        })
    }
}

/// Nearest-rank percentile of sorted values (0 when empty).
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

/// User + system CPU seconds of process `pid` (all threads), or of this process.
fn cpu_secs(pid: Option<u32>) -> f64 {
    let path = pid.map_or("/proc/self/stat".to_string(), |p| format!("/proc/{p}/stat"));
    let Ok(text) = fs::read_to_string(path) else {
        return f64::NAN;
    };
    // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
    let rest = text.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

/// Bytes process `pid` caused to be written to storage (`write_bytes` of /proc/PID/io: page
/// writeback and fsync, not what sat in the page cache).
fn disk_write_bytes(pid: u32) -> f64 {
    fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("write_bytes:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(f64::NAN)
}

/// The daemon's acknowledged writes and the group commits they took (`hello`'s activity).
fn daemon_activity(daemon: &Daemon) -> Result<(u64, u64), BoxError> {
    let hello = daemon.connect()?.call("hello", json!({}))?;
    let a = &hello["result"]["activity"];
    Ok((
        a["writes"].as_u64().unwrap_or(0),
        a["write_groups"].as_u64().unwrap_or(0),
    ))
}

fn load_avg() -> f64 {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

// ---------------------------------------------------------------------------------------------
// kbdb through the daemon

/// The daemon process; stopped (SIGTERM, then SIGKILL) if still running when dropped.
struct Daemon {
    child: Child,
    sock: PathBuf,
    db: PathBuf,
}

impl Daemon {
    fn start(bin: &Path, db: &Path, runtime: &Path) -> Result<Daemon, BoxError> {
        let child = Command::new(bin)
            .arg("--db")
            .arg(db)
            .arg("daemon")
            .env("KBDB_RUNTIME_DIR", runtime)
            // A safety net: a daemon orphaned by a killed bench exits on its own.
            .env("KBDB_DAEMON_IDLE_SECS", "60")
            .env_remove("KBDB_EMBEDDED")
            .env_remove("KBDB_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let mut d = Daemon {
            child,
            sock: PathBuf::new(),
            db: db.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = d.child.try_wait()? {
                return Err(format!(
                    "the daemon exited ({status}) before accepting: {}",
                    d.log_tail()
                )
                .into());
            }
            let socks: Vec<PathBuf> = fs::read_dir(runtime)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "sock"))
                .collect();
            if socks.len() > 1 {
                return Err(format!("several sockets in {}", runtime.display()).into());
            }
            if let Some(sock) = socks.into_iter().next()
                && let Ok(s) = UnixStream::connect(&sock)
            {
                let mut c = Conn::new(s)?;
                let hello = c.call("hello", json!({}))?;
                if hello.get("result").is_some() {
                    d.sock = sock;
                    return Ok(d);
                }
            }
            if Instant::now() > deadline {
                return Err(
                    format!("the daemon did not accept within 15s: {}", d.log_tail()).into(),
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn connect(&self) -> Result<Conn, BoxError> {
        Conn::new(UnixStream::connect(&self.sock)?)
    }

    fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.db.join("daemon.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    /// `shutdown`, then wait for the process to exit; returns how long stopping took.
    fn stop(&mut self) -> Result<f64, BoxError> {
        let t = Instant::now();
        let mut c = self.connect()?;
        let answer = c.call("shutdown", json!({}))?;
        if answer.get("result").is_none() {
            return Err(format!("shutdown refused: {answer}").into());
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    return Err(
                        format!("the daemon exited with {status}: {}", self.log_tail()).into(),
                    );
                }
                return Ok(t.elapsed().as_secs_f64());
            }
            if Instant::now() > deadline {
                return Err("the daemon did not exit within 60s of shutdown".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill has no memory preconditions; the pid is our own unreaped child.
            unsafe {
                libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while let Ok(None) = self.child.try_wait() {
                if Instant::now() > deadline {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// One JSON-RPC connection: requests one at a time, one line each way.
struct Conn {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
    line: String,
}

impl Conn {
    fn new(s: UnixStream) -> Result<Conn, BoxError> {
        s.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(Conn {
            writer: s.try_clone()?,
            reader: BufReader::new(s),
            next_id: 1,
            line: String::new(),
        })
    }

    /// Send `request` (a JSON object without id) and return the answer with the same id.
    fn send(&mut self, mut request: Value) -> Result<Value, BoxError> {
        let id = self.next_id;
        self.next_id += 1;
        request["id"] = json!(id);
        let mut text = request.to_string();
        text.push('\n');
        self.writer.write_all(text.as_bytes())?;
        loop {
            self.line.clear();
            if self.reader.read_line(&mut self.line)? == 0 {
                return Err("the daemon closed the connection".into());
            }
            let v: Value = serde_json::from_str(&self.line)?;
            if v.get("id").is_none() && v.get("method").is_some() {
                continue; // a notification
            }
            if v["id"] != json!(id) {
                return Err(format!("answer for id {} while waiting for {id}", v["id"]).into());
            }
            return Ok(v);
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Result<Value, BoxError> {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}))
    }
}

#[derive(Default)]
struct WriterStats {
    ok: u64,
    warm_ok: u64,
    errors: u64,
    first_error: Option<String>,
    lat_ms: Vec<f64>,
    last_done: Option<Instant>,
    bytes: u64,
}

fn kbdb_writer(
    mut conn: Conn,
    w: usize,
    pool: &[PoolEntry],
    ready: &Barrier,
    window: &OnceLock<(Instant, Instant)>,
) -> WriterStats {
    let mut st = WriterStats::default();
    ready.wait();
    ready.wait();
    let (start, end) = *window.get().expect("window set before the second barrier");
    let mut seq = 0u64;
    loop {
        let (title, content) = content_of(pool, w, seq);
        let request = json!({"jsonrpc": "2.0", "method": "learn",
                             "params": {"content": content, "title": title}});
        let size = content.len() as u64;
        seq += 1;
        let t = Instant::now();
        if t >= end {
            break;
        }
        let answer = conn.send(request);
        let done = Instant::now();
        let measured = t >= start;
        let problem = match &answer {
            Ok(v) if v["result"]["kbid"].as_str().is_some_and(|k| !k.is_empty()) => None,
            Ok(v) => Some(format!("unexpected answer: {v}")),
            Err(e) => Some(format!("connection: {e}")),
        };
        match problem {
            None if measured => {
                st.ok += 1;
                st.bytes += size;
                st.lat_ms.push(done.duration_since(t).as_secs_f64() * 1e3);
                st.last_done = Some(done);
            }
            None => st.warm_ok += 1,
            Some(p) => {
                if measured {
                    st.errors += 1;
                }
                st.first_error.get_or_insert(p);
                if answer.is_err() {
                    // The connection is broken: count the rest of the window as lost.
                    break;
                }
            }
        }
    }
    st
}

fn run_kbdb(
    bin: &Path,
    writers: usize,
    args: &Args,
    pool: &Arc<Vec<PoolEntry>>,
) -> Result<Row, BoxError> {
    let tmp = temp_dir(args, "kbdb-daemon-bench-")?;
    let db = tmp.path().join("db");
    let runtime = tmp.path().join("run");
    fs::DirBuilder::new().mode(0o700).create(&runtime)?;
    let init = Command::new(bin)
        .arg("--db")
        .arg(&db)
        .arg("init")
        .env_remove("KBDB_DIR")
        .env("KBDB_RUNTIME_DIR", &runtime)
        .output()?;
    if !init.status.success() {
        return Err(format!(
            "kbdb init failed: {}",
            String::from_utf8_lossy(&init.stderr).trim()
        )
        .into());
    }
    let load_1m = load_avg();
    let mut daemon = Daemon::start(bin, &db, &runtime)?;
    let ready = Arc::new(Barrier::new(writers + 1));
    let window = Arc::new(OnceLock::new());
    let mut handles = Vec::new();
    for w in 0..writers {
        let conn = daemon.connect()?;
        let (pool, ready, window) = (pool.clone(), ready.clone(), window.clone());
        handles.push(std::thread::spawn(move || {
            kbdb_writer(conn, w, &pool, &ready, &window)
        }));
    }
    ready.wait();
    let start = Instant::now() + Duration::from_secs_f64(args.warmup);
    let end = start + Duration::from_secs_f64(args.secs);
    window.set((start, end)).expect("set once");
    ready.wait();
    // CPU time of the daemon and of this process (the clients) over the measured window.
    let pid = daemon.child.id();
    std::thread::sleep(start.saturating_duration_since(Instant::now()));
    let cpu0 = (cpu_secs(Some(pid)), cpu_secs(None));
    let (io0, activity0) = (disk_write_bytes(pid), daemon_activity(&daemon)?);
    std::thread::sleep(end.saturating_duration_since(Instant::now()));
    let cpu1 = (cpu_secs(Some(pid)), cpu_secs(None));
    let (io1, activity1) = (disk_write_bytes(pid), daemon_activity(&daemon)?);
    // Writes acknowledged per group commit (one transaction, one fsync) in the window.
    let group_writes = activity1.0.saturating_sub(activity0.0);
    let groups = activity1.1.saturating_sub(activity0.1);
    let stats: Vec<WriterStats> = handles
        .into_iter()
        .map(|h| h.join().expect("writer thread panicked"))
        .collect();
    let status = daemon.connect()?.call("status", json!({}))?;
    let stored = status["result"]["sections"].as_u64().unwrap_or(0);
    // The lexical index follows the acknowledged writes on its own thread: how far behind it
    // is when the writers stop, and how long it then takes to catch up (polled every 10 ms,
    // at most 60 s), so a rate bought by leaving indexing for later would show here.
    let index_behind = status["result"]["index_pending_changes"]
        .as_u64()
        .unwrap_or(0);
    let caught_up = Instant::now();
    let mut conn = daemon.connect()?;
    let index_catch_up_s = loop {
        let s = conn.call("status", json!({}))?;
        if s["result"]["index_pending_changes"].as_u64().unwrap_or(0) == 0 {
            break Some(caught_up.elapsed().as_secs_f64());
        }
        if caught_up.elapsed() > Duration::from_secs(60) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    drop(conn);
    let stop_s = daemon.stop()?;

    let mut lat_ms: Vec<f64> = stats
        .iter()
        .flat_map(|s| s.lat_ms.iter().copied())
        .collect();
    lat_ms.sort_by(f64::total_cmp);
    let writes: u64 = stats.iter().map(|s| s.ok).sum();
    let last = stats.iter().filter_map(|s| s.last_done).max();
    let elapsed_s = last.map_or(args.secs, |l| l.duration_since(start).as_secs_f64());
    let bytes: u64 = stats.iter().map(|s| s.bytes).sum();
    Ok(Row {
        config: "kbdb daemon".into(),
        engine: "kbdb",
        writers,
        writes,
        elapsed_s,
        lat_ms,
        errors: stats.iter().map(|s| s.errors).sum(),
        first_error: stats.iter().find_map(|s| s.first_error.clone()),
        stored,
        acknowledged_total: stats.iter().map(|s| s.ok + s.warm_ok).sum(),
        load_1m,
        extra: json!({
            "mean_content_bytes": bytes.checked_div(writes).unwrap_or(0),
            "writes_per_writer": stats.iter().map(|s| s.ok).collect::<Vec<_>>(),
            "daemon_cpu_pct": round((cpu1.0 - cpu0.0) / args.secs * 100.0, 1),
            "daemon_cpu_ms_per_write": round((cpu1.0 - cpu0.0) * 1e3 / writes.max(1) as f64, 3),
            "client_cpu_pct": round((cpu1.1 - cpu0.1) / args.secs * 100.0, 1),
            "writes_per_commit": round(group_writes as f64 / groups.max(1) as f64, 2),
            "disk_kib_per_write": round((io1 - io0) / 1024.0 / group_writes.max(1) as f64, 1),
            "shutdown_s": round(stop_s, 3),
            "database_bytes": status["result"]["database_bytes"],
            "index_pending_changes": index_behind,
            "index_catch_up_s": index_catch_up_s.map(|x| round(x, 3)),
        }),
    })
}

// ---------------------------------------------------------------------------------------------
// SQLite FTS5 baseline

/// One FTS5 writer process. argv[1] is a JSON config. With "init" it creates the table in the
/// requested journal mode and exits; with "count" it prints the row count; otherwise it prints
/// "ready", waits for "START END" (Unix times) on stdin, writes until END (timing from START)
/// and prints its results as JSON.
const FTS5_SCRIPT: &str = r###"
import json, sqlite3, sys, time
cfg = json.loads(sys.argv[1])
con = sqlite3.connect(cfg["db"], isolation_level=None, timeout=cfg["busy_ms"] / 1000)
con.execute("PRAGMA busy_timeout=%d" % cfg["busy_ms"])
if cfg.get("init"):
    mode = con.execute("PRAGMA journal_mode=" + cfg["journal"]).fetchone()[0]
    con.execute("CREATE VIRTUAL TABLE s USING fts5(title, body)")
    print(json.dumps({"journal_mode": mode, "sqlite": sqlite3.sqlite_version}))
    sys.exit(0)
if cfg.get("count"):
    print(con.execute("SELECT count(*) FROM s").fetchone()[0])
    sys.exit(0)
con.execute("PRAGMA synchronous=FULL")
journal = con.execute("PRAGMA journal_mode").fetchone()[0]
synchronous = con.execute("PRAGMA synchronous").fetchone()[0]
pool = json.load(open(cfg["pool"]))
w = cfg["writer"]
print("ready", flush=True)
start, end = map(float, sys.stdin.readline().split())
clock = time.perf_counter
wall0, clock0 = time.time(), clock()
start_c, end_c = clock0 + (start - wall0), clock0 + (end - wall0)
ok = warm_ok = errors = 0
cpu0 = None
first_error = None
lat = []
last_done = None
seq = 0
while True:
    title, body = pool[(w * 7919 + seq) % len(pool)]
    content = "## %s\n\n%s\n\nRecorded by writer %d, entry %d." % (title, body, w, seq)
    seq += 1
    t = clock()
    if t >= end_c:
        break
    if cpu0 is None and t >= start_c:
        cpu0 = time.process_time()
    try:
        con.execute("BEGIN IMMEDIATE")
        con.execute("INSERT INTO s(title, body) VALUES (?, ?)", (title, content))
        con.execute("COMMIT")
        good = True
    except sqlite3.Error as e:
        good = False
        if first_error is None:
            first_error = "%s: %s" % (type(e).__name__, e)
        try:
            con.execute("ROLLBACK")
        except sqlite3.Error:
            pass
    done = clock()
    if t >= start_c:
        if good:
            ok += 1
            lat.append(round((done - t) * 1000, 4))
            last_done = done - start_c
        else:
            errors += 1
    elif good:
        warm_ok += 1
cpu = time.process_time() - cpu0 if cpu0 is not None else 0.0
print(json.dumps({"ok": ok, "cpu_s": cpu, "warm_ok": warm_ok, "errors": errors, "first_error": first_error,
                  "lat_ms": lat, "last_done_s": last_done, "journal_mode": journal,
                  "synchronous": synchronous}))
"###;

fn python(args: &Args, cfg: &Value) -> Command {
    let mut c = Command::new(&args.python);
    c.arg("-c").arg(FTS5_SCRIPT).arg(cfg.to_string());
    c.env("PYTHONDONTWRITEBYTECODE", "1");
    c
}

fn python_output(args: &Args, cfg: &Value) -> Result<String, BoxError> {
    let out = python(args, cfg)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", args.python))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            args.python,
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Children killed and reaped if the run fails half-way.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

fn run_fts5(journal: &str, writers: usize, args: &Args, pool_file: &Path) -> Result<Row, BoxError> {
    let tmp = temp_dir(args, "kbdb-fts5-bench-")?;
    let db = tmp.path().join("fts5.db");
    let base = json!({"db": db, "journal": journal, "busy_ms": 5000, "pool": pool_file});
    let mut init = base.clone();
    init["init"] = json!(true);
    let info: Value = serde_json::from_str(&python_output(args, &init)?)?;
    let load_1m = load_avg();

    let mut children = Children(Vec::new());
    let mut outputs = Vec::new();
    for w in 0..writers {
        let mut cfg = base.clone();
        cfg["writer"] = json!(w);
        let mut child = python(args, &cfg)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", args.python))?;
        let mut out = BufReader::new(child.stdout.take().expect("piped"));
        children.0.push(child);
        let mut line = String::new();
        out.read_line(&mut line)?;
        if line.trim() != "ready" {
            let mut err = String::new();
            if let Some(e) = children.0.last_mut().and_then(|c| c.stderr.as_mut()) {
                let _ = e.read_to_string(&mut err);
            }
            return Err(format!("FTS5 writer {w} did not start: {line}{}", err.trim()).into());
        }
        outputs.push(out);
    }
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
    let start = now + args.warmup;
    let go = format!("{start:.6} {:.6}\n", start + args.secs);
    for c in &mut children.0 {
        let mut stdin = c.stdin.take().expect("piped");
        stdin.write_all(go.as_bytes())?;
    }
    let mut results = Vec::new();
    for (w, (out, child)) in outputs.iter_mut().zip(&mut children.0).enumerate() {
        let mut text = String::new();
        out.read_to_string(&mut text)?;
        let status = child.wait()?;
        if !status.success() {
            let mut err = String::new();
            if let Some(e) = child.stderr.as_mut() {
                let _ = e.read_to_string(&mut err);
            }
            return Err(format!("FTS5 writer {w} failed ({status}): {}", err.trim()).into());
        }
        let v: Value = serde_json::from_str(text.trim())
            .map_err(|e| format!("FTS5 writer {w}: unreadable result ({e}): {text}"))?;
        results.push(v);
    }
    let mut count = base.clone();
    count["count"] = json!(true);
    let stored: u64 = python_output(args, &count)?.parse()?;

    let num = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
    let mut lat_ms: Vec<f64> = results
        .iter()
        .flat_map(|r| r["lat_ms"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_f64())
        .collect();
    lat_ms.sort_by(f64::total_cmp);
    let elapsed_s = results
        .iter()
        .filter_map(|r| r["last_done_s"].as_f64())
        .fold(f64::NAN, f64::max);
    let label = if journal == "WAL" {
        "WAL"
    } else {
        "rollback journal"
    };
    Ok(Row {
        config: format!("FTS5 {label}, synchronous=FULL"),
        engine: "fts5",
        writers,
        writes: results.iter().map(|r| num(r, "ok")).sum(),
        elapsed_s: if elapsed_s.is_nan() {
            args.secs
        } else {
            elapsed_s
        },
        lat_ms,
        errors: results.iter().map(|r| num(r, "errors")).sum(),
        first_error: results
            .iter()
            .find_map(|r| r["first_error"].as_str().map(String::from)),
        stored,
        acknowledged_total: results
            .iter()
            .map(|r| num(r, "ok") + num(r, "warm_ok"))
            .sum(),
        load_1m,
        extra: json!({
            "journal_mode": results.first().map(|r| r["journal_mode"].clone()),
            "synchronous": results.first().map(|r| r["synchronous"].clone()),
            "sqlite": info["sqlite"],
            "busy_timeout_ms": 5000,
            "writes_per_writer": results.iter().map(|r| num(r, "ok")).collect::<Vec<_>>(),
            "cpu_pct": round(
                results.iter().filter_map(|r| r["cpu_s"].as_f64()).sum::<f64>() / args.secs * 100.0,
                1
            ),
        }),
    })
}

// ---------------------------------------------------------------------------------------------

fn temp_dir(args: &Args, prefix: &str) -> Result<tempfile::TempDir, BoxError> {
    let mut b = tempfile::Builder::new();
    b.prefix(prefix);
    Ok(match &args.tmp {
        Some(d) => b.tempdir_in(d)?,
        None => b.tempdir()?,
    })
}

/// fdatasync of a 4 KiB write on the benchmark's file system: the floor under any durable
/// commit (p50, p99 in ms).
fn fdatasync_probe(args: &Args) -> Result<(f64, f64), BoxError> {
    let tmp = temp_dir(args, "kbdb-fsync-probe-")?;
    let mut f = fs::File::create(tmp.path().join("probe"))?;
    let block = vec![b'x'; 4096];
    let mut lat = Vec::new();
    for _ in 0..100 {
        let t = Instant::now();
        f.write_all(&block)?;
        f.sync_data()?;
        lat.push(t.elapsed().as_secs_f64() * 1e3);
    }
    lat.sort_by(f64::total_cmp);
    Ok((percentile(&lat, 0.5), percentile(&lat, 0.99)))
}

fn kbdb_binary(args: &Args) -> Result<PathBuf, String> {
    let path = match &args.kbdb {
        Some(p) => p.clone(),
        None => std::env::var_os("CARGO_TARGET_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
            .join("release")
            .join("kbdb"),
    };
    if !path.is_file() {
        return Err(format!(
            "no kbdb release binary at {}; build it first with `cargo build --release` \
             (same CARGO_TARGET_DIR), pass --kbdb PATH, or run tools/bench-daemon.sh",
            path.display()
        ));
    }
    Ok(path)
}

/// Source files newer than the binary (a stale build measures old code).
fn newer_sources(bin: &Path) -> Vec<PathBuf> {
    let Ok(built) = fs::metadata(bin).and_then(|m| m.modified()) else {
        return Vec::new();
    };
    let mut newer = Vec::new();
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if e
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|m| m > built)
            {
                newer.push(p);
            }
        }
    }
    newer
}

fn fmt_rate(v: f64) -> String {
    let s = format!("{v:.0}");
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The result JSON, the printed report, and whether the stored counts matched the
/// acknowledged writes (targets do not change the exit status; a failed check does).
fn run(args: &Args) -> Result<(Value, String, bool), BoxError> {
    let bin = kbdb_binary(args)?;
    let stale = newer_sources(&bin);
    if !stale.is_empty() {
        eprintln!(
            "warning: {} source file(s) are newer than {} (e.g. {}); rebuild with `cargo build --release`",
            stale.len(),
            bin.display(),
            stale[0].display()
        );
    }
    let version = Command::new(&bin)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();

    let pool = Arc::new(match &args.sections {
        Some(file) => sections_pool(file)?,
        None => content_pool(1024),
    });
    let pool_dir = temp_dir(args, "kbdb-bench-pool-")?;
    let pool_file = pool_dir.path().join("pool.json");
    let pool_json: Vec<Value> = pool.iter().map(|p| json!([p.title, p.body])).collect();
    fs::write(&pool_file, serde_json::to_string(&pool_json)?)?;
    let (fsync_p50, fsync_p99) = fdatasync_probe(args)?;

    // Interleaved: FTS5 and kbdb alternate so that noise is spread over both.
    #[derive(Clone, Copy)]
    enum Job {
        Fts5(&'static str, usize),
        Kbdb(usize),
    }
    let mut fts5_jobs = vec![Job::Fts5("WAL", 1), Job::Fts5("DELETE", 1)];
    if args.fts5_writers > 1 {
        fts5_jobs.push(Job::Fts5("WAL", args.fts5_writers));
    }
    let mut jobs = Vec::new();
    let mut kbdb_jobs = args.writers.iter().map(|&w| Job::Kbdb(w));
    let mut fts5_iter = fts5_jobs.into_iter();
    loop {
        let (a, b) = (fts5_iter.next(), kbdb_jobs.next());
        if a.is_none() && b.is_none() {
            break;
        }
        jobs.extend(a);
        jobs.extend(b);
    }

    // runs[job][round]
    let mut runs: Vec<Vec<Row>> = jobs.iter().map(|_| Vec::new()).collect();
    for round in 1..=args.rounds {
        if args.rounds > 1 {
            eprintln!("round {round} of {}", args.rounds);
        }
        for (job, runs) in jobs.iter().zip(runs.iter_mut()) {
            let row = match *job {
                Job::Fts5(journal, n) => {
                    eprintln!("FTS5 {journal}, {n} writer(s)…");
                    run_fts5(journal, n, args, &pool_file)?
                }
                Job::Kbdb(n) => {
                    eprintln!("kbdb daemon, {n} writer(s)…");
                    run_kbdb(&bin, n, args, &pool)?
                }
            };
            eprintln!(
                "  {} writes/s, p50 {:.2} ms, p99 {:.2} ms, {} errors",
                fmt_rate(row.rate()),
                row.pct(0.5),
                row.pct(0.99),
                row.errors
            );
            runs.push(row);
        }
    }
    // Every run is checked; the ratios pair kbdb and FTS5 within a round (the machine drifts
    // between rounds), then take the median; the table shows each configuration's median run.
    let mut checks = String::new();
    let mut checks_ok = true;
    for r in runs.iter().flatten() {
        if r.stored != r.acknowledged_total {
            checks_ok = false;
            checks.push_str(&format!(
                "CHECK FAILED: {} with {} writer(s): {} stored, {} acknowledged\n",
                r.config, r.writers, r.stored, r.acknowledged_total
            ));
        }
        if args.rounds > 1 && r.errors > 0 {
            checks.push_str(&format!(
                "errors in one round: {} with {} writer(s): {} ({})\n",
                r.config,
                r.writers,
                r.errors,
                r.first_error.as_deref().unwrap_or("")
            ));
        }
    }
    let fts5_best_in = |round: usize| {
        runs.iter()
            .map(|v| &v[round])
            .filter(|r| r.engine == "fts5" && r.writers == 1)
            .map(Row::rate)
            .fold(None, |best: Option<f64>, r| {
                Some(best.map_or(r, |b| b.max(r)))
            })
    };
    let mut paired: Vec<(usize, Vec<f64>)> = Vec::new();
    for v in runs.iter().filter(|v| v[0].engine == "kbdb") {
        let ratios = (0..args.rounds)
            .filter_map(|round| fts5_best_in(round).map(|f| v[round].rate() / f))
            .collect();
        paired.push((v[0].writers, ratios));
    }
    let mut rounds_text = String::new();
    if args.rounds > 1 {
        for v in &runs {
            let rates: Vec<String> = v.iter().map(|r| fmt_rate(r.rate())).collect();
            rounds_text.push_str(&format!(
                "rounds, {} with {} writer(s): {} writes/s\n",
                v[0].config,
                v[0].writers,
                rates.join(" / ")
            ));
        }
        for (n, ratios) in &paired {
            let ratios: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
            rounds_text.push_str(&format!(
                "rounds, ratio kbdb({n}) / FTS5(best single writer): {}\n",
                ratios.join(" / ")
            ));
        }
    }
    let median_ratio = |n: usize| -> Option<f64> {
        let (_, ratios) = paired.iter().find(|(w, _)| *w == n)?;
        let mut ratios = ratios.clone();
        ratios.sort_by(f64::total_cmp);
        ratios.get(ratios.len().saturating_sub(1) / 2).copied()
    };
    let rows: Vec<Row> = runs
        .into_iter()
        .map(|mut v| {
            v.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
            v.swap_remove((v.len() - 1) / 2)
        })
        .collect();

    // ---- report ----
    let mut t = String::new();
    t.push_str(&format!(
        "\nDaemon write throughput: {}s measured after {}s warm-up per configuration, \
         content ~300-800 bytes, one durable commit per FTS5 row\n\n",
        args.secs, args.warmup
    ));
    t.push_str("| config | writers | writes/s | p50 ms | p99 ms | errors |\n");
    t.push_str("|---|---:|---:|---:|---:|---:|\n");
    let mut order: Vec<&Row> = rows.iter().filter(|r| r.engine == "fts5").collect();
    let mut kb: Vec<&Row> = rows.iter().filter(|r| r.engine == "kbdb").collect();
    kb.sort_by_key(|r| r.writers);
    order.extend(kb);
    for r in &order {
        t.push_str(&format!(
            "| {} | {} | {} | {:.2} | {:.2} | {} |\n",
            r.config,
            r.writers,
            fmt_rate(r.rate()),
            r.pct(0.5),
            r.pct(0.99),
            r.errors
        ));
    }
    t.push('\n');

    let best_fts5 = rows
        .iter()
        .filter(|r| r.engine == "fts5" && r.writers == 1)
        .max_by(|a, b| a.rate().total_cmp(&b.rate()));
    let kbdb_at = |n: usize| rows.iter().find(|r| r.engine == "kbdb" && r.writers == n);
    let mut ratios = serde_json::Map::new();
    let mut targets = Vec::new();
    let mut all_pass = true;
    if let Some(f) = best_fts5 {
        t.push_str(&format!(
            "Best FTS5 durable single writer: {} ({} commits/s)\n",
            f.config,
            fmt_rate(f.rate())
        ));
        for r in rows.iter().filter(|r| r.engine == "kbdb") {
            let ratio = median_ratio(r.writers).unwrap_or(r.rate() / f.rate());
            t.push_str(&format!(
                "ratio kbdb({}) / FTS5(best single writer): {ratio:.2}\n",
                r.writers
            ));
            ratios.insert(
                format!("kbdb{}_over_fts5_best", r.writers),
                json!(round(ratio, 3)),
            );
        }
    }
    match kbdb_at(TARGET_WRITERS) {
        Some(r) => {
            let pass = r.rate() >= TARGET_WRITES_PER_S && r.errors == 0;
            all_pass &= pass;
            t.push_str(&format!(
                "{}: kbdb with {TARGET_WRITERS} writers ≥ {TARGET_WRITES_PER_S:.0} acknowledged writes/s, no errors (measured {})\n",
                if pass { "PASS" } else { "FAIL" },
                fmt_rate(r.rate())
            ));
            targets.push(
                json!({"target": format!("kbdb{TARGET_WRITERS} >= {TARGET_WRITES_PER_S} writes/s"),
                                "measured": round(r.rate(), 1), "pass": pass}),
            );
            if let Some(f) = best_fts5 {
                let ratio = median_ratio(r.writers).unwrap_or(r.rate() / f.rate());
                let pass = ratio >= TARGET_FTS5_RATIO;
                all_pass &= pass;
                t.push_str(&format!(
                    "{}: kbdb with {TARGET_WRITERS} writers ≥ {TARGET_FTS5_RATIO}× FTS5's best durable commit rate (measured {ratio:.2}×)\n",
                    if pass { "PASS" } else { "FAIL" },
                ));
                targets.push(json!({"target": format!("kbdb{TARGET_WRITERS} / fts5 best >= {TARGET_FTS5_RATIO}"),
                                    "measured": round(ratio, 3), "pass": pass}));
            }
        }
        None => t.push_str(&format!(
            "targets not evaluated: no run with {TARGET_WRITERS} writers (--writers)\n"
        )),
    }
    t.push_str(&rounds_text);
    t.push_str(&checks);
    for r in &rows {
        if let Some(e) = &r.first_error {
            t.push_str(&format!(
                "first error of {} with {} writer(s): {e}\n",
                r.config, r.writers
            ));
        }
        if r.engine == "kbdb" {
            let x = &r.extra;
            t.push_str(&format!(
                "kbdb with {} writer(s): lexical index {} change(s) behind when the writers \
                 stopped, caught up {}; daemon CPU {} ms per write; {} writes per group commit; \
                 {} KiB written to disk per write\n",
                r.writers,
                x["index_pending_changes"],
                match x["index_catch_up_s"].as_f64() {
                    Some(s) => format!("{s:.3} s later"),
                    None => "not within 60 s".into(),
                },
                x["daemon_cpu_ms_per_write"],
                x["writes_per_commit"],
                x["disk_kib_per_write"],
            ));
        }
    }
    let loads: Vec<String> = order.iter().map(|r| format!("{:.2}", r.load_1m)).collect();
    t.push_str(&format!(
        "fdatasync (4 KiB) p50 {fsync_p50:.2} ms, p99 {fsync_p99:.2} ms; load average at each start \
         (table order): {}; {} CPUs; {version}\n",
        loads.join(", "),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    ));

    let result = json!({
        "bench": "daemon",
        "kbdb_binary": bin,
        "kbdb_version": version,
        "secs": args.secs,
        "warmup_s": args.warmup,
        "rounds": args.rounds,
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "fdatasync_p50_ms": round(fsync_p50, 3),
        "fdatasync_p99_ms": round(fsync_p99, 3),
        "rows": order.iter().map(|r| r.json()).collect::<Vec<_>>(),
        "fts5_best_single_writer": best_fts5.map(|f| json!({"config": f.config, "writes_per_s": round(f.rate(), 1)})),
        "ratios": ratios,
        "targets": targets,
        "targets_pass": all_pass,
        "checks_pass": checks_ok,
    });
    Ok((result, t, checks_ok))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let (result, table, checks_ok) = match run(&args) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{table}");
    if let Some(p) = &args.out {
        let text = serde_json::to_string_pretty(&result).expect("JSON");
        if let Err(e) = fs::write(p, format!("{text}\n")) {
            eprintln!("error: {}: {e}", p.display());
            return ExitCode::FAILURE;
        }
        eprintln!("results: {}", p.display());
    }
    if checks_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
