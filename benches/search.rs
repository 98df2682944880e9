//! Lexical search benchmark: kbdb measured with the same inputs as the SQLite FTS5 baseline of
//! the shared bench kit (`../shared/bench/README.md`). `tools/bench-search.sh` runs both back to
//! back; see docs/performance.md.
//!
//! ```text
//! cargo bench --bench search -- (--sections SECTIONS.jsonl | --eval EVALDIR) --db DIR
//!     [--queries Q.jsonl] [--eval-queries Q.jsonl] [--run-out RUN] [--out RESULT.json]
//!     [--durable-limit N|all] [--k 10] [--repeat 3] [--batch 10000]
//! ```
//!
//! * `--sections`: JSON lines of `sections.py dump DIR` (`{"id","doc","n","level","title",
//!   "body"}`); `--eval`: `EVALDIR/docs.jsonl` (`{"id","doc","title","body"}`, no level: a
//!   titled section is rebuilt as a level-1 heading). A section's content is its text per the
//!   section rule: the heading line (`#`×level + title), a blank line, the body (a preamble is
//!   its body alone). `title` = the heading text, `docid` = the document id.
//! * Bulk ingest: `Kb::learn_many` in batches (one durable transaction each), then
//!   `Kb::flush_index`; all of it timed. A request rejected for its title or docid (too long)
//!   is retried once without that field (counted); other rejections are counted.
//! * Durable ingest (`--durable-limit`, default 0 = skipped): the first N sections on a second
//!   fresh database, one `Kb::learn` (one durable transaction) each; per-write latency.
//! * Latency: one warm-up pass + `--repeat` timed passes over `--queries`, top k, one thread:
//!   wall time per query (`Instant`; p50/p99) and process CPU time per pass (sum of
//!   `/proc/self/task/*/schedstat`; the running thread's counter is tick-granular, so only the
//!   mean per query is reported).
//! * Quality: every `--eval-queries` query (default `EVALDIR/queries.jsonl` with `--eval`) with
//!   limit k, written as a TREC run: a hit's kbid stands for every section id with that content
//!   (kbdb is content-addressed), emitted in ingest order, at most k lines per query.
//!
//! Results: JSON with the keys `summarize.py` reads (`--out`, and on stdout after a table).

mod common;

use std::collections::HashMap;
use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use common::{BoxError, Query, Section, read_queries, read_sections, request};
use kbdb::{Kb, LearnRequest, SearchRequest};
use serde_json::{Value, json};

const USAGE: &str = "usage: cargo bench --bench search -- (--sections FILE | --eval DIR) --db DIR \
[--queries Q.jsonl] [--eval-queries Q.jsonl] [--run-out FILE] [--out FILE] \
[--durable-limit N|all] [--k 10] [--repeat 3] [--batch 10000]";

struct Args {
    sections: Option<PathBuf>,
    eval: Option<PathBuf>,
    db: PathBuf,
    queries: Option<PathBuf>,
    eval_queries: Option<PathBuf>,
    run_out: Option<PathBuf>,
    out: Option<PathBuf>,
    durable_limit: usize,
    k: usize,
    repeat: usize,
    batch: usize,
    /// Reuse an existing database: no ingest (for profiling queries; src_in_topk and runs
    /// then have no section ids).
    reuse_db: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        sections: None,
        eval: None,
        db: PathBuf::new(),
        queries: None,
        eval_queries: None,
        run_out: None,
        out: None,
        durable_limit: 0,
        k: 10,
        repeat: 3,
        batch: 10_000,
        reuse_db: false,
    };
    let mut db = None;
    while let Some(flag) = it.next() {
        if flag == "--bench" {
            continue; // appended by `cargo bench`
        }
        if flag == "-h" || flag == "--help" {
            return Err(USAGE.to_string());
        }
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |v: String| {
            v.parse::<usize>()
                .map_err(|_| format!("{flag}: not a number: {v}"))
        };
        match flag.as_str() {
            "--sections" => a.sections = Some(value()?.into()),
            "--eval" => a.eval = Some(value()?.into()),
            "--db" => db = Some(PathBuf::from(value()?)),
            "--queries" => a.queries = Some(value()?.into()),
            "--eval-queries" => a.eval_queries = Some(value()?.into()),
            "--run-out" => a.run_out = Some(value()?.into()),
            "--out" => a.out = Some(value()?.into()),
            "--durable-limit" => {
                let v = value()?;
                a.durable_limit = if v == "all" || v == "-1" {
                    usize::MAX
                } else {
                    number(v)?
                };
            }
            "--k" => a.k = number(value()?)?.max(1),
            "--repeat" => a.repeat = number(value()?)?.max(1),
            "--batch" => a.batch = number(value()?)?.max(1),
            "--reuse-db" => a.reuse_db = true,
            _ => return Err(format!("unknown argument {flag}\n{USAGE}")),
        }
    }
    if a.sections.is_some() == a.eval.is_some() {
        return Err(format!(
            "give exactly one of --sections and --eval\n{USAGE}"
        ));
    }
    a.db = db.ok_or_else(|| format!("--db is required\n{USAGE}"))?;
    if a.eval_queries.is_none()
        && let Some(e) = &a.eval
    {
        a.eval_queries = Some(e.join("queries.jsonl"));
    }
    Ok(a)
}

