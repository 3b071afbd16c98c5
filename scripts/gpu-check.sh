#!/usr/bin/env bash
# The prepared GPU check of issue #16: one run, at most ~8 minutes on an H200.
#
#   scripts/gpu-check.sh [--dry-run] [--out DIR] [--bundle DIR] [--python PY] [--with-32b]
#
# Steps (each recorded as PASS / FAIL / SKIP with its reason in $OUT/report.md,
# raw outputs beside it; a skipped check is SKIP, never PASS):
#   1. build sanity: the binaries run, torch sees the GPU, a model decodes with
#      the CUDA shim's streams and graphs (--cuda-graphs on);
#   2. kernels: kernel-check compares the CUDA routing-signal and sampling
#      kernels with the CPU references (f32 and bf16 rows of 151936 logits:
#      rel err <= 1e-3, identical top-k, NaN never passes, identical tokens);
#   3. parity: greedy ids of a random-weight Qwen3-0.6B from our engine (graphs
#      off and on) against transformers on the same device, f32 (must match)
#      and bf16 (agreeing prefix reported);
#   4. bench: random-weight Qwen3-0.6B + Qwen3-8B on one GPU, Random routing
#      p=0.35 with R2R hand-over, N in {1,4,8,16}: large-only vs token-routed
#      (async_delayed, B from the tuner) vs Std. Serving, with and without
#      CUDA graphs and per-model streams;
#   5. targets: each of the three H200 targets gets MET / NOT MET (SKIP on a
#      dry run) with its ratio, mean and half range over two bench seeds:
#      0.6B decode at batch 16 >= 50% of the HBM roofline; CUDA graphs cut
#      the small model's step time >= 30% (N=1 and N=8); 0.6B + 8B routed at
#      N=8 >= 1.5x 8B-only.
#
# --dry-run runs the same plumbing here on the CPU with tiny shapes (tiny
# preset, short runs, kernel-check's CPU backend), so the script is known to
# work before a GPU session spends its minutes on it.
#
# Inputs: a bundle directory (`make gpu-bundle`) with bin/tokenrouter,
# bin/kernel-check (built with the `cuda` feature), qwen3-tokenizer/ and,
# optionally, wheels/ (transformers and its pure-Python deps, for a torch
# venv that lacks them). GPU python: --python, else $TORCH_PYTHON, else
# /opt/torch/.venv/bin/python.
set -uo pipefail

DRY=0
WITH_32B=0
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT_DIR=${OUT:-$ROOT/gpu-check-out}
BUNDLE=$ROOT/gpu-bundle
PY=${TORCH_PYTHON:-/opt/torch/.venv/bin/python}
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --with-32b) WITH_32B=1 ;;
    --out) OUT_DIR=$2; shift ;;
    --bundle) BUNDLE=$2; shift ;;
    --python) PY=$2; shift ;;
    -h|--help) sed -n 2,30p "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
REPORT=$OUT_DIR/report.md
RESULTS=$OUT_DIR/results.tsv
: > "$RESULTS"
T0=$(date +%s)

BIN=$BUNDLE/bin/tokenrouter
KC=$BUNDLE/bin/kernel-check
TOKDIR=$BUNDLE/qwen3-tokenizer
for f in "$BIN" "$KC" "$TOKDIR/tokenizer.json"; do
  [ -e "$f" ] || { echo "gpu-check: missing $f (run make gpu-bundle)" >&2; exit 2; }
done
[ -x "$PY" ] || { echo "gpu-check: no python at $PY (--python)" >&2; exit 2; }

if [ "$DRY" = 1 ]; then
  DEVICE=cpu; BACKEND=cpu; SMALL=tiny; LARGE=tiny; PARITY_PRESET=tiny
  KC_ARGS=(--rows 24 --cols 4099 --k 8); PARITY_STEPS=8; NS=(1 8)
  DURATION=1; WARMUP=0.5; ANSWER=24; BENCH_DTYPE=f32
else
  DEVICE=cuda; BACKEND=cuda; SMALL=qwen3-0.6b; LARGE=qwen3-8b; PARITY_PRESET=qwen3-0.6b
  KC_ARGS=(--rows 256 --cols 151936 --k 8); PARITY_STEPS=32; NS=(1 4 8 16)
  DURATION=3; WARMUP=1; ANSWER=256; BENCH_DTYPE=bf16
fi

# The GPU machine's torch: its libtorch and CUDA runtime replace the build
# machine's (the binaries' RUNPATH points at the build machine's).
TORCH_DIR=$("$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))') || {
  echo "gpu-check: $PY cannot import torch" >&2; exit 2; }
SITE=$(dirname "$TORCH_DIR")
export LD_LIBRARY_PATH="$TORCH_DIR/lib:$SITE/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RUST_LOG=${RUST_LOG:-info}

