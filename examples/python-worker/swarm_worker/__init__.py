"""A swarm-operator worker in Python: the worker side of the acknowledged handoff protocol.

Under `rollout.policy: Acknowledge` a worker reads its entry of `config.yml` through the API
from a ConfigMap of its own, `<SWARM_CONFIG_MAP>.<POD_NAME>` (see `worker_config_map`), which
the operator writes with this pod's entry only. It never reads the pool's ConfigMap
`SWARM_CONFIG_MAP` itself. It uses only the official `kubernetes` client, to show that the
protocol needs nothing from the operator's Rust crates.

It is fenced by reads: a *fence read*, a GET of its ConfigMap with no resourceVersion (a quorum
read), sent at `s` and answered before `s + F`, gives the jobs it lists a permit until `s + F`
on time.monotonic(). It sends one every F/2, retries failures sooner, and reads at once on a
watch event; a timer of its own stops the jobs whose permit lapses. A 429 on any of its requests
holds them all (`Shed`). It writes its Lease only at
start and to acknowledge a version it has applied, and serves `/readyz`, which the kubelet
probes to learn that it is alive. The rules are docs/worker-protocol.md, "Acknowledged
handoff: the worker protocol"; `Fence` holds them with no I/O.

Jobs are simulated: each runs in a thread until it is told to stop.

Environment: POD_NAME, POD_NAMESPACE, POD_UID, SWARM_POOL (required), SWARM_CONFIG_MAP (the
pool's ConfigMap, whose name this worker's own ConfigMap name starts with; default
<SWARM_POOL>-config), SWARM_PERMIT_SECONDS (the permit F, whole seconds, at least 2; default
30), SWARM_WORKER_HEALTH_ADDR (where /readyz and /healthz are served, an IP:port; default
0.0.0.0:8081; port 0 picks a free one), SWARM_TERMINATION_SECONDS (default 25),
SWARM_WORKER_REPORT (optional), KUBECONFIG when run outside a cluster.

Run it as `swarm-python-worker` (the console script) or `python -m swarm_worker`.
"""

import contextlib
import copy
import dataclasses
import functools
import datetime
import http.server
import ipaddress
import json
import logging
import math
import os
import random
import signal
import socket
import socketserver
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
# A short bound on each Lease request, so a silent API cannot hold up an acknowledgement.
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


# The fence arithmetic, as protocol/src/fence.rs has it (protocol/vectors/fence.json).
DEFAULT_PERMIT_SECONDS = 30
MIN_PERMIT_SECONDS = 2


def read_interval(permit):
    """How often a fence read is sent when nothing fails: half the permit, so a read that fails
    leaves half of it to retry in."""
    return permit / 2


def read_timeout(permit):
    """How long a fence read may take before the worker gives it up: the permit, after which
    its answer could renew nothing. Never sooner: one read is in flight at a time and the next
    is sent only once it has ended, so a slow API server gets fewer reads, never more."""
    return permit


def ready_within(permit):
    """How long after the send of its last successful read the worker answers ready: three
    fifths of the permit, so one read may be late by a fifth before the pod turns NotReady."""
    return permit * 3 / 5


def retry_delay(failures, permit):
    """The wait before retrying after `failures` failed reads in a row: 1 s doubling, held to an
    eighth of the permit, so a worker cut off tries four times or more before it lapses."""
    return min(RETRY_SECONDS * 2 ** (min(max(failures, 1), 16) - 1), permit / 8)


def shed_retry_delay(permit, draw):
    """The wait before the next read after the API server shed one (429 Too Many Requests): a
    quarter of the permit plus `draw` (in [0, 1)) times another quarter. Workers turned away
    together come back spread out and at about their resting rate, not the quick retries of a
    failure that would keep an overloaded server overloaded; one more read still fits before
    the permit lapses."""
    return permit / 4 + permit / 4 * min(max(draw, 0.0), 1.0)


def lease_retry_delay(failures, ceiling, draw=random.random):
    """The wait after the `failures`-th failed Lease write in a row: 1 s doubling up to
    `ceiling`, drawn from its upper half, so that workers that lost the API server together come
    back spread out."""
    delay = min(RETRY_SECONDS * 2 ** min(failures - 1, 16), ceiling)
    return delay / 2 + delay * draw() / 2


# How a request that went through the shed gate ended.
ANSWERED = "answered"  # with anything but a 429
SHED = "shed"  # 429 Too Many Requests
FAILED = "failed"  # no answer (a broken connection, a timeout), or given up


@dataclasses.dataclass(frozen=True)
class Turn:
    """What a request that asks to be sent is told: send now (as the probe or not), or ask again
    at `until`, or, when it is None, once the probe in flight has ended."""

    send: bool = False
    probe: bool = False
    until: object = None


