//! The operator installed with Helm (`charts/swarm-operator`) as a user installs it: `helm
//! install` with the image built for this run and the pods placed on the real node; the leader,
//! in the cluster, balances the example pool, and `helm test` (the chart's check pod) passes; a
//! `helm upgrade` that changes a value rolls the operator's pods while the pool stays Balanced
//! and no job runs twice; and `helm uninstall` removes the operator but leaves the CRD
//! (`crds.keep`) and the pools, as users expect of CRDs.
//!
//! It needs helm (`SWARM_HELM`, which `scripts/test.sh` sets from `scripts/install-helm.sh`)
//! and skips with a note without it, as without the image.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use serde_json::json;

use super::overlay::REAL_NODE;
use super::replicas::{self, LEASE, name};
use crate::harness::observe::{assert_invariants, balanced, wait_balanced, wait_for};
use crate::harness::poll::eventually_within;
use crate::harness::real_cluster::OPERATOR_NAMESPACE;
use crate::harness::sim_inspect::RequestRecord;
use crate::harness::{Env, OPERATOR_IMAGE_ENV, repo_path, scenario};
use crate::scenarios::scale;

const RELEASE: &str = "swarm-operator";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_upgrades_and_uninstalls_the_operator_leaving_the_crd_and_the_pools() {
    let Some(helm) = std::env::var_os("SWARM_HELM").filter(|p| !p.is_empty()) else {
        eprintln!(
            "note: real-node-helm skipped: SWARM_HELM is unset (scripts/install-helm.sh builds helm)"
        );
        return;
    };
    scenario!("real-node-helm")
        .image(OPERATOR_IMAGE_ENV)
        .run(async |env| {
            let kubeconfig = env
                .real_cluster_dir()
                .expect("the real node's cluster is one of scripts/real-cluster.sh")
                .join("kubeconfig");
            let helm = Helm {
                binary: PathBuf::from(helm),
                kubeconfig,
            };
            // The harness applied deploy/rbac for an operator of its own (none runs here), and
            // the kustomize installs before this one left their cluster-scoped objects: Helm
            // adopts no object it did not create, so they go first.
            env.kubectl
                .ok(&[
                    "delete",
                    "-k",
                    "deploy/rbac",
                    "--ignore-not-found",
                    "--wait",
                ])
                .await;
            let _uninstall = Uninstall(&helm);
            let pods = helm_install(env, &helm).await;
            env.apply_examples().await;
            let settled = wait_balanced(env, env.example.replicas()).await;
            assert_invariants(env, &settled).await;
            helm_test_passes(&helm);
            helm_upgrade_rolls_while_the_pool_stays_balanced(env, &helm, &pods).await;

            // The new leader works: it takes a scale.
            let sts = env.example.statefulset_name();
            scale(env, 3).await;
            let settled = wait_for(env, "Balanced over 3 workers after the upgrade", |o| {
                balanced(o, 3, &sts)
            })
            .await;
            assert_invariants(env, &settled).await;
            let stats = env.handoff_stats();
            assert_eq!(stats.duplicate_job_seconds, 0.0, "{stats:?}");
            env.assert_exclusive();
            helm_uninstall_leaves_the_crd_and_the_pool(env, &helm).await;
        })
        .await;
}

