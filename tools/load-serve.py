#!/usr/bin/env python3
"""Load test of `kbdb serve`: concurrent MCP clients over HTTP, mixed searches and learns.

    tools/load-serve.py [--kbdb target/debug/kbdb] [--clients 50] [--seconds 120]
                        [--write-share 0.3] [--kill-daemon-at S] [--kill-server-at S]
                        [--db DIR] [--keep]

Makes a fresh database (or uses --db), a token, and starts `kbdb serve` on a free loopback port.
Each client keeps one MCP session (keep-alive HTTP connection) and, until the time is up,
either learns a unique fact (share --write-share) or searches for one learned before.
Optionally kills the daemon (--kill-daemon-at) or the server (--kill-server-at, then starts it
again) with SIGKILL after that many seconds.

Counted:
  errors        answers that say a call failed (HTTP status other than 200/202, a JSON-RPC
                error, a tool result with isError) outside an interruption;
  interrupted   requests cut off by a kill: a connection refused or reset, or a session that
                no longer exists (the server was killed: the client opens a new session and
                goes on; a learn cut off so was never acknowledged, and is not checked), or a
                learn answered "the daemon stopped before answering … learning the same
                content again is safe" (the daemon was killed: the client learns it again,
                and that answer is what counts);
  acknowledged  learns answered with a kbid: each is retrieved at the end and must be there
                with its content.
Then the server is stopped and `kbdb check` must pass. Exit 0 iff errors == 0, every
acknowledged write is present and check passes. Only loopback is used; every loop is bounded
by --seconds.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse


class Interrupted(Exception):
    """The connection or session went away (a kill): retry with a new session."""


class Session:
    def __init__(self, url: str, token: str):
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = u.hostname, u.port, u.path
        self.token = token
        self.conn: http.client.HTTPConnection | None = None
        self.sid: str | None = None
        self.next_id = 1

    def _post(self, body: dict) -> tuple[int, dict | None]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25",
        }
        if self.sid:
            headers["Mcp-Session-Id"] = self.sid
        try:
            self.conn.request("POST", self.path, json.dumps(body), headers)
            r = self.conn.getresponse()
            data = r.read().decode()
        except (ConnectionError, http.client.HTTPException, OSError) as e:
            self.close()
            raise Interrupted(repr(e)) from e
        if r.status == 404 and self.sid:
            raise Interrupted("session gone (404)")
        if body.get("method") == "initialize" and r.status == 200:
            self.sid = r.getheader("mcp-session-id")
        msg = None
        if r.getheader("content-type", "").startswith("text/event-stream"):
            for line in data.splitlines():
                if line.startswith("data:"):
                    try:
                        v = json.loads(line[5:].strip())
                    except ValueError:
                        continue
                    if "id" in v:
                        msg = v
        elif data.strip():
            msg = json.loads(data)
        return r.status, msg

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None

    def open(self) -> None:
        self.sid = None
        st, msg = self._post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "load-serve", "version": "1"}}})
        if st != 200 or not msg or "result" not in msg:
            raise Interrupted(f"initialize answered {st}: {msg}")
        st, _ = self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        if st != 202:
            raise Interrupted(f"initialized answered {st}")

    def tool(self, name: str, args: dict) -> tuple[int, dict | None]:
        self.next_id += 1
        return self._post({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                           "params": {"name": name, "arguments": args}})


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.errors: list[str] = []
        self.interrupted = 0
        self.acked: list[tuple[str, str]] = []  # (kbid, content)
        self.lat = {"search": [], "learn": []}

    def error(self, what: str) -> None:
        with self.lock:
            self.errors.append(what)


def client(i: int, url: str, token: str, deadline: float, share: float, st: Stats) -> None:
    rnd = random.Random(i)
    s = Session(url, token)
    n = 0
    while time.time() < deadline:
        try:
            if s.sid is None:
                s.open()
            n += 1
            with st.lock:
                known = st.acked[rnd.randrange(len(st.acked))] if st.acked else None
            if known is None or rnd.random() < share:
                word = f"w{i}x{n}x{rnd.randrange(1 << 30)}"
                content = f"Load fact {word}: client {i} wrote number {n}."
                t0 = time.perf_counter()
                status, msg = s.tool("learn", {"content": content, "title": f"load {i}/{n}"})
                kind = "learn"
            else:
                word = known[1].split()[2].rstrip(":")
                t0 = time.perf_counter()
                status, msg = s.tool("search", {"query": word})
                kind = "search"
            ms = (time.perf_counter() - t0) * 1000
            if status != 200 or msg is None or "error" in msg:
                st.error(f"{kind}: HTTP {status} {msg}")
                continue
            res = msg["result"]
            if res.get("isError"):
                text = json.dumps(res.get("content"))
                if kind == "learn" and "may or may not have been applied" in text:
                    # The daemon was killed while this learn was in flight: not acknowledged.
                    # The answer says learning the same content again is safe; do so, as a
                    # client would.
                    with st.lock:
                        st.interrupted += 1
                    status, msg = s.tool("learn", {"content": content, "title": f"load {i}/{n}"})
                    res = (msg or {}).get("result") or {}
                    if status != 200 or res.get("isError") or "error" in (msg or {}):
                        st.error(f"learn retried after a daemon stop: HTTP {status} {msg}")
                        continue
                else:
                    st.error(f"{kind}: {res.get('content')}")
                    continue
            with st.lock:
                st.lat[kind].append(ms)
                if kind == "learn":
                    kbid = (res.get("structuredContent") or {}).get("kbid")
                    if kbid:
                        st.acked.append((kbid, content))
                    else:
                        st.errors.append(f"learn answered without a kbid: {res}")
        except Interrupted:
            with st.lock:
                st.interrupted += 1
            s.sid = None
            time.sleep(0.2)
    s.close()


def start_server(kbdb: str, db: str, env: dict) -> tuple[subprocess.Popen, str]:
    p = subprocess.Popen([kbdb, "--db", db, "serve", "--listen", "127.0.0.1:0", "--format", "json"],
                         stdout=subprocess.PIPE, stderr=sys.stderr, env=env, text=True)
    line = p.stdout.readline()
    return p, json.loads(line)["url"]


def start_server_on(kbdb: str, db: str, env: dict, addr: str) -> subprocess.Popen:
    """Again on the same address (clients keep their URL); waits until it listens."""
    for _ in range(100):
        p = subprocess.Popen([kbdb, "--db", db, "serve", "--listen", addr, "--format", "json"],
                             stdout=subprocess.PIPE, stderr=sys.stderr, env=env, text=True)
        if p.stdout.readline():
            return p
        p.wait()
        time.sleep(0.1)
    raise SystemExit(f"cannot start kbdb serve on {addr} again")


def daemon_pid(kbdb: str, db: str, env: dict) -> int | None:
    r = subprocess.run([kbdb, "--db", db, "daemon", "status", "--format", "json"],
                       capture_output=True, text=True, env=env)
    try:
        return (json.loads(r.stdout).get("daemon") or {}).get("pid")
    except ValueError:
        return None


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kbdb", default="target/debug/kbdb")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--write-share", type=float, default=0.3)
    ap.add_argument("--kill-daemon-at", type=float)
    ap.add_argument("--kill-server-at", type=float)
    ap.add_argument("--db")
    ap.add_argument("--keep", action="store_true", help="keep the temporary database")
    a = ap.parse_args()
    kbdb = os.path.abspath(a.kbdb)
    tmp = tempfile.mkdtemp(prefix="kbdb-load-")
    db = a.db or os.path.join(tmp, "kb")
    env = dict(os.environ, KBDB_RUNTIME_DIR=os.path.join(tmp, "run"))
    if not os.path.exists(os.path.join(db, "kbdb.redb")):
        subprocess.run([kbdb, "--db", db, "init"], check=True, capture_output=True, env=env)
    tok = json.loads(subprocess.run([kbdb, "--db", db, "token", "create", f"load{os.getpid()}",
                                     "--format", "json"], check=True, capture_output=True,
                                    text=True, env=env).stdout)["token"]
    server, url = start_server(kbdb, db, env)
    addr = urllib.parse.urlsplit(url).netloc
    print(f"serving {url}; {a.clients} clients for {a.seconds:.0f} s, write share {a.write_share}",
          flush=True)
    st = Stats()
    start = time.time()
    deadline = start + a.seconds
    threads = [threading.Thread(target=client, args=(i, url, tok, deadline, a.write_share, st))
               for i in range(a.clients)]
    for t in threads:
        t.start()
    events = []
    if a.kill_daemon_at is not None:
        time.sleep(max(0, start + a.kill_daemon_at - time.time()))
        pid = daemon_pid(kbdb, db, env)
        if pid:
            os.kill(pid, signal.SIGKILL)
            events.append(f"daemon {pid} killed (-9) at {time.time() - start:.1f} s")
            print(events[-1], flush=True)
    if a.kill_server_at is not None:
        time.sleep(max(0, start + a.kill_server_at - time.time()))
        server.kill()
        server.wait()
        events.append(f"server killed (-9) at {time.time() - start:.1f} s")
        print(events[-1], flush=True)
        server = start_server_on(kbdb, db, env, addr)
        events.append(f"server started again at {time.time() - start:.1f} s")
        print(events[-1], flush=True)
    for t in threads:
        t.join()

    # Every acknowledged write is there, with its content.
    missing = []
    checker = Session(url, tok)
    checker.open()
    for kbid, content in st.acked:
        status, msg = checker.tool("retrieve", {"kbid": kbid})
        text = json.dumps(msg)
        if status != 200 or content.split(":")[0] not in text:
            missing.append(kbid)
    checker.close()
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=30)
    check = subprocess.run([kbdb, "--db", db, "check", "--format", "json"], capture_output=True,
                           text=True, env=env)
    subprocess.run([kbdb, "--db", db, "daemon", "stop"], capture_output=True, env=env)

    ls, ll = st.lat["search"], st.lat["learn"]
    print(f"events: {'; '.join(events) or 'none'}")
    print(f"calls: {len(ls)} searches, {len(ll)} learns acknowledged in {a.seconds:.0f} s "
          f"({(len(ls) + len(ll)) / a.seconds:.0f}/s)")
    print(f"search ms p50 {pct(ls, .5):.1f} p99 {pct(ls, .99):.1f}; "
          f"learn ms p50 {pct(ll, .5):.1f} p99 {pct(ll, .99):.1f}")
    print(f"errors: {len(st.errors)}; interrupted (retried): {st.interrupted}")
    for e in st.errors[:10]:
        print(f"  error: {e[:300]}")
    print(f"acknowledged writes: {len(st.acked)}, missing: {len(missing)}")
    print(f"kbdb check: exit {check.returncode}")
    if not a.keep and not a.db:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"database kept in {db}")
    ok = not st.errors and not missing and check.returncode == 0
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