class Gate:
    """One hold per worker, with no I/O, on explicit times (docs/worker-protocol.md, "One hold
    per worker"): a 429 on any request holds every request until `held_until`, then lets one
    through at a time (the probe: the fence read when one waits, as it is what keeps the jobs
    running) until one is answered without a 429. A backoff per kind of request let each come
    back on its own and sent an overloaded API server three times as much."""

    def __init__(self):
        self.held_until = None  # None: not shed
        self.probing = False
        # Fence reads waiting to be sent: the probe is theirs, or a Lease write or the watch
        # could take every probe while the jobs' permits lapse.
        self.fences_waiting = 0

    def ask(self, now, fence=False):
        """The turn of a request asking at `now`; `fence` for a fence read."""
        if self.held_until is None:
            return Turn(send=True)
        if now < self.held_until:
            return Turn(until=self.held_until)
        if self.probing or (not fence and self.fences_waiting > 0):
            return Turn()
        self.probing = True
        return Turn(send=True, probe=True)

    def ended(self, probe, outcome, shed_until=None):
        """A request ended: a 429 holds until `shed_until` (a hold only lengthens); a probe
        answered otherwise ends the hold, one that failed or was given up lets the next request
        probe. A request sent before the hold began ends nothing: a 429 came after it left."""
        if probe:
            self.probing = False
        if outcome == SHED:
            self.held_until = (shed_until if self.held_until is None
                               else max(self.held_until, shed_until))
        elif outcome == ANSWERED and probe:
            self.held_until = None


def outcome_of(error):
    """How a request that raised `error` (None: returned) ended."""
    if error is None:
        return ANSWERED
    if isinstance(error, ApiException) and error.status:
        return SHED if error.status == 429 else ANSWERED
    return FAILED


class Shed:
    """The gate shared by the worker's threads: every request to the API server goes in
    `with shed.admit():`, which waits for the hold and learns the answer from what the block
    raises."""

    def __init__(self, permit_seconds, draw=random.random):
        self.permit = permit_seconds  # scales the hold: F/4 to F/2
        self._draw = draw
        self._gate = Gate()
        self._changed = threading.Condition()

    @contextlib.contextmanager
    def admit(self, fence=False):
        """`fence` for a fence read, which is the probe once a hold ends."""
        probe = self._turn(fence)
        error = None
        try:
            yield
        except BaseException as raised:
            error = raised
            raise
        finally:
            self._ended(probe, outcome_of(error))

    def gated(self, request):
        """`request`, each call through the gate (its name and signature kept for watch.Watch,
        which reads them)."""
        @functools.wraps(request)
        def call(*args, **kwargs):
            with self.admit():
                return request(*args, **kwargs)
        return call

    def _turn(self, fence):
        with self._changed:
            # A fence read counts as waiting from its call until it is admitted or given up.
            self._gate.fences_waiting += int(fence)
            try:
                while not (turn := self._gate.ask(time.monotonic(), fence)).send:
                    self._changed.wait(None if turn.until is None
                                       else turn.until - time.monotonic())
                return turn.probe
            finally:
                self._gate.fences_waiting -= int(fence)
                # A request that deferred to this fence read may probe now.
                self._changed.notify_all()

    def _ended(self, probe, outcome):
        with self._changed:
            until = None
            if outcome == SHED:
                until = time.monotonic() + shed_retry_delay(self.permit, self._draw())
            self._gate.ended(probe, outcome, until)
            self._changed.notify_all()


def api_client(configuration):
    """The worker's client: urllib3 retries a GET or PUT answered 429 with Retry-After, as API
    Priority and Fairness answers, up to 3 times inside one call (its default Retry(3)), unseen
    by the worker's hold; this one hands the 429 over on the first answer and keeps the
    default's retries of a refused connection."""
    configuration.retries = urllib3.Retry(3, respect_retry_after_header=False)
    return client.ApiClient(configuration)


@dataclasses.dataclass(frozen=True)
class Change:
    """What one event asks of the worker, in this order: stop `stop` and wait until they have
    stopped, move the permit of `keep` to `until`, start `start` with that permit; then write
    `ack` (if not None) into the Lease."""

    version: object = None
    stop: tuple = ()
    keep: tuple = ()
    start: tuple = ()
    until: object = None
    extended: bool = False
    ack: object = None


