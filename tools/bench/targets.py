"""The benchmark targets of tools/bench/targets.yaml (their one home).

As a module: `load()` returns the parsed file. As a script:
`targets.py SECTION.KEY` prints that one value (for the shell scripts).
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


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: targets.py SECTION.KEY")
    try:
        print(value(sys.argv[1]))
    except KeyError as e:
        sys.exit(str(e.args[0]))
