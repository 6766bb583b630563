//! The test environment of one scenario: a cluster, kubectl, the operator process, and the
//! reads the assertions use.

#[path = "../../common/cargo_env.rs"]
pub mod cargo_env;
pub mod derived_mounts;
pub mod duplicates;
pub mod inspect;
pub mod kubectl;
pub mod manifests;
pub mod observe;
pub mod operator;
pub mod poll;
pub mod promtool;
pub mod real_cluster;
pub mod sim_inspect;
pub mod tools;
pub mod worker_config;
pub mod worker_fleet;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::Value;

use derived_mounts::DerivedMounts;
use duplicates::{DuplicateWatch, HandoffStats};
use inspect::Inspector;
use kubectl::{Kubectl, repo_root};
use manifests::Example;
use operator::Operator;
use real_cluster::{OPERATOR_ACCOUNT, OPERATOR_NAMESPACE, RealCluster};
use sim_inspect::{HARNESS_USER_AGENT, PodMounts, RequestRecord, SimInspector};
use worker_config::WorkerConfig;
use worker_fleet::{Fleet, FleetSpec, Reports, Workers};

/// Names a file each scenario appends its timing to (see [`Env::record_timing`]).
pub const TIMINGS_ENV: &str = "SWARM_E2E_TIMINGS";

/// Names the operator image (`NAME:TAG`) loaded into the real node of a cluster of
/// `scripts/real-cluster.sh`; `scripts/test.sh` sets it only when such a node holds the image.
pub const OPERATOR_IMAGE_ENV: &str = "SWARM_E2E_OPERATOR_IMAGE";
/// Names the Rust example worker's image, loaded the same way.
pub const WORKER_IMAGE_ENV: &str = "SWARM_E2E_WORKER_IMAGE";
/// Names the Python worker's image, loaded the same way.
pub const PYTHON_WORKER_IMAGE_ENV: &str = "SWARM_E2E_PYTHON_WORKER_IMAGE";
/// Names the Go worker's image, loaded the same way.
pub const GO_WORKER_IMAGE_ENV: &str = "SWARM_E2E_GO_WORKER_IMAGE";

/// A real cluster is shared: scenarios in their own namespaces hold it for reading, side by
/// side; a scenario that needs the whole cluster holds it for writing, alone. (The lock
/// prefers writers, so a waiting whole-cluster scenario is not starved.)
static REAL_CLUSTER: RwLock<()> = RwLock::new(());

/// How a scenario shares a real cluster with the scenarios running beside it. Each simulation
/// is a cluster of its own, so on kube-sim both mean the same.
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
    /// operator over all namespaces. Its namespace is the examples' own.
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

/// One scenario's cluster, kubectl, operator and scratch directory. Dropping it kills the
/// operator; when the test is failing it prints the operator's log and the kubectl transcript.
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
}

impl Env {
    /// A fresh environment with a fast simulation, or a namespace of its own on the real
    /// cluster (see the crate docs).
    pub async fn start(name: &str) -> Env {
        Env::start_with(name, SimSpeed::FAST).await
    }

    /// A fresh environment whose simulation runs at `speed`.
    pub async fn start_with(name: &str, speed: SimSpeed) -> Env {
        Env::start_sharing(name, speed, Share::Namespace).await
    }

    /// A fresh environment that has a real cluster to itself (see [`Share::Cluster`]).
    pub async fn start_alone(name: &str, speed: SimSpeed) -> Env {
        Env::start_sharing(name, speed, Share::Cluster).await
    }

    /// A fresh environment in the examples' own namespace, beside other scenarios (see
    /// [`Share::ExamplesNamespace`]).
    pub async fn start_in_examples_namespace(name: &str) -> Env {
        Env::start_sharing(name, SimSpeed::FAST, Share::ExamplesNamespace).await
    }