class Fence:
    """The fence of one worker process, with no I/O: which jobs may run until when, when to
    read next, whether it is ready and what to acknowledge. Times are time.monotonic() seconds.

    It starts fenced: nothing runs until a fence read answers, since a restarted container
    keeps its pod's uid and the operator may be handing the old process's jobs away."""

    def __init__(self, permit_seconds, start):
        self.permit = permit_seconds
        self.running = frozenset()
        self.until = None  # when the permit of every running job lapses
        self.version = None  # the version of the last read answered
        self.last_sent = None  # the send of the last successful read
        self.failures = 0
        self.next_read_at = start
        self.terminating = False
        self.acked = None
        self.acked_empty = False  # the entry of `acked` had no jobs
        self._watched_at = None

    def ready(self, at):
        return (not self.terminating and self.last_sent is not None
                and at < self.last_sent + ready_within(self.permit))

    def read(self, at, sent_at, version, jobs):
        """A fence read sent at `sent_at` answered at `at` with `version` (None: no config) and
        this worker's `jobs`."""
        lapsed = self._lapse(at)
        self.last_sent, self.failures = sent_at, 0
        self.next_read_at = sent_at + read_interval(self.permit)
        if self._watched_at is not None and self._watched_at > sent_at:
            # A watch event came while this read was in flight: it may not show that change.
            self.next_read_at = min(self.next_read_at, self._watched_at)
        listed = frozenset(jobs)
        permitted = not self.terminating and at < sent_at + self.permit
        after = listed if permitted else frozenset()
        change = Change(
            version=version, stop=tuple(sorted(lapsed | (self.running - after))),
            keep=tuple(sorted(self.running & after)), start=tuple(sorted(after - self.running)),
            until=sent_at + self.permit if after else None, extended=bool(after))
        self.running, self.until, self.version = after, change.until, version
        if (version is not None and (self.acked is None or version > self.acked)
                and (permitted or not listed)):
            # The worker now runs exactly this entry.
            self.acked, self.acked_empty = version, not listed
            change = dataclasses.replace(change, ack=version)
        return change

    def read_failed(self, at):
        lapsed = self._lapse(at)
        self.failures += 1
        self.next_read_at = at + retry_delay(self.failures, self.permit)
        return self._stopping(lapsed)

    def read_shed(self, at, draw):
        """The API server shed a read (429): the next goes F/4 to F/2 later, at `draw`."""
        lapsed = self._lapse(at)
        self.failures += 1
        self.next_read_at = at + shed_retry_delay(self.permit, draw)
        return self._stopping(lapsed)

    def watch(self, at):
        """A watch event: proves nothing, asks for a read at once."""
        lapsed = self._lapse(at)
        self.next_read_at = self._watched_at = at
        return self._stopping(lapsed)

    def tick(self, at):
        return self._stopping(self._lapse(at))

    def sigterm(self, at):
        lapsed = self._lapse(at)
        stopped = lapsed | self.running
        self.running, self.until, self.terminating = frozenset(), None, True
        return self._stopping(stopped)

    def _lapse(self, at):
        if self.until is None or at < self.until:
            return frozenset()
        lapsed, self.running, self.until = self.running, frozenset(), None
        return lapsed

    def _stopping(self, stopped):
        return Change(version=self.version, stop=tuple(sorted(stopped)))


class Permit:
    """What a job checks before each unit of work: a deadline on time.monotonic(), the send of
    the last fence read that listed the job plus the permit. A process paused past it resumes
    all its threads at once; a job that checks its permit does no work before the worker's
    timer has stopped it. Each job has its own, so a read that does not list it never extends
    it."""

    def __init__(self, until=None):
        self.until = until  # one attribute, read and written whole

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


class ConfigError(ValueError):
    """Why a config.yml is unusable: the field and what is wrong with it."""


class _Composer(yaml.SafeLoader):
    """Composes a YAML text into nodes without YAML 1.1's reading of plain scalars (`yes` is
    true, `010` is 8), keeping each node's explicit tag (`explicit`, None when untagged): the
    reader below resolves what it reads as the protocol says, as the Rust crate does."""

    def compose_node(self, parent, index):
        # YAML 1.2 lets a node define an anchor again, and an alias then refers to the latest
        # definition before it, as the Rust and Go readers have it; PyYAML refuses the second.
        if not self.check_event(yaml.AliasEvent):
            self.anchors.pop(self.peek_event().anchor, None)
        return super().compose_node(parent, index)

    def compose_scalar_node(self, anchor):
        return self._tagged(super().compose_scalar_node, anchor)

    def compose_sequence_node(self, anchor):
        return self._tagged(super().compose_sequence_node, anchor)

    def compose_mapping_node(self, anchor):
        return self._tagged(super().compose_mapping_node, anchor)

    def _tagged(self, compose, anchor):
        tag = self.peek_event().tag
        node = compose(anchor)
        node.explicit = tag
        return node


_CORE = "tag:yaml.org,2002:"
_BYTE_ORDER_MARK = "\ufeff"
_NULLS = ("null", "Null", "NULL", "~")


def _is_plain(node):
    return isinstance(node, yaml.ScalarNode) and node.style is None


