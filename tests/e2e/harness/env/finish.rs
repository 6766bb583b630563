//! How a scenario ends: [`Env::finish`] runs the checks every scenario gets (no job on two
//! live pods, no request of the operator refused by RBAC) and records its timing; dropping
//! the environment then cleans up, and prints what a failure needs to be understood.

use std::io::Write;

use super::{Env, Outcome, Share};
use crate::harness::TIMINGS_ENV;
use crate::harness::duplicates::DuplicateWatch;
use crate::harness::operator;
use crate::harness::sim_inspect::RequestRecord;

impl Env {
    /// The end of a scenario whose body returned: the checks every scenario gets, then the
    /// clean-up. Fails the test, naming the scenario, when a check fails (after the
    /// environment printed its diagnostics).
    pub(super) async fn finish(mut self) {
        let failure = self.failure().await;
        self.conclude(failure.is_none());
        let name = self.name.clone();
        // Cleans up; on a failure prints the diagnostics and keeps the scratch directory.
        drop(self);
        if let Some(failure) = failure {
            panic!("{name}: {failure}");
        }
    }

    /// Records how the scenario ended (its timing, and whether dropping the environment
    /// prints the diagnostics).
    pub(super) fn conclude(&mut self, passed: bool) {
        self.record_timing(passed);
        self.outcome = if passed {
            Outcome::Passed
        } else {
            Outcome::Failed
        };
    }

    /// Why the scenario fails though its body passed: a job on two live pods at once (under
    /// the Exclusive handoff), or, on a real cluster, a request of the operator RBAC refused.
    async fn failure(&self) -> Option<String> {
        if let Some(failure) = self.duplicates.failure() {
            return Some(failure);
        }
        if let Some(failure) = self
            .more_duplicates
            .iter()
            .find_map(DuplicateWatch::failure)
        {
            return Some(failure);
        }
        self.forbidden_requests().await
    }

    /// On a real cluster: the operator's requests that RBAC refused (403), described.
    async fn forbidden_requests(&self) -> Option<String> {
        self.real.as_ref()?;
        let requests = self.inspector.operator_requests().await?;
        let forbidden: Vec<String> = requests
            .iter()
            .skip(self.refusals_expected)
            .filter(|r| r.status == 403)
            .map(RequestRecord::describe)
            .collect();
        (!forbidden.is_empty()).then(|| {
            format!(
                "RBAC refused {} of the operator's requests: {forbidden:#?}",
                forbidden.len()
            )
        })
    }

    /// Prints what a failed scenario leaves to look at: where its namespace and scratch
    /// directory are, the operator's logs, its last requests and the kubectl transcript; and
    /// keeps the scratch directory.
    fn dump_diagnostics(&mut self) {
        eprintln!(
            "==== {} failed: namespace {}, scratch directory {} (operator logs operator-*.log, \
             kubeconfig){}",
            self.name,
            self.example.namespace(),
            self.dir.path().display(),
            self.real
                .as_ref()
                .and_then(|cluster| cluster.kubeconfig.parent())
                .map(|dir| format!(", control-plane logs in {}", dir.join("logs").display()))
                .unwrap_or_default()
        );
        for (i, log) in self.operator_logs.iter().enumerate() {
            eprintln!(
                "==== operator log, run {}:\n{}",
                i + 1,
                operator::read_log(log)
            );
        }
        if let Some(requests) = self.inspector.operator_requests_blocking() {
            const LAST: usize = 200;
            eprintln!(
                "==== the operator's requests ({} in all, the last {LAST} shown):",
                requests.len()
            );
            let skip = requests.len().saturating_sub(LAST);
            for request in &requests[skip..] {
                eprintln!("{}", request.describe());
            }
        }
        eprintln!("==== kubectl transcript:");
        for entry in self.kubectl.transcript() {
            eprintln!("{entry}");
        }
        eprintln!("==== end of {}", self.name);
        // Keep the scratch directory (kubeconfig, logs) for a look after the failure.
        let dir = std::mem::replace(
            &mut self.dir,
            tempfile::tempdir().expect("create a placeholder directory"),
        );
        let _ = dir.keep();
    }

    /// Appends `<scenario> <share> <seconds waiting for the cluster> <seconds running>
    /// <passed|failed>` (tab-separated) to the file `SWARM_E2E_TIMINGS` names, for the table
    /// `scripts/test.sh` prints.
    fn record_timing(&self, passed: bool) {
        let Some(path) = std::env::var_os(TIMINGS_ENV).filter(|p| !p.is_empty()) else {
            return;
        };
        let share = match (&self.real, self.share) {
            (None, _) => "sim",
            (Some(_), Share::Namespace | Share::ExamplesNamespace) => "namespace",
            (Some(_), Share::Cluster) => "alone",
        };
        let line = format!(
            "{}\t{share}\t{:.1}\t{:.1}\t{}\n",
            self.name,
            self.waited.as_secs_f64(),
            (self.started.elapsed() - self.waited).as_secs_f64(),
            if passed { "passed" } else { "failed" }
        );
        // One short append per scenario: O_APPEND keeps lines of concurrent scenarios whole.
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(e) = written {
            eprintln!("note: cannot record timing in {}: {e}", path.display());
        }
    }

    /// Kills the worker processes and lets their pods go (on a real cluster the fleet's
    /// finalizer would otherwise keep them, and their namespace, for ever).
    fn stop_workers(&mut self) {
        let Some(fleet) = self.fleet.take() else {
            return;
        };
        let pods = fleet.pods();
        drop(fleet);
        if self.real.is_none() {
            return;
        }
        let namespace = self.example.namespace();
        for pod in pods {
            let out = self.kubectl.run_blocking(&[
                "-n",
                &namespace,
                "patch",
                "pod",
                &pod,
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":null}}"#,
            ]);
            if !out.success && !out.stderr.contains("NotFound") {
                eprintln!("note: could not release pod {pod}: {}", out.stderr);
            }
        }
    }

    /// On a real cluster, a passed scenario's namespace goes (without waiting), so the
    /// cluster does not fill up with the pods of finished scenarios; a failed one's stays
    /// for a look.
    fn remove_own_namespace(&self) {
        if self.real.is_none() || self.share == Share::Cluster {
            return;
        }
        let namespace = self.example.namespace();
        let out = self
            .kubectl
            .run_blocking(&["delete", "namespace", &namespace, "--wait=false"]);
        if !out.success {
            eprintln!(
                "note: could not delete namespace {namespace}: {}",
                out.stderr
            );
        }
    }
}

/// Only cleans up: the checks ran in [`Env::finish`]. An environment dropped before its
/// scenario concluded (its body panicked, or was abandoned) counts as failed.
impl Drop for Env {
    fn drop(&mut self) {
        if self.outcome == Outcome::Running {
            self.conclude(false);
        }
        if self.outcome == Outcome::Passed {
            // Operators first (dropping one sends SIGKILL), so none of them outlives its
            // RoleBinding and is refused.
            self.operator = None;
            self.replicas.clear();
            self.stop_workers();
            self.remove_own_namespace();
            return;
        }
        self.stop_workers();
        self.dump_diagnostics();
    }
}
