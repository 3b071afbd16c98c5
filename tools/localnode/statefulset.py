"""The StatefulSet controller: ordinals, identity labels, OrderedReady/Parallel, RollingUpdate
with `partition`, OnDelete, scale up and down, ControllerRevisions and status."""
import copy
import logging

from objects import (FINALIZER, meta, owner_ref, owned_by, pod_active, pod_ready, pod_terminating,
                     template_hash)

log = logging.getLogger("statefulset")
POD_INDEX = "apps.kubernetes.io/pod-index"
POD_NAME = "statefulset.kubernetes.io/pod-name"
REVISION = "controller-revision-hash"


def ordinal_of(set_name, pod_name):
    """The ordinal of `SET-N`, or None for a pod that is not this set's."""
    prefix = set_name + "-"
    if not pod_name.startswith(prefix) or not pod_name[len(prefix):].isdigit():
        return None
    return int(pod_name[len(prefix):])


def revision_name(sts):
    return f"{meta(sts)['name']}-{template_hash(sts['spec']['template'])}"


def plan(sts, pods, update_rev):
    """What to do next: a list of ("create", ordinal, revision) and ("delete", pod_name) actions,
    following upstream semantics. `pods` are the set's pods (any state)."""
    spec = sts["spec"]
    replicas = spec.get("replicas", 1)
    parallel = spec.get("podManagementPolicy", "OrderedReady") == "Parallel"
    strategy = spec.get("updateStrategy") or {"type": "RollingUpdate"}
    rolling = strategy.get("type", "RollingUpdate") == "RollingUpdate"
    partition = ((strategy.get("rollingUpdate") or {}).get("partition")) or 0
    current_rev = (sts.get("status") or {}).get("currentRevision") or update_rev
    name = meta(sts)["name"]
    by_ord = {}
    for p in pods:
        o = ordinal_of(name, meta(p)["name"])
        if o is not None:
            by_ord[o] = p
    actions = []

    def healthy(p):
        return pod_active(p) and pod_ready(p)

    # Failed or succeeded pods are replaced (deleted, recreated next round).
    for o, p in sorted(by_ord.items()):
        if not pod_terminating(p) and not pod_active(p):
            actions.append(("delete", meta(p)["name"]))
    if actions:
        return actions
    # Scale up: missing ordinals below replicas.
    for o in range(replicas):
        if o in by_ord:
            if not parallel and not healthy(by_ord[o]):
                return actions  # OrderedReady: wait for this one
            continue
        # Below a RollingUpdate partition a pod is recreated at the current revision; otherwise,
        # OnDelete included (that is how OnDelete updates), at the update revision.
        rev = current_rev if rolling and o < partition else update_rev
        actions.append(("create", o, rev))
        if not parallel:
            return actions
    # Scale down: ordinals >= replicas, highest first.
    extra = sorted((o for o in by_ord if o >= replicas), reverse=True)
    for o in extra:
        p = by_ord[o]
        if pod_terminating(p):
            if not parallel:
                return actions
            continue
        actions.append(("delete", meta(p)["name"]))
        if not parallel:
            return actions
    if actions or not rolling:
        return actions
    # Rolling update: highest ordinal first, one pod at a time, only while all others are healthy.
    for o in sorted((o for o in by_ord if o < replicas), reverse=True):
        p = by_ord[o]
        if o < partition:
            break
        if (meta(p).get("labels") or {}).get(REVISION) != update_rev:
            others_ok = all(healthy(q) for k, q in by_ord.items() if k < replicas and k != o)
            if others_ok and not pod_terminating(p):
                actions.append(("delete", meta(p)["name"]))
            return actions
        if not healthy(p):
            return actions
    return actions


