//! The worker processes themselves: how each program is built or found, started for one pod
//! instance, and signalled.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;

use super::{FleetSpec, Process, Program, Reports};
use crate::harness::cargo_env;
use crate::harness::kubectl::repo_root;

/// Starts `program` as the worker of pod instance `uid`, serving its readiness on `health`.
pub(super) fn spawn(
    program: Program,
    pod: &str,
    uid: &str,
    health: &str,
    spec: &FleetSpec,
    reports: &Reports,
) -> Process {
    let log_path = spec.dir.join("logs").join(format!("{pod}-{uid}.log"));
    let log = File::create(&log_path)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", log_path.display()));
    let mut command = match program {
        Program::Rust => tokio::process::Command::new(rust_worker()),
        Program::Python => {
            // The package installed in that environment, as a user runs it.
            let mut command = tokio::process::Command::new(python_worker());
            command.args(["-m", "swarm_worker"]);
            command
        }
        Program::Go => tokio::process::Command::new(go_worker()),
    };
    command
        .env("POD_NAME", pod)
        .env("POD_NAMESPACE", &spec.namespace)
        .env("POD_UID", uid)
        .env("SWARM_POOL", &spec.pool)
        .env("SWARM_CONFIG_MAP", &spec.config_map)
        .env("SWARM_WORKER_HEALTH_ADDR", health)
        // No mounted file: these workers must read their entry through the API.
        .env("SWARM_WORKER_REPORT", reports.path(uid))
        .env("KUBECONFIG", &spec.kubeconfig)
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("duplicate the log handle"))
        .stderr(log)
        .kill_on_drop(true);
    let child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the {program:?} worker of {pod}: {e}"));
    Process {
        pod: pod.to_owned(),
        health: health.to_owned(),
        program,
        child,
        terminated: false,
        exited: false,
    }
}

pub(super) fn send(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -s {signal} {pid} failed");
}

/// The example worker binary, built once per test run (`cargo build --example swarm-worker`)
/// so it is never older than the library it shows.
pub(super) fn rust_worker() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut build = std::process::Command::new(cargo);
            build
                .current_dir(repo_root())
                // --workspace: the features the test binaries were built with, so nothing
                // but the example is compiled again.
                .args([
                    "build",
                    "--quiet",
                    "--workspace",
                    "--example",
                    "swarm-worker",
                ]);
            cargo_env::without_test_env(&mut build);
            let status = build
                .status()
                .expect("run cargo build --example swarm-worker");
            assert!(
                status.success(),
                "cargo build --example swarm-worker failed"
            );
            // The test binary is target/<profile>/deps/e2e-<hash>; the example is beside deps.
            let exe = std::env::current_exe().expect("the test binary's path");
            let profile_dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("the test binary lives in <target>/<profile>/deps");
            let worker = profile_dir.join("examples/swarm-worker");
            assert!(worker.is_file(), "{} was not built", worker.display());
            worker
        })
        .clone()
}

/// The Go example worker: `SWARM_GO_WORKER`, or built once per test run with
/// `scripts/go-worker.sh build` (Go's caches make that a link when nothing changed).
pub(super) fn go_worker() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Some(path) = std::env::var_os("SWARM_GO_WORKER").filter(|p| !p.is_empty()) {
                return PathBuf::from(path);
            }
            let exe = std::env::current_exe().expect("the test binary's path");
            let target = exe
                .ancestors()
                .nth(3)
                .expect("the test binary lives in <target>/<profile>/deps");
            let out = target.join("go/e2e/swarm-go-worker");
            let mut build = std::process::Command::new(repo_root().join("scripts/go-worker.sh"));
            build.args(["build"]).arg(&out).stdout(Stdio::null());
            cargo_env::without_test_env(&mut build);
            let status = build.status().expect("run scripts/go-worker.sh build");
            assert!(
                status.success(),
                "scripts/go-worker.sh build failed (it needs Go; or set SWARM_GO_WORKER to the \
                 built worker-go/examples/swarm-worker)"
            );
            out
        })
        .clone()
}

/// The Python interpreter with the worker's pinned client and the worker's package installed:
/// `SWARM_PYTHON_WORKER`, or the virtual environment `scripts/install-python-worker.sh` makes.
pub(super) fn python_worker() -> PathBuf {
    if let Some(path) = std::env::var_os("SWARM_PYTHON_WORKER").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let venv = repo_root().join(".tools/python-worker/bin/python");
    assert!(
        venv.is_file(),
        "no Python worker environment at {}: run scripts/install-python-worker.sh (scripts/test.sh does), \
         or set SWARM_PYTHON_WORKER to a python with the swarm-worker package installed",
        venv.display()
    );
    venv
}
