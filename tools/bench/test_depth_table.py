"""Tests of depth_table.py's verdict: computed from the rows against the
targets of targets.yaml, each bound inclusive, and the table's one source
of targets. Run: python3 -m unittest discover -s tools/bench -p 'test_*.py'"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import depth_table  # noqa: E402
import targets  # noqa: E402

T = {"accuracy": {"vs_large_only_min": 0.8, "large_share_max": 0.4},
     "speed": {"vs_large_only_min": 1.2}}


def row(acc, share, n1, depth="12", tau="0.3"):
    return {"depth": depth, "tau": tau, "acc": acc, "share": share, "n1": n1, "n8": 1.0}


class Verdict(unittest.TestCase):
    def test_bounds_are_inclusive(self):
        self.assertEqual(depth_table.meets(row(0.8, 0.4, 1.2), T), (True, True))

    def test_each_target_fails_alone(self):
        self.assertEqual(depth_table.meets(row(0.79, 0.4, 1.2), T), (False, True))
        self.assertEqual(depth_table.meets(row(0.8, 0.41, 1.2), T), (False, True))
        self.assertEqual(depth_table.meets(row(0.8, 0.4, 1.19), T), (True, False))

    def test_verdict_needs_one_row_meeting_both(self):
        split = [row(0.9, 0.3, 1.0), row(0.5, 0.3, 1.5, depth="20")]
        self.assertIn("**Verdict: no pair in the table meets both.**",
                      depth_table.summary(split, T))
        both = split + [row(0.85, 0.35, 1.25, tau="0.4")]
        self.assertIn("**Verdict: at least one pair meets both.**", depth_table.summary(both, T))

    def test_stated_targets_are_the_ones_applied(self):
        # A stricter target file changes both the statement and the verdict.
        strict = {"accuracy": {"vs_large_only_min": 0.95, "large_share_max": 0.4},
                  "speed": {"vs_large_only_min": 1.2}}
        text = depth_table.summary([row(0.9, 0.3, 1.3)], strict)
        self.assertIn("≥ 0.95 of large-only", text)
        self.assertIn("accuracy target not met", text)
        self.assertIn("no pair in the table meets both", text)

    def test_default_targets_come_from_the_file(self):
        t = targets.load()
        self.assertEqual(targets.value("accuracy.vs_large_only_min"),
                         t["accuracy"]["vs_large_only_min"])
        text = depth_table.summary([row(1.0, 0.0, 2.0)])
        self.assertIn(f"≥ {t['speed']['vs_large_only_min']}× large-only", text)
        with self.assertRaises(KeyError):
            targets.value("accuracy.nope")


if __name__ == "__main__":
    unittest.main()
