"""One container's life on the node: cgroups (memory limit, CPU quota), start through launch.py
in the pod's network namespace, probes, restarts with CrashLoopBackOff back-off, and termination
(preStop, SIGTERM, SIGKILL after the grace period). OOM kills are told from the memory cgroup's
oom_kill counter."""
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import probes
from objects import now
from podenv import MissingRef, command_line, quantity, resolve_env
from volumes import Pending

log = logging.getLogger("container")
CG_MEM = "/sys/fs/cgroup/memory"
CG_CPU = "/sys/fs/cgroup/cpu"
LAUNCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch.py")
BACKOFF_START, BACKOFF_MAX, BACKOFF_RESET = 10.0, 300.0, 600.0


class Cgroups:
    """The container's memory and cpu cgroups (v1) under TAG/POD_UID/NAME. Limits whose v1
    controller is missing (a cgroup v2-only host) are listed in `unenforced`."""

    def __init__(self, tag, uid, name, resources):
        self.dirs = []
        self.mem = None
        limits = (resources or {}).get("limits") or {}
        mem_v1 = os.path.exists(os.path.join(CG_MEM, "memory.limit_in_bytes"))
        cpu_v1 = os.path.exists(os.path.join(CG_CPU, "cpu.cfs_quota_us"))
        self.unenforced = [k for k, ok in (("memory", mem_v1), ("cpu", cpu_v1)) if k in limits and not ok]
        for root, ok in ((CG_MEM, mem_v1), (CG_CPU, cpu_v1)):
            if not ok:
                continue
            d = os.path.join(root, tag, uid, name)
            os.makedirs(d, exist_ok=True)
            self.dirs.append(d)
        if mem_v1:
            self.mem = os.path.join(CG_MEM, tag, uid, name)
            if "memory" in limits:
                b = str(int(quantity(limits["memory"])))
                _write(self.mem, "memory.limit_in_bytes", b)
                if os.path.exists(os.path.join(self.mem, "memory.memsw.limit_in_bytes")):
                    _write(self.mem, "memory.memsw.limit_in_bytes", b)
        if cpu_v1 and "cpu" in limits:
            cpu = os.path.join(CG_CPU, tag, uid, name)
            _write(cpu, "cpu.cfs_period_us", "100000")
            _write(cpu, "cpu.cfs_quota_us", str(max(1000, int(quantity(limits["cpu"]) * 100000))))

    def oom_kills(self):
        if not self.mem:
            return 0
        try:
            with open(os.path.join(self.mem, "memory.oom_control")) as f:
                for line in f:
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
        except OSError:
            pass
        return 0

    def pids(self):
        out = []
        for d in self.dirs:
            try:
                with open(os.path.join(d, "cgroup.procs")) as f:
                    out += [int(x) for x in f.read().split()]
            except OSError:
                pass
        return sorted(set(out))

    def kill_all(self, sig):
        for pid in self.pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def remove(self):
        for d in self.dirs:
            for p in (d, os.path.dirname(d), os.path.dirname(os.path.dirname(d))):
                try:
                    os.rmdir(p)
                except OSError:
                    break


_warned = set()


def _warn_unenforced(kinds):
    """Once per process and limit: the node supports cgroup v1 only, so say so loudly."""
    for k in kinds:
        if k not in _warned:
            _warned.add(k)
            log.warning("no cgroup v1 %s controller under /sys/fs/cgroup (a cgroup v2-only host?): "
                        "resources.limits.%s is NOT enforced%s", k, k,
                        " and an OOM kill shows as Error, not OOMKilled" if k == "memory" else "")


def _write(d, f, v):
    with open(os.path.join(d, f), "w") as fh:
        fh.write(v)


