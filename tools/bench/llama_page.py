#!/usr/bin/env python3
"""The computed sections of bench-llamacpp's page (llamacpp.sh passes each to
`tokenrouter report --finding`), printed NUL-separated:

1. bytes of weights each side reads per token at batch 1, from the GGUF's
   tensor table and our model's safetensors headers;
2. client retries and failed requests per run and N (summary.json);
3. where the time per output token goes at N=1, from each side's own
   counters over the N=1 profile pass (llama_client.sh): llama-server's
   `llamacpp:*` /metrics, our `work_by_model` (step timer) in summary.json.
"""
import argparse
import json
import os
import re
import struct
import sys

# ggml type id -> (elements per block, bytes per block), for the types a
# GGUF of this model may hold.
GGML = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
        6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
        10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
        13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
        30: ("BF16", 1, 2)}
# GGUF metadata value types -> struct format (strings and arrays apart).
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def gguf_tensors(path):
    """[(name, elements, type name, bytes)] from a GGUF file's header."""
    with open(path, "rb") as f:
        def read(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]

        def string():
            return f.read(read("Q")).decode("utf-8", "replace")

        def skip_value(t):
            if t == 8:
                string()
            elif t == 9:
                inner, n = read("I"), read("Q")
                for _ in range(n):
                    skip_value(inner)
            else:
                read(SCALAR[t])

        if f.read(4) != b"GGUF":
            sys.exit(f"{path}: not a GGUF file")
        read("I")  # version
        n_tensors, n_kv = read("Q"), read("Q")
        for _ in range(n_kv):
            string()
            skip_value(read("I"))
        out = []
        for _ in range(n_tensors):
            name = string()
            dims = [read("Q") for _ in range(read("I"))]
            kind = read("I")
            read("Q")  # offset
            n = 1
            for d in dims:
                n *= d
            tname, block, size = GGML.get(kind, (f"type {kind}", None, None))
            if block is None:
                sys.exit(f"{path}: tensor {name} has ggml type {kind}, unknown here")
            out.append((name, n, tname, n // block * size))
        return out


def safetensors_params(model_dir):
    """{name: elements} over the model folder's *.safetensors headers."""
    out = {}
    for fn in sorted(os.listdir(model_dir)):
        if fn.endswith(".safetensors"):
            with open(os.path.join(model_dir, fn), "rb") as f:
                header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
            for name, t in header.items():
                if name != "__metadata__":
                    n = 1
                    for d in t["shape"]:
                        n *= d
                    out[name] = n
    return out


def bytes_section(gguf, model_dir, dtype):
    tensors = gguf_tensors(gguf)
    by_type = {}
    for _, n, t, b in tensors:
        e, s = by_type.get(t, (0, 0))
        by_type[t] = (e + n, s + b)
    g_elems = sum(n for _, n, _, _ in tensors)
    g_bytes = sum(b for *_, b in tensors)
    tied = not any(name == "output.weight" for name, *_ in tensors)
    params = safetensors_params(model_dir)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    ours_tied = cfg.get("tie_word_embeddings", False)
    if ours_tied:
        params.pop("lm_head.weight", None)  # the embedding matrix, stored twice
    p = sum(params.values())
    width = {"bf16": 2, "f16": 2, "f32": 4}.get(dtype)
    if width is None:
        sys.exit(f"--dtype {dtype}: name bf16, f16 or f32 (the bytes per weight depend on it)")
    ours = p * width
    mix = ", ".join(f"{t}: {e / 1e6:.2f} M weights, {s / 2**20:.1f} MiB"
                    for t, (e, s) in sorted(by_type.items(), key=lambda x: -x[1][1]))
    return "\n".join([
        "## Bytes of weights per token",
        "",
        "At batch 1 a decode step reads every weight matrix once (the embedding "
        f"matrix whole, as the {'tied ' if tied else ''}output head), so the weights' bytes are the "
        "bytes read per token; a batch of B tokens shares one read. Computed from the GGUF's "
        "tensor table and our model's safetensors headers (parameters counted once where the "
        "head is tied to the embedding).",
        "",
        "| side | weights | parameters | bytes per token at batch 1 | bits per weight |",
        "|---|---|---|---|---|",
        f"| llama-server | GGUF as is ({mix}) | {g_elems / 1e6:.1f} M | {g_bytes / 2**20:.1f} MiB | "
        f"{8 * g_bytes / g_elems:.2f} |",
        f"| tokenrouter large-only | {dtype}, dequantized from the GGUF | {p / 1e6:.1f} M | "
        f"{ours / 2**20:.1f} MiB | {8 * width} |",
        "",
        f"We read {ours / g_bytes:.2f}× llama-server's bytes per token: where both are bound by "
        "memory bandwidth at batch 1, that ratio is llama-server's head start per token.",
    ])


def runs(raw, repeats):
    """[(label, folder)] of both sides, repeat by repeat."""
    out = []
    for r in range(1, repeats + 1):
        sfx = "" if r == 1 else f"-{r}"
        out += [(f"llama-server{sfx}", f"llama-server{sfx}"),
                (f"tokenrouter large-only{sfx}", f"tokenrouter-large-only{sfx}")]
    return out


def failures_section(raw, repeats):
    rows = []
    for label, d in runs(raw, repeats):
        for part in ["", "profile"]:
            path = os.path.join(raw, d, part, "summary.json")
            for s in json.load(open(path)):
                err = (s.get("first_error") or "").replace("|", "\\|")[:120]
                rows.append(f"| {label}{' (N=1 profile)' if part else ''} | {s['concurrency']} | "
                            f"{s['completed']} | {s['failed']} | {s.get('client_retries', 0)} | {err} |")
    return "\n".join([
        "## Client retries and failed requests",
        "",
        "A *client retry* is a request the load generator sent again because it provably never "
        "reached the server: it went out on a reused keep-alive connection and the connection "
        "closed before any response byte (`loadgen::conn`; llama-server closes the connection "
        "after every streamed response although its headers promise keep-alive). Retries are "
        "not failures; a *failed* request is one the server refused, dropped on a fresh "
        "connection, or broke off after answering.",
        "",
        "| run | N | completed | failed | client retries | first error |",
        "|---|---|---|---|---|---|",
        *rows,
    ])


def metrics(path):
    """{name: value} of the unlabelled samples of a Prometheus text."""
    out = {}
    if os.path.exists(path):
        for line in open(path):
            m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*) ([-+0-9.eE]+|nan|inf)$", line.strip())
            if m:
                out[m.group(1)] = float(m.group(2))
    return out


def engine_outside(engine_page):
    """(forward ms, outside ms) per batch-1 engine step, mean of bench-engine's runs."""
    if not os.path.exists(engine_page):
        return None
    vals = []
    for line in open(engine_page):
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) == 7 and c[0] == "1" and c[6].endswith("%"):
            try:
                vals.append((float(c[4]), float(c[5])))
            except ValueError:
                pass
    if not vals:
        return None
    return tuple(sum(v[i] for v in vals) / len(vals) for i in (0, 1))


