"""Heal an early-exit copy by a short distillation from the full model.

Usage: heal.py TEACHER.pt EXIT_DIR OUT_DIR [--epochs E] [--lr LR] ...

The early exit (the full model's first K layers under its own final norm and
head) was never trained to stop at layer K, so on its own it writes
near-nonsense. This script teaches its last layers and final norm to finish
the job: the full model's answers to project-written prompts and its top-k
next-token distribution at every answer token (`teacher.py`, prompts from
`tools/heal/prompts.py`, none from `data/eval`) are the targets, and the
exit's trainable layers minimise the cross-entropy against them (teacher
forcing; the other
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
from transformers import AutoModelForCausalLM

from batching import pad_right


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("teacher", help="the teacher's answers (teacher.py)")
    p.add_argument("exit")
    p.add_argument("out")
    p.add_argument("--train-layers", type=int, default=4, help="last layers of the exit to train")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=["auto", "bf16", "f32"], default="auto",
                   help="matmul precision while training (auto: bf16 where the CPU has it); "
                        "the weights and optimizer stay float32 either way")
    return p.parse_args()


def train_dtype(choice):
    """bf16 autocast halves the step on a CPU with native bf16 (AMX or
    avx512_bf16); elsewhere it is emulated and slower than float32."""
    if choice == "auto":
        return torch.bfloat16 if torch.ops.mkldnn._is_mkldnn_bf16_supported() else torch.float32
    return torch.bfloat16 if choice == "bf16" else torch.float32


def batch_loss(model, items, with_entropy=False):
    """Cross-entropy of the student against the teacher's renormalised top-k,
    plus the student's top-1 agreement with the teacher, over answer tokens."""
    inp, mask = pad_right(items)
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
    items = torch.load(a.teacher, weights_only=True)
    with open(os.path.splitext(a.teacher)[0] + ".json") as f:
        teacher_meta = json.load(f)
    train = [x for x in items if x["split"] == "train"]
    hold = [x for x in items if x["split"] == "holdout"]
    student = AutoModelForCausalLM.from_pretrained(a.exit, dtype=torch.float32)

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
    dtype = train_dtype(a.dtype)
    t1 = time.time()
    bar = tqdm(total=steps, desc="distilling", unit="step")
    for epoch in range(a.epochs):
        order = list(range(len(train)))
        random.Random(a.seed + epoch).shuffle(order)
        student.train()
        for s in range(0, len(order), a.batch):
            with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
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
    # safetensors writes through a private temp file (mode 0600); the weights are read
    # by other users too (the model pods run as UID 65532).
    os.chmod(os.path.join(a.out, "model.safetensors"), 0o644)
    for name in os.listdir(a.exit):
        if name != "model.safetensors":
            shutil.copy(os.path.join(a.exit, name), os.path.join(a.out, name))
    report = {"trained": trained, "prompts": len(train), "holdout_prompts": len(hold),
              "max_new_tokens": teacher_meta["max_new_tokens"],
              "train_tokens": sum(x["n"] for x in train), "epochs": a.epochs, "batch": a.batch,
              "lr": a.lr, "train_dtype": str(dtype).removeprefix("torch."),
              "topk": teacher_meta["topk"], "seed": a.seed, "teacher": teacher_meta,
              "teacher_seconds": round(teacher_meta["engine_seconds"]
                                       + teacher_meta["teacher_forced_seconds"], 1),
              "train_seconds": round(train_s, 1),
              "held_out_before": before, "held_out_after": after}
    with open(os.path.join(a.out, "heal.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
