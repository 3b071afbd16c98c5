"""The Kubernetes flow end to end on the local node (issue 21 item 2), run by `make test-node-flow`
(the last part of `make test`) inside with_node.sh: the e2e steps for examples/k8s/smollm2-cpu.yaml
with both models writing tokens, then two gateway replicas, autoscaling under concurrent load, an
image edit rolled group by group under that load, the drain back (the gateways learn their group
list through a ConfigMap volume the node updates as late as a kubelet: LOCALNODE_CONFIGMAP_DELAY,
30 s), a model pod killed mid-stream, and `kubectl delete trd`, no request failing throughout; the tune loop answering a routing change on the
same example served by the simulator; me-three-models.yaml on the CPU to completions; and the GPU
example up to its processes' start and their exit on delete."""
import argparse
import base64
import copy
import concurrent.futures
import json
import os
import re
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from e2e import CPU_IMAGE, ROOT, Run, StepFailed, base_steps, kjson, kubectl, parser, sh, wait_until  # noqa: E402

POD_INDEX = "apps.kubernetes.io/pod-index"
# The second tag of the CPU image that the roll step moves the resource to.
ROLL_IMAGE = CPU_IMAGE.rsplit(":", 1)[0] + ":roll"


def admin_port(pod):
    """The admin port the operator rendered (the CRD's default is not restated here)."""
    return next(cp["containerPort"] for c in pod["spec"]["containers"]
                for cp in c.get("ports") or [] if cp.get("name") == "admin")


