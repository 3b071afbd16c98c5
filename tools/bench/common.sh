# Shared by the bench scripts: settings from the environment (set by make)
# and config writers for the local SmolLM2 pair.
set -euo pipefail
: "${BIN:?BIN (the tokenrouter binary) must be set}"
: "${MODELS:?MODELS (the model cache folder) must be set}"
: "${RAW:?RAW (folder for raw CSV/JSON outputs) must be set}"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# The default pair: the healed 12-layer exit (make's distillation) and the
# full model; RAW_EXIT is the exit as cut, before healing.
SMALL=${SMALL:-$MODELS/smollm2-135m-l12-healed}
RAW_EXIT=$MODELS/smollm2-135m-l12
LARGE=$MODELS/smollm2-135m
# The port servers bind (0: any free one; set it to keep to a port range).
SERVE_PORT=${SERVE_PORT:-0}
mkdir -p "$RAW/configs"
# When and under what load the measurement began: `report` dates the page
# from here, not from the moment it assembles the page.
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LOAD0=$(cut -d' ' -f1 /proc/loadavg)
since=(--started "$STARTED" --load-start "$LOAD0")

# The default group: config/default.yaml (what `make run` serves), named by
# its policy and the settings it gives that policy.
DEFAULT_YAML=$ROOT/config/default.yaml
DEFAULT_POLICY=$(sed -n 's/^scheduler_class: *//p' "$DEFAULT_YAML")
DEFAULT_KWARGS=$(sed -n '/^scheduler_kwargs:/,/^[a-z]/{/^  [a-z_]*:/{s/^  //;p}}' "$DEFAULT_YAML" | paste -sd, | sed 's/,/, /g')
DEFAULT_LABEL=${DEFAULT_LABEL:-default group ($DEFAULT_POLICY${DEFAULT_KWARGS:+, $DEFAULT_KWARGS})}

# The cache the models came from (make exports it; MODELS is its models/):
# config/default.yaml's paths are written against it.
export TOKENROUTER_CACHE=${TOKENROUTER_CACHE:-$(dirname "$MODELS")}
# The router make trains for the healed exit (R2R's).
ROUTER=${ROUTER:-$TOKENROUTER_CACHE/routers/smollm2-135m-l12-healed-r2r/router.pt}

# pair_config NAME CLASS KWARGS: the SmolLM2 pair (quick = healed 12-layer
# early exit, reference = full model) with routing policy CLASS and its kwargs
# (a YAML flow map such as "{threshold: 0.3}"), in $DTYPE (default `auto`, as
# `make run`: bf16 on a CPU with native bf16, f32 elsewhere).
pair_config() {
  cat >"$RAW/configs/$1.yaml" <<YAML
model:
  quick:
    path: $SMALL
  reference:
    path: $LARGE
system:
  entry_model: quick
scheduler_class: $2
scheduler_kwargs: $3
backend: tch
device: cpu
dtype: ${DTYPE:-auto}
execution_mode: async_delayed
YAML
  echo "$RAW/configs/$1.yaml"
}

# default_config NAME: config/default.yaml in this run's dtype, so the
# benches measure the group users get, not a copy of its settings. Its model
# paths name `${TOKENROUTER_CACHE}`, which the engine expands (set above).
default_config() {
  sed -e "s|^dtype: .*|dtype: ${DTYPE:-auto}|" "${2:-$DEFAULT_YAML}" >"$RAW/configs/$1.yaml"
  echo "$RAW/configs/$1.yaml"
}
# The `fast` group (config/fast.yaml, also served by `make run`), labelled
# like the default group.
FAST_YAML=$ROOT/config/fast.yaml
FAST_LABEL="fast group ($(sed -n 's/^scheduler_class: *//p' "$FAST_YAML"), $(sed -n '/^scheduler_kwargs:/,/^[a-z]/{/^  [a-z_]*:/{s/^  //;p}}' "$FAST_YAML" | paste -sd, | sed 's/,/, /g'))"

# single_config NAME MODEL_NAME PATH: one model alone.
single_config() {
  cat >"$RAW/configs/$1.yaml" <<YAML
model:
  $2:
    path: $3
system:
  entry_model: $2
scheduler_class: Single
backend: tch
device: cpu
dtype: ${DTYPE:-auto}
YAML
  echo "$RAW/configs/$1.yaml"
}

# bench_serve LABEL CONFIG ARGS...: serve CONFIG on a free port and run
# `tokenrouter bench` against it into $RAW/LABEL.
bench_serve() {
  local label=$1 config=$2; shift 2
  "$HERE/with_server.sh" "$RAW/$label/server.log" auto -- \
    "$BIN" serve --config "$config" --host 127.0.0.1 --port "$SERVE_PORT" --- \
    "$BIN" bench --url "{URL}" --model default --large-model reference --label "$label" \
    --out "$RAW/$label" --no-progress "$@"
}

# ratios NUM DEN N: NUM's output tok/s over DEN's at concurrency N, one ratio
# per repeat (NUM, NUM-2, ... over DEN, DEN-2, ...; $REPEATS of them), as
# `report --verdict` takes them.
ratios() {
  python3 - "$RAW" "$1" "$2" "$3" "${REPEATS:-1}" <<'PY'
import json, os, sys
raw, num, den, n, repeats = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
def tok_s(d):
    return next(s["output_tok_s"] for s in json.load(open(os.path.join(raw, d, "summary.json"))) if s["concurrency"] == n)
sfx = [""] + [f"-{r}" for r in range(2, repeats + 1)]
print(",".join(f"{tok_s(num + x) / tok_s(den + x):.4f}" for x in sfx))
PY
}

# share_of DIR: the large-model share at the lowest concurrency of a run.
share_of() {
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))[0]["large_model_share"]; print(s if s is not None else 0)' "$1/summary.json"
}

# heal_summary: one line on how the default small model was healed, from the
# heal.json make's distillation wrote beside it.
heal_summary() {
  python3 - "$SMALL/heal.json" <<'PY'
import json, sys
try:
    h = json.load(open(sys.argv[1]))
except OSError:
    print("no heal.json: not the healed exit")
    raise SystemExit
b, a = h["held_out_before"], h["held_out_after"]
print(f"trained {', '.join(h['trained'])} on {h['train_tokens']} answer tokens for {h['epochs']} epochs "
      f"in {h['teacher_seconds'] + h['train_seconds']:.0f} s; top-1 agreement with the full model on "
      f"{a['tokens']} held-out answer tokens (teacher forcing) went from {b['top1_agreement']:.3f} to "
      f"{a['top1_agreement']:.3f}")
PY
}
