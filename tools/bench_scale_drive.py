#!/usr/bin/env python3
"""Drivers for tools/bench-scale.sh (stdlib only). Each prints one JSON object.

  bench_scale_drive.py latency KBDB DB QUERIES [--repeat 3] [--k 10]
      Warm query latency through the daemon, end to end through the CLI: one
      `KBDB --db DB search TEXT --limit K --format json` process per query, 1 warm-up pass then
      REPEAT timed passes (wall time per process, start-up included), p50/p99/mean ms.
  bench_scale_drive.py durable KBDB DB LEARN_JSONL --writers W --lines N [--offset O] [--embedded]
      Durable ingest through the daemon: W concurrent `KBDB --db DB learn --jsonl` processes,
      each writing its share of N lines ONE AT A TIME (write a line, wait for its result line,
      which kbdb prints only once the write is durable, then the next), from line O of
      LEARN_JSONL. Sections/s and per-write p50/p99 ms. --embedded: the one writer opens the
      database itself (`KBDB --embedded …`) instead of going through the daemon.
  bench_scale_drive.py rss PID
      VmRSS and VmHWM (peak) of a process, in MB.
"""
import json
import subprocess
import sys
import threading
import time


def pct(xs):
    xs = sorted(xs)
    if not xs:
        return {}
    q = lambda p: xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]
    return {"n": len(xs), "p50": round(q(50), 3), "p90": round(q(90), 3), "p99": round(q(99), 3),
            "max": round(xs[-1], 3), "mean": round(sum(xs) / len(xs), 3)}


def latency(argv):
    kbdb, db, qpath = argv[:3]
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 3
    k = argv[argv.index("--k") + 1] if "--k" in argv else "10"
    qs = [json.loads(l)["text"] for l in open(qpath, encoding="utf-8") if l.strip()]
    lat, zero, errors = [], 0, 0
    for rep in range(repeat + 1):
        for q in qs:
            t = time.perf_counter()
            p = subprocess.run([kbdb, "--db", db, "--format", "json", "search", "--limit", k, "--", q],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            dt = (time.perf_counter() - t) * 1000
            if p.returncode != 0:
                errors += 1
                if errors <= 3:
                    print("search failed (%d): %s" % (p.returncode, p.stderr.decode()[:300]), file=sys.stderr)
                continue
            if rep:
                lat.append(dt)
                if rep == 1:
                    try:
                        r = json.loads(p.stdout)
                        # `search --format json`: {"items": [...], ...}
                        hits = r.get("items") if isinstance(r, dict) else r
                        zero += not hits
                    except ValueError:
                        pass
    return {"queries": len(qs), "repeat": repeat, "latency_ms": pct(lat), "zero_hit": zero,
            "errors": errors}


def durable(argv):
    kbdb, db, path = argv[:3]
    w = int(argv[argv.index("--writers") + 1])
    n = int(argv[argv.index("--lines") + 1])
    off = int(argv[argv.index("--offset") + 1]) if "--offset" in argv else 0
    # --embedded: each writer opens the database in its own process (one writer only: the
    # database admits one process at a time).
    embedded = ["--embedded"] if "--embedded" in argv else []
    lines = []
    with open(path, encoding="utf-8") as f:
        for i, l in enumerate(f):
            if i >= off + n:
                break
            if i >= off:
                lines.append(l if l.endswith("\n") else l + "\n")
    shares = [lines[i::w] for i in range(w)]
    lat = [[] for _ in range(w)]
    errs = [0] * w
    first_err = [None] * w
    rcs = [None] * w

    def writer(i):
        p = subprocess.Popen([kbdb, "--db", db, "--format", "json"] + embedded + ["learn", "--jsonl"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        for j, l in enumerate(shares[i]):
            t = time.perf_counter()
            try:
                p.stdin.write(l)
                p.stdin.flush()
            except BrokenPipeError:
                # The writer process is gone: every line it did not take is an error.
                errs[i] += len(shares[i]) - j
                print("writer %d gone after %d lines: %s" % (i, j, first_err[i]), file=sys.stderr)
                break
            r = p.stdout.readline()
            lat[i].append((time.perf_counter() - t) * 1000)
            # A result line is an AddSectionResult, or {"error": {code, message}} (a section
            # titled "error" has "error" in its text, not as a key).
            try:
                bad = not r or "error" in json.loads(r)
            except ValueError:
                bad = True
            if bad:
                errs[i] += 1
                first_err[i] = first_err[i] or r.strip()[:300]
        try:
            p.stdin.close()
        except BrokenPipeError:
            pass
        p.wait()
        rcs[i] = p.returncode

    t0 = time.perf_counter()
    ths = [threading.Thread(target=writer, args=(i,)) for i in range(w)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    dt = time.perf_counter() - t0
    all_lat = [x for l in lat for x in l]
    return {"writers": w, "sections": len(lines), "seconds": round(dt, 3),
            "sections_per_s": round(len(lines) / dt, 1), "write_ms": pct(all_lat),
            "errors": sum(errs), "writes_timed": len(all_lat),
            "first_error": next((e for e in first_err if e), None),
            "exit_codes": rcs}


def rss(argv):
    out = {}
    with open("/proc/%s/status" % argv[0]) as f:
        for l in f:
            k, _, v = l.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = round(int(v.split()[0]) / 1024.0, 1)
    return out


def main():
    cmd, argv = sys.argv[1], sys.argv[2:]
    res = {"latency": latency, "durable": durable, "rss": rss}[cmd](argv)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