class Flow(Run):
    def entry_pods(self):
        return sorted((p for p in kjson("-n", self.ns, "get", "pods", "-l",
                                       f"app.kubernetes.io/instance={self.name},tokenrouter.io/model=quick")["items"]),
                      key=lambda p: p["metadata"]["name"])

    def status(self):
        return kjson("-n", self.ns, "get", "trd", self.name).get("status") or {}

    def metric(self, pod, name):
        """Sum of a metric on a pod's admin port (the subservers' /metrics)."""
        url = f"http://{pod['status']['podIP']}:{admin_port(pod)}/metrics"
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name) and not line.startswith("#"))

    def stream_load(self, stop, results, max_tokens=400):
        """One client streaming long answers until `stop`; records ok/error per request."""
        client = self.client()
        served = self.spec["gateway"].get("servedModelName") or self.name
        while not stop.is_set():
            try:
                s = client.chat.completions.create(
                    model=served, max_tokens=max_tokens, stream=True,
                    messages=[{"role": "user", "content": "Tell a long story about the sea."}])
                for _ in s:
                    pass
                results.append("ok")
            except Exception as e:  # counted and reported by the step
                results.append(f"{type(e).__name__}: {e}")

    def pods_of(self, component=None):
        pods = kjson("-n", self.ns, "get", "pods", "-l", f"app.kubernetes.io/instance={self.name}")["items"]
        if component == "gateway":
            return [p for p in pods if p["metadata"]["labels"].get("app.kubernetes.io/component") == "gateway"]
        return [p for p in pods if "tokenrouter.io/model" in p["metadata"]["labels"]]

    def missing_image(self):
        """A second resource naming an image the node does not have: its pods wait in ErrImagePull /
        ImagePullBackOff, its Degraded condition names the image, nothing of it is deleted, and the
        first resource's pods are untouched. Then it is deleted."""
        name = f"{self.name}-noimage"
        image = CPU_IMAGE.rsplit(":", 1)[0] + ":absent"
        trd = copy.deepcopy(self.trd)
        trd["metadata"] = {"name": name, "namespace": self.ns}
        trd["spec"]["image"] = image
        before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in self.pods_of() + self.pods_of("gateway")}
        kubectl("apply", "-f", "-", input=json.dumps(trd))
        sel = f"app.kubernetes.io/instance={name}"

        def degraded():
            conds = (kjson("-n", self.ns, "get", "trd", name).get("status") or {}).get("conditions") or []
            deg = next((c for c in conds if c["type"] == "Degraded"), {})
            waiting = sorted({(c.get("state") or {}).get("waiting", {}).get("reason", "")
                              for p in kjson("-n", self.ns, "get", "pods", "-l", sel)["items"]
                              for c in (p.get("status") or {}).get("containerStatuses") or []})
            ok = (deg.get("status") == "True" and deg.get("reason") == "ImagePullBackOff"
                  and image in deg.get("message", "") and waiting
                  and set(waiting) <= {"ErrImagePull", "ImagePullBackOff"})
            return ok, {"degraded": deg, "waiting": waiting}
        info = wait_until("Degraded names the missing image", degraded, 180, 1)
        kept = kjson("-n", self.ns, "get", "statefulsets,deployments", "-l", sel)["items"]
        assert kept, "the resource's StatefulSets and Deployment were deleted"
        after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in self.pods_of() + self.pods_of("gateway")}
        assert after == before, f"the first resource's pods changed: {before} -> {after}"
        kubectl("-n", self.ns, "delete", "trd", name, "--wait=true", "--timeout=120s")
        wait_until("its pods gone", lambda: (not kjson("-n", self.ns, "get", "pods", "-l", sel)["items"], None), 120)
        return f"{info['degraded']['message'][:200]}; {len(kept)} sets/deployments kept until deleted"

    def two_gateways(self):
        """Two gateway replicas, both Ready (each reads the group list from its own ConfigMap volume)."""
        kubectl("-n", self.ns, "patch", "trd", self.name, "--type", "merge", "-p",
                json.dumps({"spec": {"gateway": {"replicas": 2}}}))

        def two():
            pods = [p for p in self.pods_of("gateway") if not p["metadata"].get("deletionTimestamp")]
            ready = [p["metadata"]["name"] for p in pods if pod_ready(p)]
            return len(ready) == 2, [p["metadata"]["name"] for p in pods]
        return f"gateway pods {wait_until('two gateway pods Ready', two, 180, 1)}"

    def roll(self):
        """Under the load of the autoscale step, the resource moves to a new image tag (the CPU image
        under a second tag): the operator lowers one partition over every model's StatefulSet and
        the node's StatefulSet controller replaces the pods of group g only after every pod of the
        groups above is updated and Ready, and the operator takes group g out of the gateways' list
        and lets it drain first; the gateway Deployment rolls too; no request fails. The load
        switches to short answers first (same concurrency, so the group count holds): an old
        gateway pod gets SIGTERM and its drain deadline (a setting, 30 s) ends what still runs,
        so the requests must be ones that finish inside it."""
        sh("podman", "tag", CPU_IMAGE, ROLL_IMAGE)
        groups = self.status().get("groups")
        n_models = len(self.spec["models"])
        clients = len(self.stops)
        self.stop_load()  # the long answers end normally (and none of them failed)
        self.load(clients, 48)
        done_before = len(self.load_results)
        kubectl("-n", self.ns, "patch", "trd", self.name, "--type", "merge", "-p",
                json.dumps({"spec": {"image": ROLL_IMAGE}}))
        order = []  # groups in the order their first new pod appeared
        early = []  # a group started while a higher one was not updated and Ready

        def rolled():
            pods = [p for p in self.pods_of() if not p["metadata"].get("deletionTimestamp")]
            by_group = {}
            for p in pods:
                by_group.setdefault(int(p["metadata"]["labels"][POD_INDEX]), []).append(p)
            for g, ps in sorted(by_group.items()):
                if g not in order and any(image(p) == ROLL_IMAGE for p in ps):
                    order.append(g)
                    higher = [q for h, qs in by_group.items() if h > g for q in qs]
                    if len(higher) < n_models * (groups - 1 - g) or not all(
                            image(q) == ROLL_IMAGE and pod_ready(q) for q in higher):
                        early.append(g)
            gws = [p for p in self.pods_of("gateway") if not p["metadata"].get("deletionTimestamp")]
            every = pods + gws
            done = (len(pods) == n_models * groups and all(image(p) == ROLL_IMAGE and pod_ready(p) for p in every)
                    and self.status().get("groups") == groups)
            return done, {"order": order, "pods": {p["metadata"]["name"]: (image(p), pod_ready(p)) for p in every}}
        info = wait_until("every pod at the new image and Ready", rolled, 600, 1)
        assert not early, f"group(s) {early} rolled before the groups above were updated and Ready: {info}"
        assert order == sorted(order, reverse=True) and len(order) == groups, f"roll order {order}"
        window = self.load_results[done_before:]
        failed = [r for r in window if r != "ok"]
        assert not failed, f"{len(failed)} of {len(window)} requests failed during the roll: {failed[:3]}"
        return f"groups rolled in order {order} to {ROLL_IMAGE}; {len(window)} requests during the roll, none failed"

    def autoscale(self):
        kubectl("-n", self.ns, "patch", "trd", self.name, "--type", "merge", "-p", json.dumps(
            {"spec": {"autoscaling": {"targetConcurrencyPerGroup": 2, "scaleUpStabilizationSeconds": 0,
                                      "maxGroups": 2}}}))
        self.load(4, 400)
        wait_until("a second group Ready", lambda: (self.status().get("groups", 0) >= 2, self.status()), 300, 2)
        pods = self.entry_pods()
        assert len(pods) == 2, [p["metadata"]["name"] for p in pods]

        def both_busy():
            # The entry's count of the group's active requests (running, or pending while the
            # reference writes); the vllm: names are the gateway's.
            running = [self.metric(p, "tokenrouter_active_concurrency") for p in self.entry_pods()]
            return all(r > 0 for r in running), running
        running = wait_until("both groups' entry pods running requests", both_busy, 120, 1)
        return f"groups={self.status().get('groups')} running per entry pod={running}"

    def close(self):
        """Ends the load clients too (a failed step leaves them streaming, and the
        interpreter would wait for their threads)."""
        for stop in getattr(self, "stops", []):
            stop.set()
        super().close()

    def admin(self, pod, method, path, body=None):
        """A subserver's admin endpoint, with the resource's admin token (its Secret)."""
        if not getattr(self, "admin_token", None):
            secret = kjson("-n", self.ns, "get", "secret", f"{self.name}-admin-token")
            # The kit stores built-in kinds as written: `stringData` is not folded into `data`.
            if "token" in (secret.get("data") or {}):
                self.admin_token = base64.b64decode(secret["data"]["token"]).decode()
            else:
                self.admin_token = secret["stringData"]["token"]
        port = admin_port(pod)
        req = urllib.request.Request(
            f"http://{pod['status']['podIP']}:{port}{path}", method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"authorization": f"Bearer {self.admin_token}", "content-type": "application/json"})
        return json.loads(urllib.request.urlopen(req, timeout=10).read())

    def serving_pods(self):
        return [p for p in kjson("-n", self.ns, "get", "pods", "-l", f"app.kubernetes.io/instance={self.name}")["items"]
                if "tokenrouter.io/model" in p["metadata"].get("labels", {})
                and any(c.get("ready") for c in (p.get("status") or {}).get("containerStatuses") or [])]

    def tables_in_metrics(self):
        """Pod name -> {model: [B at concurrency 1..]} from each serving pod's /metrics."""
        out = {}
        for pod in self.serving_pods():
            port = admin_port(pod)
            text = urllib.request.urlopen(f"http://{pod['status']['podIP']}:{port}/metrics", timeout=5).read().decode()
            table = {}
            for line in text.splitlines():
                if line.startswith("tokenrouter_delayed_batching_table{"):
                    labels, value = line.rsplit(" ", 1)
                    lab = dict(kv.split("=", 1) for kv in labels[labels.index("{") + 1:-1].split(","))
                    model, c = lab["model"].strip('"'), int(lab["concurrency"].strip('"'))
                    table.setdefault(model, {})[c] = int(float(value))
            out[pod["metadata"]["name"]] = {m: [t[c] for c in sorted(t)] for m, t in table.items()}
        return out

    def tune(self, new_probability=0.6):
        """Under load: the tune loop settles on a table for the first routing (a `kept` round), a
        routing change (every entry pod's live Random probability) makes it push a different
        one, and every serving pod shows that table in /metrics."""
        def tuning():
            st = self.status()
            return (st.get("tuning") or {}), ((st.get("thresholds") or {}).get("table") or {})
        settled = wait_until("a kept round under the first routing",
                             lambda: (tuning()[0].get("lastResult") == "kept", tuning()), 240, 1)
        before = settled[1]
        for pod in self.entry_pods():
            self.admin(pod, "PUT", "/admin/routing_threshold", {"routing_threshold": new_probability})

        def pushed_new():
            t, table = tuning()
            return t.get("lastResult") == "pushed" and table and table != before, (t.get("lastResult"), table)
        _, after = wait_until(f"a pushed table for probability {new_probability}", pushed_new, 240, 1)

        def shown():
            seen = self.tables_in_metrics()
            want = {m: [int(b) for b in v] for m, v in after.items()}
            ok = bool(seen) and all(all(tab.get(m) == want[m] for m in tab) and tab for tab in seen.values())
            return ok, {"want": want, "seen": seen}
        shown_info = wait_until("every serving pod shows the pushed table in /metrics", shown, 60, 1)
        p = (self.status().get("tuning") or {}).get("estimate") or {}
        return (f"B before {before}, after p={new_probability}: {after}; on {len(shown_info['seen'])} pods; "
                f"estimate {json.dumps(p.get('models'))[:300]}")

    def load(self, clients, max_tokens):
        """`clients` streaming clients until close()."""
        self.stops = [threading.Event() for _ in range(clients)]
        self.load_results = []
        self.pool = concurrent.futures.ThreadPoolExecutor(clients)
        for stop in self.stops:
            self.pool.submit(self.stream_load, stop, self.load_results, max_tokens)
        return f"{clients} clients streaming up to {max_tokens} tokens"

    def stop_load(self):
        for stop in self.stops:
            stop.set()
        self.pool.shutdown(wait=True)
        failed = [r for r in self.load_results if r != "ok"]
        assert not failed, f"{len(failed)} of {len(self.load_results)} requests failed: {failed[:3]}"
        return f"{len(self.load_results)} requests, none failed"

    def scale_down(self):
        """Most of the load stops; one client keeps streaming through the drain of the second
        group (behind two gateways whose group list reaches them only after the node's ConfigMap
        delay), and no request of any client fails."""
        for stop in self.stops[1:]:
            stop.set()
        kubectl("-n", self.ns, "patch", "trd", self.name, "--type", "merge", "-p", json.dumps(
            {"spec": {"autoscaling": {"scaleDownStabilizationSeconds": 0}}}))
        wait_until("back to one group", lambda: (len(self.entry_pods()) == 1 and self.status().get("groups") == 1,
                                                 self.status()), 300, 2)
        return f"{self.stop_load()} across scale-up and drain; 1 group left"

    def kill_mid_stream(self):
        """SIGKILL to the reference pod's process during a stream. The example sets no
        fallback_on_peer_failure (nor does the operator render one), so the request must end with
        the gateway's error event naming the failed peer; a stream that ends normally fails."""
        from openai import APIError
        victim = next(p for p in kjson("-n", self.ns, "get", "pods", "-l",
                                       f"app.kubernetes.io/instance={self.name},tokenrouter.io/model=reference")["items"])
        name = victim["metadata"]["name"]
        restarts = victim["status"]["containerStatuses"][0]["restartCount"]
        cid = victim["status"]["containerStatuses"][0]["containerID"].split("://")[1]
        served = self.spec["gateway"].get("servedModelName") or self.name
        s = self.client().chat.completions.create(model=served, max_tokens=400, stream=True,
                                                  messages=[{"role": "user", "content": "Tell a long story."}])
        err = None
        chunks = 0
        try:
            for _ in s:
                chunks += 1
                if chunks == 3:
                    sh("podman", "kill", "--signal", "KILL", cid)  # the container's main process
        except APIError as e:  # the SDK raises the stream's `event: error` as APIError
            err = e
        assert chunks >= 3, f"only {chunks} chunks before the end"
        assert err is not None, f"the stream ended normally after {chunks} chunks, not with the peer's failure"
        assert re.search(r"peer model \d+ failed", err.message), f"not the peer's failure: {type(err).__name__}: {err}"
        outcome = f"{type(err).__name__}: {err.message[:200]}"

        def restarted():
            p = kjson("-n", self.ns, "get", "pod", name)
            cs = p["status"]["containerStatuses"][0]
            return cs["restartCount"] > restarts and cs["ready"], cs
        wait_until(f"{name} restarted and Ready", restarted, 180, 1)
        self.wait_serving(180)
        text, by_model = self.chat(served)
        assert text.strip(), "no completion after the restart"
        return f"client saw: {outcome}; {name} restarted; completion after: {by_model}"


