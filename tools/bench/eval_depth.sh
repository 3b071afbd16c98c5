# Sourced by eval.sh: the exit-depth comparison behind issue 23's verdict.
# The 20-layer exit under the same heal as the default's 12-layer one
# (make's $(SMOLLM2_MID_HEALED)) answers the same items under R-Stitch at
# each τ of DEPTH_TAUS, and both pairs are timed against large-only the
# way bench-cpu times them (math30, N = 1 and 8, 10 prompts, 96 tokens, one
# run each). The table shows what a deeper small model buys in accuracy and
# what it costs in speed: the trade the default pair sits on.
DEEP=${DEEP:-$MODELS/smollm2-135m-l20-healed}
DEPTH_TAUS=${DEPTH_TAUS:-0.3 0.4}

# depth_section: runs the comparison and prints the page's note (a heading
# paragraph and a Markdown table).
depth_section() {
  local speed=(--dataset "$ROOT/data/eval/math30.jsonl" --concurrency 1,8 --num-prompts 10
               --max-tokens 96 --warmup 1)
  local rows=() tau
  bench_serve depth-large-only "$(single_config depth-large reference "$LARGE")" "${speed[@]}" >&2
  eval_run deep-small-only "20-layer small-only" "$(single_config deep-small quick "$DEEP")" >&2
  for tau in $DEPTH_TAUS; do
    [ -f "$RAW/eval/rstitch-$tau.json" ] ||
      eval_run "rstitch-$tau" "R-Stitch τ=$tau" "$(pair_config "rstitch-$tau" RStitch "{threshold: $tau}")" >&2
    eval_run "deep-rstitch-$tau" "20-layer R-Stitch τ=$tau" \
      "$(SMALL=$DEEP pair_config "deep-rstitch-$tau" RStitch "{threshold: $tau}")" >&2
    bench_serve "depth-12-$tau" "$RAW/configs/rstitch-$tau.yaml" "${speed[@]}" >&2
    bench_serve "depth-20-$tau" "$RAW/configs/deep-rstitch-$tau.yaml" "${speed[@]}" >&2
    rows+=("12|$tau|rstitch-$tau|depth-12-$tau" "20|$tau|deep-rstitch-$tau|depth-20-$tau")
  done
  python3 "$HERE/depth_table.py" "$RAW" "$SMALL/heal.json" "$DEEP/heal.json" "${rows[@]}"
}
