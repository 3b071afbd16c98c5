#!/usr/bin/env bash
# `make bench-eval`: `tokenrouter eval` accuracy per method on the project's
# short-answer set (data/eval/short300.jsonl) for the SmolLM2 pair:
# small-only, large-only, R-Stitch at each τ of TAUS (the token-level curve),
# query-level (prompt entropy at prefill, threshold calibrated to each
# R-Stitch share of queries), Random token-level at each of those shares, and
# random query-level at the middle one; R2R (the divergence router make
# trains) at each threshold of R2R_THRESHOLDS and at its calibrated one; the
# default group (config/default.yaml, as `make run` serves it); one results
# page with a Pareto chart and computed verdicts.
source "$(dirname "$0")/common.sh"
# The command as typed: overrides of the sweep's settings are part of it.
COMMAND="make bench-eval"
for v in LIMIT MAX_TOKENS N TAUS R2R_THRESHOLDS DATA DTYPE DEPTH_TAUS REUSE; do
  if [ -n "${!v+x}" ]; then COMMAND="$v=\"${!v}\" $COMMAND"; fi
done
LIMIT=${LIMIT:-300}
MAX_TOKENS=${MAX_TOKENS:-32}
N=${N:-8}
TAUS=${TAUS:-0.05 0.1 0.2 0.3 0.5}
PAGE=${PAGE:-$ROOT/docs/results/eval.md}
DATA=${DATA:-$ROOT/data/eval/short300.jsonl}
R2R_THRESHOLDS=${R2R_THRESHOLDS:-0.58 0.67 0.87 0.97}
mkdir -p "$RAW/eval"
args=()
# ev FILE LABEL CONFIG [EVAL ARGS...]: files are named by a plain slug; the
# label (which may hold `=`) is stored in the result and kept by `report`.
ev() {
  args+=(--eval "$RAW/eval/$1.json")
  eval_run "$@"
}
# eval_run: as ev, for a result the page's accuracy table does not list.
# REUSE=1 keeps a result an earlier pass of this command left in RAW (a pass
# stopped part-way); the page says which and when they were written.
# (A list in a file: the depth section runs in a subshell.)
: >"$RAW/eval/reused.list"
eval_run() {
  local file=$1 label=$2 config=$3; shift 3
  if [ "${REUSE:-0}" = 1 ] && [ -s "$RAW/eval/$file.json" ]; then
    echo "$RAW/eval/$file.json" >>"$RAW/eval/reused.list"
    echo "$label: reused $RAW/eval/$file.json"
    return
  fi
  "$HERE/with_server.sh" "$RAW/eval/$file.log" auto -- \
    "$BIN" serve --config "$config" --host 127.0.0.1 --port "$SERVE_PORT" --- \
    "$BIN" eval --url "{URL}" --model default --large-model reference --label "$label" --dataset "$DATA" \
    --limit "$LIMIT" --max-tokens "$MAX_TOKENS" --concurrency "$N" --no-progress \
    --out "$RAW/eval/$file.json" "$@"
}
share() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["large_share"] or 0)' "$RAW/eval/$1.json"
}
# inside S: whether share S is strictly between 0 and 1 (a query-level point
# at 0 or 1 is single-model serving, and `eval --query-level` refuses it).
inside() { python3 -c 'import sys; s=float(sys.argv[1]); sys.exit(0 if 0.0005 < s < 0.9995 else 1)' "$1"; }

ev small-only small-only "$(single_config small quick "$SMALL")"
ev large-only large-only "$(single_config large reference "$LARGE")"
curve=(--eval-token-level small-only)
queries=()
randoms=()
skipped=()
set -- $TAUS
mid=${3:-${2:-$1}}
for tau in $TAUS; do
  ev "rstitch-$tau" "R-Stitch τ=$tau" "$(pair_config "rstitch-$tau" RStitch "{threshold: $tau}")"
  curve+=(--eval-token-level "R-Stitch τ=$tau")
done
curve+=(--eval-token-level large-only)
challengers=()
ev r2r-calibrated "R2R calibrated" "$(pair_config r2r-calibrated R2R "{router_path: $ROUTER}")"
challengers+=(--eval-challenger "R2R calibrated")
for t in $R2R_THRESHOLDS; do
  ev "r2r-$t" "R2R θ=$t" "$(pair_config "r2r-$t" R2R "{router_path: $ROUTER, threshold: $t}")"
  challengers+=(--eval-challenger "R2R θ=$t")
done
for tau in $TAUS; do
  p=$(share "rstitch-$tau")
  q=$(printf %.3f "$p")
  if ! inside "$p"; then
    skipped+=("τ=$tau (share $q)")
    continue
  fi
  ev "query-$tau" "query-level q=$q" "$(pair_config "query-$tau" QueryLevel "{query_share: $p}")" --query-level
  queries+=(--eval-query-level "query-level q=$q")
  ev "random-$tau" "Random p=$q" "$(pair_config "random-$tau" Random "{probability: $p, seed: 0}")"
  randoms+=(--eval-random "Random p=$q")
