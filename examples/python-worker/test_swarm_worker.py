"""Runs the installed swarm_worker package (scripts/install-python-worker.sh builds and installs
its wheel; test_package.py checks that it is this checkout's) against kube-sim and checks what
the operator relies on.

kube-sim is the binary named by KUBE_SIM, else the one `cargo build -p kube-sim [--release]`
left in $CARGO_TARGET_DIR or the repository's target/ directory.

    KUBE_SIM=target/release/kube-sim .tools/python-worker/bin/python \
        -m unittest discover -s examples/python-worker -v
"""

import datetime
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import yaml
from kubernetes import client, config, watch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# -I: the installed package, as a user runs it, never the source beside this file.
WORKER = [sys.executable, "-I", "-m", "swarm_worker"]
POD = "swarm-worker-0"
OTHER_POD = "swarm-worker-1"
CONFIG_MAP = "swarm-config"  # the pool's ConfigMap (SWARM_CONFIG_MAP), which a worker never reads
ACKED = "swarm.io/acked-version"


def worker_config_map(pod=POD):
    """The ConfigMap the operator writes for one worker: `<pool ConfigMap>.<pod>`."""
    return f"{CONFIG_MAP}.{pod}"


def find_kube_sim():
    if os.environ.get("KUBE_SIM"):
        return os.environ["KUBE_SIM"]
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    for profile in ("release", "debug"):
        path = os.path.join(target, profile, "kube-sim")
        if os.access(path, os.X_OK):
            return path
    raise RuntimeError("no kube-sim: set KUBE_SIM or run `cargo build -p kube-sim --release`")


def eventually(check, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def nanos(rfc3339):
    """An RFC 3339 time in UTC ("Z" or "+00:00") with any number of fraction digits, in ns."""
    whole, _, fraction = rfc3339.removesuffix("Z").removesuffix("+00:00").partition(".")
    seconds = datetime.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(
        tzinfo=datetime.timezone.utc).timestamp()
    return int(seconds) * 1_000_000_000 + int((fraction or "0").ljust(9, "0")[:9])


def config_yml(version, workloads, transit=None):
    document = {"version": version, "workloads": {
        pod: {"version": version, "jobs": jobs} for pod, jobs in workloads.items()}}
    if transit is not None:
        document["transit"] = transit
    return yaml.safe_dump(document)


class Proxy:
    """Forwards TCP connections to kube-sim once opened; until then the port refuses them."""

    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]

        self.listener = None
        self.connections = []

    def open(self):
        self.listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        if self.listener:
            # Wakes the accept() blocked on it, which a close alone would leave accepting.
            try:
                self.listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.listener.close()
        self.drop()

    def drop(self):
        """Breaks every open connection, as a network failure would."""
        for connection in self.connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept(self):
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            self.connections += [downstream, upstream]
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source, sink):
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            # Each socket is the source of exactly one pipe, so each is closed once.
            source.close()


class SwarmWorkerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.kubeconfig = os.path.join(cls.tmp.name, "kubeconfig")
        cls.sim = subprocess.Popen(
            [find_kube_sim(), "--kubeconfig", cls.kubeconfig, "--time-scale", "0.1"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        cls.sim.stdout.readline()  # "kube-sim listening on ..." once the kubeconfig is written
        api = config.new_client_from_config(cls.kubeconfig)
        cls.url = api.configuration.host
        cls.core = client.CoreV1Api(api)
        cls.coordination = client.CoordinationV1Api(api)

    @classmethod
    def tearDownClass(cls):
        cls.sim.terminate()
        cls.sim.wait(10)
        cls.tmp.cleanup()

    def setUp(self):
        self.namespace = f"t{time.time_ns()}"
        self.core.create_namespace({"metadata": {"name": self.namespace}})
        pod = self.core.create_namespaced_pod(self.namespace, {
            "metadata": {"name": POD},
            "spec": {"containers": [{"name": "worker", "image": "swarm-worker"}]}})
        self.pod_uid = pod.metadata.uid
        self.report = os.path.join(self.tmp.name, f"{self.namespace}.jsonl")
        self.log = os.path.join(self.tmp.name, f"{self.namespace}.log")
        self.lease_events = []
        self.worker = None

    def tearDown(self):
        if self.worker and self.worker.poll() is None:
            self.worker.kill()
            self.worker.wait()

    def start_worker(self, kubeconfig=None, permit_seconds=3):
        env = {**os.environ, "POD_NAME": POD, "POD_NAMESPACE": self.namespace,
               "POD_UID": self.pod_uid, "SWARM_POOL": "swarm", "SWARM_CONFIG_MAP": CONFIG_MAP,
               "SWARM_WORKER_REPORT": self.report, "SWARM_PERMIT_SECONDS": str(permit_seconds),
               "SWARM_WORKER_HEALTH_ADDR": "127.0.0.1:0", "SWARM_TERMINATION_SECONDS": "15",
               "KUBECONFIG": kubeconfig or self.kubeconfig}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        log = open(self.log, "w")
        self.addCleanup(log.close)
        self.worker = subprocess.Popen(WORKER, env=env, stderr=log)

    def health(self, path):
        """The status the worker's health server answers on `path`."""
        def port():
            with open(self.log, encoding="utf-8") as log:
                found = re.search(r"serving readiness on 127\.0\.0\.1:(\d+)", log.read())
            return found and found.group(1)
        url = f"http://127.0.0.1:{eventually(port, what='the readiness address')}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    def watch_lease(self):
        """Records every state of the worker's Lease, to see what the first write of a version held."""
        def follow():
            for event in watch.Watch().stream(
                    self.coordination.list_namespaced_lease, self.namespace,
                    field_selector=f"metadata.name={POD}", timeout_seconds=120):
                self.lease_events.append(event["raw_object"])
        threading.Thread(target=follow, daemon=True).start()

    def write_config(self, version, workloads, transit=None):
        """Writes what the operator writes for POD: its own ConfigMap with only POD's entry of
        `workloads` (the pool's view, given whole to keep each test's story readable)."""
        own = {pod: jobs for pod, jobs in workloads.items() if pod == POD}
        self.write_config_map(worker_config_map(), config_yml(version, own, transit))

    def write_config_map(self, name, text):
        body = {"metadata": {"name": name}, "data": {"config.yml": text}}
        try:
            self.core.replace_namespaced_config_map(name, self.namespace, body)
        except client.ApiException as error:
            if error.status != 404:
                raise
            self.core.create_namespaced_config_map(self.namespace, body)

    def lease(self):
        try:
            return self.coordination.read_namespaced_lease(POD, self.namespace)
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise

    def wait_acked(self, version, timeout=20.0):
        """Waits for the Lease to acknowledge `version`; returns renewTime of its first such write."""
        def first_write():
            return next((event for event in self.lease_events
                         if (event["metadata"].get("annotations") or {}).get(ACKED) == str(version)),
                        None)
        event = eventually(first_write, timeout=timeout, what=f"acked-version {version}")
        return nanos(event["spec"]["renewTime"])

    def raw_report(self):
        if not os.path.exists(self.report):
            return []
        with open(self.report, encoding="utf-8") as report:
            return [json.loads(line) for line in report]

    def report_lines(self):
        """The report, a line per change of jobs: a line a fence read adds (the same jobs, a later
        permit deadline) is checked and left out."""
        changes = []
        for line in self.raw_report():
            last = changes[-1] if changes else None
            if last and last["running"] == line["running"] and line["running"]:
                self.assertGreater(line.get("until", ""), last.get("until", ""),
                                   f"a repeated line extends the permit: {line}")
                last["until"] = line.get("until")
                continue
            changes.append(line)
        return changes

    def requests(self):
        """What kube-sim served in this test's namespace."""
        with urllib.request.urlopen(f"{self.url}/kube-sim/v1/requests") as response:
            served = json.load(response)
        ours = f"/namespaces/{self.namespace}/"
        return [request for request in served if ours in request["path"]]

    def fence_reads(self):
        """Arrival times (ns) of the GETs of the worker's ConfigMap with no resourceVersion."""
        path = f"/api/v1/namespaces/{self.namespace}/configmaps/{worker_config_map()}"
        return [nanos(request["time"]) for request in self.requests()
                if request["method"] == "GET" and request["path"] == path
                and "resourceVersion" not in request["query"]]

    def test_acknowledges_each_version_after_applying_it_and_exits_after_an_empty_entry(self):
        self.watch_lease()
        self.write_config(1, {POD: ["a", "b"], OTHER_POD: []})
        self.start_worker()
        acked_1 = self.wait_acked(1)
        lease = self.lease()
        self.assertEqual(lease.spec.holder_identity, self.pod_uid)
        self.assertEqual(lease.spec.lease_duration_seconds, 3, "the Lease carries the permit")
        self.assertIsNotNone(lease.spec.acquire_time)
        self.assertEqual(lease.metadata.labels["swarm.io/pool"], "swarm")
        [owner] = lease.metadata.owner_references
        self.assertEqual((owner.api_version, owner.kind, owner.name, owner.uid),
                         ("v1", "Pod", POD, self.pod_uid))
        start, started = self.report_lines()
        self.assertEqual((start["version"], start["running"], start["uid"]),
                         (None, [], self.pod_uid))
        self.assertEqual((started["version"], started["running"]), (1, ["a", "b"]))
        self.assertLess(nanos(started["at"]), acked_1)

        # b moves to the other worker: it must have stopped before version 2 is acknowledged.
        self.write_config(2, {POD: ["a"], OTHER_POD: ["b"]})
        acked_2 = self.wait_acked(2)
        stopped = self.report_lines()[2]
        self.assertEqual((stopped["version"], stopped["running"]), (2, ["a"]))
        self.assertLess(nanos(stopped["at"]), acked_2)

        # A new job is reported before it starts, and acknowledged once it runs.
        self.write_config(3, {POD: ["a", "c"], OTHER_POD: ["b"]})
        acked_3 = self.wait_acked(3)
        added = self.report_lines()[3]
        self.assertEqual((added["version"], added["running"]), (3, ["a", "c"]))
        self.assertLess(nanos(added["at"]), acked_3)

        # A version that changes nothing here is acknowledged too, with no change of jobs.
        self.write_config(4, {POD: ["a", "c"], OTHER_POD: ["b", "d"]})
        self.wait_acked(4)
        self.assertEqual(len(self.report_lines()), 4)

        # SIGTERM stops everything and answers not ready; a version that still lists jobs is
        # neither run nor acked.
        self.assertEqual(self.health("/readyz"), 200)
        self.worker.send_signal(signal.SIGTERM)
        eventually(lambda: len(self.report_lines()) == 5, what="the stop line after SIGTERM")
        self.assertEqual(self.report_lines()[4]["running"], [])
        self.assertEqual(self.health("/readyz"), 503)
        self.write_config(5, {POD: ["a", "e"], OTHER_POD: ["b", "d"]})
        time.sleep(1.5)
        self.assertIsNone(self.worker.poll())
        self.assertEqual(self.lease().metadata.annotations[ACKED], "4")
        self.assertEqual(len(self.report_lines()), 5)

        # The operator revokes every job of the terminating pod: that version ends the worker.
        self.write_config(6, {POD: [], OTHER_POD: ["b", "d", "a", "e"]})
        self.wait_acked(6)
        self.assertEqual(self.worker.wait(10), 0)
        self.assertEqual(len(self.report_lines()), 5)

    def test_at_rest_it_only_reads_every_half_permit_and_writes_nothing(self):
        self.watch_lease()
        self.write_config(1, {POD: ["a"]})
        self.start_worker(permit_seconds=2)
        self.wait_acked(1)
        lease_version = self.lease().metadata.resource_version
        reads_before, requests_before = len(self.fence_reads()), len(self.requests())
        extended_before = len(self.raw_report())

        time.sleep(4.2)
        window = self.requests()[requests_before:]
        writes = [request for request in window if request["method"] != "GET"]
        self.assertEqual(writes, [], "a worker at rest writes nothing")
        self.assertEqual(self.lease().metadata.resource_version, lease_version)
        reads = len(self.fence_reads()) - reads_before
        self.assertTrue(3 <= reads <= 6, f"{reads} fence reads in 4.2 s with a 2 s permit")
        # Each read extended the permit (report_lines checks that each extension is later).
        self.assertGreaterEqual(len(self.raw_report()) - extended_before, 3)
        self.assertEqual([line["running"] for line in self.report_lines()], [[], ["a"]])
        self.assertEqual(self.health("/readyz"), 200)

    def test_jobs_stop_within_the_permit_and_readiness_fails_when_the_api_is_unreachable(self):
        proxy, kubeconfig = self.proxied_kubeconfig()
        proxy.open()
        self.watch_lease()
        self.write_config(1, {POD: ["a"]})
        self.start_worker(kubeconfig=kubeconfig, permit_seconds=2)
        self.wait_acked(1)
        eventually(lambda: self.health("/readyz") == 200, what="ready")

        proxy.close()
        cut = time.time_ns()
        not_ready = eventually(lambda: self.health("/readyz") == 503 and time.time_ns(),
                               what="not ready")
        self.assertEqual(self.health("/healthz"), 200, "alive, only not ready")
        stopped = eventually(lambda: self.report_lines()[-1]["running"] == []
                             and self.report_lines()[-1], what="the jobs stopped")
        last_permit = nanos(self.report_lines()[-2]["until"])
        # The permit counts from the send of the last read before the cut.
        self.assertLessEqual(last_permit, cut + 2_000_000_000)
        self.assertLess(not_ready, last_permit, "readiness goes before the jobs")
        self.assertLess(nanos(stopped["at"]) - last_permit, 500_000_000,
                        "stopped as the permit lapsed")

        # Back in touch, a fresh read runs the jobs again and the worker is ready.
        proxy.open()
        eventually(lambda: self.report_lines()[-1]["running"] == ["a"], what="a running again")
        eventually(lambda: self.health("/readyz") == 200, what="ready again")

    def test_a_granted_job_starts_only_after_a_fence_read_shows_it(self):
        self.watch_lease()
        self.write_config(1, {POD: ["a"]})
        # A 30 s permit: no read is due for 15 s, so only the watch makes the worker read.
        self.start_worker(permit_seconds=30)
        self.wait_acked(1)
        reads_before = len(self.fence_reads())

        written = time.time_ns()
        self.write_config(2, {POD: ["a", "c"]})
        self.wait_acked(2, timeout=10)
        started = self.report_lines()[-1]
        self.assertEqual(started["running"], ["a", "c"])
        reads = self.fence_reads()[reads_before:]
        # kube-sim logs arrivals to the millisecond.
        self.assertTrue(any(written - 1_000_000 <= read <= nanos(started["at"]) for read in reads),
                        "c started without a fence read sent after it was granted")

    def test_reads_only_its_own_config_map_never_the_pools_shared_one(self):
        self.watch_lease()
        # The pool's ConfigMap, in the old shared format, offers jobs this worker must not run.
        self.write_config_map(CONFIG_MAP, config_yml(1, {POD: ["x"], OTHER_POD: ["y"]}))
        self.write_config(1, {POD: ["a"]}, transit={POD: ["c"]})
        self.start_worker()
        self.wait_acked(1)
        self.assertEqual([line["running"] for line in self.report_lines()], [[], ["a"]])

        # A newer version in the shared ConfigMap is neither run nor acknowledged.
        self.write_config_map(CONFIG_MAP, config_yml(5, {POD: ["x", "z"], OTHER_POD: ["y"]}))
        time.sleep(1.5)
        self.assertEqual(self.lease().metadata.annotations[ACKED], "1")
        self.assertEqual([line["running"] for line in self.report_lines()], [[], ["a"]])

        # Its own ConfigMap is followed; its every watch selects it by name.
        self.write_config(2, {POD: ["b"]})
        self.wait_acked(2)
        self.assertEqual([line["running"] for line in self.report_lines()][-1], ["b"])
        watches = self.config_map_watches()
        self.assertTrue(watches)
        for query in watches:
            self.assertIn(f"fieldSelector=metadata.name={worker_config_map()}",
                          urllib.parse.unquote(query))

    def test_takes_over_a_lease_left_by_a_previous_pod_of_the_same_name(self):
        self.coordination.create_namespaced_lease(self.namespace, {
            "metadata": {"name": POD, "annotations": {ACKED: "9"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": POD,
                                              "uid": "00000000-0000-0000-0000-000000000000"}]},
            "spec": {"holderIdentity": "00000000-0000-0000-0000-000000000000",
                     "leaseDurationSeconds": 10}})
        self.watch_lease()
        self.write_config(2, {POD: ["a"]})
        self.start_worker()
        self.wait_acked(2)
        lease = self.lease()
        self.assertEqual(lease.spec.holder_identity, self.pod_uid)
        self.assertEqual([owner.uid for owner in lease.metadata.owner_references], [self.pod_uid])
        self.assertEqual(lease.metadata.labels["swarm.io/pool"], "swarm")
        self.assertEqual(lease.spec.lease_duration_seconds, 3)

    def proxied_kubeconfig(self):
        """A proxy in front of kube-sim, not yet open, and a kubeconfig that goes through it."""
        proxy = Proxy(int(self.url.rsplit(":", 1)[1]))
        self.addCleanup(proxy.close)
        with open(self.kubeconfig, encoding="utf-8") as original:
            proxied = original.read().replace(self.url, f"http://127.0.0.1:{proxy.port}")
        kubeconfig = os.path.join(self.tmp.name, f"{self.namespace}.kubeconfig")
        with open(kubeconfig, "w", encoding="utf-8") as out:
            out.write(proxied)
        return proxy, kubeconfig

    def config_map_watches(self):
        return [request["query"] for request in self.requests()
                if request["path"] == f"/api/v1/namespaces/{self.namespace}/configmaps"
                and "watch=true" in request["query"]]

    def test_starts_fenced_runs_nothing_without_the_api_and_starts_after_its_first_read(self):
        proxy, kubeconfig = self.proxied_kubeconfig()
        self.write_config(1, {POD: ["a"]})
        self.start_worker(kubeconfig=kubeconfig)
        eventually(lambda: len(self.report_lines()) == 1, what="the start line")
        time.sleep(2.0)
        self.assertIsNone(self.worker.poll())
        self.assertEqual([line["running"] for line in self.report_lines()], [[]],
                         "a job ran without the API")
        self.assertEqual(self.health("/readyz"), 503, "ready before any read")
        self.assertEqual(self.health("/healthz"), 200)
        self.assertIsNone(self.lease())

        self.watch_lease()
        opened = time.time_ns()
        proxy.open()
        acked_1 = self.wait_acked(1)
        self.assertEqual(self.lease_events[0]["spec"]["holderIdentity"], self.pod_uid)
        start, started = self.report_lines()
        self.assertEqual((start["running"], started["version"], started["running"]),
                         ([], 1, ["a"]))
        self.assertLess(opened, nanos(started["at"]))
        self.assertLess(nanos(started["at"]), acked_1)
        eventually(lambda: self.health("/readyz") == 200, what="ready")

    def test_a_paused_worker_stops_its_jobs_at_once_and_runs_again_only_after_a_fresh_read(self):
        self.watch_lease()
        self.write_config(1, {POD: ["a", "b"], OTHER_POD: []})
        self.start_worker(permit_seconds=2)
        self.wait_acked(1)
        before = len(self.report_lines())
        self.assertEqual(self.report_lines()[-1]["running"], ["a", "b"])

        # Paused longer than the permit; meanwhile b moves away and c comes.
        self.worker.send_signal(signal.SIGSTOP)
        time.sleep(2.5)
        self.write_config(2, {POD: ["a", "c"], OTHER_POD: ["b"]})
        self.worker.send_signal(signal.SIGCONT)
        acked_2 = self.wait_acked(2)

        after = self.report_lines()[before:]
        lapsed = next(i for i, line in enumerate(after) if line["running"] == [])
        for line in after[:lapsed]:
            self.assertLessEqual(set(line["running"]), {"a", "b"},
                                 f"a job started before the lapse: {after}")
        self.assertEqual([line["running"] for line in after[lapsed + 1:]], [["a", "c"]],
                         f"after the lapse, the fresh entry once: {after}")
        self.assertLess(nanos(after[-1]["at"]), acked_2)

    def test_follows_the_config_map_after_its_watch_breaks_and_the_history_is_compacted(self):
        proxy, kubeconfig = self.proxied_kubeconfig()
        proxy.open()
        self.watch_lease()
        self.write_config(1, {POD: ["a"]})
        self.start_worker(kubeconfig=kubeconfig, permit_seconds=30)
        self.wait_acked(1)
        watches_before = len(self.config_map_watches())

        # The ConfigMap's own resourceVersion is now older than any history the server keeps.
        urllib.request.urlopen(urllib.request.Request(
            f"{self.url}/kube-sim/v1/compact", method="POST")).close()
        proxy.drop()
        eventually(lambda: any("resourceVersion" not in query
                               for query in self.config_map_watches()[watches_before:]),
                   what="a watch that starts from the current state")
        # With a 30 s permit, only the watch can bring version 2 this soon.
        self.write_config(2, {POD: ["b"]})
        self.wait_acked(2, timeout=10)
        self.assertLessEqual(len(self.config_map_watches()) - watches_before, 3,
                             "the worker kept re-watching from an expired resourceVersion")


def load_worker():
    sys.path.insert(0, HERE)
    import swarm_worker  # noqa: PLC0415 - needs the path above
    return swarm_worker


class FenceTest(unittest.TestCase):
    """What the shared traces (protocol/vectors/fence.json) leave out, on made-up times."""

    def setUp(self):
        self.sw = load_worker()
        self.fence = self.sw.Fence(30, 0.0)
        self.fence.read(0.1, 0.0, 1, ["a", "b"])

    def test_a_watch_event_during_a_read_asks_for_another_read_at_once(self):
        self.fence.watch(5.0)
        # This read was sent before the event: it may not show what the event announced.
        self.fence.read(5.2, 4.9, 1, ["a", "b"])
        self.assertEqual(self.fence.next_read_at, 5.0)
        self.fence.read(5.3, 5.2, 2, ["a"])
        self.assertEqual(self.fence.next_read_at, 20.2)

    def test_a_read_says_what_to_stop_keep_and_start_and_only_listed_jobs_get_the_permit(self):
        change = self.fence.read(10.1, 10.0, 2, ["c", "a", "c"])
        self.assertEqual((change.stop, change.keep, change.start, change.until, change.ack),
                         (("b",), ("a",), ("c",), 40.0, 2))

    def test_a_lapsed_job_listed_again_is_stopped_and_started_again(self):
        change = self.fence.read(31.0, 30.5, 1, ["a", "b"])
        self.assertEqual((change.stop, change.keep, change.start), (("a", "b"), (), ("a", "b")))

    def test_after_sigterm_a_read_listing_jobs_starts_none(self):
        self.assertEqual(self.fence.sigterm(1.0).stop, ("a", "b"))
        change = self.fence.read(2.1, 2.0, 2, ["a"])
        self.assertEqual((change.start, change.ack, self.fence.acked_empty), ((), None, False))
        change = self.fence.read(3.1, 3.0, 3, [])
        self.assertEqual((change.ack, self.fence.acked_empty), (3, True))

    def test_a_shed_read_is_tried_again_a_quarter_to_half_the_permit_later(self):
        self.fence.read_shed(15.0, 0.5)
        self.assertEqual(self.fence.next_read_at, 26.25)
        # One more read still fits in the permit, which lapses at 30.
        self.assertLess(self.fence.next_read_at, 30.0)
        self.fence.read_failed(26.25)
        self.assertLessEqual(self.fence.next_read_at - 26.25, 3.75)

    def test_lease_writes_back_off_from_a_second_to_half_the_permit_with_jitter(self):
        uppers = [1, 2, 4, 8, 15, 15]
        for failures, upper in enumerate(uppers, start=1):
            self.assertEqual(self.sw.lease_retry_delay(failures, 15, draw=lambda: 0.0), upper / 2)
            self.assertEqual(self.sw.lease_retry_delay(failures, 15, draw=lambda: 1.0), upper)


class GateTest(unittest.TestCase):
    """One hold per worker (docs/worker-protocol.md, "One hold per worker"), on made-up times."""

    def setUp(self):
        self.sw = load_worker()
        self.gate = self.sw.Gate()
        self.free = self.sw.Turn(send=True)
        self.probe = self.sw.Turn(send=True, probe=True)
        self.for_probe = self.sw.Turn()

    def test_a_shed_request_holds_every_request_then_lets_one_probe_through_at_a_time(self):
        sw, gate = self.sw, self.gate
        self.assertEqual((gate.ask(0.0), gate.ask(0.0)), (self.free, self.free))
        gate.ended(False, sw.SHED, 10.0)
        # Fence read, Lease write and watch alike wait for the same hold.
        self.assertEqual([gate.ask(1.0) for _ in range(3)], [sw.Turn(until=10.0)] * 3)
        self.assertEqual((gate.ask(10.0), gate.ask(10.0), gate.ask(11.0)),
                         (self.probe, self.for_probe, self.for_probe))
        gate.ended(True, sw.SHED, 20.0)
        self.assertEqual(gate.ask(11.0), sw.Turn(until=20.0))
        self.assertEqual(gate.ask(20.0), self.probe)
        gate.ended(True, sw.ANSWERED)
        self.assertEqual((gate.ask(21.0), gate.ask(21.0)), (self.free, self.free))

    def test_a_request_sent_before_the_hold_ends_nothing_and_a_hold_only_lengthens(self):
        sw, gate = self.sw, self.gate
        gate.ended(False, sw.SHED, 10.0)
        gate.ended(False, sw.ANSWERED)
        self.assertEqual(gate.ask(0.0), sw.Turn(until=10.0))
        gate.ended(False, sw.SHED, 5.0)
        self.assertEqual(gate.ask(0.0), sw.Turn(until=10.0))
        gate.ended(False, sw.SHED, 12.0)
        self.assertEqual(gate.ask(0.0), sw.Turn(until=12.0))

    def test_a_probe_that_fails_otherwise_or_is_given_up_lets_the_next_request_probe(self):
        sw, gate = self.sw, self.gate
        gate.ended(False, sw.SHED, 0.0)
        self.assertEqual((gate.ask(0.0), gate.ask(0.0)), (self.probe, self.for_probe))
        gate.ended(True, sw.FAILED)
        self.assertEqual((gate.ask(0.0), gate.ask(0.0)), (self.probe, self.for_probe))
        gate.ended(True, sw.ANSWERED)
        self.assertEqual(gate.ask(0.0), self.free)

    def test_once_a_hold_ends_a_waiting_fence_read_is_the_probe(self):
        sw, gate = self.sw, self.gate
        gate.ended(False, sw.SHED, 1.0)
        gate.fences_waiting = 1
        self.assertEqual(gate.ask(0.0, fence=True), sw.Turn(until=1.0))
        # A Lease write or the watch defers to the fence read waiting; the fence read probes.
        self.assertEqual((gate.ask(1.0), gate.ask(1.0, fence=True), gate.ask(1.0, fence=True)),
                         (self.for_probe, self.probe, self.for_probe))
        gate.fences_waiting = 0
        # The fence read is shed too; with none waiting, any request probes.
        gate.ended(True, sw.SHED, 2.0)
        self.assertEqual(gate.ask(2.0), self.probe)

    def test_a_lease_write_waits_for_the_fence_read_to_probe_first(self):
        """A Lease write waiting through a hold, and a fence read that came after it: the fence
        read is the probe and the write goes once it is answered; without the fence read's turn
        the write, which asked first, would probe. Several rounds, as which of two threads woken
        by one hold's end asks first is the scheduler's choice; a round whose fence read a busy
        machine started only after the hold tests nothing and is left out."""
        rounds = [self._write_then_fence_read_through_a_hold() for _ in range(10)]
        tested = [order for order, read_in_hold in rounds if read_in_hold]
        self.assertGreaterEqual(len(tested), 3, rounds)
        self.assertEqual(tested, [["read", "write"]] * len(tested), rounds)

    def _write_then_fence_read_through_a_hold(self):
        """The order in which a Lease write, then a fence read 5 ms later, went through one hold
        of 200 ms, each answered 10 ms after it went; and whether the fence read asked before
        the hold ended."""
        shed = self.sw.Shed(0.8, draw=lambda: 0.0)
        with self.assertRaises(self.sw.ApiException), shed.admit():
            raise self.sw.ApiException(status=429)
        held_until = shed._gate.held_until
        order, read_asked = [], []

        def send(name, fence):
            if fence:
                read_asked.append(time.monotonic())
            with shed.admit(fence=fence):
                order.append(name)
                time.sleep(0.01)
        write = threading.Thread(target=send, args=("write", False))
        read = threading.Thread(target=send, args=("read", True))
        write.start()
        time.sleep(0.005)
        read.start()
        for thread in (write, read):
            thread.join(5)
        return order, read_asked[0] < held_until

    def test_an_answer_other_than_a_429_is_an_answer_and_no_answer_is_a_failure(self):
        sw = self.sw
        for error, want in [(None, sw.ANSWERED), (sw.ApiException(status=404), sw.ANSWERED),
                            (sw.ApiException(status=500), sw.ANSWERED),
                            (sw.ApiException(status=429), sw.SHED),
                            (ConnectionResetError(), sw.FAILED), (TimeoutError(), sw.FAILED)]:
            self.assertEqual(sw.outcome_of(error), want, error)

    def test_once_a_probe_is_answered_the_waiting_requests_go_at_once(self):
        shed = self.sw.Shed(0.08)  # holds of 20 to 40 ms
        with self.assertRaises(self.sw.ApiException), shed.admit():
            raise self.sw.ApiException(status=429)
        went = []

        def request():
            with shed.admit():
                went.append(time.monotonic())
        with shed.admit():  # the probe, after the hold
            waiting = [threading.Thread(target=request) for _ in range(2)]
            for thread in waiting:
                thread.start()
            time.sleep(0.1)
            self.assertEqual(went, [], "a request went while the probe was in flight")
            answered = time.monotonic()
        for thread in waiting:
            thread.join(5)
        self.assertEqual(len(went), 2, "the waiting requests did not go after the probe")
        self.assertLess(max(went) - answered, 0.5)


class ShedAPI(http.server.ThreadingHTTPServer):
    """An API server just large enough for one worker: its own ConfigMap (GET, and a watch
    that sends nothing until broken) and its Lease (GET, POST, PUT). Once a fence read has been
    answered the version `shed_after`, it breaks the watch and answers every request 429 as API
    Priority and Fairness does (a Retry-After, a text body), until `shedding` is cleared."""

    daemon_threads = True

    def __init__(self, shed_after):
        super().__init__(("127.0.0.1", 0), ShedAPIHandler)
        self.lock = threading.Lock()
        self.version, self.shed_after = 1, shed_after
        self.lease = None
        self.shedding = threading.Event()
        self.watching = threading.Event()  # a watch is open
        self.shed = []  # (time.monotonic(), "<verb> <resource>") of each request answered 429
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def acked(self):
        with self.lock:
            annotations = ((self.lease or {}).get("metadata") or {}).get("annotations") or {}
        return annotations.get(ACKED)

    def config_map(self):
        with self.lock:
            version = self.version
            if self.shed_after is not None and version >= self.shed_after:
                self.shed_after = None  # once
                self.shedding.set()
        text = config_yml(version, {POD: ["a"]})
        return {"apiVersion": "v1", "kind": "ConfigMap", "data": {"config.yml": text},
                "metadata": {"name": worker_config_map(), "namespace": "ns",
                             "resourceVersion": str(version)}}


class ShedAPIHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *_):
        pass

    def request_of(self):
        resource = "leases" if "/leases" in self.path else "configmaps"
        if self.command != "GET":
            return {"POST": "create", "PUT": "update"}[self.command], resource
        return ("watch" if "watch=true" in self.path.lower() else "get"), resource

    def answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def handle_request(self):
        api = self.server
        verb, resource = self.request_of()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if api.shedding.is_set():
            api.shed.append((time.monotonic(), f"{verb} {resource}"))
            self.send_response(429)
            self.send_header("Retry-After", "1")
            self.send_header("Content-Length", "42")
            self.end_headers()
            self.wfile.write(b"Too many requests, please try again later.")
            return
        if verb == "watch":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            api.watching.set()
            api.shedding.wait()
            return
        if resource == "configmaps":
            return self.answer(200, api.config_map())
        with api.lock:
            if verb != "get":
                api.lease = json.loads(body)
                api.lease["metadata"]["resourceVersion"] = str(time.monotonic_ns())
            lease = api.lease
        if lease is None:
            return self.answer(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                     "reason": "NotFound", "code": 404})
        self.answer(201 if verb == "create" else 200, lease)

    do_GET = do_POST = do_PUT = handle_request  # noqa: N815 - the names http.server calls


