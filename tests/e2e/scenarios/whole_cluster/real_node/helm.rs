//! The operator as users get it: released by `scripts/release.sh` into a registry
//! ([`Registry`]), and installed from there as a user installs it, its images pulled by the real
//! node's kubelet, none loaded by the harness:
//!
//! - `helm install swarm-operator oci://<registry>/charts/swarm-operator --version <first>`
//!   with no image value (the released chart names its image by digest): both replicas Ready on
//!   the real node, running the pulled image, one leading; `helm test` (the chart's check pod,
//!   on the same image) passes;
//! - a pool of the released example workers (pulled too), three acknowledging containers on the
//!   real node, becomes Balanced under the installed operator;
//! - `helm upgrade` to the next release replaces both replicas while the pool stays Balanced,
//!   and no job runs on two containers at once (what the workers report); the new leader takes
//!   a scale;
//! - `helm uninstall` removes the operator and leaves the CRD (`crds.keep`) and the pool;
//! - `deploy/` through a user's overlay whose image `kustomize edit set image` pins to the
//!   second release's digest takes the pool over.
//!
//! It needs helm, crane and kustomize (`SWARM_HELM`, `SWARM_CRANE`, `SWARM_KUSTOMIZE`, which
//! `scripts/test.sh` sets from `scripts/install-*.sh`) and the real node, and skips with a note
//! without them. The releases are cut from this checkout's commit (HEAD), as a maintainer cuts
//! one: uncommitted changes are not in them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use serde_json::json;

use super::overlay::{self, REAL_NODE};
use super::registry::Registry;
use super::release::{Released, Releaser, next_versions};
use super::replicas::{self, LEASE, name};
use crate::harness::helm::{HELM_ENV, Helm};
use crate::harness::observe::{assert_invariants, balanced, wait_for};
use crate::harness::poll::eventually_within;
use crate::harness::real_cluster::{KUBECONFIG_ENV, OPERATOR_NAMESPACE, RealCluster};
use crate::harness::sim_inspect::RequestRecord;
use crate::harness::{Env, scenario};
use crate::scenarios::real_workers::faults::{
    AcknowledgingPool, BACK_WITHIN, acknowledging_pool, worker_pod,
};
use crate::scenarios::real_workers::settle_acknowledged;
use crate::scenarios::scale;

const RELEASE: &str = "swarm-operator";
const OPERATOR: &str = "swarm-operator";
const WORKER: &str = "swarm-worker";

/// The tools the scenario runs, from `SWARM_HELM`, `SWARM_CRANE` and `SWARM_KUSTOMIZE`.
struct Tools {
    helm: PathBuf,
    crane: PathBuf,
    kustomize: PathBuf,
}

