#!/usr/bin/env python3
"""Retrieval quality of kbdb's lexical, vector and hybrid search per relevance set.

Usage: bench_quality.py --kbdb BIN --model DIR [--sets A,B] [--out DIR] [--k 10]
                        [--max-queries 500] [--seed 42] [--embed-timeout 3600] [--keep]

Run by tools/bench-quality.sh (which finds the binary and the model); see its --help.

A relevance set is a folder with sections.jsonl (one section per line: "id", "title" and
"content" or "body"), queries.jsonl ("id" and "query" or "text") and qrels.tsv (TREC:
"qid 0 section_id grade"). --sets takes names of folders under bench/ of the project,
"python-genindex" (the kit's set at $BENCH_DIR/eval/python-genindex, default
/tmp/kbdb-bench), or paths; default: every set under bench/, plus python-genindex when it is
present. A set with more than --max-queries judged queries is sampled to that many with a
fixed --seed (0 = no sampling).

For each set: a fresh database in a temporary folder, [embedding] configured for the onnx model
in worker.toml, every section learned with `kbdb learn --jsonl` ({"content": "# title\\n\\n
content", "title", "source": id}; kbids mapped back to ids from the result lines), a wait until
`kbdb status` shows vectors.pending_changes == 0, then every query in each mode (`kbdb search
QUERY --mode lexical|vector|hybrid --limit k --format json`, one call per query: the daemon
keeps the model loaded). Metrics are those of the kit's score_run.py / baseline_fts5.py:
nDCG@k (gain = qrel grade, log2 discount, ideal = the best k judged grades) and recall@k,
averaged over the judged queries; a query whose search fails scores 0.

Writes into --out: SET.MODE.run (TREC run files: "qid Q0 section_id rank score kbdb-MODE"),
results.json (with, per query, the rank of the first relevant section in each mode, null when
not in the top k: which queries fusion wins or loses) and table.md; prints the markdown table (set | queries | lexical nDCG@k / R@k |
vector | hybrid | hybrid - best leg, in nDCG points). Standard library only.
"""
import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("lexical", "vector", "hybrid")


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_qrels(path):
    qrels = {}
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) >= 4 and float(p[3]) > 0:
                qrels.setdefault(p[0], {})[p[2]] = float(p[3])
    return qrels


