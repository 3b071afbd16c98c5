"""TCP forwarding: the API server's loopback port onto the bridge (for pods that run kubectl-like
clients such as the operator), and `port-forward` from the host to a Service or pod."""
import itertools
import logging
import socket
import threading

log = logging.getLogger("forward")


def _pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(listen, target_of, stop=None):
    """Accepts on `listen` (host, port); `target_of()` gives each connection's (host, port) or
    raises LookupError (the connection is closed). Runs in a daemon thread; returns the socket."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(listen)
    srv.listen(128)

    def loop():
        while stop is None or not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                return
            try:
                target = target_of()
                u = socket.create_connection(target, timeout=10)
                u.settimeout(None)
            except (LookupError, OSError) as e:
                log.warning("forward %s: no target: %s", listen, e)
                c.close()
                continue
            threading.Thread(target=_pipe, args=(c, u), daemon=True).start()
            threading.Thread(target=_pipe, args=(u, c), daemon=True).start()

    threading.Thread(target=loop, daemon=True, name=f"forward {listen}").start()
    return srv


def service_targets(api, ns, kind, name, port):
    """A callable giving the next (ip, port) for `svc/NAME PORT` (ready endpoints, round robin) or
    `pod/NAME PORT`."""
    counter = itertools.count()

    def pick():
        if kind == "pod":
            pod = api.get("pods", ns, name)
            ip = ((pod or {}).get("status") or {}).get("podIP")
            if not ip:
                raise LookupError(f"pod {ns}/{name} has no IP")
            return ip, port
        svc = api.get("services", ns, name)
        if svc is None:
            raise LookupError(f"service {ns}/{name} not found")
        sport = next((p for p in svc["spec"].get("ports") or [] if p["port"] == port), None)
        if sport is None:
            raise LookupError(f"service {ns}/{name} has no port {port}")
        targets = []
        for s in api.list("endpointslices", ns, labelSelector=f"kubernetes.io/service-name={name}"):
            tport = next((p["port"] for p in s.get("ports") or [] if p.get("name", "") == sport.get("name", "")), None)
            for e in s.get("endpoints") or []:
                if e["conditions"].get("ready") and tport:
                    targets.append((e["addresses"][0], tport))
        if not targets:
            raise LookupError(f"service {ns}/{name} has no ready endpoint")
        targets.sort()
        return targets[next(counter) % len(targets)]

    return pick
