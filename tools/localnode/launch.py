"""Starts one container: run by the kubelet as `nsenter --net=NETNS unshare --mount python3
launch.py SPEC.json` (a private mount namespace in the pod's network namespace). Joins the container's cgroups, builds its root
(a tmpfs with the host's system directories under a writable overlay, the project read-only and volumes at their mountPaths,
shallowest first, the pod's
/etc/hosts, its own cgroup at /sys/fs/cgroup/memory), sets the hostname, chroots, drops to the
pod's user and execs the command, so the kubelet's child PID is the container's process."""
import ctypes
import json
import os
import socket
import subprocess
import sys

CLONE_NEWUTS = 0x04000000
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def fail(msg):
    sys.stderr.write(f"localnode: cannot start container: {msg}\n")
    sys.stderr.flush()
    os._exit(128)


def mount(*args):
    r = subprocess.run(["mount", *args], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"mount {' '.join(args)}: {r.stderr.strip()}")


def bind(src, dst, ro):
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if not os.path.exists(dst):
            open(dst, "a").close()
    mount("--rbind", src, dst)
    if ro:
        mount("-o", "remount,bind,ro", dst)


def mount_order(binds):
    """Mounts shallowest destination first (stable among equals), as a runtime orders them."""
    return sorted(binds, key=lambda m: len(os.path.normpath(m["dst"]).strip("/").split("/")))


def main():
    spec = json.load(open(sys.argv[1]))
    for cg in spec["cgroups"]:
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUTS) != 0:
        fail(f"unshare(CLONE_NEWUTS): errno {ctypes.get_errno()}")
    socket.sethostname(spec["hostname"])
    root = spec["root"]
    layers = spec["layers"]
    for d in (root, layers):
        os.makedirs(d, exist_ok=True)
        mount("-t", "tmpfs", "-o", "mode=755", "tmpfs", d)
    overlays = []
    # The project's directories (the mapped binary, its libraries) and the pod's volumes, mounted
    # together shallowest first, as a runtime orders mounts by destination: a volume at /tmp then
    # does not hide a checkout under /tmp, and a volume inside the project still lands on top.
    binds = []
    for d in spec["image_dirs"] + spec["host_dirs"]:
        if not os.path.lexists(d):
            continue
        target = root + d
        if os.path.islink(d):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.symlink(os.readlink(d), target)
        elif d in spec["image_dirs"]:
            # The "image": the host's system directories under a writable layer, so that mount
            # points such as /etc/tokenrouter can be made (as a runtime does in the image's rootfs).
            name = d.strip("/").replace("/", "_")
            up, work = f"{layers}/up/{name}", f"{layers}/work/{name}"
            os.makedirs(up)
            os.makedirs(work)
            os.makedirs(target, exist_ok=True)
            mount("-t", "overlay", "overlay", "-o", f"lowerdir={d},upperdir={up},workdir={work}", target)
            overlays.append(target)
        else:
            binds.append({"src": d, "dst": d, "ro": True})
    bind("/dev", root + "/dev", False)
    os.makedirs(root + "/proc", exist_ok=True)
    mount("-t", "proc", "proc", root + "/proc")
    bind("/sys", root + "/sys", True)
    if spec.get("memory_cgroup"):
        mount("--bind", spec["memory_cgroup"], root + "/sys/fs/cgroup/memory")
    bind(spec["hosts"], root + "/etc/hosts", True)
    binds += spec["mounts"]
    # The project itself, exactly, so that its depth orders it after a volume over its top-level
    # directory (an emptyDir at /tmp, a checkout in /tmp/x).
    binds += [{"src": d, "dst": d, "ro": True} for d in spec.get("project_dirs", []) if os.path.isdir(d)]
    for m in mount_order(binds):
        bind(m["src"], root + m["dst"], m["ro"])
    if spec.get("read_only_root"):
        for target in overlays:
            mount("-o", "remount,ro", target)
        mount("-o", "remount,ro", root)
    os.chroot(root)
    os.chdir(spec.get("cwd") or "/")
    if spec.get("gid") is not None:
        os.setgroups(spec.get("groups") or [])
        os.setgid(spec["gid"])
    if spec.get("uid") is not None:
        os.setuid(spec["uid"])
    env = dict(spec["env"])
    env.setdefault("PATH", DEFAULT_PATH)
    env.setdefault("HOSTNAME", spec["hostname"])
    argv = spec["argv"]
    if not argv:
        fail("no command: the image map gives no entrypoint and the container sets no command")
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        fail(f"exec {argv[0]!r}: {e}")


if __name__ == "__main__":
    main()