class Container(threading.Thread):
    """Supervises one container of a pod worker `pod` (a kubelet.PodWorker)."""

    def __init__(self, pod, spec, init=False):
        super().__init__(daemon=True, name=f"{pod.key}/{spec['name']}")
        self.pod, self.spec, self.init = pod, spec, init
        self.sidecar = init and spec.get("restartPolicy") == "Always"
        self.name = spec["name"]
        self.proc = None
        self.cg = None
        self.restarts = 0
        self.state = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state = {}
        self.ready = False
        self.started = False
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.done = threading.Event()  # terminated for good (init completed, or no restart)
        self.succeeded = False
        self.sigterm_at = None

    # ---- status
    def status(self):
        with self.lock:
            s = {"name": self.name, "image": self.spec.get("image", ""), "imageID": "",
                 "ready": self.ready, "restartCount": self.restarts, "state": self.state,
                 "lastState": self.last_state, "started": self.started}
            if self.proc is not None:
                s["containerID"] = f"localnode://{self.proc.pid}"
            return s

    def _set(self, **kw):
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, v)
        self.pod.changed()

    # ---- one start
    def _start(self):
        pod = self.pod
        entry, image_cmd = pod.kubelet.image_map.resolve(self.spec.get("image", ""))
        if entry is None:
            raise MissingRef(f"image {self.spec.get('image')!r} is not in the node's image map")
        env = resolve_env(pod.obj, self.spec, pod.ns_objects[0], pod.ns_objects[1], pod.base_env())
        argv = command_line(self.spec, entry, image_cmd, env)
        mounts = pod.mounts_for(self.spec)
        sc = dict((pod.obj["spec"].get("securityContext") or {}))
        csc = self.spec.get("securityContext") or {}
        uid = csc.get("runAsUser", sc.get("runAsUser"))
        gid = csc.get("runAsGroup", sc.get("runAsGroup", uid))
        groups = [g for g in [sc.get("fsGroup")] + list(sc.get("supplementalGroups") or []) if g is not None]
        self.cg = Cgroups(pod.kubelet.tag, pod.uid, self.name, self.spec.get("resources"))
        if self.cg.unenforced:
            _warn_unenforced(self.cg.unenforced)
            pod.kubelet.journal(pod, self.name, "limits-not-enforced", limits=self.cg.unenforced)
        cdir = os.path.join(pod.dir, "containers", self.name)
        os.makedirs(cdir, exist_ok=True)
        spec = {"root": os.path.join(cdir, "root"), "cgroups": self.cg.dirs, "memory_cgroup": self.cg.mem,
                "layers": os.path.join(cdir, "layers"), "hostname": pod.hostname, "hosts": pod.hosts_path,
                "image_dirs": pod.kubelet.image_dirs, "host_dirs": pod.kubelet.host_dirs,
                "project_dirs": pod.kubelet.project_dirs,
                "mounts": mounts, "env": env, "argv": argv, "cwd": self.spec.get("workingDir"),
                "uid": uid, "gid": gid, "groups": groups,
                "read_only_root": bool(csc.get("readOnlyRootFilesystem"))}
        with open(os.path.join(cdir, "launch.json"), "w") as f:
            json.dump(spec, f, indent=1)
        log_path = pod.kubelet.log_path(pod, self.name, self.restarts)
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        out = open(log_path, "ab")
        self.oom_before = self.cg.oom_kills()
        # nsenter + unshare rather than `ip netns exec`, which remounts /sys without the cgroups.
        self.proc = subprocess.Popen(["nsenter", f"--net=/var/run/netns/{pod.netns}", "unshare", "--mount",
                                      "--propagation", "private", "--", sys.executable, LAUNCH,
                                      os.path.join(cdir, "launch.json")],
                                     stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        out.close()
        self.started_at = time.monotonic()
        self._set(state={"running": {"startedAt": now()}}, started=False, ready=False)
        pod.kubelet.journal(pod, self.name, "started", pid=self.proc.pid, restart=self.restarts)
        log.info("%s/%s started pid %d: %s", pod.key, self.name, self.proc.pid, " ".join(argv))

    def _terminated(self, rc):
        """The terminated state of the process that exited with Popen code `rc`."""
        code = 128 - rc if rc < 0 else rc
        oom = self.cg.oom_kills() > self.oom_before
        if oom and code == 128 + signal.SIGKILL:
            reason = "OOMKilled"
        elif code == 0:
            reason = "Completed"
        elif code == 128 and self.proc and not self.started:
            reason = "StartError"
        else:
            reason = "Error"
        return {"terminated": {"exitCode": code, "reason": reason, "startedAt": self.state.get("running", {}).get(
            "startedAt", now()), "finishedAt": now()}}

    # ---- probes and the process, until it exits
    def _watch(self):
        """Runs probes until the process exits; returns its Popen code."""
        c = self.spec
        probes_ = {k: c.get(k) for k in ("startupProbe", "readinessProbe", "livenessProbe") if c.get(k)}
        if self.init and not self.sidecar:
            probes_ = {}
        t0 = time.monotonic()
        due = {k: t0 + probes.timings(p)["initial"] for k, p in probes_.items()}
        counts = {k: [0, 0] for k in probes_}  # consecutive successes, failures
        started = "startupProbe" not in probes_
        if started:
            self._set(started=True, ready="readinessProbe" not in probes_)
        while True:
            rc = self.proc.poll()
            if rc is not None:
                return rc
            # Terminating: readiness is still probed (upstream), startup and liveness are not.
            stopping = self.stopping.is_set()
            t = time.monotonic()
            for k, p in probes_.items():
                if k == "startupProbe" and started or k != "startupProbe" and not started or t < due[k]:
                    continue
                if stopping and k != "readinessProbe":
                    continue
                tm = probes.timings(p)
                ok, msg = probes.run(p, c, self.pod.ip, self.proc.pid, tm["timeout"])
                due[k] = time.monotonic() + tm["period"]
                s, f = counts[k]
                counts[k] = [s + 1, 0] if ok else [0, f + 1]
                if k == "startupProbe":
                    if ok:
                        started = True
                        self._set(started=True, ready="readinessProbe" not in probes_)
                        for j in due:
                            due[j] = time.monotonic() + probes.timings(probes_[j])["initial"]
                    elif counts[k][1] >= tm["failure"]:
                        self._probe_kill("Startup", msg)
                elif k == "readinessProbe":
                    if ok and counts[k][0] >= tm["success"] and not self.ready:
                        self._set(ready=True)
                    elif not ok and counts[k][1] >= tm["failure"] and self.ready:
                        log.info("%s/%s readiness failed: %s", self.pod.key, self.name, msg)
                        self._set(ready=False)
                elif not ok and counts[k][1] >= tm["failure"]:
                    self._probe_kill("Liveness", msg)
            time.sleep(0.1)

    def _probe_kill(self, which, msg):
        log.info("%s/%s %s probe failed, restarting: %s", self.pod.key, self.name, which, msg)
        self.pod.kubelet.journal(self.pod, self.name, "probe-kill", probe=which, message=msg)
        grace = self.pod.grace()
        self._kill(grace)

    def _kill(self, grace):
        """SIGTERM to the container's processes, SIGKILL after `grace` seconds."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.sigterm_at = time.monotonic()
        try:
            self.proc.send_signal(signal.SIGTERM)  # the container's main process, as a runtime does
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            log.info("%s/%s did not exit %ss after SIGTERM: SIGKILL", self.pod.key, self.name, grace)
            self.cg.kill_all(signal.SIGKILL)
            self.proc.kill()
            self.proc.wait()

    def run(self):
        backoff = BACKOFF_START
        policy = "Always" if self.sidecar else self.pod.obj["spec"].get("restartPolicy", "Always")
        if self.init and not self.sidecar and policy == "Always":
            policy = "OnFailure"  # init containers are re-run on failure only
        while not self.stopping.is_set():
            try:
                self._start()
            except (MissingRef, Pending) as e:
                self._set(state={"waiting": {"reason": "CreateContainerConfigError", "message": str(e)}})
                self.stopping.wait(2)
                continue
            rc = self._watch()
            term = self._terminated(rc)
            ran = time.monotonic() - self.started_at
            extra = {}
            if self.sigterm_at is not None:
                extra["after_sigterm_s"] = round(time.monotonic() - self.sigterm_at, 3)
            self.pod.kubelet.journal(self.pod, self.name, "exited", exit_code=term["terminated"]["exitCode"],
                                     reason=term["terminated"]["reason"], ran_s=round(ran, 3), **extra)
            log.info("%s/%s exited: %s", self.pod.key, self.name, term["terminated"])
            self.sigterm_at = None
            ok = term["terminated"]["exitCode"] == 0
            if self.stopping.is_set() or policy == "Never" or (policy == "OnFailure" and ok):
                self._set(state=term, ready=False, started=False, succeeded=ok)
                self.done.set()
                return
            if ran > BACKOFF_RESET:
                backoff = BACKOFF_START
            with self.lock:
                self.last_state = term
                self.restarts += 1
            delay = 0 if ran > BACKOFF_RESET else backoff
            self._set(state={"waiting": {"reason": "CrashLoopBackOff", "message":
                             f"back-off {int(delay)}s restarting failed container={self.name} pod={self.pod.key}"}},
                      ready=False, started=False)
            backoff = min(backoff * 2, BACKOFF_MAX)
            self.stopping.wait(delay)
        self.done.set()

    def stop(self, grace):
        """Stops for good (pod deletion): preStop, then SIGTERM, SIGKILL after the rest of `grace`."""
        self.stopping.set()
        t0 = time.monotonic()
        pre = (self.spec.get("lifecycle") or {}).get("preStop")
        if pre and self.proc is not None and self.proc.poll() is None:
            ok, msg = probes.run(pre, self.spec, self.pod.ip, self.proc.pid, grace)
            if "sleep" in pre:
                time.sleep(min(grace, pre["sleep"].get("seconds", 0)))
            if not ok:
                log.info("%s/%s preStop failed: %s", self.pod.key, self.name, msg)
        self._kill(max(0.0, grace - (time.monotonic() - t0)))
        self.done.wait(grace + 5)
        if self.cg:
            self.cg.kill_all(signal.SIGKILL)
            self.cg.remove()
