#!/usr/bin/env python3
"""The f32 reference for the pair comparison: transformers on the GGUF's
weights dequantized to f32, scored along both servers' greedy paths.

Usage: pair_reference.py --gguf FILE --llama llama.json --ours ours.json --out ref.json

pair_collect.py wrote llama.json (llama-server, token ids) and ours.json
(our server, token texts). This script:
1. maps our token texts back to ids through the GGUF's vocabulary (byte-level
   BPE: a token's bytes, decoded as UTF-8 with replacement as our API
   shows them); a text that several ids share (a piece of a multi-byte
   character) keeps all of them as candidates;
2. loads the GGUF into transformers' Qwen2 in f32 (every quantized block
   dequantized: the exact values both servers multiply by);
3. per prompt, on the prompt ids our server rendered: one teacher-forced
   forward along llama-server's answer and one along ours: the f32
   log-probability of each token either side chose and of each alternative
   it listed, and the f32 top-5 at each position. Where the f32 top-1
   follows a side's tokens, the f32 model's own greedy answer is that side's
   answer: the first position where it does not is where they part, so no
   separate generation is needed.

Needs the reference venv (torch, transformers, gguf).
"""

import argparse
import json
import os
import sys

# transformers' dequantization bar would fill the make log.
os.environ.setdefault("TQDM_DISABLE", "1")

import torch
from gguf import GGUFReader
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

from pair_tokens import byte_decoder, path_ids, resolve, unique_id

TOP = 5


def field_value(reader, key):
    """A scalar or string-array metadata value of the GGUF."""
    f = reader.fields[key]
    if len(f.data) == 1 and f.types[0] != 9:  # a scalar (9: array)
        return f.parts[f.data[0]].tolist()[0]
    return [bytes(f.parts[i]).decode("utf-8") if f.types[-1] == 8 else f.parts[i].tolist()[0]
            for i in f.data]


def vocabulary(path):
    """(texts, end-of-generation ids, eos id) from the GGUF's tokenizer."""
    reader = GGUFReader(path)
    tokens = field_value(reader, "tokenizer.ggml.tokens")
    types = field_value(reader, "tokenizer.ggml.token_type")
    eos = field_value(reader, "tokenizer.ggml.eos_token_id")
    dec = byte_decoder()
    texts = []
    for tok, kind in zip(tokens, types):
        if kind == 1:  # NORMAL: byte-level encoded
            raw = bytes(dec[c] for c in tok) if all(c in dec for c in tok) else tok.encode()
        else:  # CONTROL, USER_DEFINED, ...: the text itself
            raw = tok.encode()
        texts.append(raw.decode("utf-8", errors="replace"))
    # Qwen2.5 ends an answer with <|im_end|> or <|endoftext|>.
    eog = {i for i, t in enumerate(tokens) if t in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>")} | {eos}
    return texts, eog, eos


def load_f32(path):
    """transformers' model of the GGUF, every block dequantized to f32.

    transformers' own GGUF reader (config, tensor names and dequantization)
    without from_pretrained's gguf_file path, which insists on `accelerate`
    only to place the weights.
    """
    folder, name = os.path.split(os.path.abspath(path))
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = load_gguf_checkpoint(path, return_tensors=True, model_to_load=model)["tensors"]
    missing, unexpected = model.load_state_dict({k: torch.as_tensor(v, dtype=torch.float32)
                                                 for k, v in tensors.items()}, strict=False)
    # A tied head has no tensor of its own; anything else missing is an error.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        sys.exit(f"{path}: transformers' GGUF reader gave missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model.eval()


@torch.no_grad()
def score_path(model, prompt_ids, ids, alts):
    """Along `ids` after `prompt_ids`: the f32 log-probability of each token,
    the f32 top-5 at each position, and the f32 log-probability of each id
    in alts[i] (the side's own listed alternatives at position i)."""
    if not ids:
        return [], [], []
    x = torch.tensor([prompt_ids + ids])
    logits = model(x).logits[0, len(prompt_ids) - 1: len(prompt_ids) - 1 + len(ids)].float()
    lp = torch.log_softmax(logits, dim=-1)
    chosen = lp[torch.arange(len(ids)), torch.tensor(ids)].tolist()
    v, i = lp.topk(TOP, dim=-1)
    tops = [[[int(a), float(b)] for a, b in zip(ii.tolist(), vv.tolist())] for ii, vv in zip(i, v)]
    alt_lp = [[None if t is None else float(lp[k, t]) for t in (alts[k] if k < len(alts) else [])]
              for k in range(len(ids))]
    return chosen, tops, alt_lp


def main():
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--llama", required=True)
    ap.add_argument("--ours", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    texts, eog, eos = vocabulary(a.gguf)
    by_text = {}
    for i, t in enumerate(texts):
        by_text.setdefault(t, []).append(i)
    with open(a.llama, encoding="utf-8") as f:
        llama = {p["id"]: p for p in json.load(f)["prompts"]}
    with open(a.ours, encoding="utf-8") as f:
        ours_doc = json.load(f)
    model = load_f32(a.gguf)
    results = []
    for op in ours_doc["prompts"]:
        lp_ = llama.get(op["id"])
        if lp_ is None:
            sys.exit(f"{a.llama}: no answer for prompt {op['id']}")
        llama_ids = [c[0] for c in path_ids("llama", lp_, by_text, eog, eos)]
        ours_cands = path_ids("ours", op, by_text, eog, eos)
        ours_ids = resolve(ours_cands, llama_ids)
        prompt_ids = op["prompt_ids"]
        llama_top = [[[x["id"], x["logprob"]] for x in t["top"]] for t in lp_["tokens"]][:len(llama_ids)]
        # An alternative whose text several ids share cannot be scored: None.
        ours_top = [[[unique_id(by_text, x["text"]), x["logprob"]] for x in t["top"]]
                    for t in op["tokens"]][:len(ours_ids)]
        lp_llama, top_llama, alt_llama = score_path(model, prompt_ids, llama_ids, [[t for t, _ in x] for x in llama_top])
        lp_ours, top_ours, alt_ours = score_path(model, prompt_ids, ours_ids, [[t for t, _ in x] for x in ours_top])
        results.append({
            "id": op["id"],
            "prompt_ids_equal": prompt_ids == lp_["prompt_ids"],
            "prompt_tokens": len(prompt_ids),
            "llama_ids": llama_ids, "ours_ids": ours_ids,
            "ours_ambiguous": [i for i, c in enumerate(ours_cands) if len(c) > 1],
            "llama_lp": [t["logprob"] for t in lp_["tokens"]][:len(llama_ids)],
            "ours_lp": [t["logprob"] for t in op["tokens"]][:len(ours_ids)],
            "f32_lp_llama": lp_llama, "f32_top_llama": top_llama,
            "f32_lp_ours": lp_ours, "f32_top_ours": top_ours,
            "llama_top": llama_top, "ours_top": ours_top,
            "f32_lp_llama_top": alt_llama, "f32_lp_ours_top": alt_ours,
            "texts": {"llama": lp_["text"], "ours": op["text"]},
            "text_of": {str(t): texts[t] for t in set(llama_ids) | set(ours_ids)
                        | {x[0] for row in top_llama + top_ours for x in row}},
        })
        print(f"[f32 {os.path.basename(a.gguf)}] {op['id']} scored", flush=True)
    with open(a.out + ".tmp", "w", encoding="utf-8") as f:
        json.dump({"gguf": os.path.basename(a.gguf), "eos": eos, "prompts": results}, f)
    os.replace(a.out + ".tmp", a.out)


if __name__ == "__main__":
    main()
