#!/usr/bin/env bash
# Scale benchmark (issue 32): kbdb and SQLite FTS5 side by side at 100k / 300k / 1M sections.
#
#   tools/bench-scale.sh [--sizes 100000,300000,1000000] [--kbdb BIN] [--out DIR] [--src DIR]
#                        [--sync-max N] [--durable N] [--rounds R] [--keep] [--no-inprocess]
#
# For each size N (smallest first), in one run:
#   0. the corpus: tools/make-scale-corpus.py SRC /tmp/kbdb-scale/sN --sections N (built once,
#      reused: deterministic), i.e. a Markdown folder md/, its learn.jsonl and queries.jsonl;
#   1. FTS5: ../shared/bench/baseline_fts5.py --corpus md --queries queries.jsonl under
#      /usr/bin/time -v (bulk load time and sections/s, its db size, peak RSS of the python
#      process — which holds every section in memory —, query p50/p99 in process);
#      with --durable N also its durable single-section commits over the first N sections;
#   2. kbdb learn --jsonl --embedded < learn.jsonl under /usr/bin/time -v (wall, peak RSS),
#      the database folder's size (du), the error lines (must be 0);
#   3. open: `kbdb --embedded status` on the closed database (wall, peak RSS; page cache warm);
#   4. daemon: first search starts it; its RSS after that search, then the query set through
#      the CLI (1 warm-up + 3 passes, tools/bench_scale_drive.py latency: end-to-end process
#      wall time), its RSS and peak RSS after serving them;
#   5. kbdb sync md into a fresh database (--embedded, /usr/bin/time -v) when N <= --sync-max
#      (default 300000), and learn --jsonl into a fresh database through the daemon that the
#      client starts (the path without --embedded; the client's wall time and RSS);
#   6. with --durable N (default 10000 at the smallest size only, 0 = off): one acknowledged
#      write at a time through the daemon (1 writer, N lines) and 8 concurrent writers
#      (N lines in all), then 1 writer in a process of its own (`--embedded`, N lines), each
#      into a fresh database (tools/bench_scale_drive.py durable); then the same in process on
#      both sides, `Kb::learn` from 1 and 8 threads against FTS5's own durable ingest
#      (`cargo bench --bench durable`, built from this checkout; --no-inprocess skips it);
#   7. with --rounds R (default 1): R-1 more rounds of the two bulk loads alone, alternated
#      (FTS5's without its queries or durable run, then kbdb's into a fresh database), so that
#      the report gives each side's median and the range of the per-round ratios: on a noisy
#      machine one round's ratio moves by ±20 %;
#   each timed write step starts after `sync` and a second's pause (the previous step's
#   writeback out of the way); then the databases of that size are deleted (unless --keep).
# tools/bench-scale-report.py prints the Markdown table (kbdb, FTS5, kbdb/FTS5 per size).
# Results: OUT (default /tmp/kbdb-scale/results/<timestamp>): one JSON per step, env.txt,
# report.md. BIN defaults to /work/bin/kbdb if present, else target/release/kbdb (built).
set -euo pipefail

SIZES=100000,300000,1000000
BIN=
OUT=
SRC=/tmp/kbdb-bench/devdocs
SYNC_MAX=300000
DURABLE=10000
ROUNDS=1
KEEP=0
INPROCESS=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --sizes) SIZES=$2; shift 2 ;;
    --kbdb) BIN=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --src) SRC=$2; shift 2 ;;
    --sync-max) SYNC_MAX=$2; shift 2 ;;
    --durable) DURABLE=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --no-inprocess) INPROCESS=0; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
K=${KBDB_BENCH_KIT:-$ROOT/../shared/bench}
K=$(cd "$K" && pwd)
export PYTHONDONTWRITEBYTECODE=1
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# Before each timed write step: the previous step's dirty pages go to the disk first, so that
# one step's writeback does not slow the next one's fsyncs.
settle() { sync; sleep 1; }
if [[ -z $BIN ]]; then
  if [[ -x /work/bin/kbdb ]]; then BIN=/work/bin/kbdb
  else
    (cd "$ROOT" && cargo build --release --quiet)
    BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/kbdb
  fi
