"""The Kubernetes flow end to end on the local node (issue 21 item 2), run by `make test-node-flow`
(part of `make test`) inside with_node.sh: the e2e steps for examples/k8s/smollm2-cpu.yaml with
both models writing tokens, then autoscaling under concurrent load, a model pod killed
mid-stream, the load-free scale-down, and `kubectl delete trd`."""
import concurrent.futures
import json
import os
import signal
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from e2e import ROOT, Run, StepFailed, base_steps, kjson, kubectl, parser, wait_until  # noqa: E402


class Flow(Run):
    def entry_pods(self):
        return sorted((p for p in kjson("-n", self.ns, "get", "pods", "-l",
                                       f"app.kubernetes.io/instance={self.name},tokenrouter.io/model=quick")["items"]),
                      key=lambda p: p["metadata"]["name"])

    def status(self):
        return kjson("-n", self.ns, "get", "trd", self.name).get("status") or {}

    def metric(self, pod, name):
        """Sum of a metric on a pod's admin port (the subservers' /metrics)."""
        url = f"http://{pod['status']['podIP']}:{self.spec.get('ports', {}).get('admin', 9000)}/metrics"
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

    def autoscale(self):
        kubectl("-n", self.ns, "patch", "trd", self.name, "--type", "merge", "-p", json.dumps(
            {"spec": {"autoscaling": {"targetConcurrencyPerGroup": 2, "scaleUpStabilizationSeconds": 0,
                                      "maxGroups": 2}}}))
        self.stop_load = threading.Event()
        self.load_results = []
        self.pool = concurrent.futures.ThreadPoolExecutor(4)
        for _ in range(4):
            self.pool.submit(self.stream_load, self.stop_load, self.load_results)
        wait_until("a second group Ready", lambda: (self.status().get("groups", 0) >= 2, self.status()), 300, 2)
        pods = self.entry_pods()
        assert len(pods) == 2, [p["metadata"]["name"] for p in pods]

        def both_busy():
            running = [self.metric(p, "vllm:num_requests_running") for p in self.entry_pods()]
            return all(r > 0 for r in running), running
        running = wait_until("both groups' entry pods running requests", both_busy, 120, 1)
        return f"groups={self.status().get('groups')} running per entry pod={running}"

    def scale_down(self):
        self.stop_load.set()
        self.pool.shutdown(wait=True)
        failed = [r for r in self.load_results if r != "ok"]
        assert not failed, f"{len(failed)} of {len(self.load_results)} requests failed under load: {failed[:3]}"
        kubectl("-n", self.ns, "patch", "trd", self.name, "--type", "merge", "-p", json.dumps(
            {"spec": {"autoscaling": {"scaleDownStabilizationSeconds": 0}}}))
        wait_until("back to one group", lambda: (len(self.entry_pods()) == 1 and self.status().get("groups") == 1,
                                                 self.status()), 300, 2)
        return f"{len(self.load_results)} requests under load, none failed; 1 group left"

    def kill_mid_stream(self):
        victim = next(p for p in kjson("-n", self.ns, "get", "pods", "-l",
                                       f"app.kubernetes.io/instance={self.name},tokenrouter.io/model=reference")["items"])
        name = victim["metadata"]["name"]
        restarts = victim["status"]["containerStatuses"][0]["restartCount"]
        pid = int(victim["status"]["containerStatuses"][0]["containerID"].split("://")[1])
        served = self.spec["gateway"].get("servedModelName") or self.name
        s = self.client().chat.completions.create(model=served, max_tokens=400, stream=True,
                                                  messages=[{"role": "user", "content": "Tell a long story."}])
        outcome = None
        chunks = 0
        try:
            for _ in s:
                chunks += 1
                if chunks == 3:
                    os.kill(pid, signal.SIGKILL)
            outcome = f"stream ended normally after {chunks} chunks"
        except Exception as e:  # the clear error the client sees
            outcome = f"{type(e).__name__}: {str(e)[:200]}"
        assert chunks >= 3, f"only {chunks} chunks before the end"

        def restarted():
            p = kjson("-n", self.ns, "get", "pod", name)
            cs = p["status"]["containerStatuses"][0]
            return cs["restartCount"] > restarts and cs["ready"], cs
        wait_until(f"{name} restarted and Ready", restarted, 180, 1)
        self.wait_ready(180)
        text, by_model = self.chat(served)
        assert text.strip(), "no completion after the restart"
        return f"client saw: {outcome}; {name} restarted; completion after: {by_model}"


def main():
    p = parser()
    p.set_defaults(trd=os.path.join(ROOT, "examples", "k8s", "smollm2-cpu.yaml"), autoscale_period=3,
                   drain_settle=5, require_all_models=True)
    for a in p._actions:
        if a.dest == "trd":
            a.required = False
    args = p.parse_args()
    run = Flow(args)
    try:
        base_steps(run)
        run.step("completion through the openai SDK, both models write", run.completions, True)
        run.step("concurrent load adds a group, requests spread", run.autoscale)
        run.step("load stops: scale-down drains, no failed request", run.scale_down)
        run.step("model pod killed mid-stream: error, restart, Ready", run.kill_mid_stream)
        run.step("kubectl delete trd: SIGTERM exits, nothing left", run.delete)
    except StepFailed as e:
        print(f"[flow] {e}")
        raise SystemExit(1)
    finally:
        run.close()
        run.collect()
    print("[flow] passed")


if __name__ == "__main__":
    main()
