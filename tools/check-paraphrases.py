#!/usr/bin/env python3
"""Check a paraphrase relevance set (JSONL of {"id", "fact", "query"}).

Usage: tools/check-paraphrases.py FILE

Verifies that every line parses as a JSON object, ids are unique, `fact` and
`query` are non-empty strings, no fact text is repeated, and that no query
shares a word stem with its own fact.  Words are lowercased, split on
non-alphanumerics, stopwords are dropped, and each word is reduced with the
Porter (1980) stemmer plus a few simple plural/verb base forms and common
irregular verbs, so "deploy"/"deployed"/"deployment"/"deploys" all collide.

Exit status 0 with "N pairs, 0 shared stems" on success, 1 otherwise.
Python 3 standard library only.
"""
import json
import re
import sys

STOPWORDS = frozenset("""
a about above after again against all am an and any are aren't as at be
because been before being below between both but by can can't cannot could
couldn't did didn't do does doesn't doing don't down during each few for from
further had hadn't has hasn't have haven't having he her here hers herself him
himself his how i if in into is isn't it it's its itself just let's me more
most mustn't my myself no nor not now of off on once only or other ought our
ours ourselves out over own same shan't she should shouldn't so some such
than that that's the their theirs them themselves then there there's these
they this those through to too under until up very was wasn't we were weren't
what what's when where which while who whom why will with won't would
wouldn't you your yours yourself yourselves s t d ll m o re ve y
""".split())
# Contractions above are split on the apostrophe by the tokenizer, so their
# pieces ("don", "t", "isn", ...) are stopwords too.
STOPWORDS = STOPWORDS | frozenset(
    p for w in STOPWORDS for p in re.split(r"[^a-z0-9]+", w) if p)

# Irregular verb/plural forms that no suffix rule reaches -> base form.
IRREGULAR = {
    "ran": "run", "began": "begin", "begun": "begin", "broke": "break",
    "broken": "break", "brought": "bring", "built": "build", "bought": "buy",
    "caught": "catch", "chose": "choose", "chosen": "choose", "came": "come",
    "dealt": "deal", "drew": "draw", "drawn": "draw", "drove": "drive",
    "driven": "drive", "fell": "fall", "fallen": "fall", "felt": "feel",
    "fought": "fight", "found": "find", "forgot": "forget",
    "forgotten": "forget", "froze": "freeze", "frozen": "freeze",
    "gave": "give", "given": "give", "went": "go", "gone": "go",
    "grew": "grow", "grown": "grow", "held": "hold", "hid": "hide",
    "hidden": "hide", "kept": "keep", "knew": "know", "known": "know",
    "led": "lead", "left": "leave", "lent": "lend", "lost": "lose",
    "made": "make", "meant": "mean", "met": "meet", "paid": "pay",
    "rode": "ride", "rose": "rise", "risen": "rise", "said": "say",
    "saw": "see", "seen": "see", "sought": "seek", "sold": "sell",
    "sent": "send", "shook": "shake", "shot": "shoot", "shown": "show",
    "slept": "sleep", "spent": "spend", "spoke": "speak", "spoken": "speak",
    "stole": "steal", "stolen": "steal", "stood": "stand", "struck": "strike",
    "swore": "swear", "sworn": "swear", "took": "take", "taken": "take",
    "taught": "teach", "thought": "think", "told": "tell", "threw": "throw",
    "thrown": "throw", "understood": "understand", "woke": "wake",
    "woken": "wake", "won": "win", "wore": "wear", "worn": "wear",
    "wrote": "write", "written": "write", "children": "child", "men": "man",
    "women": "woman", "people": "person", "mice": "mouse", "feet": "foot",
    "teeth": "tooth", "data": "datum", "indices": "index",
}


# ---------------------------------------------------------------------------
# Porter stemmer (M.F. Porter, "An algorithm for suffix stripping", 1980).
# ---------------------------------------------------------------------------
def _cons(w, i):
    c = w[i]
    if c in "aeiou":
        return False
    if c == "y":
        return i == 0 or not _cons(w, i - 1)
    return True