def new_pod(sts, ordinal, revision, template):
    """The pod of `ordinal` from `template` (the revision's pod template)."""
    name = f"{meta(sts)['name']}-{ordinal}"
    t = copy.deepcopy(template)
    md = t.get("metadata") or {}
    lbls = dict(md.get("labels") or {})
    lbls.update({REVISION: revision, POD_NAME: name, POD_INDEX: str(ordinal)})
    spec = t["spec"]
    spec["hostname"] = name
    spec["subdomain"] = sts["spec"].get("serviceName", "")
    vols = spec.setdefault("volumes", [])
    for claim in sts["spec"].get("volumeClaimTemplates") or []:
        cname = meta(claim)["name"]
        vols.append({"name": cname, "persistentVolumeClaim": {"claimName": f"{cname}-{name}"}})
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": meta(sts)["namespace"], "labels": lbls,
                     "annotations": md.get("annotations") or {},
                     "finalizers": [FINALIZER],
                     "ownerReferences": [owner_ref(sts, "StatefulSet", "apps/v1")]},
        "spec": spec,
    }


def status(sts, pods, update_rev, current_rev):
    """The StatefulSet status from its pods."""
    active = [p for p in pods if not pod_terminating(p)]
    ready = [p for p in active if pod_ready(p)]
    updated = [p for p in active if (meta(p).get("labels") or {}).get(REVISION) == update_rev]
    current = [p for p in active if (meta(p).get("labels") or {}).get(REVISION) == current_rev]
    replicas = sts["spec"].get("replicas", 1)
    if len(updated) == replicas and all(pod_ready(p) for p in updated):
        current_rev = update_rev
        current = updated
    return {
        "observedGeneration": meta(sts).get("generation", 0),
        "replicas": len(active), "readyReplicas": len(ready), "availableReplicas": len(ready),
        "currentReplicas": len(current), "updatedReplicas": len(updated),
        "currentRevision": current_rev, "updateRevision": update_rev, "collisionCount": 0,
    }


def sync(api, sts, all_pods, revisions):
    """One round for one StatefulSet."""
    ns, name = meta(sts)["namespace"], meta(sts)["name"]
    if meta(sts).get("deletionTimestamp"):
        return
    pods = [p for p in all_pods if meta(p)["namespace"] == ns and owned_by(p, sts)]
    update_rev = revision_name(sts)
    known = {meta(r)["name"]: r for r in revisions
             if meta(r)["namespace"] == ns and owned_by(r, sts)}
    if update_rev not in known:
        rev = {"apiVersion": "apps/v1", "kind": "ControllerRevision",
               "metadata": {"name": update_rev, "namespace": ns,
                            "labels": dict(sts["spec"]["selector"].get("matchLabels") or {}),
                            "ownerReferences": [owner_ref(sts, "StatefulSet", "apps/v1")]},
               "data": {"spec": {"template": sts["spec"]["template"]}},
               "revision": 1 + max([r.get("revision", 0) for r in known.values()] or [0])}
        api.create("controllerrevisions", ns, rev)
        known[update_rev] = rev
    current_rev = (sts.get("status") or {}).get("currentRevision") or update_rev
    for claim in sts["spec"].get("volumeClaimTemplates") or []:
        for o in range(sts["spec"].get("replicas", 1)):
            pvc = copy.deepcopy(claim)
            pvc.update({"apiVersion": "v1", "kind": "PersistentVolumeClaim"})
            pvc["metadata"] = {"name": f"{meta(claim)['name']}-{name}-{o}", "namespace": ns,
                               "labels": dict(sts["spec"]["selector"].get("matchLabels") or {})}
            if api.get("persistentvolumeclaims", ns, pvc["metadata"]["name"]) is None:
                api.create("persistentvolumeclaims", ns, pvc)
    for action in plan(sts, pods, update_rev):
        if action[0] == "create":
            _, o, rev = action
            src = known.get(rev) or known[update_rev]
            template = (src.get("data") or {}).get("spec", {}).get("template") or sts["spec"]["template"]
            log.info("statefulset %s/%s: create ordinal %d at %s", ns, name, o, rev)
            api.create("pods", ns, new_pod(sts, o, rev, template))
        else:
            log.info("statefulset %s/%s: delete pod %s", ns, name, action[1])
            api.delete("pods", ns, action[1])
    st = status(sts, pods, update_rev, current_rev)
    old = sts.get("status") or {}
    if any(old.get(k) != v for k, v in st.items()):
        api.patch("statefulsets", ns, name, {"status": st}, sub="status")
