"""Train an R2R-style divergence router for a small/large pair.

Usage: r2r_router.py TEACHER.pt SMALL_DIR OUT_DIR [--target-share S] [--epochs E] ...

The router is R2R's network (HiddenStatesTokenLMHeadLogitsClassifier, as the
official thu-nics/R2R code builds it): an MLP over the small model's final
hidden state, the embedding of the token the small model would write, and
its top-k logits. It predicts whether that token differs from the large
model's. The labels come from the teacher's answers (`teacher.py`), teacher
forced: at each answer position, the small model's top-1 against the
large model's top-1.

The small model runs in the dtype the engine serves it in (`--dtype auto`:
bf16 on a CPU with native bf16, as `make run`), so the router learns the
hidden states and logits it will read (on the CPU pair the held-out AUC is
the same either way, 0.850 against 0.849).

The threshold is calibrated on the first half of the held-out prompts, so
that the router flags `--target-share` of their positions. Precision,
recall and AUC are measured on the other half. Neither half was trained on,
by the router or by the heal. OUT_DIR/router.pt is the published layout
that `tokenrouter` loads (`scheduler_kwargs.router_path`): a torch.save
dict with model_type, init_args, common_args.threshold and state_dict, the
small model's embedding copy dropped as R2R's save_model drops it.
OUT_DIR/training.json records the settings and the held-out numbers.
"""
import argparse
import json
import os
import time

import torch
from torch import nn
from transformers import AutoModelForCausalLM

from batching import pad_right

MODEL_TYPE = "HiddenStatesTokenLMHeadLogitsClassifier"


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("teacher", help="the teacher's answers (teacher.py)")
    p.add_argument("small", help="the small model's directory (the healed exit)")
    p.add_argument("out", help="output directory")
    p.add_argument("--topk", type=int, default=100, help="logits the router reads (R2R: 100)")
    p.add_argument("--dims", default="256,256", help="hidden_dims of the backbone")
    p.add_argument("--expansion", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--target-share", type=float, default=0.3,
                   help="share of held-out positions the calibrated threshold sends to the large model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=["auto", "bf16", "f32"], default="auto",
                   help="the small model's dtype for the features: the engine's (auto: bf16 on a CPU "
                        "with avx512_bf16 or amx_bf16, f32 elsewhere, as `tokenrouter --dtype auto`)")
    p.add_argument("--critical-prob", type=float, default=0.0,
                   help="count a difference only where the large model gives the small model's token "
                        "less than this probability (0: off)")
    p.add_argument("--critical-margin", type=float, default=0.0,
                   help="count a difference only where the large model's top-1 probability leads the "
                        "small model's token by more than this (0: off)")
    return p.parse_args()


class Block(nn.Module):
    """Pre-LayerNorm residual MLP (R2R's ClassifierBlock)."""

    def __init__(self, dim_in, dim_out, expansion, dropout):
        super().__init__()
        self.layer_norm = nn.LayerNorm(dim_in)
        self.mlp = nn.Sequential(nn.Linear(dim_in, dim_in * expansion), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(dim_in * expansion, dim_out), nn.Dropout(dropout))
        self.dim_change = nn.Linear(dim_in, dim_out) if dim_in != dim_out else nn.Identity()

    def forward(self, x):
        return self.dim_change(x) + self.mlp(self.layer_norm(x))


class Backbone(nn.Module):
    """Input projection, one block per hidden_dims entry, LayerNorm + one logit."""

    def __init__(self, dim_in, dims, expansion, dropout):
        super().__init__()
        self.input_projection = nn.Linear(dim_in, dims[0])
        widths = dims + [dims[-1]]
        self.blocks = nn.ModuleList(Block(widths[i], widths[i + 1], expansion, dropout)
                                    for i in range(len(dims)))
        self.output_layer = nn.Sequential(nn.LayerNorm(dims[-1]), nn.Linear(dims[-1], 1))

    def forward(self, x):
        x = self.input_projection(x)
        for b in self.blocks:
            x = b(x)
        return self.output_layer(x)


