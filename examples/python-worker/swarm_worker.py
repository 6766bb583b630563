"""A swarm-operator worker in Python: the worker side of the acknowledged handoff protocol.

Under `rollout.policy: Acknowledge` a worker reads its entry of the pool's `config.yml` through
the API, applies each new config version (stop the jobs its entry no longer lists, then start
the new ones) and acknowledges the version in a Lease of its own. It uses only the official
`kubernetes` client, to show that the protocol needs nothing from the operator's Rust crates.

Jobs are simulated: each runs in a thread until it is told to stop.

Environment: POD_NAME, POD_NAMESPACE, POD_UID, SWARM_POOL, SWARM_CONFIG_MAP (required);
SWARM_CONFIG_FILE (default /etc/swarm/config.yml), SWARM_LEASE_DURATION_SECONDS (default 10),
SWARM_TERMINATION_SECONDS (default 25), SWARM_WORKER_REPORT (optional), KUBECONFIG when run
outside a cluster.
"""

import copy
import datetime
import json
import logging
import os
import signal
import sys
import threading
import time

import urllib3
import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

ACKED_VERSION_ANNOTATION = "swarm.io/acked-version"
POOL_LABEL = "swarm.io/pool"
CONFIG_KEY = "config.yml"
# A short bound on each request, so a silent API cannot hold up an acknowledgement or SIGTERM.
REQUEST_TIMEOUT = (3, 10)
WATCH_SECONDS = 300
RETRY_SECONDS = 1.0
CONNECTION_ERRORS = (urllib3.exceptions.HTTPError, OSError)

log = logging.getLogger("swarm-worker")


def micro_time():
    """Now as a Lease's MicroTime: RFC 3339, UTC, always six fraction digits."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def nano_time():
    """Now in RFC 3339 with nanoseconds, UTC, as the report lines carry it."""
    seconds, nanos = divmod(time.time_ns(), 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


def parse_config(text, pod_name):
    """Returns (config version, this worker's jobs) of a config.yml, or None if unusable."""
    try:
        document = yaml.safe_load(text or "")
    except yaml.YAMLError:
        return None
    if not isinstance(document, dict) or not isinstance(document.get("version"), int):
        return None
    workloads = document.get("workloads")
    entry = workloads.get(pod_name) if isinstance(workloads, dict) else None
    jobs = entry.get("jobs") if isinstance(entry, dict) else None
    return document["version"], [str(job) for job in jobs or []]


class Report:
    """The JSON lines file that tests read (SWARM_WORKER_REPORT); does nothing when unset."""

    def __init__(self, path, pod_name, pod_uid):
        self.path, self.pod_name, self.pod_uid = path, pod_name, pod_uid

    def write(self, version, running):
        if not self.path:
            return
        line = {"pod": self.pod_name, "uid": self.pod_uid, "version": version,
                "running": list(running), "at": nano_time()}
        with open(self.path, "a", encoding="utf-8") as report:
            report.write(json.dumps(line) + "\n")


class Job:
    """A simulated job: a thread that works until it is told to stop."""

    def __init__(self, name):
        self.name = name
        self._stop_requested = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"job {name}", daemon=True)

    def _run(self):
        log.info("job %s running", self.name)
        self._stop_requested.wait()
        log.info("job %s stopped", self.name)

    def start(self):
        self._thread.start()

    def request_stop(self):
        self._stop_requested.set()

    def join(self):
        self._thread.join()


