//! helm against a scenario's real cluster: the binary `SWARM_HELM` names (`scripts/test.sh`
//! builds it with `scripts/install-helm.sh`), with helm's cache, configuration and data in a
//! directory of the scenario's rather than the home directory.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output};

/// Names the helm binary the scenarios run.
pub const HELM_ENV: &str = "SWARM_HELM";

/// helm bound to one cluster's kubeconfig and one scratch directory.
#[derive(Clone, Debug)]
pub struct Helm {
    binary: PathBuf,
    kubeconfig: PathBuf,
    home: PathBuf,
    namespace: Option<String>,
}

impl Helm {
    /// helm `binary` against the cluster of `kubeconfig`, its own files under `home`.
    pub fn new(binary: PathBuf, kubeconfig: PathBuf, home: PathBuf) -> Helm {
        Helm {
            binary,
            kubeconfig,
            home,
            namespace: None,
        }
    }

    /// The helm of [`HELM_ENV`], when it is set.
    pub fn binary_from_env() -> Option<PathBuf> {
        std::env::var_os(HELM_ENV)
            .filter(|path| !path.is_empty())
            .map(PathBuf::from)
    }

    /// Every command in `namespace` (`--namespace`), unless its arguments name another.
    pub fn in_namespace(mut self, namespace: &str) -> Helm {
        self.namespace = Some(namespace.to_owned());
        self
    }

    /// `helm <args>`, not yet run.
    fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let home = |name: &str| self.home.join(name);
        let mut command = Command::new(&self.binary);
        if let Some(namespace) = &self.namespace {
            command.arg(format!("--namespace={namespace}"));
        }
        command
            .args(args)
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .env("HELM_CACHE_HOME", home("helm-cache"))
            .env("HELM_CONFIG_HOME", home("helm-config"))
            .env("HELM_DATA_HOME", home("helm-data"));
        command
    }

    /// Runs `helm <args>`; what it did, passed or failed.
    pub fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> Output {
        self.command(args)
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", self.binary.display()))
    }

    /// Runs `helm <args>`, which must succeed; its stdout.
    pub fn ok<S: AsRef<OsStr>>(&self, args: &[S]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "helm {} failed: {}{}",
            args.iter()
                .map(|arg| arg.as_ref().to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}
