"""The full model's answers to the project's training prompts: what the heal
(heal.py) and the divergence router (r2r_router.py) learn from.

Usage: teacher.py BIN FULL_DIR OUT.pt [--prompts N] [--holdout M] [--max-new T]
                  [--dtype bf16] [--exclude FILE.jsonl ...]

Two passes, each where it is cheapest:
1. The answers come from our own engine: every prompt goes to one
   `tokenrouter generate --prompts-file` run, so they decode as one
   continuous batch. Even groups of 64 prompts are answered greedily, odd
   ones sampled at T = 0.8 (seeded), so the students also see the teacher's
   less likely paths.
2. One teacher-forced forward of the full model (transformers, float32) over
   each prompt + answer keeps the teacher's top-k log-probabilities at every
   answer position: the heal's targets, and its top-1 is the router's label.

OUT.pt holds, per prompt, `ids` (prompt + answer), `answer_from`, `n`
(answer tokens, an ending EOS included), `vals` / `idx` ([n, k] top-k
log-probabilities and token ids) and `split` ("train" or "holdout"); OUT.json
beside it records the settings and the time of each pass.
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import prompts as prompt_set
from batching import pad_right

# Prompts per greedy / sampled group (the old transformers batches).
GROUP = 64


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bin", help="the tokenrouter binary")
    p.add_argument("full", help="the full model's directory")
    p.add_argument("out", help="where the answers go (.pt)")
    p.add_argument("--prompts", type=int, default=256, help="training prompts")
    p.add_argument("--holdout", type=int, default=48, help="held-out prompts (never trained on)")
    p.add_argument("--max-new", type=int, default=64, help="answer tokens per prompt")
    p.add_argument("--topk", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="bf16", help="the engine's dtype for the answers")
    p.add_argument("--max-batch-size", type=int, default=96, help="the engine's batch")
    p.add_argument("--kv-cache-fraction", type=float, default=0.15)
    p.add_argument("--forward-batch", type=int, default=16, help="sequences per teacher-forced forward")
    p.add_argument("--exclude", action="append", default=[],
                   help="JSONL whose questions must not be trained on (repeatable)")
    return p.parse_args()


def banned_questions(files):
    """Every `question` / `prompt` / `problem` of the evaluation files."""
    banned = set()
    for path in files:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    banned.update(row[k] for k in ("question", "prompt", "problem") if k in row)
    return banned


def engine_answers(a, prompt_ids):
    """Token ids of every answer, from one batched `tokenrouter generate` run."""
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "prompts.jsonl"), os.path.join(tmp, "answers.jsonl")
        with open(src, "w") as f:
            for i, ids in enumerate(prompt_ids):
                # Held-out answers are greedy: the agreement check reads
                # the teacher's most likely path.
                sampled = i < a.prompts and (i // GROUP) % 2 == 1
                line = {"prompt_ids": ids, "temperature": 0.8 if sampled else 0.0, "seed": a.seed + i}
                f.write(json.dumps(line) + "\n")
        cmd = [a.bin, "generate", "--model", a.full, "--prompts-file", src, "--out", dst,
               "--max-tokens", str(a.max_new), "--dtype", a.dtype,
               "--max-batch-size", str(a.max_batch_size),
               "--kv-cache-fraction", str(a.kv_cache_fraction)]
        print("teacher:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        with open(dst) as f:
            rows = [json.loads(line) for line in f]
    if [r["index"] for r in rows] != list(range(len(prompt_ids))):
        raise SystemExit("teacher.py: the engine's answers do not match the prompts")
    return [r["ids"] for r in rows]


@torch.no_grad()
def teacher_topk(model, items, topk, batch):
    """The teacher's top-k log-probabilities at every answer position, from
    one forward over prompt + answer (longest first, so batches pad little)."""
    order = sorted(range(len(items)), key=lambda i: -len(items[i]["ids"]))
    for s in range(0, len(order), batch):
        chunk = [items[i] for i in order[s:s + batch]]
        inp, mask = pad_right(chunk)
        hidden = model.model(input_ids=inp, attention_mask=mask).last_hidden_state
        for r, x in enumerate(chunk):
            # The logits at position t predict token t + 1.
            at = hidden[r, x["answer_from"] - 1:x["answer_from"] - 1 + x["n"]]
            lp = torch.log_softmax(model.lm_head(at).float(), dim=-1)
            x["vals"], x["idx"] = (t.contiguous() for t in lp.topk(topk, dim=-1))
        print(f"teacher-forced: {min(s + batch, len(order))}/{len(order)}", flush=True)


def main():
    a = parse()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1))
    tok = AutoTokenizer.from_pretrained(a.full)
    texts = prompt_set.prompts(a.prompts + a.holdout, a.seed)
    banned = banned_questions(a.exclude)
    clash = [t for t in texts if t in banned]
    if clash:
        raise SystemExit(f"teacher.py: training prompt equals a benchmark question: {clash[0]!r}")
    prompt_ids = [tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True)
                  for t in texts]

    t0 = time.time()
    answers = engine_answers(a, prompt_ids)
    engine_s = time.time() - t0
    items = []
    for i, (p, ans) in enumerate(zip(prompt_ids, answers)):
        if not ans:
            continue  # nothing to learn from (cannot happen with max_new >= 1)
        items.append({"ids": p + ans, "answer_from": len(p), "n": len(ans),
                      "split": "train" if i < a.prompts else "holdout"})

    t1 = time.time()
    model = AutoModelForCausalLM.from_pretrained(a.full, dtype=torch.float32).eval()
    teacher_topk(model, items, a.topk, a.forward_batch)
    forward_s = time.time() - t1

    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    torch.save(items, a.out + ".tmp")
    os.replace(a.out + ".tmp", a.out)
    meta = {"prompts": a.prompts, "holdout_prompts": a.holdout, "max_new_tokens": a.max_new,
            "topk": a.topk, "seed": a.seed, "engine_dtype": a.dtype,
            "answer_tokens": sum(x["n"] for x in items),
            "engine_seconds": round(engine_s, 1), "teacher_forced_seconds": round(forward_s, 1),
            "excluded_files": [os.path.basename(f) for f in a.exclude]}
    with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
        json.dump(meta, f, indent=2)
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
