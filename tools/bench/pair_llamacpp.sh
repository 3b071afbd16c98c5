#!/usr/bin/env bash
# `make bench-pair-llamacpp`: the Qwen2.5-Coder pair's two GGUFs, each
# served by llama.cpp's `llama-server` and by our server (config/coder.yaml,
# each member named alone in `model`), greedy at temperature 0 for
# MAX_TOKENS tokens on the chat prompts of data/compare/pair-llamacpp.jsonl;
# then transformers on the same GGUF dequantized to f32 scores both answers
# (pair_reference.py) and the page says, per prompt, how many leading
# tokens the two servers share and whether precision explains where they
# part (pair_page.py). A results page, not a pass/fail test.
source "$(dirname "$0")/common.sh"
: "${LLAMA_SERVER:?LLAMA_SERVER (the llama-server binary) must be set}"
: "${SMALL_GGUF:?SMALL_GGUF (the Qwen2.5-Coder 0.5B GGUF) must be set}"
: "${LARGE_GGUF:?LARGE_GGUF (the Qwen2.5-Coder 1.5B GGUF) must be set}"
: "${PYTHON:?PYTHON (python of the reference venv) must be set}"
COMMAND="make bench-pair-llamacpp"
for v in MAX_TOKENS DTYPE PROMPTS_FILE; do
  if [ -n "${!v+x}" ]; then COMMAND="$v=\"${!v}\" $COMMAND"; fi
done
MAX_TOKENS=${MAX_TOKENS:-64}
# Our side in f32 by default: the GGUF's blocks dequantized exactly, so any
# difference from the f32 reference is our arithmetic's, not a rounding to
# bf16 (DTYPE=auto measures what `make run` serves).
DTYPE=${DTYPE:-f32}
PROMPTS_FILE=${PROMPTS_FILE:-$ROOT/data/compare/pair-llamacpp.jsonl}
CODER_YAML=${CODER_YAML:-$ROOT/config/coder.yaml}
PAGE=${PAGE:-$ROOT/docs/results/qwen-pair-llamacpp.md}
PORT=${LLAMA_PORT:-38418}
CORES=$(nproc)
SMALL_NAME=qwen2.5-coder-0.5b
LARGE_NAME=qwen2.5-coder-1.5b
version=$("$LLAMA_SERVER" --version 2>&1 | sed -n 's/^version: *//p' | head -1)
version=${version:-unknown}
collect=("$PYTHON" "$HERE/pair_collect.py" --prompts "$PROMPTS_FILE" --max-tokens "$MAX_TOKENS")

# PAGE_ONLY=1: no measurement, the page again from this RAW folder's
# answers and scores (a change of wording), dated by that run's start.
if [ -n "${PAGE_ONLY:-}" ]; then
  read -r STARTED LOAD0 <"$RAW/since"
  since=(--started "$STARTED" --load-start "$LOAD0")
else
echo "$STARTED $LOAD0" >"$RAW/since"