/// `helm install` with the image built for this run and the pods on the real node, until both
/// replicas are Ready and one leads; returns the replicas' pods.
async fn helm_install(env: &Env, helm: &Helm) -> Vec<Pod> {
    let image = env.image(OPERATOR_IMAGE_ENV);
    let (repository, tag) = image.rsplit_once(':').unwrap_or((image, "latest"));
    let placement = [
        "--set-json".to_owned(),
        json!({"nodeSelector": {REAL_NODE: "true"}}).to_string(),
        "--set-json".to_owned(),
        json!({"tolerations": [{"key": REAL_NODE, "operator": "Exists", "effect": "NoSchedule"}]})
            .to_string(),
    ];
    let mut install = vec![
        "install".to_owned(),
        RELEASE.to_owned(),
        chart(),
        "--create-namespace".to_owned(),
        // The CRD is in the cluster already (the harness applied crds/): the release takes it
        // over, as the chart's README tells a user who applied it by hand.
        "--take-ownership".to_owned(),
        format!("--set=image.repository={repository}"),
        format!("--set=image.tag={tag}"),
        "--wait".to_owned(),
        "--timeout=3m".to_owned(),
    ];
    install.extend(placement.iter().cloned());
    let started = Instant::now();
    helm.ok(&install);
    let pods =
        replicas::wait_ready(env, OPERATOR_NAMESPACE, "both replicas Ready", |_| Ok(())).await;
    let leader = replicas::wait_one_leader(env, OPERATOR_NAMESPACE, &pods).await;
    eprintln!(
        "real-node-helm: helm install to both replicas Ready and {leader} leading: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    pods
}

/// `helm test`: the chart's hook pod, on the real node, finds the CRD served, the replicas Ready
/// and a Ready one holding the Lease.
fn helm_test_passes(helm: &Helm) {
    let started = Instant::now();
    let out = helm.ok(&["test".to_owned(), RELEASE.to_owned()]);
    assert!(
        out.contains("swarm-operator-test") && out.contains("Succeeded"),
        "helm test ran the check pod and it succeeded: {out}"
    );
    eprintln!(
        "real-node-helm: helm test passed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// An upgrade that changes a value of the pod template: the Deployment rolls both replicas
/// (`pods` before it) while the pool, sampled meanwhile, stays Balanced.
async fn helm_upgrade_rolls_while_the_pool_stays_balanced(env: &Env, helm: &Helm, pods: &[Pod]) {
    let before: Vec<String> = pods.iter().map(name).collect();
    let started = Instant::now();
    let upgrade = vec![
        "upgrade".to_owned(),
        RELEASE.to_owned(),
        chart(),
        "--reuse-values".to_owned(),
        "--set=logLevel=debug".to_owned(),
        "--wait".to_owned(),
        "--timeout=3m".to_owned(),
    ];
    // The pool's phase is sampled while the operator rolls.
    let rolling = AtomicBool::new(true);
    let rolled = async {
        let helm = helm.clone();
        tokio::task::spawn_blocking(move || helm.ok(&upgrade))
            .await
            .expect("helm upgrade ran");
        let rolled =
            replicas::wait_ready(env, OPERATOR_NAMESPACE, "two new replicas Ready", |pods| {
                match pods
                    .iter()
                    .find(|pod| before.contains(&name(pod)) || !logs_debug(pod))
                {
                    Some(pod) => Err(format!("{} is from before the upgrade", name(pod))),
                    None => Ok(()),
                }
            })
            .await;
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
        "real-node-helm: helm upgrade to two new replicas Ready and {leader} leading: {:.1} s; \
         the pool meanwhile: {phases:?}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        phases,
        BTreeSet::from(["Balanced".to_owned()]),
        "the pool's phases while the operator rolled"
    );
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
    helm.ok(&[
        "uninstall".to_owned(),
        RELEASE.to_owned(),
        "--wait".to_owned(),
        "--timeout=3m".to_owned(),
    ]);
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

/// Whether the operator's container in `pod` logs at debug (the upgrade's value).
fn logs_debug(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.containers.first())
        .and_then(|c| c.env.as_ref())
        .is_some_and(|env| {
            env.iter()
                .any(|var| var.name == "RUST_LOG" && var.value.as_deref() == Some("debug"))
        })
}

/// The chart's directory.
fn chart() -> String {
    repo_path("charts/swarm-operator")
        .to_str()
        .expect("UTF-8 repository path")
        .to_owned()
}

/// helm against the scenario's cluster, in the operator's namespace.
#[derive(Clone)]
struct Helm {
    binary: PathBuf,
    kubeconfig: PathBuf,
}

impl Helm {
    /// Runs `helm <args>`, which must succeed; returns its stdout.
    fn ok(&self, args: &[String]) -> String {
        let output = Command::new(&self.binary)
            .args(args)
            .arg(format!("--namespace={OPERATOR_NAMESPACE}"))
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .env("HELM_CACHE_HOME", scratch(&self.kubeconfig, "helm-cache"))
            .env("HELM_CONFIG_HOME", scratch(&self.kubeconfig, "helm-config"))
            .env("HELM_DATA_HOME", scratch(&self.kubeconfig, "helm-data"))
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", self.binary.display()));
        assert!(
            output.status.success(),
            "helm {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

/// helm's own directories, beside the cluster's kubeconfig rather than in the home directory.
fn scratch(kubeconfig: &Path, name: &str) -> PathBuf {
    kubeconfig.with_file_name(name)
}

/// Uninstalls the release if the scenario fails before it does, so no operator in the cluster
/// outlives it.
struct Uninstall<'a>(&'a Helm);

impl Drop for Uninstall<'_> {
    fn drop(&mut self) {
        let _ = Command::new(&self.0.binary)
            .args(["uninstall", RELEASE, "--ignore-not-found", "--wait"])
            .arg(format!("--namespace={OPERATOR_NAMESPACE}"))
            .arg(format!("--kubeconfig={}", self.0.kubeconfig.display()))
            .output();
    }
}
