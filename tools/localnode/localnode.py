"""localnode: makes the k8s test kit's API server run pods on this machine (test infrastructure).

  localnode.py up --kubeconfig K --state DIR [--subnet 10.213.0.0/16] [--configmap-delay 30]
  localnode.py down --state DIR
  localnode.py logs [-n NS] [-c CONTAINER] [-p] POD --state DIR
  localnode.py port-forward [-n NS] svc/NAME|pod/NAME LOCAL:PORT --kubeconfig K
  localnode.py cp [-n NS] [--link] SRC POD:PATH --state DIR --kubeconfig K

Every container starts from its OCI image in the node's local image storage (podman with runc,
see runtime.py); images are never pulled. See README.md beside this file for what it imitates.
"""
import argparse
import logging
import os
import shutil
import signal
import sys
import threading
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import deployment  # noqa: E402
import endpoints  # noqa: E402
import forward  # noqa: E402
import garbage  # noqa: E402
import statefulset  # noqa: E402
from kapi import Api, ApiError  # noqa: E402
from kubelet import Kubelet  # noqa: E402
from netns import Network  # noqa: E402
from runtime import Podman  # noqa: E402
from objects import meta  # noqa: E402
from volumes import pvc_dir  # noqa: E402

log = logging.getLogger("localnode")
NODE = "localnode"
GC_KINDS = ["pods", "services", "configmaps", "secrets", "deployments", "replicasets", "statefulsets",
            "controllerrevisions", "endpointslices", "persistentvolumeclaims", "serviceaccounts",
            "networkpolicies", "poddisruptionbudgets", "horizontalpodautoscalers", "roles", "rolebindings"]


def custom_kinds(api):
    """{plural: prefix} of the non-stand-in CRDs (their objects can own or be owned)."""
    out = {}
    for crd in api.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions").get("items", []):
        if (meta(crd).get("labels") or {}).get("k8s-test-kit/stand-in") == "true":
            continue
        spec = crd["spec"]
        version = next((v["name"] for v in spec["versions"] if v.get("storage")), spec["versions"][0]["name"])
        out[spec["names"]["plural"]] = f"/apis/{spec['group']}/{version}"
    return out


def ensure_node(api, ip):
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux",
                                                  "node.kubernetes.io/instance-type": "localnode"}}}
    if api.get("nodes", None, NODE) is None:
        api.create("nodes", None, node)
    st = {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                          "message": "localnode is posting ready status"}],
          "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": NODE}],
          "capacity": {"cpu": str(os.cpu_count()), "pods": "110"},
          "nodeInfo": {"kubeletVersion": "v1.36.0-localnode", "containerRuntimeVersion": "podman://4",
                       "operatingSystem": "linux", "architecture": "amd64"}}
    api.patch("nodes", None, NODE, {"status": st}, sub="status")


def bind_claims(api, pvcs, pv_root):
    """Every claim is bound to a local directory (a stand-in for a provisioner)."""
    for pvc in pvcs:
        if meta(pvc).get("deletionTimestamp") or (pvc.get("status") or {}).get("phase") == "Bound":
            continue
        ns, name = meta(pvc)["namespace"], meta(pvc)["name"]
        d = pvc_dir(pv_root, ns, name)
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o777)  # as a local-path provisioner makes it: any image user writes there
        req = ((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}
        api.patch("persistentvolumeclaims", ns, name,
                  {"status": {"phase": "Bound", "capacity": req,
                              "accessModes": (pvc.get("spec") or {}).get("accessModes") or []}}, sub="status")


def release_claims(pvcs, pv_root):
    """Directories of deleted claims go (reclaim policy Delete)."""
    live = {(meta(p)["namespace"], meta(p)["name"]) for p in pvcs}
    if not os.path.isdir(pv_root):
        return
    for ns in os.listdir(pv_root):
        for name in os.listdir(os.path.join(pv_root, ns)):
            if (ns, name) not in live:
                shutil.rmtree(pvc_dir(pv_root, ns, name), ignore_errors=True)


def pod_kubeconfig(kubeconfig, state, gateway, port):
    """A copy of the kit's kubeconfig for pods: the API through the bridge forwarder, verified
    against the server certificate's name (on a real cluster pods use their ServiceAccount)."""
    cfg = yaml.safe_load(open(kubeconfig))
    for c in cfg["clusters"]:
        c["cluster"]["server"] = f"https://{gateway}:{port}"
        c["cluster"]["tls-server-name"] = "localhost"
    d = os.path.join(state, "pod-kubeconfig")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "kubeconfig")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    os.chmod(path, 0o644)
    os.chmod(d, 0o755)
    return path


