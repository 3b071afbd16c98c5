"""Tests of depth_table.py's verdict: computed from the rows against the
targets of targets.yaml, each bound inclusive, and the table's one source
of targets. Run: python3 -m unittest discover -s tools/bench -p 'test_*.py'"""
import os
import sys
import tempfile
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
        # A targets file of its own, with values no code holds: a summary
        # given no targets must state and apply these, so a bar written in
        # depth_table.py (or a second loader) fails here.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "targets.yaml")
            with open(path, "w") as f:
                f.write("accuracy: {vs_large_only_min: 0.77, large_share_max: 0.33}\n"
                        "speed: {vs_large_only_min: 7.5}\n")
            saved, targets.PATH = targets.PATH, path
            try:
                text = depth_table.summary([row(0.78, 0.3, 7.4)])
                self.assertEqual(targets.value("speed.vs_large_only_min"), 7.5)
                with self.assertRaises(KeyError):
                    targets.value("accuracy.nope")
            finally:
                targets.PATH = saved
        self.assertIn("≥ 0.77 of large-only at ≤ 0.33 share", text)
        self.assertIn("≥ 7.5× large-only", text)
        self.assertIn("accuracy target met", text)
        self.assertIn("speed at N=1 not met (7.40×)", text)

if __name__ == "__main__":
    unittest.main()