class ShedWorkerTest(unittest.TestCase):
    """The worker's threads against an API server that sheds every request for a while."""

    def test_a_worker_answered_only_429s_sends_one_request_per_hold_across_its_kinds(self):
        sw = load_worker()
        permit = 6  # F/4 = 1.5 s, longer than the 1 s Retry-After urllib3 would wait
        # Left serving: the worker's threads have no stop and outlive the test, and would warn
        # of every failed request through the rest of the run.
        api = ShedAPI(shed_after=2)
        configuration = client.Configuration(host=f"http://127.0.0.1:{api.server_address[1]}")
        api_client = sw.api_client(configuration)
        core, coordination = client.CoreV1Api(api_client), client.CoordinationV1Api(api_client)
        env = {"POD_NAME": POD, "POD_NAMESPACE": "ns", "POD_UID": "uid", "SWARM_POOL": "swarm",
               "SWARM_CONFIG_MAP": CONFIG_MAP}
        shed = sw.Shed(permit)
        lease = sw.LeaseWriter(coordination, env, permit, shed)
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        worker = sw.Worker(POD, sw.Report(os.path.join(tmp.name, "report"), POD, "uid"), lease,
                           sw.Fence(permit, time.monotonic()), shed)
        lease.on_written = worker.on_written
        read = (lambda: sw.read_config_map(core, env, permit),)
        for target, args in [(worker.lapse_forever, ()), (worker.read_forever, read),
                             (lease.write_forever, ()), (sw.follow_config, (core, env, worker))]:
            threading.Thread(target=target, args=args, daemon=True).start()
        eventually(lambda: api.acked() == "1", what="version 1 acknowledged")
        self.assertTrue(api.watching.wait(10), "no watch")
        # Version 2 is read and its acknowledgement due when the API server starts shedding: a
        # fence read, the watch (broken) and the Lease write all have a request to send.
        with api.lock:
            api.version = 2
        worker.watched()
        self.assertTrue(api.shedding.wait(10), "version 2 was not read")
        shed_for = 9.0
        time.sleep(shed_for)
        api.shedding.clear()
        requests = list(api.shed)
        # The broken watch and the Lease write of version 2 race to the first 429; whichever
        # loses waits in the gate with them, behind the fence read (due F/2 after the last),
        # which has the probe's turn while it waits. So the fence read and at least one of the
        # other two were turned away: the hold spans the worker's kinds of request.
        kinds = {request for _, request in requests}
        self.assertIn("get configmaps", kinds, requests)
        self.assertTrue(kinds & {"watch configmaps", "update leases"}, requests)
        # The requests sent before the first 429 was answered went at once (within 0.5 s on a
        # busy machine); every later one waits for a hold of at least F/4 after the one before.
        first = next((i for i, (at, _) in enumerate(requests) if at - requests[0][0] > 0.5),
                     len(requests))
        timeline = [(round(at - requests[0][0], 3), request) for at, request in requests]
        for i in range(max(first, 1), len(requests)):
            self.assertGreater(requests[i][0] - requests[i - 1][0], permit / 4 - 0.1,
                               f"request {i} within the hold of F/4 to F/2: {timeline}")
        self.assertLessEqual(len(requests), first + int(shed_for / (permit / 4)) + 1, timeline)
        eventually(lambda: api.acked() == "2", what="version 2 acknowledged once answered")


