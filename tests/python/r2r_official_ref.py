"""A published-format R2R router and its reference outputs, written from the
official R2R code (thu-nics/R2R: r2r/models/router.py and
r2r/utils/switching.py), not from our Rust.

Usage:
  r2r_official_ref.py OUT_DIR --hidden H [--vocab V] [--topk K] [--dims 32,32]
                      [--expansion 4] [--normalize] [--threshold T] [--batch B] [--seed S]

What the official code does, and this script repeats:
- the router class is HiddenStatesTokenLMHeadLogitsClassifier: the small
  model's embedding matrix copied into `token_embeddings`; `logits_projection`
  Linear(logits_size -> H); `combined_projection` over cat[hidden, token
  embedding, projected logits]; a ClassifierBackbone (input_projection, one
  pre-LayerNorm residual MLP block per hidden_dims entry, the last keeping
  its width, output LayerNorm + Linear -> 1 logit). With normalize_input the
  hidden state and the token embedding go through LayerNorms (both sized
  hidden_states_size) and the top-k logits through a softmax;
- `capture_init_args` records only the constructor arguments a trainer
  passed, with a string dtype turned into a torch dtype;
- `save_model` torch.saves {model_type, init_args, common_args: {threshold,
  input_type}, model_specific_args, state_dict} and deletes
  `token_embeddings.weight` from the state dict of the file it publishes;
- NeuralSwitching feeds torch.topk(logits, k=init_args["logits_size"]),
  the last hidden state and the sampled token, takes sigmoid of the output,
  and sends the token to the large model when the probability >= threshold.

Writes OUT_DIR/router.pt and, with --batch B > 0, OUT_DIR/reference.safetensors:
hidden [B,H], embeddings [V,H] (the "small model" matrix), tokens [B] int64,
logits [B,V], probs [B] and to_large [B] (int64 0/1) from the official math.
"""
import argparse
import os

import torch
from torch import nn
from safetensors.torch import save_file


class ClassifierBlock(nn.Module):
    def __init__(self, input_dim, output_dim, expansion_factor=4, dropout_rate=0.3):
        super().__init__()
        self.layer_norm = nn.LayerNorm(input_dim)
        self.mlp = nn.Sequential(
            nn.Linear(input_dim, input_dim * expansion_factor),
            nn.GELU(),
            nn.Dropout(dropout_rate),
            nn.Linear(input_dim * expansion_factor, output_dim),
            nn.Dropout(dropout_rate),
        )
        self.dim_change = nn.Linear(input_dim, output_dim) if input_dim != output_dim else nn.Identity()

    def forward(self, x):
        return self.dim_change(x) + self.mlp(self.layer_norm(x))


class ClassifierBackbone(nn.Module):
    def __init__(self, input_dim, output_dim, hidden_dims, expansion_factor, dropout_rate):
        super().__init__()
        self.blocks = nn.ModuleList()
        self.input_projection = nn.Linear(input_dim, hidden_dims[0])
        block_dims = hidden_dims + [hidden_dims[-1]]
        for i in range(len(block_dims) - 1):
            self.blocks.append(ClassifierBlock(block_dims[i], block_dims[i + 1], expansion_factor, dropout_rate))
        self.output_layer = nn.Sequential(nn.LayerNorm(hidden_dims[-1]), nn.Linear(hidden_dims[-1], output_dim))
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.kaiming_normal_(m.weight)
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = self.input_projection(x)
        for block in self.blocks:
            x = block(x)
        return self.output_layer(x)


