//! Hybrid search benchmark: the targets of the hybrid-search issue — hybrid p50 ≤ 3× lexical
//! p50 at 100k sections (query embedding excluded, reported separately), embedding throughput
//! in sections/s during `rebuild`, and the memory of the vector matrix. `tools/bench-hybrid.sh`
//! builds and runs it; see docs/performance.md.
//!
//! ```text
//! cargo bench --bench hybrid -- --sections SECTIONS.jsonl --queries Q.jsonl --model DIR
//!     [--n 100000] [--embed-sample 2000] [--repeat 3] [--k 10] [--db DIR] [--out RESULT.json]
//! ```
//!
//! * Inputs: `--sections`, JSON lines of `sections.py dump DIR` (the same reader and
//!   `LearnRequest`s as the search bench, `benches/common`); `--queries`, a latency query set
//!   (`make-queries.py`); `--model`, a folder made by `tools/fetch-model.sh` (model.onnx,
//!   tokenizer.json, libonnxruntime.so): the real `onnx` provider, all-MiniLM-L6-v2, 384-d,
//!   batches of 64.
//! * Databases are filled with *distinct* sections: kbdb is content-addressed (a repeated
//!   text is stored once; the first 5,000 lines of the devdocs dump are 3,919 sections), so the
//!   lines of `--sections` are learned in order with `learn_many` (batches of at most 10,000,
//!   each no larger than what is still missing) until the database holds the wanted number,
//!   then `flush_index`; no provider while learning.
//! * Embedding throughput (real model): a fresh database with `--embed-sample` sections. A
//!   `rebuild()` without a provider first (lexical only, reported), then the ONNX provider is set
//!   and `rebuild()` timed. The provider is wrapped in a timer, so three figures are reported:
//!   sections/s over the whole rebuild (lexical reindex included), over its vector phase (from the
//!   vector rebuild's first progress call to the end: reading the sections, embedding, one durable
//!   commit per batch of 64), and over the time spent inside the provider's `embed` alone; and the
//!   process CPU time of the rebuild (`getrusage`, all threads: ONNX Runtime runs 2 intra-op
//!   threads) as vectors per CPU-second. The mean length of what was embedded (characters of the
//!   embedding input `title\ncontent`, and tokens by the model's tokenizer, also after the
//!   provider's cut at 256; and the tokens run once each batch is padded to its longest input, over
//!   the real tokens) goes with it: throughput depends on it. Embedding all `--n` sections with the
//!   real model would take far too long on a small machine, hence the sample.
//! * Query embedding (real model): every query embedded alone (`provider.embed([text])`, as a
//!   search does), one warm-up pass over the first 10 queries, then `--repeat` timed passes;
//!   p50/p99 and the mean process CPU per query. Not part of the search latencies below.
//! * Latency at scale: a fresh database with `--n` sections (learned as above, timed), then a
//!   *synthetic* provider is set (`synthetic-384`: a deterministic pseudo-random unit vector of
//!   384 dimensions per text, seeded from an FNV-1a hash of it; microseconds per text) and
//!   `rebuild()` stores a vector for every section. An exact vector search scans the
//!   whole i8 matrix whatever the values, so its cost does not depend on them; the vector hits
//!   are unrelated to the query, which makes fusion read sections the lexical side did not find
//!   (as real vectors mostly do). Each query's vector is the synthetic provider's vector of its
//!   text (the stored vectors are of that model). One warm-up pass (it also loads the matrix),
//!   then `--repeat` timed passes over all queries, one thread; for each query in turn:
//!   lexical (`Kb::search`, default mode), hybrid (`search_with_query_vector`, search_mode
//!   `hybrid`) and vector (search_mode `vector`), limit k. Wall time per query (`Instant`),
//!   p50/p99 per mode; hybrid p50 / lexical p50 against the target ≤ 3 (PASS/FAIL). Also the
//!   process's CPU time per query (`CLOCK_PROCESS_CPUTIME_ID`, all threads: a large matrix is
//!   scanned on every core) and the same ratio of it, which a loaded machine inflates less. The
//!   responses of the first timed pass are checked: retrieval method, warnings, zero hits.
//! * Breakdown: the matrix scan alone, `VectorMatrix::top(query, FUSION_DEPTH)` on an in-memory
//!   matrix of as many synthetic vectors (built in the bench, no store), timed the same way: as
//!   searches run it at that size (the 4-bit pass from `NIBBLE_MIN_ROWS` rows, the sign-bit pass
//!   from `PREFILTER_MIN_ROWS`), with the sign-bit pass forced, and the exhaustive i8 scan
//!   (`top_exhaustive`), with each pass's agreement with the exhaustive scan.
//!   `--scan-only` runs this part alone, on `--n` rows (no database, no model needed).
//! * Memory: `status().vectors.memory_bytes` after the passes (the loaded matrix: i8 codes, one
//!   f32 scale, the kbid and the row map per vector), per vector, next to the raw codes.
//!
//! The databases live in `--db` (default: a folder in the system temp dir), `embed/` and
//! `scale/`, and are removed at the end. Results: a markdown table (metric | value) on stdout,
//! then the JSON (also written to `--out`).

