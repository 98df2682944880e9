#!/usr/bin/env python3
"""Search latency through `kbdb serve` (MCP over HTTP) next to the CLI's, on one database.

    tools/bench-serve-search.py --kbdb target/release/kbdb --queries Q.jsonl
                                [--learn SECTIONS.jsonl | --db DIR] [--n 300] [--limit 10]
                                [--modes lexical,hybrid] [--out RESULT.json] [--keep]

With --learn, makes a fresh database and loads it with `kbdb learn --jsonl --embedded` (the
file holds one learn object per line, e.g. tools/make-scale-corpus.py's learn.jsonl); with --db,
uses that database as it is. Then, with the daemon warm (`kbdb serve` starts it; each query
set is run once unmeasured first):

  cli            `kbdb search Q --limit N --format json` per query: a new process each time,
                 through the warm daemon (process start included: what a shell script pays);
  http session   MCP `tools/call search` over one keep-alive HTTP connection and one
                 `Mcp-Session-Id` (what an agent on the network pays per search);
  http new conn  the same call on a new TCP connection each time (same session).

With a mode other than lexical in --modes, the database gets an `api` embedding provider served by
this script on loopback (an OpenAI-compatible `/v1/embeddings`: 384-d vectors of hashed words,
in ~0.1 ms a text, so what is measured is kbdb's side: the daemon's vector scan and fusion plus
one loopback round trip for the query's embedding), and the measurement starts once
`status` shows no pending embeddings. Each path is then run per mode.

Queries are the `text` of each line of Q.jsonl (bench kit's make-queries.py format), the first
--n of them. Prints p50 / p90 / p99 / mean in ms and writes them to --out as JSON. Only loopback
is used; the temporary database is removed unless --keep.
"""
from __future__ import annotations

import argparse
import hashlib
import http.server
import importlib.util
import json
import math
import re
import threading
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("load_serve", os.path.join(HERE, "load-serve.py"))
load_serve = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(load_serve)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summary(xs: list[float]) -> dict:
    return {"n": len(xs), "p50": pct(xs, 0.5), "p90": pct(xs, 0.9), "p99": pct(xs, 0.99),
            "mean": sum(xs) / len(xs)}


DIMS = 384


def embed(text: str) -> list[float]:
    """A unit vector of hashed words: texts sharing words are near."""
    v = [0.0] * DIMS
    for w in re.findall(r"\w+", text.lower())[:512]:
        h = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little")
        v[h % DIMS] += 1.0 if (h >> 32) & 1 else -1.0
    n = math.sqrt(sum(x * x for x in v)) or 1.0
    return [round(x / n, 4) for x in v]


class EmbedHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # Headers and body leave in two writes: without this the body waits for kbdb's
        # delayed ACK (~40 ms), which would be measured as kbdb's hybrid latency.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        out = json.dumps({"data": [{"index": i, "embedding": embed(t)}
                                   for i, t in enumerate(inputs)],
                          "model": body.get("model")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def start_embed_server() -> http.server.ThreadingHTTPServer:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), EmbedHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def search_http(s: "load_serve.Session", q: str, limit: int, mode: str) -> None:
    st, msg = s.tool("search", {"query": q, "limit": limit, "search_mode": mode})
    if st != 200 or not msg or "result" not in msg or msg["result"].get("isError"):
        raise SystemExit(f"search {q!r} over HTTP answered {st}: {str(msg)[:300]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kbdb", default="target/release/kbdb")
    ap.add_argument("--queries", required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--learn", help="learn --jsonl input to load into a fresh database")
    src.add_argument("--db", help="an existing database to measure")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--modes", default="lexical",
                    help="comma-separated retrieval paths: lexical, hybrid, vector")
    ap.add_argument("--out")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    kbdb = os.path.abspath(a.kbdb)
    tmp = tempfile.mkdtemp(prefix="kbdb-serve-bench-")
    env = dict(os.environ, KBDB_RUNTIME_DIR=os.path.join(tmp, "run"))
    db = a.db or os.path.join(tmp, "kb")
    queries = []
    with open(a.queries, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                queries.append(json.loads(line)["text"])
    queries = queries[: a.n]
    modes = a.modes.split(",")
    result: dict = {"kbdb": kbdb, "queries": len(queries), "limit": a.limit, "modes": modes}
    server = None
    try:
        if modes != ["lexical"]:
            embedder = start_embed_server()
            os.makedirs(db, exist_ok=True)
            with open(os.path.join(db, "worker.toml"), "w") as f:
                f.write(f"[embedding]\nprovider = \"api\"\napi_url = "
                        f"\"http://127.0.0.1:{embedder.server_address[1]}/v1\"\n"
                        f"model = \"hashed-words\"\ndimensions = {DIMS}\n")
        if a.learn:
            n_lines = sum(1 for _ in open(a.learn, "rb"))
            t0 = time.time()
            with open(a.learn, "rb") as f:
                r = subprocess.run([kbdb, "--db", db, "learn", "--jsonl", "--embedded"], stdin=f,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
            if r.returncode != 0:
                raise SystemExit(f"learn --jsonl failed ({r.returncode}): {r.stderr[-500:]!r}")
            result["learn"] = {"lines": n_lines, "seconds": time.time() - t0}
            print(f"learned {n_lines} lines in {result['learn']['seconds']:.1f} s", flush=True)
        status = json.loads(subprocess.run([kbdb, "--db", db, "status", "--format", "json"],
                                           check=True, capture_output=True, text=True,
                                           env=env).stdout)
        t0 = time.time()
        while modes != ["lexical"]:
            status = json.loads(subprocess.run([kbdb, "--db", db, "status", "--format", "json"],
                                               check=True, capture_output=True, text=True,
                                               env=env).stdout)
            pending = (status.get("vectors") or {}).get("pending_changes")
            if pending == 0:
                result["embed_seconds"] = time.time() - t0
                print(f"embedded in {result['embed_seconds']:.1f} s", flush=True)
                break
            time.sleep(2)
        result["sections"] = status.get("sections")
        tok = json.loads(subprocess.run(
            [kbdb, "--db", db, "token", "create", f"bench{os.getpid()}", "--read-only",
             "--format", "json"], check=True, capture_output=True, text=True, env=env).stdout)["token"]
        server, url = load_serve.start_server(kbdb, db, env)
        s = load_serve.Session(url, tok)
        s.open()

        def cli(q: str, mode: str) -> None:
            r = subprocess.run([kbdb, "--db", db, "search", q, "--limit", str(a.limit),
                                "--search-mode", mode, "--format", "json"],
                               capture_output=True, env=env)
            if r.returncode != 0:
                raise SystemExit(f"kbdb search {q!r} exited {r.returncode}: {r.stderr[-300:]!r}")

        def http_session(q: str, mode: str) -> None:
            search_http(s, q, a.limit, mode)

        def http_new_conn(q: str, mode: str) -> None:
            s.close()
            search_http(s, q, a.limit, mode)

        runs = {"cli": cli, "http session": http_session, "http new conn": http_new_conn}
        for mode in modes:
            for q in queries:  # warm: the daemon's index readers, the page cache
                cli(q, mode)
                http_session(q, mode)
        for mode in modes:
            for name, fn in runs.items():
                lat = []
                for q in queries:
                    t = time.perf_counter()
                    fn(q, mode)
                    lat.append((time.perf_counter() - t) * 1000)
                result[f"{name} {mode}"] = summary(lat)
        result["load_average"] = os.getloadavg()
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        subprocess.run([kbdb, "--db", db, "daemon", "stop"], capture_output=True, env=env)
        if a.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{result.get('sections')} sections, {len(queries)} queries, limit {a.limit}, "
          f"load average {result['load_average'][0]:.1f}\n")
    print("| path | mode | p50 ms | p90 ms | p99 ms | mean ms | p50 / lexical p50 |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in ("cli", "http session", "http new conn"):
        for mode in modes:
            r = result[f"{name} {mode}"]
            base = result.get(f"{name} lexical")
            ratio = f"{r['p50'] / base['p50']:.2f}" if base else "-"
            print(f"| {name} | {mode} | {r['p50']:.2f} | {r['p90']:.2f} | {r['p99']:.2f} "
                  f"| {r['mean']:.2f} | {ratio} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
