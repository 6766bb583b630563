"""A swarm-operator worker in Python: the worker side of the acknowledged handoff protocol.

Under `rollout.policy: Acknowledge` a worker reads its entry of `config.yml` through the API
from a ConfigMap of its own, `<SWARM_CONFIG_MAP>.<POD_NAME>` (see `worker_config_map`), which
the operator writes with this pod's entry only. It applies each new config version (stop the
jobs its entry no longer lists, then start the new ones) and acknowledges the version in a
Lease of its own. It never reads the pool's ConfigMap `SWARM_CONFIG_MAP` itself. It uses only
the official `kubernetes` client, to show that the protocol needs nothing from the operator's
Rust crates.

Jobs are simulated: each runs in a thread until it is told to stop.

It fences itself: once its last successful Lease write was sent longer ago than the Lease
duration less a margin (time.monotonic()), it stops every job, and runs them again only after a
Lease write has succeeded and a GET of its ConfigMap issued after it has been read. It starts
fenced: a restarted container keeps its pod's uid, so the operator cannot tell this process's
start from the last renewal of the one before, which it may have judged expired and whose jobs
it may have handed to others. Nothing runs before this process's own first Lease write
succeeds and a fresh GET answers; a worker that cannot reach the API runs nothing.

Environment: POD_NAME, POD_NAMESPACE, POD_UID, SWARM_POOL (required), SWARM_CONFIG_MAP (the
pool's ConfigMap, whose name this worker's own ConfigMap name starts with; default
<SWARM_POOL>-config);
SWARM_LEASE_DURATION_SECONDS (default 40, renewed every quarter of it: one Lease write per 10 s
when nothing changes; an acknowledgement is written at once), SWARM_FENCE_MARGIN_SECONDS
(default max(2, duration / 5), at most half the duration), SWARM_TERMINATION_SECONDS (default
25), SWARM_WORKER_REPORT (optional), KUBECONFIG when run outside a cluster.
"""

import copy
import datetime
import json
import logging
import os
import random
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


