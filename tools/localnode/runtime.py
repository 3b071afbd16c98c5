"""The container runtime: every container starts from its OCI image through podman with runc (crun
refuses this host's hybrid cgroups). The kubelet's rules live here as pure functions (the command
line against the image's ENTRYPOINT/CMD, the user, the `podman create` arguments) so that they can
be tested without a runtime; Podman runs them."""
import json
import logging
import math
import os
import resource
import subprocess
import threading

from podenv import expand, quantity

log = logging.getLogger("runtime")
PODMAN = os.environ.get("LOCALNODE_PODMAN", "podman")
LABEL = "localnode.tag"


class ConfigError(Exception):
    """The container cannot be created from its spec and image (CreateContainerConfigError)."""


def command_line(container, image_cfg, env):
    """argv as a kubelet builds it: `command` replaces the image's ENTRYPOINT and drops its CMD,
    `args` replace CMD; $(VAR) is expanded in command and args (not in the image's own)."""
    entry = list(image_cfg.get("Entrypoint") or [])
    cmd = list(image_cfg.get("Cmd") or [])
    command, args = container.get("command"), container.get("args")
    if command is not None:
        argv = [expand(a, env) for a in command] + [expand(a, env) for a in args or []]
    elif args is not None:
        argv = entry + [expand(a, env) for a in args]
    else:
        argv = entry + cmd
    if not argv:
        raise ConfigError("no command specified: the image has no ENTRYPOINT or CMD and the container sets none")
    return argv


def run_as(pod_spec, container, image_cfg):
    """The `--user` value (None: the image's USER), as a kubelet decides it: runAsUser/runAsGroup of
    the container, else of the pod; runAsNonRoot refuses a root user, and an image user that is a
    name cannot be verified (both CreateContainerConfigError, as upstream)."""
    psc = pod_spec.get("securityContext") or {}
    csc = container.get("securityContext") or {}
    uid = csc.get("runAsUser", psc.get("runAsUser"))
    gid = csc.get("runAsGroup", psc.get("runAsGroup"))
    non_root = csc.get("runAsNonRoot", psc.get("runAsNonRoot"))
    image_user = (image_cfg.get("User") or "").strip()
    image_uid, _, image_gid = image_user.partition(":")
    if uid is None and non_root:
        if image_uid in ("", "0", "root"):
            raise ConfigError("container has runAsNonRoot and image will run as root")
        if not image_uid.isdigit():
            raise ConfigError(f"container has runAsNonRoot and image has non-numeric user ({image_uid}), "
                              "cannot verify user is non-root")
    if uid is not None and non_root and int(uid) == 0:
        raise ConfigError("container's runAsUser breaks non-root policy")
    if uid is None and gid is None:
        return None
    user = str(uid) if uid is not None else (image_uid or "0")
    group = gid if gid is not None else (image_gid or None)
    return f"{user}:{group}" if group not in (None, "") else user


def ulimits():
    """nofile and nproc at most this process's hard limits: runc cannot raise an RLIMIT here, and
    podman's defaults are above them."""
    nofile = min(65536, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    nproc_hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nproc = 4096 if nproc_hard == resource.RLIM_INFINITY else min(4096, nproc_hard)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


def create_args(c):
    """`podman create` arguments (without the binary) for `c`: a dict with name, image, argv, user,
    hostname, netns (path), hosts (path), mounts [{src, dst, ro}], env names, workdir, limits,
    security (the container's securityContext), groups, labels."""
    a = ["create", "--pull", "never", "--name", c["name"], "--hostname", c["hostname"],
         "--network", f"ns:{c['netns']}", "--runtime", "runc", *ulimits(),
         "--log-driver", "none", "--entrypoint", json.dumps(c["argv"])]
    for k, v in sorted(c.get("labels", {}).items()):
        a += ["--label", f"{k}={v}"]
    if c.get("hosts"):
        a += ["--mount", f"type=bind,source={c['hosts']},destination=/etc/hosts,ro=true"]
    for m in c.get("mounts", []):
        for p in (m["src"], m["dst"]):
            if "," in p or "=" in p:
                raise ConfigError(f"mount path {p!r}: ',' and '=' are not supported by the node")
        a += ["--mount", f"type=bind,source={m['src']},destination={m['dst']}" + (",ro=true" if m.get("ro") else "")]
    for name in c.get("env", []):
        a += ["--env", name]  # the value comes from podman's environment: secrets stay off argv
    if c.get("user"):
        a += ["--user", c["user"]]
    for g in c.get("groups", []):
        a += ["--group-add", str(g)]
    if c.get("workdir"):
        a += ["--workdir", c["workdir"]]
    limits = c.get("limits") or {}
    if "memory" in limits:
        b = str(int(quantity(limits["memory"])))
        a += ["--memory", b, "--memory-swap", b]
    if "cpu" in limits:
        a += ["--cpus", f"{quantity(limits['cpu']):g}"]
    sc = c.get("security") or {}
    if sc.get("readOnlyRootFilesystem"):
        a += ["--read-only", "--read-only-tmpfs=false"]
    if sc.get("privileged"):
        a += ["--privileged"]
    if sc.get("allowPrivilegeEscalation") is False:
        a += ["--security-opt", "no-new-privileges"]
    caps = sc.get("capabilities") or {}
    for cap in caps.get("add") or []:
        a += ["--cap-add", cap]
    for cap in caps.get("drop") or []:
        a += ["--cap-drop", cap]
    a.append(c["image"])
    return a


def _run(args, env=None, timeout=120, check=True, cwd=None):
    r = subprocess.run([PODMAN, *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)
    if check and r.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args[:1])}: {r.stderr.strip()[-500:]}")
    return r


