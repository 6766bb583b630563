"""Runs swarm_worker.py against kube-sim and checks what the operator relies on.

kube-sim is the binary named by KUBE_SIM, else the one `cargo build -p kube-sim [--release]`
left in $CARGO_TARGET_DIR or the repository's target/ directory.

    KUBE_SIM=target/release/kube-sim .tools/python-worker/bin/python \
        -m unittest discover -s examples/python-worker -v
"""

import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

import yaml
from kubernetes import client, config, watch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "swarm_worker.py")
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
        self.lease_events = []
        self.worker = None

    def tearDown(self):
        if self.worker and self.worker.poll() is None:
            self.worker.kill()
            self.worker.wait()

    def start_worker(self, kubeconfig=None, lease_seconds=3):
        env = {**os.environ, "POD_NAME": POD, "POD_NAMESPACE": self.namespace,
               "POD_UID": self.pod_uid, "SWARM_POOL": "swarm", "SWARM_CONFIG_MAP": CONFIG_MAP,
               "SWARM_WORKER_REPORT": self.report,
               "SWARM_LEASE_DURATION_SECONDS": str(lease_seconds), "SWARM_TERMINATION_SECONDS": "15",
               "KUBECONFIG": kubeconfig or self.kubeconfig}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        log = open(os.path.join(self.tmp.name, f"{self.namespace}.log"), "w")
        self.addCleanup(log.close)
        self.worker = subprocess.Popen([sys.executable, WORKER], env=env, stderr=log)

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

    def wait_acked(self, version):
        """Waits for the Lease to acknowledge `version`; returns renewTime of its first such write."""
        def first_write():
            return next((event for event in self.lease_events
                         if (event["metadata"].get("annotations") or {}).get(ACKED) == str(version)),
                        None)
        return nanos(eventually(first_write, what=f"acked-version {version}")["spec"]["renewTime"])

    def report_lines(self):
        """The report a line per change of jobs: a line a renewal adds (the same jobs, a later
        permit deadline) is checked and left out."""
        if not os.path.exists(self.report):
            return []
        with open(self.report, encoding="utf-8") as report:
            lines = [json.loads(line) for line in report]
        changes = []
        for line in lines:
            last = changes[-1] if changes else None
            if last and last["running"] == line["running"] and line["running"]:
                self.assertGreater(line.get("until", ""), last.get("until", ""),
                                   f"a repeated line extends the permit: {line}")
                last["until"] = line.get("until")
                continue
            changes.append(line)
        return changes

    def test_acknowledges_each_version_after_applying_it_and_exits_after_an_empty_entry(self):
        self.watch_lease()
        self.write_config(1, {POD: ["a", "b"], OTHER_POD: []})
        self.start_worker()
        acked_1 = self.wait_acked(1)
        lease = self.lease()
        self.assertEqual(lease.spec.holder_identity, self.pod_uid)
        self.assertEqual(lease.spec.lease_duration_seconds, 3)
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

        renewed = lease.spec.renew_time
        eventually(lambda: self.lease().spec.renew_time > renewed, timeout=5, what="a renewal")

        # b moves to the other worker: it must have stopped before version 2 is acknowledged.
        self.write_config(2, {POD: ["a"], OTHER_POD: ["b"]})
        acked_2 = self.wait_acked(2)
        stopped = self.report_lines()[2]
        self.assertEqual((stopped["version"], stopped["running"]), (2, ["a"]))
        self.assertLess(nanos(stopped["at"]), acked_2)

        # A new job is reported before it starts, and acknowledged once it runs.
        urllib.request.urlopen(urllib.request.Request(
            f"{self.url}/kube-sim/v1/compact", method="POST")).close()
        self.write_config(3, {POD: ["a", "c"], OTHER_POD: ["b"]})
        acked_3 = self.wait_acked(3)
        added = self.report_lines()[3]
        self.assertEqual((added["version"], added["running"]), (3, ["a", "c"]))
        self.assertLess(nanos(added["at"]), acked_3)

        # A version that changes nothing here is acknowledged too, with no change of jobs.
        self.write_config(4, {POD: ["a", "c"], OTHER_POD: ["b", "d"]})
        self.wait_acked(4)
        self.assertEqual(len(self.report_lines()), 4)

        # SIGTERM stops everything; a version that still lists jobs is neither run nor acked.
        self.worker.send_signal(signal.SIGTERM)
        eventually(lambda: len(self.report_lines()) == 5, what="the stop line after SIGTERM")
        self.assertEqual(self.report_lines()[4]["running"], [])
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
        with urllib.request.urlopen(f"{self.url}/kube-sim/v1/requests") as response:
            served = json.load(response)
        return [request["query"] for request in served
                if request["path"] == f"/api/v1/namespaces/{self.namespace}/configmaps"
                and "watch=true" in request["query"]]

    def test_runs_nothing_without_the_api_and_starts_only_after_its_first_lease_write_and_a_read(self):
        proxy, kubeconfig = self.proxied_kubeconfig()
        self.write_config(1, {POD: ["a"]})
        # A Lease long enough that a start that counted as a renewal would leave time to run.
        self.start_worker(kubeconfig=kubeconfig, lease_seconds=10)
        eventually(lambda: len(self.report_lines()) == 1, what="the start line")
        time.sleep(2.0)
        self.assertIsNone(self.worker.poll())
        self.assertEqual([line["running"] for line in self.report_lines()], [[]],
                         "a job ran without the API")
        self.assertIsNone(self.lease())

        self.watch_lease()
        proxy.open()
        acked_1 = self.wait_acked(1)
        first = self.lease_events[0]
        self.assertNotIn(ACKED, first["metadata"].get("annotations") or {},
                         "the Lease is written at start, not only with the first acknowledgement")
        self.assertEqual(first["spec"]["holderIdentity"], self.pod_uid)
        start, started = self.report_lines()
        self.assertEqual((start["running"], started["version"], started["running"]),
                         ([], 1, ["a"]))
        self.assertLess(nanos(first["spec"]["renewTime"]), nanos(started["at"]),
                        "a job started before the first Lease write")
        self.assertLess(nanos(started["at"]), acked_1)

    def test_a_paused_worker_fences_itself_at_once_and_runs_again_only_after_a_renewal_and_a_read(self):
        self.watch_lease()
        self.write_config(1, {POD: ["a", "b"], OTHER_POD: []})
        self.start_worker()  # a 3 s Lease: fenced 1.5 s after its last renewal
        self.wait_acked(1)
        before = len(self.report_lines())
        self.assertEqual(self.report_lines()[-1]["running"], ["a", "b"])

        # Paused longer than the fence limit; meanwhile b moves away and c comes.
        self.worker.send_signal(signal.SIGSTOP)
        time.sleep(2.5)
        self.write_config(2, {POD: ["a", "c"], OTHER_POD: ["b"]})
        self.worker.send_signal(signal.SIGCONT)
        acked_2 = self.wait_acked(2)

        after = self.report_lines()[before:]
        fenced = next(i for i, line in enumerate(after) if line["running"] == [])
        for line in after[:fenced]:
            self.assertLessEqual(set(line["running"]), {"a", "b"},
                                 f"a job started before the fence: {after}")
        self.assertEqual([line["running"] for line in after[fenced + 1:]], [["a", "c"]],
                         f"after the fence, the fresh entry once: {after}")
        self.assertLess(nanos(after[-1]["at"]), acked_2)

    def test_follows_the_config_map_after_its_watch_breaks_and_the_history_is_compacted(self):
        proxy, kubeconfig = self.proxied_kubeconfig()
        proxy.open()
        self.watch_lease()
        self.write_config(1, {POD: ["a"]})
        self.start_worker(kubeconfig=kubeconfig)
        self.wait_acked(1)
        watches_before = len(self.config_map_watches())

        # The ConfigMap's own resourceVersion is now older than any history the server keeps.
        urllib.request.urlopen(urllib.request.Request(
            f"{self.url}/kube-sim/v1/compact", method="POST")).close()
        proxy.drop()
        eventually(lambda: any("resourceVersion" not in query
                               for query in self.config_map_watches()[watches_before:]),
                   what="a watch that starts from the current state")
        self.write_config(2, {POD: ["b"]})
        self.wait_acked(2)
        self.assertLessEqual(len(self.config_map_watches()) - watches_before, 3,
                             "the worker kept re-watching from an expired resourceVersion")


