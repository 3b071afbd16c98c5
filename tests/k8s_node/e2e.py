"""`make e2e TRD=FILE [NS=namespace]`: one TokenRouterDeployment from `helm install` to `kubectl
delete` on the local node (run inside with_node.sh). One line per step; exits non-zero on the
first failure; pod logs, the node's journal and `kubectl describe` output go to --out.

The flow test (flow.py) builds on these steps."""
import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KPY = os.environ.get("LOCALNODE_PYTHON",
                     os.path.join(os.environ.get("TOKENROUTER_K8S_CACHE", os.path.expanduser("~/.cache/tokenrouter-k8s")),
                                  "venv", "bin", "python"))
LOCALNODE = os.path.join(ROOT, "tools", "localnode", "localnode.py")
OWNED_KINDS = ("pods,statefulsets,deployments,replicasets,services,configmaps,secrets,endpointslices,"
               "controllerrevisions,networkpolicies")
# The CPU engine image (make images-test): the weights loader runs it too, as every pod starts
# from an image in the node's storage.
CPU_IMAGE = os.environ.get("E2E_CPU_IMAGE", "ghcr.io/tokenrouter/tokenrouter-cpu:0.1.0")
# The operator's own mark on what it creates (its owned_selector).
OPERATOR_LABELS = {"app.kubernetes.io/managed-by": "tokenrouter-operator"}


class StepFailed(Exception):
    pass


def sh(*cmd, check=True, timeout=600, input=None):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input)
    if check and r.returncode != 0:
        raise StepFailed(f"{' '.join(cmd)}: exit {r.returncode}: {(r.stderr or r.stdout).strip()[-800:]}")
    return r.stdout


def kubectl(*args, **kw):
    return sh("kubectl", *args, **kw)


def kjson(*args):
    return json.loads(kubectl(*args, "-o", "json"))


def wait_until(what, fn, timeout, every=1.0):
    """Polls `fn` -> (done, info) until done; StepFailed with the last info after `timeout`."""
    deadline = time.monotonic() + timeout
    info = None
    while time.monotonic() < deadline:
        done, info = fn()
        if done:
            return info
        time.sleep(every)
    raise StepFailed(f"{what}: not after {timeout}s (last: {str(info)[:600]})")


def owner_uids(obj):
    return {r["uid"] for r in obj["metadata"].get("ownerReferences") or []}


def read(path):
    with open(path) as f:
        return f.read()