mod common;

use std::cell::Cell;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use common::{BoxError, Query, Section, read_queries, read_sections, request};
use kbdb::embedding::onnx::OnnxProvider;
use kbdb::embedding::{EmbedError, EmbeddingProvider, l2_normalize};
use kbdb::{Kb, SearchRequest};
use serde_json::{Value, json};

const USAGE: &str = "usage: cargo bench --bench hybrid -- --sections FILE --queries FILE \
--model DIR [--n 100000] [--embed-sample 2000] [--repeat 3] [--k 10] [--db DIR] [--out FILE] \
[--scan-only]";

const MODEL: &str = "all-MiniLM-L6-v2";
const DIMS: usize = 384;
/// The provider's batch (and `rebuild`'s).
const BATCH: usize = 64;
/// `learn_many` batch.
const LEARN_BATCH: usize = 10_000;
/// The target: hybrid p50 at most this many times lexical p50.
const TARGET_RATIO: f64 = 3.0;

struct Args {
    sections: PathBuf,
    queries: PathBuf,
    model: PathBuf,
    n: usize,
    embed_sample: usize,
    repeat: usize,
    k: usize,
    db: PathBuf,
    out: Option<PathBuf>,
    scan_only: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let (mut sections, mut queries, mut model, mut db, mut out) = (None, None, None, None, None);
    let (mut n, mut embed_sample, mut repeat, mut k) = (100_000, 2_000, 3, 10);
    let mut scan_only = false;
    while let Some(flag) = it.next() {
        if flag == "--bench" {
            continue; // appended by `cargo bench`
        }
        if flag == "--scan-only" {
            scan_only = true;
            continue;
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
            "--sections" => sections = Some(PathBuf::from(value()?)),
            "--queries" => queries = Some(PathBuf::from(value()?)),
            "--model" => model = Some(PathBuf::from(value()?)),
            "--db" => db = Some(PathBuf::from(value()?)),
            "--out" => out = Some(PathBuf::from(value()?)),
            "--n" => n = number(value()?)?.max(1),
            "--embed-sample" => embed_sample = number(value()?)?,
            "--repeat" => repeat = number(value()?)?.max(1),
            "--k" => k = number(value()?)?.max(1),
            _ => return Err(format!("unknown argument {flag}\n{USAGE}")),
        }
    }
    let need =
        |v: Option<PathBuf>, name: &str| v.ok_or_else(|| format!("{name} is required\n{USAGE}"));
    // The scan alone needs query texts only.
    let (sections, model) = if scan_only {
        (sections.unwrap_or_default(), model.unwrap_or_default())
    } else {
        (need(sections, "--sections")?, need(model, "--model")?)
    };
    Ok(Args {
        sections,
        queries: need(queries, "--queries")?,
        model,
        n,
        embed_sample,
        repeat,
        k,
        db: db.unwrap_or_else(|| std::env::temp_dir().join("kbdb-bench-hybrid")),
        out,
        scan_only,
    })
}

// ---- providers ----

/// Deterministic pseudo-random unit vectors: FNV-1a of the text seeds a splitmix64 stream.
struct Synthetic;

impl Synthetic {
    fn vector(text: &str) -> Vec<f32> {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in text.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        let mut v: Vec<f32> = (0..DIMS)
            .map(|_| {
                h = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = h;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^= z >> 31;
                ((z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32
            })
            .collect();
        l2_normalize(&mut v);
        v
    }
}

impl EmbeddingProvider for Synthetic {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| Synthetic::vector(t)).collect())
    }
    fn dimensions(&self) -> usize {
        DIMS
    }
    fn model_name(&self) -> &str {
        "synthetic-384"
    }
    fn max_batch(&self) -> usize {
        BATCH
    }
}

/// A provider that times its inner provider's `embed` calls and keeps what it embedded, one
/// entry per call (batch).
struct Timed {
    inner: Arc<dyn EmbeddingProvider>,
    nanos: AtomicU64,
    calls: AtomicU64,
    inputs: std::sync::Mutex<Vec<Vec<String>>>,
}

impl Timed {
    fn new(inner: Arc<dyn EmbeddingProvider>) -> Timed {
        Timed {
            inner,
            nanos: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            inputs: std::sync::Mutex::new(Vec::new()),
        }
    }
}

impl EmbeddingProvider for Timed {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let t = Instant::now();
        let r = self.inner.embed(texts);
        let ns = t.elapsed().as_nanos() as u64;
        self.nanos.fetch_add(ns, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut v) = self.inputs.lock() {
            v.push(texts.to_vec());
        }
        r
    }
    fn dimensions(&self) -> usize {
        self.inner.dimensions()
    }
    fn model_name(&self) -> &str {
        self.inner.model_name()
    }
    fn max_batch(&self) -> usize {
        self.inner.max_batch()
    }
}