impl Tools {
    /// The three tools, or the variables that are unset.
    fn from_env() -> Result<Tools, String> {
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
        };
        match (var(HELM_ENV), var("SWARM_CRANE"), var("SWARM_KUSTOMIZE")) {
            (Some(helm), Some(crane), Some(kustomize)) => Ok(Tools {
                helm,
                crane,
                kustomize,
            }),
            _ => Err("SWARM_HELM, SWARM_CRANE or SWARM_KUSTOMIZE is unset \
                      (scripts/install-helm.sh, install-crane.sh, install-kustomize.sh build them)"
                .to_owned()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_into_a_registry_the_operator_installs_upgrades_and_uninstalls_with_helm() {
    let tools = match Tools::from_env() {
        Ok(tools) => tools,
        Err(why) => {
            eprintln!("note: real-node-release skipped: {why}");
            return;
        }
    };
    let Some(cluster) = RealCluster::from_env()
        .and_then(|cluster| cluster.dir())
        .filter(|dir| dir.join("node").is_dir())
    else {
        eprintln!(
            "note: real-node-release skipped: it needs a cluster of scripts/real-cluster.sh with \
             its real node ({KUBECONFIG_ENV}), whose kubelet pulls the released images"
        );
        return;
    };
    // Cut before the scenario takes the cluster: compiling them needs none, so under
    // scripts/test.sh it runs while the other whole-cluster scenarios hold it in turn.
    let releases = cut_releases(tools.crane.clone(), cluster.clone()).await;
    let Releases { first, second, .. } = &releases;
    scenario!("real-node-release")
        .real_cluster_only("the real node's kubelet pulls the released images")
        .run(async |env| {
            let helm = Helm::new(
                tools.helm.clone(),
                cluster.join("kubeconfig"),
                env.scratch("helm"),
            )
            .in_namespace(OPERATOR_NAMESPACE);
            let _uninstall = Uninstall(&helm);
            users_install(env, &helm, first).await;
            let AcknowledgingPool { reports, .. } =
                acknowledging_pool(env, &first.pinned(WORKER)).await;
            assert_pulled(
                &worker_pod(env, &format!("{}-0", env.example.statefulset_name())).await,
                &first.pinned(WORKER),
            );
            helm_upgrade_rolls_while_the_pool_stays_balanced(env, &helm, second).await;

            // The new leader works: it takes a scale.
            scale(env, 2).await;
            let settled = settle_acknowledged(env, &reports, 2, BACK_WITHIN).await;
            assert_invariants(env, &settled).await;
            let stats = env.handoff_stats();
            assert_eq!(stats.duplicate_job_seconds, 0.0, "{stats:?}");
            env.assert_exclusive();
            helm_uninstall_leaves_the_crd_and_the_pool(env, &helm).await;
            kustomize_pins_the_released_digest(env, &tools.kustomize, second).await;
        })
        .await;
}

/// A registry for the node of the cluster in `cluster`, and the next two releases cut into it,
/// on a blocking thread.
async fn cut_releases(crane: PathBuf, cluster: PathBuf) -> Releases {
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::Builder::new()
            .prefix("swarm-e2e-real-node-release-")
            .tempdir()
            .expect("create a scratch directory");
        let registry = Registry::start(&crane, &dir.path().join("registry"), &cluster);
        let releaser = Releaser::new(&dir.path().join("release"), &registry.address);
        let [first, second] = next_versions().map(|version| releaser.cut(&version));
        Releases {
            _registry: registry,
            first,
            second,
            _dir: dir,
        }
    })
    .await
    .expect("scripts/release.sh ran")
}

/// What the scenario installs: the registry it pulls from and the two releases in it.
struct Releases {
    /// Serving until the scenario ends; the releases' references name it.
    _registry: Registry,
    first: Released,
    second: Released,
    /// The registry's blobs and the releases' clone, removed after the registry stops.
    _dir: tempfile::TempDir,
}

/// The user's install of `release`: CRD-owning `helm install` from the registry, no image
/// value, pods placed on the real node; both replicas Ready on the pulled image, one leading;
/// then `helm test`.
async fn users_install(env: &Env, helm: &Helm, release: &Released) {
    // The harness applied deploy/rbac for an operator of its own (none runs here), and the
    // kustomize installs before this one left their cluster-scoped objects: Helm adopts no
    // object it did not create, so they go first.
    env.kubectl
        .ok(&[
            "delete",
            "-k",
            "deploy/rbac",
            "--ignore-not-found",
            "--wait",
        ])
        .await;
    let started = Instant::now();
    let mut install = vec![
        "install".to_owned(),
        RELEASE.to_owned(),
        release.chart(),
        format!("--version={}", release.version),
        "--plain-http".to_owned(),
        "--create-namespace".to_owned(),
        // The CRD is in the cluster already (the harness applied crds/): the release takes it
        // over, as the chart's README tells a user who applied it by hand.
        "--take-ownership".to_owned(),
        "--wait".to_owned(),
        "--timeout=3m".to_owned(),
    ];
    install.extend(placement());
    helm.ok(&install);
    let image = release.pinned(OPERATOR);
    let pods =
        replicas::wait_ready(env, OPERATOR_NAMESPACE, "both replicas Ready", |_| Ok(())).await;
    pods.iter().for_each(|pod| assert_pulled(pod, &image));
    let leader = replicas::wait_one_leader(env, OPERATOR_NAMESPACE, &pods).await;
    eprintln!(
        "real-node-release: helm install of {} to both replicas Ready on {image} and {leader} \
         leading: {:.1} s",
        release.version,
        started.elapsed().as_secs_f64()
    );
    helm_test_passes(helm);
}

/// The values that place the operator's pods on the real node (its label, its taint).
fn placement() -> [String; 4] {
    [
        "--set-json".to_owned(),
        json!({"nodeSelector": {REAL_NODE: "true"}}).to_string(),
        "--set-json".to_owned(),
        json!({"tolerations": [{"key": REAL_NODE, "operator": "Exists", "effect": "NoSchedule"}]})
            .to_string(),
    ]
}

/// Every container of `pod` runs `image` (`HOST:PORT/<name>@<digest>`), which the kubelet
/// pulled: the image it reports running is the registry's, by that digest.
fn assert_pulled(pod: &Pod, image: &str) {
    let spec = pod.spec.as_ref().expect("the pod's spec");
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .expect("the pod's container statuses");
    for container in &spec.containers {
        assert_eq!(
            container.image.as_deref(),
            Some(image),
            "{}'s image",
            name(pod)
        );
    }
    for status in statuses {
        assert_eq!(
            status.image_id,
            image,
            "{}: the image the kubelet runs is the registry's",
            name(pod)
        );
    }
}

/// `helm test`: the chart's hook pod, on the real node, finds the CRD served, the replicas Ready
/// and a Ready one holding the Lease.
fn helm_test_passes(helm: &Helm) {
    let started = Instant::now();
    let out = helm.ok(&["test", RELEASE]);
    assert!(
        out.contains("swarm-operator-test") && out.contains("Succeeded"),
        "helm test ran the check pod and it succeeded: {out}"
    );
    eprintln!(
        "real-node-release: helm test passed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// `helm upgrade` to `release`: both replicas replaced by pods of its image while the pool,
/// sampled meanwhile, stays Balanced.
async fn helm_upgrade_rolls_while_the_pool_stays_balanced(
    env: &Env,
    helm: &Helm,
    release: &Released,
) {
    let image = release.pinned(OPERATOR);
    let started = Instant::now();
    let upgrade = vec![
        "upgrade".to_owned(),
        RELEASE.to_owned(),
        release.chart(),
        format!("--version={}", release.version),
        "--plain-http".to_owned(),
        // The user's values on the new chart's defaults: `--reuse-values` would keep the first
        // chart's defaults too, its image digest among them, and roll nothing.
        "--reset-then-reuse-values".to_owned(),
        "--wait".to_owned(),
        "--timeout=3m".to_owned(),
    ];
    let rolling = AtomicBool::new(true);
    let rolled = async {
        let helm = helm.clone();
        tokio::task::spawn_blocking(move || helm.ok(&upgrade))
            .await
            .expect("helm upgrade ran");
        let rolled = replicas::wait_ready(
            env,
            OPERATOR_NAMESPACE,
            "two replicas of the upgrade Ready",
            |pods| match pods.iter().find(|pod| running(pod) != Some(image.as_str())) {
                Some(pod) => Err(format!("{} runs {:?}", name(pod), running(pod))),
                None => Ok(()),
            },
        )
        .await;
        rolled.iter().for_each(|pod| assert_pulled(pod, &image));
        let leader = replicas::wait_one_leader(env, OPERATOR_NAMESPACE, &rolled).await;
        rolling.store(false, Ordering::Relaxed);
        leader
    };
    let phases = async {
        let mut seen = BTreeSet::new();
        while rolling.load(Ordering::Relaxed) {
            if let Some(pool) = env.pool_named(&env.example.pool_name()).await {
                seen.insert(
                    pool["status"]["phase"]
                        .as_str()
                        .unwrap_or("none")
                        .to_owned(),
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        seen
    };
    let (leader, phases) = tokio::join!(rolled, phases);
    eprintln!(
        "real-node-release: helm upgrade to {} to two new replicas Ready and {leader} leading: \
         {:.1} s; the pool meanwhile: {phases:?}",
        release.version,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        phases,
        BTreeSet::from(["Balanced".to_owned()]),
        "the pool's phases while the operator rolled"
    );
}

/// The image of the pod's (first) container.
fn running(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.containers.first()?.image.as_deref()
}

/// Uninstalled: the operator goes; the CRD and the pool stay. Helm deletes the RBAC with the
/// Deployment, not after its pods are gone, so a replica releasing its leader Lease on SIGTERM
/// may be refused: those refusals, and no other, are expected (the Lease then expires unused).
async fn helm_uninstall_leaves_the_crd_and_the_pool(env: &mut Env, helm: &Helm) {
    let forbidden = |requests: &[RequestRecord], lease_too: bool| -> Vec<String> {
        requests
            .iter()
            .filter(|r| r.status == 403 && (lease_too || !r.path.contains("/leases/")))
            .map(RequestRecord::describe)
            .collect()
    };
    if let Some(requests) = env.operator_requests_since(0).await {
        assert_eq!(
            forbidden(&requests, true),
            Vec::<String>::new(),
            "refused before the uninstall"
        );
    }
    let mark = env.request_mark().await;
    helm.ok(&["uninstall", RELEASE, "--wait", "--timeout=3m"]);
    eventually_within(
        "the operator's pods gone",
        Duration::from_secs(120),
        || async {
            match replicas::operator_pods(env, OPERATOR_NAMESPACE).await {
                pods if pods.is_empty() => Ok(()),
                pods => Err(format!("{:?}", pods.iter().map(name).collect::<Vec<_>>())),
            }
        },
    )
    .await;
    if let Some(requests) = env.operator_requests_since(mark).await {
        assert_eq!(
            forbidden(&requests, false),
            Vec::<String>::new(),
            "refused during the uninstall"
        );
    }
    env.expect_refusals_so_far().await;
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    assert!(
        crds.get_opt("swarmpools.swarm.io")
            .await
            .expect("GET the CRD")
            .is_some(),
        "helm uninstall deleted the CRD"
    );
    assert!(
        env.pool_named(&env.example.pool_name()).await.is_some(),
        "helm uninstall deleted the pool"
    );
    env.kubectl
        .ok(&[
            "-n",
            OPERATOR_NAMESPACE,
            "delete",
            "lease",
            LEASE,
            "--ignore-not-found",
        ])
        .await;
}

/// `deploy/` through a user's overlay whose image `kustomize edit set image` pins to
/// `release`'s operator digest: both replicas run the pulled image and the leader takes the
/// pool the uninstall left (a worker more, Balanced); then the install is removed.
async fn kustomize_pins_the_released_digest(env: &Env, kustomize: &Path, release: &Released) {
    let image = release.pinned(OPERATOR);
    let started = Instant::now();
    let install = overlay::install_with_image_set_by(env, kustomize, "deploy", &image).await;
    let pods =
        replicas::wait_ready(env, &install.namespace, "both replicas Ready", |_| Ok(())).await;
    pods.iter().for_each(|pod| assert_pulled(pod, &image));
    replicas::wait_one_leader(env, &install.namespace, &pods).await;
    let sts = env.example.statefulset_name();
    scale(env, 3).await;
    let settled = wait_for(
        env,
        "Balanced over 3 workers under the kustomize install",
        |o| balanced(o, 3, &sts),
    )
    .await;
    assert_invariants(env, &settled).await;
    eprintln!(
        "real-node-release: deploy/ with kustomize edit set image {image} to Balanced over 3: \
         {:.1} s",
        started.elapsed().as_secs_f64()
    );
    install.remove().await;
}

/// Uninstalls the release if the scenario fails before it does, so no operator in the cluster
/// outlives it.
struct Uninstall<'a>(&'a Helm);

impl Drop for Uninstall<'_> {
    fn drop(&mut self) {
        let _ = self
            .0
            .run(&["uninstall", RELEASE, "--ignore-not-found", "--wait"]);
    }
}
