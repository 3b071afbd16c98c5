"""One container's life on the node: its image checked (never pulled), created and started through
the runtime (runtime.py: podman with runc) in the pod's network namespace, probes, restarts with
CrashLoopBackOff back-off, and termination (preStop, then `podman stop`: SIGTERM, SIGKILL after
the grace period). OOM kills are told from the container's memory cgroup (runtime.OomWatch)."""
import json
import logging
import os
import subprocess
import threading
import time

import probes
import runtime
from objects import now
from podenv import MissingRef, resolve_env
from volumes import Pending

log = logging.getLogger("container")
BACKOFF_START, BACKOFF_MAX, BACKOFF_RESET = 10.0, 300.0, 600.0


class Container(threading.Thread):
    """Supervises one container of a pod worker `pod` (a kubelet.PodWorker)."""

    def __init__(self, pod, spec, init=False):
        super().__init__(daemon=True, name=f"{pod.key}/{spec['name']}")
        self.pod, self.spec, self.init = pod, spec, init
        self.sidecar = init and spec.get("restartPolicy") == "Always"
        self.name = spec["name"]
        self.proc = None  # `podman start --attach`: exits with the container
        self.cid = None
        self.image_id = ""
        self.oom = None
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

    @property
    def runtime(self):
        return self.pod.kubelet.runtime

    # ---- status
    def status(self):
        with self.lock:
            s = {"name": self.name, "image": self.spec.get("image", ""), "imageID": self.image_id,
                 "ready": self.ready, "restartCount": self.restarts, "state": self.state,
                 "lastState": self.last_state, "started": self.started}
            if self.cid is not None:
                s["containerID"] = f"podman://{self.cid}"
            return s

    def _set(self, **kw):
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, v)
        self.pod.changed()

    def exec(self, cmd, timeout):
        """Runs `cmd` in the running container (exec probes, preStop); a CompletedProcess."""
        if self.cid is None or self.proc is None or self.proc.poll() is not None:
            raise OSError("container not running")
        return self.runtime.exec(self.cid, cmd, timeout)

    # ---- one start
    def _pull(self):
        """The image's config, or None after setting ErrImagePull / ImagePullBackOff: the node
        never pulls (no registry is reachable), an image must be in local storage."""
        image = self.spec.get("image", "")
        cfg = self.runtime.image_config(image) if image else None
        if cfg is not None:
            return cfg
        msg = f"image {image!r} is not present in the node's image storage (the node never pulls)"
        self.pod.kubelet.journal(self.pod, self.name, "image-missing", image=image)
        self._set(state={"waiting": {"reason": "ErrImagePull", "message": msg}})
        return None

    def _start(self, image_cfg):
        pod = self.pod
        env = resolve_env(pod.obj, self.spec, pod.ns_objects[0], pod.ns_objects[1], pod.base_env())
        argv = runtime.command_line(self.spec, image_cfg, env)
        user = runtime.run_as(pod.obj["spec"], self.spec, image_cfg)
        psc = pod.obj["spec"].get("securityContext") or {}
        groups = [g for g in [psc.get("fsGroup")] + list(psc.get("supplementalGroups") or []) if g is not None]
        spec = {"name": f"{pod.kubelet.tag}-{pod.uid[:13]}-{self.name}-{self.restarts}",
                "image": self.spec["image"], "argv": argv, "user": user, "groups": groups,
                "hostname": pod.hostname, "netns": f"/var/run/netns/{pod.netns}", "hosts": pod.hosts_path,
                "mounts": pod.mounts_for(self.spec), "env": sorted(env), "workdir": self.spec.get("workingDir"),
                "limits": (self.spec.get("resources") or {}).get("limits") or {},
                "security": self.spec.get("securityContext") or {},
                "labels": {runtime.LABEL: pod.kubelet.tag, "localnode.pod": pod.key, "localnode.container": self.name}}
        cdir = os.path.join(pod.dir, "containers", self.name)
        os.makedirs(cdir, exist_ok=True)
        # What the runtime is given (env values included: the flow checks them), for tests and debugging.
        with open(os.path.join(cdir, "launch.json"), "w") as f:
            json.dump({**spec, "env": env, "podman": runtime.create_args(spec)}, f, indent=1)
        log_path = pod.kubelet.log_path(pod, self.name, self.restarts)
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        cid = self.runtime.create(spec, env)
        self.cid = cid
        # Listening for an OOM before the command runs: a quick one would otherwise be missed.
        pid = self.runtime.init(cid, cwd=cdir)
        self.oom = runtime.OomWatch(pid) if pid else None
        with open(log_path, "ab") as out:
            proc = self.runtime.start(cid, out)
        self.started_at = time.monotonic()
        self._set(proc=proc, image_id=image_cfg.get("Id", ""), state={"running": {"startedAt": now()}},
                  started=False, ready=False)
        pod.kubelet.journal(pod, self.name, "started", container_id=cid, restart=self.restarts)
        log.info("%s/%s started %s from %s: %s", pod.key, self.name, cid[:12], self.spec["image"], " ".join(argv))

    def _terminated(self, rc):
        """The terminated state of the container whose `podman start` exited with `rc`."""
        st = self.runtime.state(self.cid)
        code = st.get("ExitCode", 128 - rc if rc < 0 else rc) if st else (128 - rc if rc < 0 else rc)
        if self.oom is not None and self.oom.is_alive():
            self.oom.join(10)  # the cgroup's removal (or its OOM) wakes it
        oom = st.get("OOMKilled") or (self.oom is not None and self.oom.oom)
        if oom:
            reason = "OOMKilled"
        elif code == 0:
            reason = "Completed"
        elif st.get("Error"):
            reason = "StartError"
        else:
            reason = "Error"
        term = {"exitCode": code, "reason": reason, "startedAt": self.state.get("running", {}).get(
            "startedAt", now()), "finishedAt": now(), "containerID": f"podman://{self.cid}"}
        if st.get("Error"):
            term["message"] = st["Error"]
        return {"terminated": term}

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
                ok, msg = probes.run(p, c, self.pod.ip, self.exec, tm["timeout"])
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
        self._kill(self.pod.grace())

    def _kill(self, grace):
        """`podman stop`: SIGTERM to the container, SIGKILL after `grace` seconds."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.sigterm_at = time.monotonic()
        self.runtime.stop(self.cid, grace)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            log.warning("%s/%s: podman start still attached 30 s after stop", self.pod.key, self.name)

    def _wait_image(self, backoff):
        """ErrImagePull, then ImagePullBackOff for `backoff` seconds; False once stopping."""
        msg = self.state.get("waiting", {}).get("message", "")
        if self.stopping.wait(2):  # a kubelet shows ErrImagePull until its next sync
            return False
        self._set(state={"waiting": {"reason": "ImagePullBackOff",
                                     "message": f'Back-off pulling image "{self.spec.get("image", "")}": {msg}'}})
        return not self.stopping.wait(backoff)

    def run(self):
        backoff = pull_backoff = BACKOFF_START
        policy = "Always" if self.sidecar else self.pod.obj["spec"].get("restartPolicy", "Always")
        if self.init and not self.sidecar and policy == "Always":
            policy = "OnFailure"  # init containers are re-run on failure only
        while not self.stopping.is_set():
            image_cfg = self._pull()
            if image_cfg is None:
                if not self._wait_image(pull_backoff):
                    break
                pull_backoff = min(pull_backoff * 2, BACKOFF_MAX)
                continue
            pull_backoff = BACKOFF_START
            try:
                self._start(image_cfg)
            except (MissingRef, Pending, runtime.ConfigError) as e:
                self._set(state={"waiting": {"reason": "CreateContainerConfigError", "message": str(e)}})
                self.stopping.wait(2)
                continue
            except RuntimeError as e:  # podman create refused it
                self._set(state={"waiting": {"reason": "CreateContainerError", "message": str(e)}})
                self.stopping.wait(BACKOFF_START)
                continue
            if self.stopping.is_set():  # deleted while it was being created: stop() saw no process
                self._kill(self.pod.grace())
            rc = self._watch()
            term = self._terminated(rc)
            self.runtime.remove(self.cid)
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
            ok, msg = probes.run(pre, self.spec, self.pod.ip, self.exec, grace)
            if "sleep" in pre:
                time.sleep(min(grace, pre["sleep"].get("seconds", 0)))
            if not ok:
                log.info("%s/%s preStop failed: %s", self.pod.key, self.name, msg)
        self._kill(max(0.0, grace - (time.monotonic() - t0)))
        self.done.wait(grace + 30)