// ---- phases ----

/// A fresh database at `dir` holding `target` distinct sections: the sections of `secs` in
/// order, learned with `learn_many` in batches of at most 10,000, each batch no larger than what
/// is still missing (kbdb is content-addressed: a repeated text is stored once), then the index
/// flushed. Stops early when `secs` runs out.
fn fresh_kb(dir: &Path, secs: &[Section], target: usize) -> Result<(Kb, Value), BoxError> {
    remove_dir(dir)?;
    let (kb, _) = Kb::open_or_create(dir)?;
    let (mut next, mut stored, mut batches) = (0usize, 0usize, 0usize);
    let (mut ok, mut errors) = (0usize, 0usize);
    let mut learn_s = 0.0;
    while stored < target && next < secs.len() {
        let take = (target - stored).min(LEARN_BATCH).min(secs.len() - next);
        // Requests are built before the clock starts; only kbdb's work is timed.
        let reqs: Vec<_> = secs[next..next + take].iter().map(request).collect();
        next += take;
        let t = Instant::now();
        let results = kb.learn_many(reqs)?;
        learn_s += t.elapsed().as_secs_f64();
        batches += 1;
        for r in results {
            match r {
                Ok(_) => ok += 1,
                Err(e) => {
                    errors += 1;
                    if errors <= 5 {
                        eprintln!("learn failed: {e}");
                    }
                }
            }
        }
        stored = kb.status()?.sections as usize;
    }
    let t = Instant::now();
    kb.flush_index()?;
    let flush_s = t.elapsed().as_secs_f64();
    if stored < target {
        eprintln!("WARNING: only {stored} distinct sections in the whole file ({target} wanted)");
    }
    let total = learn_s + flush_s;
    Ok((
        kb,
        json!({
            "requests": next, "ok": ok, "errors": errors, "sections_stored": stored,
            "target": target, "batches": batches,
            "seconds": round(total, 3), "learn_seconds": round(learn_s, 3),
            "flush_index_seconds": round(flush_s, 3),
            "requests_per_s": round(next as f64 / total, 1),
            "what": "learn_many + flush_index, timed (status() between batches not timed)",
        }),
    ))
}

/// `rebuild_with_progress`, returning the result, its wall time and the time of the vector
/// phase (from the vector rebuild's first progress call, `done == 0`, to the end).
fn timed_rebuild(kb: &Kb) -> Result<(kbdb::RebuildResult, f64, Option<f64>), BoxError> {
    let vector_start: Cell<Option<Instant>> = Cell::new(None);
    let progress = |done: u64, _total: u64| {
        // The lexical reindex reports only done > 0; the vector rebuild starts with 0.
        if done == 0 && vector_start.get().is_none() {
            vector_start.set(Some(Instant::now()));
        }
    };
    let t0 = Instant::now();
    let r = kb.rebuild_with_progress(&progress)?;
    let end = Instant::now();
    let wall = (end - t0).as_secs_f64();
    Ok((r, wall, vector_start.get().map(|s| (end - s).as_secs_f64())))
}

