#!/usr/bin/env bash
# Damage sweep (docs/reliability.md): N times, a copy of a small database gets K random bytes of
# its kbdb.redb changed, then CLI calls go through its daemon: reads (status, two searches,
# retrieve, recall, content, docs, an export), `check`, writes (learn, unlearn), `check` again.
# Counts what a damaged page does to the daemon, and whether `check` reports what a user sees:
#
#   panics      "panicked" lines in the daemon's log (each one a request or thread that hit a bug
#               path in redb or kbdb)
#   deaths      daemons that started and ended without logging their stop (killed by a panic
#               or an abort; a client then started another one)
#   lost        CLI calls that lost their daemon connection mid-request
#   start_fail  rounds where no daemon could start at all (the damage refused at open: expected)
#   answered    CLI calls that got an answer (success or an error)
#   observed    rounds where a user could see the damage: a read failed or answered otherwise than
#               the same read of an undamaged copy (exit code or JSON output; elapsed times
#               aside), or the export's sections and documents differ from the undamaged one's
#   reported    rounds where `check --format json` (the first one, before the writes) reported
#               damage: exit 7 (errors listed) or 9 (a `damaged` error)
#   unreported  observed rounds that check did not report: damage check must learn to find
#
#   tools/damage-sweep.sh [N] [--bytes K] [--seed S] [--keep]
#
# N: rounds (default 50). K: bytes changed per round (default 16). The kbdb binary is
# $KBDB_BIN, else target/debug/kbdb (build it first: cargo build). --keep leaves the work folder
# (printed) for a look at the damaged databases, their logs and each call's output
# (calls/<n>.out, .err, .rc; the undamaged answers in ref/).
set -euo pipefail