record() { # name status detail
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$RESULTS"
  printf '[%4ss] %-28s %s  %s\n' "$(( $(date +%s) - T0 ))" "$1" "$2" "$3"
}

# ---- 1. build sanity ---------------------------------------------------------
"$BIN" --version > "$OUT_DIR/version.txt" 2>&1 && record version PASS "$(cat "$OUT_DIR/version.txt")" \
  || record version FAIL "tokenrouter --version"
"$PY" - > "$OUT_DIR/torch.txt" 2>&1 <<'PYEOF'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, "memory_gib", round(p.total_memory / 2**30, 1), "sm", f"{p.major}{p.minor}")
PYEOF
record torch "$( [ $? = 0 ] && echo PASS || echo FAIL )" "$(tr '\n' ' ' < "$OUT_DIR/torch.txt")"
if [ "$DRY" = 0 ]; then
  nvidia-smi > "$OUT_DIR/nvidia-smi.txt" 2>&1 || true
fi

# ---- 3 (model first: step 1 decodes with it). A random-weight checkpoint ----
MODEL=$OUT_DIR/models/parity-$PARITY_PRESET
rm -rf "$MODEL"
if timeout 300 "$BIN" gen-random --preset "$PARITY_PRESET" "$MODEL" --seed 11 --dtype f32 \
     --tokenizer-dir "$TOKDIR" > "$OUT_DIR/gen-random.log" 2>&1; then
  record gen-random PASS "$PARITY_PRESET, f32"
else
  record gen-random FAIL "see gen-random.log"
fi

PROMPT="The history of the printing press begins in the fifteenth century"
generate() { # dtype graphs -> ids JSON line on stdout
  timeout 180 "$BIN" generate --model "$MODEL" --prompt "$PROMPT" --max-tokens "$PARITY_STEPS" \
    --device "$DEVICE" --dtype "$1" --cuda-graphs "$2" --print-ids 2> "$OUT_DIR/generate-$1-graphs-$2.log" \
    > /dev/null && grep '^{"ids"\|^{"prompt_ids"' "$OUT_DIR/generate-$1-graphs-$2.log" | tail -1
}

# Build sanity, part 2: the CUDA path decodes with graphs and the shim.
GRAPHS_ON=$([ "$DRY" = 1 ] && echo off || echo on)
if OURS_F32_G=$(generate f32 "$GRAPHS_ON"); then
  record "decode (graphs $GRAPHS_ON)" PASS "$DEVICE f32"
else
  record "decode (graphs $GRAPHS_ON)" FAIL "see generate-f32-graphs-$GRAPHS_ON.log"
fi

# ---- 2. kernels ----------------------------------------------------------------
# One row per check, with kernel-check's own status (a skipped case is SKIP).
timeout 180 "$KC" --backend "$BACKEND" "${KC_ARGS[@]}" > "$OUT_DIR/kernel-check.jsonl" 2> "$OUT_DIR/kernel-check.log"
KC_RC=$?
KC_ROWS=$("$PY" - "$OUT_DIR/kernel-check.jsonl" <<'PYEOF'
import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    detail = r.get("skipped") or ", ".join(f"{k} {r[k]}" for k in ("max_rel_err", "failed_rows", "mismatched") if k in r)
    print(f"kernels {r['check']} {r['dtype']}\t{r.get('status', 'FAIL')}\t{r['backend']}: {detail}")
PYEOF
)
if [ -z "$KC_ROWS" ]; then
  record kernels FAIL "kernel-check printed no checks (exit $KC_RC; see kernel-check.log)"
else
  while IFS=$'\t' read -r name status detail; do record "$name" "$status" "$detail"; done <<< "$KC_ROWS"
  [ "$KC_RC" = 0 ] || grep -q $'\tFAIL\t' <<< "$KC_ROWS" || record kernels FAIL "kernel-check exited $KC_RC"
fi

# ---- 3. parity against transformers ------------------------------------------
if ! "$PY" -c 'import transformers' 2>/dev/null && [ -d "$BUNDLE/wheels" ]; then
  "$PY" -m pip install -q --no-index --find-links "$BUNDLE/wheels" --target "$OUT_DIR/pydeps" \
    transformers > "$OUT_DIR/pip.log" 2>&1 && export PYTHONPATH="$OUT_DIR/pydeps${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! "$PY" -c 'import transformers' 2>/dev/null; then
  record parity SKIP "transformers not importable by $PY and no usable wheels/ in the bundle"