class FenceTest(unittest.TestCase):
    """The fencing decision alone, on made-up monotonic times (a limit of 8 s)."""

    def setUp(self):
        sys.path.insert(0, HERE)
        import swarm_worker  # noqa: PLC0415 - needs the path above
        self.sw = swarm_worker
        # Started at 100 s, renewed and read at once: live, with read 1 used.
        self.fence = swarm_worker.Fence(8.0, 100.0)
        self.assertEqual(self.fence.renewed(100.0, 100.0, 100.0), (False, 1))
        self.assertTrue(self.fence.read(1, 100.0))

    def test_the_margin_is_at_least_two_seconds_a_fifth_and_at_most_half_the_duration(self):
        self.assertEqual(self.sw.fence_limit(10, self.sw.default_margin(10)), 8.0)
        self.assertEqual(self.sw.fence_limit(30, self.sw.default_margin(30)), 24.0)
        self.assertEqual(self.sw.fence_limit(3, self.sw.default_margin(3)), 1.5)

    def test_a_new_fence_is_fenced_until_a_renewal_and_the_read_it_asked_for(self):
        fence = self.sw.Fence(8.0, 100.0)
        self.assertFalse(fence.is_live(), "the start is no renewal")
        self.assertIsNone(fence.deadline())
        self.assertFalse(fence.check(100.0), "fenced from the start, not newly")
        self.assertFalse(fence.read(1, 100.5), "no read was asked for")
        self.assertFalse(fence.is_live())
        self.assertEqual(fence.renewed(101.0, 100.0, 109.5), (False, None),
                         "answered after the limit: no read")
        self.assertEqual(fence.renewed(110.0, 110.0, 110.2), (False, 1))
        self.assertFalse(fence.is_live(), "renewed but not read")
        self.assertFalse(fence.read(2, 110.3), "not the awaited read")
        self.assertTrue(fence.read(1, 110.4))
        self.assertTrue(fence.is_live())
        self.assertEqual(fence.deadline(), 118.0)

    def test_a_read_after_the_first_renewal_answered_too_late_keeps_a_new_fence(self):
        fence = self.sw.Fence(8.0, 100.0)
        self.assertEqual(fence.renewed(100.5, 100.0, 100.6), (False, 1))
        self.assertFalse(fence.read(1, 108.5))
        self.assertFalse(fence.is_live())
        self.assertEqual(fence.renewed(109.0, 109.0, 109.1), (False, 2))
        self.assertTrue(fence.read(2, 109.2))

    def test_no_renewal_within_the_limit_fences_once(self):
        self.assertFalse(self.fence.check(107.9))
        self.assertEqual(self.fence.renewed(102.0, 100.0, 107.9), (False, None))
        self.assertEqual(self.fence.deadline(), 110.0)
        self.assertTrue(self.fence.check(110.0))
        self.assertFalse(self.fence.check(111.0))
        self.assertIsNone(self.fence.deadline())

    def test_a_renewal_after_a_pause_fences_before_anything_else_then_asks_for_a_read(self):
        self.assertEqual(self.fence.renewed(130.0, 130.0, 130.1), (True, 2))
        self.assertFalse(self.fence.is_live())
        self.assertFalse(self.fence.read(3, 130.2), "not the awaited read")
        self.assertTrue(self.fence.read(2, 130.3))
        self.assertTrue(self.fence.is_live())

    def test_a_renewal_answered_after_the_limit_fences_and_waits(self):
        self.assertEqual(self.fence.renewed(101.0, 100.0, 130.0), (True, None))

    def test_a_late_or_failed_read_keeps_the_fence(self):
        self.fence.check(109.0)
        self.assertEqual(self.fence.renewed(110.0, 110.0, 110.0), (False, 2))
        self.assertEqual(self.fence.renewed(111.0, 110.0, 111.0), (False, None), "one at a time")
        self.fence.read_failed(2)
        self.assertEqual(self.fence.renewed(112.0, 110.0, 112.0), (False, 3))
        self.assertFalse(self.fence.read(3, 120.5), "the renewal expired again")
        self.assertFalse(self.fence.is_live())


