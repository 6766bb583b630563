//! Releases cut as a maintainer cuts them: `scripts/release.sh VERSION --registry HOST:PORT` in
//! a clone of this checkout's commit, each release committing its version and tagging it there,
//! into a [`Registry`](super::registry::Registry). What a release printed (each image and the
//! chart, with its digest) is what the scenario installs.
//!
//! The scenario cuts them before it takes the cluster, at the lowest CPU priority: under
//! `scripts/test.sh`, whose whole-cluster scenarios run on two test threads with one holding the
//! cluster at a time, the compile overlaps the scenarios that hold it meanwhile.
//!
//! The release builds the debug binaries (`SWARM_RELEASE_PROFILE=dev`: a fat-LTO build would
//! take a quarter of an hour here). Its Cargo target directory starts as hard links to the
//! compiled dependencies of the test build that runs this binary, so only the workspace's
//! crates compile, at the release's version; each version's artifacts have names of their own,
//! and the test build's binaries are never overwritten.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use tempfile::TempDir;

use crate::harness::repo_path;

/// A clone of this checkout's commit, where releases are cut one after the other.
pub(super) struct Releaser {
    clone: PathBuf,
    /// Beside the test build's profile directory: hard links do not cross file systems.
    target: TempDir,
    out: PathBuf,
    registry: String,
}

/// What one release published: per artifact (`swarm-operator`, `swarm-worker`, ...,
/// `swarm-operator chart`), its reference and digest.
#[derive(Clone, Debug)]
pub(super) struct Released {
    pub version: String,
    published: BTreeMap<String, (String, String)>,
}

impl Releaser {
    /// Clones this checkout's HEAD into `dir` and gives it a target directory of hard links to
    /// the test build's compiled dependencies; releases go to `registry` (`HOST:PORT`).
    pub fn new(dir: &Path, registry: &str) -> Releaser {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let clone = dir.join("source");
        run(Command::new("git")
            .args(["clone", "--quiet"])
            .arg(repo_path("."))
            .arg(&clone));
        let built = test_profile_dir();
        let scratch = built.with_file_name("tmp");
        std::fs::create_dir_all(&scratch).expect("the target directory's tmp");
        let target = tempfile::Builder::new()
            .prefix("release-")
            .tempdir_in(&scratch)
            .expect("the release's target directory");
        let profile = target.path().join("debug");
        std::fs::create_dir_all(&profile).expect("the release's profile directory");
        // rustc replaces what it writes in deps/, so hard links there stay the test build's;
        // Cargo rewrites fingerprints and build scripts' outputs in place, so those are copies.
        for (compiled, how) in [("deps", "-al"), ("build", "-a"), (".fingerprint", "-a")] {
            run(Command::new("cp")
                .arg(how)
                .arg(built.join(compiled))
                .arg(&profile));
        }
        Releaser {
            clone,
            target,
            out: dir.join("dist"),
            registry: registry.to_owned(),
        }
    }

    /// Runs `scripts/release.sh <version> --registry <registry>` in the clone; what it
    /// published. Blocking: minutes, most of them compiling the workspace at `version`.
    pub fn cut(&self, version: &str) -> Released {
        let started = Instant::now();
        let log = self.out.join(format!("release-{version}.log"));
        std::fs::create_dir_all(&self.out).expect("the releases' directory");
        let stderr = std::fs::File::create(&log).expect("the release's log");
        // At the lowest priority: it compiles while another scenario holds the cluster, whose
        // processes (the node's kubelet, the API server, workers racing a deadline) come first.
        let output = Command::new("nice")
            .args(["-n", "19"])
            .arg(self.clone.join("scripts/release.sh"))
            .args([version, "--registry", &self.registry, "--out"])
            .arg(self.out.join(version))
            .current_dir(&self.clone)
            .env("SWARM_RELEASE_PROFILE", "dev")
            .env("CARGO_TARGET_DIR", self.target.path())
            .envs([
                ("GIT_AUTHOR_NAME", "swarm-operator e2e"),
                ("GIT_COMMITTER_NAME", "swarm-operator e2e"),
                ("GIT_AUTHOR_EMAIL", "e2e@swarm-operator.invalid"),
                ("GIT_COMMITTER_EMAIL", "e2e@swarm-operator.invalid"),
            ])
            .stderr(stderr)
            .output()
            .expect("run scripts/release.sh");
        let progress = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            output.status.success(),
            "scripts/release.sh {version} --registry {} failed:\n{progress}",
            self.registry,
        );
        let compiled: Vec<&str> = progress
            .lines()
            .filter_map(|line| line.trim().strip_prefix("Compiling "))
            .collect();
        let released = Released::parse(version, &String::from_utf8_lossy(&output.stdout));
        eprintln!(
            "release {version} into {} in {:.0} s, compiling {compiled:?}: {:?}",
            self.registry,
            started.elapsed().as_secs_f64(),
            released.published
        );
        released
    }
}

impl Released {
    /// release.sh's stdout: `<name>\t<reference>\t<digest>` per artifact.
    fn parse(version: &str, stdout: &str) -> Released {
        let published: BTreeMap<String, (String, String)> = stdout
            .lines()
            .filter_map(|line| {
                let mut fields = line.split('\t');
                let (name, reference, digest) = (fields.next()?, fields.next()?, fields.next()?);
                Some((name.to_owned(), (reference.to_owned(), digest.to_owned())))
            })
            .collect();
        for name in [
            "swarm-operator",
            "swarm-worker",
            "swarm-go-worker",
            "swarm-python-worker",
            "swarm-operator chart",
        ] {
            let (reference, digest) = published
                .get(name)
                .unwrap_or_else(|| panic!("release {version} printed no {name}: {stdout}"));
            assert!(
                reference.ends_with(&format!(":{version}")) && digest.starts_with("sha256:"),
                "release {version}'s {name}: {reference} {digest}"
            );
        }
        Released {
            version: version.to_owned(),
            published,
        }
    }

    /// The released chart's repository, `oci://HOST:PORT/charts/swarm-operator`, for `helm
    /// install <it> --version <version>`.
    pub fn chart(&self) -> String {
        format!("oci://{}", self.repository("swarm-operator chart"))
    }

    /// Image `name` by digest (`HOST:PORT/<name>@sha256:...`), as a pod names it to be pinned.
    pub fn pinned(&self, name: &str) -> String {
        let (_, digest) = &self.published[name];
        format!("{}@{digest}", self.repository(name))
    }

    /// Where artifact `name` was pushed: its reference without the `:<version>` tag.
    fn repository(&self, name: &str) -> &str {
        let (reference, _) = &self.published[name];
        reference
            .strip_suffix(&format!(":{}", self.version))
            .expect("a tagged reference")
    }
}

/// The two versions after the workspace's (0.1.0: 0.1.1 and 0.1.2), as the next releases.
pub(super) fn next_versions() -> [String; 2] {
    let current = env!("CARGO_PKG_VERSION");
    let core = current.split(['-', '+']).next().unwrap_or(current);
    let numbers: Vec<u64> = core
        .split('.')
        .map(|n| n.parse().expect("a numeric version"))
        .collect();
    let [major, minor, patch] = numbers[..] else {
        panic!("the workspace's version {current} is not MAJOR.MINOR.PATCH")
    };
    [1, 2].map(|step| format!("{major}.{minor}.{}", patch + step))
}

/// The profile directory of the build that compiled this test binary (`<target>/debug`).
fn test_profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("the test binary is in <target>/<profile>/deps")
        .to_path_buf()
}

/// Runs `command`, which must succeed.
fn run(command: &mut Command) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