else
  compare() { # label ours_json dtype strict
    local ours=$2 ref prompt
    prompt=$(printf '%s' "$ours" | "$PY" -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["prompt_ids"]))')
    ref=$(timeout 300 "$PY" "$ROOT/scripts/gpu_parity.py" "$MODEL" --prompt-ids "$prompt" \
      --steps "$PARITY_STEPS" --device "$DEVICE" --dtype "$3" 2> "$OUT_DIR/parity-ref-$1.log" | tail -1)
    printf '%s\n%s\n' "$ours" "$ref" > "$OUT_DIR/parity-$1.json"
    local verdict
    verdict=$(printf '%s\n%s\n' "$ours" "$ref" | "$PY" -c '
import json, sys
a = json.loads(sys.stdin.readline())["ids"]; b = json.loads(sys.stdin.readline())["ids"]
n = 0
while n < min(len(a), len(b)) and a[n] == b[n]: n += 1
print(("EQUAL" if a == b else "DIFF"), f"{n}/{max(len(a), len(b))} ids agree")' 2>&1)
    if [ -z "$ref" ]; then
      record "parity $1" FAIL "reference failed: see parity-ref-$1.log"
    elif [[ $verdict == EQUAL* ]]; then
      record "parity $1" PASS "${verdict#EQUAL }"
    elif [ "$4" = strict ]; then
      record "parity $1" FAIL "${verdict#DIFF }"
    else
      record "parity $1" INFO "${verdict#DIFF } (bf16 rounding may flip near-ties)"
    fi
  }
  if OURS=$(generate f32 off); then compare "f32 graphs off" "$OURS" f32 strict; else record "parity f32 graphs off" FAIL "our generate failed"; fi
  if [ "$DRY" = 0 ]; then
    if [ -n "${OURS_F32_G:-}" ]; then compare "f32 graphs on" "$OURS_F32_G" f32 strict; else record "parity f32 graphs on" FAIL "our generate failed"; fi
    if OURS=$(generate bf16 off); then compare "bf16 graphs off" "$OURS" bf16 info; else record "parity bf16" FAIL "our generate failed"; fi
  fi
fi

