"""Tests of modgraph.py: the circles it must find (between top-level modules,
between two files of one folder through `super::`, through nested use
groups) and the references that are not circles (a parent and its children,
test code). Run: python3 -m unittest discover -s tools -p 'test_modgraph.py'"""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import modgraph  # noqa: E402


def crate(files):
    """A crate's src folder holding `files` ({relative path: text})."""
    root = tempfile.mkdtemp()
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return root


def check(files):
    """(exit status, output) of modgraph.py over a crate of `files`."""
    run = subprocess.run(
        [sys.executable, os.path.join(HERE, "modgraph.py"), crate(files)],
        capture_output=True, text=True, check=False)
    return run.returncode, run.stdout


class References(unittest.TestCase):
    def test_nested_groups_and_super_resolve(self):
        text = "use super::{plan::{Plan, Task}, KvElem};\nuse crate::a::{self, b::c};"
        refs = modgraph.references(text, ("pa", "task"))
        self.assertIn(["pa", "plan", "Plan"], refs)
        self.assertIn(["pa", "KvElem"], refs)
        self.assertIn(["a"], refs)
        self.assertIn(["a", "b", "c"], refs)

    def test_super_super_and_self(self):
        refs = modgraph.references("super::super::x::f(); self::y::g();", ("a", "b", "c"))
        self.assertEqual(refs, [["a", "x", "f"], ["a", "b", "c", "y", "g"]])

    def test_a_function_name_resolves_to_its_module(self):
        modules = {(), ("a",), ("a", "b")}
        self.assertEqual(modgraph.resolve(["a", "b", "run"], modules), ("a", "b"))


class Cycles(unittest.TestCase):
    def test_two_files_of_one_folder_through_super(self):
        rc, out = check({
            "lib.rs": "mod g;",
            "g/mod.rs": "mod x;\nmod y;",
            "g/x.rs": "use super::y::Acc;",
            "g/y.rs": "fn f() { super::x::run() }",
        })
        self.assertEqual(rc, 1, out)
        self.assertIn("cycle (depth 2): g::x <-> g::y", out)

    def test_top_level_modules_through_crate_paths(self):
        rc, out = check({
            "lib.rs": "mod a;\nmod b;",
            "a.rs": "use crate::b::{self, B};",
            "b/mod.rs": "mod inner;",
            "b/inner.rs": "fn f() { crate::a::go() }",
        })
        self.assertEqual(rc, 1, out)
        self.assertIn("cycle (depth 1): a <-> b", out)

    def test_parent_and_children_and_test_code_are_no_cycle(self):
        rc, out = check({
            "lib.rs": "mod g;\nmod h;",
            "g/mod.rs": "mod x;\npub use x::X;\nfn f() { x::run() }",
            "g/x.rs": "use super::PANEL;\nuse crate::h::H;",
            "h.rs": "#[cfg(test)]\nmod tests {\n    use crate::g::X;\n}",
            "g/tests.rs": "use crate::h::H;",
        })
        self.assertEqual(rc, 0, out)
        self.assertIn("no cycles", out)

    def test_comments_are_not_references(self):
        rc, out = check({
            "lib.rs": "mod a;\nmod b;",
            "a.rs": "use crate::b::B;",
            "b.rs": "//! See [`crate::a`].\n/* crate::a::f */ fn g() {} // crate::a",
        })
        self.assertEqual(rc, 0, out)


if __name__ == "__main__":
    unittest.main()
