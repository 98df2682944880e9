#!/usr/bin/env python3
"""Build the vocab-mismatch relevance set from pairs.tsv and the pg15 corpus.

Usage: build.py [--corpus DIR] [--check-only]

pairs.tsv: one hand-written pair per line, "SECTION_ID<TAB>QUERY" (# starts a
comment). SECTION_ID is a section id of ../../../shared/bench/sections.py
("<file>#<n>") over the PostgreSQL 15 documentation as markdown (the kit's
pg15 corpus, default /tmp/kbdb-bench/pg15; sections.py is looked up with
--sections-py, default /work/shared/bench/sections.py or $SECTIONS_PY).

Rule, checked mechanically: a query shares NO word stem with its section's
full text (heading + body), with the stemmer and stopword list of
tools/check-paraphrases.py. A pair that breaks it is reported with the
shared words and the build fails (nothing is written).

Writes sections.jsonl ({"id","title","content"}: the answer sections plus
distractors drawn with a fixed seed), queries.jsonl ({"id","query"}) and
qrels.tsv (TREC: "qid 0 docid 1") next to this script. Standard library only.
"""
import importlib.util
import json
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DISTRACTORS = 800
SEED = 15


def load_checker():
    path = os.path.join(ROOT, "tools", "check-paraphrases.py")
    spec = importlib.util.spec_from_file_location("check_paraphrases", path)
    mod = importlib.util.module_from_spec(spec)
    sys.dont_write_bytecode = True
    spec.loader.exec_module(mod)
    return mod


def read_pairs(path):
    pairs = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            sid, sep, query = line.partition("\t")
            if not sep or not query.strip():
                sys.exit("pairs.tsv:%d: expected SECTION_ID<TAB>QUERY" % n)
            pairs.append((n, sid.strip(), query.strip()))
    return pairs


def main(argv):
    corpus = "/tmp/kbdb-bench/pg15"
    sections_py = os.environ.get("SECTIONS_PY", "/work/shared/bench/sections.py")
    check_only = "--check-only" in argv
    if "--corpus" in argv:
        corpus = argv[argv.index("--corpus") + 1]
    if "--sections-py" in argv:
        sections_py = argv[argv.index("--sections-py") + 1]
    chk = load_checker()
    dump = subprocess.run([sys.executable, sections_py, "dump", corpus],
                          check=True, capture_output=True, text=True).stdout
    secs = {}
    for line in dump.splitlines():
        d = json.loads(line)
        secs[d["id"]] = d
    pairs = read_pairs(os.path.join(HERE, "pairs.tsv"))
    bad = 0
    seen_sec, seen_q = set(), set()
    for n, sid, query in pairs:
        d = secs.get(sid)
        if d is None:
            print("line %d: unknown section %s" % (n, sid)); bad += 1; continue
        if sid in seen_sec or query.lower() in seen_q:
            print("line %d: duplicate section or query" % n); bad += 1; continue
        seen_sec.add(sid); seen_q.add(query.lower())
        text = d["title"] + "\n" + d["body"]
        fm, qm = chk.stem_map(text), chk.stem_map(query)
        shared = sorted(set(fm) & set(qm))
        if shared:
            bad += 1
            words = ["%s(%s~%s)" % (s, "/".join(sorted(qm[s])), "/".join(sorted(fm[s])[:3]))
                     for s in shared]
            print("line %d %s: %s\n    shares %s" % (n, sid, query, " ".join(words)))
    print("%d pairs, %d bad" % (len(pairs), bad), file=sys.stderr)
    if bad or check_only:
        return 1 if bad else 0
    answers = [sid for _, sid, _ in pairs]
    pool = sorted(i for i, d in secs.items()
                  if i not in seen_sec and 200 <= len(d["body"]) <= 4000)
    distract = random.Random(SEED).sample(pool, DISTRACTORS)
    with open(os.path.join(HERE, "sections.jsonl"), "w", encoding="utf-8") as f:
        for sid in sorted(answers + distract):
            d = secs[sid]
            f.write(json.dumps({"id": sid, "title": d["title"], "content": d["body"]},
                               ensure_ascii=False) + "\n")
    with open(os.path.join(HERE, "queries.jsonl"), "w", encoding="utf-8") as qf, \
            open(os.path.join(HERE, "qrels.tsv"), "w") as rf:
        for i, (_, sid, query) in enumerate(pairs, 1):
            qid = "vm-%03d" % i
            qf.write(json.dumps({"id": qid, "query": query}, ensure_ascii=False) + "\n")
            rf.write("%s\t0\t%s\t1\n" % (qid, sid))
    print("wrote %d sections, %d queries" % (len(answers) + len(distract), len(pairs)),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
