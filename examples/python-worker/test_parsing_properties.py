"""Property tests (Hypothesis) of the Python worker's reader of config.yml, by the rules of
docs/worker-protocol.md ("Reading config.yml") that the Rust crate (protocol/tests/parsers.rs)
and the Go module (worker-go/fuzz_test.go) are held to as well: any text is read or refused
with a ConfigError that names config.yml, never another exception; texts built from the
protocol's forms read as it says. The @example seeds are inputs that once found a bug.

    .tools/python-worker/bin/python -m unittest examples/python-worker/test_parsing_properties.py
"""

import json
import os
import sys
import unittest

from hypothesis import example, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import swarm_worker as sw  # noqa: E402 - needs the path above

# Bounded, and the same examples on every run: no database of past failures left behind.
BOUNDED = settings(max_examples=200, deadline=None, database=None, derandomize=True)

YAMLISH = st.text(alphabet="-[]{}:,#&*!|>'\"%@ \n\tavw0123456789~.+", max_size=120)
PRINTABLE = st.characters(blacklist_categories=("C",))

NULLS = ["~", "null", "NULL", ""]


def versions():
    """A version as written (None: missing), and what it reads as (None: refused)."""
    n = st.integers(min_value=0, max_value=2**64 - 1)
    positive = st.integers(min_value=1, max_value=2**64 - 1)
    return st.one_of(
        st.just((None, 0)),
        st.sampled_from(NULLS).map(lambda null: (null, 0)),
        n.map(lambda v: (str(v), v)),
        n.map(lambda v: (f"+0x{v:x}", v)),
        n.map(lambda v: (f"0o{v:o}", v)),
        n.map(lambda v: (f"!!str 0b{v:b}", v)),
        n.map(lambda v: (f'"{v}"', None)),
        positive.map(lambda v: (f"-{v}", None)),
        positive.map(lambda v: (f"0{v}", None)),
        n.map(lambda v: (f"{v}.5", None)),
        n.map(lambda v: (f"[{v}]", None)),
        positive.map(lambda v: (str(v + 2**64 - 1), None)),
        st.just(("true", None)),
    )


def names():
    """A name as written in a block list item or a mapping key, and the name it reads as."""
    plain = st.from_regex(r"\A[a-z]([a-z0-9:_.-]{0,10}[a-z0-9])?\Z")
    return st.one_of(
        plain.map(lambda n: (n, n)),
        st.text(PRINTABLE, max_size=12).map(lambda n: (json.dumps(n, ensure_ascii=False), n)),
        st.sampled_from(["1", "010", "0x1f", "1.5", "yes", "~", "true"]).map(lambda n: (n, n)),
        st.from_regex(r"\A[a-z]{1,8}\Z").map(lambda n: (f"!!int {n}", n)),
    )


BAD = [None] * 8 + ["jobs: a", "jobs: {a: b}", "jobs: [[a]]"]
ENTRIES = st.lists(st.tuples(names(), versions(), st.lists(names(), max_size=4),
                             st.sampled_from(BAD)), max_size=3)


def text_of(version, entries):
    lines = [] if version is None else [f"version: {version}"]
    lines.append("workloads:")
    for (pod, _), (entry_version, _), jobs, bad in entries:
        lines.append(f"  {pod}:")
        if entry_version is not None:
            lines.append(f"    version: {entry_version}")
        lines.extend([f"    {bad}"] if bad else ["    jobs:"] + [f"    - {job}" for job, _ in jobs])
    return "\n".join(lines) + "\n"


def expected(version, entries):
    """The version and each pod's jobs (the last entry of a pod counts), or None if refused."""
    read = {}
    for (_, pod), (_, entry_version), jobs, bad in entries:
        if entry_version is None or bad:
            return None
        read[pod] = [job for _, job in jobs]
    return None if version is None else (version, read)


class ConfigReaderProperties(unittest.TestCase):
    @BOUNDED
    @given(st.one_of(YAMLISH, st.text(PRINTABLE, max_size=200)))
    @example("version: [0]\n")  # a list where a version goes: an AttributeError once
    @example("x: " + "[" * 2000)  # nesting deeper than Python's recursion limit
    @example("!config\nversion: 1\n")  # a document with a local tag
    @example("workloads:\n  w-0:\n    jobs: [a]\n")  # no version: read as 0
    def test_any_text_is_read_or_refused_naming_config_yml(self, text):
        try:
            sw.read_config(text, "w-0")
        except sw.ConfigError as refused:
            self.assertTrue(str(refused).startswith("config.yml "), refused)

    @BOUNDED
    @given(versions(), ENTRIES, names())
    def test_a_config_of_the_protocols_forms_reads_as_it_says(self, version, entries, pod):
        text = text_of(version[0], entries)
        want = expected(version[1], entries)
        try:
            read = sw.read_config(text, pod[1])
        except sw.ConfigError as refused:
            self.assertIsNone(want, f"{text!r}: {refused}")
            self.assertRegex(str(refused), r"version|workloads\.", text)
            return
        self.assertIsNotNone(want, text)
        self.assertEqual(read, (want[0], want[1].get(pod[1], [])), text)


if __name__ == "__main__":
    unittest.main()