def profile_section(raw, engine_page):
    rows = []
    for label, d in [("llama-server", "llama-server"), ("tokenrouter large-only", "tokenrouter-large-only")]:
        pdir = os.path.join(raw, d, "profile")
        s = json.load(open(os.path.join(pdir, "summary.json")))[0]
        out_tok, reqs = s["output_tokens"], s["completed"]
        wall = 1e3 * s["duration_s"] / out_tok
        itl = s["itl_ms"]["p50"] if s.get("itl_ms") else float("nan")
        if d.startswith("llama"):
            b, a = metrics(os.path.join(pdir, "metrics.before")), metrics(os.path.join(pdir, "metrics.after"))
            delta = lambda k: a.get("llamacpp:" + k, float("nan")) - b.get("llamacpp:" + k, float("nan"))
            prompt_ms = 1e3 * delta("prompt_seconds_total") / out_tok
            decode_ms = 1e3 * delta("tokens_predicted_seconds_total") / out_tok
            engine = prompt_ms + decode_ms
            what = (f"prompt {prompt_ms:.2f} + generation {decode_ms:.2f} (llama_decode, sampling; "
                    f"{delta('n_decode_total'):.0f} decode calls)")
        else:
            w = s.get("work_by_model", {}).get("reference")
            engine = 1e3 * w["busy_s"] / out_tok if w else float("nan")
            what = (f"forward steps {engine:.2f} ({w['steps']:.0f} steps, prompt and decode; "
                    "sampling is outside the step timer)" if w else "no counters")
        rest = wall - engine
        rows.append(f"| {label} | {s['output_tok_s']:.1f} | {wall:.2f} | {itl:.2f} | {engine:.2f}: {what} | "
                    f"{rest:.2f} ({100 * rest / wall:.0f}%) |")
    eng = engine_outside(engine_page)
    eng_line = ("" if eng is None else
                f" bench-engine ([engine.md](engine.md), its own run) splits our batch-1 decode step "
                f"into {eng[0]:.1f} ms of forward and {eng[1]:.1f} ms outside it (planning, KV "
                "admission, logits to the host, sampling, stop checks, handing the token to the "
                "client's thread): the engine's own overhead is small, the forward is the cost.")
    return "\n".join([
        "## Where the time per token goes at N=1",
        "",
        f"A separate N=1 pass after each side's run (its own prompts' first {s['completed']} "
        "requests, no warm-up), timed by each server's own counters read from /metrics before "
        "and after it: llama-server's `llamacpp:prompt_seconds_total` and "
        "`llamacpp:tokens_predicted_seconds_total` (its slot loop: batch decode and sampling), "
        "ours the scheduler's step timer (`tokenrouter_step_seconds_by_batch_total`: the forward). "
        "*Wall* is the pass's wall time per output token at the client (prompt, decode, HTTP "
        "streaming and the turn-around between requests); *outside* is wall minus the engine "
        "time: HTTP streaming, scheduling between steps, tokenizing and detokenizing, and the "
        "client's turn-around." + eng_line,
        "",
        "| side | tok/s | wall ms / output token | ITL p50 ms | engine ms / output token | outside ms / output token |",
        "|---|---|---|---|---|---|",
        *rows,
    ])


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--raw", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", required=True)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--engine-page", default="")
    a = ap.parse_args()
    sections = [bytes_section(a.gguf, a.model, a.dtype), failures_section(a.raw, a.repeats),
                profile_section(a.raw, a.engine_page)]
    sys.stdout.write("".join(s + "\0" for s in sections))


if __name__ == "__main__":
    main()
