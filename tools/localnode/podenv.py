"""Pod environment and command lines: env/envFrom resolution, the downward API's field paths,
and $(VAR) expansion, as the kubelet does them."""
import base64
import re


class MissingRef(Exception):
    """A referenced ConfigMap, Secret or key that does not exist (the container cannot start)."""


def field_value(pod, path):
    """A downward-API fieldPath of `pod` (metadata.name/namespace/uid/labels['k']/annotations['k'],
    spec.nodeName, spec.serviceAccountName, status.podIP, status.hostIP)."""
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    md = pod.get("metadata") or {}
    if m:
        return (md.get(m.group(1)) or {}).get(m.group(2), "")
    simple = {
        "metadata.name": md.get("name", ""),
        "metadata.namespace": md.get("namespace", ""),
        "metadata.uid": md.get("uid", ""),
        "spec.nodeName": (pod.get("spec") or {}).get("nodeName", ""),
        "spec.serviceAccountName": (pod.get("spec") or {}).get("serviceAccountName", "default"),
        "status.podIP": (pod.get("status") or {}).get("podIP", ""),
        "status.hostIP": (pod.get("status") or {}).get("hostIP", ""),
    }
    if path in simple:
        return simple[path]
    if path == "metadata.labels":
        return "\n".join(f'{k}="{v}"' for k, v in sorted((md.get("labels") or {}).items()))
    if path == "metadata.annotations":
        return "\n".join(f'{k}="{v}"' for k, v in sorted((md.get("annotations") or {}).items()))
    raise MissingRef(f"unsupported fieldPath {path!r}")


_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "m": 0.001}


def quantity(q):
    """A resource quantity ("2Gi", "500m", "1.5") as a float of base units."""
    m = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(q).strip())
    if not m or m.group(2) not in _UNITS:
        raise ValueError(f"bad quantity {q!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def resource_value(container, ref):
    """resourceFieldRef: limits.cpu / requests.memory ... divided by the divisor, rounded up."""
    section, _, res = ref["resource"].partition(".")
    raw = ((container.get("resources") or {}).get(section) or {}).get(res)
    if raw is None:
        return "0"
    divisor = quantity(ref.get("divisor", "1"))
    return str(int(-(-quantity(raw) // divisor)))


def _lookup(kind, objs, name, key, optional):
    obj = objs.get(name)
    if obj is None:
        if optional:
            return None
        raise MissingRef(f"{kind} {name!r} not found")
    if kind == "secret":
        data = {k: base64.b64decode(v).decode(errors="replace") for k, v in (obj.get("data") or {}).items()}
        data.update(obj.get("stringData") or {})
    else:
        data = dict(obj.get("data") or {})
    if key is None:
        return data
    if key not in data:
        if optional:
            return None
        raise MissingRef(f"key {key!r} not in {kind} {name!r}")
    return data[key]


def expand(text, env):
    """$(VAR) expansion: a defined VAR is replaced, an undefined one kept, $$ escapes."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", sub, text)


def resolve_env(pod, container, configmaps, secrets, base=None):
    """The container's environment: `base` (e.g. KUBECONFIG), then envFrom, then env in order,
    each value expanded against what came before. Raises MissingRef for a required reference."""
    env = dict(base or {})
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix", "")
        if "configMapRef" in src:
            r = src["configMapRef"]
            data = _lookup("configmap", configmaps, r["name"], None, r.get("optional", False))
        else:
            r = src["secretRef"]
            data = _lookup("secret", secrets, r["name"], None, r.get("optional", False))
        for k, v in (data or {}).items():
            env[prefix + k] = v
    for e in container.get("env") or []:
        if "valueFrom" not in e:
            env[e["name"]] = expand(e.get("value", ""), env)
            continue
        vf = e["valueFrom"]
        if "fieldRef" in vf:
            value = field_value(pod, vf["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in vf:
            value = resource_value(container, vf["resourceFieldRef"])
        elif "secretKeyRef" in vf:
            r = vf["secretKeyRef"]
            value = _lookup("secret", secrets, r["name"], r["key"], r.get("optional", False))
        elif "configMapKeyRef" in vf:
            r = vf["configMapKeyRef"]
            value = _lookup("configmap", configmaps, r["name"], r["key"], r.get("optional", False))
        else:
            raise MissingRef(f"env {e['name']}: unsupported valueFrom {sorted(vf)}")
        if value is not None:
            env[e["name"]] = value
    return env
