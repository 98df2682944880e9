#!/usr/bin/env bash
# Damage sweep (docs/reliability.md): N times, a copy of a small database gets K random bytes of
# its kbdb.redb changed, then ten CLI calls go through its daemon (status, searches, retrieve,
# recall, content, learn, unlearn, docs, check). Counts what a damaged page does to the daemon:
#
#   panics      "panicked" lines in the daemon's log (each one a request or thread that hit a bug
#               path in redb or kbdb)
#   deaths      daemons that started and ended without logging their stop (killed by a panic
#               or an abort; a client then started another one)
#   lost        CLI calls that lost their daemon connection mid-request
#   start_fail  rounds where no daemon could start at all (the damage refused at open: expected)
#   answered    CLI calls that got an answer (success or an error)
#
#   tools/damage-sweep.sh [N] [--bytes K] [--seed S] [--keep]
#
# N: rounds (default 50). K: bytes changed per round (default 16). The kbdb binary is
# $KBDB_BIN, else target/debug/kbdb (build it first: cargo build). --keep leaves the work folder
# (printed) for a look at the damaged databases and their logs.
set -euo pipefail

case ${1:-} in
  -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
esac

N=50
BYTES=16
SEED=$(date +%s)
KEEP=0
if [[ ${1:-} =~ ^[0-9]+$ ]]; then N=$1; shift; fi
while [[ $# -gt 0 ]]; do
  case $1 in
    --bytes) BYTES=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

cd "$(dirname "$0")/.."
K=${KBDB_BIN:-$PWD/target/debug/kbdb}
[[ -x $K ]] || { echo "no kbdb binary at $K (cargo build, or set KBDB_BIN)" >&2; exit 2; }
WORK=$(mktemp -d /tmp/kbdb-damage.XXXXXX)
cleanup() {
  for d in "$WORK"/run*/; do
    [[ -d $d ]] || continue
    for db in "$WORK"/db*; do KBDB_RUNTIME_DIR=$d "$K" --db "$db" daemon stop >/dev/null 2>&1 || true; done
  done
  [[ $KEEP == 1 ]] && echo "kept: $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
unset KBDB_DIR KBDB_EMBEDDED KBDB_LOG
export KBDB_DAEMON_IDLE_SECS=30 KBDB_REQUEST_TIMEOUT_SECS=20

echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "commit:  $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
echo "command: tools/damage-sweep.sh $N --bytes $BYTES --seed $SEED"

# The template: 300 sections (a few in documents), the daemon stopped (journal checkpointed).
TPL=$WORK/template
export KBDB_RUNTIME_DIR=$WORK/run-template
"$K" --db "$TPL" init >/dev/null
for i in $(seq 1 300); do
  if (( i % 10 == 0 )); then doc=",\"docid\":\"doc/$((i % 7))\""; else doc=""; fi
  echo "{\"content\":\"# Fact $i\\n\\nfact number $i about widgets and gears, part $((i * 7919 % 1000))\",\"tags\":[\"t$((i % 5))\"]$doc}"
done | "$K" --db "$TPL" learn --jsonl --format json >"$WORK/learned.jsonl"
mapfile -t KBIDS < <(jq -r 'select(.kbid) | .kbid' "$WORK/learned.jsonl")
"$K" --db "$TPL" daemon stop >/dev/null
SIZE=$(stat -c %s "$TPL/kbdb.redb")
echo "template: ${#KBIDS[@]} sections, kbdb.redb $SIZE bytes"

panics=0 deaths=0 lost=0 start_fail=0 answered=0 calls=0
for round in $(seq 1 "$N"); do
  DB=$WORK/db$round
  export KBDB_RUNTIME_DIR=$WORK/run$round
  cp -a "$TPL" "$DB"
  rm -f "$DB/daemon.log"
  python3 - "$DB/kbdb.redb" "$BYTES" "$((SEED + round))" <<'EOF'
import random, sys
path, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
with open(path, "r+b") as f:
    data = bytearray(f.read())
    for _ in range(n):
        at = rng.randrange(len(data))
        data[at] ^= rng.randrange(1, 256)
    f.seek(0)
    f.write(data)
EOF
  k1=${KBIDS[$((round % ${#KBIDS[@]}))]}
  k2=${KBIDS[$(((round * 7) % ${#KBIDS[@]}))]}
  k3=${KBIDS[$(((round * 13) % ${#KBIDS[@]}))]}
  round_lost=0
  for c in "status" "search widgets" "retrieve --kbid $k1" "recall $k2" "content $k2" \
           "learn fresh-fact-$round" "unlearn $k3" "docs" "search gears" "check"; do
    calls=$((calls + 1))
    # shellcheck disable=SC2086
    if out=$(timeout 60 "$K" --db "$DB" $c 2>&1 >/dev/null); then :; fi
    if grep -qE "lost the connection|stopped before answering|did not answer" <<<"$out"; then
      lost=$((lost + 1)); round_lost=1
    else
      answered=$((answered + 1))
    fi
  done
  "$K" --db "$DB" daemon stop >/dev/null 2>&1 || true
  touch "$DB/daemon.log"
  # Every daemon that started and did not log its stop died (a clean stop, the idle stop or
  # the `daemon stop` above, logs "daemon stopped").
  starts=$(grep -c "daemon started" "$DB/daemon.log" || true)
  stops=$(grep -c "daemon stopped" "$DB/daemon.log" || true)
  p=$(grep -c "panicked" "$DB/daemon.log" || true)
  panics=$((panics + p))
  if [[ $starts -eq 0 ]]; then
    start_fail=$((start_fail + 1))
  elif [[ $starts -gt $stops ]]; then
    deaths=$((deaths + starts - stops))
  fi
  printf "round %3d: starts %d stops %d panics %d lost %d\n" "$round" "$starts" "$stops" "$p" "$round_lost"
  [[ $KEEP == 1 ]] || { rm -rf "$DB"; }
done
echo "rounds $N, calls $calls, answered $answered, lost $lost, panics $panics, daemon deaths $deaths, start failures $start_fail"
