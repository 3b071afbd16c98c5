"""The gateway, driven by the official `openai` Python SDK.

Usage: openai_suite.py --base-url http://HOST:PORT [--api-key KEY] [--mode sim|real]
       [--members quick,reference] [--served NAME]

`sim`: a simulated group (random tokens, no EOS): lengths and usage are exact,
stop strings are checked on frequent characters. `real`: the SmolLM2 pair:
greedy answers and seeded sampling are reproducible.
Prints one line per check (PASS, FAIL or SKIP: a check that does not apply to
the mode or flags is reported as skipped, never as passed) and exits non-zero
when any check failed.
"""

import argparse
import sys

import openai
from openai import OpenAI

ARGS = None
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


class Skipped(Exception):
    """A check that does not apply to this run."""


def skip_unless(condition, reason):
    if not condition:
        raise Skipped(reason)


def client(key=None):
    return OpenAI(base_url=ARGS.base_url + "/v1", api_key=key or ARGS.api_key or "none",
                  max_retries=0, timeout=120)


def extra(obj, name):
    """A routing extension field of an SDK object."""
    return (obj.model_extra or {}).get(name)


def usage_ok(usage, n_choices_tokens=None):
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, usage
    by_model = extra(usage, "completion_tokens_by_model")
    assert set(by_model) == set(ARGS.members), by_model
    assert sum(by_model.values()) == usage.completion_tokens, (by_model, usage)
    assert isinstance(extra(usage, "switches"), int), usage
    if n_choices_tokens is not None:
        assert usage.completion_tokens == n_choices_tokens, (usage, n_choices_tokens)


@check
def models_are_listed():
    ids = [m.id for m in client().models.list().data]
    assert ARGS.served in ids and all(m in ids for m in ARGS.members), ids


@check
def chat_non_streaming():
    r = client().chat.completions.create(
        model=ARGS.served, max_tokens=12, temperature=0,
        messages=[{"role": "system", "content": "You are brief."},
                  {"role": "user", "content": "What is the capital of France?"}],
        extra_body={"return_token_sources": True})
    c = r.choices[0]
    assert c.message.role == "assistant" and c.message.content, r
    sources = extra(c, "token_sources")
    assert len(sources) == r.usage.completion_tokens, (sources, r.usage)
    assert set(sources) <= set(ARGS.members), sources
    if ARGS.mode == "sim":
        assert c.finish_reason == "length" and r.usage.completion_tokens == 12, r
    usage_ok(r.usage)
    # Switches are the writer changes along the token sources.
    switches = sum(1 for a, b in zip(sources, sources[1:]) if a != b)
    assert extra(r.usage, "switches") == switches, (sources, r.usage)


@check
def chat_with_assistant_turn_and_max_completion_tokens():
    r = client().chat.completions.create(
        model="default", max_completion_tokens=5, temperature=0,
        messages=[{"role": "user", "content": "Say A."},
                  {"role": "assistant", "content": "A."},
                  {"role": "user", "content": [{"type": "text", "text": "Again."}]}])
    assert r.usage.completion_tokens <= 5, r.usage
    usage_ok(r.usage)