/// Outcome counters of a set of learn calls.
#[derive(Default)]
struct LearnStats {
    ok: usize,
    skipped: usize,
    attached: usize,
    retried_without_title: usize,
    retried_without_docid: usize,
    errors: usize,
    error_examples: Vec<String>,
}

impl LearnStats {
    fn note_error(&mut self, id: &str, e: &kbdb::KbError) {
        self.errors += 1;
        if self.error_examples.len() < 5 {
            self.error_examples.push(format!("{id}: {e}"));
        }
    }

    fn note_ok(&mut self, r: &kbdb::LearnResult) {
        self.ok += 1;
        self.skipped += r.skipped as usize;
        self.attached += r.attached as usize;
    }

    fn json(&self) -> Value {
        json!({
            "ok": self.ok, "skipped": self.skipped, "attached": self.attached,
            "retried_without_title": self.retried_without_title,
            "retried_without_docid": self.retried_without_docid,
            "errors": self.errors, "error_examples": self.error_examples,
        })
    }
}

/// kbid → indexes (into the section list) of every section with that content, in ingest order.
type KbidMap = HashMap<String, Vec<u32>>;

/// A copy of `req` without the field it was rejected for, if that field is optional metadata.
fn without_bad_field(
    req: &LearnRequest,
    e: &kbdb::KbError,
    st: &mut LearnStats,
) -> Option<LearnRequest> {
    match e.field() {
        Some("title") if req.title.is_some() => {
            st.retried_without_title += 1;
            Some(LearnRequest {
                title: None,
                ..req.clone()
            })
        }
        Some("docid") if req.docid.is_some() => {
            st.retried_without_docid += 1;
            Some(LearnRequest {
                docid: None,
                ..req.clone()
            })
        }
        _ => None,
    }
}

struct Bulk {
    seconds: f64,
    learn_seconds: f64,
    flush_seconds: f64,
    batch_s: Vec<f64>,
    stats: LearnStats,
}

