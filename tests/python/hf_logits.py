"""Reference next-token logits from Hugging Face transformers (CPU, f32).

Usage: hf_logits.py MODEL_DIR OUT.safetensors --prompt-tokens 64 --steps 32

Tokenizes a fixed text with the model's own tokenizer, keeps the first
`--prompt-tokens` ids, then decodes `--steps` tokens greedily with the KV
cache. Writes `prompt_ids` [P] (int64), `tokens` [S] (int64, the greedy ids)
and `logits` [S, V] (f32, the distribution each greedy token came from).
"""
import argparse

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

TEXT = (
    "The history of the printing press begins in the fifteenth century, when "
    "Johannes Gutenberg combined movable metal type, oil-based inks and a wooden "
    "press adapted from wine making. Within fifty years, presses operated in more "
    "than two hundred cities across Europe, and the price of books fell sharply. "
    "Scholars could now compare identical copies, which changed how knowledge "
    "spread, how errors were corrected, and how arguments were made in public."
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--steps", type=int, default=32)
    args = ap.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    if len(ids) < args.prompt_tokens:
        raise SystemExit(f"text has only {len(ids)} tokens, need {args.prompt_tokens}")
    ids = ids[: args.prompt_tokens]
    model = AutoModelForCausalLM.from_pretrained(
        args.model_dir, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    tokens, logits = [], []
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=True)
        past = out.past_key_values
        step_logits = out.logits[0, -1].float()
        for _ in range(args.steps):
            nxt = int(torch.argmax(step_logits))
            tokens.append(nxt)
            logits.append(step_logits.clone())
            out = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            step_logits = out.logits[0, -1].float()
    save_file(
        {
            "prompt_ids": torch.tensor(ids, dtype=torch.int64),
            "tokens": torch.tensor(tokens, dtype=torch.int64),
            "logits": torch.stack(logits).contiguous(),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
