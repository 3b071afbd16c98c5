"""Pod networking: one bridge on the host with the first address of the pod subnet, and per pod
a network namespace with a veth (eth0) and its own address, no route beyond the subnet."""
import ipaddress
import logging
import os
import subprocess

log = logging.getLogger("netns")


def sh(*cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r


class Network:
    """Names are derived from `tag` so that several nodes (and leftovers of a crashed one) can be
    told apart and cleaned up."""

    def __init__(self, tag, subnet):
        self.tag = tag
        self.net = ipaddress.ip_network(subnet)
        hosts = self.net.hosts()
        self.gateway = str(next(hosts))
        self.bridge = f"{tag}br"
        self.free = hosts  # a generator of addresses; freed ones are reused first
        self.released = []

    def up(self):
        self.cleanup()
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.gateway}/{self.net.prefixlen}", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        with open("/proc/sys/net/ipv4/ip_forward") as f:
            log.info("bridge %s %s/%d (ip_forward=%s)", self.bridge, self.gateway, self.net.prefixlen, f.read().strip())

    def netns_name(self, uid):
        return f"{self.tag}-{uid[:13]}"

    def allocate(self):
        return self.released.pop(0) if self.released else str(next(self.free))

    def add_pod(self, uid, hostname):
        """Creates the pod's netns; returns (netns name, IP)."""
        ns = self.netns_name(uid)
        ip = self.allocate()
        veth = f"{self.tag}{uid[:8]}"[:15]
        sh("ip", "netns", "add", ns)
        try:
            sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "link", "set", veth, "master", self.bridge)
            sh("ip", "link", "set", veth, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "addr", "add", f"{ip}/{self.net.prefixlen}", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            # No default route: pods reach the pod subnet and the bridge (the node) only.
            os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
            with open(f"/etc/netns/{ns}/hostname", "w") as f:
                f.write(hostname + "\n")
        except Exception:
            self.del_pod(uid, ip)
            raise
        return ns, ip

    def del_pod(self, uid, ip=None):
        ns = self.netns_name(uid)
        sh("ip", "netns", "del", ns, check=False)  # the veth goes with it
        for f in ("hosts", "hostname"):
            try:
                os.unlink(f"/etc/netns/{ns}/{f}")
            except FileNotFoundError:
                pass
        try:
            os.rmdir(f"/etc/netns/{ns}")
        except OSError:
            pass
        if ip:
            self.released.append(ip)

    def cleanup(self):
        """Removes every netns, /etc/netns entry and link of this tag (also a crashed run's)."""
        out = sh("ip", "netns", "list", check=False).stdout
        for line in out.splitlines():
            name = line.split()[0] if line.strip() else ""
            if name.startswith(self.tag + "-"):
                sh("ip", "netns", "del", name, check=False)
        if os.path.isdir("/etc/netns"):
            for name in os.listdir("/etc/netns"):
                if name.startswith(self.tag + "-"):
                    sh("rm", "-rf", f"/etc/netns/{name}", check=False)
        sh("ip", "link", "del", self.bridge, check=False)