fn ingest_bulk(
    kb: &Kb,
    secs: &[Section],
    batch: usize,
    map: &mut KbidMap,
) -> Result<Bulk, BoxError> {
    // Requests are built before the clock starts; only kbdb's work is timed.
    let mut reqs: Vec<LearnRequest> = secs.iter().map(request).collect();
    let mut st = LearnStats::default();
    let mut batch_s = Vec::new();
    let t0 = Instant::now();
    let mut base = 0usize;
    let mut drain = reqs.drain(..);
    loop {
        let chunk: Vec<LearnRequest> = drain.by_ref().take(batch).collect();
        if chunk.is_empty() {
            break;
        }
        let n = chunk.len();
        let b0 = Instant::now();
        let results = kb.learn_many(chunk)?;
        batch_s.push(b0.elapsed().as_secs_f64());
        if results.len() != n {
            return Err(format!(
                "learn_many returned {} results for {n} requests",
                results.len()
            )
            .into());
        }
        let mut retry: Vec<(usize, LearnRequest)> = Vec::new();
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(r) => {
                    st.note_ok(&r);
                    map.entry(r.kbid).or_default().push((base + i) as u32);
                }
                Err(e) => match without_bad_field(&request(&secs[base + i]), &e, &mut st) {
                    Some(req) => retry.push((base + i, req)),
                    None => st.note_error(&secs[base + i].id, &e),
                },
            }
        }
        if !retry.is_empty() {
            let (idx, rs): (Vec<usize>, Vec<LearnRequest>) = retry.into_iter().unzip();
            for (i, r) in idx.into_iter().zip(kb.learn_many(rs)?) {
                match r {
                    Ok(r) => {
                        st.note_ok(&r);
                        map.entry(r.kbid).or_default().push(i as u32);
                    }
                    Err(e) => st.note_error(&secs[i].id, &e),
                }
            }
        }
        base += n;
    }
    drop(drain);
    let learn_seconds = t0.elapsed().as_secs_f64();
    let f0 = Instant::now();
    kb.flush_index()?;
    let flush_seconds = f0.elapsed().as_secs_f64();
    // Section ids of one kbid in ingest order (retries can append out of order).
    for v in map.values_mut() {
        v.sort_unstable();
    }
    Ok(Bulk {
        seconds: t0.elapsed().as_secs_f64(),
        learn_seconds,
        flush_seconds,
        batch_s,
        stats: st,
    })
}

fn ingest_durable(dir: &Path, secs: &[Section]) -> Result<Value, BoxError> {
    remove_dir(dir)?;
    let (kb, _) = Kb::open_or_create(dir)?;
    let reqs: Vec<LearnRequest> = secs.iter().map(request).collect();
    let mut st = LearnStats::default();
    let mut lat = Vec::with_capacity(reqs.len());
    let t0 = Instant::now();
    for (i, req) in reqs.into_iter().enumerate() {
        let a = Instant::now();
        let mut r = kb.learn(req);
        if let Err(e) = &r
            && let Some(req) = without_bad_field(&request(&secs[i]), e, &mut st)
        {
            r = kb.learn(req);
        }
        lat.push(a.elapsed().as_secs_f64());
        match r {
            Ok(r) => st.note_ok(&r),
            Err(e) => st.note_error(&secs[i].id, &e),
        }
    }
    let dt = t0.elapsed().as_secs_f64();
    let f0 = Instant::now();
    kb.flush_index()?;
    let flush = f0.elapsed().as_secs_f64();
    drop(kb);
    let bytes = dir_bytes(dir);
    remove_dir(dir)?;
    Ok(json!({
        "sections": secs.len(), "seconds": round(dt, 3),
        "sections_per_s": round(secs.len() as f64 / dt, 1),
        "commit_ms": pct(&lat),
        "flush_index_seconds_after": round(flush, 3),
        "db_bytes": bytes,
        "learn": st.json(),
    }))
}

/// Expand a response's kbids to section ids (each kbid → all its sections), at most `k`.
fn expand<'a>(
    kbids: impl Iterator<Item = &'a str>,
    map: &KbidMap,
    secs: &'a [Section],
    k: usize,
) -> Vec<&'a str> {
    let mut out = Vec::with_capacity(k);
    for kbid in kbids {
        match map.get(kbid) {
            Some(ix) => out.extend(ix.iter().map(|&i| secs[i as usize].id.as_str())),
            None => out.push("?unknown-kbid"),
        }
        if out.len() >= k {
            out.truncate(k);
            break;
        }
    }
    out
}

fn search(kb: &Kb, text: &str, k: usize) -> kbdb::Result<kbdb::SearchResponse> {
    let mut q = SearchRequest::new(text);
    q.limit = Some(k);
    kb.search(&q)
}

