"""Random router checkpoints and PyTorch reference outputs for the router tests.

Usage:
  router_ref.py r2r OUT_DIR --hidden H [--embed E] [--topk K] [--dims 32,32,32]
                [--expansion 4] [--normalize] [--threshold T] [--vocab V] [--batch B] [--seed S]
  router_ref.py citer OUT_DIR --hidden H [--batch B] [--seed S]

Writes OUT_DIR/router.pt in the layout the real routers are saved in:
  r2r:   torch.save({"model_type", "init_args", "common_args": {"threshold"},
         "model_specific_args", "state_dict"}) of an R2R router
         (HiddenStatesTokenLMHeadLogitsClassifier layout: logits_projection,
         combined_projection, backbone.input_projection, backbone.blocks.{i}
         .{layer_norm, mlp.0, mlp.3}, backbone.output_layer.{0,1}; with
         --normalize also layer_norm_hidden_states / layer_norm_token), with
         the small model's token_embeddings copy the official file drops;
  citer: torch.save(state_dict) of the CITER MLP (mlp.{0,1,4,5}, classifier,
         BatchNorm running statistics and num_batches_tracked).
Weights are random, norms and biases perturbed so every parameter matters.
With --batch B > 0 also writes OUT_DIR/reference.safetensors: random inputs
(hidden [B,H], embeddings [V,E], tokens [B] int64, logits [B,V] for r2r) and
`probs` [B], the eval-mode PyTorch output (float32).
"""
import argparse
import os

import torch
from torch import nn
from safetensors.torch import save_file


class Block(nn.Module):
    def __init__(self, d_in, d_out, expansion):
        super().__init__()
        self.layer_norm = nn.LayerNorm(d_in)
        self.mlp = nn.Sequential(
            nn.Linear(d_in, d_in * expansion), nn.GELU(), nn.Dropout(0.3),
            nn.Linear(d_in * expansion, d_out), nn.Dropout(0.3))
        self.dim_change = nn.Linear(d_in, d_out) if d_in != d_out else nn.Identity()

    def forward(self, x):
        return self.dim_change(x) + self.mlp(self.layer_norm(x))


class Backbone(nn.Module):
    def __init__(self, dims, expansion):
        super().__init__()
        self.input_projection = nn.Linear(dims[0], dims[0])
        widths = dims + [dims[-1]]
        self.blocks = nn.ModuleList(
            [Block(widths[i], widths[i + 1], expansion) for i in range(len(dims))])
        self.output_layer = nn.Sequential(nn.LayerNorm(dims[-1]), nn.Linear(dims[-1], 1))

    def forward(self, x):
        x = self.input_projection(x)
        for b in self.blocks:
            x = b(x)
        return self.output_layer(x)


class R2RRouter(nn.Module):
    def __init__(self, hidden, embed, vocab, topk, dims, expansion, normalize):
        super().__init__()
        self.normalize = normalize
        if normalize:
            self.layer_norm_hidden_states = nn.LayerNorm(hidden)
            self.layer_norm_token = nn.LayerNorm(embed)
        self.token_embeddings = nn.Embedding(vocab, embed)
        self.logits_projection = nn.Linear(topk, hidden)
        self.combined_projection = nn.Linear(2 * hidden + embed, dims[0])
        self.backbone = Backbone(dims, expansion)
        self.topk = topk

    def forward(self, hidden, token, logits):
        e = self.token_embeddings(token)
        top = torch.sort(torch.topk(logits, self.topk, dim=-1).values, dim=-1, descending=True).values
        if self.normalize:
            hidden = self.layer_norm_hidden_states(hidden)
            e = self.layer_norm_token(e)
            top = torch.softmax(top, dim=-1)
        x = torch.cat([hidden, e, self.logits_projection(top)], dim=-1)
        return torch.sigmoid(self.backbone(self.combined_projection(x))).squeeze(-1)


class CiterRouter(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(hidden, 2 * hidden), nn.BatchNorm1d(2 * hidden), nn.ReLU(), nn.Dropout(0.1),
            nn.Linear(2 * hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(0.1))
        self.classifier = nn.Linear(hidden, 1)

    def forward(self, hidden):
        return torch.sigmoid(self.classifier(self.mlp(hidden))).squeeze(-1)


def perturb(model, g):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.LayerNorm, nn.BatchNorm1d)):
                m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=g))
            if isinstance(m, nn.BatchNorm1d):
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=g))
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g))
                m.num_batches_tracked.fill_(100)
            if isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.copy_(0.05 * torch.randn(m.bias.shape, generator=g))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["r2r", "citer"])
    ap.add_argument("out_dir")
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--embed", type=int)
    ap.add_argument("--topk", type=int, default=100)
    ap.add_argument("--dims", default="32,32,32")
    ap.add_argument("--expansion", type=int, default=4)
    ap.add_argument("--normalize", action="store_true")
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    g = torch.Generator().manual_seed(a.seed + 1)
    os.makedirs(a.out_dir, exist_ok=True)
    ref = {}
    if a.kind == "r2r":
        embed = a.embed or a.hidden
        dims = [int(d) for d in a.dims.split(",")]
        vocab = a.vocab if a.batch > 0 else 8
        model = R2RRouter(a.hidden, embed, vocab, a.topk, dims, a.expansion, a.normalize).eval()
        perturb(model, g)
        init_args = {"hidden_states_size": a.hidden, "logits_size": a.topk, "hidden_dims": dims,
                     "expansion_factor": a.expansion, "dropout_rate": 0.3,
                     "normalize_input": a.normalize, "dtype": torch.float32}
        torch.save({"model_type": "HiddenStatesTokenLMHeadLogitsClassifier",
                    "init_args": init_args,
                    "common_args": {"threshold": a.threshold, "input_type": ["hidden_states", "token", "logits"]},
                    "model_specific_args": {},
                    "state_dict": model.state_dict()}, os.path.join(a.out_dir, "router.pt"))
        if a.batch > 0:
            hidden = torch.randn(a.batch, a.hidden, generator=g)
            tokens = torch.randint(0, vocab, (a.batch,), generator=g)
            logits = 3 * torch.randn(a.batch, vocab, generator=g)
            with torch.no_grad():
                probs = model(hidden, tokens, logits)
            ref = {"hidden": hidden, "embeddings": model.token_embeddings.weight.detach().clone(),
                   "tokens": tokens, "logits": logits, "probs": probs}
    else:
        model = CiterRouter(a.hidden).eval()
        perturb(model, g)
        torch.save(model.state_dict(), os.path.join(a.out_dir, "router.pt"))
        if a.batch > 0:
            hidden = torch.randn(a.batch, a.hidden, generator=g)
            with torch.no_grad():
                probs = model(hidden)
            ref = {"hidden": hidden, "probs": probs}
    if ref:
        save_file({k: v.contiguous() for k, v in ref.items()}, os.path.join(a.out_dir, "reference.safetensors"))


if __name__ == "__main__":
    main()
