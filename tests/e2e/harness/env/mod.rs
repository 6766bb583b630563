//! The environment of one scenario ([`Env`]): how it shares the cluster, what it holds, and
//! the duplicate watches and worker processes it runs. How it starts is in [`builder`], what
//! it checks at the end and how it cleans up in [`finish`], the operators it runs in
//! [`operators`], and its reads and applies of the API in [`api`].

mod api;
pub mod builder;
mod finish;
mod operators;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use super::derived_mounts::DerivedMounts;
use super::duplicates::{DuplicateWatch, HandoffStats};
use super::inspect::Inspector;
use super::kubectl::Kubectl;
use super::manifests::Example;
use super::operator::Operator;
use super::real_cluster::RealCluster;
use super::worker_fleet::{Fleet, FleetSpec, Reports, Workers};

/// A real cluster is shared: scenarios in their own namespaces hold it for reading, side by
/// side; a scenario that needs the whole cluster holds it for writing, alone. (The lock
/// prefers writers, so a waiting whole-cluster scenario is not starved.)
static REAL_CLUSTER: RwLock<()> = RwLock::new(());

/// How a scenario shares a real cluster with the scenarios running beside it. Each simulation is a
/// cluster of its own, so on kube-sim all three mean the same. The scenario's module decides
/// [`Share::Cluster`]; [`Builder::in_examples_namespace`](builder::Builder::in_examples_namespace)
/// asks for [`Share::ExamplesNamespace`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// A namespace of its own (`swarm-<scenario>`), with its own operator watching only that
    /// namespace as a ServiceAccount of that namespace bound to deploy/'s ClusterRole: the
    /// scenario runs beside others.
    Namespace,
    /// The examples' own namespace, beside other scenarios: for one that installs manifests
    /// naming it (the namespaced overlay of `deploy/`). No other scenario that runs beside
    /// others uses that namespace.
    ExamplesNamespace,
    /// The whole cluster, alone: it restarts control-plane components, edits cluster-scoped
    /// objects (RBAC, the install in `swarm-system`, the leader-election Lease) or runs the
    /// operator over all namespaces. Its namespace is the examples' own. Exactly the
    /// scenarios under `scenarios::whole_cluster` ([`builder::WHOLE_CLUSTER`]).
    Cluster,
}

/// What a scenario holds of the shared real cluster while it runs.
enum ClusterHold {
    Beside(#[allow(dead_code)] RwLockReadGuard<'static, ()>),
    Alone(#[allow(dead_code)] RwLockWriteGuard<'static, ()>),
}

impl ClusterHold {
    fn take(share: Share) -> ClusterHold {
        match share {
            Share::Namespace | Share::ExamplesNamespace => ClusterHold::Beside(
                REAL_CLUSTER
                    .read()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()),
            ),
            Share::Cluster => ClusterHold::Alone(
                REAL_CLUSTER
                    .write()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()),
            ),
        }
    }
}

/// How fast a test's simulation runs.
#[derive(Clone, Copy, Debug)]
pub struct SimSpeed {
    /// Factor on every simulated delay (termination grace, readiness).
    pub time_scale: f64,
    /// Pod start-up time before scaling.
    pub pod_ready_delay: Duration,
}

impl SimSpeed {
    /// Fast: a 30 s termination grace takes 0.6 s, a pod is Ready after 20 ms.
    pub const FAST: SimSpeed = SimSpeed {
        time_scale: 0.02,
        pod_ready_delay: Duration::from_secs(1),
    };

    /// Slow enough that a handoff lasts seconds (the example's 10 s grace takes 1 s), so a
    /// scenario can act while pods are still terminating.
    pub const SLOW: SimSpeed = SimSpeed {
        time_scale: 0.1,
        pod_ready_delay: Duration::from_secs(2),
    };
}

