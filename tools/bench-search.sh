#!/usr/bin/env bash
# Lexical search benchmark: kbdb vs the SQLite FTS5 baseline, back to back in one run.
#
#   tools/bench-search.sh [D] [--repeats N] [--with-devdocs]
#
# D (default /tmp/kbdb-bench) holds the corpora, query sets, eval set and results; the bench kit
# (../shared/bench from the project root, or $KBDB_BENCH_KIT) is only read. Steps:
#   1. fetch the corpora if missing (get-corpora.sh D all; several minutes the first time),
#      build the latency query sets, the python-genindex eval set and the section dumps;
#   2. build the bench once (cargo bench --bench search --no-run; honours CARGO_TARGET_DIR);
#   3. for each corpus (python eval set, pg15, and devdocs with --with-devdocs) run the FTS5
#      baseline and kbdb back to back, N times (default 1), alternating which goes first;
#      FTS5 title weight 2 (quality only; deterministic) once per corpus python;
#   4. score kbdb's TREC runs with score_run.py (merged into its result JSON as "quality"),
#      print summarize.py's table and the kbdb/FTS5 ratios (median over the repeats).
# Results: D/results/<timestamp>/ (JSON per run, kbdb stdout tables, run files, summary.md,
# ratios.md, env.txt). See docs/performance.md.
set -euo pipefail

D=/tmp/kbdb-bench
REPEATS=1
DEVDOCS=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --repeats) REPEATS=${2:?--repeats needs a number}; shift 2 ;;
    --repeats=*) REPEATS=${1#*=}; shift ;;
    --with-devdocs) DEVDOCS=1; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) D=$1; shift ;;
  esac