class Run:
    """Shared state of one flow: the resource, its namespace, the client and what was created."""

    def __init__(self, args):
        self.args = args
        self.ns = args.ns
        self.trd = None
        self.weights_alias = {}  # PVC subPath -> directory under --models (stand-in weights)
        self.api_key = None
        self.forward = None
        self.base_url = None
        self.step_no = 0
        os.makedirs(args.out, exist_ok=True)

    def load_trd(self):
        """The resource as JSON (the client-side dry run needs the CRD, so after helm install)."""
        self.trd = json.loads(kubectl("create", "--dry-run=client", "-o", "json", "-f", self.args.trd))
        self.name = self.trd["metadata"]["name"]
        self.spec = self.trd["spec"]

    def step(self, title, fn, *a):
        self.step_no += 1
        t0 = time.monotonic()
        try:
            detail = fn(*a)
        except (StepFailed, subprocess.TimeoutExpired, AssertionError, OSError) as e:
            print(f"[e2e] {self.step_no:2d} {title}: FAILED after {time.monotonic() - t0:.1f}s: {e}", flush=True)
            self.collect()
            raise SystemExit(1)
        except Exception as e:  # openai errors and the like
            print(f"[e2e] {self.step_no:2d} {title}: FAILED after {time.monotonic() - t0:.1f}s: "
                  f"{type(e).__name__}: {e}", flush=True)
            self.collect()
            raise SystemExit(1)
        print(f"[e2e] {self.step_no:2d} {title}: ok ({time.monotonic() - t0:.1f}s){' ' + detail if detail else ''}",
              flush=True)
        return detail

    # ---- steps
    def helm_install(self):
        # The kit refuses helm's server-side apply of a Namespace (`--create-namespace`): create it first.
        kubectl("create", "namespace", "tokenrouter", check=False)
        sh("helm", "install", "tokenrouter", os.path.join(ROOT, "charts", "tokenrouter"), "-n", "tokenrouter",
           "--set", f"operator.autoscalePeriodSeconds={self.args.autoscale_period}",
           "--set", f"operator.drainSettleSeconds={self.args.drain_settle}")
        def ready():
            out = kubectl("-n", "tokenrouter", "get", "pods", "-l", "app.kubernetes.io/name=tokenrouter-operator", "-o",
                          "jsonpath={.items[*].status.conditions[?(@.type=='Ready')].status}").strip()
            return out == "True", out
        wait_until("operator pod Ready", ready, 120)
        self.load_trd()
        pod = kjson("-n", "tokenrouter", "get", "pods", "-l", "app.kubernetes.io/name=tokenrouter-operator")["items"][0]
        return f"operator pod {pod['metadata']['name']} at {pod['status']['podIP']}"

    def weights(self):
        kubectl("create", "namespace", self.ns, check=False)
        claims = {}
        for m in self.spec["models"]:
            pvc = (m.get("source") or {}).get("pvc")
            if pvc:
                claims.setdefault(pvc["claimName"], set()).add(pvc.get("subPath") or "")
        done = []
        for claim, subs in sorted(claims.items()):
            local = lambda s: os.path.join(self.args.models, self.weights_alias.get(s, s))
            missing = [s for s in subs if not os.path.isdir(local(s))]
            if missing:
                raise StepFailed(f"no weights for claim {claim}: {', '.join(local(s) for s in missing)}")
            loader = f"weights-loader-{claim}"[:63]
            manifest = {"apiVersion": "v1", "kind": "List", "items": [
                {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim},
                 "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "2Gi"}}}},
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": loader},
                 "spec": {"containers": [{"name": "c", "image": CPU_IMAGE, "command": ["sleep", "3600"],
                                          "volumeMounts": [{"name": "w", "mountPath": "/w"}]}],
                          "terminationGracePeriodSeconds": 1,
                          "volumes": [{"name": "w", "persistentVolumeClaim": {"claimName": claim}}]}}]}
            kubectl("-n", self.ns, "apply", "-f", "-", input=json.dumps(manifest))
            kubectl("-n", self.ns, "wait", "--for=condition=Ready", f"pod/{loader}", "--timeout=60s")
            for s in sorted(subs):
                sh(KPY, LOCALNODE, "cp", "--link", "-n", self.ns, local(s), f"{loader}:/w/{s}")
            kubectl("-n", self.ns, "delete", "pod", loader, "--wait=true", "--timeout=60s")
            done.append(f"{claim}: {', '.join(sorted(subs))}")
        return "; ".join(done)

    def api_key_secret(self):
        ref = (self.spec.get("gateway") or {}).get("apiKeySecretRef")
        if not ref:
            return "no apiKeySecretRef"
        self.api_key = "sk-" + secrets.token_hex(16)
        kubectl("-n", self.ns, "create", "secret", "generic", ref["name"],
                f"--from-literal={ref.get('key', 'api-keys')}={self.api_key}")
        return f"secret {ref['name']}"

    def apply_ready(self):
        kubectl("-n", self.ns, "apply", "-f", self.args.trd)
        self.wait_serving(self.args.ready_timeout)
        return kubectl("-n", self.ns, "get", "trd", self.name, "--no-headers").strip()

    def wait_ready(self, timeout):
        def ready():
            t = kjson("-n", self.ns, "get", "trd", self.name)
            conds = {c["type"]: c for c in (t.get("status") or {}).get("conditions") or []}
            return ((conds.get("Ready") or {}).get("status") == "True",
                    {k: (v.get("status"), v.get("reason"), v.get("message")) for k, v in conds.items()})
        try:
            wait_until(f"trd/{self.name} Ready", ready, timeout)
        except StepFailed as e:
            raise StepFailed(f"{e}; {self.pods_summary()}")

    def wait_serving(self, timeout):
        """Ready, and the gateway Service has a ready endpoint (what a client needs)."""
        self.wait_ready(timeout)

        def ready_endpoints():
            eps = [e for sl in kjson("-n", self.ns, "get", "endpointslices", "-l",
                                     f"kubernetes.io/service-name={self.name}-gateway")["items"]
                   for e in sl.get("endpoints") or [] if e["conditions"].get("ready")]
            return bool(eps), self.pods_summary()
        wait_until("a ready gateway endpoint", ready_endpoints, timeout)

    def pods_summary(self):
        out = []
        for p in kjson("-n", self.ns, "get", "pods")["items"]:
            for c in (p.get("status") or {}).get("containerStatuses") or []:
                state = next(iter(c["state"]), "?")
                why = c["state"][state].get("reason", "")
                last = (c.get("lastState") or {}).get("terminated", {})
                out.append(f"{p['metadata']['name']}: {state} {why} restarts={c['restartCount']}"
                           + (f" last={last.get('reason')}/{last.get('exitCode')}" if last else ""))
        return "pods: " + ("; ".join(out) or "none")

    def network_policy(self):
        """The resource's own NetworkPolicy, in its namespace: it selects every serving pod and no
        gateway pod, and admits the running operator pod by its real labels and namespace."""
        np = kjson("-n", self.ns, "get", "networkpolicy", f"{self.name}-model-ports")
        sel = np["spec"]["podSelector"]["matchLabels"]
        selector = ",".join(f"{k}={v}" for k, v in sel.items())
        chosen = {p["metadata"]["name"] for p in kjson("-n", self.ns, "get", "pods", "-l", selector)["items"]}
        mine = kjson("-n", self.ns, "get", "pods", "-l", f"app.kubernetes.io/instance={self.name}")["items"]
        serving = {p["metadata"]["name"] for p in mine
                   if p["metadata"]["labels"].get("app.kubernetes.io/component") != "gateway"}
        assert serving and chosen == serving, f"policy selects {sorted(chosen)}, serving pods {sorted(serving)}"
        op = kjson("-n", "tokenrouter", "get", "pods", "-l", "app.kubernetes.io/name=tokenrouter-operator")["items"][0]
        rule = np["spec"]["ingress"][0]
        ports = sorted(p["port"] for p in rule["ports"])
        assert ports == ["admin", "peer"], ports
        admits_operator = any(
            (f.get("namespaceSelector") or {}).get("matchLabels") == {"kubernetes.io/metadata.name": op["metadata"]["namespace"]}
            and (f.get("podSelector") or {}).get("matchLabels", {}).items() <= op["metadata"]["labels"].items()
            for f in rule["from"])
        assert admits_operator, f"operator pod {op['metadata']['labels']} not admitted by {rule['from']}"
        return f"networkpolicy/{self.name}-model-ports in {self.ns}: {len(chosen)} serving pods, admin+peer from own pods and the operator"

    def port_forward(self):
        svc = kjson("-n", self.ns, "get", "svc", f"{self.name}-gateway")
        port = svc["spec"]["ports"][0]["port"]
        log = open(os.path.join(self.args.out, "port-forward.log"), "w")
        self.forward = subprocess.Popen([KPY, LOCALNODE, "port-forward", "-n", self.ns, f"svc/{self.name}-gateway",
                                         f"{self.args.local_port}:{port}"], stdout=log, stderr=subprocess.STDOUT)
        self.base_url = f"http://127.0.0.1:{self.args.local_port}/v1"
        wait_until("port-forward listening", lambda: ("Forwarding" in read(log.name), read(log.name)), 20, 0.2)
        return f"{self.base_url} -> svc/{self.name}-gateway:{port}"

    def client(self):
        from openai import OpenAI
        return OpenAI(base_url=self.base_url, api_key=self.api_key or "none", max_retries=0, timeout=120)

    def chat(self, model, max_tokens=48, prompt="Count from one to twenty in words, separated by commas."):
        r = self.client().chat.completions.create(
            model=model, max_tokens=max_tokens, temperature=0,
            messages=[{"role": "user", "content": prompt}])
        usage = r.model_dump().get("usage") or {}
        return r.choices[0].message.content or "", usage.get("completion_tokens_by_model") or {}

    def completions(self, require_all):
        served = (self.spec.get("gateway") or {}).get("servedModelName") or self.name
        text, by_model = self.chat(served)
        assert text.strip(), f"empty completion from {served}"
        members = [m["name"] for m in self.spec["models"]]
        if require_all:
            assert all(by_model.get(m, 0) > 0 for m in members), \
                f"not every model wrote tokens: {by_model} ({text!r})"
        out = [f"{served}: {by_model}"]
        for m in members:
            t, bm = self.chat(m, 8)
            assert t.strip(), f"empty completion from member {m}"
            assert set(k for k, v in bm.items() if v) <= {m}, f"member {m}: tokens from {bm}"
            out.append(f"{m}: {bm}")
        return "; ".join(out)

    def delete(self):
        pods = {p["metadata"]["name"]: p for p in kjson("-n", self.ns, "get", "pods")["items"]}
        grace = {n: p["spec"].get("terminationGracePeriodSeconds", 30) for n, p in pods.items()}
        owned = self.owned()
        # Only containers running when the delete begins get SIGTERM: one that
        # had already exited (the GPU example's crash on a node without CUDA,
        # waiting out its back-off) has no process to stop.
        before = len(self.journal())
        kubectl("-n", self.ns, "delete", "trd", self.name, "--wait=true", "--timeout=180s")
        wait_until("owned objects gone", lambda: (not self.leftovers(owned), self.leftovers(owned)), 120)
        exits = [e for e in self.journal()[before:] if e["event"] == "exited" and e["pod"] in grace
                 # A crash that no SIGTERM preceded (the GPU example's next
                 # start failing without CUDA, inside the delete's window) is
                 # not a shutdown; a kill or a clean exit still counts.
                 and not (e.get("after_sigterm_s") is None and e["exit_code"] not in (0, 137, 143))]
        slow = [e for e in exits if e.get("after_sigterm_s") is None or e["after_sigterm_s"] > grace[e["pod"]] / 2
                or e["exit_code"] == 137]
        last = {}
        for e in exits:
            last[(e["pod"], e["container"])] = e
        slow = [e for e in last.values() if e in slow]
        assert not slow, "not a prompt exit on SIGTERM: " + "; ".join(
            f"{e['pod']}/{e['container']} exit {e['exit_code']} {e.get('after_sigterm_s')}s after SIGTERM "
            f"(grace {grace[e['pod']]}s)" for e in slow)
        worst = max((e["after_sigterm_s"] for e in last.values()), default=0)
        return f"{len(last)} containers exited on SIGTERM, slowest {worst:.2f}s; nothing owned left"

    def owned(self):
        """UIDs of the resource and of everything it owns, through ownerReferences at any depth."""
        items = kjson("-n", self.ns, "get", OWNED_KINDS)["items"]
        uids = {kjson("-n", self.ns, "get", "trd", self.name)["metadata"]["uid"]}
        while True:
            more = {i["metadata"]["uid"] for i in items if owner_uids(i) & uids} - uids
            if not more:
                return uids
            uids |= more

    def leftovers(self, owned):
        """What is left of `owned` (taken before the delete, so that dependents of owners already
        gone still count), of its dependents, or of what the operator labelled as this resource's;
        objects the test made beside it (the API key Secret, the weights) are not the resource's."""
        mark = {**OPERATOR_LABELS, "app.kubernetes.io/instance": self.name}
        items = kjson("-n", self.ns, "get", OWNED_KINDS)["items"]
        return [f"{i['kind']}/{i['metadata']['name']}" for i in items
                if i["metadata"]["uid"] in owned or owner_uids(i) & owned
                or mark.items() <= (i["metadata"].get("labels") or {}).items()]

    def journal(self):
        path = os.path.join(os.environ["LOCALNODE_STATE"], "journal.jsonl")
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]

    def collect(self):
        """Pod logs, journal and descriptions under --out (also after a failure)."""
        st = os.environ.get("LOCALNODE_STATE", "")
        for sub in ("logs", "journal.jsonl"):
            src = os.path.join(st, sub)
            dst = os.path.join(self.args.out, sub)
            if os.path.isdir(src):
                shutil.copytree(src, dst, dirs_exist_ok=True)
            elif os.path.exists(src):
                shutil.copy(src, dst)
        with open(os.path.join(self.args.out, "describe.txt"), "w") as f:
            for what in (["-n", self.ns, "describe", "trd"], ["-n", self.ns, "get", "events"], ["-n", self.ns, "get", "pods", "-o", "yaml"],
                         ["-n", "tokenrouter", "get", "pods", "-o", "yaml"]):
                f.write(f"$ kubectl {' '.join(what)}\n")
                f.write(kubectl(*what, check=False, timeout=30))

    def close(self):
        if self.forward:
            self.forward.terminate()
            self.forward.wait()
            self.forward = None