    async fn start_sharing(name: &str, speed: SimSpeed, share: Share) -> Env {
        let dir = tempfile::Builder::new()
            .prefix(&format!("swarm-e2e-{name}-"))
            .tempdir()
            .expect("create a scratch directory");
        let http = reqwest::Client::builder()
            .user_agent(HARNESS_USER_AGENT)
            .timeout(Duration::from_secs(30))
            .build()
            .expect("build an HTTP client");
        let real = RealCluster::from_env();
        let started = Instant::now();
        let (kubeconfig, sim, hold) = match &real {
            Some(cluster) => {
                let hold = ClusterHold::take(share);
                eprintln!(
                    "{name}: against the real cluster of {}{}",
                    cluster.kubeconfig.display(),
                    if share == Share::Cluster {
                        ", alone"
                    } else {
                        ""
                    }
                );
                (cluster.kubeconfig.clone(), None, Some(hold))
            }
            None => {
                let config = kube_sim::SimConfig {
                    time_scale: speed.time_scale,
                    pod_ready_delay: speed.pod_ready_delay,
                    ..kube_sim::SimConfig::default()
                };
                let sim = kube_sim::Sim::start(config)
                    .await
                    .expect("start the simulated control plane");
                let path = dir.path().join("kubeconfig");
                sim.write_kubeconfig(&path).expect("write the kubeconfig");
                (path, Some(sim), None)
            }
        };
        let waited = started.elapsed();
        let client = harness_client(&kubeconfig).await;
        let kubectl = Kubectl::new(&kubeconfig, &dir.path().join("kube-cache"));
        let own_namespace =
            (real.is_some() && share == Share::Namespace).then(|| scenario_namespace(name));
        let example = Example::load(own_namespace.as_deref());
        let namespace = example.namespace();
        let (inspector, operator_kubeconfig) = match (&sim, &real) {
            (Some(sim), _) => (
                Inspector::Sim(SimInspector::new(sim.url(), http.clone())),
                Some(kubeconfig.clone()),
            ),
            (None, Some(cluster)) => {
                // A clean namespace before anything watches it.
                cluster.reset_namespace(&kubectl, &namespace).await;
                let (operator_kubeconfig, accounts_in) = match share {
                    Share::Namespace | Share::ExamplesNamespace => (None, Some(namespace.clone())),
                    // Only deploy/'s own account: an operator of a scenario that ran before may
                    // still have requests in flight, refused once its namespace went.
                    Share::Cluster => {
                        let out = dir.path().join("operator.kubeconfig");
                        let path = operator_identity(cluster, &kubectl, &out).await;
                        (Some(path), Some(OPERATOR_NAMESPACE.to_owned()))
                    }
                };
                let inspector = Inspector::real(
                    cluster.clone(),
                    accounts_in,
                    DerivedMounts::start(client.clone(), &namespace),
                );
                (inspector, operator_kubeconfig)
            }
            (None, None) => unreachable!("either a simulation or a real cluster"),
        };
        let duplicates = DuplicateWatch::start(
            inspector.clone(),
            client.clone(),
            namespace,
            example.pool_name(),
        );
        Env {
            name: name.to_string(),
            dir,
            kubeconfig,
            operator_kubeconfig,
            sim,
            real,
            share,
            inspector,
            client,
            http,
            kubectl,
            example,
            operator: None,
            replicas: BTreeMap::new(),
            operator_logs: Vec::new(),
            duplicates,
            more_duplicates: Vec::new(),
            fleet: None,
            reads_container_reports: false,
            refusals_expected: 0,
            _hold: hold,
            started,
            waited,
        }
    }

    /// Like [`Env::start`], but `None` (with a note) against a real cluster, for scenarios
    /// that only make sense on a disposable simulation.
    pub async fn start_sim_only(name: &str, why: &str) -> Option<Env> {
        if let Some(cluster) = RealCluster::from_env() {
            eprintln!(
                "note: {name} skipped against the real cluster of {}: {why}",
                cluster.kubeconfig.display()
            );
            return None;
        }
        Some(Env::start(name).await)
    }

    /// Like [`Env::start_alone`], with the image of `SWARM_E2E_OPERATOR_IMAGE`, for scenarios
    /// that run the operator as a container on the real node; `None` (with a note) where no
    /// node holds that image (kube-sim, or a real cluster without its real node).
    pub async fn start_alone_with_operator_image(name: &str) -> Option<(Env, String)> {
        let (env, mut images) = Env::start_alone_with_images(name, &[OPERATOR_IMAGE_ENV]).await?;
        Some((env, images.remove(0)))
    }