def up(args):
    state = os.path.abspath(args.state)
    os.makedirs(state, exist_ok=True)
    for f in ("ready", "journal.jsonl"):
        if os.path.exists(os.path.join(state, f)):
            os.unlink(os.path.join(state, f))
    api = Api(args.kubeconfig)
    net = Network(args.tag, args.subnet)
    net.up()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    fwd = forward.serve((net.gateway, api.port), lambda: ("127.0.0.1", api.port), stop)
    rt = Podman(args.tag)
    rt.cleanup()  # a crashed run's containers
    kl = Kubelet(api, net, state, NODE, rt, pod_kubeconfig(args.kubeconfig, state, net.gateway, api.port),
                 args.tag, args.configmap_delay)
    with open(os.path.join(state, "pid"), "w") as f:
        f.write(str(os.getpid()))
    log.info("node %s up: subnet %s, state %s", NODE, args.subnet, state)
    first = True
    try:
        while not stop.is_set():
            try:
                sync_once(api, kl, net)
            except (ApiError, OSError) as e:
                log.warning("sync round failed: %s", e)
            if first:
                open(os.path.join(state, "ready"), "w").close()
                first = False
            stop.wait(args.period)
    finally:
        log.info("shutting down: stopping %d pods", len(kl.workers))
        kl.shutdown(args.shutdown_grace)
        fwd.close()
        rt.cleanup()
        net.cleanup()
        for f in ("pid", "ready"):
            if os.path.exists(os.path.join(state, f)):
                os.unlink(os.path.join(state, f))
        log.info("node down")


def sync_once(api, kl, net):
    ensure_node(api, net.gateway)
    objs = {k: api.list(k) for k in GC_KINDS}
    crs = custom_kinds(api)
    custom = {k: api.list(k, prefix=p) for k, p in crs.items()}
    bind_claims(api, objs["persistentvolumeclaims"], kl.pv_root)
    release_claims(objs["persistentvolumeclaims"], kl.pv_root)
    everything = [(k, o) for k, items in list(objs.items()) + list(custom.items()) for o in items]
    garbage.run(api, everything, crs)
    for dep in objs["deployments"]:
        deployment.sync_deployment(api, dep, objs["replicasets"])
    for rs in objs["replicasets"]:
        deployment.sync_replicaset(api, rs, objs["pods"])
    for sts in objs["statefulsets"]:
        statefulset.sync(api, sts, objs["pods"], objs["controllerrevisions"])
    slices = endpoints.sync(api, objs["services"], objs["pods"], objs["endpointslices"], NODE)
    kl.records = endpoints.dns_records(objs["services"], slices)
    kl.sync(objs["pods"], objs["configmaps"], objs["secrets"], objs["persistentvolumeclaims"])


def down(args):
    pidf = os.path.join(args.state, "pid")
    if os.path.exists(pidf):
        pid = int(open(pidf).read())
        try:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + args.timeout
            while time.monotonic() < deadline:
                os.kill(pid, 0)
                time.sleep(0.2)
            log.warning("node pid %d still running after %ss: SIGKILL", pid, args.timeout)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    Podman(args.tag).cleanup()
    Network(args.tag, args.subnet).cleanup()


def logs(args):
    base = os.path.join(args.state, "logs", args.namespace, args.pod)
    if not os.path.isdir(base):
        sys.exit(f"no logs for pod {args.namespace}/{args.pod} under {args.state}")
    containers = sorted(os.listdir(base))
    c = args.container or (containers[0] if len(containers) == 1 else None)
    if c is None:
        sys.exit(f"pod {args.pod} has several containers, choose one with -c: {' '.join(containers)}")
    runs = sorted((int(f.split(".")[0]) for f in os.listdir(os.path.join(base, c))), reverse=True)
    idx = 1 if args.previous else 0
    if len(runs) <= idx:
        sys.exit(f"no {'previous ' if args.previous else ''}run of container {c} in pod {args.pod}")
    with open(os.path.join(base, c, f"{runs[idx]}.log"), "rb") as f:
        sys.stdout.buffer.write(f.read())


