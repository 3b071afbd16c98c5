"""The benchmark targets of tools/bench/targets.yaml (their one home).

As a module: `load()` returns the parsed file. As a script:
`targets.py SECTION.KEY` prints that one value (for the shell scripts),
`targets.py SECTION.KEY --source` where it comes from.
"""
import os
import sys

import yaml

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "targets.yaml")


def load(path=None):
    """The targets file as a dict of sections (`path`, else [PATH], read at
    the call so that a test may point PATH at its own file)."""
    with open(path or PATH) as f:
        return yaml.safe_load(f)


def value(key, targets=None):
    """One target by its dotted name, e.g. `accuracy.vs_large_only_min`;
    a missing one is an error naming it."""
    node = load() if targets is None else targets
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(f"no target `{key}` in {PATH}")
        node = node[part]
    return node


def source(key, targets=None):
    """Where target `key` comes from (its line under `sources:`): an issue
    and its line, or the commit that set a guard and what it had measured."""
    t = load() if targets is None else targets
    value(key, t)
    try:
        return t["sources"][key]
    except (KeyError, TypeError):
        raise KeyError(f"target `{key}` has no source in {PATH}") from None


def keys(targets=None):
    """Every target's dotted name (the `sources:` section aside)."""
    t = load() if targets is None else targets
    return [f"{section}.{k}" for section, body in t.items() if section != "sources"
            for k in body]


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or sys.argv[2:] not in ([], ["--source"]):
        sys.exit("usage: targets.py SECTION.KEY [--source]")
    try:
        print(source(sys.argv[1]) if sys.argv[2:] else value(sys.argv[1]))
    except KeyError as e:
        sys.exit(str(e.args[0]))
