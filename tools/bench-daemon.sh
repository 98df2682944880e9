#!/usr/bin/env bash
# Daemon write throughput: kbdb's worker daemon with 1, 8 and 32 concurrent writers (group
# commit, every write acknowledged only once durable) next to SQLite FTS5 single durable
# commits (python3 sqlite3, synchronous=FULL: WAL, rollback journal, and WAL with 8 contending
# writer processes), all measured in one run.
#
#   tools/bench-daemon.sh [--secs N] [--warmup S] [--writers 1,8,32] [--rounds N] [--tmp DIR]
#                         [--fts5-writers 8] [--python python3] [--out FILE] [--sections FILE]
#
# Steps: 1. build the release binary (cargo build --release; honours CARGO_TARGET_DIR);
#        2. run the bench (cargo bench --bench daemon -- --kbdb TARGET/release/kbdb ARGS).
# Each configuration gets a fresh database in a temporary folder (--tmp DIR, default the
# system temp folder: put it on the file system you want to measure), --warmup seconds
# (default 1) unmeasured, then --secs seconds (default 5); about a minute in all, times
# --rounds (default 1: the interleaved sequence once; with N, medians, see benches/daemon.rs). Prints a
# markdown table (config | writers | writes/s | p50 ms | p99 ms | errors), the kbdb / FTS5
# ratios and PASS/FAIL lines for the targets (>= 100 writes/s with 8 writers; >= 2x the best
# FTS5 durable single-writer commit rate). OUT=FILE (or --out FILE) also writes the results as
# JSON. --sections FILE takes the writes' contents from a `sections.py dump` of a real corpus
# (sections with 240-700-byte bodies) instead of the generated pool. Exit status 1 when a run
# fails or stored counts differ from the acknowledged writes (a missed target alone does not
# change it). Needs python3 with FTS5 in its sqlite3 module.
set -euo pipefail

case ${1:-} in
  -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
esac

ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [[ -n ${CARGO_TARGET_DIR:-} ]]; then
  mkdir -p "$CARGO_TARGET_DIR"
  CARGO_TARGET_DIR=$(cd "$CARGO_TARGET_DIR" && pwd)   # absolute: we change folder below
  export CARGO_TARGET_DIR
fi
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
cd "$ROOT"
cargo build --release --quiet
exec cargo bench --quiet --bench daemon -- --kbdb "$TARGET/release/kbdb" "$@"
