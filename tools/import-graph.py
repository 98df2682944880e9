#!/usr/bin/env python3
"""The import graph of src/: which file uses which, its circles, and the arrows that go from a
lower layer to a higher one (ARCHITECTURE.md lists the layers and explains each allowed upward
arrow).

    tools/import-graph.py            # summary: circles and upward arrows
    tools/import-graph.py --edges    # every file-to-file arrow as well

Exit status 1 when there is a circle or more upward arrows than ARCHITECTURE.md allows.
Test code (`#[cfg(test)]` modules, tests.rs files) is left out: tests may reach anywhere."""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SRC = os.path.join(ROOT, "src")

# Bottom to top. A folder or top-level file of src/ belongs to the first layer naming it.
LAYERS = [
    ("foundation", ["error", "config", "clock", "model", "types", "files", "process", "text"]),
    ("store", ["store"]),
    ("indexes", ["index", "embedding", "vectors"]),
    ("features", ["references", "learn", "unlearn", "writes", "recall", "compose", "search",
                  "collections", "sync", "skills", "maintenance", "snapshot"]),
    # Migrations transform old data with the features' own functions: above them.
    ("migrations", ["store/migrations"]),
    ("engine", ["kb", "lib"]),
    ("adapters", ["ops", "daemon", "mcp", "serve", "web", "cli", "main"]),
]
ALLOWED_UPWARD = 4


def layer_of(module):
    for i, (_, names) in enumerate(LAYERS):
        if module in names:
            return i
    return None


def files():
    for dirpath, _, names in os.walk(SRC):
        for n in names:
            # tests.rs files and tests/ folders of unit tests are test code too.
            if n.endswith(".rs") and n != "tests.rs" and "tests" not in dirpath.split(os.sep)[-1:]:
                yield os.path.relpath(os.path.join(dirpath, n), SRC)


def module_path(rel):
    """src-relative file -> its module path (list of names)."""
    parts = rel[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def reexports():
    """Names the crate root re-exports (`pub use a::b::{C, D}` in lib.rs) -> their module path;
    a glob (`pub use model::*`) is the fallback for other names."""
    names, globs = {}, []
    with open(os.path.join(SRC, "lib.rs")) as f:
        text = f.read()
    for m in re.finditer(r"\bpub(?:\(crate\))?\s+use\s+([^;]+);", text):
        for path in expand(re.sub(r"\s+", "", m.group(1))):
            parts = path.split("::")
            if parts[0] == "crate":
                parts = parts[1:]
            if parts[-1] == "*":
                globs.append(parts[:-1])
            else:
                names[parts[-1]] = parts[:-1]
    return names, globs


def file_of(path):
    """A module path -> the longest prefix that is a file of src/, as a src-relative path."""
    if path and not os.path.exists(os.path.join(SRC, path[0] + ".rs")) and not os.path.isdir(
        os.path.join(SRC, path[0])
    ):
        names, globs = REEXPORTS
        if path[0] in names:
            path = names[path[0]] + path[1:]
        elif globs:
            path = globs[0] + path
    for n in range(len(path), 0, -1):
        base = os.path.join(*path[:n])
        for cand in (base + ".rs", os.path.join(base, "mod.rs")):
            if os.path.exists(os.path.join(SRC, cand)):
                return cand
    return "lib.rs"


def strip_tests(text):
    """Drop `#[cfg(test)] mod x { ... }` blocks and comments."""
    out = []
    skip_depth = None
    pending = False
    depth = 0
    for line in text.split("\n"):
        s = line.strip()
        if skip_depth is None:
            if s.startswith("#[cfg(test)]"):
                pending = True
                continue
            if pending and re.match(r"(pub(\(crate\))? )?mod \w+\s*\{", s):
                skip_depth = depth
                depth += s.count("{") - s.count("}")
                pending = False
                continue
            pending = False
            if s.startswith("//"):
                continue
            out.append(line)
            depth += line.count("{") - line.count("}")
        else:
            depth += line.count("{") - line.count("}")
            if depth <= skip_depth:
                skip_depth = None
    return "\n".join(out)


def uses(rel, text):
    """Module paths this file refers to (crate::…, super::…, and `use` groups expanded)."""
    me = module_path(rel)
    is_mod = os.path.basename(rel) in ("mod.rs", "lib.rs", "main.rs")
    here = me if is_mod else me[:-1]
    found = set()
    text = strip_tests(text)
    # Expand `use x::{a, b::{c}}` one level: enough to find the modules named.
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        stmt = re.sub(r"\s+", "", m.group(1))
        for path in expand(stmt):
            found.add(path)
    for m in re.finditer(r"\b((?:crate|super)(?:::\w+)+)", text):
        found.add(m.group(1))
    out = set()
    for p in found:
        parts = p.split("::")
        if parts[0] == "crate":
            target = parts[1:]
        elif parts[0] == "super":
            base = list(here)
            while parts and parts[0] == "super":
                base = base[:-1]
                parts = parts[1:]
            target = base + parts
        elif parts[0] == "self":
            target = here + parts[1:]
        else:
            continue
        if not target:
            continue
        if rel.startswith("main.rs") or rel.startswith("cli"):
            if target[0] == "kbdb":
                target = target[1:]
        f = file_of(target)
        if f != rel:
            out.add(f)
    return out


def expand(stmt):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    m = re.match(r"^([\w:]*?)::?\{(.*)\}$", stmt)
    if not m:
        return [stmt.split(" as ")[0]]
    prefix, inner = m.group(1), m.group(2)
    items, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        items.append(cur)
    out = []
    for it in items:
        it = it.strip()
        if not it or it == "self":
            out.append(prefix)
            continue
        for e in expand(it):
            out.append(prefix + "::" + e if prefix else e)
    return out


def top(rel):
    p = module_path(rel)
    if p[:2] == ["store", "migrations"]:
        return "store/migrations"
    return p[0] if p else "lib"


def main():
    global REEXPORTS
    REEXPORTS = reexports()
    show_edges = "--edges" in sys.argv
    graph = {}
    for rel in sorted(files()):
        with open(os.path.join(SRC, rel)) as f:
            graph[rel] = uses(rel, f.read())
    # Binary-side files (main.rs, cli/) use the library as `kbdb::`; handled above.
    upward = []
    for a, targets in graph.items():
        la = layer_of(top(a))
        for b in targets:
            lb = layer_of(top(b))
            if la is not None and lb is not None and lb > la:
                upward.append((a, b))
    cycles = find_cycles(graph)
    if show_edges:
        for a in sorted(graph):
            for b in sorted(graph[a]):
                print(f"{a} -> {b}")
    print(f"files: {len(graph)}, arrows: {sum(len(t) for t in graph.values())}")
    print(f"circles: {len(cycles)}")
    for c in cycles:
        print("  " + " -> ".join(c + [c[0]]))
    print(f"upward arrows: {len(upward)} (allowed: {ALLOWED_UPWARD})")
    for a, b in sorted(upward):
        print(f"  {a} -> {b}")
    unknown = sorted({top(r) for r in graph if layer_of(top(r)) is None})
    if unknown:
        print(f"files in no layer: {', '.join(unknown)}")
    sys.exit(1 if cycles or len(upward) > ALLOWED_UPWARD or unknown else 0)


def find_cycles(graph):
    """Strongly connected components with more than one file (Tarjan), each as one circle."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


if __name__ == "__main__":
    main()