class Podman:
    """The node's runtime (one per node, `tag` labels its containers)."""

    def __init__(self, tag):
        self.tag = tag

    def image_config(self, image):
        """The image's config (Entrypoint, Cmd, User, Env, WorkingDir) and id, or None when the
        image is not in local storage (the node never pulls)."""
        r = _run(["image", "inspect", "--format", "{{json .Config}}\t{{.Id}}", image], check=False)
        if r.returncode != 0:
            return None
        cfg, _, iid = r.stdout.strip().partition("\t")
        out = json.loads(cfg) or {}
        out["Id"] = iid
        return out

    def create(self, spec, env):
        """Creates the container (the stale one of the same name goes first); returns its id."""
        _run(["rm", "-f", spec["name"]], check=False)
        penv = dict(os.environ)
        penv.update(env)
        return _run(create_args(spec), env=penv).stdout.strip()

    def init(self, cid, cwd=None):
        """Makes the container (cgroups, namespaces) without running its command; its Pid then is
        the runtime's init process, already in the container's cgroups."""
        # conmon starts here and keeps this working directory: it drops a
        # file named `oom` there when the container runs out of memory.
        _run(["init", cid], cwd=cwd)
        return self.state(cid).get("Pid") or 0

    def start(self, cid, log_file):
        """`podman start --attach`: its exit is the container's; output goes to `log_file`."""
        return subprocess.Popen([PODMAN, "start", "--attach", cid], stdout=log_file, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)

    def state(self, cid):
        r = _run(["inspect", "--format", "{{json .State}}", cid], check=False)
        return json.loads(r.stdout) if r.returncode == 0 else {}

    def stop(self, cid, grace):
        """SIGTERM (the image's StopSignal), SIGKILL after `grace` seconds."""
        _run(["stop", "-t", str(math.ceil(max(0, grace))), cid], check=False, timeout=grace + 60)

    def exec(self, cid, cmd, timeout):
        return subprocess.run([PODMAN, "exec", cid, *cmd], capture_output=True, timeout=timeout)

    def remove(self, cid):
        _run(["rm", "-f", "-v", "-t", "0", cid], check=False)  # -v: the image's VOLUMEs too

    def cleanup(self):
        """Removes every container of this node (also a crashed run's)."""
        ids = _run(["ps", "-a", "-q", "--filter", f"label={LABEL}={self.tag}"], check=False).stdout.split()
        if ids:
            _run(["rm", "-f", "-v", "-t", "0", *ids], check=False, timeout=300)


class OomWatch(threading.Thread):
    """Whether the container's memory cgroup (v1) ran out of memory. podman's State.OOMKilled stays
    false on this host (conmon misses the v1 event), so the node listens itself: the cgroup's
    eventfd fires on an OOM and on its removal, and only after an OOM is the cgroup still there."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.oom = False
        self.efd = None
        try:
            with open(f"/proc/{pid}/cgroup") as f:
                path = next(line.split(":", 2)[2].strip() for line in f if line.split(":")[1] == "memory")
            self.dir = "/sys/fs/cgroup/memory" + path
            ofd = os.open(os.path.join(self.dir, "memory.oom_control"), os.O_RDONLY)
            try:
                self.efd = os.eventfd(0)
                with open(os.path.join(self.dir, "cgroup.event_control"), "w") as f:
                    f.write(f"{self.efd} {ofd}")
            finally:
                os.close(ofd)  # the registration holds what it needs
            self.oom = self._counted()
        except (OSError, StopIteration, IndexError):
            if self.efd is not None:
                os.close(self.efd)
            self.efd = None  # no v1 memory controller, or the container is gone already
            return
        self.start()

    def _counted(self):
        with open(os.path.join(self.dir, "memory.oom_control")) as f:
            return any(line.startswith("oom_kill ") and int(line.split()[1]) > 0 for line in f)

    def run(self):
        try:
            os.eventfd_read(self.efd)
            self.oom = self.oom or os.path.isdir(self.dir)
        finally:
            os.close(self.efd)
