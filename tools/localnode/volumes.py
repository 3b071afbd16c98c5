"""Pod volumes as host directories: emptyDir, configMap, secret, downwardAPI, projected,
persistentVolumeClaim (a local directory per claim) and hostPath.

ConfigMap, Secret and downward-API volumes are written as the kubelet writes them: the files live
in a timestamped directory, `..data` links to it, and each key links through `..data`, so an
update swaps one symlink and a reader never sees half a change. Updates reach mounts of the whole
volume, not subPath mounts (as upstream).
"""
import base64
import os
import shutil
import time

from podenv import MissingRef, field_value


class Pending(Exception):
    """The pod cannot start yet (missing object, unbound claim); the message says why."""


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def atomic_write(dirpath, files, mode=0o644, owner=None):
    """Makes `dirpath` hold exactly `files` {relative path: bytes}; returns True when changed."""
    os.makedirs(dirpath, exist_ok=True)
    data_link = os.path.join(dirpath, "..data")
    if os.path.islink(data_link):
        cur = os.path.join(dirpath, os.readlink(data_link))
        same = True
        for rel, content in files.items():
            p = os.path.join(cur, rel)
            if not os.path.isfile(p) or read_bytes(p) != content:
                same = False
                break
        listed = {os.path.relpath(os.path.join(r, f), cur) for r, _, fs in os.walk(cur) for f in fs}
        if same and listed == set(files):
            return False
    stamp = f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
    tsdir = os.path.join(dirpath, stamp)
    os.makedirs(tsdir)
    for rel, content in files.items():
        p = os.path.join(tsdir, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(content)
        os.chmod(p, mode)
        if owner:
            os.chown(p, *owner)
    tmp = os.path.join(dirpath, "..data_tmp")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(stamp, tmp)
    old = os.readlink(data_link) if os.path.islink(data_link) else None
    os.rename(tmp, data_link)
    tops = {rel.split("/")[0] for rel in files}
    for top in tops:
        link = os.path.join(dirpath, top)
        if not os.path.lexists(link):
            os.symlink(os.path.join("..data", top), link)
    for name in os.listdir(dirpath):
        if not name.startswith("..") and name not in tops:
            os.unlink(os.path.join(dirpath, name))
    if old and old != stamp:
        shutil.rmtree(os.path.join(dirpath, old), ignore_errors=True)
    return True


def _items(data, items, kind, name, optional):
    """{path: bytes} of a configMap/secret source with its optional `items` selection."""
    if items:
        out = {}
        for it in items:
            if it["key"] not in data:
                if optional:
                    continue
                raise Pending(f"key {it['key']!r} not in {kind} {name!r}")
            out[it["path"]] = data[it["key"]]
        return out
    return dict(data)


def source_files(src, pod, ns_objects):
    """{path: bytes} of one configMap / secret / downwardAPI source (volume or projected)."""
    configmaps, secrets = ns_objects
    if "configMap" in src:
        s = src["configMap"]
        cm = configmaps.get(s["name"])
        if cm is None:
            if s.get("optional"):
                return {}
            raise Pending(f"configmap {s['name']!r} not found")
        data = {k: v.encode() for k, v in (cm.get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
        return _items(data, s.get("items"), "configmap", s["name"], s.get("optional"))
    if "secret" in src:
        s = src["secret"]
        name = s.get("secretName") or s.get("name")
        sec = secrets.get(name)
        if sec is None:
            if s.get("optional"):
                return {}
            raise Pending(f"secret {name!r} not found")
        data = {k: base64.b64decode(v) for k, v in (sec.get("data") or {}).items()}
        data.update({k: v.encode() for k, v in (sec.get("stringData") or {}).items()})
        return _items(data, s.get("items"), "secret", name, s.get("optional"))
    if "downwardAPI" in src:
        out = {}
        for it in src["downwardAPI"].get("items") or []:
            if "fieldRef" in it:
                try:
                    out[it["path"]] = field_value(pod, it["fieldRef"]["fieldPath"]).encode()
                except MissingRef as e:
                    raise Pending(str(e))
        return out
    return {}


def materialize(vol, pod, pod_dir, pv_root, ns_objects, pvcs, owner):
    """The host directory of volume `vol` (created or refreshed). Raises Pending."""
    name = vol["name"]
    path = os.path.join(pod_dir, "volumes", name)
    ns = pod["metadata"]["namespace"]
    if "emptyDir" in vol:
        if not os.path.isdir(path):
            os.makedirs(path)
            os.chmod(path, 0o777)  # as upstream: world-writable
        return path
    if "hostPath" in vol:
        hp = vol["hostPath"]
        if not os.path.exists(hp["path"]):
            if hp.get("type") in ("DirectoryOrCreate",):
                os.makedirs(hp["path"], mode=0o755)
            else:
                raise Pending(f"hostPath {hp['path']!r} does not exist")
        return hp["path"]
    if "persistentVolumeClaim" in vol:
        claim = vol["persistentVolumeClaim"]["claimName"]
        pvc = pvcs.get(claim)
        if pvc is None:
            raise Pending(f"persistentvolumeclaim {claim!r} not found")
        if (pvc.get("status") or {}).get("phase") != "Bound":
            raise Pending(f"persistentvolumeclaim {claim!r} is not bound")
        return pvc_dir(pv_root, ns, claim)
    mode = vol.get(next((k for k in PROJECTED if k in vol), ""), {}).get("defaultMode", 0o644)
    files = volume_files(vol, pod, ns_objects)
    if files is None:
        raise Pending(f"volume {name!r}: unsupported type {sorted(k for k in vol if k != 'name')}")
    atomic_write(path, files, mode, owner)
    return path


PROJECTED = ("configMap", "secret", "downwardAPI", "projected")


def volume_files(vol, pod, ns_objects):
    """{path: bytes} of a configMap / secret / downwardAPI / projected volume; None for other kinds."""
    if "projected" in vol:
        files = {}
        for src in vol["projected"].get("sources") or []:
            files.update(source_files(src, pod, ns_objects))
        return files
    if any(k in vol for k in PROJECTED):
        return source_files(vol, pod, ns_objects)
    return None


def pvc_dir(pv_root, ns, claim):
    return os.path.join(pv_root, ns, claim)


def mount_source(vol_path, mount):
    """Host path to bind for a volumeMount, with its subPath (created when missing, as upstream)."""
    sub = mount.get("subPath")
    if not sub:
        return vol_path
    if sub.startswith("/") or ".." in sub.split("/"):
        raise Pending(f"subPath {sub!r} must be relative and stay inside the volume")
    p = os.path.join(vol_path, sub)
    if not os.path.lexists(p):
        os.makedirs(p)
        os.chmod(p, os.stat(vol_path).st_mode & 0o7777)  # the volume's mode, as a kubelet makes it
    return os.path.realpath(p) if os.path.islink(p) and os.path.realpath(p).startswith(vol_path) else p
