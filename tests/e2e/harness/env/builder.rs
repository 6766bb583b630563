//! The one way a scenario starts: [`scenario!`](crate::harness::scenario) (that is,
//! [`Env::builder`] with the calling module), its options, and [`Builder::run`], which starts
//! the environment, runs the scenario's body on it and ends with [`Env::finish`].
//!
//! Whether a scenario takes a real cluster to itself is not an option: it is decided by the
//! module path, the same one `scripts/test.sh` runs alone (`scenarios::whole_cluster::`).

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::{ClusterHold, Env, Outcome, Share, SimSpeed};
use crate::harness::derived_mounts::DerivedMounts;
use crate::harness::duplicates::DuplicateWatch;
use crate::harness::inspect::Inspector;
use crate::harness::kubectl::Kubectl;
use crate::harness::manifests::Example;
use crate::harness::real_cluster::{OPERATOR_ACCOUNT, OPERATOR_NAMESPACE, RealCluster};
use crate::harness::sim_inspect::{HARNESS_USER_AGENT, SimInspector};

/// The module path under which scenarios take a real cluster to themselves: what
/// `scripts/test.sh` runs first (`scenarios::whole_cluster::`), on two test threads so that one
/// can prepare what needs no cluster (the release scenario compiles its releases) while the
/// other holds the cluster: no two of them ever hold it at once.
pub const WHOLE_CLUSTER: &str = "scenarios::whole_cluster::";

/// Whether the test or module at `path` (`scenarios::whole_cluster::deploy::deploy_base`, or
/// `e2e::scenarios::whole_cluster::deploy`) is one that takes the cluster alone.
pub fn takes_cluster_alone(path: &str) -> bool {
    format!("{path}::").contains(WHOLE_CLUSTER)
}

/// A scenario about to start: its name, the module it is written in, and its options.
#[must_use = "a scenario runs only through .run(...)"]
pub struct Builder {
    name: String,
    module: &'static str,
    speed: SimSpeed,
    examples_namespace: bool,
    sim_only: Option<String>,
    real_cluster_only: Option<String>,
    images: Vec<&'static str>,
}

impl Env {
    /// Scenario `name` (which prefixes what it prints and names its namespace on a real
    /// cluster), written in module `module`: use [`scenario!`](crate::harness::scenario),
    /// which passes the calling module.
    pub fn builder(name: impl Into<String>, module: &'static str) -> Builder {
        Builder {
            name: name.into(),
            module,
            speed: SimSpeed::FAST,
            examples_namespace: false,
            sim_only: None,
            real_cluster_only: None,
            images: Vec::new(),
        }
    }
}

impl Builder {
    /// How fast the simulation runs ([`SimSpeed::FAST`] unless set).
    pub fn speed(mut self, speed: SimSpeed) -> Builder {
        self.speed = speed;
        self
    }

    /// Runs in the examples' own namespace beside other scenarios (see
    /// [`Share::ExamplesNamespace`]), for one that installs manifests naming it.
    pub fn in_examples_namespace(mut self) -> Builder {
        self.examples_namespace = true;
        self
    }

    /// Runs only on kube-sim: against a real cluster the scenario is skipped with a note
    /// saying `why`.
    pub fn sim_only(mut self, why: &str) -> Builder {
        self.sim_only = Some(why.to_owned());
        self
    }

    /// Runs only against a real cluster: on kube-sim the scenario is skipped with a note
    /// saying `why`.
    pub fn real_cluster_only(mut self, why: &str) -> Builder {
        self.real_cluster_only = Some(why.to_owned());
        self
    }

    /// Needs the image the variable `var` names (e.g.
    /// [`WORKER_IMAGE_ENV`](crate::harness::WORKER_IMAGE_ENV)), which `scripts/test.sh` loads
    /// into the real node: skipped with a note when `var` is unset or the cluster is kube-sim,
    /// which has no node to run an image. The body reads it with [`Env::image`].
    pub fn image(mut self, var: &'static str) -> Builder {
        self.images.push(var);
        self
    }

