"""Holds swarm_worker to the protocol's test vectors (protocol/vectors/), the files the Rust
crate swarm-protocol reads too: the same names, config.yml reading, own-ConfigMap name, Lease,
report line, fence arithmetic and traces, and settings as the operator and the Rust and Go
workers.

    .tools/python-worker/bin/python -m pytest examples/python-worker/test_protocol_vectors.py -q
"""

import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "protocol", "vectors")

sys.path.insert(0, HERE)
import swarm_worker as sw  # noqa: E402 - needs the path above


def vectors(name):
    with open(os.path.join(VECTORS, name), encoding="utf-8") as file:
        return json.load(file)


class ProtocolVectorsTest(unittest.TestCase):
    def test_names(self):
        names = vectors("names.json")
        self.assertEqual(sw.ACKED_VERSION_ANNOTATION, names["ACKED_VERSION_ANNOTATION"])
        self.assertEqual(sw.POOL_LABEL, names["POOL_LABEL"])
        self.assertEqual(sw.CONFIG_KEY, names["CONFIG_KEY"])

    def test_config(self):
        for case in vectors("config.json"):
            with self.subTest(case["name"]):
                expect = case["expect"]
                want = None if expect is None else (expect["version"], expect["jobs"])
                self.assertEqual(sw.parse_config(case["text"], case["pod"]), want)
                if expect is None:
                    with self.assertRaises(sw.ConfigError) as refused:
                        sw.read_config(case["text"], case["pod"])
                    self.assertIn(case.get("refusal", ""), str(refused.exception))

    def test_own_config_map(self):
        for case in vectors("slices.json")["names"]:
            env = {"SWARM_CONFIG_MAP": case["configMap"], "POD_NAME": case["pod"]}
            self.assertEqual(sw.worker_config_map(env), case["expect"])

    def test_lease(self):
        for case in vectors("lease.json"):
            with self.subTest(case["name"]):
                lease = sw.desired_lease(case["current"], case["holder"], case["acked"],
                                         case["durationSeconds"], case["now"])
                self.assertEqual(lease, case["expect"])

    def test_report_line(self):
        for case in vectors("report.json"):
            with self.subTest(case["name"]):
                fields = case["fields"]
                line = sw.report_line(fields["pod"], fields["uid"], fields["version"],
                                      fields["running"], fields["at"], fields["until"])
                self.assertEqual(line, case["line"])

    def test_fence_timing(self):
        fence = vectors("fence.json")
        self.assertEqual(sw.DEFAULT_PERMIT_SECONDS, fence["defaultPermitSeconds"])
        self.assertEqual(sw.settings_from_env(vectors("settings.json")["pod"]).permit_seconds,
                         fence["defaultPermitSeconds"])
        for case in fence["timing"]:
            permit = case["permitSeconds"]
            with self.subTest(permit=permit):
                self.assertAlmostEqual(sw.read_interval(permit), case["readEverySeconds"])
                self.assertAlmostEqual(sw.read_timeout(permit), case["readTimeoutSeconds"])
                self.assertAlmostEqual(sw.ready_within(permit), case["readyWithinSeconds"])
                delays = [sw.retry_delay(failures, permit)
                          for failures in range(1, len(case["retrySeconds"]) + 1)]
                self.assertEqual(delays, case["retrySeconds"])
                shortest, longest = case["shedRetrySeconds"]
                self.assertAlmostEqual(sw.shed_retry_delay(permit, 0.0), shortest)
                self.assertAlmostEqual(sw.shed_retry_delay(permit, 1.0), longest)

    def test_fence_traces(self):
        for trace in vectors("fence.json")["traces"]:
            fence = None
            for number, step in enumerate(trace["steps"]):
                with self.subTest(trace=trace["name"], step=number, event=step["event"]):
                    at, event = step["at"], step["event"]
                    change = None
                    if event == "start":
                        fence = sw.Fence(trace["permitSeconds"], at)
                    elif event == "read":
                        change = fence.read(at, step["sentAt"], step["version"], step["jobs"])
                    elif event == "readFailed":
                        change = fence.read_failed(at)
                    elif event == "watch":
                        change = fence.watch(at)
                    elif event == "tick":
                        change = fence.tick(at)
                    elif event == "sigterm":
                        change = fence.sigterm(at)
                    else:
                        self.fail(f"unknown event {event}")
                    expect = step["expect"]
                    self.assertEqual(sorted(fence.running), expect["running"])
                    if expect["until"] is None:
                        self.assertIsNone(fence.until)
                    else:
                        self.assertAlmostEqual(fence.until, expect["until"])
                    self.assertEqual(fence.ready(at), expect["ready"])
                    self.assertEqual(None if change is None else change.ack, expect["ack"])
                    self.assertAlmostEqual(fence.next_read_at, expect["nextReadAt"])

    def test_settings(self):
        settings = vectors("settings.json")
        for case in settings["cases"]:
            with self.subTest(case["name"]):
                environ = dict(settings["pod"])
                for name, value in case["environment"].items():
                    if value is None:
                        environ.pop(name, None)
                    else:
                        environ[name] = value
                if "error" in case:
                    with self.assertRaisesRegex(ValueError, case["error"]):
                        sw.settings_from_env(environ)
                    continue
                got = sw.settings_from_env(environ)
                want = case["settings"]
                self.assertEqual(sw.worker_config_map(got.env), want["ownConfigMap"])
                self.assertEqual(got.permit_seconds, want["permitSeconds"])
                self.assertAlmostEqual(sw.read_interval(got.permit_seconds),
                                       want["readEverySeconds"])
                self.assertAlmostEqual(sw.ready_within(got.permit_seconds),
                                       want["readyWithinSeconds"])
                self.assertEqual(got.termination_seconds, want["terminationSeconds"])
                self.assertEqual(got.health_addr, want["healthAddr"])

if __name__ == "__main__":
    unittest.main()
