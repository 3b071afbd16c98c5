#!/usr/bin/env python3
"""Checks every relative link in the repository's Markdown files.

A link must resolve to a file or folder inside the repository (never above
it, never an absolute path), and a `#anchor` into a Markdown file must name
one of its headings (GitHub's slugs). Links with a scheme (https:, mailto:)
are left alone. Run by `make lint`; prints each bad link and exits 1.

Usage: python3 tools/check_links.py [FILE.md ...]   (default: every tracked *.md)
"""
import os
import re
import subprocess
import sys

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), ".."))
# [text](target) and [text](target "title"); images too. Inline code and
# fenced blocks are blanked first, so examples inside them are not links.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def strip_code(text):
    """Blanks fenced blocks and inline code spans, keeping line count."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
        elif fenced:
            out.append("")
        else:
            out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def slugs(path):
    """GitHub's anchors for the headings of a Markdown file."""
    seen, result = {}, set()
    with open(path, encoding="utf-8") as f:
        text = f.read()
    fenced = False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = m.group(1).strip().lower()
        s = re.sub(r"[^\w\- ]", "", s).replace(" ", "-")
        n = seen.get(s, 0)
        seen[s] = n + 1
        result.add(s if n == 0 else f"{s}-{n}")
    # Explicit anchors (<a id="...">, <a name="...">) count too.
    result.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    return result


def check(md):
    """Returns the problems of one Markdown file as strings."""
    with open(md, encoding="utf-8") as f:
        text = strip_code(f.read())
    problems = []
    targets = [(m.start(), m.group(1)) for m in LINK.finditer(text)]
    targets += [(m.start(), m.group(1)) for m in REF_DEF.finditer(text)]
    for pos, target in targets:
        line = text.count("\n", 0, pos) + 1
        where = f"{os.path.relpath(md, ROOT)}:{line}: {target}"
        if SCHEME.match(target):
            continue
        path, _, anchor = target.partition("#")
        if path.startswith("/"):
            problems.append(f"{where}: absolute path")
            continue
        dest = os.path.realpath(os.path.join(os.path.dirname(md), path)) if path else md
        if dest != ROOT and not dest.startswith(ROOT + os.sep):
            problems.append(f"{where}: points outside the repository")
        elif not os.path.exists(dest):
            problems.append(f"{where}: no such file")
        elif anchor and dest.endswith(".md") and anchor not in slugs(dest):
            problems.append(f"{where}: no heading #{anchor}")
    return problems


def main(argv):
    if argv:
        files = [os.path.realpath(f) for f in argv]
    else:
        listed = subprocess.run(
            ["git", "-C", ROOT, "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
            check=True, capture_output=True, text=True).stdout.split()
        files = [os.path.realpath(os.path.join(ROOT, f)) for f in listed]
    problems = [p for f in files if os.path.exists(f) for p in check(f)]
    for p in problems:
        print(p)
    print(f"check_links: {len(files)} files, {len(problems)} bad links")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
