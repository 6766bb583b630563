//! Running the real `kubectl` against the cluster under test, the way a user would.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

/// The repository root (manifests, scripts and tools are found relative to it).
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Finds kubectl: `KUBECTL`, then `<repo>/.tools/bin/kubectl`, then `PATH`.
pub fn locate() -> PathBuf {
    super::tools::locate("KUBECTL", "kubectl")
}

/// PATH with the directory of the `kubectl-swarm` binary first.
fn plugin_path() -> std::ffi::OsString {
    let plugin = Path::new(env!("CARGO_BIN_EXE_kubectl-swarm"));
    let dirs = plugin.parent().map(Path::to_path_buf).into_iter().chain(
        env::var_os("PATH")
            .iter()
            .flat_map(env::split_paths)
            .collect::<Vec<_>>(),
    );
    env::join_paths(dirs).expect("PATH entries without separators")
}

/// What one kubectl invocation printed.
#[derive(Debug)]
pub struct Output {
    /// Whether kubectl exited with status 0.
    pub success: bool,
    /// The exit code (`None` when killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// A kubectl bound to one kubeconfig, recording every invocation for the failure report.
#[derive(Clone)]
pub struct Kubectl {
    binary: PathBuf,
    kubeconfig: PathBuf,
    cache_dir: PathBuf,
    transcript: Arc<Mutex<Vec<String>>>,
}

impl Kubectl {
    /// A kubectl using `kubeconfig`, with a discovery cache private to this test (simulations
    /// reuse ports, and a cache from an earlier one would describe other resources).
    pub fn new(kubeconfig: &Path, cache_dir: &Path) -> Kubectl {
        Kubectl {
            binary: locate(),
            kubeconfig: kubeconfig.to_path_buf(),
            cache_dir: cache_dir.to_path_buf(),
            transcript: Arc::default(),
        }
    }

    /// Runs kubectl with `args` from the repository root and returns what it printed. The
    /// `kubectl-swarm` plugin this crate builds comes first on its PATH, so `kubectl swarm`
    /// finds it as a user's kubectl would.
    pub async fn run(&self, args: &[&str]) -> Output {
        let output = tokio::process::Command::new(&self.binary)
            .args(args)
            .current_dir(repo_root())
            .env("PATH", plugin_path())
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", &self.cache_dir)
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.binary.display()));
        let result = Output {
            success: output.status.success(),
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        };
        self.record(args, &output.status.to_string(), &result);
        result
    }

    /// Like [`Kubectl::run`], without async, for the clean-up done while a test's environment
    /// is dropped.
    pub fn run_blocking(&self, args: &[&str]) -> Output {
        let output = std::process::Command::new(&self.binary)
            .args(args)
            .current_dir(repo_root())
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", &self.cache_dir)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.binary.display()));
        let result = Output {
            success: output.status.success(),
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        };
        self.record(args, &output.status.to_string(), &result);
        result
    }

    /// Runs kubectl and fails the test unless it succeeds; returns its standard output.
    pub async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            out.success,
            "kubectl {} failed:\n{}{}",
            args.join(" "),
            out.stdout,
            out.stderr
        );
        out.stdout
    }

    /// Every invocation so far, with its exit status and output.
    pub fn transcript(&self) -> Vec<String> {
        self.transcript
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn record(&self, args: &[&str], status: &str, out: &Output) {
        const KEEP: usize = 4000;
        let clip = |s: &str| -> String {
            if s.len() <= KEEP {
                return s.to_string();
            }
            let mut cut = KEEP;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            format!("{}... ({} bytes)", &s[..cut], s.len())
        };
        let entry = format!(
            "$ kubectl {}\n[{status}]\n{}{}",
            args.join(" "),
            clip(&out.stdout),
            clip(&out.stderr)
        );
        self.transcript
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(entry);
    }
}
