"""A small Kubernetes API client: kubeconfig with embedded client certificates, JSON requests.

Only what the local node needs (list, get, create, delete, merge patches of objects and of their
status subresource), over one keep-alive HTTPS connection per thread.
"""
import base64
import http.client
import json
import os
import ssl
import tempfile
import threading
import urllib.parse

import yaml

# plural -> (API prefix, namespaced)
KINDS = {
    "namespaces": ("/api/v1", False),
    "nodes": ("/api/v1", False),
    "pods": ("/api/v1", True),
    "services": ("/api/v1", True),
    "configmaps": ("/api/v1", True),
    "secrets": ("/api/v1", True),
    "serviceaccounts": ("/api/v1", True),
    "persistentvolumeclaims": ("/api/v1", True),
    "events": ("/api/v1", True),
    "deployments": ("/apis/apps/v1", True),
    "replicasets": ("/apis/apps/v1", True),
    "statefulsets": ("/apis/apps/v1", True),
    "controllerrevisions": ("/apis/apps/v1", True),
    "endpointslices": ("/apis/discovery.k8s.io/v1", True),
    "networkpolicies": ("/apis/networking.k8s.io/v1", True),
    "poddisruptionbudgets": ("/apis/policy/v1", True),
    "horizontalpodautoscalers": ("/apis/autoscaling/v2", True),
    "leases": ("/apis/coordination.k8s.io/v1", True),
    "roles": ("/apis/rbac.authorization.k8s.io/v1", True),
    "rolebindings": ("/apis/rbac.authorization.k8s.io/v1", True),
}
KIND_NAMES = {
    "Namespace": "namespaces", "Node": "nodes", "Pod": "pods", "Service": "services",
    "ConfigMap": "configmaps", "Secret": "secrets", "ServiceAccount": "serviceaccounts",
    "PersistentVolumeClaim": "persistentvolumeclaims", "Deployment": "deployments",
    "ReplicaSet": "replicasets", "StatefulSet": "statefulsets",
    "ControllerRevision": "controllerrevisions", "EndpointSlice": "endpointslices",
}


class ApiError(Exception):
    """A request the API server answered with an error status."""

    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body


def load_kubeconfig(path):
    """(server URL, CA PEM bytes, client cert PEM bytes, client key PEM bytes) of the current context."""
    with open(path) as f:
        cfg = yaml.safe_load(f)
    ctx_name = cfg.get("current-context") or cfg["contexts"][0]["name"]
    ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in cfg["users"] if u["name"] == ctx["user"])

    def data(obj, key):
        if obj.get(key + "-data"):
            return base64.b64decode(obj[key + "-data"])
        with open(obj[key], "rb") as f:
            return f.read()

    return (cluster["server"], data(cluster, "certificate-authority"),
            data(user, "client-certificate"), data(user, "client-key"))


def path_of(plural, ns=None, name=None, sub=None, prefix=None):
    """The URL path of a collection or object (`prefix` for kinds not in KINDS)."""
    base, namespaced = KINDS.get(plural, (prefix, True)) if prefix is None else (prefix, ns is not None)
    p = base
    if namespaced and ns:
        p += f"/namespaces/{ns}"
    p += f"/{plural}"
    if name:
        p += f"/{name}"
    if sub:
        p += f"/{sub}"
    return p


class Api:
    """Thread-safe: each thread keeps its own connection."""

    def __init__(self, kubeconfig):
        self.server, ca, cert, key = load_kubeconfig(kubeconfig)
        self.kubeconfig = kubeconfig
        u = urllib.parse.urlparse(self.server)
        self.host, self.port = u.hostname, u.port or 443
        self.ctx = ssl.create_default_context(cadata=ca.decode())
        with tempfile.NamedTemporaryFile(delete=False) as cf, tempfile.NamedTemporaryFile(delete=False) as kf:
            cf.write(cert)
            kf.write(key)
        try:
            self.ctx.load_cert_chain(cf.name, kf.name)
        finally:
            os.unlink(cf.name)
            os.unlink(kf.name)
        self.local = threading.local()

    def _conn(self, fresh=False):
        c = getattr(self.local, "conn", None)
        if c is None or fresh:
            c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=30)
            self.local.conn = c
        return c

    def request(self, method, path, body=None, ctype="application/json", query=None):
        """The decoded JSON answer; ApiError on a status >= 400."""
        if query:
            path += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = ctype
        for attempt in range(2):
            try:
                c = self._conn(fresh=attempt > 0)
                c.request(method, path, body=data, headers=headers)
                r = c.getresponse()
                raw = r.read()
                break
            except (http.client.HTTPException, OSError):
                if attempt:
                    raise
        if r.status >= 400:
            raise ApiError(r.status, raw.decode(errors="replace"))
        return json.loads(raw) if raw else {}

    def list(self, plural, ns=None, prefix=None, **query):
        return self.request("GET", path_of(plural, ns, prefix=prefix), query=query or None).get("items", [])

    def get(self, plural, ns, name, prefix=None):
        """The object, or None when it does not exist."""
        try:
            return self.request("GET", path_of(plural, ns, name, prefix=prefix))
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def create(self, plural, ns, obj):
        """Creates `obj`; returns None when it already exists."""
        try:
            return self.request("POST", path_of(plural, ns), obj)
        except ApiError as e:
            if e.status == 409:
                return None
            raise

    def delete(self, plural, ns, name, propagation=None, prefix=None):
        """Deletes; a missing object is not an error."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation:
            body["propagationPolicy"] = propagation
        try:
            return self.request("DELETE", path_of(plural, ns, name, prefix=prefix), body)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def patch(self, plural, ns, name, patch, sub=None, prefix=None):
        """JSON merge patch; returns None when the object is gone."""
        try:
            return self.request("PATCH", path_of(plural, ns, name, sub, prefix=prefix), patch,
                                ctype="application/merge-patch+json")
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def put(self, plural, ns, name, obj, sub=None):
        return self.request("PUT", path_of(plural, ns, name, sub), obj)
