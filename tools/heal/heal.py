"""Heal an early-exit copy by a short distillation from the full model.

Usage: heal.py FULL_DIR EXIT_DIR OUT_DIR [--prompts N] [--max-new T] ...

The early exit (the full model's first K layers under its own final norm and
head) was never trained to stop at layer K, so on its own it writes
near-nonsense. This script teaches its last layers and final norm to finish
the job: the full model answers project-written prompts
(`tools/heal/prompts.py`, none from `data/eval`), its top-k next-token
distribution is kept for every answer token, and the exit's trainable
layers minimise the cross-entropy against it (teacher forcing; the other
layers and the tied embeddings stay frozen, so the healed model keeps the
exit's shape and cost). The result is written in the exit's own
safetensors layout under OUT_DIR, with OUT_DIR/heal.json recording the
settings and the held-out agreement with the full model before and after.
"""
import argparse
import json
import math
import os
import random
import shutil
import time

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file
from tqdm import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer

import prompts as prompt_set


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("full")
    p.add_argument("exit")
    p.add_argument("out")
    p.add_argument("--prompts", type=int, default=256, help="training prompts")
    p.add_argument("--holdout", type=int, default=32, help="held-out prompts for the agreement check")
    p.add_argument("--max-new", type=int, default=128, help="answer tokens per prompt")
    p.add_argument("--train-layers", type=int, default=4, help="last layers of the exit to train")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--topk", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--exclude", default=None, help="JSONL whose questions must not be trained on")
    return p.parse_args()


def chat_ids(tok, texts):
    return [tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True)
            for t in texts]


@torch.no_grad()
def teacher_answers(model, tok, ids, max_new, topk, seed, desc, batch=64):
    """Greedy answers for even batches, sampled (T=0.8) for odd ones, with the
    teacher's top-k log-probabilities at every answer position."""
    out = []
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    for bi, start in enumerate(tqdm(range(0, len(ids), batch), desc=desc, unit="batch")):
        chunk = ids[start:start + batch]
        width = max(len(x) for x in chunk)
        inp = torch.tensor([[pad] * (width - len(x)) + x for x in chunk])
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in chunk])
        torch.manual_seed(seed + bi)
        sample = bi % 2 == 1
        gen = model.generate(input_ids=inp, attention_mask=mask, max_new_tokens=max_new,
                             do_sample=sample, temperature=0.8 if sample else None, top_p=None,
                             top_k=None, pad_token_id=pad, eos_token_id=tok.eos_token_id,
                             output_logits=True, return_dict_in_generate=True)
        logits = torch.stack(gen.logits, dim=1)  # [B, T, V], raw
        lp = torch.log_softmax(logits.float(), dim=-1)
        vals, idx = lp.topk(topk, dim=-1)
        answer = gen.sequences[:, width:]
        for r, prompt in enumerate(chunk):
            toks = answer[r].tolist()
            n = len(toks)
            if tok.eos_token_id in toks:
                n = toks.index(tok.eos_token_id) + 1  # the EOS is a target too
            out.append({"ids": prompt + toks[:n], "answer_from": len(prompt), "n": n,
                        "vals": vals[r, :n].clone(), "idx": idx[r, :n].clone()})
    return out


def batch_loss(model, items, with_entropy=False):
    """Cross-entropy of the student against the teacher's renormalised top-k,
    plus the student's top-1 agreement with the teacher, over answer tokens."""
    width = max(len(x["ids"]) for x in items)
    inp = torch.zeros(len(items), width, dtype=torch.long)
    mask = torch.zeros(len(items), width, dtype=torch.long)
    for r, x in enumerate(items):
        inp[r, :len(x["ids"])] = torch.tensor(x["ids"])
        mask[r, :len(x["ids"])] = 1
    hidden = model.model(input_ids=inp, attention_mask=mask).last_hidden_state
    # The logits at position t predict token t+1: answer token j sits at
    # answer_from + j and is predicted from answer_from + j - 1.
    rows, cols = [], []
    for r, x in enumerate(items):
        for j in range(x["n"]):
            rows.append(r)
            cols.append(x["answer_from"] + j - 1)
    h = hidden[torch.tensor(rows), torch.tensor(cols)]
    logq = torch.log_softmax(model.lm_head(h).float(), dim=-1)
    vals = torch.cat([x["vals"] for x in items])
    idx = torch.cat([x["idx"] for x in items])
    p = torch.softmax(vals, dim=-1)
    loss = -(p * logq.gather(1, idx)).sum(-1).mean()
    agree = (logq.argmax(-1) == idx[:, 0]).float()
    if with_entropy:
        entropy = -(logq.exp() * logq).sum(-1) / math.log(logq.shape[-1])
        return loss, agree, entropy
    return loss, agree.sum().item(), agree.numel()