def parser():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--trd", required=True)
    p.add_argument("--ns", default="tokenrouter")
    p.add_argument("--models", default=os.path.join(ROOT, ".cache", "models"))
    p.add_argument("--out", default=os.path.join(ROOT, ".cache", "e2e"))
    p.add_argument("--local-port", type=int, default=int(os.environ.get("E2E_PORT", "41080")))
    p.add_argument("--ready-timeout", type=float, default=300)
    p.add_argument("--autoscale-period", type=int, default=15)
    p.add_argument("--drain-settle", type=int, default=90)
    p.add_argument("--require-all-models", action="store_true",
                   help="every member must write tokens of the group's completion")
    return p


def base_steps(run):
    run.step("helm install (operator pod)", run.helm_install)
    run.step("weights on PVCs", run.weights)
    run.step("API key secret", run.api_key_secret)
    run.step(f"kubectl apply {os.path.basename(run.args.trd)} -> Ready", run.apply_ready)
    run.step("NetworkPolicy of the resource", run.network_policy)
    run.step("port-forward to the gateway Service", run.port_forward)


def main():
    args = parser().parse_args()
    run = Run(args)
    try:
        base_steps(run)
        run.step("chat completions: group and each member", run.completions, args.require_all_models)
        run.step("kubectl delete trd: SIGTERM exits, nothing left", run.delete)
        run.step("helm uninstall", lambda: sh("helm", "uninstall", "tokenrouter", "-n", "tokenrouter") and "")
    finally:
        run.close()
        run.collect()
    print(f"[e2e] passed: {args.trd} (logs under {args.out})")


if __name__ == "__main__":
    main()