class HiddenStatesTokenLMHeadLogitsClassifier(nn.Module):
    def __init__(self, embedding_matrix, hidden_states_size, logits_size, hidden_dims,
                 expansion_factor, dropout_rate, normalize_input):
        super().__init__()
        self.normalize_input = normalize_input
        if normalize_input:
            self.layer_norm_hidden_states = nn.LayerNorm(hidden_states_size)
            self.layer_norm_token = nn.LayerNorm(hidden_states_size)
        vocab, embed_dim = embedding_matrix.shape
        self.token_embeddings = nn.Embedding(vocab, embed_dim)
        with torch.no_grad():
            self.token_embeddings.weight.copy_(embedding_matrix)
        self.logits_projection = nn.Linear(logits_size, hidden_states_size)
        self.combined_projection = nn.Linear(hidden_states_size + embed_dim + hidden_states_size, hidden_dims[0])
        self.backbone = ClassifierBackbone(hidden_dims[0], 1, hidden_dims, expansion_factor, dropout_rate)

    def forward(self, hidden_states, token, logits):
        token_embeddings = self.token_embeddings(token)
        if self.normalize_input:
            hidden_states = self.layer_norm_hidden_states(hidden_states)
            token_embeddings = self.layer_norm_token(token_embeddings)
            logits = torch.nn.functional.softmax(logits, dim=-1)
        combined = torch.cat([hidden_states, token_embeddings, self.logits_projection(logits)], dim=-1)
        return self.backbone(self.combined_projection(combined))


def perturb(model, g):
    """Training moves norms and biases off their initial values; so do we,
    so a reader that skipped one would be caught."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=g))
            if isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.copy_(0.05 * torch.randn(m.bias.shape, generator=g))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--vocab", type=int, default=500)
    ap.add_argument("--topk", type=int, default=100)
    ap.add_argument("--dims", default="32,32")
    ap.add_argument("--expansion", type=int, default=4)
    ap.add_argument("--normalize", action="store_true")
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--median-threshold", action="store_true",
                    help="with --batch: save the median of the batch's probabilities as the threshold")
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--embeddings", help="safetensors file whose `embeddings` [V,H] is the small model's matrix")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    g = torch.Generator().manual_seed(a.seed + 1)
    os.makedirs(a.out_dir, exist_ok=True)
    if a.embeddings:
        from safetensors.torch import load_file
        emb = load_file(a.embeddings)["embeddings"].float()
    else:
        emb = torch.randn(a.vocab, a.hidden, generator=g)
    dims = [int(d) for d in a.dims.split(",")]
    # What a trainer passes, as capture_init_args records it.
    init_args = {"hidden_states_size": a.hidden, "logits_size": a.topk, "hidden_dims": dims,
                 "expansion_factor": a.expansion, "dropout_rate": 0.1, "use_position_embedding": False,
                 "freeze_lm_head": True, "normalize_input": a.normalize,
                 "pretrained_model_name": "Qwen/Qwen3-0.6B", "dtype": torch.float32}
    model = HiddenStatesTokenLMHeadLogitsClassifier(emb, a.hidden, a.topk, dims, a.expansion, 0.1, a.normalize)
    perturb(model, g)
    model.eval()
    config = {"model_type": "HiddenStatesTokenLMHeadLogitsClassifier", "init_args": init_args,
              "common_args": {"threshold": float(a.threshold), "input_type": ["hidden_states", "token", "logits"]},
              "model_specific_args": {}, "state_dict": model.state_dict()}
    del config["state_dict"]["token_embeddings.weight"]
    if a.batch > 0:
        vocab = emb.shape[0]
        hidden = torch.randn(a.batch, a.hidden, generator=g)
        tokens = torch.randint(0, vocab, (a.batch,), generator=g)
        logits = 3 * torch.randn(a.batch, vocab, generator=g)
        with torch.no_grad():
            top_logits, _ = torch.topk(logits, k=a.topk, dim=-1)
            out = model(hidden_states=hidden, token=tokens, logits=top_logits)
            probs = torch.sigmoid(out).squeeze(-1)
        if a.median_threshold:
            config["common_args"]["threshold"] = float(probs.median())
        to_large = (probs >= config["common_args"]["threshold"]).to(torch.int64)
        save_file({"hidden": hidden, "embeddings": emb.contiguous(), "tokens": tokens, "logits": logits,
                   "probs": probs, "to_large": to_large}, os.path.join(a.out_dir, "reference.safetensors"))
    torch.save(config, os.path.join(a.out_dir, "router.pt"))


if __name__ == "__main__":
    main()