def _m(stem):
    """Measure: number of VC sequences in [C](VC){m}[V]."""
    n, i, L = 0, 0, len(stem)
    while i < L and _cons(stem, i):
        i += 1
    while i < L:
        while i < L and not _cons(stem, i):
            i += 1
        if i >= L:
            break
        n += 1
        while i < L and _cons(stem, i):
            i += 1
    return n


def _has_vowel(stem):
    return any(not _cons(stem, i) for i in range(len(stem)))


def _double_c(w):
    return len(w) >= 2 and w[-1] == w[-2] and _cons(w, len(w) - 1)


def _cvc(w):
    """*o: stem ends cvc, where the final c is not w, x or y."""
    return (len(w) >= 3 and _cons(w, len(w) - 3) and not _cons(w, len(w) - 2)
            and _cons(w, len(w) - 1) and w[-1] not in "wxy")


def _rules(w, rules, cond):
    """Apply the first rule whose suffix matches; None if none matched."""
    for suf, rep in rules:
        if w.endswith(suf):
            stem = w[:len(w) - len(suf)]
            return stem + rep if cond(stem) else w
    return None


_STEP2 = [("ational", "ate"), ("tional", "tion"), ("enci", "ence"),
          ("anci", "ance"), ("izer", "ize"), ("abli", "able"), ("alli", "al"),
          ("entli", "ent"), ("eli", "e"), ("ousli", "ous"),
          ("ization", "ize"), ("ation", "ate"), ("ator", "ate"),
          ("alism", "al"), ("iveness", "ive"), ("fulness", "ful"),
          ("ousness", "ous"), ("aliti", "al"), ("iviti", "ive"),
          ("biliti", "ble")]
_STEP3 = [("icate", "ic"), ("ative", ""), ("alize", "al"), ("iciti", "ic"),
          ("ical", "ic"), ("ful", ""), ("ness", "")]
_STEP4 = ["al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement",
          "ment", "ent", "ion", "ou", "ism", "ate", "iti", "ous", "ive",
          "ize"]
# Longest suffix first so e.g. "ement" is tried before "ment" and "ent".
_STEP2.sort(key=lambda r: -len(r[0]))
_STEP3.sort(key=lambda r: -len(r[0]))
_STEP4.sort(key=len, reverse=True)


def porter(w):
    if len(w) <= 2:
        return w
    # Step 1a
    if w.endswith("sses"):
        w = w[:-2]
    elif w.endswith("ies"):
        w = w[:-2]
    elif w.endswith("ss"):
        pass
    elif w.endswith("s"):
        w = w[:-1]
    # Step 1b
    if w.endswith("eed"):
        if _m(w[:-3]) > 0:
            w = w[:-1]
    else:
        for suf in ("ed", "ing"):
            if w.endswith(suf) and _has_vowel(w[:-len(suf)]):
                w = w[:-len(suf)]
                if w.endswith(("at", "bl", "iz")):
                    w += "e"
                elif _double_c(w) and w[-1] not in "lsz":
                    w = w[:-1]
                elif _m(w) == 1 and _cvc(w):
                    w += "e"
                break
    # Step 1c
    if w.endswith("y") and _has_vowel(w[:-1]):
        w = w[:-1] + "i"
    # Step 2, 3
    r = _rules(w, _STEP2, lambda s: _m(s) > 0)
    w = r if r is not None else w
    r = _rules(w, _STEP3, lambda s: _m(s) > 0)
    w = r if r is not None else w
    # Step 4
    for suf in _STEP4:
        if w.endswith(suf):
            stem = w[:-len(suf)]
            if _m(stem) > 1 and (suf != "ion" or stem.endswith(("s", "t"))):
                w = stem
            break
    # Step 5a
    if w.endswith("e"):
        stem = w[:-1]
        m = _m(stem)
        if m > 1 or (m == 1 and not _cvc(stem)):
            w = stem
    # Step 5b
    if _m(w) > 1 and _double_c(w) and w.endswith("l"):
        w = w[:-1]
    return w