fn throughput(a: &Args, secs: &[Section], onnx: &Arc<OnnxProvider>) -> Result<Value, BoxError> {
    let dir = a.db.join("embed");
    let (kb, ingest) = fresh_kb(&dir, secs, a.embed_sample)?;
    let (lex, lex_s, _) = timed_rebuild(&kb)?;
    if lex.vectors_embedded.is_some() {
        return Err("the lexical-only rebuild embedded vectors (a provider is configured?)".into());
    }
    let timed = Arc::new(Timed::new(onnx.clone()));
    kb.set_embedding_provider(timed.clone())?;
    let cpu0 = process_cpu_s();
    let (r, wall, vector_s) = timed_rebuild(&kb)?;
    let cpu_s = process_cpu_s() - cpu0;
    let embedded = r.vectors_embedded.unwrap_or(0);
    let failures = r.vector_failures.unwrap_or(0);
    let embed_s = timed.nanos.load(Ordering::Relaxed) as f64 / 1e9;
    let batches = std::mem::take(&mut *timed.inputs.lock().map_err(|_| "poisoned")?);
    let inputs: Vec<String> = batches.iter().flatten().cloned().collect();
    let status = kb.status()?.vectors;
    drop(kb);
    remove_dir(&dir)?;

    let per_s = |s: f64| {
        if s > 0.0 {
            round(embedded as f64 / s, 1)
        } else {
            0.0
        }
    };
    let mean = |xs: &[usize]| xs.iter().sum::<usize>() as f64 / xs.len().max(1) as f64;
    let chars: Vec<usize> = inputs.iter().map(|t| t.chars().count()).collect();
    let learned = ingest["requests"].as_u64().unwrap_or(0) as usize;
    let section_chars: Vec<usize> = secs[..learned]
        .iter()
        .map(|s| s.text.chars().count())
        .collect();
    let tokens = token_counts(&a.model, &inputs);
    let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
    let mut out = json!({
        "model": MODEL, "dimensions": DIMS, "batch": BATCH,
        "sections": ingest["sections_stored"], "ingest": ingest,
        "lexical_only_rebuild_seconds": round(lex_s, 3),
        "rebuild_seconds": round(wall, 3),
        "vector_phase_seconds": vector_s.map(|s| round(s, 3)),
        "embed_call_seconds": round(embed_s, 3),
        "embed_calls": timed.calls.load(Ordering::Relaxed),
        "rebuild_process_cpu_seconds": round(cpu_s, 3),
        "vectors_per_process_cpu_second": (cpu_s > 0.0).then(|| round(embedded as f64 / cpu_s, 1)),
        "vectors_embedded": embedded, "vector_failures": failures,
        "stored_vectors": status.count,
        "sections_per_s": {
            "rebuild": per_s(wall),
            "vector_phase": vector_s.map(per_s),
            "embed_calls": per_s(embed_s),
        },
        "embedded_texts": inputs.len(),
        "mean_input_chars": round(mean(&chars), 1),
        "mean_section_chars": round(mean(&section_chars), 1),
        "what": "rebuild = lexical reindex + vector phase; vector phase = read sections, embed in \
                 batches of 64, one durable commit per batch; embed_calls = inside provider.embed",
    });
    match tokens {
        Ok((full, cut, truncated)) => {
            // Each batch runs padded to its longest input.
            let (mut padded, mut start) = (0usize, 0usize);
            for n in sizes {
                let b = &cut[start..start + n];
                padded += b.iter().max().copied().unwrap_or(0) * n;
                start += n;
            }
            let real: usize = cut.iter().sum();
            out["batch_tokens_padded_over_real"] =
                json!(round(padded as f64 / real.max(1) as f64, 2));
            out["mean_input_tokens"] = json!(round(mean(&full), 1));
            out["mean_input_tokens_after_cut"] = json!(round(mean(&cut), 1));
            out["inputs_cut_at_max_tokens"] = json!(truncated);
        }
        Err(e) => eprintln!("(no token counts: {e})"),
    }
    Ok(out)
}

/// Tokens of each input by the model's tokenizer (special tokens included), before and after
/// the provider's cut at `MAX_TOKENS`, and how many were cut.
fn token_counts(
    model: &Path,
    inputs: &[String],
) -> Result<(Vec<usize>, Vec<usize>, usize), BoxError> {
    let max = kbdb::embedding::onnx::MAX_TOKENS;
    let e = |e: tokenizers::Error| e.to_string();
    let mut tok = tokenizers::Tokenizer::from_file(model.join("tokenizer.json")).map_err(e)?;
    tok.with_padding(None);
    tok.with_truncation(None).map_err(e)?;
    let mut full = Vec::with_capacity(inputs.len());
    for t in inputs {
        full.push(tok.encode(t.as_str(), true).map_err(e)?.len());
    }
    let cut: Vec<usize> = full.iter().map(|&n| n.min(max)).collect();
    let truncated = full.iter().filter(|&&n| n > max).count();
    Ok((full, cut, truncated))
}

fn query_embedding(
    queries: &[Query],
    onnx: &OnnxProvider,
    repeat: usize,
) -> Result<Value, BoxError> {
    for q in queries.iter().take(10) {
        onnx.embed(&[q.text.trim().to_string()])?; // warm-up
    }
    let mut lat = Vec::with_capacity(queries.len() * repeat);
    let cpu0 = process_cpu_s();
    for _ in 0..repeat {
        for q in queries {
            let text = vec![q.text.trim().to_string()];
            let t = Instant::now();
            let v = onnx.embed(&text)?;
            lat.push(t.elapsed().as_secs_f64());
            if v.len() != 1 || v[0].len() != DIMS {
                return Err(format!("query {}: no {DIMS}-d vector", q.id).into());
            }
        }
    }
    let cpu_ms = (process_cpu_s() - cpu0) * 1000.0 / lat.len().max(1) as f64;
    Ok(json!({
        "model": MODEL, "queries": queries.len(), "timed_runs": lat.len(),
        "latency_ms": pct(&lat), "process_cpu_ms_mean": round(cpu_ms, 3),
        "what": "OnnxProvider::embed of one query text (tokenize + run + pool), one thread calling",
    }))
}

#[derive(Default)]
struct ModeStats {
    lat: Vec<f64>,
    /// CPU time of the process (all threads) per query.
    cpu: Vec<f64>,
    zero: usize,
    errors: usize,
    /// Responses of the first timed pass whose retrieval method was not the one asked.
    wrong_method: usize,
    warnings: usize,
    warning_examples: Vec<String>,
}

impl ModeStats {
    fn json(&self, method: &str) -> Value {
        json!({
            "retrieval_method": method, "latency_ms": pct(&self.lat), "timed_runs": self.lat.len(),
            "cpu_ms": pct(&self.cpu),
            "zero_hit_queries": self.zero, "query_errors": self.errors,
            "wrong_retrieval_method": self.wrong_method,
            "responses_with_warnings": self.warnings, "warning_examples": self.warning_examples,
        })
    }
}