done
ev default "$DEFAULT_LABEL" "$(default_config default)"
ev fast "$FAST_LABEL" "$(default_config fast "$FAST_YAML")"
# Everyday questions as a user asks them (no answer-format instruction):
# large-only, the default group and the fast group, greedy, on every item.
EVERYDAY=${EVERYDAY:-$ROOT/data/eval/everyday40.jsonl}
for g in large default fast; do
  label=${g/#large/large-only}
  DATA=$EVERYDAY LIMIT=1000 eval_run "everyday-$label" "$label (everyday)" "$RAW/configs/$g.yaml"
done
p=$(share "rstitch-$mid")
if inside "$p"; then
  ev query-random "random query-level p=$(printf %.3f "$p")" \
    "$(pair_config query-random QueryLevel "{random_share: $p, seed: 0}")" --query-level
fi
skip_note="Every R-Stitch share was strictly between 0 and 1, so each has a query-level and a Random point."
if [ ${#skipped[@]} -gt 0 ]; then
  skip_note="No query-level or Random point at ${skipped[*]}: a share of 0 or 1 is single-model serving, which \`tokenrouter eval --query-level\` refuses as a query-level baseline."
fi
# Issue 23's target for the default group: >= 80% of large-only's accuracy at <= 40% large share.
acc() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["correct"]/max(r["total"],1))' "$RAW/eval/$1.json"; }
acc_min=$(python3 "$HERE/targets.py" accuracy.vs_large_only_min)   # tools/bench/targets.yaml
everyday_min=$(python3 "$HERE/targets.py" accuracy.everyday_vs_large_only_min)
share_max=$(python3 "$HERE/targets.py" accuracy.large_share_max)
ratio() { python3 -c "import sys; a,b=map(float,sys.argv[1:]); print(a/b if b else 0)" "$(acc "$1")" "$(acc "$2")"; }
targets=(--verdict "$DEFAULT_LABEL accuracy / large-only|>=|$acc_min|$(ratio default large-only)"
         --verdict "$DEFAULT_LABEL everyday questions right / large-only's|>=|$everyday_min|$(ratio everyday-default everyday-large-only)"
         --verdict "$FAST_LABEL large share|<=|$share_max|$(share fast)")
# The exit-depth comparison (tools/bench/eval_depth.sh): its table is a note.
source "$HERE/eval_depth.sh"
depth_note=$(depth_section)
# What each served group costs and keeps, against large-only, on one line
# each. Speed is measured here, in this pass, the way the depth section
# times its pairs: `tokenrouter bench` on each group and on large-only
# (depth-large-only, run by the depth section above), N = 1 and 8.
speed=(--dataset "$ROOT/data/eval/math30.jsonl" --concurrency 1,8 --num-prompts 10 --max-tokens 96 --warmup 1)
bench_serve speed-default "$RAW/configs/default.yaml" "${speed[@]}" >&2
bench_serve speed-fast "$RAW/configs/fast.yaml" "${speed[@]}" >&2
groups_note=$(python3 - "$RAW" "$DEFAULT_LABEL" "$FAST_LABEL" <<'PY'
import json, os, sys
raw, labels = sys.argv[1], {"default": sys.argv[2], "fast": sys.argv[3]}
d = os.path.join(raw, "eval")
r = {k: json.load(open(os.path.join(d, f"{k}.json"))) for k in ("large-only", "default", "fast",
     "everyday-large-only", "everyday-default", "everyday-fast")}
def tok_s(run, n):
    rows = json.load(open(os.path.join(raw, run, "summary.json")))
    return next(x["output_tok_s"] for x in rows if x["concurrency"] == n)
acc = lambda x: x["correct"] / max(x["total"], 1)
lo, elo = r["large-only"], r["everyday-large-only"]
base = {n: tok_s("depth-large-only", n) for n in (1, 8)}
rows = ["**What `make run`'s two groups keep and cost** (against large-only on the same items, greedy; speed: output tok/s over large-only's at N = 1 and 8, `tokenrouter bench` on `data/eval/math30.jsonl`, 10 prompts, 96 tokens, one run each in this pass; large-only "
        f"{base[1]:.1f} and {base[8]:.1f} tok/s):", "",
        "| group | short-answer accuracy | / large-only | everyday questions right | / large-only | large share | tok/s / large-only, N=1 | N=8 |", "|---|---|---|---|---|---|---|---|"]
rows.append(f"| large-only | {lo['correct']}/{lo['total']} | 1.00 | {elo['correct']}/{elo['total']} | 1.00 | 1.000 | 1.00 | 1.00 |")
for k in ("default", "fast"):
    g, e = r[k], r[f"everyday-{k}"]
    rows.append(f"| `{k}`: {labels[k]} | {g['correct']}/{g['total']} | {acc(g) / acc(lo):.2f} | {e['correct']}/{e['total']} | "
                f"{acc(e) / acc(elo):.2f} | {g['large_share'] or 0:.3f} | {tok_s('speed-' + k, 1) / base[1]:.2f} | {tok_s('speed-' + k, 8) / base[8]:.2f} |")
print("\n".join(rows))
PY
)
# Why the default group's accuracy target is hard for this pair: how often
# the exit disagrees with the full model, and what the router catches, from
# the router's own held-out measurement (training.json).
router_note=$(python3 - "$(dirname "$ROUTER")/training.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
d = t["test_divergence_rate"]
pts = sorted(t["held_out_sweep"], key=lambda p: p["large_share"])
near = min(pts, key=lambda p: abs(p["large_share"] - 0.4))
caught = near["recall"] * d
print(f"Why the default group's accuracy is bounded: on held-out answer tokens (teacher forcing, the router's training.json) the healed exit's top-1 token differs from the full model's at {d:.1%} of positions. A large share s can rewrite at most s of the positions, so at s = 0.40 even a perfect divergence router leaves at least {max(d - 0.4, 0):.1%} of positions written by a small model that disagrees with the large one, and one wrong digit makes a short answer wrong. The trained router at its held-out share {near['large_share']:.3f} has recall {near['recall']:.3f} and precision {near['precision']:.3f}: of every 100 positions it rewrites {100 * caught:.1f} of the {100 * d:.1f} that diverge and leaves {100 * (d - caught):.1f} to the small model (AUC {t['held_out_auc']:.3f}). Teacher forcing flatters both: in free generation one uncaught divergence moves every later token.")
PY
)
reuse_note=()
if [ -s "$RAW/eval/reused.list" ]; then
  reuse_note=(--note "$(python3 - "$RAW/eval/reused.list" <<'PY'
import datetime, os, sys
files = open(sys.argv[1]).read().split()
t = sorted(os.path.getmtime(f) for f in files)
fmt = lambda x: datetime.datetime.fromtimestamp(x, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
names = ", ".join(os.path.basename(f)[:-5] for f in files)
print(f"**Results from an earlier pass.** {len(t)} accuracy results come from an earlier pass of this command that stopped part-way (REUSE=1 kept them; written {fmt(t[0])} to {fmt(t[-1])}, by the same engine code): {names}. Every speed figure, the rest of the results, and this page come from the pass stamped above.")
PY
)")
fi
"$BIN" report --title "Accuracy on the project's short-answer set" --command "$COMMAND" \
  --out "$PAGE" "${since[@]}" "${args[@]}" --eval-ends small-only,large-only \
  "${curve[@]}" "${queries[@]}" "${randoms[@]}" "${challengers[@]}" "${targets[@]}" \
  --eval-curve-names "R-Stitch τ sweep (token-level),query-level (prompt entropy),Random (token-level),R2R threshold sweep (trained router)" \
  --note "\`tokenrouter eval\` against \`tokenrouter serve\` for each method, on the first $LIMIT items of \`$(realpath --relative-to="$ROOT" "$DATA")\` (short-answer items written for this project and generated by \`tools/eval/make_short300.py --seed 23\`: one-step arithmetic, unit conversions, facts, word and spelling questions; graded on the output's first sentence, numbers by value and words after lower-casing and dropping punctuation and articles, see \`data/eval/README.md\`). SmolLM2-135M-Instruct (${DTYPE:-auto}: bf16 on a CPU with native bf16, f32 elsewhere, as \`make run\`) as the large model; as the small one its 12-layer early exit at \`$(basename "$SMALL")\` ($(heal_summary)). Chat template, temperature 0, up to $MAX_TOKENS tokens, $N items at a time; the raw outputs and each item's graded answer are in the JSON under \`.cache/bench/bench-eval/eval/\`." \
  --note "Methods: R-Stitch hands a token over when the small model's normalized entropy exceeds τ (τ ∈ {${TAUS// /, }}); each query-level point sends a whole request to the large model when the small model's mean next-token entropy over the prompt (computed at prefill, over the positions the prefix cache did not serve: after the chat template's shared head, the question itself) is among the hardest of the prompts seen so far, ranked to send the same share of queries there as R-Stitch's token share at that τ (RouteLLM's setup; the rank is randomized within ties from the request's seed, so every query goes large with that probability, and a prompt seen again keeps its first score); Random routes each token to the large model with that probability; R2R hands a token over when the trained divergence router (an MLP over the exit's last hidden state and top-k logits, trained by \`tools/heal/r2r_router.py\` on the full model's answers, see its training.json) predicts the exit's token would differ from the full model's with probability above θ (calibrated: the threshold stored with the router); random query-level sends each request there with R-Stitch τ=$mid's share (drawn once from the request's seed); the default group is \`config/default.yaml\` as \`make run\` serves it ($DEFAULT_POLICY with $DEFAULT_KWARGS). The trained router would be the default only if it beat R-Stitch on this frontier (issue 23); the R2R comparison below is that test. $skip_note Accuracy intervals are Wilson 95% intervals over the items; the methods answer the same items, so the differences' intervals (computed as for independent samples) are conservative." \
  --note "$groups_note" --note "$router_note" --note "$depth_note" "${reuse_note[@]}"
