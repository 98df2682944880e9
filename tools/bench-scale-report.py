#!/usr/bin/env python3
"""Markdown table of a tools/bench-scale.sh run: kbdb and FTS5 side by side per size.

    tools/bench-scale-report.py OUT

OUT holds one folder sN per size (written by bench-scale.sh). Ratios are kbdb / FTS5: for
sections/s > 1 means kbdb is faster; for MB, bytes and ms < 1 means kbdb is smaller/faster.
"""
import json
import os
import sys


def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def get(d, *path):
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def f(x, nd=1):
    if x is None:
        return "–"
    if isinstance(x, float):
        return "{:,.{}f}".format(x, nd)
    if isinstance(x, int):
        return "{:,}".format(x)
    return str(x)


def ratio(a, b, nd=2):
    return "–" if a is None or not b else "%.*f×" % (nd, a / b)


def main():
    out = sys.argv[1]
    sizes = sorted((d for d in os.listdir(out) if d.startswith("s") and d[1:].isdigit()),
                   key=lambda d: int(d[1:]))
    env = open(os.path.join(out, "env.txt")).read() if os.path.exists(os.path.join(out, "env.txt")) else ""
    print("```text\n%s```\n" % env)
    cols = []
    for s in sizes:
        P = os.path.join(out, s)
        j = lambda name: load(os.path.join(P, name + ".json"))
        cols.append((s, {k: j(k) for k in ("meta", "fts5", "fts5-proc", "learn", "learn-proc", "open-proc",
                                           "status", "daemon", "latency", "sync-proc", "sync", "sync-report",
                                           "learn-daemon", "learn-daemon-proc",
                                           "durable1", "durable8", "durable-embedded",
                                           "durable-inprocess")}))
        numbered = lambda prefix: [load(os.path.join(P, n)) for n in sorted(
            (n for n in os.listdir(P) if n.startswith(prefix) and n[len(prefix):-5].isdigit()),
            key=lambda n: int(n[len(prefix):-5]))]
        cols[-1][1]["rounds-kbdb"] = numbered("learn-proc-r")
        cols[-1][1]["rounds-fts5"] = numbered("fts5-r")
    rows = []

    def row(label, fn):
        rows.append((label, [fn(c) for _, c in cols]))

    def kv(c, name, *path):
        return get(c[name], *path)

    row("sections", lambda c: f(kv(c, "meta", "sections")))
    row("load average start → end", lambda c: "%s → %s" % ((kv(c, "meta", "loadavg_start") or "?").split()[0],
                                                           (kv(c, "meta", "loadavg_end") or "?").split()[0]))
    # bulk ingest
    def bulk_k(c):
        w, n = kv(c, "learn-proc", "wall_s"), kv(c, "meta", "sections")
        return (n / w) if w else None
    row("**bulk ingest** kbdb `learn --jsonl --embedded` s (sections/s)",
        lambda c: "%s (%s)" % (f(kv(c, "learn-proc", "wall_s"), 1), f(bulk_k(c), 0)))
    row("bulk ingest FTS5 s (sections/s)", lambda c: "%s (%s)" % (f(kv(c, "fts5", "ingest_bulk", "seconds"), 1),
                                                                  f(kv(c, "fts5", "ingest_bulk", "sections_per_s"), 0)))
    row("bulk ingest rate kbdb / FTS5 (target ≥ 1×)",
        lambda c: ratio(bulk_k(c), kv(c, "fts5", "ingest_bulk", "sections_per_s")))

    # --rounds R: every round's pair of bulk loads (round 1 is the one above)
    def rounds(c):
        k = [kv(c, "learn-proc", "wall_s")] + [get(r, "wall_s") for r in c["rounds-kbdb"]]
        q = [kv(c, "fts5", "ingest_bulk", "seconds")] + [get(r, "ingest_bulk", "seconds") for r in c["rounds-fts5"]]
        return [(a, b) for a, b in zip(k, q) if a and b]

    if any(len(rounds(c)) > 1 for _, c in cols):
        def median(xs):
            xs = sorted(xs)
            m = len(xs) // 2
            return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2

        def spread(xs, nd=1):
            return "%s (%s–%s)" % (f(median(xs), nd), f(min(xs), nd), f(max(xs), nd))

        row("bulk rounds, alternated", lambda c: f(len(rounds(c))))
        row("bulk ingest kbdb s, median (range)", lambda c: spread([a for a, _ in rounds(c)]) if rounds(c) else "–")
        row("bulk ingest FTS5 s, median (range)", lambda c: spread([b for _, b in rounds(c)]) if rounds(c) else "–")
        row("**bulk rate kbdb / FTS5**, median of the rounds (range)",
            lambda c: "%s (%s–%s)" % tuple("%.2f×" % x for x in (
                median([b / a for a, b in rounds(c)]), min(b / a for a, b in rounds(c)),
                max(b / a for a, b in rounds(c)))) if rounds(c) else "–")
    row("kbdb learn CPU user + sys s", lambda c: "%s + %s" % (f(kv(c, "learn-proc", "user_s")), f(kv(c, "learn-proc", "sys_s"))))
    def sync_rate(c):
        # None when sync did not run, failed (its report is an error) or took no measurable time.
        w, n = kv(c, "sync-proc", "wall_s"), kv(c, "meta", "sections")
        rep = c["sync-report"]
        if not w or not n or not isinstance(rep, dict) or "error" in rep:
            return None
        return n / w
    row("kbdb `sync` of the folder s (sections/s)",
        lambda c: "–" if sync_rate(c) is None else "%s (%s)" % (f(kv(c, "sync-proc", "wall_s"), 1), f(sync_rate(c), 0)))
    row("sync rate kbdb / FTS5 bulk (target ≥ 1×)",
        lambda c: ratio(sync_rate(c), kv(c, "fts5", "ingest_bulk", "sections_per_s")))
    def daemon_rate(c):
        w, n = kv(c, "learn-daemon-proc", "wall_s"), kv(c, "meta", "sections")
        return (n / w) if w and n and kv(c, "learn-daemon", "errors") == 0 else None
    row("kbdb `learn --jsonl` through the daemon s (sections/s)",
        lambda c: "–" if daemon_rate(c) is None else "%s (%s)" % (f(kv(c, "learn-daemon-proc", "wall_s"), 1), f(daemon_rate(c), 0)))
    row("through the daemon kbdb / FTS5 bulk",
        lambda c: ratio(daemon_rate(c), kv(c, "fts5", "ingest_bulk", "sections_per_s")))
    row("FTS5 read + split of the folder s (not in its bulk time)", lambda c: f(kv(c, "fts5", "read_split_seconds"), 1))
    # memory
    row("**peak RSS** kbdb learn MB (target ≤ 300)", lambda c: f(kv(c, "learn-proc", "max_rss_mb"), 0))
    row("peak RSS kbdb sync MB", lambda c: f(kv(c, "sync-proc", "max_rss_mb"), 0))
    row("peak RSS FTS5 python process MB (holds all sections)", lambda c: f(kv(c, "fts5-proc", "max_rss_mb"), 0))
    row("**daemon RSS** after open + 1 search MB (target ≤ 150)", lambda c: f(kv(c, "daemon", "after_open", "VmRSS"), 0))
    row("daemon RSS / peak after the query set MB",
        lambda c: "%s / %s" % (f(kv(c, "daemon", "after_queries", "VmRSS"), 0), f(kv(c, "daemon", "after_queries", "VmHWM"), 0)))
    # disk
    # kbdb on disk: the blocks its files take (`du`); runs before the field existed have only
    # the file sizes (`du -b`), which count the unwritten pages (holes) of redb's file
    def kbdb_disk(c):
        return kv(c, "learn", "db_alloc_bytes") or kv(c, "learn", "db_bytes")

    def parts(key):
        return lambda c: ", ".join("%s %.0f" % (k, v / 1e6) for k, v in sorted((kv(c, "learn", key) or {}).items(),
                                                                              key=lambda kv_: -kv_[1]) if v >= 1e6) or "–"
    row("**on disk** kbdb MB (blocks in use)", lambda c: f((kbdb_disk(c) or 0) / 1e6, 1))
    row("kbdb file sizes MB (redb's file includes unwritten pages)",
        lambda c: f((kv(c, "learn", "db_bytes") or 0) / 1e6, 1))
    row("on disk FTS5 MB", lambda c: f((kv(c, "fts5", "ingest_bulk", "db_bytes") or 0) / 1e6, 1))
    row("on disk kbdb / FTS5 (target ≤ 1.2×)",
        lambda c: ratio(kbdb_disk(c), kv(c, "fts5", "ingest_bulk", "db_bytes")))
    row("kbdb on disk per part MB (blocks)", parts("db_parts_alloc"))
    row("kbdb file size per part MB", parts("db_parts"))
    # open / latency
    row("open: `kbdb --embedded status` s / peak RSS MB",
        lambda c: "%s / %s" % (f(kv(c, "open-proc", "wall_s"), 2), f(kv(c, "open-proc", "max_rss_mb"), 0)))
    row("first search (starts the daemon) s", lambda c: f(float(kv(c, "daemon", "first_search_s")) if c["daemon"] else None, 2))
    row("**warm query** kbdb CLI end to end p50 / p99 ms",
        lambda c: "%s / %s" % (f(kv(c, "latency", "latency_ms", "p50"), 1), f(kv(c, "latency", "latency_ms", "p99"), 1)))
    row("FTS5 in process p50 / p99 ms",
        lambda c: "%s / %s" % (f(kv(c, "fts5", "latency", "latency_ms", "p50"), 1), f(kv(c, "fts5", "latency", "latency_ms", "p99"), 1)))
    row("kbdb p50 / FTS5 p50", lambda c: ratio(kv(c, "latency", "latency_ms", "p50"), kv(c, "fts5", "latency", "latency_ms", "p50")))
    row("kbdb zero-hit queries / errors", lambda c: "%s / %s" % (f(kv(c, "latency", "zero_hit")), f(kv(c, "latency", "errors"))))
    row("kbdb learn error lines", lambda c: f(kv(c, "learn", "errors")))
    # durable
    if any(c["durable1"] for _, c in cols):
        row("**durable** kbdb 1 writer sections/s (p50 / p99 ms)",
            lambda c: "–" if not c["durable1"] else "%s (%s / %s)" % (f(kv(c, "durable1", "sections_per_s"), 0),
                                                                     f(kv(c, "durable1", "write_ms", "p50"), 2), f(kv(c, "durable1", "write_ms", "p99"), 2)))
        row("durable kbdb 8 writers sections/s (p50 / p99 ms)",
            lambda c: "–" if not c["durable8"] else "%s (%s / %s)" % (f(kv(c, "durable8", "sections_per_s"), 0),
                                                                     f(kv(c, "durable8", "write_ms", "p50"), 2), f(kv(c, "durable8", "write_ms", "p99"), 2)))
        row("durable kbdb 1 writer `--embedded` sections/s (p50 / p99 ms)",
            lambda c: "–" if not c["durable-embedded"] else "%s (%s / %s)" % (f(kv(c, "durable-embedded", "sections_per_s"), 0),
                                                                             f(kv(c, "durable-embedded", "write_ms", "p50"), 2), f(kv(c, "durable-embedded", "write_ms", "p99"), 2)))
        row("durable FTS5 `synchronous=FULL` sections/s (commit p50 / p99 ms)",
            lambda c: "–" if not c["durable1"] else "%s (%s / %s)" % (f(kv(c, "fts5", "ingest_durable", "sections_per_s"), 0),
                                                                     f(kv(c, "fts5", "ingest_durable", "commit_ms", "p50"), 2), f(kv(c, "fts5", "ingest_durable", "commit_ms", "p99"), 2)))
        row("durable kbdb 1 writer / FTS5 (target ≥ 1×)",
            lambda c: "–" if not c["durable1"] else ratio(kv(c, "durable1", "sections_per_s"), kv(c, "fts5", "ingest_durable", "sections_per_s")))
        row("durable kbdb 1 writer `--embedded` / FTS5",
            lambda c: "–" if not c["durable-embedded"] else ratio(kv(c, "durable-embedded", "sections_per_s"), kv(c, "fts5", "ingest_durable", "sections_per_s")))
        row("durable kbdb 8 writers / FTS5 1 writer (target ≥ 2×)",
            lambda c: "–" if not c["durable8"] else ratio(kv(c, "durable8", "sections_per_s"), kv(c, "fts5", "ingest_durable", "sections_per_s")))
    # durable in process on both sides (benches/durable.rs: its own FTS5 run, same round)
    if any(c["durable-inprocess"] for _, c in cols):
        def inproc(c, engine):
            rounds = (c["durable-inprocess"] or {}).get("rounds") or []
            return rounds[0].get(engine) if rounds else None
        for engine, label in (("fts5", "FTS5 `synchronous=FULL`"), ("kbdb ×1", "kbdb `Kb::learn`, 1 thread"),
                              ("kbdb ×8", "kbdb `Kb::learn`, 8 threads")):
            row("durable in process, %s writes/s (p50 / p99 ms)" % label,
                lambda c, e=engine: "–" if not inproc(c, e) else "%s (%s / %s)" % (
                    f(inproc(c, e)["writes_per_s"], 0), f(inproc(c, e)["p50_ms"], 2), f(inproc(c, e)["p99_ms"], 2)))
        row("durable in process, 1 thread / FTS5 (target ≥ 1×)",
            lambda c: "–" if not inproc(c, "kbdb ×1") else "%.2f×" % inproc(c, "kbdb ×1")["over_fts5"])
        row("durable in process, 8 threads / FTS5 1 writer (target ≥ 2×)",
            lambda c: "–" if not inproc(c, "kbdb ×8") else "%.2f×" % inproc(c, "kbdb ×8")["over_fts5"])
        row("FTS5 fdatasync probe p50 ms", lambda c: f(kv(c, "fts5", "fdatasync_ms", "p50"), 3))
    print("| measurement | " + " | ".join(s[1:] for s, _ in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for label, vals in rows:
        print("| %s | %s |" % (label, " | ".join(vals)))


if __name__ == "__main__":
    main()