fn scale(a: &Args, secs: &[Section], queries: &[Query]) -> Result<Value, BoxError> {
    let dir = a.db.join("scale");
    let (kb, ingest) = fresh_kb(&dir, secs, a.n)?;
    eprintln!("{}", json!({"scale_ingest": ingest}));
    kb.set_embedding_provider(Arc::new(Synthetic))?;
    let (r, rebuild_s, vector_s) = timed_rebuild(&kb)?;
    let st = kb.status()?.vectors;
    eprintln!(
        "synthetic rebuild: {} vectors in {rebuild_s:.1} s (vector phase {:.1} s); stored {}, pending {}, stale {}",
        r.vectors_embedded.unwrap_or(0),
        vector_s.unwrap_or(0.0),
        st.count,
        st.pending_changes,
        st.stale
    );
    if st.stale || st.count == 0 {
        return Err(format!(
            "after the synthetic rebuild: {} vectors, stale {}",
            st.count, st.stale
        )
        .into());
    }

    let qvecs: Vec<Vec<f32>> = queries
        .iter()
        .map(|q| Synthetic::vector(q.text.trim()))
        .collect();
    let req = |text: &str, mode: Option<&str>| {
        let mut q = SearchRequest::new(text);
        q.limit = Some(a.k);
        q.search_mode = mode.and_then(|m| kbdb::search::Retrieval::parse(m).ok().flatten());
        q
    };
    const MODES: [(&str, Option<&str>); 3] = [
        ("lexical", None),
        ("hybrid", Some("hybrid")),
        ("vector", Some("vector")),
    ];
    let search = |mode: Option<&str>, q: &Query, v: &[f32]| {
        let r = req(&q.text, mode);
        match mode {
            None => kb.search(&r),
            Some(_) => kb.search_with_query_vector(&r, Some(v)),
        }
    };
    let w0 = Instant::now();
    for (q, v) in queries.iter().zip(&qvecs) {
        for (_, mode) in MODES {
            search(mode, q, v)?; // warm-up (the first vector search loads the matrix)
        }
    }
    let warmup_s = w0.elapsed().as_secs_f64();
    let mut stats: [ModeStats; 3] = Default::default();
    for pass in 0..a.repeat {
        for (q, v) in queries.iter().zip(&qvecs) {
            for (i, (name, mode)) in MODES.into_iter().enumerate() {
                let c = cpu_s();
                let t = Instant::now();
                let r = search(mode, q, v);
                stats[i].lat.push(t.elapsed().as_secs_f64());
                stats[i].cpu.push(cpu_s() - c);
                if pass > 0 {
                    continue;
                }
                let s = &mut stats[i];
                match r {
                    Ok(r) => {
                        s.zero += r.items.is_empty() as usize;
                        s.wrong_method += (r.retrieval_method != name) as usize;
                        if !r.warnings.is_empty() {
                            s.warnings += 1;
                            if s.warning_examples.len() < 3 {
                                s.warning_examples.push(r.warnings.join("; "));
                            }
                        }
                    }
                    Err(e) => {
                        s.errors += 1;
                        eprintln!("{name} query {} failed: {e}", q.id);
                    }
                }
            }
        }
    }
    let st = kb.status()?;
    let v = &st.vectors;
    let scan = scan_alone(v.count as usize, &qvecs, a.repeat);
    let ratio = |i: usize, cpu: bool| {
        let p50 = |s: &ModeStats| {
            let xs = if cpu { &s.cpu } else { &s.lat };
            pct(xs)["p50"].as_f64().unwrap_or(0.0)
        };
        let lex = p50(&stats[0]);
        (lex > 0.0).then(|| round(p50(&stats[i]) / lex, 2))
    };
    let hybrid_ratio = ratio(1, false);
    let out = json!({
        "sections": a.n, "sections_stored": st.sections, "ingest": ingest,
        "provider": "synthetic-384",
        "rebuild_seconds": round(rebuild_s, 3),
        "rebuild_vector_phase_seconds": vector_s.map(|s| round(s, 3)),
        "vectors": v.count, "vectors_pending": v.pending_changes,
        "queries": queries.len(), "k": a.k, "repeat": a.repeat,
        "warmup_seconds": round(warmup_s, 3),
        "lexical": stats[0].json("lexical"),
        "hybrid": stats[1].json("hybrid"),
        "vector": stats[2].json("vector"),
        "scan_alone": scan,
        "hybrid_over_lexical_p50": hybrid_ratio,
        "vector_over_lexical_p50": ratio(2, false),
        "hybrid_over_lexical_cpu_p50": ratio(1, true),
        "vector_over_lexical_cpu_p50": ratio(2, true),
        "target": format!("hybrid p50 <= {TARGET_RATIO} x lexical p50"),
        "pass": hybrid_ratio.is_some_and(|r| r <= TARGET_RATIO),
        "memory": {
            "vector_matrix_bytes": v.memory_bytes,
            "bytes_per_vector": (v.count > 0).then(|| round(v.memory_bytes as f64 / v.count as f64, 1)),
            "raw_codes_bytes_per_vector": DIMS + 4,
            "what": "status().vectors.memory_bytes: i8 codes + f32 scale + kbid String + row map, per vector",
        },
        "rss_mb": rss_mb(),
        "database_bytes": st.database_bytes, "index_bytes": st.index_bytes,
    });
    drop(kb);
    remove_dir(&dir)?;
    Ok(out)
}