/// One scenario's cluster, kubectl, operator and scratch directory, made by [`Env::builder`]
/// (through [`scenario!`](crate::harness::scenario)) and handed to the scenario's body. Its
/// checks run in [`Env::finish`] once the body returns; dropping it only cleans up (and, when
/// the scenario failed, prints the operator's log, its requests and the kubectl transcript).
pub struct Env {
    name: String,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    /// What the operator runs as: the admin kubeconfig on the simulation, a ServiceAccount
    /// token bound by `deploy/` on a real cluster (`None` until the first operator starts in a
    /// scenario of its own namespace, whose account lives in that namespace).
    operator_kubeconfig: Option<PathBuf>,
    sim: Option<kube_sim::Sim>,
    real: Option<RealCluster>,
    share: Share,
    inspector: Inspector,
    /// kube client for the assertions' reads (its own user agent, never taken for the operator).
    pub client: kube::Client,
    http: reqwest::Client,
    /// kubectl bound to this environment's kubeconfig.
    pub kubectl: Kubectl,
    /// The example manifests.
    pub example: Example,
    operator: Option<Operator>,
    /// Further operator processes, by identity (leader election).
    replicas: BTreeMap<String, Operator>,
    operator_logs: Vec<PathBuf>,
    /// Samples what every live pod runs for the whole scenario.
    duplicates: DuplicateWatch,
    /// Further duplicate watches, for pools of workers that wait for their entry.
    more_duplicates: Vec<DuplicateWatch>,
    /// The worker processes of an acknowledging pool, when the scenario runs them.
    fleet: Option<Fleet>,
    /// Whether the duplicate watch reads reports of workers in real containers
    /// ([`Env::watch_reports`]).
    reads_container_reports: bool,
    /// Requests RBAC may have refused on purpose (a scenario that revokes permissions, or an
    /// API server whose authorizer is still starting): the first this many are not checked.
    refusals_expected: usize,
    _hold: Option<ClusterHold>,
    /// When the scenario began, and how long of that it waited for its share of the cluster.
    started: Instant,
    waited: Duration,
    /// The images the scenario asked for, by the variable that names each.
    images: BTreeMap<&'static str, String>,
    /// Whether the scenario passed, once it is known.
    outcome: Outcome,
}

/// How a scenario ended, as far as its environment knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// The body still runs (or was abandoned: then it counts as failed).
    Running,
    Passed,
    Failed,
}

impl Env {
    /// What the duplicate watch has seen so far.
    pub fn handoff_stats(&self) -> HandoffStats {
        self.duplicates.stats()
    }

    /// Makes [`HandoffStats::longest_unheld_seconds`] measure from now on.
    pub fn restart_longest_unheld(&self) {
        self.duplicates.restart_longest_unheld();
    }

    /// Fails if any job has run on two live pods at once so far (every scenario is also
    /// checked when it finishes).
    pub fn assert_exclusive(&self) {
        self.duplicates.assert_exclusive();
        for watch in &self.more_duplicates {
            watch.assert_exclusive();
        }
    }

    /// Watches pool `pool` for a job on two live pods from now on, for workers that wait for
    /// their entry and read it as the kubelet refreshes the file (a Deployment pool): each live
    /// pod counts as running every job its entry listed while it lived. Checked with the rest.
    pub fn watch_waiting_workers(&mut self, pool: &str) {
        let mounts = DerivedMounts::start(self.client.clone(), &self.example.namespace());
        self.more_duplicates
            .push(DuplicateWatch::start_for_waiting_workers(
                mounts,
                self.client.clone(),
                self.example.namespace(),
                pool.to_owned(),
            ));
    }

    /// What the duplicate watches of [`Env::watch_waiting_workers`] have seen so far.
    pub fn waiting_workers_stats(&self) -> Vec<HandoffStats> {
        self.more_duplicates
            .iter()
            .map(DuplicateWatch::stats)
            .collect()
    }

    /// Runs a worker process for each pod of the example's pool (see `worker_fleet`), as the
    /// pool's workers under `rollout.policy: Acknowledge`; from now on the duplicate watch reads
    /// what those processes report they run instead of what the pods mounted.
    pub fn run_workers(&mut self, workers: Workers) -> &Fleet {
        let pool = self.example.pool_name();
        let config_map = self.example.config_map_name();
        self.run_workers_of(&pool, &config_map, "app=swarm-worker", workers)
    }