class Router(nn.Module):
    """R2R's router with normalize_input: LayerNorms on the hidden state and
    the token embedding, a softmax over the top-k logits."""

    def __init__(self, embeddings, topk, dims, expansion, dropout):
        super().__init__()
        hidden = embeddings.shape[1]
        self.layer_norm_hidden_states = nn.LayerNorm(hidden)
        self.layer_norm_token = nn.LayerNorm(hidden)
        self.token_embeddings = nn.Embedding.from_pretrained(embeddings, freeze=True)
        self.logits_projection = nn.Linear(topk, hidden)
        self.combined_projection = nn.Linear(3 * hidden, dims[0])
        self.backbone = Backbone(dims[0], dims, expansion, dropout)

    def forward(self, hidden, token, top_logits):
        h = self.layer_norm_hidden_states(hidden)
        e = self.layer_norm_token(self.token_embeddings(token))
        l = self.logits_projection(torch.softmax(top_logits, dim=-1))
        return self.backbone(self.combined_projection(torch.cat([h, e, l], dim=-1))).squeeze(-1)


@torch.no_grad()
def features(model, items, topk, critical_prob=0.0, critical_margin=0.0, batch=16):
    """Teacher-forced, at every answer position: the small model's final
    hidden state, its top-k raw logits (sorted), its top-1 token, and the
    label: 1 where that token differs from the teacher's top-1.

    The two `critical_*` bars are cheap stand-ins for R2R's "critical
    divergence" (a difference that changes the answer), from the teacher's
    kept top-k alone (a token outside it has probability 0). On the CPU
    pair both lost to the plain label (docs/models.md), so both are off by default."""
    hs, tops, toks, labels = [], [], [], []
    for s in range(0, len(items), batch):
        chunk = items[s:s + batch]
        inp, mask = pad_right(chunk)
        hidden = model.model(input_ids=inp, attention_mask=mask).last_hidden_state
        for r, x in enumerate(chunk):
            h = hidden[r, x["answer_from"] - 1:x["answer_from"] - 1 + x["n"]]
            top, idx = model.lm_head(h).float().topk(topk, dim=-1)
            hs.append(h.float())
            tops.append(top)
            toks.append(idx[:, 0])
            small_top = idx[:, 0]
            differs = small_top != x["idx"][:, 0]
            hit = x["idx"] == small_top[:, None]
            p_small = torch.where(hit, x["vals"].float().exp(), torch.zeros(())).sum(-1)
            if critical_prob > 0:
                differs &= p_small < critical_prob
            if critical_margin > 0:
                differs &= x["vals"][:, 0].float().exp() - p_small > critical_margin
            labels.append(differs.float())
    return torch.cat(hs), torch.cat(tops), torch.cat(toks), torch.cat(labels)


def auc(scores, labels):
    """Area under the ROC curve (rank statistic; ties counted half)."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    if len(pos) == 0 or len(neg) == 0:
        return None
    ranks = torch.empty(len(scores))
    ranks[scores.argsort()] = torch.arange(1, len(scores) + 1, dtype=torch.float)
    # Average the ranks of tied scores.
    uniq, inv = torch.unique(scores, return_inverse=True)
    ranks = torch.zeros(len(uniq)).index_add_(0, inv, ranks)[inv] / torch.bincount(inv).float()[inv]
    return ((ranks[labels == 1].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg))).item()


def at_threshold(probs, labels, t):
    """Share sent large, precision and recall of divergences at threshold t."""
    flagged = probs >= t
    tp = (flagged & (labels == 1)).sum().item()
    return {"threshold": round(t, 4), "large_share": round(flagged.float().mean().item(), 4),
            "precision": round(tp / max(flagged.sum().item(), 1), 4),
            "recall": round(tp / max((labels == 1).sum().item(), 1), 4)}


@torch.no_grad()
def predict(router, data, batch=4096):
    router.eval()
    h, top, tok, _ = data
    return torch.cat([torch.sigmoid(router(h[s:s + batch], tok[s:s + batch], top[s:s + batch]))
                      for s in range(0, len(h), batch)])


def cpu_has_native_bf16():
    """The engine's rule for `--dtype auto` (engine-config's dtype_choice)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = {w for line in f if line.startswith("flags") for w in line.split(":", 1)[1].split()}
    except OSError:
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def feature_dtype(choice):
    if choice == "auto":
        choice = "bf16" if cpu_has_native_bf16() else "f32"
    return torch.bfloat16 if choice == "bf16" else torch.float32


