"""Holds swarm_worker.py to the protocol's test vectors (protocol/vectors/), the files the Rust
crate swarm-protocol reads too: the same names, config.yml reading, own-ConfigMap name, Lease,
report line, fence arithmetic and settings as the operator and the Rust worker.

    .tools/python-worker/bin/python -m unittest discover -s examples/python-worker -v
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

    def test_fence(self):
        for case in vectors("fence.json"):
            duration = case["durationSeconds"]
            margin = case["marginSeconds"]
            if margin is None:
                margin = sw.default_margin(duration)
            self.assertEqual(margin, case["expectMarginSeconds"])
            self.assertEqual(sw.fence_limit(duration, margin), case["expectLimitSeconds"])

    def test_timing(self):
        timing = vectors("timing.json")
        self.assertEqual(sw.DEFAULT_LEASE_SECONDS, timing["defaultDurationSeconds"])
        self.assertEqual(sw.timing_from_env({})[0], timing["defaultDurationSeconds"])
        for case in timing["cases"]:
            duration = case["durationSeconds"]
            self.assertEqual(sw.renew_interval(duration), case["renewEverySeconds"])
            limit = sw.fence_limit(duration, sw.default_margin(duration))
            self.assertEqual(limit, case["limitSeconds"])

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
                env, (lease, margin, termination) = sw.settings_from_env(environ)
                want = case["settings"]
                self.assertEqual(sw.worker_config_map(env), want["ownConfigMap"])
                self.assertEqual(lease, want["leaseDurationSeconds"])
                self.assertEqual(sw.renew_interval(lease), want["renewEverySeconds"])
                self.assertEqual(sw.fence_limit(lease, margin), want["fenceAfterSeconds"])
                self.assertEqual(termination, want["terminationSeconds"])


if __name__ == "__main__":
    unittest.main()