class TimingTest(unittest.TestCase):
    """The Lease timing read from the environment: defaults, overrides, and clear refusals."""

    def setUp(self):
        sys.path.insert(0, HERE)
        import swarm_worker  # noqa: PLC0415 - needs the path above
        self.sw = swarm_worker

    def test_defaults_are_a_forty_second_lease_renewed_every_ten(self):
        lease, margin, termination = self.sw.timing_from_env({})
        self.assertEqual((lease, margin, termination), (40, 8.0, 25))
        self.assertEqual(self.sw.renew_interval(lease), 10)

    def test_a_pool_sets_a_shorter_lease_and_the_margin_follows(self):
        env = {"SWARM_LEASE_DURATION_SECONDS": "10", "SWARM_TERMINATION_SECONDS": "12.5"}
        self.assertEqual(self.sw.timing_from_env(env), (10, 2.0, 12.5))
        env["SWARM_FENCE_MARGIN_SECONDS"] = "3"
        self.assertEqual(self.sw.timing_from_env(env)[1], 3.0)

    def test_failed_writes_back_off_from_a_second_to_the_renewal_interval(self):
        uppers = [1, 2, 4, 8, 10, 10]
        for failures, upper in enumerate(uppers, start=1):
            self.assertEqual(self.sw.retry_delay(failures, 10, draw=lambda: 0.0), upper / 2)
            self.assertEqual(self.sw.retry_delay(failures, 10, draw=lambda: 1.0), upper)
        self.assertLessEqual(self.sw.retry_delay(5, 0.75), 0.75)

    def test_a_value_that_is_no_number_names_the_variable(self):
        for name, value in [("SWARM_LEASE_DURATION_SECONDS", "40s"),
                            ("SWARM_LEASE_DURATION_SECONDS", "0"),
                            ("SWARM_LEASE_DURATION_SECONDS", "2.5"),
                            ("SWARM_FENCE_MARGIN_SECONDS", "-1"),
                            ("SWARM_TERMINATION_SECONDS", "nan")]:
            with self.subTest(name=name, value=value):
                with self.assertRaisesRegex(ValueError, f"{name} is '{value}': expected"):
                    self.sw.timing_from_env({name: value})


