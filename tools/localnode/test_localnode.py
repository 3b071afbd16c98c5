"""Unit tests of the local node (no API server; RuntimeTest needs root and podman with runc):
python3 -m unittest discover -s tools/localnode -p 'test_*.py'"""
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import types
import unittest
import unittest.mock

import container
import deployment
import endpoints
import garbage
import kubelet
import podenv
import runtime
import statefulset
import volumes
from objects import selector_matches


def pod(name, ns="ns", ready=True, labels=None, phase="Running", deleting=False, uid=None, ip="10.0.0.2",
        owner=None, hostname=None, subdomain=None):
    md = {"name": name, "namespace": ns, "uid": uid or f"uid-{name}", "labels": labels or {}}
    if deleting:
        md["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if owner:
        md["ownerReferences"] = [{"uid": owner, "controller": True, "name": "o", "kind": "X"}]
    spec = {"containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 8000}]}]}
    if hostname:
        spec.update(hostname=hostname, subdomain=subdomain)
    return {"metadata": md, "spec": spec,
            "status": {"phase": phase, "podIP": ip,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def sts(replicas=3, parallel=True, partition=0, rolling=True, current=None):
    s = {"metadata": {"name": "web", "namespace": "ns", "uid": "sts-uid", "generation": 2},
         "spec": {"replicas": replicas, "serviceName": "web",
                  "podManagementPolicy": "Parallel" if parallel else "OrderedReady",
                  "selector": {"matchLabels": {"app": "web"}},
                  "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}},
                  "updateStrategy": {"type": "RollingUpdate" if rolling else "OnDelete",
                                     "rollingUpdate": {"partition": partition}}},
         "status": {}}
    if current:
        s["status"]["currentRevision"] = current
    return s


def spod(o, rev, **kw):
    return pod(f"web-{o}", labels={statefulset.REVISION: rev}, **kw)


class StatefulSetTest(unittest.TestCase):
    def test_parallel_creates_every_missing_ordinal_at_the_update_revision(self):
        self.assertEqual(statefulset.plan(sts(3), [spod(1, "r1")], "r1"),
                         [("create", 0, "r1"), ("create", 2, "r1")])

    def test_ordered_ready_waits_for_the_previous_ordinal(self):
        s = sts(3, parallel=False)
        self.assertEqual(statefulset.plan(s, [], "r1"), [("create", 0, "r1")])
        self.assertEqual(statefulset.plan(s, [spod(0, "r1", ready=False)], "r1"), [])
        self.assertEqual(statefulset.plan(s, [spod(0, "r1")], "r1"), [("create", 1, "r1")])

    def test_scale_down_removes_the_highest_ordinals(self):
        pods = [spod(i, "r1") for i in range(4)]
        self.assertEqual(statefulset.plan(sts(2), pods, "r1"), [("delete", "web-3"), ("delete", "web-2")])
        self.assertEqual(statefulset.plan(sts(2, parallel=False), pods, "r1"), [("delete", "web-3")])

    def test_rolling_update_replaces_one_pod_at_a_time_from_the_top_down_to_the_partition(self):
        pods = [spod(i, "old") for i in range(3)]
        self.assertEqual(statefulset.plan(sts(3, current="old"), pods, "new"), [("delete", "web-2")])
        # Partition 2: ordinal 2 only; once it is updated and ready nothing else moves.
        s = sts(3, partition=2, current="old")
        self.assertEqual(statefulset.plan(s, pods, "new"), [("delete", "web-2")])
        pods[2] = spod(2, "new")
        self.assertEqual(statefulset.plan(s, pods, "new"), [])
        # A pod below the partition that is recreated keeps the current revision.
        self.assertEqual(statefulset.plan(s, pods[1:], "new"), [("create", 0, "old")])

    def test_rolling_update_waits_while_another_pod_is_unready(self):
        pods = [spod(0, "old", ready=False), spod(1, "old"), spod(2, "old")]
        self.assertEqual(statefulset.plan(sts(3, current="old"), pods, "new"), [])

    def test_on_delete_never_deletes_for_an_update(self):
        pods = [spod(i, "old") for i in range(2)]
        self.assertEqual(statefulset.plan(sts(2, rolling=False, current="old"), pods, "new"), [])

    def test_on_delete_recreates_a_deleted_pod_at_the_update_revision(self):
        s = sts(3, rolling=False, current="old")
        self.assertEqual(statefulset.plan(s, [spod(0, "old"), spod(2, "old")], "new"), [("create", 1, "new")])
        self.assertEqual(statefulset.plan(sts(2, parallel=False, rolling=False, current="old"), [spod(0, "old")],
                                          "new"), [("create", 1, "new")])

    def test_failed_pods_are_replaced(self):
        pods = [spod(0, "r1", phase="Failed"), spod(1, "r1")]
        self.assertEqual(statefulset.plan(sts(2), pods, "r1"), [("delete", "web-0")])

    def test_new_pod_has_identity_labels_hostname_and_claims(self):
        s = sts(1)
        s["spec"]["volumeClaimTemplates"] = [{"metadata": {"name": "data"}}]
        p = statefulset.new_pod(s, 4, "web-abc", s["spec"]["template"])
        lb = p["metadata"]["labels"]
        self.assertEqual((lb[statefulset.POD_INDEX], lb[statefulset.POD_NAME], lb[statefulset.REVISION]),
                         ("4", "web-4", "web-abc"))
        self.assertEqual((p["spec"]["hostname"], p["spec"]["subdomain"]), ("web-4", "web"))
        self.assertIn({"name": "data", "persistentVolumeClaim": {"claimName": "data-web-4"}}, p["spec"]["volumes"])
        self.assertEqual(p["metadata"]["ownerReferences"][0]["uid"], "sts-uid")

    def test_status_promotes_the_update_revision_when_all_pods_are_updated_and_ready(self):
        s = sts(2, current="old")
        st = statefulset.status(s, [spod(0, "new"), spod(1, "new")], "new", "old")
        self.assertEqual((st["currentRevision"], st["updatedReplicas"], st["readyReplicas"]), ("new", 2, 2))
        st = statefulset.status(s, [spod(0, "old"), spod(1, "new", ready=False)], "new", "old")
        self.assertEqual((st["currentRevision"], st["currentReplicas"], st["readyReplicas"]), ("old", 1, 1))

    def test_ordinal_of(self):
        self.assertEqual(statefulset.ordinal_of("a-b", "a-b-12"), 12)
        self.assertIsNone(statefulset.ordinal_of("a", "a-b-1"))


class DeploymentTest(unittest.TestCase):
    def dep(self, replicas, strategy=None):
        return {"metadata": {"name": "d", "namespace": "ns", "uid": "d"},
                "spec": {"replicas": replicas, "strategy": strategy or {}}}

    def rs(self, name, replicas, ready):
        return {"metadata": {"name": name}, "spec": {"replicas": replicas}, "status": {"readyReplicas": ready,
                                                                                       "replicas": replicas}}

    def test_rolling_update_surges_then_removes_old_pods_once_new_ones_are_ready(self):
        d = self.dep(1)  # 25%: surge 1, unavailable 0
        new, old = self.rs("new", 0, 0), self.rs("old", 1, 1)
        ready = lambda r: r["status"]["readyReplicas"]
        self.assertEqual(deployment.rollout(d, new, [old], ready), {"new": 1, "old": 1})
        new = self.rs("new", 1, 1)
        self.assertEqual(deployment.rollout(d, new, [old], ready), {"new": 1, "old": 0})

    def test_recreate_waits_for_old_pods_to_go(self):
        d = self.dep(2, {"type": "Recreate"})
        ready = lambda r: r["status"]["readyReplicas"]
        self.assertEqual(deployment.rollout(d, self.rs("new", 0, 0), [self.rs("old", 2, 2)], ready),
                         {"new": 0, "old": 0})
        self.assertEqual(deployment.rollout(d, self.rs("new", 0, 0), [self.rs("old", 0, 0)], ready),
                         {"new": 2, "old": 0})


def service(headless=False, publish=False):
    spec = {"selector": {"app": "a"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
            "publishNotReadyAddresses": publish}
    if headless:
        spec["clusterIP"] = "None"
    return {"metadata": {"name": "a", "namespace": "ns", "uid": "svc"}, "spec": spec}


def endpoint_conditions(svc, pods):
    (s,) = endpoints.slices(svc, pods, "node")
    return {e["targetRef"]["name"]: e["conditions"] for e in s["endpoints"]}, s


class EndpointsTest(unittest.TestCase):
    def test_conditions_follow_readiness_and_deletion(self):
        pods = [pod("p1", labels={"app": "a"}), pod("p2", labels={"app": "a"}, ready=False, ip="10.0.0.3"),
                pod("p3", labels={"app": "a"}, deleting=True, ip="10.0.0.4"), pod("x", labels={"app": "b"})]
        conds, s = endpoint_conditions(service(), pods)
        self.assertEqual(conds, {"p1": {"ready": True, "serving": True, "terminating": False},
                                 "p2": {"ready": False, "serving": False, "terminating": False},
                                 "p3": {"ready": False, "serving": True, "terminating": True}})
        self.assertEqual(s["ports"], [{"name": "http", "port": 8000, "protocol": "TCP"}])
        self.assertEqual(s["metadata"]["labels"][endpoints.SERVICE_NAME], "a")

    def test_publish_not_ready_addresses_makes_ready_true_but_not_serving(self):
        conds, _ = endpoint_conditions(service(publish=True), [
            pod("p2", labels={"app": "a"}, ready=False), pod("p3", labels={"app": "a"}, deleting=True)])
        self.assertEqual(conds["p2"], {"ready": True, "serving": False, "terminating": False})
        self.assertEqual(conds["p3"], {"ready": True, "serving": True, "terminating": True})

    def test_pods_without_ip_or_finished_are_left_out(self):
        self.assertEqual(endpoints.slices(service(), [pod("p", labels={"app": "a"}, ip=None),
                                                       pod("q", labels={"app": "a"}, phase="Succeeded")], "n"), [])

    def test_hosts_file_names_pods_and_services(self):
        svc = service(headless=True, publish=True)
        pods = [pod("web-0", labels={"app": "a"}, hostname="web-0", subdomain="a")]
        _, s = endpoint_conditions(svc, pods)
        recs = endpoints.dns_records([svc], [s])
        text = endpoints.hosts_file(recs, "ns", "10.0.0.9", ["me"])
        self.assertIn("10.0.0.2\tweb-0.a.ns.svc.cluster.local web-0.a.ns.svc web-0.a.ns web-0.a", text)
        self.assertIn("10.0.0.2\ta.ns.svc.cluster.local a.ns.svc a.ns a", text)
        self.assertIn("10.0.0.9\tme", text)
        other = endpoints.hosts_file(recs, "other", None, [])
        self.assertNotIn(" web-0.a\n", other)
        self.assertIn("web-0.a.ns.svc", other)

    def test_cluster_ip_service_resolves_to_one_ready_endpoint(self):
        svc = service()
        _, s = endpoint_conditions(svc, [pod("p2", labels={"app": "a"}, ready=False, ip="10.0.0.3"),
                                         pod("p1", labels={"app": "a"})])
        self.assertEqual(endpoints.dns_records([svc], [s]), [("10.0.0.2", ("ns", "a", None))])


class EnvTest(unittest.TestCase):
    def test_env_sources_and_expansion(self):
        p = pod("web-1", labels={"apps.kubernetes.io/pod-index": "1"})
        c = {"env": [{"name": "G", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}}},
                     {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                     {"name": "TOK", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}},
                     {"name": "CM", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
                     {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                     {"name": "URL", "value": "http://$(IP):80/$(G)/$(NOPE)/$$(G)"}],
             "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "X_"}],
             "resources": {"limits": {"memory": "2Gi"}}}
        cms = {"cm": {"data": {"k": "v"}}}
        secrets = {"s": {"data": {"token": base64.b64encode(b"t0k").decode()}}}
        env = podenv.resolve_env(p, c, cms, secrets, {"BASE": "1"})
        self.assertEqual(env, {"BASE": "1", "X_k": "v", "G": "1", "IP": "10.0.0.2", "TOK": "t0k", "CM": "v",
                               "MEM": "2048", "URL": "http://10.0.0.2:80/1/$(NOPE)/$(G)"})

    def test_missing_references_fail_unless_optional(self):
        c = {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}
        with self.assertRaises(podenv.MissingRef):
            podenv.resolve_env(pod("p"), c, {}, {})
        c["env"][0]["valueFrom"]["secretKeyRef"]["optional"] = True
        self.assertEqual(podenv.resolve_env(pod("p"), c, {}, {}), {})
        with self.assertRaises(podenv.MissingRef):
            podenv.resolve_env(pod("p"), {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "x"}}}]},
                               {}, {"s": {"data": {}}})

    def test_command_and_args_against_the_image(self):
        env = {"A": "1"}
        img = {"Entrypoint": ["/bin/e", "$(A)"], "Cmd": ["d"]}
        line = runtime.command_line
        # args replace CMD; command replaces ENTRYPOINT and drops CMD; $(VAR) only in the pod's parts.
        self.assertEqual(line({"args": ["x", "$(A)"]}, img, env), ["/bin/e", "$(A)", "x", "1"])
        self.assertEqual(line({}, img, env), ["/bin/e", "$(A)", "d"])
        self.assertEqual(line({"command": ["sleep"]}, img, env), ["sleep"])
        self.assertEqual(line({"command": ["sleep"], "args": ["$(A)"]}, img, env), ["sleep", "1"])
        self.assertEqual(line({}, {"Cmd": ["c", "-x"]}, env), ["c", "-x"])
        for c, i in (({}, {}), ({"args": []}, {"Cmd": ["c"]})):  # nothing left to run
            with self.assertRaises(runtime.ConfigError):
                line(c, i, env)

    def test_quantities(self):
        self.assertEqual(podenv.quantity("2Gi"), 2 * 2**30)
        self.assertEqual(podenv.quantity("500m"), 0.5)
        with self.assertRaises(ValueError):
            podenv.quantity("2GB")


class SelectorTest(unittest.TestCase):
    def test_expressions(self):
        sel = {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "In", "values": ["x"]},
                                                                {"key": "c", "operator": "DoesNotExist"}]}
        self.assertTrue(selector_matches(sel, {"a": "1", "b": "x"}))
        self.assertFalse(selector_matches(sel, {"a": "1", "b": "x", "c": ""}))
        self.assertFalse(selector_matches(None, {}))