/// The matrix scan alone, for the breakdown: `VectorMatrix::top(query, FUSION_DEPTH)` with no
/// filter on a matrix of `rows` synthetic vectors built here (the call the vector path makes
/// before rescoring the head exactly and fusing), timed like the searches: as searches run it
/// at this size (`path`), with the sign-bit pass forced, and the exhaustive i8 scan
/// (`top_exhaustive`) each candidate pass is checked against.
fn scan_alone(rows: usize, qvecs: &[Vec<f32>], repeat: usize) -> Value {
    use kbdb::vectors::matrix::{NIBBLE_MIN_ROWS, PREFILTER_MIN_ROWS, VectorMatrix};
    let fill = |mut m: VectorMatrix| {
        for i in 0..rows {
            let kbid = format!("{i:016x}");
            m.upsert(&kbid, &Synthetic::vector(&kbid));
        }
        m
    };
    let depth = kbdb::search::FUSION_DEPTH;
    type Top<'a> = &'a dyn Fn(&[f32]) -> Vec<(String, f32)>;
    let time = |f: Top, repeat: usize| {
        for q in qvecs {
            std::hint::black_box(f(q)); // warm-up
        }
        let (mut lat, mut cpu) = (Vec::new(), Vec::new());
        for _ in 0..repeat {
            for q in qvecs {
                let c = cpu_s();
                let t = Instant::now();
                std::hint::black_box(f(q));
                lat.push(t.elapsed().as_secs_f64());
                cpu.push(cpu_s() - c);
            }
        }
        (lat, cpu)
    };
    // The share of the exhaustive scan's top `depth` that a candidate pass returns too.
    // Synthetic vectors are uniformly spread, the hard case for a pass (real embeddings cluster).
    let agreement = |m: &VectorMatrix| {
        let (mut same, mut total) = (0usize, 0usize);
        for q in qvecs {
            let fast: std::collections::HashSet<String> = m
                .top(q, depth, &mut |_| true)
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            let exact = m.top_exhaustive(q, depth, &mut |_| true);
            total += exact.len();
            same += exact.iter().filter(|(k, _)| fast.contains(k)).count();
        }
        round(same as f64 / total.max(1) as f64, 4)
    };
    let m = fill(VectorMatrix::new(DIMS));
    let path = if rows >= PREFILTER_MIN_ROWS {
        "sign-bit pass"
    } else if rows >= NIBBLE_MIN_ROWS {
        "4-bit pass"
    } else {
        "exhaustive i8"
    };
    let (lat, cpu) = time(&|q| m.top(q, depth, &mut |_| true), repeat);
    let agree = agreement(&m);
    let (exh_lat, exh_cpu) = time(&|q| m.top_exhaustive(q, depth, &mut |_| true), 1);
    drop(m);
    let m = fill(VectorMatrix::new(DIMS).with_sign_bit_pass_from(0));
    let (sign_lat, sign_cpu) = time(&|q| m.top(q, depth, &mut |_| true), 1);
    let sign_agree = agreement(&m);
    json!({
        "rows": rows, "depth": depth, "path": path,
        "latency_ms": pct(&lat), "cpu_ms": pct(&cpu), "agreement_with_exhaustive": agree,
        "four_bit_pass_in_searches_from_rows": NIBBLE_MIN_ROWS,
        "sign_bit_pass_in_searches_from_rows": PREFILTER_MIN_ROWS,
        "sign_bit_forced": {
            "latency_ms": pct(&sign_lat), "cpu_ms": pct(&sign_cpu),
            "agreement_with_exhaustive": sign_agree,
        },
        "exhaustive_latency_ms": pct(&exh_lat), "exhaustive_cpu_ms": pct(&exh_cpu),
        "what": "VectorMatrix::top(query, FUSION_DEPTH) on an in-memory matrix of synthetic \
                 vectors: the candidate pass searches run at this size (path), the i8 scoring \
                 of its candidates and selecting the head; the rest of a vector search is \
                 filters, exact rescoring of the head and fusion. sign_bit_forced = the same \
                 with the sign-bit pass at any size, once per query; exhaustive = every row by \
                 its i8 codes (top_exhaustive), once per query",
    })
}