class WorkerStartTest(unittest.TestCase):
    """A new worker's start, with the Lease writer and the ConfigMap read faked."""

    class FakeLease:
        def __init__(self):
            self.written_version = None
            self.acknowledged = []

        def acknowledge(self, version):
            self.acknowledged.append(version)
            self.written_version = version
            return True

    def setUp(self):
        sys.path.insert(0, HERE)
        import swarm_worker  # noqa: PLC0415 - needs the path above
        self.sw = swarm_worker
        self.lease = self.FakeLease()
        self.start = time.monotonic()
        self.worker = swarm_worker.Worker(POD, swarm_worker.Report(None, POD, "uid"), self.lease,
                                          swarm_worker.Fence(8.0, self.start))
        self.addCleanup(self.worker.terminate, time.monotonic())

    def test_runs_nothing_until_its_first_lease_write_and_the_read_after_it(self):
        reads = []

        def read_config():
            reads.append(time.monotonic())
            return config_yml(2, {POD: ["a", "b"]}), "7"

        # What the config thread's GET or WATCH delivers before any renewal is ignored.
        self.assertFalse(self.worker.handle_config(config_yml(1, {POD: ["a"]})))
        threading.Thread(target=self.worker.supervise, args=(read_config,), daemon=True).start()
        time.sleep(0.3)
        self.assertEqual((self.worker.jobs, reads, self.lease.acknowledged), ({}, [], []))

        renewed = time.monotonic()
        self.worker.on_renewed(renewed, self.start)
        eventually(lambda: self.lease.acknowledged == [2], timeout=5, what="version 2 acked")
        self.assertEqual(list(self.worker.jobs), ["a", "b"])
        self.assertEqual(len(reads), 1)
        self.assertGreater(reads[0], renewed, "the read lifting the fence follows the renewal")
        self.assertTrue(self.worker.fence.is_live())

    def test_started_before_its_config_it_runs_the_config_as_soon_as_it_comes(self):
        created = threading.Event()

        def read_config():
            return (config_yml(3, {POD: ["a"]}), "9") if created.is_set() else (None, None)

        threading.Thread(target=self.worker.supervise, args=(read_config,), daemon=True).start()
        self.worker.on_renewed(time.monotonic(), self.start)
        # The read after the renewal finds no ConfigMap: the fence lifts, with nothing to run.
        eventually(self.worker.fence.is_live, timeout=5, what="the fence lifted")
        self.assertEqual(self.worker.jobs, {})
        # The ConfigMap comes, delivered by the watch: written after that read, it applies.
        created.set()
        self.assertTrue(self.worker.handle_config(config_yml(3, {POD: ["a"]})))
        self.assertEqual((list(self.worker.jobs), self.lease.acknowledged), (["a"], [3]))

    def test_sigterm_while_an_empty_version_is_being_acknowledged_exits_once_it_is_written(self):
        # The operator revoked every job (an empty entry) just as the pod was deleted: SIGTERM
        # comes while the acknowledgement is in flight, so terminate() sees it unwritten.
        worker, lease = self.worker, self.lease
        worker.on_renewed(time.monotonic(), self.start)
        threading.Thread(target=worker.supervise,
                         args=(lambda: (config_yml(1, {POD: ["a"]}), "5"),), daemon=True).start()
        eventually(lambda: lease.acknowledged == [1], timeout=5, what="version 1 acked")
        acknowledge = lease.acknowledge

        def acknowledge_during_sigterm(version):
            worker.terminate(time.monotonic() + 30)
            self.assertFalse(worker.done.is_set(), "not written yet: nothing to exit on")
            return acknowledge(version)

        lease.acknowledge = acknowledge_during_sigterm
        self.assertTrue(worker.handle_config(config_yml(2, {POD: []})))
        self.assertEqual(lease.acknowledged, [1, 2])
        self.assertTrue(worker.done.is_set(), "the empty version is acknowledged: it may exit")


if __name__ == "__main__":
    unittest.main()
