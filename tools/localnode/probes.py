"""Container probes and lifecycle handlers: httpGet, tcpSocket and exec, with upstream defaults
(period 10 s, timeout 1 s, success 1, failure 3)."""
import http.client
import socket
import ssl
import subprocess


def resolve_port(port, container):
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return p["containerPort"]
    raise ValueError(f"no container port named {port!r}")


def timings(probe):
    return {"initial": probe.get("initialDelaySeconds", 0), "period": probe.get("periodSeconds", 10),
            "timeout": probe.get("timeoutSeconds", 1), "success": probe.get("successThreshold", 1),
            "failure": probe.get("failureThreshold", 3)}


def run(handler, container, pod_ip, exec_fn, timeout):
    """(ok, message) of one check. `exec_fn(cmd, timeout)` runs a command in the container (the
    runtime's exec) and returns a CompletedProcess; it raises OSError when the container is not running."""
    try:
        if "httpGet" in handler:
            h = handler["httpGet"]
            port = resolve_port(h["port"], container)
            host = h.get("host") or pod_ip
            if h.get("scheme", "HTTP").upper() == "HTTPS":
                c = http.client.HTTPSConnection(host, port, timeout=timeout,
                                                context=ssl._create_unverified_context())
            else:
                c = http.client.HTTPConnection(host, port, timeout=timeout)
            headers = {x["name"]: x["value"] for x in h.get("httpHeaders") or []}
            headers.setdefault("User-Agent", "kube-probe/1.36")
            c.request("GET", h.get("path", "/"), headers=headers)
            r = c.getresponse()
            body = r.read(1024)
            c.close()
            if 200 <= r.status < 400:
                return True, ""
            return False, f"HTTP probe failed with statuscode: {r.status} {body[:200]!r}"
        if "tcpSocket" in handler:
            t = handler["tcpSocket"]
            with socket.create_connection((t.get("host") or pod_ip, resolve_port(t["port"], container)), timeout):
                return True, ""
        if "exec" in handler:
            r = exec_fn(list(handler["exec"]["command"]), timeout)
            if r.returncode == 0:
                return True, ""
            return False, f"command exited {r.returncode}: {(r.stdout + r.stderr)[-200:]!r}"
        if "sleep" in handler:
            return True, ""
        return False, f"unsupported handler {sorted(handler)}"
    except subprocess.TimeoutExpired:
        return False, f"command timed out after {timeout}s"
    except (OSError, ValueError, TypeError, KeyError, http.client.HTTPException) as e:
        # TypeError/KeyError: a malformed handler (the kit does not validate pods) fails the probe.
        return False, f"{type(e).__name__}: {e}"
