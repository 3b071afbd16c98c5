#!/usr/bin/env python3
"""The computed sections of bench-pair-llamacpp's page, printed NUL-separated
(pair_llamacpp.sh passes each to `tokenrouter report --finding`).

Usage: pair_page.py --max-tokens N --ref LABEL=ref.json [--ref ...]

Each ref.json is pair_reference.py's output for one model: both servers'
greedy token ids, each side's reported log-probabilities (its chosen token
and its listed alternatives), and the f32 reference's log-probabilities
along both paths (its top-5 at each position).

Per prompt: how many leading tokens our server and llama-server share,
and at the first difference whether precision explains it. The f32
reference (the GGUF's weights dequantized to f32, in transformers) sees the
same prefix there, so it says which side left the f32 choice (the
"departing" side) and by what margin m = f32 logprob of its top-1 minus
that of the departing side's token. A side's arithmetic misjudges such
margins by some amount: delta, the 99th percentile of
|side margin - f32 margin| between its chosen token and each alternative it
lists, over every position where the two servers still agreed on that
model, counting alternatives within 5 nats of the chosen token under f32
(the competitive ones). m <= delta: a near tie that the side's own
precision flips (quantization explains it); m > delta: it does not.
"""

import argparse
import json
import math
import sys

COMPETITIVE_NATS = 5.0
PCTL = 0.99


def prefix(a, b):
    """Length of the common prefix of two id lists."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def percentile(values, q):
    """The q-quantile (nearest rank) of values, or None when empty."""
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]


def margin_errors(lp, top, f32_lp, f32_alt, upto):
    """|side margin - f32 margin| for each listed alternative at positions < upto.

    lp[i]: the side's logprob of its chosen token; top[i]: [id, logprob] of
    its alternatives; f32_lp[i], f32_alt[i]: the f32 logprobs of the same.
    """
    errs = []
    for i in range(min(upto, len(lp), len(top), len(f32_lp), len(f32_alt))):
        if lp[i] is None:
            continue
        for (tid, side_alt), f_alt in zip(top[i], f32_alt[i]):
            if tid is None or f_alt is None or side_alt is None:
                continue
            f_margin = f32_lp[i] - f_alt
            if f_margin == 0 or f_margin >= COMPETITIVE_NATS:
                continue  # the chosen token itself, or not a competitor
            errs.append(abs((lp[i] - side_alt) - f_margin))
    return errs


def truncate(p, n):
    """The two servers' answers cut to the first n tokens."""
    return p["ours_ids"][:n], p["llama_ids"][:n]


def f32_follows(ids, f32_top):
    """How many leading tokens of `ids` are the f32 top-1 (teacher-forced
    along `ids`): the length the f32 model's own greedy answer shares."""
    return prefix(ids, [row[0][0] for row in f32_top])


def deltas(prompts, n):
    """Per side, the margin error delta over the positions both servers shared."""
    errs = {"ours": [], "llama": []}
    for p in prompts:
        o, l = truncate(p, n)
        k = prefix(o, l)
        errs["llama"] += margin_errors(p["llama_lp"], p["llama_top"], p["f32_lp_llama"], p["f32_lp_llama_top"], k)
        errs["ours"] += margin_errors(p["ours_lp"], p["ours_top"], p["f32_lp_ours"], p["f32_lp_ours_top"], k)
    return {s: percentile(e, PCTL) for s, e in errs.items()}, {s: len(e) for s, e in errs.items()}


def divergence(p, n, delta):
    """At the first difference of the two servers: what the f32 reference says."""
    o, l = truncate(p, n)
    k = prefix(o, l)
    if k >= min(len(o), len(l)):
        return None
    a, b = o[k], l[k]
    top1, top1_lp = p["f32_top_llama"][k][0]
    lp_of = {a: p["f32_lp_ours"][k], b: p["f32_lp_llama"][k]}
    departing = [(side, t) for side, t in (("ours", a), ("llama", b)) if t != top1]
    margins = {side: top1_lp - lp_of[t] for side, t in departing}
    explained = all(delta.get(side) is not None and m <= delta[side] for side, m in margins.items())
    return {"k": k, "ours": a, "llama": b, "top1": top1, "f32_lp": lp_of, "margins": margins,
            "explained": explained}


SIDE = {"ours": "ours", "llama": "llama.cpp"}


def f32_departure(ids, f32_top, f32_lp, delta):
    """Where a side first leaves the f32 top-1, with the f32 margin it left
    by and whether that margin is within the side's delta (a near tie)."""
    k = f32_follows(ids, f32_top)
    if k >= len(ids):
        return f"{k}", None
    m = f32_top[k][0][1] - f32_lp[k]
    near = delta is not None and m <= delta
    return f"{k} (by {m:.3f}: {'near tie' if near else '**beyond delta**'})", near