    /// Like [`Env::run_workers`], for pool `pool` of the example namespace, whose workers'
    /// pods `selector` selects and who read ConfigMap `config_map`.
    pub fn run_workers_of(
        &mut self,
        pool: &str,
        config_map: &str,
        selector: &str,
        workers: Workers,
    ) -> &Fleet {
        let namespace = self.example.namespace();
        let spec = FleetSpec {
            namespace: namespace.clone(),
            pool: pool.to_owned(),
            config_map: config_map.to_owned(),
            selector: selector.to_owned(),
            workers,
            kubeconfig: self.kubeconfig.clone(),
            dir: self.dir.path().join("workers"),
            // kwok's nodes run no probes: the fleet plays the kubelet's prober there.
            probes_as_kubelet: self.real.is_some(),
        };
        let fleet = Fleet::start(self.client.clone(), spec);
        self.duplicates = DuplicateWatch::start_for_reports(
            fleet.reports(),
            self.client.clone(),
            namespace,
            pool.to_owned(),
        );
        self.fleet.insert(fleet)
    }

    /// From now on the duplicate watch of pool `pool` (in the example namespace) reads what
    /// the workers report they run in `reports`: workers in real containers that append their
    /// report lines to a directory of the host (a hostPath volume).
    pub fn watch_reports(&mut self, pool: &str, reports: Reports) {
        self.reads_container_reports = true;
        self.duplicates = DuplicateWatch::start_for_reports(
            reports,
            self.client.clone(),
            self.example.namespace(),
            pool.to_owned(),
        );
    }

    /// Whether the workers are real containers whose reports the scenario reads: then what
    /// they run is what they report, not what the API's history says they mounted.
    pub fn reads_container_reports(&self) -> bool {
        self.reads_container_reports
    }

    /// The worker processes [`Env::run_workers`] started.
    pub fn fleet(&self) -> &Fleet {
        self.fleet.as_ref().expect("the scenario runs its workers")
    }

    /// Whether this environment runs on a simulation (inspection endpoints available).
    pub fn is_sim(&self) -> bool {
        self.sim.is_some()
    }

    /// The scenario's name, which prefixes what it prints.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Logs that a simulation-only assertion is skipped.
    pub fn note_skipped(&self, what: &str) {
        eprintln!(
            "note: {}: {what} not checked against a real cluster",
            self.name
        );
    }

    /// A path in this test's scratch directory.
    pub fn scratch(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// The image that variable `var` names, as the scenario asked for it with
    /// [`Builder::image`](builder::Builder::image).
    pub fn image(&self, var: &str) -> &str {
        self.images.get(var).map_or_else(
            || {
                panic!(
                    "{}: {var} is not among the images the scenario asked for",
                    self.name
                )
            },
            String::as_str,
        )
    }

    /// The directory of the real cluster `scripts/real-cluster.sh up` started (beside its
    /// kubeconfig), whose components `scripts/real-cluster.sh restart` can restart; `None` on
    /// the simulation.
    pub fn real_cluster_dir(&self) -> Option<PathBuf> {
        self.real.as_ref()?.dir()
    }

    /// A kubeconfig that presents `token` (as user `user`) to the real cluster, in the
    /// scenario's scratch directory as `file`; `None` on kube-sim.
    pub fn token_kubeconfig(&self, token: &str, user: &str, file: &str) -> Option<PathBuf> {
        let cluster = self.real.as_ref()?;
        Some(cluster.token_kubeconfig_of(token, user, &self.scratch(file)))
    }

    /// A kubeconfig that acts as ServiceAccount `namespace/account`: a token of it on a real
    /// cluster; the simulation's own kubeconfig on kube-sim, which has no authentication.
    pub async fn service_account_kubeconfig(&self, namespace: &str, account: &str) -> PathBuf {
        match &self.real {
            Some(cluster) => {
                let out = self.scratch(&format!("{namespace}-{account}.kubeconfig"));
                cluster
                    .service_account_kubeconfig(&self.kubectl, namespace, account, &out)
                    .await
            }
            None => self.kubeconfig.clone(),
        }
    }

    /// On a real cluster, a kubeconfig with a token of ServiceAccount `namespace/account`
    /// bound to pod `pod` of uid `uid` (see [`RealCluster::pod_bound_kubeconfig`]); `None` on
    /// kube-sim, which has no authentication.
    pub async fn pod_bound_kubeconfig(
        &self,
        namespace: &str,
        account: &str,
        pod: &str,
        uid: &str,
    ) -> Option<PathBuf> {
        let cluster = self.real.as_ref()?;
        let out = self.scratch(&format!("{namespace}-{pod}.kubeconfig"));
        Some(
            cluster
                .pod_bound_kubeconfig(&self.kubectl, namespace, account, (pod, uid), &out)
                .await,
        )
    }
}