    /// Like [`Env::start_alone`], with the images the variables `vars` name (in that order),
    /// which `scripts/test.sh` loaded into the real node; `None` (with a note) when one is
    /// unset or the cluster is kube-sim, which has no node to run an image.
    pub async fn start_alone_with_images(name: &str, vars: &[&str]) -> Option<(Env, Vec<String>)> {
        let images: Vec<Option<String>> = vars
            .iter()
            .map(|var| std::env::var(var).ok().filter(|image| !image.is_empty()))
            .collect();
        let why = match (
            vars.iter().zip(&images).find(|(_, image)| image.is_none()),
            RealCluster::from_env(),
        ) {
            (Some((var, _)), _) => Some(format!("no real node holds its image ({var} unset)")),
            (None, None) => Some("kube-sim has no node to run an image".to_owned()),
            (None, Some(_)) => None,
        };
        if let Some(why) = why {
            eprintln!("note: {name} skipped: {why}");
            return None;
        }
        let env = Env::start_alone(name, SimSpeed::FAST).await;
        Some((env, images.into_iter().flatten().collect()))
    }

    /// What the duplicate watch has seen so far.
    pub fn handoff_stats(&self) -> HandoffStats {
        self.duplicates.stats()
    }

    /// Makes [`HandoffStats::longest_unheld_seconds`] measure from now on.
    pub fn restart_longest_unheld(&self) {
        self.duplicates.restart_longest_unheld();
    }

    /// Fails if any job has run on two live pods at once so far (every scenario is also
    /// checked when its environment is dropped).
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
        assert!(self.operator.is_none(), "an operator is already running");
        let log = self.scratch(&format!("operator-{}.log", self.operator_logs.len() + 1));
        let mut operator = Operator::spawn(kubeconfig, extra_args, "swarm-operator-e2e", &log);
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

    /// The operator's `/readyz`: its status code and body.
    pub async fn operator_readyz(&self) -> (u16, String) {
        self.operator
            .as_ref()
            .expect("the operator runs")
            .readyz(&self.http)
            .await
    }

    /// The directory of the real cluster `scripts/real-cluster.sh up` started (beside its
    /// kubeconfig), whose components `scripts/real-cluster.sh restart` can restart; `None` on
    /// the simulation.
    pub fn real_cluster_dir(&self) -> Option<PathBuf> {
        let cluster = self.real.as_ref()?;
        let dir = cluster.kubeconfig.parent()?;
        dir.join("cmds").is_dir().then(|| dir.to_path_buf())
    }

    /// A kubeconfig that presents `token` (as user `user`) to the real cluster, in the
    /// scenario's scratch directory as `file`; `None` on kube-sim.
    pub fn token_kubeconfig(&self, token: &str, user: &str, file: &str) -> Option<PathBuf> {
        let cluster = self.real.as_ref()?;
        Some(cluster.token_kubeconfig_of(token, user, &self.scratch(file)))
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

    /// `kubectl apply -f crds/`, then waits for the CRD to be established.
    pub async fn install_crds(&self) {
        {
            let _one_at_a_time = real_cluster::CLUSTER_SCOPED_APPLY.lock().await;
            self.kubectl.ok(&["apply", "-f", "crds/"]).await;
        }
        self.kubectl
            .ok(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/swarmpools.swarm.io",
            ])
            .await;
    }

    /// `kubectl apply -f examples/` (an edited copy in the scenario's own namespace when it
    /// shares the cluster).
    pub async fn apply_examples(&self) {
        if self.example.is_relocated() {
            self.apply("examples.yaml", &self.example.documents).await;
        } else {
            self.kubectl.ok(&["apply", "-f", "examples/"]).await;
        }
    }

    /// `kubectl apply -f <path>...` for the repository's manifest files and directories
    /// `paths` (edited copies in the scenario's own namespace when it shares the cluster).
    pub async fn apply_repo_manifests(&self, paths: &[&str]) {
        if self.example.is_relocated() {
            let documents = self.example.localize(manifests::documents_at(paths));
            self.apply("repo-manifests.yaml", &documents).await;
        } else {
            let mut args = vec!["apply"];
            for path in paths {
                args.extend(["-f", path]);
            }
            self.kubectl.ok(&args).await;
        }
    }

    /// Writes `documents` to `file` in the scratch directory and `kubectl apply -f`s it, as a
    /// user applying an edited manifest; fails the test if kubectl fails.
    pub async fn apply(&self, file: &str, documents: &[Value]) {
        let output = self.apply_output(file, documents).await;
        assert!(
            output.success,
            "kubectl apply -f {file} failed: {}",
            output.stderr
        );
    }

