"""Convert a router checkpoint saved with torch.save into the directory
TokenRouter loads (`tokenrouter convert-router IN.pt OUT_DIR` runs this with
the configured Python; it needs torch and safetensors).

Input: the official R2R layout, a dict with `model_type`, `init_args`,
`common_args` (`threshold`) and `state_dict`; or a bare state dict (CITER).
Output: OUT_DIR/model.safetensors (every floating tensor as float32;
integer buffers such as BatchNorm's num_batches_tracked and R2R's copy of
the small model's `token_embeddings.weight` are dropped: the runtime uses
the small model's own embedding matrix) and OUT_DIR/router.json.

The file is read with torch.load(weights_only=True): no code from the
checkpoint runs. Prints one JSON line describing what was written.
"""

import json
import os
import sys

import torch
from safetensors.torch import save_file

DROPPED_NAMES = {"token_embeddings.weight"}


def jsonable(v):
    """init_args may hold torch dtypes or tuples: keep JSON types, stringify the rest."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    return str(v)


def main(src, out_dir):
    obj = torch.load(src, map_location="cpu", weights_only=True)
    if not isinstance(obj, dict):
        raise SystemExit(f"{src}: expected a dict (a state dict or the R2R layout), got {type(obj).__name__}")
    if "state_dict" in obj:
        state = obj["state_dict"]
        common = obj.get("common_args") or {}
        threshold = common.get("threshold")
        meta = {
            "model_type": obj.get("model_type"),
            "init_args": jsonable(obj.get("init_args") or {}),
            "threshold": None if threshold is None else float(threshold),
        }
    else:
        state = obj
        meta = {"model_type": None, "init_args": {}, "threshold": None}
    tensors, dropped = {}, []
    for name, t in state.items():
        if not torch.is_tensor(t):
            raise SystemExit(f"{src}: state_dict entry {name} is not a tensor")
        if name in DROPPED_NAMES or not t.is_floating_point():
            dropped.append(name)
            continue
        tensors[name] = t.detach().to(torch.float32).contiguous()
    if not tensors:
        raise SystemExit(f"{src}: no floating-point tensors in the state dict")
    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"))
    meta["source"] = os.path.basename(src)
    meta["dropped"] = dropped
    with open(os.path.join(out_dir, "router.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    print(json.dumps({"tensors": len(tensors), "dropped": dropped, "model_type": meta["model_type"],
                      "threshold": meta["threshold"]}))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: convert_router.py IN.pt OUT_DIR")
    main(sys.argv[1], sys.argv[2])
