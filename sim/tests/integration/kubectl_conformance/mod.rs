//! kubectl 1.37 driving the simulation (case 24 of the sim spec): `apply` (client-side and
//! server-side), `scale`, `get` with a CRD's printer columns, `get -w`, `wait` and `delete`.
//!
//! kubectl is found through `$KUBECTL`, then `<workspace>/.tools/bin/kubectl`, then `PATH`,
//! and must be 1.37 or newer; `scripts/install-kubectl.sh` installs the pinned version into
//! `.tools`.
//!
//! This module runs kubectl; the checks are in [`lifecycle`] (what users do to objects:
//! apply, scale, wait, watch, roll out, delete), [`output`] (the tables `kubectl get` prints)
//! and [`server_apis`] (protobuf bodies, authorization reviews, OpenAPI for `explain`).

mod lifecycle;
mod output;
mod server_apis;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use kube_sim::Sim;
use tokio::process::Command;

/// Upper bound for one kubectl invocation; never a performance goal.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(90);

/// The oldest kubectl whose behaviour (aggregated discovery, `sendInitialEvents` watches)
/// these checks are about.
const MIN_KUBECTL_MINOR: u32 = 37;

fn find_kubectl() -> PathBuf {
    let install_hint = "run scripts/install-kubectl.sh to install the pinned kubectl into \
                        .tools/bin/kubectl, or set KUBECTL";
    let found = if let Some(path) = std::env::var_os("KUBECTL").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "KUBECTL names {}, which does not exist; {install_hint}",
            path.display()
        );
        path
    } else {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the sim crate lives inside the workspace");
        let local = workspace.join(".tools/bin/kubectl");
        let on_path = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("kubectl"))
                .find(|candidate| candidate.is_file())
        });
        match (local.is_file(), on_path) {
            (true, _) => local,
            (false, Some(path)) => path,
            (false, None) => panic!("kubectl not found; {install_hint}"),
        }
    };
    let minor = client_minor_version(&found);
    assert!(
        minor.is_some_and(|m| m >= MIN_KUBECTL_MINOR),
        "{} is kubectl 1.{}, older than 1.{MIN_KUBECTL_MINOR}; {install_hint}",
        found.display(),
        minor.map_or_else(|| "?".to_string(), |m| m.to_string()),
    );
    found
}

/// The client's minor version from `kubectl version --client -o json`.
fn client_minor_version(kubectl: &Path) -> Option<u32> {
    let output = std::process::Command::new(kubectl)
        .args(["version", "--client", "-o", "json"])
        .output()
        .ok()?;
    let version: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    let minor = version["clientVersion"]["minor"].as_str()?;
    // Some builds report "37+".
    minor.trim_end_matches('+').parse().ok()
}

struct Output {
    success: bool,
    stdout: String,
    stderr: String,
}

/// kubectl bound to one simulation's kubeconfig and a private discovery cache.
struct Kubectl {
    binary: PathBuf,
    dir: tempfile::TempDir,
}

impl Kubectl {
    fn new(sim: &Sim) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        sim.write_kubeconfig(&dir.path().join("kubeconfig"))
            .expect("kubeconfig is written");
        Self {
            binary: find_kubectl(),
            dir,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .args(args)
            .env("KUBECONFIG", self.dir.path().join("kubeconfig"))
            .env("HOME", self.dir.path())
            .env("KUBECACHEDIR", self.dir.path().join("cache"))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    async fn run(&self, args: &[&str]) -> Output {
        let future = self.command(args).output();
        let output = tokio::time::timeout(COMMAND_TIMEOUT, future)
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish"))
            .expect("kubectl runs");
        Output {
            success: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Runs kubectl and returns stdout, failing the test when kubectl fails.
    async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            out.success,
            "kubectl {args:?} failed\nstdout: {}\nstderr: {}",
            out.stdout, out.stderr
        );
        out.stdout
    }

    /// Runs kubectl expecting failure and returns stderr.
    async fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            !out.success,
            "kubectl {args:?} should have failed\nstdout: {}",
            out.stdout
        );
        out.stderr
    }

    fn manifest(&self, name: &str, yaml: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, yaml).expect("manifest is written");
        path.to_string_lossy().into_owned()
    }
}

fn statefulset(annotation: &str) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
  namespace: default
  annotations: {{note: "{annotation}"}}
spec:
  replicas: 1
  serviceName: web
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
        - name: worker
          image: busybox:1.36
          env: [{{name: MODE, value: test}}]
"#
    )
}

/// Splits kubectl's table output into rows of cells, cutting each line at the columns where
/// the header's titles start, so an empty cell stays an empty string.
fn table(stdout: &str) -> Vec<Vec<String>> {
    let mut lines = stdout.lines().filter(|l| !l.trim().is_empty());
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let starts: Vec<usize> = header
        .char_indices()
        .filter(|&(i, c)| c != ' ' && (i == 0 || header.as_bytes()[i - 1] == b' '))
        .map(|(i, _)| i)
        .collect();
    std::iter::once(header)
        .chain(lines)
        .map(|line| {
            starts
                .iter()
                .enumerate()
                .map(|(n, &start)| {
                    let end = starts
                        .get(n + 1)
                        .copied()
                        .unwrap_or(line.len())
                        .min(line.len());
                    line.get(start.min(end)..end)
                        .unwrap_or("")
                        .trim()
                        .to_string()
                })
                .collect()
        })
        .collect()
}
