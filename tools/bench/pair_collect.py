#!/usr/bin/env python3
"""One server's greedy answers to the pair comparison's chat prompts.

Usage: pair_collect.py --url URL --side llama|ours --prompts FILE --run MODEL=OUT.json [--run ...]

For every prompt (a JSON line with `id` and `messages`): the chat prompt's
token ids as the server renders and tokenizes it (llama-server:
/apply-template then /tokenize; ours: /tokenize with the messages), then
one /v1/chat/completions at temperature 0 with logprobs, up to MAX_TOKENS
tokens. Each generated token is kept with its text, its logprob and the
top alternatives. llama-server reports token ids; our API reports each
token's text, which pair_reference.py maps back to ids through the GGUF's
vocabulary. Penalties are sent at their neutral values, so that neither
side's defaults change the greedy path.

Standard library only.
"""

import argparse
import json
import os
import sys
import urllib.error
import urllib.request

TIMEOUT_S = 900


def post(url, body):
    """POST JSON, return the decoded JSON answer; exit naming the URL on error."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as e:
        sys.exit(f"{url}: HTTP {e.code}: {e.read().decode(errors='replace')[:500]}")
    except (urllib.error.URLError, OSError, ValueError) as e:
        sys.exit(f"{url}: {e}")


def load_prompts(path):
    """The prompt file's entries; exits naming the line of a bad one."""
    prompts = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                p = json.loads(line)
            except ValueError as e:
                sys.exit(f"{path}:{n}: not JSON: {e}")
            if not isinstance(p.get("id"), str) or not isinstance(p.get("messages"), list):
                sys.exit(f"{path}:{n}: expected an object with `id` (string) and `messages` (list)")
            prompts.append(p)
    if not prompts:
        sys.exit(f"{path}: no prompts")
    return prompts


def prompt_ids(base, side, model, messages):
    """The rendered chat prompt's token ids, as this server computes them."""
    if side == "llama":
        text = post(f"{base}/apply-template", {"messages": messages})["prompt"]
        # The chat endpoint tokenizes with special tokens parsed and the
        # vocabulary's own BOS rule (add_special): the same here.
        got = post(f"{base}/tokenize", {"content": text, "add_special": True, "parse_special": True})
        return [t if isinstance(t, int) else t["id"] for t in got["tokens"]]
    return post(f"{base}/tokenize", {"model": model, "messages": messages})["tokens"]


def request_body(side, model, messages, max_tokens, top):
    """A greedy chat request with every penalty at its neutral value."""
    body = {"model": model, "messages": messages, "temperature": 0, "max_tokens": max_tokens,
            "logprobs": True, "top_logprobs": top, "stream": False,
            "frequency_penalty": 0, "presence_penalty": 0}
    if side == "llama":
        # llama.cpp's own names; no prompt cache, so that every prompt is
        # evaluated from scratch as on our side.
        body.update({"repeat_penalty": 1.0, "cache_prompt": False, "top_k": 0, "top_p": 1.0, "min_p": 0.0})
    else:
        body.update({"repetition_penalty": 1.0})
    return body


def token_entry(entry, side):
    """One generated token: id (llama-server only), text, logprob, top alternatives."""
    def one(e):
        out = {"text": e.get("token", ""), "logprob": e.get("logprob")}
        if side == "llama":
            out["id"] = e["id"]
        return out
    tok = one(entry)
    tok["top"] = [one(t) for t in entry.get("top_logprobs") or []]
    return tok


def collect(base, side, model, prompts, max_tokens, top):
    """Every prompt's prompt ids and greedy answer from one server."""
    results = []
    for p in prompts:
        ids = prompt_ids(base, side, model, p["messages"])
        ans = post(f"{base}/v1/chat/completions", request_body(side, model, p["messages"], max_tokens, top))
        choice = ans["choices"][0]
        content = (choice.get("logprobs") or {}).get("content") or []
        results.append({
            "id": p["id"],
            "prompt_ids": ids,
            "text": choice["message"]["content"] or "",
            "finish_reason": choice.get("finish_reason"),
            "completion_tokens": (ans.get("usage") or {}).get("completion_tokens"),
            "tokens": [token_entry(e, side) for e in content],
        })
        print(f"[{side} {model}] {p['id']}: {len(content)} tokens, finish {choice.get('finish_reason')}",
              flush=True)
    return results


def main():
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--side", required=True, choices=["llama", "ours"])
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--run", action="append", required=True,
                    help="MODEL=OUT.json: the requests' `model` and where its answers go (repeatable)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--top", type=int, default=5, help="alternatives per position")
    a = ap.parse_args()
    prompts = load_prompts(a.prompts)
    for spec in a.run:
        model, _, out = spec.partition("=")
        if not out:
            sys.exit(f"--run expects MODEL=OUT.json, got {spec!r}")
        results = collect(a.url.rstrip("/"), a.side, model, prompts, a.max_tokens, a.top)
        with open(out + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"side": a.side, "model": model, "max_tokens": a.max_tokens, "prompts": results}, f)
        # Whole or absent: a later step never reads a half-written file.
        os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