TAUS = [0.03, 0.05, 0.1, 0.15, 0.2, 0.3]


@torch.no_grad()
def evaluate(model, items, batch):
    """Held-out cross-entropy and top-1 agreement, and for R-Stitch's bars τ
    the share of positions whose normalized entropy is above τ (where the
    exit would hand over) with the agreement on the positions it keeps."""
    model.eval()
    total, agrees, entropies = 0.0, [], []
    for s in range(0, len(items), batch):
        loss, a, h = batch_loss(model, items[s:s + batch], with_entropy=True)
        total += loss.item() * a.numel()
        agrees.append(a)
        entropies.append(h)
    agree, entropy = torch.cat(agrees), torch.cat(entropies)
    n = agree.numel()
    by_tau = {}
    for tau in TAUS:
        keep = entropy <= tau
        by_tau[str(tau)] = {"handover_rate": round(1 - keep.float().mean().item(), 4),
                            "kept_agreement": round(agree[keep].mean().item(), 4) if keep.any() else None}
    return {"cross_entropy": total / n, "top1_agreement": agree.mean().item(), "tokens": n,
            "rstitch_teacher_forced": by_tau}


def main():
    a = parse()
    # OMP_NUM_THREADS wins (one thread is faster on a busy machine, where
    # two spin-waiting threads stall each other).
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1))
    random.seed(a.seed)
    torch.manual_seed(a.seed)
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(a.full)
    teacher = AutoModelForCausalLM.from_pretrained(a.full, dtype=torch.float32).eval()
    student = AutoModelForCausalLM.from_pretrained(a.exit, dtype=torch.float32)

    texts = prompt_set.prompts(a.prompts + a.holdout, a.seed)
    if a.exclude:
        with open(a.exclude, encoding="utf-8") as f:
            banned = {json.loads(line).get("question") for line in f if line.strip()}
        clash = [t for t in texts if t in banned]
        if clash:
            raise SystemExit(f"heal.py: training prompt equals a benchmark question: {clash[0]!r}")
    train_ids = chat_ids(tok, texts[:a.prompts])
    hold_ids = chat_ids(tok, texts[a.prompts:])
    hold = teacher_answers(teacher, tok, hold_ids, a.max_new, a.topk, a.seed + 10_000, "teacher (held out)")
    train = teacher_answers(teacher, tok, train_ids, a.max_new, a.topk, a.seed, "teacher (training)")
    del teacher
    gen_s = time.time() - t0

    before = evaluate(student, hold, a.batch)
    print(f"before: {before}", flush=True)
    for p in student.parameters():
        p.requires_grad_(False)
    layers = student.model.layers
    trained = [f"model.layers.{len(layers) - 1 - i}" for i in range(a.train_layers)][::-1] + ["model.norm"]
    params = []
    for mod in list(layers[len(layers) - a.train_layers:]) + [student.model.norm]:
        for p in mod.parameters():
            p.requires_grad_(True)
            params.append(p)
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0)
    steps = a.epochs * math.ceil(len(train) / a.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=a.lr, total_steps=steps, pct_start=0.1)
    t1 = time.time()
    bar = tqdm(total=steps, desc="distilling", unit="step")
    for epoch in range(a.epochs):
        order = list(range(len(train)))
        random.Random(a.seed + epoch).shuffle(order)
        student.train()
        for s in range(0, len(order), a.batch):
            loss, _, _ = batch_loss(student, [train[i] for i in order[s:s + a.batch]])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}")
    bar.close()
    train_s = time.time() - t1
    after = evaluate(student, hold, a.batch)
    print(f"after: {after}", flush=True)

    os.makedirs(a.out, exist_ok=True)
    state = student.state_dict()
    with safe_open(os.path.join(a.exit, "model.safetensors"), "pt") as f:
        keys, meta = list(f.keys()), f.metadata()
        tensors = {k: (state[k] if any(k.startswith(t + ".") for t in trained) else f.get_tensor(k))
                   .detach().contiguous() for k in keys}
    save_file(tensors, os.path.join(a.out, "model.safetensors"), metadata=meta)
    for name in os.listdir(a.exit):
        if name != "model.safetensors":
            shutil.copy(os.path.join(a.exit, name), os.path.join(a.out, name))
    report = {"trained": trained, "prompts": a.prompts, "holdout_prompts": a.holdout,
              "max_new_tokens": a.max_new, "train_tokens": sum(x["n"] for x in train),
              "epochs": a.epochs, "batch": a.batch, "lr": a.lr, "topk": a.topk, "seed": a.seed,
              "teacher_seconds": round(gen_s, 1), "train_seconds": round(train_s, 1),
              "held_out_before": before, "held_out_after": after}
    with open(os.path.join(a.out, "heal.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