def _is_null(node, path):
    """Whether an optional value is absent: a plain null (untagged, or tagged !!null)."""
    if not _is_plain(node):
        return False
    if node.explicit == _CORE + "null":
        if node.value not in _NULLS:
            raise ConfigError(f"{path}: {node.value!r} tagged !!null is not null")
        return True
    return node.explicit is None and node.value in ("",) + _NULLS


def _digits(text, base):
    """The value of `text`, digits of `base` only (no sign, no `_`), or None."""
    allowed = "0123456789abcdef"[:base]
    if not text or any(c not in allowed for c in text.lower()):
        return None
    return int(text, base)


def _whole(text):
    """An unquoted version, read as YAML 1.2's core schema reads an integer: decimal without
    leading zeros, or 0x, 0o, 0b; an optional `+`; from 0 to 2^64-1. None otherwise."""
    unsigned = text[1:] if text.startswith("+") else text
    for prefix, base in (("0x", 16), ("0o", 8), ("0b", 2)):
        rest = unsigned[2:]
        if unsigned.startswith(prefix) and not rest.startswith(("+", "-")):
            value = _digits(rest, base)
            if value is not None and value < 2**64:
                return value
        elif unsigned.startswith(prefix):
            return None
    digits = text[1:] if text[:1] in "+-" else text
    if unsigned.startswith(("+", "-")) or (len(digits) > 1 and digits[0] == "0"
                                          and digits.isascii() and digits.isdigit()):
        return None
    value = _digits(unsigned, 10)
    return value if value is not None and value < 2**64 else None


def _version(node, path):
    """A version: missing or null reads as 0; else an unquoted whole number (any tag)."""
    if node is None or _is_null(node, path):
        return 0
    value = None
    if isinstance(node, yaml.ScalarNode):
        literal_int = node.style == "|" and node.explicit == _CORE + "int"
        value = _whole(node.value) if node.style is None or literal_int else None
    if value is None:
        raise ConfigError(f"{path}: expected an unquoted whole number from 0 to 2^64-1, "
                          f"found {_shown(node)}")
    return value


def _name(node, path):
    """A pod or job name: any scalar's text, as written (`1` is the job "1")."""
    if not isinstance(node, yaml.ScalarNode):
        raise ConfigError(f"{path}: expected a name, found {_shown(node)}")
    return node.value


def _shown(node):
    if isinstance(node, yaml.ScalarNode):
        return repr(node.value) if node.style else node.value or "nothing"
    return "a mapping" if isinstance(node, yaml.MappingNode) else "a list"


def _items(node, path, kind):
    """The items of an optional mapping or list: none when null or an empty plain scalar."""
    if node is None or _is_null(node, path) or (_is_plain(node) and node.value == ""):
        return []
    if isinstance(node, kind):
        return node.value
    expected = "a mapping" if kind is yaml.MappingNode else "a list"
    raise ConfigError(f"{path}: expected {expected}, found {_shown(node)}")


def _fields(node, path, names):
    """The known fields of a mapping (the others are ignored), each given once."""
    fields = {}
    for key, value in _items(node, path, yaml.MappingNode):
        key = _name(key, f"{path} key")
        if key in names:
            if key in fields:
                raise ConfigError(f"{path}: duplicate field {key}")
            fields[key] = value
    return fields


def _jobs(node, path):
    jobs = _items(node, path, yaml.SequenceNode)
    return [_name(job, f"{path}[{i}]") for i, job in enumerate(jobs)]


def read_config(text, pod_name):
    """(config version, this worker's jobs) of a config.yml, by the protocol's rules
    (docs/worker-protocol.md, "Reading config.yml"), or ConfigError saying what is wrong. Every
    entry and the jobs in transit are checked, though only this pod's entry is used."""
    if not (text or "").strip():
        raise ConfigError("config.yml is empty")
    # PyYAML skips one U+FEFF at the text's start and reads any other as text, where the Rust
    # and Go readers skip it in other places: all three refuse it.
    if _BYTE_ORDER_MARK in text:
        raise ConfigError("config.yml holds a byte order mark (U+FEFF); a name with one is "
                          'written as the escape "\\uFEFF"')
    try:
        root = yaml.compose(text, Loader=_Composer)
    except (yaml.YAMLError, RecursionError) as error:
        raise ConfigError(f"config.yml is not YAML: {error}") from None
    if root is None:
        raise ConfigError("config.yml holds no document, so no mapping")
    if not isinstance(root, yaml.MappingNode) or (root.explicit or "").startswith("!"):
        raise ConfigError(f"config.yml must be a mapping without a local tag, found "
                          f"{root.explicit or ''} {_shown(root)}".replace("  ", " "))
    try:
        return _read_root(root, pod_name)
    except ConfigError as error:
        raise ConfigError(f"config.yml is not a worker config: {error}") from None