def variant(run, src, out, edit):
    """A copy of example `src` changed by `edit` (written as JSON to `out`)."""
    trd = json.loads(kubectl("create", "--dry-run=client", "-o", "json", "-f", src))
    trd["metadata"].pop("namespace", None)
    edit(trd["spec"])
    with open(out, "w") as f:
        json.dump(trd, f)
    return out


def image(pod):
    return pod["spec"]["containers"][0]["image"]


def pod_ready(pod):
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or [])


def me_on_cpu(spec):
    """me-three-models.yaml on the CPU: the three models on `cpu`, f32, no GPUs, one group, the CPU
    image."""
    spec["image"] = CPU_IMAGE
    for m in spec["models"]:
        m["device"] = "cpu"
        m.pop("resources", None)
    spec["models"][0]["resources"] = {"limits": {"memory": "8Gi"}}
    spec["dtype"] = "f32"
    spec["groups"] = 1
    spec.pop("nodePool", None)


# Step latency of the simulated pair: nearly free batching, as on a GPU. (On the 1-CPU pods of the
# CPU example a step costs about batch-proportional time, B=1 is near-optimal at any routing, and
# whether a routing change moves B is measurement noise.) With these latencies the tuner's optimum
# for the reference is B=1 at a large share of 0.1 and B>=2 from concurrency 2 at 0.6.
SIM_LATENCY_MS = {"quick": {"base": 10.0, "per_seq": 0.3}, "reference": {"base": 30.0, "per_seq": 0.6}}


