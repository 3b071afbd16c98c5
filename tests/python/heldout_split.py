"""Prints a teacher file's splits (tools/heal/teacher.py's OUT.pt) as one
JSON object, for the tests that recompute a trainer's held-out numbers with
our engine: `train_prompts` (the prompt ids of every training item) and
`holdout` (ids = prompt + the teacher's answer, answer_from, n, and
top1: the teacher's float32 top-1 at each answer position, the token
r2r_router.py labels against), in the file's order (r2r_router.py halves
the held-out list in this order).

Usage: heldout_split.py TEACHER.pt
"""
import json
import sys

import torch


def ints(xs):
    return [int(v) for v in xs]


def main():
    items = torch.load(sys.argv[1], weights_only=True)
    out = {"train_prompts": [ints(x["ids"][:x["answer_from"]]) for x in items if x["split"] == "train"],
           "holdout": [{"ids": ints(x["ids"]), "answer_from": int(x["answer_from"]), "n": int(x["n"]),
                        "top1": ints(x["idx"][:, 0])}
                       for x in items if x["split"] == "holdout"]}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
