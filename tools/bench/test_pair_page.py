"""Tests of the pair comparison's bookkeeping: pair_page.py's agreement
counts and precision verdicts, pair_tokens.py's id recovery and end tokens.
Run: python3 -m unittest discover -s tools/bench -p 'test_*.py'"""
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pair_page  # noqa: E402
import pair_tokens  # noqa: E402

EOS = 99


def lp(p):
    return math.log(p)


def prompt(ours, llama, **over):
    """A ref.json prompt entry with every side confident (logprob ~0) by default."""
    n_o, n_l = len(ours), len(llama)
    p = {
        "id": "p", "prompt_ids_equal": True,
        "ours_ids": ours, "llama_ids": llama,
        "ours_lp": [lp(0.9)] * n_o, "llama_lp": [lp(0.9)] * n_l,
        "ours_top": [[[t, lp(0.9)], [50, lp(0.05)]] for t in ours],
        "llama_top": [[[t, lp(0.9)], [50, lp(0.05)]] for t in llama],
        "f32_lp_ours": [lp(0.9)] * n_o, "f32_lp_llama": [lp(0.9)] * n_l,
        "f32_lp_ours_top": [[lp(0.9), lp(0.05)] for _ in ours],
        "f32_lp_llama_top": [[lp(0.9), lp(0.05)] for _ in llama],
        "f32_top_llama": [[[t, lp(0.9)]] for t in llama],
        "f32_top_ours": [[[t, lp(0.9)]] for t in ours],
        "text_of": {},
    }
    p.update(over)
    return p


class Agreement(unittest.TestCase):
    def test_prefix(self):
        self.assertEqual(pair_page.prefix([1, 2, 3], [1, 2, 4]), 2)
        self.assertEqual(pair_page.prefix([1, 2], [1, 2, 3]), 2)
        self.assertEqual(pair_page.prefix([], [1]), 0)

    def test_identical_answers_have_no_divergence(self):
        p = prompt([1, 2, 3], [1, 2, 3])
        self.assertIsNone(pair_page.divergence(p, 64, {"ours": 0.1, "llama": 0.1}))

    def test_f32_greedy_agreement_from_its_top1(self):
        self.assertEqual(pair_page.f32_follows([1, 2, 3], [[[1, 0.0]], [[2, 0.0]], [[4, 0.0]]]), 2)
        self.assertEqual(pair_page.f32_follows([1, 2], [[[1, 0.0]], [[2, 0.0]]]), 2)

    def test_only_the_first_max_tokens_count(self):
        p = prompt([1, 2, 3, 4], [1, 2, 3, 5])
        self.assertIsNone(pair_page.divergence(p, 3, {"ours": 0.1, "llama": 0.1}))
        self.assertEqual(pair_page.divergence(p, 4, {"ours": 0.1, "llama": 0.1})["k"], 3)


