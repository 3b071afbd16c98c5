"""Garbage collection by ownerReferences: background (dependents of a vanished owner go),
foreground (the `foregroundDeletion` finalizer waits for blocking dependents) and orphan."""
import logging

from objects import meta

log = logging.getLogger("gc")


def dependents(owner_uid, objects):
    return [(plural, o) for plural, o in objects
            if any(r.get("uid") == owner_uid for r in meta(o).get("ownerReferences") or [])]


def plan(objects):
    """Actions over all watched `objects` [(plural, obj)]: ("delete", plural, obj, policy),
    ("unfinalize", plural, obj, finalizer), ("orphan", plural, obj, owner_uid)."""
    uids = {meta(o).get("uid") for _, o in objects}
    actions = []
    for plural, o in objects:
        md = meta(o)
        fins = md.get("finalizers") or []
        if md.get("deletionTimestamp") and "foregroundDeletion" in fins:
            deps = dependents(md["uid"], objects)
            for dp, d in deps:
                if not meta(d).get("deletionTimestamp"):
                    actions.append(("delete", dp, d, "Foreground"))
            blocking = [d for dp, d in deps if any(
                r.get("uid") == md["uid"] and r.get("blockOwnerDeletion") for r in meta(d).get("ownerReferences") or [])]
            if not blocking:
                actions.append(("unfinalize", plural, o, "foregroundDeletion"))
        if md.get("deletionTimestamp") and "orphan" in fins:
            for dp, d in dependents(md["uid"], objects):
                actions.append(("orphan", dp, d, md["uid"]))
            actions.append(("unfinalize", plural, o, "orphan"))
        refs = md.get("ownerReferences") or []
        if refs and not md.get("deletionTimestamp") and all(r.get("uid") not in uids for r in refs):
            actions.append(("delete", plural, o, "Background"))
    return actions


def run(api, objects, prefixes):
    """Applies plan(); `prefixes` maps a plural to its API prefix for custom resources."""
    for action, plural, o, arg in plan(objects):
        ns, name = meta(o).get("namespace"), meta(o)["name"]
        prefix = prefixes.get(plural)
        if action == "delete":
            log.info("gc: delete %s %s/%s (%s)", plural, ns, name, arg)
            api.delete(plural, ns, name, propagation=arg, prefix=prefix)
        elif action == "unfinalize":
            fins = [f for f in meta(o).get("finalizers") or [] if f != arg]
            api.patch(plural, ns, name, {"metadata": {"finalizers": fins or None,
                                                       "resourceVersion": meta(o)["resourceVersion"]}},
                      prefix=prefix)
        else:
            refs = [r for r in meta(o).get("ownerReferences") or [] if r.get("uid") != arg]
            api.patch(plural, ns, name, {"metadata": {"ownerReferences": refs or None}}, prefix=prefix)
