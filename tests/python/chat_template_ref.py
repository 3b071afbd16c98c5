"""Reference chat-template rendering with transformers, for tests/chat_template_hf.rs.

Reads from stdin a JSON object {"dir": <tokenizer dir>, "cases": [{"messages": [...],
"add_generation_prompt": bool, "kwargs": {...}}, ...]} and writes to stdout a JSON list with,
per case, {"text": <tokenizer.apply_chat_template(messages, tokenize=False,
add_generation_prompt=..., **kwargs)>} or {"error": <message>} when the template raised.
"""

import json
import os
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import jinja2  # noqa: E402
from transformers import AutoTokenizer, PreTrainedTokenizerFast  # noqa: E402


def load_tokenizer(path):
    """The tokenizer a user would get; a plain fast tokenizer if the class is unknown."""
    try:
        return AutoTokenizer.from_pretrained(path)
    except (ValueError, OSError, KeyError) as exc:
        print(f"AutoTokenizer failed on {path} ({exc}); using PreTrainedTokenizerFast", file=sys.stderr)
        return PreTrainedTokenizerFast.from_pretrained(path)


def main():
    request = json.load(sys.stdin)
    tokenizer = load_tokenizer(request["dir"])
    results = []
    for case in request["cases"]:
        try:
            text = tokenizer.apply_chat_template(
                case["messages"],
                tokenize=False,
                add_generation_prompt=case["add_generation_prompt"],
                **case["kwargs"],
            )
            results.append({"text": text})
        except jinja2.exceptions.TemplateError as exc:
            results.append({"error": str(exc)})
    json.dump(results, sys.stdout, ensure_ascii=True)


if __name__ == "__main__":
    main()