def _simple_bases(w):
    """Naive base forms for plural/verb inflections (-s, -es, -ies, -ed,
    -ing), covering cases where Porter gives a word and its inflection
    different stems (e.g. "tie"/"ties")."""
    out = {w}
    if w in IRREGULAR:
        out.add(IRREGULAR[w])
    for suf, reps in (("ies", ("y", "ie")), ("es", ("", "e")), ("s", ("",)),
                      ("ied", ("y",)), ("ed", ("", "e")),
                      ("ing", ("", "e"))):
        if w.endswith(suf) and len(w) - len(suf) >= 2:
            stem = w[:-len(suf)]
            for rep in reps:
                out.add(stem + rep)
            if suf in ("ed", "ing") and _double_c(stem):
                out.add(stem[:-1])  # stopped -> stop, running -> run
            break
    return out


def _key(word):
    """Porter stem, re-stemmed to a fixed point, with a final "y" read as
    "i".  Plain Porter turns "deployed" into "deploi" (step 1c) but
    "deployment" into "deploy" (step 4 runs after 1c); this folds the two."""
    s = porter(word)
    for _ in range(3):
        t = porter(s)
        if t == s:
            break
        s = t
    return s[:-1] + "i" if s.endswith("y") else s


def stems(word):
    """All stem keys of a word; two words match if their key sets meet."""
    return {_key(b) for b in _simple_bases(word)}


def tokens(text):
    return [t for t in re.split(r"[^a-z0-9]+", text.lower())
            if t and t not in STOPWORDS]


def stem_map(text):
    """stem key -> set of original words producing it."""
    out = {}
    for t in tokens(text):
        for s in stems(t):
            out.setdefault(s, set()).add(t)
    return out


def _self_test():
    cases = {"deployment": "deploy", "deployed": "deploi", "deploys": "deploi",
             "deploying": "deploi", "caresses": "caress", "ponies": "poni",
             "relational": "relat", "conditional": "condit",
             "hopping": "hop", "agreed": "agre", "generalization": "gener",
             "adjustment": "adjust", "controlling": "control",
             "electricity": "electr", "happy": "happi", "sky": "sky"}
    bad = {w: (porter(w), want) for w, want in cases.items()
           if porter(w) != want}
    if bad:
        sys.exit("porter self-test failed: %r" % bad)
    forms = ("deploy", "deploys", "deployed", "deploying", "deployment",
             "deployments")
    assert all(stems(a) & stems(b) for a in forms for b in forms), forms
    assert stems("ties") & stems("tie")
    assert stems("wrote") & stems("writing")


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: check-paraphrases.py FILE")
    _self_test()
    errors, pairs = [], 0
    seen_ids, seen_facts = {}, {}
    with open(argv[1], encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                errors.append("line %d: blank line" % lineno)
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                errors.append("line %d: invalid JSON: %s" % (lineno, e))
                continue
            if not isinstance(rec, dict):
                errors.append("line %d: not a JSON object" % lineno)
                continue
            pairs += 1
            rid = rec.get("id")
            fact, query = rec.get("fact"), rec.get("query")
            where = "line %d (id %r)" % (lineno, rid)
            if not isinstance(rid, str) or not rid.strip():
                errors.append("%s: missing or empty id" % where)
            elif rid in seen_ids:
                errors.append("%s: duplicate id, first on line %d"
                              % (where, seen_ids[rid]))
            else:
                seen_ids[rid] = lineno
            ok = True
            for name, val in (("fact", fact), ("query", query)):
                if not isinstance(val, str) or not val.strip():
                    errors.append("%s: missing or empty %s" % (where, name))
                    ok = False
            if not ok:
                continue
            key = " ".join(fact.lower().split())
            if key in seen_facts:
                errors.append("%s: duplicate fact text, first on line %d"
                              % (where, seen_facts[key]))
            else:
                seen_facts[key] = lineno
            fm, qm = stem_map(fact), stem_map(query)
            shared = sorted(set(fm) & set(qm))
            if shared:
                detail = ", ".join(
                    "%s (fact: %s; query: %s)" % (s, "/".join(sorted(fm[s])),
                                                  "/".join(sorted(qm[s])))
                    for s in shared)
                errors.append("%s: shared stems: %s" % (where, detail))
    for e in errors:
        print(e)
    if errors:
        print("%d pairs, %d problems" % (pairs, len(errors)))
        return 1
    print("%d pairs, 0 shared stems" % pairs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
