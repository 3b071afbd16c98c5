#!/usr/bin/env bash
# The README's container quick start, run and checked (`make images-quickstart`):
# the CPU image serves the built-in SmolLM2 pair (`tokenrouter serve`) as user
# 65532 with a read-only root filesystem, the models mounted read-only, and
# must answer a chat completion through the published port. Fails when the
# server exits, does not come up within the deadline, or answers no text.
#   tools/images/quickstart_test.sh   (IMAGE, MODELS, PORT, DEADLINE_S override)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
IMAGE=${IMAGE:-ghcr.io/tokenrouter/tokenrouter-cpu:0.1.0}
# The whole models folder, so whatever the built-in config names is there.
MODELS=${MODELS:-$ROOT/.cache/models}
# The README publishes 30000:30000; by default the test takes a free host port
# on 127.0.0.1 so that it runs beside anything already on 30000.
PORT=${PORT:-}
# Only catches a hang: loading both models takes seconds.
DEADLINE_S=${DEADLINE_S:-300}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$ROOT/tools/images/containers.conf}

[ -d "$MODELS" ] || { echo "quickstart: no $MODELS (run make run-assets)" >&2; exit 2; }
name=tokenrouter-quickstart-$$
log=$(mktemp)
cleanup() {
  podman rm -f -t 5 "$name" >/dev/null 2>&1 || true
  rm -f "$log"
}
trap cleanup EXIT

# The quick start's command, as the README gives it (docker takes the same flags).
set -x
podman run -d --name "$name" --read-only --user 65532:65532 \
  -p "${PORT:-127.0.0.1:}:30000" -e TOKENROUTER_CACHE=/cache \
  -v "$MODELS:/cache/models:ro" "$IMAGE" serve --host 0.0.0.0 >/dev/null
set +x

# Wait for the "listening on" line; `logs -f` ends when the container exits.
exec {logs}< <(timeout "$DEADLINE_S" podman logs -f "$name" 2>&1)
logs_pid=$!
up=0
while IFS= read -r line <&"$logs"; do
  echo "$line" >>"$log"
  case $line in *'listening on'*) up=1; break ;; esac
done
kill "$logs_pid" 2>/dev/null || true
exec {logs}<&-
if [ "$up" != 1 ]; then
  echo "quickstart: FAIL: the server did not come up; its output:" >&2
  cat "$log" >&2
  exit 1
fi
hostport=$(podman port "$name" 30000/tcp)
echo "quickstart: serving on $hostport"

# The chat completion from the README.
set -x
answer=$(curl -sS --fail-with-body --max-time 120 "http://$hostport/v1/chat/completions" \
  -H 'Content-Type: application/json' \
  -d '{"model": "default", "messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 32}')
set +x
echo "$answer"
text=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"])' <<<"$answer") || {
  echo "quickstart: FAIL: no chat completion in the answer above" >&2; exit 1; }
[ -n "${text//[[:space:]]/}" ] || { echo "quickstart: FAIL: the answer's text is empty" >&2; exit 1; }

# What the container ran as, and that its root filesystem was read-only.
user=$(podman inspect --format '{{.Config.User}} ro={{.HostConfig.ReadonlyRootfs}}' "$name")
[ "$user" = "65532:65532 ro=true" ] || { echo "quickstart: FAIL: ran as $user" >&2; exit 1; }
echo "quickstart: PASS: $IMAGE answered as $user: ${text:0:80}"