def port_forward(args):
    api = Api(args.kubeconfig)
    kind, _, name = args.target.partition("/")
    if kind in ("svc", "service"):
        kind = "svc"
    local, _, remote = args.ports.partition(":")
    remote = int(remote or local)
    srv = forward.serve((args.address, int(local)), forward.service_targets(api, args.namespace, kind, name, remote))
    print(f"Forwarding from {args.address}:{local} -> {args.target}:{remote}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    srv.close()


def cp(args):
    """Copies a local file or directory into a running pod's volume (what `kubectl cp` does through
    a kubelet; here the volume is a host directory)."""
    api = Api(args.kubeconfig)
    pod_name, _, path = args.dst.partition(":")
    pod = api.get("pods", args.namespace, pod_name)
    if pod is None:
        sys.exit(f"pod {args.namespace}/{pod_name} not found")
    c = pod["spec"]["containers"][0]
    vols = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    best = None
    for m in c.get("volumeMounts") or []:
        mp = m["mountPath"].rstrip("/")
        if (path == mp or path.startswith(mp + "/")) and (best is None or len(mp) > len(best[0])):
            best = (mp, m)
    if best is None:
        sys.exit(f"{path} is not on a volume of pod {pod_name} (the root filesystem is the image's)")
    mp, m = best
    v = vols[m["name"]]
    if "persistentVolumeClaim" in v:
        base = pvc_dir(os.path.join(args.state, "pv"), args.namespace, v["persistentVolumeClaim"]["claimName"])
    elif "hostPath" in v:
        base = v["hostPath"]["path"]
    else:
        base = os.path.join(args.state, "pods", meta(pod)["uid"], "volumes", m["name"])
    if m.get("subPath"):
        base = os.path.join(base, m["subPath"])
    dst = os.path.join(base, path[len(mp):].lstrip("/"))
    copy = link_or_copy if args.link else shutil.copy2
    if os.path.isdir(args.src):
        shutil.copytree(args.src, dst, dirs_exist_ok=True, copy_function=copy)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        copy(args.src, dst)


def link_or_copy(src, dst):
    """A hard link (weights are read-only; no copy of gigabytes), or a copy across filesystems."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    env = os.environ.get
    for name in ("up", "down"):
        s = sub.add_parser(name)
        s.add_argument("--state", default=env("LOCALNODE_STATE", "/tmp/localnode"))
        s.add_argument("--subnet", default=env("LOCALNODE_SUBNET", "10.213.0.0/16"))
        s.add_argument("--tag", default=env("LOCALNODE_TAG", "ln213"),
                       help="prefix of netns, links and cgroups (short: veth names have 15 characters)")
        if name == "up":
            s.add_argument("--kubeconfig", default=env("KUBECONFIG"))
            s.add_argument("--configmap-delay", type=float, default=float(env("LOCALNODE_CONFIGMAP_DELAY", "30")),
                           help="seconds before a ConfigMap/Secret change reaches a running pod's volume "
                                "(a kubelet's sync period plus its cache TTL: up to about a minute)")
            s.add_argument("--period", type=float, default=1.0)
            s.add_argument("--shutdown-grace", type=float, default=20.0)
        else:
            s.add_argument("--timeout", type=float, default=90.0)
    s = sub.add_parser("logs")
    s.add_argument("pod")
    s.add_argument("-n", "--namespace", default="default")
    s.add_argument("-c", "--container")
    s.add_argument("-p", "--previous", action="store_true")
    s.add_argument("--state", default=env("LOCALNODE_STATE", "/tmp/localnode"))
    s = sub.add_parser("port-forward")
    s.add_argument("target")
    s.add_argument("ports")
    s.add_argument("-n", "--namespace", default="default")
    s.add_argument("--address", default="127.0.0.1")
    s.add_argument("--kubeconfig", default=env("KUBECONFIG"))
    s = sub.add_parser("cp")
    s.add_argument("src")
    s.add_argument("dst")
    s.add_argument("-n", "--namespace", default="default")
    s.add_argument("--state", default=env("LOCALNODE_STATE", "/tmp/localnode"))
    s.add_argument("--kubeconfig", default=env("KUBECONFIG"))
    s.add_argument("--link", action="store_true", help="hard-link files instead of copying")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    {"up": up, "down": down, "logs": logs, "port-forward": port_forward, "cp": cp}[args.cmd](args)


if __name__ == "__main__":
    main()
