#!/usr/bin/env bash
# A durable writer beside a bulk load through the same daemon: how long the writer's
# acknowledgements wait while the load's batches share the daemon's one writer.
#
#   tools/bench-daemon-fairness.sh KBDB BULK_JSONL DURABLE_JSONL [--lines 1000] [--offset 0] [--runs 1]
#
# Per run, on a fresh database in a temporary folder: the daemon is started (one warm-up
# write), `KBDB learn --jsonl < BULK_JSONL` runs in the background, and 0.3 s later
# `tools/bench_scale_drive.py durable` writes LINES lines of DURABLE_JSONL from OFFSET one at a
# time (each acknowledged before the next). Prints one line per run: the load's wall time, the
# durable writes a second and their latency (p50/p90/p99/max/mean ms). Alternate builds run by
# run to compare them (this machine is noisy). Example (docs/performance.md, "Bulk through the
# daemon"):
#
#   tools/bench-daemon-fairness.sh target/release/kbdb /tmp/kbdb-scale/s100000/learn.jsonl \
#       /tmp/kbdb-scale/s300000/learn.jsonl --lines 1000 --offset 200000 --runs 3
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,19p "$0"; exit 2; }
kbdb=$(realpath "$1"); bulk=$2; durable=$3; shift 3
lines=1000; offset=0; runs=1
while [ $# -gt 0 ]; do
  case $1 in
    --lines) lines=$2; shift 2 ;;
    --offset) offset=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
for run in $(seq "$runs"); do
  db=$(mktemp -d)
  echo '{"content":"warm-up"}' | "$kbdb" --db "$db" learn --jsonl > /dev/null 2>&1
  start=$(date +%s.%N)
  ( "$kbdb" --db "$db" learn --jsonl < "$bulk" > /dev/null; echo "$(date +%s.%N)" > "$db.end" ) &
  load=$!
  sleep 0.3
  result=$(python3 "$here/bench_scale_drive.py" durable "$kbdb" "$db" "$durable" \
    --writers 1 --lines "$lines" --offset "$offset")
  wait "$load"
  python3 - "$start" "$(cat "$db.end")" "$result" "$run" <<'PY'
import json, sys
start, end, result, run = float(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
w = result["write_ms"]
print(f"run {run}: bulk load {end - start:.2f} s; durable writer {result['sections_per_s']} writes/s, "
      f"p50 {w['p50']} p90 {w['p90']} p99 {w['p99']} max {w['max']} mean {w['mean']} ms")
PY
  "$kbdb" --db "$db" daemon stop > /dev/null 2>&1 || true
  rm -rf "$db" "$db.end"
done