class GcTest(unittest.TestCase):
    def obj(self, uid, owners=(), deleting=False, finalizers=None, block=True):
        md = {"name": uid, "namespace": "ns", "uid": uid, "resourceVersion": "1",
              "ownerReferences": [{"uid": o, "blockOwnerDeletion": block} for o in owners]}
        if deleting:
            md["deletionTimestamp"] = "t"
        if finalizers:
            md["finalizers"] = finalizers
        return {"metadata": md}

    def test_background_deletes_dependents_of_vanished_owners_only(self):
        objs = [("pods", self.obj("a", ["gone"])), ("pods", self.obj("b", ["gone", "c"])), ("pods", self.obj("c"))]
        self.assertEqual([(a, o["metadata"]["uid"]) for a, _, o, _ in garbage.plan(objs)], [("delete", "a")])

    def test_foreground_waits_for_blocking_dependents(self):
        owner = self.obj("o", deleting=True, finalizers=["foregroundDeletion"])
        dep = self.obj("d", ["o"])
        acts = [(a, o["metadata"]["uid"], x) for a, _, o, x in garbage.plan([("x", owner), ("pods", dep)])]
        self.assertEqual(acts, [("delete", "d", "Foreground")])
        acts = [(a, o["metadata"]["uid"]) for a, _, o, _ in garbage.plan([("x", owner)])]
        self.assertEqual(acts, [("unfinalize", "o")])

    def test_orphan_strips_owner_references(self):
        owner = self.obj("o", deleting=True, finalizers=["orphan"])
        acts = [(a, o["metadata"]["uid"]) for a, _, o, _ in garbage.plan([("x", owner), ("pods", self.obj("d", ["o"]))])]
        self.assertEqual(acts, [("orphan", "d"), ("unfinalize", "o")])