fn run(a: &Args) -> Result<Value, BoxError> {
    let load_start = loadavg();
    let queries = read_queries(&a.queries)?;
    if queries.is_empty() {
        return Err(format!("{}: no queries", a.queries.display()).into());
    }
    if a.scan_only {
        let qvecs: Vec<Vec<f32>> = queries
            .iter()
            .map(|q| Synthetic::vector(q.text.trim()))
            .collect();
        return Ok(json!({
            "bench": "hybrid --scan-only", "loadavg_start": load_start,
            "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
            "scan_alone": scan_alone(a.n, &qvecs, a.repeat), "loadavg_end": loadavg(),
        }));
    }
    let t = Instant::now();
    let secs = read_sections(&a.sections)?;
    eprintln!(
        "read {} sections from {} in {:.1} s; {} queries",
        secs.len(),
        a.sections.display(),
        t.elapsed().as_secs_f64(),
        queries.len()
    );
    let lib = a.model.join(if cfg!(target_os = "macos") {
        "libonnxruntime.dylib"
    } else {
        "libonnxruntime.so"
    });
    let onnx = Arc::new(OnnxProvider::new(&a.model, Some(&lib), MODEL, DIMS, BATCH)?);
    fs::create_dir_all(&a.db)?;

    let mut res = json!({
        "system": "kbdb", "kbdb": env!("CARGO_PKG_VERSION"), "bench": "hybrid",
        "loadavg_start": load_start,
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "sections_file": a.sections.display().to_string(),
        "queries_file": a.queries.display().to_string(),
        "model_dir": a.model.display().to_string(),
        "n": a.n, "embed_sample": a.embed_sample, "k": a.k, "repeat": a.repeat,
    });
    if a.embed_sample > 0 {
        eprintln!(
            "embedding throughput: {} sections, real model",
            a.embed_sample
        );
        res["embedding"] = throughput(a, &secs, &onnx)?;
        eprintln!("{}", json!({"embedding": res["embedding"]}));
    }
    eprintln!("query embedding: {} queries × {}", queries.len(), a.repeat);
    res["query_embedding"] = query_embedding(&queries, &onnx, a.repeat)?;
    eprintln!("{}", json!({"query_embedding": res["query_embedding"]}));
    eprintln!("latency at scale: {} sections", a.n);
    drop(onnx);
    res["search"] = scale(a, &secs, &queries)?;
    res["loadavg_end"] = loadavg();
    // The parent folder is ours only when it is empty now.
    let _ = fs::remove_dir(&a.db);
    Ok(res)
}

// ---- output ----

