"""The kubelet: admits every pod (one node, no scheduler), runs its containers from their images
through the runtime in the pod's own network namespace (see container.py and runtime.py), keeps its volumes and /etc/hosts current, writes Pod
status back, and on deletion stops it within its grace period before releasing its finalizer."""
import copy
import json
import logging
import os
import shutil
import threading
import time

from container import Container
from objects import FINALIZER, meta, now
from volumes import PROJECTED, Pending, materialize, mount_source, volume_files

log = logging.getLogger("kubelet")
KUBECONFIG_DIR = "/var/run/secrets/localnode"


class PodWorker(threading.Thread):
    def __init__(self, kubelet, pod):
        super().__init__(daemon=True, name=f"pod {meta(pod)['namespace']}/{meta(pod)['name']}")
        self.kubelet = kubelet
        self.obj = pod
        self.uid = meta(pod)["uid"]
        self.key = f"{meta(pod)['namespace']}/{meta(pod)['name']}"
        self.dir = os.path.join(kubelet.state, "pods", self.uid)
        spec = pod["spec"]
        self.hostname = spec.get("hostname") or meta(pod)["name"]
        self.netns = self.ip = None
        self.hosts_path = os.path.join(self.dir, "hosts")
        self.ns_objects = ({}, {})
        self.vol_paths = {}
        self.vol_content = {}  # volume name -> (files in the pod's volume, (newer files, first seen))
        self.inits = [Container(self, c, init=True) for c in spec.get("initContainers") or []]
        self.containers = [Container(self, c) for c in spec.get("containers") or []]
        self.initialized = False
        self.pending_msg = None
        self.dirty = threading.Event()
        self.deleting = threading.Event()
        self.finished = threading.Event()
        self.start_time = now()
        self.last_status = None
        self.transitions = {}

    def changed(self):
        self.dirty.set()

    def grace(self):
        g = self.obj["spec"].get("terminationGracePeriodSeconds")
        return 30 if g is None else g

    def base_env(self):
        if self.obj["spec"].get("automountServiceAccountToken") is False or not self.kubelet.pod_kubeconfig:
            return {}
        return {"KUBECONFIG": f"{KUBECONFIG_DIR}/kubeconfig"}

    def mounts_for(self, c):
        out = []
        for m in c.get("volumeMounts") or []:
            if m["name"] not in self.vol_paths:
                raise Pending(f"volume {m['name']!r} of mount {m['mountPath']} is not defined")
            out.append({"src": mount_source(self.vol_paths[m["name"]], m), "dst": m["mountPath"],
                        "ro": bool(m.get("readOnly"))})
        if self.base_env():
            out.append({"src": os.path.dirname(self.kubelet.pod_kubeconfig), "dst": KUBECONFIG_DIR, "ro": True})
        return out

    def refresh(self, pod, ns_objects, pvcs):
        """Latest object and the namespace's ConfigMaps/Secrets; rewrites volumes that changed."""
        self.obj = pod
        self.ns_objects = ns_objects
        self.pvcs = pvcs
        if meta(pod).get("deletionTimestamp"):
            self.deleting.set()
        if self.vol_paths:
            for v in pod["spec"].get("volumes") or []:
                if any(k in v for k in PROJECTED):
                    try:
                        self._update_volume(v, pod, ns_objects, pvcs)
                    except Pending:
                        pass  # the running pod keeps its last files, as upstream

    def _update_volume(self, v, pod, ns_objects, pvcs):
        """A changed ConfigMap/Secret reaches the volume `configmap_delay` seconds after the node
        first saw it, as a kubelet's periodic sync and cache TTL delay it (a minute at most upstream)."""
        files = volume_files(v, pod, ns_objects)
        applied, pending = self.vol_content.get(v["name"], (None, None))
        if files == applied:
            self.vol_content[v["name"]] = (applied, None)
            return
        if pending is None or pending[0] != files:
            pending = (files, time.monotonic())
        if time.monotonic() - pending[1] >= self.kubelet.configmap_delay:
            materialize(v, pod, self.dir, self.kubelet.pv_root, ns_objects, pvcs, None)
            self.kubelet.journal(self, None, "volume-updated", volume=v["name"])
            applied, pending = files, None
        self.vol_content[v["name"]] = (applied, pending)

    def write_hosts(self, content):
        if self.netns is None:
            return
        try:
            with open(self.hosts_path) as f:
                if f.read() == content:
                    return
        except FileNotFoundError:
            pass
        with open(self.hosts_path, "a+") as f:  # in place: the containers bind-mount this inode
            f.truncate(0)
            f.write(content)

    # ---- life
    def run(self):
        try:
            self._run()
        except Exception:
            log.exception("%s: pod worker failed", self.key)
        finally:
            self._teardown()

    def _setup(self):
        os.makedirs(self.dir, exist_ok=True)
        self.netns, self.ip = self.kubelet.net.add_pod(self.uid, self.hostname)
        open(self.hosts_path, "a").close()
        self.write_hosts(self.kubelet.hosts_for(self))
        self.changed()
        while not self.deleting.is_set():
            try:
                paths = {}
                for v in self.obj["spec"].get("volumes") or []:
                    paths[v["name"]] = materialize(v, self.obj, self.dir, self.kubelet.pv_root,
                                                   self.ns_objects, self.pvcs, None)
                    if any(k in v for k in PROJECTED):
                        self.vol_content[v["name"]] = (volume_files(v, self.obj, self.ns_objects), None)
                self.vol_paths = paths
                self.pending_msg = None
                return True
            except Pending as e:
                if self.pending_msg != str(e):
                    log.info("%s pending: %s", self.key, e)
                self.pending_msg = str(e)
                self.changed()
                self.deleting.wait(1)
        return False

    def _run(self):
        self.kubelet.journal(self, None, "admitted")
        self._status_loop_start()
        if not self._setup():
            return
        for c in self.inits:
            c.start()
            if c.sidecar:
                while not self.deleting.is_set() and not c.status()["started"]:
                    self.deleting.wait(0.2)
                continue
            while not self.deleting.is_set() and not c.done.is_set():
                c.done.wait(0.5)
            if self.deleting.is_set() or not c.succeeded:
                return
        self.initialized = True
        self.changed()
        for c in self.containers:
            c.start()
        while not self.deleting.is_set():
            if all(c.done.is_set() for c in self.containers):
                break
            self.deleting.wait(0.5)

    def _teardown(self):
        grace = self.grace()
        t0 = time.monotonic()
        main = [c for c in self.containers if c.is_alive()]
        threads = [threading.Thread(target=c.stop, args=(grace,)) for c in main]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Sidecars stop after the main containers, in reverse order, with what is left of the grace period.
        for c in reversed([c for c in self.inits if c.is_alive()]):
            c.stop(max(2.0, grace - (time.monotonic() - t0)))
        self.changed()
        self.kubelet.journal(self, None, "stopped", took_s=round(time.monotonic() - t0, 3), grace_s=grace)
        self.finished.set()
        self._write_status(force=True)

    def release(self):
        """Network and files go; the finalizer is removed (the API server then deletes the pod)."""
        if self.netns:
            self.kubelet.net.del_pod(self.uid, self.ip)
        shutil.rmtree(self.dir, ignore_errors=True)
        if meta(self.obj).get("deletionTimestamp"):
            fins = [f for f in meta(self.obj).get("finalizers") or [] if f != FINALIZER]
            self.kubelet.api.patch("pods", meta(self.obj)["namespace"], meta(self.obj)["name"],
                                   {"metadata": {"finalizers": fins or None}})

    # ---- status
    def _status_loop_start(self):
        threading.Thread(target=self._status_loop, daemon=True, name=f"status {self.key}").start()

    def _status_loop(self):
        while not self.finished.is_set():
            self.dirty.wait(1)
            self.dirty.clear()
            try:
                self._write_status()
            except Exception as e:  # the API server may be briefly away; next round retries
                log.warning("%s: status write failed: %s", self.key, e)

    def _cond(self, ctype, ok, reason=None):
        status = "True" if ok else "False"
        prev = self.transitions.get(ctype)
        if prev is None or prev[0] != status:
            self.transitions[ctype] = (status, now())
        c = {"type": ctype, "status": status, "lastTransitionTime": self.transitions[ctype][1],
             "lastProbeTime": None}
        if reason and not ok:
            c["reason"] = reason
        return c

    def status(self):
        cs = [c.status() for c in self.containers]
        ics = [c.status() for c in self.inits]
        # A terminating pod stays Ready while its containers run and pass readiness (upstream), so
        # its EndpointSlice endpoints read serving=true, terminating=true, ready=false.
        ready = bool(cs) and all(s["ready"] for s in cs) and self.initialized
        terminated = [s for s in cs if "terminated" in s["state"]]
        if self.initialized and cs and len(terminated) == len(cs) and all(c.done.is_set() for c in self.containers):
            phase = "Succeeded" if all(s["state"]["terminated"]["exitCode"] == 0 for s in cs) else "Failed"
        elif self.initialized and any(c.proc is not None for c in self.containers):
            phase = "Running"
        else:
            phase = "Pending"
        if self.pending_msg:
            for s in cs:
                s["state"] = {"waiting": {"reason": "ContainerCreating", "message": self.pending_msg}}
        st = {"phase": phase, "hostIP": self.kubelet.net.gateway, "startTime": self.start_time,
              "qosClass": "Burstable",
              "conditions": [self._cond("PodScheduled", True),
                             self._cond("Initialized", self.initialized, "ContainersNotInitialized"),
                             self._cond("ContainersReady", ready, "ContainersNotReady"),
                             self._cond("Ready", ready, "ContainersNotReady")],
              "containerStatuses": cs}
        if ics:
            st["initContainerStatuses"] = ics
        if self.ip:
            st.update(podIP=self.ip, podIPs=[{"ip": self.ip}], hostIPs=[{"ip": self.kubelet.net.gateway}])
        if self.pending_msg:
            st["message"] = self.pending_msg
        return st

    def _write_status(self, force=False):
        st = self.status()
        if st == self.last_status and not force:
            return
        r = self.kubelet.api.patch("pods", meta(self.obj)["namespace"], meta(self.obj)["name"],
                                   {"status": st}, sub="status")
        if r is not None:
            self.last_status = copy.deepcopy(st)


