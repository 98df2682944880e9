#!/usr/bin/env bash
# The crash harness at a large count (docs/reliability.md): N SIGKILLs of the worker daemon at
# random moments while writers drive learn, learn_many, --jsonl, --split documents, appends,
# replaces and unlearns, and gc / rebuild / export, through it; after each kill a client starts
# a new daemon and the harness verifies that every acknowledged write is there with its
# checksum, that no unanswered write is half there, that check is ok and that the lexical index
# agrees with the store.
#
#   tools/crash-test.sh [N] [--seed S] [--max-ms MS] [--skip OPS]
#
# N: kills of a running daemon (default 1000; start-up kills come on top). --seed: the random
# seed (default: the clock; printed, so a run can be repeated as far as timing allows).
# --max-ms: the longest wait before a kill (default 250; one round in 8 waits up to 4x that).
# --skip: maintenance operations to leave out of the mix, comma-separated (gc,rebuild,export).
#
# Builds tests/crash_harness.rs in release mode (honours CARGO_TARGET_DIR), runs it with
# KBDB_CRASH_KILLS=N and prints the date, the load, the command, progress lines and the summary
# `kills K, acknowledged writes A, lost L, divergences D`. Exit status 1 when anything was
# lost, diverged or failed. `cargo test` runs the same test at 15 kills (debug build).
set -euo pipefail

case ${1:-} in
  -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
esac

KILLS=1000
if [[ ${1:-} =~ ^[0-9]+$ ]]; then KILLS=$1; shift; fi
while [[ $# -gt 0 ]]; do
  case $1 in
    --seed) export KBDB_CRASH_SEED=$2; shift 2 ;;
    --max-ms) export KBDB_CRASH_MAX_MS=$2; shift 2 ;;
    --skip) export KBDB_CRASH_SKIP=$2; shift 2 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

cd "$(dirname "$0")/.."
echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "load:    $(uptime)"
echo "machine: $(nproc) cores, $(uname -sr)"
echo "commit:  $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
echo "command: tools/crash-test.sh $KILLS${KBDB_CRASH_SEED:+ --seed $KBDB_CRASH_SEED}${KBDB_CRASH_MAX_MS:+ --max-ms $KBDB_CRASH_MAX_MS}${KBDB_CRASH_SKIP:+ --skip $KBDB_CRASH_SKIP}"

cargo test --release --test crash_harness --no-run
start=$(date +%s)
status=0
KBDB_CRASH_KILLS=$KILLS KBDB_CRASH_VERBOSE=1 \
  cargo test --release --test crash_harness -- --nocapture --test-threads 1 || status=$?
echo "elapsed: $(( $(date +%s) - start )) s; load after: $(uptime)"
[[ $status -eq 0 ]] || exit 1
