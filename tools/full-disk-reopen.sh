#!/usr/bin/env bash
# Full-disk reopen (docs/reliability.md): a database whose daemon is killed on a full disk,
# then opened again and again while the disk stays full, then once 600 KiB are freed. Prints
# what each attempt answered and how much of the disk it took. Needs root (it mounts a 5 MiB
# tmpfs) and python3.
#
#   sudo tools/full-disk-reopen.sh
#
# The kbdb binary is $KBDB_BIN, else target/debug/kbdb (cargo build first).
set -euo pipefail
case ${1:-} in -h|--help) sed -n '2,8p' "$0"; exit 0 ;; esac
cd "$(dirname "$0")/.."
K=${KBDB_BIN:-$PWD/target/debug/kbdb}
[[ -x $K ]] || { echo "no kbdb binary at $K" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "needs root (mounts a tmpfs)" >&2; exit 2; }
FS=$(mktemp -d /tmp/kbdb-fullfs.XXXXXX)
export KBDB_RUNTIME_DIR=$FS.run KBDB_DAEMON_IDLE_SECS=30
unset KBDB_DIR KBDB_EMBEDDED
mount -t tmpfs -o size=5m tmpfs "$FS"
cleanup() { "$K" --db "$FS/kb" daemon stop >/dev/null 2>&1 || true; umount "$FS"; rmdir "$FS"; rm -rf "$FS.run"; }
trap cleanup EXIT
used() { df -k "$FS" | awk 'NR==2 {print $3}'; }
echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "commit:  $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
"$K" --db "$FS/kb" init >/dev/null
# 600 KiB set aside, freed later.
dd if=/dev/zero of="$FS/reserve" bs=1k count=600 2>/dev/null
# Learn until the disk is full (the daemon journals the writes), then kill the daemon.
for i in $(seq 1 400); do
  python3 -c "
import json, random
r = random.Random($i)
for j in range(20):
    print(json.dumps({'content': 'fact %d %d ' % ($i, j) + ' '.join('w%d' % r.randint(0, 99999) for _ in range(200))}))" \
    | "$K" --db "$FS/kb" learn --jsonl --format json >/dev/null 2>&1 || break
done
pid=$("$K" --db "$FS/kb" daemon status --format json | python3 -c 'import json,sys; print(json.load(sys.stdin)["daemon"]["pid"])')
kill -9 "$pid"; sleep 1
dd if=/dev/zero of="$FS/filler" bs=1k count=10000 2>/dev/null || true
echo "killed on a full disk: used $(used) KiB of 5120"
for a in 1 2 3; do
  before=$(used)
  out=$("$K" --db "$FS/kb" status 2>&1 | head -2 | tr '\n' ' ' | cut -c1-160) || true
  "$K" --db "$FS/kb" daemon stop >/dev/null 2>&1 || true
  echo "full, status $a: took $(( $(used) - before )) KiB; answered: $out"
done
rm "$FS/reserve"
for a in 1 2 3; do
  before=$(used)
  out=$("$K" --db "$FS/kb" status 2>&1 | head -2 | tr '\n' ' ' | cut -c1-160) || true
  "$K" --db "$FS/kb" daemon stop >/dev/null 2>&1 || true
  echo "600 KiB freed, status $a: took $(( $(used) - before )) KiB; answered: $out"
done
