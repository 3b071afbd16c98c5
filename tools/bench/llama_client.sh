#!/usr/bin/env bash
# The client side of one bench-llamacpp server: `tokenrouter bench` at every
# N into OUT, then a short N=1 pass into OUT/profile with the server's
# /metrics scraped before and after it (llama-server's `llamacpp:*` counters
# or our `tokenrouter_*` ones), so the page can split the time per token.
#
# Usage: llama_client.sh URL OUT LABEL MODEL LARGE_MODEL -- COMMON_ARGS...
#   LARGE_MODEL: `-` for none (llama-server reports no writers).
#   COMMON_ARGS: `tokenrouter bench` arguments shared by both passes (no
#   --concurrency, --num-prompts or --warmup: NS, PROMPTS and
#   PROFILE_PROMPTS from the environment set those).
set -euo pipefail
: "${BIN:?BIN must be set}" "${NS:?NS must be set}" "${PROMPTS:?PROMPTS must be set}"
url=$1 out=$2 label=$3 model=$4 large=$5
shift 5
[[ ${1:-} == -- ]] && shift
args=(--url "$url" --model "$model" --no-progress "$@")
[[ $large == - ]] || args+=(--large-model "$large")
"$BIN" bench "${args[@]}" --label "$label" --out "$out" --concurrency "$NS" \
  --num-prompts "$PROMPTS" --warmup 1
mkdir -p "$out/profile"
curl -sf "$url/metrics" >"$out/profile/metrics.before" || true
"$BIN" bench "${args[@]}" --label "$label N=1 profile" --out "$out/profile" --concurrency 1 \
  --num-prompts "${PROFILE_PROMPTS:-8}" --warmup 0
curl -sf "$url/metrics" >"$out/profile/metrics.after" || true
