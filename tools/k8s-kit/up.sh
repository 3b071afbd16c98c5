#!/usr/bin/env bash
# up.sh [STATE] - starts etcd and the kit's API server (kitapi) on 127.0.0.1 and writes
# STATE/kubeconfig and STATE/env (STATE defaults to $TOKENROUTER_K8S_STATE or /tmp/tokenrouter-k8s).
#
# stdout carries only the lines of STATE/env (shell exports); progress and errors go to stderr.
# STATE also gets pki/, etcd/ (data), etcd.log, apiserver.log and the two pid files down.sh reads.
# On failure it prints the log tails, stops what it started and exits non-zero.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

S=${1:-$STATE_DEFAULT}
mkdir -p "$S"
S=$(cd "$S" && pwd -P)
START=$(ms)
URL=https://127.0.0.1:$API_PORT
ETCD_URL=http://127.0.0.1:$ETCD_PORT

preflight() {
  local c f p
  [ -x "$BIN/kitapi" ] && [ -x "$BIN/kubectl" ] || fail "$BIN has no kitapi/kubectl: run bash $KIT/build.sh first"
  for c in etcd etcdctl openssl curl; do command -v "$c" >/dev/null || fail "no $c: run bash $KIT/build.sh first"; done
  for f in "$S/apiserver.pid" "$S/etcd.pid"; do
    if [ -f "$f" ] && running "$(cat "$f")"; then fail "$S is in use (pid $(cat "$f")): bash $KIT/down.sh $S first"; fi
  done
  for p in "$API_PORT" "$ETCD_PORT" "$ETCD_PEER_PORT"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      fail "port $p on 127.0.0.1 is taken; choose others with TOKENROUTER_K8S_API_PORT / _ETCD_PORT / _ETCD_PEER_PORT"
    fi
  done
  rm -rf "$S/etcd" "$S/pki" "$S/kubeconfig" "$S/env" "$S"/*.log "$S"/*.pid
}

# If anything below fails: show the logs' last lines and stop what this run started.
PIDS=()
cleanup_on_failure() {
  local rc=$? l p
  [ "$rc" = 0 ] && return
  for l in etcd apiserver; do
    if [ -s "$S/$l.log" ]; then echo "--- tail of $S/$l.log" >&2; tail -n 25 "$S/$l.log" >&2; fi
  done
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -f "$S/etcd.pid" "$S/apiserver.pid"
  say "up.sh failed after $(took "$START"); stopped: ${PIDS[*]:-nothing}"
}
trap cleanup_on_failure EXIT

# wait_until WHAT PID CMD...: polls CMD until it succeeds; fails when PID dies or after $WAIT_S s.
wait_until() {
  local what=$1 pid=$2 deadline=$(( $(date +%s) + WAIT_S ))
  shift 2
  until "$@" >/dev/null 2>&1; do
    running "$pid" || fail "$what: the process exited"
    [ "$(date +%s)" -lt "$deadline" ] || fail "$what: not ready within ${WAIT_S}s (TOKENROUTER_K8S_TIMEOUT)"
    sleep 0.1
  done
}

# A CA, a server certificate for 127.0.0.1/localhost and a client certificate in system:masters.
# X.509 v3 with extensions throughout: rustls (kube-rs) rejects v1 certificates.
make_pki() {
  mkdir -p "$S/pki"
  (
    cd "$S/pki"
    openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj /CN=tokenrouter-k8s-kit-ca -keyout ca.key -out ca.crt
    issue() { # NAME SUBJECT EXTRA_EXTENSION_LINES
      openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr"
      printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n%s\n' "$3" >"$1.ext"
      openssl x509 -req -days 365 -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -extfile "$1.ext" -out "$1.crt"
    }
    issue server /CN=kitapi "$(printf 'extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost')"
    issue admin "/O=system:masters/CN=kit-admin" extendedKeyUsage=clientAuth
    chmod 600 ./*.key
  ) >"$S/pki.log" 2>&1 || { cat "$S/pki.log" >&2; fail "openssl failed"; }
  # Certificates embedded, so the kubeconfig still works when copied elsewhere.
  cat >"$S/kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: tokenrouter-kit
  cluster:
    server: $URL
    certificate-authority-data: $(base64 -w0 <"$S/pki/ca.crt")
users:
- name: kit-admin
  user:
    client-certificate-data: $(base64 -w0 <"$S/pki/admin.crt")
    client-key-data: $(base64 -w0 <"$S/pki/admin.key")
contexts:
- name: tokenrouter-kit
  context: {cluster: tokenrouter-kit, user: kit-admin, namespace: default}
current-context: tokenrouter-kit
KUBECONFIG
  chmod 600 "$S/kubeconfig"
}

start_etcd() {
  local peer=http://127.0.0.1:$ETCD_PEER_PORT
  nohup etcd --name kit --data-dir "$S/etcd" --unsafe-no-fsync \
    --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "kit=$peer" \
    </dev/null >"$S/etcd.log" 2>&1 &
  PIDS+=($!)
  echo $! >"$S/etcd.pid"
  wait_until "etcd on $ETCD_URL" $! curl -sf "$ETCD_URL/health"
}

# The stand-in CRDs go into etcd directly (the CRD API would refuse their groups).
seed_standins() {
  local n=0 key crd
  while IFS=$'\t' read -r key crd; do
    printf '%s' "$crd" | ETCDCTL_API=3 etcdctl --endpoints "$ETCD_URL" put "$key" >/dev/null
    n=$((n + 1))
  done < <(python3 "$KIT/builtin_crds.py" /registry)
  [ "$n" -gt 0 ] || fail "builtin_crds.py printed no CRDs"
  say "$n stand-in CRDs in etcd"
}

start_apiserver() {
  local pki=$S/pki
  # shellcheck disable=SC2086  # extra flags are meant to split
  nohup "$BIN/kitapi" --etcd-servers="$ETCD_URL" --etcd-prefix=/registry \
    --bind-address=127.0.0.1 --secure-port="$API_PORT" \
    --tls-cert-file="$pki/server.crt" --tls-private-key-file="$pki/server.key" --client-ca-file="$pki/ca.crt" \
    --kubeconfig="$S/kubeconfig" --authentication-kubeconfig="$S/kubeconfig" --authentication-skip-lookup \
    --authorization-kubeconfig="$S/kubeconfig" --enable-priority-and-fairness=false \
    --disable-admission-plugins=NamespaceLifecycle,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ValidatingAdmissionPolicy,MutatingAdmissionPolicy \
    ${TOKENROUTER_K8S_APISERVER_ARGS:-} </dev/null >"$S/apiserver.log" 2>&1 &
  PIDS+=($!)
  echo $! >"$S/apiserver.pid"
  wait_until "API server /readyz" $! api "$URL/readyz"
  wait_until "stand-in kinds served" $! api "$URL/apis/apps/v1/deployments"
  wait_until "namespace default" $! make_namespace default
  wait_until "namespace kube-system" $! make_namespace kube-system
}

api() { curl -sf --cacert "$S/pki/ca.crt" --cert "$S/pki/admin.crt" --key "$S/pki/admin.key" "$@"; }

# make_namespace NAME: creates it; also succeeds when it exists already.
make_namespace() {
  local code
  code=$(api -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' "$URL/api/v1/namespaces" \
    -d "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$1\"}}" || true)
  [ "$code" = 201 ] || [ "$code" = 409 ]
}

preflight
make_pki
start_etcd
say "etcd up (pid $(cat "$S/etcd.pid")): $(took "$START")"
seed_standins
start_apiserver
say "API server up (pid $(cat "$S/apiserver.pid"), $URL, $(api "$URL/version" | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p')): $(took "$START")"
cat >"$S/env" <<ENV
export KUBECONFIG='$S/kubeconfig'
export PATH='$BIN':"\$PATH"
ENV
trap - EXIT
cat "$S/env"
say "up in $(took "$START"); stop it with: bash $KIT/down.sh $S"
