#!/usr/bin/env python3
"""Deterministic larger corpus for the scale benchmark (issue 32), generated from devdocs.

    tools/make-scale-corpus.py SRC OUT --sections N [--seed 32] [--kit DIR]

SRC is the devdocs corpus (/tmp/kbdb-bench/devdocs, 298,277 sections by the shared section rule,
../shared/bench/sections.py). OUT receives:

  md/c<k>/...      Markdown files: copy k of SRC's files (same relative paths under c<k>/)
  learn.jsonl      the `kbdb learn --jsonl` input: one object per section of md/, in the order
                   sections.py walks md/ ({"content", "title", "docid"}, as tools/bench-maintenance.sh)
  queries.jsonl    300 latency queries (../shared/bench/make-queries.py md --n 300 --seed 42)
  build.json       files, sections, bytes per copy, the seed and the sha256 of learn.jsonl

Copies: copy 0 is SRC's text unchanged; copy k >= 1 rewrites every ASCII letter run of 3+
letters (outside nothing: headings, prose and code alike) through a per-copy seeded mapping of
the lower-cased word: a permutation of SRC's vocabulary within words of the same length (so
word lengths and the Zipf shape of the frequencies stay those of real text), and for 10% of the
vocabulary a new spelling instead (two inner letters swapped: the vocabulary grows with the
corpus like a real larger corpus would). Case patterns (lower, Capitalised, UPPER) are kept.
Only letters change, never '#', fences, backticks or line structure, so every copy has exactly
SRC's documents and sections. A section with no 3+-letter word (e.g. "# 1.2") is the same text
in every copy; there are few and kbdb stores a repeated content once, as in real corpora.

Which files: copies 0..floor(N/S)-1 in full (S = SRC's sections), then files of the next copy
drawn in a seeded random order until N sections are reached (whole files: N is approximate
by at most one file's sections), so every size has devdocs' mix of rust/jdk/python.
Deterministic: same SRC, N and seed -> byte-identical OUT.
"""
import argparse
import hashlib
import json
import os
import random
import re
import subprocess
import sys

WORD = re.compile(r"[A-Za-z]{3,}")


def kit_dir(arg):
    if arg:
        return arg
    if os.environ.get("KBDB_BENCH_KIT"):
        return os.environ["KBDB_BENCH_KIT"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(root, "..", "shared", "bench")


def build_mapping(vocab_by_len, seed, k):
    """lower-case word -> replacement, for copy k >= 1."""
    rng = random.Random("%s/copy%d" % (seed, k))
    m = {}
    for n in sorted(vocab_by_len):
        words = vocab_by_len[n]
        perm = words[:]
        rng.shuffle(perm)
        for w, p in zip(words, perm):
            if n >= 4 and rng.random() < 0.10:
                i = rng.randrange(1, n - 2)
                p = p[:i] + p[i + 1] + p[i] + p[i + 2:]
            m[w] = p
    return m


def rewrite(text, m):
    def sub(mo):
        w = mo.group(0)
        r = m[w.lower()]
        if w.isupper():
            return r.upper()
        if w[0].isupper():
            return r[0].upper() + r[1:]
        return r
    return WORD.sub(sub, text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--sections", type=int, required=True)
    ap.add_argument("--seed", default="32")
    ap.add_argument("--kit")
    ap.add_argument("--queries", type=int, default=300)
    a = ap.parse_args()
    kit = kit_dir(a.kit)
    sys.dont_write_bytecode = True
    sys.path.insert(0, kit)
    import sections as splitter  # the shared section rule

    files = []  # (doc_id, text, sections)
    vocab = set()
    for doc_id, path in splitter.iter_files(a.src):
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
        n = sum(1 for _ in splitter.split_text(text))
        files.append((doc_id, text, n))
        vocab.update(w.lower() for w in WORD.findall(text))
    total = sum(n for _, _, n in files)
    by_len = {}
    for w in sorted(vocab):
        by_len.setdefault(len(w), []).append(w)

    full, rest = divmod(a.sections, total)
    plan = [(k, list(range(len(files)))) for k in range(full)]
    if rest:
        order = list(range(len(files)))
        random.Random("%s/pick" % a.seed).shuffle(order)
        got, pick = 0, []
        for i in order:
            if got >= rest:
                break
            pick.append(i)
            got += files[i][2]
        plan.append((full, sorted(pick)))

    md = os.path.join(a.out, "md")
    if os.path.exists(md):
        sys.exit("%s exists: remove it first" % md)
    os.makedirs(md)
    stats = []
    for k, idx in plan:
        m = build_mapping(by_len, a.seed, k) if k else None
        nb = ns = 0
        for i in idx:
            doc_id, text, n = files[i]
            out = rewrite(text, m) if m else text
            p = os.path.join(md, "c%d" % k, doc_id)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            data = out.encode("utf-8")
            with open(p, "wb") as f:
                f.write(data)
            nb += len(data)
            ns += n
        stats.append({"copy": k, "files": len(idx), "sections": ns, "bytes": nb})
        print("copy %d: %d files, %d sections" % (k, len(idx), ns), file=sys.stderr)

    # learn.jsonl from the folder, by the shared section rule (also checks the count)
    h = hashlib.sha256()
    n = 0
    with open(os.path.join(a.out, "learn.jsonl"), "w", encoding="utf-8") as f:
        for s in splitter.iter_sections(md):
            text = (("#" * s["level"] + " " + s["title"] + "\n\n") if s["level"] else "") + s["body"]
            line = json.dumps({"content": text, "title": s["title"] or None, "docid": s["doc"][:250]}) + "\n"
            f.write(line)
            h.update(line.encode("utf-8"))
            n += 1
    want = sum(s["sections"] for s in stats)
    if n != want:
        sys.exit("section count of md/ is %d, expected %d" % (n, want))
    with open(os.path.join(a.out, "queries.jsonl"), "w") as f:
        subprocess.run([sys.executable, "-B", os.path.join(kit, "make-queries.py"), md,
                        "--n", str(a.queries), "--seed", "42"], stdout=f, check=True)
    build = {"src": os.path.abspath(a.src), "seed": a.seed, "requested_sections": a.sections,
             "sections": n, "src_sections": total, "src_vocabulary": len(vocab),
             "copies": stats, "learn_jsonl_sha256": h.hexdigest()}
    with open(os.path.join(a.out, "build.json"), "w") as f:
        json.dump(build, f, indent=1)
        f.write("\n")
    print(json.dumps(build), file=sys.stderr)


if __name__ == "__main__":
    main()
