"""What bf16 weights alone cost greedy parity with f32 (issue 22's target).

Greedy answers to the first held-out questions of data/eval/math30.jsonl,
32 tokens each, from a plain Llama forward in f32 (the reference) and in f32
arithmetic on weights rounded to bf16: no activation is ever rounded, so no
bf16 engine can share more tokens with f32 before the first divergence than
this does. Prints the share per prompt and overall, like tests/bf16_parity.rs.

    .cache/venv/bin/python tests/python/bf16_ceiling.py .cache/models/smollm2-135m
"""

import argparse
import glob
import json
import pathlib

import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

ROOT = pathlib.Path(__file__).resolve().parents[2]


def greedy(w, cfg, prompts, steps):
    """Greedy tokens per prompt; full recompute each step (no KV cache)."""
    h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv, hd = cfg["num_key_value_heads"], cfg["hidden_size"] // cfg["num_attention_heads"]
    eps, theta = cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
    lm = w.get("lm_head.weight", w["model.embed_tokens.weight"])

    def norm(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g

    outs = []
    for p in prompts:
        ids, toks = list(p), []
        for _ in range(steps):
            t = len(ids)
            x = w["model.embed_tokens.weight"][torch.tensor(ids)]
            inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
            fr = torch.outer(torch.arange(t, dtype=torch.float32), inv)
            cos, sin = torch.cat([fr, fr], -1).cos(), torch.cat([fr, fr], -1).sin()

            def rope(v):
                return v * cos + torch.cat([-v[..., hd // 2:], v[..., : hd // 2]], -1) * sin

            for i in range(cfg["num_hidden_layers"]):
                p_ = f"model.layers.{i}"
                a = norm(x, w[f"{p_}.input_layernorm.weight"])
                q = (a @ w[f"{p_}.self_attn.q_proj.weight"].T).view(t, nh, hd).transpose(0, 1)
                k = (a @ w[f"{p_}.self_attn.k_proj.weight"].T).view(t, nkv, hd).transpose(0, 1)
                v = (a @ w[f"{p_}.self_attn.v_proj.weight"].T).view(t, nkv, hd).transpose(0, 1)
                o = torch.nn.functional.scaled_dot_product_attention(
                    rope(q)[None], rope(k)[None], v[None], is_causal=True, enable_gqa=True
                )[0]
                x = x + o.transpose(0, 1).reshape(t, h) @ w[f"{p_}.self_attn.o_proj.weight"].T
                a = norm(x, w[f"{p_}.post_attention_layernorm.weight"])
                g = torch.nn.functional.silu(a @ w[f"{p_}.mlp.gate_proj.weight"].T)
                u = a @ w[f"{p_}.mlp.up_proj.weight"].T
                x = x + (g * u) @ w[f"{p_}.mlp.down_proj.weight"].T
            logits = norm(x[-1:], w["model.norm.weight"]) @ lm.T
            tok = int(logits[0].argmax())
            toks.append(tok)
            ids.append(tok)
        outs.append(toks)
    return outs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = json.load(open(f"{args.model}/config.json"))
    w = {}
    for f in glob.glob(f"{args.model}/*.safetensors"):
        w.update({k: v.float() for k, v in load_file(f).items()})
    tok = AutoTokenizer.from_pretrained(args.model)
    lines = (ROOT / "data/eval/math30.jsonl").read_text().splitlines()[: args.prompts]
    prompts = [
        tok.apply_chat_template(
            [{"role": "user", "content": json.loads(l)["question"]}],
            add_generation_prompt=True,
            tokenize=True,
        )
        for l in lines
    ]
    with torch.no_grad():
        ref = greedy(w, cfg, prompts, args.steps)
        rounded = {k: v.to(torch.bfloat16).float() for k, v in w.items()}
        got = greedy(rounded, cfg, prompts, args.steps)
    shared = [next((j for j, (a, b) in enumerate(zip(r, g)) if a != b), args.steps)
              for r, g in zip(ref, got)]
    for i, s in enumerate(shared):
        print(f"prompt {i}: {s}/{args.steps} tokens before the first divergence")
    total = args.steps * len(prompts)
    print(f"f32 arithmetic on bf16-rounded weights: {sum(shared)}/{total} tokens "
          f"({100 * sum(shared) / total:.1f}%) before the first divergence")


if __name__ == "__main__":
    main()
