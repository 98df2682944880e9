#!/usr/bin/env bash
# Maintenance at scale: learn ~100k real sections, then time check, export, import, gc and
# rebuild on them, and print a table.
#
#   tools/bench-maintenance.sh [D]
#
# D (default /tmp/kbdb-bench) holds the corpora (fetched by tools/bench-search.sh); the sections
# are the jdk, python, pg15 and (the start of the) rust corpora split by the shared rule
# (../shared/bench/sections.py): the first 150 000 non-empty sections, ~100k distinct contents. Builds the release binary (honours CARGO_TARGET_DIR).
set -euo pipefail

D=${1:-/tmp/kbdb-bench}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
K=${KBDB_BENCH_KIT:-$ROOT/../shared/bench}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
(cd "$ROOT" && cargo build --release --quiet)
BIN=$TARGET/release/kbdb
W=$(mktemp -d /tmp/kbdb-maint.XXXXXX)
export KBDB_RUNTIME_DIR=$W/run
cleanup() {
  "$BIN" --db "$W/kb" daemon stop >/dev/null 2>&1 || true
  "$BIN" --db "$W/kb2" daemon stop >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT

JSONL=$D/maintenance-sections-150k.jsonl
if [[ ! -s $JSONL ]]; then
  for c in devdocs/jdk devdocs/python pg15 devdocs/rust; do
    python3 "$K/sections.py" dump "$D/$c"
  done | python3 -c '
import json, sys
n = 0
for line in sys.stdin:
    s = json.loads(line)
    text = (("#" * s["level"] + " " + s["title"] + "\n\n") if s["level"] else "") + s["body"]
    if not text.strip() or n >= 150000:
        continue  # read everything anyway: the producer must not see a closed pipe
    n += 1
    print(json.dumps({"content": text, "title": s["title"] or None, "docid": s["doc"][:250]}))
' > "$JSONL"
fi

t() { # label, command...: run, print "label<TAB>seconds<TAB>exit code" (check exits 7 on findings)
  local label=$1; shift
  local s e rc=0
  s=$(date +%s.%N)
  "$@" > "$W/last.json" || rc=$?
  e=$(date +%s.%N)
  printf '%s\t%.2f\t%s\n' "$label" "$(echo "$e - $s" | bc)" "$rc"
}

{
  echo -e "step\tseconds\texit"
  t "learn --jsonl ($(wc -l < "$JSONL") lines)" "$BIN" --db "$W/kb" learn --jsonl --format json < "$JSONL"
  "$BIN" --db "$W/kb" search warmup --format json > /dev/null
  t "check" "$BIN" --db "$W/kb" check --format json
  t "export" "$BIN" --db "$W/kb" export "$W/out" --format json
  t "export --with-indexes" "$BIN" --db "$W/kb" export "$W/out2" --with-indexes --format json
  t "import (new database)" "$BIN" --db "$W/kb2" import "$W/out" --format json
  t "gc (nothing to collect)" "$BIN" --db "$W/kb" gc --format json
  t "rebuild" "$BIN" --db "$W/kb" rebuild --format json
} | column -t -s $'\t'
"$BIN" --db "$W/kb" status
"$BIN" --db "$W/kb" check --format json | python3 -c 'import json,sys; r=json.load(sys.stdin); import collections; print("check ok:", r["ok"], "sections:", r["sections_checked"], "references:", r["references_checked"], "errors:", dict(collections.Counter(e["type"] for e in r["errors"])), "warnings:", len(r["warnings"]))' || true
