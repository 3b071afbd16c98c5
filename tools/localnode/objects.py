"""Pure helpers over Kubernetes objects (plain dicts): selectors, owners, readiness, hashes."""
import hashlib
import json
import time

FINALIZER = "localnode.tokenrouter.io/kubelet"


def now():
    """An RFC 3339 timestamp (seconds), as the API server writes them."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def meta(obj):
    return obj.get("metadata") or {}


def labels(obj):
    return meta(obj).get("labels") or {}


def selector_matches(selector, lbls):
    """A LabelSelector (matchLabels + matchExpressions) against a label map; an empty selector
    matches everything, as for Deployments; a missing one (None) matches nothing."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if lbls.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, vals = e["key"], e["operator"], e.get("values") or []
        if op == "In" and lbls.get(key) not in vals:
            return False
        if op == "NotIn" and key in lbls and lbls[key] in vals:
            return False
        if op == "Exists" and key not in lbls:
            return False
        if op == "DoesNotExist" and key in lbls:
            return False
    return True


def map_selector_matches(sel, lbls):
    """A Service's plain map selector; an empty or missing one selects no pod."""
    return bool(sel) and all(lbls.get(k) == v for k, v in sel.items())


def controller_of(obj):
    """The ownerReference with controller=true, or None."""
    for r in meta(obj).get("ownerReferences") or []:
        if r.get("controller"):
            return r
    return None


def owned_by(obj, owner):
    r = controller_of(obj)
    return r is not None and r.get("uid") == meta(owner).get("uid")


def owner_ref(owner, kind, api_version):
    return {"apiVersion": api_version, "kind": kind, "name": meta(owner)["name"],
            "uid": meta(owner)["uid"], "controller": True, "blockOwnerDeletion": True}


def condition(obj, ctype):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def pod_ready(pod):
    c = condition(pod, "Ready")
    return c is not None and c.get("status") == "True"


def pod_terminating(pod):
    return meta(pod).get("deletionTimestamp") is not None


def pod_active(pod):
    """Not terminal and not being deleted (what controllers count)."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not pod_terminating(pod)


def template_hash(template, length=10):
    """A stable hash of a pod template (the pod-template-hash / controller-revision-hash suffix)."""
    raw = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(raw).hexdigest()[:length]


def int_or_percent(value, total, round_up):
    """maxSurge / maxUnavailable: an int, or "25%" of `total` rounded up or down."""
    if isinstance(value, str) and value.endswith("%"):
        x = int(value[:-1]) * total
        return -(-x // 100) if round_up else x // 100
    return int(value)
