#!/usr/bin/env bash
# Starts a server, waits until it answers, runs a client with every `{URL}`
# in its arguments replaced by the server's base URL, then stops the server
# (by its PID) and returns the client's status.
#
# Usage: with_server.sh LOG URL|auto -- SERVER_CMD... --- CLIENT_CMD...
#   URL=auto: read it from the server's "listening on http://..." line
#   (`tokenrouter serve --port 0`); otherwise poll the given URL.
set -euo pipefail
log=$1 url=$2; shift 2
[[ $1 == -- ]] || { echo "with_server.sh: expected -- after URL" >&2; exit 2; }
shift
server=()
while [[ $# -gt 0 && $1 != --- ]]; do server+=("$1"); shift; done
[[ $# -gt 0 ]] || { echo "with_server.sh: expected --- before the client" >&2; exit 2; }
shift
mkdir -p "$(dirname "$log")"
"${server[@]}" >"$log" 2>&1 &
pid=$!
stop() {
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
trap stop EXIT
deadline=$((SECONDS + 900))
while :; do
  kill -0 "$pid" 2>/dev/null || { echo "server exited; its log ($log):" >&2; tail -20 "$log" >&2; exit 1; }
  if [[ $url == auto ]]; then
    found=$(grep -so 'listening on http://[^ ]*' "$log" | head -1 | sed 's/listening on //' || true)
    [[ -n $found ]] && curl -sf "$found/v1/models" >/dev/null 2>&1 && { url=$found; break; }
  elif curl -sf "$url/v1/models" >/dev/null 2>&1; then
    break
  fi
  ((SECONDS < deadline)) || { echo "server not ready after 900 s; log: $log" >&2; exit 1; }
  sleep 1
done
client=()
for a in "$@"; do client+=("${a//\{URL\}/$url}"); done
"${client[@]}"
