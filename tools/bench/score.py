"""The large model's perplexity of each method's outputs, for bench-cpu.

Usage: score.py MODEL_DIR DATASET RUN_DIR...

For every run folder of `tokenrouter bench` (requests.csv), takes each
prompt's output from the lowest concurrency (as `tokenrouter report` does
for agreement), renders the prompt with the model's chat template exactly as
the gateway's chat endpoint does (user turn, generation prompt), and scores
the output tokens under MODEL_DIR with transformers (teacher forcing, f32).
Writes RUN_DIR/perplexity.json: {"perplexity": exp(total NLL / total
tokens), "mean_nll": ..., "tokens": ..., "outputs": ..., "scorer": ...}.
"""
import csv
import json
import math
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPT_KEYS = ["prompt", "problem", "question", "input", "text"]


def prompt_of(record):
    if isinstance(record, str):
        return record
    for k in PROMPT_KEYS:
        if isinstance(record.get(k), str):
            return record[k]
    for t in record.get("messages") or record.get("conversations") or []:
        if (t.get("role") or t.get("from")) in ("user", "human"):
            return t.get("content") or t.get("value")
    raise SystemExit(f"no prompt in {record}")


def load_dataset(path):
    text = open(path, encoding="utf-8").read()
    if text.lstrip().startswith("["):
        return [prompt_of(r) for r in json.loads(text)]
    return [prompt_of(json.loads(l)) for l in text.splitlines() if l.strip()]


def outputs(run_dir):
    csv.field_size_limit(1 << 30)
    best = {}
    with open(f"{run_dir}/requests.csv", newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["status"] != "200":
                continue
            n, i = int(row["concurrency"]), int(row["index"])
            if i not in best or n < best[i][0]:
                best[i] = (n, row["text"])
    return {i: t for i, (_, t) in sorted(best.items())}


def main():
    model_dir, dataset, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
    torch.set_num_threads(max(1, torch.get_num_threads()))
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompts = load_dataset(dataset)
    for run in runs:
        nll, count, n_out = 0.0, 0, 0
        for i, text in outputs(run).items():
            chat = [{"role": "user", "content": prompts[i % len(prompts)]}]
            prefix = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
            p_ids = tok(prefix, add_special_tokens=False)["input_ids"]
            o_ids = tok(text, add_special_tokens=False)["input_ids"]
            if not o_ids:
                continue
            ids = torch.tensor([p_ids + o_ids])
            with torch.no_grad():
                logits = model(ids).logits[0, len(p_ids) - 1 : -1].float()
            lp = torch.log_softmax(logits, -1).gather(1, torch.tensor(o_ids)[:, None])
            nll -= lp.sum().item()
            count += len(o_ids)
            n_out += 1
        result = {
            "perplexity": math.exp(nll / count) if count else None,
            "mean_nll": nll / count if count else None,
            "tokens": count,
            "outputs": n_out,
            "scorer": f"transformers {transformers.__version__}, {model_dir.rstrip('/').split('/')[-1]}",
        }
        with open(f"{run}/perplexity.json", "w") as f:
            json.dump(result, f, indent=1)
        print(f"{run}: perplexity {result['perplexity']} over {count} tokens", file=sys.stderr)


if __name__ == "__main__":
    main()