def nano_time(ns=None):
    """Now (or `ns` since the epoch) in RFC 3339 with nanoseconds, UTC, as report lines carry it."""
    seconds, nanos = divmod(time.time_ns() if ns is None else ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


class Permit:
    """What a job checks before each unit of work: held until the fence's deadline (a
    time.monotonic() value), not at all while fenced. After SIGCONT any thread may run first; a
    job that checks its permit does no work once the Lease may look expired, before the fence's
    own thread has stopped it."""

    def __init__(self):
        self.until = None  # one attribute, read and written whole

    def holds(self):
        until = self.until
        return until is not None and time.monotonic() < until


def worker_config_map(env):
    """The name of this worker's own ConfigMap: the pool's ConfigMap name, a dot, the pod name
    (`swarm-worker-config.swarm-worker-0`). The operator writes each worker only its own slice
    of the config (its entry; the top-level version is the one at which that slice last
    changed), so a new config version sends watch traffic only to the workers whose jobs
    changed, not to every worker of the pool."""
    return f"{env['SWARM_CONFIG_MAP']}.{env['POD_NAME']}"


def parse_config(text, pod_name):
    """Returns (config version, this worker's jobs) of a config.yml, or None if unusable. Keys
    other than `version` and this pod's entry of `workloads` (e.g. `transit`) are ignored."""
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


# The Lease duration unless SWARM_LEASE_DURATION_SECONDS says otherwise: a node's heartbeat.
DEFAULT_LEASE_SECONDS = 40
DEFAULT_TERMINATION_SECONDS = 25


def renew_interval(duration):
    """How often the Lease is renewed when nothing changes: a quarter of its duration, so that a
    failed renewal is retried twice more before the fence."""
    return duration / 4


def retry_delay(failures, ceiling, draw=random.random):
    """The wait after the `failures`-th failed Lease write in a row: 1 s doubling up to the
    renewal interval, drawn from its upper half, so that workers that lost the API server
    together come back spread out and no faster than they renew."""
    delay = min(RETRY_SECONDS * 2 ** min(failures - 1, 16), ceiling)
    return delay / 2 + delay * draw() / 2


def timing_from_env(environ):
    """(lease seconds, fence margin, termination seconds) from the environment, or ValueError
    naming the variable that holds no usable number."""
    def seconds(name, default, whole):
        value = (environ.get(name) or "").strip()
        if not value:
            return default
        try:
            number = int(value) if whole else float(value)
        except ValueError:
            number = None
        if number is None or number != number or number <= 0 or number == float("inf"):
            expected = ("a whole number of seconds, at least 1" if whole
                        else "a positive number of seconds")
            raise ValueError(f"{name} is {value!r}: expected {expected}")
        return number

    lease = seconds("SWARM_LEASE_DURATION_SECONDS", DEFAULT_LEASE_SECONDS, True)
    margin = seconds("SWARM_FENCE_MARGIN_SECONDS", default_margin(lease), False)
    termination = seconds("SWARM_TERMINATION_SECONDS", DEFAULT_TERMINATION_SECONDS, False)
    return lease, margin, termination


POD_VARIABLES = ["POD_NAME", "POD_NAMESPACE", "POD_UID", "SWARM_POOL"]


def settings_from_env(environ):
    """(env, (lease seconds, fence margin, termination seconds)) from the pod's environment: env
    holds the pod's variables and SWARM_CONFIG_MAP (default `<SWARM_POOL>-config`); empty values
    count as unset. ValueError names what is missing or holds no usable number."""
    missing = [name for name in POD_VARIABLES if not (environ.get(name) or "").strip()]
    if missing:
        raise ValueError(f"missing environment variables: {', '.join(missing)}")
    env = {name: environ[name] for name in POD_VARIABLES}
    config_map = environ.get("SWARM_CONFIG_MAP") or ""
    env["SWARM_CONFIG_MAP"] = config_map if config_map.strip() else f"{env['SWARM_POOL']}-config"
    return env, timing_from_env(environ)


def default_margin(duration):
    """The fence margin for a Lease duration: room for stopping jobs and for clock rate drift."""
    return max(2.0, duration / 5)


def fence_limit(duration, margin):
    """How long after its last successful Lease write a worker may run jobs; the margin is held
    to half the duration so that a short Lease still leaves time for two renewals."""
    return duration - min(margin, duration / 2)


class Fence:
    """When to stop every job because the Lease may look expired to the operator, and when to
    run again; no I/O. Times are time.monotonic() seconds.

    Starts fenced: the start is no renewal, since the operator cannot tell it from the last
    renewal of a previous process of the same pod, which it may have judged expired. Fenced, a
    renewal in time asks for a fresh ConfigMap read (`renewed` returns its tag), and only that
    read, answered in time, lifts the fence (`read`); at the start exactly as after a pause.
    Live, it fences again once `limit` passes since the last successful Lease write was sent.
    """

    LIVE, FENCED, READING = "live", "fenced", "reading"

    def __init__(self, limit, start):
        self.limit = limit
        self.last_renewal = start  # when the last successful Lease write was sent, or the start
        self.state = Fence.FENCED
        self.awaited = None  # the tag of the read that may lift the fence
        self.reads = 0

    def is_live(self):
        return self.state == Fence.LIVE

    def deadline(self):
        """When to check next; None while fenced."""
        return self.last_renewal + self.limit if self.is_live() else None

    def expired(self, now):
        return now - self.last_renewal >= self.limit

    def check(self, now):
        """Fences if the last renewal is too old; True when it just did (stop every job)."""
        if self.is_live() and self.expired(now):
            self.state = Fence.FENCED
            return True
        return False

    def renewed(self, sent, streak, now):
        """A Lease write sent at `sent` succeeded, the last of a run of renewals without a gap of
        the limit that began at `streak`. Returns (newly fenced: stop every job, the tag of the
        ConfigMap read to issue now or None). A run that began after the last renewal known
        means the Lease was expired in between (a paused process), even if no check ran."""
        gap = streak > self.last_renewal
        self.last_renewal = max(self.last_renewal, sent)
        newly_fenced = self.is_live() and (gap or self.expired(now))
        if newly_fenced:
            self.state = Fence.FENCED
        read = None
        if self.state == Fence.FENCED and not self.expired(now):
            self.reads += 1
            self.state, self.awaited = Fence.READING, self.reads
            read = self.reads
        return newly_fenced, read

    def read(self, tag, now):
        """Whether the ConfigMap read `tag`, answered at `now`, lifts the fence."""
        if self.state != Fence.READING or tag != self.awaited:
            return False
        self.state = Fence.FENCED if self.expired(now) else Fence.LIVE
        return self.is_live()

    def read_failed(self, tag):
        if self.state == Fence.READING and tag == self.awaited:
            self.state = Fence.FENCED


def report_line(pod, uid, version, running, at, until=None):
    """One report line, without its newline, byte for byte as every worker writes it (see
    protocol/vectors/report.json): `until` is left out while the permit is not held."""
    line = {"pod": pod, "uid": uid, "version": version, "running": list(running), "at": at}
    if until is not None:
        line["until"] = until
    return json.dumps(line, separators=(",", ":"))


class Report:
    """The JSON lines file that tests read (SWARM_WORKER_REPORT); does nothing when unset."""

    def __init__(self, path, pod_name, pod_uid, permit=None):
        self.path, self.pod_name, self.pod_uid = path, pod_name, pod_uid
        self.permit = permit or Permit()

    def write(self, version, running):
        if not self.path:
            return
        until = self.permit.until
        if until is not None:
            # The permit's deadline on the wall clock: the jobs do no work after it.
            until = nano_time(time.time_ns() + int((until - time.monotonic()) * 1e9))
        line = report_line(self.pod_name, self.pod_uid, version, running, nano_time(), until)
        with open(self.path, "a", encoding="utf-8") as report:
            report.write(line + "\n")


class Job:
    """A simulated job: a thread that works until it is told to stop, a unit of work a second,
    each only while the worker's permit holds."""

    def __init__(self, name, permit):
        self.name = name
        self.permit = permit
        self._stop_requested = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"job {name}", daemon=True)

    def _run(self):
        log.info("job %s running", self.name)
        while not self._stop_requested.wait(1.0):
            if self.permit.holds():
                log.debug("job %s working", self.name)
            else:
                log.info("job %s not working: the Lease may have expired", self.name)
        log.info("job %s stopped", self.name)

    def start(self):
        self._thread.start()

    def request_stop(self):
        self._stop_requested.set()

    def join(self):
        self._thread.join()