class VolumeTest(unittest.TestCase):
    def test_atomic_writer_swaps_data_and_drops_removed_keys(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertTrue(volumes.atomic_write(d, {"a": b"1", "b": b"2"}))
            self.assertFalse(volumes.atomic_write(d, {"a": b"1", "b": b"2"}))
            self.assertTrue(volumes.atomic_write(d, {"a": b"3"}))
            self.assertEqual(volumes.read_bytes(os.path.join(d, "a")), b"3")
            self.assertFalse(os.path.lexists(os.path.join(d, "b")))
            self.assertEqual(len([n for n in os.listdir(d) if n.startswith("..") and n != "..data"]), 1)

    def test_configmap_items_and_missing_objects(self):
        src = {"configMap": {"name": "cm", "items": [{"key": "k", "path": "sub/f"}]}}
        files = volumes.source_files(src, pod("p"), ({"cm": {"data": {"k": "v", "x": "y"}}}, {}))
        self.assertEqual(files, {"sub/f": b"v"})
        with self.assertRaises(volumes.Pending):
            volumes.source_files(src, pod("p"), ({}, {}))

    def test_sub_path_must_stay_inside(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(volumes.Pending):
                volumes.mount_source(d, {"subPath": "../x"})
            self.assertEqual(volumes.mount_source(d, {"subPath": "m"}), os.path.join(d, "m"))


def wait_for(cond, what, timeout=10):
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class TerminatingTest(unittest.TestCase):
    """A deleted pod keeps probing readiness and stays Ready until its containers stop (upstream)."""

    def worker(self, state, spec):
        kl = kubelet.Kubelet(None, types.SimpleNamespace(gateway="10.0.0.1"), state, "n", None, None, "t")
        return kubelet.PodWorker(kl, {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                                      "spec": {"containers": [spec]}})

    def test_a_terminating_ready_pod_is_serving_but_not_ready_in_its_endpoint_slice(self):
        with tempfile.TemporaryDirectory() as d:
            w = self.worker(d, {"name": "c", "ports": [{"name": "http", "containerPort": 8000}]})
            c = w.containers[0]
            c.proc, c.ready, c.state = types.SimpleNamespace(pid=1), True, {"running": {}}
            w.initialized, w.ip = True, "10.0.0.2"
            w.deleting.set()
            st = w.status()
            self.assertIn({"type": "Ready", "status": "True"},
                          [{k: x[k] for k in ("type", "status")} for x in st["conditions"]])
            p = {"metadata": {**w.obj["metadata"], "labels": {"app": "a"},
                              "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": w.obj["spec"], "status": st}
            conds, _ = endpoint_conditions(service(), [p])
            self.assertEqual(conds["p"], {"ready": False, "serving": True, "terminating": True})

    def test_readiness_is_still_probed_while_terminating_and_liveness_is_not(self):
        answers, calls = {"ready": True, "live": False}, []

        def fake_run(handler, *_):
            calls.append(handler["exec"]["command"][0])
            return answers[calls[-1]], ""

        def probe(cmd):
            return {"exec": {"command": [cmd]}, "periodSeconds": 0, "failureThreshold": 1}
        with tempfile.TemporaryDirectory() as d, unittest.mock.patch.object(container.probes, "run", fake_run):
            w = self.worker(d, {"name": "c", "readinessProbe": probe("ready"), "livenessProbe": probe("live")})
            c = w.containers[0]
            c.stopping.set()
            c.proc = subprocess.Popen(["sleep", "30"])
            t = threading.Thread(target=c._watch, daemon=True)
            t.start()
            try:
                wait_for(lambda: c.ready, "ready while terminating")
                answers["ready"] = False
                wait_for(lambda: not c.ready, "unready after a failed readiness probe")
            finally:
                c.proc.kill()
                c.proc.wait()
                t.join(5)
            self.assertNotIn("live", calls)


class RuntimeRulesTest(unittest.TestCase):
    """The kubelet's rules for the runtime, without one: user, create arguments."""

    def test_user_from_the_image_unless_the_security_context_sets_one(self):
        img = {"User": "1234:1234"}
        self.assertIsNone(runtime.run_as({}, {}, img))
        self.assertEqual(runtime.run_as({"securityContext": {"runAsUser": 7}}, {}, img), "7:1234")
        self.assertEqual(runtime.run_as({"securityContext": {"runAsUser": 7}},
                                        {"securityContext": {"runAsUser": 8, "runAsGroup": 9}}, img), "8:9")
        self.assertEqual(runtime.run_as({}, {"securityContext": {"runAsGroup": 9}}, {}), "0:9")

    def test_run_as_non_root_refuses_a_root_or_unverifiable_image_user(self):
        nr = {"securityContext": {"runAsNonRoot": True}}
        for user in ("", "0", "root", "0:0"):
            with self.assertRaisesRegex(runtime.ConfigError, "will run as root"):
                runtime.run_as(nr, {}, {"User": user})
        with self.assertRaisesRegex(runtime.ConfigError, "non-numeric user"):
            runtime.run_as(nr, {}, {"User": "app"})
        with self.assertRaisesRegex(runtime.ConfigError, "non-root policy"):
            runtime.run_as(nr, {"securityContext": {"runAsUser": 0}}, {"User": "1"})
        self.assertIsNone(runtime.run_as(nr, {}, {"User": "1234"}))
        self.assertEqual(runtime.run_as(nr, {"securityContext": {"runAsUser": 5}}, {}), "5")

    def test_create_arguments(self):
        a = runtime.create_args({
            "name": "t-u-c-0", "image": "img:1", "argv": ["/bin/x", "a b"], "hostname": "h",
            "netns": "/var/run/netns/t-u", "hosts": "/s/hosts", "env": ["SECRET"], "user": "5:6", "groups": [7],
            "mounts": [{"src": "/v/a", "dst": "/a", "ro": True}, {"src": "/v/b", "dst": "/b", "ro": False}],
            "limits": {"memory": "64Mi", "cpu": "500m"}, "security": {"readOnlyRootFilesystem": True},
            "labels": {runtime.LABEL: "t"}, "workdir": "/w"})
        line = " ".join(a)
        for want in ("--pull never", "--runtime runc", "--network ns:/var/run/netns/t-u", '--entrypoint ["/bin/x", "a b"]',
                     "type=bind,source=/s/hosts,destination=/etc/hosts,ro=true",
                     "type=bind,source=/v/a,destination=/a,ro=true", "type=bind,source=/v/b,destination=/b --env",
                     "--env SECRET", "--user 5:6", "--group-add 7", "--memory 67108864 --memory-swap 67108864",
                     "--cpus 0.5", "--read-only --read-only-tmpfs=false", "--workdir /w", "--hostname h"):
            self.assertIn(want, line)
        self.assertEqual(a[-1], "img:1")
        with self.assertRaises(runtime.ConfigError):
            runtime.create_args({"name": "n", "image": "i", "argv": ["x"], "hostname": "h", "netns": "/n",
                                 "mounts": [{"src": "/a,b", "dst": "/a"}]})


TEST_IMAGE = "localhost/localnode-test:"


def read(path):
    """A file's text, or "" while it does not exist."""
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""
HERE = os.path.dirname(os.path.abspath(__file__))


class FakeNet:
    """The pod's network namespace without the node's bridge (a loopback-only netns)."""

    def __init__(self, tag):
        self.tag, self.gateway, self.made = tag, "10.0.0.1", []

    def add_pod(self, uid, hostname):
        ns = f"{self.tag}-{uid[:8]}"
        subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True, capture_output=True)
        self.made.append(ns)
        return ns, "127.0.0.1"

    def del_pod(self, uid, ip=None):
        subprocess.run(["ip", "netns", "del", f"{self.tag}-{uid[:8]}"], capture_output=True)


class RuntimeTest(unittest.TestCase):
    """Containers started by the kubelet's own path (Container.run) from real images through podman
    with runc: root on a host with podman (what the node needs). The images are built from this
    host's binaries by testimages/build.sh."""

    @classmethod
    def setUpClass(cls):
        subprocess.run(["bash", os.path.join(HERE, "testimages", "build.sh")], check=True)

    def setUp(self):
        self.tag = f"lnt{os.getpid() % 100000}"
        self.state = tempfile.mkdtemp(prefix="localnode-rt-")
        self.addCleanup(shutil.rmtree, self.state, True)
        self.rt = runtime.Podman(self.tag)
        self.net = FakeNet(self.tag)
        self.kl = kubelet.Kubelet(None, self.net, self.state, "n", self.rt, None, self.tag, configmap_delay=0)
        self.addCleanup(self.rt.cleanup)

    def worker(self, containers, **spec):
        uid = f"{len(self.net.made):04d}{time.monotonic_ns() % 10**9:09d}"
        w = kubelet.PodWorker(self.kl, {"metadata": {"name": f"p{uid}", "namespace": "ns", "uid": uid},
                                        "spec": {"containers": containers, "restartPolicy": "Never",
                                                 "terminationGracePeriodSeconds": 2, **spec}})
        w.refresh(w.obj, ({"cm": {"data": {"k": "v1"}}}, {}), {})
        self.addCleanup(self.net.del_pod, uid)
        self.assertTrue(w._setup())
        return w

    def run_to_end(self, w, timeout=60):
        """Runs the pod's first container until it terminates; its status and log."""
        c = w.containers[0]
        c.start()
        if not c.done.wait(timeout):
            c.stop(0)
            self.fail(f"container did not finish within {timeout}s: {c.status()}")
        return c.status(), read(self.kl.log_path(w, c.name, c.restarts))

    def test_image_filesystem_entrypoint_cmd_user_env_volumes_and_hosts(self):
        w = self.worker([{"name": "c", "image": TEST_IMAGE + "user",
                          "env": [{"name": "E", "value": "from-pod"}],
                          "volumeMounts": [{"name": "cm", "mountPath": "/etc/cm", "readOnly": True},
                                           {"name": "scratch", "mountPath": "/scratch"},
                                           {"name": "scratch", "mountPath": "/sub", "subPath": "s"}]}],
                        volumes=[{"name": "cm", "configMap": {"name": "cm"}}, {"name": "scratch", "emptyDir": {}}],
                        hostname="h1")
        w.write_hosts("10.9.9.9 svc.ns.svc.cluster.local\n")
        # The image's ENTRYPOINT (sh -c) and CMD (echo image-cmd), its USER 1234 and ENV.
        st, out = self.run_to_end(w)
        self.assertEqual(st["state"]["terminated"]["reason"], "Completed", (st, out))
        self.assertEqual(out, "image-cmd\n")
        self.assertTrue(st["containerID"].startswith("podman://") and st["imageID"], st)
        # args replace CMD: a script over the image's files, the pod's volumes, env and /etc/hosts.
        script = ("id -u; echo $IMG $E; cat /etc/cm/k; echo; touch /etc/cm/x 2>/dev/null || echo cm-ro; "
                  "echo w > /scratch/f && cat /scratch/f; echo s > /sub/g; cat /etc/hosts; cat /etc/hostname; echo; "
                  "ls /bin/dd")
        w2 = self.worker([{**w.obj["spec"]["containers"][0], "args": [script]}],
                         volumes=w.obj["spec"]["volumes"], hostname="h1")
        w2.write_hosts("10.9.9.9 svc.ns.svc.cluster.local\n")
        st, out = self.run_to_end(w2)
        self.assertEqual(out.split("\n"), ["1234", "1 from-pod", "v1", "cm-ro", "w", "10.9.9.9 svc.ns.svc.cluster.local",
                                           "h1", "/bin/dd", ""], st)
        self.assertTrue(os.path.exists(os.path.join(w2.vol_paths["scratch"], "s", "g")))

    def test_security_context_user_read_only_root_and_run_as_non_root(self):
        w = self.worker([{"name": "c", "image": TEST_IMAGE + "user", "command": ["/bin/sh", "-c"],
                          "args": ["id -u; id -g; touch /x 2>/dev/null || echo root-ro; touch /tmp/y || echo tmp-ro; "
                                   "echo ok > /scratch/z && cat /scratch/z"],
                          "securityContext": {"runAsUser": 4321, "readOnlyRootFilesystem": True},
                          "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
                        volumes=[{"name": "scratch", "emptyDir": {}}], securityContext={"runAsGroup": 99})
        st, out = self.run_to_end(w)
        self.assertEqual(out.splitlines()[:3] + out.splitlines()[-2:], ["4321", "99", "root-ro", "tmp-ro", "ok"], out)
        # A root image under runAsNonRoot never starts: CreateContainerConfigError.
        w = self.worker([{"name": "c", "image": TEST_IMAGE + "root", "command": ["/bin/true"]}],
                        securityContext={"runAsNonRoot": True})
        c = w.containers[0]
        c.start()
        self.addCleanup(c.stop, 0)
        wait_for(lambda: c.status()["state"].get("waiting", {}).get("reason") == "CreateContainerConfigError",
                 "CreateContainerConfigError", 30)
        self.assertIn("will run as root", c.status()["state"]["waiting"]["message"])
        self.assertIsNone(c.cid)

    def test_a_container_over_its_memory_limit_is_oom_killed(self):
        w = self.worker([{"name": "c", "image": TEST_IMAGE + "root", "resources": {"limits": {"memory": "64Mi",
                                                                                              "cpu": "500m"}},
                          # Written, not just reserved: dd fills its 300 MB buffer.
                          "command": ["/bin/dd", "if=/dev/zero", "of=/dev/null", "bs=300M", "count=1"]}])
        st, out = self.run_to_end(w)
        term = st["state"]["terminated"]
        self.assertEqual((term["reason"], term["exitCode"]), ("OOMKilled", 137), (st, out))
        args = json.loads(read(os.path.join(w.dir, "containers", "c", "launch.json")))["podman"]
        self.assertIn("--cpus", args)
        # conmon's `oom` file lands in the container's folder, not in whatever folder the node runs in.
        self.assertTrue(os.path.exists(os.path.join(w.dir, "containers", "c", "oom")))

    def test_a_missing_image_waits_in_image_pull_back_off_and_the_pod_stays(self):
        w = self.worker([{"name": "c", "image": "ghcr.io/nowhere/absent:9"}])
        c = w.containers[0]
        seen = []
        w.changed = lambda: seen.append(c.state.get("waiting", {}).get("reason"))
        c.start()
        self.addCleanup(c.stop, 0)
        wait_for(lambda: "ImagePullBackOff" in seen, "ImagePullBackOff", 30)
        self.assertEqual([r for i, r in enumerate(seen) if r and (i == 0 or seen[i - 1] != r)][:2],
                         ["ErrImagePull", "ImagePullBackOff"])
        self.assertIn("never pulls", c.status()["state"]["waiting"]["message"])
        self.assertEqual(w.status()["phase"], "Pending")
        self.assertTrue(os.path.isdir(w.dir))

    def test_sigterm_then_sigkill_after_the_grace_period_and_restarts(self):
        trap = {"name": "c", "image": TEST_IMAGE + "root",
                "args": ["trap 'echo term; exit 3' TERM; echo up; while :; do sleep 0.1; done"]}
        deaf = {"name": "c", "image": TEST_IMAGE + "root", "args": ["trap '' TERM; echo up; while :; do sleep 0.1; done"]}
        for spec, code in ((trap, 3), (deaf, 137)):
            w = self.worker([spec])
            c = w.containers[0]
            c.start()
            wait_for(lambda: read(self.kl.log_path(w, "c", 0)).startswith("up"), "the container's first line", 30)
            t0 = time.monotonic()
            c.stop(2)
            took = time.monotonic() - t0
            # 3: the trap ran on SIGTERM; 137: SIGKILL, only once the 2 s grace period was over.
            self.assertEqual(c.status()["state"]["terminated"]["exitCode"], code, c.status())
            self.assertLess(took, 20, took)
            if code == 137:
                self.assertGreaterEqual(took, 2)
        # restartPolicy OnFailure: a failing container is started again (back-off shortened).
        w = self.worker([{"name": "c", "image": TEST_IMAGE + "root", "args": ["echo run; exit 1"]}],
                        restartPolicy="OnFailure")
        c = w.containers[0]
        with unittest.mock.patch.object(container, "BACKOFF_START", 0.1):
            c.start()
            self.addCleanup(c.stop, 0)
            wait_for(lambda: c.status()["restartCount"] >= 2, "two restarts", 60)
        self.assertEqual(c.status()["lastState"]["terminated"]["exitCode"], 1)
        self.assertEqual(read(self.kl.log_path(w, "c", 0)), "run\n")

    def test_exec_probe_runs_in_the_container(self):
        w = self.worker([{"name": "c", "image": TEST_IMAGE + "root", "args": ["touch /tmp/ready; sleep 60"],
                          "readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1}}])
        c = w.containers[0]
        c.start()
        self.addCleanup(c.stop, 0)
        wait_for(lambda: c.status()["ready"], "ready through an exec probe", 30)
        self.assertEqual(c.exec(["id", "-u"], 10).stdout, b"0\n")


class ConfigMapDelayTest(unittest.TestCase):
    def test_a_changed_configmap_reaches_the_volume_after_the_delay(self):
        with tempfile.TemporaryDirectory() as d:
            kl = kubelet.Kubelet(None, None, d, "n", None, None, "t", configmap_delay=30)
            w = kubelet.PodWorker(kl, {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                                       "spec": {"containers": [], "volumes": [{"name": "v", "configMap": {"name": "cm"}}]}})
            objs = lambda v: ({"cm": {"data": {"k": v}}}, {})
            w.refresh(w.obj, objs("1"), {})
            w.vol_paths = {"v": volumes.materialize(w.obj["spec"]["volumes"][0], w.obj, w.dir, kl.pv_root, objs("1"),
                                                    {}, None)}
            w.vol_content["v"] = ({"k": b"1"}, None)
            value = lambda: read(os.path.join(w.vol_paths["v"], "k"))
            t = [1000.0]
            with unittest.mock.patch.object(kubelet.time, "monotonic", lambda: t[0]):
                w.refresh(w.obj, objs("2"), {})
                t[0] += 29
                w.refresh(w.obj, objs("2"), {})
                self.assertEqual(value(), "1")
                t[0] += 1
                w.refresh(w.obj, objs("2"), {})
                self.assertEqual(value(), "2")

if __name__ == "__main__":
    unittest.main()
