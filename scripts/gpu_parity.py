"""Greedy continuation of given prompt ids with Hugging Face transformers.

Usage: gpu_parity.py MODEL_DIR --prompt-ids '[1, 2, 3]' --steps 32
                     [--device cuda] [--dtype f32|bf16]

Prints one JSON line: {"ids": [...]} (stops early at the model's EOS ids,
as our engine does). The GPU check compares it with `tokenrouter generate
--print-ids` on the same checkpoint and device.
"""
import argparse
import json

import torch
from transformers import AutoModelForCausalLM, GenerationConfig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--prompt-ids", required=True)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    args = ap.parse_args()

    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    if args.device == "cpu":
        torch.set_num_threads(2)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, torch_dtype=dtype)
    model.to(args.device).eval()
    eos = set()
    for source in (model.config, GenerationConfig.from_pretrained(args.model_dir)):
        e = getattr(source, "eos_token_id", None)
        eos.update(e if isinstance(e, list) else [e] if e is not None else [])

    ids = torch.tensor([json.loads(args.prompt_ids)], device=args.device)
    out, past = [], None
    with torch.no_grad():
        for _ in range(args.steps):
            res = model(input_ids=ids, past_key_values=past, use_cache=True)
            past = res.past_key_values
            nxt = int(res.logits[0, -1].float().argmax())
            out.append(nxt)
            if nxt in eos:
                break
            ids = torch.tensor([[nxt]], device=args.device)
    print(json.dumps({"ids": out}))


if __name__ == "__main__":
    main()
