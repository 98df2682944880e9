#!/usr/bin/env bash
# Run mcp-check's check-server.sh against `kbdb serve` over HTTP (the conformance suite's HTTP
# scenarios, DNS-rebinding protection included), plus its stdio probes of `kbdb mcp` on the
# same database.
#
#   tests/serve/conformance.sh KBDB_BINARY [check-server.sh options...]
#
# The suite cannot send an Authorization header, so auth_proxy.py (next to this script) sits
# between it and the server on loopback and adds the token; the proxy's origin is allowed in the
# database's worker.toml. Needs ../shared/tools/mcp-check (setup.sh run once). Prints
# check-server.sh's lines and exits with its status.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
KBDB="$(realpath "$1")"; shift
CHECK="${MCP_CHECK_SCRIPT:-$ROOT/../shared/tools/mcp-check/check-server.sh}"
WORK="$(mktemp -d)"
export KBDB_RUNTIME_DIR="$WORK/run"
DB="$WORK/kb"
cleanup() {
  [ -n "${PROXY:-}" ] && kill "$PROXY" 2>/dev/null || true
  [ -n "${SERVER:-}" ] && kill -TERM "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null || true
  "$KBDB" --db "$DB" daemon stop >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
"$KBDB" --db "$DB" init >/dev/null
"$KBDB" --db "$DB" token create conformance 2>/dev/null > "$WORK/token"
PP="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
printf '[serve]\nallowed_origins = ["http://127.0.0.1:%s", "http://localhost:%s"]\n' "$PP" "$PP" > "$DB/worker.toml"
"$KBDB" --db "$DB" serve --listen 127.0.0.1:0 --format json > "$WORK/serve.out" 2> "$WORK/serve.err" &
SERVER=$!
for _ in $(seq 100); do [ -s "$WORK/serve.out" ] && break; sleep 0.1; done
URL="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$WORK/serve.out")"
python3 "$HERE/auth_proxy.py" --listen "127.0.0.1:$PP" --to "${URL%/mcp}" --token-file "$WORK/token" > "$WORK/proxy.out" &
PROXY=$!
for _ in $(seq 100); do [ -s "$WORK/proxy.out" ] && break; sleep 0.1; done
echo "kbdb serve at $URL, through the token-adding proxy at http://127.0.0.1:$PP/mcp"
MCP_CHECK_OUT="${MCP_CHECK_OUT:-$WORK/results}" "$CHECK" --tool search --tool-args '{"query":"x"}' \
  --url "http://127.0.0.1:$PP/mcp" "$@" -- "$KBDB" mcp --db "$DB"