@check
def chat_streaming_with_usage():
    stream = client().chat.completions.create(
        model=ARGS.served, max_tokens=16, temperature=0.7, stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Tell me a story."}])
    text, writers, usage, finish, roles = "", [], None, None, 0
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
            assert chunk.choices == [], chunk
            continue
        c = chunk.choices[0]
        if c.delta.role:
            roles += 1
        if c.delta.content:
            text += c.delta.content
            w = extra(c, "token_sources")
            assert w and set(w) <= set(ARGS.members), chunk
            writers += w
        if c.finish_reason:
            finish = c.finish_reason
    assert roles == 1 and text and finish in ("stop", "length"), (roles, text, finish)
    assert usage is not None, "no usage chunk"
    usage_ok(usage)
    assert len(writers) <= usage.completion_tokens


@check
def completions_n_and_prompt_lists():
    r = client().completions.create(model=ARGS.served, prompt="Once upon a time",
                                    max_tokens=6, n=3, temperature=1.0)
    assert sorted(c.index for c in r.choices) == [0, 1, 2], r
    if ARGS.mode == "sim":
        usage_ok(r.usage, 18)
    r = client().completions.create(model=ARGS.served, prompt=["a b c", "d e f g"],
                                    max_tokens=4, n=2)
    assert sorted(c.index for c in r.choices) == [0, 1, 2, 3], r
    # Prompt tokens count each prompt once.
    single = [client().completions.create(model=ARGS.served, prompt=p, max_tokens=1).usage.prompt_tokens
              for p in ["a b c", "d e f g"]]
    assert r.usage.prompt_tokens == sum(single), (r.usage, single)
    usage_ok(r.usage)


@check
def completions_token_prompt_and_echo():
    root = OpenAI(base_url=ARGS.base_url, api_key=ARGS.api_key or "none", max_retries=0)
    ids = root.post("/tokenize", body={"prompt": "hello there"}, cast_to=object)["tokens"]
    r = client().completions.create(model=ARGS.served, prompt=ids, max_tokens=3, echo=True)
    assert r.choices[0].text.startswith("hello there"), r
    assert r.usage.prompt_tokens == len(ids), (r.usage, ids)


@check
def completions_streaming_n2():
    stream = client().completions.create(model=ARGS.served, prompt="x", max_tokens=5, n=2,
                                         stream=True, stream_options={"include_usage": True})
    texts, finishes, usage = {0: "", 1: ""}, {}, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            texts[c.index] += c.text
            if c.finish_reason:
                finishes[c.index] = c.finish_reason
    assert set(finishes) == {0, 1} and all(texts.values()), (texts, finishes)
    if ARGS.mode == "sim":
        usage_ok(usage, 10)


@check
def stop_strings():
    # Sim tokens are random words: "e" and "a" occur within a few tokens.
    # A real model's greedy text need not hold any one mark (the default pair
    # once wrote 200 tokens of "The sky is a beautiful, a silent one,\n\n"
    # without a period), so it gets four (the API's most): some occur in
    # any 200 tokens of prose.
    stop = ["e", "a"] if ARGS.mode == "sim" else [".", ",", "\n", "!"]
    r = client().completions.create(model=ARGS.served, prompt="The sky is", max_tokens=200,
                                    stop=stop, temperature=0)
    c = r.choices[0]
    assert c.finish_reason == "stop", r
    assert not any(s in c.text for s in stop), c.text
    usage_ok(r.usage)
    stream = client().chat.completions.create(
        model=ARGS.served, max_tokens=200, stop=stop, stream=True, temperature=0,
        messages=[{"role": "user", "content": "Write a sentence."}])
    text, finish = "", None
    for chunk in stream:
        for ch in chunk.choices:
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
    assert finish == "stop" and not any(s in text for s in stop), (finish, text)


@check
def seeds():
    kw = dict(model=ARGS.served, prompt="The weather today", max_tokens=12, temperature=0.9,
              top_p=0.95, extra_body={"top_k": 50, "min_p": 0.01})
    a = client().completions.create(seed=1234, **kw)
    b = client().completions.create(seed=1234, **kw)
    assert a.usage.completion_tokens == b.usage.completion_tokens
    # Same seed, same text, in every mode (the sim draws its tokens from
    # the request's seed too).
    assert a.choices[0].text == b.choices[0].text, (a, b)
    # Greedy, with a seed: a random routing policy (the sim group's
    # Bernoulli) draws its hand-overs from the request's seed.
    g1 = client().completions.create(model=ARGS.served, prompt="1, 2, 3,", max_tokens=8, temperature=0, seed=7)
    g2 = client().completions.create(model=ARGS.served, prompt="1, 2, 3,", max_tokens=8, temperature=0, seed=7)
    assert g1.choices[0].text == g2.choices[0].text, (g1, g2)


@check
def user_and_thinking_kwargs_are_accepted():
    r = client().chat.completions.create(
        model=ARGS.served, max_tokens=3, user="suite",
        messages=[{"role": "user", "content": "hi"}],
        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    usage_ok(r.usage)


def expect(exc, fn, *, status, fragment=None, param=None):
    try:
        fn()
    except exc as e:
        assert e.status_code == status, (e.status_code, e)
        body = e.body if isinstance(e.body, dict) else {}
        if fragment:
            assert fragment in str(e), e
        if param:
            assert body.get("param") == param, body
        return
    raise AssertionError(f"expected {exc.__name__}")


@check
def error_paths():
    msgs = [{"role": "user", "content": "hi"}]
    c = client()
    expect(openai.BadRequestError, lambda: c.chat.completions.create(
        model=ARGS.served, messages=msgs,
        tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]),
        status=400, fragment="tools", param="tools")
    expect(openai.BadRequestError, lambda: c.chat.completions.create(
        model=ARGS.served, messages=msgs, frequency_penalty=0.5),
        status=400, fragment="frequency_penalty")
    expect(openai.BadRequestError, lambda: c.chat.completions.create(
        model=ARGS.served, messages=msgs, response_format={"type": "json_object"}),
        status=400, fragment="response_format")
    expect(openai.NotFoundError, lambda: c.chat.completions.create(
        model="no-such-model", messages=msgs), status=404, param="model")
    expect(openai.BadRequestError, lambda: c.chat.completions.create(
        model=ARGS.served, messages=msgs, temperature=-1), status=400, param="temperature")
    expect(openai.BadRequestError, lambda: c.chat.completions.create(
        model=ARGS.served, messages=[{"role": "tool", "content": "x"}]), status=400,
        param="messages[0].role")
    expect(openai.BadRequestError, lambda: c.chat.completions.create(
        model=ARGS.served, messages=[]), status=400, param="messages")
    expect(openai.BadRequestError, lambda: c.completions.create(
        model=ARGS.served, prompt="hi", max_tokens=10**15), status=400)
    expect(openai.BadRequestError, lambda: c.completions.create(
        model=ARGS.served, prompt="hi", n=1000), status=400, param="n")
    expect(openai.BadRequestError, lambda: c.completions.create(
        model=ARGS.served, prompt=[10**9]), status=400)
    if ARGS.mode == "real":
        # Prompt + max_tokens beyond the model's context.
        expect(openai.BadRequestError, lambda: c.completions.create(
            model=ARGS.served, prompt="hi", max_tokens=100000), status=400,
            fragment="context")
    if ARGS.api_key:
        expect(openai.AuthenticationError, lambda: client("wrong-key").models.list(), status=401)
        expect(openai.AuthenticationError, lambda: client("wrong-key").completions.create(
            model=ARGS.served, prompt="x"), status=401)


@check
def query_level_on_one_member():
    skip_unless(ARGS.pinned, "needs --pinned")
    for i, m in enumerate(ARGS.members):
        r = client().completions.create(model=m, prompt="Hello", max_tokens=8,
                                        extra_body={"return_token_sources": True})
        by_model = extra(r.usage, "completion_tokens_by_model")
        assert by_model[m] == r.usage.completion_tokens, (m, by_model)
        assert set(extra(r.choices[0], "token_sources")) <= {m}, r
        assert extra(r.usage, "switches") == 0, r.usage
        assert r.model == m


@check
def logprobs_from_the_writer():
    skip_unless(ARGS.logprobs, "needs --logprobs")
    r = client().chat.completions.create(
        model=ARGS.served, max_tokens=6, logprobs=True, top_logprobs=3,
        messages=[{"role": "user", "content": "hi"}])
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens, r
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3, t
    r = client().completions.create(model=ARGS.served, prompt="hi", max_tokens=4, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4, lp
    assert all(len(t) <= 2 for t in lp.top_logprobs), lp


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--api-key")
    p.add_argument("--mode", choices=["sim", "real"], default="sim")
    p.add_argument("--members", default="quick,reference")
    p.add_argument("--served", default="tokenrouter")
    p.add_argument("--pinned", action="store_true", help="check query-level routing on members")
    p.add_argument("--logprobs", action="store_true", help="check logprobs")
    p.add_argument("--only", help="run only checks whose name contains this")
    ARGS = p.parse_args()
    ARGS.members = ARGS.members.split(",")
    passed = failed = skipped = 0
    for fn in CHECKS:
        if ARGS.only and ARGS.only not in fn.__name__:
            continue
        try:
            fn()
            passed += 1
            print(f"PASS {fn.__name__}", flush=True)
        except Skipped as e:
            skipped += 1
            print(f"SKIP {fn.__name__}: {e}", flush=True)
        except Exception as e:  # noqa: BLE001 - report every failing check
            failed += 1
            print(f"FAIL {fn.__name__}: {type(e).__name__}: {e}", flush=True)
    print(f"openai {openai.__version__}: {passed} passed, {failed} failed, {skipped} skipped")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