class LeaseWriter:
    """Keeps this pod's Lease: holder, renewal, owner reference and the acknowledged version."""

    def __init__(self, coordination, env, duration_seconds):
        self.coordination = coordination
        self.env = env
        self.duration_seconds = duration_seconds
        self._lock = threading.Lock()
        self._version = None  # the version to acknowledge; None until the first one
        self._lease = None  # the Lease as last read or written, with its resourceVersion
        self.written_version = None  # the version the Lease carries after a successful write

    def acknowledge(self, version):
        """Writes `version` into the Lease; True once the API has stored it."""
        with self._lock:
            self._version = version
            return self._write()

    def renew_forever(self):
        while True:
            time.sleep(self.duration_seconds / 3)
            with self._lock:
                # An acknowledgement that failed is written again here.
                if self._version is not None:
                    self._write()

    def _write(self):
        for _ in range(5):
            try:
                if self._lease is None:
                    self._lease = self._read()
                if self._lease is None:
                    self._lease = self._send(self.coordination.create_namespaced_lease,
                                             self._desired(None))
                else:
                    self._lease = self._send(self.coordination.replace_namespaced_lease,
                                             self._desired(self._lease), self.env["POD_NAME"])
                self.written_version = self._version
                return True
            except ApiException as error:
                # 409: someone else wrote it (or created it first); 404: it was deleted.
                if error.status not in (404, 409):
                    log.warning("writing the Lease failed: %s %s", error.status, error.reason)
                    return False
                self._lease = None
            except CONNECTION_ERRORS as error:
                log.warning("writing the Lease failed: %s", error)
                return False
        return False

    def _read(self):
        try:
            response = self.coordination.read_namespaced_lease(
                self.env["POD_NAME"], self.env["POD_NAMESPACE"],
                _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return json.loads(response.data)

    def _send(self, method, body, *name):
        response = method(*name, self.env["POD_NAMESPACE"], body,
                          _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        return json.loads(response.data)

    def _desired(self, current):
        """The Lease to write: `current` (None to create) with our holder, times and version."""
        now = micro_time()
        name, uid = self.env["POD_NAME"], self.env["POD_UID"]
        lease = copy.deepcopy(current) if current else {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": self.env["POD_NAMESPACE"]}}
        metadata = lease["metadata"]
        metadata["labels"] = {**(metadata.get("labels") or {}), POOL_LABEL: self.env["SWARM_POOL"]}
        metadata["annotations"] = {**(metadata.get("annotations") or {}),
                                   ACKED_VERSION_ANNOTATION: str(self._version)}
        # A previous pod of the same name owned it; the Lease must go with this pod instead.
        owners = [owner for owner in metadata.get("ownerReferences") or []
                  if not (owner.get("kind") == "Pod" and owner.get("name") == name)]
        metadata["ownerReferences"] = owners + [
            {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}]
        spec = lease.setdefault("spec", {})
        if spec.get("holderIdentity") != uid:
            if spec.get("holderIdentity"):
                spec["leaseTransitions"] = (spec.get("leaseTransitions") or 0) + 1
            spec["holderIdentity"] = uid
            spec["acquireTime"] = now
        spec["leaseDurationSeconds"] = self.duration_seconds
        spec["renewTime"] = now
        return lease


class Worker:
    """Runs the jobs of this pod's entry and acknowledges each config version it has applied."""

    def __init__(self, pod_name, report, lease):
        self.pod_name = pod_name
        self.report = report
        self.lease = lease
        self.jobs = {}  # name -> Job, in the order they were started
        self.applied_version = None
        self.applied_entry_empty = False
        self.terminating = False
        self.termination_deadline = None
        self.done = threading.Event()  # set once the worker may exit
        # One config version (or the termination) is handled at a time.
        self._lock = threading.Lock()

    def handle_config(self, text, acknowledge=True):
        parsed = parse_config(text, self.pod_name)
        if parsed is None:
            log.warning("ignoring a %s without a numeric version", CONFIG_KEY)
            return
        version, entry = parsed
        with self._lock:
            # Acknowledged or older: a watch may replay. A version applied from the mounted
            # file but not acknowledged yet is acknowledged once the API delivers it.
            acknowledged = self.lease.written_version
            if (acknowledged is not None and version <= acknowledged) or (
                    self.applied_version is not None and version < self.applied_version):
                return
            if self.terminating:
                self._acknowledge_while_terminating(version, entry)
                return
            self._apply(version, entry)
            if acknowledge and not self.lease.acknowledge(version):
                log.warning("version %d applied; its acknowledgement will be retried", version)

    def _apply(self, version, entry):
        removed = [job for name, job in self.jobs.items() if name not in entry]
        for job in removed:
            job.request_stop()
        for job in removed:
            job.join()
            del self.jobs[job.name]
        if removed:
            self.report.write(version, self.jobs)
        added = [name for name in entry if name not in self.jobs]
        if added:
            self.report.write(version, list(self.jobs) + added)
            for name in added:
                self.jobs[name] = Job(name)
                self.jobs[name].start()
        self.applied_version = version
        self.applied_entry_empty = not entry
        log.info("applied version %d: running %s", version, list(self.jobs))

    def _acknowledge_while_terminating(self, version, entry):
        # A terminating worker never starts a job: it only confirms that it runs none.
        if entry:
            return
        while not self.lease.acknowledge(version):
            if time.monotonic() >= self.termination_deadline:
                return
            time.sleep(RETRY_SECONDS)
        log.info("acknowledged version %d with no jobs while terminating", version)
        self.done.set()

    def terminate(self, deadline):
        """Stops every job at once; from now on only versions without jobs are acknowledged."""
        with self._lock:
            self.terminating = True
            self.termination_deadline = deadline
            for job in self.jobs.values():
                job.request_stop()
            for job in self.jobs.values():
                job.join()
            if self.jobs:
                self.jobs.clear()
                self.report.write(self.applied_version, [])
            # Already acknowledged a version without jobs: nothing left for the operator to wait for.
            if self.applied_entry_empty and self.lease.written_version == self.applied_version:
                self.done.set()


def read_config_map(core, env):
    """GETs the ConfigMap: (config.yml text or None, resourceVersion); (None, None) if missing."""
    try:
        response = core.read_namespaced_config_map(
            env["SWARM_CONFIG_MAP"], env["POD_NAMESPACE"],
            _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
    except ApiException as error:
        if error.status == 404:
            return None, None
        raise
    config_map = json.loads(response.data)
    return (config_map.get("data") or {}).get(CONFIG_KEY), config_map["metadata"]["resourceVersion"]


def follow_config(core, env, worker, config_file):
    """GET, then WATCH the ConfigMap by name from that resourceVersion; GET again on any error."""
    api_answered = fell_back = expired = False
    while True:
        try:
            text, resource_version = read_config_map(core, env)
        except (ApiException, *CONNECTION_ERRORS) as error:
            log.warning("reading ConfigMap %s failed: %s", env["SWARM_CONFIG_MAP"], error)
            if not api_answered and not fell_back:
                run_mounted_file(worker, config_file)
                fell_back = True
            time.sleep(RETRY_SECONDS)
            continue
        api_answered = True
        if text is not None:
            worker.handle_config(text)
        if expired:
            # A GET returns the object's own resourceVersion, which may be older than the
            # server's watch history; without one the watch starts with the current object.
            resource_version, expired = None, False
        try:
            while True:
                stream = watch.Watch()
                for event in stream.stream(
                        core.list_namespaced_config_map, env["POD_NAMESPACE"],
                        field_selector=f"metadata.name={env['SWARM_CONFIG_MAP']}",
                        resource_version=resource_version, timeout_seconds=WATCH_SECONDS,
                        _request_timeout=(REQUEST_TIMEOUT[0], WATCH_SECONDS + 30)):
                    if event["type"] in ("ADDED", "MODIFIED"):
                        worker.handle_config((event["raw_object"].get("data") or {}).get(CONFIG_KEY))
                # The server closed the watch after timeoutSeconds: carry on from where it was.
                resource_version = stream.resource_version
        except ApiException as error:
            # 410 Gone arrives as an ERROR event when the history no longer reaches back.
            log.info("watch ended (%s %s); reading the ConfigMap again", error.status, error.reason)
            expired = error.status == 410
            if not expired:
                time.sleep(RETRY_SECONDS)
        except CONNECTION_ERRORS as error:
            log.warning("watch failed: %s; reading the ConfigMap again", error)
            time.sleep(RETRY_SECONDS)
        except Exception:  # noqa: BLE001 - this thread must outlive any surprise to keep acking
            log.exception("unexpected error following the ConfigMap; reading it again")
            time.sleep(RETRY_SECONDS)


def run_mounted_file(worker, path):
    """Runs the entry of the mounted ConfigMap while the API is unreachable, acknowledging nothing."""
    try:
        with open(path, encoding="utf-8") as config_file:
            worker.handle_config(config_file.read(), acknowledge=False)
    except OSError as error:
        log.info("no mounted config at %s: %s", path, error)


def main():
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The client's own retries would log each refused connection; ours say enough.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    names = ["POD_NAME", "POD_NAMESPACE", "POD_UID", "SWARM_POOL", "SWARM_CONFIG_MAP"]
    missing = [name for name in names if not os.environ.get(name)]
    if missing:
        sys.exit(f"swarm_worker: missing environment variables: {', '.join(missing)}")
    env = {name: os.environ[name] for name in names}
    lease_seconds = int(os.environ.get("SWARM_LEASE_DURATION_SECONDS", "10"))
    grace_seconds = float(os.environ.get("SWARM_TERMINATION_SECONDS", "25"))
    config_file = os.environ.get("SWARM_CONFIG_FILE", "/etc/swarm/config.yml")

    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()
    else:
        config.load_kube_config()
    core, coordination = client.CoreV1Api(), client.CoordinationV1Api()

    report = Report(os.environ.get("SWARM_WORKER_REPORT"), env["POD_NAME"], env["POD_UID"])
    lease = LeaseWriter(coordination, env, lease_seconds)
    worker = Worker(env["POD_NAME"], report, lease)
    report.write(None, [])

    termination_requested = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: termination_requested.set())
    signal.signal(signal.SIGINT, lambda *_: termination_requested.set())
    threading.Thread(target=lease.renew_forever, name="lease", daemon=True).start()
    threading.Thread(target=follow_config, args=(core, env, worker, config_file),
                     name="config", daemon=True).start()

    # A timed wait keeps the main thread responsive to signals.
    while not termination_requested.wait(1.0):
        pass
    log.info("SIGTERM: stopping every job")
    deadline = time.monotonic() + grace_seconds
    worker.terminate(deadline)
    if worker.done.wait(max(0.0, deadline - time.monotonic())):
        log.info("exiting: acknowledged a version without jobs")
    else:
        log.info("exiting: the termination period ended")


if __name__ == "__main__":
    main()