def _read_root(root, pod_name):
    fields = _fields(root, "config.yml", ("version", "workloads", "transit"))
    version = _version(fields.get("version"), "version")
    entries = {}
    for key, value in _items(fields.get("workloads"), "workloads", yaml.MappingNode):
        pod = _name(key, "workloads key")
        entry = _fields(value, f"workloads.{pod}", ("version", "jobs"))
        _version(entry.get("version"), f"workloads.{pod}.version")
        entries[pod] = _jobs(entry.get("jobs"), f"workloads.{pod}.jobs")
    for key, value in _items(fields.get("transit"), "transit", yaml.MappingNode):
        _jobs(value, f"transit.{_name(key, 'transit key')}")
    return version, entries.get(pod_name, [])


def parse_config(text, pod_name):
    """read_config, or None if the text is unusable."""
    try:
        return read_config(text, pod_name)
    except ConfigError:
        return None


DEFAULT_TERMINATION_SECONDS = 25
DEFAULT_HEALTH_ADDR = "0.0.0.0:8081"
POD_VARIABLES = ["POD_NAME", "POD_NAMESPACE", "POD_UID", "SWARM_POOL"]
# The settings of the renewing protocol: refused, so that a pod template written for it is fixed
# rather than silently run with other timing.
RETIRED_VARIABLES = {
    "SWARM_LEASE_DURATION_SECONDS": "set SWARM_PERMIT_SECONDS instead",
    "SWARM_FENCE_MARGIN_SECONDS": "the permit needs no margin; remove it",
}


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the worker reads from its pod's environment."""

    env: dict  # the pod's variables and SWARM_CONFIG_MAP
    permit_seconds: int
    termination_seconds: float
    health_addr: str  # IP:port, as given

    def health_host_port(self):
        host, _, port = self.health_addr.rpartition(":")
        return host.strip("[]"), int(port)


def parse_health_addr(value):
    """An `IP:port` literal (IPv6 in brackets), or ValueError."""
    host, separator, port = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host, version = host[1:-1], 6
    else:
        version = 4
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if (not separator or address is None or address.version != version
            or not port.isdigit() or int(port) > 65535):
        raise ValueError(f"SWARM_WORKER_HEALTH_ADDR is {value!r}: expected an IP:port such as "
                         f"{DEFAULT_HEALTH_ADDR} or [::]:8081 (port 0 picks a free one)")
    return value


def settings_from_env(environ):
    """The worker's settings from the pod's environment; empty values count as unset.
    ValueError names what is missing, holds no usable value, or is no longer read."""
    def value(name):
        return (environ.get(name) or "").strip()

    missing = [name for name in POD_VARIABLES if not value(name)]
    if missing:
        raise ValueError(f"missing environment variables: {', '.join(missing)}")
    for name, advice in RETIRED_VARIABLES.items():
        if value(name):
            raise ValueError(f"{name} is no longer read: the worker is fenced by reads of its "
                             f"ConfigMap and renews no Lease; {advice}")
    env = {name: environ[name] for name in POD_VARIABLES}
    env["SWARM_CONFIG_MAP"] = value("SWARM_CONFIG_MAP") or f"{env['SWARM_POOL']}-config"

    permit = DEFAULT_PERMIT_SECONDS
    if value("SWARM_PERMIT_SECONDS"):
        try:
            permit = int(value("SWARM_PERMIT_SECONDS"))
        except ValueError:
            permit = None
        if permit is None or permit < MIN_PERMIT_SECONDS:
            raise ValueError(f"SWARM_PERMIT_SECONDS is {value('SWARM_PERMIT_SECONDS')!r}: "
                             f"expected a whole number of seconds, at least {MIN_PERMIT_SECONDS}")
    termination = DEFAULT_TERMINATION_SECONDS
    if value("SWARM_TERMINATION_SECONDS"):
        try:
            termination = float(value("SWARM_TERMINATION_SECONDS"))
        except ValueError:
            termination = math.nan
        if not (0 < termination < math.inf):
            raise ValueError(f"SWARM_TERMINATION_SECONDS is "
                             f"{value('SWARM_TERMINATION_SECONDS')!r}: expected a positive "
                             f"number of seconds")
    health = parse_health_addr(value("SWARM_WORKER_HEALTH_ADDR") or DEFAULT_HEALTH_ADDR)
    return Settings(env, permit, termination, health)


def report_line(pod, uid, version, running, at, until=None):
    """One report line, without its newline, byte for byte as every worker writes it (see
    protocol/vectors/report.json): `until` is left out while the permit is not held."""
    line = {"pod": pod, "uid": uid, "version": version, "running": list(running), "at": at}
    if until is not None:
        line["until"] = until
    # Non-ASCII as UTF-8, not \u escapes: the bytes serde_json writes.
    return json.dumps(line, separators=(",", ":"), ensure_ascii=False)