done
[[ $REPEATS =~ ^[1-9][0-9]*$ ]] || { echo "--repeats: not a positive number: $REPEATS" >&2; exit 2; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
K=${KBDB_BENCH_KIT:-$ROOT/../shared/bench}
K=$(cd "$K" && pwd)
mkdir -p "$D"
D=$(cd "$D" && pwd)
Q=$D/queries
E=$D/eval/python-genindex
S=$D/sections
W=$D/work
export PYTHONDONTWRITEBYTECODE=1
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# ---- 1. inputs (each built only when missing) ----
if [[ ! -d $D/pg15 || ! -d $D/devdocs/python || ! -d $D/devdocs/rust || ! -d $D/devdocs/jdk ]]; then
  log "fetching corpora into $D (get-corpora.sh; several minutes)"
  "$K/get-corpora.sh" "$D" all
fi
mkdir -p "$Q" "$S" "$W"
declare -A QSHA=(
  [pg15]=587e995dbc993530cf0af7a2d50419c68d9d5ffa6553520301ad78a64a427ea6
  [devdocs]=5195ddedeab3511c0fc8d437e7e7dd499e8a298709360427c4e7dcb2f617e358
  [python]=a199250fd4492c374bad3efe7228e98c2a5407fd66e19c775ac50b38bb7446c4
)
declare -A CORPUS=([pg15]=$D/pg15 [devdocs]=$D/devdocs [python]=$D/devdocs/python)
CORPORA=(python pg15)
[[ $DEVDOCS == 1 ]] && CORPORA+=(devdocs)
for c in "${CORPORA[@]}"; do
  if [[ ! -s $Q/$c.jsonl ]]; then
    log "building latency queries $Q/$c.jsonl"
    python3 "$K/make-queries.py" "${CORPUS[$c]}" --n 300 --seed 42 > "$Q/$c.jsonl.tmp"
    mv "$Q/$c.jsonl.tmp" "$Q/$c.jsonl"
  fi
  got=$(sha256sum "$Q/$c.jsonl" | cut -d' ' -f1)
  [[ $got == "${QSHA[$c]}" ]] || log "WARNING: $Q/$c.jsonl sha256 $got differs from the README's (different corpus version?)"
  if [[ ! -s $S/$c.jsonl ]]; then
    log "dumping sections $S/$c.jsonl"
    python3 "$K/sections.py" dump "${CORPUS[$c]}" > "$S/$c.jsonl.tmp"
    mv "$S/$c.jsonl.tmp" "$S/$c.jsonl"
  fi
done
if [[ ! -s $E/qrels.tsv ]]; then
  log "building the python-genindex eval set in $E"
  python3 "$K/make-eval-pyindex.py" "$D/devdocs/python" "$E"
fi
# kbdb ingests the sections.py dump of devdocs/python (it has heading levels); it must hold
# exactly the sections of the eval set's docs.jsonl, which FTS5 ingests.
python3 - "$S/python.jsonl" "$E/docs.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["id"] for l in open(p, encoding="utf-8")] for p in sys.argv[1:])
if a != b:
    sys.exit("section ids of %s and %s differ (%d vs %d)" % (sys.argv[1], sys.argv[2], len(a), len(b)))
PY

# ---- 2. build the bench once ----
log "building the bench (cargo bench --bench search --no-run)"
BIN=$(cd "$ROOT" && cargo bench --bench search --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
exe = [m["executable"] for m in map(json.loads, sys.stdin)
       if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "search"
       and m.get("executable")]
print(exe[-1] if exe else "")')
if [[ -z $BIN || ! -x $BIN ]]; then
  (cd "$ROOT" && cargo bench --bench search --no-run)   # show the build error
  echo "could not build the search bench" >&2
  exit 1
fi

# ---- 3. the runs ----
R=$D/results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$R"
{
  echo "date: $(date -Is)"
  echo "kbdb: $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?') ($(cd "$ROOT" && git status --short 2>/dev/null | wc -l) changed files in the working tree)"
  echo "bench binary: $BIN"
  echo "machine: $(uname -srm), $(nproc) cpus, $(python3 -c 'import sqlite3; print("sqlite", sqlite3.sqlite_version)'), $(python3 --version)"
  echo "corpora: $(cut -f1,2 "$D/MANIFEST.tsv" 2>/dev/null | tr '\t\n' '= ')"
  echo "repeats: $REPEATS; corpora: ${CORPORA[*]}"
} > "$R/env.txt"
cat "$R/env.txt" >&2

run_fts5() {  # corpus i
  local c=$1 i=$2
  log "FTS5 $c #$i"
  case $c in
    python)
      python3 "$K/baseline_fts5.py" --eval "$E" --queries "$Q/python.jsonl" \
        --out "$R/fts5-python-$i.json" --run-out "$R/fts5-python-$i.run" > /dev/null ;;
    pg15)
      python3 "$K/baseline_fts5.py" --corpus "$D/pg15" --queries "$Q/pg15.jsonl" \
        --out "$R/fts5-pg15-$i.json" > /dev/null ;;
    devdocs)
      python3 "$K/baseline_fts5.py" --corpus "$D/devdocs" --queries "$Q/devdocs.jsonl" \
        --durable-limit 20000 --out "$R/fts5-devdocs-$i.json" > /dev/null ;;
  esac
}

run_kbdb() {  # corpus i
  local c=$1 i=$2 durable=all extra=()
  log "kbdb $c #$i"
  [[ $c == devdocs ]] && durable=20000
  [[ $c == python ]] && extra=(--eval-queries "$E/queries.jsonl" --run-out "$R/kbdb-python-$i.run")
  "$BIN" --sections "$S/$c.jsonl" --db "$W/kbdb-$c" --queries "$Q/$c.jsonl" \
    --durable-limit "$durable" "${extra[@]}" --out "$R/kbdb-$c-$i.json" > "$R/kbdb-$c-$i.txt"
  rm -rf "$W/kbdb-$c"
  cat "$R/kbdb-$c-$i.txt" >&2
  if [[ $c == python ]]; then
    python3 "$K/score_run.py" "$E" "$R/kbdb-python-$i.run" > "$R/kbdb-python-$i.score"
    python3 - "$R/kbdb-python-$i.json" "$R/kbdb-python-$i.score" <<'PY'
import json, sys
res, score = (json.load(open(p)) for p in sys.argv[1:])
res["quality"] = score
json.dump(res, open(sys.argv[1], "w"), indent=1)
print("kbdb quality: nDCG@10 %(ndcg@10)s R@10 %(recall@10)s MRR@10 %(mrr@10)s" % score["all"], file=sys.stderr)
PY
  fi
}

