#!/usr/bin/env bash
# with_node.sh STATE_DIR CMD...: runs CMD with the k8s test kit and the local node up (kit state in
# STATE_DIR/kit, node state in STATE_DIR/node), then stops both, also when CMD fails. CMD sees
# KUBECONFIG, PATH (kubectl, helm) and LOCALNODE_STATE. Ports: TOKENROUTER_K8S_*_PORT; pod subnet:
# LOCALNODE_SUBNET / LOCALNODE_TAG, ConfigMap update delay: LOCALNODE_CONFIGMAP_DELAY (default 30 s; see
# tools/localnode/localnode.py); images: root's podman storage (make images-test).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
KIT=${K8S_KIT:-$ROOT/tools/k8s-kit}
KPY=${LOCALNODE_PYTHON:-${TOKENROUTER_K8S_CACHE:-$HOME/.cache/tokenrouter-k8s}/venv/bin/python}
ST=$1; shift
mkdir -p "$ST"
ST=$(cd "$ST" && pwd)
export LOCALNODE_STATE=$ST/node
bash "$KIT/up.sh" "$ST/kit" >/dev/null
node_pid=
stop() {
  rc=$?
  if [ -n "$node_pid" ]; then
    "$KPY" "$ROOT/tools/localnode/localnode.py" down --state "$LOCALNODE_STATE" || true
    wait "$node_pid" 2>/dev/null || true
  fi
  bash "$KIT/down.sh" "$ST/kit" >/dev/null 2>&1 || true
  exit $rc
}
trap stop EXIT
. "$ST/kit/env"
"$KPY" "$ROOT/tools/localnode/localnode.py" up --state "$LOCALNODE_STATE" \
  --kubeconfig "$KUBECONFIG" >"$ST/node.log" 2>&1 &
node_pid=$!
for _ in $(seq 1 300); do
  [ -e "$LOCALNODE_STATE/ready" ] && break
  kill -0 "$node_pid" 2>/dev/null || { tail -20 "$ST/node.log" >&2; echo "local node exited" >&2; exit 1; }
  sleep 0.1
done
[ -e "$LOCALNODE_STATE/ready" ] || { tail -20 "$ST/node.log" >&2; echo "local node not ready after 30 s" >&2; exit 1; }
"$@"
