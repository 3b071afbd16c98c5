#!/usr/bin/env python3
"""Verdicts of the three H200 targets from gpu-check's bench.jsonl.

Prints one tab-separated line per target: name, status, detail. Status is
MET or NOT MET (a ratio, mean and half range over the bench seeds), SKIP
on a dry run (tiny CPU models say nothing about an H200; the ratio is still
computed, to prove the plumbing) and FAIL when the runs a target reads are
missing on a GPU run.

    gpu_targets.py BENCH_JSONL [--dry-run]
    gpu_targets.py --self-test
"""
import json
import sys

# Qwen3-0.6B: 596M bf16 parameters read once per step, plus the batch's KV
# (28 layers x 8 kv heads x 128 x K,V x bf16) at a mean context of prompt +
# half an answer (32 + 256 / 2). H200 HBM: 4.8 TB/s.
KV_BYTES = 16 * (32 + 128) * 28 * 8 * 128 * 2 * 2
ROOF_MS = (596e6 * 2 + KV_BYTES) / 4.8e12 * 1e3


def runs(rows, label, n, graphs):
    """{seed: result} of the runs with this label, N and graphs setting."""
    out = {}
    for r in rows:
        if (r["label"] == label and r["graphs"] == graphs
                and r["result"]["options"]["concurrency"] == n):
            out[r.get("seed", 1)] = r["result"]
    return out


def step_ms(res):
    """Mean step of model 0 (prefills included)."""
    return 1e3 * res["wall_s"] / max(res["steps_per_model"][0], 1)


def spread(values):
    return sum(values) / len(values), (max(values) - min(values)) / 2


def describe(values, fmt):
    mean, half = spread(values)
    return f"{fmt(mean)} ± {fmt(half)} over {len(values)} seed(s)"


def verdict(name, values, ok, fmt, target, dry, missing):
    """One output line; `ok(mean)` says whether the target is met."""
    if not values:
        return (name, "SKIP" if dry else "FAIL", f"no runs: {missing}")
    text = f"{describe(values, fmt)} (target {target})"
    if dry:
        return (name, "SKIP", f"dry run, tiny CPU models: {text}; plumbing only")
    return (name, "MET" if ok(spread(values)[0]) else "NOT MET", text)


def roofline(rows, dry):
    """0.6B decode at batch 16: share of the HBM roofline, best graphs setting per seed."""
    by_seed = {}
    for g in ("off", "on"):
        for seed, res in runs(rows, "small-only", 16, g).items():
            by_seed[seed] = max(by_seed.get(seed, 0.0), ROOF_MS / step_ms(res))
    return verdict("target: 0.6B batch-16 roofline", list(by_seed.values()),
                   lambda m: m >= 0.5, lambda x: f"{100 * x:.0f}%", ">= 50%", dry,
                   "small-only N=16")


def graphs(rows, dry):
    """CUDA graphs: cut of the small model's step time at N=1 and N=8 (the smaller of the two per seed)."""
    cuts = {}
    for n in (1, 8):
        off, on = runs(rows, "small-only", n, "off"), runs(rows, "small-only", n, "on")
        for seed in sorted(set(off) & set(on)):
            cut = 1 - step_ms(on[seed]) / step_ms(off[seed])
            cuts[seed] = min(cuts.get(seed, cut), cut)
    return verdict("target: CUDA graphs step cut", list(cuts.values()),
                   lambda m: m >= 0.3, lambda x: f"{100 * x:.0f}%",
                   ">= 30% at N=1 and N=8", dry, "small-only N=1/8 with graphs off and on")


def routed(rows, dry):
    """0.6B + 8B routed at N=8 over 8B-only, each at its best graphs setting, seed by seed."""
    best = {}
    for label in ("routed", "large-only"):
        for g in ("off", "on"):
            for seed, res in runs(rows, label, 8, g).items():
                key = (label, seed)
                best[key] = max(best.get(key, 0.0), res["throughput_tok_s"])
    ratios = [best[("routed", s)] / best[("large-only", s)]
              for s in sorted({s for _, s in best})
              if best.get(("routed", s)) and best.get(("large-only", s))]
    return verdict("target: routed / 8B-only N=8", ratios, lambda m: m >= 1.5,
                   lambda x: f"{x:.2f}x", ">= 1.5x", dry, "routed and large-only at N=8")


def targets(rows, dry):
    return [roofline(rows, dry), graphs(rows, dry), routed(rows, dry)]


def self_test():
    def row(label, n, g, seed, wall, steps, tput):
        return {"label": label, "graphs": g, "seed": seed,
                "result": {"options": {"concurrency": n}, "wall_s": wall,
                           "steps_per_model": [steps, 0], "throughput_tok_s": tput}}
    roof_steps = 1.0 / (ROOF_MS / 1e3)  # steps in 1 s at exactly the roofline
    rows = [row("small-only", 16, "on", s, 1.0, roof_steps * 0.6, 0) for s in (1, 2)]
    rows += [row("small-only", n, g, s, 1.0, steps, 0)
             for n in (1, 8) for s in (1, 2) for g, steps in (("off", 100), ("on", 150))]
    rows += [row("routed", 8, "on", 1, 1, 1, 160.0), row("large-only", 8, "off", 1, 1, 1, 100.0),
             row("routed", 8, "off", 2, 1, 1, 120.0), row("large-only", 8, "on", 2, 1, 1, 100.0)]
    got = {name: (status, detail) for name, status, detail in targets(rows, False)}
    assert got["target: 0.6B batch-16 roofline"][0] == "MET", got
    assert got["target: CUDA graphs step cut"][0] == "MET", got  # 1 - 100/150 = 33%
    assert got["target: routed / 8B-only N=8"][0] == "NOT MET", got  # mean of 1.6 and 1.2
    assert "1.40x ± 0.20x over 2 seed(s)" in got["target: routed / 8B-only N=8"][1], got
    assert [s for _, s, _ in targets([], False)] == ["FAIL"] * 3
    assert [s for _, s, _ in targets(rows, True)] == ["SKIP"] * 3
    print("gpu_targets self-test: ok")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    for line in targets(rows, "--dry-run" in sys.argv[2:]):
        print("\t".join(line))


if __name__ == "__main__":
    main()