fn latency(
    kb: &Kb,
    queries: &[Query],
    map: &KbidMap,
    secs: &[Section],
    k: usize,
    repeat: usize,
) -> Result<Value, BoxError> {
    for q in queries {
        search(kb, &q.text, k)?; // warm-up
    }
    // Process CPU is taken per pass, not per query: the kernel advances a running thread's
    // counter once per scheduler tick (1-10 ms), so per-query deltas would be 0 or one tick.
    let (mut lat, mut cpu_per_query) = (Vec::new(), Vec::new());
    let (mut zero, mut known, mut relaxed, mut errors) = (0usize, 0usize, 0usize, 0usize);
    for pass in 0..repeat {
        let c0 = process_cpu_ns();
        let p0 = Instant::now();
        for q in queries {
            let a = Instant::now();
            let r = search(kb, &q.text, k);
            lat.push(a.elapsed().as_secs_f64());
            if pass > 0 {
                continue;
            }
            match r {
                Ok(resp) => {
                    zero += resp.items.is_empty() as usize;
                    relaxed += resp.relaxed as usize;
                    if let Some(src) = &q.src {
                        let items = resp.items.sections().iter();
                        let ids = expand(items.map(|i| i.kbid.as_str()), map, secs, k);
                        known += ids.contains(&src.as_str()) as usize;
                    }
                }
                Err(e) => {
                    errors += 1;
                    eprintln!("query {} failed: {e}", q.id);
                }
            }
        }
        let pass_s = p0.elapsed().as_secs_f64();
        if let (Some(c0), Some(c1)) = (c0, process_cpu_ns())
            && !queries.is_empty()
        {
            let n = queries.len() as f64;
            cpu_per_query.push((c1.saturating_sub(c0) as f64 / 1e9 / n, pass_s / n));
        }
    }
    let mut out = json!({
        "queries": queries.len(), "timed_runs": lat.len(),
        "latency_ms": pct(&lat),
        "zero_hit_queries": zero, "relaxed_queries": relaxed, "query_errors": errors,
        "semantics": "Kb::search, SearchRequest defaults (AND, relaxed to OR when AND finds nothing), limit k",
    });
    if !cpu_per_query.is_empty() {
        let ms = |v: f64| round(v * 1000.0, 3);
        let cpu: Vec<f64> = cpu_per_query.iter().map(|c| ms(c.0)).collect();
        let wall: Vec<f64> = cpu_per_query.iter().map(|c| ms(c.1)).collect();
        out["cpu_ms"] = json!({
            "mean": round(cpu.iter().sum::<f64>() / cpu.len() as f64, 3),
            "per_pass_mean": cpu, "per_pass_wall_mean": wall,
            "source": "process CPU (all threads, /proc/self/task/*/schedstat) per timed pass / queries; \
                       no per-query percentiles (tick-granular counter)",
        });
    }
    if queries.iter().any(|q| q.src.is_some()) {
        out["src_in_topk"] = json!(round(known as f64 / queries.len() as f64, 4));
    }
    Ok(out)
}

fn quality_run(
    kb: &Kb,
    queries: &[Query],
    map: &KbidMap,
    secs: &[Section],
    k: usize,
    run_out: Option<&Path>,
) -> Result<Value, BoxError> {
    let mut run = match run_out {
        Some(p) => Some(BufWriter::new(
            fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?,
        )),
        None => None,
    };
    let (mut lat, mut lines) = (Vec::with_capacity(queries.len()), 0usize);
    let (mut zero, mut relaxed, mut errors, mut unknown) = (0usize, 0usize, 0usize, 0usize);
    let t0 = Instant::now();
    for q in queries {
        let a = Instant::now();
        let r = search(kb, &q.text, k);
        lat.push(a.elapsed().as_secs_f64());
        let resp = match r {
            Ok(r) => r,
            Err(e) => {
                errors += 1;
                if errors <= 5 {
                    eprintln!("query {} failed: {e}", q.id);
                }
                continue;
            }
        };
        zero += resp.items.is_empty() as usize;
        relaxed += resp.relaxed as usize;
        let mut rank = 0usize;
        // kbdb exposes no score: 1/rank of the hit (score_run.py ranks by `rank` anyway).
        'items: for (i, item) in resp.items.sections().iter().enumerate() {
            let score = 1.0 / (i + 1) as f64;
            let Some(ix) = map.get(item.kbid.as_str()) else {
                unknown += 1;
                continue;
            };
            for &s in ix {
                rank += 1;
                if let Some(w) = run.as_mut() {
                    writeln!(
                        w,
                        "{} Q0 {} {} {:.6} kbdb",
                        q.id, secs[s as usize].id, rank, score
                    )?;
                }
                lines += 1;
                if rank >= k {
                    break 'items;
                }
            }
        }
    }
    if let Some(mut w) = run {
        w.flush()?;
    }
    Ok(json!({
        "queries": queries.len(), "seconds": round(t0.elapsed().as_secs_f64(), 3),
        "latency_ms": pct(&lat), "zero_hit_queries": zero, "relaxed_queries": relaxed,
        "query_errors": errors, "unknown_kbids": unknown, "run_lines": lines,
        "run_file": run_out.map(|p| p.display().to_string()),
    }))
}

