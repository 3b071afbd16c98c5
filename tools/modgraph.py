#!/usr/bin/env python3
"""Module import graph of a crate, and its cycles (test code left out).

Usage: tools/modgraph.py CRATE_SRC_DIR [--depth N] [--edges]

Every `crate::a::b...` path in a module's files (use lines and inline
paths, comments and doc comments skipped) is an edge from the module to
`a` (depth 1) or `a::b` (depth 2). Children count as their parent at the
chosen depth; a module's references to its own descendants are not edges.
Prints strongly connected components with more than one member (cycles)
and exits 1 if there are any.
"""
import argparse
import os
import re
import sys

PATH = re.compile(r"\bcrate((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
# `use crate::{a, b::c}` groups.
GROUP = re.compile(r"\bcrate::\{([^}]*)\}", re.S)


def module_of(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return rel


def strip_comments(text):
    # Test code may reach anywhere (a scheduler test builds real policies):
    # drop `#[cfg(test)] mod tests { ... }` blocks, which sit at the end.
    m = re.search(r"^#\[cfg\(test\)\]\s*(pub(\(crate\))? )?mod \w+ \{", text, flags=re.M)
    if m:
        text = text[: m.start()]
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def targets(text):
    out = []
    for m in GROUP.finditer(text):
        for part in m.group(1).split(","):
            part = part.strip()
            if part:
                out.append([p for p in part.split("::") if p and p != "{"])
    for m in PATH.finditer(text):
        out.append(m.group(1).strip(":").split("::"))
    return out


def scc(nodes, edges):
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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
            comps.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return comps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("--depth", type=int, default=1)
    ap.add_argument("--edges", action="store_true")
    args = ap.parse_args()
    edges, nodes = {}, set()
    for root, _, files in os.walk(args.src):
        for f in files:
            if not f.endswith(".rs") or f == "tests.rs" or f.endswith("_tests.rs"):
                continue
            path = os.path.join(root, f)
            mod = module_of(args.src, path)
            if not mod:
                continue
            here = "::".join(mod[: args.depth])
            nodes.add(here)
            text = strip_comments(open(path, encoding="utf-8").read())
            for t in targets(text):
                t = [p for p in t if p and not p[0].isupper()]
                if not t:
                    continue
                there = "::".join(t[: args.depth])
                # A module reaching into its own children is not an edge.
                if there == here or there.startswith(here + "::") or here.startswith(there + "::") and len(t) < args.depth:
                    continue
                if len(mod) < args.depth and there.startswith("::".join(mod) + "::"):
                    continue
                nodes.add(there)
                edges.setdefault(here, set()).add(there)
    if args.edges:
        for a in sorted(edges):
            print(f"{a} -> {', '.join(sorted(edges[a]))}")
    cycles = [sorted(c) for c in scc(nodes, edges) if len(c) > 1]
    for c in cycles:
        print("cycle:", " <-> ".join(c))
    if not cycles:
        print(f"no cycles among {len(nodes)} modules (depth {args.depth})")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())
