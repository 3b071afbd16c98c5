"""The exit-depth table of `make bench-eval` (tools/bench/eval_depth.sh).

Usage: depth_table.py RAW HEAL12.json HEAL20.json DEPTH|TAU|EVAL|SPEED ...

Each row names a pair (the exit's depth and R-Stitch's τ), the eval result
it answered short300 with ($RAW/eval/EVAL.json) and the bench run that
timed it ($RAW/SPEED/summary.json); large-only's eval and its timing
(`depth-large-only`) are the denominators. Prints one Markdown note: a
paragraph and the table.
"""
import json
import os
import sys

import targets


def load(path):
    with open(path) as f:
        return json.load(f)


def tok_s(raw, run, n):
    rows = load(os.path.join(raw, run, "summary.json"))
    return next(r["output_tok_s"] for r in rows if r["concurrency"] == n)


def accuracy(result):
    """Accuracy and its shown form, with the report's Wilson 95% interval
    (`tokenrouter eval` writes it: loadgen's `stats::wilson`)."""
    k, n = result["correct"], result["total"]
    lo, hi = result["accuracy_ci95"]
    return k / max(n, 1), f"{k}/{n} ({100 * k / max(n, 1):.1f}%, {100 * lo:.1f}–{100 * hi:.1f}%)"


def agreement(heal):
    try:
        return f"{load(heal)['held_out_after']['top1_agreement']:.3f}"
    except (OSError, KeyError):
        return "n/a"


def meets(r, t):
    """(accuracy target met, speed target at N=1 met) for one row, against
    the targets `t` (tools/bench/targets.yaml)."""
    acc, speed = t["accuracy"], t["speed"]
    return ((r["acc"] >= acc["vs_large_only_min"] and r["share"] <= acc["large_share_max"]),
            r["n1"] >= speed["vs_large_only_min"])


def summary(rows, t=None):
    """Which rows meet issue 23's accuracy target and issue 22's speed
    target at N=1 (both from tools/bench/targets.yaml), computed."""
    t = targets.load() if t is None else t
    acc_min = t["accuracy"]["vs_large_only_min"]
    share_max = t["accuracy"]["large_share_max"]
    speed_min = t["speed"]["vs_large_only_min"]
    parts = []
    for r in rows:
        acc_ok, speed_ok = meets(r, t)
        parts.append(f"{r['depth']} layers at τ={r['tau']}: accuracy target "
                     f"{'met' if acc_ok else 'not met'} ({r['acc']:.2f} at share {r['share']:.3f}), "
                     f"speed at N=1 {'met' if speed_ok else 'not met'} ({r['n1']:.2f}×)")
    both = [r for r in rows if all(meets(r, t))]
    verdict = ("at least one pair meets both" if both else "no pair in the table meets both")
    return (f"Accuracy (≥ {acc_min} of large-only at ≤ {share_max} share) and speed "
            f"(≥ {speed_min}× large-only at N=1), "
            f"row by row: {'; '.join(parts)}. **Verdict: {verdict}.**")


def main():
    raw, heal12, heal20, rows = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    large = load(os.path.join(raw, "eval", "large-only.json"))
    large_acc, _ = accuracy(large)
    base = {n: tok_s(raw, "depth-large-only", n) for n in (1, 8)}
    small = {"12": load(os.path.join(raw, "eval", "small-only.json")),
             "20": load(os.path.join(raw, "eval", "deep-small-only.json"))}
    agree = {"12": agreement(heal12), "20": agreement(heal20)}
    lines = ["| exit | held-out agreement | small-only | R-Stitch τ | large share | accuracy (95% CI) "
             "| / large-only | tok/s / large-only, N=1 | N=8 |",
             "|---|---|---|---|---|---|---|---|---|"]
    both = []
    for row in rows:
        depth, tau, ev, speed = row.split("|")
        r = load(os.path.join(raw, "eval", ev + ".json"))
        acc, shown = accuracy(r)
        p = {"depth": depth, "tau": tau, "share": r["large_share"] or 0,
             "acc": acc / large_acc if large_acc else 0,
             "n1": tok_s(raw, speed, 1) / base[1], "n8": tok_s(raw, speed, 8) / base[8]}
        both.append(p)
        lines.append(f"| {depth} layers | {agree[depth]} | {accuracy(small[depth])[1]} | {tau} "
                     f"| {p['share']:.3f} | {shown} | {p['acc']:.2f} | {p['n1']:.2f} | {p['n8']:.2f} |")
    head = ("**Exit depth: the trade the default pair sits on.** The only real model here is "
            "SmolLM2-135M, so the small model is an early exit of it. The same heal on the 20-layer "
            "exit (make's `smollm2-135m-l20-healed`) against the default's 12-layer one: accuracy "
            f"on these items (large-only: {accuracy(large)[1]}) and output tok/s over large-only's "
            f"in the same run ({base[1]:.1f} and {base[8]:.1f} tok/s; `tokenrouter bench` on "
            "`data/eval/math30.jsonl` as bench-cpu, 10 prompts, 96 tokens, one run each, so the "
            "speed ratios carry run-to-run spread of a few percent).")
    print(head + "\n\n" + "\n".join(lines) + "\n\n" + summary(both))


if __name__ == "__main__":
    main()