fn table(r: &Value) -> String {
    let f = |v: &Value| match v {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    let lat = |m: &Value| {
        format!(
            "p50 {} / p99 {} / mean {} ms",
            f(&m["latency_ms"]["p50"]),
            f(&m["latency_ms"]["p99"]),
            f(&m["latency_ms"]["mean"])
        )
    };
    let mut rows: Vec<(String, String)> = Vec::new();
    let mut row = |k: &str, v: String| rows.push((k.to_string(), v));
    row("sections file", f(&r["sections_file"]));
    let e = &r["embedding"];
    if !e.is_null() {
        row(
            "embedding throughput (real model, rebuild)",
            format!(
                "{} sections/s in the vector phase ({} vectors in {} s); {} sections/s inside provider.embed ({} s); {} sections/s over the whole rebuild ({} s, lexical reindex included; lexical-only rebuild {} s)",
                f(&e["sections_per_s"]["vector_phase"]),
                f(&e["vectors_embedded"]),
                f(&e["vector_phase_seconds"]),
                f(&e["sections_per_s"]["embed_calls"]),
                f(&e["embed_call_seconds"]),
                f(&e["sections_per_s"]["rebuild"]),
                f(&e["rebuild_seconds"]),
                f(&e["lexical_only_rebuild_seconds"]),
            ),
        );
        row(
            "embedding sample",
            format!(
                "{} distinct sections (first {} lines), {} ({}-d, batch {}); failures {}; process CPU {} s for the rebuild = {} vectors per CPU-second",
                f(&e["sections"]),
                f(&e["ingest"]["requests"]),
                f(&e["model"]),
                f(&e["dimensions"]),
                f(&e["batch"]),
                f(&e["vector_failures"]),
                f(&e["rebuild_process_cpu_seconds"]),
                f(&e["vectors_per_process_cpu_second"]),
            ),
        );
        row(
            "embedded input length (mean)",
            format!(
                "{} chars (section text {} chars); {} tokens, {} after the cut at 256 ({} of {} inputs cut); tokens run with the padding of each batch to its longest / tokens: {}",
                f(&e["mean_input_chars"]),
                f(&e["mean_section_chars"]),
                f(&e["mean_input_tokens"]),
                f(&e["mean_input_tokens_after_cut"]),
                f(&e["inputs_cut_at_max_tokens"]),
                f(&e["embedded_texts"]),
                f(&e["batch_tokens_padded_over_real"]),
            ),
        );
    }
    let q = &r["query_embedding"];
    row(
        "query embedding (real model, excluded below)",
        format!(
            "{}, {} timings; process CPU mean {} ms",
            lat(q),
            f(&q["timed_runs"]),
            f(&q["process_cpu_ms_mean"])
        ),
    );
    let s = &r["search"];
    row(
        "sections searched (stored / --n)",
        format!("{} / {}", f(&s["sections_stored"]), f(&s["sections"])),
    );
    row(
        "ingest (learn_many + flush_index)",
        format!(
            "{} requests (first lines of the file) in {} s ({} requests/s)",
            f(&s["ingest"]["requests"]),
            f(&s["ingest"]["seconds"]),
            f(&s["ingest"]["requests_per_s"])
        ),
    );
    row(
        "vectors (synthetic-384) rebuild",
        format!(
            "{} vectors; rebuild {} s (vector phase {} s)",
            f(&s["vectors"]),
            f(&s["rebuild_seconds"]),
            f(&s["rebuild_vector_phase_seconds"]),
        ),
    );
    for mode in ["lexical", "hybrid", "vector"] {
        let m = &s[mode];
        row(
            &format!("{mode} search latency (k={})", f(&s["k"])),
            format!(
                "{}; CPU (all threads) p50 {} / p99 {} ms; {} timings; zero-hit {}, errors {}, wrong method {}, with warnings {}",
                lat(m),
                f(&m["cpu_ms"]["p50"]),
                f(&m["cpu_ms"]["p99"]),
                f(&m["timed_runs"]),
                f(&m["zero_hit_queries"]),
                f(&m["query_errors"]),
                f(&m["wrong_retrieval_method"]),
                f(&m["responses_with_warnings"]),
            ),
        );
    }
    let sc = &s["scan_alone"];
    row(
        "the matrix scan alone (as searches run it at this size; sign-bit pass forced; exhaustive i8)",
        format!(
            "{} rows, depth {}, {}: {}; CPU (all threads) p50 {} / p99 {} ms; agreement with the exhaustive i8 scan {} | sign-bit pass forced: p50 {} ms, CPU {} ms, agreement {} | exhaustive: p50 {} ms, CPU {} ms",
            f(&sc["rows"]),
            f(&sc["depth"]),
            f(&sc["path"]),
            lat(sc),
            f(&sc["cpu_ms"]["p50"]),
            f(&sc["cpu_ms"]["p99"]),
            f(&sc["agreement_with_exhaustive"]),
            f(&sc["sign_bit_forced"]["latency_ms"]["p50"]),
            f(&sc["sign_bit_forced"]["cpu_ms"]["p50"]),
            f(&sc["sign_bit_forced"]["agreement_with_exhaustive"]),
            f(&sc["exhaustive_latency_ms"]["p50"]),
            f(&sc["exhaustive_cpu_ms"]["p50"]),
        ),
    );
    row(
        "hybrid p50 / lexical p50",
        format!(
            "{} (target ≤ {TARGET_RATIO}: {})",
            f(&s["hybrid_over_lexical_p50"]),
            if s["pass"].as_bool() == Some(true) {
                "PASS"
            } else {
                "FAIL"
            }
        ),
    );
    row(
        "hybrid / lexical p50 of CPU time (all threads; less load-dependent)",
        f(&s["hybrid_over_lexical_cpu_p50"]),
    );
    row(
        "vector / lexical p50 (wall; CPU)",
        format!(
            "{}; {}",
            f(&s["vector_over_lexical_p50"]),
            f(&s["vector_over_lexical_cpu_p50"])
        ),
    );
    let m = &s["memory"];
    row(
        "vector matrix memory",
        format!(
            "{:.1} MB, {} bytes/vector (raw i8 codes + scale: {})",
            m["vector_matrix_bytes"].as_f64().unwrap_or(0.0) / 1e6,
            f(&m["bytes_per_vector"]),
            f(&m["raw_codes_bytes_per_vector"]),
        ),
    );
    row(
        "RSS MB (peak / now)",
        format!("{} / {}", f(&s["rss_mb"]["hwm"]), f(&s["rss_mb"]["rss"])),
    );
    row(
        "load average start → end",
        format!("{} → {}", f(&r["loadavg_start"]), f(&r["loadavg_end"])),
    );
    let mut out =
        String::from("## kbdb hybrid search benchmark\n\n| metric | value |\n|---|---|\n");
    for (k, v) in rows {
        out.push_str(&format!("| {k} | {v} |\n"));
    }
    out
}

// ---- measurement helpers (as in benches/search.rs) ----

/// Percentiles in ms (nearest rank).
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

/// CPU time of the whole process in seconds (`CLOCK_PROCESS_CPUTIME_ID`: exact, all threads —
/// a vector scan runs on every core), unlike the tick-granular `/proc` counters.
fn cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// CPU time of the whole process (user + system, all threads, ONNX Runtime's pool included) in
/// seconds.
fn process_cpu_s() -> f64 {
    // SAFETY: an all-zero `rusage` is valid; getrusage only writes into it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
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

fn remove_dir(dir: &Path) -> std::io::Result<()> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
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
    if !args.scan_only {
        print!("{}", table(&res));
    }
    println!("\n```json\n{text}\n```");
    ExitCode::SUCCESS
}
