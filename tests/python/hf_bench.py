"""Batched greedy decode throughput of transformers on the CPU, for bench-engine.

Usage: hf_bench.py MODEL_DIR --batch B --prompt-tokens P --gen-tokens G --threads T
Prints one JSON line: {"batch": B, "decode_tok_s": X, "prefill_s": Y}.
Decode time covers G forward steps of the whole batch with the KV cache,
after one prefill, the same work the Rust side times.
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--gen-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=dtype)
    model.eval()
    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    ids = torch.randint(100, vocab - 1, (args.batch, args.prompt_tokens), generator=g)
    with torch.no_grad():
        t0 = time.perf_counter()
        out = model(ids, use_cache=True)
        prefill = time.perf_counter() - t0
        past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        t0 = time.perf_counter()
        for _ in range(args.gen_tokens):
            out = model(nxt, past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        decode = time.perf_counter() - t0
    print(json.dumps({
        "batch": args.batch,
        "decode_tok_s": args.batch * args.gen_tokens / decode,
        "prefill_s": prefill,
    }))


if __name__ == "__main__":
    main()