    /// Starts the environment, runs `body` on it and finishes the scenario: the duplicate and
    /// RBAC checks, the timing record, the clean-up. Fails the test naming the scenario when a
    /// check fails; a panic of `body` fails it as it is, after the clean-up and the
    /// diagnostics. `None` when the scenario is skipped here (with a note), else what `body`
    /// returned.
    pub async fn run<T>(self, body: impl AsyncFnOnce(&mut Env) -> T) -> Option<T> {
        self.check_sharing();
        let real = RealCluster::from_env();
        let images = match self.images_here(real.as_ref()) {
            Ok(images) => images,
            Err(why) => {
                eprintln!("note: {} skipped{why}", self.name);
                return None;
            }
        };
        let mut env = self.start(real, images).await;
        // The body's future, and what it holds (guards that undo what the scenario changed),
        // goes at the end of this statement, before the checks and the clean-up.
        let outcome = AssertUnwindSafe(body(&mut env)).catch_unwind().await;
        match outcome {
            Ok(value) => {
                env.finish().await;
                Some(value)
            }
            Err(panic) => {
                env.conclude(false);
                drop(env);
                std::panic::resume_unwind(panic)
            }
        }
    }

    /// How the scenario shares a real cluster: alone if its module is under
    /// [`WHOLE_CLUSTER`], else in a namespace of its own or the examples' one.
    fn share(&self) -> Share {
        if takes_cluster_alone(self.module) {
            Share::Cluster
        } else if self.examples_namespace {
            Share::ExamplesNamespace
        } else {
            Share::Namespace
        }
    }

    /// Fails (naming the scenario) when its sharing is not what its test's path says: the test
    /// thread is named by the test's path, which `scripts/test.sh` filters on, and a scenario
    /// built in a helper of another module would take the cluster alone, or not, against it.
    fn check_sharing(&self) {
        let name = &self.name;
        let module = self.module;
        let alone = takes_cluster_alone(module);
        assert!(
            !(alone && self.examples_namespace),
            "{name}: a scenario under {WHOLE_CLUSTER} has the cluster alone, in the examples' \
             namespace already: drop .in_examples_namespace()"
        );
        let thread = std::thread::current();
        let Some(test) = thread.name().filter(|test| test.contains("::")) else {
            return;
        };
        assert!(
            takes_cluster_alone(test) == alone,
            "{name}: test {test} and module {module} disagree on taking the cluster alone \
             (scenarios under {WHOLE_CLUSTER} do, and scripts/test.sh runs them apart from the others): \
             build the scenario in the module of its test"
        );
    }