def desired_lease(current, holder, acked, duration_seconds, now):
    """The Lease a worker writes for `holder` (pod, namespace, uid, pool) at `now` (a MicroTime),
    acknowledging `acked` (None: nothing yet), given the Lease read (None to create). A Lease
    left by another uid (a previous pod of the same name) is taken over: a new acquire time,
    this pod as its only Pod owner, no acknowledgement but this instance's. Labels, annotations
    and owners that are not the protocol's are kept. The test vectors in protocol/vectors/
    (lease.json) say exactly what it must give."""
    name, uid = holder["pod"], holder["uid"]
    lease = copy.deepcopy(current) if current else {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": holder["namespace"]}}
    metadata = lease.setdefault("metadata", {})
    metadata["labels"] = {**(metadata.get("labels") or {}), POOL_LABEL: holder["pool"]}
    annotations = {**(metadata.get("annotations") or {})}
    # The annotation speaks for this process only, never for a previous one.
    annotations.pop(ACKED_VERSION_ANNOTATION, None)
    if acked is not None:
        annotations[ACKED_VERSION_ANNOTATION] = str(acked)
    metadata["annotations"] = annotations
    # A previous pod instance owned it; the Lease must go with this one instead.
    owners = [owner for owner in metadata.get("ownerReferences") or []
              if not (owner.get("kind") == "Pod" and owner.get("uid") != uid)]
    if not any(owner.get("uid") == uid for owner in owners):
        owners.append({"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid})
    metadata["ownerReferences"] = owners
    spec = lease.get("spec") or {}
    if spec.get("holderIdentity") != uid:
        # Any holder but none counts, an empty one too, as client-go's leader election counts.
        if spec.get("holderIdentity") is not None:
            spec["leaseTransitions"] = (spec.get("leaseTransitions") or 0) + 1
        spec["holderIdentity"] = uid
        spec["acquireTime"] = now
    spec.setdefault("acquireTime", now)
    spec["renewTime"] = now
    spec["leaseDurationSeconds"] = max(1, int(duration_seconds))
    lease["spec"] = spec
    return lease


class LeaseWriter:
    """Keeps this pod's Lease: holder, renewal, owner reference and the acknowledged version."""

    def __init__(self, coordination, env, duration_seconds, limit, start,
                 on_renewed=lambda sent, streak: None):
        self.coordination = coordination
        self.env = env
        self.duration_seconds = duration_seconds
        self.limit = limit
        self.on_renewed = on_renewed  # called with each success's send time and run start
        self._lock = threading.Lock()
        self._version = None  # the version to acknowledge; None until the first one
        self._lease = None  # the Lease as last read or written, with its resourceVersion
        self.written_version = None  # the version the Lease carries after a successful write
        # A run of renewals begins at the start; the fence, fenced at the start, ignores it.
        self._last_sent = self._streak = start

    def acknowledge(self, version):
        """Writes `version` into the Lease; True once the API has stored it."""
        with self._lock:
            # Two threads may acknowledge (the config thread and a read after a fence).
            self._version = max(version, self._version or 0)
            return self._write()

    def renew_forever(self):
        """Writes the Lease at once and then every quarter of its duration, sooner after a
        failure; an acknowledgement that failed is written again here."""
        failures = 0
        while True:
            with self._lock:
                written = self._write()
            every = renew_interval(self.duration_seconds)
            failures = 0 if written else failures + 1
            time.sleep(every if written else retry_delay(failures, every))

    def _write(self):
        for _ in range(5):
            try:
                if self._lease is None:
                    self._lease = self._read()
                # The renewal counts from when it was sent, not from the answer.
                sent = time.monotonic()
                if self._lease is None:
                    self._lease = self._send(self.coordination.create_namespaced_lease,
                                             self._desired(None))
                else:
                    self._lease = self._send(self.coordination.replace_namespaced_lease,
                                             self._desired(self._lease), self.env["POD_NAME"])
                self.written_version = self._version
                self._renewed(sent)
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

    def _renewed(self, sent):
        if sent - self._last_sent >= self.limit:
            self._streak = sent  # a gap the operator may have seen as expiry
        self._last_sent = sent
        self.on_renewed(sent, self._streak)

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
        holder = {"pod": self.env["POD_NAME"], "namespace": self.env["POD_NAMESPACE"],
                  "uid": self.env["POD_UID"], "pool": self.env["SWARM_POOL"]}
        return desired_lease(current, holder, self._version, self.duration_seconds, micro_time())


class Worker:
    """Runs the jobs of this pod's entry and acknowledges each config version it has applied."""

    def __init__(self, pod_name, report, lease, fence):
        self.pod_name = pod_name
        self.report = report
        self.lease = lease
        self.fence = fence
        self.permit = report.permit  # the jobs' permit, which the report lines carry
        self.jobs = {}  # name -> Job, in the order they were started
        self.applied_version = None
        self.applied_entry_empty = False
        self.reapply = False  # fenced: the version applied is applied again after the fence
        self.terminating = False
        self.termination_deadline = None
        self.done = threading.Event()  # set once the worker may exit
        # Guards the jobs and the fence; never held across an API call, so that a hung request
        # cannot hold up fencing.
        self._lock = threading.Lock()
        self._renewal = None  # (sent, streak) of the last Lease write not yet given to the fence
        self._renewal_lock = threading.Lock()
        self._read_wanted = None  # the tag of a ConfigMap read the fence asks for
        self._latest_text = None  # the newest config.yml the watch delivered while fenced
        self._wake = threading.Event()

    def on_renewed(self, sent, streak):
        """Called by the Lease writer (holding its own lock) after each successful write."""
        with self._renewal_lock:
            self._renewal = (sent, streak)
        self._wake.set()

    def supervise(self, read_config):
        """The fence's own thread: checks it on a timer of its own, stops every job when it is
        due, and after a renewal issues the ConfigMap read (`read_config()`) that lifts it."""
        while True:
            with self._lock:
                self._check_fence()
                deadline = self.fence.deadline()
                read, self._read_wanted = self._read_wanted, None
            if read is not None:
                self._read_afresh(read, read_config)
                continue
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._wake.wait(timeout)
            self._wake.clear()

    def _read_afresh(self, read, read_config):
        try:
            text, version = read_config()
        except (ApiException, *CONNECTION_ERRORS) as error:
            log.warning("cannot read this worker's ConfigMap again (%s); still fenced", error)
            text = version = None
            missing = False
        else:
            missing = text is None and version is None
        if missing:
            # No ConfigMap yet: whatever the watch delivers later was written after this read.
            with self._lock:
                lifted = self.fence.read(read, time.monotonic())
                self._follow_fence()
            if lifted:
                log.info("Lease renewed; no ConfigMap of this worker yet: running nothing "
                         "until it comes")
        elif text is None or not self.handle_config(text, read=read):
            with self._lock:
                self.fence.read_failed(read)
            return
        # What the watch delivered while fenced was ignored; now live, the newest of it applies
        # (a version older than the one read is ignored).
        latest, self._latest_text = self._latest_text, None
        if latest is not None and self.fence.is_live():
            self.handle_config(latest)

    def _check_fence(self):
        """Brings the fence up to date and fences if due; True while fenced. Holds _lock."""
        with self._renewal_lock:
            renewal, self._renewal = self._renewal, None
        if renewal is not None:
            sent, streak = renewal
            newly_fenced, read = self.fence.renewed(sent, streak, time.monotonic())
            self._follow_fence()
            if newly_fenced:
                self._fence_jobs()
            if read is not None:
                self._read_wanted = read
                self._wake.set()
        if self.fence.check(time.monotonic()):
            self._follow_fence()
            self._fence_jobs()
        return not self.fence.is_live()

    def _follow_fence(self):
        """Moves the jobs' permit to the fence's deadline; a report line says when a renewal
        extended it for running jobs. Holds _lock."""
        until = self.fence.deadline()
        if until == self.permit.until:
            return
        self.permit.until = until
        if until is not None and self.jobs:
            self.report.write(self.applied_version, self.jobs)

    def _fence_jobs(self):
        stopped = list(self.jobs)
        self._stop_all()
        self.reapply = True
        if stopped:
            self.report.write(self.applied_version, [])
        log.warning("fenced: the Lease was not renewed in time; stopped %s; no job runs until "
                    "it is renewed and the config read again", stopped)

    def _stop_all(self):
        for job in self.jobs.values():
            job.request_stop()
        for job in self.jobs.values():
            job.join()
        self.jobs.clear()

    def handle_config(self, text, read=None):
        """Applies a config.yml text and acknowledges it. `read` tags a read the fence asked
        for; fenced, nothing else is applied. False if the text was not used."""
        parsed = parse_config(text, self.pod_name)
        if parsed is None:
            log.warning("ignoring a %s without a numeric version", CONFIG_KEY)
            return False
        version, entry = parsed
        with self._lock:
            if read is not None:
                lifted = self.fence.read(read, time.monotonic())
                self._follow_fence()
                if not lifted:
                    return False
                log.info("Lease renewed and config read again: running")
            elif not self.fence.is_live():
                self._latest_text = text
                return False
            if self._stale(version):
                return True
            if self.terminating:
                # A terminating worker never starts a job: it only confirms that it runs none.
                if entry:
                    return True
            elif not self._apply(version, entry):
                return True
        if self.terminating:
            self._acknowledge_while_terminating(version)
        elif not self.lease.acknowledge(version):
            log.warning("version %d applied; its acknowledgement will be retried", version)
        else:
            # SIGTERM may have come while the acknowledgement was in flight (it is sent without
            # the lock): then terminate() saw it unwritten, and only this can end the wait.
            with self._lock:
                self._done_if_acknowledged_empty()
        return True

    def _stale(self, version):
        # Acknowledged or older: a watch may replay. A version applied whose acknowledgement
        # failed is applied (no change) and acknowledged again when delivered again; after a
        # fence the version applied is applied again.
        applied = self.applied_version
        if self.reapply:
            return applied is not None and version < applied
        acknowledged = self.lease.written_version
        return ((acknowledged is not None and version <= acknowledged)
                or (applied is not None and version < applied))

    def _apply(self, version, entry):
        """Stops, then starts; False if the fence fell due before the starts. Holds _lock."""
        removed = [job for name, job in self.jobs.items() if name not in entry]
        for job in removed:
            job.request_stop()
        for job in removed:
            job.join()
            del self.jobs[job.name]
        if removed:
            self.report.write(version, self.jobs)
        # The stops may have taken long, or the process been paused: no start on an old renewal.
        if self._check_fence():
            return False
        added = [name for name in entry if name not in self.jobs]
        if added:
            self.report.write(version, list(self.jobs) + added)
            for name in added:
                self.jobs[name] = Job(name, self.permit)
                self.jobs[name].start()
        self.applied_version = version
        self.applied_entry_empty = not entry
        self.reapply = False
        log.info("applied version %d: running %s", version, list(self.jobs))
        return True

    def _acknowledge_while_terminating(self, version):
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
            if self.jobs:
                self._stop_all()
                self.report.write(self.applied_version, [])
            self._done_if_acknowledged_empty()

    def _done_if_acknowledged_empty(self):
        """Terminating, with a version without jobs applied and acknowledged: nothing is left
        for the operator to wait for, so the worker may exit. Holds _lock."""
        if (self.terminating and self.applied_entry_empty
                and self.lease.written_version == self.applied_version):
            self.done.set()


def read_config_map(core, env):
    """GETs this worker's ConfigMap: (config.yml text or None, resourceVersion); (None, None) if
    it does not exist (yet)."""
    try:
        response = core.read_namespaced_config_map(
            worker_config_map(env), env["POD_NAMESPACE"],
            _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
    except ApiException as error:
        if error.status == 404:
            return None, None
        raise
    config_map = json.loads(response.data)
    return (config_map.get("data") or {}).get(CONFIG_KEY), config_map["metadata"]["resourceVersion"]


def follow_config(core, env, worker):
    """GET, then WATCH this worker's ConfigMap by name from that resourceVersion; GET again on
    any error. A ConfigMap not created yet (404) is watched without a resourceVersion, which
    starts with the object as it is, so one created after the GET is not missed (no polling).
    Fenced (at the start too), the worker ignores what this delivers: the fence's own read
    lifts the fence and applies the entry."""
    name = worker_config_map(env)
    expired = False
    while True:
        try:
            text, resource_version = read_config_map(core, env)
        except (ApiException, *CONNECTION_ERRORS) as error:
            log.warning("reading ConfigMap %s failed: %s", name, error)
            time.sleep(RETRY_SECONDS)
            continue
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
                        field_selector=f"metadata.name={name}",
                        resource_version=resource_version, timeout_seconds=WATCH_SECONDS,
                        _request_timeout=(REQUEST_TIMEOUT[0], WATCH_SECONDS + 30)):
                    if event["type"] in ("ADDED", "MODIFIED"):
                        worker.handle_config((event["raw_object"].get("data") or {}).get(CONFIG_KEY))
                # The server closed the watch after timeoutSeconds: carry on from where it was.
                resource_version = stream.resource_version
        except ApiException as error:
            # 410 Gone arrives as an ERROR event when the history no longer reaches back.
            log.info("watch of ConfigMap %s ended (%s %s); reading it again",
                     name, error.status, error.reason)
            expired = error.status == 410
            if not expired:
                time.sleep(RETRY_SECONDS)
        except CONNECTION_ERRORS as error:
            log.warning("watch of ConfigMap %s failed: %s; reading it again", name, error)
            time.sleep(RETRY_SECONDS)
        except Exception:  # noqa: BLE001 - this thread must outlive any surprise to keep acking
            log.exception("unexpected error following ConfigMap %s; reading it again", name)
            time.sleep(RETRY_SECONDS)


def main():
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The client's own retries would log each refused connection; ours say enough.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    try:
        env, (lease_seconds, margin, grace_seconds) = settings_from_env(os.environ)
    except ValueError as error:
        sys.exit(f"swarm_worker: {error}")

    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()
    else:
        config.load_kube_config()
    core, coordination = client.CoreV1Api(), client.CoordinationV1Api()
    log.info("following ConfigMap %s (this worker's own slice of pool ConfigMap %s)",
             worker_config_map(env), env["SWARM_CONFIG_MAP"])

    report = Report(os.environ.get("SWARM_WORKER_REPORT"), env["POD_NAME"], env["POD_UID"])
    start, limit = time.monotonic(), fence_limit(lease_seconds, margin)
    lease = LeaseWriter(coordination, env, lease_seconds, limit, start)
    worker = Worker(env["POD_NAME"], report, lease, Fence(limit, start))
    lease.on_renewed = worker.on_renewed
    report.write(None, [])

    termination_requested = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: termination_requested.set())
    signal.signal(signal.SIGINT, lambda *_: termination_requested.set())
    threading.Thread(target=worker.supervise, args=(lambda: read_config_map(core, env),),
                     name="fence", daemon=True).start()
    threading.Thread(target=lease.renew_forever, name="lease", daemon=True).start()
    threading.Thread(target=follow_config, args=(core, env, worker),
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