    /// Like [`Env::apply`], returning what kubectl printed whatever the outcome.
    pub async fn apply_output(&self, file: &str, documents: &[Value]) -> kubectl::Output {
        let path = manifests::write_manifest(&self.scratch(file), documents);
        let path = path.to_str().expect("UTF-8 scratch path");
        self.kubectl.run(&["apply", "-f", path]).await
    }

    /// The common start of most scenarios: CRDs, the operator, the examples, and a settled
    /// pool at the example's replicas, checked against every invariant.
    pub async fn install_example(&mut self) -> observe::Observed {
        self.install_crds().await;
        self.start_operator().await;
        self.apply_examples().await;
        let settled = observe::wait_balanced(self, self.example.replicas()).await;
        observe::assert_invariants(self, &settled).await;
        settled
    }

    /// The example SwarmPool as the API serves it, if it exists.
    pub async fn pool(&self) -> Option<Value> {
        self.pool_named(&self.example.pool_name()).await
    }

    /// A SwarmPool in the example namespace, as the API serves it, if it exists.
    pub async fn pool_named(&self, name: &str) -> Option<Value> {
        let gvk = GroupVersionKind::gvk("swarm.io", "v1alpha1", "SwarmPool");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "swarmpools");
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &self.example.namespace(), &resource);
        let pool = api.get_opt(name).await.expect("GET the SwarmPool");
        pool.map(|p| serde_json::to_value(p).expect("SwarmPool as JSON"))
    }

    /// A ConfigMap in the example namespace, if it exists.
    pub async fn config_map(&self, name: &str) -> Option<ConfigMap> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.example.namespace());
        api.get_opt(name).await.expect("GET the ConfigMap")
    }

    /// The worker config of pool `pool` from its ConfigMap `config_map` (`main`, as read):
    /// its `config.yml`, or in the per-worker layout its `index.yml` and the workers' own
    /// ConfigMaps. `Ok(None)` when there is no config yet.
    pub async fn pool_config(
        &self,
        pool: &str,
        config_map: &str,
        main: Option<&ConfigMap>,
    ) -> Result<Option<WorkerConfig>, String> {
        let data = main.and_then(|cm| cm.data.as_ref());
        if let Some(text) = data.and_then(|d| d.get("config.yml")) {
            return WorkerConfig::parse(text)
                .map(Some)
                .map_err(|e| format!("{config_map} holds an unreadable config.yml: {e}"));
        }
        let Some(index) = data.and_then(|d| d.get("index.yml")) else {
            return Ok(None);
        };
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.example.namespace());
        let selector = format!("swarm.io/pool={pool},swarm.io/worker");
        let listed = api
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| format!("LIST the workers' ConfigMaps: {e}"))?;
        let slices: Vec<(String, String, String)> = listed
            .items
            .iter()
            .map(|cm| {
                let name = cm.metadata.name.clone().unwrap_or_default();
                let pod = cm
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("swarm.io/worker"))
                    .cloned()
                    .unwrap_or_default();
                let text = cm
                    .data
                    .as_ref()
                    .and_then(|d| d.get("config.yml"))
                    .cloned()
                    .unwrap_or_default();
                (name, pod, text)
            })
            .collect();
        WorkerConfig::assemble(config_map, index, &slices).map(Some)
    }

    /// Every pod in the example namespace.
    pub async fn pods(&self) -> Vec<Pod> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.example.namespace());
        api.list(&ListParams::default())
            .await
            .expect("LIST pods")
            .items
    }

    /// Every events.k8s.io/v1 Event in the example namespace.
    pub async fn events(&self) -> Vec<Event> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.example.namespace());
        api.list(&ListParams::default())
            .await
            .expect("LIST events.k8s.io/v1 events")
            .items
    }

    /// Whether an object exists, by its manifest's apiVersion, kind, namespace and name
    /// (plural found by discovery, as kubectl does).
    pub async fn exists(&self, manifest: &Value) -> bool {
        let api_version = manifests::str_at(manifest, "/apiVersion");
        let kind = manifests::str_at(manifest, "/kind");
        let name = manifests::str_at(manifest, "/metadata/name");
        let (group, version) = api_version
            .split_once('/')
            .unwrap_or(("", api_version.as_str()));
        let gvk = GroupVersionKind::gvk(group, version, &kind);
        let (resource, caps) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("discovery of {api_version} {kind}: {e}"));
        let api: Api<DynamicObject> = match manifest.pointer("/metadata/namespace") {
            Some(Value::String(ns)) => Api::namespaced_with(self.client.clone(), ns, &resource),
            _ if caps.scope == kube::discovery::Scope::Namespaced => {
                Api::default_namespaced_with(self.client.clone(), &resource)
            }
            _ => Api::all_with(self.client.clone(), &resource),
        };
        api.get_opt(&name)
            .await
            .unwrap_or_else(|e| panic!("GET {kind} {name}: {e}"))
            .is_some()
    }

    /// What the live pod instances `uids` mounted (derived on a real cluster, see
    /// [`derived_mounts`]).
    pub async fn mounts_of(&self, uids: &[String]) -> Vec<PodMounts> {
        self.inspector.mounts_of(uids).await
    }

    /// A position in the operator's request log: requests made from now on come after it.
    pub async fn request_mark(&self) -> usize {
        self.inspector
            .operator_requests()
            .await
            .map_or(0, |requests| requests.len())
    }

    /// Requests RBAC refused so far were caused by the scenario on purpose: the check at the
    /// end looks only at the requests made from now on.
    pub async fn expect_refusals_so_far(&mut self) {
        self.refusals_expected = self.request_mark().await;
    }

    /// The operator's requests after `mark`, oldest first; `None` where the cluster keeps no
    /// request log (a real cluster without an audit log).
    pub async fn operator_requests_since(&self, mark: usize) -> Option<Vec<RequestRecord>> {
        let all = self.inspector.operator_requests().await?;
        Some(all.into_iter().skip(mark).collect())
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        // No scenario ends without the duplicate check, nor, on a real cluster, without
        // checking that RBAC allowed every request the operator made.
        let failure = if std::thread::panicking() {
            None
        } else {
            self.duplicates
                .failure()
                .or_else(|| {
                    self.more_duplicates
                        .iter()
                        .find_map(DuplicateWatch::failure)
                })
                .or_else(|| self.forbidden_requests())
        };
        let passed = !std::thread::panicking() && failure.is_none();
        self.record_timing(passed);
        if passed {
            // Operators first (dropping one sends SIGKILL), so none of them outlives its
            // RoleBinding and is refused.
            self.operator = None;
            self.replicas.clear();
            self.stop_workers();
            self.remove_own_namespace();
            return;
        }
        self.stop_workers();
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
        if let Some(failure) = failure {
            panic!("{}: {failure}", self.name);
        }
    }
}

