#!/usr/bin/env bash
# check.sh [STATE] - checks a stack that up.sh started: the upstream behaviour the README calls real,
# and the stand-ins' documented behaviour. Prints one line per check and "N passed, M failed";
# exits non-zero on any failure. Removes what it creates.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

S=${1:-$STATE_DEFAULT}
[ -f "$S/env" ] || fail "no $S/env: start the kit with bash $KIT/up.sh $S"
# shellcheck source=/dev/null
. "$S/env"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
passed=0 failed=0
pass() { passed=$((passed + 1)); echo "pass: $1"; }
miss() { failed=$((failed + 1)); echo "FAIL: $1"; sed 's/^/    /' "$TMP/out"; }
# ok DESC CMD...: CMD succeeds. refused DESC REGEX CMD...: CMD fails saying REGEX.
# prints DESC WANT CMD...: CMD's stdout is WANT.
ok() { local d=$1; shift; if "$@" >"$TMP/out" 2>&1; then pass "$d"; else miss "$d"; fi; }
refused() {
  local d=$1 re=$2; shift 2
  if "$@" >"$TMP/out" 2>&1; then miss "$d (accepted)"; elif grep -qE "$re" "$TMP/out"; then pass "$d"; else miss "$d"; fi
}
prints() {
  local d=$1 want=$2 got; shift 2
  got=$("$@" 2>"$TMP/out") || true
  if [ "$got" = "$want" ]; then pass "$d"; else echo "got '$got', want '$want'" >>"$TMP/out"; miss "$d"; fi
}
PY=$CACHE/venv/bin/python
GROUP=check.k8s-kit.tokenrouter.dev
CRD=gadgets.$GROUP
ssa() { kubectl apply --server-side --field-manager="${1:-check}" -f -; }
gadget() { # NAME LOW HIGH [MORE_SPEC]
  printf 'apiVersion: %s/v1\nkind: Gadget\nmetadata: {name: %s}\nspec: {low: %s, high: %s%s}\n' "$GROUP" "$1" "$2" "$3" "${4:-}"
}
# Removes what the checks create (also a previous, interrupted run's leftovers) and waits for it.
remove_objects() {
  kubectl delete "crd/$CRD" pod/check-pod deploy/check-web secret/check-secret --ignore-not-found >/dev/null 2>&1 || true
  helm uninstall check-chart >/dev/null 2>&1 || true
}
trap 'remove_objects; rm -rf "$TMP"' EXIT
remove_objects

echo "# discovery"
prints "GET /api lists v1" v1 bash -c "kubectl get --raw /api | $PY -c 'import json,sys; print(json.load(sys.stdin)[\"versions\"][0])'"
ok "kubectl api-resources knows pods and deployments" bash -c 'kubectl api-resources | grep -qw pods && kubectl api-resources | grep -qw deployments'

echo "# a CRD (upstream apiextensions-apiserver)"
cat >"$TMP/crd.yaml" <<YAML
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: $CRD}
spec:
  group: $GROUP
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [low, high]
            x-kubernetes-validations:
            - {rule: "self.low <= self.high", message: "low must not exceed high"}
            properties:
              low: {type: integer, minimum: 0}
              high: {type: integer}
              color: {type: string, default: blue}
          status:
            type: object
            properties: {seen: {type: boolean}}
YAML
ok "create a CRD (server-side apply)" ssa <"$TMP/crd.yaml"
ok "it becomes Established" kubectl wait --for=condition=Established "crd/$CRD" --timeout=20s
refused "CEL rule (x-kubernetes-validations) rejects low > high" "low must not exceed high" ssa < <(gadget bad 5 1)
refused "OpenAPI schema rejects a negative low" "greater than or equal to 0" ssa < <(gadget bad -1 2)
ok "a valid object is accepted" ssa < <(gadget one 1 2)
prints "defaulting sets spec.color" blue kubectl get gadget one -o 'jsonpath={.spec.color}'
refused "server-side apply: conflict between field managers" "[Cc]onflict" ssa other < <(gadget one 1 3)
gadget one 1 3 >"$TMP/one-3.yaml"
ok "server-side apply: --force-conflicts takes the field over" \
  kubectl apply --server-side --field-manager=other --force-conflicts -f "$TMP/one-3.yaml"