def show(p, tid):
    """A token as `text` (id)."""
    text = p.get("text_of", {}).get(str(tid), "?")
    return f"`{json.dumps(text)[1:-1].replace('|', '&#124;').replace('`', 'ˋ')}` ({tid})"


def model_section(label, doc, n):
    """The per-prompt table of one model, and its summary counts."""
    prompts = doc["prompts"]
    delta, samples = deltas(prompts, n)
    rows, identical, agreed, explained, differ = [], 0, [], 0, 0
    left = {"ours": [], "llama": []}  # per departure from f32: a near tie?
    for p in prompts:
        o, l = truncate(p, n)
        k = prefix(o, l)
        agreed.append(k)
        d = divergence(p, n, delta)
        if d is None:
            identical += 1
            verdict = "identical" + (" (both stop)" if len(o) < n else "")
            at = "–"
        else:
            differ += 1
            explained += d["explained"]
            dep = ", ".join(f"{SIDE[s]} by {m:.3f}" for s, m in d["margins"].items()) or "neither"
            at = (f"ours {show(p, d['ours'])} {d['f32_lp'][d['ours']]:.3f}, llama.cpp {show(p, d['llama'])} "
                  f"{d['f32_lp'][d['llama']]:.3f}; f32 top-1 {show(p, d['top1'])}; departs: {dep}")
            verdict = ("yes: a near tie within the departing side's delta" if d["explained"]
                       else "no: the margin exceeds the departing side's delta")
        fo, near_o = f32_departure(o, p["f32_top_ours"], p["f32_lp_ours"], delta["ours"])
        fl, near_l = f32_departure(l, p["f32_top_llama"], p["f32_lp_llama"], delta["llama"])
        for side, near in (("ours", near_o), ("llama", near_l)):
            if near is not None:
                left[side].append(near)
        rows.append(f"| {p['id']} | {'yes' if p['prompt_ids_equal'] else '**no**'} | {len(o)} | {len(l)} | "
                    f"{k} | {fo} | {fl} | {at} | {verdict} |")
    fmt = {s: ("n/a" if v is None else f"{v:.3g}") for s, v in delta.items()}
    head = (f"## {label}\n\n"
            f"{identical} of {len(prompts)} answers identical over the first {n} tokens; leading tokens in "
            f"common: {', '.join(map(str, agreed))} (mean {sum(agreed) / len(agreed):.1f}). "
            f"Of the {differ} that differ, precision explains {explained}. Margin error delta "
            f"(p99 over {samples['ours']} / {samples['llama']} competitive alternatives where the servers agreed): "
            f"ours {fmt['ours']} nats, llama.cpp {fmt['llama']} nats. "
            f"Against the f32 reference's own greedy answer: ours leaves it on {len(left['ours'])} prompts "
            f"({sum(left['ours'])} near ties), llama.cpp on {len(left['llama'])} ({sum(left['llama'])} near ties).\n\n"
            "| prompt | same prompt ids | ours tokens | llama.cpp tokens | leading tokens agree | "
            "ours follows f32 greedy for | llama.cpp follows f32 greedy for | "
            "at the first difference (f32 logprobs) | explained by precision? |\n"
            "|---|---|---|---|---|---|---|---|---|\n")
    return head + "\n".join(rows), {"identical": identical, "prompts": len(prompts), "differ": differ,
                                    "explained": explained, "agreed": agreed, "left": left}


def main():
    """Command line entry point: sections on stdout, NUL-separated."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--ref", action="append", required=True, help="LABEL=ref.json (one per model)")
    ap.add_argument("--max-tokens", type=int, default=64)
    a = ap.parse_args()
    sections, totals = [], []
    for spec in a.ref:
        label, _, path = spec.partition("=")
        if not path:
            sys.exit(f"--ref expects LABEL=FILE, got {spec!r}")
        with open(path, encoding="utf-8") as f:
            section, t = model_section(label, json.load(f), a.max_tokens)
        sections.append(section)
        totals.append((label, t))
    summary = "## Summary\n\n" + "\n".join(
        f"- {label}: {t['identical']}/{t['prompts']} identical over {a.max_tokens} tokens, "
        f"{sum(t['agreed']) / len(t['agreed']):.1f} leading tokens in common on average; "
        f"of {t['differ']} differences, {t['explained']} explained by precision (a near tie), "
        f"{t['differ'] - t['explained']} not; against the f32 reference's greedy answer, ours leaves it on "
        f"{len(t['left']['ours'])} prompts ({len(t['left']['ours']) - sum(t['left']['ours'])} beyond its delta), "
        f"llama.cpp on {len(t['left']['llama'])} ({len(t['left']['llama']) - sum(t['left']['llama'])} beyond its delta)."
        for label, t in totals)
    sys.stdout.write("\0".join([summary] + sections))


if __name__ == "__main__":
    main()