class Precision(unittest.TestCase):
    def near_tie(self, f32_ours, f32_llama):
        """Servers differ at position 1: ours 7, llama.cpp 8; f32's top-1 is 7."""
        p = prompt([1, 7], [1, 8])
        p["f32_top_llama"][1] = [[7, f32_ours]]
        p["f32_lp_ours"][1] = f32_ours
        p["f32_lp_llama"][1] = f32_llama
        return p

    def test_a_margin_within_delta_is_explained(self):
        d = pair_page.divergence(self.near_tie(lp(0.5), lp(0.45)), 64, {"ours": 0.01, "llama": 0.2})
        self.assertEqual(list(d["margins"]), ["llama"])
        self.assertAlmostEqual(d["margins"]["llama"], lp(0.5) - lp(0.45))
        self.assertTrue(d["explained"])

    def test_a_margin_beyond_delta_is_not(self):
        d = pair_page.divergence(self.near_tie(lp(0.9), lp(0.05)), 64, {"ours": 0.01, "llama": 0.2})
        self.assertFalse(d["explained"])

    def test_both_departing_must_both_be_within_delta(self):
        p = self.near_tie(lp(0.4), lp(0.38))
        p["f32_top_llama"][1] = [[9, lp(0.41)]]  # f32 prefers a third token
        d = pair_page.divergence(p, 64, {"ours": 0.001, "llama": 1.0})
        self.assertEqual(set(d["margins"]), {"ours", "llama"})
        self.assertFalse(d["explained"])
        self.assertTrue(pair_page.divergence(p, 64, {"ours": 1.0, "llama": 1.0})["explained"])

    def test_unknown_delta_explains_nothing(self):
        d = pair_page.divergence(self.near_tie(lp(0.5), lp(0.45)), 64, {"ours": None, "llama": None})
        self.assertFalse(d["explained"])

    def test_margin_errors_count_competitive_alternatives_before_the_difference(self):
        # Side margin 0.9 vs 0.05 (log ratio ~2.89); f32 margin 0.8 vs 0.1 (~2.08).
        errs = pair_page.margin_errors([lp(0.9)] * 3, [[[1, lp(0.9)], [2, lp(0.05)]]] * 3,
                                       [lp(0.8)] * 3, [[lp(0.8), lp(0.1)]] * 3, upto=2)
        self.assertEqual(len(errs), 2)  # positions 0 and 1; the chosen token itself skipped
        self.assertAlmostEqual(errs[0], abs(math.log(0.9 / 0.05) - math.log(0.8 / 0.1)))
        # An alternative 5 nats or more behind under f32 is no competitor.
        far = pair_page.margin_errors([0.0], [[[2, -9.0]]], [0.0], [[-6.0]], upto=1)
        self.assertEqual(far, [])

    def test_delta_is_a_high_percentile(self):
        self.assertEqual(pair_page.percentile(list(range(1, 101)), 0.99), 99)
        self.assertIsNone(pair_page.percentile([], 0.99))

    def test_section_counts(self):
        p1 = prompt([1, 2, 3], [1, 2, 3])
        p2 = self.near_tie(lp(0.5), lp(0.45))
        text, t = pair_page.model_section("m", {"prompts": [p1, p2]}, 64)
        self.assertEqual((t["identical"], t["differ"], t["agreed"]), (1, 1, [3, 1]))
        self.assertIn("1 of 2 answers identical", text)


class Tokens(unittest.TestCase):
    def test_byte_decoder_covers_every_byte(self):
        dec = pair_tokens.byte_decoder()
        self.assertEqual(sorted(dec.values()), list(range(256)))
        self.assertEqual(dec["Ġ"], 0x20)  # GPT-2's space

    def test_end_of_generation_is_one_eos(self):
        ans = {"id": "p", "finish_reason": "stop", "tokens": [{"text": "a"}, {"text": "<|im_end|>"}]}
        by_text = {"a": [1], "<|im_end|>": [EOS]}
        self.assertEqual(pair_tokens.path_ids("ours", ans, by_text, {EOS}, EOS), [[1], [EOS]])
        ans["tokens"].pop()
        self.assertEqual(pair_tokens.path_ids("ours", ans, by_text, {EOS}, EOS), [[1], [EOS]])
        ans["tokens"].append({"text": ""})  # an end token shown as empty text
        self.assertEqual(pair_tokens.path_ids("ours", ans, by_text, {EOS}, EOS), [[1], [EOS]])
        ans["tokens"].pop()
        ans["finish_reason"] = "length"
        self.assertEqual(pair_tokens.path_ids("ours", ans, by_text, {EOS}, EOS), [[1]])

    def test_unknown_text_is_an_error_naming_it(self):
        ans = {"id": "p7", "finish_reason": "length", "tokens": [{"text": "zz"}]}
        with self.assertRaisesRegex(ValueError, r"p7.*'zz'"):
            pair_tokens.path_ids("ours", ans, {}, {EOS}, EOS)

    def test_ambiguous_texts_take_the_other_sides_id_when_possible(self):
        self.assertEqual(pair_tokens.resolve([[5, 6], [7], [8, 9]], [6, 7, 1]), [6, 7, 8])
        self.assertIsNone(pair_tokens.unique_id({"\ufffd": [3, 4]}, "\ufffd"))
        self.assertEqual(pair_tokens.unique_id({"a": [3]}, "a"), 3)


if __name__ == "__main__":
    unittest.main()
