#!/usr/bin/env bash
# `make bench-policies`: does `target_large_share` steer a policy to the
# asked cost? The simulated pair (no weights are run: the timing is the
# scheduler's) with Random routing started far from each target, served by
# `tokenrouter serve` and driven by `tokenrouter bench`; one results page.
source "$(dirname "$0")/common.sh"
TARGETS=${TARGETS:-0.1 0.2 0.4}
START_P=${START_P:-0.6}
N=${N:-8}
PROMPTS=${PROMPTS:-64}
WARMUP=${WARMUP:-64}
OUT_TOKENS=${OUT_TOKENS:-100}
SEEDS=${SEEDS:-0 1}
# The verdict: each target's measured share within TOLERANCE of it.
TOLERANCE=${TOLERANCE:-0.02}
PAGE=${PAGE:-$ROOT/docs/results/policies.md}
TOKDIR=$MODELS/smollm2-135m

runs=()
for t in $TARGETS; do
  cfg="$RAW/configs/share-$t.yaml"
  cat >"$cfg" <<YAML
model:
  quick:
    path: $TOKDIR
    sim:
      latency_ms: {base: 0.2, per_seq: 0.0, per_token: 0.0}
      vocab_size: 49152
  reference:
    path: $TOKDIR
    sim:
      latency_ms: {base: 0.4, per_seq: 0.0, per_token: 0.0}
      vocab_size: 49152
system:
  entry_model: quick
scheduler_class: Random
scheduler_kwargs: {probability: $START_P}
target_large_share: $t
backend: sim
sim: {seed: 0}
execution_mode: async_delayed
YAML
  for seed in $SEEDS; do
    bench_serve "target-$t-seed-$seed" "$cfg" --synthetic 8,"$OUT_TOKENS" --ignore-eos --concurrency "$N" \
      --num-prompts "$PROMPTS" --warmup "$WARMUP" --max-tokens "$OUT_TOKENS" --seed "$seed"
    runs+=(--run "target $t, seed $seed=$RAW/target-$t-seed-$seed")
  done
done

# One verdict per target: the miss |measured - target| of each seed's run.
verdicts=()
while IFS= read -r line; do verdicts+=(--verdict "$line"); done < <(python3 - "$RAW" "$TOLERANCE" "$SEEDS" $TARGETS <<'PY'
import json, sys
raw, tol, seeds, targets = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4:]
for t in targets:
    misses = []
    for seed in seeds:
        s = json.load(open(f"{raw}/target-{t}-seed-{seed}/summary.json"))[0]["large_model_share"]
        misses.append(abs((s if s is not None else float("nan")) - float(t)))
    print(f"target {t}: distance of the measured share from {t}|<=|{tol}|{','.join(f'{m:.4f}' for m in misses)}")
PY
)

"$BIN" report --title "Policies: target_large_share steers the cost" --command "make bench-policies" \
  --out "$PAGE" "${since[@]}" "${runs[@]}" \
  --note "Two simulated models (0.2 / 0.4 ms steps; the sim draws tokens, no weights run) behind \`tokenrouter serve\`, \`Random\` routing (R2R hand-over: the small model's token is dropped and the large model writes that position) starting at probability $START_P, with \`target_large_share\` set to each target in turn. The share controller moves the routing threshold while $WARMUP unmeasured warm-up requests run; then \`tokenrouter bench\` measures $PROMPTS requests of $OUT_TOKENS tokens (\`ignore_eos\`, each its own seed) at N = $N. The large share is the gateway's per-token writer attribution (\`usage.completion_tokens_by_model\`). The measured share is not the raw probability, because a hand-over drops the small model's token; that is what the controller is for." \
  --note "Each target runs once per seed in {${SEEDS// /, }} (the seed of \`tokenrouter bench\`: every request's own seed derives from it); a target is met when the mean miss over the seeds is at most $TOLERANCE." \
  "${verdicts[@]}"