def sim_tuning(spec):
    """The CPU example on the simulator (same tokenizers), Random routing at p=0.1, one group of
    concurrency 4, the tune loop every 3 s."""
    spec["backend"] = "sim"
    for m in spec["models"]:
        m["sim"] = {"latency_ms": SIM_LATENCY_MS[m["name"]], "vocab_size": 49152}
    spec["policy"] = {"class": "Random", "kwargs": {"probability": 0.1}}
    spec["autoscaling"] = {"enabled": False}
    spec["groups"] = 1
    spec["tuning"] = {"intervalSeconds": 3, "minSamples": 40, "hysteresis": 0.05, "maxConcurrency": 4}


def gpu_short_of_cuda(spec):
    """The GPU example as written, except what needs a Prometheus operator (ServiceMonitor CRD) and
    the image: the CUDA image is not built for tests (make images-test), so the CPU image stands in;
    its processes start with the example's mounts and env and then fail without CUDA."""
    spec["serviceMonitor"] = False
    spec["image"] = CPU_IMAGE


class Sub(Flow):
    """Another resource in its own namespace, with stand-in weights (qwen3-tiny for every Qwen3)
    unless `stand_in` is false."""

    def __init__(self, args, trd, ns, stand_in=True):
        a = argparse.Namespace(**vars(args))
        a.trd, a.ns = trd, ns
        super().__init__(a)
        self.load_trd()
        if stand_in:
            self.weights_alias = {m["source"]["pvc"]["subPath"]: "qwen3-tiny" for m in self.spec["models"]}

    def processes_start(self):
        """Every serving pod's container started from its image with the weights, config and env
        in place (one pod per model, or per group under podPerGroup); MPS comes from the device
        plugin (a node with one), so no CUDA_MPS_* env reaches the pods."""
        want = {f"/models/{m['name']}" for m in self.spec["models"]}
        per_group = self.spec.get("placement") == "podPerGroup"
        n_pods = (self.spec.get("groups") or 1) * (1 if per_group else len(want))
        seen = {}

        def started():
            for p in kjson("-n", self.ns, "get", "pods", "-l", f"app.kubernetes.io/instance={self.name}")["items"]:
                if p["metadata"]["labels"].get("app.kubernetes.io/component") == "gateway":
                    continue
                spec_file = os.path.join(os.environ["LOCALNODE_STATE"], "pods", p["metadata"]["uid"], "containers",
                                         "subserver", "launch.json")
                if os.path.exists(spec_file):
                    with open(spec_file) as f:
                        seen[p["metadata"]["name"]] = json.load(f)
            return len(seen) >= n_pods, sorted(seen)
        wait_until(f"{n_pods} serving pods' processes started", started, 180)
        out = []
        mounted = set()
        for pod, spec in sorted(seen.items()):
            dsts = {m["dst"] for m in spec["mounts"]}
            mounted |= dsts & want
            env = spec["env"]
            assert "/etc/tokenrouter" in dsts, f"{pod}: mounts {sorted(dsts)}"
            assert spec["image"] == CPU_IMAGE, f"{pod}: image {spec['image']}"
            for k in ("TOKENROUTER_GROUP", "TOKENROUTER_ADMIN_TOKEN"):
                assert env.get(k), f"{pod}: env {k} missing ({sorted(env)})"
            mps = sorted(k for k in env if k.startswith("CUDA_MPS_"))
            assert not mps, f"{pod}: MPS env {mps} (the device plugin sets MPS up)"
            out.append(f"{pod}: mounts {sorted(dsts)}")
        assert mounted == want, f"weights mounted {sorted(mounted)}, models {sorted(want)}"
        return "; ".join(out)


