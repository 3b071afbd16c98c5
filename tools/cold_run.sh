#!/usr/bin/env bash
# Times `make run` as a new user meets it: a fresh clone of this checkout's
# HEAD, an empty CARGO_HOME and no pip cache, from `make run` to the first
# chat completion answered on 127.0.0.1:30000. The network fetches (PyPI,
# crates.io) are part of the time. Writes WORK/make.log (each line prefixed
# with the seconds since the start), WORK/answer.json and WORK/result.
# Usage: tools/cold_run.sh [WORK]   (default /tmp/tokenrouter-cold-run)
set -uo pipefail
work=${1:-/tmp/tokenrouter-cold-run}
src=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
rm -rf "$work" && mkdir -p "$work"
git clone -q "$src" "$work/repo"
cd "$work/repo" || exit 1
export CARGO_HOME=$work/cargo PIP_NO_CACHE_DIR=1
echo "commit $(git rev-parse --short HEAD), load $(cut -d' ' -f1 /proc/loadavg) at the start" >"$work/result"
start=$(date +%s)
(setsid make run 2>&1 | while IFS= read -r l; do echo "$(($(date +%s) - start)) $l"; done >"$work/make.log") &
until curl -sf -m 20 http://127.0.0.1:30000/v1/chat/completions -H 'content-type: application/json' \
    -d '{"model":"default","messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":16}' \
    >"$work/answer.json" 2>/dev/null; do
    sleep 3
    if (($(date +%s) - start > 2400)); then
        echo "no answer after 40 min" >>"$work/result"
        break
    fi
done
echo "first answer after $(($(date +%s) - start)) s" >>"$work/result"
pkill -f "$work/repo/target/release/tokenrouter serve"
cat "$work/result"