def main():
    a = parse()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1))
    torch.manual_seed(a.seed)
    t0 = time.time()
    items = torch.load(a.teacher, weights_only=True)
    train_items = [x for x in items if x["split"] == "train"]
    hold = [x for x in items if x["split"] == "holdout"]
    calib_items, test_items = hold[:len(hold) // 2], hold[len(hold) // 2:]
    if not train_items or not calib_items or not test_items:
        raise SystemExit("r2r_router.py: the teacher file needs training and at least 2 held-out prompts")
    dtype = feature_dtype(a.dtype)
    small = AutoModelForCausalLM.from_pretrained(a.small, dtype=dtype).eval()
    train, calib, test = (features(small, xs, a.topk, a.critical_prob, a.critical_margin) for xs in (train_items, calib_items, test_items))
    embeddings = small.get_input_embeddings().weight.detach().float().clone()
    del small
    features_s = time.time() - t0

    dims = [int(d) for d in a.dims.split(",")]
    router = Router(embeddings, a.topk, dims, a.expansion, a.dropout)
    params = [p for p in router.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.01)
    n = len(train[0])
    steps = a.epochs * ((n + a.batch - 1) // a.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=a.lr, total_steps=steps, pct_start=0.1)
    # Divergences are the majority on a weak exit; weigh the classes evenly.
    pos = train[3].mean().item()
    loss_fn = nn.BCEWithLogitsLoss(pos_weight=torch.tensor((1 - pos) / max(pos, 1e-6)))
    t1 = time.time()
    for epoch in range(a.epochs):
        router.train()
        order = torch.randperm(n)
        total = 0.0
        for s in range(0, n, a.batch):
            i = order[s:s + a.batch]
            loss = loss_fn(router(train[0][i], train[2][i], train[1][i]), train[3][i])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(i)
        score = auc(predict(router, calib), calib[3])
        print(f"epoch {epoch + 1}: train loss {total / n:.4f}, calibration AUC "
              f"{'n/a (one class)' if score is None else round(score, 4)}", flush=True)
    train_s = time.time() - t1

    calib_p, test_p = predict(router, calib), predict(router, test)
    # The bar that flags target_share of the calibration positions.
    threshold = torch.quantile(calib_p, 1 - a.target_share).item()
    sweep = [{"calibrated_share": s, **at_threshold(test_p, test[3], torch.quantile(calib_p, 1 - s).item())}
             for s in (0.1, 0.2, 0.3, 0.4, 0.5)]
    report = {"model_type": MODEL_TYPE, "small_model": os.path.basename(os.path.normpath(a.small)),
              "train_prompts": len(train_items), "train_positions": n,
              "train_divergence_rate": round(pos, 4),
              "calibration_prompts": len(calib_items), "calibration_positions": len(calib[0]),
              "test_prompts": len(test_items), "test_positions": len(test[0]),
              "test_divergence_rate": round(test[3].mean().item(), 4),
              "feature_dtype": str(dtype).replace("torch.", ""),
              "critical_prob": a.critical_prob, "critical_margin": a.critical_margin,
              "target_share": a.target_share, "held_out": at_threshold(test_p, test[3], threshold),
              "held_out_auc": auc(test_p, test[3]),
              "held_out_sweep": sweep, "topk": a.topk, "hidden_dims": dims,
              "expansion_factor": a.expansion, "epochs": a.epochs, "lr": a.lr, "batch": a.batch,
              "parameters": sum(p.numel() for p in params),
              "features_seconds": round(features_s, 1), "train_seconds": round(train_s, 1)}

    state = {k: v.detach().clone().contiguous() for k, v in router.state_dict().items()
             if k != "token_embeddings.weight"}
    init_args = {"hidden_states_size": embeddings.shape[1], "logits_size": a.topk, "hidden_dims": dims,
                 "expansion_factor": a.expansion, "dropout_rate": a.dropout,
                 "use_position_embedding": False, "normalize_input": True}
    checkpoint = {"model_type": MODEL_TYPE, "init_args": init_args,
                  "common_args": {"threshold": float(threshold),
                                  "input_type": ["hidden_states", "token", "logits"]},
                  "model_specific_args": {}, "state_dict": state}
    os.makedirs(a.out, exist_ok=True)
    torch.save(checkpoint, os.path.join(a.out, "router.pt"))
    with open(os.path.join(a.out, "training.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
