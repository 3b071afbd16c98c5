#!/usr/bin/env python3
"""Module import graph of a crate, and its cycles (test code left out).

Usage: tools/modgraph.py CRATE_SRC_DIR [--depth N] [--edges]

Every path a module's files name from `crate::`, `super::` or `self::`
(use lines with their nested `{...}` groups, and inline paths; comments and
doc comments skipped) is resolved to the deepest module of the crate it
reaches. At depth N, modules count as their ancestor N levels down, and a
reference from a module to itself, to one of its descendants or to one of
its ancestors is not an edge: a parent declares and re-exports its
children, and a child may use what its parent holds. A cycle is two or
more modules, none holding another, that reach each other.

Without --depth every depth from 1 to the deepest module is checked, so a
circle of two files in one folder (`a/x.rs` <-> `a/y.rs`) is found as well
as one between top-level modules. Prints the strongly connected components
with more than one member (cycles) and exits 1 if there are any.
"""
import argparse
import os
import re
import sys

# Where a path starts: `crate::`, `super::`, `self::` (also `$crate::`).
START = re.compile(r"(?<![\w:])\$?(crate|super|self)::")
SEGMENT = re.compile(r"\s*(\*|[A-Za-z_][A-Za-z0-9_]*)")


def module_of(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return tuple(rel)


def strip_comments(text):
    # Test code may reach anywhere (a scheduler test builds real policies):
    # drop `#[cfg(test)] mod tests { ... }` blocks, which sit at the end.
    m = re.search(r"^#\[cfg\(test\)\]\s*(pub(\(crate\))? )?mod \w+ \{", text, flags=re.M)
    if m:
        text = text[: m.start()]
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def parse_tree(text, i, prefix, out):
    """Reads a use tree at text[i:] (`a::b`, `a::{b, c::d}`, ...) under
    `prefix`; appends each full path to `out`; returns where it stopped."""
    path = list(prefix)
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if text.startswith("{", i):
            i += 1
            while True:
                i = parse_tree(text, i, path, out)
                while i < len(text) and text[i] in " \t\r\n,":
                    i += 1
                if i >= len(text) or text[i] == "}":
                    return i + 1
                if not (text[i].isalpha() or text[i] in "_{*"):
                    return i  # not a use tree after all
        m = SEGMENT.match(text, i)
        if not m:
            out.append(path)
            return i
        name, i = m.group(1), m.end()
        if name == "*":
            out.append(path)
            return i
        path.append(name)  # `self` segments are dropped by `references`
        if text.startswith("::", i):
            i += 2
            continue
        out.append(path)
        return i


def references(text, here):
    """Absolute module paths (lists of names) that `text`, the file of
    module `here`, names."""
    out = []
    for m in START.finditer(text):
        kind, i = m.group(1), m.end()
        if kind == "crate":
            base = []
        elif kind == "self":
            base = list(here)
        else:
            base = list(here[:-1])
            while text.startswith("super::", i):
                base, i = base[:-1], i + len("super::")
        parse_tree(text, i, base, out)
    return [[p for p in path if p != "self"] for path in out]


def resolve(path, modules):
    """The deepest module of the crate that `path` reaches."""
    for n in range(len(path), -1, -1):
        if tuple(path[:n]) in modules:
            return tuple(path[:n])
    return ()


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


def related(a, b):
    """`a` is `b`, or one holds the other."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def graph(refs, depth):
    """Nodes and edges with every module counted as its ancestor at `depth`."""
    nodes, edges = set(), {}
    for here, theres in refs.items():
        a = here[:depth]
        if not a:
            continue
        nodes.add(a)
        for there in theres:
            b = there[:depth]
            if not b or related(a, b):
                continue
            nodes.add(b)
            edges.setdefault(a, set()).add(b)
    return nodes, edges


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("--depth", type=int, help="one depth only (default: every depth)")
    ap.add_argument("--edges", action="store_true")
    args = ap.parse_args()
    files = {}
    for root, _, names in os.walk(args.src):
        for f in names:
            if not f.endswith(".rs") or f == "tests.rs" or f.endswith("_tests.rs"):
                continue
            path = os.path.join(root, f)
            files[module_of(args.src, path)] = path
    modules = set(files)
    for m in list(modules):
        modules.update(m[:n] for n in range(len(m)))
    refs = {}
    for mod, path in files.items():
        text = strip_comments(open(path, encoding="utf-8").read())
        refs[mod] = {resolve(p, modules) for p in references(text, mod)}
    deepest = max([len(m) for m in modules] + [1])
    depths = [args.depth] if args.depth else range(1, deepest + 1)
    found = False
    for depth in depths:
        nodes, edges = graph(refs, depth)
        if args.edges:
            for a in sorted(edges):
                targets = ", ".join("::".join(b) for b in sorted(edges[a]))
                print(f"{'::'.join(a)} -> {targets}")
        for c in scc(nodes, edges):
            if len(c) > 1:
                found = True
                print(f"cycle (depth {depth}):", " <-> ".join(sorted("::".join(m) for m in c)))
    if not found:
        shown = f"depth {args.depth}" if args.depth else f"depths 1-{deepest}"
        print(f"no cycles among {len([m for m in modules if m])} modules ({shown})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
