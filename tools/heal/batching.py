"""Right-padded batches of token sequences, as the heal's scripts feed them
to transformers."""
import torch


def pad_right(items):
    """`input_ids` and `attention_mask` [B, longest] for items' `ids`."""
    width = max(len(x["ids"]) for x in items)
    inp = torch.zeros(len(items), width, dtype=torch.long)
    mask = torch.zeros(len(items), width, dtype=torch.long)
    for r, x in enumerate(items):
        inp[r, :len(x["ids"])] = torch.tensor(x["ids"])
        mask[r, :len(x["ids"])] = 1
    return inp, mask