// ---- measurement helpers ----

/// Percentiles in ms, computed exactly like `baseline_fts5.py`'s `pct`.
fn pct(xs: &[f64]) -> Value {
    if xs.is_empty() {
        return json!({});
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let q = |p: f64| v[((p * n as f64).ceil() as usize).clamp(1, n) - 1] * 1000.0;
    json!({
        "n": n, "p50": round(q(0.50), 3), "p95": round(q(0.95), 3), "p99": round(q(0.99), 3),
        "max": round(v[n - 1] * 1000.0, 3),
        "mean": round(v.iter().sum::<f64>() / n as f64 * 1000.0, 3),
    })
}

fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

/// CPU time of this process (all threads) in ns, from the scheduler's per-thread accounting.
fn process_cpu_ns() -> Option<u64> {
    let mut total = 0u64;
    for e in fs::read_dir("/proc/self/task").ok()? {
        let Ok(e) = e else { continue };
        // A thread may exit between listing and reading: skip it.
        if let Ok(s) = fs::read_to_string(e.path().join("schedstat"))
            && let Some(ns) = s
                .split_whitespace()
                .next()
                .and_then(|x| x.parse::<u64>().ok())
        {
            total += ns;
        }
    }
    Some(total)
}

fn loadavg() -> Value {
    let s = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let v: Vec<f64> = s
        .split_whitespace()
        .take(3)
        .filter_map(|x| x.parse().ok())
        .collect();
    json!(v)
}

/// `VmHWM` (peak) and `VmRSS` of this process in MB.
fn rss_mb() -> Value {
    let s = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let get = |key: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|kb| kb.parse::<f64>().ok())
            .map(|kb| round(kb / 1024.0, 1))
    };
    json!({"hwm": get("VmHWM:"), "rss": get("VmRSS:")})
}

