"""Every target in targets.yaml carries its source, and every source names a
target. Run: python3 -m unittest discover -s tools/bench -p 'test_*.py'"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import targets  # noqa: E402


class Sources(unittest.TestCase):
    def test_every_target_has_a_source_and_every_source_a_target(self):
        t = targets.load()
        names = targets.keys(t)
        self.assertGreater(len(names), 10)
        missing = [k for k in names if not str(t["sources"].get(k, "")).strip()]
        self.assertEqual(missing, [], "targets without a source")
        self.assertEqual(sorted(set(t["sources"]) - set(names)), [], "sources of no target")

    def test_source_names_a_missing_one(self):
        t = {"a": {"b": 1}, "sources": {}}
        with self.assertRaises(KeyError) as e:
            targets.source("a.b", t)
        self.assertIn("a.b", str(e.exception))
        self.assertEqual(targets.source("a.b", {"a": {"b": 1}, "sources": {"a.b": "x"}}), "x")


if __name__ == "__main__":
    unittest.main()
