"""The Deployment and ReplicaSet controllers: one ReplicaSet per pod template (pod-template-hash),
Recreate or RollingUpdate (maxSurge / maxUnavailable), replica counts and status."""
import copy
import logging
import secrets as rand

from objects import (FINALIZER, int_or_percent, labels, meta, owned_by, owner_ref, pod_active,
                     pod_ready, selector_matches, template_hash)

log = logging.getLogger("deployment")
HASH = "pod-template-hash"


def rs_for(dep, template_hash_):
    """A new ReplicaSet of `dep`'s current template (replicas 0: the rollout raises it)."""
    t = copy.deepcopy(dep["spec"]["template"])
    t.setdefault("metadata", {}).setdefault("labels", {})[HASH] = template_hash_
    sel = copy.deepcopy(dep["spec"]["selector"])
    sel.setdefault("matchLabels", {})[HASH] = template_hash_
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": f"{meta(dep)['name']}-{template_hash_}", "namespace": meta(dep)["namespace"],
                         "labels": dict(t["metadata"]["labels"]),
                         "ownerReferences": [owner_ref(dep, "Deployment", "apps/v1")]},
            "spec": {"replicas": 0, "selector": sel, "template": t}}


def rollout(dep, new_rs, old_rss, ready_of):
    """Target replica counts {rs name: replicas} for one step of the rollout."""
    want = dep["spec"].get("replicas", 1)
    strategy = dep["spec"].get("strategy") or {}
    out = {}
    old_total = sum(r["spec"].get("replicas", 0) for r in old_rss)
    if strategy.get("type") == "Recreate":
        for r in old_rss:
            out[meta(r)["name"]] = 0
        # New pods only once every old pod is gone.
        out[meta(new_rs)["name"]] = want if old_total == 0 and all(
            (r.get("status") or {}).get("replicas", 0) == 0 for r in old_rss) else 0
        return out
    ru = strategy.get("rollingUpdate") or {}
    surge = int_or_percent(ru.get("maxSurge", "25%"), want, True)
    unavailable = int_or_percent(ru.get("maxUnavailable", "25%"), want, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    new_cur = new_rs["spec"].get("replicas", 0)
    new_target = max(new_cur, min(want, want + surge - old_total))
    out[meta(new_rs)["name"]] = new_target
    ready = ready_of(new_rs) + sum(ready_of(r) for r in old_rss)
    can_remove = max(0, ready - (want - unavailable))
    # Old pods that are not ready cost no availability.
    for r in old_rss:
        cur = r["spec"].get("replicas", 0)
        not_ready = cur - min(cur, ready_of(r))
        cut = min(cur, not_ready + can_remove)
        can_remove -= max(0, cut - not_ready)
        out[meta(r)["name"]] = cur - cut
    return out


def sync_deployment(api, dep, rss):
    ns = meta(dep)["namespace"]
    if meta(dep).get("deletionTimestamp"):
        return
    mine = [r for r in rss if meta(r)["namespace"] == ns and owned_by(r, dep)]
    h = template_hash(dep["spec"]["template"])
    new_rs = next((r for r in mine if labels(r).get(HASH) == h), None)
    if new_rs is None:
        new_rs = rs_for(dep, h)
        log.info("deployment %s/%s: new replicaset %s", ns, meta(dep)["name"], meta(new_rs)["name"])
        new_rs = api.create("replicasets", ns, new_rs) or new_rs
    old = [r for r in mine if meta(r)["name"] != meta(new_rs)["name"]]

    def ready_of(r):
        return (r.get("status") or {}).get("readyReplicas", 0)

    targets = rollout(dep, new_rs, old, ready_of)
    for r in [new_rs] + old:
        n = targets.get(meta(r)["name"])
        if n is not None and n != r["spec"].get("replicas", 0):
            api.patch("replicasets", ns, meta(r)["name"], {"spec": {"replicas": n}})
    # Old, empty ReplicaSets beyond revisionHistoryLimit go.
    limit = dep["spec"].get("revisionHistoryLimit", 10)
    empty = [r for r in old if targets.get(meta(r)["name"]) == 0 and not (r.get("status") or {}).get("replicas")]
    for r in sorted(empty, key=lambda r: meta(r).get("creationTimestamp", ""))[:max(0, len(empty) - limit)]:
        api.delete("replicasets", ns, meta(r)["name"])
    want = dep["spec"].get("replicas", 1)
    ns_status = lambda r, k: (r.get("status") or {}).get(k, 0)
    ready = sum(ns_status(r, "readyReplicas") for r in [new_rs] + old)
    st = {"observedGeneration": meta(dep).get("generation", 0),
          "replicas": sum(ns_status(r, "replicas") for r in [new_rs] + old),
          "updatedReplicas": ns_status(new_rs, "replicas"),
          "readyReplicas": ready, "availableReplicas": ready,
          "unavailableReplicas": max(0, want - ready),
          "conditions": [{"type": "Available", "status": "True" if ready >= want else "False",
                          "reason": "MinimumReplicasAvailable" if ready >= want else "MinimumReplicasUnavailable"}]}
    if st != {k: (dep.get("status") or {}).get(k) for k in st}:
        api.patch("deployments", ns, meta(dep)["name"], {"status": st}, sub="status")


def new_pod(rs):
    t = copy.deepcopy(rs["spec"]["template"])
    md = t.get("metadata") or {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{meta(rs)['name']}-{rand.token_hex(3)[:5]}", "namespace": meta(rs)["namespace"],
                         "labels": md.get("labels") or {}, "annotations": md.get("annotations") or {},
                         "finalizers": [FINALIZER],
                         "ownerReferences": [owner_ref(rs, "ReplicaSet", "apps/v1")]},
            "spec": t["spec"]}


def sync_replicaset(api, rs, all_pods):
    ns = meta(rs)["namespace"]
    if meta(rs).get("deletionTimestamp"):
        return
    pods = [p for p in all_pods if meta(p)["namespace"] == ns and owned_by(p, rs)
            and selector_matches(rs["spec"]["selector"], labels(p))]
    active = [p for p in pods if pod_active(p)]
    want = rs["spec"].get("replicas", 1)
    for p in pods:
        if not pod_active(p) and not meta(p).get("deletionTimestamp"):
            api.delete("pods", ns, meta(p)["name"])  # failed pods are replaced
    for _ in range(want - len(active)):
        api.create("pods", ns, new_pod(rs))
    if len(active) > want:
        # Not-ready and newest pods go first.
        order = sorted(active, key=lambda p: (pod_ready(p), meta(p).get("creationTimestamp", "")))
        for p in order[: len(active) - want]:
            api.delete("pods", ns, meta(p)["name"])
    ready = sum(1 for p in active if pod_ready(p))
    st = {"observedGeneration": meta(rs).get("generation", 0), "replicas": len(active),
          "fullyLabeledReplicas": len(active), "readyReplicas": ready, "availableReplicas": ready}
    if st != {k: (rs.get("status") or {}).get(k) for k in st}:
        api.patch("replicasets", ns, meta(rs)["name"], {"status": st}, sub="status")