fi
BIN=$(readlink -f "$BIN")
[[ -x /usr/bin/time ]] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
[[ -d $SRC ]] || { echo "no corpus $SRC (../shared/bench/get-corpora.sh /tmp/kbdb-bench devdocs)" >&2; exit 1; }
G=/tmp/kbdb-scale
OUT=${OUT:-$G/results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d /tmp/kbdb-scale-work.XXXXXX)
export KBDB_RUNTIME_DIR=$W/run
mkdir -p "$KBDB_RUNTIME_DIR"; chmod 700 "$KBDB_RUNTIME_DIR"
cleanup() {
  for d in "$W"/*/; do "$BIN" --db "$d" daemon stop >/dev/null 2>&1 || true; done
  if [[ $KEEP == 1 ]]; then echo "kept the databases in $W" >&2; else rm -rf "$W"; fi
}
trap cleanup EXIT

{
  echo "date: $(date -Is)"
  echo "kbdb binary: $BIN ($(cat "$BIN.commit" 2>/dev/null || cat "$(dirname "$BIN")/kbdb.commit" 2>/dev/null || echo 'commit unknown'))"
  echo "tools: $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "machine: $(uname -srm), $(nproc) cpus, $(free -m | awk '/Mem:/{print $2}') MB RAM, $(python3 -c 'import sqlite3; print("sqlite", sqlite3.sqlite_version)'), $(python3 --version)"
  echo "disk: $(df -h /tmp | tail -1)"
  echo "sizes: $SIZES; sync-max $SYNC_MAX; durable $DURABLE; rounds $ROUNDS"
} > "$OUT/env.txt"
cat "$OUT/env.txt" >&2

timev() {  # out.time cmd...: run under /usr/bin/time -v, stdout to the caller
  local t=$1; shift
  /usr/bin/time -v -o "$t" "$@"
}
tv_json() {  # file.time -> {"wall_s","max_rss_mb","user_s","sys_s"}
  python3 - "$1" <<'PY'
import json, re, sys
t = open(sys.argv[1]).read()
def g(pat):
    m = re.search(pat, t)
    return m.group(1) if m else None
w = g(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)")
s = 0.0
for part in w.split(":"):
    s = s * 60 + float(part)
print(json.dumps({"wall_s": round(s, 2), "max_rss_mb": round(int(g(r"Maximum resident set size \(kbytes\): (\d+)")) / 1024, 1),
                  "user_s": float(g(r"User time \(seconds\): ([\d.]+)")), "sys_s": float(g(r"System time \(seconds\): ([\d.]+)"))}))
PY
}
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
first=1
IFS=, read -r -a SZ <<< "$SIZES"
for n in "${SZ[@]}"; do
  C=$G/s$n
  if [[ ! -s $C/build.json ]]; then
    log "generating the $n-section corpus in $C"
    rm -rf "$C"
    python3 "$ROOT/tools/make-scale-corpus.py" "$SRC" "$C" --sections "$n" --kit "$K"
  fi
  secs=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sections"])' "$C/build.json")
  P=$OUT/s$n
  mkdir -p "$P"
  echo "{\"size\": $n, \"sections\": $secs, \"loadavg_start\": \"$(loadavg)\"}" > "$P/meta.json"

  # 1. FTS5
  dur=0; [[ $first == 1 ]] && dur=$DURABLE
  settle
  log "s$n: FTS5 (durable $dur)"
  timev "$P/fts5.time" python3 "$K/baseline_fts5.py" --corpus "$C/md" --queries "$C/queries.jsonl" \
    --durable-limit "$dur" --out "$P/fts5.json" > /dev/null 2> "$P/fts5.err" || { cat "$P/fts5.err" >&2; exit 1; }
  tv_json "$P/fts5.time" > "$P/fts5-proc.json"

  # 2. kbdb learn --jsonl --embedded
  DB=$W/kb$n
  settle
  log "s$n: kbdb learn --jsonl --embedded ($secs lines; load $(loadavg))"
  timev "$P/learn.time" "$BIN" --db "$DB" --embedded --format json learn --jsonl < "$C/learn.jsonl" > "$W/learn.out" 2> "$P/learn.err" || true
  tv_json "$P/learn.time" > "$P/learn-proc.json"
  python3 - "$W/learn.out" "$DB" "$secs" > "$P/learn.json" <<'PY'
import json, os, subprocess, sys
out, db, secs = sys.argv[1], sys.argv[2], int(sys.argv[3])
lines = errors = 0
first_err = None
for l in open(out, encoding="utf-8"):
    lines += 1
    # result lines are AddSectionResult objects or {"error": {code, message}}: a key, not text
    if "error" in json.loads(l):
        errors += 1
        first_err = first_err or l.strip()[:300]
du = int(subprocess.run(["du", "-sb", db], capture_output=True, text=True).stdout.split()[0])
# the blocks the files take: redb grows its file by regions and leaves pages it has not used yet
# unwritten (holes), so its file size overstates what it holds on disk
alloc = int(subprocess.run(["du", "-s", "--block-size=1", db], capture_output=True, text=True).stdout.split()[0])
files, parts_alloc = {}, {}
for dp, _, fns in os.walk(db):
    for fn in fns:
        p = os.path.join(dp, fn)
        rel = os.path.relpath(p, db).split(os.sep)[0]
        files[rel] = files.get(rel, 0) + os.path.getsize(p)
        parts_alloc[rel] = parts_alloc.get(rel, 0) + os.stat(p).st_blocks * 512
print(json.dumps({"lines_in": secs, "result_lines": lines, "errors": errors, "first_error": first_err,
                  "db_bytes": du, "db_alloc_bytes": alloc, "db_parts": files, "db_parts_alloc": parts_alloc}))
PY
  cat "$P/learn.json" >&2

  # 3. open time (cold process, warm page cache)
  log "s$n: open (kbdb --embedded status)"
  timev "$P/open.time" "$BIN" --db "$DB" --embedded --format json status > "$P/status.json" 2> "$P/open.err" || cat "$P/open.err" >&2
  tv_json "$P/open.time" > "$P/open-proc.json"

  # 4. daemon: first search, RSS, warm latency through the CLI
  log "s$n: daemon first search + query set"
  s0=$(date +%s.%N)
  "$BIN" --db "$DB" --format json search --limit 10 -- warmup > /dev/null 2> "$P/first-search.err" || cat "$P/first-search.err" >&2
  s1=$(date +%s.%N)
  pid=$("$BIN" --db "$DB" --format json daemon status | python3 -c 'import json,sys; print(json.load(sys.stdin)["daemon"]["pid"])')
  rss_open=$(python3 "$ROOT/tools/bench_scale_drive.py" rss "$pid")
  python3 "$ROOT/tools/bench_scale_drive.py" latency "$BIN" "$DB" "$C/queries.jsonl" > "$P/latency.json"
  rss_served=$(python3 "$ROOT/tools/bench_scale_drive.py" rss "$pid")
  echo "{\"first_search_s\": $(python3 -c "print(round($s1 - $s0, 3))"), \"after_open\": $rss_open, \"after_queries\": $rss_served}" > "$P/daemon.json"
  cat "$P/daemon.json" "$P/latency.json" >&2
  "$BIN" --db "$DB" daemon stop > /dev/null 2>&1 || true

  # 5. sync of the folder
  if (( n <= SYNC_MAX )); then
    settle
    log "s$n: kbdb sync --embedded (load $(loadavg))"
    # sync does not create a database (learn and import do): init it first
    "$BIN" --db "$W/sync$n" --embedded init > /dev/null 2> "$P/sync.err" || cat "$P/sync.err" >&2
    timev "$P/sync.time" "$BIN" --db "$W/sync$n" --embedded --format json sync "$C/md" > "$P/sync-report.json" 2> "$P/sync.err" || cat "$P/sync.err" >&2
    tv_json "$P/sync.time" > "$P/sync-proc.json"
    echo "{\"db_bytes\": $(du -sb "$W/sync$n" | cut -f1)}" > "$P/sync.json"
    rm -rf "$W/sync$n"
  fi

  # 5b. learn --jsonl through the daemon: the default path (the client starts the daemon)
  if (( n <= SYNC_MAX )); then
    settle
    log "s$n: kbdb learn --jsonl through the daemon (load $(loadavg))"
    "$BIN" --db "$W/viad$n" --embedded init > /dev/null 2> "$P/learn-daemon.err" || cat "$P/learn-daemon.err" >&2
    timev "$P/learn-daemon.time" "$BIN" --db "$W/viad$n" --format json learn --jsonl < "$C/learn.jsonl" > "$W/learn-daemon.out" 2> "$P/learn-daemon.err" || true
    tv_json "$P/learn-daemon.time" > "$P/learn-daemon-proc.json"
    python3 -c 'import json,sys; ls=[json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]; print(json.dumps({"result_lines": len(ls), "errors": sum("error" in l for l in ls)}))' "$W/learn-daemon.out" > "$P/learn-daemon.json"
    "$BIN" --db "$W/viad$n" daemon stop > /dev/null 2>&1 || true
    rm -rf "$W/viad$n" "$W/learn-daemon.out"
  fi

  # 6. durable writes through the daemon
  if (( dur > 0 )); then
    settle
    log "s$n: durable ingest, 1 writer then 8 writers then 1 embedded writer ($dur lines each run)"
    python3 "$ROOT/tools/bench_scale_drive.py" durable "$BIN" "$W/dur1" "$C/learn.jsonl" --writers 1 --lines "$dur" > "$P/durable1.json"
    "$BIN" --db "$W/dur1" daemon stop > /dev/null 2>&1 || true
    python3 "$ROOT/tools/bench_scale_drive.py" durable "$BIN" "$W/dur8" "$C/learn.jsonl" --writers 8 --lines "$dur" > "$P/durable8.json"
    "$BIN" --db "$W/dur8" daemon stop > /dev/null 2>&1 || true
    "$BIN" --db "$W/dure" init > /dev/null
    python3 "$ROOT/tools/bench_scale_drive.py" durable "$BIN" "$W/dure" "$C/learn.jsonl" --writers 1 --lines "$dur" --embedded > "$P/durable-embedded.json"
    cat "$P/durable1.json" "$P/durable8.json" "$P/durable-embedded.json" >&2
    rm -rf "$W/dur1" "$W/dur8" "$W/dure"
    # The same in process on both sides: `Kb::learn` from 1 and 8 threads against FTS5's own
    # durable ingest, one round (benches/durable.rs; built from this checkout, not BIN).
    if [[ $INPROCESS == 1 ]]; then
      settle
      log "s$n: durable ingest in process (cargo bench --bench durable, $dur lines, 1 and 8 threads)"
      (cd "$ROOT" && cargo bench --quiet --bench durable -- --jsonl "$C/learn.jsonl" --lines "$dur" \
        --rounds 1 --writers 1,8 --json "$P/durable-inprocess.json") > "$P/durable-inprocess.txt" 2>&1 \
        || log "s$n: the in-process durable bench failed: $P/durable-inprocess.txt"
    fi
  fi
  # 7. more rounds of the two bulk loads, alternated (round 1 is steps 1 and 2)
  for ((r = 2; r <= ROUNDS; r++)); do
    settle
    log "s$n: round $r/$ROUNDS: FTS5 bulk load (load $(loadavg))"
    python3 "$K/baseline_fts5.py" --corpus "$C/md" --durable-limit 0 --out "$P/fts5-r$r.json" \
      > /dev/null 2> "$P/fts5-r$r.err" || { cat "$P/fts5-r$r.err" >&2; exit 1; }
    settle
    log "s$n: round $r/$ROUNDS: kbdb learn --jsonl --embedded (load $(loadavg))"
    timev "$P/learn-r$r.time" "$BIN" --db "$W/round$n" --embedded --format json learn --jsonl \
      < "$C/learn.jsonl" > /dev/null 2> "$P/learn-r$r.err" || true
    tv_json "$P/learn-r$r.time" > "$P/learn-proc-r$r.json"
    rm -rf "$W/round$n"
  done
  python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); m["loadavg_end"]=sys.argv[2]; json.dump(m, open(sys.argv[1],"w"))' "$P/meta.json" "$(loadavg)"
  [[ $KEEP == 1 ]] || rm -rf "$DB"
  first=0
done
python3 "$ROOT/tools/bench-scale-report.py" "$OUT" | tee "$OUT/report.md"
log "results in $OUT"
