"""transformers on a Qwen2.5-Coder GGUF: the reference of tests/qwen_pair.rs.

Usage:
  qwen_pair_ref.py tokens GGUF TEXTS.json OUT.json
      transformers' GGUF tokenizer (AutoTokenizer with gguf_file=): the ids
      of each text (no special tokens added) as a JSON list of lists.
  qwen_pair_ref.py logits GGUF PROMPTS.json OUT.safetensors
      transformers' model on the GGUF (its tensors dequantized to f32 by
      gguf-py): for each prompt (a list of token ids) the logits at every
      position, prefilled in one forward. Writes `logits_<i>` [len, vocab].
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint


def split(gguf: str) -> tuple[str, str]:
    # transformers takes the folder and the file name separately.
    path = os.path.realpath(gguf)
    return os.path.dirname(path), os.path.basename(path)


def tokens(gguf: str, texts_path: str, out: str) -> None:
    folder, name = split(gguf)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    with open(texts_path, encoding="utf-8") as f:
        texts = json.load(f)
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    with open(out, "w", encoding="utf-8") as f:
        json.dump(ids, f)


def load_f32(gguf: str):
    """transformers' config, tensor names and dequantization of the GGUF
    (its reader, gguf-py underneath), the weights in f32. Not
    from_pretrained(gguf_file=): that path requires `accelerate` only to
    place the weights."""
    folder, name = split(gguf)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    config._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = load_gguf_checkpoint(
        os.path.join(folder, name), return_tensors=True, model_to_load=model
    )["tensors"]
    state = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in tensors.items()}
    del tensors
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise SystemExit(f"{gguf}: transformers gave missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model.eval()


def logits(gguf: str, prompts_path: str, out: str) -> None:
    torch.set_num_threads(os.cpu_count() or 1)
    model = load_f32(gguf)
    with open(prompts_path, encoding="utf-8") as f:
        prompts = json.load(f)
    result = {}
    with torch.no_grad():
        for i, ids in enumerate(prompts):
            out_i = model(torch.tensor([ids]), use_cache=False)
            result[f"logits_{i}"] = out_i.logits[0].float().contiguous()
    save_file(result, out)


def main() -> None:
    if len(sys.argv) != 5 or sys.argv[1] not in ("tokens", "logits"):
        raise SystemExit(__doc__)
    {"tokens": tokens, "logits": logits}[sys.argv[1]](*sys.argv[2:])


if __name__ == "__main__":
    main()