/// fdatasync latency of the filesystem holding `dir` (4 KiB appends), as `baseline_fts5.py`.
fn fsync_probe(dir: &Path, n: usize) -> Result<Value, BoxError> {
    let p = dir.join("fsync.probe");
    let mut f = fs::File::create(&p)?;
    let block = [b'x'; 4096];
    let mut ts = Vec::with_capacity(n);
    for _ in 0..n {
        f.write_all(&block)?;
        let a = Instant::now();
        f.sync_data()?;
        ts.push(a.elapsed().as_secs_f64());
    }
    drop(f);
    fs::remove_file(&p)?;
    Ok(pct(&ts))
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(rd) = fs::read_dir(dir) else { return 0 };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn remove_dir(dir: &Path) -> std::io::Result<()> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn run(a: &Args) -> Result<Value, BoxError> {
    let load_start = loadavg();
    let t = Instant::now();
    let (source, secs) = match (&a.sections, &a.eval) {
        (Some(p), _) => (p.clone(), read_sections(p)?),
        (_, Some(d)) => (d.clone(), read_sections(&d.join("docs.jsonl"))?),
        _ => unreachable!("checked by parse_args"),
    };
    let read_s = t.elapsed().as_secs_f64();
    let docs = secs
        .iter()
        .map(|s| s.doc.as_str())
        .collect::<std::collections::HashSet<_>>()
        .len();
    eprintln!(
        "read {} sections of {docs} documents from {} in {read_s:.2} s",
        secs.len(),
        source.display()
    );

    let mut res = json!({
        "system": "kbdb", "kbdb": env!("CARGO_PKG_VERSION"),
        "loadavg_start": load_start, "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "source": source.display().to_string(), "k": a.k, "batch": a.batch,
        "read_seconds": round(read_s, 3), "docs": docs, "sections_read": secs.len(),
        "section_bytes": secs.iter().map(|s| s.text.len()).sum::<usize>(),
    });

    let (kb, map) = if a.reuse_db {
        (Kb::open(&a.db)?, KbidMap::new())
    } else {
        ingest_all(a, &secs, &mut res)?
    };

    if let Some(p) = &a.queries {
        res["latency_queries"] = json!(p.display().to_string());
        res["latency"] = latency(&kb, &read_queries(p)?, &map, &secs, a.k, a.repeat)?;
    }
    if let Some(p) = &a.eval_queries {
        res["eval_queries"] = json!(p.display().to_string());
        res["quality_run"] = quality_run(
            &kb,
            &read_queries(p)?,
            &map,
            &secs,
            a.k,
            a.run_out.as_deref(),
        )?;
    }
    res["rss_mb"]["after_queries"] = rss_mb();
    drop(kb);
    // After close: the live size above includes tantivy segments still being merged.
    res["ingest_bulk"]["db_bytes_closed"] = json!(dir_bytes(&a.db));
    res["loadavg_end"] = loadavg();
    Ok(res)
}

fn ingest_all(a: &Args, secs: &[Section], res: &mut Value) -> Result<(Kb, KbidMap), BoxError> {
    // Bulk ingest into a fresh database.
    remove_dir(&a.db)?;
    let (kb, _) = Kb::open_or_create(&a.db)?;
    let mut map = KbidMap::new();
    let bulk = ingest_bulk(&kb, secs, a.batch, &mut map)?;
    let ingested: usize = map.values().map(Vec::len).sum();
    // `sections` (the key summarize.py reads) = section occurrences ingested.
    res["sections"] = json!(ingested);
    res["distinct_kbids"] = json!(map.len());
    res["ingest_bulk"] = json!({
        "sections": ingested, "seconds": round(bulk.seconds, 3),
        "sections_per_s": round(ingested as f64 / bulk.seconds, 1),
        "learn_seconds": round(bulk.learn_seconds, 3),
        "flush_index_seconds": round(bulk.flush_seconds, 3),
        "batches": bulk.batch_s.len(),
        "batch_ms": pct(&bulk.batch_s),
        "batch_seconds": bulk.batch_s.iter().map(|&x| round(x, 3)).collect::<Vec<_>>(),
        "db_bytes": dir_bytes(&a.db),
        "learn": bulk.stats.json(),
    });
    res["rss_mb"] = json!({"after_ingest": rss_mb()});
    eprintln!("{}", json!({"ingest_bulk": res["ingest_bulk"]}));
    if ingested != secs.len() {
        eprintln!(
            "WARNING: {} of {} sections were not ingested",
            secs.len() - ingested,
            secs.len()
        );
    }

    // Durable single-section writes on a second fresh database.
    if a.durable_limit > 0 {
        let parent =
            a.db.parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
        res["fdatasync_ms"] = fsync_probe(parent, 200)?;
        let mut ddir = a.db.clone().into_os_string();
        ddir.push("-durable");
        let n = a.durable_limit.min(secs.len());
        res["ingest_durable"] = ingest_durable(Path::new(&ddir), &secs[..n])?;
        eprintln!("{}", json!({"ingest_durable": res["ingest_durable"]}));
    }

    Ok((kb, map))
}

fn table(r: &Value) -> String {
    let mb = |v: &Value| {
        v.as_u64()
            .map_or("-".into(), |b| format!("{:.1}", b as f64 / 1e6))
    };
    let f = |v: &Value| match v {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    let mut rows: Vec<(&str, String)> = vec![
        ("source", f(&r["source"])),
        (
            "sections (ingested / read)",
            format!("{} / {}", f(&r["sections"]), f(&r["sections_read"])),
        ),
        ("distinct kbids", f(&r["distinct_kbids"])),
        (
            "bulk ingest",
            format!(
                "{} sections/s ({} s: learn {} s + flush_index {} s; {} MB on disk, {} MB closed)",
                f(&r["ingest_bulk"]["sections_per_s"]),
                f(&r["ingest_bulk"]["seconds"]),
                f(&r["ingest_bulk"]["learn_seconds"]),
                f(&r["ingest_bulk"]["flush_index_seconds"]),
                mb(&r["ingest_bulk"]["db_bytes"]),
                mb(&r["ingest_bulk"]["db_bytes_closed"]),
            ),
        ),
        (
            "learn errors (bulk)",
            f(&r["ingest_bulk"]["learn"]["errors"]),
        ),
    ];
    if !r["ingest_durable"].is_null() {
        let d = &r["ingest_durable"];
        rows.push((
            "durable ingest",
            format!(
                "{} sections/s (n={}; write p50 {} / p99 {} ms; fdatasync p50 {} ms)",
                f(&d["sections_per_s"]),
                f(&d["sections"]),
                f(&d["commit_ms"]["p50"]),
                f(&d["commit_ms"]["p99"]),
                f(&r["fdatasync_ms"]["p50"]),
            ),
        ));
    }
    if !r["latency"].is_null() {
        let l = &r["latency"];
        rows.push((
            "query latency",
            format!(
                "p50 {} / p99 {} / mean {} ms (cpu mean {} ms), {} timings",
                f(&l["latency_ms"]["p50"]),
                f(&l["latency_ms"]["p99"]),
                f(&l["latency_ms"]["mean"]),
                f(&l["cpu_ms"]["mean"]),
                f(&l["timed_runs"]),
            ),
        ));
        rows.push((
            "src_in_topk / zero-hit / relaxed",
            format!(
                "{} / {} / {}",
                f(&l["src_in_topk"]),
                f(&l["zero_hit_queries"]),
                f(&l["relaxed_queries"])
            ),
        ));
    }
    if !r["quality_run"].is_null() {
        let q = &r["quality_run"];
        rows.push((
            "quality run",
            format!(
                "{} queries in {} s (p50 {} ms), zero-hit {}, relaxed {}, {} run lines",
                f(&q["queries"]),
                f(&q["seconds"]),
                f(&q["latency_ms"]["p50"]),
                f(&q["zero_hit_queries"]),
                f(&q["relaxed_queries"]),
                f(&q["run_lines"]),
            ),
        ));
    }
    rows.push((
        "RSS MB (peak / now) after ingest; after queries",
        format!(
            "{} / {}; {} / {}",
            f(&r["rss_mb"]["after_ingest"]["hwm"]),
            f(&r["rss_mb"]["after_ingest"]["rss"]),
            f(&r["rss_mb"]["after_queries"]["hwm"]),
            f(&r["rss_mb"]["after_queries"]["rss"]),
        ),
    ));
    rows.push((
        "load average start → end",
        format!("{} → {}", f(&r["loadavg_start"]), f(&r["loadavg_end"])),
    ));
    let w = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut s = String::from("kbdb search benchmark\n");
    for (k, v) in rows {
        s.push_str(&format!("  {k:<w$}  {v}\n"));
    }
    s
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let res = match run(&args) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let text = serde_json::to_string_pretty(&res).expect("JSON");
    if let Some(p) = &args.out
        && let Err(e) = fs::write(p, format!("{text}\n"))
    {
        eprintln!("error: {}: {e}", p.display());
        return ExitCode::FAILURE;
    }
    if args.out.is_none() {
        println!("{text}");
    }
    print!("{}", table(&res));
    ExitCode::SUCCESS
}