class SettingsTest(unittest.TestCase):
    POD = {"POD_NAME": POD, "POD_NAMESPACE": "ns", "POD_UID": "u", "SWARM_POOL": "swarm"}

    def setUp(self):
        self.sw = load_worker()

    def test_a_retired_setting_says_what_replaces_it(self):
        with self.assertRaisesRegex(ValueError,
                                    "SWARM_LEASE_DURATION_SECONDS.*SWARM_PERMIT_SECONDS"):
            self.sw.settings_from_env({**self.POD, "SWARM_LEASE_DURATION_SECONDS": "40"})

    def test_the_health_address_splits_into_host_and_port(self):
        for addr, want in [("0.0.0.0:8081", ("0.0.0.0", 8081)), ("[::1]:0", ("::1", 0))]:
            settings = self.sw.settings_from_env({**self.POD, "SWARM_WORKER_HEALTH_ADDR": addr})
            self.assertEqual(settings.health_host_port(), want)
        for addr in ["::1:8081", "[127.0.0.1]:8081", "1.2.3.4:80x", "1.2.3.4:"]:
            with self.assertRaisesRegex(ValueError, "SWARM_WORKER_HEALTH_ADDR"):
                self.sw.settings_from_env({**self.POD, "SWARM_WORKER_HEALTH_ADDR": addr})


