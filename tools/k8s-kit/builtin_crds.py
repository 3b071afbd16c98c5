"""CRDs that stand in for Kubernetes' built-in kinds on the kit's API server (see README.md).

usage: python3 builtin_crds.py ETCD_PREFIX

Prints "<etcd key><TAB><CRD as JSON>" per kind; up.sh puts them straight into etcd before the API
server starts, because the CRD API refuses groups such as "" (core) and "apps". Each stand-in keeps
whatever object it is sent (open schema), with a status subresource (and scale for the workloads
that have one); none of the real kind's defaults or validation apply.

A kind added here must be in client-go's scheme (apiserver/bodies.go uses its Go type), and a new
group belongs in apiserver/patches/02-standin-unconditional-update.patch too.
"""
import json
import sys
import uuid
from datetime import datetime, timezone

STANDIN_LABEL = "k8s-test-kit/stand-in"  # tools/localnode skips CRDs that carry it

# Flags: "ns" namespaced, "all" in kubectl's `get all`, "scale" has the scale subresource.
# Entries: (Kind, plural, short names, flags)
BUILTIN = {
    "v1": [
        ("Namespace", "namespaces", ["ns"], ""),
        ("Node", "nodes", ["no"], ""),
        ("PersistentVolume", "persistentvolumes", ["pv"], ""),
        ("Pod", "pods", ["po"], "ns all"),
        ("Service", "services", ["svc"], "ns all"),
        ("Endpoints", "endpoints", ["ep"], "ns"),
        ("ConfigMap", "configmaps", ["cm"], "ns"),
        ("Secret", "secrets", [], "ns"),
        ("ServiceAccount", "serviceaccounts", ["sa"], "ns"),
        ("Event", "events", ["ev"], "ns"),
        ("PersistentVolumeClaim", "persistentvolumeclaims", ["pvc"], "ns"),
    ],
    "apps/v1": [
        ("Deployment", "deployments", ["deploy"], "ns all scale"),
        ("ReplicaSet", "replicasets", ["rs"], "ns all scale"),
        ("StatefulSet", "statefulsets", ["sts"], "ns all scale"),
        ("DaemonSet", "daemonsets", ["ds"], "ns all"),
        ("ControllerRevision", "controllerrevisions", [], "ns"),
    ],
    "batch/v1": [
        ("Job", "jobs", [], "ns all"),
        ("CronJob", "cronjobs", ["cj"], "ns all"),
    ],
    "autoscaling/v2": [("HorizontalPodAutoscaler", "horizontalpodautoscalers", ["hpa"], "ns all")],
    "policy/v1": [("PodDisruptionBudget", "poddisruptionbudgets", ["pdb"], "ns")],
    "networking.k8s.io/v1": [
        ("Ingress", "ingresses", ["ing"], "ns"),
        ("NetworkPolicy", "networkpolicies", ["netpol"], "ns"),
    ],
    "discovery.k8s.io/v1": [("EndpointSlice", "endpointslices", [], "ns")],
    "coordination.k8s.io/v1": [("Lease", "leases", [], "ns")],
    "events.k8s.io/v1": [("Event", "events", ["ev"], "ns")],
    "rbac.authorization.k8s.io/v1": [
        ("Role", "roles", [], "ns"),
        ("RoleBinding", "rolebindings", [], "ns"),
        ("ClusterRole", "clusterroles", [], ""),
        ("ClusterRoleBinding", "clusterrolebindings", [], ""),
    ],
}


# Field selectors beyond metadata.name/namespace, as kube-apiserver serves them for these kinds: a CRD
# selects only on the fields it declares (`selectableFields`), each typed in its schema. The operator
# lists the Events about one PersistentVolumeClaim (involvedObject.kind and .name). At most 8 a kind.
SELECTABLE = {
    ("v1", "events"): ["involvedObject.kind", "involvedObject.name", "involvedObject.namespace",
                       "involvedObject.uid", "reason", "type"],
}


def open_schema(selectable):
    """An open object schema in which each dotted path of `selectable` is a typed string."""
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    for path in selectable:
        node = schema
        *parents, leaf = path.split(".")
        for p in parents:
            node = node.setdefault("properties", {}).setdefault(
                p, {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
        node.setdefault("properties", {})[leaf] = {"type": "string"}
    return schema


def standin(group_version, kind, plural, short, flags, now):
    """The CRD object for one built-in kind, already Established (nothing else would mark it)."""
    group, _, version = group_version.rpartition("/")
    flags = flags.split()
    selectable = SELECTABLE.get((group_version, plural), [])
    names = {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": kind + "List"}
    if short:
        names["shortNames"] = short
    if "all" in flags:
        names["categories"] = ["all"]
    subresources = {"status": {}}
    if "scale" in flags:
        subresources["scale"] = {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}
    conditions = [
        {"type": t, "status": "True", "reason": reason, "message": "tools/k8s-kit stand-in",
         "lastTransitionTime": now}
        for t, reason in (("NamesAccepted", "NoConflicts"), ("Established", "InitialNamesAccepted"))
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}", "uid": str(uuid.uuid4()), "generation": 1,
                     "creationTimestamp": now, "labels": {STANDIN_LABEL: "true"}},
        "spec": {
            "group": group,
            "scope": "Namespaced" if "ns" in flags else "Cluster",
            "names": names,
            "versions": [dict({
                "name": version, "served": True, "storage": True, "subresources": subresources,
                "schema": {"openAPIV3Schema": open_schema(selectable)},
            }, **({"selectableFields": [{"jsonPath": "." + f} for f in selectable]} if selectable else {}))],
        },
        "status": {"acceptedNames": names, "storedVersions": [version], "conditions": conditions},
    }


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    prefix = sys.argv[1].rstrip("/")
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    for group_version, kinds in BUILTIN.items():
        for kind, plural, short, flags in kinds:
            crd = standin(group_version, kind, plural, short, flags, now)
            key = f"{prefix}/apiextensions.k8s.io/customresourcedefinitions/{crd['metadata']['name']}"
            print(key + "\t" + json.dumps(crd, separators=(",", ":")))


if __name__ == "__main__":
    main()
