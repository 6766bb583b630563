"""Holds the installed worker, the wheel scripts/install-python-worker.sh builds from
pyproject.toml, to what a user of the package relies on: its name, a version equal to the
workspace's (worker/Cargo.toml's), the py.typed marker, a console script that runs, and the
files of this checkout's swarm_worker (the kube-sim tests run the installed package)."""

import importlib.metadata as metadata
import os
import subprocess
import tomllib
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
NAME = "swarm-worker"
SCRIPT = "swarm-python-worker"
INSTALL = "run scripts/install-python-worker.sh"


def toml(*path):
    with open(os.path.join(*path), "rb") as file:
        return tomllib.load(file)


def workspace_version():
    """The Rust worker crate's version, or the workspace's if the crate inherits it."""
    version = toml(REPO, "worker", "Cargo.toml")["package"]["version"]
    if isinstance(version, dict) and version.get("workspace"):
        version = toml(REPO, "Cargo.toml")["workspace"]["package"]["version"]
    return version


def source_files():
    """The package's files in this checkout, as paths relative to HERE."""
    found = set()
    for root, dirs, files in os.walk(os.path.join(HERE, "swarm_worker")):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        found.update(os.path.relpath(os.path.join(root, f), HERE) for f in files)
    return found


class PackageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        try:
            cls.dist = metadata.distribution(NAME)
        except metadata.PackageNotFoundError:
            raise AssertionError(f"{NAME} is not installed: {INSTALL}") from None
        cls.project = toml(HERE, "pyproject.toml")["project"]

    def test_the_version_is_the_workspaces(self):
        version = workspace_version()
        self.assertEqual(self.project["version"], version,
                         "pyproject.toml's version is not worker/Cargo.toml's")
        self.assertEqual(self.dist.version, version,
                         f"the installed {NAME} is not worker/Cargo.toml's version: {INSTALL}")

    def test_the_name_is_the_projects(self):
        self.assertEqual(self.project["name"], NAME)
        self.assertEqual(self.dist.metadata["Name"], NAME)

    def test_it_ships_the_typed_marker(self):
        files = {f.as_posix() for f in self.dist.files}
        self.assertIn("swarm_worker/py.typed", files)
        self.assertTrue(os.path.isfile(self.dist.locate_file("swarm_worker/py.typed")))
        self.assertIn("Typing :: Typed", self.dist.metadata.get_all("Classifier"))

    def test_the_installed_package_is_this_checkouts(self):
        installed = {f.as_posix(): f for f in self.dist.files
                     if f.as_posix().startswith("swarm_worker/") and "__pycache__" not in f.parts}
        self.assertEqual(set(installed), source_files(),
                         f"the installed swarm_worker has other files than {HERE}: {INSTALL}")
        for name, file in installed.items():
            with open(os.path.join(HERE, name), "rb") as source:
                self.assertEqual(file.read_binary(), source.read(),
                                 f"the installed {name} is not this checkout's: {INSTALL}")

    def test_the_console_script_runs_the_worker(self):
        [entry] = [e for e in self.dist.entry_points
                   if e.group == "console_scripts" and e.name == SCRIPT]
        self.assertEqual(entry.value, "swarm_worker:main")
        [script] = [f for f in self.dist.files if f.name == SCRIPT]
        # With no pod environment, as far as it goes without a cluster.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("POD_", "SWARM_"))}
        result = subprocess.run([str(self.dist.locate_file(script))], env=env, cwd=REPO,
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertTrue(
            result.stderr.startswith("swarm_worker: missing environment variables: POD_NAME"),
            result.stderr)


if __name__ == "__main__":
    unittest.main()