case ${1:-} in
  -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
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
REF=$WORK/ref
DB=
cleanup() {
  KBDB_RUNTIME_DIR=$WORK/run-ref "$K" --db "$REF" daemon stop >/dev/null 2>&1 || true
  if [[ -n $DB ]]; then "$K" --db "$DB" daemon stop >/dev/null 2>&1 || true; fi
  if [[ $KEEP == 1 ]]; then echo "kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
unset KBDB_DIR KBDB_EMBEDDED KBDB_LOG
export KBDB_DAEMON_IDLE_SECS=30 KBDB_REQUEST_TIMEOUT_SECS=20

echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "commit:  $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
echo "command: tools/damage-sweep.sh $N --bytes $BYTES --seed $SEED"

# The template: 300 sections (a few in documents), the daemon stopped (journal checkpointed).
# Its export is what each damaged copy's export is compared with.
TPL=$WORK/template
export KBDB_RUNTIME_DIR=$WORK/run-template
"$K" --db "$TPL" init >/dev/null
for i in $(seq 1 300); do
  if (( i % 10 == 0 )); then doc=",\"docid\":\"doc/$((i % 7))\""; else doc=""; fi
  echo "{\"content\":\"# Fact $i\\n\\nfact number $i about widgets and gears, part $((i * 7919 % 1000))\",\"tags\":[\"t$((i % 5))\"]$doc}"
done | "$K" --db "$TPL" learn --jsonl --format json >"$WORK/learned.jsonl"
mapfile -t KBIDS < <(jq -r 'select(.kbid) | .kbid' "$WORK/learned.jsonl")
"$K" --db "$TPL" export "$WORK/export-ref" >/dev/null
"$K" --db "$TPL" daemon stop >/dev/null
SIZE=$(stat -c %s "$TPL/kbdb.redb")
echo "template: ${#KBIDS[@]} sections, kbdb.redb $SIZE bytes"
# An undamaged copy, served all along: how each round's reads should be answered.
cp -a "$TPL" "$REF"

# One CLI call on $CALL_DB: `call DIR NAME ARGS...` leaves DIR/NAME.out (the JSON answer with
# its elapsed times removed, else what was printed), DIR/NAME.err and DIR/NAME.rc.
call() {
  local dir=$1 name=$2 rc=0
  shift 2
  timeout 60 "$K" --db "$CALL_DB" --format json "$@" >"$dir/$name.raw" 2>"$dir/$name.err" || rc=$?
  echo "$rc" >"$dir/$name.rc"
  jq -S 'walk(if type == "object" then del(.elapsed_ms) else . end)' "$dir/$name.raw" \
    >"$dir/$name.out" 2>/dev/null || cp "$dir/$name.raw" "$dir/$name.out"
  rm -f "$dir/$name.raw"
}
# Whether two exports hold the same sections, documents and catalog (its date aside).
same_export() {
  [[ -d $2 ]] && diff -r -q "$1/sections" "$2/sections" >/dev/null 2>&1 \
    && diff -r -q "$1/documents" "$2/documents" >/dev/null 2>&1 \
    && diff -q <(grep -v exported_at "$1/catalog.toml") \
               <(grep -v exported_at "$2/catalog.toml") >/dev/null 2>&1
}

panics=0 deaths=0 lost=0 start_fail=0 answered=0 calls=0
observed=0 reported=0 unreported=0 reported_unseen=0
for round in $(seq 1 "$N"); do
  DB=$WORK/db$round
  OUT=$WORK/calls$round
  mkdir -p "$OUT/ref"
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
  # The reads a user could notice the damage by, and how the undamaged copy answers them.
  reads=("search widgets" "search gears" "retrieve --kbid $k1" "recall $k2" "content $k2"
         "content doc/$((round % 7))" "docs")
  export KBDB_RUNTIME_DIR=$WORK/run-ref CALL_DB=$REF
  for i in "${!reads[@]}"; do
    # shellcheck disable=SC2086
    call "$OUT/ref" "read$i" ${reads[$i]}
  done
  export KBDB_RUNTIME_DIR=$WORK/run$round CALL_DB=$DB
  round_lost=0 seen="" step=0
  # status, the reads (calls 2..8), an export (9), check (10), two writes, check again.
  for c in "status" "${reads[@]}" "export $WORK/export$round" "check" \
           "learn fresh-fact-$round" "unlearn $k3" "check"; do
    calls=$((calls + 1)) step=$((step + 1))
    # shellcheck disable=SC2086
    call "$OUT" "$step" $c
    if grep -qE "lost the connection|stopped before answering|did not answer" "$OUT/$step.err"; then
      lost=$((lost + 1)) round_lost=1
    else
      answered=$((answered + 1))
    fi
  done
  for i in "${!reads[@]}"; do
    n=$((i + 2))
    if ! cmp -s "$OUT/$n.rc" "$OUT/ref/read$i.rc" || ! cmp -s "$OUT/$n.out" "$OUT/ref/read$i.out"; then
      seen+="${reads[$i]%% *}:$(cat "$OUT/$n.rc") "
    fi
  done
  same_export "$WORK/export-ref" "$WORK/export$round" || seen+="export:$(cat "$OUT/9.rc") "
  check_rc=$(cat "$OUT/10.rc")
  findings=$(jq -r '[(.errors // [])[].type] | unique | join(",")' "$OUT/10.out" 2>/dev/null || true)
  [[ -n $findings ]] || findings=$(grep -m1 -oE '"code": *"[a-z_]+"' "$OUT/10.err" || true)
  is_reported=0
  if [[ $check_rc == 7 || $check_rc == 9 ]]; then is_reported=1; fi
  reported=$((reported + is_reported))
  verdict=ok
  if [[ -n $seen ]]; then
    observed=$((observed + 1))
    if [[ $is_reported == 1 ]]; then verdict=reported; else
      unreported=$((unreported + 1)) verdict=UNREPORTED
    fi
  elif [[ $is_reported == 1 ]]; then
    reported_unseen=$((reported_unseen + 1)) verdict="reported, not seen"
  fi
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
  printf "round %3d: starts %d stops %d panics %d lost %d | seen: %s| check %s %s | %s\n" \
    "$round" "$starts" "$stops" "$p" "$round_lost" "${seen:-nothing }" "$check_rc" \
    "${findings:--}" "$verdict"
  [[ $KEEP == 1 ]] || rm -rf "$DB" "$OUT" "$WORK/export$round"
done
DB=
echo "rounds $N, calls $calls, answered $answered, lost $lost, panics $panics, daemon deaths $deaths, start failures $start_fail"
echo "observed $observed, reported by check $reported ($reported_unseen of them not seen by the reads), unreported $unreported"