    /// The images the scenario asked for, or why it is skipped here (` against ...: why`).
    fn images_here(
        &self,
        real: Option<&RealCluster>,
    ) -> Result<BTreeMap<&'static str, String>, String> {
        if let (Some(why), Some(cluster)) = (&self.sim_only, real) {
            let kubeconfig = cluster.kubeconfig.display();
            return Err(format!(" against the real cluster of {kubeconfig}: {why}"));
        }
        if let (Some(why), None) = (&self.real_cluster_only, real) {
            return Err(format!(" on kube-sim: {why}"));
        }
        let mut images = BTreeMap::new();
        for var in &self.images {
            match std::env::var(var).ok().filter(|image| !image.is_empty()) {
                Some(image) => images.insert(*var, image),
                None => return Err(format!(": no real node holds its image ({var} unset)")),
            };
        }
        if !images.is_empty() && real.is_none() {
            return Err(": kube-sim has no node to run an image".to_owned());
        }
        Ok(images)
    }

    /// A fresh environment: a simulation at the scenario's speed, or its share of the real
    /// cluster (see the crate docs).
    async fn start(self, real: Option<RealCluster>, images: BTreeMap<&'static str, String>) -> Env {
        let name = self.name.as_str();
        let share = self.share();
        let dir = tempfile::Builder::new()
            .prefix(&format!("swarm-e2e-{name}-"))
            .tempdir()
            .expect("create a scratch directory");
        let http = reqwest::Client::builder()
            .user_agent(HARNESS_USER_AGENT)
            .timeout(Duration::from_secs(30))
            .build()
            .expect("build an HTTP client");
        let started = Instant::now();
        let cluster = Cluster::connect(name, self.speed, share, real.as_ref(), dir.path()).await;
        let waited = started.elapsed();
        let client = harness_client(&cluster.kubeconfig).await;
        let kubectl = Kubectl::new(&cluster.kubeconfig, &dir.path().join("kube-cache"));
        let own_namespace =
            (real.is_some() && share == Share::Namespace).then(|| scenario_namespace(name));
        let example = Example::load(own_namespace.as_deref());
        let namespace = example.namespace();
        let (inspector, operator_kubeconfig) = match (&cluster.sim, &real) {
            (Some(sim), _) => (
                Inspector::Sim(SimInspector::new(sim.url(), http.clone())),
                Some(cluster.kubeconfig.clone()),
            ),
            (None, Some(real)) => {
                real_inspection(real, share, &client, &kubectl, &namespace, dir.path()).await
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
            name: self.name,
            dir,
            kubeconfig: cluster.kubeconfig,
            operator_kubeconfig,
            sim: cluster.sim,
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
            _hold: cluster.hold,
            started,
            waited,
            images,
            outcome: Outcome::Running,
        }
    }
}

/// The cluster a scenario runs on: a simulation of its own, or its share of the real one.
struct Cluster {
    kubeconfig: PathBuf,
    sim: Option<kube_sim::Sim>,
    hold: Option<ClusterHold>,
}

impl Cluster {
    /// Takes the scenario's share of the real cluster `real` (waiting for it), or starts a
    /// simulation at `speed` with its kubeconfig in `dir`.
    async fn connect(
        name: &str,
        speed: SimSpeed,
        share: Share,
        real: Option<&RealCluster>,
        dir: &Path,
    ) -> Cluster {
        if let Some(cluster) = real {
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
            return Cluster {
                kubeconfig: cluster.kubeconfig.clone(),
                sim: None,
                hold: Some(hold),
            };
        }
        let config = kube_sim::SimConfig {
            time_scale: speed.time_scale,
            pod_ready_delay: speed.pod_ready_delay,
            ..kube_sim::SimConfig::default()
        };
        let sim = kube_sim::Sim::start(config)
            .await
            .expect("start the simulated control plane");
        let kubeconfig = dir.join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig)
            .expect("write the kubeconfig");
        Cluster {
            kubeconfig,
            sim: Some(sim),
            hold: None,
        }
    }
}

/// On a real cluster: a clean `namespace` before anything watches it, the inspector of the
/// scenario's requests and of the mounts derived from the API's history, and for a scenario
/// alone deploy/'s own identity (its kubeconfig made in `dir`).
async fn real_inspection(
    cluster: &RealCluster,
    share: Share,
    client: &kube::Client,
    kubectl: &Kubectl,
    namespace: &str,
    dir: &Path,
) -> (Inspector, Option<PathBuf>) {
    cluster.reset_namespace(kubectl, namespace).await;
    let (operator_kubeconfig, accounts_in) = match share {
        Share::Namespace | Share::ExamplesNamespace => (None, Some(namespace.to_owned())),
        // Only deploy/'s own account: an operator of a scenario that ran before may still have
        // requests in flight, refused once its namespace went.
        Share::Cluster => {
            let out = dir.join("operator.kubeconfig");
            let path = operator_identity(cluster, kubectl, &out).await;
            (Some(path), Some(OPERATOR_NAMESPACE.to_owned()))
        }
    };
    let inspector = Inspector::real(
        cluster.clone(),
        accounts_in,
        DerivedMounts::start(client.clone(), namespace),
    );
    (inspector, operator_kubeconfig)
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