# ---- 4. benchmark ----------------------------------------------------------------
BENCH=$OUT_DIR/bench.jsonl
: > "$BENCH"
bench() { # label mode N graphs streams thresholds [small large [seed]]
  local small=${7:-$SMALL} large=${8:-$LARGE} seed=${9:-1} line
  line=$(timeout 120 "$BIN" sim-bench --json --seed "$seed" --presets "$small,$large" --device "$DEVICE" \
    --dtype "$BENCH_DTYPE" --mode "$2" --concurrency "$3" --cuda-graphs "$4" --cuda-streams "$5" \
    --thresholds "$6" --route-probability 0.35 --duration-s "$DURATION" --warmup-s "$WARMUP" \
    --answer-tokens "$ANSWER" --prompt-tokens 32 2>> "$OUT_DIR/bench.log" | tail -1)
  if [ -n "$line" ]; then
    printf '{"label":"%s","graphs":"%s","streams":"%s","seed":%s,"result":%s}\n' "$1" "$4" "$5" "$seed" "$line" >> "$BENCH"
  else
    record "bench $1 N=$3 g=$4 s=$5" FAIL "see bench.log"
  fi
}
step_ms() { # bench label N -> mean step ms of model 0
  "$PY" - "$BENCH" "$1" "$2" <<'PYEOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["label"] == sys.argv[2] and r["result"]["options"]["concurrency"] == int(sys.argv[3]):
        res = r["result"]
        print(round(1e3 * res["wall_s"] / max(res["steps_per_model"][0], 1), 3))
        break
PYEOF
}
GRAPH_CFGS=(off)
[ "$DRY" = 0 ] && GRAPH_CFGS=(off on)
# Step times at batch 1 feed the tuner.
bench small-only small_only 1 off on 1,1
bench large-only large_only 1 off on 1,1
LS=$(step_ms small-only 1); LL=$(step_ms large-only 1)
# About a hundred slots for the large model's step keeps the chain small.
DELTA=$("$PY" -c "import sys; print(max(0.1, round(float(sys.argv[1] or 0) / 100, 2)))" "${LL:-0}")
declare -A B
if [ -n "$LS" ] && [ -n "$LL" ] && timeout 120 "$BIN" tune --latencies-ms "$LS,$LL" --transition '[[0.65,0.35],[1,0]]' \
     --credit '[[1,0],[1,0]]' --delta-ms "$DELTA" --concurrency "$(IFS=,; echo "${NS[*]}")" --json \
     > "$OUT_DIR/tune.json" 2> "$OUT_DIR/tune.log"; then
  while read -r n b; do B[$n]=$b; done < <("$PY" -c '
import json, sys
rows = json.load(open(sys.argv[1]))
rows = rows["results"] if isinstance(rows, dict) else rows
for r in rows: print(r["concurrency"], ",".join(map(str, r["thresholds"])))' "$OUT_DIR/tune.json")
  record tune PASS "step ms small $LS, large $LL; B: $(for n in "${NS[@]}"; do printf 'N=%s:%s ' "$n" "${B[$n]:-?}"; done)"
else
  record tune FAIL "no step times or tune failed (tune.log); B=1,1"
fi
for n in "${NS[@]}"; do
  b=${B[$n]:-1,1}
  for g in "${GRAPH_CFGS[@]}"; do
    [ "$n" = 1 ] && [ "$g" = off ] || bench large-only large_only "$n" "$g" on 1,1
    [ "$n" = 1 ] && [ "$g" = off ] || bench small-only small_only "$n" "$g" on 1,1
    bench routed async_delayed "$n" "$g" on "$b"
  done
  bench routed-default-stream async_delayed "$n" off off "$b"
  bench std-serving std_serving "$n" off on 1,1
done
[ "$WITH_32B" = 1 ] && [ "$DRY" = 0 ] && bench routed-32b async_delayed 8 on on "${B[8]:-1,1}" qwen3-0.6b qwen3-32b
# A second seed for the cells the targets read, so each ratio has a spread.
for g in "${GRAPH_CFGS[@]}"; do
  for n in 1 8 16; do
    [[ " ${NS[*]} " == *" $n "* ]] && bench small-only small_only "$n" "$g" on 1,1 "$SMALL" "$LARGE" 2
  done
  bench large-only large_only 8 "$g" on 1,1 "$SMALL" "$LARGE" 2
  bench routed async_delayed 8 "$g" on "${B[8]:-1,1}" "$SMALL" "$LARGE" 2
done

# The table (first seed), then the targets' verdicts.
"$PY" - "$BENCH" > "$OUT_DIR/bench.md" 2>> "$OUT_DIR/bench.log" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def tput(label, n, g="off", s="on"):
    for r in rows:
        o = r["result"]["options"]
        if r["label"] == label and o["concurrency"] == n and r["graphs"] == g and r["streams"] == s and r.get("seed", 1) == 1:
            return r["result"]["throughput_tok_s"]
ns = sorted({r["result"]["options"]["concurrency"] for r in rows})
print("| N | large-only tok/s | routed tok/s (graphs off) | routed tok/s (graphs on) | routed, default stream | Std. Serving tok/s | routed / large-only |")
print("|---|---|---|---|---|---|---|")
for n in ns:
    lo, ro, rg = tput("large-only", n), tput("routed", n), tput("routed", n, "on")
    rd, st = tput("routed-default-stream", n, "off", "off"), tput("std-serving", n)
    best = max(x for x in (ro, rg) if x is not None) if (ro or rg) else None
    f = lambda x: "-" if x is None else f"{x:.1f}"
    print(f"| {n} | {f(lo)} | {f(ro)} | {f(rg)} | {f(rd)} | {f(st)} | {'-' if not (lo and best) else f'{best / lo:.2f}'} |")
PYEOF
TARGETS=$("$PY" "$ROOT/scripts/gpu_targets.py" "$BENCH" $( [ "$DRY" = 1 ] && echo --dry-run ) 2>> "$OUT_DIR/bench.log")
if [ -z "$TARGETS" ]; then
  record targets FAIL "gpu_targets.py printed nothing (bench.log)"
else
  while IFS=$'\t' read -r name status detail; do record "$name" "$status" "$detail"; done <<< "$TARGETS"
fi
echo "- load average after the benchmark: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT_DIR/bench.md"
record bench "$( [ -s "$BENCH" ] && echo PASS || echo FAIL )" "$(wc -l < "$BENCH") runs; table in bench.md"

# ---- report ----------------------------------------------------------------------
{
  echo "# GPU check ($( [ "$DRY" = 1 ] && echo 'DRY RUN on CPU' || echo GPU ))"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- command: scripts/gpu-check.sh$( [ "$DRY" = 1 ] && echo ' --dry-run')"
  echo "- machine: $(tr '\n' ' ' < "$OUT_DIR/torch.txt")"
  echo "- elapsed: $(( $(date +%s) - T0 )) s; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  awk '$1 > 2 { print "- **noisy**: measured at a 1-minute load average above 2" }' /proc/loadavg
  echo
  echo "| check | result | detail |"
  echo "|---|---|---|"
  awk -F'\t' '{printf "| %s | %s | %s |\n", $1, $2, $3}' "$RESULTS"
  echo
  echo "## Benchmark"
  echo
  cat "$OUT_DIR/bench.md"
} > "$REPORT"
echo "gpu-check: report in $REPORT"
rm -rf "$OUT_DIR/models"
if grep -q $'\tFAIL\t' "$RESULTS"; then
  echo "gpu-check: FAILED checks:"; grep $'\tFAIL\t' "$RESULTS" | cut -f1,3
  exit 1
fi
exit 0