class Report:
    """The JSON lines file that tests read (SWARM_WORKER_REPORT); does nothing when unset."""

    def __init__(self, path, pod_name, pod_uid):
        self.path, self.pod_name, self.pod_uid = path, pod_name, pod_uid

    def write(self, version, running, until=None):
        """`until` is the permit's deadline on time.monotonic(), written on the wall clock."""
        if not self.path:
            return
        if until is not None:
            until = nano_time(time.time_ns() + int((until - time.monotonic()) * 1e9))
        line = report_line(self.pod_name, self.pod_uid, version, running, nano_time(), until)
        with open(self.path, "a", encoding="utf-8") as report:
            report.write(line + "\n")


class Job:
    """A simulated job: a thread that works until it is told to stop, a unit of work a second,
    each only while its permit holds."""

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
                log.info("job %s not working: its permit has lapsed", self.name)
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
    """Writes this pod's Lease once at start and then once per version acknowledged, never to
    renew it; retries a failed write with backoff, and a shed one (429) once `shed` lets it.
    A failed write stops no job: only permits do."""

    def __init__(self, coordination, env, permit_seconds, shed,
                 on_written=lambda version: None):
        self.coordination = coordination
        self.env = env
        self.permit_seconds = permit_seconds
        self.shed = shed
        self.on_written = on_written  # called with the version each successful write carries
        self._changed = threading.Condition()
        self._wanted = None  # the version to acknowledge; None until the first one
        self._started = False  # the write at start has succeeded
        self.written_version = None
        self._lease = None  # the Lease as last read or written, with its resourceVersion

    def acknowledge(self, version):
        """Asks for `version` to be written; the write follows in write_forever's thread."""
        with self._changed:
            self._wanted = max(version, self._wanted or 0)
            self._changed.notify_all()

    def write_forever(self):
        failures = 0
        while True:
            with self._changed:
                while self._started and self._wanted == self.written_version:
                    self._changed.wait()
                version = self._wanted
            outcome = self._write(version)
            if outcome == ANSWERED:
                failures = 0
                with self._changed:
                    self._started, self.written_version = True, version
                self.on_written(version)
            elif outcome == FAILED:
                failures += 1
                time.sleep(lease_retry_delay(failures, self.permit_seconds / 2))
            # SHED: the next request waits for the worker's hold in shed.admit.

    def _write(self, version):
        """One read-modify-write: ANSWERED once written, SHED or FAILED."""
        for _ in range(5):
            try:
                if self._lease is None:
                    self._lease = self._read()
                if self._lease is None:
                    self._lease = self._send(self.coordination.create_namespaced_lease,
                                             self._desired(None, version))
                else:
                    self._lease = self._send(self.coordination.replace_namespaced_lease,
                                             self._desired(self._lease, version),
                                             self.env["POD_NAME"])
                return ANSWERED
            except ApiException as error:
                # 409: someone else wrote it (or created it first); 404: it was deleted.
                if error.status not in (404, 409):
                    log.warning("writing the Lease failed: %s %s", error.status, error.reason)
                    return SHED if error.status == 429 else FAILED
                self._lease = None
            except CONNECTION_ERRORS as error:
                log.warning("writing the Lease failed: %s", error)
                return FAILED
        return FAILED

    def _read(self):
        try:
            with self.shed.admit():
                response = self.coordination.read_namespaced_lease(
                    self.env["POD_NAME"], self.env["POD_NAMESPACE"],
                    _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return json.loads(response.data)

    def _send(self, method, body, *name):
        with self.shed.admit():
            response = method(*name, self.env["POD_NAMESPACE"], body,
                              _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        return json.loads(response.data)

    def _desired(self, current, version):
        holder = {"pod": self.env["POD_NAME"], "namespace": self.env["POD_NAMESPACE"],
                  "uid": self.env["POD_UID"], "pool": self.env["SWARM_POOL"]}
        return desired_lease(current, holder, version, self.permit_seconds, micro_time())


class Worker:
    """Runs the jobs of this pod's entry as the fence allows: sends the fence reads, applies
    them, stops jobs whose permit lapses, answers readiness and acknowledges."""

    def __init__(self, pod_name, report, lease, fence, shed=None):
        self.pod_name = pod_name
        self.report = report
        self.lease = lease
        self.fence = fence
        self.shed = shed or Shed(fence.permit)  # shared with the Lease writer and the watch
        self.jobs = {}  # name -> Job
        self.done = threading.Event()  # set once a terminating worker may exit
        self.first_read = threading.Event()
        self.resource_version = None  # of the ConfigMap in the last fence read; None if absent
        # Guards the fence and the jobs; never held across an API call, so that a hung request
        # cannot delay a lapse. Notified whenever a deadline may have moved.
        self._changed = threading.Condition()

    def ready(self):
        with self._changed:
            return self.fence.ready(time.monotonic())

    def read_forever(self, get):
        """Sends the fence reads, one at a time: `get()` GETs the ConfigMap and returns (its
        config.yml or None, its resourceVersion), (None, None) if it does not exist."""
        while True:
            with self._changed:
                while (wait := self.fence.next_read_at - time.monotonic()) > 0:
                    self._changed.wait(wait)
            try:
                with self.shed.admit(fence=True):
                    # The permit counts from the send, after any hold, not the answer.
                    sent = time.monotonic()
                    text, resource_version = get()
            except ApiException as error:
                log.warning("fence read failed: %s", error)
                if error.status == 429:
                    self.read_shed()
                else:
                    self.read_failed()
                continue
            except CONNECTION_ERRORS as error:
                log.warning("fence read failed: %s", error)
                self.read_failed()
                continue
            except Exception:  # noqa: BLE001 - this thread must outlive any surprise
                log.exception("fence read failed")
                self.read_failed()
                continue
            try:
                parsed = (None, []) if text is None else read_config(text, self.pod_name)
            except ConfigError as error:
                log.warning("fence read found an unusable %s: %s", CONFIG_KEY, error)
                self.read_failed()
                continue
            self.resource_version = resource_version
            self.apply_read(sent, *parsed)
            self.first_read.set()

    def read_failed(self):
        with self._changed:
            self._apply(self.fence.read_failed(time.monotonic()))

    def read_shed(self):
        with self._changed:
            self._apply(self.fence.read_shed(time.monotonic(), random.random()))

    def apply_read(self, sent, version, jobs):
        with self._changed:
            change = self.fence.read(time.monotonic(), sent, version, jobs)
            self._apply(change)
        if change.ack is not None:
            self.lease.acknowledge(change.ack)

    def watched(self):
        """A watch event for this worker's ConfigMap: read at once."""
        with self._changed:
            self._apply(self.fence.watch(time.monotonic()))

    def lapse_forever(self):
        """The timer that stops the jobs whose permit lapses, whatever the reads are doing."""
        with self._changed:
            while True:
                self._apply(self.fence.tick(time.monotonic()))
                until = self.fence.until
                self._changed.wait(None if until is None else until - time.monotonic())

    def terminate(self):
        """SIGTERM: stops every job at once; from now on nothing starts and only versions
        without jobs are acknowledged."""
        with self._changed:
            self._apply(self.fence.sigterm(time.monotonic()))
            self._done_if_acknowledged_empty()

    def on_written(self, _version):
        with self._changed:
            self._done_if_acknowledged_empty()

    def _done_if_acknowledged_empty(self):
        """Terminating and the version acknowledged last, written, gave no job: the operator
        waits for nothing more from this process."""
        if (self.fence.terminating and self.fence.acked_empty
                and self.lease.written_version == self.fence.acked):
            self.done.set()

    def _apply(self, change):
        """Stops, moves the permits, starts, in that order; a report line after the stops and
        before the starts. Holds _changed."""
        stopped = [self.jobs.pop(name) for name in change.stop if name in self.jobs]
        for job in stopped:
            job.request_stop()
        for job in stopped:
            job.join()
        for name in change.keep:
            self.jobs[name].permit.until = change.until
        kept = sorted(self.jobs)
        if stopped or (change.extended and not change.start):
            self.report.write(change.version, kept, change.until)
        if change.start:
            self.report.write(change.version, sorted([*kept, *change.start]), change.until)
            for name in change.start:
                self.jobs[name] = Job(name, Permit(change.until))
                self.jobs[name].start()
        if stopped or change.start:
            log.info("version %s: running %s", change.version, sorted(self.jobs))
        self._changed.notify_all()


def read_config_map(core, env, permit_seconds):
    """A fence read: GETs this worker's ConfigMap with no resourceVersion, so the API server
    answers from etcd. Returns (config.yml text or None, resourceVersion); (None, None) if it
    does not exist."""
    try:
        response = core.read_namespaced_config_map(
            worker_config_map(env), env["POD_NAMESPACE"], _preload_content=False,
            # An answer after the permit gives none: give up on it then, never sooner.
            _request_timeout=(min(REQUEST_TIMEOUT[0], permit_seconds / 2),
                              read_timeout(permit_seconds)))
    except ApiException as error:
        if error.status == 404:
            return None, None
        raise
    config_map = json.loads(response.data)
    return (config_map.get("data") or {}).get(CONFIG_KEY), config_map["metadata"]["resourceVersion"]


def follow_config(core, env, worker):
    """WATCHes this worker's ConfigMap by name, for speed only: each event makes the worker send
    a fence read at once and is not read itself. Starts from the resourceVersion of the first
    fence read (none if the ConfigMap did not exist: the watch then starts with the object as
    it is); after a 410 it starts again without one. Each start waits for the worker's hold."""
    name = worker_config_map(env)
    list_config_maps = worker.shed.gated(core.list_namespaced_config_map)
    worker.first_read.wait()
    resource_version = worker.resource_version
    # A watch that cannot start again is retried 1 s doubling to half the permit, spread at
    # random: thousands of workers re-watching every second would keep an overloaded API
    # server overloaded.
    failures = 0

    def pause():
        nonlocal failures
        failures += 1
        time.sleep(lease_retry_delay(failures, worker.fence.permit / 2))

    while True:
        try:
            stream = watch.Watch()
            for event in stream.stream(
                    list_config_maps, env["POD_NAMESPACE"],
                    field_selector=f"metadata.name={name}",
                    resource_version=resource_version, timeout_seconds=WATCH_SECONDS,
                    _request_timeout=(REQUEST_TIMEOUT[0], WATCH_SECONDS + 30)):
                failures = 0
                if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    worker.watched()
            # The server closed the watch after timeoutSeconds: carry on from where it was.
            failures = 0
            resource_version = stream.resource_version or resource_version
        except ApiException as error:
            # 410 Gone arrives as an ERROR event when the history no longer reaches back.
            log.info("watch of ConfigMap %s ended (%s %s)", name, error.status, error.reason)
            if error.status == 410:
                resource_version = None
            elif error.status == 429:
                # The next start waits for the worker's hold.
                resource_version = stream.resource_version or resource_version
            else:
                resource_version = stream.resource_version or resource_version
                pause()
        except CONNECTION_ERRORS as error:
            log.warning("watch of ConfigMap %s failed: %s", name, error)
            resource_version = stream.resource_version or resource_version
            pause()
        except Exception:  # noqa: BLE001 - a dead watch only slows changes down; keep it up
            log.exception("unexpected error watching ConfigMap %s", name)
            pause()


def serve_health(worker, host, port):
    """Serves GET /readyz (200 while ready, else 503) and GET /healthz (200) in a thread of its
    own; returns the server, bound (port 0 picks a free port)."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the name http.server calls
            if self.path == "/readyz":
                status = 200 if worker.ready() else 503
            elif self.path == "/healthz":
                status = 200
            else:
                status = 404
            body = http.server.BaseHTTPRequestHandler.responses[status][0].encode() + b"\n"
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass  # the kubelet probes every few seconds

    class Server(http.server.ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        daemon_threads = True

        def server_bind(self):
            # HTTPServer's own looks the address up in the DNS, which may hang in a pod.
            socketserver.TCPServer.server_bind(self)
            self.server_name, self.server_port = self.server_address[:2]

    server = Server((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server


def main():
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The client's own retries would log each refused connection; ours say enough.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    try:
        settings = settings_from_env(os.environ)
    except ValueError as error:
        sys.exit(f"swarm_worker: {error}")
    env, permit = settings.env, settings.permit_seconds

    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()
    else:
        config.load_kube_config()
    api = api_client(client.Configuration.get_default_copy())
    core, coordination = client.CoreV1Api(api), client.CoordinationV1Api(api)

    report = Report(os.environ.get("SWARM_WORKER_REPORT"), env["POD_NAME"], env["POD_UID"])
    shed = Shed(permit)
    lease = LeaseWriter(coordination, env, permit, shed)
    worker = Worker(env["POD_NAME"], report, lease, Fence(permit, time.monotonic()), shed)
    lease.on_written = worker.on_written
    report.write(None, [])

    host, port = settings.health_host_port()
    try:
        server = serve_health(worker, host, port)
    except OSError as error:
        sys.exit(f"swarm_worker: cannot serve readiness on {settings.health_addr}: {error}")
    bound = server.server_address[1]
    log.info("serving readiness on %s", f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}")
    log.info("following ConfigMap %s (this worker's own slice of pool ConfigMap %s), "
             "permit %d s", worker_config_map(env), env["SWARM_CONFIG_MAP"], permit)

    termination_requested = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: termination_requested.set())
    signal.signal(signal.SIGINT, lambda *_: termination_requested.set())
    for target, args, name in [
            (worker.lapse_forever, (), "lapse"),
            (worker.read_forever, (lambda: read_config_map(core, env, permit),), "fence"),
            (lease.write_forever, (), "lease"),
            (follow_config, (core, env, worker), "watch")]:
        threading.Thread(target=target, args=args, name=name, daemon=True).start()

    # A timed wait keeps the main thread responsive to signals.
    while not termination_requested.wait(1.0):
        pass
    log.info("SIGTERM: stopping every job")
    deadline = time.monotonic() + settings.termination_seconds
    worker.terminate()
    if worker.done.wait(max(0.0, deadline - time.monotonic())):
        log.info("exiting: acknowledged a version without jobs")
    else:
        log.info("exiting: the termination period ended")
