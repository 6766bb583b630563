//! The operator processes of a scenario: the one most scenarios run, and the replicas of the
//! leader-election scenarios.

use std::path::{Path, PathBuf};

use super::{Env, Share};
use crate::harness::operator::{MetricsServing, Operator};

impl Env {
    /// Starts the operator binary and waits until it reports ready.
    pub async fn start_operator(&mut self) {
        let kubeconfig = self.operator_kubeconfig().await;
        let args = self.scoped_args(&[]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.start_operator_as(&kubeconfig, &args).await;
    }

    /// `extra_args` after the `run` arguments every operator of this scenario gets:
    /// `--namespace` when it shares a real cluster from a namespace.
    fn scoped_args(&self, extra_args: &[&str]) -> Vec<String> {
        let scope = (self.real.is_some() && self.share != Share::Cluster)
            .then(|| format!("--namespace={}", self.example.namespace()));
        scope
            .into_iter()
            .chain(extra_args.iter().map(|arg| (*arg).to_owned()))
            .collect()
    }

    /// Starts the operator binary with `kubeconfig` and `extra_args` (after `run`), and
    /// waits until it reports ready.
    pub async fn start_operator_as(&mut self, kubeconfig: &Path, extra_args: &[&str]) {
        self.start_operator_serving(kubeconfig, extra_args, MetricsServing::Insecure)
            .await;
    }

    /// Like [`Env::start_operator_as`], serving `/metrics` as `metrics` says.
    pub async fn start_operator_serving(
        &mut self,
        kubeconfig: &Path,
        extra_args: &[&str],
        metrics: MetricsServing,
    ) {
        assert!(self.operator.is_none(), "an operator is already running");
        let log = self.scratch(&format!("operator-{}.log", self.operator_logs.len() + 1));
        let mut operator =
            Operator::spawn_serving(kubeconfig, extra_args, "swarm-operator-e2e", &log, metrics);
        self.operator_logs.push(log);
        operator.wait_ready(&self.http).await;
        self.operator = Some(operator);
    }

    /// The kubeconfig the operator runs with, its identity made on first use.
    async fn operator_kubeconfig(&mut self) -> PathBuf {
        if let Some(path) = &self.operator_kubeconfig {
            return path.clone();
        }
        let cluster = self
            .real
            .as_ref()
            .expect("only a real cluster makes identities");
        let out = self.dir.path().join("operator.kubeconfig");
        let path = cluster
            .namespaced_operator_identity(&self.kubectl, &self.example, &out)
            .await;
        self.operator_kubeconfig = Some(path.clone());
        path
    }

    /// The operator's `/metrics` in the classic text format.
    pub async fn operator_metrics(&self) -> String {
        self.operator
            .as_ref()
            .expect("the operator runs")
            .metrics(&self.http)
            .await
    }

    /// Where the operator serves `/metrics`.
    pub fn operator_metrics_addr(&self) -> std::net::SocketAddr {
        self.operator
            .as_ref()
            .expect("the operator runs")
            .metrics_addr()
    }

    /// The operator's `/readyz`: its status code and body.
    pub async fn operator_readyz(&self) -> (u16, String) {
        self.operator
            .as_ref()
            .expect("the operator runs")
            .readyz(&self.http)
            .await
    }

    /// Starts a replica of the operator named `identity` (its `POD_NAME`) with `extra_args`,
    /// as the install's ServiceAccount, and waits until it reports ready.
    pub async fn start_replica(&mut self, identity: &str, extra_args: &[&str]) {
        assert!(
            !self.replicas.contains_key(identity),
            "replica {identity} is already running"
        );
        let log = self.scratch(&format!("operator-{identity}.log"));
        let kubeconfig = self.operator_kubeconfig().await;
        let args = self.scoped_args(extra_args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut operator = Operator::spawn(&kubeconfig, &args, identity, &log);
        self.operator_logs.push(log);
        operator.wait_ready(&self.http).await;
        self.replicas.insert(identity.to_owned(), operator);
    }

    /// Kills replica `identity` with SIGKILL, as a crash or a lost node would.
    pub async fn kill_replica(&mut self, identity: &str) {
        let mut operator = self
            .replicas
            .remove(identity)
            .unwrap_or_else(|| panic!("no replica {identity} is running"));
        operator.kill().await;
    }

    /// Sends `signal` (`STOP`, `CONT`, ...) to replica `identity`.
    pub fn signal_replica(&self, identity: &str, signal: &str) {
        self.replicas
            .get(identity)
            .unwrap_or_else(|| panic!("no replica {identity} is running"))
            .signal(signal);
    }

    /// Everything replica `identity` has logged so far.
    pub fn replica_log(&self, identity: &str) -> String {
        self.replicas
            .get(identity)
            .unwrap_or_else(|| panic!("no replica {identity} was started"))
            .log()
    }

    /// Whether replica `identity` still runs.
    pub fn replica_running(&mut self, identity: &str) -> bool {
        self.replicas
            .get_mut(identity)
            .is_some_and(Operator::is_running)
    }

    /// Fails the test if replica `identity` has exited.
    pub fn assert_replica_running(&mut self, identity: &str) {
        let running = self
            .replicas
            .get_mut(identity)
            .is_some_and(Operator::is_running);
        assert!(running, "replica {identity} exited; see its log below");
    }

    /// Kills the operator with SIGKILL (no graceful shutdown), as a crash would.
    pub async fn kill_operator(&mut self) {
        let mut operator = self.operator.take().expect("no operator is running");
        operator.kill().await;
    }

    /// Fails the test if the operator process has exited.
    pub fn assert_operator_running(&mut self) {
        if let Some(operator) = self.operator.as_mut() {
            assert!(
                operator.is_running(),
                "the operator exited unexpectedly; see its log below"
            );
        }
    }
}