def metrics(ranked, rel, k):
    """(nDCG@k, recall@k) for one query, as baseline_fts5.metrics."""
    ranked = ranked[:k]
    dcg = sum(rel.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked))
    ideal = sorted(rel.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg, sum(d in rel for d in ranked) / len(rel)


def resolve_sets(spec):
    bench = os.path.join(ROOT, "bench")
    kit = os.path.join(os.environ.get("BENCH_DIR", "/tmp/kbdb-bench"), "eval",
                       "python-genindex")
    if spec:
        names = [s for s in spec.split(",") if s]
    else:
        names = sorted(d for d in os.listdir(bench)
                       if os.path.isfile(os.path.join(bench, d, "qrels.tsv")))
        if os.path.isfile(os.path.join(kit, "qrels.tsv")):
            names.append("python-genindex")
    out = []
    for n in names:
        if os.path.isdir(n):
            path = n
        elif n == "python-genindex":
            path = kit
        else:
            path = os.path.join(bench, n)
        name = os.path.basename(os.path.normpath(path))
        # The kit's sets name their sections docs.jsonl.
        sec = "docs.jsonl" if os.path.isfile(os.path.join(path, "docs.jsonl")) \
            and not os.path.isfile(os.path.join(path, "sections.jsonl")) else "sections.jsonl"
        for f in (sec, "queries.jsonl", "qrels.tsv"):
            if not os.path.isfile(os.path.join(path, f)):
                sys.exit("set %s: missing %s" % (n, os.path.join(path, f)))
        out.append((name, path, os.path.join(path, sec)))
    return out


class Kbdb:
    def __init__(self, binary, db):
        self.binary, self.db = binary, db

    def run(self, args, stdin=None, check=True):
        p = subprocess.run([self.binary, "--db", self.db] + args, input=stdin,
                           capture_output=True, text=True)
        if check and p.returncode != 0:
            raise RuntimeError("kbdb %s: exit %d: %s%s" % (" ".join(args[:2]), p.returncode,
                                                           p.stdout[-500:], p.stderr[-500:]))
        return p


def learn(kb, sections):
    lines = []
    for s in sections:
        title = s.get("title") or ""
        body = s.get("content", s.get("body", ""))
        content = ("# %s\n\n%s" % (title, body)) if title else body
        lines.append(json.dumps({"content": content, "title": title or s["id"],
                                 "source": s["id"]}, ensure_ascii=False))
    p = kb.run(["learn", "--jsonl", "--format", "json"], stdin="\n".join(lines) + "\n")
    results = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    if len(results) != len(sections):
        raise RuntimeError("learn answered %d lines for %d sections" %
                           (len(results), len(sections)))
    kbid_ids = {}
    for s, r in zip(sections, results):
        if "kbid" not in r:
            raise RuntimeError("learn refused section %s: %s" % (s["id"], r))
        kbid_ids.setdefault(r["kbid"], []).append(s["id"])
    return kbid_ids


def wait_for_vectors(kb, timeout):
    start, last = time.time(), None
    while True:
        p = kb.run(["status", "--format", "json"], check=False)
        try:
            v = json.loads(p.stdout).get("vectors") or {}
        except ValueError:
            v = {}
        pending = v.get("pending_changes")
        if pending == 0 and v.get("count", 0) > 0:
            return v
        if v.get("stale"):
            raise RuntimeError("vectors are stale: %s" % v)
        if pending != last:
            log("  embedding: %s pending, %s embedded, failures %s" %
                (pending, v.get("count"), v.get("failures")))
            last = pending
        if time.time() - start > timeout:
            raise RuntimeError("embedding not done after %ds: %s" % (timeout, v))
        time.sleep(3)


def search(kb, query, mode, k):
    p = kb.run(["search", "--mode", mode, "--limit", str(k), "--format", "json", "--", query],
               check=False)
    try:
        out = json.loads(p.stdout)
    except ValueError:
        out = None
    if p.returncode != 0 or not isinstance(out, dict) or "items" not in out:
        return None, (p.stdout + p.stderr).strip()[:300]
    return out, None


def run_set(args, name, path, sec_path, out_dir):
    sections = read_jsonl(sec_path)
    qrels = read_qrels(os.path.join(path, "qrels.tsv"))
    queries = [(q["id"], q.get("query", q.get("text")))
               for q in read_jsonl(os.path.join(path, "queries.jsonl"))]
    queries = [(i, t) for i, t in queries if i in qrels and t]
    sampled = False
    if args.max_queries and len(queries) > args.max_queries:
        queries = random.Random(args.seed).sample(queries, args.max_queries)
        queries.sort()
        sampled = True
    log("%s: %d sections, %d queries%s" % (name, len(sections), len(queries),
                                            " (sampled, seed %d)" % args.seed if sampled else ""))
    tmp = tempfile.mkdtemp(prefix="kbdb-quality-%s-" % name)
    db = os.path.join(tmp, "db")
    kb = Kbdb(args.kbdb, db)
    try:
        kb.run(["init"])
        with open(os.path.join(db, "worker.toml"), "w") as f:
            f.write('[embedding]\nprovider = "onnx"\nmodel_path = "%s"\n'
                    'runtime_library = "%s"\n'
                    % (args.model, os.path.join(args.model, "libonnxruntime.so")))
        t0 = time.time()
        kbid_ids = learn(kb, sections)
        log("  learned in %.1fs (%d distinct kbids)" % (time.time() - t0, len(kbid_ids)))
        t0 = time.time()
        vec = wait_for_vectors(kb, args.embed_timeout)
        embed_s = time.time() - t0
        log("  embedded %s sections in %.0fs" % (vec.get("count"), embed_s))
        res = {"set": name, "sections": len(sections), "queries": len(queries),
               "sampled": sampled, "embed_seconds": round(embed_s, 1), "modes": {},
               "first_relevant_rank": {qid: {} for qid, _ in queries}}
        for mode in MODES:
            t0 = time.time()
            nd, rc, errors, warnings = [], [], 0, set()
            with open(os.path.join(out_dir, "%s.%s.run" % (name, mode)), "w") as run:
                for qid, text in queries:
                    out, err = search(kb, text, mode, args.k)
                    rel = qrels[qid]
                    if out is None:
                        errors += 1
                        if errors <= 3:
                            log("  %s %s failed: %s" % (mode, qid, err))
                        nd.append(0.0); rc.append(0.0)
                        res["first_relevant_rank"][qid][mode] = None
                        continue
                    if out.get("retrieval_method") not in (None, mode):
                        warnings.add("retrieval_method %s" % out.get("retrieval_method"))
                    ranked = []
                    for it in out["items"]:
                        ids = kbid_ids.get(it.get("kbid"), ["?" + str(it.get("kbid"))])
                        sid = next((i for i in ids if i in rel), ids[0])
                        if sid in ranked:
                            continue
                        ranked.append(sid)
                        run.write("%s Q0 %s %d %s kbdb-%s\n" % (qid, sid, len(ranked),
                                                              it.get("score", 0), mode))
                    res["first_relevant_rank"][qid][mode] = next(
                        (i + 1 for i, d in enumerate(ranked) if d in rel), None)
                    n, r = metrics(ranked, rel, args.k)
                    nd.append(n); rc.append(r)
            m = {"ndcg": sum(nd) / len(nd) if nd else 0.0,
                 "recall": sum(rc) / len(rc) if rc else 0.0,
                 "errors": errors, "seconds": round(time.time() - t0, 1),
                 "warnings": sorted(warnings)}
            res["modes"][mode] = m
            log("  %-7s nDCG@%d %.3f  R@%d %.3f  (%.0fs, %d errors)" %
                (mode, args.k, m["ndcg"], args.k, m["recall"], m["seconds"], errors))
        return res
    finally:
        kb.run(["daemon", "stop"], check=False)
        if args.keep:
            log("  kept the database at %s" % db)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def table(results, k):
    rows = ["| set | queries | lexical nDCG@%d / R@%d | vector nDCG@%d / R@%d | "
            "hybrid nDCG@%d / R@%d | hybrid − best leg (nDCG) |" % ((k,) * 6),
            "|---|---:|---:|---:|---:|---:|"]
    for r in results:
        if "error" in r:
            rows.append("| %s | – | failed: %s | | | |" % (r["set"], r["error"][:80]))
            continue
        m = r["modes"]
        cell = lambda x: "%.3f / %.3f" % (m[x]["ndcg"], m[x]["recall"])  # noqa: E731
        best = max(m["lexical"]["ndcg"], m["vector"]["ndcg"])
        q = "%d%s" % (r["queries"], " (sample)" if r["sampled"] else "")
        rows.append("| %s | %s | %s | %s | %s | %+.3f |" % (
            r["set"], q, cell("lexical"), cell("vector"), cell("hybrid"),
            m["hybrid"]["ndcg"] - best))
    return "\n".join(rows) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kbdb", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--sets", default="")
    ap.add_argument("--out", default="")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--max-queries", type=int, default=500)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--embed-timeout", type=int, default=3600)
    ap.add_argument("--keep", action="store_true", help="keep the databases")
    args = ap.parse_args()
    args.kbdb = os.path.abspath(args.kbdb)
    args.model = os.path.abspath(args.model)
    out_dir = args.out or tempfile.mkdtemp(prefix="kbdb-quality-out-")
    os.makedirs(out_dir, exist_ok=True)
    results = []
    for name, path, sec in resolve_sets(args.sets):
        try:
            results.append(run_set(args, name, path, sec, out_dir))
        except (RuntimeError, OSError) as e:
            log("%s failed: %s" % (name, e))
            results.append({"set": name, "error": str(e)})
    md = table(results, args.k)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"kbdb": args.kbdb, "model": args.model, "k": args.k,
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "results": results}, f, indent=1)
    with open(os.path.join(out_dir, "table.md"), "w") as f:
        f.write(md)
    print(md, end="")
    log("results in %s" % out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
