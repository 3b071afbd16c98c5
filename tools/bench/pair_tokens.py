"""Token bookkeeping of the pair comparison (standard library only, so that
its tests run without torch): GPT-2's byte-level alphabet, our API's token
texts back to ids, and each side's answer with its end made explicit."""


def byte_decoder():
    """GPT-2's byte-level alphabet, inverted: a vocab character -> its byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def path_ids(side, prompt, by_text, eog, eos):
    """A side's answer as candidate-id lists, end-of-generation made explicit.

    Trailing end-of-generation tokens are dropped, then one `eos` appended
    when the answer stopped on its own (finish_reason `stop`), so that both
    sides show an early stop the same way.
    """
    tokens = prompt["tokens"]
    if side == "ours" and prompt["finish_reason"] == "stop" and tokens and tokens[-1]["text"] == "":
        # An end token shown as empty text (special tokens not rendered).
        tokens = tokens[:-1]
    cands = []
    for t in tokens:
        if side == "llama":
            cands.append([t["id"]])
        elif t["text"] in by_text:
            cands.append(by_text[t["text"]])
        else:
            raise ValueError(f"prompt {prompt['id']}: token text {t['text']!r} is no token of the vocabulary")
    while cands and set(cands[-1]) & eog:
        cands.pop()
    if prompt["finish_reason"] == "stop":
        cands.append([eos])
    return cands


def resolve(cands, other):
    """One id per position: the other side's id where it is a candidate."""
    return [other[i] if i < len(other) and other[i] in c else c[0] for i, c in enumerate(cands)]


def unique_id(by_text, text):
    """The one id whose text is `text`, else None."""
    ids = by_text.get(text, [])
    return ids[0] if len(ids) == 1 else None