for i in $(seq 1 "$REPEATS"); do
  for c in "${CORPORA[@]}"; do
    if (( i % 2 == 1 )); then run_fts5 "$c" "$i"; run_kbdb "$c" "$i"
    else run_kbdb "$c" "$i"; run_fts5 "$c" "$i"; fi
  done
done
log "FTS5 title weight 2 (python quality)"
python3 "$K/baseline_fts5.py" --eval "$E" --durable-limit 0 --title-weight 2 \
  --out "$R/fts5t2-python.json" > /dev/null

# ---- 4. summary ----
python3 "$K/summarize.py" "$R"/*.json > "$R/summary.md"
python3 - "$R" "$REPEATS" "${CORPORA[@]}" > "$R/ratios.md" <<'PY'
import json, os, statistics, sys
R, n, corpora = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def get(d, *path):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d

def load(name):
    p = os.path.join(R, name + ".json")
    return json.load(open(p)) if os.path.exists(p) else None

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None

def fmt(x, nd=3):
    return "-" if x is None else ("%.*f" % (nd, x)).rstrip("0").rstrip(".") if isinstance(x, float) else str(x)

METRICS = [  # label, path, higher is better
    ("bulk ingest sections/s", ("ingest_bulk", "sections_per_s"), True),
    ("durable ingest sections/s", ("ingest_durable", "sections_per_s"), True),
    ("query p50 ms", ("latency", "latency_ms", "p50"), False),
    ("query p99 ms", ("latency", "latency_ms", "p99"), False),
    ("query mean ms", ("latency", "latency_ms", "mean"), False),
    ("query cpu mean ms", ("latency", "cpu_ms", "mean"), False),
]
print("kbdb / FTS5, median over %d repeat(s); for sections/s > 1 means kbdb is faster, "
      "for ms < 1 means kbdb is faster\n" % n)
print("| corpus | metric | kbdb | FTS5 | kbdb / FTS5 | load (FTS5 run start) |")
print("|---|---|---|---|---|---|")
for c in corpora:
    runs = [(load("kbdb-%s-%d" % (c, i)), load("fts5-%s-%d" % (c, i))) for i in range(1, n + 1)]
    runs = [(k, f) for k, f in runs if k and f]
    if not runs:
        continue
    secs = {get(k, "sections") for k, _ in runs} | {get(f, "sections") for _, f in runs}
    load_ = ", ".join(fmt((get(f, "loadavg_start") or [None])[0], 2) for _, f in runs)
    for label, path, _ in METRICS:
        kv = [get(k, *path) for k, _ in runs]
        fv = [get(f, *path) for _, f in runs]
        ratios = [a / b for a, b in zip(kv, fv) if a is not None and b]
        print("| %s | %s | %s | %s | %s | %s |" % (c, label, fmt(med(kv)), fmt(med(fv)),
              fmt(med(ratios)), load_))
    print("| %s | sections (kbdb / FTS5) | %s | | | |" % (c, " / ".join(map(str, sorted(secs, key=str)))))
    if c == "python":
        t2 = load("fts5t2-python")
        for label, ref in (("nDCG@10 vs FTS5 title weight 2", get(t2, "quality", "all", "ndcg@10")),
                           ("nDCG@10 vs FTS5 OR", med([get(f, "quality", "all", "ndcg@10") for _, f in runs])),
                           ("term nDCG@10 vs FTS5 title weight 2", get(t2, "quality", "term", "ndcg@10"))):
            key = "term" if label.startswith("term") else "all"
            kv = med([get(k, "quality", key, "ndcg@10") for k, _ in runs])
            print("| python | %s | %s | %s | %s | |" % (label, fmt(kv, 4), fmt(ref, 4),
                  fmt(kv / ref if kv is not None and ref else None)))
PY
echo
echo "## summarize.py ($R)"
cat "$R/summary.md"
echo
echo "## ratios"
cat "$R/ratios.md"
log "results in $R"