def main():
    p = parser()
    # The operator's drain settle must outlast the node's ConfigMap delay (a kubelet's), or a gateway
    # would still send requests to a group being removed.
    delay = float(os.environ.get("LOCALNODE_CONFIGMAP_DELAY", "30"))
    p.set_defaults(trd=os.path.join(ROOT, "examples", "k8s", "smollm2-cpu.yaml"), autoscale_period=3,
                   drain_settle=int(delay) + 10, require_all_models=True)
    for a in p._actions:
        if a.dest == "trd":
            a.required = False
    args = p.parse_args()
    run = Flow(args)
    try:
        base_steps(run)
        run.step("completion through the openai SDK, both models write", run.completions, True)
        run.step("a resource naming a missing image: ImagePullBackOff, Degraded names it", run.missing_image)
        run.step("two gateway replicas", run.two_gateways)
        run.step("concurrent load adds a group, requests spread", run.autoscale)
        run.step("image edit rolls group by group under load, no failed request", run.roll)
        run.step("load stops: scale-down drains, no failed request", run.scale_down)
        run.step("model pod killed mid-stream: error, restart, Ready", run.kill_mid_stream)
        run.step("kubectl delete trd: SIGTERM exits, nothing left", run.delete)
        run.close()  # frees the local port for the next resource's port-forward
        sim = Sub(args, variant(run, args.trd, os.path.join(args.out, "sim-tuning.json"), sim_tuning), "sim",
                  stand_in=False)
        sim.step_no = run.step_no
        sim.step("simulated pair: weights (tokenizers)", sim.weights)
        sim.step("simulated pair: apply -> Ready", sim.apply_ready)
        sim.step("simulated pair: port-forward", sim.port_forward)
        sim.step("simulated pair: load at concurrency 4", sim.load, 4, 200)
        sim.step("a routing change: the tune loop pushes a new B, shown in /metrics", sim.tune)
        sim.step("simulated pair: load stops, no failed request", sim.stop_load)
        sim.step("simulated pair: delete", sim.delete)
        sim.close()
        me = Sub(args, variant(run, os.path.join(ROOT, "examples", "k8s", "me-three-models.yaml"),
                               os.path.join(args.out, "me-cpu.json"), me_on_cpu), "me")
        me.step_no = sim.step_no
        me.step("me-three-models on CPU: weights", me.weights)
        me.step("me-three-models on CPU: apply -> Ready", me.apply_ready)
        me.step("me-three-models on CPU: port-forward", me.port_forward)
        me.step("me-three-models on CPU: completions", me.completions, False)
        me.step("me-three-models on CPU: delete", me.delete)
        me.close()
        gpu = Sub(args, variant(run, os.path.join(ROOT, "examples", "k8s", "r2r-qwen3-0.6b-32b.yaml"),
                                os.path.join(args.out, "gpu.json"), gpu_short_of_cuda), "gpu")
        gpu.step_no = me.step_no
        gpu.step("GPU example: weights", gpu.weights)
        gpu.step("GPU example: API key secret", gpu.api_key_secret)
        gpu.step("GPU example: apply, processes start with mounts and env",
                 lambda: kubectl("-n", gpu.ns, "apply", "-f", gpu.args.trd) and gpu.processes_start())
        gpu.step("GPU example: delete", gpu.delete)
    except StepFailed as e:
        print(f"[flow] {e}")
        raise SystemExit(1)
    finally:
        run.close()
        run.collect()
        # The second tag only; the image keeps its own (a later images-test may replace it).
        sh("podman", "untag", ROLL_IMAGE, ROLL_IMAGE, check=False)
    print("[flow] passed")


if __name__ == "__main__":
    main()