class Kubelet:
    def __init__(self, api, net, state, node, runtime, pod_kubeconfig, tag, configmap_delay=30.0):
        """`runtime`: a runtime.Podman; `tag` names the node's containers, netns and links;
        `configmap_delay`: seconds before a ConfigMap/Secret change reaches running pods' volumes."""
        self.api, self.net, self.state, self.node = api, net, state, node
        self.configmap_delay = configmap_delay
        self.runtime, self.pod_kubeconfig, self.tag = runtime, pod_kubeconfig, tag
        self.pv_root = os.path.join(state, "pv")
        self.workers = {}
        self.records = []
        self.journal_lock = threading.Lock()

    def log_path(self, pod, container, restart):
        return os.path.join(self.state, "logs", meta(pod.obj)["namespace"], meta(pod.obj)["name"],
                            container, f"{restart}.log")

    def retire_logs(self, ns, name):
        """A new pod of an old name (a StatefulSet ordinal) starts with fresh logs; the old ones
        move to logs/NS/.old/ (kept for the e2e log collection)."""
        d = os.path.join(self.state, "logs", ns, name)
        if os.path.isdir(d):
            old = os.path.join(self.state, "logs", ns, ".old")
            os.makedirs(old, exist_ok=True)
            os.rename(d, os.path.join(old, f"{name}.{time.strftime('%H%M%S')}.{time.monotonic_ns() % 10**6}"))

    def journal(self, pod, container, event, **kw):
        rec = {"t": now(), "mono": round(time.monotonic(), 3), "ns": meta(pod.obj)["namespace"],
               "pod": meta(pod.obj)["name"], "uid": pod.uid, "container": container, "event": event, **kw}
        with self.journal_lock, open(os.path.join(self.state, "journal.jsonl"), "a") as f:
            f.write(json.dumps(rec) + "\n")

    def hosts_for(self, worker):
        from endpoints import hosts_file
        own = [worker.hostname]
        sub = worker.obj["spec"].get("subdomain")
        ns = meta(worker.obj)["namespace"]
        if sub:
            own = [f"{worker.hostname}.{sub}.{ns}.svc.cluster.local", worker.hostname]
        return hosts_file(self.records, ns, worker.ip, own)

    def sync(self, pods, configmaps, secrets, pvcs):
        """One round: admit new pods, refresh running ones, finish deleted ones."""
        seen = set()
        by_ns = lambda objs, ns: {meta(o)["name"]: o for o in objs if meta(o)["namespace"] == ns}
        for pod in pods:
            md = meta(pod)
            uid, ns = md["uid"], md["namespace"]
            node = pod["spec"].get("nodeName")
            if node and node != self.node:
                continue
            seen.add(uid)
            w = self.workers.get(uid)
            nso = (by_ns(configmaps, ns), by_ns(secrets, ns))
            if w is None:
                if md.get("deletionTimestamp"):
                    if FINALIZER in (md.get("finalizers") or []):
                        fins = [f for f in md["finalizers"] if f != FINALIZER]
                        self.api.patch("pods", ns, md["name"], {"metadata": {"finalizers": fins or None}})
                    continue
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                if not node or FINALIZER not in (md.get("finalizers") or []):
                    fins = list(md.get("finalizers") or [])
                    if FINALIZER not in fins:
                        fins.append(FINALIZER)
                    pod = self.api.patch("pods", ns, md["name"], {"metadata": {"finalizers": fins},
                                                                  "spec": {"nodeName": self.node}})
                    if pod is None:
                        continue
                self.retire_logs(md["namespace"], md["name"])
                w = PodWorker(self, pod)
                w.refresh(pod, nso, by_ns(pvcs, ns))
                self.workers[uid] = w
                log.info("admit %s", w.key)
                w.start()
            else:
                w.refresh(pod, nso, by_ns(pvcs, ns))
                w.write_hosts(self.hosts_for(w))
        for uid, w in list(self.workers.items()):
            if uid not in seen:
                w.deleting.set()  # deleted without our finalizer: stop at once
            if w.finished.is_set():
                w.release()
                del self.workers[uid]

    def shutdown(self, grace_cap):
        for w in self.workers.values():
            w.obj["spec"]["terminationGracePeriodSeconds"] = min(w.grace(), grace_cap)
            w.deleting.set()
        for w in list(self.workers.values()):
            w.finished.wait(grace_cap + 10)
            if w.netns:
                self.net.del_pod(w.uid, w.ip)