impl Env {
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

    /// On a real cluster, a passed scenario's namespace goes (without waiting), so the
    /// cluster does not fill up with the pods of finished scenarios; a failed one's stays
    /// for a look.
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

    /// On a real cluster: the operator's requests that RBAC refused (403), described.
    fn forbidden_requests(&self) -> Option<String> {
        self.real.as_ref()?;
        let requests = self.inspector.operator_requests_blocking()?;
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
}

/// The operator's identity on a real cluster: `deploy/`'s ServiceAccount and ClusterRole
/// (applied, idempotently), and a kubeconfig at `out` with a token of that account.
async fn operator_identity(cluster: &RealCluster, kubectl: &Kubectl, out: &Path) -> PathBuf {
    kubectl.ok(&["apply", "-f", "deploy/namespace.yaml"]).await;
    kubectl.ok(&["apply", "-k", "deploy/rbac"]).await;
    cluster
        .service_account_kubeconfig(kubectl, OPERATOR_NAMESPACE, OPERATOR_ACCOUNT, out)
        .await
}

/// The namespace of scenario `name` when it shares a real cluster: `swarm-<name>`, as a DNS
/// label.
fn scenario_namespace(name: &str) -> String {
    let label: String = format!("swarm-{name}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    label.trim_end_matches('-').to_owned()
}

/// A kube client for the kubeconfig at `path`, identifying itself as the suite.
async fn harness_client(path: &Path) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(path)
        .unwrap_or_else(|e| panic!("cannot read kubeconfig {}: {e}", path.display()));
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap_or_else(|e| panic!("invalid kubeconfig {}: {e}", path.display()));
    config.headers.push((
        "user-agent".parse().expect("header name"),
        HARNESS_USER_AGENT.parse().expect("header value"),
    ));
    kube::Client::try_from(config).expect("build a kube client")
}

/// The repository's manifests directory `dir` (e.g. `deploy`), absolute.
pub fn repo_path(dir: &str) -> PathBuf {
    repo_root().join(dir)
}
