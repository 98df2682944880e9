#!/usr/bin/env bash
# The write-back race harness: an editor saves a synced file over and over (write a temporary
# file, rename it over) while kbdb edits the same document, for SECS seconds; counts the saves
# kbdb replaced without taking them in (docs/reliability.md has the figures).
#
#   tools/race-writeback.sh [SECS]     # default 120
#
# Prints one JSON line: saves, lost_saves (and which), kbdb_edits, kbdb_conflicts,
# conflict_copies. Exits non-zero when a save was lost.
set -euo pipefail
cd "$(dirname "$0")/.."
RACE_SECS="${1:-120}" exec cargo test --test sync -- --ignored --exact race_writeback_lost_saves \
    --nocapture