class WorkerTest(unittest.TestCase):
    """The worker's shell with the Lease faked and no API: what it does with each read."""

    class FakeLease:
        def __init__(self):
            self.written_version = None
            self.acknowledged = []
            self.on_written = lambda version: None

        def acknowledge(self, version):
            self.acknowledged.append(version)
            self.written_version = version
            self.on_written(version)

    def setUp(self):
        self.sw = load_worker()
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.path = os.path.join(self.tmp.name, "report.jsonl")
        self.lease = self.FakeLease()
        self.worker = self.sw.Worker(POD, self.sw.Report(self.path, POD, "uid"), self.lease,
                                     self.sw.Fence(2, time.monotonic()))
        self.lease.on_written = self.worker.on_written
        self.addCleanup(self.worker.terminate)

    def lines(self):
        with open(self.path, encoding="utf-8") as report:
            return [json.loads(line) for line in report]

    def test_a_read_stops_dropped_jobs_before_it_starts_new_ones_and_extends_only_listed_ones(self):
        sent = time.monotonic()
        self.worker.apply_read(sent, 1, ["a", "b"])
        a, b = self.worker.jobs["a"], self.worker.jobs["b"]
        self.assertTrue(a.permit.holds() and b.permit.holds())
        self.worker.apply_read(sent + 0.5, 2, ["a", "c"])
        self.assertFalse(b._thread.is_alive(), "b stopped before the read was applied")
        self.assertEqual((a.permit.until, b.permit.until), (sent + 2.5, sent + 2))
        self.assertEqual(self.worker.jobs["c"].permit.until, sent + 2.5)
        self.assertEqual([(line["version"], line["running"]) for line in self.lines()],
                         [(1, ["a", "b"]), (2, ["a"]), (2, ["a", "c"])])
        self.assertEqual(self.lease.acknowledged, [1, 2])

    def test_the_timer_stops_jobs_when_their_permit_lapses_without_any_read(self):
        threading.Thread(target=self.worker.lapse_forever, daemon=True).start()
        self.worker.apply_read(time.monotonic() - 1.7, 1, ["a"])
        self.assertEqual(list(self.worker.jobs), ["a"])
        eventually(lambda: self.lines()[-1]["running"] == [], timeout=1.0, what="a stopped")
        self.assertEqual(self.worker.jobs, {})

    def test_readiness_is_served_on_a_free_port(self):
        server = self.sw.serve_health(self.worker, "127.0.0.1", 0)
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        url = f"http://127.0.0.1:{server.server_address[1]}"

        def status(path):
            try:
                with urllib.request.urlopen(url + path, timeout=2) as response:
                    return response.status
            except urllib.error.HTTPError as error:
                return error.code

        self.assertEqual((status("/readyz"), status("/healthz")), (503, 200))
        self.worker.apply_read(time.monotonic(), None, [])
        self.assertEqual(status("/readyz"), 200)
        self.worker.terminate()
        self.assertEqual((status("/readyz"), status("/healthz")), (503, 200))

    def test_a_terminating_worker_is_done_once_a_version_without_jobs_is_written(self):
        self.worker.apply_read(time.monotonic(), 1, ["a"])
        self.worker.terminate()
        self.assertFalse(self.worker.done.is_set())
        self.worker.apply_read(time.monotonic(), 2, ["a"])
        self.assertEqual((self.worker.jobs, self.lease.acknowledged), ({}, [1]))
        self.worker.apply_read(time.monotonic(), 3, [])
        self.assertEqual(self.lease.acknowledged, [1, 3])
        self.assertTrue(self.worker.done.is_set())

    def test_a_fence_read_held_by_the_gate_counts_its_permit_from_when_it_leaves(self):
        shed = self.worker.shed  # F = 2 s: holds of 0.5 to 1 s
        with self.assertRaises(self.sw.ApiException), shed.admit():
            raise self.sw.ApiException(status=429)
        held_until = shed._gate.held_until
        threading.Thread(target=self.worker.read_forever,
                         args=(lambda: (config_yml(1, {POD: ["a"]}), "1"),), daemon=True).start()
        eventually(lambda: "a" in self.worker.jobs, timeout=5.0, what="a started")
        self.assertGreaterEqual(self.worker.jobs["a"].permit.until - 2, held_until)

    def test_a_worker_whose_last_acknowledged_entry_was_empty_is_done_at_sigterm(self):
        self.worker.apply_read(time.monotonic(), 4, [])
        self.worker.terminate()
        self.assertTrue(self.worker.done.is_set())


if __name__ == "__main__":
    unittest.main()
