#!/usr/bin/env python3
"""Time each view of kbdb serve's web page (docs/web.md) on one database.

    tools/bench-web.py --kbdb target/release/kbdb (--learn SECTIONS.jsonl | --db DIR)
                       --queries Q.jsonl [--n 50] [--keep]

Loads a fresh database with `learn --jsonl --embedded` (or uses --db), starts `kbdb serve` on a
free loopback port, signs in with the printed one-time link, then requests every view over one
keep-alive connection after an unmeasured pass (the searches, and each fixed view once: its time,
the first visit after the start, goes to stderr): `/`, `/search?q=` for the first --n queries,
`/section/KBID` and `/doc/DOCID` of their first results, `/docs`, `/tags`, `/collections`,
`/validation`, `/status` (5 times each). Prints p50 / p90 / max per view in ms (server answer, read whole).
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kbdb", default="target/release/kbdb")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--learn")
    src.add_argument("--db")
    ap.add_argument("--queries", required=True)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    kbdb = os.path.abspath(a.kbdb)
    tmp = tempfile.mkdtemp(prefix="kbdb-web-bench-")
    env = dict(os.environ, KBDB_RUNTIME_DIR=os.path.join(tmp, "run"))
    db = a.db or os.path.join(tmp, "kb")
    queries = [json.loads(l)["text"] for l in open(a.queries, encoding="utf-8") if l.strip()]
    queries = queries[: a.n]
    server = None
    try:
        if a.learn:
            with open(a.learn, "rb") as f:
                subprocess.run([kbdb, "--db", db, "learn", "--jsonl", "--embedded"], stdin=f,
                               stdout=subprocess.DEVNULL, check=True, env=env)
        server = subprocess.Popen([kbdb, "--db", db, "serve", "--listen", "127.0.0.1:0",
                                   "--format", "json"], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, env=env, text=True)
        start = json.loads(server.stdout.readline())
        link = urllib.parse.urlsplit(start["web"])
        conn = http.client.HTTPConnection(link.hostname, link.port, timeout=60)

        def get(path: str, cookie: str | None) -> tuple[int, str, http.client.HTTPResponse]:
            headers = {"Cookie": cookie} if cookie else {}
            conn.request("GET", path, headers=headers)
            r = conn.getresponse()
            return r.status, r.read().decode("utf-8", "replace"), r

        status, _, r = get(f"/?{link.query}", None)
        cookie = (r.getheader("set-cookie") or "").split(";")[0]
        if status != 303 or not cookie:
            raise SystemExit(f"sign-in answered {status}")
        paths: dict[str, list[str]] = {v: [v] * 5 for v in (
            "/", "/docs", "/tags", "/collections", "/validation", "/status")}
        paths.update({"/search": [], "/section": [], "/doc": []})
        for q in queries:
            path = "/search?" + urllib.parse.urlencode({"q": q})
            paths["/search"].append(path)
            _, body, _ = get(path, cookie)
            m = re.search(r'href="(/section/[^"]+)"', body)
            if m:
                paths["/section"].append(m.group(1))
            m = re.search(r'href="(/doc/[^"]+)"', body)
            if m:
                paths["/doc"].append(m.group(1))
        # The unmeasured pass also opens each fixed view once: the first visit after a start
        # loads the document index (`/docs`) and validates every document (`/validation`);
        # printed on stderr, it is not a figure of the table.
        for view in ("/", "/docs", "/tags", "/collections", "/validation", "/status"):
            t = time.perf_counter()
            get(view, cookie)
            print(f"first visit {view}: {(time.perf_counter() - t) * 1000:.1f} ms", file=sys.stderr)
        print("| view | requests | p50 ms | p90 ms | max ms |")
        print("|---|---:|---:|---:|---:|")
        for view, ps in paths.items():
            lat = []
            for p in ps:
                t = time.perf_counter()
                st, _, _ = get(p, cookie)
                lat.append((time.perf_counter() - t) * 1000)
                if st != 200:
                    raise SystemExit(f"{p} answered {st}")
            if not lat:
                continue
            lat.sort()
            print(f"| `{view}` | {len(lat)} | {lat[len(lat) // 2]:.1f} | "
                  f"{lat[min(len(lat) - 1, int(0.9 * len(lat)))]:.1f} | {lat[-1]:.1f} |")
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        subprocess.run([kbdb, "--db", db, "daemon", "stop"], capture_output=True, env=env)
        if a.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