# llama-server, one GGUF at a time: one slot, no prompt cache reuse between
# prompts (pair_collect.py sends cache_prompt: false), CORES threads.
for spec in "$SMALL_NAME=$SMALL_GGUF" "$LARGE_NAME=$LARGE_GGUF"; do
  name=${spec%%=*} gguf=${spec#*=}
  "$HERE/with_server.sh" "$RAW/llama-$name.log" "http://127.0.0.1:$PORT" -- \
    "$LLAMA_SERVER" --model "$gguf" --host 127.0.0.1 --port "$PORT" --alias "$name" \
    --threads "$CORES" --threads-batch "$CORES" --parallel 1 --ctx-size 4096 --no-ui --- \
    "${collect[@]}" --url "{URL}" --side llama --run "$name=$RAW/llama-$name.json"
done

# Ours: config/coder.yaml in this run's dtype, both members asked by name,
# with a KV budget for one request at a time (the group's is sized for
# serving; f32 doubles it, and the budget changes no number computed).
config=$RAW/configs/coder.yaml
grep -q '^dtype:' "$CODER_YAML" || { echo "$CODER_YAML: no dtype line" >&2; exit 1; }
sed -e "s|^dtype: .*|dtype: $DTYPE|" -e "s|^  kv_cache_tokens: .*|  kv_cache_tokens: 4096|" \
  "$CODER_YAML" >"$config"
"$HERE/with_server.sh" "$RAW/ours.log" auto -- \
  "$BIN" serve --config "$config" --host 127.0.0.1 --port "$SERVE_PORT" --- \
  "${collect[@]}" --url "{URL}" --side ours \
  --run "$SMALL_NAME=$RAW/ours-$SMALL_NAME.json" --run "$LARGE_NAME=$RAW/ours-$LARGE_NAME.json"

# The f32 reference on each GGUF (transformers, one model in memory at a time).
for spec in "$SMALL_NAME=$SMALL_GGUF" "$LARGE_NAME=$LARGE_GGUF"; do
  name=${spec%%=*} gguf=${spec#*=}
  "$PYTHON" "$HERE/pair_reference.py" --gguf "$gguf" --llama "$RAW/llama-$name.json" \
    --ours "$RAW/ours-$name.json" --out "$RAW/ref-$name.json"
done
fi

# The computed sections, into a file first so that a failure stops here.
"$PYTHON" "$HERE/pair_page.py" --max-tokens "$MAX_TOKENS" \
  --ref "Qwen2.5-Coder-0.5B-Instruct ($SMALL_NAME)=$RAW/ref-$SMALL_NAME.json" \
  --ref "Qwen2.5-Coder-1.5B-Instruct Q4_K_M ($LARGE_NAME)=$RAW/ref-$LARGE_NAME.json" >"$RAW/sections"
printf '\0' >>"$RAW/sections"
findings=()
while IFS= read -r -d '' section; do findings+=(--finding "$section"); done <"$RAW/sections"
"$BIN" report --title "The Qwen2.5-Coder pair against llama.cpp: greedy tokens" --command "$COMMAND" \
  --out "$PAGE" "${since[@]}" "${findings[@]}" \
  --note "Each of the pair's GGUFs (\`tools/assets/qwen2.5-coder-pair.json\`: the 0.5B mostly Q5_0 with Q8_0, Q6_K and Q4_K; the 1.5B Q4_K_M) served two ways: by llama.cpp's \`llama-server\` $version (built by \`make llama-server\`; one slot, $CORES threads, no prompt cache), and by our server from \`config/coder.yaml\` with \`dtype: $DTYPE\`, each member named alone in \`model\` (the GGUF imported, its blocks dequantized). Both get the same $(wc -l <"$PROMPTS_FILE") chat prompts (\`${PROMPTS_FILE#"$ROOT"/}\`: code and general questions), each side rendering the GGUF's chat template itself, at temperature 0 with every penalty neutral, up to $MAX_TOKENS tokens, with logprobs (top 5). Token ids: llama-server reports them; our API reports each token's text, mapped back to its id through the GGUF's vocabulary. An answer that stops early counts its end token as one more token." \
  --note "The f32 reference is transformers 4.57.6 loading the same GGUF with every block dequantized to f32 (pair_reference.py), fed our server's prompt ids (the column 'same prompt ids' says whether llama-server's rendering tokenized to the same ids). It scores both servers' answers token by token (teacher-forced); where its top-1 follows a side's tokens its own greedy answer is that side's, so 'follows f32 greedy for' counts the tokens before its top-1 first differs from the side's token, and gives the f32 margin there. At the first token where the servers differ, both have seen the same prefix, so the f32 reference says which side left its top-1 choice and by what margin m (nats). Each side's arithmetic misjudges such margins by up to delta: the 99th percentile of |side margin − f32 margin| between its chosen token and each listed alternative within 5 nats, over every position of that model where the servers still agreed. m ≤ delta: a near tie that the side's own precision flips, which is what llama.cpp's quantized arithmetic (8-bit activations against the 4/5/6/8-bit blocks) or ours can do; m > delta: precision does not explain it."
