#!/usr/bin/env bash
# down.sh [STATE] - stops the two processes up.sh recorded in STATE/*.pid, nothing else, and deletes
# the etcd data. Logs, pki/ and kubeconfig stay for inspection. Running it twice is harmless.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

S=${1:-$STATE_DEFAULT}
[ -d "$S" ] || { say "$S does not exist: nothing to stop"; exit 0; }
S=$(cd "$S" && pwd -P)

# stop NAME: ends the pid in STATE/NAME.pid if it is still the process up.sh started there.
stop() {
  local file=$S/$1.pid pid
  [ -f "$file" ] || return 0
  pid=$(cat "$file")
  # Both processes got paths inside $S on their command line; a reused pid would not have them.
  if running "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$S/"; then
    kill -TERM "$pid"
    for _ in $(seq 100); do running "$pid" || break; sleep 0.1; done
    if running "$pid"; then
      say "$1 (pid $pid) still running 10s after SIGTERM: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    say "stopped $1 (pid $pid)"
  else
    say "$1 (pid $pid) was not running"
  fi
  rm -f "$file"
}

stop apiserver
stop etcd
rm -rf "$S/etcd"
