"""The EndpointSlice controller and cluster DNS (hosts files).

Endpoint conditions follow upstream: `serving` is the pod's readiness, `terminating` its
deletionTimestamp, `ready` = serving and not terminating, or always true with
`publishNotReadyAddresses`. DNS has no kube-proxy behind it: a ClusterIP Service name resolves
to one ready endpoint's pod IP (so the Service port must equal the target port), a headless
Service name to all its published endpoints, and `hostname.subdomain` to its pod.
"""
import hashlib
import logging

from objects import labels, map_selector_matches, meta, pod_ready, pod_terminating

log = logging.getLogger("endpoints")
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
CONTROLLER = "endpointslice-controller.k8s.io"
SERVICE_NAME = "kubernetes.io/service-name"
DOMAIN = "cluster.local"


def target_port(pod, port):
    """The container port a ServicePort's targetPort names (a number stays a number)."""
    tp = port.get("targetPort", port.get("port"))
    if isinstance(tp, int) or str(tp).isdigit():
        return int(tp)
    for c in pod["spec"].get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == tp:
                return p["containerPort"]
    return None


def endpoint(svc, pod, node):
    serving = pod_ready(pod)
    terminating = pod_terminating(pod)
    ready = bool(svc["spec"].get("publishNotReadyAddresses")) or (serving and not terminating)
    ep = {"addresses": [pod["status"]["podIP"]],
          "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
          "nodeName": node,
          "targetRef": {"kind": "Pod", "namespace": meta(pod)["namespace"], "name": meta(pod)["name"],
                        "uid": meta(pod)["uid"]}}
    spec = pod["spec"]
    if spec.get("hostname") and spec.get("subdomain") == meta(svc)["name"]:
        ep["hostname"] = spec["hostname"]
    return ep


def slices(svc, pods, node):
    """The EndpointSlices (one per distinct port mapping) of a Service with a selector."""
    sel = svc["spec"].get("selector")
    ns = meta(svc)["namespace"]
    groups = {}
    for p in pods:
        if meta(p)["namespace"] != ns or not map_selector_matches(sel, labels(p)):
            continue
        if not (p.get("status") or {}).get("podIP") or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        ports = []
        for sp in svc["spec"].get("ports") or []:
            n = target_port(p, sp)
            if n is not None:
                ports.append({"name": sp.get("name", ""), "port": n, "protocol": sp.get("protocol", "TCP")})
        key = tuple((x["name"], x["port"]) for x in ports)
        groups.setdefault(key, (ports, []))[1].append(endpoint(svc, p, node))
    out = []
    for key, (ports, eps) in sorted(groups.items()):
        h = hashlib.sha256(repr(key).encode()).hexdigest()[:5]
        eps.sort(key=lambda e: e["targetRef"]["name"])
        out.append({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": f"{meta(svc)['name']}-{h}", "namespace": ns,
                         "labels": {SERVICE_NAME: meta(svc)["name"], MANAGED_BY: CONTROLLER},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": meta(svc)["name"],
                                              "uid": meta(svc)["uid"], "controller": True,
                                              "blockOwnerDeletion": True}]},
            "endpoints": eps, "ports": ports})
    return out


def sync(api, services, pods, existing, node):
    """Creates, updates and deletes the managed slices of every Service."""
    want = {}
    for svc in services:
        if svc["spec"].get("selector") and not meta(svc).get("deletionTimestamp"):
            for s in slices(svc, pods, node):
                want[(meta(s)["namespace"], meta(s)["name"])] = s
    have = {(meta(s)["namespace"], meta(s)["name"]): s for s in existing
            if labels(s).get(MANAGED_BY) == CONTROLLER}
    for key, s in want.items():
        cur = have.get(key)
        if cur is None:
            api.create("endpointslices", key[0], s)
        elif cur.get("endpoints") != s["endpoints"] or cur.get("ports") != s["ports"]:
            api.patch("endpointslices", key[0], key[1], {"endpoints": s["endpoints"], "ports": s["ports"]})
    for key in have.keys() - want.keys():
        api.delete("endpointslices", key[0], key[1])
    return list(want.values())


def dns_records(services, slices_):
    """[(ip, [names...])]: FQDNs of Services and of pod hostnames (ns-relative names are added per
    pod by hosts_file)."""
    by_svc = {}
    for s in slices_:
        by_svc.setdefault((meta(s)["namespace"], labels(s)[SERVICE_NAME]), []).extend(s["endpoints"])
    records = []
    for svc in services:
        ns, name = meta(svc)["namespace"], meta(svc)["name"]
        eps = by_svc.get((ns, name), [])
        headless = svc["spec"].get("clusterIP") == "None"
        published = [e for e in eps if e["conditions"]["ready"]]
        if headless:
            for e in published:
                records.append((e["addresses"][0], (ns, name, None)))
                if e.get("hostname"):
                    records.append((e["addresses"][0], (ns, name, e["hostname"])))
        elif published:
            # No kube-proxy: the Service name is one ready endpoint (first by pod name).
            records.append((published[0]["addresses"][0], (ns, name, None)))
    return records


def hosts_file(records, pod_ns, own_ip, own_names):
    """The /etc/hosts of a pod in namespace `pod_ns`."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    if own_ip:
        lines.append(f"{own_ip}\t" + " ".join(own_names))
    for ip, (ns, svc, host) in records:
        base = f"{svc}.{ns}.svc"
        names = [f"{base}.{DOMAIN}", base, f"{svc}.{ns}"]
        if host:
            names = [f"{host}.{n}" for n in names]
        if ns == pod_ns:
            names.append(f"{host}.{svc}" if host else svc)
        lines.append(f"{ip}\t" + " ".join(names))
    return "\n".join(lines) + "\n"
