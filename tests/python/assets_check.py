"""Reference checks for the model assets the Rust side writes.

Invoked by tests/assets_*.rs; each subcommand prints one JSON object on its
last stdout line and exits non-zero (with the reason on stderr) on failure.

  dequant GGUF DIR           tensors of DIR equal gguf-py's dequantization
  blocks GGUF DUMP_DIR       writes random tensors of every supported type
                             with gguf-py, and gguf-py's dequantization of
                             each to DUMP_DIR/<name>.f32 (raw little-endian)
  load DIR TEXTS_JSON        transformers loads model + tokenizer; encodings
  random DIR                 transformers loads a random Qwen3 checkpoint
  early-exit SRC DERIVED K   DERIVED equals SRC cut to its first K layers
"""

import json
import sys

import numpy as np


def fail(msg):
    print(msg, file=sys.stderr)
    sys.exit(1)


def hf_name(gguf_name):
    """llama.cpp → transformers name, written independently of the Rust map."""
    fixed = {
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight",
    }
    if gguf_name in fixed:
        return fixed[gguf_name]
    _, layer, part, _ = gguf_name.split(".")
    parts = {
        "attn_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
        "attn_q": "self_attn.q_proj",
        "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    return f"model.layers.{layer}.{parts[part]}.weight"


def unpermute(w, n_head):
    """Inverse of convert_hf_to_gguf's permute (reshape(n_head, 2, ...).swapaxes(1, 2))."""
    rows, cols = w.shape
    return w.reshape(n_head, rows // n_head // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def cmd_dequant(gguf_path, out_dir):
    import gguf
    from safetensors.numpy import load_file

    reader = gguf.GGUFReader(gguf_path)
    field = lambda k: int(reader.fields[k].parts[reader.fields[k].data[0]][0])
    heads = field("llama.attention.head_count")
    kv_heads = field("llama.attention.head_count_kv")
    ours = load_file(f"{out_dir}/model.safetensors")

    by_type = {}
    for t in reader.tensors:
        by_type.setdefault(t.tensor_type.name, []).append(t)
    picked = []
    for ty, tensors in sorted(by_type.items()):
        picks = {0, len(tensors) // 2, len(tensors) - 1}
        picked += [tensors[i] for i in sorted(picks)]
    # Always cover both permuted projections.
    for t in reader.tensors:
        if t.name in ("blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.29.attn_k.weight") and t not in picked:
            picked.append(t)

    checked = []
    for t in picked:
        ref = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        shape = [int(d) for d in reversed(t.shape)]
        ref = ref.reshape(shape)
        if t.name.endswith("attn_q.weight"):
            ref = unpermute(ref, heads)
        elif t.name.endswith("attn_k.weight"):
            ref = unpermute(ref, kv_heads)
        name = hf_name(t.name)
        if name not in ours:
            fail(f"{name} (from {t.name}) missing in {out_dir}")
        got = ours[name]
        if list(got.shape) != shape:
            fail(f"{name}: shape {list(got.shape)}, gguf-py {shape}")
        diff = float(np.max(np.abs(got - ref)))
        scale = float(np.max(np.abs(ref)))
        if diff > 1e-6 * max(scale, 1.0):
            fail(f"{name} ({t.tensor_type.name}): max |ours - gguf-py| = {diff} (max |w| = {scale})")
        checked.append({"name": name, "type": t.tensor_type.name, "max_abs_diff": diff})
    print(json.dumps({"types": sorted(by_type), "checked": checked}))


# Byte offsets of the f16 scale fields in one block, per type: random bytes
# there could be NaN or inf, so they are overwritten with sane values.
SCALE_FIELDS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
}


def cmd_blocks(gguf_path, dump_dir):
    import gguf

    rng = np.random.default_rng(1234)
    rows, cols = 3, 512
    writer = gguf.GGUFWriter(gguf_path, "llama")
    reference = {}
    for name in ["F32", "F16", "BF16", *SCALE_FIELDS]:
        qtype = gguf.GGMLQuantizationType[name]
        if name == "F32":
            data = rng.standard_normal((rows, cols), dtype=np.float32)
            writer.add_tensor(name, data)
        elif name == "F16":
            data = rng.standard_normal((rows, cols)).astype(np.float16)
            writer.add_tensor(name, data)
        else:
            block, size = gguf.GGML_QUANT_SIZES[qtype]
            n_blocks = rows * cols // block
            raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
            if name == "BF16":
                # Keep exponents finite: clear the top exponent bit of each value.
                raw[:, 1] &= 0xBF
            for off in SCALE_FIELDS.get(name, []):
                scales = (rng.standard_normal(n_blocks) * 0.1).astype(np.float16)
                raw[:, off:off + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
            data = raw.reshape(rows, cols // block * size)
            writer.add_tensor(name, data, raw_dtype=qtype)
        reference[name] = gguf.quants.dequantize(data, qtype).astype(np.float32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    for name, values in reference.items():
        values.astype("<f4").tofile(f"{dump_dir}/{name}.f32")
    print(json.dumps({"tensors": sorted(reference), "shape": [rows, cols]}))


def strict_load(model_cls, path, **kw):
    model, info = model_cls.from_pretrained(path, output_loading_info=True, **kw)
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(key):
            fail(f"{path}: {key}: {info[key]}")
    return model.eval()


def cmd_load(out_dir, texts_json):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    texts = json.loads(texts_json)
    model = strict_load(AutoModelForCausalLM, out_dir)
    tok = AutoTokenizer.from_pretrained(out_dir)
    encodings = []
    for text in texts:
        ids = tok(text, add_special_tokens=False).input_ids
        back = tok.decode(ids)
        if back != text:
            fail(f"round trip of {text!r} gave {back!r}")
        encodings.append(ids)
    im_start = tok("<|im_start|>", add_special_tokens=False).input_ids
    if len(im_start) != 1 or im_start[0] not in tok.all_special_ids:
        fail(f"<|im_start|> encodes as {im_start}, special ids {tok.all_special_ids}")
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=12, do_sample=False,
            pad_token_id=tok.pad_token_id,
        )
    answer = tok.decode(out[0][prompt.shape[1]:], skip_special_tokens=True)
    print(json.dumps({
        "architecture": type(model).__name__,
        "tokenizer": type(tok).__name__,
        "im_start": im_start,
        "encodings": encodings,
        "answer": answer,
    }))


def logits_of(model, ids):
    import torch

    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


PROBE_IDS = [151644, 872, 198, 9707, 11, 1246, 525, 498, 30, 151645, 198, 151644, 77091, 198, 40, 2776]


def cmd_random(out_dir):
    import torch
    from transformers import AutoModelForCausalLM

    model = strict_load(AutoModelForCausalLM, out_dir, dtype=torch.float32)
    logits = logits_of(model, PROBE_IDS)
    if not torch.isfinite(logits).all():
        fail("non-finite logits")
    top2 = logits.topk(2, dim=-1).values
    gaps = (top2[:, 0] - top2[:, 1]).tolist()
    print(json.dumps({
        "architecture": type(model).__name__,
        "layers": model.config.num_hidden_layers,
        "logit_std": float(logits.std()),
        "top2_gaps": gaps,
    }))


def cmd_early_exit(src, derived, k):
    import torch
    from transformers import AutoModelForCausalLM

    k = int(k)
    small = strict_load(AutoModelForCausalLM, derived, dtype=torch.float32)
    big = strict_load(AutoModelForCausalLM, src, dtype=torch.float32)
    if small.config.num_hidden_layers != k:
        fail(f"derived config has {small.config.num_hidden_layers} layers, expected {k}")
    big.model.layers = big.model.layers[:k]
    big.config.num_hidden_layers = k
    if hasattr(big.config, "layer_types") and big.config.layer_types:
        big.config.layer_types = big.config.layer_types[:k]
    a, b = logits_of(small, PROBE_IDS), logits_of(big, PROBE_IDS)
    diff = float((a - b).abs().max())
    if diff > 1e-4:
        fail(f"derived logits differ from the truncated source by {diff}")
    print(json.dumps({"layers": k, "max_abs_diff": diff}))


def main():
    cmds = {"dequant": cmd_dequant, "blocks": cmd_blocks, "load": cmd_load, "random": cmd_random, "early-exit": cmd_early_exit}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        fail(__doc__)
    cmds[sys.argv[1]](*sys.argv[2:])


if __name__ == "__main__":
    main()