prints "...and records the new manager" other \
  kubectl get gadget one --show-managed-fields -o 'jsonpath={.metadata.managedFields[?(@.manager=="other")].manager}'
ok "status subresource: patch status" kubectl patch gadget one --subresource=status --type=merge -p '{"status":{"seen":true}}'
prints "...status is stored" true kubectl get gadget one -o 'jsonpath={.status.seen}'
refused "strategic merge patch on a custom resource: 415 as upstream" "is not supported by|UnsupportedMediaType|415" \
  kubectl patch gadget one --type=strategic -p '{"spec":{"high":4}}'

echo "# watch"
rv=$(kubectl get --raw "/apis/$GROUP/v1/namespaces/default/gadgets" | $PY -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])')
ssa < <(gadget two 1 1) >/dev/null
prints "watch from a resourceVersion reports ADDED two" "ADDED two" bash -c \
  "kubectl get --raw '/apis/$GROUP/v1/namespaces/default/gadgets?watch=1&resourceVersion=$rv&timeoutSeconds=5' \
   | $PY -c 'import json,sys
for line in sys.stdin:
    e = json.loads(line)
    print(e[\"type\"], e[\"object\"][\"metadata\"][\"name\"]); break'"

echo "# built-in kinds (stand-in CRDs)"
cat >"$TMP/pod.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: check-pod, labels: {app: check}}
spec: {containers: [{name: main, image: example.invalid/app:1}]}
YAML
ok "create a Pod at /api/v1" kubectl create -f "$TMP/pod.yaml"
prints "...it reads back with apiVersion v1" "v1 Pod" kubectl get pod check-pod -o 'jsonpath={.apiVersion} {.kind}'
ok "...its status can be set (status subresource)" \
  kubectl patch pod check-pod --subresource=status --type=merge -p '{"status":{"phase":"Running"}}'
prints "...and label selectors find it" pod/check-pod kubectl get pods -l app=check -o name
ok "kubectl create deployment (typed client)" kubectl create deployment check-web --image=example.invalid/web:1
ok "strategic merge patch (kubectl set image)" kubectl set image deploy/check-web web=example.invalid/web:2
prints "...merges the container list by name" "web=example.invalid/web:2" \
  kubectl get deploy check-web -o 'jsonpath={range .spec.template.spec.containers[*]}{.name}={.image}{end}'
ok "scale subresource (kubectl scale)" kubectl scale deploy/check-web --replicas=3
prints "...sets spec.replicas" 3 kubectl get deploy check-web -o 'jsonpath={.spec.replicas}'
ok "protobuf body re-encoded (kubectl create secret)" kubectl create secret generic check-secret --from-literal=k=v
ok "kubectl delete secret" kubectl delete secret check-secret
prints "no controllers: the Deployment has no ReplicaSet (documented)" "" kubectl get rs -o name

echo "# helm"
mkdir -p "$TMP/chart/templates"
printf 'apiVersion: v2\nname: check-chart\nversion: 0.1.0\n' >"$TMP/chart/Chart.yaml"
printf 'size: "1"\n' >"$TMP/chart/values.yaml"
cat >"$TMP/chart/templates/cm.yaml" <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata: {name: {{ .Release.Name }}-cm}
data: {size: {{ .Values.size | quote }}}
YAML
ok "helm install of a tiny chart" helm install check-chart "$TMP/chart"
prints "...created its ConfigMap" 1 kubectl get cm check-chart-cm -o 'jsonpath={.data.size}'
ok "helm upgrade (updates the release Secret without resourceVersion)" helm upgrade check-chart "$TMP/chart" --set size=2
prints "...applied the new value" 2 kubectl get cm check-chart-cm -o 'jsonpath={.data.size}'
ok "helm uninstall" helm uninstall check-chart

echo "# tools"
ok "kubernetes-validate accepts the Pod" kubernetes-validate --strict "$TMP/pod.yaml"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
