#!/usr/bin/env bash
# `make bench-eval`: `tokenrouter eval` on the project's math problems for
# small-only, large-only, R-Stitch, Random at the same share, and
# query-level on the SmolLM2 pair; one results page.
source "$(dirname "$0")/common.sh"
LIMIT=${LIMIT:-30}
MAX_TOKENS=${MAX_TOKENS:-256}
N=${N:-8}
TAU=${TAU:-0.3}
PAGE=${PAGE:-$ROOT/docs/results/eval.md}
DATA=${DATA:-$ROOT/data/eval/math30.jsonl}
mkdir -p "$RAW/eval"
args=()
# ev FILE LABEL CONFIG: files are named by a plain slug; the label (which
# may hold `=`) is stored in the result and kept by `report`.
ev() {
  args+=(--eval "$RAW/eval/$1.json")
  "$HERE/with_server.sh" "$RAW/eval/$1.log" auto -- \
    "$BIN" serve --config "$3" --host 127.0.0.1 --port 0 --- \
    "$BIN" eval --url "{URL}" --model default --large-model reference --label "$2" --dataset "$DATA" \
    --limit "$LIMIT" --max-tokens "$MAX_TOKENS" --concurrency "$N" --no-progress \
    --out "$RAW/eval/$1.json"
}
ev small-only small-only "$(single_config small quick "$SMALL")"
ev large-only large-only "$(single_config large reference "$LARGE")"
ev rstitch "R-Stitch τ=$TAU" "$(pair_config "rstitch-$TAU" RStitch "{threshold: $TAU}")"
p=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["large_share"] or 0)' "$RAW/eval/rstitch.json")
ev random "Random p=$(printf %.3f "$p")" "$(pair_config random-eval Random "{probability: $p, seed: 0}")"
ev query-level query-level "$(pair_config query-level QueryLevel "{}")"
"$BIN" report --title "Accuracy on the project's math problems" --command "make bench-eval" \
  --out "$PAGE" "${since[@]}" "${args[@]}" \
  --note "\`tokenrouter eval\` against \`tokenrouter serve\` for each method, on the first $LIMIT problems of \`data/eval/math30.jsonl\` (written for this project; answers extracted from \`\\boxed{}\` or the final number, compared by a normalizing checker). SmolLM2-135M-Instruct (f32) as the large model, its 12-layer early exit healed by make's distillation (\`tools/heal/heal.py\`) as the small one; chat template, temperature 0, up to $MAX_TOKENS tokens, $N problems at a time. The seed article's table for comparison (Qwen3 pair on a Mac): small 20/30, large 27/30, R2R 23/30 at 28.3% share." \
  --note "A 135M-parameter model is far too small for multi-step word problems, so near-zero accuracy for every method here says that about the model, not about routing; the harness is the same for a capable pair (e.g. \`tokenrouter eval --url ... --dataset gsm8k.jsonl\` against a Qwen3 pair on a GPU). The *given* answer of each problem is in the raw JSON under \`.cache/bench/bench-eval/eval/\`."
